"""ember.special: PyTorch's torch.special over the op table (ops/special_functions.py
holds the special functions' ops; the rest are the ops ember already has under their
top-level names). install() adds Tensor.polygamma/polygamma_ (the op takes n first) and
the in-place mvlgamma_."""
from __future__ import annotations

from . import _C
from .ops import api as O
from .ops import public as _public
from .functional import can_cast

__all__ = ["digamma", "entr", "erf", "erfc", "erfcx", "erfinv", "exp2", "expit", "expm1",
           "gammaln", "i0", "i0e", "i1", "i1e", "log1p", "log_ndtr", "log_softmax",
           "logit", "logsumexp", "multigammaln", "ndtr", "ndtri", "polygamma", "psi",
           "round", "sinc", "softmax", "xlog1py", "xlogy", "zeta"]

_ops = _public()

digamma = psi = _ops["digamma"]
erf = _ops["erf"]
erfc = _ops["erfc"]
erfinv = _ops["erfinv"]
exp2 = _ops["exp2"]
expit = _ops["sigmoid"]
expm1 = _ops["expm1"]
gammaln = _ops["lgamma"]
i0 = _ops["i0"]
i0e = _ops["special_i0e"]
i1 = _ops["special_i1"]
i1e = _ops["special_i1e"]
log1p = _ops["log1p"]
logit = _ops["logit"]
logsumexp = _ops["logsumexp"]
multigammaln = _ops["mvlgamma"]
ndtr = _ops["special_ndtr"]
ndtri = _ops["special_ndtri"]
erfcx = _ops["special_erfcx"]
entr = _ops["special_entr"]
log_ndtr = _ops["special_log_ndtr"]
polygamma = _ops["polygamma"]
sinc = _ops["sinc"]
xlogy = _ops["xlogy"]
xlog1py = _ops["special_xlog1py"]


def round(input, decimals=0):      # noqa: A001 (torch.special.round)
    return O.round(input, decimals=decimals)


def softmax(input, dim, dtype=None):
    return O.softmax(input, dim, dtype=dtype)


def log_softmax(input, dim, dtype=None):
    return O.log_softmax(input, dim, dtype=dtype)


def _scalar_operand(x, other):
    """A Python number beside a tensor, as a 0-dim tensor of their promoted dtype."""
    if isinstance(x, _C.Tensor):
        return x
    rt = _C.result_type(other, x) if isinstance(other, _C.Tensor) else None
    if rt is None or not (rt.is_floating_point or rt.is_complex):
        rt = _C.get_default_dtype()
    return O.full((), x, dtype=rt)


def zeta(input, other):
    """The Hurwitz zeta function sum_k (other + k)^-input; either may be a number."""
    if not isinstance(input, _C.Tensor) and not isinstance(other, _C.Tensor):
        raise TypeError("zeta(): expected at least one Tensor argument")
    return _ops["special_zeta"](_scalar_operand(input, other), _scalar_operand(other, input))


def _polygamma_method(self, n):
    return polygamma(n, self)


def _inplace(fn, name):
    def method(self, *args):
        out = fn(self, *args)
        if not can_cast(out.dtype, self.dtype):
            raise RuntimeError(f"result type {out.dtype._torch_name} can't be cast to the "
                               f"desired output type {self.dtype._torch_name}")
        return self.copy_(out)
    method.__name__ = method.__qualname__ = name
    return method


def install(namespace):
    _C._add_tensor_attrs({
        "polygamma": _polygamma_method,
        "polygamma_": _inplace(_polygamma_method, "polygamma_"),
        "mvlgamma_": _inplace(lambda self, p: O.mvlgamma(self, p), "mvlgamma_"),
    })
    namespace["special"] = __import__("sys").modules[__name__]
