"""Every op of the table, from tests/op_db.py: values against an independent float64
reference, non-contiguous inputs, gradients against finite differences, dtype/shape/strides
and error types against PyTorch.

Tolerances (documented here, relied on by the compiler tests): float32 rtol 1e-5 /
atol 1e-6, float64 1e-10, float16 1e-3, integers and bool exact; reductions scale the
float tolerances by sqrt(reduced size).
"""
import math
import re
import warnings
import zlib

import numpy as np
import pytest

import ember
from ember.autograd import gradcheck

import op_db
from op_db import ALL, FLOATS, noncontig

INFOS = op_db.all_infos()
COMPLEX = {"complex64": "float32", "complex128": "float64"}   # checked with their parts' TOL
TOL = {"float16": (1e-3, 1e-3), "bfloat16": (1.6e-2, 1e-2), "float32": (1e-5, 1e-6), "float64": (1e-10, 1e-10)}


def rng_for(*key):
    return np.random.default_rng(zlib.crc32(repr(key).encode()))


def _outputs(out):
    return tuple(out) if isinstance(out, tuple) else (out,)


def _reduced_size(info, sample, out):
    if not info.reduction:
        return 1
    n_in = max((a.numel() for a in sample.args if isinstance(a, ember.Tensor)), default=1)
    return max(1, n_in // max(out.numel(), 1))


def _expected_values(ref, dtype_name):
    """The reference (object array of Python numbers) in the result's dtype."""
    ref = np.asarray(ref, dtype=object)
    if dtype_name == "bool":
        return np.vectorize(bool, otypes=[bool])(ref) if ref.size else ref.astype(bool)
    if dtype_name in FLOATS:
        return ref.astype(np.float64)
    if dtype_name in COMPLEX:
        return ref.astype(np.complex128)
    bits = np.dtype(dtype_name).itemsize * 8
    lo = 0 if dtype_name == "uint8" else -(1 << (bits - 1))

    def wrap(x):
        x = int(math.trunc(x)) if isinstance(x, float) else int(x)
        return (x - lo) % (1 << bits) + lo
    vals = [wrap(x) for x in ref.reshape(-1)]
    return np.array(vals, dtype=np.int64).reshape(ref.shape)


def _canonical(info, arrays):
    """The outputs' values (NumPy arrays) in the op's canonical form, if it has one."""
    return tuple(info.canonical(tuple(arrays))) if info.canonical else tuple(arrays)


def check_values(info, sample, out, ref, what=""):
    outs, refs = _outputs(out), (ref if isinstance(ref, tuple) else (ref,))
    assert len(outs) == len(refs), what
    for o in outs:
        assert isinstance(o, ember.Tensor), what
    gots = _canonical(info, [o.detach().numpy() for o in outs])
    if info.canonical:
        refs = _canonical(info, [np.asarray(r, dtype=np.float64) for r in refs])
    for o, r, got in zip(outs, refs, gots):
        assert tuple(o.shape) == np.shape(r), f"{what}: shape {tuple(o.shape)} != {np.shape(r)}"
        name = str(o.dtype).split(".")[-1]
        exp = _expected_values(r, name)
        if name in FLOATS or name in COMPLEX:
            rtol, atol = TOL[COMPLEX.get(name, name)]
            scale = math.sqrt(_reduced_size(info, sample, o))
            if name in COMPLEX:
                np.testing.assert_allclose(got.astype(np.complex128), exp, rtol=rtol * scale,
                                           atol=atol * scale, equal_nan=True, err_msg=what)
                continue
            np.testing.assert_allclose(got.astype(np.float64), exp, rtol=rtol * scale,
                                       atol=atol * scale, equal_nan=True, err_msg=what)
        else:
            np.testing.assert_array_equal(got.astype(exp.dtype), exp, err_msg=what)


def _noncontig_arg(a):
    return tuple(noncontig(t) for t in a) if isinstance(a, tuple) else noncontig(a)


def _noncontig_variant(sample):
    args = tuple(_noncontig_arg(a) for a in sample.args)
    kwargs = {k: noncontig(v) for k, v in sample.kwargs.items()}
    changed = any(a is not b for a, b in zip(args, sample.args)) or \
        any(kwargs[k] is not sample.kwargs[k] for k in kwargs)
    return (args, kwargs) if changed else None


# ---------------------------------------------------------------- the table is covered


def test_every_table_entry_has_an_opinfo():
    assert op_db.missing() == [], "add an OpInfo to tests/op_db.py for these entries"


def test_opinfos_name_table_entries():
    for name in op_db.OPS:
        assert name in op_db.ENTRY, f"op_db has {name}, the table has no such entry"


def test_inplace_variants_are_derived():
    for e in op_db.ENTRY.values():
        if e.inplace and e.functional is not None:
            assert e.qualified_name in op_db.OPS


def test_inplace_ops_declare_what_they_write():
    """Capture and AOT read "mutates" from the schema (Tensor(a!)), never from names."""
    for e in op_db.ENTRY.values():
        named_inplace = e.name.endswith("_") and not e.name.startswith("_")
        if e.inplace or named_inplace:
            assert e.mutates == (0,), f"{e.schema.text}: declare Tensor(a!) self"
            assert e.schema.return_aliases[:1] in (["a"], []), e.schema.text
        else:
            # batch_norm and instance_norm write their running statistics
            # (Tensor(a!)? running_mean, as PyTorch's _native_batch_norm_legit declares)
            assert e.mutates in ((), (0,)) or \
                (e.name in ("batch_norm", "instance_norm") and e.mutates == (3, 4)), \
                e.schema.text


ALIAS_KEYS = sorted(k for k, i in INFOS.items() if i.ref is not None)


@pytest.mark.parametrize("key", ALIAS_KEYS)
def test_results_that_share_memory_are_declared(key):
    """An op whose result shares an input's storage declares it (Tensor(a) in and
    out); capture decides per call whether a may-alias op's result is a view."""
    info = INFOS[key]
    entry = op_db.ENTRY.get(key.split("-")[0]) or op_db.ENTRY.get(info.name)
    if entry is None or entry.mutates:
        return
    d = info.dtypes[0]
    for s in info.samples(d, rng_for(key, d, "alias")):
        out = info.call(*s.args, **s.kwargs)
        tensors = [a for a in s.args if isinstance(a, ember.Tensor)]
        for o in _outputs(out) if isinstance(out, (tuple, ember.Tensor)) else ():
            if not isinstance(o, ember.Tensor):
                continue
            for i, a in enumerate(s.args):
                if isinstance(a, ember.Tensor) and \
                        o.untyped_storage() is a.untyped_storage():
                    assert i in entry.aliased_params, \
                        f"{entry.schema.text}: result shares memory with argument {i}"
        del tensors


# ---------------------------------------------------------------- forward


FORWARD = [(key, d) for key, info in sorted(INFOS.items()) if info.ref is not None
           for d in info.dtypes]


@pytest.mark.parametrize("key,dtype", FORWARD, ids=[f"{k}-{d}" for k, d in FORWARD])
def test_forward(key, dtype):
    info = INFOS[key]
    for s in info.samples(dtype, rng_for(key, dtype)):
        what = f"{key} {dtype} {s}"
        out = info.call(*s.args, **s.kwargs)
        ref = info.reference(*s.args, **s.kwargs)
        check_values(info, s, out, ref, what)
        if s.noncontig:
            nc = _noncontig_variant(s)
            if nc is not None:
                out2 = info.call(*nc[0], **nc[1])
                check_values(info, s, out2, ref, what + " (non-contiguous inputs)")
                for a, b in zip(_outputs(out), _outputs(out2)):
                    assert a.dtype is b.dtype and a.shape == b.shape, what


META_KEYS = sorted(k for k, i in op_db.OPS.items() if i.ref is None)


@pytest.mark.parametrize("key", META_KEYS)
def test_forward_metadata_only(key):
    """empty and the random ops: shape, dtype and value ranges (no reference values)."""
    info = INFOS[key]
    for d in info.dtypes:
        for s in info.samples(d, rng_for(key, d)):
            out = info.call(*s.args, **s.kwargs)
            first = s.args[0]
            if isinstance(first, ember.Tensor):
                assert tuple(out.shape) == tuple(first.shape), s
            elif isinstance(first, tuple):
                assert tuple(out.shape) == first, s
            if "dtype" in s.kwargs:
                assert out.dtype is s.kwargs["dtype"], s
            elif isinstance(first, ember.Tensor):
                assert out.dtype is first.dtype, s
            if info.check is not None:
                assert info.check(out, *s.args, **s.kwargs), f"{key} {s}: {out}"


# ---------------------------------------------------------------- gradients


def _grad_keys():
    out = []
    for key, info in sorted(INFOS.items()):
        if info.random or not (info.differentiable or info.composite_grad) or \
                "float64" not in info.dtypes or info.no_derivative or info.grad_elsewhere:
            continue
        out.append(key)
    return out


def _as_leaf(t):
    c = ember.from_numpy(np.array(t.detach().numpy(), dtype=np.float64))
    return c.requires_grad_(True)


@pytest.mark.parametrize("key", _grad_keys())
def test_gradients_match_finite_differences(key):
    info = INFOS[key]
    checked = 0
    for s in info.samples("float64", rng_for(key, "grad")):
        if not s.grad:
            continue
        # tensors among the arguments, and inside tensor lists (cat, stack): (i, j or None)
        pos = [(i, j) for i, a in enumerate(s.args)
               for j, t in ([(None, a)] if not isinstance(a, tuple) else enumerate(a))
               if isinstance(t, ember.Tensor) and t.dtype is ember.float64 and t.numel() > 0]
        if not pos:
            continue
        leaves = [_as_leaf(s.args[i] if j is None else s.args[i][j]) for i, j in pos]

        def fn(*ts, s=s, pos=pos):
            args = [list(a) if isinstance(a, tuple) else a for a in s.args]
            for (i, j), t in zip(pos, ts):
                if j is None:
                    args[i] = t
                else:
                    args[i][j] = t
            args = [tuple(a) if isinstance(a, list) else a for a in args]
            return info.call(*args, **s.kwargs)
        assert gradcheck(fn, leaves, eps=1e-6, atol=1e-6, rtol=1e-5), f"{key} {s}"
        checked += 1
    assert checked, f"{key}: no sample exercised the gradient"


@pytest.mark.parametrize("key", ["add", "mul", "sigmoid", "matmul", "sum", "permute",
                                 "select"])
def test_gradients_of_noncontiguous_inputs(key):
    info = INFOS[key]
    for s in info.samples("float64", rng_for(key, "nc-grad"))[:3]:
        leaves = []
        args = []
        for a in s.args:
            if isinstance(a, ember.Tensor) and a.dtype is ember.float64 and a.numel() > 1:
                t = noncontig(a).requires_grad_(True)
                leaves.append(t)
                args.append(t)
            else:
                args.append(a)
        if not leaves:
            continue
        idx = [i for i, a in enumerate(args) if any(a is t for t in leaves)]

        def fn(*ts, args=args, idx=idx, s=s):
            full = list(args)
            for i, t in zip(idx, ts):
                full[i] = t
            return info.call(*full, **s.kwargs)
        assert gradcheck(fn, leaves, atol=1e-6, rtol=1e-5), f"{key} {s}"


# ---------------------------------------------------------------- errors


ERROR_CASES = [(key, i) for key, info in sorted(op_db.OPS.items()) if info.errors
               for i in range(len(info.errors()))]


@pytest.mark.parametrize("key,i", ERROR_CASES, ids=[f"{k}-{i}" for k, i in ERROR_CASES])
def test_errors(key, i):
    info = op_db.OPS[key]
    case = info.errors()[i]
    with pytest.raises(case.exc) as exc:
        info.call(*case.args, **case.kwargs)
    assert type(exc.value) is case.exc, f"{case.desc}: {type(exc.value).__name__}: {exc.value}"
    assert re.search(case.match, str(exc.value), re.S), \
        f"{case.desc}: message {str(exc.value)!r} does not match {case.match!r}"


# ---------------------------------------------------------------- PyTorch parity


def to_torch(torch, x):
    if isinstance(x, ember.Tensor):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if x.dtype is ember.bfloat16:     # torch.from_numpy has no bfloat16: its bits
                return torch.from_numpy(x.detach().numpy().view(np.int16)).view(
                    torch.bfloat16)
            return torch.from_numpy(x.detach().numpy())
    if isinstance(x, ember.dtype):
        return getattr(torch, str(x).split(".")[-1])
    if isinstance(x, tuple):
        return tuple(to_torch(torch, e) for e in x)
    return x


def _run(fn):
    try:
        return fn(), None
    except Exception as e:  # noqa: BLE001 - compared with torch's
        return None, e


def compare_with_torch(torch, info, args, kwargs, what, values=True):
    got, err = _run(lambda: info.call(*args, **kwargs))
    targs = [to_torch(torch, a) for a in args]
    tkwargs = {k: to_torch(torch, v) for k, v in kwargs.items()}
    want, terr = _run(lambda: info.call_torch(torch, *targs, **tkwargs))
    if terr is not None or err is not None:
        assert terr is not None, f"{what}: ember raised {err!r}, torch returned"
        assert err is not None, f"{what}: torch raised {terr!r}, ember returned"
        assert type(err) is type(terr), \
            f"{what}: ember raised {type(err).__name__} ({err}), torch {type(terr).__name__}"
        return
    got_vals = _canonical(info, [o.detach().numpy().astype(
        np.complex128 if o.is_complex() else np.float64) for o in _outputs(got)])
    want_vals = _canonical(info, [
        t.detach().resolve_conj().to(torch.complex128 if t.is_complex() else torch.float64)
        .numpy() for t in _outputs(want)])
    for o, t, got_a, want_a in zip(_outputs(got), _outputs(want), got_vals, want_vals):
        tname = str(t.dtype).split(".")[-1]
        assert str(o.dtype) == f"ember.{tname}", f"{what}: dtype {o.dtype} != {t.dtype}"
        assert tuple(o.shape) == tuple(t.shape), f"{what}: shape {o.shape} != {t.shape}"
        if o.numel() > 0:
            so = [s for s, n in zip(o.stride(), o.shape) if n > 1]
            st = [s for s, n in zip(t.stride(), t.shape) if n > 1]
            assert so == st, f"{what}: strides {o.stride()} != torch {t.stride()}"
        if values and o.numel() > 0:
            rtol, atol = TOL.get(COMPLEX.get(tname, tname), (0, 0))
            np.testing.assert_allclose(got_a, want_a, rtol=max(rtol, 1e-6) * 10,
                                       atol=max(atol, 1e-6) * 10, equal_nan=True,
                                       err_msg=what)


PARITY = sorted(INFOS)


@pytest.mark.parametrize("key", PARITY)
def test_matches_torch(torch, key):
    """Every sample in every dtype (supported or not): the same exception type, or the same
    dtype, shape, strides and values as torch; also for non-contiguous inputs."""
    info = INFOS[key]
    for d in ALL:
        if info.random and d not in FLOATS:
            continue
        for s in info.samples(d, rng_for(key, d, "torch")):
            what = f"{key} {d} {s}"
            values = info.ref is not None
            compare_with_torch(torch, info, s.args, s.kwargs, what, values)
            nc = _noncontig_variant(s) if s.noncontig else None
            if nc is not None:
                compare_with_torch(torch, info, nc[0], nc[1], what + " non-contiguous", values)


@pytest.mark.parametrize("key,i", ERROR_CASES, ids=[f"{k}-{i}" for k, i in ERROR_CASES])
def test_error_types_match_torch(torch, key, i):
    info = op_db.OPS[key]
    case = info.errors()[i]
    targs = [to_torch(torch, a) for a in case.args]
    tkwargs = {k: to_torch(torch, v) for k, v in case.kwargs.items()}
    _, terr = _run(lambda: info.call_torch(torch, *targs, **tkwargs))
    assert terr is not None, f"{case.desc}: torch accepts this call"
    assert type(terr) is case.exc, f"{case.desc}: torch raises {type(terr).__name__}: {terr}"


# ---------------------------------------------------------------- random factories


@pytest.mark.parametrize("name", ["rand", "randn"])
@pytest.mark.parametrize("dtype", FLOATS)
def test_random_distribution(name, dtype):
    ember.manual_seed(1234)
    t = getattr(ember, name)(20000, dtype=getattr(ember, dtype))
    assert t.dtype is getattr(ember, dtype) and tuple(t.shape) == (20000,)
    a = t.numpy().astype(np.float64)
    se = 1 / math.sqrt(a.size)
    if name == "rand":
        assert a.min() >= 0 and a.max() < 1
        assert abs(a.mean() - 0.5) < 5 * se * math.sqrt(1 / 12)
        assert abs(a.var() - 1 / 12) < 0.005
        counts = np.histogram(a, bins=10, range=(0, 1))[0]
        assert counts.min() > 1700 and counts.max() < 2300
    else:
        assert abs(a.mean()) < 5 * se
        assert abs(a.var() - 1) < 0.05
        assert abs(np.mean(a ** 3)) < 0.1            # skewness
        assert abs(np.mean(a ** 4) - 3) < 0.2        # kurtosis
        assert 0.66 < np.mean(np.abs(a) < 1) < 0.70  # 68% within one sigma


@pytest.mark.parametrize("name", ["rand", "randn", "rand_like", "randn_like"])
def test_random_reproducible(name):
    fn = getattr(ember, name)
    arg = (ember.zeros(3, 4),) if name.endswith("_like") else ((3, 4),)
    ember.manual_seed(7)
    a = fn(*arg).numpy().copy()
    b = fn(*arg).numpy().copy()
    ember.manual_seed(7)
    c = fn(*arg).numpy().copy()
    np.testing.assert_array_equal(a, c)
    assert not np.array_equal(a, b)
    g = ember.Generator().manual_seed(7)
    if not name.endswith("_like"):
        d = fn(*arg, generator=g).numpy()
        np.testing.assert_array_equal(a, d)


@pytest.mark.parametrize("name", ["sum", "mean"])
def test_float16_reductions_accumulate_in_float32(name):
    """Strided float16 reductions are as accurate as the float16 result allows."""
    rng = rng_for("f16", name)
    a = rng.uniform(0.0, 1.0, (400, 300)).astype(np.float16)
    t = ember.from_numpy(a)
    for dim in (0, 1, None):
        got = getattr(t, name)(dim).numpy().astype(np.float64)
        exact = getattr(a.astype(np.float64), name)(axis=dim)
        np.testing.assert_allclose(got, exact, rtol=2e-3, err_msg=f"{name} dim={dim}")


@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
@pytest.mark.parametrize("shape", [(5, 37), (3, 4, 64), (2, 16), (7, 1)])
def test_softmax_rows_special_values_match_torch(torch, name, shape):
    """The one-pass C row kernel (contiguous float, last dim): NaN rows, all -inf rows,
    +-inf entries and lengths off the 16-lane blocks as PyTorch computes them."""
    g = np.random.default_rng(0)
    x = g.standard_normal(shape) * 30
    flat = x.reshape(-1, shape[-1])
    flat[0, 0] = np.nan
    if len(flat) > 2:
        flat[1, :] = -np.inf
        flat[2, -1] = np.inf
    for dt, tdt in ((ember.float32, torch.float32), (ember.float64, torch.float64)):
        got = getattr(ember.tensor(x, dtype=dt), name)(-1).numpy()
        want = getattr(torch.tensor(x, dtype=tdt), name)(-1).numpy()
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, equal_nan=True)
