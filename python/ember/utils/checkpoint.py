"""Activation checkpointing, as torch.utils.checkpoint: checkpoint(fn, *args) runs fn
without keeping its intermediate values for the backward pass and runs it again during
the backward pass to compute the gradients (the same gradients, for less memory).

Both of PyTorch's variants:

- use_reentrant=True: fn runs under no_grad; the outputs hang from one autograd node
  whose backward recomputes fn on detached copies of the tensor arguments and runs a
  nested backward through the recomputed graph (gradients of parameters accumulate
  there, in their .grad). As in PyTorch: keyword arguments are refused, outputs only
  require grad when a tensor argument does, and it cannot run inside autograd.grad() or
  backward(inputs=...).
- use_reentrant=False: fn runs once recording a graph, which is used only to find the
  tensors the result depends on (the tensor arguments and the leaves fn reads, such as
  parameters: the graph's nodes made during the call are told from older ones by their
  sequence numbers) and is then dropped; the outputs hang from one node with an edge to
  each of them, whose backward recomputes fn and returns their gradients
  (autograd.grad), so it composes with autograd.grad, backward(inputs=...), keyword
  arguments and arguments that do not require grad. When fn reads a non-leaf tensor
  that requires grad from outside its arguments (a closure), the node could not give
  that tensor its gradient: the recorded graph is then kept (no memory is saved, the
  gradients are exact) and a warning says so.

With preserve_rng_state (the default) the recomputation draws the same random numbers
as the first run (dropout masks match), and the default generator is left as it was."""
from __future__ import annotations

import warnings

from .. import _C
from .. import random as _random
from ..autograd import _is_checkpoint_valid, enable_grad, no_grad

Tensor = _C.Tensor

__all__ = ["checkpoint", "checkpoint_sequential", "CheckpointError"]


class CheckpointError(RuntimeError):
    """The recomputation did not reproduce the first run (other shapes or dtypes)."""


def noop_context_fn():
    from contextlib import nullcontext
    return nullcontext(), nullcontext()


def _flatten(out):
    """(tensors in order, rebuild) for a tensor or a (nested) tuple/list of values."""
    if isinstance(out, Tensor):
        return [out], lambda ts: ts[0]
    if isinstance(out, (tuple, list)):
        parts = [_flatten(o) for o in out]
        sizes = [len(p[0]) for p in parts]
        flat = [t for p in parts for t in p[0]]

        def rebuild(ts):
            items, i = [], 0
            for (_, rb), n in zip(parts, sizes):
                items.append(rb(ts[i:i + n]))
                i += n
            return type(out)(items) if not hasattr(out, "_fields") else type(out)(*items)
        return flat, rebuild
    return [], lambda ts: out


class _RngFork:
    """Sets the default generator to a saved state for the block, then restores it."""

    def __init__(self, state, enabled):
        self.state, self.enabled = state, enabled

    def __enter__(self):
        if self.enabled:
            self.saved = _random.default_generator.get_state()
            _random.default_generator.set_state(self.state)

    def __exit__(self, *exc):
        if self.enabled:
            _random.default_generator.set_state(self.saved)


def checkpoint(function, *args, use_reentrant=None, context_fn=noop_context_fn,
               determinism_check="default", debug=False, early_stop=True, **kwargs):
    """function(*args, **kwargs), its intermediate values recomputed in the backward
    pass instead of kept. preserve_rng_state=True (a keyword) replays the random
    numbers of the first run."""
    if use_reentrant is None:
        warnings.warn("torch.utils.checkpoint: the use_reentrant parameter should be passed "
                      "explicitly. Starting in PyTorch 2.9, calling checkpoint without "
                      "use_reentrant will raise an exception. use_reentrant=False is "
                      "recommended, but if you need to preserve the current default "
                      "behavior, you can pass use_reentrant=True. Refer to docs for more "
                      "details on the differences between the two variants.", stacklevel=2)
        use_reentrant = True
    preserve = kwargs.pop("preserve_rng_state", True)
    if kwargs and use_reentrant:
        raise ValueError("Unexpected keyword arguments: " + ",".join(arg for arg in kwargs))
    if use_reentrant:
        if context_fn is not noop_context_fn or debug is not False:
            raise ValueError("Passing `context_fn` or `debug` is only supported when "
                             "use_reentrant=False.")
        return _checkpoint_reentrant(function, preserve, args)
    if determinism_check not in ("default", "none"):
        raise ValueError(f"determinism_check should be one of ['default', 'none'], but got "
                         f"{determinism_check}")
    return _checkpoint_recorded(function, preserve, context_fn, determinism_check, args,
                                kwargs)


# ------------------------------------------------------------------ use_reentrant=True


def _checkpoint_reentrant(function, preserve, args):
    tensor_pos = [i for i, a in enumerate(args) if isinstance(a, Tensor)]
    if not any(args[i].requires_grad for i in tensor_pos):
        warnings.warn("None of the inputs have requires_grad=True. Gradients will be None",
                      stacklevel=3)
    fwd_state = _random.default_generator.get_state() if preserve else None
    with no_grad():
        outputs = function(*args)
    if not any(args[i].requires_grad for i in tensor_pos):
        return outputs
    flat, rebuild = _flatten(outputs)
    outs = tuple(t.detach() for t in flat)

    def backward(*grads):
        if not _is_checkpoint_valid():
            raise RuntimeError("When use_reentrant=True, torch.utils.checkpoint is "
                               "incompatible with .grad() or passing an `inputs` parameter "
                               "to .backward(). To resolve this error, you can either set "
                               "use_reentrant=False, or call .backward() without passing "
                               "the `inputs` argument.")
        inputs = list(args)
        for i in tensor_pos:
            inputs[i] = args[i].detach().requires_grad_(args[i].requires_grad)
        with _RngFork(fwd_state, preserve), enable_grad():
            again = function(*inputs)
        again, _ = _flatten(again)
        with_grad = [(o, g) for o, g in zip(again, grads)
                     if o.requires_grad and g is not None]
        if not with_grad:
            raise RuntimeError("none of output has requires_grad=True, this checkpoint() is "
                               "not necessary")
        from ..autograd import backward as run_backward
        run_backward([o for o, _ in with_grad], [g for _, g in with_grad])
        return tuple(inputs[i].grad for i in tensor_pos)
    differentiable = [t for t in outs if t.dtype.is_floating_point]
    if differentiable:
        _C._make_node(backward, tuple(args[i] for i in tensor_pos), outs,
                      "CheckpointFunctionBackward")
    return rebuild(list(outs))


# ------------------------------------------------------------------ use_reentrant=False


def _boundary(outputs, marker, arg_tensors):
    """What the graph recorded for outputs depends on from outside the call: the leaves
    requiring grad it reaches that are not arguments (parameters, in order of first
    visit), and whether it reaches a node made before the call (older than marker) that
    is not an argument's own node (a non-leaf read from a closure)."""
    arg_ids = {id(t) for t in arg_tensors}
    arg_nodes = {(id(t.grad_fn), t.output_nr) for t in arg_tensors if t.grad_fn is not None}
    seen, leaves, leaf_ids, external = set(), [], set(), False
    stack = [t.grad_fn for t in outputs if t.grad_fn is not None]
    while stack:
        fn = stack.pop()
        if id(fn) in seen:
            continue
        seen.add(id(fn))
        for nxt, nr in fn.next_functions:
            if nxt is None:
                continue
            var = getattr(nxt, "variable", None)
            if var is not None:
                if id(var) not in arg_ids and id(var) not in leaf_ids:
                    leaf_ids.add(id(var))
                    leaves.append(var)
            elif nxt._sequence_nr > marker:
                stack.append(nxt)
            elif (id(nxt), nr) not in arg_nodes:
                external = True
    return leaves, external


def _sequence_marker():
    """The sequence number of a node made now (later nodes have larger ones)."""
    from .. import zeros
    with enable_grad():
        probe = zeros(1).requires_grad_(True) * 1.0
    return probe.grad_fn._sequence_nr


def _detached_args(args, kwargs):
    a = [x.detach().requires_grad_(x.requires_grad) if isinstance(x, Tensor) else x
         for x in args]
    k = {n: (v.detach().requires_grad_(v.requires_grad) if isinstance(v, Tensor) else v)
         for n, v in kwargs.items()}
    return a, k


def _checkpoint_recorded(function, preserve, context_fn, determinism_check, args, kwargs):
    fwd_state = _random.default_generator.get_state() if preserve else None
    marker = _sequence_marker()
    fwd_ctx, recompute_ctx = context_fn()
    with fwd_ctx:
        outputs = function(*args, **kwargs)
    flat, rebuild = _flatten(outputs)
    recorded = [t for t in flat if t.grad_fn is not None]
    if not recorded:                 # nothing to differentiate (no_grad, or no inputs)
        return outputs
    arg_tensors = [x for x in list(args) + list(kwargs.values())
                   if isinstance(x, Tensor) and x.requires_grad]
    leaves, external = _boundary(recorded, marker, arg_tensors)
    if external:
        warnings.warn("checkpoint(use_reentrant=False): the function reads a tensor that "
                      "requires grad and is neither one of its arguments nor a leaf; its "
                      "graph is kept (no recomputation) so that the gradients stay exact",
                      stacklevel=3)
        return outputs
    metas = [(tuple(t.shape), t.dtype) for t in flat]
    outs = tuple(t.detach() for t in flat)

    def backward(*grads):
        r_args, r_kwargs = _detached_args(args, kwargs)
        with _RngFork(fwd_state, preserve), enable_grad(), recompute_ctx:
            again = function(*r_args, **r_kwargs)
        again, _ = _flatten(again)
        if determinism_check == "default":
            got = [(tuple(t.shape), t.dtype) for t in again]
            if got != metas:
                raise CheckpointError("torch.utils.checkpoint: Recomputed values for the "
                                      "following tensors have different metadata than during "
                                      f"the forward pass: recomputed {got}, forward {metas}")
        inputs = [t for t in list(r_args) + list(r_kwargs.values())
                  if isinstance(t, Tensor) and t.requires_grad] + leaves
        pairs = [(o, g) for o, g in zip(again, grads) if g is not None and o.requires_grad]
        if not pairs:
            return (None,) * len(inputs)
        from ..autograd import grad as run_grad, is_grad_enabled
        return run_grad([o for o, _ in pairs], inputs, [g for _, g in pairs],
                        allow_unused=True, create_graph=is_grad_enabled())
    del outputs, flat, recorded          # the recorded graph goes away with them
    if any(t.dtype.is_floating_point for t in outs):
        _C._make_node(backward, tuple(arg_tensors + leaves), outs, "CheckpointBackward")
    return rebuild(list(outs))


def checkpoint_sequential(functions, segments, input, use_reentrant=None, **kwargs):
    """Runs a sequence of modules (or a Sequential) in `segments` checkpointed segments
    (the last one is not checkpointed), as torch.utils.checkpoint.checkpoint_sequential."""
    if use_reentrant is None:
        warnings.warn("torch.utils.checkpoint.checkpoint_sequential: the use_reentrant "
                      "parameter should be passed explicitly. In version 2.9 we will raise an "
                      "exception if use_reentrant is not passed. use_reentrant=False is "
                      "recommended, but if you need to preserve the current default "
                      "behavior, you can pass use_reentrant=True. Refer to docs for more "
                      "details on the differences between the two variants.", stacklevel=2)
        use_reentrant = True
    preserve = kwargs.pop("preserve_rng_state", True)
    if kwargs:
        raise ValueError("Unexpected keyword arguments: " + ",".join(arg for arg in kwargs))

    def run_function(start, end, functions):
        def forward(input):
            for j in range(start, end + 1):
                input = functions[j](input)
            return input
        return forward
    from ..nn import Sequential
    if isinstance(functions, Sequential):
        functions = list(functions.children())
    segment_size = len(functions) // segments
    end = -1
    for start in range(0, segment_size * (segments - 1), segment_size):
        end = start + segment_size - 1
        input = checkpoint(run_function(start, end, functions), input,
                           use_reentrant=use_reentrant, preserve_rng_state=preserve)
    return run_function(end + 1, len(functions) - 1, functions)(input)
