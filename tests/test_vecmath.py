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
           "erf": lambda t: t.erf(), "erfc": lambda t: t.erfc(), "sin": lambda t: t.sin(), "cos": lambda t: t.cos()}


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


@pytest.mark.parametrize("backward", [False, True])
def test_exact_gelu_and_its_backward_are_vector_code(backward):
    """Exact gelu is x/2 erfc(-x/sqrt 2) and its backward needs erfc and exp: in
    float32 all IR, so the kernels (forward, and the joint graph's with the backward)
    are vector code, not a libm call per element."""
    from ember.aot import decompose, trace_joint
    from ember.compiler.backend import CompiledLLVMGraph
    x = ember.from_numpy(np.linspace(-5, 5, 1 << 16, dtype=np.float32))
    x.requires_grad_(backward)
    joint = trace_joint(lambda t: ember.nn.functional.gelu(t), [x])
    g = CompiledLLVMGraph(decompose(joint.graph), "gelu")
    ir = g.module.optimized_ir
    assert [line for line in ir.splitlines() if line.startswith("declare") and
            "@llvm." not in line] == []
    assert "x float>" in ir and "em_erfcf" in g.module.ir
    if backward:
        assert "em_expf" in g.module.ir


def test_compiled_gelu_and_backward_match_eager():
    rng = np.random.default_rng(2)
    a = (rng.standard_normal(200_000) * 4).astype(np.float32)
    a[:6] = [0.0, -0.0, np.inf, -np.inf, -20.0, 20.0]
    f = ember.nn.functional.gelu
    x = ember.from_numpy(a.copy()).requires_grad_(True)
    xc = ember.from_numpy(a.copy()).requires_grad_(True)
    want, got = f(x), ember.compile(f, backend="llvm")(xc)
    want.sum().backward()
    got.sum().backward()
    for w, g in ((want.detach().numpy(), got.detach().numpy()),
                 (x.grad.numpy(), xc.grad.numpy())):
        assert np.array_equal(np.isnan(g), np.isnan(w))
        np.testing.assert_allclose(g, w, rtol=2e-6, atol=1e-37)


def test_float64_erfc_keeps_libm():
    from ember.aot import decompose, trace_joint
    from ember.compiler.backend import CompiledLLVMGraph
    x = np.linspace(-30, 30, 2001)
    g = CompiledLLVMGraph(decompose(trace_joint(lambda t: t.erfc(), [ember.from_numpy(x)])
                                    .graph), "f64")
    assert "@erfc(" in g.module.optimized_ir
    np.testing.assert_array_equal(g(ember.from_numpy(x))[0].numpy(),
                                  ember.from_numpy(x).erfc().numpy())


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


_AVX2 = _NARROW + ",+avx,+avx2,+fma,+f16c,+bmi,+bmi2"


def _host_has(feature):
    return f"+{feature}" in ember._C._jit_target()["features"]


@pytest.mark.parametrize("features", [
    pytest.param(_NARROW, id="sse"),
    pytest.param(_AVX2, id="avx2", marks=pytest.mark.skipif(
        not _host_has("avx512f") or not _host_has("avx2"),
        reason="the host's own width is AVX2 (or it has none)"))])
def test_same_bounds_with_narrower_vectors(features):
    """The accuracy tests again, JIT-compiled for SSE4.2 (4 lanes, no FMA) and, on an
    AVX-512 host, for AVX2 (8 lanes, FMA)."""
    if os.environ.get("EMBER_LLVM_FEATURES"):
        pytest.skip("already running with forced features")
    env = dict(os.environ, EMBER_LLVM_FEATURES=features)
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                        f"{__file__}::test_max_ulp_over_the_float_range",
                        f"{__file__}::test_float32_kernels_call_no_libm",
                        f"{__file__}::test_exact_gelu_and_its_backward_are_vector_code",
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


def _every_float(lo, hi):
    """Every float32 of [lo, hi] (both of one sign)."""
    a, b = sorted(np.abs(np.float32([lo, hi])).view(np.uint32))
    x = np.arange(a, b + 1, dtype=np.uint32).view(np.float32)
    return -x if lo < 0 else x


def test_exp_underflows_and_overflows_where_libm_does():
    """expf clamps x a little beyond its thresholds and lets the computed value round to 0
    or overflow to inf (no selects): on every float near both ends, 0 exactly where the
    exact exp is under half the smallest subnormal, inf exactly where it is over the
    largest float, and within 2 ulp of it in between."""
    x = np.concatenate([_every_float(-105.0, -103.0), _every_float(88.0, 90.0),
                        np.float32([-np.inf, np.inf, -1e30, 1e30])])
    y = ember.compile(lambda t: t.exp())(ember.from_numpy(x)).numpy()
    with np.errstate(over="ignore"):
        exact = np.exp(x.astype(np.float64))
    smallest = np.float64(np.float32(1e-45))
    assert np.array_equal(y == 0, exact < smallest / 2)
    assert np.array_equal(np.isinf(y), exact > np.float64(np.finfo(np.float32).max))
    ok = (y != 0) & np.isfinite(y)
    ulp = np.spacing(np.abs(exact[ok]).astype(np.float32)).astype(np.float64)
    assert np.max(np.abs(y[ok] - exact[ok]) / ulp) <= 2
