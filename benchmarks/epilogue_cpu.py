"""GEMM epilogues measured in CPU time (for a loaded machine, where wall-clock medians
mostly measure the other processes): ember.compile with epilogues, the same without
(compiler/epilogue.py's `enabled` off while that twin compiles), and torch.compile,
side by side in one run, same weights, inputs, dtype (float32) and threads. Each figure
is the median over >= 20 interleaved runs of the process CPU time (all threads: at 2
threads it is the work done, not the latency) per call, after warm-up; the load average
is printed beside it. At more than one thread, torch's OpenMP workers keep spinning after
its call and their CPU time lands on the row after it (ember.compile): compare the two
ember rows with --no-torch there.

    python benchmarks/epilogue_cpu.py [--threads 1] [--runs 25] [--only mlp,gpt,linear]

Workloads: benchmarks/models.py's MLP and GPT (4 layers x 128, 8 x 128 tokens), inference
and training step, and the linear + bias + gelu kernel of benchmarks/kernels.py.
"""
import os
import statistics
import sys
import time

os.environ.setdefault("EMBER_GRAPH_CACHE", "0")     # each twin lowers its own plan
sys.argv = [sys.argv[0]] + sys.argv[1:]
import models as M  # noqa: E402  (benchmarks/models.py: pins threads, parses args)

import numpy as np  # noqa: E402

import ember  # noqa: E402
from ember.compiler import epilogue  # noqa: E402

args, torch, _harness = M.args, M.torch, M._harness


def cpu_medians(rows, runs, inner):
    times = {name: [] for name, _ in rows}
    for _ in range(3):
        for _, fn in rows:
            fn()
    for _ in range(runs):
        for name, fn in rows:
            t0 = time.process_time()
            for _ in range(inner):
                fn()
            times[name].append((time.process_time() - t0) / inner)
    return {k: statistics.median(v) for k, v in times.items()}


def compiled(lib, model, fused=True):
    if lib is ember:
        epilogue.enabled = fused
    return lib.compile(model)


def report(title, rows, runs, inner):
    load = _harness.load_average()
    t = cpu_medians(rows, runs, inner)
    base = t["ember.compile"]
    print(f"{title}  (load {load}, {args.threads} thread(s), CPU ms per call)")
    for name, _ in rows:
        print(f"  {name:<30}{t[name] * 1e3:10.3f}  {t[name] / base:6.2f}x")
    if "torch.compile" in t:
        print(f"  ember.compile: {t['torch.compile'] / base:.2f}x torch.compile's speed, "
              f"{t['ember.compile, no epilogues'] / base:.2f}x its own without epilogues\n")


def model_rows(name, kind):
    s = M.sizes(False)
    sd, title = M.sides(name, s)
    rows = []
    em, etwin, e_in, _, e_train, e_infer = sd["ember"]
    step = M.make_step(kind, e_train if kind == "training step" else e_infer)
    twin2 = M.build(ember, name, s, np.random.default_rng(0))[0]
    twin2.load_state_dict(em.state_dict())
    for mod in (etwin, twin2):
        mod.train(kind == "training step")
    fused = compiled(ember, etwin, True)
    step(fused, e_in, ember)
    plain = compiled(ember, twin2, False)
    step(plain, e_in, ember)
    epilogue.enabled = True
    vals = [M.value(step(c, e_in, ember)) for c in (fused, plain)]
    assert np.allclose(vals[0], vals[1], rtol=1e-4, atol=1e-5), title
    rows += [("ember.compile", lambda: step(fused, e_in, ember)),
             ("ember.compile, no epilogues", lambda: step(plain, e_in, ember))]
    if "torch" in sd:
        tm, ttwin, t_in, _, t_train, t_infer = sd["torch"]
        tm.train(kind == "training step")
        tstep = M.make_step(kind, t_train if kind == "training step" else t_infer)
        tc = torch.compile(tm)
        tstep(tc, t_in, torch)
        rows.append(("torch.compile", lambda: tstep(tc, t_in, torch)))
    return f"{title}, {kind}", rows


def linear_rows():
    g = np.random.default_rng(0)
    m, k, n = 1024, 256, 1024
    data = [g.standard_normal((m, k)).astype(np.float32),
            (g.standard_normal((n, k)) * k ** -0.5).astype(np.float32),
            (g.standard_normal(n) * 0.1).astype(np.float32)]
    e_in = [ember.from_numpy(a) for a in data]

    def f(lib):
        return lambda x, w, b: lib.nn.functional.gelu(lib.nn.functional.linear(x, w, b))
    fused = compiled(ember, f(ember), True)
    fused(*e_in)
    plain = compiled(ember, f(ember), False)
    plain(*e_in)
    epilogue.enabled = True
    np.testing.assert_allclose(fused(*e_in).numpy(), plain(*e_in).numpy(), rtol=1e-5,
                               atol=1e-5)
    rows = [("ember.compile", lambda: fused(*e_in)),
            ("ember.compile, no epilogues", lambda: plain(*e_in))]
    if torch is not None:
        t_in = [torch.from_numpy(a) for a in data]
        tc = torch.compile(f(torch))
        tc(*t_in)
        rows.append(("torch.compile", lambda: tc(*t_in)))
    return f"linear + bias + gelu {m}x{k} @ ({n}x{k})^T", rows


def main():
    _harness.print_env(args.threads, torch is not None)
    ember.set_num_threads(args.threads)
    only = [w.strip() for w in args.only.split(",") if w.strip()] or ["linear", "mlp", "gpt"]
    runs = args.runs
    if "linear" in only:
        report(*linear_rows(), runs, 20)
    for name in ("mlp", "gpt"):
        if name in only:
            for kind in ("inference", "training step"):
                title, rows = model_rows(name, kind)
                report(title, rows, runs, 5 if name == "mlp" else 1)


main()
