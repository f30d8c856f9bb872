"""Self-check mode: every new graph's first call also runs eagerly, on copies, and the two
must agree (ember.compile(..., options={"check": True}) or EMBER_CHECK=1).

The first call of a new cache entry goes through SelfCheckingFrame:

1. the world the frame can touch is copied once, with one memo so aliasing is kept:
   its argument slots, the values of the globals it reads and its closure cells;
2. the original function runs eagerly (capture off) on the copies, as a new function
   object over a copy of its globals dict and new cells, so the eager run writes only
   copies;
3. the compiled entry runs on the real objects;
4. results, raised exceptions and the state of every copied root afterwards (mutated
   tensors, containers, object and module attributes, globals, cells) are compared:
   dtypes and shapes exactly, values within the dtype's tolerance.

A mismatch raises SelfCheckError naming what differs, the largest difference, and the
first op of the captured graph whose compiled value differs from eager (found by
compiling the graph again with every tensor node as an output). Later calls of the
entry run the compiled code only, so the mode costs one eager run per graph.

Limits: state of other modules reached through inlined functions is not copied (those
writes happen in both runs); inputs that are views of one another are copied as
separate tensors.
"""
from __future__ import annotations

import copy
import os
import threading
import types
import warnings

import numpy as np

from .. import _C
from ..autograd.grad_mode import no_grad as _no_grad
from . import _hook
from .exc import SelfCheckError
from .source import GlobalSource, fetch

TOLERANCES = {"float16": (1e-2, 1e-3), "float32": (1e-4, 1e-5), "float64": (1e-10, 1e-12)}


def enabled(options) -> bool:
    if options and "check" in options:
        return bool(options["check"])
    return os.environ.get("EMBER_CHECK", "") not in ("", "0")


# ------------------------------------------------------------------ copies

_copy_lock = threading.Lock()


def _copy_tensor(t, memo):
    with _no_grad():
        new = t.detach().clone()
    if t.requires_grad and new.dtype.is_floating_point:
        new.requires_grad_(True)
    if type(t) is not _C.Tensor:
        from ..nn import Parameter
        if isinstance(t, Parameter):
            new = Parameter(new, requires_grad=t.requires_grad)
    return new


def copy_world(objs):
    """Deep copies of objs (one memo): tensors become leaves with their own memory."""
    from ..nn import Parameter
    memo = {}
    atomic = (types.ModuleType, _C.Op, _C.dtype, types.BuiltinFunctionType,
              types.MethodType, threading.Lock().__class__)
    with _copy_lock:
        saved = {t: copy._deepcopy_dispatch.get(t) for t in (_C.Tensor, Parameter) + atomic}
        for t in atomic:
            copy._deepcopy_dispatch[t] = copy._deepcopy_atomic
        for t in (_C.Tensor, Parameter):
            copy._deepcopy_dispatch[t] = _copy_tensor
        try:
            out = copy.deepcopy(objs, memo)
        finally:
            for t, f in saved.items():
                if f is None:
                    copy._deepcopy_dispatch.pop(t, None)
                else:
                    copy._deepcopy_dispatch[t] = f
    return out, memo


# ------------------------------------------------------------------ comparing

class _Diff(Exception):
    def __init__(self, where, what, largest=None):
        super().__init__(f"{where}: {what}")
        self.where, self.what, self.largest = where, what, largest


def _dtype_name(t):
    return t.dtype._name


def _compare_tensors(got, want, where):
    if tuple(got.shape) != tuple(want.shape) or got.dtype is not want.dtype:
        raise _Diff(where, f"compiled gives {got.dtype} {list(got.shape)}, eager "
                    f"{want.dtype} {list(want.shape)}")
    a = got.detach().numpy()
    b = want.detach().numpy()
    if a.size == 0:
        return
    name = _dtype_name(want)
    if name in TOLERANCES:
        rtol, atol = TOLERANCES[name]
        a64, b64 = a.astype(np.float64), b.astype(np.float64)
        same_nan = np.isnan(a64) == np.isnan(b64)
        close = np.isclose(a64, b64, rtol=rtol, atol=atol, equal_nan=True) & same_nan
        if not close.all():
            diff = np.where(np.isnan(a64) | np.isnan(b64), np.inf, np.abs(a64 - b64))
            diff = np.where(close, 0, diff)
            i = np.unravel_index(int(np.argmax(diff)), a.shape)
            raise _Diff(where, f"largest difference {float(diff[i]):.6g} at index "
                        f"{tuple(int(k) for k in i)} (compiled {a64[i]!r}, eager "
                        f"{b64[i]!r}; rtol {rtol}, atol {atol})", float(diff[i]))
    elif not np.array_equal(a, b):
        i = tuple(int(k) for k in np.argwhere(a != b)[0])
        raise _Diff(where, f"differs at index {i} (compiled {a[i]!r}, eager {b[i]!r})")
    if got.requires_grad != want.requires_grad:
        raise _Diff(where, f"requires_grad is {got.requires_grad} compiled, "
                    f"{want.requires_grad} eager")


class Comparer:
    """Compares the compiled side (real objects) with the eager side (copies): an
    eager object that is the copy of a real one stands for it."""

    def __init__(self, memo):
        self.copy_of = {k: v for k, v in memo.items() if k != id(memo)}
        self.copy_ids = {id(v) for v in self.copy_of.values()}
        self.seen = set()

    def same(self, got, want, where, depth=0):
        if depth > 50:
            return
        key = (id(got), id(want))
        if key in self.seen:
            return
        self.seen.add(key)
        # an object of the world (an input, a global's value) must be where eager has
        # its copy, and only there: identity is observable
        if self.copy_of.get(id(got)) is not None or id(want) in self.copy_ids:
            if self.copy_of.get(id(got)) is not want:
                raise _Diff(where, "is not the same object as in eager")
        if isinstance(want, _C.Tensor):
            if not isinstance(got, _C.Tensor):
                raise _Diff(where, f"compiled gives a {type(got).__name__}, eager a tensor")
            _compare_tensors(got, want, where)
            return
        if type(got).__qualname__ != type(want).__qualname__:
            raise _Diff(where, f"compiled gives a {type(got).__name__}, eager a "
                        f"{type(want).__name__}")
        if isinstance(want, (list, tuple)):
            if len(got) != len(want):
                raise _Diff(where, f"length {len(got)} compiled, {len(want)} eager")
            for i, (a, b) in enumerate(zip(got, want)):
                self.same(a, b, f"{where}[{i}]", depth + 1)
        elif isinstance(want, dict):
            if list(got) != list(want):
                raise _Diff(where, f"keys {list(got)!r} compiled, {list(want)!r} eager")
            for k in want:
                self.same(got[k], want[k], f"{where}[{k!r}]", depth + 1)
        elif isinstance(want, (types.FunctionType, types.ModuleType, type)) or \
                callable(want) and not hasattr(want, "__dict__"):
            return
        elif hasattr(want, "__dict__") and not isinstance(want, (int, float, str)):
            self.same(dict(vars(got)), dict(vars(want)), f"{where}.__dict__", depth + 1)
        else:
            try:
                equal = got == want or (got != got and want != want)
            except Exception:      # noqa: BLE001 - objects that cannot compare: skip
                return
            if not equal:
                raise _Diff(where, f"{got!r} compiled, {want!r} eager")


# ------------------------------------------------------------------ the entry

class SelfCheckingFrame:
    """Stands for a compiled entry: its first call is checked against eager."""

    def __init__(self, frame, frame_info, gm, out, backend, backend_name):
        self.frame = frame
        self.func = frame_info.func
        self.code = frame_info.code
        self.gm = gm
        self.sources = [src for src, _, _ in out.inputs]
        self.globals_read = sorted({_root(g.source).global_name for g in out.guards
                                    if isinstance(_root(g.source), GlobalSource)})
        self.backend = backend
        self.backend_name = backend_name
        self.checked = False

    def __call__(self, *slots):
        if self.checked or self.func is None:
            return self.frame(*slots)
        self.checked = True
        with _hook.disable():        # nothing the check runs is captured
            return self._check(slots)

    # the eager reference run, on copies
    def _eager(self, slots):
        f = self.func
        g = f.__globals__
        world = {"slots": list(slots),
                 "globals": {k: g[k] for k in self.globals_read if k in g},
                 "cells": [c.cell_contents if _cell_set(c) else _EMPTY
                           for c in (f.__closure__ or ())]}
        copies, memo = copy_world(world)
        new_globals = dict(g)
        new_globals.update(copies["globals"])
        cells = tuple(types.CellType() if v is _EMPTY else types.CellType(v)
                      for v in copies["cells"])
        fn = types.FunctionType(f.__code__, new_globals, f.__name__, f.__defaults__,
                                cells or None)
        fn.__kwdefaults__ = f.__kwdefaults__
        args, kwargs = call_args(self.code, copies["slots"])
        try:
            res, exc = fn(*args, **kwargs), None
        except Exception as e:   # noqa: BLE001 - compared with the compiled run
            res, exc = None, e
        after = {"slots": copies["slots"],
                 "globals": {k: new_globals.get(k, _EMPTY) for k in self.globals_read},
                 "cells": [c.cell_contents if _cell_set(c) else _EMPTY for c in cells]}
        return res, exc, after, memo, world

    def _check(self, slots):
        try:
            eager = self._eager(slots)
        except Exception as e:   # noqa: BLE001 - copying failed: say so, run compiled
            warnings.warn(f"ember.compile self-check skipped for {self.code.co_name}: "
                          f"could not copy its inputs ({type(e).__name__}: {e})",
                          RuntimeWarning, stacklevel=2)
            return self.frame(*slots)
        res_e, exc_e, after_e, memo, world = eager
        inputs = self._graph_inputs(slots)
        try:
            res, exc = self.frame(*slots), None
        except Exception as e:   # noqa: BLE001
            res, exc = None, e
        f = self.func
        after = {"slots": list(slots),
                 "globals": {k: f.__globals__.get(k, _EMPTY) for k in self.globals_read},
                 "cells": [c.cell_contents if _cell_set(c) else _EMPTY
                           for c in (f.__closure__ or ())]}
        cmp = Comparer(memo)
        try:
            if (exc is None) != (exc_e is None) or \
                    (exc is not None and type(exc) is not type(exc_e)):
                raise _Diff("the call", f"compiled {_describe_exc(exc)}, eager "
                            f"{_describe_exc(exc_e)}")
            if exc is None:
                cmp.same(res, res_e, "result")
            for i, (a, b) in enumerate(zip(after["slots"], after_e["slots"])):
                cmp.same(a, b, f"argument {_slot_name(self.code, i)} afterwards")
            for k in self.globals_read:
                cmp.same(after["globals"][k], after_e["globals"][k],
                         f"global {k} afterwards")
            for i, (a, b) in enumerate(zip(after["cells"], after_e["cells"])):
                cmp.same(a, b, f"closure variable {self.code.co_freevars[i]} afterwards")
        except _Diff as d:
            raise SelfCheckError(self._report(d, inputs)) from None
        if exc is not None:
            raise exc
        return res

    def _graph_inputs(self, slots):
        try:
            f = self.func
            values = [fetch(s, slots, f.__globals__, f.__closure__) for s in self.sources]
            return copy_world(values)[0]
        except Exception:    # noqa: BLE001 - only used to find the diverging op
            return None

    def _report(self, diff, inputs):
        where = f"{self.code.co_name} ({self.code.co_filename}:{self.code.co_firstlineno})"
        lines = [f"ember.compile self-check: {where} compiled with backend "
                 f"{self.backend_name!r} differs from eager: {diff.where}: {diff.what}"]
        op = first_diverging_op(self.gm, self.backend, inputs) if inputs is not None \
            else None
        if op is not None:
            lines.append(op)
        lines.append("The captured graph:")
        lines.append(self.gm.code if hasattr(self.gm, "code") else str(self.gm.graph))
        return "\n".join(lines)


_EMPTY = object()


def _cell_set(c):
    try:
        c.cell_contents
        return True
    except ValueError:
        return False


def _root(source):
    while source is not None and hasattr(source, "base"):
        source = source.base
    return source


def _describe_exc(e):
    return "returns" if e is None else f"raises {type(e).__name__}: {e}"


def _slot_name(code, i):
    names = code.co_varnames
    return names[i] if i < len(names) else f"#{i}"


def call_args(code, slots):
    """Positional and keyword arguments that fill the frame's argument slots."""
    import inspect
    n, k = code.co_argcount, code.co_kwonlyargcount
    args = list(slots[:n])
    kwargs = dict(zip(code.co_varnames[n:n + k], slots[n:n + k]))
    i = n + k
    if code.co_flags & inspect.CO_VARARGS:
        args += list(slots[i])
        i += 1
    if code.co_flags & inspect.CO_VARKEYWORDS:
        kwargs.update(slots[i])
    return args, kwargs


def first_diverging_op(gm, backend, inputs):
    """'first diverging op: <node> (<target>) at file:line', comparing every tensor
    node of the captured graph compiled with backend against eager, in graph order."""
    from .. import fx
    try:
        nodes = [n for n in gm.graph.nodes if n.op in ("call_function", "call_method") and
                 isinstance(n.meta.get("example_value"), _C.Tensor)]
        if not nodes:
            return None
        g = fx.Graph()
        env = {}
        for n in gm.graph.nodes:
            if n.op == "output":
                continue
            env[n] = g.node_copy(n, lambda a: env[a])
        g.output(tuple(env[n] for n in nodes))
        probe = fx.GraphModule({}, g, class_name="SelfCheckProbe")
        with _no_grad():
            want = probe(*copy_world(inputs)[0])
            got = backend(probe, list(inputs))(*copy_world(inputs)[0])
        for n, a, b in zip(nodes, got, want):
            try:
                _compare_tensors(a, b, n.name)
            except _Diff as d:
                writer = _writer_of(gm, n)
                text = f"first diverging op: {_describe_node(n)}: {d.what}"
                if writer is not None:
                    text += f"; {n.name} is written later by {_describe_node(writer)}"
                return text
        return "every op of the graph agrees with eager when each is an output (the " \
               "difference comes from how outputs or side effects are assembled)"
    except Exception as e:   # noqa: BLE001 - the search is a hint, never an error
        return f"(could not locate the diverging op: {type(e).__name__}: {e})"


def _describe_node(n):
    stack = n.meta.get("stack") or []
    loc = next((f"{f}:{ln} in {fn}" for f, ln, fn in stack), "?")
    target = getattr(n.target, "__name__", n.target)
    return f"{n.name} = {target}(...) at {loc}"


def _writer_of(gm, node):
    """A later node writing into node's value (directly or through a view of it)."""
    from .symbolic import _entry_of
    aliases = {node}
    for n in gm.graph.nodes:
        if n.op not in ("call_function", "call_method") or not n.args:
            continue
        entry = _entry_of(n.target, n.op == "call_method")
        first = n.args[0]
        if entry is not None and entry.mutates and first in aliases:
            return n
        val = n.meta.get("example_value")
        src = first.meta.get("example_value") if hasattr(first, "meta") else None
        if first in aliases and isinstance(val, _C.Tensor) and isinstance(src, _C.Tensor) \
                and val.untyped_storage() is src.untyped_storage():
            aliases.add(n)        # a view of it
    return None


def copy_graph_module(gm):
    """A copy of a captured GraphModule (its own graph and nodes, the same meta)."""
    from .. import fx
    g = fx.Graph()
    env = {}
    for n in gm.graph.nodes:
        env[n] = g.node_copy(n, lambda a: env[a])
    new = fx.GraphModule({}, g, class_name=type(gm).__name__)
    new.meta = dict(getattr(gm, "meta", {}))
    return new
