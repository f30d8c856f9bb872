"""Which input sizes a capture makes symbolic ([dynamic]).

`ember.compile(dynamic=...)` as torch.compile's:

    dynamic=False   every size is specialised (mark_dynamic still makes a dim symbolic)
    dynamic=True    every size of every input tensor is symbolic from the first capture
    dynamic=None    (the default) "automatic dynamic": the first capture specialises;
                    a later capture of the same code that sees another size of the
                    same input dimension makes that dimension symbolic

`mark_dynamic(t, dim)` makes t's dim symbolic whatever the mode; `maybe_mark_dynamic`
makes it symbolic unless specialisation is needed (here: the same); `mark_static`
keeps a dim (or every dim) specialised even under dynamic=True. The marks are
attributes of the tensor, as PyTorch keeps them.

Sizes 0 and 1 stay specialised whatever the marks (the ShapeEnv returns plain ints for
them), as in PyTorch. Symbolic capture needs contiguous inputs (their strides are
expressions of their sizes); a non-contiguous input keeps its sizes.
"""
from __future__ import annotations

import weakref

# per code object: {input source name: (sizes, dynamic dims)} seen by its captures
_seen = weakref.WeakKeyDictionary()
# code whose symbolic capture failed (sym_sizes.SymbolicUnsupported): specialised
static_codes = weakref.WeakSet()


def _dims(t, dim):
    n = max(t.ndim, 1)
    dims = dim if isinstance(dim, (list, tuple, set)) else [dim]
    out = set()
    for d in dims:
        if not isinstance(d, int) or not -n <= d < n:
            raise IndexError(f"mark_dynamic: dim {d!r} out of range for a tensor of "
                             f"{t.ndim} dims")
        out.add(d % n)
    return out


def mark_dynamic(t, dim, *, min=None, max=None):
    """Marks dim (an int or a list of ints) of tensor t symbolic for ember.compile."""
    t._dynamo_dynamic_indices = getattr(t, "_dynamo_dynamic_indices", set()) | _dims(t, dim)


def maybe_mark_dynamic(t, dim):
    """As mark_dynamic (a hint that the dim varies between calls)."""
    t._dynamo_weak_dynamic_indices = \
        getattr(t, "_dynamo_weak_dynamic_indices", set()) | _dims(t, dim)


def mark_static(t, dim=None):
    """Keeps dim (None: every dim) of t specialised."""
    dims = set(range(t.ndim)) if dim is None else _dims(t, dim)
    t._dynamo_static_indices = getattr(t, "_dynamo_static_indices", set()) | dims


def forget(code=None):
    """ember.compiler.reset(): automatic dynamic starts again (for one code or all)."""
    if code is None:
        _seen.clear()
        static_codes.clear()
    else:
        _seen.pop(code, None)
        static_codes.discard(code)


def dynamic_dims(mode, code, source_name, t):
    """The dims of input t (read from source_name in a capture of code) to make
    symbolic, recording t's sizes for automatic dynamic."""
    shape = tuple(t.shape)
    marked = set(getattr(t, "_dynamo_dynamic_indices", ())) | \
        set(getattr(t, "_dynamo_weak_dynamic_indices", ()))
    static = set(getattr(t, "_dynamo_static_indices", ()))
    seen = _seen.setdefault(code, {})
    automatic = set()
    before = seen.get(source_name)
    if before is not None and len(before[0]) == len(shape):
        automatic = set(before[1]) | {d for d, (a, b) in enumerate(zip(before[0], shape))
                                      if a != b}
    seen[source_name] = (shape, frozenset(automatic))
    if mode is True:
        dims = set(range(len(shape)))
    elif mode is False:
        dims = set()
    else:
        dims = automatic
    dims = (dims | marked) - static
    if code in static_codes:
        return set()
    if dims and not t.is_contiguous():
        return set()
    return dims


def dynamic_int(mode, code, source_name, value):
    """Whether int argument `value` (read from source_name in a capture of code) is made
    symbolic: under dynamic=True, or under automatic dynamic once a capture of the
    same code saw another value there. Records the value."""
    seen = _seen.setdefault(code, {})
    key = ("int", source_name)
    before = seen.get(key)
    changed = before is not None and (before[1] or before[0] != value)
    seen[key] = (value, changed)
    if code in static_codes or mode is False:
        return False
    return mode is True or changed


def dynamic_float(mode, code, source_name, value):
    """Whether float argument `value` (read from source_name in a capture of code)
    becomes a graph input (capture/sym_floats.py): under dynamic=True, or under
    automatic dynamic once a capture of the same code saw another value there.
    Records the value."""
    seen = _seen.setdefault(code, {})
    key = ("float", source_name)
    before = seen.get(key)
    changed = before is not None and (before[1] or not _same_float(before[0], value))
    seen[key] = (value, changed)
    if code in static_codes or mode is False:
        return False
    return mode is True or changed


def _same_float(a, b):
    return a == b or (a != a and b != b)
