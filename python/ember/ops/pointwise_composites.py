"""Elementwise functions PyTorch offers beside the kernels' ones, written over existing
ops (composites: gradients from the ops they call): sgn, xlogy, logit, logaddexp(2),
hypot, copysign, signbit, deg2rad, rad2deg, sinc, heaviside, fmax, fmin, positive,
float_power, and the activations selu, celu, hardswish, hardsigmoid, softsign,
tanhshrink, softshrink, hardshrink, threshold, prelu; fmod is a kernel (NumPy's fmod).

Where PyTorch's formula picks a branch per element (xlogy at 0, sinc at 0, the shrinks)
the composite selects with where, so the gradient of the branch not taken is zero."""
import math

from .. import _C
from . import api as O
from .registry import BINARY, CUSTOM, INTEGRAL, NOT_BOOL, op
from ..compiler.lowerings import extern


def _floating(self):
    """self, or self in the default dtype when it is an integer/bool tensor."""
    if self.dtype.is_floating_point or self.dtype.is_complex:
        return self
    return O._to_copy(self, dtype=_C.get_default_dtype())


def _float_pair(self, other):
    """self and other (a tensor or a number) as tensors of their promoted dtype, made
    floating (the default dtype for integers), as PyTorch's float binary ops compute."""
    rt = _C.result_type(self, other)
    if not (rt.is_floating_point or rt.is_complex):
        rt = _C.get_default_dtype()
    a = self if isinstance(self, _C.Tensor) and self.dtype is rt else (
        O._to_copy(self, dtype=rt) if isinstance(self, _C.Tensor) else O.full((), self,
                                                                              dtype=rt))
    b = other if isinstance(other, _C.Tensor) and other.dtype is rt else (
        O._to_copy(other, dtype=rt) if isinstance(other, _C.Tensor) else O.full((), other,
                                                                                dtype=rt))
    return a, b


def _no_complex(kernel, dtype):
    if dtype.is_complex:
        raise NotImplementedError(f'"{kernel}" not implemented for \'{dtype._torch_name}\'')


def _not_for_result(kernel, self, other, ints=True, complex_ok=False):
    """_not_for on the dtype self and other promote to."""
    _not_for(kernel, O.empty([0], dtype=_C.result_type(self, other)), ints, complex_ok)


def _not_for(kernel, t, ints=True, complex_ok=False):
    """PyTorch's NotImplementedError for a kernel without a bool (and, with ints, an
    integer or complex) loop."""
    if not isinstance(t, _C.Tensor) or (complex_ok and t.dtype.is_complex):
        return
    if t.dtype is _C.bool or (ints and not t.dtype.is_floating_point) or t.dtype.is_complex:
        raise NotImplementedError(f'"{kernel}" not implemented for \'{t.dtype._torch_name}\'')


def _sgn(self):
    if not self.dtype.is_complex:
        return O.sign(self)
    mag = O.abs(self)
    zero = O.eq(mag, 0)
    return O.where(zero, 0, O.div(self, O.where(zero, 1, mag)))


op("sgn(Tensor self) -> Tensor", CUSTOM, "python", composite=True, impl=_sgn,
   doc="self / |self| for complex tensors (0 at 0); sign for real ones.")


def _xlogy(self, other):
    _no_complex("xlogy_cpu", _C.result_type(self, other))
    s, o = _float_pair(self, other)
    zero = O.eq(s, 0) & ~O.isnan(o)
    out = O.mul(s, O.log(O.where(zero, 1, o)))    # no 0 * log(0) in either branch
    return O.where(zero, O.zeros_like(out), out)


op("xlogy(Tensor self, Tensor other) -> Tensor", CUSTOM, "python", composite=True,
   impl=_xlogy, numbers=True,
   doc="self * log(other), 0 where self is 0 (unless other is NaN).")


def _logit(self, eps=None):
    _no_complex("logit_cpu", self.dtype)
    x = _floating(self)
    if eps is not None:
        x = O.clamp(x, eps, 1 - eps)
    return O.log(O.div(x, O.add(O.neg(x), 1)))


op("logit(Tensor self, float? eps=None) -> Tensor", CUSTOM, "python", composite=True,
   impl=_logit, doc="log(p / (1 - p)), p clamped to [eps, 1 - eps] when eps is given.")


def _logaddexp(self, other, base=None):
    _not_for_result("logaddexp_cpu" if base is None else "logaddexp2_cpu", self, other,
                    complex_ok=base is None)
    a, b = _float_pair(self, other)
    hi = O.maximum(a, b)
    finite = O.isfinite(hi)
    m = O.where(finite, hi, O.zeros_like(hi))
    if base is None:
        s = O.log(O.add(O.exp(O.sub(a, m)), O.exp(O.sub(b, m))))
    else:
        s = O.div(O.log(O.add(O.exp2(O.sub(a, m)), O.exp2(O.sub(b, m)))), math.log(2.0))
    # both -inf: -inf; either +inf: +inf (hi), as PyTorch
    return O.where(finite, O.add(s, m), hi)


op("logaddexp(Tensor self, Tensor other) -> Tensor", CUSTOM, "python", composite=True,
   impl=_logaddexp, doc="log(exp(self) + exp(other)), computed without overflow.")
op("logaddexp2(Tensor self, Tensor other) -> Tensor", CUSTOM, "python", composite=True,
   impl=lambda self, other: _logaddexp(self, other, 2),
   doc="log2(2 ** self + 2 ** other), computed without overflow.")


def _hypot(self, other):
    _not_for_result("hypot_cpu", self, other)
    return O.sqrt(O.add(O.mul(self, self), O.mul(other, other)))


op("hypot(Tensor self, Tensor other) -> Tensor", CUSTOM, "python", composite=True,
   impl=_hypot, doc="sqrt(self ** 2 + other ** 2) (floating tensors).")


def _signbit(self):
    if self.dtype.is_complex:
        raise NotImplementedError("signbit is not implemented for complex tensors.")
    if self.dtype is _C.bool or self.dtype is _C.uint8:
        return O.zeros_like(self, dtype=_C.bool)
    if not self.dtype.is_floating_point:
        return O.lt(self, 0)
    # -0.0 and negative NaNs have the bit: 1 / x is -inf for -0.0
    neg = O.lt(self, 0) | (O.eq(self, 0) & O.lt(O.reciprocal(self), 0))
    return neg


op("signbit(Tensor self) -> Tensor", CUSTOM, "python", composite=True, impl=_signbit,
   doc="True where the sign bit is set (negative numbers and -0.0).")


def _copysign(self, other):
    _no_complex("copysign_cpu", _C.result_type(self, other))
    a, o = _float_pair(self, other)
    mag = O.abs(a)
    return O.where(_signbit(o), O.neg(mag), mag)


op("copysign(Tensor self, Tensor other) -> Tensor", CUSTOM, "python", composite=True,
   impl=_copysign, numbers=True, doc="|self| with the sign of other (its sign bit).")

def _angle_units(name, self, factor):
    if self.dtype.is_complex:
        raise RuntimeError(f"{name} is not supported for complex tensors.")
    return O.mul(_floating(self), factor)


op("deg2rad(Tensor self) -> Tensor", CUSTOM, "python", composite=True,
   impl=lambda self: _angle_units("deg2rad", self, math.pi / 180.0),
   doc="Degrees to radians.")
op("rad2deg(Tensor self) -> Tensor", CUSTOM, "python", composite=True,
   impl=lambda self: _angle_units("rad2deg", self, 180.0 / math.pi),
   doc="Radians to degrees.")


def _sinc(self):
    x = _floating(self)
    zero = O.eq(x, 0)
    px = O.mul(O.where(zero, 1, x), math.pi)
    return O.where(zero, O.ones_like(x), O.div(O.sin(px), px))


op("sinc(Tensor self) -> Tensor", CUSTOM, "python", composite=True, impl=_sinc,
   doc="sin(pi x) / (pi x), 1 at 0.")


def _heaviside(self, values):
    if self.dtype.is_complex or values.dtype.is_complex:
        raise RuntimeError("heaviside is not yet implemented for complex tensors.")
    if self.dtype is not values.dtype:
        raise RuntimeError("heaviside is not yet implemented for tensors with different "
                           "dtypes")
    one, zero = O.ones_like(self), O.zeros_like(self)
    return O.where(O.eq(self, 0), values, O.where(O.lt(self, 0), zero, one))


op("heaviside(Tensor self, Tensor values) -> Tensor", CUSTOM, "python", composite=True,
   impl=_heaviside, doc="0 where self < 0, values where self == 0, 1 where self > 0.")


def _fmax(self, other, pick_max=True):
    if self.dtype.is_complex or other.dtype.is_complex:
        raise RuntimeError(f"{'fmax' if pick_max else 'fmin'} not implemented for complex "
                           "tensors.")
    best = O.maximum(self, other) if pick_max else O.minimum(self, other)
    return O.where(O.isnan(self), other, O.where(O.isnan(other), self, best))


op("fmax(Tensor self, Tensor other) -> Tensor", CUSTOM, "python", composite=True,
   impl=_fmax, doc="maximum, but a NaN loses to a number (NaN only where both are).")
op("fmin(Tensor self, Tensor other) -> Tensor", CUSTOM, "python", composite=True,
   impl=lambda self, other: _fmax(self, other, False),
   doc="minimum, but a NaN loses to a number (NaN only where both are).")

def _rsub(self, other, alpha=1):
    s = O.mul(self, alpha) if alpha != 1 else self
    return O.sub(other, s) if isinstance(other, _C.Tensor) else O.add(O.neg(s), other)


op("rsub(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor", CUSTOM, "python",
   composite=True, method=False, impl=_rsub, numbers=True,
   doc="other - alpha * self.")

def _positive(self):
    if self.dtype is _C.bool:
        raise RuntimeError("The `+` operator, on a bool tensor is not supported.")
    return self


op("positive(Tensor(a) self) -> Tensor(a)", CUSTOM, "python", composite=True,
   impl=_positive, doc="self (bool tensors refused, as PyTorch's).")


def _float_power(self, exponent):
    if isinstance(self, _C.Tensor) and (self.dtype.is_complex or (
            isinstance(exponent, _C.Tensor) and exponent.dtype.is_complex) or
            isinstance(exponent, complex)):
        dt = _C.complex128
    else:
        dt = _C.float64
    s = O._to_copy(self, dtype=dt) if isinstance(self, _C.Tensor) else self
    e = O._to_copy(exponent, dtype=dt) if isinstance(exponent, _C.Tensor) else exponent
    if not isinstance(s, _C.Tensor):
        s = O.full((), s, dtype=dt)
    return O.pow(s, e)


op("float_power(Tensor self, Tensor exponent) -> Tensor", CUSTOM, "python", composite=True,
   impl=_float_power, numbers=True,
   doc="pow computed in float64 (complex128 for complex operands).")


def _fmod_backward(g, out, self, other):
    return (g if isinstance(self, _C.Tensor) else None,
            -g * O.trunc(O.div(self, other)) if isinstance(other, _C.Tensor) else None)


op("fmod(Tensor self, Tensor other) -> Tensor",
   BINARY, "int_checked", ufunc="fmod", rule=NOT_BOOL, prim=True, checks_values=True,
   lower=extern, inplace_variant=True, backward=_fmod_backward,
   doc="self - trunc(self / other) * other: the sign of self (C's fmod); integer "
       "division by zero is an error.")

# ------------------------------------------------------------------ activations

# SELU's constants (Klambauer et al., "Self-Normalizing Neural Networks", 2017)
_SELU_ALPHA = 1.6732632423543772848170429916717
_SELU_SCALE = 1.0507009873554804934193349852946


op("selu(Tensor self) -> Tensor", CUSTOM, "python", composite=True, method=False,
   impl=lambda self: O.elu(self, _SELU_ALPHA, _SELU_SCALE),
   doc="scale * elu(self, alpha) with SELU's fixed alpha and scale.")


def _celu(self, alpha=1.0):
    if alpha == 0:
        raise RuntimeError("ZeroDivisionError")
    return O.elu(self, alpha, 1.0, 1.0 / alpha)


op("celu(Tensor self, Scalar alpha=1.0) -> Tensor", CUSTOM, "python", composite=True,
   method=False, impl=_celu, doc="max(0, x) + min(0, alpha * (exp(x / alpha) - 1)).")


def _hardsigmoid(self, kernel="hardsigmoid_cpu"):
    _not_for(kernel, self)
    return O.div(O.hardtanh(O.add(self, 3.0), 0.0, 6.0), 6.0)


op("hardsigmoid(Tensor self) -> Tensor", CUSTOM, "python", composite=True, method=False,
   impl=_hardsigmoid, doc="relu6(x + 3) / 6.")
op("hardswish(Tensor self) -> Tensor", CUSTOM, "python", composite=True, method=False,
   impl=lambda self: O.mul(self, _hardsigmoid(self, "hardswish_cpu")), doc="x * relu6(x + 3) / 6.")
op("softsign(Tensor self) -> Tensor", CUSTOM, "python", composite=True, method=False,
   impl=lambda self: O.div(self, O.add(O.abs(self), 1)), doc="x / (1 + |x|).")
op("tanhshrink(Tensor self) -> Tensor", CUSTOM, "python", composite=True, method=False,
   impl=lambda self: O.sub(self, O.tanh(self)), doc="x - tanh(x).")


def _check_lambd(name, lambd):
    if lambd < 0:
        raise RuntimeError(f"lambda must be greater or equal to 0, but found to be {lambd}.")


def _softshrink(self, lambd=0.5):
    _not_for("softshrink_check", self)
    _check_lambd("softshrink", lambd)
    zero = O.mul(self, 0)       # NaN stays NaN
    return O.where(O.gt(self, lambd), O.sub(self, lambd),
                   O.where(O.lt(self, -lambd), O.add(self, lambd), zero))


def _hardshrink(self, lambd=0.5):
    _not_for("hardshrink_cpu", self)
    inside = O.le(O.abs(self), lambd)       # NaN is not inside: it stays NaN
    return O.where(inside, O.zeros_like(self), self)


op("softshrink(Tensor self, Scalar lambd=0.5) -> Tensor", CUSTOM, "python", composite=True,
   method=False, impl=_softshrink,
   doc="x - lambd above lambd, x + lambd below -lambd, 0 between.")
op("hardshrink(Tensor self, Scalar lambd=0.5) -> Tensor", CUSTOM, "python", composite=True,
   impl=_hardshrink, doc="x where |x| > lambd, else 0.")


def _threshold(self, threshold, value):
    _not_for("threshold_cpu", self, ints=False)
    if not self.dtype.is_floating_point:
        lo, hi = {_C.uint8: (0, 255), _C.int8: (-128, 127), _C.int16: (-2 ** 15, 2 ** 15 - 1),
                  _C.int32: (-2 ** 31, 2 ** 31 - 1)}.get(self.dtype, (-2 ** 63, 2 ** 63 - 1))
        if not (lo <= int(value) <= hi and lo <= int(threshold) <= hi):
            raise RuntimeError(f"value cannot be converted to type {str(self.dtype).split('.')[-1]}_t "
                               "without overflow")
        value = int(value)
    return O.where(O.gt(self, threshold), self, O.full_like(self, value))


op("threshold(Tensor self, Scalar threshold, Scalar value) -> Tensor", CUSTOM, "python",
   composite=True, method=False, impl=_threshold,
   doc="x where x > threshold, else value.")


def _prelu(self, weight):
    _not_for("prelu_cpu", self)
    if weight.ndim > 1:
        raise RuntimeError("prelu: Expected `weight` to be a scalar or 1D tensor, but got: "
                           f"ndim = {weight.ndim}")
    n = weight.numel()
    if n != 1:
        channels = self.shape[1] if self.ndim >= 2 else 0
        if self.ndim == 0 or channels != n:
            raise RuntimeError(f"Mismatch of parameter numbers and input channel size. Found "
                               f"parameter numbers = {n} and channel size = "
                               f"{channels if self.ndim >= 2 else 1}.")
        w = O.reshape(weight, [1, n] + [1] * (self.ndim - 2))
    else:
        w = O.reshape(weight, [])
    return O.where(O.gt(self, 0), self, O.mul(w, self))


op("prelu(Tensor self, Tensor weight) -> Tensor", CUSTOM, "python", composite=True,
   impl=_prelu, doc="x where x > 0, else weight * x (weight per channel, dim 1, or one).")

# ------------------------------------------------------------------ tests and integers


def _isinf_sign(self, positive):
    if self.dtype.is_complex:
        raise RuntimeError(f"{'isposinf' if positive else 'isneginf'} does not support "
                           "complex inputs.")
    if not self.dtype.is_floating_point:
        return O.zeros_like(self, dtype=_C.bool)
    return O.eq(self, math.inf if positive else -math.inf)


op("isposinf(Tensor self) -> Tensor", CUSTOM, "python", composite=True,
   impl=lambda self: _isinf_sign(self, True), doc="True where self is +inf.")
op("isneginf(Tensor self) -> Tensor", CUSTOM, "python", composite=True,
   impl=lambda self: _isinf_sign(self, False), doc="True where self is -inf.")


def _isreal(self):
    if not self.dtype.is_complex:
        return O.ones_like(self, dtype=_C.bool)
    return O.eq(O.imag(self), 0)


op("isreal(Tensor self) -> Tensor", CUSTOM, "python", composite=True, impl=_isreal,
   doc="True where the imaginary part is 0 (everywhere for real tensors).")

op("gcd(Tensor self, Tensor other) -> Tensor",
   BINARY, "ufunc", ufunc="gcd", rule=INTEGRAL | NOT_BOOL, prim=True, lower=extern,
   inplace_variant=True, numbers=False,
   doc="The greatest common divisor (non-negative) of integers, elementwise.")
op("lcm(Tensor self, Tensor other) -> Tensor",
   BINARY, "ufunc", ufunc="lcm", rule=INTEGRAL | NOT_BOOL, prim=True, lower=extern,
   inplace_variant=True, numbers=False,
   doc="The least common multiple (non-negative) of integers, elementwise.")
