"""Partition a joint graph into a forward graph and a backward graph.

The forward graph computes the forward outputs and saves every value the backward
needs (the min-cut partitioner that recomputes cheap values instead comes later); the
backward graph takes the saved values and the tangents and returns the gradients."""
from __future__ import annotations

import operator

from .. import fx
from ..capture import logs
from .joint import JointGraph


def _reach(nodes, step):
    """nodes (fx nodes; other values ignored) and every node reached from them by
    step(node), repeatedly."""
    seen, stack = set(), [n for n in nodes if isinstance(n, fx.Node)]
    while stack:
        n = stack.pop()
        if n in seen:
            continue
        seen.add(n)
        stack.extend(step(n))
    return seen


def _ancestors(nodes):
    return _reach(nodes, lambda n: n.all_input_nodes)


def _descendants(nodes):
    return _reach(nodes, lambda n: n.users)


def partition(joint: JointGraph, also_save=()):
    """Returns (forward graph, backward graph, saved nodes of the joint graph). Forward
    values in also_save are computed by the forward and saved even when the backward
    graph does not read them (a backward variant may, aot/variants.py)."""
    g = joint.graph
    nodes = list(g.nodes)
    output = nodes[-1]
    outs = output.args[0]
    fw_outs = list(outs[:joint.num_forward_outputs])
    grads = list(outs[joint.num_forward_outputs:])
    placeholders = [n for n in nodes if n.op == "placeholder"]
    primals = placeholders[:joint.num_primals]
    tangents = placeholders[joint.num_primals:]
    # nodes that must run although nothing reads them (an op that may raise on its
    # values): in the forward when they depend on no tangent, else in the backward
    from_tangents = _descendants(tangents)
    kept = [n for n in nodes if n.op == "call_function" and not n.users and n.is_impure()]
    also = [n for n in also_save if n not in from_tangents and n.op != "output"]
    fw_set = _ancestors(fw_outs + also + [n for n in kept if n not in from_tangents]) | \
        set(primals)
    bw_needed = _ancestors([x for x in grads if x is not None] +
                           [n for n in kept if n in from_tangents])
    # an item of a forward op's tuple the backward reads is taken in the forward (and
    # saved), never the tuple itself (sort's indices, read by a custom backward only)
    fw_set |= {n for n in bw_needed if n.op == "call_function" and
               n.target is operator.getitem and n.args[0] in fw_set}
    bw_nodes = [n for n in nodes if n in bw_needed and n not in fw_set and n.op != "placeholder"]
    saved = []
    also_set = set(also)
    for n in nodes:
        if n in fw_set and (n in also_set or
                            any(u in bw_needed and u not in fw_set for u in n.users)):
            saved.append(n)

    fw = fx.Graph()
    env = {}
    for p in primals:
        env[p] = fw.placeholder(p.name)
        env[p].meta.update(p.meta)
    for n in nodes:
        if n in fw_set and n.op == "call_function":
            env[n] = fw.node_copy(n, lambda a: env[a])
    fw.output(tuple(env[o] for o in fw_outs) + tuple(env[s] for s in saved))
    fw.eliminate_dead_code()
    fw.lint()

    bw = fx.Graph()
    benv = {}
    for s in saved:
        benv[s] = bw.placeholder(s.name)
        benv[s].meta.update(s.meta)
    for t in tangents:
        benv[t] = bw.placeholder(t.name)
        benv[t].meta.update(t.meta)
    for n in bw_nodes:
        benv[n] = bw.node_copy(n, lambda a: benv[a])
    bw.output(tuple(benv[grads[i]] if grads[i] is not None else None
                    for i in joint.primals_requiring_grad))
    bw.eliminate_dead_code()
    bw.lint()
    return fw, bw, saved


def saved_bytes(saved) -> list:
    """(name, shape, dtype, bytes) of each saved value."""
    rows = []
    for n in saved:
        v = n.meta.get("val")
        shape = tuple(v.shape) if v is not None else ()
        nbytes = v.numel() * v.element_size() if v is not None else 0
        rows.append((n.name, shape, v.dtype if v is not None else None, nbytes))
    return rows


def log_graphs(fw, bw, saved, name):
    if not logs.enabled("aot_graphs"):
        return
    rows = saved_bytes(saved)
    total = sum(r[3] for r in rows)
    logs.log("aot_graphs", "\n".join(
        [f"===== AOT forward graph ({name}) =====", str(fw),
         f"===== AOT backward graph ({name}) =====", str(bw),
         f"===== saved for backward: {len(rows)} tensors, {total} bytes ====="] +
        [f"  {nm}: {dtype} {list(shape)}  {nbytes} bytes" for nm, shape, dtype, nbytes in rows]))


def log_mutations(joint: JointGraph, name):
    if not (joint.mutations or joint.output_aliases) or not logs.enabled("aot_graphs"):
        return
    from .mutation import describe
    logs.log("aot_graphs", f"===== inputs written back after each call ({name}) =====\n" +
             "\n".join(describe(joint.mutations, joint.output_aliases)))
