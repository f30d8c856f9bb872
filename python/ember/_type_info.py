"""ember.finfo and ember.iinfo: the numeric limits of a floating point or integer dtype,
with PyTorch's attribute names (NumPy's limits are the same IEEE and two's complement
numbers)."""
import numpy as np

from . import _C


def _name(dtype):
    return str(dtype).split(".")[-1]


class finfo:
    """bits, eps, max, min, tiny (= smallest_normal), resolution and dtype of a floating
    point dtype (the default dtype when none is given)."""
    __slots__ = ("bits", "eps", "max", "min", "tiny", "smallest_normal", "resolution",
                 "dtype")

    def __init__(self, type=None):
        if type is None:
            type = _C.get_default_dtype()
        # a complex dtype answers for its parts, as torch.finfo does
        type = {_C.complex64: _C.float32, _C.complex128: _C.float64}.get(type, type)
        if not isinstance(type, _C.dtype) or not type.is_floating_point:
            raise TypeError("torch.finfo() requires a floating point input type. Use "
                            "torch.iinfo to handle 'torch.finfo'")
        info = np.finfo(type.numpy_dtype)
        self.bits = int(info.bits)
        self.eps = float(info.eps)
        self.max = float(info.max)
        self.min = float(info.min)
        self.tiny = self.smallest_normal = float(info.smallest_normal)
        self.resolution = 10.0 ** -int(info.precision)
        self.dtype = _name(type)

    def __eq__(self, other):
        return isinstance(other, finfo) and self.dtype == other.dtype

    def __hash__(self):
        return hash(("finfo", self.dtype))

    def __repr__(self):
        return (f"finfo(resolution={self.resolution:g}, min={self.min:g}, max={self.max:g}, "
                f"eps={self.eps:g}, smallest_normal={self.smallest_normal:g}, "
                f"tiny={self.tiny:g}, dtype={self.dtype})")


class iinfo:
    """bits, max, min and dtype of an integer dtype."""
    __slots__ = ("bits", "max", "min", "dtype")

    def __init__(self, type):
        if not isinstance(type, _C.dtype) or type.is_floating_point:
            raise TypeError("torch.iinfo() requires an integer input type. Use torch.finfo "
                            "to handle 'torch.iinfo'")
        if type is _C.bool:
            raise TypeError("torch.bool is not supported by torch.iinfo")
        info = np.iinfo(type.numpy_dtype)
        self.bits = int(info.bits)
        self.max = int(info.max)
        self.min = int(info.min)
        self.dtype = _name(type)

    def __eq__(self, other):
        return isinstance(other, iinfo) and self.dtype == other.dtype

    def __hash__(self):
        return hash(("iinfo", self.dtype))

    def __repr__(self):
        return f"iinfo(min={self.min:g}, max={self.max:g}, dtype={self.dtype})"
