"""Running ops on tensors with symbolic sizes ([dynamic]): the dispatcher's trace mode
with a tracer that computes results instead of recording them.

An op whose arguments hold a SymFake or a SymInt gets its result from its Python meta
rule (ops/meta.py), which reads sizes through the SymFakes and so computes symbolic
result sizes, each branch on a size becoming a guard of the ShapeEnv. A view op's
result is its kernel's meta view at the hint sizes (so it shares the input's storage,
as the eager view does) wearing the rule's symbolic geometry. Any other op runs its
kernel on meta tensors, as the dispatcher's meta mode does. An op without a Python
rule, or whose rule cannot compute symbolically (it raises TypeError: decompositions,
rules that call ops with sizes), raises NotSymbolic: the caller captures again with
every size specialised.
"""
from __future__ import annotations

import contextlib

from .. import _C
from ..ops import meta as M
from ..ops._decomp import run_decomposition
from .shape_env import SymInt
from .sym_fake import SymFake


_C._set_symint_type(SymInt)


class NotSymbolic(TypeError):
    """An op that cannot run on symbolic sizes."""


def is_symbolic(v):
    """Whether v (an argument, or a list of them) holds a SymFake or a SymInt."""
    if isinstance(v, (SymFake, SymInt)):
        return True
    if isinstance(v, (list, tuple)):
        return any(is_symbolic(i) for i in v)
    return False


def _hints(v):
    """v with SymInts replaced by their hints (SymFakes are tensors at their hints)."""
    if isinstance(v, SymInt):
        return v.hint
    if isinstance(v, (list, tuple)) and any(is_symbolic(i) for i in v):
        return type(v)(_hints(i) for i in v) if type(v) in (list, tuple) else \
            [_hints(i) for i in v]
    return v


def _dress(view, like):
    """view (a meta tensor at hint sizes) as a SymFake with like's symbolic geometry."""
    if not isinstance(like, SymFake):
        return view
    t = _C.Tensor._make_subclass(SymFake, view, view.requires_grad, keep_view=True)
    t._sym_shape = like._sym_shape
    t._sym_strides = like._sym_strides
    return t


class SymbolicMeta:
    """The tracer callback (csrc/dispatch/op.c's trace mode)."""

    def __call__(self, op, args):
        entry = op.entry
        if entry.composite:
            return run_composite(op, entry, args)
        if entry.inplace and entry.functional is not None:
            return self._inplace(op, entry, args)
        if not is_symbolic(args):
            with _mode(_C.MODE_META):
                return op._kernel(args)
        return self._rule(op, entry, args)

    def _rule(self, op, entry, args):
        """The symbolic result, computed in this mode: the ops a rule or a
        decomposition calls come back here, symbolically where they need to."""
        rule = M.rule_for(entry)
        if rule is None:
            raise NotSymbolic(f"{entry.qualified_name} has no Python meta rule")
        # a size passed where a tensor or a number goes (x * x.shape[0]) is a Python
        # int to the rule: only its type matters for the result's dtype and shape
        args = tuple(a.hint if isinstance(a, SymInt) and p.type.startswith("Tensor") else a
                     for p, a in zip(entry.schema.params, args))
        try:
            if rule is run_decomposition:
                prev = _C._set_grad_enabled(False)
                try:
                    out = entry.decompose(*args)
                finally:
                    _C._set_grad_enabled(prev)
            else:
                out = rule(entry, args)
        except TypeError as e:
            raise NotSymbolic(f"{entry.qualified_name}: {e}") from None
        aliased = entry.aliased_params
        if aliased and aliased[0] is not None:
            # a view: the kernel's meta view shares the input's storage
            with _mode(_C.MODE_META):
                hint_out = op._kernel(tuple(_hints(a) for a in args))
            if isinstance(out, tuple):
                return tuple(_dress(h, o) for h, o in zip(hint_out, out))
            return _dress(hint_out, out)
        return out

    def _inplace(self, op, entry, args):
        """(the functional twin's result, a tensor standing for the target's old value),
        as the dispatcher asks of a tracer for an in-place op."""
        target = args[0]
        if is_symbolic(args):
            result = self._rule(entry.functional.c_op, entry.functional, args)
        else:
            with _mode(_C.MODE_META):
                result = entry.functional.c_op._kernel(args)
        with _mode(_C.MODE_META):
            old = _C._meta_tensor(tuple(_hints(tuple(target.shape))), target.dtype,
                                  tuple(_hints(tuple(target.stride()))))
        return result, _dress(old, target)


def symbolic_meta_mode():
    """Ops dispatched inside run on fakes, symbolically where their arguments are."""
    return dispatch_mode(_C.MODE_TRACE, SymbolicMeta())


@contextlib.contextmanager
def dispatch_mode(mode, tracer=None):
    """This thread's dispatch mode (eager, meta, or trace with a tracer) inside."""
    prev = _C._get_mode()     # (read first: a KeyboardInterrupt right after the set
    try:                      # is inside the try, so the mode is always put back)
        if tracer is None:
            _C._set_mode(mode)
        else:
            _C._set_mode(mode, tracer)
        yield
    finally:
        _C._set_mode(*prev)


_mode = dispatch_mode


# ------------------------------------------------------------ composites

def run_composite(op, entry, args):
    """A composite op met in trace mode (csrc/dispatch/op.c hands them to the tracer:
    their C kernels read sizes as C ints). On concrete arguments its C kernel runs (the
    ops it calls come back to the tracer); on symbolic ones its Python form below, which
    dispatches the same ops with the symbolic sizes, or NotSymbolic. A composite that
    only reads sizes of dims that are constants runs its C kernel (split, chunk, unbind
    along a static dim)."""
    if not is_symbolic(args) or entry.kernel == "python":
        return op._kernel(args)     # (a Python kernel reads sizes through the SymFakes)
    name = entry.qualified_name
    form = _COMPOSITES.get(name)
    if form is not None:
        return form(*args)
    if name in _STATIC_DIM and not any(isinstance(a, SymInt) for a in args[1:]) and \
            isinstance(args[0], SymFake):
        # how many pieces depends on the dim's size: a symbolic one is specialised
        # (guarded equal to its value), as PyTorch's; the kernel then reads it exactly
        int(args[0]._sym_shape[args[_STATIC_DIM[name]] % max(args[0].ndim, 1)])
        return op._kernel(args)
    if name in _GEOMETRY_FREE and not any(is_symbolic(a) for a in args[1:]):
        return op._kernel(args)
    raise NotSymbolic(f"{name} (a composite) has no symbolic form")


def _O():
    from ..ops import api
    return api


def _reshape(self, shape):
    """reshape: a view where the strides allow it (decided at the hints: symbolic sizes
    are at least 2, as theirs), else a view of a contiguous copy."""
    O = _O()
    shape = tuple(shape)
    with _mode(_C.MODE_META):
        hint = self.reshape(tuple(_hints(shape)))
    if hint.untyped_storage() is self.untyped_storage():
        return O.view(self, shape)
    return O.view(O.clone(self, memory_format=_contiguous()), shape)


def _contiguous():
    from .. import contiguous_format
    return contiguous_format


def _flatten(self, start_dim=0, end_dim=-1):
    n = max(self.ndim, 1)
    s, e = start_dim % n, end_dim % n
    if self.ndim == 0:
        return _reshape(self, (1,))
    shape = tuple(self.shape)
    size = 1
    for d in shape[s:e + 1]:
        size = size * d
    return _reshape(self, shape[:s] + (size,) + shape[e + 1:])


def _stack(tensors, dim=0):
    O = _O()
    n = tensors[0].ndim + 1
    return O.cat([O.unsqueeze(t, dim % n) for t in tensors], dim % n)


def _narrow(self, dim, start, length):
    return _O().slice(self, dim, start, start + length)


def _getitem(self, indices):
    """Basic indexing (ints, slices, None, ...) as select/slice/unsqueeze."""
    O = _O()
    if not isinstance(indices, tuple):
        indices = (indices,)
    for i in indices:
        if isinstance(i, _C.Tensor):
            if i.dtype.is_floating_point or i.dtype.is_complex or str(i.dtype) in (
                    "ember.bool", "ember.uint8"):
                raise NotSymbolic("__getitem__ with a mask or a float tensor index")
        elif not (i is None or i is Ellipsis or isinstance(i, (int, slice, SymInt))) or \
                isinstance(i, bool):
            raise NotSymbolic("__getitem__ with a list or bool index")
    real = sum(1 for i in indices if i is not None and i is not Ellipsis)
    if real > self.ndim:
        raise NotSymbolic("__getitem__: too many indices")
    out, dim, adv = self, 0, {}
    for i in indices:
        if isinstance(i, _C.Tensor):
            adv[dim] = i          # advanced indexing: index() after the views
            dim += 1
        elif i is Ellipsis:
            dim += self.ndim - real
        elif i is None:
            out = O.unsqueeze(out, dim)
            dim += 1
        elif isinstance(i, slice):
            if not (i.start is None and i.stop is None and i.step in (None, 1)):
                out = O.slice(out, dim, i.start, i.stop, 1 if i.step is None else i.step)
            dim += 1
        else:
            out = O.select(out, dim, i)
    if adv:
        return O.index(out, [adv.get(d) for d in range(max(adv) + 1)])
    return out


def _setitem(self, indices, value):
    """self[indices] = value with basic indices: a copy into the view."""
    for i in (indices if isinstance(indices, tuple) else (indices,)):
        if isinstance(i, _C.Tensor):
            raise NotSymbolic("__setitem__ with a tensor index")
    view = _getitem(self, indices)
    if view is self:
        view = _O().alias(self)
    if isinstance(value, _C.Tensor):
        view.copy_(value)
    else:
        view.fill_(value)


def _unflatten(self, dim, sizes):
    shape = tuple(self.shape)
    d = dim % max(len(shape), 1)
    return _O().view(self, shape[:d] + tuple(sizes) + shape[d + 1:])


_COMPOSITES = {
    "reshape": _reshape,
    "flatten": _flatten,
    "view_as": lambda self, other: _O().view(self, tuple(other.shape)),
    "reshape_as": lambda self, other: _reshape(self, tuple(other.shape)),
    "expand_as": lambda self, other: _O().expand(self, tuple(other.shape)),
    "stack": _stack,
    "narrow": _narrow,
    "__getitem__": _getitem,
    "__setitem__": _setitem,
    "unflatten": _unflatten,
}
# composites whose C kernel reads the sizes of one dim only (the argument at this
# position): exact once that dim is a constant
_STATIC_DIM = {"split": 2, "split_with_sizes": 2, "chunk": 2, "unbind": 1}
# composites whose C kernel reads no sizes (dims and strides at the hints only)
_GEOMETRY_FREE = {"contiguous", "mT", "numpy_T", "movedim"}
