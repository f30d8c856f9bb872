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

# ------------------------------------------------------------------ diagonal, as_strided


def _diagonal_geom(self, offset, dim1, dim2):
    """(shape, strides) of diagonal(offset, dim1, dim2): dim1 and dim2 removed, the
    diagonal last (the C kernel's rule)."""
    d1, d2 = M.wrap_dim(dim1, self.ndim), M.wrap_dim(dim2, self.ndim)
    if d1 == d2:
        raise RuntimeError(f"diagonal dimensions cannot be identical {dim1}, {dim2}")
    n1, n2 = self.shape[d1], self.shape[d2]
    length = max(0, min(n1, n2 - offset) if offset >= 0 else min(n1 + offset, n2))
    keep = [i for i in range(self.ndim) if i not in (d1, d2)]
    st = self.stride()
    return ([self.shape[i] for i in keep] + [length],
            [st[i] for i in keep] + [st[d1] + st[d2]], d1, d2, keep, length)


def _diagonal_meta(entry, args):
    shape, strides, *_ = _diagonal_geom(*args)
    return M._view(args[0], shape, strides)


def _diagonal_index(self, offset, dim1, dim2):
    """self with dim1, dim2 moved last, and the row and column indices of the diagonal."""
    _, _, d1, d2, keep, length = _diagonal_geom(self, offset, dim1, dim2)
    moved = P.permute(self, keep + [d1, d2])
    idx = P.arange(0, length, 1, dtype=_C.int64)
    rows = P.add(idx, max(-offset, 0)) if offset < 0 else idx
    cols = P.add(idx, offset) if offset > 0 else idx
    return moved, [None] * len(keep) + [rows, cols], keep, d1, d2


def _diagonal_decompose(self, offset, dim1, dim2):
    moved, index, *_ = _diagonal_index(self, offset, dim1, dim2)
    return P.index(moved, index)


def _diagonal_scatter_decompose(self, src, offset, dim1, dim2):
    moved, index, keep, d1, d2 = _diagonal_index(self, offset, dim1, dim2)
    written = P.index_put(moved, index, src, False)
    order = keep + [d1, d2]
    return P.permute(written, [order.index(i) for i in range(self.ndim)])


op("diagonal(Tensor(a) self, int offset=0, int dim1=0, int dim2=1) -> Tensor(a)", VIEW,
   "diagonal", meta=_diagonal_meta,
   backward=lambda g, out, self, offset, dim1, dim2: (
       O.diagonal_scatter(O.zeros(self.shape, dtype=g.dtype), g, offset, dim1, dim2),),
   view_scatter=lambda self, src, offset, dim1, dim2: O.diagonal_scatter(
       self, src, offset, dim1, dim2),
   decompose=_diagonal_decompose,
   doc="The diagonal of dims dim1 and dim2 (shifted by offset) as the last dim: a view.")

op("diagonal_scatter(Tensor self, Tensor src, int offset=0, int dim1=0, int dim2=1) -> "
   "Tensor", CUSTOM, "diagonal_scatter",
   meta=lambda entry, args: M.clone(None, (args[0], None)),
   backward=lambda g, out, self, src, offset, dim1, dim2: (
       O.diagonal_scatter(g, O.zeros(src.shape, dtype=g.dtype), offset, dim1, dim2),
       O.diagonal(g, offset, dim1, dim2)),
   decompose=_diagonal_scatter_decompose,
   doc="A copy of self with src written on diagonal(offset, dim1, dim2).")


def _diag_embed(self, offset, dim1, dim2):
    nd = self.ndim + 1
    d1, d2 = M.wrap_dim(dim1, nd), M.wrap_dim(dim2, nd)
    if d1 == d2:
        raise RuntimeError(f"diagonal dimensions cannot be identical {dim1}, {dim2}")
    n = self.shape[-1] + abs(offset) if self.ndim else 1 + abs(offset)
    rest = iter(self.shape[:-1])
    shape = [n if i in (d1, d2) else next(rest) for i in range(nd)]
    src = self if self.ndim else O.reshape(self, [1])
    return O.diagonal_scatter(O.zeros(shape, dtype=self.dtype), src, offset, d1, d2)


op("diag_embed(Tensor self, int offset=0, int dim1=-2, int dim2=-1) -> Tensor", CUSTOM,
   "python", composite=True, impl=_diag_embed,
   doc="Matrices (in dims dim1, dim2) whose diagonal (shifted by offset) is self's last "
       "dim; zero elsewhere.")


def _as_strided_meta(entry, args):
    self, size, stride, storage_offset = args
    if len(size) != len(stride):
        raise RuntimeError("mismatch in length of strides and shape")
    if any(n < 0 for n in size):
        raise RuntimeError(f"Storage size calculation overflowed with sizes={list(size)} and "
                           f"strides={list(stride)}")
    if any(st < 0 for st in stride):
        raise RuntimeError(f"as_strided: Negative strides are not supported at the moment, "
                           f"got strides: {list(stride)}")
    if storage_offset is not None and storage_offset < 0:
        raise RuntimeError(f"Tensor: invalid storage offset {storage_offset}")
    return M._view(self, list(size), list(stride))


def _storage_positions(shape, strides, offset):
    """The storage position of every element of a (shape, strides, offset) view."""
    pos = O.full(list(shape), offset, dtype=_C.int64)
    for d, (n, st) in enumerate(zip(shape, strides)):
        step = O.arange(n, dtype=_C.int64) * st
        pos = pos + step.reshape([n if i == d else 1 for i in range(len(shape))])
    return pos


def _as_strided_backward(g, out, self, size, stride, storage_offset):
    # through self's storage: the view's gradient added at the positions it reads (an
    # overlapping view adds several times), then read back at self's own positions
    base = self.storage_offset() if storage_offset is None else storage_offset
    out_pos = _storage_positions(size, stride, base).reshape([-1])
    self_pos = _storage_positions(self.shape, self.stride(), self.storage_offset())
    extent = 1 + max(int(out_pos.max()) if out_pos.numel() else 0,
                     int(self_pos.max()) if self_pos.numel() else 0)
    storage = O.zeros([extent], dtype=g.dtype).index_add(0, out_pos, g.reshape([-1]))
    return (storage[self_pos.reshape([-1])].reshape(list(self.shape)),)


op("as_strided(Tensor(a) self, SymInt[] size, SymInt[] stride, SymInt? storage_offset=None)"
   " -> Tensor(a)", VIEW, "as_strided", meta=_as_strided_meta, traceable=False,
   backward=_as_strided_backward,
   doc="A view of self's storage with the given sizes, strides and offset. Compiled code "
       "runs it in CPython: its value depends on the storage layout.")

op("as_strided_scatter(Tensor self, Tensor src, SymInt[] size, SymInt[] stride, "
   "SymInt? storage_offset=None) -> Tensor", CUSTOM, "as_strided_scatter", traceable=False,
   meta=lambda entry, args: M.clone(None, (args[0], None)),
   doc="A copy of self with src written where as_strided(size, stride, storage_offset) "
       "reads (the offset relative to self's).")

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
