"""ember.fx.sym_fake: the Python meta rules run on tensors with symbolic sizes.

Every non-composite op of the table is run on its op_db samples (float32, contiguous
inputs) with each input size of 2 or more made a symbol: the symbolic result must equal
the concrete rule's at the captured sizes, and at other sizes that pass the guards the
rule took, the symbolic shapes and strides evaluated there must equal the concrete rule
run on inputs of those sizes (the guards are sound). Each runs as capture runs it
(fx/sym_meta.py: the rule, or the decomposition, in the symbolic mode, so the ops they
call compute symbolically too). Rules that still cannot are listed in NOT_YET and must
raise TypeError (NotSymbolic); that list only shrinks."""
import zlib

import numpy as np
import pytest

import ember
from ember import _C
from ember.fx import sym_expr as se
from ember.fx.shape_env import ShapeEnv, SymInt
from ember.fx.sym_fake import SymFake
from ember.fx.sym_meta import SymbolicMeta, symbolic_meta_mode
from ember.ops import meta

import op_db
from test_op_rules import KEYS, _cases

# rules that do not run on symbolic sizes yet, even in the symbolic mode (complex views,
# index_put's value-dependent checks)
NOT_YET = {
    "angle", "complex", "view_as_complex", "view_as_real",
}


def _symbolize(env, t, name):
    shape = [env.create_symbol(n, f"{name}.size({d})") for d, n in enumerate(t.shape)]
    strides = meta.contiguous_strides(shape) if t.numel() else tuple(t.stride())
    return SymFake.make(shape, strides, t.dtype)


def _geometry(o, values=None):
    if not isinstance(o, SymFake):
        return tuple(o.shape), tuple(o.stride())
    if values is None:
        return o.hint_geometry()

    def ev(v):
        return se.evaluate(v.expr, values) if isinstance(v, SymInt) else v
    return tuple(ev(n) for n in o.size()), tuple(ev(s) for s in o.stride())


def _outs(x):
    return tuple(x) if isinstance(x, tuple) else (x,)


def _samples(key):
    info = op_db.OPS[key]
    entry = info.entry
    public = ember.ops.public()[entry.name]
    for what, args, kwargs in _cases(info, "float32"):
        if "non-contiguous" in what or what.startswith("error"):
            continue
        try:
            overload, bound = public._bind(*args, **kwargs)
        except TypeError:
            continue
        if overload is not entry.c_op or any(
                isinstance(a, _C.Tensor) and not a.is_contiguous() for a in bound):
            continue
        try:
            concrete = meta.infer(entry, bound)
        except (RuntimeError, ValueError, IndexError, NotImplementedError, TypeError):
            continue
        yield what, entry, bound, concrete


@pytest.mark.parametrize("key", KEYS)
def test_symbolic_meta_rule_agrees_with_the_concrete_rule(key):
    checked = other_sizes = raised = 0
    for what, entry, bound, concrete in _samples(key):
        env = ShapeEnv()
        tensors = {i: a for i, a in enumerate(bound) if isinstance(a, _C.Tensor)}
        sym = tuple(_symbolize(env, a, f"a{i}") if i in tensors else a
                    for i, a in enumerate(bound))
        if key in NOT_YET:
            try:
                _symbolic_infer(entry, sym)
            except TypeError:           # (NotSymbolic is one)
                checked += 1
                raised += 1
                continue
        result = _symbolic_infer(entry, sym)
        outs, couts = _outs(result), _outs(concrete)
        assert len(outs) == len(couts), what
        for o, c in zip(outs, couts):
            assert o.dtype is c.dtype, what
            assert _geometry(o) == _geometry(c), f"{key} {what}"
        checked += 1
        # other sizes: each symbol moved by delta, where the guards admit it
        if not all(a.numel() for a in tensors.values()):
            continue
        for delta in (1, 3, 8):
            sizes = {}
            for i, a in tensors.items():
                for d, n in enumerate(a.shape):
                    sizes[f"a{i}.size({d})"] = n + delta if n >= 2 else n
            # duck sizing: one symbol for equal sizes, so equal sizes stay equal
            values, reason = env.bind(sizes)
            if reason is not None or env.check(sizes) is not None:
                continue
            moved = tuple(_C._meta_tensor(tuple(sizes[f"a{i}.size({d})"]
                                                for d in range(a.ndim)), a.dtype,
                                          meta.contiguous_strides(
                                              [sizes[f"a{i}.size({d})"]
                                               for d in range(a.ndim)]))
                          if i in tensors else a for i, a in enumerate(bound))
            again = _outs(meta.infer(entry, moved))
            for o, c in zip(outs, again):
                assert _geometry(o, values) == _geometry(c), \
                    f"{key} {what} at sizes {sizes}: guards {env.guard_texts()}"
            other_sizes += 1
    if key in NOT_YET and checked:
        assert raised, f"{key} now runs on symbolic sizes: take it out of NOT_YET"
    if key not in NOT_YET and not checked:
        pytest.skip("no contiguous float32 sample reaches the rule")


def _symbolic_infer(entry, args):
    """The op's result on symbolic sizes, as capture computes it (fx/sym_meta.py: its
    rule, or its decomposition, run in the symbolic mode)."""
    with symbolic_meta_mode():
        if entry.inplace:       # (the tracer takes their functional twin's result)
            return meta.infer(entry, args)
        return SymbolicMeta()._rule(entry.c_op, entry, args)


def test_not_yet_list_has_only_table_ops():
    assert NOT_YET <= set(KEYS)


def test_a_symfake_reads_as_a_tensor_of_symbolic_sizes():
    env = ShapeEnv()
    s0, s1 = env.create_symbol(4, "x.size(0)"), env.create_symbol(6, "x.size(1)")
    t = SymFake.make((s0, s1), (s1, 1), ember.float32)
    assert isinstance(t, ember.Tensor) and t.is_meta and t.ndim == 2
    assert repr(t.shape) == "ember.Size([s0, s1])" and repr(t.size(-1)) == "s1"
    assert repr(t.numel()) == "s0*s1" and t.hint_geometry() == ((4, 6), (6, 1))
    overload, bound = ember.ops.public()["sum"]._bind(t, 1)
    entry = next(e for e in op_db.ENTRY.values() if e.c_op is overload)
    r = meta.infer(entry, bound)
    assert repr(r.shape) == "ember.Size([s0])"
    with pytest.raises(IndexError):
        t.size(2)
