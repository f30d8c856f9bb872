"""Decomposition into prims: re-trace a graph with every op that is not a prim replaced by
its `decompose=` from the op table, then check that only prims remain."""
from __future__ import annotations

import operator

from .. import _C
from .. import fx
from ..fx.shape_env import SymInt
from .trace import OpTracer, SymNodes


SIZE_OPS = frozenset(SymNodes.CALLS) | {operator.add, operator.mul}


class PrimVerificationError(RuntimeError):
    pass


def decompose(graph, values=None) -> "fx.Graph":
    """The prim graph of graph. With a dict `values`, it is filled with each node of
    graph -> the fake value standing for it in the prim graph (its `_trace`)."""
    tracer = OpTracer(decompose=True)
    env = {} if values is None else values

    def value(a):
        if isinstance(a, fx.Node):
            return env[a]
        if isinstance(a, (tuple, list)):
            return type(a)(value(x) for x in a)
        if isinstance(a, dict):
            return {k: value(v) for k, v in a.items()}
        return a

    prev_grad = _C._set_grad_enabled(False)
    try:
        for node in graph.nodes:
            if node.op == "placeholder":
                env[node] = tracer.placeholder(node.name, node.meta["val"])
            elif node.op == "call_function":
                args, kwargs = value(node.args), value(node.kwargs)
                val = node.meta.get("val")
                if isinstance(val, SymInt):
                    # size arithmetic: its expression, made again where an op takes it
                    env[node] = val
                    continue
                if node.target is operator.getitem:
                    env[node] = args[0][args[1]]
                    continue
                with tracer.tracing():
                    env[node] = node.target(*args, **kwargs)
            elif node.op == "output":
                out = value(node.args[0])
                tracer.graph.output(_nodes_of(tracer, out))
            else:
                raise PrimVerificationError(f"decompose: unexpected node {node.format_node()}")
    finally:
        _C._set_grad_enabled(prev_grad)
    tracer.graph.eliminate_dead_code()
    tracer.graph.lint()
    verify_prims(tracer.graph)
    return tracer.graph


def _nodes_of(tracer, out):
    if out is None:
        return None
    if isinstance(out, (tuple, list)):
        return tuple(_nodes_of(tracer, o) for o in out)
    return tracer.node_of(out)


def verify_prims(graph):
    """Raises unless every op node of graph is a prim (or picks an item of a tuple)."""
    for node in graph.nodes:
        if node.op != "call_function":
            if node.op in ("call_method", "call_module"):
                raise PrimVerificationError(f"not a prim graph: {node.format_node()}")
            continue
        t = node.target
        if t is operator.getitem:
            continue
        if t in SIZE_OPS and isinstance(node.meta.get("val"), SymInt):
            continue     # arithmetic of sizes (a symbolic graph's)
        if not isinstance(t, _C.Op) or not t.entry.prim:
            raise PrimVerificationError(f"node {node.name} calls "
                                        f"{getattr(t, 'schema', t)}, which is not a prim")
