"""Padding layers: ReflectionPad, ReplicationPad, CircularPad, ConstantPad and ZeroPad in
1-d, 2-d and 3-d (F.pad's modes as layers), with PyTorch's padding tuples and reprs."""
from .. import functional as F
from .module import Module


def _ntuple(v, n):
    if isinstance(v, (tuple, list)):
        return tuple(v)
    return (v,) * n


class _PadNd(Module):
    """F.pad(input, padding, mode); padding is one int or 2 * nd ints, last dim first."""

    __constants__ = ["padding"]
    _mode = "constant"
    _nd = 1

    def __init__(self, padding):
        super().__init__()
        self.padding = _ntuple(padding, 2 * self._nd)

    def forward(self, input):
        return F.pad(input, self.padding, self._mode)

    def extra_repr(self):
        return f"{self.padding}"


class _CircularPadNd(_PadNd):
    _mode = "circular"

    def forward(self, input):
        lo = self._nd + 1
        if input.ndim not in (lo, lo + 1):
            raise ValueError(f"expected {lo}D or {lo + 1}D input (got {input.ndim}D input)")
        return F.pad(input, self.padding, "circular")


class _ConstantPadNd(Module):
    __constants__ = ["padding", "value"]
    _nd = 1

    def __init__(self, padding, value):
        super().__init__()
        self.value = value
        self.padding = _ntuple(padding, 2 * self._nd)

    def forward(self, input):
        return F.pad(input, self.padding, "constant", self.value)

    def extra_repr(self):
        return f"padding={self.padding}, value={self.value}"


class _ZeroPadNd(_ConstantPadNd):
    def __init__(self, padding):
        super().__init__(padding, 0.0)

    def extra_repr(self):
        return f"{self.padding}"


class ReflectionPad1d(_PadNd):
    """Pads the last dim by reflecting the input at its border."""

    _mode = "reflect"
    _nd = 1


class ReflectionPad2d(_PadNd):
    """Pads the last 2 dims by reflecting the input at its border."""

    _mode = "reflect"
    _nd = 2


class ReflectionPad3d(_PadNd):
    """Pads the last 3 dims by reflecting the input at its border."""

    _mode = "reflect"
    _nd = 3


class ReplicationPad1d(_PadNd):
    """Pads the last dim by repeating the border values."""

    _mode = "replicate"
    _nd = 1


class ReplicationPad2d(_PadNd):
    """Pads the last 2 dims by repeating the border values."""

    _mode = "replicate"
    _nd = 2


class ReplicationPad3d(_PadNd):
    """Pads the last 3 dims by repeating the border values."""

    _mode = "replicate"
    _nd = 3


class CircularPad1d(_CircularPadNd):
    """Pads the last dim circularly (wrapping around)."""

    _nd = 1


class CircularPad2d(_CircularPadNd):
    """Pads the last 2 dims circularly (wrapping around)."""

    _nd = 2


class CircularPad3d(_CircularPadNd):
    """Pads the last 3 dims circularly (wrapping around)."""

    _nd = 3


class ConstantPad1d(_ConstantPadNd):
    """Pads the last dim with a constant value."""

    _nd = 1


class ConstantPad2d(_ConstantPadNd):
    """Pads the last 2 dims with a constant value."""

    _nd = 2


class ConstantPad3d(_ConstantPadNd):
    """Pads the last 3 dims with a constant value."""

    _nd = 3


class ZeroPad1d(_ZeroPadNd, ConstantPad1d):
    """Pads the last dim with zeros."""


class ZeroPad2d(_ZeroPadNd, ConstantPad2d):
    """Pads the last 2 dims with zeros."""


class ZeroPad3d(_ZeroPadNd, ConstantPad3d):
    """Pads the last 3 dims with zeros."""
