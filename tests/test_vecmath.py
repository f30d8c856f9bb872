"""The JIT's float32 elementary functions (csrc/jit/vecmath*.c) against float64.

Each function, compiled by the LLVM backend, runs over ~10^7 float32 points spread over
the whole range (a strided sweep of all bit patterns: every sign and exponent,
subnormals included) plus special values; its maximum error in ulps must stay within
the bound (exp and log 2, the others 5) and its special values (inf, NaN, +-0) must be
libm's bit for bit. The same runs again with EMBER_LLVM_FEATURES forcing SSE4.2
(4-lane vectors, no FMA). `make accuracy` sweeps all 2^32 patterns.
"""
import os
import subprocess
import sys

import numpy as np
import pytest

import ember
from ember.compiler import vecmath_accuracy as va

_NARROW = "+sse2,+sse3,+ssse3,+sse4.1,+sse4.2,+popcnt"


@pytest.mark.parametrize("name", va.FUNCTIONS)
def test_max_ulp_over_the_float_range(name):
    err, specials_ok, points = va.check(name)
    assert points >= 10_000_000
    assert specials_ok, f"{name}: a special value differs from libm's"
    assert err <= va.BOUNDS[name], f"{name}: {err:.3f} ulp"


_VECTOR = {"exp": lambda t: t.exp(), "expm1": lambda t: t.expm1(),
           "log": lambda t: t.log(), "log1p": lambda t: t.log1p(),
           "tanh": lambda t: t.tanh(), "sigmoid": lambda t: t.sigmoid(),
           "erf": lambda t: t.erf(), "sin": lambda t: t.sin(), "cos": lambda t: t.cos()}


@pytest.mark.parametrize("name", list(_VECTOR) + ["pow"])
def test_float32_kernels_call_no_libm(name):
    """The functions are IR, not calls of the C library (which the vectoriser cannot
    widen)."""
    fn = (lambda a, b: a.pow(b)) if name == "pow" else _VECTOR[name]
    assert va.calls_libm(fn, 2 if name == "pow" else 1) == []


def test_float32_kernels_are_vector_code():
    from ember.aot import decompose, trace_joint
    from ember.compiler.backend import CompiledLLVMGraph
    x = ember.from_numpy(np.ones(1 << 16, np.float32))
    fn = lambda t: ((t * t + 1).tanh() * t.sigmoid()).relu() + t.log1p() + t.sin()  # noqa
    g = CompiledLLVMGraph(decompose(trace_joint(fn, [x]).graph), "vec")
    assert "x float>" in g.module.optimized_ir


def test_float64_keeps_libm():
    from ember.aot import decompose, trace_joint
    from ember.compiler.backend import CompiledLLVMGraph
    x = np.linspace(-50, 50, 1001)
    fn = lambda t: t.tanh() + t.sin() + t.abs().log()      # noqa: E731
    g = CompiledLLVMGraph(decompose(trace_joint(fn, [ember.from_numpy(x)]).graph), "f64")
    assert "@tanh(" in g.module.optimized_ir
    got = g(ember.from_numpy(x))[0].numpy()
    with np.errstate(divide="ignore"):
        np.testing.assert_allclose(got, np.tanh(x) + np.sin(x) + np.log(np.abs(x)),
                                   rtol=1e-15, atol=1e-15)


def test_tanh_chain_matches_eager():
    """The benchmark's chain, compiled, equals eager within the functions' ulps."""
    rng = np.random.default_rng(0)
    a, b = (ember.from_numpy(rng.standard_normal(100_000).astype(np.float32) * 4)
            for _ in range(2))
    fn = lambda a, b: ((a * b + 1).tanh() * a.sigmoid()).relu()   # noqa: E731
    got = va._compiled(fn)(a, b).numpy()
    np.testing.assert_allclose(got, fn(a, b).numpy(), rtol=3e-6, atol=1e-30)


@pytest.mark.skipif(os.environ.get("EMBER_LLVM_FEATURES") == _NARROW,
                    reason="already running with the narrow features")
def test_same_bounds_with_sse_vectors():
    """The accuracy tests again, JIT-compiled for SSE4.2 (4 lanes, no FMA)."""
    env = dict(os.environ, EMBER_LLVM_FEATURES=_NARROW)
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                        f"{__file__}::test_max_ulp_over_the_float_range",
                        f"{__file__}::test_float32_kernels_call_no_libm",
                        f"{__file__}::test_sin_cos_short_path_alone_below_2_25"],
                       env=env, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]


def _ir(fn, *arrays):
    from ember.aot import decompose, trace_joint
    from ember.compiler.backend import CompiledLLVMGraph
    ts = [ember.from_numpy(a) for a in arrays]
    return CompiledLLVMGraph(decompose(trace_joint(fn, ts).graph), "trig").module.ir


@pytest.mark.parametrize("name", ["sin", "cos"])
def test_sin_cos_short_path_alone_below_2_25(name):
    """Arguments all below 2^25 (and NaN) never run the Payne-Hanek loop: the short
    path's own error, over the float range below 2^25."""
    x = va.sweep(421)
    x = np.concatenate([x[np.abs(x) < 2.0 ** 25], np.float32([np.nan, 0.0, -0.0]),
                        np.float32([2.0 ** 25]).view(np.uint32) - np.uint32(1)]
                       ).astype(np.float32)
    got = va._compiled(_VECTOR[name])(ember.from_numpy(x.copy())).numpy()
    err, exact = va.ulp_error(got, getattr(np, name)(x.astype(np.float64)))
    assert exact and err <= va.BOUNDS[name], f"{name}: {err:.3f} ulp"


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("where", [(0, 0), (5, 100), (32, 256), None])
def test_sin_cos_large_argument_anywhere_in_a_fused_kernel(where, threads):
    """One argument at or above 2^25 (or inf) anywhere in a 2-D fused kernel: its row
    runs again with the whole functions, on every thread's part."""
    rng = np.random.default_rng(1)
    a = (rng.standard_normal((33, 257)) * 100).astype(np.float32)
    b = rng.standard_normal((33, 257)).astype(np.float32)
    if where is not None:
        r, c = where
        a[r, c] = np.float32(3.0e30)
        a[r, (c + 7) % 257] = np.float32(2.0 ** 25)
        a[(r + 3) % 33, c] = np.float32(np.inf)
    fn = lambda a, b: a.sin() * b + a.cos()      # noqa: E731
    before = ember.get_num_threads()
    ember.set_num_threads(threads)
    try:
        got = va._compiled(fn)(ember.from_numpy(a), ember.from_numpy(b)).numpy()
    finally:
        ember.set_num_threads(before)
    a64 = a.astype(np.float64)
    with np.errstate(invalid="ignore"):
        want = np.sin(a64) * b + np.cos(a64)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_trig_runs_its_short_path_first_in_pointwise_kernels_only():
    x = np.ones(1 << 12, np.float32)
    assert "em_sinf_small" in _ir(lambda t: t.sin() + t.cos(), x)
    # a reduction folds as it goes: its loop runs once, with the whole function
    ir = _ir(lambda t: t.sin().sum(), x)
    assert "em_sinf_small" not in ir and "em_sinf" in ir
