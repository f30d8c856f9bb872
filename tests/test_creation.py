"""Creation ops against PyTorch: tensor / as_tensor / from_numpy, zeros / ones / full /
empty and their _like forms, arange, linspace, eye, Tensor.new_*, tril / triu (values,
in-place forms, gradients), and the random factories' generators."""
import math
import warnings

import numpy as np
import pytest

import ember
from ember.autograd import gradcheck

NAMES = ["bool", "uint8", "int8", "int16", "int32", "int64", "float16", "float32", "float64"]


def E(name):
    return getattr(ember, name)


def T(torch, name):
    return getattr(torch, name)


def name_of(dtype):
    return str(dtype).split(".")[-1]


def to_torch(torch, t):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch.from_numpy(t.numpy().copy())


def same(torch, got, want, what="", exact=False):
    assert name_of(got.dtype) == name_of(want.dtype), f"{what}: {got.dtype} != {want.dtype}"
    assert tuple(got.shape) == tuple(want.shape), f"{what}: {got.shape} != {want.shape}"
    g, w = got.numpy().astype(np.float64), want.to(torch.float64).numpy()
    if exact:
        np.testing.assert_array_equal(g, w, err_msg=what)
    else:       # an ulp of the dtype (PyTorch's vectorised loops round differently)
        tol = {"float16": 1e-3, "float32": 2e-7}.get(name_of(got.dtype), 1e-12)
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol, err_msg=what)


def outcome(fn):
    try:
        return fn(), None
    except Exception as e:  # noqa: BLE001 - compared with torch's
        return None, e


def parity(torch, fe, ft, what, exact=False):
    got, err = outcome(fe)
    want, terr = outcome(ft)
    if err is not None or terr is not None:
        assert err is not None and terr is not None, f"{what}: ember {err!r}, torch {terr!r}"
        assert type(err) is type(terr), f"{what}: ember {err!r}, torch {terr!r}"
        return
    same(torch, got, want, what, exact)


# ---------------------------------------------------------------- from data


@pytest.mark.parametrize("data", [[1, 2, 3], [1.5, 2], [True, False], [[1, 2], [3, 4]],
                                  [[True, 2], [3, 4.5]], 3, 2.5, True, [], [[]],
                                  [np.float32(1.5), 2], (1, 2), [ember.tensor(1.5), 2]],
                         ids=repr)
def test_tensor_infers_dtype_as_torch(torch, data):
    tdata = [to_torch(torch, d) if isinstance(d, ember.Tensor) else d for d in data] \
        if isinstance(data, list) else data
    parity(torch, lambda: ember.tensor(data), lambda: torch.tensor(tdata), repr(data),
           exact=True)


@pytest.mark.parametrize("dtype", NAMES)
def test_tensor_with_dtype(torch, dtype):
    data = [[0, 1.5], [-2.25, 3]] if dtype != "uint8" else [[0, 1.5], [2.25, 3]]
    parity(torch, lambda: ember.tensor(data, dtype=E(dtype)),
           lambda: torch.tensor(data, dtype=T(torch, dtype)), dtype, exact=True)


def test_tensor_requires_grad_and_errors():
    t = ember.tensor([1.0, 2.0], requires_grad=True)
    assert t.requires_grad and t.is_leaf
    with pytest.raises(RuntimeError, match="floating point"):
        ember.tensor([1, 2], requires_grad=True)
    with pytest.raises(ValueError):
        ember.tensor([[1, 2], [3]])
    with pytest.raises(TypeError):
        ember.tensor(["a"])


def test_as_tensor_and_from_numpy_share_memory():
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    t = ember.as_tensor(a)
    u = ember.from_numpy(a)
    a[0, 0] = 42
    assert t[0, 0].item() == 42 and u[0, 0].item() == 42
    assert ember.as_tensor(t) is t
    c = ember.as_tensor(a, dtype=ember.float64)
    a[0, 1] = -1
    assert c.dtype is ember.float64 and c[0, 1].item() == 1    # a converted copy
    assert ember.as_tensor([1, 2]).dtype is ember.int64
    assert ember.from_numpy(np.ones(3, dtype=np.uint8)).dtype is ember.uint8
    with pytest.raises(TypeError):
        ember.from_numpy(np.ones(2, dtype=np.clongdouble))


# ---------------------------------------------------------------- from sizes


_SIZES = [((2, 3), {}), (((2, 3),), {}), (([4],), {}), (((),), {}), ((0, 2), {}),
          ((ember.Size([3, 1]),), {})]


@pytest.mark.parametrize("name", ["zeros", "ones", "empty"])
@pytest.mark.parametrize("dtype", NAMES + [None])
def test_size_factories(torch, name, dtype):
    for args, kw in _SIZES:
        kw = dict(kw)
        tkw = dict(kw)
        if dtype is not None:
            kw["dtype"], tkw["dtype"] = E(dtype), T(torch, dtype)
        targs = tuple(torch.Size(a) if isinstance(a, ember.Size) else a for a in args)
        got = getattr(ember, name)(*args, **kw)
        want = getattr(torch, name)(*targs, **tkw)
        if name == "empty":
            assert name_of(got.dtype) == name_of(want.dtype)
            assert tuple(got.shape) == tuple(want.shape)
            assert got.stride() == want.stride()
        else:
            same(torch, got, want, f"{name}{args} {dtype}", exact=True)


@pytest.mark.parametrize("fill", [1.5, 7, True, -2])
@pytest.mark.parametrize("dtype", NAMES + [None])
def test_full(torch, fill, dtype):
    kw = {} if dtype is None else {"dtype": E(dtype)}
    tkw = {} if dtype is None else {"dtype": T(torch, dtype)}
    if dtype == "uint8" and fill == -2:
        return                   # torch refuses to wrap, ember wraps: out of scope
    parity(torch, lambda: ember.full((2, 3), fill, **kw),
           lambda: torch.full((2, 3), fill, **tkw), f"full {fill!r} {dtype}", exact=True)


def test_factory_options_and_errors():
    t = ember.zeros(2, 3, requires_grad=True)
    assert t.requires_grad and t.is_leaf and t.grad_fn is None
    with pytest.raises(RuntimeError, match="floating point"):
        ember.ones(2, dtype=ember.int64, requires_grad=True)
    with pytest.raises(RuntimeError, match="negative dimension"):
        ember.zeros(2, -1)
    assert ember.zeros(2, device="cpu").device.type == "cpu"
    assert ember.zeros(2, device="meta").is_meta
    with pytest.raises(RuntimeError, match="CPU"):
        ember.zeros(2, device="cuda")


@pytest.mark.parametrize("name", ["zeros_like", "ones_like", "empty_like", "full_like",
                                  "rand_like", "randn_like"])
def test_like_forms_keep_shape_dtype_and_layout(torch, name):
    x = ember.ones(3, 4, dtype=ember.float64).t()        # non-contiguous: layout kept
    extra = (2.5,) if name == "full_like" else ()
    tx = to_torch(torch, ember.ones(3, 4, dtype=ember.float64)).t()
    got = getattr(ember, name)(x, *extra)
    want = getattr(torch, name)(tx, *extra)
    assert got.dtype is ember.float64 and tuple(got.shape) == (4, 3)
    assert got.stride() == want.stride()
    if name in ("zeros_like", "ones_like", "full_like"):
        same(torch, got, want, name, exact=True)
    got = getattr(ember, name)(x, *extra, dtype=ember.float16)
    assert got.dtype is ember.float16
    if name not in ("rand_like", "randn_like"):
        got = getattr(ember, name)(ember.ones(2, dtype=ember.int8), *extra)
        assert got.dtype is ember.int8


# ---------------------------------------------------------------- ranges


_ARANGE = [(5,), (0,), (2.5,), (1, 7), (1, 7, 2), (7, 1, -2), (0.0, 1.0, 0.1), (-3, 3, 0.5),
           (0, 1, 0.3), (10, 0, -3), (5, 5)]


@pytest.mark.parametrize("args", _ARANGE, ids=repr)
@pytest.mark.parametrize("dtype", [None, "int32", "int64", "float32", "float64", "float16",
                                   "uint8"])
def test_arange(torch, args, dtype):
    kw = {} if dtype is None else {"dtype": E(dtype)}
    tkw = {} if dtype is None else {"dtype": T(torch, dtype)}
    if dtype == "uint8" and any(a < 0 for a in args):
        return
    if dtype in ("int32", "int64", "uint8") and any(isinstance(a, float) for a in args):
        return      # torch's integer arange of float bounds differs between int32 and int64
    parity(torch, lambda: ember.arange(*args, **kw), lambda: torch.arange(*args, **tkw),
           f"arange{args} {dtype}")


_LINSPACE = [(0, 10, 5), (0, 1, 7), (-3, 10, 7), (10, -10, 6), (0, 1, 0), (2, 5, 1),
             (0.5, 3.9, 3), (1.5, -2.5, 4), (0, 1, 100), (-1e3, 1e3, 11), (0, 255, 4),
             (-3, 10, 7), (0, 1, 2)]


@pytest.mark.parametrize("args", _LINSPACE, ids=repr)
@pytest.mark.parametrize("dtype", [None] + NAMES)
def test_linspace(torch, args, dtype):
    kw = {} if dtype is None else {"dtype": E(dtype)}
    tkw = {} if dtype is None else {"dtype": T(torch, dtype)}
    if dtype in ("uint8", "int8", "int16") and max(abs(a) for a in args[:2]) > 127:
        return
    parity(torch, lambda: ember.linspace(*args, **kw), lambda: torch.linspace(*args, **tkw),
           f"linspace{args} {dtype}")


def test_linspace_ends_are_exact_and_requires_grad():
    t = ember.linspace(0.1, 0.7, 7, dtype=ember.float64)
    assert t[0].item() == 0.1 and t[-1].item() == 0.7
    t = ember.linspace(0, 1, 5, requires_grad=True)
    assert t.requires_grad and t.is_leaf
    assert ember.linspace(ember.tensor(0.0), ember.tensor(2.0), 3).tolist() == [0, 1, 2]
    with pytest.raises(RuntimeError, match="non-negative"):
        ember.linspace(0, 1, -2)


@pytest.mark.parametrize("args", [(3,), (2, 3), (4, 2), (0,), (1,), (2, 0), (-1,), (2, -3)],
                         ids=repr)
@pytest.mark.parametrize("dtype", [None] + NAMES)
def test_eye(torch, args, dtype):
    kw = {} if dtype is None else {"dtype": E(dtype)}
    tkw = {} if dtype is None else {"dtype": T(torch, dtype)}
    parity(torch, lambda: ember.eye(*args, **kw), lambda: torch.eye(*args, **tkw),
           f"eye{args} {dtype}", exact=True)


# ---------------------------------------------------------------- Tensor.new_*


@pytest.mark.parametrize("dtype", ["int8", "float64", "bool"])
def test_new_methods(torch, dtype):
    x = ember.ones(2, dtype=E(dtype))
    tx = to_torch(torch, x)
    cases = [("new_zeros", (2, 3), {}), ("new_zeros", ((3,),), {}),
             ("new_ones", (4,), {"dtype": "float32"}), ("new_full", ((2,), 1.5), {}),
             ("new_full", ((2, 2), 3), {"dtype": "int32"}),
             ("new_tensor", ([1.5, 2],), {}), ("new_tensor", ([[1, 0]],), {"dtype": "float16"})]
    for name, args, kw in cases:
        ekw = {k: E(v) for k, v in kw.items()}
        tkw = {k: T(torch, v) for k, v in kw.items()}
        parity(torch, lambda: getattr(x, name)(*args, **ekw),
               lambda: getattr(tx, name)(*args, **tkw), f"{dtype}.{name}{args} {kw}",
               exact=True)
    e = x.new_empty((3, 2))
    assert e.dtype is x.dtype and tuple(e.shape) == (3, 2)
    r = ember.ones(2).new_zeros(3, requires_grad=True)
    assert r.requires_grad and r.is_leaf


# ---------------------------------------------------------------- tril, triu


@pytest.mark.parametrize("name", ["tril", "triu"])
@pytest.mark.parametrize("dtype", NAMES)
def test_triangles_match_torch(torch, name, dtype):
    rng = np.random.default_rng(0)
    for shape in ((4, 5), (5, 4), (2, 3, 3), (1, 2, 0, 3), (3, 1)):
        x = ember.from_numpy((rng.standard_normal(shape) * 5).astype(dtype))
        tx = to_torch(torch, x)
        for k in (-6, -1, 0, 2):
            parity(torch, lambda: getattr(x, name)(k), lambda: getattr(tx, name)(k),
                   f"{name}({shape}, {k}) {dtype}", exact=True)
            parity(torch, lambda: getattr(ember, name)(x.mT, diagonal=k),
                   lambda: getattr(torch, name)(tx.mT, diagonal=k), "transposed",
                   exact=True)
            y, ty = x.clone(), tx.clone()
            assert getattr(y, name + "_")(k) is y
            getattr(ty, name + "_")(k)
            same(torch, y, ty, f"{name}_ {shape} {k}", exact=True)


def test_triangle_gradients_and_errors():
    x = ember.tensor(np.random.default_rng(1).standard_normal((3, 4)), requires_grad=True)
    assert gradcheck(lambda t: ember.tril(t, 1), [x])
    assert gradcheck(lambda t: ember.triu(t, -1), [x])
    ember.tril(x).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.tril(np.ones((3, 4))))
    with pytest.raises(RuntimeError, match="2 dimensions"):
        ember.tril(ember.ones(3))
    with pytest.raises(RuntimeError, match="2 dimensions"):
        ember.ones(()).triu()


# ---------------------------------------------------------------- random factories


def test_random_factories_use_the_generator_given():
    for fn in (lambda g: ember.rand(3, generator=g), lambda g: ember.randn(3, generator=g),
               lambda g: ember.randint(10, (5,), generator=g),
               lambda g: ember.randperm(6, generator=g),
               lambda g: ember.empty(4).uniform_(generator=g),
               lambda g: ember.empty(4).normal_(2.0, 0.5, generator=g),
               lambda g: ember.bernoulli(ember.full((6,), 0.5), generator=g)):
        a = fn(ember.Generator().manual_seed(3)).numpy().copy()
        b = fn(ember.Generator().manual_seed(3)).numpy().copy()
        np.testing.assert_array_equal(a, b)
    g = ember.Generator().manual_seed(5)
    assert g.initial_seed() == 5


def test_random_factories_honour_the_default_dtype():
    ember.set_default_dtype(ember.float64)
    try:
        assert ember.rand(2).dtype is ember.float64
        assert ember.randn(2).dtype is ember.float64
        assert ember.randint(3, (2,)).dtype is ember.int64
    finally:
        ember.set_default_dtype(ember.float32)
    assert math.isclose(ember.rand(20000).mean().item(), 0.5, abs_tol=0.02)
