"""Dtype promotion in compiled kernels: every compiled elementwise op computes in the dtype
eager computes in (PyTorch's promotion, which ember's meta rules give), for every pair of
dtypes in DTYPES and every way an operand can arrive (a tensor with dims, a 0-d tensor, a
Python number).

Each case runs the function eagerly and through the LLVM backend (trace, decompose,
lower, JIT) and compares: the same dtype and shape, integers and bools exactly, float64
at rtol 1e-12, float32 at a few ulps, NaN, infinities and signed zeros exactly. An eager
error must be a compiled error of the same type. A case the backend cannot lower must
raise a LoweringError listed in NOT_LOWERED (the graph then runs eagerly, loudly);
nothing else may fail to lower.

The values are picked so that computing in a narrower dtype shows: 1/3 and 0.1 round
differently in float32, 2**24 + 1 is not a float32 and 2**53 + 1 not a float64, 1e200
overflows float32, 200 and 255 are not int8s, NaN and -0.0 take part in comparisons and
maximum.
"""
import itertools
import math
import os
import subprocess
import sys
import warnings

import numpy as np
import pytest

import ember
from ember import _C
from ember.aot import decompose, trace_joint
from ember.compiler.backend import CompiledLLVMGraph
from ember.compiler.jit import JitModule
from ember.compiler.loop_ir import Kernel, LoopIRError, Param, Stmt, verify
from ember.compiler.lowering import LoweringError

DTYPES = (ember.bool, ember.uint8, ember.int32, ember.int64, ember.float32, ember.float64)
NAMES = {d: repr(d).split(".")[-1] for d in DTYPES}
PAIRS = list(itertools.product(DTYPES, DTYPES))

_VALUES = {
    "bool": [True, False, True, False, True, True],
    "uint8": [3, 1, 200, 7, 255, 2],
    "int32": [-7, 3, 16777217, 100, -1, 2],
    "int64": [5, -3, 2 ** 53 + 1, -100, 1, 3],
    "float32": [1 / 3, -2.5, 0.1, 7.0, math.nan, -0.0],
    "float64": [1 / 3, -2.5, 1e200, 0.1, 3.0, -0.0],
}
# Python numbers of each category (PyTorch gives them the lowest priority)
_NUMBERS = {"bool": True, "int": 3, "float": 0.1}

# what the LLVM backend may refuse (the graph then runs under aot_eager, with a warning)
NOT_LOWERED = ("integer pow",)

F32 = dict(rtol=1e-6, atol=3e-45)        # a few ulps; two subnormal ulps
F64 = dict(rtol=1e-12, atol=0)


def tensor(dtype, form="dims"):
    """6 elements of dtype (`dims`), or the first as a 0-d tensor (`0d`)."""
    t = ember.tensor(_VALUES[NAMES[dtype]], dtype=dtype)
    return t if form == "dims" else t[0].clone()


def number(dtype):
    """A Python number of dtype's category."""
    return _NUMBERS["bool" if dtype is ember.bool else
                    "float" if dtype.is_floating_point else "int"]


def operand(dtype, form):
    return number(dtype) if form == "number" else tensor(dtype, form)


def compile_llvm(fn, tensors):
    joint = trace_joint(fn, list(tensors))
    return CompiledLLVMGraph(decompose(joint.graph), "dtypes")


def assert_same(got, want):
    assert got.dtype is want.dtype, f"dtype {got.dtype}, eager {want.dtype}"
    assert tuple(got.shape) == tuple(want.shape)
    o, w = got.numpy(), want.numpy()
    if not want.dtype.is_floating_point:
        np.testing.assert_array_equal(o, w)
        return
    np.testing.assert_allclose(o, w, equal_nan=True,
                               **(F64 if want.dtype is ember.float64 else F32))
    np.testing.assert_array_equal(np.isnan(o), np.isnan(w))
    special = np.isinf(w) | (w == 0)        # infinities and signed zeros exactly
    np.testing.assert_array_equal(o[special], w[special])
    np.testing.assert_array_equal(np.signbit(o[special]), np.signbit(w[special]))


def check(fn, args):
    """fn(*args) eagerly and compiled. args mixes tensors (the graph's inputs) and Python
    numbers (constants of the traced function). Returns 'ok', 'raises' (both raised
    the same type of error) or 'not lowered'."""
    slots = [i for i, a in enumerate(args) if isinstance(a, _C.Tensor)]
    tensors = [args[i] for i in slots]

    def call(*ts):
        full = list(args)
        for i, t in zip(slots, ts):
            full[i] = t
        return fn(*full)

    try:
        want = call(*tensors)
    except (RuntimeError, TypeError, NotImplementedError, ValueError) as e:
        with pytest.raises(type(e)):
            compile_llvm(call, tensors)(*tensors)
        return "raises"
    try:
        g = compile_llvm(call, tensors)
    except LoweringError as e:
        assert str(e) in NOT_LOWERED, f"could not lower: {e}"
        return "not lowered"
    assert_same(g(*tensors)[0], want)
    return "ok"


def check_all(fn, arglists):
    """check() for each argument list, the cases eager computes compiled together as one
    graph (one JIT module: much faster than one per case); returns their results."""
    results, batch = [None] * len(arglists), []
    for k, args in enumerate(arglists):
        try:
            fn(*args)
            batch.append(k)
        except (RuntimeError, TypeError, NotImplementedError, ValueError):
            results[k] = check(fn, args)
    slots = [[i for i, a in enumerate(arglists[k]) if isinstance(a, _C.Tensor)]
             for k in batch]
    tensors = [arglists[k][i] for k, sl in zip(batch, slots) for i in sl]

    def call_all(*ts):
        it, outs = iter(ts), []
        for k, sl in zip(batch, slots):
            full = list(arglists[k])
            for i in sl:
                full[i] = next(it)
            outs.append(fn(*full))
        return tuple(outs)

    try:
        g = compile_llvm(call_all, tensors)
    except LoweringError:                  # find the cases that cannot be lowered
        for k in batch:
            results[k] = check(fn, arglists[k])
        return results
    for k, got in zip(batch, g(*tensors)):
        assert_same(got, fn(*arglists[k]))
        results[k] = "ok"
    return results


def pairs_for(forms):
    """The dtype pairs worth running: all of them, except that a Python number has only
    its category (bool, int, float), so one dtype of each stands for it."""
    one_per_category = (ember.bool, ember.int64, ember.float64)
    return [(da, db) for da, db in PAIRS
            if (forms[0] != "number" or da in one_per_category) and
            (forms[1] != "number" or db in one_per_category)]


def run_pairs(fn, forms, extra=()):
    """check() for every pair of dtypes (after `extra` leading arguments); at least some
    must compile."""
    fa, fb = forms
    results = check_all(fn, [[*extra, operand(da, fa), operand(db, fb)]
                             for da, db in pairs_for(forms)])
    assert "ok" in results
    return results


# ------------------------------------------------------------------ binary ops and prims

BINARY = {
    "add": lambda a, b: a + b,
    "add_alpha": lambda a, b: ember.add(a, b, alpha=2),
    "sub": lambda a, b: a - b,
    "sub_alpha": lambda a, b: ember.sub(a, b, alpha=3),
    "mul": lambda a, b: a * b,
    "div": lambda a, b: a / b,
    "div_trunc": lambda a, b: ember.div(a, b, rounding_mode="trunc"),
    "div_floor": lambda a, b: ember.div(a, b, rounding_mode="floor"),
    "floor_divide": lambda a, b: a // b,
    "remainder": lambda a, b: a % b,
    "pow": lambda a, b: a ** b,
    "maximum": lambda a, b: ember.maximum(a, b),
    "minimum": lambda a, b: ember.minimum(a, b),
    "eq": lambda a, b: a == b,
    "ne": lambda a, b: a != b,
    "lt": lambda a, b: a < b,
    "le": lambda a, b: a <= b,
    "gt": lambda a, b: a > b,
    "ge": lambda a, b: a >= b,
    "bitwise_and": lambda a, b: a & b,
    "bitwise_or": lambda a, b: a | b,
    "bitwise_xor": lambda a, b: a ^ b,
    "logical_and": lambda a, b: ember.logical_and(a, b),
    "logical_xor": lambda a, b: ember.logical_xor(a, b),
    # a chain: the intermediate's dtype is the first op's, then promotion again
    "chain": lambda a, b: (a * b + 1) / (b - 0.5),
    # in place: computed in the promoted dtype, then converted into self's
    "add_": lambda a, b: a.clone().add_(b),
    "mul_": lambda a, b: a.clone().mul_(b),
    "div_": lambda a, b: a.clone().div_(b),
}
# the operands' forms; a number comes first only through a Python operator
FORMS = [("dims", "dims"), ("dims", "0d"), ("0d", "dims"), ("0d", "0d"), ("dims", "number"),
         ("number", "dims"), ("0d", "number")]
_NO_NUMBER_FIRST = {"add_alpha", "sub_alpha", "div_trunc", "div_floor", "maximum", "minimum",
                    "add_", "mul_", "div_"}
_NO_NUMBERS = {"logical_and", "logical_xor"}          # PyTorch: tensors only
_IN_PLACE = {"add_", "mul_", "div_"}                 # self cannot broadcast
BINARY_CASES = [(name, f) for name in BINARY for f in FORMS
                if not (f[0] == "number" and name in _NO_NUMBER_FIRST) and
                not ("number" in f and name in _NO_NUMBERS) and
                not (f == ("0d", "dims") and name in _IN_PLACE)]


@pytest.mark.parametrize("name,forms", BINARY_CASES,
                         ids=[f"{n}-{a}-{b}" for n, (a, b) in BINARY_CASES])
def test_binary(name, forms):
    run_pairs(BINARY[name], forms)


# ------------------------------------------------------------------ selection and composites

_COND = [True, False, False, True, True, False]

SELECT = {
    # where(cond, a, b): a and b promote; cond stays bool
    "where": lambda c, a, b: ember.where(c, a, b),
    # clamp with tensor (or number) bounds, which take part in promotion
    "clamp": lambda c, a, b: ember.clamp(a, b, 150),
    "clamp_tensors": lambda c, a, b: ember.clamp(a, b, b + 100),
    "clamp_min": lambda c, a, b: ember.clamp(a, min=b),
    "clamp_max": lambda c, a, b: ember.clamp(a, max=b),
    "addcmul": lambda c, a, b: ember.addcmul(a, b, b, value=2),
    "addcmul_mixed": lambda c, a, b: ember.addcmul(a, a, b),
    "addcdiv": lambda c, a, b: ember.addcdiv(a, b, a, value=0.5),
    "lerp": lambda c, a, b: ember.lerp(a, b, 0.3),
    "lerp_big_weight": lambda c, a, b: ember.lerp(a, b, 0.75),
    "masked_fill": lambda c, a, b: ember.masked_fill(a, c, b),
}
_TENSORS_ONLY = {"addcmul", "addcmul_mixed", "addcdiv", "lerp", "lerp_big_weight"}
SELECT_CASES = [(name, f) for name in SELECT for f in FORMS
                if f[0] != "number" and not (name in _TENSORS_ONLY and "number" in f) and
                not (name == "masked_fill" and f[1] == "dims")]    # a 0-d value only


@pytest.mark.parametrize("name,forms", SELECT_CASES,
                         ids=[f"{n}-{a}-{b}" for n, (a, b) in SELECT_CASES])
def test_selection_and_composites(name, forms):
    run_pairs(SELECT[name], forms, extra=(ember.tensor(_COND),))


@pytest.mark.parametrize("forms", [("dims", "dims"), ("dims", "0d"), ("0d", "dims")])
def test_lerp_with_tensor_weight(forms):
    for dtype in (ember.float32, ember.float64):
        for wform in ("dims", "0d"):
            w = ember.tensor([0.25, 0.5, 0.75, 1.0, -0.5, 2.0], dtype=dtype)
            w = w if wform == "dims" else w[2].clone()
            assert check(lambda a, b, w: ember.lerp(a, b, w),
                         [tensor(dtype, forms[0]), tensor(dtype, forms[1]), w]) == "ok"


# ------------------------------------------------------------------ unary ops

UNARY = {
    "neg": lambda a: -a, "abs": lambda a: a.abs(), "reciprocal": lambda a: a.reciprocal(),
    "exp": lambda a: a.exp(), "log": lambda a: a.abs().log(),
    "sqrt": lambda a: a.abs().sqrt(), "sin": lambda a: a.sin(), "cos": lambda a: a.cos(),
    "tanh": lambda a: a.tanh(), "erf": lambda a: a.erf(), "expm1": lambda a: a.expm1(),
    "log1p": lambda a: a.abs().log1p(), "sigmoid": lambda a: a.sigmoid(),
    "rsqrt": lambda a: a.abs().rsqrt(), "exp2": lambda a: a.exp2(),
    "sign": lambda a: a.sign(), "floor": lambda a: a.floor(), "ceil": lambda a: a.ceil(),
    "round": lambda a: a.round(), "trunc": lambda a: a.trunc(), "frac": lambda a: a.frac(),
    "square": lambda a: a.square(), "relu": lambda a: a.relu(), "invert": lambda a: ~a,
    "isnan": lambda a: a.isnan(), "isinf": lambda a: a.isinf(),
    "isfinite": lambda a: a.isfinite(), "logical_not": lambda a: a.logical_not(),
    "pow_2": lambda a: a ** 2, "pow_half": lambda a: a.abs() ** 0.5,
    "pow_minus_1_5": lambda a: a.abs() ** -1.5, "rpow": lambda a: 2 ** a,
    "rpow_float": lambda a: 0.5 ** a, "nan_to_num": lambda a: a.nan_to_num(),
    "scaled": lambda a: a * 0.1 + True,
}


@pytest.mark.parametrize("name", list(UNARY))
def test_unary(name):
    results = check_all(UNARY[name], [[tensor(d, form)] for d in DTYPES
                                      for form in ("dims", "0d")])
    assert "ok" in results


# ------------------------------------------------------------------ conversions, reductions

CONVERT = {
    "to": lambda a, d: a.to(d),
    "to_and_back": lambda a, d: a.to(d).to(a.dtype),
    "sum": lambda a, d: a.sum(dtype=d),
    "sum_dim": lambda a, d: a.view(2, 3).sum(1, dtype=d),
    "sum_outer": lambda a, d: a.view(3, 2).sum(0, dtype=d),
    "mean": lambda a, d: a.mean(dtype=d),
    "prod": lambda a, d: a.prod(dtype=d),
    "cumsum": lambda a, d: a.cumsum(0, dtype=d),
    "amax_of_converted": lambda a, d: a.to(d).amax(),
    "add_converted": lambda a, d: a.to(d) + a,
    "full_like": lambda a, d: ember.full_like(a, 3, dtype=d) * a,
    "arange": lambda a, d: ember.arange(6, dtype=d) + a if d is not ember.bool else a,
}


@pytest.mark.parametrize("name", list(CONVERT))
def test_conversions_and_reductions_with_dtype(name):
    fn = CONVERT[name]
    results = check_all(lambda a, d: fn(a, d), [[tensor(da), db] for da, db in PAIRS])
    assert "ok" in results


def test_float_to_integer_conversions_are_eagers_out_of_range_too():
    """float -> uint8/int32/int64 as NumPy converts on x86 (truncation through int32 or
    int64, whose out-of-range value is the most negative), never LLVM's poison."""
    vals = [-2.5, 300.7, 200.5, 1e10, -1e10, 3e19, math.nan, math.inf, -0.0, 127.9, -129.2]
    for src in (ember.float32, ember.float64):
        x = ember.tensor(vals, dtype=src)
        for dst in (ember.bool, ember.uint8, ember.int32, ember.int64):
            assert check(lambda a, d=dst: a.to(d), [x]) == "ok"
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                want = x.numpy().astype(dst.numpy_dtype)
            got = compile_llvm(lambda a, d=dst: a.to(d), [x])(x)[0].numpy()
            np.testing.assert_array_equal(got, want)


# ------------------------------------------------------------------ the reported cases


def test_compiled_float64_over_float32_divides_in_float64():
    a = ember.tensor([1.0, 2.0], dtype=ember.float64)
    b = ember.tensor([3.0, 7.0], dtype=ember.float32)
    got = ember.compile(lambda a, b: a / b, backend="llvm")(a, b)
    assert got.dtype is ember.float64
    assert got.numpy().tolist() == [1.0 / 3.0, 2.0 / 7.0]


def test_mixed_dtype_forward_and_backward_through_ember_compile(monkeypatch):
    """float64, float32 and int32 leaves and a Python number argument, with gradients:
    the compiled forward and backward graphs compute in eager's dtypes."""
    monkeypatch.setattr(ember.compiler.config, "strict", True)
    ember.compiler.reset()

    def f(a, b, c, k):
        return ((a / b + c * k).clamp(min=b) ** 2 + (a < b)).sum()

    def leaves():
        return (ember.tensor([1.0, 2.5, -3.0, 0.1], dtype=ember.float64, requires_grad=True),
                ember.tensor([3.0, 0.7, 7.0, 0.3], dtype=ember.float32, requires_grad=True),
                ember.tensor([1, 2, 3, 16777217], dtype=ember.int32))
    a, b, c = leaves()
    want = f(a, b, c, 0.1)
    want.backward()
    a2, b2, c2 = leaves()
    got = ember.compile(f, fullgraph=True)(a2, b2, c2, 0.1)
    got.backward()
    assert_same(got.detach(), want.detach())
    assert_same(a2.grad, a.grad)
    assert_same(b2.grad, b.grad)
    ember.compiler.reset()


def test_true_division_is_not_multiplication_by_a_reciprocal():
    # 49 * (1 / 49) is below 1 in float64: trunc would give 0, the mean of 49 ones < 1
    a = ember.full((4,), 49.0, dtype=ember.float64)
    assert check(lambda x: ember.div(x, x, rounding_mode="trunc"), [a]) == "ok"
    assert compile_llvm(lambda x: x / x, [a])(a)[0].numpy().tolist() == [1.0] * 4
    ones = ember.ones(49, dtype=ember.float64)
    assert compile_llvm(lambda x: x.mean(), [ones])(ones)[0].item() == 1.0
    assert check(lambda x: x.var(), [ember.arange(49, dtype=ember.float64)]) == "ok"


def test_expf_covers_the_float_range():
    """exp in float32 is finite up to 88.72 and underflows gradually below -87.3."""
    x = np.concatenate([np.linspace(-104.5, -85.0, 4001), np.linspace(85.0, 88.8, 4001),
                        [88.72283, 88.7229, -103.97, -103.98]]).astype(np.float32)
    t = ember.from_numpy(x)
    got = compile_llvm(lambda t: t.exp(), [t])(t)[0].numpy()
    with np.errstate(over="ignore"):
        want = np.exp(x.astype(np.float64)).astype(np.float32)
    normal = want >= np.finfo(np.float32).tiny
    np.testing.assert_allclose(got[normal], want[normal], rtol=3e-7)
    # subnormal results: within an ulp of the subnormal grid
    np.testing.assert_allclose(got[~normal], want[~normal], rtol=0, atol=1.5 * 2.0 ** -149)
    assert np.isinf(got[x > 88.7229]).all() and np.isfinite(got[x <= 88.72283]).all()


# ------------------------------------------------------------------ the verifier and codegen


def test_verifier_rejects_operands_of_another_dtype():
    f32, f64, i32 = _C.float32, _C.float64, _C.int32

    def kernel(*stmts, out=f64):
        k = Kernel("k", (4,), 0, [Param(("in", 0), f32, 4), Param(("in", 1), f64, 4),
                                   Param(("buf", 0), out, 4)])
        k.stmts = list(stmts)
        return k

    from ember.compiler.loop_ir import Affine
    i = Affine((1,))
    load32 = Stmt("load", 0, f32, param=0, index=i)
    load64 = Stmt("load", 1, f64, param=1, index=i)
    good = kernel(load32, load64, Stmt("cast", 2, f64, (0,)), Stmt("div", 3, f64, (1, 2)),
                  Stmt("store", None, None, (3,), param=2, index=i))
    verify(good)
    bad = [
        # div in float64 of a float32 register
        kernel(load32, load64, Stmt("div", 2, f64, (1, 0)),
               Stmt("store", None, None, (2,), param=2, index=i)),
        # a compare whose operands differ
        kernel(load32, load64, Stmt("lt", 2, f64, (0, 1))),
        # a unary op of another dtype
        kernel(load32, Stmt("exp", 1, f64, (0,))),
        # select with a float condition, and with mixed values
        kernel(load32, load64, Stmt("select", 2, f64, (1, 1, 1))),
        kernel(load32, load64, Stmt("lt", 2, f64, (1, 1)), Stmt("select", 3, f64, (2, 0, 1))),
        # storing a float32 register into a float64 buffer
        kernel(load32, Stmt("store", None, None, (0,), param=2, index=i)),
        # integer ops on floats, float ops on integers
        kernel(load32, Stmt("xor", 1, f32, (0, 0))),
        kernel(load32, Stmt("cast", 1, i32, (0,)), Stmt("div", 2, i32, (1, 1))),
        kernel(Stmt("const", 0, _C.bool, value=1), Stmt("sub", 1, _C.bool, (0, 0))),
    ]
    for k in bad:
        with pytest.raises(LoopIRError):
            verify(k)


def test_codegen_converts_nothing_implicitly():
    """The JIT takes the loop IR's casts as the only conversions: an operand of another
    dtype is an error, not a silent conversion."""
    f32, f64 = _C.float32._code, _C.float64._code
    spec = ((4,), 0, (f32, f64, f64),
            (("load", 0, 0, (1,), 0), ("load", 1, 1, (1,), 0), ("div", 2, f64, 1, 0),
             ("store", 2, (1,), 0, 2)))
    with pytest.raises(ValueError, match="cast is missing"):
        JitModule((spec,), "implicit")
    fixed = ((4,), 0, (f32, f64, f64),
             (("load", 0, 0, (1,), 0), ("load", 1, 1, (1,), 0), ("cast", 2, f64, 0),
              ("div", 3, f64, 1, 2), ("store", 2, (1,), 0, 3)))
    JitModule((fixed,), "explicit")


def test_compiled_kernels_cast_once_per_register():
    a = ember.tensor(_VALUES["float64"], dtype=ember.float64)
    b = ember.tensor(_VALUES["float32"], dtype=ember.float32)
    g = compile_llvm(lambda a, b: a / b + a * b - (a < b).to(a.dtype) * b, [a, b])
    (k,) = g.lowered.kernels
    casts = [s for s in k.stmts if s.op == "cast"]
    assert len({s.args for s in casts}) == len(casts), str(k)


# ------------------------------------------------------------------ narrower vector units

_NARROW = "+sse2,+sse3,+ssse3,+sse4.1,+sse4.2,+popcnt"


@pytest.mark.skipif(os.environ.get("EMBER_LLVM_FEATURES") == _NARROW,
                    reason="already running with the narrow features")
def test_same_results_with_narrower_llvm_features():
    """A sample of the cases, JIT-compiled for SSE4.2 only (128-bit vectors, no FMA)."""
    env = dict(os.environ, EMBER_LLVM_FEATURES=_NARROW)
    tests = [f"{__file__}::test_binary[{n}-dims-dims]" for n in
             ("add", "sub", "div", "div_trunc", "pow", "maximum", "lt", "chain")]
    tests += [f"{__file__}::test_selection_and_composites[{n}-dims-0d]" for n in
              ("where", "clamp_tensors", "addcmul")]
    tests += [f"{__file__}::test_unary[{n}]" for n in ("exp", "sigmoid", "erf", "round")]
    tests += [f"{__file__}::test_conversions_and_reductions_with_dtype[{n}]"
              for n in ("to", "sum_dim", "sum_outer")]
    tests += [f"{__file__}::test_float_to_integer_conversions_are_eagers_out_of_range_too",
              f"{__file__}::test_expf_covers_the_float_range"]
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                        *tests], env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    features = subprocess.run(
        [sys.executable, "-c", "import ember; print(ember._C._jit_target()['features'])"],
        env=env, capture_output=True, text=True).stdout
    assert "avx" not in features
