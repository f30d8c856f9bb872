"""Functionalization: in-place writes in a traced program become functional values.

A traced graph has no memory: each node is a value. Eager code, though, writes into
tensors in place, and a write into a view also changes its base and every other view of
that base. Under the tracer (trace.py) an in-place op arrives as itself; the tracer
records its functional twin and hands the result here, which:

- writes it into the storage's base value: the target's view steps (a view records how
  it is made from its base, csrc/autograd/view.c) are undone one by one with their
  inverses (slice -> slice_scatter, select -> select_scatter, permute -> the inverse
  permute, ...; ember.ops.view_replay.scatter), so the base's new value is a node;
- makes every other tensor of that storage stale: when one is next read (an op's input,
  a graph output) it is regenerated from the base's current value by replaying its
  view steps.

Aliasing is read from facts, never names: tensors alias when they share a storage
(`untyped_storage()`), a view's base is `_base` and its steps `_view_steps`. A write
into a graph input (or a view of one) is functionalized like any other: the input's
placeholder is its base's first value, and `writes(input)` tells how many in-place ops
wrote into it, so that the compiled function can return the input's new value and the
runtime write it back (mutation.py). A write through a view whose steps are not known
is refused: nothing is ever dropped silently.
"""
from __future__ import annotations

import contextlib

from .. import _C
from ..ops import view_replay


class _Written:
    """A storage written during the trace: the graph value of its base now."""

    def __init__(self, storage, node, version=0):
        self.storage = storage     # kept alive so its id stays unique
        self.node = node
        self.version = version     # writes so far


class Functionalizer:
    def __init__(self, tracer):
        self.tracer = tracer
        self._written = {}         # id(storage) -> _Written
        self._synced = {}          # id(tensor) -> (tensor, version its _trace is of)

    def writes(self, t):
        """How many in-place writes went into t's storage (0: none)."""
        w = self._written.get(id(t.untyped_storage()))
        return 0 if w is None else w.version

    # ------------------------------------------------------------ reading

    def current(self, t):
        """The node of t's current value: t's own, or (t stale after a write into its
        storage) t's view steps replayed on its base's current value."""
        w = self._written.get(id(t.untyped_storage()))
        if w is None:
            return t._trace
        rec = self._synced.get(id(t))
        if rec is not None and rec[1] == w.version:
            return t._trace
        steps = view_replay.steps_of(t)
        if steps is None:
            raise self._error(f"a view of shape {list(t.shape)} is read after a write into "
                              "its base, but the view ops that made it are not known")
        node = self._replay(w.node, steps)
        t._trace = node
        self._synced[id(t)] = (t, w.version)
        return node

    def bound(self, t):
        """t was just made by a recorded op: its _trace is current."""
        w = self._written.get(id(t.untyped_storage()))
        if w is not None:
            self._synced[id(t)] = (t, w.version)

    # ------------------------------------------------------------ writing

    def write(self, t, value):
        """t (a tensor, or a view) now holds value (a traced tensor of t's shape)."""
        s = t.untyped_storage()
        steps = view_replay.steps_of(t)
        if steps is None:
            raise self._error(f"an in-place write into a view of shape {list(t.shape)} whose "
                              "view ops are not known: its base's new value cannot be found")
        w = self._written.get(id(s))
        if w is None:
            base = view_replay.base_of(t)
            if base._trace is None:
                raise self._error("an in-place write into a tensor made outside the traced "
                                  "code")
            w = self._written[id(s)] = _Written(s, base._trace)
        with self._tracing():
            if value.dtype is not t.dtype:
                value = value.to(t.dtype)
            if steps:
                base_value = view_replay.scatter(steps, self._fake(w.node), value)
            else:
                base_value = value
        w.node = self.tracer.node_of(base_value)
        w.version += 1
        t._trace = self.tracer.node_of(value)
        self._synced[id(t)] = (t, w.version)

    # ------------------------------------------------------------ helpers

    def _replay(self, node, steps):
        if not steps:
            return node
        with self._tracing():
            v = view_replay.replay(steps, self._fake(node))
        return self.tracer.node_of(v)

    @staticmethod
    def _fake(node):
        """A fresh fake standing for node's value (its own storage: nothing aliases it)."""
        val = node.meta["val"]
        from .trace import fresh_fake
        fake = fresh_fake(val)
        fake._trace = node
        return fake

    @contextlib.contextmanager
    def _tracing(self):
        """Dispatch under this tracer, without autograd: functional values only."""
        prev_mode, prev_grad = _C._get_mode(), _C.is_grad_enabled()
        try:                  # (set inside: an interrupt after a set still restores)
            _C._set_mode(_C.MODE_TRACE, self.tracer)
            _C._set_grad_enabled(False)
            yield
        finally:
            _C._set_grad_enabled(prev_grad)
            _C._set_mode(*prev_mode)

    @staticmethod
    def _error(msg):
        from .trace import TraceError
        return TraceError(f"functionalization: {msg}")
