"""embedding_bag: sums, means or maxima of bags of embedding rows (torch.embedding_bag, the op
behind nn.functional.embedding_bag and nn.EmbeddingBag).

embedding_bag is a composite that checks its arguments (PyTorch's messages) and calls the
prim _embedding_bag, whose C kernel (csrc/kernels/embedding_bag.c) reduces the bags on the
thread pool; its gradient is the prims _embedding_bag_backward (the weight's dense
gradient: the bag's gradient added into the rows each index picked, scaled by its
per-sample weight, divided by the bag's size for the mean, and for the maximum into the
row that won each column, as PyTorch routes it through max_indices) and
_embedding_bag_per_sample_weights_backward, PyTorch's names and schemas.

Bags: the indices are one 1-d sequence cut at `offsets` (offsets[0] must be 0; with
include_last_offset the last offset closes the last bag, as documented: indices after it
count in no bag, where torch 2.13's CPU kernels disagree among the modes). The bag of
index i (offset2bag) is the number of offsets after the first that are <= i. padding_idx's entries
count in no bag (no value, no gradient, not in the mean's size); an empty bag is zeros.

Results as torch.embedding_bag's: (output (B, D), offset2bag (n,), bag_size (B,),
max_indices: (B, D) weight rows for the maximum, bag_size for the mean, zeros for the
sum), the integer results of the indices' dtype (int64 when indices and offsets differ).
scale_grad_by_freq divides each row's gradient by how often its index occurs in the
input (sum and mean).
"""
from __future__ import annotations

from .. import _C
from ..compiler.lowerings import extern
from . import api as O
from . import meta as M
from .linalg import torch_type
from .registry import CUSTOM, op

_SUM, _MEAN, _MAX = 0, 1, 2


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
    # the values (offsets[0] == 0, offsets[-1] <= n, non-decreasing, indices in range) are
    # checked by the kernel (embedding_bag.c), with these messages


def _embedding_bag(weight, indices, offsets, scale_grad_by_freq=False, mode=_MEAN,
                   sparse=False, per_sample_weights=None, include_last_offset=False,
                   padding_idx=None):
    _check(weight, indices, offsets, mode, per_sample_weights, padding_idx)
    pad = -1 if padding_idx is None else padding_idx % weight.shape[0]
    return O._embedding_bag(weight, indices.reshape(-1), offsets, scale_grad_by_freq, mode,
                            sparse, per_sample_weights, include_last_offset, pad)


op("embedding_bag(Tensor weight, Tensor indices, Tensor offsets, bool scale_grad_by_freq=False, "
   "int mode=0, bool sparse=False, Tensor? per_sample_weights=None, "
   "bool include_last_offset=False, int? padding_idx=None) -> (Tensor, Tensor, Tensor, Tensor)",
   CUSTOM, "python", composite=True, method=False, impl=_embedding_bag,
   doc="Bags of weight rows (indices cut at offsets) reduced by sum (0), mean (1) or max (2): "
       "(output, offset2bag, bag_size, max_indices); per_sample_weights scale the rows "
       "(sum only), padding_idx's entries count in no bag, empty bags are zeros.")


def _idt(indices, offsets):
    return indices.dtype if indices.dtype is offsets.dtype else _C.int64


def _bag_meta(entry, args):
    weight, indices, offsets, _sgbf, mode, _sparse, psw, last, pad = args
    _check(weight, indices, offsets, mode, psw, None if pad == -1 else pad)
    V, D = weight.shape
    n = indices.numel()
    B = max(offsets.shape[0] - 1, 0) if last else offsets.shape[0]
    idt = _idt(indices, offsets)
    return (M.meta_tensor((B, D), weight.dtype), M.meta_tensor((n,), idt),
            M.meta_tensor((B,), idt), M.meta_tensor((B, D) if mode == _MAX else (B,), idt))


def _bag_backward(grads, outs, weight, indices, offsets, scale_grad_by_freq, mode, sparse,
                  per_sample_weights, include_last_offset, padding_idx):
    g = grads[0]
    if g is None:
        return (None,) * 9
    gw = O._embedding_bag_backward(g, indices, offsets, outs[1], outs[2], outs[3],
                                   weight.shape[0], scale_grad_by_freq, mode, sparse,
                                   per_sample_weights, padding_idx)
    gp = None
    if per_sample_weights is not None:
        gp = O._embedding_bag_per_sample_weights_backward(
            g, weight, indices, offsets, outs[1], mode, padding_idx).reshape(
                per_sample_weights.shape)
    return gw, None, None, None, None, None, gp, None, None


op("_embedding_bag(Tensor weight, Tensor indices, Tensor offsets, "
   "bool scale_grad_by_freq=False, int mode=0, bool sparse=False, "
   "Tensor? per_sample_weights=None, bool include_last_offset=False, int padding_idx=-1) "
   "-> (Tensor, Tensor, Tensor, Tensor)", CUSTOM, "embedding_bag", prim=True, lower=extern,
   method=False, meta=_bag_meta, backward=_bag_backward,
   doc="embedding_bag's kernel (csrc/kernels/embedding_bag.c: bags on the pool; sums in "
       "the weight's dtype in index order); padding_idx -1 is none.")


def _bag_backward_meta(entry, args):
    g, indices, offsets, o2b, bag_size, max_indices, V = args[:7]
    return M.meta_tensor((V, g.shape[1]), g.dtype)


op("_embedding_bag_backward(Tensor grad, Tensor indices, Tensor offsets, Tensor offset2bag, "
   "Tensor bag_size, Tensor maximum_indices, SymInt num_weights, bool scale_grad_by_freq, "
   "int mode, bool sparse, Tensor? per_sample_weights, int padding_idx=-1) -> Tensor",
   CUSTOM, "embedding_bag_backward", prim=True, lower=extern, method=False,
   meta=_bag_backward_meta,
   doc="The dense gradient of _embedding_bag's weight: each counted index's row gets its "
       "bag's gradient (times its per-sample weight, over the bag's size for the mean, over "
       "the index's count with scale_grad_by_freq); for the maximum each column's winner "
       "(column blocks on the pool, positions in order).")


def _psw_backward_meta(entry, args):
    return M.meta_tensor((args[2].numel(),), args[0].dtype)


op("_embedding_bag_per_sample_weights_backward(Tensor grad, Tensor weight, Tensor indices, "
   "Tensor offsets, Tensor offset2bag, int mode, int padding_idx=-1) -> Tensor", CUSTOM,
   "embedding_bag_psw_backward", prim=True, lower=extern, method=False,
   meta=_psw_backward_meta,
   doc="The gradient of _embedding_bag's per_sample_weights (mode sum): the dot product "
       "of each counted index's weight row with its bag's gradient, 0 for the others.")
