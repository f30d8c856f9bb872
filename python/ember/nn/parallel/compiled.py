"""Compiled DDP (the role of Dynamo's DDPOptimizer). ember.compile(ddp_model) runs
DDP.forward in CPython and captures the wrapped module's forward; a graph captured while
a DDP forward runs is split where the parameters' gradient buckets end, and each piece
is compiled by the backend on its own. Each piece's backward is then its own autograd
node, so a bucket's gradients reach DDP's hooks, and its all-reduce starts, when that
piece's backward has run, while the earlier pieces' backwards still compute. One
compiled graph would hand every gradient over at its very end: no overlap.

The split walks the graph from its output back to its inputs, adding up the bytes of the
DDP parameters each node is the first (from the end) to use, and closes a piece when the
bucket size is reached (the first piece from the end at DDP's first-bucket size), as
the reducer fills its buckets from the last parameter. Values crossing a boundary
become outputs of one piece and inputs of the next."""
from __future__ import annotations

import threading

from ...fx.graph import Graph
from ...fx.graph_module import GraphModule

_active = threading.local()
counters = {"split_graphs": 0, "pieces": 0}
last_split = []          # the pieces' sizes (nodes) of the last split, for tests


class active_ddp:
    """Marks a DDP forward as running on this thread (DDP.forward uses it)."""

    def __init__(self, ddp):
        self.ddp = ddp

    def __enter__(self):
        self.prev = getattr(_active, "ddp", None)
        _active.ddp = self.ddp
        return self

    def __exit__(self, *exc):
        _active.ddp = self.prev


def split_backend(backend):
    """backend, or (while a DDP forward runs) a backend that splits at bucket ends."""
    ddp = getattr(_active, "ddp", None)
    if ddp is None:
        return backend

    def split(gm, example_inputs):
        return compile_split(gm, example_inputs, backend, ddp)
    return split


def _partition(gm, example_inputs, ddp):
    """{node: piece index in forward order} for the graph's computing nodes."""
    from .reducer import _FIRST_BUCKET_BYTES
    params = {id(p) for p in ddp._params}
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    bytes_of = {}
    for node, value in zip(placeholders, example_inputs):
        if id(value) in params:
            bytes_of[node] = value.numel() * value.element_size()
    cap = ddp.bucket_bytes_cap
    limit = min(_FIRST_BUCKET_BYTES, cap)
    piece, filled, seen = 0, 0, set()
    back = {}
    body = [n for n in gm.graph.nodes if n.op not in ("placeholder", "output")]
    for node in reversed(body):
        if filled >= limit:              # the bucket is full: earlier nodes start a piece
            piece, filled, limit = piece + 1, 0, cap
        back[node] = piece
        for arg in node.all_input_nodes:
            if arg in bytes_of and arg not in seen:
                seen.add(arg)
                filled += bytes_of[arg]
    last = piece
    return {n: last - k for n, k in back.items()}, last + 1


def compile_split(gm, example_inputs, backend, ddp):
    where, count = _partition(gm, example_inputs, ddp)
    if count <= 1:
        return backend(gm, example_inputs)
    nodes = list(gm.graph.nodes)
    placeholders = [n for n in nodes if n.op == "placeholder"]
    output = next(n for n in nodes if n.op == "output")
    example = dict(zip(placeholders, example_inputs))
    pieces = [[] for _ in range(count)]
    for n in nodes:
        if n in where:
            pieces[where[n]].append(n)
    # what each piece reads from outside itself, and which of its values leave it
    needed_later = set(output.all_input_nodes)
    ins, outs = [], []
    for k in range(count):
        members = set(pieces[k])
        ins.append(list(dict.fromkeys(a for n in pieces[k] for a in n.all_input_nodes
                                      if a not in members)))
    for k in range(count):
        members = set(pieces[k])
        later = set(needed_later)
        for j in range(k + 1, count):
            later.update(ins[j])
        outs.append([n for n in pieces[k] if n in later])
    compiled = []
    for k in range(count):
        g = Graph()
        env = {}
        for a in ins[k]:
            ph = g.placeholder(a.name)
            ph.meta = dict(a.meta)
            env[a] = ph
        for n in pieces[k]:
            env[n] = g.node_copy(n, lambda x: env[x])
        g.output(tuple(env[n] for n in outs[k]))
        sub = GraphModule(gm, g, class_name=f"DDPPiece{k}")
        sub.meta = dict(getattr(gm, "meta", {}))
        ex = [example[a] if a in example else a.meta["example_value"] for a in ins[k]]
        compiled.append((backend(sub, ex), ins[k], outs[k]))
    counters["split_graphs"] += 1
    counters["pieces"] += count
    last_split[:] = [len(p) for p in pieces]
    result_spec = output.args[0]

    def run(*args):
        values = dict(zip(placeholders, args))
        for fn, needs, gives in compiled:
            got = fn(*[values[a] for a in needs])
            for n, v in zip(gives, got):
                values[n] = v
        return _map(result_spec, values)
    return run


def _map(spec, values):
    from ...fx.node import Node
    if isinstance(spec, Node):
        return values[spec]
    if isinstance(spec, tuple):
        return tuple(_map(s, values) for s in spec)
    if isinstance(spec, list):
        return [_map(s, values) for s in spec]
    if isinstance(spec, dict):
        return {k: _map(v, values) for k, v in spec.items()}
    return spec
