"""DLPack interop (ember._interop, ember.utils.dlpack) and array-likes in ember.tensor /
ember.as_tensor, against PyTorch and NumPy: zero-copy both ways (same address, writes
seen by both sides), strides, 0-d, empty and non-contiguous tensors, every dtype, legacy
capsules, read-only data, lifetimes, and PyTorch's errors."""
import gc
import warnings

import numpy as np
import pytest

import ember
import ember.utils.dlpack

NAMES = ["bool", "uint8", "int8", "int16", "int32", "int64", "float16", "float32", "float64",
         "complex64", "complex128"]
# NumPy's DLPack has no bfloat16: ember's own capsules carry it to and from torch
TORCH_NAMES = NAMES + ["bfloat16"]


def _values(x):
    """x's values as a NumPy array (torch's numpy() refuses bfloat16)."""
    if not isinstance(x, ember.Tensor):
        x = x.float() if str(x.dtype) == "torch.bfloat16" else x
        return x.numpy()
    a = x.numpy()
    return a.astype(np.float32) if x.dtype is ember.bfloat16 else a


def _geometries():
    """(id, function of a base ember tensor of 24 elements -> a view)."""
    return [
        ("contiguous", lambda t: t.reshape(2, 3, 4)),
        ("0-d", lambda t: t[5]),
        ("empty", lambda t: t[:0].reshape(0, 3)),
        ("empty-inner", lambda t: t.reshape(4, 6)[:, 2:2]),
        ("transposed", lambda t: t.reshape(4, 6).t()),
        ("stepped", lambda t: t.reshape(4, 6)[1:, ::2]),
        ("offset", lambda t: t[7:19]),
        ("size-1 dims", lambda t: t.reshape(2, 1, 12)[:, :, 3:4]),
    ]


def _base(name):
    data = np.arange(24) % 7 - 2
    return ember.from_numpy(data.astype(getattr(ember, name).numpy_dtype)) if name != "bool" \
        else ember.from_numpy(data > 0)


def _same_view(a, b_ptr, b_shape, b_strides):
    assert a.data_ptr() == b_ptr or a.numel() == 0
    assert tuple(a.shape) == tuple(b_shape)
    if a.numel() > 0:
        assert tuple(a.stride()) == tuple(b_strides)


@pytest.mark.parametrize("name", TORCH_NAMES)
@pytest.mark.parametrize("geom", _geometries(), ids=lambda g: g[0])
def test_ember_to_torch_is_zero_copy(torch, name, geom):
    t = geom[1](_base(name))
    tt = torch.from_dlpack(t)
    assert str(tt.dtype) == f"torch.{name}"
    assert tt.data_ptr() == t.data_ptr() or t.numel() == 0
    assert tuple(tt.shape) == tuple(t.shape) and tt.stride() == t.stride()
    np.testing.assert_array_equal(_values(tt), _values(t))
    if t.numel():
        index = (0,) * tt.ndim
        old = t.numpy()[index].copy()
        tt[index] = 1 if name != "bool" else (not bool(old))
        assert t.numpy()[index] == tt[index].item()       # a write seen by ember


@pytest.mark.parametrize("name", TORCH_NAMES)
@pytest.mark.parametrize("geom", _geometries(), ids=lambda g: g[0])
def test_torch_to_ember_is_zero_copy(torch, name, geom):
    src = torch.from_dlpack(_base(name).clone())
    tt = geom[1](src)
    t = ember.from_dlpack(tt)
    assert t.dtype is getattr(ember, name)
    assert t.data_ptr() == tt.data_ptr() or tt.numel() == 0
    assert tuple(t.shape) == tuple(tt.shape)
    if tt.numel():
        assert t.stride() == tt.stride()
        index = (0,) * t.ndim
        t[index] = 0 if name != "bool" else True
        assert tt[index].item() == t[index].item()       # a write seen by torch
    np.testing.assert_array_equal(_values(t), _values(tt))


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("geom", _geometries(), ids=lambda g: g[0])
def test_numpy_both_ways(name, geom):
    t = geom[1](_base(name))
    a = np.from_dlpack(t)
    assert a.dtype == t.numpy().dtype and a.shape == tuple(t.shape)
    if t.numel():
        assert a.ctypes.data == t.data_ptr()
        assert a.strides == tuple(s * a.itemsize for s in t.stride())
    np.testing.assert_array_equal(a, t.numpy())
    back = ember.from_dlpack(a)
    _same_view(back, t.data_ptr(), t.shape, t.stride())
    assert back.dtype is t.dtype


def test_legacy_capsules(torch):
    t = ember.arange(6.0).reshape(2, 3).t()
    cap = ember.utils.dlpack.to_dlpack(t)
    assert "dltensor" in repr(cap) and "versioned" not in repr(cap)
    tt = torch.utils.dlpack.from_dlpack(cap)
    assert tt.data_ptr() == t.data_ptr() and tt.stride() == t.stride()
    with pytest.raises(RuntimeError, match="consumed only once"):
        torch.from_dlpack(cap)
    x = torch.arange(12, dtype=torch.int32).reshape(3, 4)[:, 1:]
    cap = torch.utils.dlpack.to_dlpack(x)
    e = ember.utils.dlpack.from_dlpack(cap)
    assert e.data_ptr() == x.data_ptr() and e.stride() == x.stride() and e.dtype is ember.int32
    with pytest.raises(RuntimeError, match="consumed only once"):
        ember.from_dlpack(cap)
    with pytest.raises(AssertionError, match="copy"):
        ember.from_dlpack(torch.utils.dlpack.to_dlpack(x), copy=True)
    assert ember.to_dlpack is ember.utils.dlpack.to_dlpack
    assert ember.from_dlpack is ember.utils.dlpack.from_dlpack


def test_versioned_capsule_when_asked():
    t = ember.ones(3)
    assert "dltensor_versioned" in repr(t.__dlpack__(max_version=(1, 0)))
    assert "dltensor_versioned" in repr(t.__dlpack__(max_version=(1, 3)))
    assert "versioned" not in repr(t.__dlpack__(max_version=(0, 8)))
    assert "versioned" not in repr(t.__dlpack__())


def test_errors_as_torch(torch):
    for lib in (ember, torch):
        x = lib.ones(3, requires_grad=True)
        with pytest.raises(BufferError, match="require gradient"):
            x.__dlpack__()
        y = lib.ones(3)
        with pytest.raises(TypeError, match="stream must be"):
            y.__dlpack__(stream="s")
        with pytest.raises(AssertionError, match="stream should be None on cpu"):
            y.__dlpack__(stream=3)
        y.__dlpack__(stream=None)
        y.__dlpack__(stream=-1)
        with pytest.raises(TypeError):
            y.__dlpack__(None)               # keyword-only, as torch's
        dev = y.__dlpack_device__()
        assert dev == (1, 0) and dev[0].name == "kDLCPU"
    assert ember.utils.dlpack.DLDeviceType.kDLCPU == torch.utils.dlpack.DLDeviceType.kDLCPU
    with pytest.raises(BufferError, match="require gradient"):
        ember.from_dlpack(torch.ones(2, requires_grad=True))
    assert ember.from_dlpack(torch.ones(2, requires_grad=True).detach()).tolist() == [1, 1]
    with pytest.raises(ValueError, match="meta"):
        ember.empty(2, device="meta").__dlpack_device__()
    with pytest.raises(BufferError):
        ember.empty(2, device="meta").__dlpack__()
    with pytest.raises(BufferError, match="CPU"):
        ember.ones(2).__dlpack__(dl_device=(2, 0), max_version=(1, 0))
    with pytest.raises(RuntimeError, match="CPU only"):
        ember.from_dlpack(np.ones(2), device="cuda")
    assert ember.from_dlpack(np.ones(2), device="cpu").tolist() == [1, 1]
    with pytest.raises(RuntimeError, match="dtype"):
        ember.from_dlpack(torch.ones(2, dtype=torch.uint16))
    with pytest.raises(TypeError, match="__dlpack__"):
        ember.from_dlpack([1, 2])

    class ForeignDevice:
        def __dlpack__(self, **kw):
            raise AssertionError("not reached")

        def __dlpack_device__(self):
            return (2, 0)
    with pytest.raises(BufferError, match="CPU only"):
        ember.from_dlpack(ForeignDevice())


def test_copy_keyword():
    a = np.arange(6.0)
    assert ember.from_dlpack(a, copy=True).data_ptr() != a.ctypes.data
    assert ember.from_dlpack(a, copy=False).data_ptr() == a.ctypes.data
    assert ember.from_dlpack(a).data_ptr() == a.ctypes.data
    rev = a[::-1]
    with pytest.raises(BufferError, match="negative strides"):
        ember.from_dlpack(rev, copy=False)
    got = ember.from_dlpack(rev)           # copy=None: copied, as the standard allows
    assert got.tolist() == rev.tolist() and got.stride() == (1,)
    t = ember.arange(4.0)
    c = np.from_dlpack(t, copy=True)
    c[0] = 9
    assert t[0].item() == 0


def test_read_only_data():
    a = np.arange(4.0)
    a.setflags(write=False)
    t = ember.from_dlpack(a)
    assert t.data_ptr() == a.ctypes.data
    with pytest.raises(ValueError, match="read-only"):
        t[0] = 1.0                         # ember keeps NumPy's read-only flag
    back = np.from_dlpack(t)               # versioned: the read-only flag travels
    assert not back.flags.writeable and back.ctypes.data == a.ctypes.data
    with pytest.raises(BufferError, match="read-only"):
        t.__dlpack__()                     # the legacy capsule cannot say read-only


def test_read_only_to_torch(torch):
    a = np.arange(4.0)
    a.setflags(write=False)
    t = ember.from_numpy(a)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tt = torch.from_dlpack(t)          # torch accepts read-only producers silently
    assert tt.data_ptr() == a.ctypes.data


def test_lifetimes(torch):
    t = ember.arange(1000.0)
    ptr = t.data_ptr()
    tt = torch.from_dlpack(t[10:])
    del t
    gc.collect()
    ember.randn(1000)                      # reuse freed memory if it was freed
    assert tt.data_ptr() == ptr + 40 and tt[0].item() == 10.0 and tt[-1].item() == 999.0
    x = torch.arange(1000.0)
    e = ember.from_dlpack(x[5:])
    del x
    gc.collect()
    torch.randn(1000)
    assert e[0].item() == 5.0 and e[-1].item() == 999.0
    cap = ember.arange(10.0).__dlpack__()  # an unconsumed capsule frees its tensor
    del cap
    gc.collect()


# ------------------------------------------------------------------ array-likes

class _Interface:
    def __init__(self, a):
        self.a = a

    @property
    def __array_interface__(self):
        return self.a.__array_interface__


class _ArrayMethod:
    def __init__(self, a):
        self.a = a

    def __array__(self, dtype=None, copy=None):
        return self.a


def _torch_cases(torch):
    return {
        "f32": lambda: torch.arange(4.0),
        "i32 transposed": lambda: torch.arange(6, dtype=torch.int32).reshape(2, 3).t(),
        "bool": lambda: torch.tensor([True, False]),
        "0-d f64": lambda: torch.tensor(3.5, dtype=torch.float64),
        "empty": lambda: torch.zeros(0, 3, dtype=torch.int16),
        "requires grad": lambda: torch.ones(2, requires_grad=True),
        "np f64": lambda: np.arange(3.0),
        "np stepped": lambda: np.arange(12.0).reshape(3, 4)[:, ::2],
        "np f32 scalar": lambda: np.float32(2.5),
        "np i16 scalar": lambda: np.int16(7),
        "np bool scalar": lambda: np.bool_(True),
        "list of 0-d tensors": lambda: [torch.tensor(1.0), torch.tensor(2.0)],
        "list of 1-element tensors": lambda: [torch.ones(1), torch.zeros(1)],
        "list of 2-element tensors": lambda: [torch.ones(2), torch.zeros(2)],
        "list of int32 tensors": lambda: [torch.tensor(1, dtype=torch.int32),
                                          torch.tensor(2, dtype=torch.int32)],
        "tensor and float": lambda: [torch.tensor(1, dtype=torch.int32), 2.5],
        "f64 tensor and int": lambda: [torch.tensor(1.5, dtype=torch.float64), 2],
        "nested tensors": lambda: [[1, 2], [torch.tensor(3), 4]],
        "list of arrays": lambda: [np.ones(2), np.zeros(2)],
        "list of np scalars": lambda: [np.float16(1), 1.5],
        "big endian": lambda: np.arange(3, dtype=">i4"),
    }


def _to_ember(torch, obj):
    """The same data as ember sees it: torch tensors in lists become ember tensors."""
    if isinstance(obj, list):
        return [_to_ember(torch, o) for o in obj]
    if isinstance(obj, torch.Tensor):
        return ember.from_dlpack(obj.detach().clone())
    return obj


@pytest.mark.parametrize("fn", ["tensor", "as_tensor"])
def test_array_likes_as_torch(torch, fn):
    for what, make in _torch_cases(torch).items():
        for data_of in ("torch", "ember"):
            src = make()
            data = src if data_of == "torch" else _to_ember(torch, src)
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    want = getattr(torch, fn)(src)
            except Exception as e:  # noqa: BLE001 - compared with ember's
                with pytest.raises(type(e)):
                    getattr(ember, fn)(data)
                continue
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                got = getattr(ember, fn)(data)
            label = f"{fn}({what}, {data_of} data)"
            assert str(got.dtype).split(".")[1] == str(want.dtype).split(".")[1], label
            assert tuple(got.shape) == tuple(want.shape), label
            np.testing.assert_array_equal(got.numpy(), want.detach().numpy(), err_msg=label)
            if data_of == "ember" and isinstance(data, list):
                continue
            src_ptr = src.data_ptr() if isinstance(src, torch.Tensor) else \
                src.ctypes.data if isinstance(src, np.ndarray) else None
            shares = src_ptr is not None and want.numel() > 0 and \
                want.data_ptr() == src_ptr
            if data_of == "ember" and isinstance(data, ember.Tensor):
                src_ptr = data.data_ptr()
            assert (got.numel() > 0 and got.data_ptr() == src_ptr) == shares, label
            if shares:
                assert got.stride() == want.stride(), label


def test_as_tensor_with_dtype_converts(torch):
    x = torch.arange(3, dtype=torch.int32)
    t = ember.as_tensor(x, dtype=ember.float32)
    assert t.dtype is ember.float32 and t.data_ptr() != x.data_ptr()
    assert ember.as_tensor(x, dtype=ember.int32).data_ptr() == x.data_ptr()
    c = ember.tensor(x)
    assert c.data_ptr() != x.data_ptr() and c.dtype is ember.int32


def test_objects_with_array_protocols():
    a = np.arange(6, dtype=np.int32).reshape(2, 3)
    for obj in (_Interface(a), _ArrayMethod(a)):
        t = ember.as_tensor(obj)
        assert t.dtype is ember.int32 and t.data_ptr() == a.ctypes.data
        c = ember.tensor(obj)
        assert c.data_ptr() != a.ctypes.data and c.tolist() == a.tolist()
        assert ember.as_tensor(obj, dtype=ember.float64).dtype is ember.float64
    assert ember.tensor([_ArrayMethod(np.ones(2)), _ArrayMethod(np.zeros(2))]).shape == (2, 2)
    with pytest.raises(TypeError, match="infer dtype"):
        ember.tensor(_ArrayMethod(np.array([object()])))
    with pytest.raises(TypeError, match="infer dtype"):
        ember.tensor(object())


# ------------------------------------------------------------------ bfloat16 and complex


def test_bfloat16_both_ways_with_torch(torch):
    """NumPy's DLPack refuses bfloat16; ember's own capsules carry it, zero-copy."""
    x = torch.randn(3, 5).to(torch.bfloat16)[:, 1:]
    e = ember.from_dlpack(x)
    assert e.dtype is ember.bfloat16 and e.data_ptr() == x.data_ptr()
    assert e.stride() == x.stride()
    np.testing.assert_array_equal(_values(e), x.float().numpy())
    e.mul_(2)                                  # a write seen by torch
    np.testing.assert_array_equal(_values(e), x.float().numpy())
    for make in (ember.tensor, ember.as_tensor):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            got = make(x)
        assert got.dtype is ember.bfloat16
        np.testing.assert_array_equal(_values(got), x.float().numpy())
    assert ember.as_tensor(x).data_ptr() == x.data_ptr()
    assert ember.tensor(x).data_ptr() != x.data_ptr()
    t = ember.linspace(-2, 2, 7).to(ember.bfloat16)
    back = torch.from_dlpack(t)
    assert back.dtype is torch.bfloat16 and back.data_ptr() == t.data_ptr()
    assert torch.equal(back, torch.linspace(-2, 2, 7).to(torch.bfloat16))
    cap = torch.utils.dlpack.to_dlpack(torch.ones(4, dtype=torch.bfloat16))
    assert ember.from_dlpack(cap).tolist() == [1.0] * 4
    with pytest.raises(RuntimeError, match="consumed only once"):
        ember.from_dlpack(cap)


def test_bfloat16_lifetimes(torch):
    x = torch.arange(100.0).to(torch.bfloat16)
    e = ember.from_dlpack(x[3:])
    del x
    gc.collect()
    torch.randn(1000)
    assert e[0].item() == 3.0 and e[-1].item() == 99.0
    t = ember.arange(50.0).to(ember.bfloat16)
    tt = torch.from_dlpack(t[2:])
    del t
    gc.collect()
    ember.randn(1000)
    assert tt[0].item() == 2.0 and tt[-1].item() == 49.0


def test_complex_both_ways(torch):
    x = torch.randn(4, 3, dtype=torch.complex64).t()
    e = ember.from_dlpack(x)
    assert e.dtype is ember.complex64 and e.data_ptr() == x.data_ptr()
    assert e.stride() == x.stride()
    np.testing.assert_array_equal(e.numpy(), x.numpy())
    z = ember.tensor([1 + 2j, -1j], dtype=ember.complex128)
    tz = torch.from_dlpack(z)
    assert tz.dtype is torch.complex128 and tz.data_ptr() == z.data_ptr()
    a = np.from_dlpack(z)
    assert a.dtype == np.complex128 and a.ctypes.data == z.data_ptr()
