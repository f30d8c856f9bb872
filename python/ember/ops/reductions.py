"""Reductions: sum, mean, amax, max, argmax, and sum_to_size (used by autograd)."""
import math

from .. import prims as P
from . import api as O
from . import meta as M
from .elementwise import _max_binary_backward
from .registry import BINARY, CUSTOM, FLOAT_ONLY, INT_TO_LONG, REDUCE, REDUCE_INDEX, op


def _dims_of(self, dim):
    """Reduced dimensions, normalised, as a sorted tuple."""
    mask = M.reduce_mask(dim, self.ndim)
    return tuple(i for i, m in enumerate(mask) if m)


def _unreduce(g, self, dim, keepdim):
    """Brings a reduction's gradient back to self's rank (size 1 where reduced)."""
    if keepdim or self.ndim == 0:
        return g
    for d in _dims_of(self, dim):
        g = g.unsqueeze(d)
    return g


def _count(self, dim):
    return math.prod(self.shape[d] for d in _dims_of(self, dim))


def _sum_backward(g, out, self, dim, keepdim, dtype):
    return (_unreduce(g, self, dim, keepdim).expand(self.shape),)


op("sum(Tensor self, int[1]? dim=None, bool keepdim=False, *, ScalarType? dtype=None) -> Tensor",
   REDUCE, "reduce", ufunc="add", rule=INT_TO_LONG, prim=True,
   backward=_sum_backward,
   doc="Sum over dim (all dims when None); integers and bool accumulate in int64.")


def _mean_decompose(self, dim, keepdim, dtype):
    n = _count(self, dim)
    return P.mul(P.sum(self, dim, keepdim, dtype=dtype), 1.0 / n if n else math.nan)


op("mean(Tensor self, int[1]? dim=None, bool keepdim=False, *, ScalarType? dtype=None) -> Tensor",
   REDUCE, "reduce", ufunc="add", rule=FLOAT_ONLY,
   backward=lambda g, out, self, dim, keepdim, dtype: (
       _unreduce(g, self, dim, keepdim).expand(self.shape) / max(_count(self, dim), 1),),
   decompose=_mean_decompose,
   doc="Mean over dim; floating point inputs only (or give dtype).")


def _evenly(g, out, self, dims, keepdim):
    """Gradient of a max/min over dims: shared evenly among the tied extremes."""
    outk = _unreduce(out, self, dims, keepdim)
    mask = self == outk
    count = mask.sum(dims if dims else None, keepdim=True)
    return _unreduce(g, self, dims, keepdim) * mask / count


op("amax(Tensor self, int[1] dim=[], bool keepdim=False) -> Tensor",
   REDUCE, "reduce", ufunc="maximum", prim=True,
   backward=lambda g, out, self, dim, keepdim: (_evenly(g, out, self, dim, keepdim),),
   doc="Maximum over dim (all dims when empty); NaN propagates.")


def _max_dim_backward(grads, outs, self, dim, keepdim):
    g = grads[0]
    if g is None:
        return (None,)
    indices = outs[1]
    d = M.wrap_dim(dim, self.ndim)
    if self.ndim == 0:
        return (g,)
    idx = indices if keepdim else indices.unsqueeze(d)
    gk = g if keepdim else g.unsqueeze(d)
    iota = O.arange(self.shape[d]).view([-1 if i == d else 1 for i in range(self.ndim)])
    return (O.where(iota == idx, gk, 0),)


op("max(Tensor self) -> Tensor", CUSTOM, "reduce_all", ufunc="maximum",
   meta=M.reduce_all,
   backward=lambda g, out, self: (_evenly(g, out, self, (), False),),
   decompose=lambda self: P.amax(self))
op("max.dim(Tensor self, int dim, bool keepdim=False) -> (Tensor values, Tensor indices)",
   REDUCE_INDEX, "reduce_index", ufunc="maximum", reduce_ufunc="argmax",
   backward=_max_dim_backward,
   decompose=lambda self, dim, keepdim: (P.amax(self, dim, keepdim),
                                         P.argmax(self, dim, keepdim)))
op("max.other(Tensor self, Tensor other) -> Tensor", BINARY, "ufunc", ufunc="maximum",
   backward=_max_binary_backward,
   decompose=lambda self, other: P.maximum(self, other))

op("argmax(Tensor self, int? dim=None, bool keepdim=False) -> Tensor",
   CUSTOM, "argreduce", reduce_ufunc="argmax", prim=True, meta=M.argreduce,
   doc="Index of the first maximum (of the flattened tensor when dim is None).")


def _sum_to_size(self, size):
    size = tuple(size)
    shape = tuple(self.shape)
    if shape == size:
        return self
    lead = len(shape) - len(size)
    if lead < 0 or any(s != 1 and s != shape[lead + i] for i, s in enumerate(size)):
        raise RuntimeError(f"sum_to_size(): size {list(size)} is not expandable to size "
                           f"{list(shape)}")
    dims = tuple(range(lead)) + tuple(lead + i for i, s in enumerate(size)
                                      if s == 1 and shape[lead + i] != 1)
    r = self.sum(dims, keepdim=True) if dims else self
    return r.view(size) if lead else r


op("sum_to_size(Tensor self, int[] size) -> Tensor", CUSTOM, "python", composite=True,
   impl=_sum_to_size,
   doc="Sums self down to size (the inverse of broadcasting self from size).")
