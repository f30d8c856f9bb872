"""Indexing: the general index / index_put prims (PyTorch's advanced indexing), nonzero,
gather, scatter (src, value, reduce), scatter_add, scatter_reduce, index_select, index_add,
masked_fill, masked_select, argwhere and where(condition).

`x[...]` and `x[...] = v` (views.py, csrc/kernels/view.c) apply ints, slices, None and
Ellipsis as views, then hand the tensor indices (masks, integer tensors, lists) to index /
index_put. Kernels: csrc/kernels/indexing.c."""

from .. import _C
from .. import prims as P
from . import api as O
from . import meta as M
from ..compiler.lowerings import extern, lower_index, lower_index_put
from .registry import CUSTOM, op

def _is_tensor(x):
    return isinstance(x, _C.Tensor)


# ------------------------------------------------------------------ index / index_put


def _index_entries(entry, self, indices, allow_masks=False):
    """[(dim, tensor)] of the defined indices (masks refused: their shape depends on the
    data), after PyTorch's checks."""
    if not isinstance(indices, (tuple, list)):
        raise TypeError(f"{entry.name}(): indices must be a tuple of Tensors or None")
    out, cursor, masks = [], 0, False
    for t in indices:
        if t is None:
            cursor += 1
        elif _is_tensor(t):
            if t.dtype in (_C.bool, _C.uint8):
                if t.ndim == 0:
                    raise IndexError(f"{entry.name}(): a 0-dim boolean index is only "
                                     "supported in x[...] indexing")
                for k in range(t.ndim):
                    if cursor + k >= self.ndim or t.shape[k] != self.shape[cursor + k]:
                        raise IndexError(
                            f"{entry.name}(): The shape of the mask {M.shape_str(t.shape)} at "
                            f"index {k} does not match the shape of the indexed tensor "
                            f"{M.shape_str(self.shape)} at index {cursor + k}")
                masks = True
                cursor += t.ndim
                continue
            if t.dtype not in (_C.int64, _C.int32):
                raise IndexError(f"{entry.name}(): tensors used as indices must be long, int, "
                                 "byte or bool tensors")
            out.append((cursor, t))
            cursor += 1
        else:
            raise TypeError(f"{entry.name}(): expected a Tensor or None in indices, got "
                            f"{type(t).__name__}")
        if cursor > self.ndim:
            raise IndexError(f"{entry.name}(): too many indices for tensor of dimension "
                             f"{self.ndim} (got {cursor})")
    if masks and not allow_masks:
        raise NotImplementedError(f"{entry.name}(): boolean mask indices give a result whose "
                                  "shape depends on the mask's values, which meta tensors "
                                  "do not have")
    return out, masks


def _broadcast_index_shapes(entry, entries):
    shapes = [tuple(t.shape) for _, t in entries]
    try:
        return M.broadcast_shapes(entry.name, *shapes)
    except RuntimeError:
        raise IndexError(f"{entry.name}(): shape mismatch: indexing tensors could not be "
                         "broadcast together with shapes "
                         + ", ".join(M.shape_str(s) for s in shapes)) from None


def _broadcast_strides(t, bshape):
    off = len(bshape) - t.ndim
    return [0 if i < off or t.shape[i - off] != bshape[i] else t.stride()[i - off]
            for i in range(len(bshape))]


def index_geometry(entry, self, entries):
    """The shape and strides of self[indices] as PyTorch's TensorIterator lays it out:
    the result of self restrided (stride 0 over the indexed dims) and the indices."""
    bshape = _broadcast_index_shapes(entry, entries)
    dims = [d for d, _ in entries]
    adjacent = dims == list(range(dims[0], dims[0] + len(dims)))
    rest = [d for d in range(self.ndim) if d not in dims]
    st = self.stride()
    if adjacent:
        before, after = list(range(dims[0])), [d for d in rest if d > dims[0]]
    else:
        before, after = [], rest
    shape = ([self.shape[d] for d in before] + list(bshape) + [self.shape[d] for d in after])
    M.check_ndim(entry.name, len(shape))
    strides = [[st[d] for d in before] + [0] * len(bshape) + [st[d] for d in after]]
    for _, t in entries:
        strides.append([0] * len(before) + _broadcast_strides(t, bshape) + [0] * len(after))
    return tuple(shape), M.tensoriter_strides(strides, shape, skip_unit=True)


def _index_meta(entry, args):
    self, indices = args
    entries, _ = _index_entries(entry, self, indices)
    if not entries:
        if not indices:
            raise IndexError("index(): at least one index must be provided")
        return M._dense_like(self, self.dtype)
    shape, strides = index_geometry(entry, self, entries)
    return M.meta_tensor(shape, self.dtype, strides)


def _index_backward(g, out, self, indices):
    return (O.zeros(self.shape, dtype=g.dtype).index_put(indices, g, accumulate=True), None)


op("index.Tensor(Tensor self, Any indices) -> Tensor", CUSTOM, "index", prim=True,
   lower=lower_index,
   checks_values=True,
   method=False, function=False, meta=_index_meta, backward=_index_backward,
   doc="self[indices] for a tuple of index tensors (int64 / int32, or bool masks) and None "
       "(a whole dim): PyTorch's advanced indexing. The broadcast index shape replaces the "
       "indexed dims where they are adjacent, else goes first. Masks give a data-dependent "
       "shape (no meta rule).")


def _index_put_meta(entry, args):
    self, indices, values, accumulate = args
    entries, masks = _index_entries(entry, self, indices, allow_masks=True)
    if values.dtype is not self.dtype:
        raise RuntimeError(f"{entry.name}(): Index put requires the source and destination "
                           f"dtypes match, got {self.dtype._torch_name} for the destination and "
                           f"{values.dtype._torch_name} for the source.")
    if entries and not masks:
        shape, _ = index_geometry(entry, self, entries)
        _check_values(entry, values, shape)
    return M._dense_like(self, self.dtype)


def _check_values(entry, values, shape):
    vs = tuple(values.shape)
    lead = len(vs) - len(shape)
    # (bool() of a symbolic size comparison guards it: values of a symbolic length)
    ok = all(bool(n == 1) for n in vs[:max(lead, 0)])
    for i, n in enumerate(vs[max(lead, 0):]):
        j = len(shape) - (len(vs) - max(lead, 0)) + i
        ok = ok and bool(n == 1 or n == shape[j])     # (a SymBool guards: [dynamic])
    if not ok:
        raise RuntimeError(f"{entry.name}(): shape mismatch: value tensor of shape "
                           f"{M.shape_str(vs)} cannot be broadcast to indexing result of shape "
                           f"{M.shape_str(shape)}")


op("index_put(Tensor self, Any indices, Tensor values, bool accumulate=False) -> Tensor",
   CUSTOM, "index_put", prim=True, lower=lower_index_put, inplace_variant=True,
   meta=_index_put_meta,
   checks_values=True,
   backward=lambda g, out, self, indices, values, accumulate: (
       g if accumulate else g.index_put(indices, O.zeros((), dtype=g.dtype)), None,
       O.index(g, indices), None),
   doc="A copy of self with values (broadcast to self[indices]'s shape, of self's dtype) "
       "written at indices, or added there (duplicates accumulate) with accumulate=True.")


def _dynamic_meta(entry, args):
    raise NotImplementedError(f"{entry.name}(): the result's shape depends on the values of "
                              "the input, which meta tensors do not have")


op("nonzero(Tensor self) -> Tensor", CUSTOM, "nonzero", prim=True, meta=_dynamic_meta,
   lower=extern,
   doc="The indices of the non-zero elements, one row per element ([n, ndim], int64); the "
       "shape depends on the values.")
op("nonzero.as_tuple(Tensor self, *, bool as_tuple) -> Tensor[]", CUSTOM, "nonzero_tuple",
   composite=True, doc="nonzero(self) (as_tuple=False), or its columns as a tuple.")
op("argwhere(Tensor self) -> Tensor", CUSTOM, "argwhere", composite=True,
   doc="nonzero(self).")
op("where.cond(Tensor condition) -> Tensor[]", CUSTOM, "where_cond", composite=True,
   method=False, doc="where(condition): nonzero(condition, as_tuple=True).")

# ------------------------------------------------------------------ gather / scatter


def _same_rank(a, b):
    return max(a.ndim, 1) == max(b.ndim, 1)


def _size(t, d):
    return t.shape[d] if t.ndim else 1


def _gather_meta(entry, args):
    self, dim, index = args[0], args[1], args[2]
    d = M.wrap_dim(dim, self.ndim)
    if index.dtype not in (_C.int64, _C.int32):
        raise RuntimeError("gather(): Expected dtype int32 or int64 for index")
    if not _same_rank(self, index):
        raise RuntimeError("gather(): Index tensor must have the same number of dimensions as "
                           "input tensor")
    for a in range(index.ndim):
        if a != d and _size(index, a) > _size(self, a):
            raise RuntimeError(f"gather(): Size does not match at dimension {a} expected index "
                               f"{M.shape_str(index.shape)} to be no larger than self "
                               f"{M.shape_str(self.shape)} apart from dimension {d}")
    return M.meta_tensor(index.shape, self.dtype)


def no_negative(index):
    """index with its negative values made out of range of any dim: the index prim wraps
    [-n, 0) as x[idx] does, where gather, index_select and embedding refuse negative
    indices, so their decompositions (what compiled graphs run) raise for them too (the
    compiled graph's IndexError; capture then reruns the frame and raises eager's)."""
    if index.dtype not in (_C.int64, _C.int32):
        return index
    low = -(1 << 63) if index.dtype is _C.int64 else -(1 << 31)
    return P.where(P.lt(index, 0), P.full([], low, dtype=index.dtype), index)


def _coords(index, d):
    """Index tensors that pick self[..., index[i], ...] at every position i of index: an
    iota per dim (index itself along d), broadcasting to index's shape."""
    out = []
    for a in range(index.ndim):
        if a == d:
            out.append(no_negative(index))
        else:
            shape = [1] * index.ndim
            shape[a] = index.shape[a]
            out.append(P.view(O.arange(index.shape[a]), shape))
    return tuple(out)


def _gather_decompose(self, dim, index, sparse_grad):
    if self.ndim == 0:
        # a 0-d self is one element along its one dim: its index values are checked too
        r = P.index(P.view(self, [1]), (no_negative(P.view(index, [-1])),))
        return P.view(r, list(index.shape))
    d = M.wrap_dim(dim, self.ndim)
    idx = index if index.ndim else P.view(index, [1])
    r = P.index(self, _coords(idx, d))
    return r if index.ndim else P.view(r, [])


op("gather(Tensor self, int dim, Tensor index, *, bool sparse_grad=False) -> Tensor",
   CUSTOM, "gather", meta=_gather_meta,
   backward=lambda g, out, self, dim, index, sparse_grad: (
       O.zeros(self.shape, dtype=g.dtype).scatter_add(dim, index, g), None, None, None),
   decompose=_gather_decompose,
   doc="out[i][j][k] = self[index[i][j][k]][j][k] (for dim 0): values picked along dim.")


def _scatter_meta(entry, args):
    self, dim, index = args[0], args[1], args[2]
    src = args[3] if _is_tensor(args[3]) else None
    name = entry.name.rstrip("_")
    d = M.wrap_dim(dim, self.ndim)
    if index.dtype not in (_C.int64, _C.int32):
        raise RuntimeError(f"{name}(): Expected dtype int32 or int64 for index")
    if src is not None and src.dtype is not self.dtype:
        raise RuntimeError(f"{name}(): Expected self.dtype to be equal to src.dtype")
    if not _same_rank(self, index):
        raise RuntimeError(f"{name}(): Index tensor must have the same number of dimensions as "
                           "self tensor")
    if src is not None and not _same_rank(src, index):
        raise RuntimeError(f"{name}(): Index tensor must have the same number of dimensions as "
                           "src tensor")
    for a in range(index.ndim):
        if (a != d and _size(index, a) > _size(self, a)) or (
                src is not None and _size(index, a) > _size(src, a)):
            raise RuntimeError(f"{name}(): Expected index {M.shape_str(index.shape)} to be "
                               f"smaller than self {M.shape_str(self.shape)} apart from "
                               f"dimension {d}" + (f" and to be smaller size than src "
                                                   f"{M.shape_str(src.shape)}" if src is not None
                                                   else ""))
    reduce = _reduce_arg(entry, args)
    if reduce is not None:
        allowed = ("sum", "prod", "mean", "amax", "amin") if entry.name.startswith(
            "scatter_reduce") else ("add", "multiply")
        if reduce not in allowed:
            if entry.name.startswith("scatter_reduce"):
                raise RuntimeError(f"{name}(): reduce argument must be either sum, prod, mean, "
                                   f"amax or amin, got {reduce}")
            raise RuntimeError(f"{name}(): reduce argument must be either add or multiply.")
    return M.meta_tensor(self.shape, self.dtype)


def _reduce_arg(entry, args):
    names = [p.name for p in entry.schema.params]
    return args[names.index("reduce")] if "reduce" in names else None


def _slice_to(src, shape):
    for a, n in enumerate(shape):
        if src.shape[a] != n:
            src = P.slice(src, a, 0, n)
    return src


def _scatter_decompose(self, dim, index, src, reduce=None, include_self=True):
    """scatter / scatter_add as index_put at the iota coordinates of index; reductions other
    than a sum through the scatter_reduce prim."""
    if index.numel() == 0:
        return P.clone(self, memory_format="contiguous_format")
    if not _is_tensor(src):
        src = P.full(list(index.shape), src, dtype=self.dtype)
    if reduce in ("multiply", "prod", "mean", "amax", "amin") or not include_self:
        return P.scatter_reduce(self, dim, index, _slice_to(src, index.shape),
                                {"multiply": "prod", "add": "sum"}.get(reduce, reduce),
                                include_self=include_self)
    if self.ndim == 0:
        return P.clone(_slice_to(src, index.shape) if reduce is None else P.add(self, src))
    d = M.wrap_dim(dim, self.ndim)
    src = _slice_to(src, index.shape)
    if index.ndim > 63:
        # index_put takes at most 63 index tensors: leave out dims of size 1 (a 64-d
        # tensor has some besides d, and index and src are 1 there too)
        ones = {a for a in range(self.ndim) if a != d and self.shape[a] == 1}

        def squeezed(t):
            return P.view(t, [t.shape[a] for a in range(t.ndim) if a not in ones])
        flat = lambda t: squeezed(P.clone(t, memory_format="contiguous_format"))  # noqa: E731
        nd = d - sum(a < d for a in ones)
        out = P.index_put(flat(self), _coords(flat(index), nd), flat(src),
                          reduce in ("add", "sum"))
        return P.view(P.clone(out, memory_format="contiguous_format"), list(self.shape))
    out = P.index_put(self, _coords(index, d), src, reduce in ("add", "sum"))
    return P.clone(out, memory_format="contiguous_format")


def _scatter_src_backward(g, out, self, dim, index, src):
    return (g.scatter(dim, index, 0), None, None, _to_src_shape(g.gather(dim, index), src))


for _schema, _bwd, _dec in (
        ("scatter.src(Tensor self, int dim, Tensor index, Tensor src) -> Tensor",
         _scatter_src_backward,
         lambda self, dim, index, src: _scatter_decompose(self, dim, index, src)),
        ("scatter.value(Tensor self, int dim, Tensor index, Scalar value) -> Tensor",
         lambda g, out, self, dim, index, value: (g.scatter(dim, index, 0), None, None, None),
         lambda self, dim, index, value: _scatter_decompose(self, dim, index, value)),
        ("scatter.reduce(Tensor self, int dim, Tensor index, Tensor src, *, str reduce) -> "
         "Tensor", None,
         lambda self, dim, index, src, reduce: _scatter_decompose(self, dim, index, src,
                                                                  reduce)),
        ("scatter.value_reduce(Tensor self, int dim, Tensor index, Scalar value, *, "
         "str reduce) -> Tensor", None,
         lambda self, dim, index, value, reduce: _scatter_decompose(self, dim, index, value,
                                                                    reduce))):
    op(_schema, CUSTOM, "scatter", meta=_scatter_meta, inplace_variant=True, backward=_bwd,
       decompose=_dec,
       doc="A copy of self with src (or value) written at index along dim: "
           "self[index[i][j]][j] = src[i][j] (dim 0); reduce 'add' or 'multiply' combines.")

op("scatter_add(Tensor self, int dim, Tensor index, Tensor src) -> Tensor", CUSTOM, "scatter",
   meta=_scatter_meta, inplace_variant=True,
   backward=lambda g, out, self, dim, index, src: (
       g, None, None, _to_src_shape(g.gather(dim, index), src)),
   decompose=lambda self, dim, index, src: _scatter_decompose(self, dim, index, src, "add"),
   doc="A copy of self with src added at index along dim (duplicates accumulate).")


def _scatter_reduce_backward(g, out, self, dim, index, src, reduce, include_self):
    if reduce == "sum":
        gs = g if include_self else O.where(_touched(self, dim, index), 0, g)
        return (gs, None, None, _to_src_shape(g.gather(dim, index), src), None, None)
    if reduce == "mean":
        ones = O.ones(src.shape, dtype=g.dtype)
        count = O.full(self.shape, 1 if include_self else 0, dtype=g.dtype).scatter_add(
            dim, index, ones)
        count = O.where(count == 0, 1, count)
        gc = g / count
        return (gc if include_self else O.where(_touched(self, dim, index), 0, gc), None, None,
                _to_src_shape(gc.gather(dim, index), src), None, None)
    if reduce in ("amax", "amin"):
        # shared evenly among self (when included) and the sources equal to the result
        hit_src = _slice_src(src, index) == out.gather(dim, index)
        hit_self = self == out
        if not include_self:
            hit_self = hit_self & (_touched(self, dim, index) == False)  # noqa: E712
        count = hit_self.to(g.dtype).scatter_add(dim, index, hit_src.to(g.dtype))
        gc = g / O.where(count == 0, 1, count)
        return (O.where(hit_self, gc, 0), None, None,
                _to_src_shape(O.where(hit_src, gc.gather(dim, index), 0), src), None, None)
    # prod, exact with zeros: a contributor's gradient is the product of the others,
    # i.e. P/x with no zero at the target, P (the product of the non-zero ones) for the
    # only zero, and 0 when another contributor is zero
    srcs = _slice_src(src, index)
    zs, zx = srcs == 0, self == 0
    count = (zx.to(g.dtype) if include_self else O.zeros(self.shape, dtype=g.dtype)) \
        .scatter_add(dim, index, zs.to(g.dtype))
    base = O.where(zx, 1, self) if include_self else O.ones(self.shape, dtype=self.dtype)
    pnz = base.scatter_reduce(dim, index, O.where(zs, 1, srcs), "prod")

    def grad_of(x, zero, gx, cx, px):
        return O.where(zero, O.where(cx == 1, gx * px, 0),
                       O.where(cx == 0, gx * px / O.where(zero, 1, x), 0))
    if include_self:
        gs = grad_of(self, zx, g, count, pnz)
    else:
        gs = O.where(_touched(self, dim, index), 0, g)
    gsrc = grad_of(srcs, zs, g.gather(dim, index), count.gather(dim, index),
                   pnz.gather(dim, index))
    return (gs, None, None, _to_src_shape(gsrc, src), None, None)


def _to_src_shape(g, src):
    """A gradient of src[:index.shape] as a gradient of src (zeros beyond)."""
    if tuple(g.shape) == tuple(src.shape):
        return g
    pad = []
    for a in range(src.ndim - 1, -1, -1):
        pad += [0, src.shape[a] - g.shape[a]]
    return O.pad(g, pad)


def _touched(self, dim, index):
    return O.zeros(self.shape, dtype=_C.bool).scatter(
        dim, index, O.ones(index.shape, dtype=_C.bool))


def _slice_src(src, index):
    for a in range(index.ndim):
        if src.shape[a] != index.shape[a]:
            src = src.narrow(a, 0, index.shape[a])
    return src


op("scatter_reduce.two(Tensor self, int dim, Tensor index, Tensor src, str reduce, *, "
   "bool include_self=True) -> Tensor", CUSTOM, "scatter", prim=True, meta=_scatter_meta,
   checks_values=True, lower=extern,
   inplace_variant=True, backward=_scatter_reduce_backward,
   doc="self with src reduced into it at index along dim: reduce is sum, prod, mean, amax "
       "or amin; include_self=False leaves self's values out where src lands.")


def _index_select_meta(entry, args):
    self, dim, index = args
    d = M.wrap_dim(dim, self.ndim)
    if index.ndim > 1:
        raise IndexError("index_select(): Index is supposed to be a vector")
    if index.dtype not in (_C.int64, _C.int32):
        raise RuntimeError("index_select(): Expected dtype int32 or int64 for index")
    shape = list(self.shape)
    if self.ndim:
        shape[d] = index.numel()
    return M.meta_tensor(shape, self.dtype)


def _index_select_decompose(self, dim, index):
    if self.ndim == 0:
        return P.clone(self)
    d = M.wrap_dim(dim, self.ndim)
    r = P.index(self, (None,) * d + (no_negative(P.view(index, [-1])),))
    return P.clone(r, memory_format="contiguous_format")


def _index_select_backward(g, out, self, dim, index):
    if self.ndim == 0:
        return (g, None, None)
    d = M.wrap_dim(dim, self.ndim)
    return (O.zeros(self.shape, dtype=g.dtype).index_add(d, index.reshape(-1), g), None, None)


op("index_select(Tensor self, int dim, Tensor index) -> Tensor", CUSTOM, "index_select",
   meta=_index_select_meta, backward=_index_select_backward,
   decompose=_index_select_decompose,
   doc="The slices of self at the positions in index (a vector) along dim.")


def _index_add_meta(entry, args):
    self, dim, index, source, alpha = args
    d = M.wrap_dim(dim, self.ndim)
    if index.ndim > 1:
        raise IndexError("index_add(): Index is supposed to be a vector")
    if index.dtype not in (_C.int64, _C.int32):
        raise RuntimeError("index_add(): Expected dtype int32 or int64 for index")
    if source.dtype is not self.dtype:
        raise RuntimeError("index_add(): self and source expected to have the same dtype, but "
                           f"got (self) {self.dtype._torch_name} and (source) "
                           f"{source.dtype._torch_name}")
    want = list(self.shape)
    if self.ndim:
        want[d] = index.numel()
    if max(source.ndim, 1) != max(self.ndim, 1) or (self.ndim and list(source.shape) != want):
        raise RuntimeError("index_add(): Source/destination tensor must have same slice "
                           "shapes.")
    return M.meta_tensor(self.shape, self.dtype)


def _index_add_decompose(self, dim, index, source, alpha):
    if self.ndim == 0:
        return P.add(self, source, alpha=alpha)
    d = M.wrap_dim(dim, self.ndim)
    src = source if alpha == 1 else P.mul(source, alpha)
    return P.index_put(self, (None,) * d + (P.view(index, [-1]),), src, True)


op("index_add(Tensor self, int dim, Tensor index, Tensor source, *, Scalar alpha=1) -> Tensor",
   CUSTOM, "index_add", meta=_index_add_meta, inplace_variant=True,
   backward=lambda g, out, self, dim, index, source, alpha: (
       g, None, None, (g.index_select(dim, index) if self.ndim else g) * alpha, None),
   decompose=_index_add_decompose,
   doc="A copy of self with alpha * source added at the positions in index along dim.")

# ------------------------------------------------------------------ masks


def _masked_fill_meta(entry, args):
    self, mask, value = args
    name = entry.name.rstrip("_")
    if mask.dtype is not _C.bool:
        raise RuntimeError(f"{name}(): masked_fill_ only supports boolean masks, but got mask "
                           f"with dtype {mask.dtype}")
    if _is_tensor(value) and value.ndim != 0:
        raise RuntimeError(f"{name}(): masked_fill_ only supports a 0-dimensional value "
                           f"tensor, but got tensor with {value.ndim} dimension(s).")
    shape = M.broadcast_shapes(name, tuple(self.shape), tuple(mask.shape))
    return M.meta_tensor(shape, self.dtype)


op("masked_fill.Tensor(Tensor self, Tensor mask, Tensor value) -> Tensor", CUSTOM,
   "masked_fill", meta=_masked_fill_meta, inplace_variant=True,
   backward=lambda g, out, self, mask, value: (
       O.where(mask, 0, g), None, O.where(mask, g, 0).sum()),
   decompose=lambda self, mask, value: P.where(mask, P._to_copy(value, dtype=self.dtype),
                                               P.expand(self, list(M.broadcast_shapes(
                                                   "masked_fill", tuple(self.shape),
                                                   tuple(mask.shape))))),
   doc="self with value (a 0-d tensor) where mask is true.")
op("masked_fill.Scalar(Tensor self, Tensor mask, Scalar value) -> Tensor", CUSTOM,
   "masked_fill", meta=_masked_fill_meta, inplace_variant=True,
   backward=lambda g, out, self, mask, value: (O.where(mask, 0, g), None, None),
   decompose=lambda self, mask, value: P.where(mask, P.full([], value, dtype=self.dtype),
                                               P.expand(self, list(M.broadcast_shapes(
                                                   "masked_fill", tuple(self.shape),
                                                   tuple(mask.shape))))),
   doc="self with value where mask (bool, broadcasting) is true.")


def _masked_select_shape(self, mask):
    if mask.dtype is not _C.bool:
        raise RuntimeError("masked_select(): masked_select: expected BoolTensor for mask")
    return list(M.broadcast_shapes("masked_select", tuple(self.shape), tuple(mask.shape)))


def _masked_select_meta(entry, args):
    _masked_select_shape(*args)
    return _dynamic_meta(entry, args)


def _masked_select_decompose(self, mask):
    shape = _masked_select_shape(self, mask)
    return P.index(P.expand(self, shape), (P.expand(mask, shape),))


def _masked_select_backward(g, out, self, mask):
    shape = _masked_select_shape(self, mask)
    return (O.zeros(shape, dtype=g.dtype).index_put((mask.expand(shape),), g), None)


op("masked_select(Tensor self, Tensor mask) -> Tensor", CUSTOM, "masked_select",
   meta=_masked_select_meta, backward=_masked_select_backward,
   decompose=_masked_select_decompose,
   doc="The elements of self (broadcast with mask) where mask is true, as a 1-D tensor.")
