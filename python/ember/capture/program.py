"""The frame program: what a compiled frame does after its graph runs, as plain tuples
that csrc/capture/compiled_frame.c decodes once into C structs.

    program = (values, effects, result)

`values` is a table computed in order, each entry from earlier ones:

    ("out", i)              the graph's i-th output
    ("const", obj)          an object held by the program
    ("src", getter)         fetched through a source (Source.getter()): an input list,
                            module or tensor, which keeps its identity
    ("tuple", (j, ...))     a new tuple of values j, ...; ("list", ...) a new list
    ("dict", keys, (j, ...))  a new dict
    ("call1", fn, j)        fn(value j): a named tuple or structseq from a tuple;
                            side_effects.issue_warning: a warning the frame issued,
                            tensor_data.check_int_range: eager's range check of
                            ember.tensor's integers (these first in the table)

`effects` then run in order, every target and value already computed:

    ("list_set", t, v)      values[t][:] = values[v]
    ("dict_set", t, v)      values[t].clear(); values[t].update(values[v])
    ("setattr", t, name, v) setattr(values[t], name, values[v])
    ("delattr", t, name)
    ("setitem", t, key, v)  values[t][key] = values[v]
    ("delitem", t, key)

and the frame returns values[result]. A VT maps to one value (memoised), so an object
that the frame stores in two places and returns is one object, as in eager.
"""
from __future__ import annotations

import operator
import types

from .exc import Unsupported
from .side_effects import DELETED, issue_warning
from .variables import (SymVar, BoundMethodVar, BuiltinMethodVar, BuiltinVar, CellVar, ConstVar,
                        DictVar, FunctionVar, ListVar, ModuleVar, NewObjectVar, ObjectVar,
                        OpVar,
                        TensorMethodVar, TensorVar, TupleVar)


def _bind(pair):
    return types.MethodType(pair[0], pair[1])


def _new_cell(contents):
    return types.CellType(*contents)


def _make_function(parts):
    code, globals_, name, cells = parts
    return types.FunctionType(code, globals_, name, None, cells)


_getters = {}


def _method_getter(name):
    """operator.attrgetter(name), one per name (a program constant)."""
    g = _getters.get(name)
    if g is None:
        g = _getters[name] = operator.attrgetter(name)
    return g


class RawAttributes:
    """The target of the replayed attribute writes of an object the frame made whose
    class has its own __setattr__ (a frozen dataclass's, a user's): the frame ran that
    __setattr__ interpreted, so the writes go past it, as object.__setattr__."""

    __slots__ = ("obj",)

    def __init__(self, obj):
        object.__setattr__(self, "obj", obj)

    def __setattr__(self, name, value):
        object.__setattr__(self.obj, name, value)

    def __delattr__(self, name):
        object.__delattr__(self.obj, name)


class ProgramBuilder:
    def __init__(self, sym=None):
        self.sym = sym            # sym_sizes.SymbolicInputs of a symbolic capture
        self.values = []
        self.memo = {}            # id(VT) -> value index
        self.outputs = []         # graph output nodes
        self._out_of = {}         # node -> output index
        self._keep = []           # VTs memoised by id
        self._making = set()      # ids of cells whose contents are being built

    def _add(self, entry, vt=None):
        self.values.append(entry)
        idx = len(self.values) - 1
        if vt is not None:
            self.memo[id(vt)] = idx
            self._keep.append(vt)
        return idx

    def const(self, obj):
        return self._add(("const", obj))

    def output(self, node):
        i = self._out_of.get(node)
        if i is None:
            self.outputs.append(node)
            i = self._out_of[node] = len(self.outputs) - 1
        return i

    def value(self, vt) -> int:
        """The index of the value standing for vt."""
        idx = self.memo.get(id(vt))
        if idx is not None:
            return idx
        if isinstance(vt, TensorVar):
            if vt.node.op == "placeholder" and vt.source is not None:
                return self._add(("src", vt.source.getter()), vt)   # the input itself
            return self._add(("out", self.output(vt.node)), vt)
        if isinstance(vt, ConstVar):
            if vt.unread() and vt.source is not None:
                return self._add(("src", vt.source.getter()), vt)   # only moved: fetched
            return self._add(("const", vt.value), vt)
        if isinstance(vt, SymVar) and self.sym is not None:
            # a size returned or crossing a graph break: an int the graph computes
            node = self.sym.node(vt.sym)
            if isinstance(node, int):
                return self._add(("const", node), vt)
            return self._add(("out", self.output(node)), vt)
        source = getattr(vt, "source", None)
        if isinstance(vt, (TupleVar, ListVar, DictVar)):
            if source is not None:
                # the object read from outside, itself: a list's or dict's items, when
                # the frame changed them, are set by its own effect
                return self._add(("src", source.getter()), vt)
            real = getattr(vt, "real", None)
            if real is not None:
                return self._add(("const", real), vt)
            return self._new_container(vt)
        if isinstance(vt, CellVar):
            return self._cell(vt)
        if isinstance(vt, FunctionVar) and vt.closure is not None and source is None:
            return self._function(vt)
        if isinstance(vt, NewObjectVar):
            # an object the frame made: a new instance per call (its attributes are
            # set by the effects)
            return self._add(("call1", object.__new__, self.const(type(vt.value))), vt)
        if getattr(vt, "made_by_frame", False):
            raise Unsupported("returning or storing a module the compiled code built")
        if isinstance(vt, (ModuleVar, ObjectVar, FunctionVar, OpVar, BuiltinVar)):
            if source is not None:
                return self._add(("src", source.getter()), vt)
            if isinstance(vt, FunctionVar) and vt.closure is not None:
                raise Unsupported("returning or storing a function made inside the "
                                  "compiled code")
            return self._add(("const", vt.value), vt)
        if isinstance(vt, BoundMethodVar) and isinstance(vt.value, types.FunctionType):
            pair = self._add(("tuple", (self.const(vt.value), self.value(vt.self_var))))
            return self._add(("call1", _bind, pair), vt)
        if isinstance(vt, TensorMethodVar) or \
                type(vt).__name__ == "UnsupportedMethodVar":
            # a tensor's bound method (left on the stack by a graph break)
            return self._add(("call1", _method_getter(vt.name), self.value(vt.tensor)), vt)
        if isinstance(vt, BuiltinMethodVar):
            # a list's or dict's bound method (list.append, below a graph break)
            return self._add(("call1", _method_getter(vt.name), self.value(vt.obj)), vt)
        if vt.is_constant():
            return self._add(("const", vt.as_constant()), vt)
        deferred = getattr(vt, "deferred_call", None)
        if deferred is not None:       # max(t, 0.5) returned (stdlib.MinMaxVar)
            fn, items = deferred
            args = self._add(("tuple", tuple(self.value(i) for i in items)))
            return self._add(("call1", fn, args), vt)
        rebuild = getattr(vt, "rebuild", None)
        if rebuild is not None:        # a grad-mode block's __exit__ (stdlib._ExitVar)
            return self._add(("const", rebuild()), vt)
        if source is not None and not isinstance(vt, (TensorVar, CellVar)):
            return self._add(("src", source.getter()), vt)
        raise Unsupported(f"returning or storing {vt} from a compiled function")

    def _cell(self, vt):
        """A cell crossing a graph break (resume.py): the one read from outside, or a
        new cell with the frame's cell's contents (one per CellVar)."""
        source = getattr(vt, "source", None)
        if source is not None:
            return self._add(("src", source.getter()), vt)
        if vt.real is not None:
            return self._add(("const", vt.real), vt)
        if id(vt) in self._making:
            # a cell holding a function over itself (a recursive closure): the program
            # builds values in order, so it cannot make the pair
            raise Unsupported("a recursive closure made in the frame crosses a graph break")
        self._making.add(id(vt))
        try:
            contents = () if vt.content is None else (self.value(vt.content),)
        finally:
            self._making.discard(id(vt))
        return self._add(("call1", _new_cell, self._add(("tuple", contents))), vt)

    def _function(self, vt):
        """A function the frame made over its cells, made again over the program's
        cells (only without defaults: those are symbolic)."""
        fn = vt.value
        if fn.__defaults__ or fn.__kwdefaults__:
            raise Unsupported("a function with defaults made inside the compiled code "
                              "crosses a graph break")
        cells = self._add(("tuple", tuple(self.value(c) for c in vt.closure)))
        parts = self._add(("tuple", (self.const(fn.__code__), self.const(fn.__globals__),
                                     self.const(fn.__name__), cells)))
        return self._add(("call1", _make_function, parts), vt)

    def _new_container(self, vt):
        if isinstance(vt, DictVar):
            keys = tuple(vt.items)
            items = tuple(self.value(vt.items[k]) for k in keys)
            return self._add(("dict", keys, items), vt)
        items = tuple(self.value(i) for i in vt.items)
        if isinstance(vt, ListVar):
            return self._add(("list", items), vt)
        t = vt.tuple_type
        if t is tuple:
            return self._add(("tuple", items), vt)
        plain = self._add(("tuple", items))
        make = getattr(t, "_make", None)      # namedtuple; a structseq takes a tuple
        return self._add(("call1", make if make is not None else t, plain), vt)

    # ------------------------------------------------------------ effects

    def target(self, vt):
        """The value of an object being written: the object itself."""
        source = getattr(vt, "source", None)
        if source is not None:
            return self._add(("src", source.getter()))
        real = getattr(vt, "real", None)
        if real is None:
            raise Unsupported(f"writing into {vt}, which the compiled frame cannot reach")
        return self._add(("const", real))

    def effects(self, side_effects):
        out = []
        for vt in side_effects.mutated:
            t = self.target(vt)
            if isinstance(vt, ListVar):
                out.append(("list_set", t, self._add(("list", tuple(
                    self.value(i) for i in vt.items)))))
            else:
                keys = tuple(vt.items)
                out.append(("dict_set", t, self._add(("dict", keys, tuple(
                    self.value(vt.items[k]) for k in keys)))))
        # in the order of side_effects' tables: that of eager's dicts (a name created
        # anew is deleted first, so that it moves to the end)
        for table, target, delete, store in (
                (side_effects.attrs, self.target, "delattr", "setattr"),
                (side_effects.globals_, self.const, "delitem", "setitem")):
            for obj, name, value, recreate in table.values():
                if isinstance(obj, NewObjectVar):
                    continue            # below, if the object leaves the frame
                t = target(obj)
                if value is DELETED or recreate:
                    out.append((delete, t, name))
                if value is not DELETED:
                    out.append((store, t, name, self.value(value)))
        out += self._new_object_attrs(side_effects)
        for cell in side_effects.cells:
            # (a resume function's cell parameter: the cell its slot holds)
            t = self.target(cell) if getattr(cell, "source", None) is not None else \
                self.const(cell.real)
            out.append(("setattr", t, "cell_contents", self.value(cell.content)))
        return out


    def _new_object_attrs(self, side_effects):
        """The attributes of the objects the frame made that leave it (have a value in
        the program: the result, another effect, or such an object's attribute reach
        them), in the order the frame wrote them; the others are garbage at the end of
        the frame, and nothing of theirs is computed."""
        pending = [e for e in side_effects.attrs.values() if isinstance(e[0], NewObjectVar)]
        out, done = [], set()
        while True:
            reached = [i for i, e in enumerate(pending)
                       if i not in done and id(e[0]) in self.memo]
            if not reached:
                return out
            for i in reached:
                obj, name, value, _ = pending[i]
                done.add(i)
                t = self.memo[id(obj)]
                if type(obj.value).__setattr__ is not object.__setattr__:
                    # its class's __setattr__ ran interpreted: the writes go past it
                    t = self.memo.setdefault(("raw", id(obj)),
                                             self._add(("call1", RawAttributes, t)))
                if value is not DELETED:
                    out.append(("setattr", t, name, self.value(value)))
                else:
                    out.append(("delattr", t, name))


def build_program(ret, side_effects, sym=None):
    """(program, graph output nodes) for a frame returning VT ret."""
    b = ProgramBuilder(sym)
    for call in side_effects.calls:    # first: eager made them inside the frame
        if call[0] == "warn":
            b._add(("call1", issue_warning, b.const(call[1])))
        else:                          # ("range_check", raw elements, dtype, node)
            from .tensor_data import check_int_range
            args = [b.const(call[2])] + [b.value(v) for v in call[1]]
            b._add(("call1", check_int_range, b._add(("tuple", tuple(args)))))
    result = b.value(ret)
    effects = b.effects(side_effects)
    return (tuple(b.values), tuple(effects), result), b.outputs


def describe(program) -> str:
    """The program as text, one line per value and effect (for logs and tests)."""
    values, effects, result = program
    lines = []
    for i, v in enumerate(values):
        kind = v[0]
        if kind == "src":
            root, idx, steps = v[1]
            path = "".join(f".{k}" if s == "attr" else f"[{k!r}]" for s, k in steps)
            arg = f"{root}:{idx if root != 'object' else type(idx).__name__}{path}"
        elif kind == "const":
            arg = repr(v[1])[:60]
        elif kind == "call1":
            arg = f"{getattr(v[1], '__qualname__', v[1])}(v{v[2]})"
        else:
            arg = ", ".join(map(str, v[1:]))
        lines.append(f"v{i} = {kind} {arg}")
    for e in effects:
        lines.append(" ".join(map(str, e)))
    lines.append(f"return v{result}")
    return "\n".join(lines)


__all__ = ["build_program", "describe", "ProgramBuilder", "CellVar"]
