"""The two copies of every shape/dtype/stride rule agree: the Python meta rule
(ember.ops.meta.infer) and the C rule (the kernel run on meta copies, Op._infer), and both
agree with what the eager kernel returns. Where the C rule raises, the Python rule raises
the same exception type (tracing must fail where eager fails)."""
import zlib

import numpy as np
import pytest

import ember
from ember.ops import meta

import op_db
from op_db import ALL

KEYS = sorted(k for k, info in op_db.OPS.items() if not info.entry.composite)


def _outs(x):
    return tuple(x) if isinstance(x, tuple) else (x,)


def _geom(t):
    return tuple(t.shape), t.dtype, tuple(t.stride())


def _run(fn):
    try:
        return fn(), None
    except Exception as e:  # noqa: BLE001 - compared between the rules
        return None, e


def _cases(info, dtype):
    rng = np.random.default_rng(zlib.crc32(f"{info.name}{dtype}".encode()))
    for s in info.samples(dtype, rng):
        yield repr(s), s.args, s.kwargs
        nc = tuple(op_db.noncontig(a) for a in s.args)
        if s.noncontig and any(a is not b for a, b in zip(nc, s.args)):
            yield repr(s) + " non-contiguous", nc, s.kwargs
    if info.errors is not None and dtype == "float32":
        for e in info.errors():
            if not e.data:
                yield "error " + e.desc, e.args, e.kwargs


def test_every_non_composite_entry_is_checked():
    for e in op_db.ENTRY.values():
        if not e.composite:
            assert e.qualified_name in op_db.OPS


@pytest.mark.parametrize("key", KEYS)
def test_meta_rule_agrees_with_c_rule_and_eager(key):
    info = op_db.OPS[key]
    entry = info.entry
    public = ember.ops.public()[entry.name]
    checked = 0
    for dtype in ALL:
        for what, args, kwargs in _cases(info, dtype):
            what = f"{key} {dtype} {what}"
            bound_r, berr = _run(lambda: public._bind(*args, **kwargs))
            if berr is not None:
                assert isinstance(berr, TypeError), f"{what}: binding raised {berr!r}"
                continue
            overload, bound = bound_r
            assert overload is entry.c_op, \
                f"{what}: the call bound to {overload.schema}, not {entry.schema}"
            c_res, c_err = _run(lambda: entry.c_op._infer(bound))
            py_res, py_err = _run(lambda: meta.infer(entry, bound))
            self_geom = _geom(bound[0]) if entry.inplace else None
            if entry.inplace:       # the result is self: run on a copy, compare with self
                bound = (bound[0].clone(),) + tuple(bound[1:])
            e_res, e_err = _run(lambda: overload._call_bound(bound))
            if c_err is not None:
                assert py_err is not None, f"{what}: C rule raised {c_err!r}, Python did not"
                assert type(py_err) is type(c_err), \
                    f"{what}: C rule raised {c_err!r}, Python rule {py_err!r}"
                if info.dynamic_shape and isinstance(c_err, NotImplementedError):
                    checked += 1    # a value-dependent shape: no rule, eager computes it
                    continue
                # (in place, eager ran on a dense copy of self: it may accept the call)
                assert entry.inplace or (e_err is not None and type(e_err) is type(c_err)), \
                    f"{what}: C rule raised {c_err!r}, eager {e_err!r}"
                continue
            assert py_err is None, f"{what}: Python rule raised {py_err!r}, C did not"
            assert e_err is None, f"{what}: eager raised {e_err!r}, the C rule did not"
            c_outs, py_outs, e_outs = _outs(c_res), _outs(py_res), _outs(e_res)
            assert len(c_outs) == len(py_outs) == len(e_outs), what
            # one object returned twice would tell the compiler the results share memory
            for outs in (c_outs, py_outs, e_outs):
                assert len({id(o) for o in outs}) == len(outs), f"{what}: a result repeated"
            for c, p, e in zip(c_outs, py_outs, e_outs):
                assert c.is_meta and p.is_meta, what
                assert _geom(c) == _geom(p), f"{what}: C {_geom(c)} != Python {_geom(p)}"
                if self_geom is not None:
                    assert _geom(c) == self_geom, f"{what}: in place, but not self's geometry"
                    assert _geom(e)[:2] == self_geom[:2], f"{what}: eager {_geom(e)}"
                else:
                    assert _geom(c) == _geom(e), f"{what}: C {_geom(c)} != eager {_geom(e)}"
            checked += 1
    assert checked, f"{key}: no sample reached the rules"
