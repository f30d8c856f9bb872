"""Partition a joint graph into a forward graph and a backward graph.

The forward graph computes the forward outputs and the values it saves for the
backward; the backward graph takes the saved values and the tangents and returns the
gradients, computing again the cheap forward values it needs that were not saved. What
is saved is a minimum cut of the joint graph weighted by bytes (max flow: maxflow.py):
the fewest saved bytes from which the backward can compute all it needs, where only
the op table's cheap ops (elementwise, views, copies, reductions of small inputs) may
be computed again, never matmuls, convolutions, random draws or index work."""
from __future__ import annotations

import operator

from .. import _C
from .. import fx
from ..capture import logs
from ..ops.registry import RECOMPUTE_CHEAP, RECOMPUTE_REDUCTION
from ..fx.shape_env import SymInt
from .joint import JointGraph
from .maxflow import INFINITE, FlowNetwork


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


def partition(joint: JointGraph, also_save=(), min_cut=True):
    """Returns (forward graph, backward graph, saved nodes of the joint graph). Forward
    values in also_save are computed by the forward and saved even when the backward
    graph does not read them (a backward variant may, aot/variants.py). With min_cut
    the saved values are a minimum cut (in bytes) of the joint graph: the backward
    computes again the cheap values (op table: OpEntry.recompute_policy) it can make
    from fewer saved bytes; without, the forward saves every forward value the
    backward reads."""
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
    fw_required = [n for n in fw_outs + also + [n for n in kept if n not in from_tangents]
                   if isinstance(n, fx.Node)]
    bw_roots = [x for x in grads if x is not None] + [n for n in kept if n in from_tangents]
    if min_cut:
        saved = _min_cut_saved(nodes, primals, _ancestors(fw_required), bw_roots,
                               from_tangents, also)
    else:
        saved = _reads_of_backward(nodes, primals, fw_required, bw_roots, from_tangents,
                                   also)
    saved_set = set(saved)
    fw_set = _ancestors(fw_required + saved) | set(primals)
    bw_nodes = _backward_nodes(nodes, bw_roots, saved_set)

    fw = fx.Graph()
    env = {}
    for p in primals:
        env[p] = fw.placeholder(p.name, type_expr=p.type)
        env[p].meta.update(p.meta)
    for n in nodes:
        if n in fw_set and n.op == "call_function":
            env[n] = fw.node_copy(n, lambda a: env[a])
    # an input the program writes into is written after the forward (the runtime
    # writes the new values back): saved as is, the backward would read the new value.
    # The forward saves a copy of it instead (the min cut may prefer it to the values
    # eager saves, which are computed from it before the write)
    written = {primals[m.index] for m in joint.mutations}
    fw.output(tuple(env[o] for o in fw_outs) +
              tuple(_copy_of(fw, env[s]) if s in written else env[s] for s in saved))
    fw.eliminate_dead_code()
    fw.lint()

    bw = fx.Graph()
    benv = {}
    for s in list(saved) + tangents:
        benv[s] = bw.placeholder(s.name, type_expr=_sym_type(s))
        benv[s].meta.update(s.meta)
    for n in bw_nodes:
        benv[n] = bw.node_copy(n, lambda a: benv[a])
    bw.output(tuple(benv[grads[i]] if grads[i] is not None else None
                    for i in joint.primals_requiring_grad))
    bw.eliminate_dead_code()
    bw.lint()
    return fw, bw, saved


def _sym_type(node):
    """A saved size prints as Sym(expression) in the backward's placeholders."""
    v = node.meta.get("val")
    if isinstance(v, SymInt) and node.type is None:
        from ..capture.sym_sizes import SymTypeExpr
        return SymTypeExpr(str(v.expr))
    return node.type


def _copy_of(fw, node):
    """A copy, made in the forward, of an input the program writes into that the
    backward reads: the runtime writes the input's new value into its memory after the
    forward (mutation.py), and the backward must see the value the forward read."""
    from ..ops import api as O
    copy = fw.call_function(O.clone, (node,), {})
    copy.meta.update(node.meta)
    return copy


def _reads_of_backward(nodes, primals, fw_required, bw_roots, from_tangents, also):
    """Every forward value the backward reads (nothing is computed twice)."""
    fw_set = _ancestors(fw_required) | set(primals)
    bw_needed = _ancestors(bw_roots)
    # an item of a forward op's tuple the backward reads is taken in the forward (and
    # saved), never the tuple itself (sort's indices, read by a custom backward only)
    fw_set |= {n for n in bw_needed if n.op == "call_function" and
               n.target is operator.getitem and n.args[0] in fw_set}
    also_set = set(also)
    return [n for n in nodes if n in fw_set and (
        n in also_set or any(u in bw_needed and u not in fw_set for u in n.users))]


def _backward_nodes(nodes, bw_roots, saved_set):
    """The nodes the backward computes: the ancestors of its roots, up to saved values
    and tangents (placeholders)."""
    need, stack = set(), list(bw_roots)
    while stack:
        n = stack.pop()
        if n in need or n in saved_set:
            continue
        need.add(n)
        if n.op == "placeholder":
            continue
        stack.extend(n.all_input_nodes)
    return [n for n in nodes if n in need and n.op != "placeholder"]


def _nbytes(node):
    """The bytes of node's value (at the hints when its sizes are symbolic); a size
    (SymInt) counts as one int64."""
    v = node.meta.get("val")
    if isinstance(v, _C.Tensor):
        return _C.Tensor.numel(v) * v.element_size()
    if isinstance(v, SymInt):
        return 8
    return None


def _recomputable(node):
    """Whether the backward may compute node's value again (from the op table)."""
    if node.op != "call_function":
        return False
    t = node.target
    if t is operator.getitem:
        return _recomputable(node.args[0])
    entry = getattr(t, "entry", None)
    if entry is None:
        return False
    policy = entry.recompute_policy
    if policy == RECOMPUTE_CHEAP:
        return True
    if policy == RECOMPUTE_REDUCTION:
        # a reduction that reads much more than it returns is saved, not recomputed
        out = _nbytes(node)
        read = sum(_nbytes(a) or 0 for a in node.all_input_nodes)
        return out is not None and read <= REDUCTION_RECOMPUTE_RATIO * out
    return False


REDUCTION_RECOMPUTE_RATIO = 4


def _min_cut_saved(nodes, primals, in_forward, bw_roots, from_tangents, also):
    """The forward values to save: a minimum cut, in bytes, between the primals and the
    backward's nodes. Each value v is an edge v.in -> v.out whose capacity is its
    bytes (cutting it: saving v), each read of v by u an uncuttable edge v.out -> u.in.
    The source feeds the primals and every value the forward computes that the backward
    may not compute again (one only the backward reads it computes, as without
    min-cut); every node that depends on a tangent drains into the sink. The source side of a
    cut is what the forward computes; a value whose in is on that side and out is not
    is saved, and every value on the sink side the backward computes."""
    bw_needed = _ancestors(bw_roots)
    roots = set(bw_roots)
    also_set = set(also)
    net = FlowNetwork()
    S, T = ("source",), ("sink",)
    primal_set = set(primals)
    for n in nodes:
        if n not in bw_needed:
            continue
        vin, vout = (n, 0), (n, 1)
        for a in n.all_input_nodes:
            net.add_edge((a, 1), vin, INFINITE)
        if n in from_tangents:
            net.add_edge(vin, vout, INFINITE)
            net.add_edge(vin, T, INFINITE)
            continue
        # a value saved anyway costs nothing more to read in the backward
        nbytes = 0 if n in also_set else _nbytes(n)
        net.add_edge(vin, vout, INFINITE if nbytes is None else nbytes)
        if n in roots:
            # a gradient that is a forward value (no tangent reaches it)
            net.add_edge(vout, T, INFINITE)
        if n in primal_set or n in also_set or (n in in_forward and not _recomputable(n)):
            net.add_edge(S, vin, INFINITE)
    net.vertex(S)
    net.vertex(T)
    if net.max_flow(S, T) == INFINITE:
        raise RuntimeError("AOT partition: the backward reads a forward value that can "
                           "be neither saved nor computed again")
    side = net.source_side(S)
    return [n for n in nodes if n in also_set or
            (n in bw_needed and n not in from_tangents and (n, 0) in side and
             (n, 1) not in side)]


def saved_bytes(saved) -> list:
    """(name, shape, dtype, bytes) of each saved value."""
    rows = []
    for n in saved:
        v = n.meta.get("val")
        if isinstance(v, SymInt):      # a size the backward reads
            rows.append((n.name, (), None, 8))
            continue
        shape = tuple(v.shape) if v is not None else ()
        nbytes = _C.Tensor.numel(v) * v.element_size() if v is not None else 0
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
