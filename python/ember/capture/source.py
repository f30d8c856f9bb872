"""Sources: where a value the frame reads comes from, so that guards can re-check it and
the compiled frame can fetch it again on every call.

A source is a root (an argument slot of the frame, a global name, a closure cell) and
a chain of steps (attribute reads and item reads). `getter()` encodes it as plain tuples
for the C side:

    (root_kind, root, ((step_kind, key), ...))

with root_kind "local" (slot index), "global" (name in the frame's globals), "closure"
(cell index of the frame's function) or "object" (a fixed object, held), and step
kinds "attr" (getattr), "item" (obj[key]), "dict" (dict lookup, no __getitem__ call),
"size" and "stride" (a tensor's size or stride at a dim: symbolic sizes' values) and
"scalar" (a float as a new 0-d float64 tensor: a dynamic float's graph input).
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Source:
    def name(self) -> str:
        raise NotImplementedError

    def getter(self):
        root, steps = self._chain()
        return root + (tuple(steps),)

    def _chain(self):
        raise NotImplementedError

    def __str__(self):
        return self.name()


@dataclass(frozen=True)
class LocalSource(Source):
    index: int
    local_name: str

    def name(self):
        return self.local_name

    def _chain(self):
        return ("local", self.index), []


@dataclass(frozen=True)
class GlobalSource(Source):
    global_name: str

    def name(self):
        return f"G[{self.global_name!r}]"

    def _chain(self):
        return ("global", self.global_name), []


@dataclass(frozen=True)
class ClosureSource(Source):
    index: int
    var_name: str

    def name(self):
        return f"<closure {self.var_name}>"

    def _chain(self):
        return ("closure", self.index), []


@dataclass(frozen=True)
class CellSource(Source):
    """Cell i of the frame's closure itself (not its contents): only guards use it."""
    index: int
    var_name: str

    def name(self):
        return f"<cell {self.var_name or self.index}>"

    def _chain(self):
        return ("cell", self.index), []


@dataclass(frozen=True, eq=False)
class ObjectSource(Source):
    """A fixed object (another module's globals dict, the builtins): held, not fetched.
    Equal only to itself, so two sources over the same object dedupe by identity."""
    obj: object
    label: str

    def name(self):
        return self.label

    def _chain(self):
        return ("object", self.obj), []

    def __eq__(self, other):
        return isinstance(other, ObjectSource) and other.obj is self.obj

    def __hash__(self):
        return id(self.obj)


@dataclass(frozen=True)
class AttrSource(Source):
    base: Source
    attr: str

    def name(self):
        return f"{self.base.name()}.{self.attr}"

    def _chain(self):
        root, steps = self.base._chain()
        return root, steps + [("attr", self.attr)]


@dataclass(frozen=True)
class SizeSource(Source):
    """base.size(dim) (or base.stride(dim)) of a tensor: the value of a symbolic size
    ([dynamic]), a graph input and what size guards read."""
    base: Source
    dim: int
    stride: bool = False

    def name(self):
        return f"{self.base.name()}.{'stride' if self.stride else 'size'}({self.dim})"

    def _chain(self):
        root, steps = self.base._chain()
        return root, steps + [("stride" if self.stride else "size", self.dim)]


@dataclass(frozen=True)
class ScalarSource(Source):
    """The float at base as a new 0-d float64 tensor: the graph input of a dynamic
    float (capture/sym_floats.py), made by the compiled frame on each call."""
    base: Source

    def name(self):
        return f"{self.base.name()}.as_tensor"

    def _chain(self):
        root, steps = self.base._chain()
        return root, steps + [("scalar", None)]


@dataclass(frozen=True)
class ItemSource(Source):
    """obj[key] through the object's own __getitem__ (lists, tuples)."""
    base: Source
    key: object

    def name(self):
        return f"{self.base.name()}[{self.key!r}]"

    def _chain(self):
        root, steps = self.base._chain()
        return root, steps + [("item", self.key)]


_MODULE_STORES = ("_parameters", "_buffers", "_modules")


@dataclass(frozen=True)
class DictSource(Source):
    """d[key] read straight from a dict (also a module's _parameters/_modules)."""
    base: Source
    key: object

    def name(self):
        if isinstance(self.base, AttrSource) and self.base.attr in _MODULE_STORES:
            return f"{self.base.base.name()}.{self.key}"   # what the user wrote
        return f"{self.base.name()}[{self.key!r}]"

    def _chain(self):
        root, steps = self.base._chain()
        return root, steps + [("dict", self.key)]


class TensorKey:
    """A tensor as a dict key inside a source (an optimizer's state, keyed by its
    parameters): equal only to itself, so sources compare and hash without tensor
    arithmetic; `name` is the source of the tensor, for names and messages."""
    __slots__ = ("tensor", "name")

    def __init__(self, tensor, name):
        self.tensor = tensor
        self.name = name

    def __eq__(self, other):
        return isinstance(other, TensorKey) and other.tensor is self.tensor

    def __hash__(self):
        return id(self.tensor)

    def __repr__(self):
        return self.name


@dataclass(frozen=True)
class TensorKeyDictSource(DictSource):
    """d[t] for a tensor key t (held through a TensorKey)."""

    def _chain(self):
        root, steps = self.base._chain()
        return root, steps + [("dict", self.key.tensor)]


def fetch(source: Source, frame_args, f_globals, closure):
    """Python reference implementation of what C does with source.getter()."""
    (kind, root, steps) = source.getter()
    if kind == "local":
        obj = frame_args[root]
    elif kind == "global":
        obj = f_globals[root]
    elif kind == "closure":
        obj = closure[root].cell_contents
    else:
        obj = root
    for step, key in steps:
        if step == "attr":
            obj = getattr(obj, key)
        elif step == "item":
            obj = obj[key]
        elif step == "scalar":
            from .. import _C
            from .._tensor_new import tensor
            if type(obj) is not float:
                raise TypeError(f"a dynamic float input is {type(obj).__name__}")
            obj = tensor(obj, dtype=_C.float64)
        else:
            obj = obj[key]
    return obj
