"""SymFake: a meta tensor whose sizes and strides are SymInts ([dynamic]).

It is a Tensor (a meta tensor at the hint sizes, so dtype, rank and the C rules' checks
are the eager ones) whose `shape`, `size()`, `stride()` and `numel()` answer with the
symbolic values. The Python meta rules (ops/meta.py) read geometry through those, so
run on SymFakes they compute symbolic result shapes, and every branch they take on a size
becomes a guard in the ShapeEnv; `meta.meta_tensor` makes a SymFake when a shape or a
stride it is given holds a SymInt.
"""
from __future__ import annotations

import math

from .. import _C
from .shape_env import SymInt


def _hint(v):
    return v.hint if isinstance(v, SymInt) else v


def is_symbolic(values):
    return any(isinstance(v, SymInt) for v in values)


class SymFake(_C.Tensor):
    """make(shape, strides, dtype) -> a SymFake; read like a tensor."""

    @staticmethod
    def make(shape, strides, dtype):
        shape, strides = tuple(shape), tuple(strides)
        base = _C._meta_tensor(tuple(_hint(n) for n in shape), dtype,
                               tuple(_hint(s) for s in strides))
        t = _C.Tensor._make_subclass(SymFake, base, False)
        t._sym_shape = shape
        t._sym_strides = strides
        return t

    @property
    def shape(self):
        from .. import Size
        return Size(self._sym_shape)

    def size(self, dim=None):
        if dim is None:
            return self.shape
        return self._sym_shape[_wrap(dim, len(self._sym_shape))]

    def stride(self, dim=None):
        if dim is None:
            return self._sym_strides
        return self._sym_strides[_wrap(dim, len(self._sym_strides))]

    def numel(self):
        return math.prod(self._sym_shape)

    def hint_geometry(self):
        """(shape, strides) at the hints."""
        return (tuple(_hint(n) for n in self._sym_shape),
                tuple(_hint(s) for s in self._sym_strides))

    def __repr__(self):
        return (f"SymFake(size=({', '.join(map(str, self._sym_shape))}), "
                f"stride=({', '.join(map(str, self._sym_strides))}), dtype={self.dtype})")


def _wrap(d, n):
    if not -max(n, 1) <= d < max(n, 1):
        raise IndexError(f"Dimension out of range (expected to be in range of "
                         f"[{-max(n, 1)}, {max(n, 1) - 1}], but got {d})")
    return d % max(n, 1)


def symbolic_target(t, size):
    """A size t is reduced to (sum_to_size), with t's symbolic sizes where it has their
    hints: the autograd engine sums a broadcast input's gradient back to the input's
    shape, which it reads as C ints (csrc/autograd/engine.c conform()). A target dim
    that is not 1 is the gradient's aligned dim (broadcasting guarded them equal);
    1 stays 1. Plain tensors and symbolic targets come back as they are."""
    if not isinstance(t, SymFake):
        return size
    size = tuple(size)
    shape = t._sym_shape
    off = len(shape) - len(size)
    if off < 0 or is_symbolic(size):
        return size
    out = []
    for i, n in enumerate(size):
        d = shape[off + i]
        out.append(d if n != 1 and isinstance(d, SymInt) and d.hint == n else n)
    return tuple(out)


def same_size(a, b):
    """Whether sizes a and b are the same without a guard: equal ints, or SymInts of one
    expression. (Sizes that are equal only under a guard count as different.)"""
    a, b = _simplified(a), _simplified(b)
    if isinstance(a, SymInt) or isinstance(b, SymInt):
        return isinstance(a, SymInt) and isinstance(b, SymInt) and a.expr == b.expr
    return a == b


def _simplified(n):
    """n with the ShapeEnv's replacements (a symbol guarded equal to an expression or
    a constant) applied: an int when it comes to a constant."""
    if not isinstance(n, SymInt) or not n.env.replacements:
        return n
    e = n.env.simplify(n.expr)
    return e.value if e.is_const() else SymInt(n.env, e)
