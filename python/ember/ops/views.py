"""Views, indexing and copies: view, reshape, permute, expand, select, slice, [], to, ..."""
from .. import _C
from .. import prims as P
from . import api as O
from . import meta as M
from ..compiler.lowerings import (copy, lower_expand, lower_permute, lower_slice,
                                   lower_slice_scatter, lower_view)
from .registry import CUSTOM, RECOMPUTE_CHEAP, VIEW, op


def _is_tensor(x):
    return isinstance(x, _C.Tensor)


def _inverse(perm):
    inv = [0] * len(perm)
    for i, p in enumerate(perm):
        inv[p] = i
    return inv


# ------------------------------------------------------------------ views

op("view(Tensor(a) self, SymInt[] size) -> Tensor(a)", VIEW, "view", prim=True, meta=M.view,
   lower=lower_view,
   backward=lambda g, out, self, size: (g.reshape(self.shape),),
   view_scatter=lambda self, src, size: src.reshape(self.shape),
   view_replay=lambda self, size: self.reshape(size),
   doc="The same data with another shape; needs compatible strides (see reshape).")

op("reshape(Tensor(a) self, SymInt[] shape) -> Tensor(a)", CUSTOM, "reshape", composite=True,
   doc="view when the strides allow it, else a copy.")


def _permute_backward(g, out, self, dims):
    return (g.permute(_inverse([M.wrap_dim(d, self.ndim) for d in dims])),)


op("permute(Tensor(a) self, int[] dims) -> Tensor(a)", VIEW, "permute", prim=True,
   lower=lower_permute,
   meta=M.permute, backward=_permute_backward,
   view_scatter=lambda self, src, dims: _permute_backward(src, None, self, dims)[0])


def _transpose_decompose(self, dim0, dim1):
    perm = list(range(self.ndim))
    if self.ndim:
        d0, d1 = M.wrap_dim(dim0, self.ndim), M.wrap_dim(dim1, self.ndim)
        perm[d0], perm[d1] = perm[d1], perm[d0]
    return P.permute(self, perm)


op("transpose(Tensor(a) self, int dim0, int dim1) -> Tensor(a)", VIEW, "transpose",
   meta=M.transpose, aliases=("swapaxes", "swapdims"),
   backward=lambda g, out, self, dim0, dim1: (g.transpose(dim0, dim1),),
   view_scatter=lambda self, src, dim0, dim1: src.transpose(dim0, dim1),
   decompose=_transpose_decompose)

op("t(Tensor(a) self) -> Tensor(a)", VIEW, "t", meta=M.t,
   backward=lambda g, out, self: (g.t(),),
   view_scatter=lambda self, src: src.t(),
   decompose=lambda self: P.permute(self, list(range(self.ndim))[::-1]))

op("expand(Tensor(a) self, SymInt[] size, *, bool implicit=False) -> Tensor(a)", VIEW,
   "expand", prim=True, lower=lower_expand, meta=M.expand,
   backward=lambda g, out, self, size, implicit: (g.sum_to_size(self.shape),))

op("expand_as(Tensor(a) self, Tensor other) -> Tensor(a)", CUSTOM, "expand_as",
   composite=True, doc="expand(other.shape).")

op("unsqueeze(Tensor(a) self, int dim) -> Tensor(a)", VIEW, "unsqueeze", meta=M.unsqueeze,
   backward=lambda g, out, self, dim: (g.squeeze(M.wrap_dim(dim, self.ndim + 1)),),
   view_scatter=lambda self, src, dim: src.reshape(self.shape),
   decompose=lambda self, dim: P.view(self, M.unsqueeze(None, (self, dim)).shape))

op("squeeze(Tensor(a) self, int[1]? dim=None) -> Tensor(a)", VIEW, "squeeze", meta=M.squeeze,
   backward=lambda g, out, self, dim: (g.reshape(self.shape),),
   view_scatter=lambda self, src, dim: src.reshape(self.shape),
   decompose=lambda self, dim: P.view(self, M.squeeze(None, (self, dim)).shape))


def _select_decompose(self, dim, index):
    d = M.wrap_dim(dim, self.ndim)
    i = index + self.shape[d] if index < 0 else index
    return P.view(P.slice(self, d, i, i + 1, 1), M.select(None, (self, dim, index)).shape)


op("select(Tensor(a) self, int dim, SymInt index) -> Tensor(a)", VIEW, "select",
   meta=M.select,
   backward=lambda g, out, self, dim, index: (
       O.select_scatter(O.zeros(self.shape, dtype=g.dtype), g, dim, index),),
   view_scatter=lambda self, src, dim, index: O.select_scatter(self, src, dim, index),
   decompose=_select_decompose)

op("slice(Tensor(a) self, int dim=0, SymInt? start=None, SymInt? end=None, SymInt step=1)"
   " -> Tensor(a)", VIEW, "slice", prim=True, lower=lower_slice, meta=M.slice_,
   backward=lambda g, out, self, dim, start, end, step: (
       O.slice_scatter(O.zeros(self.shape, dtype=g.dtype), g, dim, start, end, step),),
   view_scatter=lambda self, src, dim, start, end, step: O.slice_scatter(
       self, src, dim, start, end, step))

op("alias(Tensor(a) self) -> Tensor(a)", VIEW, "alias", meta=M.alias,
   backward=lambda g, out, self: (g,),
   view_scatter=lambda self, src: src,
   decompose=lambda self: P.view(self, self.shape))

op("__getitem__(Tensor(a) self, Any indices) -> Tensor(a)", CUSTOM, "getitem",
   composite=True, method=False, function=False,
   doc="Basic indexing: ints, slices, None and ...; a chain of select/slice/unsqueeze.")

op("__setitem__(Tensor(a!) self, Any indices, Tensor value) -> ()", CUSTOM, "setitem",
   composite=True, method=False, function=False, numbers=True,
   doc="Copies value into self[indices] in place.")

# ------------------------------------------------------------------ copies

op("clone(Tensor self, *, MemoryFormat? memory_format=None) -> Tensor", CUSTOM, "clone",
   prim=True, lower=copy, meta=M.clone, recompute=RECOMPUTE_CHEAP,
   backward=lambda g, out, self, memory_format: (g,),
   doc="A copy; keeps a dense layout unless memory_format asks for contiguous.")

op("contiguous(Tensor(a) self, *, MemoryFormat memory_format='contiguous_format')"
   " -> Tensor(a)", CUSTOM, "contiguous", composite=True,
   doc="self if already contiguous, else a contiguous copy.")

op("_to_copy(Tensor self, *, ScalarType? dtype=None) -> Tensor", CUSTOM, "to_copy",
   prim=True, lower=copy, meta=M.to_copy, recompute=RECOMPUTE_CHEAP,
   backward=lambda g, out, self, dtype: (O._to_copy(
       O.real(g) if g.dtype.is_complex and not self.dtype.is_complex else g,
       dtype=self.dtype),),
   doc="A copy converted to dtype (convert_element_type).")


def _device_type(device):
    if device is None:
        return None
    return device if isinstance(device, str) else getattr(device, "type", str(device))


def _to(self, *args, **kwargs):
    """to(dtype) / to(device, dtype=None) / to(other): self when nothing changes."""
    dtype, device, copy = kwargs.pop("dtype", None), kwargs.pop("device", None), \
        kwargs.pop("copy", False)
    kwargs.pop("non_blocking", None)
    kwargs.pop("memory_format", None)
    if kwargs:
        raise TypeError(f"to() got an unexpected keyword argument '{next(iter(kwargs))}'")
    for a in args:
        if isinstance(a, _C.dtype):
            dtype = a
        elif _is_tensor(a):
            dtype, device = a.dtype, a.device
        elif isinstance(a, bool):
            continue
        elif a is not None:
            device = a
    dev = _device_type(device)
    if dev is not None and dev.split(":")[0] not in ("cpu", "meta"):
        raise RuntimeError(f"ember runs on the CPU only: device {device!r} is not available")
    if dev is not None and (dev == "meta") != self.is_meta:
        raise RuntimeError("to(): moving tensors between the 'cpu' and 'meta' devices is not "
                           "supported")
    if (dtype is None or dtype is self.dtype) and not copy:
        return self
    return O._to_copy(self, dtype=dtype)


op("to(Tensor(a) self, Any dtype_or_device=None, Any dtype=None, bool non_blocking=False, "
   "bool copy=False) -> Tensor(a)", CUSTOM, "python", composite=True, function=False,
   impl=lambda self, a, dtype, non_blocking, copy: _to(
       self, *([a] if a is not None else []), dtype=dtype, copy=copy),
   doc="to(dtype), to(device), to(other): a converted copy, or self if nothing changes.")


op("select_scatter(Tensor self, Tensor src, int dim, SymInt index) -> Tensor", CUSTOM,
   "select_scatter", meta=M.select_scatter,
   backward=lambda g, out, self, src, dim, index: (
       O.select_scatter(g, O.zeros(src.shape, dtype=g.dtype), dim, index),
       g.select(dim, index)),
   decompose=lambda self, src, dim, index: _select_scatter_decompose(self, src, dim, index),
   doc="A copy of self with src written at select(dim, index).")


def _select_scatter_decompose(self, src, dim, index):
    d = M.wrap_dim(dim, self.ndim)
    i = index + self.shape[d] if index < 0 else index
    return P.slice_scatter(self, P.view(src, M.unsqueeze(None, (src, d)).shape), d, i, i + 1, 1)


op("slice_scatter(Tensor self, Tensor src, int dim=0, SymInt? start=None, SymInt? end=None,"
   " SymInt step=1) -> Tensor", CUSTOM, "slice_scatter", prim=True, meta=M.slice_scatter,
   lower=lower_slice_scatter, recompute=RECOMPUTE_CHEAP,
   backward=lambda g, out, self, src, dim, start, end, step: (
       O.slice_scatter(g, O.zeros(src.shape, dtype=g.dtype), dim, start, end, step),
       g.slice(dim, start, end, step)),
   doc="A copy of self with src written at slice(dim, start, end, step).")

# ------------------------------------------------------------------ writes (with in-place twins)

op("fill.Scalar(Tensor self, Scalar value) -> Tensor", CUSTOM, "fill", inplace_variant=True,
   meta=lambda entry, args: M._dense_like(args[0], args[0].dtype), method=False,
   backward=lambda g, out, self, value: (g * 0,),
   decompose=lambda self, value: P.full(self.shape, value, dtype=self.dtype),
   doc="A tensor like self filled with value (fill_ writes it into self).")

def _copy_meta(entry, args):
    self, src = args
    shape = M.broadcast_shapes("copy_", tuple(self.shape), tuple(src.shape))
    if shape != tuple(self.shape):
        raise RuntimeError(f"copy_(): the source of shape {list(src.shape)} cannot be "
                           f"broadcast to the destination of shape {list(self.shape)}")
    return M._dense_like(self, self.dtype)


op("copy(Tensor self, Tensor src) -> Tensor", CUSTOM, "copy", inplace_variant=True,
   meta=_copy_meta, method=False,
   backward=lambda g, out, self, src: (g * 0, g),
   decompose=lambda self, src: P._to_copy(P.expand(src, self.shape), dtype=self.dtype),
   doc="src broadcast to self's shape and converted to self's dtype (copy_ writes it "
       "into self).")

op("zero_(Tensor(a!) self) -> Tensor(a!)", CUSTOM, "python", composite=True, function=False,
   impl=lambda self: self.fill_(0))
