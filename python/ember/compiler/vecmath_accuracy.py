"""Accuracy of the JIT's float32 elementary functions (csrc/jit/vecmath*.c).

Each function is compiled by the LLVM backend (the graph ember.compile(backend="llvm")
captures, traced and decomposed the same way; ember.compile itself does not capture
functions defined inside the ember package) and run over float32
points spread over the whole range -- a strided sweep of all 2^32 bit patterns (every
sign, exponent and mantissa pattern, subnormals included) -- plus special values;
results are compared with a float64 reference rounded once to float32. The error is
in ulps of float32 at the reference (subnormal ulps where the result is subnormal);
where the rounded reference is inf, NaN or 0 the result must be exactly that.

    python -m ember.compiler.vecmath_accuracy [--stride N] [--markdown]

--stride 1 is the exhaustive sweep (`make accuracy`); the tests use a stride giving
about 10^7 points. Special values are compared with NumPy's float32 functions (C
libm) bit for bit, signs of zero included.
"""
from __future__ import annotations

import argparse
import math
import sys
import time

import numpy as np

import ember

# max ulp allowed (the bounds: exp and log 2, the others 5)
BOUNDS = {"exp": 2.0, "log": 2.0, "expm1": 5.0, "log1p": 5.0, "log2": 5.0, "tanh": 5.0,
          "sigmoid": 5.0, "erf": 5.0, "erfc": 5.0, "sin": 5.0, "cos": 5.0, "pow": 5.0}


def _erf64(x):
    # eager float64 erf (C libm's erf)
    return ember.from_numpy(np.ascontiguousarray(x)).erf().numpy()


def _erfc64(x):
    # eager float64 erfc (C libm's erfc)
    return ember.from_numpy(np.ascontiguousarray(x)).erfc().numpy()


def _sigmoid64(x):
    # PyTorch's (and eager's) sigmoid is 1 / (1 + exp(-x)) in float32: 0 where exp(-x)
    # overflows (x < -88.72), not the subnormal tail of the function; so is compiled
    with np.errstate(over="ignore"):
        return np.where(x < -88.72283935546875, 0.0, 1.0 / (1.0 + np.exp(-x)))


# name -> (ember function, float64 reference, float32 reference for special values)
UNARY = {
    "exp": (lambda t: t.exp(), np.exp, np.exp),
    "expm1": (lambda t: t.expm1(), np.expm1, np.expm1),
    "log": (lambda t: t.log(), np.log, np.log),
    "log1p": (lambda t: t.log1p(), np.log1p, np.log1p),
    "log2": (lambda t: t.log2(), np.log2, np.log2),
    "tanh": (lambda t: t.tanh(), np.tanh, np.tanh),
    "sigmoid": (lambda t: t.sigmoid(), _sigmoid64,
                lambda x: _sigmoid64(x.astype(np.float64)).astype(np.float32)),
    "erf": (lambda t: t.erf(), _erf64,
            lambda x: _erf64(x.astype(np.float64)).astype(np.float32)),
    "erfc": (lambda t: t.erfc(), _erfc64,
             lambda x: _erfc64(x.astype(np.float64)).astype(np.float32)),
    "sin": (lambda t: t.sin(), np.sin, np.sin),
    "cos": (lambda t: t.cos(), np.cos, np.cos),
}
FUNCTIONS = list(UNARY) + ["pow"]

SPECIALS = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 1.0, -1.0, 2.0, 0.5,
                     1e-45, -1e-45, 1.1754942e-38, -1.1754942e-38, 1.17549435e-38,
                     3.4028235e38, -3.4028235e38, 88.72283, 88.72284, -87.33654,
                     -103.97208, -104.0, 1e-30, -1e-30, 9.1, -9.1, 1.5707964, 3.1415927,
                     -1.0000001, 0.99999994, 16777216.0, 1e10, 8388608.5,
                     0.47693628, -0.75, 10.0, 10.0546, -10.5, 26.5, -26.5], np.float32)


def sweep(stride, count=None):
    """float32 values of bit patterns 0, stride, 2*stride, ... (all of them: stride 1)."""
    n = (1 << 32) // stride if count is None else count
    bits = (np.arange(n, dtype=np.uint64) * np.uint64(stride)) & np.uint64(0xFFFFFFFF)
    return bits.astype(np.uint32).view(np.float32)


def ulp_error(got, ref64):
    """Max error in float32 ulps, and whether every result whose rounded reference is
    inf, NaN or 0 equals it exactly."""
    with np.errstate(over="ignore", invalid="ignore"):
        ref32 = ref64.astype(np.float32)
    exact = ~np.isfinite(ref32) | (ref32 == 0)
    nan_ok = np.isnan(ref32[exact]) == np.isnan(got[exact])
    val_ok = (got[exact] == ref32[exact]) | np.isnan(ref32[exact])
    # a reference rounding to 0 may be met by the smallest subnormal too (an ulp)
    tiny = (ref32[exact] == 0) & (np.abs(got[exact]) <= np.float32(1e-45))
    ok = bool(np.all(nan_ok & (val_ok | tiny)))
    f = ~exact
    if not f.any():
        return 0.0, ok
    spacing = np.spacing(np.abs(ref32[f])).astype(np.float64)
    err = np.abs(got[f].astype(np.float64) - ref64[f]) / spacing
    return float(np.max(err)), ok


def _same_bits(got, want):
    both_nan = np.isnan(got) & np.isnan(want)
    return both_nan | ((got == want) & (np.signbit(got) == np.signbit(want)))


class _Compiled:
    """fn compiled by the LLVM backend for inputs like `examples` (sizes are static:
    compiled again for new ones)."""

    def __init__(self, fn):
        self.fn = fn
        self.graphs = {}

    def __call__(self, *args):
        from ..aot import decompose, trace_joint
        from .backend import CompiledLLVMGraph
        key = tuple(tuple(a.shape) for a in args)
        if key not in self.graphs:
            joint = trace_joint(self.fn, list(args))
            self.graphs[key] = CompiledLLVMGraph(decompose(joint.graph), "vecmath")
        return self.graphs[key](*args)[0]


def _compiled(fn):
    return _Compiled(fn)


def calls_libm(fn, nargs=1):
    """Whether fn's float32 kernel calls a C math library function (is not vector
    code)."""
    from ..aot import decompose, trace_joint
    from .backend import CompiledLLVMGraph
    x = [ember.from_numpy(np.ones(4096, np.float32)) for _ in range(nargs)]
    g = CompiledLLVMGraph(decompose(trace_joint(fn, x).graph), "vecmath")
    ir = g.module.optimized_ir
    return [line for line in ir.splitlines() if line.startswith("declare") and
            "@llvm." not in line]


def check_unary(name, stride=421, chunk=1 << 22):
    """(max ulp, specials ok, points) for UNARY[name] over the sweep and SPECIALS."""
    fn, ref, ref32 = UNARY[name]
    c = _compiled(fn)
    worst, ok, points = 0.0, True, 0
    total = (1 << 32) // stride
    for start in range(0, total, chunk):
        n = min(chunk, total - start)
        bits = ((np.arange(start, start + n, dtype=np.uint64) * np.uint64(stride))
                & np.uint64(0xFFFFFFFF)).astype(np.uint32)
        x = bits.view(np.float32)
        got = c(ember.from_numpy(x)).numpy()
        with np.errstate(all="ignore"):
            e, o = ulp_error(got, ref(x.astype(np.float64)))
        worst, ok, points = max(worst, e), ok and o, points + n
    got = c(ember.from_numpy(SPECIALS.copy())).numpy()
    with np.errstate(all="ignore"):
        want = ref32(SPECIALS)
        e, o = ulp_error(got, ref(SPECIALS.astype(np.float64)))
    special = np.isnan(SPECIALS) | np.isinf(SPECIALS) | (SPECIALS == 0)
    ok = ok and o and bool(np.all(_same_bits(got[special], want[special])))
    return max(worst, e), ok, points + len(SPECIALS)


def pow_points(n, seed=0):
    """Pairs (x, y) for pow: swept x with y in [-40, 40], with integer y, and with y
    anywhere (mostly overflow/underflow), plus every pair of special values."""
    rng = np.random.default_rng(seed)
    m = n // 3
    x = sweep(max(1, (1 << 32) // m), m)
    xs = [np.abs(x), x, x]
    ys = [rng.uniform(-40, 40, m).astype(np.float32),
          rng.integers(-30, 31, m).astype(np.float32),
          rng.integers(0, 1 << 32, m, dtype=np.uint64).astype(np.uint32).view(np.float32)]
    # x near 1 with large y (where log's accuracy matters most)
    xs.append((1 + rng.uniform(-1e-3, 1e-3, m)).astype(np.float32))
    ys.append(rng.uniform(-8e4, 8e4, m).astype(np.float32))
    sp = np.concatenate([SPECIALS, np.float32([3.0, -3.0, -0.5, 0.25, -2.0, 1e-5])])
    gx, gy = np.meshgrid(sp, sp)
    xs.append(gx.ravel())
    ys.append(gy.ravel())
    return np.concatenate(xs), np.concatenate(ys), gx.size


def check_pow(n=10_000_000):
    x, y, nspecial = pow_points(n)
    c = _compiled(lambda a, b: a.pow(b))
    got = c(ember.from_numpy(x), ember.from_numpy(y)).numpy()
    with np.errstate(all="ignore"):
        e, ok = ulp_error(got, np.power(x.astype(np.float64), y.astype(np.float64)))
        want = np.power(x[-nspecial:], y[-nspecial:])
    special = ~np.isfinite(want) | (want == 0) | (x[-nspecial:] == 1) | (y[-nspecial:] == 0)
    ok = ok and bool(np.all(_same_bits(got[-nspecial:][special], want[special])))
    return e, ok, len(x)


def check(name, stride=421):
    if name == "pow":
        # pairs: 10^7 by default, at most 3 * 10^7 (memory) however small the stride
        return check_pow(min((1 << 32) // stride, 30_000_000))
    return check_unary(name, stride)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--stride", type=int, default=421)
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("functions", nargs="*", default=FUNCTIONS)
    args = ap.parse_args(argv)
    target = ember._C._jit_target()
    width = "avx512f" if "+avx512f" in target["features"] else (
        "avx2" if "+avx2" in target["features"] else "sse")
    failed = False
    rows = []
    for name in args.functions:
        t0 = time.perf_counter()
        e, ok, n = check(name, args.stride)
        bad = e > BOUNDS[name] or not ok
        failed |= bad
        rows.append((name, e, ok, n, time.perf_counter() - t0))
        if not args.markdown:
            print(f"{width:8s} {name:8s} max {e:6.3f} ulp (bound {BOUNDS[name]:.0f})  "
                  f"specials {'ok' if ok else 'WRONG'}  {n:,} points  "
                  f"{rows[-1][-1]:.1f} s{'  FAIL' if bad else ''}", flush=True)
    if args.markdown:
        for name, e, ok, n, _ in rows:
            print(f"| {name} | {width} | {e:.3f} | {BOUNDS[name]:.0f} | "
                  f"{'as libm' if ok else 'WRONG'} | {n:,} |")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
