"""Shared benchmark plumbing: one thread count for every library, warm-up excluded,
the median of at least 20 timed runs, and a side-by-side table of ratios.

Import this module before numpy/torch: it pins the thread count of every library
through the environment (re-executing the script once if it has to).
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

_THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")

# The clock timed runs read: wall time, or with --cpu-time the process's CPU time (all its
# threads together), which a loaded (shared) machine disturbs less at one thread.
clock = time.perf_counter


def setup(description: str, default_threads: int = 1):
    """Parses --threads/--runs/--quick; returns args. Pins threads for all libraries."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--threads", type=int, default=default_threads)
    p.add_argument("--runs", type=int, default=25, help="timed runs per case (>= 20)")
    p.add_argument("--quick", action="store_true", help="fewer, smaller runs (smoke test)")
    p.add_argument("--only", default="", help="comma-separated workloads (where offered)")
    p.add_argument("--no-torch", action="store_true",
                   help="leave PyTorch out even when installed (where offered)")
    p.add_argument("--mode", default="default",
                   choices=("default", "reduce-overhead", "max-autotune"),
                   help="also time ember.compile in this mode, side by side with the "
                        "default mode (where offered)")
    p.add_argument("--cpu-time", action="store_true",
                   help="time runs in process CPU time (all threads summed) instead of wall "
                        "time: steadier on a loaded machine; compare like with like at 1 "
                        "thread")
    args = p.parse_args()
    global clock
    clock = time.process_time if args.cpu_time else time.perf_counter
    if args.runs < 20 and not args.quick:
        p.error("--runs must be at least 20")
    want = str(args.threads)
    if any(os.environ.get(v) != want for v in _THREAD_VARS):
        env = dict(os.environ, **{v: want for v in _THREAD_VARS})
        os.execve(sys.executable, [sys.executable] + sys.argv, env)
    return args


def median_time(fn, runs: int = 25, inner: int = 1, warmup: int = 3) -> float:
    """Median seconds per call over `runs` runs of `inner` calls, after warm-up."""
    for _ in range(warmup):
        for _ in range(inner):
            fn()
    times = []
    for _ in range(runs):
        t0 = clock()
        for _ in range(inner):
            fn()
        times.append((clock() - t0) / inner)
    return statistics.median(times)


def inner_for(fn, target_s: float = 0.002) -> int:
    """How many calls make one timed run last about target_s."""
    t0 = time.perf_counter()
    fn()
    dt = max(time.perf_counter() - t0, 1e-7)
    return max(1, min(100_000, int(target_s / dt)))


def fmt_us(seconds):
    return "-" if seconds is None else f"{seconds * 1e6:10.2f}"


def fmt_ratio(a, b):
    return "-" if a is None or b is None else f"{a / b:6.2f}x"


def print_env(threads: int, with_torch: bool = True):
    import numpy as np
    from ember import _sysinfo
    blas = _sysinfo.blas()
    print(f"# {_sysinfo.cpu_name()}; {threads} thread(s) for every library; "
          f"{'process CPU time' if clock is time.process_time else 'wall time'}; "
          f"Python {_sysinfo.python()}, NumPy {np.__version__}")
    print(f"# BLAS: {blas['name']} {blas['version']}, kernel {blas['kernel']}, "
          f"OPENBLAS_CORETYPE={blas['OPENBLAS_CORETYPE']}, "
          f"OPENBLAS_L2_SIZE={blas['OPENBLAS_L2_SIZE']}")
    if not with_torch:
        print("# PyTorch left out (--no-torch): its columns are empty")
        return
    try:
        import torch
        torch.set_num_threads(threads)
        print(f"# torch {torch.__version__}, torch threads {torch.get_num_threads()}")
    except ImportError:
        print("# torch not installed: PyTorch columns are empty")


def try_torch():
    try:
        import torch
        return torch
    except ImportError:
        return None


def interleaved_medians(rows, runs, inner=1, warmup=2):
    """Median seconds per call of each (name, fn) row. Runs take turns (row 1, row 2,
    ..., row 1, ...), so that a change in machine load affects every row alike."""
    for _, fn in rows:
        for _ in range(warmup * inner):
            fn()
    samples = {name: [] for name, _ in rows}
    for _ in range(runs):
        for name, fn in rows:
            samples[name].append(median_time(fn, 1, inner, warmup=0))
    return {name: statistics.median(s) for name, s in samples.items()}


def first_call(fn):
    """Seconds the first (compiling) call takes."""
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def load_average():
    """The 1-minute load average ("-" where the OS has none): the machine may be shared."""
    try:
        return f"{os.getloadavg()[0]:.2f}"
    except OSError:
        return "-"


def triad(n):
    """A STREAM triad a = b + 3 * c on n float32 elements from Ember's JIT, run in place
    on preallocated arrays, split across the thread pool in 64K-element chunks: the
    bandwidth ceiling kernels are measured against (12 bytes per element)."""
    import ember
    from ember import _C
    from ember.compiler.jit import JitModule
    f32 = ember.float32._code
    spec = ((n,), 0, (f32, f32, f32),
            (("load", 0, 1, (1,), 0), ("load", 1, 2, (1,), 0), ("const", 2, f32, 3.0),
             ("mul", 3, f32, 1, 2), ("add", 4, f32, 0, 3), ("store", 0, (1,), 0, 4)))
    module = JitModule((spec,), "triad")
    geo = ((n,), (1,))
    plan = ((geo, geo, geo), (), (("kernel", 0, (("in", 0), ("in", 1), ("in", 2)), n,
                                   n >= (1 << 16), None, 1 << 16),), ())
    graph = _C.CompiledGraph(module, module.addresses, plan)
    a, b, c = ember.zeros(n), ember.ones(n), ember.ones(n)
    return lambda: graph(a, b, c)


def verdict(ok):
    return "met" if ok else "MISSED"
