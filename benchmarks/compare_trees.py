"""Two source trees of Ember side by side in one run: the per-call costs a refactor must
not change (per-op eager overhead on small tensors, the cache hit of a compiled call).

    python benchmarks/compare_trees.py --base /path/to/old/checkout --head . [--runs 25]

Each tree's `python/` is imported in its own worker process (both built in place); the
workers take turns, one timed run each per round, so load on the machine falls on both
alike. A run times a call `inner` times; each row prints the median seconds per call of
its runs (warm-up excluded) for both trees and their ratio, head / base. One thread,
float32, 16-element inputs, the same on both sides.

Medians move by several percent between runs on a loaded machine, so each row also
prints the instructions one call executes, counted by valgrind's callgrind (a worker per
tree under `valgrind --tool=callgrind`, instrumented only around `--calls` calls of each
case, after warm-up): a count that does not depend on load. --calls 0 skips it.
"""
import argparse
import glob
import json
import os
import statistics
import subprocess
import sys
import tempfile
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
    if len(sys.argv) > 2:       # under callgrind: count `inner` calls of each case
        import ctypes
        counter = ctypes.CDLL(sys.argv[2])
        for name, fn in cases.items():
            counter.em_cg_start()
            for _ in range(20):
                fn()
            counter.em_cg_zero()
            for _ in range(inner):
                fn()
            counter.em_cg_dump(name.encode())
            counter.em_cg_stop()
        sys.exit(0)
    for line in sys.stdin:
        name = line.strip()
        fn = cases[name]
        t0 = time.perf_counter()
        for _ in range(inner):
            fn()
        print(json.dumps([name, (time.perf_counter() - t0) / inner]), flush=True)
    ''')

# callgrind's client requests, for the worker (ctypes) to count only the calls it makes
CALLGRIND_HELPER = """
#include <valgrind/callgrind.h>
void em_cg_start(void) { CALLGRIND_START_INSTRUMENTATION; }
void em_cg_zero(void) { CALLGRIND_ZERO_STATS; }
void em_cg_dump(const char *name) { CALLGRIND_DUMP_STATS_AT(name); }
void em_cg_stop(void) { CALLGRIND_STOP_INSTRUMENTATION; }
"""

NAMES = ["add", "mul scalar", "sum", "relu", "exp", "matmul 4x4", "view", "index int",
         "index tensor", "cat", "ember.compile hit (eager backend)",
         "ember.compile hit (llvm, the example)"]


def _env(tree):
    # one hash seed: str hashes decide dict probes, hence instruction counts
    return dict(os.environ, PYTHONPATH=os.path.join(os.path.abspath(tree), "python"),
                OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", PYTHONHASHSEED="0")


def start(tree, inner):
    return subprocess.Popen([sys.executable, "-c", WORKER, str(inner)], env=_env(tree),
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)


DUMP = "desc: Trigger: Client Request: "       # a dump's header line, then its name


def instructions(tree, calls, tmp, tag):
    """{case: instructions per call} of tree's worker under callgrind."""
    helper = os.path.join(tmp, "cg_helper.so")
    if not os.path.exists(helper):
        with open(os.path.join(tmp, "cg_helper.c"), "w") as f:
            f.write(CALLGRIND_HELPER)
        subprocess.run(["cc", "-O1", "-shared", "-fPIC", "-o", helper,
                        os.path.join(tmp, "cg_helper.c")], check=True)
    out = os.path.join(tmp, tag)
    subprocess.run(["valgrind", "--tool=callgrind", "--instr-atstart=no",
                    f"--callgrind-out-file={out}.%p", os.path.realpath(sys.executable), "-c",
                    WORKER, str(calls), helper], env=_env(tree), check=True,
                   stdout=subprocess.DEVNULL, stderr=open(out + ".log", "w"))
    counts = {}
    for path in glob.glob(out + ".*.*"):        # one file per dump: <out>.<pid>.<n>
        name = total = None
        with open(path) as f:
            for line in f:
                if line.startswith(DUMP):
                    name = line[len(DUMP):].strip()
                elif line.startswith("summary:"):
                    total = int(line.split()[1])
        if name is not None and total is not None:
            counts[name] = total / calls
    return counts


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
    ap.add_argument("--calls", type=int, default=1000,
                    help="calls counted per case under callgrind (0: no counts)")
    a = ap.parse_args()
    counts = {}
    if a.calls:
        with tempfile.TemporaryDirectory() as tmp:
            counts = {k: instructions(tree, a.calls, tmp, k)
                      for k, tree in (("base", a.base), ("head", a.head))}
    procs = {"base": start(a.base, a.inner), "head": start(a.head, a.inner)}
    times = {k: {n: [] for n in NAMES} for k in procs}
    for _ in range(a.runs):
        for name in NAMES:
            for k, p in procs.items():
                times[k][name].append(ask(p, name))
    for p in procs.values():
        p.stdin.close()
        p.wait()
    print(f"median us per call over {a.runs} runs of {a.inner} calls, 1 thread, float32" +
          (f"; instructions per call (callgrind, {a.calls} calls)" if counts else ""))
    print(f"{'':40s} {'base':>9s} {'head':>9s} {'head/base':>10s}" +
          (f" {'base Ir':>9s} {'head Ir':>9s} {'head/base':>10s}" if counts else ""))
    for name in NAMES:
        b = statistics.median(times["base"][name]) * 1e6
        h = statistics.median(times["head"][name]) * 1e6
        row = f"{name:40s} {b:9.2f} {h:9.2f} {h / b:10.3f}"
        if counts:
            bi, hi = counts["base"].get(name), counts["head"].get(name)
            row += f" {bi:9.0f} {hi:9.0f} {hi / bi:10.3f}" if bi and hi else "  (no count)"
        print(row)


if __name__ == "__main__":
    main()
