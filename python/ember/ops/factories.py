"""Factories: tensors from sizes (zeros, ones, full, empty, arange, rand, randn) or from
another tensor's shape (the *_like forms)."""
import math

from .. import _C
from .. import prims as P
from . import meta as M
from .registry import FACTORY, op

_OPTS = "ScalarType? dtype=None, Device? device=None, bool requires_grad=False"
_GEN = "Generator? generator=None, " + _OPTS


def _factory(name, kernel, fill=None, prim=False, opts=_OPTS):
    decompose = None
    if fill is not None:
        def decompose(size, dtype, device, requires_grad, _fill=fill):
            return P.full(size, _fill, dtype=dtype if dtype is not None
                          else _C.get_default_dtype())
    op(f"{name}(SymInt[] size, *, {opts}) -> Tensor", FACTORY, kernel, prim=prim,
       method=False, decompose=decompose)


_factory("zeros", "zeros", fill=0)
_factory("ones", "ones", fill=1)
_factory("empty", "empty", fill=0)
op(f"full(SymInt[] size, Scalar fill_value, *, {_OPTS}) -> Tensor", FACTORY, "full",
   prim=True, method=False)
_factory("rand", "rand", prim=True, opts=_GEN)
_factory("randn", "randn", prim=True, opts=_GEN)

op(f"arange(Scalar end, *, {_OPTS}) -> Tensor", FACTORY, "arange", prim=True, method=False,
   meta=M.arange)
op(f"arange.start(Scalar start, Scalar end, Scalar step=1, *, {_OPTS}) -> Tensor", FACTORY,
   "arange", method=False, meta=M.arange,
   decompose=lambda start, end, step, dtype, device, requires_grad: P.add(
       P.mul(P.arange(math.ceil((end - start) / step), dtype=dtype), step), start))

_LIKE = "ScalarType? dtype=None, Device? device=None, bool requires_grad=False"
for _name, _kernel, _fill in (("zeros_like", "zeros", 0), ("ones_like", "ones", 1),
                              ("empty_like", "empty", 0)):
    op(f"{_name}(Tensor self, *, {_LIKE}) -> Tensor", FACTORY, _kernel, method=False,
       decompose=lambda self, dtype, device, requires_grad, _f=_fill: P.full(
           self.shape, _f, dtype=dtype if dtype is not None else self.dtype))
op(f"full_like(Tensor self, Scalar fill_value, *, {_LIKE}) -> Tensor", FACTORY, "full",
   method=False,
   decompose=lambda self, fill_value, dtype, device, requires_grad: P.full(
       self.shape, fill_value, dtype=dtype if dtype is not None else self.dtype))
op(f"rand_like(Tensor self, *, {_LIKE}) -> Tensor", FACTORY, "rand", method=False,
   decompose=lambda self, dtype, device, requires_grad: P.rand(
       self.shape, dtype=dtype if dtype is not None else self.dtype))
op(f"randn_like(Tensor self, *, {_LIKE}) -> Tensor", FACTORY, "randn", method=False,
   decompose=lambda self, dtype, device, requires_grad: P.randn(
       self.shape, dtype=dtype if dtype is not None else self.dtype))
