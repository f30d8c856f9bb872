"""Elementwise ops: arithmetic, transcendental functions, activations, comparisons."""
from .. import _C
from . import meta as M
from .registry import (BINARY, BINARY_FLOAT, COMPARE, CUSTOM, INTEGRAL, NO_BOOL, NOT_BOOL,
                       UNARY, UNARY_FLOAT, op)
from .. import prims as P
from . import api as O


def _is_tensor(x):
    return isinstance(x, _C.Tensor)


# ------------------------------------------------------------------ arithmetic

op("add(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor",
   BINARY, "binary_alpha", ufunc="add", prim=True,
   inplace_variant=True,
   backward=lambda g, out, self, other, alpha: (g, g if alpha == 1 else g * alpha),
   doc="self + alpha * other, broadcasting, with PyTorch's type promotion.")


def _sub_decompose(self, other, alpha):
    if not _is_tensor(other):
        return P.add(self, -other * alpha)
    return P.add(self, P.mul(other, -alpha))


op("sub(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor",
   BINARY, "binary_alpha", ufunc="subtract", rule=NO_BOOL, aliases=("subtract",),
   inplace_variant=True,
   backward=lambda g, out, self, other, alpha: (g, -g if alpha == 1 else g * -alpha),
   decompose=_sub_decompose,
   doc="self - alpha * other.")

op("mul(Tensor self, Tensor other) -> Tensor",
   BINARY, "ufunc", ufunc="multiply", prim=True, aliases=("multiply",),
   inplace_variant=True,
   backward=lambda g, out, self, other: (g * other, g * self))


def _div_backward(g, out, self, other, rounding_mode):
    if rounding_mode is not None:
        return (g * 0, g * 0 if _is_tensor(other) else None)
    return (g / other, -g * out / other if _is_tensor(other) else None)


def _div_decompose(self, other, rounding_mode):
    if rounding_mode is not None:
        raise NotImplementedError("div with rounding_mode has no decomposition yet")
    if not _is_tensor(other):
        return P.mul(self, 1.0 / other)
    return P.mul(self, P.reciprocal(other))


op("div(Tensor self, Tensor other, *, str? rounding_mode=None) -> Tensor",
   BINARY_FLOAT, "div", ufunc="true_divide", aliases=("divide", "true_divide"),
   inplace_variant=True,
   backward=_div_backward, decompose=_div_decompose,
   doc="self / other: true division, or rounded with rounding_mode 'trunc' or 'floor'.")

op("neg(Tensor self) -> Tensor",
   UNARY, "ufunc", ufunc="negative", rule=NO_BOOL, prim=True, aliases=("negative",),
   inplace_variant=True,
   operators=("__neg__",),
   backward=lambda g, out, self: (-g,))

op("reciprocal(Tensor self) -> Tensor",
   UNARY_FLOAT, "ufunc", ufunc="reciprocal", prim=True,
   inplace_variant=True,
   backward=lambda g, out, self: (-g * out * out,))


def _pow_backward(g, out, self, exponent):
    gs = ge = None
    if _is_tensor(self):
        d = exponent * self ** (exponent - 1)
        gs = g * O.where(exponent == 0, 0, d) if _is_tensor(exponent) else (
            g * 0 if exponent == 0 else g * d)
    if _is_tensor(exponent):
        base = self if _is_tensor(self) else O.full((), self, dtype=exponent.dtype)
        safe = O.where((base == 0) & (exponent >= 0), 0, out * base.log())
        ge = g * safe
    return gs, ge


op("pow(Tensor self, Tensor exponent) -> Tensor",
   BINARY, "pow", ufunc="power", rule=NOT_BOOL, prim=True,
   inplace_variant=True,
   backward=_pow_backward,
   doc="self ** exponent; integer tensors to negative integer powers are an error.")

# ------------------------------------------------------------------ transcendental

op("exp(Tensor self) -> Tensor", UNARY_FLOAT, "ufunc", ufunc="exp", prim=True,
   inplace_variant=True,
   backward=lambda g, out, self: (g * out,))

op("log(Tensor self) -> Tensor", UNARY_FLOAT, "ufunc", ufunc="log", prim=True,
   inplace_variant=True,
   backward=lambda g, out, self: (g / self,))

op("tanh(Tensor self) -> Tensor", UNARY_FLOAT, "ufunc", ufunc="tanh", prim=True,
   inplace_variant=True,
   backward=lambda g, out, self: (g * (1 - out * out),))

op("sigmoid(Tensor self) -> Tensor", UNARY_FLOAT, "sigmoid",
   backward=lambda g, out, self: (g * out * (1 - out),),
   inplace_variant=True,
   decompose=lambda self: P.reciprocal(P.add(P.exp(P.neg(self)), 1)),
   doc="1 / (1 + exp(-self)).")

op("relu(Tensor self) -> Tensor", UNARY, "relu", ufunc="maximum", rule=NO_BOOL,
   inplace_variant=True,
   backward=lambda g, out, self: (g * (out > 0),),
   decompose=lambda self: P.maximum(self, 0),
   doc="max(self, 0); NaN stays NaN.")


def _max_binary_backward(g, out, self, other):
    half = O.where(self == other, g / 2, g)
    return (half * (self >= other) if _is_tensor(self) else None,
            half * (self <= other) if _is_tensor(other) else None)


op("maximum(Tensor self, Tensor other) -> Tensor",
   BINARY, "ufunc", ufunc="maximum", prim=True,
   backward=_max_binary_backward,
   doc="Elementwise maximum; NaN propagates.")

# ------------------------------------------------------------------ comparisons

for _name, _ufunc, _op in (("eq", "equal", "__eq__"), ("ne", "not_equal", "__ne__"),
                           ("lt", "less", "__lt__"), ("le", "less_equal", "__le__")):
    op(f"{_name}(Tensor self, Tensor other) -> Tensor", COMPARE, "ufunc", ufunc=_ufunc,
       prim=True)

op("gt(Tensor self, Tensor other) -> Tensor", COMPARE, "ufunc", ufunc="greater",
   decompose=lambda self, other: P.lt(other, self))
op("ge(Tensor self, Tensor other) -> Tensor", COMPARE, "ufunc", ufunc="greater_equal",
   decompose=lambda self, other: P.le(other, self))

op("bitwise_and(Tensor self, Tensor other) -> Tensor", BINARY, "ufunc", ufunc="bitwise_and",
   rule=INTEGRAL, prim=True)
op("bitwise_or(Tensor self, Tensor other) -> Tensor", BINARY, "ufunc", ufunc="bitwise_or",
   rule=INTEGRAL, prim=True)

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
   CUSTOM, "where", prim=True, meta=_where_meta, numbers=True,
   backward=lambda g, out, cond, self, other: (
       None, O.where(cond, g, 0) if _is_tensor(self) else None,
       O.where(cond, 0, g) if _is_tensor(other) else None),
   doc="self where condition is true, else other (broadcasting; numbers allowed).")
