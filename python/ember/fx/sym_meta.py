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


def _symbolic(v):
    if isinstance(v, (SymFake, SymInt)):
        return True
    if isinstance(v, (list, tuple)):
        return any(_symbolic(i) for i in v)
    return False


def _hints(v):
    """v with SymInts replaced by their hints (SymFakes are tensors at their hints)."""
    if isinstance(v, SymInt):
        return v.hint
    if isinstance(v, (list, tuple)) and any(_symbolic(i) for i in v):
        return type(v)(_hints(i) for i in v) if type(v) in (list, tuple) else \
            [_hints(i) for i in v]
    return v


def _dress(view, like):
    """view (a meta tensor at hint sizes) as a SymFake with like's symbolic geometry."""
    if not isinstance(like, SymFake):
        return view
    t = _C.Tensor._make_subclass(SymFake, view, view.requires_grad)
    t._sym_shape = like._sym_shape
    t._sym_strides = like._sym_strides
    return t


class SymbolicMeta:
    """The tracer callback (csrc/dispatch/op.c's trace mode)."""

    def __call__(self, op, args):
        entry = op.entry
        if entry.inplace and entry.functional is not None:
            return self._inplace(op, entry, args)
        if not _symbolic(args):
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
        if _symbolic(args):
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
    prev = _C._set_mode(mode) if tracer is None else _C._set_mode(mode, tracer)
    try:
        yield
    finally:
        _C._set_mode(*prev)


_mode = dispatch_mode
