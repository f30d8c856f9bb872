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


def setup(description: str, default_threads: int = 1):
    """Parses --threads/--runs/--quick; returns args. Pins threads for all libraries."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--threads", type=int, default=default_threads)
    p.add_argument("--runs", type=int, default=25, help="timed runs per case (>= 20)")
    p.add_argument("--quick", action="store_true", help="fewer, smaller runs (smoke test)")
    args = p.parse_args()
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
        t0 = time.perf_counter()
        for _ in range(inner):
            fn()
        times.append((time.perf_counter() - t0) / inner)
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


def print_env(threads: int):
    import numpy as np
    from ember import _sysinfo
    blas = _sysinfo.blas()
    print(f"# {_sysinfo.cpu_name()}; {threads} thread(s) for every library; "
          f"Python {_sysinfo.python()}, NumPy {np.__version__}")
    print(f"# BLAS: {blas['name']} {blas['version']}, kernel {blas['kernel']}, "
          f"OPENBLAS_CORETYPE={blas['OPENBLAS_CORETYPE']}, "
          f"OPENBLAS_L2_SIZE={blas['OPENBLAS_L2_SIZE']}")
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
