"""The special functions (torch.special and their top-level forms): lgamma, digamma,
erfinv, i0 and special_i0e/i1/i1e, special_ndtri, special_erfcx and the Hurwitz zeta
function are prims computed by C loops (csrc/kernels/special.c, float32 through
float64); polygamma, mvlgamma, special_entr, special_ndtr, special_log_ndtr and
special_xlog1py are composites over them. The gradients are PyTorch's formulas (zeta has
none for its first argument, as in PyTorch). `ember.special` (special.py) names them as
torch.special does.

The special_* ops are neither top-level functions nor methods (function=False,
method=False), as in PyTorch."""
import math

from .. import _C
from . import api as O
from .registry import BINARY_FLOAT, CUSTOM, NO_HALF, UNARY_FLOAT, op
from ..compiler.lowerings import extern

_SQRT_PI = math.sqrt(math.pi)
_SQRT_2PI = math.sqrt(2.0 * math.pi)
_SQRT1_2 = math.sqrt(0.5)


def _full(like, value):
    return O.full_like(like, value)


def _polygamma(n, self):
    if n < 0:
        raise RuntimeError("polygamma(n, x) does not support negative n.")
    if n == 0:
        return O.digamma(self)
    if self.dtype.is_complex:
        kernel = "trigamma" if n == 1 else "polygamma"
        raise NotImplementedError(f'"{kernel}" not implemented for \'{self.dtype._torch_name}\'')
    x = self if self.dtype.is_floating_point else O._to_copy(self,
                                                             dtype=_C.get_default_dtype())
    half = x.dtype in (_C.float16, _C.bfloat16)     # computed in float32, as PyTorch
    xc = O._to_copy(x, dtype=_C.float32) if half else x
    # psi^(n)(x) = (-1)^(n+1) n! zeta(n + 1, x)
    out = O.mul(O.special_zeta(_full(xc, float(n + 1)), xc),
                float((-1) ** (n + 1) * math.factorial(n)))
    return O._to_copy(out, dtype=x.dtype) if half else out


def _unary(name, backward, doc, **kw):
    op(f"{name}(Tensor self) -> Tensor", UNARY_FLOAT, "cloop", prim=True, lower=extern,
       backward=backward, doc=doc, **kw)


def _special(name, backward, doc, **kw):
    _unary(name, backward, doc, function=False, method=False, **kw)


_unary("lgamma", lambda g, out, self: (g * O.digamma(self),), inplace_variant=True,
       doc="log |Gamma(self)|; +inf at the poles (0 and the negative integers).")
_unary("digamma", lambda g, out, self: (g * _polygamma(1, self),), inplace_variant=True,
       doc="psi(self) = d/dx log Gamma(x): -inf at +0, +inf at -0, NaN at the negative "
           "integers, as PyTorch.")
_unary("erfinv", lambda g, out, self: (g * (0.5 * _SQRT_PI) * O.exp(out * out),),
       inplace_variant=True,
       doc="The inverse of erf on [-1, 1] (+-inf at +-1, NaN outside).")
_unary("i0", lambda g, out, self: (g * O.special_i1(self),), inplace_variant=True,
       doc="The modified Bessel function of the first kind of order 0.")


def _i1_backward(g, out, self):
    zero = O.eq(self, 0)
    safe = O.where(zero, 1.0, self)
    return (g * O.where(zero, 0.5, O.i0(self) - out / safe),)


def _i1e_backward(g, out, self):
    zero = O.eq(self, 0)
    safe = O.where(zero, 1.0, self)
    return (g * O.where(zero, 0.5, O.special_i0e(self) - out * (O.sign(self) + 1.0 / safe)),)


_special("special_i0e", lambda g, out, self: (g * (O.special_i1e(self) - O.sign(self) * out),),
         doc="exp(-|self|) i0(self).")
_special("special_i1", _i1_backward,
         doc="The modified Bessel function of the first kind of order 1.")
_special("special_i1e", _i1e_backward, doc="exp(-|self|) i1(self).")
_special("special_ndtri", lambda g, out, self: (g * _SQRT_2PI * O.exp(0.5 * out * out),),
         rule=NO_HALF,
         doc="The inverse of the standard normal CDF (-inf at 0, +inf at 1, NaN outside "
             "[0, 1]).")
_special("special_erfcx", lambda g, out, self: (g * (2.0 * self * out - 2.0 / _SQRT_PI),),
         rule=NO_HALF, doc="exp(self^2) erfc(self), without the overflow of the product.")


def _zeta_backward(g, out, self, other):
    if self.requires_grad:
        raise RuntimeError("the derivative for 'zeta' is not implemented.")
    return (None, g * -self * O.special_zeta(self + 1.0, other))


op("special_zeta(Tensor self, Tensor other) -> Tensor", BINARY_FLOAT, "cloop_binary",
   prim=True, lower=extern, numbers=False, function=False, method=False, rule=NO_HALF,
   backward=_zeta_backward,
   doc="The Hurwitz zeta function sum_k (other + k)^-self (inf at self = 1 and at the "
       "non-positive integers other, NaN for self < 1).")

op("polygamma(int n, Tensor self) -> Tensor", CUSTOM, "python", composite=True,
   impl=_polygamma, method=False,
   doc="The n-th derivative of digamma: (-1)^(n+1) n! zeta(n + 1, self) for n >= 1.")


def _no_complex(kernel, t):
    if t.dtype.is_complex:
        raise NotImplementedError(f'"{kernel}" not implemented for \'{t.dtype._torch_name}\'')


def _mvlgamma(self, p):
    if self.dtype is _C.bool:
        raise RuntimeError("The input tensor may not be a boolean tensor.")
    if p < 1:
        raise RuntimeError("p has to be greater than or equal to 1")
    _no_complex("mvlgamma", self)
    x = self if self.dtype.is_floating_point else O._to_copy(self,
                                                             dtype=_C.get_default_dtype())
    # log Gamma_p(x) = p(p-1)/4 log(pi) + sum_{j<p} lgamma(x - j/2)
    offs = O.mul(O.arange(p, dtype=x.dtype), -0.5)
    terms = O.lgamma(O.add(O.unsqueeze(x, -1), offs))
    return O.add(O.sum(terms, -1), p * (p - 1) / 4.0 * math.log(math.pi))


op("mvlgamma(Tensor self, int p) -> Tensor", CUSTOM, "python", composite=True,
   impl=_mvlgamma,
   doc="The multivariate log-gamma function of dimension p.")


def _floating(self):
    if self.dtype.is_floating_point:
        return self
    return O._to_copy(self, dtype=_C.get_default_dtype())


def _entr(self):
    _no_complex("entr_cpu", self)
    x = _floating(self)
    pos = O.gt(x, 0)
    val = O.neg(O.mul(x, O.log(O.where(pos, x, 1.0))))
    rest = O.where(O.eq(x, 0), O.zeros_like(x), _full(x, -math.inf))
    return O.where(pos, val, O.where(O.isnan(x), x, rest))


op("special_entr(Tensor self) -> Tensor", CUSTOM, "python", composite=True, impl=_entr,
   function=False, method=False,
   doc="-self log(self) for self > 0, 0 at 0, -inf below.")


def _ndtr(self):
    _no_complex("ndtr", self)
    x = _floating(self)
    return O.mul(O.erfc(O.mul(x, -_SQRT1_2)), 0.5)


op("special_ndtr(Tensor self) -> Tensor", CUSTOM, "python", composite=True, impl=_ndtr,
   function=False, method=False, doc="The standard normal CDF, erfc(-self/sqrt(2)) / 2.")


def _log_ndtr(self):
    _no_complex("log_ndtr", self)
    x = _floating(self)
    if x.dtype in (_C.float16, _C.bfloat16):
        raise NotImplementedError(f'"log_ndtr_cpu" not implemented for \'{x.dtype._torch_name}\'')
    low = O.lt(x, -1.0)
    # x < -1: log(erfcx(-x/sqrt 2) / 2) - x^2 / 2 (no underflow); else log1p(-ndtr(-x))
    xl = O.where(low, x, -1.0)
    xh = O.where(low, 0.0, x)
    lo = O.sub(O.log(O.mul(O.special_erfcx(O.mul(xl, -_SQRT1_2)), 0.5)), O.mul(xl, xl) * 0.5)
    hi = O.log1p(O.mul(O.erfc(O.mul(xh, _SQRT1_2)), -0.5))
    return O.where(low, lo, hi)


op("special_log_ndtr(Tensor self) -> Tensor", CUSTOM, "python", composite=True,
   impl=_log_ndtr, function=False, method=False,
   doc="log of the standard normal CDF, accurate far into both tails.")


def _xlog1py(self, other):
    rt = _C.result_type(self, other)
    if rt.is_complex:
        raise NotImplementedError(f'"xlog1py" not implemented for \'{rt._torch_name}\'')
    if not rt.is_floating_point:
        rt = _C.get_default_dtype()
    s = O._to_copy(self, dtype=rt) if isinstance(self, _C.Tensor) else O.full((), self, dtype=rt)
    o = O._to_copy(other, dtype=rt) if isinstance(other, _C.Tensor) else O.full((), other,
                                                                                dtype=rt)
    zero = O.eq(s, 0) & ~O.isnan(o)
    out = O.mul(s, O.log1p(O.where(zero, 0.0, o)))
    return O.where(zero, O.zeros_like(out), out)


op("special_xlog1py(Tensor self, Tensor other) -> Tensor", CUSTOM, "python",
   composite=True, impl=_xlog1py, numbers=True, function=False, method=False,
   doc="self * log1p(other), 0 where self is 0 (unless other is NaN).")
