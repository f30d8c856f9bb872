"""The Tensor API: construction, factories, NumPy interop, metadata, copies and conversions,
version counters, meta tensors, repr, indexing and Python operators."""
import math
import operator
import warnings

import numpy as np
import pytest

import ember

# ---------------------------------------------------------------- ember.tensor


@pytest.mark.parametrize("data,dtype,shape", [
    (1, ember.int64, ()), (1.5, ember.float32, ()), (True, ember.bool, ()),
    ([1, 2, 3], ember.int64, (3,)), ([1, 2.0], ember.float32, (2,)),
    ([True, False], ember.bool, (2,)), ([True, 2], ember.int64, (2,)),
    ([[1, 2], [3, 4]], ember.int64, (2, 2)), ([[[1.0]], [[2.0]]], ember.float32, (2, 1, 1)),
    ([], ember.float32, (0,)), ([[], []], ember.float32, (2, 0)),
])
def test_tensor_infers_dtype_and_shape(data, dtype, shape):
    t = ember.tensor(data)
    assert t.dtype is dtype
    assert tuple(t.shape) == shape
    np.testing.assert_array_equal(t.numpy(), np.array(data, dtype=t.numpy().dtype))


def test_tensor_explicit_dtype_and_default_dtype():
    assert ember.tensor([1, 2], dtype=ember.float64).dtype is ember.float64
    assert ember.tensor([1.7, -1.7], dtype=ember.int32).tolist() == [1, -1]
    ember.set_default_dtype(ember.float64)
    try:
        assert ember.tensor([1.5]).dtype is ember.float64
        assert ember.get_default_dtype() is ember.float64
    finally:
        ember.set_default_dtype(ember.float32)
    with pytest.raises(TypeError):
        ember.set_default_dtype(ember.int32)


def test_tensor_from_numpy_input_copies_and_keeps_dtype():
    a = np.arange(6, dtype=np.int16).reshape(2, 3)
    t = ember.tensor(a)
    assert t.dtype is ember.int16 and tuple(t.shape) == (2, 3)
    a[0, 0] = 100
    assert t[0, 0].item() == 0                      # a copy
    assert ember.tensor(np.float64(2.5)).dtype is ember.float64
    assert ember.tensor([np.float32(1), np.float32(2)]).dtype is ember.float32
    assert ember.tensor(np.array([1 + 2j])).dtype is ember.complex128
    with pytest.raises(TypeError):
        ember.tensor(np.array([1 + 2j], dtype=np.clongdouble))
    with pytest.raises(TypeError):
        ember.tensor("abc")
    with pytest.raises(ValueError):
        ember.tensor([[1, 2], [3]])


def test_tensor_requires_grad():
    t = ember.tensor([1.0, 2.0], requires_grad=True)
    assert t.requires_grad and t.is_leaf and t.grad_fn is None
    with pytest.raises(RuntimeError):
        ember.tensor([1, 2], requires_grad=True)


def test_tensor_of_tensor_warns_and_copies():
    src = ember.ones(2, requires_grad=True)
    with pytest.warns(UserWarning):
        t = ember.tensor(src)
    assert not t.requires_grad
    t[0] = 5.0
    assert src[0].item() == 1.0


# ---------------------------------------------------------------- factories


def test_factories():
    z = ember.zeros(2, 3)
    assert tuple(z.shape) == (2, 3) and z.dtype is ember.float32 and not z.numpy().any()
    assert tuple(ember.zeros((2, 3)).shape) == (2, 3)
    assert tuple(ember.zeros([4]).shape) == (4,)
    assert ember.ones(2, dtype=ember.int8).tolist() == [1, 1]
    assert ember.full((2,), 7).dtype is ember.int64
    assert ember.full((2,), 7.0).dtype is ember.float32
    assert ember.full((2,), True).dtype is ember.bool
    assert ember.full((2, 2), 3.5, dtype=ember.float64).tolist() == [[3.5, 3.5]] * 2
    e = ember.empty(3, 4, dtype=ember.int32)
    assert tuple(e.shape) == (3, 4) and e.dtype is ember.int32 and e.is_contiguous()
    assert tuple(ember.zeros(0, 3).stride()) == (3, 1)
    assert ember.zeros(()).ndim == 0
    x = ember.ones(2, 3, requires_grad=True)
    assert x.requires_grad and x.is_leaf
    with pytest.raises(RuntimeError, match="negative dimension"):
        ember.zeros(2, -1)


def test_arange():
    assert ember.arange(5).tolist() == [0, 1, 2, 3, 4]
    assert ember.arange(5).dtype is ember.int64
    assert ember.arange(1, 7, 2).tolist() == [1, 3, 5]
    assert ember.arange(5, 0, -2).tolist() == [5, 3, 1]
    a = ember.arange(0, 1, 0.25)
    assert a.dtype is ember.float32 and a.tolist() == [0.0, 0.25, 0.5, 0.75]
    assert ember.arange(3, dtype=ember.float64).dtype is ember.float64
    assert len(ember.arange(0, 1, 0.1)) == 10
    assert ember.arange(0).numel() == 0
    with pytest.raises(RuntimeError):
        ember.arange(0, 5, 0)
    with pytest.raises(RuntimeError):
        ember.arange(5, 0, 1)


def test_manual_seed_reproducible():
    ember.manual_seed(3)
    a = ember.rand(5).tolist()
    b = ember.randn(5).tolist()
    ember.manual_seed(3)
    assert ember.rand(5).tolist() == a
    assert ember.randn(5).tolist() == b
    ember.manual_seed(4)
    assert ember.rand(5).tolist() != a
    state = ember.get_rng_state()
    c = ember.rand(3).tolist()
    ember.set_rng_state(state)
    assert ember.rand(3).tolist() == c


def test_rand_randn_moments_and_ranges():
    ember.manual_seed(0)
    u = ember.rand(100, 100).numpy().astype(np.float64)
    assert u.min() >= 0.0 and u.max() < 1.0
    assert abs(u.mean() - 0.5) < 0.01 and abs(u.std() - math.sqrt(1 / 12)) < 0.01
    n = ember.randn(100, 100, dtype=ember.float64).numpy()
    assert abs(n.mean()) < 0.04 and abs(n.std() - 1) < 0.03
    assert ember.rand(2, 3).dtype is ember.float32
    assert tuple(ember.randn(2, 3).shape) == (2, 3)


# ---------------------------------------------------------------- NumPy interop


def test_from_numpy_and_numpy_share_memory():
    a = np.zeros((2, 3), dtype=np.float32)
    t = ember.from_numpy(a)
    a[0, 1] = 5
    assert t[0, 1].item() == 5.0
    t.numpy()[1, 2] = 7
    assert a[1, 2] == 7
    t[1, 0] = 3.0
    assert a[1, 0] == 3
    assert t.numpy() is not None and np.shares_memory(t.numpy(), a)
    v = t[:, 1]
    assert np.shares_memory(v.numpy(), a)


def test_from_numpy_strided_and_refused_arrays():
    a = np.arange(12, dtype=np.int64).reshape(3, 4)
    t = ember.from_numpy(a[:, ::2])
    assert tuple(t.stride()) == (4, 2) and t.tolist() == [[0, 2], [4, 6], [8, 10]]
    t2 = ember.from_numpy(a.T)
    assert tuple(t2.stride()) == (1, 4) and not t2.is_contiguous()
    with pytest.raises(ValueError):
        ember.from_numpy(a[:, ::-1])
    assert ember.from_numpy(np.zeros(2, dtype=np.complex64)).dtype is ember.complex64
    with pytest.raises(TypeError):
        ember.from_numpy(np.zeros(2, dtype=np.clongdouble))
    with pytest.raises(TypeError):
        ember.from_numpy([1, 2])


def test_numpy_refuses_requires_grad():
    t = ember.ones(2, requires_grad=True)
    with pytest.raises(RuntimeError, match="requires grad"):
        t.numpy()
    assert t.detach().numpy().tolist() == [1.0, 1.0]
    with pytest.raises(RuntimeError):
        np.asarray(t)


def test_array_protocol():
    t = ember.arange(6, dtype=ember.float32).view(2, 3)
    a = np.asarray(t)
    assert a.dtype == np.float32 and a.shape == (2, 3)
    assert np.shares_memory(a, t.numpy())
    b = np.asarray(t, dtype=np.float64)
    assert b.dtype == np.float64 and not np.shares_memory(b, t.numpy())
    c = np.array(t)                       # np.array copies by default
    assert not np.shares_memory(c, t.numpy())
    d = np.asarray(t, copy=False)
    assert np.shares_memory(d, t.numpy())
    with pytest.raises(ValueError):
        np.asarray(t, dtype=np.float64, copy=False)
    e = t.__array__(copy=True)
    assert not np.shares_memory(e, t.numpy())
    assert t.__array__().dtype == np.float32 and t.__array__(None, None) is not None
    assert np.add(ember.ones(3), 1).tolist() == [2.0, 2.0, 2.0]    # ufuncs take tensors


# ---------------------------------------------------------------- metadata


def test_metadata():
    t = ember.zeros(2, 3, 4)
    assert t.shape == (2, 3, 4) and isinstance(t.shape, ember.Size)
    assert repr(t.shape) == "ember.Size([2, 3, 4])"
    assert t.size() == (2, 3, 4) and t.size(1) == 3 and t.size(-1) == 4
    assert t.ndim == 3 and t.dim() == 3 and t.numel() == 24 and len(t) == 2
    assert t.stride() == (12, 4, 1) and t.stride(0) == 12 and t.stride(-1) == 1
    assert t.is_contiguous() and not t.transpose(0, 2).is_contiguous()
    assert t.dtype is ember.float32 and t.element_size() == 4
    assert t.shape[1:] == (3, 4) and isinstance(t.shape[1:], ember.Size)
    assert t.shape.numel() == 24
    with pytest.raises(IndexError):
        t.size(3)
    with pytest.raises(IndexError):
        t.stride(-4)
    with pytest.raises(TypeError):
        len(ember.tensor(1.0))
    with pytest.raises(TypeError):
        t.size(foo=1)
    assert t.size(dim=2) == 4 and t.stride(dim=0) == 12


def test_item_and_tolist():
    assert ember.tensor(2.5).item() == 2.5 and isinstance(ember.tensor(2.5).item(), float)
    assert isinstance(ember.tensor(3).item(), int)
    assert ember.tensor(True).item() is True
    assert ember.tensor([[7]]).item() == 7
    with pytest.raises(RuntimeError):
        ember.ones(2).item()
    assert ember.tensor([[1, 2], [3, 4]]).tolist() == [[1, 2], [3, 4]]
    assert ember.tensor(1.5).tolist() == 1.5
    x = ember.arange(6).view(2, 3).t()
    assert x.tolist() == [[0, 3], [1, 4], [2, 5]]
    assert float(ember.tensor(2)) == 2.0 and int(ember.tensor(2.7)) == 2
    with pytest.raises(ValueError):
        float(ember.ones(2))
    assert bool(ember.tensor([1])) is True
    with pytest.raises(RuntimeError):
        bool(ember.ones(2))
    assert [10, 20, 30][ember.tensor(1)] == 20
    with pytest.raises(TypeError):
        [1, 2][ember.tensor(1.0)]


def test_detach_clone_contiguous_to():
    x = ember.arange(6, dtype=ember.float32).view(2, 3).requires_grad_()
    d = x.detach()
    assert not d.requires_grad and d.grad_fn is None
    assert np.shares_memory(d.numpy(), x.detach().numpy())
    c = x.clone()
    assert c.requires_grad and c.grad_fn is not None
    assert not np.shares_memory(c.detach().numpy(), x.detach().numpy())
    t = x.detach().t()
    assert not t.is_contiguous()
    tc = t.contiguous()
    assert tc.is_contiguous() and tc.tolist() == t.tolist()
    assert x.detach().contiguous() is not None
    cont = ember.ones(2, 3)
    assert cont.contiguous() is cont
    assert t.clone().stride() == t.stride()             # preserve_format keeps the layout
    y = x.detach().to(ember.int32)
    assert y.dtype is ember.int32 and y.tolist() == [[0, 1, 2], [3, 4, 5]]
    assert cont.to(ember.float32) is cont
    assert cont.to(ember.float32, copy=True) is not cont
    assert cont.to("cpu") is cont
    assert cont.double().dtype is ember.float64 and cont.long().dtype is ember.int64
    assert cont.to(ember.ones(1, dtype=ember.int8)).dtype is ember.int8
    with pytest.raises(RuntimeError):
        cont.to("cuda")


def test_requires_grad_grad_grad_fn_is_leaf():
    x = ember.ones(3)
    assert not x.requires_grad and x.grad is None and x.is_leaf
    x.requires_grad = True
    assert x.requires_grad
    y = x * 2
    assert y.requires_grad and not y.is_leaf and y.grad_fn.name() == "MulBackward0"
    with pytest.raises(RuntimeError):
        y.requires_grad = False
    with pytest.raises(RuntimeError):
        ember.ones(2, dtype=ember.int64).requires_grad_()
    x.grad = ember.zeros(3)
    assert x.grad.tolist() == [0.0, 0.0, 0.0]
    with pytest.raises(RuntimeError):
        x.grad = ember.zeros(4)
    with pytest.raises(RuntimeError):
        x.grad = ember.zeros(3, dtype=ember.float64)
    with pytest.raises(TypeError):
        x.grad = 3
    with pytest.raises(RuntimeError):
        x.requires_grad = 1
    x.grad = None
    assert x.grad is None


def test_views_share_the_version_counter():
    base = ember.zeros(3, 4)
    v = base[1]
    w = base.view(12)
    t = base.t()
    v0 = base._version
    assert v._version == w._version == t._version == v0
    v[0] = 1.0
    assert base._version == v._version == w._version == t._version == v0 + 1
    assert base[1, 0].item() == 1.0 and w[4].item() == 1.0
    base.add_(1)
    assert v._version == v0 + 2
    c = base.clone()
    assert c._version == 0
    assert v._base is base and base._base is None


def test_meta_tensors():
    m = ember.empty(2, 3, device="meta")
    assert m.is_meta and m.device.type == "meta" and tuple(m.shape) == (2, 3)
    r = (m + 1).sum(0)
    assert r.is_meta and tuple(r.shape) == (3,) and r.dtype is ember.float32
    mm = ember.empty(3, 4, device="meta") @ ember.empty(4, 5, device="meta")
    assert mm.is_meta and tuple(mm.shape) == (3, 5)
    with pytest.raises(NotImplementedError):
        m.numpy()
    with pytest.raises(RuntimeError):
        m.item()
    assert "device='meta'" in repr(m)
    assert ember.zeros(2).device.type == "cpu"


# ---------------------------------------------------------------- repr


def _repr_cases(torch):
    yield lambda lib: lib.tensor([1.0, 2.5, -3.0])
    yield lambda lib: lib.tensor([[1, 2], [3, 4]])
    yield lambda lib: lib.tensor(3.5)
    yield lambda lib: lib.tensor([True, False])
    yield lambda lib: lib.tensor([1.0, 2.0], dtype=lib.float64)
    yield lambda lib: lib.tensor([1, 2], dtype=lib.int32)
    yield lambda lib: lib.tensor([1e-5, 1.0])
    yield lambda lib: lib.tensor([1e10, 1.0])
    yield lambda lib: lib.tensor([0.1, 123.456])
    yield lambda lib: lib.tensor([float("nan"), float("inf"), 1.0])
    yield lambda lib: lib.zeros(0)
    yield lambda lib: lib.zeros(2, 0)
    yield lambda lib: lib.zeros(0, dtype=lib.int64)
    yield lambda lib: lib.arange(2000)
    yield lambda lib: lib.arange(24, dtype=lib.float32).view(2, 3, 4)
    yield lambda lib: lib.ones(2, requires_grad=True)
    yield lambda lib: lib.tensor([1.5, 2.0], dtype=lib.float16)
    yield lambda lib: lib.tensor([1, 2], dtype=lib.uint8)


def test_repr_matches_torch(torch):
    for make in _repr_cases(torch):
        got = repr(make(ember))
        want = repr(make(torch)).replace("torch.", "ember.")
        assert got == want, f"\nember: {got}\ntorch: {want}"


def test_repr_of_results_with_grad_fn(torch):
    x = ember.ones(2, requires_grad=True)
    tx = torch.ones(2, requires_grad=True)
    assert repr(x * 2) == repr(tx * 2).replace("torch.", "ember.")
    assert repr((x * 2).sum()) == repr((tx * 2).sum()).replace("torch.", "ember.")


# ---------------------------------------------------------------- indexing


INDEXES = [0, -1, (1, 1), (slice(None), 1), slice(1, None), slice(None, None, 2),
           (Ellipsis, 1), (None, 0), (0, None, slice(1, 3)), Ellipsis, (), (1, Ellipsis, 2),
           (slice(None), None, slice(None)), slice(-2, None), slice(5, 10),
           (slice(1, 2), slice(0, 3, 2), 1), (None, Ellipsis, None), slice(-100, 100)]


@pytest.mark.parametrize("key", INDEXES, ids=repr)
def test_getitem_matches_numpy(key):
    a = np.arange(24, dtype=np.float32).reshape(3, 2, 4)
    t = ember.from_numpy(a.copy())
    r = t[key]
    want = a[key]
    assert isinstance(r, ember.Tensor)
    assert tuple(r.shape) == want.shape
    np.testing.assert_array_equal(r.numpy(), want)
    # a view: writing through it changes the base
    if r.numel():
        r.numpy().reshape(-1)[0] = -1 if r.is_contiguous() else r.numpy().flat[0]
        if r.is_contiguous():
            assert (t.numpy() == -1).any()


def test_getitem_errors():
    t = ember.zeros(3, 4)
    with pytest.raises(IndexError):
        t[3]
    with pytest.raises(IndexError):
        t[0, 0, 0]
    assert t[..., ...].shape == (3, 4)       # as PyTorch: a second ... stands for nothing
    with pytest.raises(ValueError):
        t[::0]
    with pytest.raises(ValueError):
        t[::-1]
    assert t[ember.tensor(1)].shape == (4,)


def test_setitem():
    t = ember.zeros(3, 4)
    t[0] = 1.0
    t[1, 2] = 5
    t[:, 3] = ember.tensor([7.0, 8.0, 9.0])
    t[2, :2] = ember.tensor([2.0])            # broadcast
    want = np.zeros((3, 4), dtype=np.float32)
    want[0] = 1
    want[1, 2] = 5
    want[:, 3] = [7, 8, 9]
    want[2, :2] = 2
    np.testing.assert_array_equal(t.numpy(), want)
    i = ember.zeros(2, dtype=ember.int64)
    i[0] = 2.7
    assert i.tolist() == [2, 0]
    with pytest.raises(RuntimeError):
        t[0] = ember.ones(5)
    with pytest.raises(TypeError):
        t[0] = "x"
    leaf = ember.ones(2, requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf"):
        leaf[0] = 2.0
    with ember.no_grad():
        leaf[0] = 2.0
    assert leaf.detach().tolist() == [2.0, 1.0]


# ---------------------------------------------------------------- Python operators


BINOPS = [operator.add, operator.sub, operator.mul, operator.truediv, operator.pow,
          operator.eq, operator.ne, operator.lt, operator.le, operator.gt, operator.ge]


@pytest.mark.parametrize("op", BINOPS, ids=lambda f: f.__name__)
def test_operators_with_tensors_and_scalars(op):
    a = np.array([[1.5, 2.0, 3.0], [0.5, 4.0, 2.5]], dtype=np.float32)
    b = np.array([2.0, 0.5, 3.0], dtype=np.float32)
    x, y = ember.from_numpy(a.copy()), ember.from_numpy(b.copy())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = [(op(x, y), op(a, b)), (op(x, 2), op(a, np.float32(2))),
                 (op(2, x), op(np.float32(2), a)), (op(x, 0.5), op(a, np.float32(0.5))),
                 (op(1.5, x), op(np.float32(1.5), a))]
    for got, want in cases:
        assert isinstance(got, ember.Tensor)
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-6)


def test_reflected_operators_keep_promotion():
    x = ember.tensor([1, 2, 3])
    assert (2 - x).tolist() == [1, 0, -1] and (2 - x).dtype is ember.int64
    assert (1 / ember.tensor([2, 4])).tolist() == [0.5, 0.25]
    assert (2 ** x).tolist() == [2, 4, 8]
    assert (2.0 ** x).dtype is ember.float32
    assert (-x).tolist() == [-1, -2, -3]
    assert (x @ x).item() == 14
    assert (ember.tensor([True, False]) & ember.tensor([True, True])).tolist() == [True, False]
    assert (ember.tensor([1, 4]) | 2).tolist() == [3, 6]
    assert +x is x or (+x).tolist() == [1, 2, 3]
    u = ember.tensor([1, 2], dtype=ember.uint8)
    assert (u + -1).tolist() == [0, 1]              # numbers wrap to the tensor's type
    assert (u < -1).tolist() == [True, True]        # -1 is 255 in uint8
    assert (ember.tensor([100], dtype=ember.int8) + 300).tolist() == [-112]


def test_inplace_operators():
    x = ember.ones(3)
    y = x
    x += 1
    x *= 3
    x -= ember.tensor([1.0, 2.0, 3.0])
    x /= 2
    assert y is x and x.tolist() == [2.5, 2.0, 1.5]
    i = ember.ones(2, dtype=ember.int64)
    with pytest.raises(RuntimeError):
        i += 0.5
    with pytest.raises(RuntimeError):
        i /= 2


def test_inplace_ops_write_through_non_contiguous_views():
    base = ember.zeros(3, 4)
    v = base.t()
    r = v.add_(ember.arange(12, dtype=ember.float32).view(4, 3))
    assert r is v and base._version == 1
    np.testing.assert_array_equal(base.numpy(), np.arange(12, dtype=np.float32).reshape(4, 3).T)
    s = base[:, ::2]
    s.mul_(2)
    want = np.arange(12, dtype=np.float32).reshape(4, 3).T.copy()
    want[:, ::2] *= 2
    np.testing.assert_array_equal(base.numpy(), want)
    base[1].fill_(7)
    assert base[1].tolist() == [7.0] * 4
    base[2].copy_(ember.tensor([1, 2, 3, 4]))
    assert base[2].tolist() == [1.0, 2.0, 3.0, 4.0] and base.dtype is ember.float32
    with pytest.raises(RuntimeError, match=r"add_?\(\).*\[2, 3\]"):
        ember.ones(2, 3).add_(ember.ones(3, 3))
    e = ember.zeros(1, 3).expand(2, 3)
    with pytest.raises(RuntimeError, match="single memory location"):
        e.add_(ember.ones(2, 3))
    assert e.tolist() == [[0.0] * 3] * 2
    e[0] = 5.0                      # a view without overlap may be written
    assert e.tolist() == [[5.0] * 3] * 2


def test_operator_errors():
    x = ember.ones(2, 3)
    with pytest.raises(TypeError):
        x + "a"
    with pytest.raises(TypeError):
        x @ 2
    with pytest.raises(RuntimeError, match=r"add\(\).*\[2, 3\]"):
        x + ember.ones(4)


def test_iteration_and_contains():
    x = ember.tensor([[1, 2], [3, 4]])
    rows = list(x)
    assert len(rows) == 2 and rows[1].tolist() == [3, 4]
    assert 3 in x and 7 not in x
    assert [int(v) for v in reversed(ember.tensor([1, 2, 3]))] == [3, 2, 1]
    with pytest.raises(TypeError):
        iter(ember.tensor(1))
    assert f"{ember.tensor(2.5):.2f}" == "2.50"
