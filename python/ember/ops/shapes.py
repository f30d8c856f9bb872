"""Shapes: cat, stack, split, chunk, unbind, flatten, unflatten, movedim, narrow, repeat,
tile, flip, roll, pad and the *_as forms.

cat is a prim; flip, roll and pad decompose (into index, slice, cat and full); the rest
are composites written in C (csrc/kernels/shape.c): they call view, slice, select,
unsqueeze, permute, expand, reshape and cat, which autograd and tracers see."""

from .. import _C
from .. import prims as P
from . import api as O
from . import meta as M
from ..compiler.lowerings import lower_cat
from .registry import CUSTOM, RECOMPUTE_CHEAP, op


# ------------------------------------------------------------------ cat


def _cat_skipped(t):
    """PyTorch skips legacy empty 1-D tensors (shape [0]) in cat."""
    return t.ndim == 1 and t.shape[0] == 0


def _cat_meta(entry, args):
    tensors, dim = args
    if len(tensors) == 0:
        raise ValueError("cat(): expected a non-empty list of Tensors")
    dtype = M.result_type(*[M.meta_tensor((1,), t.dtype) for t in tensors])
    for i, t in enumerate(tensors):
        if t.ndim == 0:
            raise RuntimeError(f"cat(): zero-dimensional tensor (at position {i}) cannot be "
                               "concatenated")
    kept = [(i, t) for i, t in enumerate(tensors) if not _cat_skipped(t)]
    if not kept:
        return M.meta_tensor((0,), dtype)
    ref = kept[0][1]
    d = M.wrap_dim(dim, ref.ndim)
    size = 0
    for i, t in kept:
        if t.ndim != ref.ndim:
            raise RuntimeError(f"cat(): Tensors must have same number of dimensions: got "
                               f"{ref.ndim} and {t.ndim}")
        for k in range(ref.ndim):
            if k != d and t.shape[k] != ref.shape[k]:
                raise RuntimeError(f"cat(): Sizes of tensors must match except in dimension "
                                   f"{d}. Expected size {ref.shape[k]} but got size "
                                   f"{t.shape[k]} for tensor number {i} in the list.")
        size += t.shape[d]
    shape = list(ref.shape)
    shape[d] = size
    return M.meta_tensor(shape, dtype)


def _cat_backward(g, out, tensors, dim):
    # a skipped (legacy empty 1-D) tensor still gets a gradient: an empty one, as
    # PyTorch's cat backward gives it
    kept = [t for t in tensors if not _cat_skipped(t)]
    d = M.wrap_dim(dim, kept[0].ndim) if kept else 0
    grads, offset = [], 0
    for t in tensors:
        if _cat_skipped(t):
            grads.append(g.new_zeros((0,)))
            continue
        grads.append(g.narrow(d, offset, t.shape[d]))
        offset += t.shape[d]
    return (grads, None)


op("cat(Tensor[] tensors, int dim=0) -> Tensor", CUSTOM, "cat", prim=True, method=False,
   lower=lower_cat, recompute=RECOMPUTE_CHEAP,
   aliases=("concat", "concatenate"), meta=_cat_meta, backward=_cat_backward,
   doc="The tensors joined along dim (PyTorch's promotion; 1-D empty tensors are "
       "skipped).")

op("stack(Tensor[] tensors, int dim=0) -> Tensor", CUSTOM, "stack", composite=True,
   method=False, doc="The tensors (all of one shape) joined along a new dim: unsqueeze + cat.")
op("hstack(Tensor[] tensors) -> Tensor", CUSTOM, "hstack", composite=True, method=False,
   doc="cat along dim 1 (dim 0 for 1-D tensors).")
op("vstack(Tensor[] tensors) -> Tensor", CUSTOM, "vstack", composite=True, method=False,
   aliases=("row_stack",), doc="cat along dim 0 of the tensors made at least 2-D.")

# ------------------------------------------------------------------ splitting (composites)

op("split(Tensor(a) self, SymInt split_size, int dim=0) -> Tensor(a)[]", CUSTOM, "split",
   composite=True, doc="Views of consecutive pieces of split_size along dim (the last "
                       "may be smaller).")
op("split.sizes(Tensor(a) self, SymInt[] split_size, int dim=0) -> Tensor(a)[]", CUSTOM,
   "split_with_sizes", composite=True, doc="Views of pieces of the given sizes along dim.")
op("split_with_sizes(Tensor(a) self, SymInt[] split_sizes, int dim=0) -> Tensor(a)[]",
   CUSTOM, "split_with_sizes", composite=True, doc="Views of pieces of the given sizes.")
op("chunk(Tensor(a) self, int chunks, int dim=0) -> Tensor(a)[]", CUSTOM, "chunk",
   composite=True, doc="Views of (at most) chunks pieces of equal size along dim.")
op("unbind(Tensor(a) self, int dim=0) -> Tensor(a)[]", CUSTOM, "unbind", composite=True,
   doc="The selects along dim, as a tuple of views.")

# ------------------------------------------------------------------ reshaping (composites)

op("flatten(Tensor(a) self, int start_dim=0, int end_dim=-1) -> Tensor(a)", CUSTOM,
   "flatten", composite=True, doc="Dims start_dim..end_dim merged into one (reshape).")
op("unflatten(Tensor(a) self, int dim, SymInt[] sizes) -> Tensor(a)", CUSTOM, "unflatten",
   composite=True, doc="Dim dim split into sizes (one may be -1): a view.")
op("movedim(Tensor(a) self, int[1] source, int[1] destination) -> Tensor(a)", CUSTOM,
   "movedim", composite=True, aliases=("moveaxis",),
   doc="The dims in source moved to the positions in destination (permute).")
op("narrow(Tensor(a) self, int dim, SymInt start, SymInt length) -> Tensor(a)", CUSTOM,
   "narrow", composite=True, doc="The view of length elements from start along dim (slice).")
op("narrow_copy(Tensor self, int dim, SymInt start, SymInt length) -> Tensor", CUSTOM,
   "narrow_copy", composite=True, doc="A contiguous copy of narrow.")
op("view_as(Tensor(a) self, Tensor other) -> Tensor(a)", CUSTOM, "view_as", composite=True,
   doc="view(other.shape).")
op("reshape_as(Tensor(a) self, Tensor other) -> Tensor(a)", CUSTOM, "reshape_as",
   composite=True, doc="reshape(other.shape).")
op("repeat(Tensor self, SymInt[] repeats) -> Tensor", CUSTOM, "repeat", composite=True,
   doc="self tiled repeats times along each dim: view, expand and a contiguous reshape.")
op("tile(Tensor self, SymInt[] dims) -> Tensor", CUSTOM, "tile", composite=True,
   doc="repeat, with dims padded with leading ones to self's rank.")

# ------------------------------------------------------------------ flip, roll


def _dims_list(dims, ndim, name):
    out = []
    for d in dims:
        w = M.wrap_dim(d, ndim)
        if w in out:
            raise RuntimeError(f"{name}(): dim {w} appears multiple times in the list of dims")
        out.append(w)
    return out


def _flip_meta(entry, args):
    self, dims = args
    _dims_list(dims, self.ndim, "flip")
    return M._dense_like(self, self.dtype)


def _reversed_index(n):
    return O.arange(n - 1, -1, -1)


def _flip_decompose(self, dims):
    x = self
    for d in _dims_list(dims, self.ndim, "flip"):
        if self.ndim and self.shape[d] > 1:
            x = P.index(x, (None,) * d + (_reversed_index(self.shape[d]),))
    return x if x is not self else P.clone(self)


op("flip(Tensor self, int[] dims) -> Tensor", CUSTOM, "flip", meta=_flip_meta,
   backward=lambda g, out, self, dims: (g.flip(dims),),
   decompose=_flip_decompose, doc="A copy with the order of elements reversed along dims.")


def _roll_args(self, shifts, dims):
    shifts, dims = tuple(shifts), tuple(dims)
    if not dims:
        if len(shifts) != 1:
            raise RuntimeError("roll(): `shifts` required" if not shifts else
                               f"roll(): shifts and dimensions must align. shifts: "
                               f"{len(shifts)}, dims:0")
        return shifts, dims
    if len(shifts) != len(dims):
        raise RuntimeError(f"roll(): shifts and dimensions must align. shifts: {len(shifts)}, "
                           f"dims:{len(dims)}")
    if self.ndim == 0:
        raise IndexError("roll(): Dimension specified as 0 but tensor has no dimensions")
    return shifts, tuple(M.wrap_dim(d, self.ndim) for d in dims)


def _roll_meta(entry, args):
    self, shifts, dims = args
    _roll_args(self, shifts, dims)
    return M.meta_tensor(self.shape, self.dtype)


def _roll_decompose(self, shifts, dims):
    shifts, dims = _roll_args(self, shifts, dims)
    if not dims:
        flat = _roll_decompose(O.reshape(self, [-1]), shifts, (0,))
        return P.view(flat, list(self.shape))
    x = self
    for s, d in zip(shifts, dims):
        n = x.shape[d]
        s = s % n if n else 0
        if s:
            x = P.cat([P.slice(x, d, n - s, n), P.slice(x, d, 0, n - s)], d)
    return x if x is not self else P.clone(self, memory_format="contiguous_format")


op("roll(Tensor self, int[1] shifts, int[1] dims=[]) -> Tensor", CUSTOM, "roll",
   meta=_roll_meta,
   backward=lambda g, out, self, shifts, dims: (g.roll([-s for s in shifts], dims),),
   decompose=_roll_decompose,
   doc="Elements shifted along dims, wrapping around (the flattened tensor when dims is "
       "empty).")

# ------------------------------------------------------------------ pad

_PAD_MODES = ("constant", "reflect", "replicate", "circular")
_PAD_KERNEL = {"reflect": "reflection_pad", "replicate": "replication_pad"}


def _pad_check(self, pad, mode, value):
    """The padded dims as (dim, before, after), innermost first; PyTorch's errors."""
    pad = tuple(pad)
    if len(pad) % 2:
        raise RuntimeError("pad(): Padding length must be divisible by 2")
    if len(pad) // 2 > self.ndim:
        raise RuntimeError(f"pad(): Padding length should be less than or equal to two times "
                           f"the input dimension but got padding length {len(pad)} and input "
                           f"of dimension {self.ndim}")
    if mode not in _PAD_MODES:
        raise NotImplementedError(f"pad(): Unrecognised padding mode {mode}")
    dims = [(self.ndim - 1 - i, pad[2 * i], pad[2 * i + 1]) for i in range(len(pad) // 2)]
    if mode == "constant":
        for d, lo, hi in dims:
            if self.shape[d] + lo + hi < 0:
                raise RuntimeError(f"pad(): The input size {self.shape[d]}, plus negative "
                                   f"padding {lo} and {hi} resulted in a negative output size, "
                                   f"which is invalid. Check dimension {d} of your input.")
        return dims
    if value is not None:
        raise RuntimeError(f"pad(): Padding mode \"{mode}\" doesn't take in value argument")
    k = len(pad) // 2
    if k not in (1, 2, 3) or self.ndim not in (k + 1, k + 2):
        raise NotImplementedError(f"pad(): Padding size {len(pad)} is not supported for "
                                  f"{self.ndim}D input tensor.")
    if mode in _PAD_KERNEL and self.dtype is _C.bool:
        raise NotImplementedError(f"pad(): \"{_PAD_KERNEL[mode]}{k}d\" not implemented for "
                                  "'Bool'")
    for d, lo, hi in dims:
        n = self.shape[d]
        if mode == "reflect" and (lo >= n or hi >= n):
            raise RuntimeError(f"pad(): Argument #4: Padding size should be less than the "
                               f"corresponding input dimension, but got: padding ({lo}, {hi}) "
                               f"at dimension {d} of input {M.shape_str(self.shape)}")
        if mode == "replicate" and n == 0:
            raise RuntimeError(f"pad(): Expected a tensor with non-zero sizes in the padded "
                               f"dims, but got: {M.shape_str(self.shape)}")
        if mode == "circular" and (lo > n or hi > n):
            raise RuntimeError("pad(): Padding value causes wrapping around more than once.")
        if n + lo + hi < 0:
            raise RuntimeError(f"pad(): The input size {n}, plus negative padding {lo} and "
                               f"{hi} resulted in a negative output size, which is invalid.")
    return dims


def _pad_meta(entry, args):
    self, pad, mode, value = args
    shape = list(self.shape)
    for d, lo, hi in _pad_check(self, pad, mode, value):
        shape[d] += lo + hi
    return M.meta_tensor(shape, self.dtype)


def _pad_index(n, lo, hi, mode):
    """The source position of each output position along a padded dim (int64)."""
    i = O.arange(-lo, n + hi)
    if mode == "reflect":
        a = (n - 1) - _iabs(i)
        return (n - 1) - _iabs(a)
    if mode == "replicate":
        return O.where(i < 0, 0, O.where(i > n - 1, n - 1, i))
    return O.where(i < 0, i + n, O.where(i < n, i, i - n))   # circular


def _iabs(i):
    return O.where(i < 0, -i, i)


def _pad_decompose(self, pad, mode, value):
    x = self
    for d, lo, hi in _pad_check(self, pad, mode, value):
        n = x.shape[d]
        if mode != "constant":
            if lo or hi:
                x = P.index(x, (None,) * d + (_pad_index(n, lo, hi, mode),))
            continue
        start, stop = max(0, -lo), n - max(0, -hi)
        if start or stop != n:
            x = P.slice(x, d, start, stop)
        pieces = []
        for width in (lo, None, hi):
            if width is None:
                pieces.append(x)
            elif width > 0:
                shape = list(x.shape)
                shape[d] = width
                pieces.append(P.full(shape, 0 if value is None else value, dtype=x.dtype))
        if len(pieces) > 1:
            x = P.cat(pieces, d)
    return x if x is not self else P.clone(self, memory_format="contiguous_format")


def _pad_backward(g, out, self, pad, mode, value):
    if mode == "constant":
        return (O.pad(g, [-p for p in pad]),)
    dims = _pad_check(self, pad, mode, None)
    shapes = []
    shape = list(self.shape)
    for d, lo, hi in dims:     # the shapes along the way, to undo the steps backwards
        shapes.append((d, lo, hi, list(shape)))
        shape[d] += lo + hi
    for d, lo, hi, before in reversed(shapes):
        if lo or hi:
            idx = _pad_index(before[d], lo, hi, mode)
            g = O.zeros(before, dtype=g.dtype).index_put((None,) * d + (idx,), g,
                                                         accumulate=True)
    return (g,)


op("pad(Tensor self, SymInt[] pad, str mode=\"constant\", float? value=None) -> Tensor",
   CUSTOM, "pad", method=False, function=False, meta=_pad_meta, backward=_pad_backward,
   decompose=_pad_decompose,
   doc="torch.nn.functional.pad: pad = (last dim before, after, next dim before, ...); "
       "modes constant (negative pads crop), reflect, replicate and circular.")

# ------------------------------------------------------------------ transposes as attributes

op("numpy_T(Tensor(a) self) -> Tensor(a)", CUSTOM, "numpy_T", composite=True,
   function=False, method=False, doc="Tensor.T: all dims reversed (permute).")
op("mT(Tensor(a) self) -> Tensor(a)", CUSTOM, "mT", composite=True, function=False,
   method=False, doc="Tensor.mT: the last two dims swapped (transpose).")


def split(tensor, split_size_or_sections, dim=0):
    """ember.split(tensor, split_size_or_sections, dim=0): torch.split's keyword names
    (the Tensor method keeps split_size)."""
    return O.split(tensor, split_size_or_sections, dim)


WRAPPERS = {"split": split}
