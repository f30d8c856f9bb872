"""The CTC loss (torch.ctc_loss, nn.functional.ctc_loss, nn.CTCLoss).

Prims with C kernels (csrc/kernels/ctc.c), PyTorch's names and schemas:

- _ctc_loss(log_probs (T, N, C), targets, input_lengths, target_lengths, blank,
  zero_infinity) -> (neg_log_likelihood (N,), log_alpha (N, T, 2 max(target_lengths) + 1)):
  the forward recursion over the blank-extended label sequence in log space, in double;
- _ctc_loss_backward: beta from the end (with the saved loss and log_alpha) and PyTorch's
  gradient, exp(lp) minus the
  posterior occupancy of each class (the gradient through the log_softmax that made
  log_probs), zero past each input length and, with zero_infinity, for infinite losses.
  It has no derivative (PyTorch's neither).

ctc_loss is a composite, as PyTorch's: an unbatched (T, C) input gets a batch of one, the
lengths may be int lists or tensors (read as lists: the Tensor overload needs their
values), infinite losses become 0 with zero_infinity, and 'mean' divides each loss by its
target length (at least 1) before the batch mean. Both prims lower as extern steps.
"""
from __future__ import annotations

import math

from .. import _C
from ..compiler.lowerings import extern
from . import api as O
from . import meta as M
from .linalg import torch_type
from .registry import CUSTOM, op

_WHERE = "(while checking arguments for ctc_loss_allocate_outputs)"


def _ctc_check(log_probs, targets, input_lengths, target_lengths, blank):
    """ctc.c's checks, in its order and words: (T, N, C, longest target)."""
    if log_probs.dtype not in (_C.float32, _C.float64):
        raise NotImplementedError(f"\"ctc_loss_cpu\" not implemented for "
                                  f"'{torch_type(log_probs.dtype)}'")
    if targets.dtype not in (_C.int64, _C.int32):
        raise RuntimeError(f"Expected tensor for argument #2 'targets' to have scalar type Int; "
                           f"but got torch.{torch_type(targets.dtype)}Tensor instead {_WHERE}")
    if log_probs.ndim != 3:
        raise RuntimeError(f"Expected 3-dimensional tensor, but got {log_probs.ndim}-dimensional "
                           f"tensor for argument #1 'log_probs' {_WHERE}")
    T, N, C = log_probs.shape
    if not 0 <= blank < C:
        raise RuntimeError("blank must be in label range")
    if len(input_lengths) != N:
        raise RuntimeError("input_lengths must be of size batch_size")
    if len(target_lengths) != N:
        raise RuntimeError("target_lengths must be of size batch_size")
    for v in target_lengths:
        if v < 0:
            raise RuntimeError(f"Expected target_lengths to have value at least 0, but got "
                               f"value {v} {_WHERE}")
    longest = max(target_lengths, default=0)
    if targets.ndim == 1:
        if targets.shape[0] != sum(target_lengths):
            raise RuntimeError(f"Expected tensor to have size {sum(target_lengths)} at dimension "
                               f"0, but got size {targets.shape[0]} for argument #2 'targets' "
                               f"{_WHERE}")
    elif targets.ndim == 2:
        if targets.shape[0] != N:
            raise RuntimeError(f"Expected tensor to have size {N} at dimension 0, but got size "
                               f"{targets.shape[0]} for argument #2 'targets' {_WHERE}")
        if targets.shape[1] < longest:
            raise RuntimeError(f"Expected tensor to have size at least {longest} at dimension "
                               f"1, but got size {targets.shape[1]} for argument #2 'targets' "
                               f"{_WHERE}")
    else:
        raise RuntimeError(f"ctc_loss: targets must be 1-d or 2-d, but got "
                           f"{targets.ndim}-dimensional targets")
    for v in input_lengths:
        if v < 0 or v > T:
            raise RuntimeError(f"Expected input_lengths to have value at "
                               f"{'least 0' if v < 0 else f'most {T}'}, but got value {v} "
                               f"{_WHERE}")
    return T, N, C, longest


def _ctc_meta(entry, args):
    log_probs, targets, input_lengths, target_lengths, blank, zero_infinity = args
    T, N, C, longest = _ctc_check(log_probs, targets, input_lengths, target_lengths, blank)
    return (M.meta_tensor((N,), log_probs.dtype),
            M.meta_tensor((N, T, 2 * longest + 1), log_probs.dtype))


def _ctc_backward(grads, outs, log_probs, targets, input_lengths, target_lengths, blank,
                  zero_infinity):
    g = grads[0]
    if g is None:
        return (None,) * 6
    gx = O._ctc_loss_backward(g, log_probs, targets, input_lengths, target_lengths, outs[0],
                              outs[1], blank, zero_infinity)
    return gx, None, None, None, None, None


op("_ctc_loss(Tensor log_probs, Tensor targets, int[] input_lengths, int[] target_lengths, "
   "int blank=0, bool zero_infinity=False) -> (Tensor, Tensor)", CUSTOM, "ctc_loss",
   prim=True, lower=extern, method=False, meta=_ctc_meta, backward=_ctc_backward,
   doc="CTC's negative log-likelihood per sample and the forward variables log_alpha "
       "(csrc/kernels/ctc.c: log space, in double; -inf outside each sample's frames and "
       "states).")


def _ctc_backward_meta(entry, args):
    g, log_probs, targets, input_lengths, target_lengths, nll, log_alpha, blank, zi = args
    T, N, C, longest = _ctc_check(log_probs, targets, input_lengths, target_lengths, blank)
    want = [N, T, 2 * longest + 1]
    if list(g.shape) != [N] or list(nll.shape) != [N] or nll.dtype is not log_probs.dtype or \
            list(log_alpha.shape) != want or log_alpha.dtype is not log_probs.dtype:
        raise RuntimeError(f"_ctc_loss_backward: expected grad and neg_log_likelihood of shape "
                           f"[{N}] and log_alpha of shape {want} (of log_probs' dtype), got "
                           f"{list(g.shape)}, {list(nll.shape)} and {list(log_alpha.shape)}")
    return M.meta_tensor((T, N, C), log_probs.dtype)


op("_ctc_loss_backward(Tensor grad, Tensor log_probs, Tensor targets, int[] input_lengths, "
   "int[] target_lengths, Tensor neg_log_likelihood, Tensor log_alpha, int blank, "
   "bool zero_infinity=False) -> Tensor", CUSTOM, "ctc_loss_backward", prim=True,
   lower=extern, method=False, meta=_ctc_backward_meta,
   doc="The gradient of _ctc_loss for log_probs (PyTorch's: exp(log_probs) minus each "
       "class's posterior occupancy, times grad; the saved log_alpha, beta from the end); "
       "no derivative of its own.")


def _lengths(v, name):
    """Lengths given as an integer tensor (any shape: its values, read) or ints; a float or
    bool tensor raises PyTorch's RuntimeError."""
    if isinstance(v, _C.Tensor):
        if v.dtype.is_floating_point or v.is_complex() or v.dtype is _C.bool:
            raise RuntimeError(f"{name} must be integral")
        return [int(x) for x in v.reshape(-1).tolist()]
    return [int(x) for x in v]


def _ctc_loss_tensor(log_probs, targets, input_lengths, target_lengths, blank=0,
                     zero_infinity=False):
    return O._ctc_loss(log_probs, targets, _lengths(input_lengths, "input_lengths"),
                       _lengths(target_lengths, "target_lengths"), blank, zero_infinity)


op("_ctc_loss.Tensor(Tensor log_probs, Tensor targets, Tensor input_lengths, "
   "Tensor target_lengths, int blank=0, bool zero_infinity=False) -> (Tensor, Tensor)",
   CUSTOM, "python", composite=True, method=False, impl=_ctc_loss_tensor,
   doc="_ctc_loss with the lengths as integer tensors (their values are read; float or bool "
       "lengths raise).")


def _ctc_loss(log_probs, targets, input_lengths, target_lengths, blank=0, reduction=1,
              zero_infinity=False):
    batched = log_probs.ndim == 3
    if not batched:
        log_probs = log_probs.unsqueeze(1)
        targets = targets.unsqueeze(0)
    il = _lengths(input_lengths, "input_lengths")
    tl = _lengths(target_lengths, "target_lengths")
    nll, _ = O._ctc_loss(log_probs, targets, il, tl, blank, zero_infinity)
    if zero_infinity:
        nll = O.where(nll == math.inf, O.zeros((), dtype=nll.dtype), nll)
    if reduction == 1:
        per = O.full((len(tl),), 1.0, dtype=nll.dtype)      # the lengths, as graph values
        for b, n in enumerate(tl):
            if n > 1:
                per = O.select_scatter(per, O.full((), float(n), dtype=nll.dtype), 0, b)
        return (nll / per).mean()
    if reduction == 2:
        return nll.sum()
    return nll if batched else nll.squeeze(0)


op("ctc_loss.IntList(Tensor log_probs, Tensor targets, int[] input_lengths, "
   "int[] target_lengths, int blank=0, int reduction=1, bool zero_infinity=False) -> Tensor",
   CUSTOM, "python", composite=True, method=False, impl=_ctc_loss,
   doc="The CTC loss of log_probs ((T, N, C) or unbatched (T, C)) against targets; "
       "reduction 0 none, 1 mean (each loss over its target length first), 2 sum.")
op("ctc_loss.Tensor(Tensor log_probs, Tensor targets, Tensor input_lengths, "
   "Tensor target_lengths, int blank=0, int reduction=1, bool zero_infinity=False) -> Tensor",
   CUSTOM, "python", composite=True, method=False, impl=_ctc_loss,
   doc="ctc_loss with the lengths as integer tensors (their values are read).")
