"""The op database's entries for the composites of python/ember/ops/closeness.py,
order_stats.py and combining.py (isclose ... multinomial), loaded by op_db.py.

References work on Python numbers: sorted() and bisect for the order statistics,
collections.Counter for mode, itertools.product for cartesian_prod, explicit loops for
the running extremes, histograms, distances and index copies; none calls the ops they
check or the NumPy functions those ops call."""
from __future__ import annotations

import bisect
import collections
import itertools
import math

import numpy as np

import ember
from op_db import (ALL, BOOL, FLOATS, INTS, NO_BOOL, ErrorSample, OpInfo, Sample, _isnan,
                   _unique_values, add, make)


def _obj(x):
    a = np.empty(np.shape(x), dtype=object)
    a[...] = x
    return a


def _arr(vals, shape):
    out = np.empty(len(vals), dtype=object)
    out[:] = vals
    return out.reshape(shape)


def _line_pairs(a, dim, keepdim, fn):
    """fn(list) -> (value, index) over every line of a along dim: two arrays."""
    a = np.asarray(a, dtype=object)
    if a.ndim == 0:
        v, i = fn([a[()]])
        return _obj(v), _obj(i)
    d = dim % a.ndim
    moved = np.moveaxis(a, d, -1)
    vs, ids = [], []
    for idx in np.ndindex(*moved.shape[:-1]):
        v, i = fn(list(moved[idx]))
        vs.append(v)
        ids.append(i)
    shape = moved.shape[:-1]
    v, i = _arr(vs, shape), _arr(ids, shape)
    if keepdim:
        v, i = np.expand_dims(v, d), np.expand_dims(i, d)
    return v, i


def _key(x):
    return (True, 0.0) if _isnan(x) else (False, x)


def _order(xs):
    return sorted(range(len(xs)), key=lambda i: _key(xs[i]))


def _as_tensor_call(name):
    """Calls of ops that return a Python bool, as a 0-d bool tensor (test_ops compares
    tensors)."""
    def call(*args, **kwargs):
        return ember.tensor(getattr(ember, name)(*args, **kwargs))

    def torch_fn(torch, *args, **kwargs):
        return torch.tensor(getattr(torch, name)(*args, **kwargs))
    return call, torch_fn


# ---------------------------------------------------------------- isclose, allclose, equal


def _close(a, b, rtol=1e-05, atol=1e-08, equal_nan=False):
    if a == b:
        return True
    if _isnan(a) or _isnan(b):
        return bool(equal_nan and _isnan(a) and _isnan(b))
    if rtol == 0 and atol == 0:
        return False
    diff = abs(float(a) - float(b))
    return math.isfinite(diff) and diff <= atol + rtol * abs(float(b))


def _ref_isclose(a, b, rtol=1e-05, atol=1e-08, equal_nan=False):
    a, b = np.broadcast_arrays(np.asarray(a, dtype=object), np.asarray(b, dtype=object))
    return _arr([_close(x, y, rtol, atol, equal_nan) for x, y in
                 zip(a.reshape(-1), b.reshape(-1))], a.shape)


def _close_samples(dtype, rng):
    a = make((3, 4), dtype, rng)
    b = ember.from_numpy(a.numpy().copy())
    out = [Sample((a, b), desc="equal"), Sample((a, make((3, 4), dtype, rng)), desc="random")]
    if dtype in FLOATS:
        near = ember.from_numpy((a.numpy() * (1 + 5e-6)).astype(dtype))
        out.append(Sample((a, near), desc="near"))
        out.append(Sample((a, near), {"rtol": 0.0, "atol": 0.0}, desc="exact"))
        n = np.array([1.0, math.nan, math.inf, -math.inf], dtype=dtype)
        m = np.array([1.0, math.nan, math.inf, math.inf], dtype=dtype)
        for eq in (False, True):
            out.append(Sample((ember.from_numpy(n), ember.from_numpy(m)), {"equal_nan": eq},
                              desc=f"specials {eq}"))
    out.append(Sample((make((2, 1), dtype, rng), make((3,), dtype, rng)), {"atol": 2},
                      desc="broadcast"))
    return [Sample(s.args, s.kwargs, s.desc, grad=False) for s in out]


def _close_errors(name):
    return lambda: [
        ErrorSample((ember.ones(2), ember.ones(2, dtype=ember.float64)), {}, RuntimeError,
                    r"Float did not match Double", "dtypes differ"),
        ErrorSample((ember.ones(2), ember.ones(2)), {"rtol": -1.0}, RuntimeError,
                    r"rtol must be greater than or equal to zero", "negative rtol"),
        ErrorSample((ember.ones(2), ember.ones(2)), {"atol": -1.0}, RuntimeError,
                    r"atol must be greater than or equal to zero", "negative atol")]


add(OpInfo("isclose", _close_samples, _ref_isclose, errors=_close_errors("isclose")))


def _all_of(ref):
    def r(*a, **k):
        return _obj(bool(all(np.asarray(ref(*a, **k), dtype=object).reshape(-1))))
    return r


_info = add(OpInfo("allclose", _close_samples, _all_of(_ref_isclose),
                   errors=_close_errors("allclose"),
                   torch_fn=_as_tensor_call("allclose")[1]))
_info.call = _as_tensor_call("allclose")[0]


def _ref_equal(a, b):
    a, b = np.asarray(a, dtype=object), np.asarray(b, dtype=object)
    if a.shape != b.shape:
        return _obj(False)
    return _obj(all(x == y for x, y in zip(a.reshape(-1), b.reshape(-1))))


def _equal_samples(dtype, rng):
    a = make((3, 4), dtype, rng)
    out = [Sample((a, ember.from_numpy(a.numpy().copy())), desc="same"),
           Sample((a, make((3, 4), dtype, rng, 5, 9)), desc="different"),
           Sample((a, make((4, 3), dtype, rng)), desc="shapes differ"),
           Sample((make((0,), dtype, rng), make((0,), dtype, rng)), desc="empty")]
    if dtype in FLOATS:
        n = ember.from_numpy(np.array([math.nan, 1.0], dtype=dtype))
        out.append(Sample((n, ember.from_numpy(n.numpy().copy())), desc="nan"))
    return [Sample(s.args, s.kwargs, s.desc, grad=False) for s in out]


_info = add(OpInfo("equal", _equal_samples, _ref_equal, torch_fn=_as_tensor_call("equal")[1]))
_info.call = _as_tensor_call("equal")[0]

# ---------------------------------------------------------------- kthvalue, median, mode


def _ref_kthvalue(a, k, dim=-1, keepdim=False):
    def fn(xs):
        i = _order(xs)[k - 1]
        return xs[i], i
    return _line_pairs(a, dim, keepdim, fn)


def _distinct_samples(shapes_dims, extra):
    def samples(dtype, rng):
        out = []
        for shape, dim in shapes_dims:
            t = _unique_values(shape, dtype, rng)
            for keepdim in (False, True):
                out.append(Sample((t,) + extra(shape, dim), {"dim": dim, "keepdim": keepdim},
                                  desc=f"{shape} dim={dim} keepdim={keepdim}"))
        return out
    return samples


_LINES = [((2, 3, 5), -1), ((2, 3, 5), 1), ((4, 3), 0), ((7,), 0), ((), 0)]

add(OpInfo("kthvalue", _distinct_samples(
    _LINES, lambda shape, dim: (min(2, shape[dim] if shape else 1),)), _ref_kthvalue,
    dtypes=NO_BOOL, composite_grad=True,
    errors=lambda: [ErrorSample((ember.ones(3), 4), {}, RuntimeError,
                                r"kthvalue\(\): selected number k out of range", "k too big"),
                    ErrorSample((ember.ones(3), 1, 1), {}, IndexError,
                                r"Dimension out of range", "bad dim")]))


def _lower_median(xs, ignore_nan):
    order = _order(xs)
    nans = [i for i in order if _isnan(xs[i])]
    if nans and not ignore_nan:
        return xs[nans[0]], nans[0]
    real = [i for i in order if not _isnan(xs[i])]
    if not real:
        return xs[order[0]], order[0]
    i = real[(len(real) - 1) // 2]
    return xs[i], i


def _median_ref(ignore_nan):
    def dim_form(a, dim, keepdim=False):
        return _line_pairs(a, dim, keepdim, lambda xs: _lower_median(xs, ignore_nan))

    def all_form(a):
        flat = list(np.asarray(a, dtype=object).reshape(-1))
        return _obj(_lower_median(flat, ignore_nan)[0] if flat else math.nan)
    return all_form, dim_form


def _median_samples(dim_form):
    def samples(dtype, rng):
        out = []
        for shape, dim in _LINES + [((2, 6), 1)]:
            t = _unique_values(shape, dtype, rng)
            if dim_form:
                for keepdim in (False, True):
                    out.append(Sample((t, dim, keepdim), desc=f"{shape} {dim} {keepdim}"))
            else:
                out.append(Sample((t,), desc=f"{shape}"))
        if dtype in FLOATS:
            nan = ember.from_numpy(np.array([[1.5, math.nan, -2.0, 4.0, math.nan],
                                             [0.5, 2.5, 1.0, -1.5, 3.0]], dtype=dtype))
            out.append(Sample((nan, 1) if dim_form else (nan,), desc="nan", grad=False))
        return out
    return samples


for _name, _ignore in (("median", False), ("nanmedian", True)):
    _all, _dim = _median_ref(_ignore)
    add(OpInfo(_name, _median_samples(False), _all, dtypes=NO_BOOL, composite_grad=True))
    add(OpInfo(f"{_name}.dim", _median_samples(True), _dim, dtypes=NO_BOOL, composite_grad=True,
               torch_fn=(lambda n: lambda torch, *a, **k: tuple(getattr(torch, n)(*a, **k)))(
                   _name),
               errors=(lambda n: lambda: [
                   ErrorSample((ember.ones(2, 0), 1), {}, IndexError,
                               rf"{n}\(\): Expected reduction dim 1 to have non-zero size",
                               "empty dim")])(_name)))


def _ref_mode(a, dim=-1, keepdim=False):
    def fn(xs):
        counts = collections.Counter(xs)
        best = max(counts.values())
        v = min(x for x, c in counts.items() if c == best)
        return v, max(i for i, x in enumerate(xs) if x == v)
    return _line_pairs(a, dim, keepdim, fn)


def _mode_samples(dtype, rng):
    out = []
    for shape, dim in _LINES:
        t = make(shape, dtype, rng, 0, 4)
        for keepdim in (False, True):
            out.append(Sample((t, dim, keepdim), desc=f"{shape} {dim} {keepdim}"))
    return out


add(OpInfo("mode", _mode_samples, _ref_mode, composite_grad=True,
           torch_fn=lambda torch, *a, **k: tuple(torch.mode(*a, **k)),
           errors=lambda: [ErrorSample((ember.ones(0),), {}, IndexError,
                                       r"mode\(\): Expected reduction dim 0 to have non-zero",
                                       "empty")]))

# ---------------------------------------------------------------- cummax, cummin, aminmax


def _running(better):
    def ref(a, dim):
        a = np.asarray(a, dtype=object)

        def line(xs):
            vals, idx = [], []
            bv, bi = None, None
            for i, x in enumerate(xs):
                if bv is None or _isnan(x) or (not _isnan(bv) and better(x, bv)):
                    bv, bi = x, i
                vals.append(bv)
                idx.append(bi)
            return vals, idx
        if a.ndim == 0:
            return _obj(a[()]), _obj(0)
        d = dim % a.ndim
        moved = np.moveaxis(a, d, -1)
        v = np.empty(moved.shape, dtype=object)
        i = np.empty(moved.shape, dtype=object)
        for ix in np.ndindex(*moved.shape[:-1]):
            v[ix], i[ix] = line(list(moved[ix]))
        return np.moveaxis(v, -1, d), np.moveaxis(i, -1, d)
    return ref


def _running_samples(dtype, rng):
    out = []
    for shape, dim in ((2, 3, 9), -1), ((2, 3, 9), 1), ((5, 4), 0), ((6,), 0), ((), 0), \
            ((0, 3), 1):
        out.append(Sample((_unique_values(shape, dtype, rng), dim), desc=f"{shape} {dim}"))
    ties = make((3, 8), dtype, rng, 0, 3)
    out.append(Sample((ties, 1), desc="ties", grad=False))
    if dtype in FLOATS:
        nan = ember.from_numpy(np.array([1.0, math.nan, 3.0, math.nan, 2.0], dtype=dtype))
        out.append(Sample((nan, 0), desc="nan", grad=False))
    return out


for _name, _better in (("cummax", lambda x, b: x >= b), ("cummin", lambda x, b: x <= b)):
    add(OpInfo(_name, _running_samples, _running(_better), composite_grad=True,
               torch_fn=(lambda n: lambda torch, *a, **k: tuple(getattr(torch, n)(*a, **k)))(
                   _name),
               errors=(lambda n: lambda: [ErrorSample((ember.ones(2), 1), {}, IndexError,
                                                      r"Dimension out of range", "bad dim")])(
                   _name)))


def _ref_aminmax(a, dim=None, keepdim=False):
    a = np.asarray(a, dtype=object)
    if dim is None:
        flat = list(a.reshape(-1))
        lo = min(flat, key=_key) if not any(map(_isnan, flat)) else math.nan
        hi = max(flat, key=_key) if not any(map(_isnan, flat)) else math.nan
        shape = (1,) * a.ndim if keepdim else ()
        return _obj(lo).reshape(shape), _obj(hi).reshape(shape)

    def lo_of(xs):
        return (math.nan if any(map(_isnan, xs)) else min(xs)), 0

    def hi_of(xs):
        return (math.nan if any(map(_isnan, xs)) else max(xs)), 0
    return _line_pairs(a, dim, keepdim, lo_of)[0], _line_pairs(a, dim, keepdim, hi_of)[0]


def _aminmax_samples(dtype, rng):
    out = []
    for shape in ((2, 3, 4), (5,), ()):
        t = _unique_values(shape, dtype, rng)
        out.append(Sample((t,), desc=f"{shape} all"))
        out.append(Sample((t,), {"keepdim": True}, desc=f"{shape} all keepdim"))
        if shape:
            for keepdim in (False, True):
                out.append(Sample((t,), {"dim": -1, "keepdim": keepdim},
                                  desc=f"{shape} -1 {keepdim}"))
    return out


add(OpInfo("aminmax", _aminmax_samples, _ref_aminmax, composite_grad=True,
           torch_fn=lambda torch, *a, **k: tuple(torch.aminmax(*a, **k)),
           errors=lambda: [ErrorSample((ember.ones(0),), {}, RuntimeError,
                                       r"aminmax\(\): cannot compute aminmax over an empty",
                                       "empty")]))

# ---------------------------------------------------------------- var_mean, std_mean


def _moments_ref(name, form):
    def moments(xs, correction):
        xs = [float(x) for x in xs]
        n = len(xs)
        mean = math.fsum(xs) / n if n else math.nan
        dof = n - correction
        var = math.fsum((x - mean) ** 2 for x in xs) / dof if dof > 0 else \
            (math.inf if n and math.fsum((x - mean) ** 2 for x in xs) else math.nan)
        return (var if name == "var" else math.sqrt(var)), mean

    def over(a, dim, keepdim, correction):
        a = np.asarray(a, dtype=object)
        dims = tuple(range(a.ndim)) if dim is None or dim == [] or dim == () else \
            tuple(sorted({d % a.ndim for d in ((dim,) if isinstance(dim, int) else dim)}))
        keep = [d for d in range(a.ndim) if d not in dims]
        moved = np.transpose(a, keep + list(dims)).reshape(
            [a.shape[d] for d in keep] + [-1])
        s, m = [], []
        for ix in np.ndindex(*moved.shape[:-1]):
            x, y = moments(list(moved[ix]), correction)
            s.append(x)
            m.append(y)
        shape = [1 if d in dims else a.shape[d] for d in range(a.ndim)] if keepdim else \
            [a.shape[d] for d in keep]
        return _arr(s, shape), _arr(m, shape)

    if form == "plain":
        return lambda a, unbiased=True: over(a, None, False, 1 if unbiased else 0)
    if form == "dim":
        return lambda a, dim, unbiased=True, keepdim=False: over(a, dim, keepdim,
                                                                  1 if unbiased else 0)
    return lambda a, dim=None, correction=None, keepdim=False: over(
        a, dim, keepdim, 1 if correction is None else correction)


def _moments_samples(form):
    def samples(dtype, rng):
        t = make((3, 5), dtype, rng)
        if form == "plain":
            return [Sample((t,)), Sample((t, False)), Sample((make((6,), dtype, rng),))]
        if form == "dim":
            return [Sample((t, 1)), Sample((t, [0], False, True)), Sample((t, None))]
        return [Sample((t,)), Sample((t, 1), {"correction": 0}),
                Sample((t, [0, 1]), {"correction": 2, "keepdim": True})]
    return samples


for _name in ("var", "std"):
    for _form, _key_name in (("plain", f"{_name}_mean"), ("dim", f"{_name}_mean.dim"),
                             ("correction", f"{_name}_mean.correction")):
        add(OpInfo(_key_name, _moments_samples(_form), _moments_ref(_name, _form),
                   dtypes=FLOATS, reduction=True, composite_grad=True,
                   errors=(lambda n: lambda: [
                       ErrorSample((ember.ones(3, dtype=ember.int64),), {}, RuntimeError,
                                   r"std and var only support floating point", "int")])(_name)
                   if _form == "plain" else None))

# ---------------------------------------------------------------- searchsorted, bucketize


def _ref_searchsorted(seq, values, out_int32=False, right=False, side=None, sorter=None):
    seq = np.asarray(seq, dtype=object)
    right = right or side == "right"
    if sorter is not None:
        seq = np.take_along_axis(seq, np.asarray(sorter, dtype=np.int64), -1)
    find = bisect.bisect_right if right else bisect.bisect_left
    values = np.asarray(values, dtype=object)
    out = np.empty(values.shape, dtype=object)
    for ix in np.ndindex(*values.shape):
        line = list(seq) if seq.ndim == 1 else list(seq[ix[:-1]])
        out[ix] = find(line, values[ix])
    return out


def _sorted_seq(dtype, rng, shape):
    t = make(shape, dtype, rng, -3, 3).numpy()
    return ember.from_numpy(np.ascontiguousarray(np.sort(t, axis=-1)))


def _searchsorted_samples(dtype, rng):
    if dtype == "bool":
        return [Sample((ember.tensor([False, True]), ember.tensor([True, False])), grad=False)]
    seq = _sorted_seq(dtype, rng, (6,))
    vals = make((3, 4), dtype, rng, -4, 4)
    out = [Sample((seq, vals), desc="1-d"),
           Sample((seq, vals), {"right": True}, desc="right"),
           Sample((seq, vals), {"side": "right", "out_int32": True}, desc="side right int32"),
           Sample((seq, seq), {"right": True}, desc="on the boundaries"),
           Sample((_sorted_seq(dtype, rng, (2, 5)), make((2, 3), dtype, rng, -4, 4)),
                  desc="n-d")]
    raw = make((5,), dtype, rng)
    order = ember.from_numpy(np.argsort(raw.numpy(), kind="stable").astype(np.int64))
    out.append(Sample((raw, vals), {"sorter": order}, desc="sorter"))
    return [Sample(s.args, s.kwargs, s.desc, grad=False) for s in out]


add(OpInfo("searchsorted.Tensor", _searchsorted_samples, _ref_searchsorted, dtypes=NO_BOOL,
           torch_fn=lambda torch, *a, **k: torch.searchsorted(*a, **k),
           errors=lambda: [
               ErrorSample((ember.ones(3), ember.ones(2)), {"side": "left", "right": True},
                           RuntimeError, r"side and right can't be set to opposites",
                           "side and right"),
               ErrorSample((ember.ones(2, 3), ember.ones(3, 3)), {}, RuntimeError,
                           r"boundaries tensor should be 1 dimension or the first N-1",
                           "leading dims")]))
add(OpInfo("searchsorted.Scalar", lambda dtype, rng: [
    Sample((_sorted_seq(dtype, rng, (6,)), 1), grad=False),
    Sample((_sorted_seq(dtype, rng, (6,)), 0), {"right": True}, grad=False)],
    _ref_searchsorted, dtypes=NO_BOOL,
    torch_fn=lambda torch, *a, **k: torch.searchsorted(*a, **k)))


def _ref_bucketize(values, boundaries, out_int32=False, right=False):
    return _ref_searchsorted(boundaries, values, out_int32, right)


add(OpInfo("bucketize.Tensor", lambda dtype, rng: [
    Sample((make((3, 4), dtype, rng, -4, 4), _sorted_seq(dtype, rng, (5,))), grad=False),
    Sample((make((7,), dtype, rng, -4, 4), _sorted_seq(dtype, rng, (5,))), {"right": True},
           grad=False)],
    _ref_bucketize, dtypes=NO_BOOL,
    errors=lambda: [ErrorSample((ember.ones(3), ember.ones(2, 2)), {}, RuntimeError,
                                r"boundaries tensor must be 1 dimension, but got dim\(2\)",
                                "2-d boundaries")]))
add(OpInfo("bucketize.Scalar", lambda dtype, rng: [
    Sample((1, _sorted_seq(dtype, rng, (5,))), grad=False),
    Sample((0, _sorted_seq(dtype, rng, (5,))), {"right": True, "out_int32": True}, grad=False)],
    _ref_bucketize, dtypes=NO_BOOL,
    torch_fn=lambda torch, *a, **k: torch.bucketize(*a, **k)))

# ---------------------------------------------------------------- histc


def _ref_histc(a, bins=100, min=0, max=0):
    xs = [float(x) for x in np.asarray(a, dtype=object).reshape(-1)]
    lo, hi = float(min), float(max)
    if lo == hi and xs:
        lo, hi = builtins_min(xs), builtins_max(xs)
    if lo == hi:
        lo, hi = lo - 1, hi + 1
    counts = [0] * bins
    for x in xs:
        if lo <= x <= hi:
            counts[builtins_min(int((x - lo) * bins / (hi - lo)), bins - 1)] += 1
    return _arr(counts, (bins,))


builtins_min, builtins_max = min, max


def _histc_samples(dtype, rng):
    # values a quarter away from the bin edges, so float16's rounding picks no other bin
    t = ember.from_numpy(((rng.integers(0, 8, (4, 5)) + 0.25) / 2).astype(dtype))
    return [Sample((t, 4, 0, 4), desc="range", grad=False),
            Sample((t, 8), desc="data range", grad=False),
            Sample((t, 3, 1, 2), desc="outside ignored", grad=False),
            Sample((make((0,), dtype, rng), 5), desc="empty", grad=False)]


add(OpInfo("histc", _histc_samples, _ref_histc, dtypes=FLOATS,
           errors=lambda: [
               ErrorSample((ember.ones(3), -1), {}, RuntimeError, r"bins must be > 0",
                           "negative bins"),
               ErrorSample((ember.ones(3), 4, 2, 1), {}, RuntimeError,
                           r"max must be larger than min", "max < min"),
               ErrorSample((ember.ones(3, dtype=ember.int64),), {}, NotImplementedError,
                           r"not implemented for 'Long'", "integers")]))

# ---------------------------------------------------------------- unique


def _ref_unique(a, sorted=True, return_inverse=False, return_counts=False, dim=None):
    a = np.asarray(a, dtype=object)
    if dim is None:
        items = list(a.reshape(-1))
        keys = [_key(x) + (i if _isnan(x) else 0,) for i, x in enumerate(items)]
        uniq = builtins_sorted(set(keys))
        pos = {k: j for j, k in enumerate(uniq)}
        values = [items[keys.index(k)] for k in uniq]
        inverse = _arr([pos[k] for k in keys], a.shape)
        counts = [keys.count(k) for k in uniq]
        out = (_arr(values, (len(values),)),)
    else:
        d = dim % a.ndim
        moved = np.moveaxis(a, d, 0)
        rows = [tuple(r.reshape(-1)) for r in moved]
        uniq = builtins_sorted(set(rows))
        pos = {r: j for j, r in enumerate(uniq)}
        vals = np.empty((len(uniq),) + moved.shape[1:], dtype=object)
        for j, r in enumerate(uniq):
            vals[j] = np.asarray(r, dtype=object).reshape(moved.shape[1:])
        inverse = _arr([pos[r] for r in rows], (len(rows),))
        counts = [rows.count(r) for r in uniq]
        out = (np.moveaxis(vals, 0, d),)
    if return_inverse:
        out += (inverse,)
    if return_counts:
        out += (_arr(counts, (len(counts),)),)
    return out[0] if len(out) == 1 else out


builtins_sorted = sorted


def _unique_samples(dtype, rng):
    t = make((3, 5), dtype, rng, 0, 4)
    out = []
    for inv, cnt in itertools.product((False, True), repeat=2):
        out.append(Sample((t,), {"return_inverse": inv, "return_counts": cnt},
                          desc=f"inverse={inv} counts={cnt}", grad=False))
    rows = ember.from_numpy(np.array([[1, 2, 0], [0, 1, 1], [1, 2, 0], [0, 1, 0]],
                                     dtype=dtype))
    out.append(Sample((rows,), {"dim": 0, "return_inverse": True, "return_counts": True},
                      desc="dim 0", grad=False))
    out.append(Sample((rows,), {"dim": 1, "return_counts": True}, desc="dim 1", grad=False))
    out.append(Sample((make((0,), dtype, rng),), {"return_counts": True}, desc="empty",
                      grad=False))
    return out


add(OpInfo("unique", _unique_samples, _ref_unique,
           torch_fn=lambda torch, *a, **k: torch.unique(*a, **k)))


def _ref_unique_consecutive(a, return_inverse=False, return_counts=False, dim=None):
    a = np.asarray(a, dtype=object)
    if dim is None:
        rows = [(x,) for x in a.reshape(-1)]
        moved = a.reshape(-1)
    else:
        moved = np.moveaxis(a, dim % a.ndim, 0)
        rows = [tuple(r.reshape(-1)) for r in moved]
    firsts, inverse, counts = [], [], []
    for i, r in enumerate(rows):
        if i == 0 or r != rows[i - 1]:
            firsts.append(i)
            counts.append(0)
        inverse.append(len(firsts) - 1)
        counts[-1] += 1
    vals = moved[firsts] if firsts else moved[:0]
    if dim is not None:
        vals = np.moveaxis(vals, 0, dim % a.ndim)
    out = (np.asarray(vals, dtype=object),)
    if return_inverse:
        out += (_arr(inverse, a.shape if dim is None else (len(rows),)),)
    if return_counts:
        out += (_arr(counts, (len(counts),)),)
    return out[0] if len(out) == 1 else out


def _unique_consecutive_samples(dtype, rng):
    t = make((3, 5), dtype, rng, 0, 2)
    rows = ember.from_numpy(np.array([[1, 1, 0, 0], [1, 1, 0, 1], [0, 0, 1, 1]], dtype=dtype))
    return [Sample((t,), {"return_inverse": True, "return_counts": True}, grad=False),
            Sample((t,), grad=False),
            Sample((rows,), {"dim": 1, "return_inverse": True, "return_counts": True},
                   grad=False)]


add(OpInfo("unique_consecutive", _unique_consecutive_samples, _ref_unique_consecutive,
           torch_fn=lambda torch, *a, **k: torch.unique_consecutive(*a, **k)))

# ---------------------------------------------------------------- outer, products, blocks


def _ref_outer(a, b):
    a, b = list(np.asarray(a, dtype=object)), list(np.asarray(b, dtype=object))
    return _arr([x * y if not (isinstance(x, bool) and isinstance(y, bool)) else x and y
                 for x in a for y in b], (len(a), len(b)))


def _outer_samples(dtype, rng):
    return [Sample((make((3,), dtype, rng), make((4,), dtype, rng))),
            Sample((make((0,), dtype, rng), make((2,), dtype, rng))),
            Sample((make((2,), dtype, rng), make((3,), "float64", rng)), desc="promotes")]


def _outer_errors():
    return [ErrorSample((ember.ones(2, 2), ember.ones(2)), {}, RuntimeError,
                        r"outer: Expected 1-D argument self, but got 2-D", "2-d self")]


add(OpInfo("outer", _outer_samples, _ref_outer, composite_grad=True, errors=_outer_errors))
add(OpInfo("ger", _outer_samples, _ref_outer, composite_grad=True, errors=_outer_errors))


def _ref_cartesian_prod(*vs):
    vs = [list(np.asarray(v, dtype=object)) for v in vs]
    if len(vs) == 1:
        return np.asarray(vs[0], dtype=object)
    rows = list(itertools.product(*vs))
    return _arr([x for r in rows for x in r], (len(rows), len(vs)))


add(OpInfo("cartesian_prod", lambda dtype, rng: [
    Sample((make((2,), dtype, rng), make((3,), dtype, rng))),
    Sample((make((2,), dtype, rng), make((1,), dtype, rng), make((3,), dtype, rng))),
    Sample((make((4,), dtype, rng),), noncontig=False)],
    _ref_cartesian_prod, composite_grad=True,
    errors=lambda: [ErrorSample((ember.ones(2, 2),), {}, RuntimeError,
                                r"Expect a 1D vector, but got shape \[2, 2\]", "2-d")]))


def _ref_block_diag(*ts):
    mats = []
    for t in ts:
        t = np.asarray(t, dtype=object)
        mats.append(t.reshape(1, 1) if t.ndim == 0 else t.reshape(1, -1) if t.ndim == 1 else t)
    rows, cols = sum(m.shape[0] for m in mats), sum(m.shape[1] for m in mats)
    floaty = any(isinstance(x, float) for m in mats for x in m.reshape(-1))
    out = np.empty((rows, cols), dtype=object)
    out[...] = 0.0 if floaty else 0
    r = c = 0
    for m in mats:
        out[r:r + m.shape[0], c:c + m.shape[1]] = m
        r, c = r + m.shape[0], c + m.shape[1]
    return out


add(OpInfo("block_diag", lambda dtype, rng: [
    Sample((make((2, 2), dtype, rng), make((1, 3), dtype, rng))),
    Sample((make((2, 3), dtype, rng), make((), dtype, rng), make((2,), dtype, rng))),
    Sample((make((2, 0), dtype, rng), make((1, 2), dtype, rng)))],
    _ref_block_diag, composite_grad=True,
    errors=lambda: [ErrorSample((ember.ones(2, 2, 2),), {}, RuntimeError,
                                r"block_diag: Input tensors must have 2 or fewer dimensions",
                                "3-d")]))


def _ref_tri_indices(lower):
    def ref(row, col, offset=0, dtype=None):
        pairs = [(i, j) for i in range(row) for j in range(col)
                 if (j - i <= offset if lower else j - i >= offset)]
        return _arr([p[0] for p in pairs] + [p[1] for p in pairs], (2, len(pairs)))
    return ref


for _name, _lower in (("tril_indices", True), ("triu_indices", False)):
    add(OpInfo(_name, lambda dtype, rng: [
        Sample((3, 4), {"dtype": getattr(ember, dtype)}), Sample((4, 3, 1)),
        Sample((3, 3, -1), {"dtype": getattr(ember, dtype)}), Sample((0, 3)),
        Sample((3, 5, 7)), Sample((5, 3, -7))],
        _ref_tri_indices(_lower), dtypes=("int32", "int64"),
        errors=(lambda n: lambda: [ErrorSample((-1, 3), {}, RuntimeError,
                                               r"row must be non-negative", "negative row")])(
            _name)))


def _ref_diff(a, n=1, dim=-1, prepend=None, append=None):
    a = np.asarray(a, dtype=object)
    d = dim % a.ndim
    parts = []
    for p in (prepend, a, append):
        if p is None:
            continue
        p = np.asarray(p, dtype=object)
        if p.ndim == 0:
            shape = list(a.shape)
            shape[d] = 1
            p = np.broadcast_to(p, shape)
        parts.append(p)
    x = np.concatenate(parts, axis=d)
    for _ in range(n):
        m = x.shape[d]
        if m == 0:
            break
        hi = np.take(x, range(1, m), axis=d)
        lo = np.take(x, range(0, m - 1), axis=d)
        x = np.frompyfunc(lambda u, v: (u != v) if isinstance(u, bool) else u - v, 2, 1)(hi, lo)
        x = np.asarray(x, dtype=object)
    return x


add(OpInfo("diff", lambda dtype, rng: [
    Sample((make((3, 5), dtype, rng),)), Sample((make((3, 5), dtype, rng), 2, 0)),
    Sample((make((4,), dtype, rng), 1, -1, make((2,), dtype, rng), make((1,), dtype, rng))),
    Sample((make((2, 3), dtype, rng), 1, 1, make((2, 1), dtype, rng))),
    Sample((make((3,), dtype, rng), 5)), Sample((make((3,), dtype, rng), 0))],
    _ref_diff, composite_grad=True,
    errors=lambda: [ErrorSample((ember.tensor(1.0),), {}, RuntimeError,
                                r"diff expects input to be at least one-dimensional", "0-d"),
                    ErrorSample((ember.ones(3), -1), {}, RuntimeError,
                                r"order must be non-negative but got -1", "negative n")]))

# ---------------------------------------------------------------- repeat_interleave


def _ref_repeat_interleave(a, repeats, dim=None, output_size=None):
    a = np.asarray(a, dtype=object)
    if dim is None:
        a, d = a.reshape(-1), 0
    else:
        d = dim % max(a.ndim, 1)
        if a.ndim == 0:
            a = a.reshape(1)
    n = a.shape[d]
    reps = [repeats] * n if isinstance(repeats, int) else \
        [int(r) for r in np.asarray(repeats, dtype=object).reshape(-1)] * \
        (n if np.ndim(repeats) == 0 else 1)
    idx = [i for i in range(n) for _ in range(reps[i])]
    return np.take(a, idx, axis=d)


def _repeat_samples(int_form):
    def samples(dtype, rng):
        def reps(n):
            return 2 if int_form else ember.tensor(list(rng.integers(0, 3, n)))
        t = make((3, 4), dtype, rng)
        return [Sample((t, reps(12))), Sample((t, reps(3), 0)), Sample((t, reps(4), -1)),
                Sample((make((), dtype, rng), reps(1))),
                Sample((make((2, 3), dtype, rng), 2 if int_form else ember.tensor(3), 1))]
    return samples


add(OpInfo("repeat_interleave.self_int", _repeat_samples(True), _ref_repeat_interleave,
           composite_grad=True,
           torch_fn=lambda torch, *a, **k: torch.repeat_interleave(*a, **k),
           errors=lambda: [ErrorSample((ember.ones(3), -1), {}, RuntimeError,
                                       r"Repeats must be non-negative", "negative")]))
add(OpInfo("repeat_interleave.self_Tensor", _repeat_samples(False), _ref_repeat_interleave,
           composite_grad=True,
           torch_fn=lambda torch, *a, **k: torch.repeat_interleave(*a, **k),
           errors=lambda: [ErrorSample((ember.ones(3), ember.tensor([1, 2])), {}, RuntimeError,
                                       r"repeats must have the same size as input along dim",
                                       "sizes differ")]))
add(OpInfo("repeat_interleave.Tensor", lambda dtype, rng: [
    Sample((ember.tensor([2, 0, 3], dtype=getattr(ember, dtype)),)),
    Sample((ember.tensor([1], dtype=getattr(ember, dtype)),))],
    lambda r, output_size=None: _arr([i for i, k in enumerate(np.asarray(r, dtype=object))
                                      for _ in range(int(k))], (int(sum(r)),)),
    dtypes=("int32", "int64"),
    torch_fn=lambda torch, *a, **k: torch.repeat_interleave(*a, **k)))

# ---------------------------------------------------------------- cdist


def _ref_cdist(x1, x2, p=2.0, compute_mode=None):
    x1, x2 = np.asarray(x1, dtype=object), np.asarray(x2, dtype=object)
    batch = np.broadcast_shapes(x1.shape[:-2], x2.shape[:-2])
    x1 = np.broadcast_to(x1, batch + x1.shape[-2:])
    x2 = np.broadcast_to(x2, batch + x2.shape[-2:])
    out = np.empty(batch + (x1.shape[-2], x2.shape[-2]), dtype=object)
    for ix in np.ndindex(*out.shape):
        b, i, j = ix[:-2], ix[-2], ix[-1]
        d = [abs(float(u) - float(v)) for u, v in zip(x1[b + (i,)], x2[b + (j,)])]
        if p == 0:
            out[ix] = float(sum(1 for x in d if x != 0))
        elif p == math.inf:
            out[ix] = max(d, default=0.0)
        else:
            out[ix] = math.fsum(x ** p for x in d) ** (1.0 / p)
    return out


def _cdist_samples(dtype, rng):
    a, b = make((4, 3), dtype, rng), make((5, 3), dtype, rng)
    return [Sample((a, b)), Sample((a, b, 1.0)), Sample((a, b, 3.0)),
            Sample((a, b, 0.0), grad=False), Sample((a, b, math.inf)),
            Sample((make((2, 3, 2), dtype, rng), make((2, 4, 2), dtype, rng)))]


add(OpInfo("cdist", _cdist_samples, _ref_cdist, dtypes=("float32", "float64"),
           composite_grad=True, reduction=True,
           errors=lambda: [
               ErrorSample((ember.ones(2, 3, dtype=ember.int64),
                            ember.ones(2, 3, dtype=ember.int64)), {}, RuntimeError,
                           r"cdist only supports floating-point dtypes, X1 got: Long", "ints"),
               ErrorSample((ember.ones(2, 3), ember.ones(2, 4)), {}, RuntimeError,
                           r"X1 and X2 must have the same number of columns", "columns")]))

# ---------------------------------------------------------------- take, index_copy/fill


def _ref_take(a, index):
    flat = list(np.asarray(a, dtype=object).reshape(-1))
    index = np.asarray(index, dtype=object)
    return _arr([flat[int(i)] for i in index.reshape(-1)], index.shape)


add(OpInfo("take", lambda dtype, rng: [
    Sample((make((3, 4), dtype, rng), ember.tensor([[0, 5], [-1, 11]]))),
    Sample((make((5,), dtype, rng), ember.tensor(2))),
    Sample((make((2, 2), dtype, rng), ember.tensor([], dtype=ember.int64)))],
    _ref_take, composite_grad=True,
    errors=lambda: [
        ErrorSample((ember.ones(2, 3), ember.tensor([6])), {}, IndexError,
                    r"out of range: tried to access index 6 on a tensor of 6 elements",
                    "out of range", data=True),
        ErrorSample((ember.ones(2, 3), ember.tensor([1.0])), {}, RuntimeError,
                    r"take\(\): Expected a long tensor for index, but got Float", "float")]))


def _ref_index_copy(a, dim, index, source):
    out = np.array(a, dtype=object)
    src = np.asarray(source, dtype=object)
    if out.ndim == 0:
        return np.array(src.reshape(()), dtype=object) if len(index) else out
    d = dim % out.ndim
    for j, i in enumerate(np.asarray(index, dtype=object).reshape(-1)):
        key = [slice(None)] * out.ndim
        key[d] = int(i)
        skey = [slice(None)] * out.ndim
        skey[d] = j
        out[tuple(key)] = src[tuple(skey)]
    return out


def _index_copy_samples(dtype, rng):
    t = make((4, 3), dtype, rng)
    return [Sample((t, 0, ember.tensor([3, 0]), make((2, 3), dtype, rng))),
            Sample((t, 1, ember.tensor([2, 0]), make((4, 2), dtype, rng))),
            Sample((t, 0, ember.tensor([], dtype=ember.int64), make((0, 3), dtype, rng)))]


def _index_copy_errors(name):
    return lambda: [
        ErrorSample((ember.ones(3), 0, ember.tensor([3]), ember.ones(1)), {}, IndexError,
                    r"index_copy_\(\): index 3 is out of bounds for dimension 0 with size 3",
                    "out of bounds", data=True),
        ErrorSample((ember.ones(3), 0, ember.tensor([0]), ember.ones(1, dtype=ember.float64)),
                    {}, RuntimeError, r"index_copy_\(\): self and source expected to have the "
                    r"same dtype", "dtypes")]


add(OpInfo("index_copy", _index_copy_samples, _ref_index_copy, composite_grad=True,
           errors=_index_copy_errors("index_copy")))


def _inplace(name, functional):
    method = name

    def call(*args, **kwargs):
        self = args[0].clone()
        r = getattr(self, method)(*args[1:], **kwargs)
        assert r is self, f"{name} must return self"
        return r

    def torch_fn(torch, self, *args, **kwargs):
        return getattr(self.clone(), method)(*args, **kwargs)
    return call, torch_fn


def _add_inplace(key, method, samples, ref, errors=None):
    info = add(OpInfo(key, samples, ref, errors=errors, inplace=True,
                      torch_fn=_inplace(method, None)[1]))
    info.call = _inplace(method, None)[0]


_add_inplace("index_copy_", "index_copy_", _index_copy_samples, _ref_index_copy,
             _index_copy_errors("index_copy_"))


def _ref_index_fill(a, dim, index, value):
    out = np.array(a, dtype=object)
    v = value[()] if isinstance(value, np.ndarray) else value
    if out.ndim == 0:
        if len(np.asarray(index).reshape(-1)):
            out[()] = v
        return out
    d = dim % out.ndim
    for i in np.asarray(index, dtype=object).reshape(-1):
        key = [slice(None)] * out.ndim
        key[d] = int(i)
        out[tuple(key)] = v
    return out


def _index_fill_samples(tensor_value):
    def samples(dtype, rng):
        def val(x):
            if tensor_value:
                return ember.tensor(x, dtype=getattr(ember, dtype))
            return x
        t = make((4, 3), dtype, rng)
        v = True if dtype == "bool" else 2
        return [Sample((t, 0, ember.tensor([3, 0, 3]), val(v))),
                Sample((t, -1, ember.tensor([-1]), val(v))),
                Sample((make((), dtype, rng), 0, ember.tensor([0]), val(v))),
                Sample((t, 1, ember.tensor([], dtype=ember.int64), val(v)))]
    return samples


def _index_fill_errors(name):
    return lambda: [
        ErrorSample((ember.ones(3), 0, ember.tensor([3]), 1.0), {}, IndexError,
                    r"index 3 is out of bounds for dimension 0 with size 3", "out of bounds",
                    data=True)]


for _tail, _tv in (("int_Tensor", True), ("int_Scalar", False)):
    add(OpInfo(f"index_fill.{_tail}", _index_fill_samples(_tv), _ref_index_fill,
               composite_grad=True, errors=_index_fill_errors("index_fill")
               if not _tv else None,
               torch_fn=lambda torch, *a, **k: torch.index_fill(*a, **k)))
    _add_inplace(f"index_fill_.{_tail}", "index_fill_", _index_fill_samples(_tv),
                 _ref_index_fill)


def _ref_masked_scatter(a, mask, source):
    a, mask = np.broadcast_arrays(np.asarray(a, dtype=object), np.asarray(mask, dtype=object))
    out = np.array(a, dtype=object)
    src = iter(np.asarray(source, dtype=object).reshape(-1))
    for ix in np.ndindex(*out.shape):
        if mask[ix]:
            out[ix] = next(src)
    return out


def _masked_scatter_samples(dtype, rng):
    t = make((3, 4), dtype, rng)
    return [Sample((t, make((3, 4), "bool", rng), make((12,), dtype, rng))),
            Sample((t, make((4,), "bool", rng), make((3, 5), dtype, rng)), desc="broadcast"),
            Sample((t, ember.zeros(3, 4, dtype=ember.bool), make((0,), dtype, rng)))]


def _masked_scatter_errors():
    return [ErrorSample((ember.ones(3), ember.tensor([True, True, True]), ember.ones(2)), {},
                        RuntimeError, r"Number of elements of source < number of ones in mask",
                        "short source", data=True),
            ErrorSample((ember.ones(3), ember.tensor([True, True, True]),
                         ember.ones(3, dtype=ember.float64)), {}, RuntimeError,
                        r"masked_scatter: expected self and source to have same dtypes",
                        "dtypes")]


add(OpInfo("masked_scatter", _masked_scatter_samples, _ref_masked_scatter,
           composite_grad=True, errors=_masked_scatter_errors))
_add_inplace("masked_scatter_", "masked_scatter_",
             lambda dtype, rng: _masked_scatter_samples(dtype, rng)[::2], _ref_masked_scatter)

# ---------------------------------------------------------------- multinomial


def _ref_multinomial(p, num_samples, replacement=False, generator=None):
    """Only for one-hot rows: the draw is certain (every draw of a replacement sample,
    the first draw otherwise)."""
    p = np.asarray(p, dtype=object)
    rows = p.reshape(-1, p.shape[-1])
    picks = [[max(range(len(r)), key=lambda i: r[i])] * num_samples for r in rows]
    out = _arr([x for r in picks for x in r], (len(picks), num_samples))
    return out.reshape(num_samples) if p.ndim == 1 else out


def _multinomial_samples(dtype, rng):
    onehot = np.zeros((3, 5), dtype=dtype)
    onehot[np.arange(3), rng.integers(0, 5, 3)] = 2
    t = ember.from_numpy(onehot)
    return [Sample((t, 4, True), grad=False), Sample((t, 1), grad=False),
            Sample((t[1], 3, True), grad=False, noncontig=False)]


add(OpInfo("multinomial", _multinomial_samples, _ref_multinomial, dtypes=FLOATS,
           errors=lambda: [
               ErrorSample((ember.tensor([1.0, -1.0, 1.0]), 1), {}, RuntimeError,
                           r"probability tensor contains either `inf`, `nan` or element < 0",
                           "negative", data=True),
               ErrorSample((ember.ones(2, 2, 2), 1), {}, RuntimeError,
                           r"prob_dist must be 1 or 2 dim", "3-d"),
               ErrorSample((ember.zeros(3), 1), {}, RuntimeError,
                           r"invalid multinomial distribution \(sum of probabilities <= 0\)",
                           "zero sum", data=True),
               ErrorSample((ember.ones(3), 4), {}, RuntimeError,
                           r"cannot sample n_sample > prob_dist.size\(-1\) samples without "
                           r"replacement", "too many"),
               ErrorSample((ember.ones(3, dtype=ember.int64), 1), {}, RuntimeError,
                           r"multinomial only supports floating-point dtypes for input", "int")]))
