"""Op-level tracing: run code on fake (meta) tensors under the dispatcher's trace mode, so
that every op it dispatches records itself as a node of a new FX graph.

Each fake tensor carries its graph value in the C tensor's `_trace` slot. The tracer is
the callback the dispatcher hands every call to in trace mode (csrc/dispatch/op.c): it
records `call_function(op_overload, args)` and returns fake outputs computed by the op's
Python meta rule (ember/ops/meta.py); a view op's fake is its kernel's meta view of its
input, so it shares the input's storage as the eager result does. Composite ops never
reach it (their kernels run and dispatch the ops they are made of). In-place ops reach
it as themselves: it records their functional twin and functionalizes the write (the
updated tensor, its base and its other views stand for new values: functionalize.py).
"""
from __future__ import annotations

import contextlib
import operator

from .. import _C
from .. import fx
from ..fx import sym_expr as se
from ..fx.shape_env import SymInt, sym_max, sym_min
from ..fx.sym_fake import SymFake
from ..fx.sym_meta import SymbolicMeta, dispatch_mode as _mode, is_symbolic, run_composite
from ..ops import meta as M
from .functionalize import Functionalizer


class TraceError(RuntimeError):
    pass


class OpTracer:
    """Records dispatched ops into self.graph. With `decompose`, an op that is not a prim
    is replaced by its decomposition (which dispatches prims, recorded in turn)."""

    def __init__(self, decompose=False):
        self.graph = fx.Graph()
        self.decompose = decompose
        self.functional = Functionalizer(self)
        self.sym = SymNodes(self.graph)
        self.symbolic = False      # a symbolic trace: see _dressed

    # ------------------------------------------------------------ values

    def sym_placeholder(self, name, value):
        """A size input: the SymInt `value` of a symbol (its placeholder prints as
        `s0: "Sym(s0)"`)."""
        from ..capture.sym_sizes import SymTypeExpr
        node = self.graph.placeholder(name, type_expr=SymTypeExpr(str(value.expr)))
        node.meta["val"] = value
        self.sym.known[value.expr] = node
        self.symbolic = True
        return value

    def placeholder(self, name, example, like=None):
        """A fake input standing for a new placeholder shaped like `example`, or like
        `like` (a SymFake: with its symbolic sizes); a SymInt stands for itself."""
        if isinstance(example, SymInt):
            return self.sym_placeholder(name, example)
        node = self.graph.placeholder(name)
        fake = fresh_fake(example if like is None else like)
        if example.requires_grad:
            fake.requires_grad_(True)
        fake._trace = node
        node.meta["val"] = fake
        return fake

    def node_of(self, value):
        """The graph value a tensor stands for now (a stale view is regenerated)."""
        if isinstance(value, _C.Tensor):
            node = self.functional.current(value) if value._trace is not None else None
            if node is None:
                raise TraceError(
                    f"a tensor of shape {list(value.shape)} reached a traced op without "
                    "a graph value: it was made outside the traced code")
            return node
        if isinstance(value, SymInt):
            return self.sym.node(value)
        if isinstance(value, (tuple, list)):
            return type(value)(self.node_of(v) for v in value)
        return value

    # ------------------------------------------------------------ the tracer callback

    def __call__(self, op, args):
        entry = op.entry
        if self.symbolic:
            args = _dressed(args)
        if entry.composite:
            # its C kernel, or its symbolic form (sym_meta.py): the ops either calls
            # come back here
            return run_composite(op, entry, args)
        if entry.inplace and entry.functional is not None:
            return self._inplace(entry, args)
        if self.decompose and not entry.prim:
            if entry.decompose is None:
                raise TraceError(f"{entry.qualified_name} is not a prim and has no "
                                 "decomposition")
            return entry.decompose(*args)
        out = self._meta(op, entry, args)
        node = self._record(op, entry, args)
        return self._bind(node, out)

    def _inplace(self, entry, args):
        """An in-place op: its functional twin is recorded and written into the target.
        Returns (the twin's result, a fake standing for the target's old value)."""
        target = args[0]
        old_node = self.node_of(target)
        result = self(entry.functional.c_op, args)
        if not isinstance(result, _C.Tensor):
            raise TraceError(f"{entry.qualified_name}: the functional op returned "
                             f"{type(result).__name__}")
        old = fresh_fake(target, contiguous=True)
        old._trace = old_node
        self.functional.write(target, result)
        return result, old

    def _meta(self, op, entry, args):
        if is_symbolic(args):
            # sizes that are expressions: the Python rule computes them (sym_meta.py),
            # ops it calls run symbolically and unrecorded
            meta = SymbolicMeta()
            with _mode(_C.MODE_TRACE, meta):
                return meta._rule(op, entry, args)
        with _mode(_C.MODE_META):
            rule = M.rule_for(entry)
            aliased = entry.aliased_params
            if aliased and aliased[0] is not None:
                # the result may be a view of an input: the kernel's meta result shares
                # the input's storage exactly when the eager one does
                out = op._kernel(args)
            elif rule is not None:
                out = rule(entry, args)
            else:
                out = op._kernel(args)
        return out

    def _record(self, op, entry, args):
        params = entry.schema.params
        pos, kw = [], {}
        for p, a in zip(params, args):
            v = self.node_of(a)
            if p.kwonly:
                kw[p.name] = v
            else:
                pos.append(v)
        return self.graph.call_function(op, tuple(pos), kw)

    def _bind(self, node, out):
        node.meta["val"] = out
        if isinstance(out, _C.Tensor):
            out._trace = node
            self.functional.bound(out)
            return out
        if isinstance(out, tuple):
            import operator
            for i, v in enumerate(out):
                item = self.graph.call_function(operator.getitem, (node, i), {})
                item.meta["val"] = v
                if isinstance(v, _C.Tensor):
                    v._trace = item
                    self.functional.bound(v)
            return out
        return out

    # ------------------------------------------------------------ running

    @contextlib.contextmanager
    def tracing(self):
        with _mode(_C.MODE_TRACE, self):
            yield self


def fresh_fake(like, contiguous=False):
    """A fake with its own storage shaped like `like` (a SymFake when like is one)."""
    if isinstance(like, SymFake):
        shape = like._sym_shape
        strides = M.contiguous_strides(shape) if contiguous else like._sym_strides
        return SymFake.make(shape, strides, like.dtype)
    if contiguous:
        return _C._meta_tensor(tuple(like.shape), like.dtype)
    return _C._meta_tensor(tuple(like.shape), like.dtype, like.stride())


class SymNodes:
    """The graph values of size expressions: the size placeholders, and nodes of
    operator.add/mul (floordiv, mod, min, max) over them, one per distinct expression,
    made where an op first takes it."""

    CALLS = {operator.floordiv, operator.mod, sym_min, sym_max}
    _CALLS = {"floordiv": operator.floordiv, "mod": operator.mod, "min": sym_min,
              "max": sym_max}

    def __init__(self, graph):
        self.graph = graph
        self.known = {}        # Expr -> node
        self.missing = None    # symbol -> node, for a symbol with no placeholder yet

    def node(self, value):
        env = value.env
        return self._expr(env, env.simplify(value.expr))

    def _expr(self, env, expr):
        known = self.known.get(expr)
        if known is not None:
            return known
        if expr.is_const():
            return expr.value
        total = None
        for m, c in sorted(expr.terms.items(), key=lambda mc: str(se.Expr({mc[0]: 1}))):
            term = None
            for atom, p in m:
                a = self._atom(env, atom)
                for _ in range(p):
                    term = a if term is None else self._call(env, operator.mul, term, a)
            if term is None:
                term = c
            elif c != 1:
                term = self._call(env, operator.mul, term, c)
            total = term if total is None else self._call(env, operator.add, total, term)
        self.known[expr] = total
        return total

    def _atom(self, env, atom):
        if isinstance(atom, se.Symbol):
            node = self.known.get(se.Expr.atom(atom))
            if node is None and self.missing is not None:
                node = self.missing(atom)
            if node is None:
                raise TraceError(f"size symbol {atom} is no input of the traced graph")
            return node
        return self._call(env, self._CALLS[atom.fn], self._expr(env, atom.a),
                          self._expr(env, atom.b))

    def _call(self, env, fn, a, b):
        node = self.graph.call_function(fn, (a, b), {})
        node.meta["val"] = fn(_val(a), _val(b))
        return node


def _val(a):
    return a.meta["val"] if isinstance(a, fx.Node) else a



def _dressed(args):
    """args with each plain fake whose graph value is symbolic (a SymFake) dressed in
    that value's symbolic geometry. The autograd engine hands formulas C aliases of the
    outputs it saved (csrc/autograd/node.c), which keep their graph value but not the
    SymFake's sizes; read at their hints they would guard every size."""
    if not any(_plain_symbolic(a) or isinstance(a, (list, tuple)) for a in args):
        return args
    out = []
    for a in args:
        if isinstance(a, (list, tuple)) and any(_plain_symbolic(x) for x in a):
            a = type(a)(_dress(x) for x in a)
        elif _plain_symbolic(a):
            a = _dress(a)
        out.append(a)
    return tuple(out)


def _plain_symbolic(t):
    if not isinstance(t, _C.Tensor) or isinstance(t, SymFake):
        return False
    node = t._trace
    if node is None:
        return False
    val = node.meta.get("val")
    return isinstance(val, SymFake) and val.hint_geometry()[0] == tuple(t.shape)


def _dress(t):
    if not _plain_symbolic(t):
        return t
    val = t._trace.meta["val"]
    d = _C.Tensor._make_subclass(SymFake, t, t.requires_grad, keep_view=True)
    d._sym_shape = val._sym_shape
    d._sym_strides = val._sym_strides if tuple(t.stride()) == val.hint_geometry()[1] \
        else M.contiguous_strides(val._sym_shape) if t.is_contiguous() else None
    if d._sym_strides is None:
        return t
    d._trace = t._trace
    return d
