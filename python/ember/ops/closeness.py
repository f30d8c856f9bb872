"""Comparing whole tensors: isclose, allclose, equal (composites over elementwise ops,
with PyTorch's checks and messages)."""
from .. import _C
from . import api as O
from .registry import CUSTOM, op


def _isnan(x):
    """NaN in either part of a complex number."""
    if x.is_complex():
        return O.logical_or(O.isnan(O.real(x)), O.isnan(O.imag(x)))
    return O.isnan(x)


def _isclose(self, other, rtol, atol, equal_nan):
    if self.dtype is not other.dtype:
        raise RuntimeError(f"{self.dtype._torch_name} did not match {other.dtype._torch_name}")
    if rtol < 0:
        raise RuntimeError(f"rtol must be greater than or equal to zero, but got {rtol:g}")
    if atol < 0:
        raise RuntimeError(f"atol must be greater than or equal to zero, but got {atol:g}")
    close = O.eq(self, other)
    if equal_nan and (self.is_floating_point() or self.is_complex()):
        close = O.logical_or(close, O.logical_and(_isnan(self), _isnan(other)))
    if rtol == 0 and atol == 0:
        return close
    a, b = self, other
    if not a.is_floating_point() and not a.is_complex():   # integers and bool: default dtype
        a, b = a.to(_C.get_default_dtype()), b.to(_C.get_default_dtype())
    allowed = O.add(O.abs(O.mul(b, rtol)), atol)
    actual = O.abs(O.sub(a, b))
    return O.logical_or(close, O.logical_and(O.isfinite(actual), O.le(actual, allowed)))


op("isclose(Tensor self, Tensor other, float rtol=1e-05, float atol=1e-08, "
   "bool equal_nan=False) -> Tensor", CUSTOM, "python", composite=True, impl=_isclose,
   doc="|self - other| <= atol + rtol * |other| elementwise (equal values, and NaNs with "
       "equal_nan, always close); both of one dtype.")


def _allclose(self, other, rtol, atol, equal_nan):
    return bool(O.all(_isclose(self, other, rtol, atol, equal_nan)).item())


op("allclose(Tensor self, Tensor other, float rtol=1e-05, float atol=1e-08, "
   "bool equal_nan=False) -> bool", CUSTOM, "python", composite=True, impl=_allclose,
   doc="Whether isclose holds everywhere (a Python bool).")


def _equal(self, other):
    if tuple(self.shape) != tuple(other.shape):
        return False
    return bool(O.all(O.eq(self, other)).item())


op("equal(Tensor self, Tensor other) -> bool", CUSTOM, "python", composite=True,
   impl=_equal, doc="Whether both have the same shape and equal elements (NaN is not "
                    "equal to itself); a Python bool.")
