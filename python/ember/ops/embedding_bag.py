"""embedding_bag: sums, means or maxima of bags of embedding rows (torch.embedding_bag, the op
behind nn.functional.embedding_bag and nn.EmbeddingBag).

A composite over the index, index_add, scatter_reduce and gather ops, so autograd, the
tracers and the compiler see only those: the gradient of the weight is the bag's gradient
added into the rows each index picked (scaled by its per-sample weight, divided by the
bag's size for the mean), and for the maximum it goes to the row that won each column
(gather's backward), as PyTorch routes it through max_indices.

Bags: the indices are one 1-d sequence cut at `offsets` (offsets[0] must be 0; with
include_last_offset the last offset closes the last bag, as documented: indices after it
count in no bag, where torch 2.13's CPU kernels disagree among the modes). The bag of index i (offset2bag) is the number of
offsets after the first that are <= i: a cumulative sum of marks. padding_idx's entries
count in no bag (no value, no gradient, not in the mean's size); an empty bag is zeros.

Results as torch.embedding_bag's: (output (B, D), offset2bag (n,), bag_size (B,),
max_indices: (B, D) weight rows for the maximum, bag_size for the mean, zeros for the
sum), the integer results of the indices' dtype (int64 when indices and offsets differ).
scale_grad_by_freq divides each row's gradient by how often its index occurs in the
input: the rows are written r.detach() + (r - r.detach()) / count, which has r's values
exactly and that gradient.
"""
from __future__ import annotations

from .. import _C
from . import api as O
from .linalg import torch_type
from .registry import CUSTOM, op

_SUM, _MEAN, _MAX = 0, 1, 2


def _has_data(t):
    return not t.is_meta and _C._get_mode()[0] == _C.MODE_EAGER and t.numel() > 0


def _legacy(t):
    return "torch." + torch_type(t.dtype) + "Tensor"


def _check(weight, indices, offsets, mode, per_sample_weights, padding_idx):
    for name, t in (("indices", indices), ("offsets", offsets)):
        if t.dtype not in (_C.int64, _C.int32):
            raise RuntimeError(f"Expected tensor for argument #1 '{name}' to have one of the "
                               f"following scalar types: Long, Int; but got {_legacy(t)} "
                               f"instead (while checking arguments for embedding_bag)")
    if not weight.dtype.is_floating_point or weight.is_complex():
        raise RuntimeError(f"Expected tensor for argument #1 'weight' to have one of the "
                           f"following scalar types: Half, BFloat16, Float, Double; but got "
                           f"{_legacy(weight)} instead (while checking arguments for "
                           f"embedding_bag)")
    if weight.ndim != 2:
        raise RuntimeError(f"weight has to be a 2D Tensor, but got Tensor of dimension "
                           f"{weight.ndim}")
    if offsets.ndim != 1:
        raise RuntimeError(f"offsets has to be a 1D Tensor, but got Tensor of dimension "
                           f"{offsets.ndim}")
    if mode not in (_SUM, _MEAN, _MAX):
        raise RuntimeError("`mode` must be sum, mean, or max.")
    if per_sample_weights is not None:
        if mode != _SUM:
            raise RuntimeError("embedding_bag: per_sample_weights only supported with "
                               "mode='sum'")
        if per_sample_weights.dtype is not weight.dtype:
            raise RuntimeError(f"Expected tensor for argument #1 'weight' to have the same type "
                               f"as tensor for argument #1 'per_sample_weights'; but type "
                               f"{_legacy(weight)} does not equal "
                               f"{_legacy(per_sample_weights)} (while checking arguments for "
                               f"embedding_bag)")
        if per_sample_weights.numel() != indices.numel():
            raise RuntimeError("Expected per_sample_weights.value().numel() == indices.numel() "
                               "to be true, but got false.")
    V = weight.shape[0]
    if padding_idx is not None and not -V <= padding_idx < V:
        raise RuntimeError(f"padding_idx must be within the number of embeddings, {-V} through "
                           f"{V - 1}, but got {padding_idx}")
    n = indices.numel()
    if _has_data(offsets):
        first, last = int(offsets[0]), int(offsets[-1])
        if first != 0:
            raise RuntimeError(f"offsets[0] has to be 0, i.e., the first sequence in the "
                               f"mini-batch has to start from position 0. However, got {first}")
        if last > n:
            raise RuntimeError(f"offsets[-1] can not be greater than input's length {n} but "
                               f"got offsets[-1] of {last}")
        if offsets.numel() > 1 and bool((offsets[1:] < offsets[:-1]).any()):
            raise RuntimeError("embedding_bag: offsets must be non-decreasing")
    if _has_data(indices):
        lo, hi = int(indices.min()), int(indices.max())
        if lo < 0 or hi >= V:
            raise RuntimeError(f"embedding_bag: index {lo if lo < 0 else hi} is out of bounds "
                               f"for a weight of {V} rows")


def _embedding_bag(weight, indices, offsets, scale_grad_by_freq=False, mode=_MEAN,
                   sparse=False, per_sample_weights=None, include_last_offset=False,
                   padding_idx=None):
    _check(weight, indices, offsets, mode, per_sample_weights, padding_idx)
    V, D = weight.shape
    idt = indices.dtype if indices.dtype is offsets.dtype else _C.int64
    idx = indices.reshape(-1).to(_C.int64)
    off = offsets.to(_C.int64)
    n = idx.shape[0]
    B = max(off.shape[0] - 1, 0) if include_last_offset else off.shape[0]
    # offset2bag: how many of offsets[1:B] are <= position
    marks = O.zeros((n + 1,), dtype=_C.int64).index_put(
        (off[1:B],), O.ones((max(B - 1, 0),), dtype=_C.int64), accumulate=True)
    bag = marks[:n].cumsum(0)
    if B == 0:
        out = O.zeros((0, D), dtype=weight.dtype)
        empty = O.zeros((0,), dtype=idt)
        return out, bag.to(idt), empty, O.zeros((0, D) if mode == _MAX else (0,), dtype=idt)
    pad = None if padding_idx is None else padding_idx % V
    keep = idx != pad if pad is not None else O.ones((n,), dtype=_C.bool)
    if include_last_offset:     # the last offset closes the last bag (PyTorch's meaning)
        keep = keep & (O.arange(n) < off[B])
    counts = O.zeros((B,), dtype=_C.int64).index_add(0, bag, keep.to(_C.int64))
    rows = weight.index_select(0, idx)                                   # (n, D)
    if scale_grad_by_freq and _C.is_grad_enabled() and weight.requires_grad:
        freq = O.zeros((V,), dtype=weight.dtype).index_add(
            0, idx, O.ones((n,), dtype=weight.dtype)).index_select(0, idx)
        fixed = rows.detach()
        rows = fixed + (rows - fixed) / freq.unsqueeze(1)
    if mode == _MAX:
        import math
        colbag = bag.unsqueeze(1).expand(n, D)
        with _no_grad():
            cand = O.where(keep.unsqueeze(1), rows.detach(), -math.inf)
            top = O.full((B, D), -math.inf, dtype=weight.dtype).scatter_reduce(
                0, colbag, cand, "amax")
            hit = (cand == top.index_select(0, bag)) & keep.unsqueeze(1)
            pos = O.where(hit, O.arange(n).unsqueeze(1), n)
            first = O.full((B, D), n, dtype=_C.int64).scatter_reduce(0, colbag, pos, "amin")
            none = first == n
            ext = O.cat([idx, O.zeros((1,), dtype=_C.int64)])
            max_indices = O.where(none, 0, ext.index_select(0, first.reshape(-1)).reshape(B, D))
        out = weight.gather(0, max_indices)
        out = O.where(none, O.zeros((), dtype=weight.dtype), out)
        return out, bag.to(idt), counts.to(idt), max_indices.to(idt)
    scale = keep.to(weight.dtype)
    if per_sample_weights is not None:
        scale = scale * per_sample_weights.reshape(-1)
    out = O.zeros((B, D), dtype=weight.dtype).index_add(0, bag, rows * scale.unsqueeze(1))
    if mode == _MEAN:
        out = out / O.clamp(counts, min=1).to(weight.dtype).unsqueeze(1)
        return out, bag.to(idt), counts.to(idt), counts.to(idt)
    zeros = O.zeros((B,), dtype=idt)
    return out, bag.to(idt), zeros, O.zeros((B,), dtype=idt)


class _no_grad:
    def __enter__(self):
        self.prev = _C._set_grad_enabled(False)

    def __exit__(self, *exc):
        _C._set_grad_enabled(self.prev)


op("embedding_bag(Tensor weight, Tensor indices, Tensor offsets, bool scale_grad_by_freq=False, "
   "int mode=0, bool sparse=False, Tensor? per_sample_weights=None, "
   "bool include_last_offset=False, int? padding_idx=None) -> (Tensor, Tensor, Tensor, Tensor)",
   CUSTOM, "python", composite=True, method=False, impl=_embedding_bag,
   doc="Bags of weight rows (indices cut at offsets) reduced by sum (0), mean (1) or max (2): "
       "(output, offset2bag, bag_size, max_indices); per_sample_weights scale the rows "
       "(sum only), padding_idx's entries count in no bag, empty bags are zeros.")
