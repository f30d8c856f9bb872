"""Grad-mode regions inside a captured graph.

Capture records `no_grad()` / `enable_grad()` / `set_grad_enabled(b)` in the frame as
calls of _C._set_grad_enabled in the graph (capture/stdlib.py), so one graph holds
regions run under different modes (TorchDynamo records its _set_grad_enabled the same
way). AOT autograd traces through them: the joint trace runs the captured graph, whose
mode-setting calls change the mode while the fakes are made, so an op inside a no_grad
region records no autograd node (its results require no grad and the backward never
reaches it) and an op inside an enable_grad region records one, whatever the mode the
graph is entered with.

A graph entered with grad off whose region turns it on still has differentiable
outputs: its compiled function is called with grad on (`with_grad_on`), so the
runtime (which hangs outputs from its node only under grad mode, as eager records
history only then) gives them their CompiledFunctionBackward; its forward graph runs
with grad off as always, and the frame's mode comes back as it was after the call.
"""
from __future__ import annotations

from .. import _C


def _mode_nodes(gm):
    graph = getattr(gm, "graph", None)
    if graph is None:
        return []
    return [n for n in graph.nodes
            if n.op == "call_function" and n.target is _C._set_grad_enabled]


def sets_grad_mode(gm) -> bool:
    """Whether the captured graph changes grad mode inside (holds a region)."""
    return bool(_mode_nodes(gm))


def turns_grad_on(gm) -> bool:
    """Whether a region of the captured graph runs with grad on (enable_grad(),
    set_grad_enabled(True), leaving a no_grad region)."""
    return any(bool(n.args[0]) for n in _mode_nodes(gm))


def with_grad_on(fn):
    """fn called with grad mode on, the caller's mode restored after (a graph entered
    with grad off whose enable_grad region makes differentiable outputs)."""
    def run(*args):
        prev = _C._set_grad_enabled(True)
        try:
            return fn(*args)
        finally:
            _C._set_grad_enabled(prev)
    run.__wrapped__ = fn
    return run
