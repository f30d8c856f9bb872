"""Indexing with a symbolic position ([dynamic]): `x[:, pos]`, `x[:, pos] = v` and
`x.narrow(d, pos, n)` where pos (or n) is a symbolic size.

The kernels of these composites (csrc/kernels/view.c's getitem / setitem,
csrc/kernels/shape.c's narrow) read their integers in C, which would specialise a
symbolic one (its hint, guarded equal: one graph per position, as a decode loop
writing its KV cache at a new position each step would make). So the capture records
them as the slices they are equal to, whose bounds stay symbolic:

    x[..., p, ...]        x[..., p:p + 1, ...] with that dim squeezed
    x[..., p, ...] = v    the same view, then view[...] = v (a copy into it)
    x.narrow(d, s, n)     x[:, ..., s:s + n]   (d slices)

after guarding what the kernel checks (0 <= p < size, after adding size to a negative
p; n >= 0 and s + n <= size for narrow). When those checks fail at the captured sizes
the call is left to the kernel, which raises as eager does.
"""
from __future__ import annotations

import operator

from .variables import ConstVar, SliceVar, SymVar, TensorVar, TupleVar

NOT_HANDLED = object()


def _int_or_sym(v):
    if isinstance(v, SymVar):
        return v.sym
    if isinstance(v, ConstVar) and type(v.value) is int:
        return v.value
    return None


def _in_range(p, size):
    """p normalised (a negative p counts from the end) if 0 <= p < size, else None; the
    comparisons on symbolic sizes are guarded."""
    if bool(p < 0):
        p = p + size
    return p if bool(p >= 0) and bool(p < size) else None


def call(tx, name, target, args, kwargs):
    """The rewritten call's result, or NOT_HANDLED (the call is recorded as it is)."""
    if target is operator.getitem and len(args) == 2 and not kwargs:
        view = _select_view(tx, args[0], args[1])
        return NOT_HANDLED if view is None else view
    if target is operator.setitem and len(args) == 3 and not kwargs:
        view = _select_view(tx, args[0], args[1])
        if view is None:
            return NOT_HANDLED
        return tx.call_op(operator.setitem, [view, ConstVar(Ellipsis), args[2]], {})
    if name == "narrow":
        return _narrow(tx, args, kwargs)
    return NOT_HANDLED


def _select_view(tx, x, key):
    """x[key] for a key of ints, slices, None and ... holding a symbolic int, as slices
    and squeezes; None when the key is anything else."""
    if not isinstance(x, TensorVar):
        return None
    items = list(key.items) if isinstance(key, TupleVar) and key.tuple_type is tuple \
        else [key]
    if not any(isinstance(i, SymVar) for i in items):
        return None
    consumed = 0
    for it in items:
        if isinstance(it, (SymVar, SliceVar)):
            consumed += 1
        elif isinstance(it, ConstVar) and (it.value is None or it.value is Ellipsis):
            continue
        elif isinstance(it, ConstVar) and type(it.value) in (int, slice):
            consumed += 1
        else:
            return None                 # tensors, bools, lists: the kernel's own path
    shape = x.fake.shape
    if consumed > len(shape):
        return None
    new, squeeze, in_dim, out_dim, ellipsis = [], [], 0, 0, False
    for it in items:
        if isinstance(it, ConstVar) and it.value is Ellipsis:
            if not ellipsis:
                in_dim += len(shape) - consumed
                out_dim += len(shape) - consumed
            ellipsis = True
        elif isinstance(it, ConstVar) and it.value is None:
            out_dim += 1
        elif isinstance(it, SymVar):
            p = _in_range(it.sym, shape[in_dim])
            if p is None:
                return None             # out of range: the kernel raises
            it = SliceVar([tx.wrap_constant_result(p), tx.wrap_constant_result(p + 1)])
            squeeze.append(out_dim)
            in_dim += 1
            out_dim += 1
        elif isinstance(it, ConstVar) and type(it.value) is int:
            in_dim += 1                 # (a constant index: the kernel's select)
        else:
            in_dim += 1
            out_dim += 1
        new.append(it)
    view = tx.call_op(operator.getitem, [x, TupleVar(new)], {})
    for d in reversed(squeeze):
        view = tx.call_op("squeeze", [view, ConstVar(d)], {}, method=True)
    return view


def _narrow(tx, args, kwargs):
    names = ("self", "dim", "start", "length")
    if len(args) + len(kwargs) != 4 or any(k not in names[len(args):] for k in kwargs):
        return NOT_HANDLED
    x, dim, start, length = list(args) + [kwargs[k] for k in names[len(args):]]
    s, n = _int_or_sym(start), _int_or_sym(length)
    if not isinstance(x, TensorVar) or not isinstance(dim, ConstVar) or \
            type(dim.value) is not int or s is None or n is None or \
            not (isinstance(start, SymVar) or isinstance(length, SymVar)):
        return NOT_HANDLED
    nd = x.fake.ndim
    if not nd or not -nd <= dim.value < nd:
        return NOT_HANDLED
    d = dim.value % nd
    size = x.fake.shape[d]
    if not bool(n >= 0):
        return NOT_HANDLED
    if bool(s < 0):
        s = s + size
    if not (bool(s >= 0) and bool(s + n <= size)):
        return NOT_HANDLED
    key = TupleVar([ConstVar(slice(None))] * d +
                   [SliceVar([tx.wrap_constant_result(s), tx.wrap_constant_result(s + n)])])
    return tx.call_op(operator.getitem, [x, key], {})
