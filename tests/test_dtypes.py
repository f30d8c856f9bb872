"""dtypes: the default dtype and what follows it (factories, Python floats, tensor(), integer
inputs of float ops), conversions (.to, .float(), ...), the Python operators //, %, ~, &, |,
^, <<, >>, abs() with their reflected forms, and dtype-dependent values (nan_to_num), all
against PyTorch. Pairwise promotion itself is in test_promotion.py."""
import itertools
import math
import operator
import warnings

import numpy as np
import pytest

import ember

NAMES = ["bool", "uint8", "int8", "int16", "int32", "int64", "float16", "float32", "float64",
         "bfloat16"]
FLOATS = ["float16", "float32", "float64", "bfloat16"]


def E(name):
    return getattr(ember, name)


def name_of(dtype):
    return str(dtype).split(".")[-1]


def to_torch(torch, t):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if t.dtype is ember.bfloat16:        # torch.from_numpy has no bfloat16: its bits
            return torch.from_numpy(t.numpy().view(np.int16).copy()).view(torch.bfloat16)
        return torch.from_numpy(t.numpy().copy())


def same(torch, got, want, what=""):
    """ember result vs torch result: dtype, shape and values (NaN equal)."""
    assert name_of(got.dtype) == name_of(want.dtype), f"{what}: {got.dtype} != {want.dtype}"
    assert tuple(got.shape) == tuple(want.shape), what
    np.testing.assert_allclose(got.numpy().astype(np.float64),
                               want.to(torch.float64).numpy(), rtol=1e-3, atol=1e-5,
                               equal_nan=True, err_msg=what)


def run(fn):
    try:
        return fn(), None
    except Exception as e:  # noqa: BLE001 - compared with torch's
        return None, e


def parity(torch, fn_e, fn_t, what):
    got, err = run(fn_e)
    want, terr = run(fn_t)
    if err is not None or terr is not None:
        assert err is not None and terr is not None, \
            f"{what}: ember {err!r}, torch {terr!r}"
        assert type(err) is type(terr), f"{what}: ember {err!r}, torch {terr!r}"
        return
    same(torch, got, want, what)


@pytest.fixture
def default_dtype(torch):
    """Sets ember's and torch's default dtype together; restores float32."""
    def set_(name):
        ember.set_default_dtype(E(name))
        torch.set_default_dtype(getattr(torch, name))
    yield set_
    ember.set_default_dtype(ember.float32)
    torch.set_default_dtype(torch.float32)


# ---------------------------------------------------------------- the default dtype


def test_default_dtype_is_float32_and_only_floats_may_replace_it(torch):
    assert ember.get_default_dtype() is ember.float32
    for name in NAMES:
        if name in FLOATS:
            continue
        with pytest.raises(TypeError):
            torch.set_default_dtype(getattr(torch, name))
        with pytest.raises(TypeError, match="floating"):
            ember.set_default_dtype(E(name))
        assert ember.get_default_dtype() is ember.float32


_FOLLOWS_DEFAULT = {
    "zeros": lambda m: m.zeros(2, 3),
    "ones": lambda m: m.ones(2),
    "empty": lambda m: m.empty(4).zero_(),
    "full float": lambda m: m.full((2,), 1.5),
    "full int": lambda m: m.full((2,), 7),
    "full bool": lambda m: m.full((2,), True),
    "rand": lambda m: m.rand(3) * 0,
    "randn": lambda m: m.randn(3) * 0,
    "arange float": lambda m: m.arange(0.0, 2.0, 0.5),
    "arange int": lambda m: m.arange(3),
    "linspace": lambda m: m.linspace(0, 1, 5),
    "eye": lambda m: m.eye(3),
    "tensor float": lambda m: m.tensor([1.5, 2.0]),
    "tensor int": lambda m: m.tensor([1, 2]),
    "tensor mixed": lambda m: m.tensor([1, 2.5, True]),
    "tensor 0-d": lambda m: m.tensor(2.5),
    "as_tensor": lambda m: m.as_tensor([0.5]),
    "Tensor()": lambda m: m.Tensor([1, 2]),
    "int + float": lambda m: m.tensor([1, 2]) + 0.5,
    "float * int tensor": lambda m: 2.5 * m.tensor([1, 2]),
    "int / int": lambda m: m.tensor([1, 2]) / m.tensor([2, 2]),
    "bool + float": lambda m: m.tensor([True]) + 1.5,
    "sqrt(int)": lambda m: m.sqrt(m.tensor([4, 9])),
    "erf(int)": lambda m: m.erf(m.tensor([0, 1])),
    "sigmoid(bool)": lambda m: m.sigmoid(m.tensor([True, False])),
    "exp2(int8)": lambda m: m.exp2(m.tensor([1, 3], dtype=m.int8)),
    "float16 + float": lambda m: m.tensor([1.0], dtype=m.float16) + 2.5,
    "zeros_like(int)": lambda m: m.zeros_like(m.tensor([1, 2])),
    "full_like float fill": lambda m: m.full_like(m.tensor([1, 2]), 2.5),
    "new_zeros": lambda m: m.tensor([1, 2]).new_zeros(2),
    "mean": lambda m: m.tensor([1.0, 2.0]).mean(),
}


@pytest.mark.parametrize("default", FLOATS)
@pytest.mark.parametrize("case", sorted(_FOLLOWS_DEFAULT))
def test_factories_and_promotion_follow_the_default_dtype(torch, default_dtype, default,
                                                          case):
    default_dtype(default)
    fn = _FOLLOWS_DEFAULT[case]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        parity(torch, lambda: fn(ember), lambda: fn(torch), f"{case} (default {default})")


def test_numpy_arrays_keep_their_dtype_whatever_the_default(default_dtype):
    default_dtype("float16")
    assert ember.tensor(np.ones(2)).dtype is ember.float64
    assert ember.from_numpy(np.ones(2, dtype=np.float32)).dtype is ember.float32
    assert ember.as_tensor(np.arange(3)).dtype is ember.int64
    assert ember.tensor([1.0]).dtype is ember.float16


# ---------------------------------------------------------------- conversions


def _values(name):
    if name == "bool":
        return np.array([True, False, True])
    if name in FLOATS:
        return np.array([0.0, -1.75, 2.5, 100.25, -0.0], dtype=name)
    lo = 0 if name == "uint8" else -5
    return np.array([lo, 0, 7, 100, 1], dtype=name)


_METHODS = {"float": "float32", "double": "float64", "half": "float16",
            "bfloat16": "bfloat16", "long": "int64",
            "int": "int32", "short": "int16", "char": "int8", "byte": "uint8", "bool": "bool"}


@pytest.mark.parametrize("src", NAMES)
def test_conversions_match_torch(torch, src):
    x = ember.from_numpy(_values(src))
    tx = to_torch(torch, x)
    for dst in NAMES:
        if src in FLOATS and dst == "uint8":
            continue          # negative floats to uint8: undefined behaviour in C++
        same(torch, x.to(E(dst)), tx.to(getattr(torch, dst)), f"{src}.to({dst})")
        same(torch, x.to(dtype=E(dst)), tx.to(dtype=getattr(torch, dst)), f"{src} dtype=")
    for method, dst in _METHODS.items():
        if src in FLOATS and dst == "uint8":
            continue
        got = getattr(x, method)()
        assert got.dtype is E(dst)
        same(torch, got, getattr(tx, method)(), f"{src}.{method}()")


def test_to_returns_self_when_nothing_changes_and_copies_on_request():
    x = ember.ones(3)
    assert x.to(ember.float32) is x and x.float() is x
    y = x.to(ember.float32, copy=True)
    assert y is not x and y.dtype is ember.float32
    assert x.to(ember.ones(1, dtype=ember.int8)).dtype is ember.int8
    assert x.to("cpu", ember.float64).dtype is ember.float64
    assert x.type_as(ember.ones(1, dtype=ember.int16)).dtype is ember.int16


def test_conversions_are_differentiable_between_floats():
    x = ember.tensor([1.5, -2.0], requires_grad=True)
    y = x.double() * 3
    y.sum().backward()
    assert x.grad.dtype is ember.float32
    np.testing.assert_array_equal(x.grad.numpy(), [3.0, 3.0])
    h = x.half()
    assert h.requires_grad and h.dtype is ember.float16


def test_dtype_objects():
    assert ember.float is ember.float32 and ember.double is ember.float64
    assert ember.half is ember.float16 and ember.long is ember.int64
    assert ember.int is ember.int32 and ember.short is ember.int16
    for name in NAMES:
        d = E(name)
        assert d.is_floating_point == (name in FLOATS)
        assert d.itemsize == (1 if name == "bool" else np.dtype(name).itemsize)


# ---------------------------------------------------------------- Python operators


_BINARY = {"//": operator.floordiv, "%": operator.mod, "&": operator.and_,
           "|": operator.or_, "^": operator.xor, "<<": operator.lshift,
           ">>": operator.rshift, "**": operator.pow}


def _operand(m, name, shape=(4,)):
    """Positive, nonzero values (no division by zero, no negative shifts)."""
    a = np.resize(np.array([3, 1, 2, 5]), shape).astype(name)
    return m.from_numpy(a) if m is ember else m.from_numpy(a)


@pytest.mark.parametrize("sym", sorted(_BINARY))
@pytest.mark.parametrize("a,b", list(itertools.product(NAMES, NAMES)))
def test_binary_operators_match_torch(torch, sym, a, b):
    fn = _BINARY[sym]
    x = ember.from_numpy(np.array([7, 1, 6, 5], dtype=a))
    y = ember.from_numpy(np.array([3, 1, 2, 5], dtype=b))
    tx, ty = to_torch(torch, x), to_torch(torch, y)
    parity(torch, lambda: fn(x, y), lambda: fn(tx, ty), f"{a} {sym} {b}")


@pytest.mark.parametrize("sym", sorted(_BINARY))
@pytest.mark.parametrize("a", NAMES)
@pytest.mark.parametrize("number", [2, True, 1.5], ids=repr)
def test_operators_with_numbers_and_reflected(torch, sym, a, number):
    fn = _BINARY[sym]
    x = ember.from_numpy(np.array([7, 1, 6, 5], dtype=a))
    tx = to_torch(torch, x)
    if not (sym == "**" and a == "bool" and number is True):
        # (torch's pow(bool tensor, bool) alone computes in bool; ember refuses it, as
        # torch refuses pow(bool tensor, bool tensor))
        parity(torch, lambda: fn(x, number), lambda: fn(tx, number),
               f"{a} {sym} {number!r}")
    parity(torch, lambda: fn(number, x), lambda: fn(number, tx), f"{number!r} {sym} {a}")


@pytest.mark.parametrize("a", NAMES)
def test_unary_operators_match_torch(torch, a):
    x = ember.from_numpy(np.array([7, 0, 1, 5], dtype=a) if a == "bool" or a == "uint8"
                         else np.array([7, 0, -1, -5], dtype=a))
    tx = to_torch(torch, x)
    for what, fn in (("~", operator.invert), ("abs", abs), ("-", operator.neg)):
        parity(torch, lambda: fn(x), lambda: fn(tx), f"{what}{a}")


def test_augmented_operators_rebind_or_update():
    x = ember.tensor([7, -7, 8])
    y = x
    y //= 2
    np.testing.assert_array_equal(y.numpy(), [3, -4, 4])
    y = ember.tensor([7, -7, 8])
    y %= 3
    np.testing.assert_array_equal(y.numpy(), [1, 2, 2])
    z = ember.tensor([1, 2, 4], dtype=ember.uint8)
    z <<= 2
    z ^= 1
    z |= 128
    z &= 0xFD
    np.testing.assert_array_equal(z.numpy(), [133, 137, 145])


def test_floor_semantics_for_negative_operands():
    """// and % follow Python (floor), for integers and floats alike."""
    a = [7, -7, 7, -7]
    b = [2, 2, -2, -2]
    x, y = ember.tensor(a), ember.tensor(b)
    assert (x // y).tolist() == [p // q for p, q in zip(a, b)]
    assert (x % y).tolist() == [p % q for p, q in zip(a, b)]
    xf, yf = x.double() + 0.5, y.double()
    assert (xf // yf).tolist() == [(p + 0.5) // q for p, q in zip(a, b)]
    assert (xf % yf).tolist() == [(p + 0.5) % q for p, q in zip(a, b)]
    assert ember.tensor([1.0], dtype=ember.float64).floor_divide(0.1).item() == 1.0 // 0.1
    assert ember.div(ember.tensor([1.0], dtype=ember.float64), 0.1,
                     rounding_mode="floor").item() == 9.0


def test_integer_division_by_zero_raises():
    for fn in (operator.floordiv, operator.mod):
        with pytest.raises(RuntimeError, match="ZeroDivisionError"):
            fn(ember.tensor([1, 2]), ember.tensor([1, 0]))
        with pytest.raises(RuntimeError, match="ZeroDivisionError"):
            fn(ember.tensor([1, 2]), 0)
    # floats divide by zero as IEEE does
    r = ember.tensor([1.0, -1.0, 0.0]) // 0.0
    assert r.tolist()[:2] == [math.inf, -math.inf] and math.isnan(r.tolist()[2])


# ---------------------------------------------------------------- dtype-dependent values


@pytest.mark.parametrize("name", FLOATS)
def test_nan_to_num_defaults_are_the_dtype_limits(torch, name):
    x = ember.from_numpy(np.array([math.nan, math.inf, -math.inf, 1.5], dtype=name))
    got = ember.nan_to_num(x)
    info = np.finfo(name)
    np.testing.assert_array_equal(got.numpy(), np.array([0, info.max, info.min, 1.5],
                                                        dtype=name))
    same(torch, got, torch.nan_to_num(to_torch(torch, x)), name)
    same(torch, x.nan_to_num(posinf=1e300), to_torch(torch, x).nan_to_num(posinf=1e300),
         name + " posinf out of range")
    y = x.clone()
    assert y.nan_to_num_(nan=-1.0) is y and y.numpy()[0] == -1


@pytest.mark.parametrize("name", ["bool", "uint8", "int8", "int32", "int64"])
def test_nan_to_num_passes_integers_through(name):
    x = ember.from_numpy(_values(name))
    np.testing.assert_array_equal(ember.nan_to_num(x, nan=3.0).numpy(), x.numpy())


@pytest.mark.parametrize("name", ["float16", "int8", "uint8"])
def test_small_dtypes_through_float_ops(torch, name):
    """float16 computes in float32 and rounds once; int8/uint8 inputs give the default
    float dtype; integer ops wrap in the small width."""
    x = ember.from_numpy(_values(name).astype(name))
    tx = to_torch(torch, x)
    for op in ("sqrt", "rsqrt", "exp", "expm1", "log1p", "sin", "erf", "erfc", "tanh",
               "sigmoid", "abs", "sign", "neg", "reciprocal"):
        parity(torch, lambda: getattr(ember, op)(x), lambda: getattr(torch, op)(tx),
               f"{op}({name})")
    for op in ("gelu", "silu", "mish", "elu", "softplus", "leaky_relu", "hardtanh"):
        parity(torch, lambda: getattr(ember, op)(x),
               lambda: getattr(torch.nn.functional, op)(tx), f"{op}({name})")
    parity(torch, lambda: x * 100, lambda: tx * 100, f"{name} * 100")
    parity(torch, lambda: x + 250, lambda: tx + 250, f"{name} + 250")


# ---------------------------------------------------------------- composites


@pytest.mark.parametrize("a", NAMES)
def test_square_clamp_min_clamp_max_match_torch(torch, a):
    x = ember.from_numpy(np.array([3, 0, 1, 5] if a in ("bool", "uint8") else [3, 0, -1, -5],
                                  dtype=a))
    tx = to_torch(torch, x)
    bound = ember.from_numpy(np.array([1, 0, 1, 2], dtype=a))
    tb = to_torch(torch, bound)
    cases = [("square()", lambda m, t, b: m.square(t)),
             ("clamp_min(2)", lambda m, t, b: m.clamp_min(t, 2)),
             ("clamp_max(1.5)", lambda m, t, b: t.clamp_max(1.5)),
             ("clamp_min(tensor)", lambda m, t, b: t.clamp_min(b)),
             ("clamp_max(tensor)", lambda m, t, b: m.clamp_max(t, b)),
             ("square_()", lambda m, t, b: t.clone().square_()),
             ("clamp_min_(1)", lambda m, t, b: t.clone().clamp_min_(1)),
             ("clamp_max_(tensor)", lambda m, t, b: t.clone().clamp_max_(b))]
    for what, fn in cases:
        parity(torch, lambda: fn(ember, x, bound), lambda: fn(torch, tx, tb), f"{a} {what}")


def test_square_and_one_sided_clamps_are_differentiable():
    x = ember.tensor([-2.0, 0.5, 3.0], requires_grad=True)
    (x.square().sum() + x.clamp_min(0).sum() + x.clamp_max(1).sum()).backward()
    np.testing.assert_allclose(x.grad.numpy(), [-4 + 0 + 1, 1 + 1 + 1, 6 + 1 + 0])


def test_converting_copies_never_warn():
    """NaN, infinities and out-of-range values convert as PyTorch converts them, without
    NumPy's RuntimeWarnings (PyTorch never warns about them)."""
    x = ember.tensor([math.nan, math.inf, 1e200, -2.5], dtype=ember.float64)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for name in ("uint8", "int32", "int64", "float32", "bool"):
            x.to(E(name))


def test_masked_fill_converts_its_value_like_pytorch():
    import torch
    mask = [True, False, True]
    for value in (-7, -200, 255, 2.7):      # (PyTorch refuses 256 and beyond)
        for as_tensor in (False, True):
            want = torch.tensor([1, 2, 3], dtype=torch.uint8).masked_fill(
                torch.tensor(mask), torch.tensor(value) if as_tensor else value)
            got = ember.tensor([1, 2, 3], dtype=ember.uint8).masked_fill(
                ember.tensor(mask), ember.tensor(value) if as_tensor else value)
            assert got.numpy().tolist() == want.tolist(), (value, as_tensor)


def test_in_place_ops_converting_into_self_never_warn():
    a = ember.tensor([1.0, 2.0], dtype=ember.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        a.add_(ember.tensor([1e200, math.nan], dtype=ember.float64))
    assert math.isinf(a[0].item()) and math.isnan(a[1].item())
