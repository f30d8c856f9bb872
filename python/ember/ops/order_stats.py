"""Order statistics and counting, written over sort, cumulative sums and comparisons:
kthvalue, median, nanmedian, mode, cummax, cummin, aminmax, var_mean, std_mean,
searchsorted, bucketize, histc, unique, unique_consecutive. Composites: their gradients
come from the ops they call (sort's, where's), which route the gradient to the element
each result was taken from, as PyTorch's formulas do."""
import math

from .. import _C
from .. import return_types
from . import api as O
from . import meta as M
from .registry import CUSTOM, op


def _last(t, dim):
    """t with dim moved last."""
    return t if dim == t.ndim - 1 else O.movedim(t, dim, -1)


def _back(t, dim, ndim):
    return t if dim == ndim - 1 else O.movedim(t, -1, dim)


def _sorted_lines(self, dim, empty_error=None):
    """self as lines along dim (0-d: one line of one): (x, d, n, lines, values, indices),
    values/indices the lines sorted stably. empty_error names the op whose empty dim is
    an IndexError."""
    x = O.reshape(self, [1]) if self.ndim == 0 else self
    d = M.wrap_dim(dim, self.ndim)
    n = x.shape[d]
    if n == 0 and empty_error:
        raise IndexError(f"{empty_error}(): Expected reduction dim {d} to have non-zero size.")
    lines = _last(x, d)
    values, indices = O.sort(lines, -1, stable=True)
    return x, d, n, lines, values, indices


def _pick(self, x, d, values, indices, pos, keepdim):
    """values/indices (dim last) at positions pos (shape [..., 1]) in self's layout:
    dim d squeezed unless keepdim, a 0-d self giving 0-d results."""
    v = _back(O.gather(values, -1, pos), d, x.ndim)
    i = _back(O.gather(indices, -1, pos), d, x.ndim)
    if self.ndim == 0:
        return O.reshape(v, []), O.reshape(i, [])
    if not keepdim:
        v, i = O.squeeze(v, d), O.squeeze(i, d)
    return v, i


# ------------------------------------------------------------------ kthvalue


def _no_bool(self, kernel):
    if self.dtype is _C.bool:
        raise NotImplementedError(f"\"{kernel}\" not implemented for 'Bool'")


def _kthvalue(self, k, dim, keepdim):
    if self.ndim:                # PyTorch takes a 0-d bool
        _no_bool(self, "kthvalue_cpu")
    d = M.wrap_dim(dim, self.ndim)
    n = self.shape[d] if self.ndim else 1
    if k < 1 or k > n:
        raise RuntimeError(f"kthvalue(): selected number k out of range for dimension {d}")
    x, d, n, _, values, indices = _sorted_lines(self, dim)
    pos = O.full(list(values.shape[:-1]) + [1], k - 1, dtype=_C.int64)
    v, i = _pick(self, x, d, values, indices, pos, keepdim)
    return return_types.make("kthvalue", ("values", "indices"), v, i)


op("kthvalue(Tensor self, SymInt k, int dim=-1, bool keepdim=False) -> "
   "(Tensor values, Tensor indices)", CUSTOM, "python", composite=True, impl=_kthvalue,
   doc="The k-th smallest element along dim (NaN is the largest) and its index.")

# ------------------------------------------------------------------ median, nanmedian


def _median_dim(self, dim, keepdim, ignore_nan, name):
    _no_bool(self, "median_out")
    x, d, n, xl, values, indices = _sorted_lines(self, dim, name)
    if self.is_floating_point():
        nans = O.sum(O.isnan(xl), -1, keepdim=True)
        if ignore_nan:
            count = O.sub(n, nans)
            pos = O.floor_divide(O.clamp(O.sub(count, 1), min=0), 2)
        else:    # a NaN makes the median NaN: the first NaN of the sorted line
            pos = O.where(O.gt(nans, 0), O.sub(n, nans), (n - 1) // 2)
    else:
        pos = O.full(list(values.shape[:-1]) + [1], (n - 1) // 2, dtype=_C.int64)
    return _pick(self, x, d, values, indices, pos, keepdim)


def _median_all(self, ignore_nan):
    _no_bool(self, "median_cpu")
    flat = O.reshape(self, [-1])
    if flat.numel() == 0:
        return O.full([], math.nan, dtype=self.dtype) if self.is_floating_point() else \
            O.reshape(flat.to(self.dtype)[:0].sum(), [])
    v, _ = _median_dim(flat, 0, False, ignore_nan, "median")
    return v


for _name, _ignore in (("median", False), ("nanmedian", True)):
    op(f"{_name}(Tensor self) -> Tensor", CUSTOM, "python", composite=True,
       impl=(lambda ig: lambda self: _median_all(self, ig))(_ignore),
       doc=f"The lower median of all elements ({'NaNs ignored' if _ignore else 'NaN if any is NaN'}).")
    op(f"{_name}.dim(Tensor self, int dim, bool keepdim=False) -> "
       "(Tensor values, Tensor indices)", CUSTOM, "python", composite=True,
       impl=(lambda ig, nm: lambda self, dim, keepdim: return_types.make(
           nm, ("values", "indices"), *_median_dim(self, dim, keepdim, ig, nm)))(_ignore, _name),
       doc=f"The lower median along dim and its index ({_name}).")

# ------------------------------------------------------------------ mode


def _mode(self, dim, keepdim):
    x, d, n, _, values, indices = _sorted_lines(self, dim, "mode")
    # runs of equal sorted values: run starts, and each element's run length
    starts = O.cat([O.ones(list(values.shape[:-1]) + [1], dtype=_C.bool),
                    O.ne(values.narrow(-1, 1, n - 1), values.narrow(-1, 0, n - 1))], -1)
    run = O.sub(O.cumsum(starts, -1), 1)                  # run id of each position
    lengths = O.scatter_add(O.zeros(values.shape, dtype=_C.int64), -1, run,
                            O.ones(values.shape, dtype=_C.int64))
    best = O.argmax(lengths, -1, keepdim=True)            # the smallest most frequent value
    in_best = O.eq(run, best)
    # PyTorch returns the last index of the mode in self
    last = O.amax(O.where(in_best, indices, -1), -1, keepdim=True)
    pos = O.argmax(O.eq(indices, last).to(_C.int64), -1, keepdim=True)
    v, i = _pick(self, x, d, values, indices, pos, keepdim)
    return return_types.make("mode", ("values", "indices"), v, i)


op("mode(Tensor self, int dim=-1, bool keepdim=False) -> (Tensor values, Tensor indices)",
   CUSTOM, "python", composite=True, impl=_mode,
   doc="The most frequent value along dim (the smallest among ties) and its last index.")

# ------------------------------------------------------------------ cummax, cummin


def _cumulative_extreme(self, dim, name, later_wins):
    d = M.wrap_dim(dim, self.ndim)
    if self.ndim == 0:
        return return_types.make(name, ("values", "indices"), O.clone(self),
                                 O.zeros([], dtype=_C.int64))
    x = _last(self, d)
    n = x.shape[-1]
    v = x
    i = O.expand(O.arange(n), x.shape)
    floating = self.is_floating_point()
    s = 1
    while s < n:   # a doubling scan: position j combines with j - s
        ev = O.cat([v.narrow(-1, 0, s), v.narrow(-1, 0, n - s)], -1)
        ei = O.cat([i.narrow(-1, 0, s), i.narrow(-1, 0, n - s)], -1)
        take = later_wins(v, ev)
        if floating:   # the last NaN wins; after a NaN nothing else does
            take = O.logical_or(O.isnan(v),
                                O.logical_and(O.logical_not(O.isnan(ev)), take))
        shifted = O.ge(O.arange(n), s)
        take = O.logical_or(O.logical_not(shifted), take)
        v = O.where(take, v, ev)
        i = O.where(take, i, ei)
        s *= 2
    return return_types.make(name, ("values", "indices"),
                             O.contiguous(_back(v, d, self.ndim)),
                             O.contiguous(_back(i, d, self.ndim)))


op("cummax(Tensor self, int dim) -> (Tensor values, Tensor indices)", CUSTOM, "python",
   composite=True, impl=lambda self, dim: _cumulative_extreme(self, dim, "cummax", O.ge),
   doc="Running maximum along dim and the index it was taken from (the last among ties; "
       "NaN propagates).")
op("cummin(Tensor self, int dim) -> (Tensor values, Tensor indices)", CUSTOM, "python",
   composite=True, impl=lambda self, dim: _cumulative_extreme(self, dim, "cummin", O.le),
   doc="Running minimum along dim and the index it was taken from (the last among ties; "
       "NaN propagates).")

# ------------------------------------------------------------------ aminmax, var_mean


def _aminmax(self, dim, keepdim):
    if dim is None:
        if self.numel() == 0:
            raise RuntimeError("aminmax(): cannot compute aminmax over an empty dimension "
                               "as the operation has no identity.")
        lo, hi = O.amin(self), O.amax(self)
        if keepdim:
            lo, hi = O.reshape(lo, [1] * self.ndim), O.reshape(hi, [1] * self.ndim)
    else:
        d = M.wrap_dim(dim, self.ndim)
        if self.ndim and self.shape[d] == 0:
            raise IndexError(f"aminmax(): Expected reduction dim {d} to have non-zero size.")
        lo, hi = O.amin(self, [d], keepdim), O.amax(self, [d], keepdim)
    return return_types.make("aminmax", ("min", "max"), lo, hi)


op("aminmax(Tensor self, *, int? dim=None, bool keepdim=False) -> (Tensor min, Tensor max)",
   CUSTOM, "python", composite=True, impl=_aminmax,
   doc="(amin, amax) over dim, or over all elements when dim is None.")


def _moments(name):
    def spread(*args, **kwargs):
        return getattr(O, name)(*args, **kwargs)

    def correction(self, dim, correction, keepdim):
        return (spread(self, dim, keepdim=keepdim, correction=correction),
                O.mean(self, dim, keepdim))

    def dim_form(self, dim, unbiased, keepdim):
        return (spread(self, dim, unbiased, keepdim), O.mean(self, dim, keepdim))

    def plain(self, unbiased):
        return spread(self, None, unbiased), O.mean(self)
    return correction, dim_form, plain


for _n in ("var", "std"):
    _c, _d, _p = _moments(_n)
    op(f"{_n}_mean.correction(Tensor self, int[1]? dim=None, *, Scalar? correction=None, "
       "bool keepdim=False) -> (Tensor, Tensor)", CUSTOM, "python", composite=True, impl=_c,
       method=False,
       doc=f"({_n}, mean) over dim, one call.")
    op(f"{_n}_mean.dim(Tensor self, int[1]? dim, bool unbiased=True, bool keepdim=False) -> "
       "(Tensor, Tensor)", CUSTOM, "python", composite=True, impl=_d, method=False,
       doc=f"({_n}, mean) over dim, unbiased or not.")
    op(f"{_n}_mean(Tensor self, bool unbiased=True) -> (Tensor, Tensor)", CUSTOM, "python",
       composite=True, method=False, impl=_p, doc=f"({_n}, mean) of all elements.")

# ------------------------------------------------------------------ searchsorted, bucketize


def _searchsorted(sorted_sequence, self, out_int32, right, side, sorter):
    if side is not None:
        if side not in ("left", "right"):
            raise RuntimeError(f"torch.searchsorted(): side can only be 'left' or 'right' but "
                               f"got {side}")
        if right and side == "left":
            raise RuntimeError("torch.searchsorted(): side and right can't be set to opposites, "
                               "got side of left while right was True")
        right = side == "right"
    if _C.result_type(sorted_sequence, self) is _C.bool:
        raise NotImplementedError("\"searchsorted_out_cpu\" not implemented for 'Bool'")
    scalar = not isinstance(self, _C.Tensor)
    values = O.full([], self, dtype=sorted_sequence.dtype) if scalar else self
    if sorted_sequence.ndim == 0:
        raise RuntimeError("torch.searchsorted(): boundaries tensor should have positive "
                           "dimension, but got 0 dimension")
    if sorted_sequence.ndim > 1 and (
            values.ndim != sorted_sequence.ndim or
            tuple(values.shape[:-1]) != tuple(sorted_sequence.shape[:-1])):
        raise RuntimeError(
            "torch.searchsorted(): boundaries tensor should be 1 dimension or the first N-1 "
            "dimensions of boundaries tensor and input value tensor must match, but we got "
            f"boundaries tensor {list(sorted_sequence.shape)} and input value tensor "
            f"{list(values.shape)}")
    seq = sorted_sequence
    if sorter is not None:
        if tuple(sorter.shape) != tuple(seq.shape):
            raise RuntimeError("torch.searchsorted(): boundary and sorter must have the same "
                               f"size, but got boundary tensor {list(seq.shape)}and got "
                               f"sorter tensor {list(sorter.shape)}")
        seq = O.gather(seq, -1, sorter)
    cmp = O.le if right else O.lt
    if seq.ndim == 1:
        counts = O.sum(cmp(seq, O.unsqueeze(values, -1)), -1)
    else:
        counts = O.sum(cmp(O.unsqueeze(seq, -2), O.unsqueeze(values, -1)), -1)
    return counts.to(_C.int32 if out_int32 else _C.int64)


op("searchsorted.Tensor(Tensor sorted_sequence, Tensor self, *, bool out_int32=False, "
   "bool right=False, str? side=None, Tensor? sorter=None) -> Tensor", CUSTOM, "python",
   composite=True, method=False, impl=_searchsorted,
   doc="For each value, how many boundaries are below it (right: not above it): the "
       "insertion index into sorted_sequence's last dim.")
op("searchsorted.Scalar(Tensor sorted_sequence, Scalar self, *, bool out_int32=False, "
   "bool right=False, str? side=None, Tensor? sorter=None) -> Tensor", CUSTOM, "python",
   composite=True, method=False, impl=_searchsorted,
   doc="searchsorted of one number (a 0-d result).")


def _bucketize(self, boundaries, out_int32, right):
    if boundaries.ndim != 1:
        raise RuntimeError(f"boundaries tensor must be 1 dimension, but got dim({boundaries.ndim})")
    return _searchsorted(boundaries, self, out_int32, right, None, None)


op("bucketize.Tensor(Tensor self, Tensor boundaries, *, bool out_int32=False, "
   "bool right=False) -> Tensor", CUSTOM, "python", composite=True, method=False,
   impl=_bucketize,
   doc="The bucket of each value among 1-d sorted boundaries (searchsorted).")
op("bucketize.Scalar(Scalar self, Tensor boundaries, *, bool out_int32=False, "
   "bool right=False) -> Tensor", CUSTOM, "python", composite=True, method=False,
   impl=_bucketize, doc="bucketize of one number.")

# ------------------------------------------------------------------ histc


def _histc(self, bins, min, max):
    _no_bool(self, "linspace_cpu")
    if not self.is_floating_point():
        if self.numel() == 0 and float(min) == float(max) and self.dtype is _C.uint8:
            raise RuntimeError(f"histc(): value cannot be converted to type "
                               f"{str(self.dtype).split('.')[-1]} without overflow")
        raise NotImplementedError(f"\"histogram_cpu\" not implemented for "
                                  f"'{self.dtype._torch_name}'")
    if bins <= 0:
        raise RuntimeError(f"torch.histogram(): bins must be > 0, but got {bins} for "
                           f"dimension 0")
    lo, hi = float(min), float(max)
    if lo == hi and self.numel() > 0:
        lo, hi = float(O.amin(self).item()), float(O.amax(self).item())
    if lo == hi:
        lo, hi = lo - 1, hi + 1
    if lo > hi:
        raise RuntimeError("torch.histc: max must be larger than min")
    if not (math.isfinite(lo) and math.isfinite(hi)):
        raise RuntimeError(f"torch.histc: range of [{lo:g}, {hi:g}] is not finite")
    x = O.reshape(self.detach(), [-1])
    inside = O.logical_and(O.ge(x, lo), O.le(x, hi))
    x = O.masked_select(x, inside)
    # PyTorch's bin: (x - lo) * bins / (hi - lo) in the input's dtype, truncated; the
    # right edge goes into the last bin
    lo_t = O.full([], lo, dtype=self.dtype)
    hi_t = O.full([], hi, dtype=self.dtype)
    pos = O.div(O.mul(O.sub(x, lo_t), bins), O.sub(hi_t, lo_t))
    idx = O.clamp(pos.to(_C.int64), max=bins - 1)
    counts = O.scatter_add(O.zeros([bins], dtype=self.dtype), 0, idx,
                           O.ones(idx.shape, dtype=self.dtype))
    return counts


op("histc(Tensor self, int bins=100, Scalar min=0, Scalar max=0) -> Tensor", CUSTOM,
   "python", composite=True, impl=_histc,
   doc="Counts of the elements in bins equal-width bins over [min, max] (the data's range "
       "when min == max); elements outside are ignored.")

# ------------------------------------------------------------------ unique


def _runs(sorted_rows, n):
    """Bool [n]: where a new run of equal rows starts (rows are dim 0)."""
    if n == 0:
        return O.zeros([0], dtype=_C.bool)
    diff = O.ne(sorted_rows.narrow(0, 1, n - 1), sorted_rows.narrow(0, 0, n - 1))
    if diff.ndim > 1:
        diff = O.any(O.reshape(diff, [n - 1, -1]), 1)
    return O.cat([O.ones([1], dtype=_C.bool), diff])


def _unique_rows(rows, order, return_inverse, return_counts):
    """rows (dim 0) in `order`: the first row of each run, the run of each original row
    and the run lengths."""
    n = rows.shape[0]
    s = O.index_select(rows, 0, order)
    starts = _runs(s, n)
    first = O.reshape(O.nonzero(starts), [-1])
    values = O.index_select(s, 0, first)
    run = O.sub(O.cumsum(starts, 0), 1)
    inverse = O.scatter(O.zeros([n], dtype=_C.int64), 0, order, run) if return_inverse \
        else None
    counts = O.scatter_add(O.zeros([first.shape[0]], dtype=_C.int64), 0, run,
                           O.ones([n], dtype=_C.int64)) if return_counts else None
    return values, inverse, counts


def _lex_order(rows):
    """The stable lexicographic order of rows ([n, m]): stable sorts from the last
    column to the first."""
    n = rows.shape[0]
    order = O.arange(n)
    for c in range(rows.shape[1] - 1, -1, -1):
        _, o = O.sort(O.index_select(rows.select(1, c), 0, order), stable=True)
        order = O.index_select(order, 0, o)
    return order


def _result(values, inverse, counts, return_inverse, return_counts):
    out = (values,)
    if return_inverse:
        out += (inverse,)
    if return_counts:
        out += (counts,)
    return out[0] if len(out) == 1 else out


def _unique(self, sorted, return_inverse, return_counts, dim):
    if dim is None:
        flat = O.reshape(self, [-1])
        _, order = O.sort(flat, stable=True)
        values, inverse, counts = _unique_rows(flat, order, return_inverse, return_counts)
        if inverse is not None:
            inverse = O.reshape(inverse, list(self.shape))
        return _result(values, inverse, counts, return_inverse, return_counts)
    d = M.wrap_dim(dim, self.ndim)
    moved = O.movedim(self, d, 0)
    n = moved.shape[0]
    if self.numel() == 0 and n > 0:
        raise RuntimeError("Number of zero sized dimensions is more than one, so unique "
                           "cannot be applied ")
    rows = O.reshape(moved, [n, -1])
    order = _lex_order(rows) if n else O.arange(0)
    values, inverse, counts = _unique_rows(moved, order, return_inverse, return_counts)
    return _result(O.movedim(values, 0, d), inverse, counts, return_inverse, return_counts)


op("unique(Tensor self, bool sorted=True, bool return_inverse=False, "
   "bool return_counts=False, int? dim=None) -> Any", CUSTOM, "python", composite=True,
   impl=_unique,
   doc="The distinct elements (or slices along dim) in ascending order, with each "
       "element's position among them (return_inverse) and their counts; NaNs are each "
       "distinct.")


def _unique_consecutive(self, return_inverse, return_counts, dim):
    if dim is None:
        flat = O.reshape(self, [-1])
        values, inverse, counts = _unique_rows(flat, O.arange(flat.shape[0]),
                                               return_inverse, return_counts)
        if inverse is not None:
            inverse = O.reshape(inverse, list(self.shape))
        return _result(values, inverse, counts, return_inverse, return_counts)
    d = M.wrap_dim(dim, self.ndim)
    moved = O.movedim(self, d, 0)
    values, inverse, counts = _unique_rows(moved, O.arange(moved.shape[0]), return_inverse,
                                           return_counts)
    return _result(O.movedim(values, 0, d), inverse, counts, return_inverse, return_counts)


op("unique_consecutive(Tensor self, bool return_inverse=False, bool return_counts=False, "
   "int? dim=None) -> Any", CUSTOM, "python", composite=True, impl=_unique_consecutive,
   doc="Removes consecutive repeats (of elements, or of slices along dim), with inverse "
       "and counts as unique.")
