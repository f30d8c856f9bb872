"""Making tensors from Python data: ember.tensor, ember.as_tensor, Tensor(...)."""
from __future__ import annotations

import numbers
import warnings

import numpy as np

from . import _C, _dtypes


def dtype_from_numpy(np_dtype):
    """The ember dtype of a NumPy dtype; TypeError for dtypes ember lacks."""
    np_dtype = np.dtype(np_dtype)
    for d in _dtypes.ALL:
        if d.numpy_dtype == np_dtype:
            return d
    raise TypeError(f"can't convert np.ndarray of type numpy.{np_dtype}. The only supported "
                    "types are: float64, float32, float16, complex64, complex128, int64, "
                    "int32, int16, int8, uint8, and bool.")


def _check_byte_order(arr):
    if not arr.dtype.isnative:
        raise ValueError("given numpy array has byte order different from the native byte "
                         "order. Conversion between byte orders is currently not supported.")


_PLAIN = frozenset({int, float, bool, list, tuple, str, type(None)})


def _array_like(data):
    """data itself, or what an array-like of another library (a PyTorch tensor, a NumPy
    scalar, an object with __array_interface__ or __array__) is as an ember tensor or a
    NumPy array sharing its memory."""
    if type(data) in _PLAIN or (isinstance(data, (_C.Tensor, np.ndarray, list, tuple,
                                                   numbers.Number, str)) and
                                not isinstance(data, np.generic)):
        return data
    from ._interop import array_like
    converted = array_like(data)
    return data if converted is None else converted


def _infer_dtype(data):
    """PyTorch's inference for Python data: any float -> default dtype; else int64; all
    bools -> bool. NumPy arrays and scalars keep their dtype."""
    kinds = set()

    def walk(x):
        x = _array_like(x) if not isinstance(x, (list, tuple)) else x
        if isinstance(x, _C.Tensor):
            kinds.add(("tensor", x.dtype))
        elif isinstance(x, np.ndarray) or isinstance(x, np.generic):
            kinds.add(("numpy", np.asarray(x).dtype))
        elif isinstance(x, bool):
            kinds.add("bool")
        elif isinstance(x, numbers.Integral):
            kinds.add("int")
        elif isinstance(x, numbers.Real):
            kinds.add("float")
        elif isinstance(x, numbers.Complex):
            kinds.add("complex")
        elif isinstance(x, (list, tuple)):
            for y in x:
                walk(y)
        else:
            raise TypeError(f"Could not infer dtype of {type(x).__name__}")

    walk(data)
    dtypes = [k[1] for k in kinds if isinstance(k, tuple) and k[0] == "tensor"]
    dtypes += [dtype_from_numpy(k[1]) for k in kinds if isinstance(k, tuple) and
               k[0] == "numpy"]
    result = None
    for d in dtypes:
        result = d if result is None else _C.promote_types(result, d)
    if "complex" in kinds:
        default = _C.complex128 if _C.get_default_dtype() is _C.float64 else _C.complex64
        result = _C.promote_types(result, default) if result else default
    elif "float" in kinds:
        result = _C.promote_types(result, _C.get_default_dtype()) if result else \
            _C.get_default_dtype()
    elif "int" in kinds:
        result = _C.promote_types(result, _C.int64) if result else _C.int64
    elif "bool" in kinds:
        result = result or _C.bool
    return result if result is not None else _C.get_default_dtype()


def _to_numpy(data):
    """Nested sequences as a NumPy array. As in PyTorch, a tensor inside a sequence is a
    scalar: it must have one element."""
    def conv(x):
        if isinstance(x, (list, tuple)):
            return [conv(y) for y in x]
        x = _array_like(x)
        if isinstance(x, _C.Tensor):
            if x.numel() != 1:
                raise ValueError("only one element tensors can be converted to Python "
                                 "scalars")
            return x.item()
        return x
    converted = conv(data)
    try:
        return np.array(converted)
    except ValueError as e:
        raise ValueError(f"expected a rectangular nested sequence of numbers: {e}") from None


COPY_WARNING = ("To copy construct from a tensor, it is recommended to use "
                "sourceTensor.clone().detach() rather than ember.tensor(sourceTensor).")


def tensor(data, dtype=None, device=None, requires_grad=False, pin_memory=False):
    """A new tensor holding a copy of data (nested sequences, numbers, NumPy arrays and
    scalars, tensors of ember or of other libraries, objects with __array__)."""
    _check_device(device)
    if isinstance(data, _C.Tensor):
        warnings.warn(COPY_WARNING, UserWarning, stacklevel=2)
    data = _array_like(data)
    if isinstance(data, _C.Tensor):
        src = data.detach()
        out = src.clone() if dtype is None else src.to(dtype, copy=True)
    else:
        if isinstance(data, np.ndarray):
            _check_byte_order(data)
            inferred = dtype_from_numpy(data.dtype)
        else:
            inferred = _infer_dtype(data)
        target = dtype if dtype is not None else inferred
        raw = _to_numpy(data)
        if not isinstance(data, np.ndarray) and raw.dtype.kind in "iufO" and \
                not target.is_floating_point and target is not _C.bool:
            _check_int_range(raw, data, target)
        with np.errstate(over="ignore"):      # 2**64 into float16 is inf, silently
            arr = np.array(raw, dtype=target.numpy_dtype, copy=True)
        out = _C.from_numpy(arr)
    if requires_grad:
        out.requires_grad_(True)
    return out


_INT64 = (-(1 << 63), (1 << 63) - 1)


def _check_int_range(raw, data, target):
    """Python integers going into an integer or bool tensor, checked as PyTorch checks
    them: each must fit int64 (a ValueError otherwise), then the target dtype (a
    RuntimeError; an unsigned type also takes negatives down to -max, which wrap). Into
    bool any integer goes (nonzero is True)."""
    if raw.size == 0:
        return
    if raw.dtype.kind in "iu" and raw.dtype != np.uint64:
        lo, hi = int(raw.min()), int(raw.max())
    else:       # NumPy made the ints unsigned, float or objects: the Python ints
        ints = []

        def walk(x):
            if isinstance(x, (list, tuple)):
                for y in x:
                    walk(y)
            elif isinstance(x, int) and not isinstance(x, bool):
                ints.append(x)
        walk(data)
        if not ints:
            return
        lo, hi = min(ints), max(ints)
    if lo < _INT64[0] or hi > _INT64[1]:
        raise ValueError("Overflow when unpacking long long")
    info = np.iinfo(target.numpy_dtype)
    low = -int(info.max) if info.min == 0 else int(info.min)
    if lo < low or hi > int(info.max):
        raise RuntimeError(f"value cannot be converted to type {str(target).split('.')[-1]} "
                           f"without overflow")


def as_tensor(data, dtype=None, device=None):
    """data as a tensor, sharing its memory where PyTorch does: an ember tensor is
    returned itself, a NumPy array (or a NumPy view of an object with
    __array_interface__ / __array__) and a tensor of another library (through DLPack)
    are wrapped without a copy, unless dtype asks for another dtype."""
    _check_device(device)
    data = _array_like(data)
    if isinstance(data, _C.Tensor):
        return data if dtype is None or dtype is data.dtype else data.to(dtype)
    if isinstance(data, np.ndarray):
        _check_byte_order(data)
        if data.dtype.kind in "biuf" and all(s >= 0 for s in data.strides) and \
                all(s % data.dtype.itemsize == 0 for s in data.strides):
            t = _C.from_numpy(data)
            return t if dtype is None or dtype is t.dtype else t.to(dtype)
    return tensor(data, dtype=dtype)


def _check_device(device):
    if device is None:
        return
    name = device if isinstance(device, str) else getattr(device, "type", str(device))
    if name.split(":")[0] not in ("cpu",):
        raise RuntimeError(f"ember runs on the CPU only: device {device!r} is not available")


def legacy_new(cls, *args, **kwargs):
    """Tensor(*sizes) or Tensor(data): the default dtype, as torch.Tensor(...) does."""
    if kwargs:
        raise TypeError(f"Tensor() got unexpected keyword arguments {sorted(kwargs)}")
    dtype = _C.get_default_dtype()
    if not args:
        t = _C.from_numpy(np.empty((0,), dtype=dtype.numpy_dtype))
    elif all(isinstance(a, numbers.Integral) and not isinstance(a, bool) for a in args):
        t = _C.from_numpy(np.zeros(args, dtype=dtype.numpy_dtype))
    elif len(args) == 1:
        t = tensor(args[0], dtype=dtype) if not isinstance(args[0], _C.Tensor) else args[0]
    else:
        raise TypeError("Tensor() takes sizes (ints) or one sequence of data")
    if cls is not _C.Tensor:
        return _C.Tensor._make_subclass(cls, t, False)
    return t
