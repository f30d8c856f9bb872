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

from .. import _C
from .. import fx
from ..fx.sym_meta import dispatch_mode as _mode
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

    # ------------------------------------------------------------ values

    def placeholder(self, name, example):
        """A fake input standing for a new placeholder shaped like `example`."""
        node = self.graph.placeholder(name)
        fake = _C._meta_tensor(tuple(example.shape), example.dtype, example.stride())
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
        if isinstance(value, (tuple, list)):
            return type(value)(self.node_of(v) for v in value)
        return value

    # ------------------------------------------------------------ the tracer callback

    def __call__(self, op, args):
        entry = op.entry
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
        old = _C._meta_tensor(tuple(target.shape), target.dtype)
        old._trace = old_node
        self.functional.write(target, result)
        return result, old

    def _meta(self, op, entry, args):
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
