"""Reverse-mode automatic differentiation: backward(), grad(), grad mode.

The engine is C (csrc/autograd/); gradient formulas come from the op table.
"""
from __future__ import annotations

import threading

from .. import _C
from .grad_mode import enable_grad, inference_mode, is_grad_enabled, no_grad, \
    set_grad_enabled
from . import graph
from . import copy_slices  # noqa: F401  (binds the backward of in-place updates of views)
from .gradcheck import gradcheck
from . import function
from .function import Function, FunctionCtx, once_differentiable


def _as_tuple(x):
    if x is None:
        return None
    if isinstance(x, _C.Tensor):
        return (x,)
    return tuple(x)


def _grads_for(tensors, grad_tensors):
    if grad_tensors is None:
        return (None,) * len(tensors)
    grads = _as_tuple(grad_tensors)
    if len(grads) != len(tensors):
        raise RuntimeError(f"got {len(grads)} gradients for {len(tensors)} tensors")
    return grads


_partial = threading.local()     # depth of grad() / backward(inputs=...) calls running


def _is_checkpoint_valid():
    """False inside grad() or backward(inputs=...), which run only part of the graph:
    reentrant checkpoints (ember.utils.checkpoint) cannot run there, as in PyTorch."""
    return getattr(_partial, "depth", 0) == 0


def _run_partial(fn, *args):
    _partial.depth = getattr(_partial, "depth", 0) + 1
    try:
        return fn(*args)
    finally:
        _partial.depth -= 1


def backward(tensors, grad_tensors=None, retain_graph=None, create_graph=False, inputs=None):
    """Accumulates d(tensors)/d(leaf) into the .grad of the leaves (or only of inputs)."""
    tensors = _as_tuple(tensors)
    if retain_graph is None:
        retain_graph = create_graph
    inputs = _as_tuple(inputs)
    if inputs is not None and len(inputs) == 0:
        raise RuntimeError("'inputs' argument to backward() cannot be empty.")
    args = (tensors, _grads_for(tensors, grad_tensors), bool(retain_graph), bool(create_graph),
            inputs, True)
    if inputs is None:
        _C._run_backward(*args)
    else:
        _run_partial(_C._run_backward, *args)


def grad(outputs, inputs, grad_outputs=None, retain_graph=None, create_graph=False,
         allow_unused=False, materialize_grads=False):
    """The gradients of outputs with respect to inputs, returned (no .grad is touched)."""
    outputs = _as_tuple(outputs)
    inputs_t = _as_tuple(inputs)
    if retain_graph is None:
        retain_graph = create_graph
    res = _run_partial(_C._run_backward, outputs, _grads_for(outputs, grad_outputs),
                       bool(retain_graph), bool(create_graph), inputs_t, False,
                       bool(allow_unused or materialize_grads))
    if materialize_grads:
        from .. import zeros_like
        res = tuple(zeros_like(i) if g is None else g for g, i in zip(res, inputs_t))
    return res


__all__ = ["backward", "grad", "no_grad", "enable_grad", "set_grad_enabled",
           "inference_mode", "is_grad_enabled", "gradcheck", "graph", "Function",
           "FunctionCtx", "once_differentiable", "function"]
