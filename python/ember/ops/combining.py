"""Ops that combine, repeat or pick elements, written over existing ops (composites; their
gradients come from the ops they call): outer/ger, cartesian_prod, block_diag,
tril_indices/triu_indices, diff, repeat_interleave, cdist, take, index_copy, index_fill,
masked_scatter, multinomial."""
from .. import _C
from . import api as O
from . import meta as M
from .registry import CUSTOM, op


def _outer(self, vec2):
    for what, t in (("self", self), ("vec2", vec2)):
        if t.ndim != 1:
            raise RuntimeError(f"outer: Expected 1-D argument {what}, but got {t.ndim}-D")
    return O.mul(O.reshape(self, [-1, 1]), vec2)


op("outer(Tensor self, Tensor vec2) -> Tensor", CUSTOM, "python", composite=True,
   impl=_outer, doc="The outer product of two vectors: self[i] * vec2[j].")
op("ger(Tensor self, Tensor vec2) -> Tensor", CUSTOM, "python", composite=True,
   impl=_outer, doc="outer (its old name).")


def _cartesian_prod(tensors):
    for t in tensors:
        if t.ndim != 1:
            raise RuntimeError(f"Expect a 1D vector, but got shape {list(t.shape)}")
    if len(tensors) == 1:     # PyTorch returns the input itself; a copy here
        return O.clone(tensors[0])
    if any(t.dtype is not tensors[0].dtype for t in tensors):
        raise RuntimeError("meshgrid expects all tensors to have the same dtype")
    sizes = [t.shape[0] for t in tensors]
    cols = []
    for k, t in enumerate(tensors):
        shape = [1] * len(tensors)
        shape[k] = sizes[k]
        cols.append(O.reshape(O.expand(O.reshape(t, shape), sizes), [-1]))
    return O.stack(cols, 1)


op("cartesian_prod(Tensor[] tensors) -> Tensor", CUSTOM, "python", composite=True,
   method=False, impl=_cartesian_prod,
   doc="Every combination of the vectors' elements, one per row (itertools.product).")


def _block_diag(tensors):
    mats = []
    for i, t in enumerate(tensors):
        if t.ndim > 2:
            raise RuntimeError(f"torch.block_diag: Input tensors must have 2 or fewer "
                               f"dimensions. Input {i} has {t.ndim} dimensions")
        mats.append(O.reshape(t, [1, 1]) if t.ndim == 0 else
                    O.reshape(t, [1, -1]) if t.ndim == 1 else t)
    if not mats:
        return O.empty([1, 0])
    dtype = mats[0].dtype
    for m in mats[1:]:
        dtype = _C.promote_types(dtype, m.dtype)
    cols = sum(m.shape[1] for m in mats)
    rows, at = [], 0
    for m in mats:
        r, c = m.shape
        parts = [O.zeros([r, at], dtype=dtype), m.to(dtype),
                 O.zeros([r, cols - at - c], dtype=dtype)]
        rows.append(O.cat(parts, 1))
        at += c
    return O.cat(rows, 0)


op("block_diag(Tensor[] tensors) -> Tensor", CUSTOM, "python", composite=True, method=False,
   impl=_block_diag,
   doc="A block diagonal matrix of the inputs (0-d as 1x1, 1-d as one row), zeros "
       "elsewhere; the promoted dtype.")


def _tri_indices(lower):
    def impl(row, col, offset, dtype, layout, device, pin_memory):
        if row < 0:
            raise RuntimeError(f"row must be non-negative, got{row}")
        if col < 0:
            raise RuntimeError(f"col must be non-negative, got{col}")
        rows, cols = [], []
        for i in range(row):
            js = range(0, max(0, min(col, i + offset + 1))) if lower else \
                range(max(0, i + offset), col)
            rows.extend([i] * len(js))
            cols.extend(js)
        dt = _C.int64 if dtype is None else dtype
        if dt not in (_C.int64, _C.int32):
            raise NotImplementedError(f"\"{'tril' if lower else 'triu'}_indices\" not "
                                      f"implemented for '{dt._torch_name}'")
        from .._tensor_new import tensor
        return tensor([rows, cols], dtype=dt) if rows else O.empty([2, 0], dtype=dt)
    return impl


for _n, _lower in (("tril_indices", True), ("triu_indices", False)):
    op(f"{_n}(int row, int col, int offset=0, *, ScalarType? dtype=None, Layout? layout=None, "
       "Device? device=None, bool? pin_memory=None) -> Tensor", CUSTOM, "python",
       composite=True, method=False, impl=_tri_indices(_lower),
       doc=f"The coordinates ([2, n], row-major) of the {'lower' if _lower else 'upper'} "
           f"triangle of a row x col matrix, offset diagonals from the main one.")


def _diff(self, n, dim, prepend, append):
    if self.ndim == 0:
        raise RuntimeError("diff expects input to be at least one-dimensional")
    if n < 0:
        raise RuntimeError(f"order must be non-negative but got {n}")
    d = M.wrap_dim(dim, self.ndim)
    x = self
    for p in (prepend, append):
        if p is not None and p.ndim != self.ndim:
            raise RuntimeError("diff expects prepend or append to be the same dimension as "
                               "input")
    if prepend is not None or append is not None:
        parts = [p if p.ndim else O.expand(O.reshape(p, [1] * x.ndim),
                                           [1 if i == d else s for i, s in enumerate(x.shape)])
                 for p in (prepend,) if p is not None] + [x] + \
                [p if p.ndim else O.expand(O.reshape(p, [1] * x.ndim),
                                           [1 if i == d else s for i, s in enumerate(x.shape)])
                 for p in (append,) if p is not None]
        x = O.cat(parts, d)
    for _ in range(n):
        m = x.shape[d]
        if m == 0:
            break
        hi, lo = x.narrow(d, 1, m - 1), x.narrow(d, 0, m - 1)
        x = O.logical_xor(hi, lo) if x.dtype is _C.bool else O.sub(hi, lo)
    return O.clone(x) if x is self else x


op("diff(Tensor self, int n=1, int dim=-1, Tensor? prepend=None, Tensor? append=None) -> "
   "Tensor", CUSTOM, "python", composite=True, impl=_diff,
   doc="The n-th forward difference along dim (bool: !=), after prepending and appending.")


def _repeat_index(repeats, n):
    """The index repeating each of n positions repeats[i] times."""
    if repeats.ndim > 1:
        raise RuntimeError("repeats must be 0-dim or 1-dim tensor")
    if repeats.dtype not in (_C.int64, _C.int32):
        raise NotImplementedError(f"\"repeat_interleave_cpu\" not implemented for "
                                  f"'{repeats.dtype._torch_name}'")
    if repeats.ndim == 0:
        repeats = O.expand(O.reshape(repeats, [1]), [n])
    if repeats.shape[0] != n:
        raise RuntimeError(f"repeats must have the same size as input along dim, but got "
                           f"repeats.size(0) = {repeats.shape[0]} and input.size(0) = {n}")
    if n and bool(O.any(O.lt(repeats, 0)).item()):
        raise RuntimeError("repeats can not be negative")
    ends = O.cumsum(repeats.to(_C.int64), 0)
    total = int(ends[-1].item()) if n else 0
    return O.sum(O.le(O.unsqueeze(ends, 0), O.unsqueeze(O.arange(total), 1)), 1)


def _repeat_interleave_tensor(repeats, output_size):
    idx = _repeat_index(repeats, repeats.shape[0] if repeats.ndim else 1)
    return idx.to(repeats.dtype)


def _repeat_interleave(self, repeats, dim, output_size):
    if self.ndim == 0 and dim is not None:     # PyTorch's messages for a 0-d self
        if isinstance(repeats, int):
            M.wrap_dim(dim + 1 if dim >= 0 else dim, 1) if dim < 0 else M.wrap_dim(dim + 1, 0)
        else:
            raise IndexError(f"Dimension specified as {dim} but tensor has no dimensions")
    x = O.reshape(self, [-1]) if dim is None else self
    d = 0 if dim is None else M.wrap_dim(dim, self.ndim)
    if x.ndim == 0:
        x = O.reshape(x, [1])
    n = x.shape[d]
    if isinstance(repeats, int):
        if repeats < 0:
            raise RuntimeError("Repeats must be non-negative")
        shape = list(x.shape)
        e = O.expand(O.unsqueeze(x, d + 1), shape[:d + 1] + [repeats] + shape[d + 1:])
        # a copy always (a reshape of the expanded view may be a view of self)
        return O.reshape(O.clone(O.contiguous(e)) if repeats <= 1 or e.numel() == 0
                         else O.contiguous(e), shape[:d] + [n * repeats] + shape[d + 1:])
    return O.index_select(x, d, _repeat_index(repeats, n))


op("repeat_interleave.self_Tensor(Tensor self, Tensor repeats, int? dim=None, *, "
   "SymInt? output_size=None) -> Tensor", CUSTOM, "python", composite=True,
   impl=_repeat_interleave,
   doc="Each element (slice along dim; of the flattened self when dim is None) repeated "
       "repeats[i] times.")
op("repeat_interleave.self_int(Tensor self, SymInt repeats, int? dim=None, *, "
   "SymInt? output_size=None) -> Tensor", CUSTOM, "python", composite=True,
   impl=_repeat_interleave, doc="Each element (slice along dim) repeated repeats times.")
op("repeat_interleave.Tensor(Tensor repeats, *, SymInt? output_size=None) -> Tensor", CUSTOM,
   "python", composite=True, impl=_repeat_interleave_tensor,
   doc="i repeated repeats[i] times, for each i.")


def _cdist(x1, x2, p, compute_mode):
    for name, t in (("X1", x1), ("X2", x2)):
        if not t.is_floating_point():
            raise RuntimeError(f"cdist only supports floating-point dtypes, {name} got: "
                               f"{t.dtype._torch_name}")
    if x1.dtype in (_C.float16, _C.bfloat16):
        raise NotImplementedError(f"\"cdist\" not implemented for '{x1.dtype._torch_name}'")
    if x1.ndim < 2:
        raise RuntimeError(f"cdist only supports at least 2D tensors, X1 got: {x1.ndim}D")
    if x2.ndim < 2:
        raise RuntimeError(f"cdist only supports at least 2D tensors, X2 got: {x2.ndim}D")
    if x1.shape[-1] != x2.shape[-1]:
        raise RuntimeError(f"X1 and X2 must have the same number of columns. X1: "
                           f"{x1.shape[-1]} X2: {x2.shape[-1]}")
    if p < 0:
        raise RuntimeError("cdist only supports non-negative p values")
    diff = O.abs(O.sub(O.unsqueeze(x1, -2), O.unsqueeze(x2, -3)))
    if p == 0:
        return O.sum(O.ne(diff, 0).to(diff.dtype), -1)
    if p == float("inf"):
        return O.amax(diff, -1) if diff.shape[-1] else O.sum(diff, -1)
    if p == 1:
        return O.sum(diff, -1)
    if p == 2:
        return O.sqrt(O.sum(O.mul(diff, diff), -1))
    return O.pow(O.sum(O.pow(diff, p), -1), 1.0 / p)


op("cdist(Tensor x1, Tensor x2, float p=2., int? compute_mode=None) -> Tensor", CUSTOM,
   "python", composite=True, method=False, impl=_cdist,
   doc="The p-norm distance between each row of x1 and each row of x2 (batched).")


def _take(self, index):
    if index.dtype is not _C.int64:
        raise RuntimeError(f"take(): Expected a long tensor for index, but got "
                           f"{index.dtype._torch_name}")
    n = self.numel()
    flat = O.reshape(self, [-1])
    if index.numel():
        bad = O.logical_or(O.ge(index, n), O.lt(index, -n))
        if bool(O.any(bad).item()):
            i = int(O.masked_select(index, bad)[0].item())
            raise IndexError(f"out of range: tried to access index {i} on a tensor of {n} "
                             f"elements.")
    idx = O.where(O.lt(index, 0), O.add(index, n), index)
    return O.reshape(O.index_select(flat, 0, O.reshape(idx, [-1])), list(index.shape))


op("take(Tensor self, Tensor index) -> Tensor", CUSTOM, "python", composite=True,
   impl=_take, doc="self flattened, read at index (negative counts from the end); the "
                   "result has index's shape.")


def _index_along(self, dim, index, name, negative=True):
    d = M.wrap_dim(dim, self.ndim)
    if index.dtype is not _C.int64:
        raise RuntimeError(f"{name}(): Expected a long tensor for index, but got "
                           f"{index.dtype._torch_name}")
    if index.ndim > 1:
        raise IndexError(f"{name}(): Index is supposed to be a vector")
    size = self.shape[d] if self.ndim else 1
    idx = O.reshape(index, [-1])
    if idx.numel():
        bad = O.logical_or(O.ge(idx, size), O.lt(idx, -size if negative else 0))
        if bool(O.any(bad).item()):
            i = int(O.masked_select(idx, bad)[0].item())
            raise IndexError(f"{name}(): index {i} is out of bounds for dimension {d} with "
                             f"size {size}")
    return d, O.where(O.lt(idx, 0), O.add(idx, size), idx)


def _index_copy(self, dim, index, source):
    d, idx = _index_along(self, dim, index, "index_copy_", negative=False)
    if source.dtype is not self.dtype:
        raise RuntimeError(f"index_copy_(): self and source expected to have the same dtype, "
                           f"but got (self) {self.dtype._torch_name} and (source) "
                           f"{source.dtype._torch_name}")
    if self.ndim == 0:
        return O.clone(O.reshape(source, [])) if idx.numel() else O.clone(self)
    want = [idx.shape[0] if i == d else s for i, s in enumerate(self.shape)]
    if list(source.shape) != want and not (source.ndim == 0 and want == [1]):
        raise RuntimeError(f"index_copy_(): Source/destination tensor must have same slice "
                           f"shapes. Destination slice shape: {list(self.shape)} at dimension "
                           f"{d} and source slice shape: {list(source.shape)} at dimension {d}.")
    src = O.movedim(O.reshape(source, want), d, 0)
    out = O.clone(O.contiguous(self))     # contiguous, as PyTorch's
    O.movedim(out, d, 0).index_put_((idx,), src)
    return out


op("index_copy(Tensor self, int dim, Tensor index, Tensor source) -> Tensor", CUSTOM,
   "python", composite=True, impl=_index_copy,
   doc="self with the slices index[i] along dim replaced by source's slices i.")
op("index_copy_(Tensor(a!) self, int dim, Tensor index, Tensor source) -> Tensor(a!)",
   CUSTOM, "python", composite=True, function=False,
   impl=lambda self, dim, index, source: self.copy_(_index_copy(self, dim, index, source)),
   doc="In-place index_copy.")


def _index_fill(self, dim, index, value):
    d, idx = _index_along(self, dim, index, "index_fill_")
    if isinstance(value, _C.Tensor) and value.ndim != 0:
        raise RuntimeError(f"index_fill_ only supports a 0-dimensional value tensor, but got "
                           f"tensor with {value.ndim} dimension(s).")
    if self.ndim == 0:
        return O.where(O.full([], idx.numel() > 0, dtype=_C.bool), value, self).to(self.dtype)
    size = self.shape[d]
    hit = O.any(O.eq(O.unsqueeze(O.arange(size), 1), O.unsqueeze(idx, 0)), 1)
    hit = O.reshape(hit, [size if i == d else 1 for i in range(self.ndim)])
    if isinstance(value, _C.Tensor):
        value = value.to(self.dtype)
    out = O.clone(self)          # self's layout, as PyTorch's copy then index_fill_
    return out.masked_fill_(hit, value)


for _schema_tail in ("int_Tensor(Tensor self, int dim, Tensor index, Tensor value)",
                     "int_Scalar(Tensor self, int dim, Tensor index, Scalar value)"):
    op(f"index_fill.{_schema_tail} -> Tensor", CUSTOM, "python", composite=True,
       impl=_index_fill, doc="self with the slices index[i] along dim set to value.")
    op(f"index_fill_.{_schema_tail.replace('Tensor self', 'Tensor(a!) self')} -> Tensor(a!)",
       CUSTOM, "python", composite=True, function=False,
       impl=lambda self, dim, index, value: self.copy_(_index_fill(self, dim, index, value)),
       doc="In-place index_fill.")


def _masked_scatter(self, mask, source):
    if mask.dtype is not _C.bool:
        raise RuntimeError(f"masked_scatter_ only supports boolean masks, but got mask with "
                           f"dtype {mask.dtype._torch_name}")
    if source.dtype is not self.dtype:
        raise RuntimeError(f"masked_scatter: expected self and source to have same dtypes but "
                           f"got{self.dtype._torch_name} and {source.dtype._torch_name}")
    shape = M.broadcast_shapes("masked_scatter", tuple(self.shape), tuple(mask.shape))
    x = O.expand(self, list(shape))
    m = O.expand(mask, list(shape))
    count = int(O.sum(m).item())
    if count > source.numel():
        raise RuntimeError("Number of elements of source < number of ones in mask")
    src = O.reshape(source, [-1]).narrow(0, 0, count)
    return O.index_put(O.contiguous(x), (m,), src)


op("masked_scatter(Tensor self, Tensor mask, Tensor source) -> Tensor", CUSTOM, "python",
   composite=True, impl=_masked_scatter,
   doc="self with the positions where mask is True filled by source's elements in order.")
op("masked_scatter_(Tensor(a!) self, Tensor mask, Tensor source) -> Tensor(a!)", CUSTOM,
   "python", composite=True, function=False,
   impl=lambda self, mask, source: self.copy_(_masked_scatter(self, mask, source)),
   doc="In-place masked_scatter.")


def _multinomial(self, num_samples, replacement, generator):
    if not self.is_floating_point():
        raise RuntimeError(f"multinomial only supports floating-point dtypes for input, got: "
                           f"{self.dtype._torch_name}")
    if self.ndim not in (1, 2):
        raise RuntimeError("prob_dist must be 1 or 2 dim")
    n = self.shape[-1]
    if not replacement and num_samples > n:
        raise RuntimeError("cannot sample n_sample > prob_dist.size(-1) samples without "
                           "replacement")
    if num_samples <= 0:
        raise RuntimeError("cannot sample n_sample <= 0 samples")
    p = O.reshape(self.detach().to(_C.float64), [-1, n])
    if bool(O.any(O.logical_not(O.logical_and(O.isfinite(p), O.ge(p, 0)))).item()):
        raise RuntimeError("probability tensor contains either `inf`, `nan` or element < 0")
    total = O.sum(p, -1, keepdim=True)
    if bool(O.any(O.le(total, 0)).item()):
        raise RuntimeError("invalid multinomial distribution (sum of probabilities <= 0)")
    rows = p.shape[0]
    if replacement:
        cdf = O.div(O.cumsum(p, -1), total)
        u = O.rand([rows, num_samples], dtype=_C.float64, generator=generator)
        # the first category whose cumulative probability exceeds u (never a zero one)
        idx = O.sum(O.le(O.unsqueeze(cdf, 1), O.unsqueeze(u, -1)), -1)
        idx = O.clamp(idx, max=n - 1)
    else:
        # exponential race: category i finishes at E_i / p_i; the first num_samples to
        # finish are a draw without replacement (zero probabilities finish last)
        e = O.neg(O.log1p(O.neg(O.rand([rows, n], dtype=_C.float64, generator=generator))))
        keys = O.div(e, p)
        idx = O.topk(keys, num_samples, -1, largest=False).indices
    return O.reshape(idx, [num_samples] if self.ndim == 1 else [rows, num_samples])


op("multinomial(Tensor self, SymInt num_samples, bool replacement=False, *, "
   "Generator? generator=None) -> Tensor", CUSTOM, "python", composite=True,
   impl=_multinomial,
   doc="Category indices drawn from each row's (unnormalised) probabilities, with or "
       "without replacement; ember's own random stream.")


def cartesian_prod(*tensors):
    """ember.cartesian_prod(*tensors), as torch.cartesian_prod."""
    return O.cartesian_prod(tensors)


def block_diag(*tensors):
    """ember.block_diag(*tensors), as torch.block_diag."""
    return O.block_diag(tensors)


WRAPPERS = {"cartesian_prod": cartesian_prod, "block_diag": block_diag}
