"""Activation functions: gelu (exact and tanh approximation), silu, softplus, elu,
leaky_relu, hardtanh, mish (relu and sigmoid are in elementwise.py).

As in PyTorch these are nn functions (torch.nn.functional.gelu, ...), not Tensor methods;
they are ember.<name> and ember.ops.api.<name> here. All but hardtanh compute only
floating dtypes (NotImplementedError otherwise, as PyTorch's kernels say). The kernels
are C loops (csrc/kernels/cloops.c); every op decomposes into prims.
"""
import math

from .. import _C
from .. import prims as P
from . import api as O
from . import meta as M
from .registry import FLOATING, UNARY, op

_SQRT1_2 = math.sqrt(0.5)
_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)
_KAPPA = 0.044715


# ------------------------------------------------------------------ gelu

def _check_approximate(approximate):
    if approximate not in ("none", "tanh"):
        raise RuntimeError("gelu(): approximate argument must be either none or tanh.")


def _gelu_meta(entry, args):
    _check_approximate(args[1])
    return M.elementwise(entry, args)


def _gelu_backward(g, out, self, approximate):
    fused = _C._grad_pointwise(2 if approximate == "tanh" else 1, g, self)
    if fused is not None:          # one C pass (nn_grad.c) in a backward without create_graph
        return (fused,)
    if approximate == "tanh":
        x2 = self * self
        inner = (self + x2 * self * _KAPPA) * _SQRT_2_OVER_PI
        t = inner.tanh()
        left = (t + 1) * 0.5
        right = self * 0.5 * (1 - t * t) * ((x2 * (3 * _KAPPA) + 1) * _SQRT_2_OVER_PI)
        return (g * (left + right),)
    cdf = (self * -_SQRT1_2).erfc() * 0.5
    pdf = (self * self * -0.5).exp() * _INV_SQRT_2PI
    return (g * (cdf + self * pdf),)


def _gelu_decompose(self, approximate):
    _check_approximate(approximate)
    half = P.mul(self, 0.5)
    if approximate == "tanh":
        cube = P.mul(P.mul(self, self), self)
        inner = P.mul(P.add(self, P.mul(cube, _KAPPA)), _SQRT_2_OVER_PI)
        return P.mul(half, P.add(P.tanh(inner), 1))
    # x/2 erfc(-x/sqrt(2)): 1 + erf(x/sqrt(2)) would lose the tail of large negative x
    return P.mul(half, P.erfc(P.mul(self, -_SQRT1_2)))


op("gelu(Tensor self, *, str approximate='none') -> Tensor", UNARY, "gelu", rule=FLOATING,
   method=False, meta=_gelu_meta, inplace_variant=True,
   backward=_gelu_backward, decompose=_gelu_decompose,
   doc="self * Phi(self) (Phi the standard normal CDF), or with approximate='tanh' "
       "self/2 * (1 + tanh(sqrt(2/pi) * (self + 0.044715 self^3))).")

# ------------------------------------------------------------------ silu, mish, softplus


def _sigmoid_p(x):
    return P.reciprocal(P.add(P.exp(P.neg(x)), 1))


def _silu_backward(g, out, self):
    fused = _C._grad_pointwise(0, g, self)
    if fused is not None:          # one C pass (nn_grad.c) in a backward without create_graph
        return (fused,)
    s = self.sigmoid()
    return (g * s * (self * (1 - s) + 1),)


op("silu(Tensor self) -> Tensor", UNARY, "cloop", rule=FLOATING, method=False,
   inplace_variant=True,
   backward=_silu_backward,
   decompose=lambda self: P.mul(self, _sigmoid_p(self)),
   doc="self * sigmoid(self) (swish).")


def _mish_backward(g, out, self):
    s = self.sigmoid()
    t = O.softplus(self).tanh()
    return (g * (t + self * s * (1 - t * t)),)


op("mish(Tensor self) -> Tensor", UNARY, "cloop", rule=FLOATING, method=False,
   inplace_variant=True,
   backward=_mish_backward,
   decompose=lambda self: P.mul(self, P.tanh(P.log1p(P.exp(self)))),
   doc="self * tanh(softplus(self)).")


def _softplus_backward(g, out, self, beta, threshold):
    bx = self * beta
    return (O.where(bx > threshold, g, g * bx.sigmoid()),)


def _softplus_decompose(self, beta, threshold):
    bx = P.mul(self, beta)
    soft = P.mul(P.log1p(P.exp(bx)), 1.0 / beta)
    return P.where(P.lt(threshold, bx), self, soft)


op("softplus(Tensor self, Scalar beta=1, Scalar threshold=20) -> Tensor", UNARY, "cloop",
   rule=FLOATING, method=False,
   backward=_softplus_backward, decompose=_softplus_decompose,
   doc="log(1 + exp(beta * self)) / beta, or self where beta * self > threshold.")

# ------------------------------------------------------------------ elu, leaky_relu, hardtanh


def _elu_backward(g, out, self, alpha, scale, input_scale):
    neg = g * (self * input_scale).exp() * (input_scale * alpha * scale)
    return (O.where(self <= 0, neg, g * scale),)


def _elu_decompose(self, alpha, scale, input_scale):
    neg = P.mul(P.expm1(P.mul(self, input_scale)), alpha * scale)
    return P.where(P.le(self, 0), neg, P.mul(self, scale))


op("elu(Tensor self, Scalar alpha=1, Scalar scale=1, Scalar input_scale=1) -> Tensor",
   UNARY, "cloop", rule=FLOATING, method=False, inplace_variant=True,
   backward=_elu_backward, decompose=_elu_decompose,
   doc="scale * self for self > 0, else alpha * scale * (exp(input_scale * self) - 1).")

op("leaky_relu(Tensor self, Scalar negative_slope=0.01) -> Tensor", UNARY, "cloop",
   rule=FLOATING, method=False, inplace_variant=True,
   backward=lambda g, out, self, negative_slope: (
       O.where(self > 0, g, g * negative_slope),),
   decompose=lambda self, negative_slope: P.where(P.lt(0, self), self,
                                                  P.mul(self, negative_slope)),
   doc="self for self > 0, else negative_slope * self.")


def _hardtanh_meta(entry, args):
    self, lo = args[0], args[1]
    if self.dtype is _C.bool:
        raise RuntimeError("hardtanh(): Bool inputs not supported for hardtanh")
    if self.dtype is _C.uint8 and lo < 0:
        raise RuntimeError("hardtanh(): cannot do hardtanh on an unsigned type with negative "
                           "lower bound.")
    return M.elementwise(entry, args)


def _hardtanh_decompose(self, min_val, max_val):
    if not self.dtype.is_floating_point:
        min_val, max_val = int(min_val), int(max_val)
    x = P.where(P.lt(self, min_val), min_val, self)
    return P.where(P.lt(max_val, x), max_val, x)


op("hardtanh(Tensor self, Scalar min_val=-1, Scalar max_val=1) -> Tensor", UNARY,
   "hardtanh", method=False, meta=_hardtanh_meta, inplace_variant=True,
   backward=lambda g, out, self, min_val, max_val: (
       O.where((self > min_val) & (self < max_val), g, 0),),
   decompose=_hardtanh_decompose,
   doc="self clamped to [min_val, max_val], in self's dtype (integers too).")
