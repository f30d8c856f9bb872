"""Input mutation: a traced program that writes into its inputs, as a functional graph
plus a write-back.

Functionalization (functionalize.py) turns every in-place write into a new value of the
written storage's base, graph inputs included: after the forward's trace, the value of
each input's storage is a node, and the functionalizer counts the writes into it. Each
input written into is an *input mutation* of the graph:

- its new value is an extra output of the forward graph, after the program's own
  outputs; the runtime writes it back into the input after each call
  (csrc/runtime/aot_function.c), so the graph itself never writes into memory it did
  not allocate, and a graph that raises has changed nothing;
- `writes`: the in-place ops that wrote into it; eager bumps the storage's version
  counter once per op, and so does the write-back;
- `differentiable`: whether autograd followed a write (the write ran with grad mode on
  and something that requires grad took part: the input's fake got a new grad_fn). Its
  new value is then a differentiable output of the compiled node, and the runtime writes
  it back with copy_ under grad mode, so the input's history goes on from the compiled
  node as it would from eager's in-place op. Writes autograd did not follow (under
  no_grad, BatchNorm's running statistics, an optimizer's step) are plain copies, and
  the input keeps its history, as in eager.

An output that is a view of an input written into is no graph output: eager returns a
tensor sharing the input's memory (the input itself for `return x.add_(1)`), so the
runtime makes that view again from the input once its new value is in (`OutputAlias`:
the view's steps from the input, replayed by ember.ops.view_replay).
"""
from __future__ import annotations

from .. import _C

import functools
from dataclasses import dataclass

from ..ops import view_replay


@dataclass(frozen=True)
class InputMutation:
    index: int               # the input written into
    writes: int              # in-place ops that wrote into it (version counter bumps)
    differentiable: bool     # autograd followed a write: copy_ under grad mode
    in_graph: int = 0        # of the writes, those the graph did in place itself
                             # (inplace_writes.py): its new value is the input

    def spec(self):
        """The tuple aot_function.c reads."""
        if self.in_graph:
            return (self.index, self.writes, self.differentiable, self.in_graph)
        return (self.index, self.writes, self.differentiable)


@dataclass(frozen=True)
class OutputAlias:
    position: int            # in the program's outputs
    index: int               # the input it is a view of
    steps: tuple             # its view steps from that input (() : the input itself)

    binds: tuple = ()        # a symbolic trace's: (symbol name, input, dim or -1)

    def spec(self):
        """The tuple aot_function.c reads: (position, input index, view(input)), or with
        view steps reading sizes (a symbolic graph's slice at a symbolic position, ...)
        (position, input index, view(input, *inputs), True): the steps' sizes are
        evaluated from the call's inputs."""
        if self.binds and _reads_sizes(self.steps):
            return (self.position, self.index, _SizedView(self.steps, self.binds), True)
        return (self.position, self.index, functools.partial(view_replay.replay, self.steps))


def _reads_sizes(value):
    from ..fx.shape_env import SymInt
    if isinstance(value, SymInt):
        return True
    if isinstance(value, (tuple, list)):
        return any(_reads_sizes(v) for v in value)
    if isinstance(value, slice):
        return _reads_sizes((value.start, value.stop, value.step))
    return False


class _SizedView:
    """view(input, *inputs): the view steps with their sizes (expressions of the
    trace's symbols) evaluated from the call's inputs."""

    def __init__(self, steps, binds):
        self.steps = steps
        self.binds = binds

    def __call__(self, x, *inputs):
        values = {}
        for name, i, d in self.binds:
            v = inputs[i]
            values[name] = int(v) if d < 0 else v.shape[d]
        steps = tuple((s[0],) + tuple(_evaluated(a, values) for a in s[1:])
                      for s in self.steps)
        return view_replay.replay(steps, x)


def _evaluated(value, values):
    from ..fx import sym_expr as se
    from ..fx.shape_env import SymInt
    if isinstance(value, SymInt):
        expr = value.expr
        if not {s.name for s in expr.symbols()} <= set(values):
            expr = value.env.simplify(expr)
        return int(se.evaluate(expr, values))
    if isinstance(value, (tuple, list)):
        return type(value)(_evaluated(v, values) for v in value)
    if isinstance(value, slice):
        return slice(*(_evaluated(v, values) for v in (value.start, value.stop, value.step)))
    return value


def size_binds(primals):
    """(symbol name, input, dim or -1) for each symbol a trace's primals hold as a size
    (SymFake dims, size inputs)."""
    from ..fx.shape_env import SymInt
    out, seen = [], set()

    def add(n, i, d):
        if isinstance(n, SymInt):
            s = n.expr.as_symbol()
            if s is not None and s.name not in seen:
                seen.add(s.name)
                out.append((s.name, i, d))
    for i, p in enumerate(primals):
        if isinstance(p, SymInt):
            add(p, i, -1)
        for d, n in enumerate(getattr(p, "_sym_shape", None) or ()):
            add(n, i, d)
    return tuple(out)


def input_mutations(functional, primals, grad_fns, grad_on):
    """The inputs the traced program wrote into. grad_fns: each primal's grad_fn before
    the program ran; grad_on: whether the trace ran with autograd."""
    out = []
    for i, p in enumerate(primals):
        if not isinstance(p, _C.Tensor):
            continue      # a size input
        writes = functional.writes(p)
        if writes:
            followed = grad_on and p.requires_grad and p.grad_fn is not grad_fns[i]
            out.append(InputMutation(i, writes, bool(followed)))
    return out


@dataclass(frozen=True)
class DetachedInput:
    """An output that is input `index` detached (a new tensor over the input's memory,
    requiring no grad): made from the input at run time, as eager makes it, not
    returned by the graph (whose trace has no node for a detach: it would return the
    input itself)."""
    position: int
    index: int
    steps = ()

    def spec(self):
        return (self.position, self.index, _detach)


def _detach(t):
    return t.detach()


def split_aliases(outs, primals, mutations, node_of=None):
    """(outputs the graph returns, OutputAlias of each output that is a view of an
    input written into, and DetachedInput of each that is an input detached (by
    node_of, the tracer's node of a fake))."""
    written = {id(primals[m.index].untyped_storage()): m.index for m in mutations}
    inputs = {} if node_of is None else {id(node_of(p)): i for i, p in enumerate(primals)}
    ids = {id(p) for p in primals}
    kept, aliases = [], []
    for pos, o in enumerate(outs):
        j = inputs.get(id(node_of(o))) if inputs else None
        if j is not None and id(o) not in ids and not o.requires_grad:
            aliases.append(DetachedInput(pos, j))
            continue
        i = written.get(id(o.untyped_storage()))
        if i is None:
            kept.append(o)
            continue
        steps = view_replay.steps_of(o)
        if steps is None or view_replay.base_of(o) is not primals[i]:
            from .trace import TraceError
            raise TraceError(f"output {pos} is a view of input {i}, which the program "
                             "writes into, but the view ops that made it are not known")
        aliases.append(OutputAlias(pos, i, tuple(steps), size_binds(primals)))
    return kept, aliases


def describe(mutations, aliases):
    """Readable lines (EMBER_LOGS=aot_graphs)."""
    lines = [f"  input {m.index}: {m.writes} write(s)"
             f"{', differentiable' if m.differentiable else ''}"
             f"{', in place' if m.in_graph else ''}" for m in mutations]
    lines += [f"  output {a.position}: input {a.index} detached"
              if isinstance(a, DetachedInput) else
              f"  output {a.position}: a view of input {a.index} "
              f"({', '.join(s[0].entry.name for s in a.steps) or 'the input itself'})"
              for a in aliases]
    return lines
