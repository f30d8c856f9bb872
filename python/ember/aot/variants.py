"""Backward graphs for calls in which some differentiable outputs get no gradient.

Eager autograd never runs the part of a graph that only outputs without a gradient
reach: the inputs only they reach keep .grad None, and no zeros flow through formulas
(where 0 * inf would make a NaN). A compiled function has one backward graph, traced
with a tangent for every differentiable output; for a call whose engine hands it None
for some, it runs instead the backward traced for exactly the outputs that got one.

That backward is traced on the joint trace's own fakes, whose autograd graph was kept
(joint.BackwardTrace): the C engine runs over them again, under a tracer that turns
every value of the joint trace a formula reads into a placeholder. Such a value is a
tangent, or a forward value, which after decomposition is a value of the prim joint
graph; the compiled forward saves it when the full backward reads it too (formulas
read the same saved values whichever gradients are missing). The variant takes those
saved values (by index into the forward's saved list) and the tangents it reads.
"""
from __future__ import annotations

from .. import _C
from .. import autograd
from ..fx import sym_expr as se
from ..fx.shape_env import SymInt
from .decompose import decompose
from .joint import JointGraph, _hoist_placeholders
from .trace import OpTracer


class _VariantTracer(OpTracer):
    """An OpTracer whose values from another graph (the joint graph) become
    placeholders of this one, one per joint node."""

    def __init__(self, outer_graph):
        super().__init__()
        self.outer_graph = outer_graph
        self.outer = {}         # joint node -> placeholder
        self.sym.missing = self._symbol_placeholder

    def node_of(self, value):
        if isinstance(value, _C.Tensor):
            node = value._trace
            if node is not None and node.graph is not self.graph:
                return self._placeholder_for(node, value)
        return super().node_of(value)

    def _symbol_placeholder(self, symbol):
        """A size the backward reads: a placeholder for the joint graph's size input
        (the forward saves it: aot_compile)."""
        for node in self.outer_graph.nodes:
            val = node.meta.get("val") if node.op == "placeholder" else None
            if isinstance(val, SymInt) and val.expr == se.Expr.atom(symbol):
                ph = self.graph.placeholder(f"outer_{node.name}", type_expr=node.type)
                ph.meta["val"] = val
                self.outer[node] = ph
                self.sym.known[val.expr] = ph
                return ph
        return None

    def _placeholder_for(self, node, value):
        # (a node the joint graph's dead code elimination erased is fine until the prim
        # graph reads it: the forward cannot save it, BackwardVariants then raises)
        if node.graph is not self.outer_graph:
            raise RuntimeError(f"compiled backward: a formula read {node.name}, which is "
                               "not a value of the joint graph")
        ph = self.outer.get(node)
        if ph is None:
            ph = self.graph.placeholder(f"outer_{node.name}")
            ph.meta["val"] = value
            self.outer[node] = ph
        return ph


class BackwardVariants:
    """variants(present) -> (backward, saved indices, tangent indices), built once per
    pattern `present` (a bool per differentiable output: whether it got a gradient)."""

    def __init__(self, joint: JointGraph, prim_values: dict, saved: list, compiler, name):
        self.joint = joint
        self.prim_values = prim_values      # joint node -> its fake in the prim graph
        self.saved_index = {n: i for i, n in enumerate(saved)}
        self.saved_sizes = {n.meta["val"].expr: i for i, n in enumerate(saved)
                            if isinstance(n.meta.get("val"), SymInt)}
        self.compiler = compiler
        self.name = name
        self.cache = {}

    def __call__(self, present):
        present = tuple(bool(p) for p in present)
        v = self.cache.get(present)
        if v is None:
            v = self.cache[present] = self._build(present)
        return v

    def _build(self, present):
        bt = self.joint.backward_trace
        if len(present) != len(bt.tangents):
            raise RuntimeError(f"compiled backward: {len(present)} gradient flags for "
                               f"{len(bt.tangents)} differentiable outputs")
        ks = [k for k, p in enumerate(present) if p]
        tangent_nodes = {t._trace: k for k, t in enumerate(bt.tangents)}
        tracer = _VariantTracer(self.joint.graph)
        # (a symbolic joint graph: the formulas' plain fakes read its symbolic sizes)
        sizes = [n.meta["val"] for n in self.joint.graph.nodes
                 if n.op == "placeholder" and isinstance(n.meta.get("val"), SymInt)]
        tracer.symbolic = bool(sizes)
        env = sizes[0].env if sizes else None
        known = (len(env.guards), len(env.replacements)) if env is not None else None
        prev = _C._set_grad_enabled(False)
        try:
            with tracer.tracing():
                grads = autograd.grad([bt.outputs[k] for k in ks], bt.inputs,
                                      [bt.tangents[k] for k in ks], allow_unused=True,
                                      retain_graph=True)
            out = tuple(tracer.node_of(g) if g is not None else None for g in grads)
        finally:
            _C._set_grad_enabled(prev)
        graph = tracer.graph
        graph.output(out)
        # the value each placeholder stands for, shaped and laid out as the prim graph
        # has it (tangents are contiguous, as the joint trace made them)
        for node, ph in tracer.outer.items():
            fake = self.prim_values.get(node)
            if node not in tangent_nodes and isinstance(fake, _C.Tensor):
                ph.meta["val"] = fake
        if tracer.symbolic:
            _size_placeholders(tracer)
        _hoist_placeholders(graph)
        graph.eliminate_dead_code()
        graph.lint()
        values = {}
        prim = decompose(graph, values)
        # the placeholders the prim graph reads, first the saved values (in the
        # forward's order), then the tangents; an op-level read the decomposition
        # does not use is dropped
        order = []
        for node, ph in tracer.outer.items():
            v = values[ph]
            pph = v._trace if isinstance(v, _C.Tensor) else \
                next(n for n in prim.nodes if n.op == "placeholder" and n.name == ph.name)
            if not pph.users:
                prim.erase_node(pph)
            elif node in tangent_nodes:
                order.append(((1, tangent_nodes[node]), pph))
            else:
                order.append(((0, self._saved_index(node, present)), pph))
        order.sort(key=lambda kv: kv[0])
        first_op = next(n for n in prim.nodes if n.op != "placeholder")
        for _, pph in order:
            first_op.prepend(pph)
        prim.lint()
        saved_idx = tuple(i for (kind, i), _ in order if kind == 0)
        tangent_idx = tuple(i for (kind, i), _ in order if kind == 1)
        label = "".join("1" if p else "0" for p in present)
        compiled = self.compiler(prim, f"{self.name}_backward_{label}")
        if env is not None:
            compiled = _sized(compiled, prim, env, known, self.name)
        return compiled, saved_idx, tangent_idx

    def _saved_index(self, node, present):
        """The index among the forward's saved values of the joint node's value."""
        fake = self.prim_values.get(node)
        if isinstance(fake, SymInt):      # a size input, saved by the forward
            i = self.saved_sizes.get(fake.expr)
        else:
            prim_node = getattr(fake, "_trace", None) if isinstance(fake, _C.Tensor) \
                else None
            i = self.saved_index.get(prim_node)
        if i is None:
            raise RuntimeError(
                f"compiled backward of {self.name}: the gradient of only outputs "
                f"{[k for k, p in enumerate(present) if p]} reads {node.name}, a forward "
                "value the compiled forward does not save (the full backward does not "
                "read it)")
        return i


def _size_placeholders(tracer):
    """A placeholder for every size symbol of the variant's tensor placeholders that
    has none: the decomposition of an op the formulas call may read a size no op-level
    node reads (squeeze's view to its input's shape; fuzz seed 13 #85)."""
    for ph in list(tracer.outer.values()):
        val = ph.meta.get("val")
        if not isinstance(val, _C.Tensor):
            continue
        for d in tuple(val.shape) + tuple(val.stride()):
            if not isinstance(d, SymInt):
                continue
            for sym in d.expr.symbols():
                if se.Expr.atom(sym) not in tracer.sym.known:
                    tracer._symbol_placeholder(sym)


def _sized(compiled, prim, env, known, name):
    """A backward variant of a symbolic graph, built after the frame's guards were:
    a branch its formulas took on a size cannot join them. Such relations are taken
    out of the ShapeEnv and checked here on each call from the sizes the variant is
    given (a call they do not hold for raises rather than compute at wrong sizes); the
    graph is also run again at other sizes (sym_check.py)."""
    from .sym_check import check_other_sizes
    rels = [g.rel for g in env.guards[known[0]:]]
    rels += [se.Rel("==", se.Expr.atom(s) - rep)
             for s, rep in list(env.replacements.items())[known[1]:]]
    del env.guards[known[0]:]
    for s in list(env.replacements)[known[1]:]:
        del env.replacements[s]
    check_other_sizes(prim, env)
    if not rels:
        return compiled
    from ..capture.exc import counters
    for r in rels:
        counters["aot_dynamic_guards"][f"{name} (backward variant, checked per call): "
                                       f"{r}"] += 1
    slots = [(i, str(n.meta["val"].expr)) for i, n in enumerate(
        n for n in prim.nodes if n.op == "placeholder")
        if isinstance(n.meta.get("val"), SymInt)]
    given = {name_ for _, name_ in slots}
    if any(sym.name not in given for r in rels for sym in r.expr.symbols()):
        raise RuntimeError(f"compiled backward of {name}: the backward of only some "
                           f"outputs assumed {rels} of sizes it does not read")

    def run(*args):
        values = {name_: args[i] for i, name_ in slots}
        for r in rels:
            if not r.evaluate(values):
                raise RuntimeError(
                    f"compiled backward of {name}: the backward of only some outputs "
                    f"assumed {r}, which does not hold at these sizes ({values}); "
                    "compile with dynamic=False, or let every output get a gradient")
        return compiled(*args)
    return run
