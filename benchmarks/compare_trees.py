"""Two source trees of Ember side by side in one run: the per-call costs a refactor must
not change (per-op eager overhead on small tensors, the cache hit of a compiled call).

    python benchmarks/compare_trees.py --base /path/to/old/checkout --head . [--runs 25]

Each tree's `python/` is imported in its own worker process (both built in place); the
workers take turns, one timed run each per round, so load on the machine falls on both
alike. A run times a call `inner` times; each row prints the median seconds per call of
its runs (warm-up excluded) for both trees and their ratio, head / base. One thread,
float32, 16-element inputs, the same on both sides.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import textwrap

WORKER = textwrap.dedent(r'''
    import json, sys, time
    import numpy as np
    import ember
    ember.set_num_threads(1)
    rng = np.random.default_rng(0)

    def T(*s):
        return ember.from_numpy(rng.standard_normal(s).astype(np.float32))

    x, y, m, w = T(16), T(16), T(4, 4), T(4, 4)
    xi = ember.arange(16)

    def f(t):
        return t * 2 + 1

    def g(x, w, b):
        return (x @ w + b).relu().sum()

    cf = ember.compile(f, backend="eager")
    cg = ember.compile(g)
    gx, gw, gb = T(4, 3), T(3, 2), T(2)
    cases = {
        "add": lambda: x + y,
        "mul scalar": lambda: x * 2.0,
        "sum": lambda: x.sum(),
        "relu": lambda: x.relu(),
        "exp": lambda: x.exp(),
        "matmul 4x4": lambda: m @ w,
        "view": lambda: m.view(16),
        "index int": lambda: m[1],
        "index tensor": lambda: x[xi],
        "cat": lambda: ember.cat([x, y]),
        "ember.compile hit (eager backend)": lambda: cf(x),
        "ember.compile hit (llvm, the example)": lambda: cg(gx, gw, gb),
    }
    for fn in cases.values():
        for _ in range(200):
            fn()
    inner = int(sys.argv[1])
    for line in sys.stdin:
        name = line.strip()
        fn = cases[name]
        t0 = time.perf_counter()
        for _ in range(inner):
            fn()
        print(json.dumps([name, (time.perf_counter() - t0) / inner]), flush=True)
    ''')

NAMES = ["add", "mul scalar", "sum", "relu", "exp", "matmul 4x4", "view", "index int",
         "index tensor", "cat", "ember.compile hit (eager backend)",
         "ember.compile hit (llvm, the example)"]


def start(tree, inner):
    env = dict(os.environ, PYTHONPATH=os.path.join(os.path.abspath(tree), "python"),
               OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    return subprocess.Popen([sys.executable, "-c", WORKER, str(inner)], env=env,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)


def ask(proc, name):
    proc.stdin.write(name + "\n")
    proc.stdin.flush()
    got, secs = json.loads(proc.stdout.readline())
    assert got == name
    return secs


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", required=True)
    ap.add_argument("--head", default=".")
    ap.add_argument("--runs", type=int, default=25)
    ap.add_argument("--inner", type=int, default=2000)
    a = ap.parse_args()
    procs = {"base": start(a.base, a.inner), "head": start(a.head, a.inner)}
    times = {k: {n: [] for n in NAMES} for k in procs}
    for _ in range(a.runs):
        for name in NAMES:
            for k, p in procs.items():
                times[k][name].append(ask(p, name))
    for p in procs.values():
        p.stdin.close()
        p.wait()
    print(f"median us per call over {a.runs} runs of {a.inner} calls, 1 thread, float32")
    print(f"{'':40s} {'base':>9s} {'head':>9s} {'head/base':>10s}")
    for name in NAMES:
        b = statistics.median(times["base"][name]) * 1e6
        h = statistics.median(times["head"][name]) * 1e6
        print(f"{name:40s} {b:9.2f} {h:9.2f} {h / b:10.3f}")


if __name__ == "__main__":
    main()
