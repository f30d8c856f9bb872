"""The joint graph: a captured graph's forward and, for inputs that require grad, its
backward, traced together at op level on fake tensors.

The forward runs under the tracer with grad mode on, so the dispatcher records autograd
nodes on the fake outputs exactly as eager would. Then ember.autograd.grad runs the C
engine over them, still under the tracer: the op table's backward formulas, and the
engine's own gradient sums, reductions and casts, dispatch ops that record themselves.
The joint graph's inputs are the primals and one tangent per differentiable output; its
outputs are the forward outputs followed by a gradient per primal (None where none).

A program that writes into its inputs returns their new values as extra forward
outputs (after its own), the differentiable ones with a tangent each (mutation.py); its
outputs that are views of those inputs are made again from them at run time instead.

An input that requires grad but is not a leaf (it has a history) is traced as such: its
fake hangs from a pass-through node over a leaf fake, so an in-place write into it is
traced as eager runs it (a leaf would refuse it) and its gradient is the leaf's.

The fake autograd graph is kept (retain_graph): when a call's backward gets no gradient
for some outputs, AOT autograd traces the backward of the others over the same fakes
(variants.py), so that it reads the forward values this trace saved.
"""
from __future__ import annotations

from dataclasses import dataclass

from .. import _C
from .. import autograd
from .mutation import input_mutations, split_aliases
from ..fx.shape_env import SymInt
from .trace import OpTracer, fresh_fake


@dataclass
class JointGraph:
    graph: object              # fx.Graph
    num_primals: int
    num_forward_outputs: int
    num_tangents: int
    differentiable_outputs: list   # indices of forward outputs that get a tangent
    primals_requiring_grad: list   # indices of primals that get a gradient
    forward_output_meta: list      # (shape, dtype) per forward output
    backward_trace: object = None  # BackwardTrace, to trace the backward again
    forward_nodes: frozenset = frozenset()   # the nodes the forward's trace recorded
    mutations: tuple = ()          # InputMutation per input written into; their new
                                   # values are the last forward outputs
    output_aliases: tuple = ()     # OutputAlias per program output that is a view of
                                   # an input written into (not a graph output)


def _flat_outputs(out):
    if isinstance(out, _C.Tensor):
        return [out], False
    if isinstance(out, (tuple, list)):
        if not all(isinstance(o, _C.Tensor) for o in out):
            raise TypeError("AOT autograd: graph outputs must be tensors")
        return list(out), True
    raise TypeError(f"AOT autograd: graph returned {type(out).__name__}")


def trace_joint(fn, example_inputs, *, with_backward=True, grad_inside=False,
                symbolic=None) -> JointGraph:
    """Traces fn(*inputs) (and its backward when an input requires grad). With
    with_backward=False the forward alone is traced, with autograd as at run time when
    an input requires grad (so the trace knows which writes into inputs autograd
    follows), and no tangent is made. The trace starts in the caller's grad mode; fn may
    change it in regions (grad_mode.py): grad_inside says a region turns it on, so a
    trace started with grad off may still record autograd there. symbolic: per input,
    None or what the trace takes instead of the example's sizes (a SymFake, or for a
    size input its SymInt): the graphs are then symbolic ([dynamic])."""
    tracer = OpTracer()
    needs_grad = [i for i, x in enumerate(example_inputs)
                  if getattr(x, "requires_grad", False)]
    entry_grad = bool(needs_grad) and _C.is_grad_enabled()
    # whether autograd may record anywhere in fn (at entry, or in a region)
    grad_on = bool(needs_grad) and (_C.is_grad_enabled() or grad_inside)
    primals, leaves = [], []
    for i, x in enumerate(example_inputs):
        like = symbolic[i] if symbolic is not None else None
        p, leaf = _primal(tracer, f"primals_{i + 1}", x, grad_on, like)
        primals.append(p)
        leaves.append(leaf)
    grad_fns = [getattr(p, "grad_fn", None) for p in primals]
    prev_grad = _C._set_grad_enabled(entry_grad)
    try:
        with tracer.tracing():
            outs, _ = _flat_outputs(fn(*primals))
    finally:
        _C._set_grad_enabled(prev_grad)
    mutations = input_mutations(tracer.functional, primals, grad_fns, grad_on)
    outs, aliases = split_aliases(outs, primals, mutations, tracer.node_of)
    num_outputs = len(outs)
    outs = outs + [primals[m.index] for m in mutations]
    out_nodes = [tracer.node_of(o) for o in outs]
    forward_nodes = frozenset(tracer.graph.nodes)
    differentiable = [True] * num_outputs + [m.differentiable for m in mutations]
    diff = [i for i, o in enumerate(outs) if with_backward and grad_on and differentiable[i]
            and o.requires_grad and o.dtype.is_floating_point]
    grads = []
    tangents = []
    backward_trace = None
    if diff:
        tangents = [tracer.placeholder(f"tangents_{k + 1}", _detached(outs[i]))
                    for k, i in enumerate(diff)]
        # placeholders must come first: move the tangents before the first op
        _hoist_placeholders(tracer.graph)
        inputs = [leaves[i] for i in needs_grad]
        with tracer.tracing():
            g = autograd.grad([outs[i] for i in diff], inputs, tangents,
                              allow_unused=True, retain_graph=True)
        grads = [tracer.node_of(x) if x is not None else None for x in g]
        backward_trace = BackwardTrace([outs[i] for i in diff], inputs, tangents)
    grad_nodes = [None] * len(primals)
    for i, node in zip(needs_grad if diff else [], grads):
        grad_nodes[i] = node
    tracer.graph.output(tuple(out_nodes) + (tuple(grad_nodes) if diff else ()))
    # dead code goes after decomposition: a dead op may still raise as eager raises (an
    # index out of range), and only the prims say so (entry.checks_values)
    tracer.graph.lint()
    return JointGraph(tracer.graph, len(primals), len(outs), len(tangents), diff,
                      needs_grad if diff else [],
                      [(tuple(o.shape), o.dtype) for o in outs], backward_trace,
                      forward_nodes, tuple(mutations), tuple(aliases))


def _primal(tracer, name, example, grad_on, like=None):
    """(the fake input fn is called with, the leaf fake gradients are taken for). An
    input with a history (not a leaf, requiring grad) hangs from a pass-through node
    over a leaf, so in-place writes into it are traced as eager runs them."""
    if isinstance(like, SymInt):
        # a size input of a symbolic graph: its SymInt, a graph value of its own
        value = tracer.sym_placeholder(str(like.expr), like)
        return value, value
    fake = tracer.placeholder(name, example, like)
    if not (grad_on and example.requires_grad and example.grad_fn is not None):
        return fake, fake
    inner = fresh_fake(fake)
    inner._trace = fake._trace
    _C._make_node(_pass_through, (fake,), (inner,), "InputBackward")
    return inner, fake


def _pass_through(g):
    return (g,)


@dataclass
class BackwardTrace:
    """The fakes of a joint trace its backward ran over: the differentiable outputs
    (their fake autograd graph retained), the primals requiring grad, the tangents."""
    outputs: list
    inputs: list
    tangents: list


def _detached(t):
    """A tangent: shaped like the output, contiguous (gradients arrive in any layout;
    compiled graphs copy them into this one)."""
    return fresh_fake(t, contiguous=True)


def _hoist_placeholders(graph):
    first_op = next((n for n in graph.nodes if n.op != "placeholder"), None)
    if first_op is None:
        return
    for n in list(graph.nodes):
        if n.op == "placeholder":
            first_op.prepend(n)
