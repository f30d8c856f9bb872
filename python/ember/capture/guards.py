"""Guards: the conditions under which a captured graph may be reused.

The interpreter records one guard per (kind, source) as it reads values; the compiled
entry carries them as a program evaluated in C on every call (csrc/capture/guards.c).
Kinds:

    TENSOR_MATCH  exact type, dtype, shape, strides, storage offset, requires_grad
    TYPE_MATCH    exact type
    ID_MATCH      identity (functions, modules, ops, other objects)
    EQUALS_MATCH  equality of a constant (int, float, str, bool, None, tuples of those)
    LEN_MATCH     len() of a list, tuple or dict
    DICT_KEYS     the keys of a dict, in order
    ALIAS         value (other_source, same): whether the source reaches the same object
                  as other_source (mutable objects the frame reads and writes)
    GRAD_MODE     ember's grad mode (added to every program)
    AUTOCAST      ember.autocast's dtype, or None when off (added to every program)
    COMPILE_CONTEXT  the ember.compile call running is the one that compiled the
                  entry (added last to every program by convert.build_guard_program)
    SYM_REL       a relation between sizes read from sources ([dynamic]); made from the
                  capture's ShapeEnv by sym_sizes.SymbolicInputs.guard_tuples, not
                  recorded here
"""
from __future__ import annotations

from .. import _C


class Guard:
    __slots__ = ("kind", "source", "value")

    def __init__(self, kind, source, value):
        self.kind = kind
        self.source = source
        self.value = value

    def __repr__(self):
        return f"{self.kind}({self.source}, {_short(self.value)})"


def _short(v):
    if isinstance(v, _C.Tensor):
        return f"Tensor{list(v.shape)} {v.dtype}"
    r = repr(v)
    return r if len(r) < 60 else r[:57] + "..."


class GuardSet:
    def __init__(self):
        self._guards = {}

    def add(self, kind, source, value):
        key = (kind, source) if kind != "ALIAS" else (kind, source, value)
        if key not in self._guards:
            self._guards[key] = Guard(kind, source, value)

    def __iter__(self):
        return iter(self._guards.values())

    def __len__(self):
        return len(self._guards)

    def __repr__(self):
        return "GuardSet([\n  " + ",\n  ".join(map(repr, self)) + "\n])"
