"""The eager backend's graphs: the captured graph run with eager ops.

A captured graph that writes into its inputs (capture ran each in-place op on the
inputs' fakes, so their version counters tell) runs functionalized instead, as the AOT
backends run it: its op-level trace (trace_joint, forward only), where every write is a
new value, runs with eager ops under the caller's grad mode, so its ops record their own
history as eager's do, and the runtime writes the new values back into the inputs after
the call (csrc/runtime/aot_function.c, forward_grad=True). So a graph that raises has
written nothing, and the frame can run again eagerly from the state eager started from.

Not when an input requires grad (under grad mode): the graph's ops then record history,
and only the ops as captured record eager's (a value the graph writes into after an op
saved it must make the backward raise, as eager's does). Nor when the graph calls an
autograd.Function (its op-level trace holds the forward's
ops, whose eager autograd is not the class's backward), nor when it changes grad mode
inside (grad_mode.py: the op-level trace holds no mode changes, and run under one mode
its ops would record history where eager's record none). That graph runs as captured, its
writes into inputs in place as eager's, under `restoring_inputs`: a call that raises
puts the memory and version counter of every input it may have written back as they
were, so the frame runs again eagerly from eager's starting state and writes once.
"""
from __future__ import annotations

import dataclasses

from .. import fx
from .grad_mode import sets_grad_mode
from .inplace_writes import write_in_place
from .joint import trace_joint
from .runtime import compiled_function


def writes_into_inputs(gm) -> bool:
    """Whether a captured graph writes into an input (or a view of one)."""
    for n in gm.graph.nodes:
        fake = n.meta.get("example_value") if n.op == "placeholder" else None
        if fake is not None and getattr(fake, "_version", 0) > 0:
            return True
    return False


def written_inputs(gm):
    """Positions of the placeholders whose storage the captured graph writes into."""
    out = []
    for i, n in enumerate(n for n in gm.graph.nodes if n.op == "placeholder"):
        fake = n.meta.get("example_value")
        if fake is not None and getattr(fake, "_version", 0) > 0:
            out.append(i)
    return out


def restoring_inputs(fn, written):
    """fn, run in place, with the storages of the inputs at positions `written` put
    back (memory and version counter) when it raises."""
    if not written:
        return fn

    def run(*args):
        storages = {}
        for i in written:
            t = args[i] if i < len(args) else None
            if t is not None and hasattr(t, "untyped_storage"):
                s = t.untyped_storage()
                storages.setdefault(id(s), (s, s._snapshot()))
        try:
            return fn(*args)
        except BaseException:
            for s, snap in storages.values():
                s._restore(snap)
            raise
    run.__wrapped__ = fn
    return run


def calls_autograd_functions(gm) -> bool:
    return any(n.op == "call_function" and hasattr(n.target, "function_class")
               for n in gm.graph.nodes)


def _records_autograd(example_inputs):
    """Whether the graph's ops record autograd history: then they run as captured, so
    their backward is eager's own, version checks included (the functional trace has
    no in-place ops, so a backward through a value the graph later writes into would
    not raise as eager's does: fuzz seed 5 #66)."""
    from .. import _C
    return _C.is_grad_enabled() and any(
        getattr(x, "requires_grad", False) for x in example_inputs)


def eager_graph(gm, example_inputs):
    if not writes_into_inputs(gm):
        return gm.forward
    if calls_autograd_functions(gm) or sets_grad_mode(gm) or _records_autograd(example_inputs):
        return restoring_inputs(gm.forward, written_inputs(gm))
    from . import _aliased_inputs_fallback
    code = getattr(gm, "meta", {}).get("code")
    name = code.co_name if code else "graph"
    joint = trace_joint(gm, example_inputs, with_backward=False)
    # a write into a slice of an input, in place (no copy of the whole input)
    first = joint.num_forward_outputs - len(joint.mutations)
    joint = dataclasses.replace(
        joint, mutations=write_in_place(joint.graph, joint.mutations, first))
    fw = fx.GraphModule({}, joint.graph, class_name=f"{name}_functional").forward
    return compiled_function(joint, fw, None, name,
                             fallback=_aliased_inputs_fallback(gm, name), forward_grad=True)
