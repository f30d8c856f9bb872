"""Factories: tensors from sizes (zeros, ones, full, empty, arange, linspace, eye, rand,
randn), from another tensor's shape (the *_like forms) or dtype (Tensor.new_*), and the
triangle masks tril and triu."""
import math

import numpy as np

from .. import _C
from .. import prims as P
from . import api as O
from . import meta as M
from ..compiler.lowerings import extern, lower_arange, lower_full
from ..compiler.random_draws import lower_rand, lower_randn
from .registry import CUSTOM, FACTORY, FLOATING, RECOMPUTE_CHEAP, op

_OPTS = "ScalarType? dtype=None, Device? device=None, bool requires_grad=False"
_GEN = "Generator? generator=None, " + _OPTS


def _factory(name, kernel, fill=None, prim=False, opts=_OPTS, rule=0, lower=None):
    """A factory op: a prim (lowered by lower, else its eager kernel runs as an extern
    step in compiled graphs), or one that decomposes into full of fill."""
    decompose = None
    if fill is not None:
        def decompose(size, dtype, device, requires_grad, _fill=fill):
            return P.full(size, _fill, dtype=dtype if dtype is not None
                          else _C.get_default_dtype())
    op(f"{name}(SymInt[] size, *, {opts}) -> Tensor", FACTORY, kernel, prim=prim,
       lower=(lower or extern) if prim else None,
       method=False, decompose=decompose, rule=rule)


_factory("zeros", "zeros", fill=0)
_factory("ones", "ones", fill=1)
_factory("empty", "empty", fill=0)
op(f"full(SymInt[] size, Scalar fill_value, *, {_OPTS}) -> Tensor", FACTORY, "full",
   prim=True, lower=lower_full, method=False, meta=M.full, recompute=RECOMPUTE_CHEAP)
_factory("rand", "rand", prim=True, opts=_GEN, rule=FLOATING, lower=lower_rand)
_factory("randn", "randn", prim=True, opts=_GEN, rule=FLOATING, lower=lower_randn)

op(f"arange(Scalar end, *, {_OPTS}) -> Tensor", FACTORY, "arange", prim=True, method=False,
   lower=lower_arange, recompute=RECOMPUTE_CHEAP,
   meta=M.arange)
op(f"arange.start(Scalar start, Scalar end, Scalar step=1, *, {_OPTS}) -> Tensor", FACTORY,
   "arange", method=False, meta=M.arange,
   decompose=lambda start, end, step, dtype, device, requires_grad: P.add(
       P.mul(P.arange(_arange_length(start, end, step), dtype=dtype), step), start))


def _arange_length(start, end, step):
    """ceil((end - start) / step); in integers when a bound is a symbolic size
    ([dynamic]: true division would specialise it)."""
    if any(type(v).__name__ == "SymInt" for v in (start, end, step)) and \
            not any(isinstance(v, float) for v in (start, end, step)):
        if isinstance(step, int) and step < 0:      # divided by a positive step
            return -((end - start) // -step)
        return -((start - end) // step)
    return math.ceil((end - start) / step)

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
   rule=FLOATING,
   decompose=lambda self, dtype, device, requires_grad: P.rand(
       self.shape, dtype=dtype if dtype is not None else self.dtype))
op(f"randn_like(Tensor self, *, {_LIKE}) -> Tensor", FACTORY, "randn", method=False,
   rule=FLOATING,
   decompose=lambda self, dtype, device, requires_grad: P.randn(
       self.shape, dtype=dtype if dtype is not None else self.dtype))

# ------------------------------------------------------------------ linspace, eye


def _round_to(value, dt):
    return float(np.array(value, dtype=np.float64).astype(dt.numpy_dtype))


def _bound_in(value, dt):
    """A linspace bound converted to dt first, as PyTorch does (csrc: bound_in_dtype)."""
    if dt.is_floating_point:
        return _round_to(value, dt)
    if dt is _C.bool:
        return float(value != 0)
    bits = dt.itemsize * 8
    if dt is _C.uint8:
        lo, hi = (-(1 << 63) if isinstance(value, int) else 0), 255
    else:
        lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    if not lo <= value <= hi:
        raise RuntimeError(f"linspace(): value cannot be converted to type {dt} without "
                           "overflow")
    t = math.trunc(value)
    return float(t % 256 if dt is _C.uint8 else t)


def _linspace_meta(entry, args):
    start, end, steps, dtype = args[0], args[1], args[2], args[3]
    if steps < 0:
        raise RuntimeError("linspace(): number of steps must be non-negative")
    dt = dtype if dtype is not None else _C.get_default_dtype()
    if dt is _C.bool and steps > 1:
        raise NotImplementedError("linspace(): \"linspace_cpu\" not implemented for 'Bool'")
    _bound_in(start, dt), _bound_in(end, dt)
    return M.meta_tensor((steps,), dt)


def _linspace_decompose(start, end, steps, dtype, device, requires_grad):
    dt = dtype if dtype is not None else _C.get_default_dtype()
    start, end = _bound_in(start, dt), _bound_in(end, dt)
    if steps <= 1:
        return P.full((steps,), start, dtype=dt)
    step = (end - start) / (steps - 1)
    if dt.is_floating_point:
        step = _round_to(step, dt)       # PyTorch computes the step in the dtype
    i = P.arange(steps, dtype=_C.float64)
    low = P.add(P.mul(i, step), start)                              # start + i step
    high = P.add(P.mul(P.add(P.neg(i), steps - 1), -step), end)     # end - (n-1-i) step
    return P._to_copy(P.where(P.lt(i, steps // 2), low, high), dtype=dt)


op(f"linspace(Scalar start, Scalar end, int steps, *, {_OPTS}) -> Tensor", FACTORY,
   "linspace", method=False, meta=_linspace_meta, decompose=_linspace_decompose,
   doc="steps values evenly spaced from start to end (both included), in the default "
       "dtype unless dtype is given.")


def _eye_meta(entry, args):
    n, m, dtype = args[0], args[1], args[2]
    m = n if m is None else m
    if n < 0 or m < 0:
        raise RuntimeError(f"eye(): {'n' if n < 0 else 'm'} must be greater or equal to 0, "
                           f"got {n if n < 0 else m}")
    return M.meta_tensor((n, m), dtype if dtype is not None else _C.get_default_dtype())


def _eye_decompose(n, m, dtype, device, requires_grad):
    m = n if m is None else m
    dt = dtype if dtype is not None else _C.get_default_dtype()
    rows = P.view(P.arange(n), (n, 1))
    return P._to_copy(P.eq(rows, P.arange(m)), dtype=dt)


op(f"eye(SymInt n, SymInt? m=None, *, {_OPTS}) -> Tensor", FACTORY, "eye", method=False,
   meta=_eye_meta, decompose=_eye_decompose,
   doc="The n x m (n x n) identity matrix.")

# ------------------------------------------------------------------ tril, triu


def _triangle_meta(entry, args):
    self = args[0]
    name = entry.name.rstrip("_")
    if self.ndim < 2:
        raise RuntimeError(f"{name}(): input tensor must have at least 2 dimensions")
    return M.meta_tensor(tuple(self.shape), self.dtype)


def _triangle_decompose(lower):
    def decompose(self, diagonal):
        n, m = self.shape[-2], self.shape[-1]
        rows = P.view(P.arange(n), (n, 1))
        cols = P.arange(m)
        # tril keeps col <= row + diagonal, triu keeps col >= row + diagonal
        keep = P.le(cols, P.add(rows, diagonal)) if lower else \
            P.le(P.add(rows, diagonal), cols)
        return P.where(keep, self, False if self.dtype is _C.bool else 0)
    return decompose


op("tril(Tensor self, int diagonal=0) -> Tensor", CUSTOM, "tril", meta=_triangle_meta,
   inplace_variant=True,
   backward=lambda g, out, self, diagonal: (g.tril(diagonal),),
   decompose=_triangle_decompose(True),
   doc="self with the elements above the diagonal-th diagonal of the last two dims zeroed.")
op("triu(Tensor self, int diagonal=0) -> Tensor", CUSTOM, "triu", meta=_triangle_meta,
   inplace_variant=True,
   backward=lambda g, out, self, diagonal: (g.triu(diagonal),),
   decompose=_triangle_decompose(False),
   doc="self with the elements below the diagonal-th diagonal of the last two dims zeroed.")

# ------------------------------------------------------------------ Tensor.new_*: self's dtype


def _new(factory):
    def impl(self, size, *rest):
        *values, dtype, device, requires_grad = rest
        return factory(size, *values, dtype=self.dtype if dtype is None else dtype,
                       device=device, requires_grad=requires_grad)
    return impl


for _name, _factory_name in (("new_zeros", "zeros"), ("new_ones", "ones"),
                             ("new_empty", "empty")):
    op(f"{_name}(Tensor self, SymInt[] size, *, {_OPTS}) -> Tensor", CUSTOM, "python",
       composite=True, function=False,
       impl=(lambda f: _new(lambda *a, **k: getattr(O, f)(*a, **k)))(_factory_name),
       doc=f"{_factory_name}(size) in self's dtype unless dtype is given.")
op(f"new_full(Tensor self, SymInt[] size, Scalar fill_value, *, {_OPTS}) -> Tensor",
   CUSTOM, "python", composite=True, function=False,
   impl=_new(lambda *a, **k: O.full(*a, **k)),
   doc="full(size, fill_value) in self's dtype unless dtype is given.")


def _new_tensor(self, data, dtype, device, requires_grad):
    from .._tensor_new import tensor
    return tensor(data, dtype=self.dtype if dtype is None else dtype, device=device,
                  requires_grad=requires_grad)


op(f"new_tensor(Tensor self, Any data, *, {_OPTS}) -> Tensor", CUSTOM, "python",
   composite=True, function=False, impl=_new_tensor,
   doc="tensor(data) in self's dtype unless dtype is given.")
