"""The JIT's float32 elementary functions: Ember compiled vs NumPy, PyTorch eager and
torch.compile (Inductor), over 4M floats, one thread count for every library.

    python benchmarks/vecmath.py [--threads 1|2] [--runs 25] [--quick]

Rows: the chain ((a*b+1).tanh() * a.sigmoid()).relu(), then each function alone.
Median of --runs timed runs (>= 20) after warm-up and compilation; milliseconds per
call; the last columns are Ember compiled's speed-up over each. Inputs: standard normal
times 3 (log, log1p, pow: their absolute values; pow: a ** b with b in [-3, 3]).
"""
import _harness

args = _harness.setup(__doc__.splitlines()[0])

import numpy as np  # noqa: E402

import ember  # noqa: E402

torch = _harness.try_torch()
N = 1 << 18 if args.quick else 1 << 22
RUNS = 5 if args.quick else args.runs
ember.set_num_threads(args.threads)
_harness.print_env(args.threads)

rng = np.random.default_rng(0)
A = (rng.standard_normal(N) * 3).astype(np.float32)
B = (rng.standard_normal(N) * 3).astype(np.float32)
E = rng.uniform(-3, 3, N).astype(np.float32)

# name -> (function of tensors (ember and torch alike), NumPy version, inputs)
CASES = {
    "tanh chain": (lambda a, b: ((a * b + 1).tanh() * a.sigmoid()).relu(),
                   lambda a, b: np.maximum(np.tanh(a * b + 1) / (1 + np.exp(-a)), 0),
                   (A, B)),
    "exp": (lambda a: a.exp(), np.exp, (A,)),
    "expm1": (lambda a: a.expm1(), np.expm1, (A,)),
    "log": (lambda a: a.log(), np.log, (np.abs(A),)),
    "log1p": (lambda a: a.log1p(), np.log1p, (np.abs(A),)),
    "log2": (lambda a: a.log2(), np.log2, (np.abs(A),)),
    "tanh": (lambda a: a.tanh(), np.tanh, (A,)),
    "sigmoid": (lambda a: a.sigmoid(), lambda a: 1 / (1 + np.exp(-a)), (A,)),
    "erf": (lambda a: a.erf(), None, (A,)),
    "sin": (lambda a: a.sin(), np.sin, (A,)),
    "cos": (lambda a: a.cos(), np.cos, (A,)),
    "pow": (lambda a, b: a.pow(b), np.power, (np.abs(A), E)),
}


def ms(s):
    return "-" if s is None else f"{s * 1e3:8.3f}"


print(f"# {N:,} float32 elements; median of {RUNS} runs; milliseconds per call")
print(f"{'case':12s} {'ember':>8s} {'numpy':>8s} {'torch':>8s} {'t.compile':>9s}   "
      f"{'vs numpy':>8s} {'vs torch':>8s} {'vs t.comp':>9s}")
for name, (fn, np_fn, inputs) in CASES.items():
    et = [ember.from_numpy(x.copy()) for x in inputs]
    cf = ember.compile(fn, backend="llvm", fullgraph=True)
    t_ember = _harness.median_time(lambda: cf(*et), RUNS)
    t_np = None if np_fn is None else _harness.median_time(lambda: np_fn(*inputs), RUNS)
    t_torch = t_tc = None
    if torch is not None:
        tt = [torch.from_numpy(x.copy()) for x in inputs]
        t_torch = _harness.median_time(lambda: fn(*tt), RUNS)
        tc = torch.compile(fn, fullgraph=True)
        t_tc = _harness.median_time(lambda: tc(*tt), RUNS)
    print(f"{name:12s} {ms(t_ember)} {ms(t_np)} {ms(t_torch)} {ms(t_tc):>9s}   "
          f"{_harness.fmt_ratio(t_np, t_ember):>8s} {_harness.fmt_ratio(t_torch, t_ember):>8s} "
          f"{_harness.fmt_ratio(t_tc, t_ember):>9s}", flush=True)
