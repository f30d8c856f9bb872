"""Elementwise ops: arithmetic, transcendental functions, comparisons, logical and bitwise
ops, selection (where, clamp, lerp). The activations (gelu, silu, ...) are in
activations.py.

Kernels: the generic "ufunc" kernel where NumPy has a ufunc with PyTorch's semantics; C
loops (csrc/kernels/cloops.c) where it has none (erf, rsqrt, sign with PyTorch's NaN rule,
lerp); a few kernels chain ufuncs (clamp, addcmul). Every non-prim decomposes into prims.
"""
import math

from .. import _C
from . import meta as M
from .registry import (BINARY, BINARY_FLOAT, COMPARE, COMPLEX, COMPLEX_TO_REAL, CUSTOM,
                       FLOATING, INTEGRAL, NO_BOOL, NOT_BOOL, RECOMPUTE_CHEAP, UNARY,
                       UNARY_FLOAT, op)
from .. import prims as P
from ..compiler.lowerings import extern, libm, lower_add, lower_div, lower_pow, pointwise
from . import api as O

_LN2 = math.log(2.0)
_LN10 = math.log(10.0)
_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)


def _is_tensor(x):
    return isinstance(x, _C.Tensor)


def _cj(x):
    """conj(x) for the complex gradient formulas (grad * conj(f'(z))): x itself when real,
    so real graphs are unchanged."""
    if isinstance(x, complex):
        return x.conjugate()
    return O.conj(x) if _is_tensor(x) and x.dtype.is_complex else x


# prims-only helpers for decompositions

def _p_sub(a, b):
    return P.add(a, P.neg(b))


def _p_abs(x):
    """|x| with abs(-0.0) = +0.0 (0 - x where x <= 0)."""
    return P.where(P.le(x, 0), P.add(P.neg(x), 0), x)


def _p_minimum(a, b):
    """minimum(a, b), NaN-propagating, from where: a where a < b or a is NaN, else b."""
    return P.where(P.bitwise_or(P.lt(a, b), P.ne(a, a)), a, b)


def _p_not_zero(x):
    return P.ne(x, 0)


# ------------------------------------------------------------------ arithmetic

op("add(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor",
   BINARY, "binary_alpha", ufunc="add", rule=COMPLEX, prim=True, lower=lower_add,
   inplace_variant=True,
   backward=lambda g, out, self, other, alpha: (g, g if alpha == 1 else g * _cj(alpha)),
   doc="self + alpha * other, broadcasting, with PyTorch's type promotion.")


def _sub_decompose(self, other, alpha):
    if not _is_tensor(other):
        return P.add(self, -other * alpha)
    return P.add(self, P.mul(other, -alpha))


op("sub(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor",
   BINARY, "binary_alpha", ufunc="subtract", rule=NO_BOOL | COMPLEX, aliases=("subtract",),
   inplace_variant=True,
   backward=lambda g, out, self, other, alpha: (g, -g if alpha == 1 else g * -_cj(alpha)),
   decompose=_sub_decompose,
   doc="self - alpha * other.")

op("mul(Tensor self, Tensor other) -> Tensor",
   BINARY, "ufunc", ufunc="multiply", rule=COMPLEX, prim=True, lower=pointwise("mul"),
   aliases=("multiply",),
   inplace_variant=True,
   backward=lambda g, out, self, other: (g * _cj(other), g * _cj(self)))


def _div_backward(g, out, self, other, rounding_mode):
    if rounding_mode is not None:
        return (g * 0, g * 0 if _is_tensor(other) else None)
    return (g / _cj(other), -g * _cj(out) / _cj(other) if _is_tensor(other) else None)


op("div(Tensor self, Tensor other, *, str? rounding_mode=None) -> Tensor",
   BINARY_FLOAT, "div", ufunc="true_divide", rule=COMPLEX,
   aliases=("divide", "true_divide"),
   inplace_variant=True, prim=True, checks_values=True, meta=M.div,
   recompute=RECOMPUTE_CHEAP,   # recomputed on values it ran on already: raises nothing new
   backward=_div_backward,
   lower=lower_div,
   doc="self / other: true division, or rounded with rounding_mode 'trunc' or 'floor'. "
       "A prim: true division is not self * (1 / other), which rounds twice (49 * (1 / 49) "
       "is below 1).")

op("neg(Tensor self) -> Tensor",
   UNARY, "ufunc", ufunc="negative", rule=NO_BOOL | COMPLEX, prim=True,
   lower=pointwise("neg"),
   aliases=("negative",),
   inplace_variant=True,
   backward=lambda g, out, self: (-g,))

op("reciprocal(Tensor self) -> Tensor",
   UNARY_FLOAT, "ufunc", ufunc="reciprocal", rule=COMPLEX, prim=True,
   lower=pointwise("reciprocal"),
   inplace_variant=True,
   backward=lambda g, out, self: (-g * _cj(out) * _cj(out),))


def _pow_backward(g, out, self, exponent):
    """Complex operands take the conjugate derivatives (grad * conj(d out / d x))."""
    gs = ge = None
    if _is_tensor(self):
        d = _cj(exponent * self ** (exponent - 1))
        gs = g * O.where(exponent == 0, 0, d) if _is_tensor(exponent) else (
            g * 0 if exponent == 0 else g * d)
    if _is_tensor(exponent):
        base = self if _is_tensor(self) else O.full((), self, dtype=exponent.dtype)
        nonneg = O.real(exponent) >= 0 if exponent.dtype.is_complex else exponent >= 0
        safe = O.where((base == 0) & nonneg, 0, _cj(out * base.log()))
        ge = g * safe
    return gs, ge


op("pow(Tensor self, Tensor exponent) -> Tensor",
   BINARY, "pow", ufunc="power", rule=NOT_BOOL | COMPLEX, prim=True, checks_values=True,
   recompute=RECOMPUTE_CHEAP,
   meta=M.pow_, lower=lower_pow,
   inplace_variant=True,
   backward=_pow_backward,
   doc="self ** exponent; integer tensors to negative integer powers are an error.")



def _remainder_backward(g, out, self, other):
    return (g if _is_tensor(self) else None,
            # div with floor rounding, as PyTorch's formula: differentiable (zero),
            # where floor_divide's derivative raises (create_graph=True)
            -g * O.div(self, other, rounding_mode="floor") if _is_tensor(other) else None)


def _floor_divide_backward(g, out, self, other):
    """PyTorch declares no derivative for floor_divide: its result requires grad when an
    input does, and backward through it raises."""
    raise RuntimeError("derivative for aten::floor_divide is not implemented")


op("floor_divide(Tensor self, Tensor other) -> Tensor",
   BINARY, "int_checked", ufunc="floor_divide", rule=NOT_BOOL, prim=True, checks_values=True,
   lower=extern,
   inplace_variant=True, backward=_floor_divide_backward,
   doc="floor(self / other) with Python's semantics (the quotient rounded towards -inf, "
       "as // does); integer division by zero is an error. Not differentiable.")

op("remainder(Tensor self, Tensor other) -> Tensor",
   BINARY, "int_checked", ufunc="remainder", rule=NOT_BOOL, prim=True, checks_values=True,
   lower=extern,
   inplace_variant=True,
   backward=_remainder_backward,
   doc="self - floor_divide(self, other) * other, with the sign of other (Python's %); "
       "integer division by zero is an error.")

def _abs_backward(g, out, self):
    if self.dtype.is_complex:     # g * sgn(self): self / |self|, 0 at 0
        return (g * O.where(O.eq(out, 0), 0, self / O.where(O.eq(out, 0), 1, out)),)
    return (g * self.sign(),)


op("abs(Tensor self) -> Tensor", UNARY, "ufunc", ufunc="absolute",
   rule=NOT_BOOL | COMPLEX | COMPLEX_TO_REAL,
   aliases=("absolute",), inplace_variant=True,
   backward=_abs_backward,
   decompose=_p_abs,
   doc="|self|; integers keep their dtype (abs of the most negative value wraps).")


def _sign_decompose(self):
    if self.dtype is _C.bool:
        return P.clone(self)
    pos = P._to_copy(P.lt(0, self), dtype=self.dtype)
    neg = P._to_copy(P.lt(self, 0), dtype=self.dtype)
    return P.add(pos, P.neg(neg))


op("sign(Tensor self) -> Tensor", UNARY, "sign", ufunc="sign", inplace_variant=True,
   backward=lambda g, out, self: (O.zeros_like(g),),
   decompose=_sign_decompose,
   doc="-1, 0 or 1 in self's dtype; 0 for NaN (as PyTorch); bool stays bool.")

# ------------------------------------------------------------------ rounding
# No prims of their own: floor is floor_divide(x, 1) (exact below 2**mantissa; larger
# floats, and infinities, are whole already), the others are made from floor.


def _p_floor(x):
    if not x.dtype.is_floating_point:
        return P.clone(x)
    return P.where(P.eq(P.add(x, 1), x), x, P.floor_divide(x, 1))


def _p_ceil(x):
    if not x.dtype.is_floating_point:
        return P.clone(x)
    return P.neg(_p_floor(P.neg(x)))


def _p_trunc(x):
    if not x.dtype.is_floating_point:
        return P.clone(x)
    return P.where(P.lt(x, 0), _p_ceil(x), _p_floor(x))


def _p_round(x):
    """Half to even: floor, then up when the rest is above 1/2, or 1/2 and floor is odd;
    a zero result has x's sign."""
    if not x.dtype.is_floating_point:
        return P.clone(x)
    r = _p_floor(x)
    rest = _p_sub(x, r)                   # exact, in [0, 1)
    up = P.bitwise_or(P.lt(0.5, rest),
                      P.bitwise_and(P.eq(rest, 0.5), P.eq(P.remainder(r, 2), 1)))
    out = P.where(up, P.add(r, 1), r)
    # a zero keeps x's sign, as rint's does (-0.3 rounds to -0.0)
    return P.where(P.eq(out, 0), P.mul(x, 0.0), out)


def _zero_grad(g, out, self, *rest):
    return (O.zeros_like(g),)


for _name, _ufunc, _dec, _doc in (
        ("floor", "floor", _p_floor, "The largest integer <= self; integers pass through."),
        ("ceil", "ceil", _p_ceil, "The smallest integer >= self; integers pass through."),
        ("trunc", "trunc", _p_trunc, "self rounded towards zero; integers pass through."),
        ("round", "rint", _p_round, "self rounded to the nearest integer, halves to even; "
                                    "integers pass through.")):
    op(f"{_name}(Tensor self) -> Tensor", UNARY, "rounding", ufunc=_ufunc, rule=NOT_BOOL,
       inplace_variant=True, aliases=("fix",) if _name == "trunc" else (),
       backward=_zero_grad, decompose=_dec, doc=_doc)


def _round_decimals_decompose(self, decimals):
    scale = 10.0 ** abs(decimals)
    if decimals >= 0:
        return P.mul(_p_round(P.mul(self, scale)), 1.0 / scale)
    return P.mul(_p_round(P.mul(self, 1.0 / scale)), scale)


op("round.decimals(Tensor self, *, int decimals) -> Tensor", UNARY, "round_decimals",
   ufunc="rint", rule=FLOATING, inplace_variant=True,
   backward=_zero_grad, decompose=_round_decimals_decompose,
   doc="round(self * 10**decimals) / 10**decimals (decimals < 0 rounds to tens, ...), as "
       "PyTorch computes it.")

op("frac(Tensor self) -> Tensor", UNARY, "frac", ufunc="trunc", rule=FLOATING,
   inplace_variant=True,
   backward=lambda g, out, self: (g,),
   decompose=lambda self: _p_sub(self, _p_trunc(self)),
   doc="self - trunc(self), with self's sign.")


def _square(self):
    return O.pow(self, 2)


op("square(Tensor self) -> Tensor", CUSTOM, "python", composite=True, impl=_square,
   doc="self ** 2 (bool gives int64, as pow does).")
op("square_(Tensor(a!) self) -> Tensor(a!)", CUSTOM, "python", composite=True,
   function=False, impl=lambda self: self.pow_(2))

# ------------------------------------------------------------------ transcendental

op("exp(Tensor self) -> Tensor", UNARY_FLOAT, "ufunc", ufunc="exp", rule=COMPLEX, prim=True,
   lower=pointwise("exp"),
   inplace_variant=True,
   backward=lambda g, out, self: (g * _cj(out),))

op("exp2(Tensor self) -> Tensor", UNARY_FLOAT, "ufunc", ufunc="exp2", inplace_variant=True,
   backward=lambda g, out, self: (g * out * _LN2,),
   decompose=lambda self: P.pow(2.0, self),
   doc="2 ** self.")

op("expm1(Tensor self) -> Tensor", UNARY_FLOAT, "ufunc", ufunc="expm1", rule=COMPLEX,
   prim=True, lower=pointwise("expm1"),
   inplace_variant=True,
   backward=lambda g, out, self: (g * (_cj(out) + 1),),
   doc="exp(self) - 1, accurate near 0.")

op("log(Tensor self) -> Tensor", UNARY_FLOAT, "ufunc", ufunc="log", rule=COMPLEX, prim=True,
   lower=pointwise("log"),
   inplace_variant=True,
   backward=lambda g, out, self: (g / _cj(self),))

op("log2(Tensor self) -> Tensor", UNARY_FLOAT, "ufunc", ufunc="log2", rule=COMPLEX,
   inplace_variant=True,
   backward=lambda g, out, self: (g / (_cj(self) * _LN2),),
   decompose=lambda self: P.mul(P.log(self), 1.0 / _LN2))

op("log10(Tensor self) -> Tensor", UNARY_FLOAT, "ufunc", ufunc="log10", rule=COMPLEX,
   inplace_variant=True,
   backward=lambda g, out, self: (g / (_cj(self) * _LN10),),
   decompose=lambda self: P.mul(P.log(self), 1.0 / _LN10))

op("log1p(Tensor self) -> Tensor", UNARY_FLOAT, "ufunc", ufunc="log1p", rule=COMPLEX,
   prim=True, lower=pointwise("log1p"),
   inplace_variant=True,
   backward=lambda g, out, self: (g / (_cj(self) + 1),),
   doc="log(1 + self), accurate near 0.")

op("sqrt(Tensor self) -> Tensor", UNARY_FLOAT, "ufunc", ufunc="sqrt", rule=COMPLEX,
   prim=True, lower=pointwise("sqrt"),
   inplace_variant=True,
   backward=lambda g, out, self: (g / (_cj(out) * 2),))

op("rsqrt(Tensor self) -> Tensor", UNARY_FLOAT, "cloop", rule=COMPLEX, inplace_variant=True,
   backward=lambda g, out, self: (g * _cj(out * out * out) * -0.5,),
   decompose=lambda self: P.reciprocal(P.sqrt(self)),
   doc="1 / sqrt(self).")

op("sin(Tensor self) -> Tensor", UNARY_FLOAT, "ufunc", ufunc="sin", rule=COMPLEX,
   prim=True, lower=pointwise("sin"),
   inplace_variant=True,
   backward=lambda g, out, self: (g * _cj(self.cos()),))

op("cos(Tensor self) -> Tensor", UNARY_FLOAT, "ufunc", ufunc="cos", rule=COMPLEX,
   prim=True, lower=pointwise("cos"),
   inplace_variant=True,
   backward=lambda g, out, self: (-g * _cj(self.sin()),))

op("tan(Tensor self) -> Tensor", UNARY_FLOAT, "ufunc", ufunc="tan", rule=COMPLEX,
   inplace_variant=True,
   backward=lambda g, out, self: (g * _cj(out * out + 1),),
   decompose=lambda self: P.div(P.sin(self), P.cos(self)))

op("atan2(Tensor self, Tensor other) -> Tensor", BINARY_FLOAT, "ufunc", ufunc="arctan2",
   prim=True, lower=extern, aliases=("arctan2",), inplace_variant=True, numbers=False,
   backward=lambda g, out, self, other: (g * other / (self * self + other * other),
                                         -g * self / (self * self + other * other)),
   doc="The angle of the point (other, self) in (-pi, pi]: atan(self / other) with the "
       "quadrant from both signs.")

op("atan(Tensor self) -> Tensor", UNARY_FLOAT, "ufunc", ufunc="arctan", rule=COMPLEX,
   prim=True, lower=libm("atan"), aliases=("arctan",),
   inplace_variant=True,
   backward=lambda g, out, self: (g / _cj(self * self + 1),),
   doc="The arctangent, in (-pi/2, pi/2).")

# the other inverse and hyperbolic functions: NumPy's loops (complex ones too, on the
# principal branches PyTorch uses), the C library's functions when compiled; gradients
# are grad * conj(f'(z))
op("sinh(Tensor self) -> Tensor", UNARY_FLOAT, "ufunc", ufunc="sinh", rule=COMPLEX,
   prim=True, lower=libm("sinh"), inplace_variant=True,
   backward=lambda g, out, self: (g * _cj(self.cosh()),),
   doc="The hyperbolic sine.")

op("cosh(Tensor self) -> Tensor", UNARY_FLOAT, "ufunc", ufunc="cosh", rule=COMPLEX,
   prim=True, lower=libm("cosh"), inplace_variant=True,
   backward=lambda g, out, self: (g * _cj(self.sinh()),),
   doc="The hyperbolic cosine.")

op("asin(Tensor self) -> Tensor", UNARY_FLOAT, "ufunc", ufunc="arcsin", rule=COMPLEX,
   prim=True, lower=libm("asin"), aliases=("arcsin",), inplace_variant=True,
   backward=lambda g, out, self: (g / _cj((1 - self * self).sqrt()),),
   doc="The arcsine, in [-pi/2, pi/2] (NaN outside [-1, 1] for real tensors).")

op("acos(Tensor self) -> Tensor", UNARY_FLOAT, "ufunc", ufunc="arccos", rule=COMPLEX,
   prim=True, lower=libm("acos"), aliases=("arccos",), inplace_variant=True,
   backward=lambda g, out, self: (-g / _cj((1 - self * self).sqrt()),),
   doc="The arccosine, in [0, pi] (NaN outside [-1, 1] for real tensors).")

op("asinh(Tensor self) -> Tensor", UNARY_FLOAT, "ufunc", ufunc="arcsinh", rule=COMPLEX,
   prim=True, lower=libm("asinh"), aliases=("arcsinh",), inplace_variant=True,
   backward=lambda g, out, self: (g / _cj((self * self + 1).sqrt()),),
   doc="The inverse hyperbolic sine.")

op("acosh(Tensor self) -> Tensor", UNARY_FLOAT, "ufunc", ufunc="arccosh", rule=COMPLEX,
   prim=True, lower=libm("acosh"), aliases=("arccosh",), inplace_variant=True,
   backward=lambda g, out, self: (g / _cj((self - 1).sqrt() * (self + 1).sqrt()),),
   doc="The inverse hyperbolic cosine (NaN below 1 for real tensors).")

op("atanh(Tensor self) -> Tensor", UNARY_FLOAT, "ufunc", ufunc="arctanh", rule=COMPLEX,
   prim=True, lower=libm("atanh"), aliases=("arctanh",), inplace_variant=True,
   backward=lambda g, out, self: (g / _cj(1 - self * self),),
   doc="The inverse hyperbolic tangent (NaN outside [-1, 1], +-inf at +-1 for real "
       "tensors).")

op("tanh(Tensor self) -> Tensor", UNARY_FLOAT, "ufunc", ufunc="tanh", rule=COMPLEX,
   prim=True, lower=pointwise("tanh"),
   inplace_variant=True,
   backward=lambda g, out, self: (g * _cj(1 - out * out),))

op("sigmoid(Tensor self) -> Tensor", UNARY_FLOAT, "cloop", rule=COMPLEX,
   backward=lambda g, out, self: (g * _cj(out * (1 - out)),),
   inplace_variant=True,
   decompose=lambda self: P.reciprocal(P.add(P.exp(P.neg(self)), 1)),
   doc="1 / (1 + exp(-self)).")


def _erf_grad(g, self):
    return g * (-(self * self)).exp() * _TWO_OVER_SQRT_PI


op("erf(Tensor self) -> Tensor", UNARY_FLOAT, "cloop", prim=True, inplace_variant=True,
   lower=pointwise("erf"),
   backward=lambda g, out, self: (_erf_grad(g, self),),
   doc="The error function, 2/sqrt(pi) * integral of exp(-t^2) from 0 to self.")

op("erfc(Tensor self) -> Tensor", UNARY_FLOAT, "cloop", prim=True, inplace_variant=True,
   lower=pointwise("erfc"),
   backward=lambda g, out, self: (-_erf_grad(g, self),),
   doc="1 - erf(self), accurate in the tail (a prim: 1 - erf loses it).")

op("relu(Tensor self) -> Tensor", UNARY, "relu", ufunc="maximum", rule=NO_BOOL,
   inplace_variant=True,
   backward=lambda g, out, self: (g * (out > 0),),
   decompose=lambda self: P.maximum(self, 0),
   doc="max(self, 0); NaN stays NaN.")


def _max_binary_backward(g, out, self, other):
    half = O.where(self == other, g / 2, g)
    return (half * (self >= other) if _is_tensor(self) else None,
            half * (self <= other) if _is_tensor(other) else None)


def _min_binary_backward(g, out, self, other):
    half = O.where(self == other, g / 2, g)
    return (half * (self <= other) if _is_tensor(self) else None,
            half * (self >= other) if _is_tensor(other) else None)


op("maximum(Tensor self, Tensor other) -> Tensor",
   BINARY, "ufunc", ufunc="maximum", prim=True, lower=pointwise("max"),
   backward=_max_binary_backward,
   doc="Elementwise maximum; NaN propagates.")

op("minimum(Tensor self, Tensor other) -> Tensor",
   BINARY, "ufunc", ufunc="minimum",
   backward=_min_binary_backward,
   decompose=_p_minimum,
   doc="Elementwise minimum; NaN propagates.")

# ------------------------------------------------------------------ comparisons

for _name, _ufunc, _alias, _ins in (("eq", "equal", (), "eq"),
                                    ("ne", "not_equal", ("not_equal",), "ne"),
                                    ("lt", "less", ("less",), "lt"),
                                    ("le", "less_equal", ("less_equal",), "le")):
    op(f"{_name}(Tensor self, Tensor other) -> Tensor", COMPARE, "ufunc", ufunc=_ufunc,
       rule=COMPLEX if _name in ("eq", "ne") else 0,
       prim=True, lower=pointwise(_ins), aliases=_alias, inplace_variant=True)

op("gt(Tensor self, Tensor other) -> Tensor", COMPARE, "ufunc", ufunc="greater",
   aliases=("greater",), inplace_variant=True,
   decompose=lambda self, other: P.lt(other, self))
op("ge(Tensor self, Tensor other) -> Tensor", COMPARE, "ufunc", ufunc="greater_equal",
   aliases=("greater_equal",), inplace_variant=True,
   decompose=lambda self, other: P.le(other, self))

op("isnan(Tensor self) -> Tensor", COMPARE, "ufunc", ufunc="isnan", numbers=False, rule=COMPLEX,
   decompose=lambda self: P.ne(self, self),
   doc="True where self is NaN.")
op("isinf(Tensor self) -> Tensor", COMPARE, "ufunc", ufunc="isinf", numbers=False, rule=COMPLEX,
   decompose=lambda self: P.bitwise_or(P.eq(self, math.inf), P.eq(self, -math.inf)),
   doc="True where self is +inf or -inf.")
op("isfinite(Tensor self) -> Tensor", COMPARE, "ufunc", ufunc="isfinite", numbers=False,
   rule=COMPLEX,
   decompose=lambda self: P.eq(P.add(self, P.neg(self)), 0) if self.dtype.is_floating_point
   else P.eq(self, self),
   doc="True where self is neither NaN nor infinite.")

# ------------------------------------------------------------------ logical and bitwise

op("logical_and(Tensor self, Tensor other) -> Tensor", COMPARE, "ufunc", ufunc="logical_and",
   numbers=False, inplace_variant=True,
   decompose=lambda self, other: P.bitwise_and(_p_not_zero(self), _p_not_zero(other)),
   doc="self != 0 and other != 0, as bool.")
op("logical_or(Tensor self, Tensor other) -> Tensor", COMPARE, "ufunc", ufunc="logical_or",
   numbers=False, inplace_variant=True,
   decompose=lambda self, other: P.bitwise_or(_p_not_zero(self), _p_not_zero(other)),
   doc="self != 0 or other != 0, as bool.")
op("logical_xor(Tensor self, Tensor other) -> Tensor", COMPARE, "ufunc", ufunc="logical_xor",
   numbers=False, inplace_variant=True,
   decompose=lambda self, other: P.ne(_p_not_zero(self), _p_not_zero(other)),
   doc="(self != 0) != (other != 0), as bool.")
op("logical_not(Tensor self) -> Tensor", COMPARE, "ufunc", ufunc="logical_not",
   numbers=False, inplace_variant=True,
   decompose=lambda self: P.eq(self, 0),
   doc="self == 0, as bool.")

op("bitwise_and(Tensor self, Tensor other) -> Tensor", BINARY, "ufunc", ufunc="bitwise_and",
   rule=INTEGRAL, prim=True, lower=pointwise("and"), inplace_variant=True)
op("bitwise_or(Tensor self, Tensor other) -> Tensor", BINARY, "ufunc", ufunc="bitwise_or",
   rule=INTEGRAL, prim=True, lower=pointwise("or"), inplace_variant=True)
op("bitwise_xor(Tensor self, Tensor other) -> Tensor", BINARY, "ufunc", ufunc="bitwise_xor",
   rule=INTEGRAL, prim=True, lower=pointwise("xor"), inplace_variant=True)
op("bitwise_not(Tensor self) -> Tensor", UNARY, "ufunc", ufunc="invert", rule=INTEGRAL,
   inplace_variant=True,
   decompose=lambda self: P.bitwise_xor(self, True if self.dtype is _C.bool else -1),
   doc="~self: logical not for bool, two's complement not for integers.")


def _invert(self):
    if self.dtype.is_floating_point:
        raise TypeError("~ (operator.invert) is only implemented on integer and Boolean-type "
                        "tensors")
    return O.bitwise_not(self)


# ~x (the Tensor slot calls it): bitwise_not, but a TypeError for floats, as PyTorch's
# Tensor.__invert__ says
op("__invert__(Tensor self) -> Tensor", CUSTOM, "python", composite=True, method=False,
   function=False, impl=_invert)

# Shifts decompose into integer arithmetic (no prims of their own): x << s is x * 2**s
# (wrapping, as the shift does), x >> s is floor division by 2**s, in two steps so that no
# power of two overflows; counts outside the width give 0 (<<) or the sign fill (>>).


def _wrap_int(v, dtype):
    bits = dtype.itemsize * 8
    v %= 1 << bits
    return v - (1 << bits) if dtype is not _C.uint8 and v >= 1 << (bits - 1) else v


def _lshift_decompose(self, other):
    rt = M.result_type(self, other)
    bits = rt.itemsize * 8
    if not _is_tensor(other):
        return P.mul(self, _wrap_int(1 << other, rt) if 0 <= other < bits else 0)
    s = other if other.dtype is rt else P._to_copy(other, dtype=rt)
    ok = P.bitwise_and(P.le(0, s), P.lt(s, bits))
    return P.where(ok, P.mul(self, P.pow(2, P.where(ok, s, 0))), 0)


def _rshift_decompose(self, other):
    rt = M.result_type(self, other)
    bits = rt.itemsize * 8
    limit = bits if rt is _C.uint8 else bits - 1      # from here on, only the sign is left
    half = bits // 2
    if not _is_tensor(other):
        k = limit if other < 0 or other > limit else other
        a = min(k, half)
        return P.floor_divide(P.floor_divide(self, 1 << a), 1 << (k - a))
    s = other if other.dtype is rt else P._to_copy(other, dtype=rt)
    k = P.where(P.bitwise_or(P.lt(s, 0), P.lt(limit, s)), limit, s)
    a = _p_minimum(k, half)
    return P.floor_divide(P.floor_divide(self, P.pow(2, a)), P.pow(2, _p_sub(k, a)))


op("bitwise_left_shift(Tensor self, Tensor other) -> Tensor", BINARY, "ufunc",
   ufunc="left_shift", rule=INTEGRAL | NOT_BOOL, inplace_variant=True,
   decompose=_lshift_decompose,
   doc="self << other in the result's width; shifts outside [0, width) give 0.")
op("bitwise_right_shift(Tensor self, Tensor other) -> Tensor", BINARY, "ufunc",
   ufunc="right_shift", rule=INTEGRAL | NOT_BOOL, inplace_variant=True,
   decompose=_rshift_decompose,
   doc="self >> other, arithmetic for signed integers; shifts outside [0, width) give 0 "
       "or -1 (the sign).")

# ------------------------------------------------------------------ selection


def _where_meta(entry, args):
    cond, self, other = args
    if not _is_tensor(cond) or cond.dtype is not _C.bool:
        raise RuntimeError("where(): expected condition to be a boolean tensor")
    shapes = [tuple(a.shape) for a in args if _is_tensor(a)]
    shape = M.broadcast_shapes("where", *shapes)
    return M.meta_tensor(shape, M.result_type(self, other),
                         M.elementwise_strides(list(args), shape))


op("where(Tensor condition, Tensor self, Tensor other) -> Tensor",
   CUSTOM, "where", prim=True, meta=_where_meta, numbers=True, recompute=RECOMPUTE_CHEAP,
   lower=pointwise("select"),
   backward=lambda g, out, cond, self, other: (
       None, O.where(cond, g, 0) if _is_tensor(self) else None,
       O.where(cond, 0, g) if _is_tensor(other) else None),
   doc="self where condition is true, else other (broadcasting; numbers allowed).")


def _clamp_meta(entry, args):
    self, lo, hi = args
    if lo is None and hi is None:
        raise RuntimeError("clamp(): At least one of 'min' or 'max' must not be None")
    shape = M.broadcast_shapes("clamp", *[tuple(a.shape) for a in args if _is_tensor(a)])
    rt = M.result_type(self, lo, hi)
    one_tensor_bound = (lo is None) != (hi is None) and _is_tensor(hi if lo is None else lo)
    if rt is _C.bool and not one_tensor_bound:    # PyTorch's one-sided kernels take bool
        raise NotImplementedError("clamp(): \"clamp\" not implemented for 'Bool'")
    return M.meta_tensor(shape, rt, M.elementwise_strides(list(args), shape))


def _clamp_backward(g, out, self, min, max):
    keep = None
    if min is not None:
        keep = self >= min
    if max is not None:
        keep = self <= max if keep is None else keep & (self <= max)
    g_min = g_max = None
    if _is_tensor(min):
        below = self < min
        g_min = O.where(below if max is None else below & (min <= max), g, 0)
    if _is_tensor(max):
        above = self > max
        g_max = O.where(above if min is None else above | (min > max), g, 0)
    return O.where(keep, g, 0), g_min, g_max


def _clamp_decompose(self, min, max):
    rt = M.result_type(self, min, max)

    def to_rt(t):      # every tensor operand in the computation dtype first
        return P._to_copy(t, dtype=rt) if _is_tensor(t) and t.dtype is not rt else t
    x = to_rt(self)
    if min is not None:
        x = P.maximum(x, to_rt(min))
    if max is not None:
        x = _p_minimum(x, to_rt(max))
    return x


op("clamp(Tensor self, Tensor? min=None, Tensor? max=None) -> Tensor", CUSTOM, "clamp",
   numbers=True, meta=_clamp_meta, aliases=("clip",), inplace_variant=True,
   backward=_clamp_backward, decompose=_clamp_decompose,
   doc="minimum(maximum(self, min), max): the bounds are numbers or tensors, either may be "
       "None, and they take part in type promotion; NaN propagates; min > max gives max.")


for _name, _kw in (("clamp_min", "min"), ("clamp_max", "max")):
    op(f"{_name}(Tensor self, Tensor {_kw}) -> Tensor", CUSTOM, "python", composite=True,
       numbers=True, impl=(lambda k: lambda self, bound: O.clamp(self, **{k: bound}))(_kw),
       doc=f"clamp(self, {_kw}={_kw}).")
    op(f"{_name}_(Tensor(a!) self, Tensor {_kw}) -> Tensor(a!)", CUSTOM, "python",
       composite=True, function=False, numbers=True,
       impl=(lambda k: lambda self, bound: self.clamp_(**{k: bound}))(_kw))


def _lerp_meta(entry, args):
    self = args[0]
    for name, t in (("end", args[1]), ("weight", args[2])):
        if _is_tensor(t) and t.dtype is not self.dtype:
            raise RuntimeError(f"lerp(): expected dtype {self.dtype} for `{name}` but got "
                               f"dtype {t.dtype}")
    if not self.dtype.is_floating_point:
        raise NotImplementedError(f"lerp(): \"lerp\" not implemented for {self.dtype}")
    shape = M.broadcast_shapes("lerp", *[tuple(a.shape) for a in args if _is_tensor(a)])
    return M.meta_tensor(shape, self.dtype, M.elementwise_strides(list(args), shape))


def _lerp_backward(g, out, self, end, weight):
    return (g * (1 - weight), g * weight, g * (end - self) if _is_tensor(weight) else None)


def _lerp_decompose(self, end, weight):
    diff = _p_sub(end, self)
    small = P.add(self, P.mul(weight, diff))
    big = _p_sub(end, P.mul(diff, P.add(P.neg(weight), 1) if _is_tensor(weight)
                           else 1 - weight))
    if not _is_tensor(weight):
        return small if abs(weight) < 0.5 else big
    return P.where(P.lt(_p_abs(weight), 0.5), small, big)


_LERP_DOC = ("self + weight * (end - self), computed from end when |weight| >= 0.5 (so that "
             "weight 1 gives end exactly), as PyTorch; one floating dtype throughout.")
op("lerp.Tensor(Tensor self, Tensor end, Tensor weight) -> Tensor", CUSTOM, "lerp",
   meta=_lerp_meta, numbers=False, inplace_variant=True,
   backward=_lerp_backward, decompose=_lerp_decompose, doc=_LERP_DOC)
op("lerp.Scalar(Tensor self, Tensor end, Scalar weight) -> Tensor", CUSTOM, "lerp",
   meta=_lerp_meta, numbers=False, inplace_variant=True,
   backward=_lerp_backward, decompose=_lerp_decompose, doc=_LERP_DOC)


def _value_in(value, dtype):
    """value as PyTorch uses it for tensors of dtype: integers take int(value)."""
    return value if dtype.is_floating_point or isinstance(value, bool) else int(value)


def _addcmul_decompose(self, tensor1, tensor2, value):
    rt = M.result_type(self, tensor1, tensor2)
    prod = P.mul(tensor1, tensor2)
    if value != 1:
        prod = P.mul(prod, _value_in(value, rt))
    return P.add(self, prod)


op("addcmul(Tensor self, Tensor tensor1, Tensor tensor2, *, Scalar value=1) -> Tensor",
   BINARY, "addcmul", rule=NOT_BOOL, numbers=False, inplace_variant=True,
   backward=lambda g, out, self, tensor1, tensor2, value: (
       g, g * tensor2 * value, g * tensor1 * value),
   decompose=_addcmul_decompose,
   doc="self + value * tensor1 * tensor2, with promotion over the three tensors.")


def _addcdiv_meta(entry, args):
    t1, t2 = args[1], args[2]
    if not t1.dtype.is_floating_point and not t2.dtype.is_floating_point:
        raise RuntimeError("addcdiv(): Integer division with addcdiv is no longer supported")
    return M.elementwise(entry, args)


op("addcdiv(Tensor self, Tensor tensor1, Tensor tensor2, *, Scalar value=1) -> Tensor",
   BINARY, "addcdiv", meta=_addcdiv_meta, numbers=False, inplace_variant=True,
   backward=lambda g, out, self, tensor1, tensor2, value: (
       g, g * value / tensor2, -g * value * tensor1 / (tensor2 * tensor2)),
   decompose=lambda self, tensor1, tensor2, value: P.add(
       self, P.mul(P.div(tensor1, tensor2), value)),
   doc="self + value * tensor1 / tensor2 (true division: integer tensor1 and tensor2 are "
       "an error).")


def _nan_to_num_decompose(self, nan, posinf, neginf):
    if not self.dtype.is_floating_point:
        return P.clone(self)
    big = {_C.float16: 65504.0, _C.bfloat16: 3.3895313892515355e38,
           _C.float32: 3.4028234663852886e38, _C.float64: 1.7976931348623157e308}[self.dtype]
    x = P.where(P.eq(self, math.inf), big if posinf is None else posinf, self)
    x = P.where(P.eq(self, -math.inf), -big if neginf is None else neginf, x)
    return P.where(P.ne(self, self), 0.0 if nan is None else nan, x)


op("nan_to_num(Tensor self, float? nan=None, float? posinf=None, float? neginf=None) -> "
   "Tensor", UNARY, "nan_to_num", inplace_variant=True,
   backward=lambda g, out, self, nan, posinf, neginf: (g * self.isfinite(),),
   decompose=_nan_to_num_decompose,
   doc="NaN, +inf and -inf replaced by nan (0), posinf and neginf (the dtype's largest "
       "and lowest finite values by default); integers pass through.")
