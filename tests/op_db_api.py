"""The op database's entries for python/ember/ops/pointwise_composites.py, products.py
and arranging.py (sgn ... prelu, dot ... addbmm, broadcast_to ... count_nonzero), loaded
by op_db.py. References apply Python's math module per element, or explicit loops over
Python numbers for the products, windows and NaN-skipping sums; none calls the ops they
check or the NumPy functions those ops call."""
from __future__ import annotations

import math

import numpy as np

import ember
from op_db import (ALL, FLOATS, INTS, NO_BOOL, ErrorSample, OpInfo, Sample, _F, _float_ref,
                   _with_specials, add, binary_samples, elementwise, make, unary_samples)


def _obj(x):
    a = np.empty(np.shape(x), dtype=object)
    a[...] = x
    return a


def _isnan(x):
    return isinstance(x, float) and math.isnan(x)


# ------------------------------------------------------------------ pointwise


def _unary(name, fn, samples=None, dtypes=FLOATS, torch_fn=None, **kw):
    add(OpInfo(name, samples or _with_specials(unary_samples()), elementwise(fn, 1),
               dtypes=dtypes, torch_fn=torch_fn, composite_grad=True, **kw))


def _selu(x):
    alpha, scale = 1.6732632423543772848170429916717, 1.0507009873554804934193349852946
    return scale * x if x > 0 else scale * alpha * math.expm1(x)


_unary("selu", _float_ref(_selu))
_unary("celu", _float_ref(lambda x: x if x > 0 else math.expm1(x)))
_unary("hardsigmoid", _float_ref(lambda x: min(max(x + 3, 0.0), 6.0) / 6), torch_fn=_F("hardsigmoid"))
_unary("hardswish", _float_ref(lambda x: x * min(max(x + 3, 0.0), 6.0) / 6),
       torch_fn=_F("hardswish"))
_unary("softsign", _float_ref(lambda x: x / (1 + abs(x))), torch_fn=_F("softsign"))
_unary("tanhshrink", _float_ref(lambda x: x - math.tanh(x)), torch_fn=_F("tanhshrink"))
_unary("softshrink", _float_ref(lambda x: x - 0.5 if x > 0.5 else x + 0.5 if x < -0.5 else 0.0),
       torch_fn=_F("softshrink"))
_unary("hardshrink", lambda x: x if abs(x) > 0.5 or _isnan(x) else 0 * x)
_unary("sinc", _float_ref(lambda x: 1.0 if x == 0 else math.sin(math.pi * x) / (math.pi * x)))
_unary("deg2rad", _float_ref(lambda x: x * (math.pi / 180.0)))
_unary("rad2deg", _float_ref(lambda x: x * (180.0 / math.pi)))
_unary("logit", _float_ref(lambda x: math.log(x / (1 - x)) if 0 < x < 1 else
                           (-math.inf if x == 0 else math.inf if x == 1 else math.nan)),
       samples=_with_specials(unary_samples(0.05, 0.95)))
_unary("signbit", lambda x: math.copysign(1.0, float(x)) < 0, dtypes=ALL)


def _sgn_ref(x):
    if isinstance(x, bool):
        return x
    if _isnan(x):
        return 0.0
    return (x > 0) - (x < 0)


_unary("sgn", _sgn_ref, samples=unary_samples(), dtypes=ALL)
_unary("positive", lambda x: x, samples=unary_samples(), dtypes=NO_BOOL)


def _threshold_samples(dtype, rng):
    return [Sample((make((3, 4), dtype, rng), 0.5, -7.0), desc="threshold 0.5"),
            Sample((make((5,), dtype, rng), -1.0, 2.0), desc="threshold -1")]


add(OpInfo("threshold", _threshold_samples,
           lambda x, t, v: elementwise(lambda a: a if a > t or _isnan(a) else v, 1)(x),
           dtypes=FLOATS, composite_grad=True))


def _binary(name, fn, samples=None, dtypes=FLOATS, **kw):
    add(OpInfo(name, samples or binary_samples(numbers=()), elementwise(fn, 2),
               dtypes=dtypes, composite_grad=True, **kw))


def _xlogy(a, b):
    if _isnan(b):
        return math.nan
    if a == 0:
        return 0.0
    return _float_ref(lambda x, y: x * math.log(y) if y > 0 else
                      (-math.inf * x if y == 0 else math.nan))(a, b)


_binary("xlogy", _xlogy, binary_samples(0.0, 3.0, 0.1, 3.0, numbers=(2.0,)))
_binary("hypot", _float_ref(math.hypot))
_binary("copysign", _float_ref(math.copysign), binary_samples(numbers=(-1.0,)))
_binary("fmax", lambda a, b: b if _isnan(a) else a if _isnan(b) else max(a, b))
_binary("fmin", lambda a, b: b if _isnan(a) else a if _isnan(b) else min(a, b))


def _logaddexp(a, b, base=math.e):
    a, b = float(a), float(b)
    if math.isnan(a) or math.isnan(b):
        return math.nan
    hi, lo = max(a, b), min(a, b)
    if math.isinf(hi):
        return hi
    return hi + math.log1p(base ** (lo - hi)) / math.log(base)


_binary("logaddexp", _logaddexp)
_binary("logaddexp2", lambda a, b: _logaddexp(a, b, 2.0))


def _ref_fmod(a, b):
    if isinstance(a, float) or isinstance(b, float):
        return math.nan if b == 0 else math.fmod(float(a), float(b))
    return int(math.fmod(int(a), int(b)))


def _fmod_samples(dtype, rng):
    out = binary_samples(nonzero=True, low=-7, high=7, numbers=(3, -2.5), mixed=False)(
        dtype, rng)
    if dtype in FLOATS:
        a = np.array([7.0, -7.0, 7.0, -7.0, 0.0, 5.5, -5.5, 1.0], dtype=dtype)
        b = np.array([2.0, 2.0, -2.0, -2.0, 3.0, 0.0, 0.0, 0.1], dtype=dtype)
        out.append(Sample((ember.from_numpy(a), ember.from_numpy(b)), desc="signs, zero",
                          grad=False))
    return out


add(OpInfo("fmod", _fmod_samples, elementwise(_ref_fmod, 2), dtypes=NO_BOOL,
           errors=lambda: [
               ErrorSample((ember.ones(2, dtype=ember.int64), ember.zeros(2, dtype=ember.int64)),
                           {}, RuntimeError, r"fmod\(\)|ZeroDivision", "integer division by "
                           "zero", data=True),
               ErrorSample((ember.ones(2, dtype=ember.bool), ember.ones(2, dtype=ember.bool)),
                           {}, NotImplementedError, r"fmod\(\).*Bool", "bool")]))


def _float_power_ref(a, b):
    a, b = float(a), float(b)
    if a == 0 and b < 0:
        return math.inf
    return _float_ref(lambda x, y: x ** y)(a, b)


add(OpInfo("float_power", binary_samples(0.5, 3.0, -2.0, 2.0, numbers=(2, 0.5)),
           elementwise(_float_power_ref, 2), dtypes=NO_BOOL, composite_grad=True))


def _rsub_samples(dtype, rng):
    return [Sample((make((2, 3), dtype, rng), make((2, 3), dtype, rng)), desc="tensors"),
            Sample((make((2, 3), dtype, rng), make((3,), dtype, rng)), {"alpha": 2},
                   desc="alpha 2, broadcast"),
            Sample((make((4,), dtype, rng), 3), desc="number other")]


add(OpInfo("rsub", _rsub_samples, lambda a, b, alpha=1: np.asarray(
    b - a * alpha if not isinstance(b, (int, float)) else b - a * alpha, dtype=object),
           dtypes=NO_BOOL, composite_grad=True))


def _heaviside_samples(dtype, rng):
    out = [Sample((make((2, 3), dtype, rng, -1, 2), make((3,), dtype, rng)), desc="broadcast",
                  grad=False)]
    if dtype in FLOATS:
        x = ember.from_numpy(np.array([-1.5, 0.0, 2.0, 0.0, -0.0], dtype=dtype))
        v = ember.from_numpy(np.array([0.5, 0.25, 3.0, -1.0, 7.0], dtype=dtype))
        out.append(Sample((x, v), desc="zeros and signs", grad=False))
    return out


add(OpInfo("heaviside", _heaviside_samples,
           elementwise(lambda x, v: v if x == 0 else (0 if x < 0 else 1), 2),
           dtypes=INTS + ("float32", "float64")))


def _prelu_samples(dtype, rng):
    return [Sample((make((2, 3, 4), dtype, rng), make((3,), dtype, rng, 0.0, 1.0)),
                   desc="per channel"),
            Sample((make((5, 2), dtype, rng), make((1,), dtype, rng, 0.0, 1.0)), desc="one")]


def _prelu_ref(x, w):
    w = np.asarray(w, dtype=object).reshape(-1)
    if len(w) == 1:
        wb = w[0]
    else:
        wb = w.reshape((1, len(w)) + (1,) * (x.ndim - 2))
    return np.asarray(np.where(x > 0, x, x * wb), dtype=object)


add(OpInfo("prelu", _prelu_samples, _prelu_ref, dtypes=FLOATS, composite_grad=True))

# ------------------------------------------------------------------ products


def _matmul_ref(a, b):
    a, b = np.asarray(a, dtype=object), np.asarray(b, dtype=object)
    out = np.empty((a.shape[0], b.shape[1]), dtype=object)
    for i in range(a.shape[0]):
        for j in range(b.shape[1]):
            out[i, j] = math.fsum(float(a[i, k]) * float(b[k, j]) for k in range(a.shape[1])) \
                if a.dtype == object and a.size and isinstance(a.flat[0], float) else \
                sum(a[i, k] * b[k, j] for k in range(a.shape[1]))
    return out


def _vec(dtype, rng, n=5):
    return make((n,), dtype, rng)


_PROD_DTYPES = ("float32", "float64") + INTS


add(OpInfo("dot", lambda d, r: [Sample((_vec(d, r), _vec(d, r)))],
           lambda a, b: _matmul_ref(a.reshape(1, -1), b.reshape(-1, 1)).reshape(()),
           dtypes=_PROD_DTYPES, reduction=True, composite_grad=True,
           errors=lambda: [ErrorSample((ember.ones(3), ember.ones(4)), {}, RuntimeError,
                                       "inconsistent", "sizes"),
                           ErrorSample((ember.ones(3), ember.ones(3, dtype=ember.float64)), {},
                                       RuntimeError, "same dtype", "dtypes")]))
add(OpInfo("vdot", lambda d, r: [Sample((_vec(d, r), _vec(d, r)))],
           lambda a, b: _matmul_ref(a.reshape(1, -1), b.reshape(-1, 1)).reshape(()),
           dtypes=_PROD_DTYPES, reduction=True, composite_grad=True))
add(OpInfo("mv", lambda d, r: [Sample((make((3, 4), d, r), _vec(d, r, 4)))],
           lambda m, v: _matmul_ref(m, v.reshape(-1, 1)).reshape(-1),
           dtypes=_PROD_DTYPES, reduction=True, composite_grad=True))
add(OpInfo("inner", lambda d, r: [Sample((make((2, 3, 4), d, r), make((5, 4), d, r))),
                                   Sample((make((4,), d, r), make((4,), d, r)), noncontig=False)],
           lambda a, b: _matmul_ref(a.reshape(-1, a.shape[-1]),
                                    b.reshape(-1, b.shape[-1]).T).reshape(
               a.shape[:-1] + b.shape[:-1]),
           dtypes=_PROD_DTYPES, reduction=True, composite_grad=True))


def _scaled(c, p, beta, alpha):
    return np.asarray(p * alpha if beta == 0 else c * beta + p * alpha, dtype=object)


add(OpInfo("addmv", lambda d, r: [
    Sample((_vec(d, r, 3), make((3, 4), d, r), _vec(d, r, 4)), {"beta": 2, "alpha": 3}),
    Sample((_vec(d, r, 1), make((3, 4), d, r), _vec(d, r, 4)), {"beta": 0})],
    lambda c, m, v, beta=1, alpha=1: _scaled(c, _matmul_ref(m, v.reshape(-1, 1)).reshape(-1),
                                             beta, alpha),
    dtypes=("float32", "float64"), reduction=True, composite_grad=True))
add(OpInfo("addr", lambda d, r: [
    Sample((make((3, 4), d, r), _vec(d, r, 3), _vec(d, r, 4)), {"alpha": 2})],
    lambda c, a, b, beta=1, alpha=1: _scaled(c, _matmul_ref(a.reshape(-1, 1),
                                                            b.reshape(1, -1)), beta, alpha),
    dtypes=("float32", "float64"), composite_grad=True))


def _bmm_ref(a, b):
    return np.stack([_matmul_ref(a[i], b[i]) for i in range(a.shape[0])])


add(OpInfo("baddbmm", lambda d, r: [
    Sample((make((2, 3, 5), d, r), make((2, 3, 4), d, r), make((2, 4, 5), d, r)),
           {"beta": 0.5, "alpha": 2})],
    lambda c, a, b, beta=1, alpha=1: _scaled(c, _bmm_ref(a, b), beta, alpha),
    dtypes=("float32", "float64"), reduction=True, composite_grad=True))
add(OpInfo("addbmm", lambda d, r: [
    Sample((make((3, 5), d, r), make((2, 3, 4), d, r), make((2, 4, 5), d, r)))],
    lambda c, a, b, beta=1, alpha=1: _scaled(c, _bmm_ref(a, b).sum(0), beta, alpha),
    dtypes=("float32", "float64"), reduction=True, composite_grad=True))

# ------------------------------------------------------------------ arranging


add(OpInfo("broadcast_to", lambda d, r: [Sample((make((3, 1), d, r), [2, 3, 4]))],
           lambda a, size: np.broadcast_to(a, size).copy(), composite_grad=True))
add(OpInfo("ravel", lambda d, r: [Sample((make((3, 4), d, r),))],
           lambda a: np.asarray(a, dtype=object).reshape(-1).copy(), composite_grad=True))


def _rot90_ref(a, k=1, dims=(0, 1)):
    a = np.asarray(a, dtype=object)
    for _ in range(k % 4):     # one turn: out[i, j] = a[j, n - 1 - i] in the dims' plane
        a = np.flip(np.swapaxes(a, dims[0], dims[1]), dims[0])
    return a.copy()


add(OpInfo("rot90", lambda d, r: [Sample((make((2, 3, 4), d, r), k, [1, 2]))
                                   for k in (1, 2, 3, -1)] +
           [Sample((make((3, 4), d, r),))], _rot90_ref, composite_grad=True))
add(OpInfo("fliplr", lambda d, r: [Sample((make((3, 4), d, r),))],
           lambda a: a[:, ::-1].copy(), composite_grad=True))
add(OpInfo("flipud", lambda d, r: [Sample((make((3, 4), d, r),))],
           lambda a: a[::-1].copy(), composite_grad=True))


def _diagflat_ref(a, offset=0):
    v = list(np.asarray(a, dtype=object).reshape(-1))
    n = len(v) + abs(offset)
    out = np.empty((n, n), dtype=object)
    out[...] = v[0] * 0 if v else 0
    for i, x in enumerate(v):
        out[(i, i + offset) if offset >= 0 else (i - offset, i)] = x
    return out


add(OpInfo("diagflat", lambda d, r: [Sample((make((2, 2), d, r),)),
                                      Sample((make((3,), d, r), -1))],
           _diagflat_ref, composite_grad=True))


def _take_along_ref(a, idx, dim=None):
    a = np.asarray(a, dtype=object)
    if dim is None:
        flat = a.reshape(-1)
        return _obj([flat[int(i)] for i in np.asarray(idx).reshape(-1)])
    return np.take_along_axis(a, np.asarray(idx, dtype=np.int64), dim)


add(OpInfo("take_along_dim", lambda d, r: [
    Sample((make((3, 4), d, r), ember.tensor([[0, 3], [1, 1], [2, 0]])), {"dim": 1}),
    Sample((make((3, 4), d, r), ember.tensor([0, 11, 5])), noncontig=False),
    Sample((make((3, 4), d, r), ember.tensor([[2, 0, 1, 1]]), 0))],
    _take_along_ref, composite_grad=True))


def _unfold_ref(a, dim, size, step):
    a = np.asarray(a, dtype=object)
    n = a.shape[dim]
    wins = [np.take(a, range(s, s + size), axis=dim) for s in range(0, n - size + 1, step)]
    out = np.stack(wins, axis=dim)         # windows where the dim was
    return np.moveaxis(out, dim + 1, -1).copy()


_info = add(OpInfo("unfold", lambda d, r: [Sample((make((3, 7), d, r), 1, 3, 2)),
                                            Sample((make((5, 2), d, r), 0, 2, 1))],
                   _unfold_ref, composite_grad=True))


def _nan_samples(dtype, rng):
    a = make((3, 4), dtype, rng)
    out = [Sample((a,), desc="all"), Sample((make((3, 4), dtype, rng), 1, True),
                                            desc="dim 1 keepdim")]
    if dtype in FLOATS:
        b = a.numpy().copy()
        b[0, 1] = b[2, 2] = np.nan
        out.append(Sample((ember.from_numpy(b), 0), desc="NaNs", grad=False))
    return out


def _nansum_ref(a, dim=None, keepdim=False):
    a = np.asarray(a, dtype=object)
    z = np.where(np.frompyfunc(_isnan, 1, 1)(a).astype(bool), 0.0, a)
    if dim is None:
        return _obj(sum(z.reshape(-1)))
    return np.asarray(z.sum(axis=dim, keepdims=keepdim), dtype=object)


def _nanmean_ref(a, dim=None, keepdim=False):
    a = np.asarray(a, dtype=object)
    keep = ~np.frompyfunc(_isnan, 1, 1)(a).astype(bool)
    s = _nansum_ref(a, dim, keepdim)
    c = keep.sum() if dim is None else keep.sum(axis=dim, keepdims=keepdim)
    return np.asarray(np.frompyfunc(lambda x, n: x / n if n else math.nan, 2, 1)(s, c),
                      dtype=object)


add(OpInfo("nansum", _nan_samples, _nansum_ref, dtypes=FLOATS, reduction=True,
           composite_grad=True))
add(OpInfo("nanmean", _nan_samples, _nanmean_ref, dtypes=FLOATS, reduction=True,
           composite_grad=True))
add(OpInfo("count_nonzero", lambda d, r: [Sample((make((3, 4), d, r, -1, 2),)),
                                           Sample((make((3, 4), d, r, -1, 2), [1]))],
           lambda a, dim=None: _obj(sum(1 for x in np.asarray(a).reshape(-1) if x != 0))
           if dim is None else np.asarray((np.asarray(a) != 0).sum(axis=tuple(dim)),
                                          dtype=object)))

# ------------------------------------------------------------------ tests, integers, more


def _inf_samples(dtype, rng):
    out = [Sample((make((2, 3), dtype, rng),), desc="values", grad=False)]
    if dtype in FLOATS:
        out.append(Sample((ember.from_numpy(np.array([math.inf, -math.inf, math.nan, 0.0, 2.5],
                                                     dtype=dtype)),), desc="specials",
                          grad=False))
    return out


add(OpInfo("isposinf", _inf_samples, elementwise(lambda x: x == math.inf, 1)))
add(OpInfo("isneginf", _inf_samples, elementwise(lambda x: x == -math.inf, 1)))
add(OpInfo("isreal", _inf_samples, elementwise(lambda x: True, 1)))


def _int_pair_samples(dtype, rng):
    return [Sample((make((2, 3), dtype, rng, -20, 20), make((2, 3), dtype, rng, -20, 20)),
                   grad=False),
            Sample((make((4, 1), dtype, rng, 0, 30), make((3,), dtype, rng, 1, 30)),
                   desc="broadcast", grad=False)]


def _ref_gcd(a, b):
    return math.gcd(int(a), int(b))


def _ref_lcm(a, b):
    a, b = int(a), int(b)
    return 0 if a == 0 or b == 0 else abs(a * b) // math.gcd(a, b)


add(OpInfo("gcd", _int_pair_samples, elementwise(_ref_gcd, 2), dtypes=INTS))
add(OpInfo("lcm", _int_pair_samples, elementwise(_ref_lcm, 2), dtypes=INTS))
add(OpInfo("msort", lambda d, r: [Sample((make((4, 3), d, r),), grad=False)],
           lambda a: np.asarray(np.sort(np.asarray(a, dtype=object), axis=0), dtype=object),
           dtypes=NO_BOOL))
add(OpInfo("dist", lambda d, r: [Sample((make((2, 3), d, r), make((3,), d, r))),
                                  Sample((make((4,), d, r), make((4,), d, r), 1))],
           lambda a, b, p=2: _obj(sum(abs(float(x)) ** p for x in
                                      np.asarray(a - b, dtype=object).reshape(-1)) ** (1 / p)),
           dtypes=FLOATS, reduction=True, composite_grad=True))


def _ref_logcumsumexp(a, dim):
    a = np.asarray(a, dtype=object)
    out = np.empty(a.shape, dtype=object)
    moved_in, moved_out = np.moveaxis(a, dim, -1), np.moveaxis(out, dim, -1)
    for idx in np.ndindex(*moved_in.shape[:-1]):
        acc = []
        for k, x in enumerate(moved_in[idx]):
            acc.append(float(x))
            m = max(acc)
            moved_out[idx + (k,)] = m + math.log(math.fsum(math.exp(v - m) for v in acc))
    return out


add(OpInfo("logcumsumexp", lambda d, r: [Sample((make((3, 4), d, r), 1)),
                                          Sample((make((5,), d, r), 0))],
           _ref_logcumsumexp, dtypes=FLOATS, reduction=True, composite_grad=True))


def _ref_isin(e, t, assume_unique=False, invert=False):
    vals = set(np.asarray(t, dtype=object).reshape(-1).tolist())
    return np.asarray(np.frompyfunc(lambda x: (x in vals) != invert, 1, 1)(e), dtype=object)


add(OpInfo("isin", lambda d, r: [Sample((make((3, 4), d, r, -3, 3), make((3,), d, r, -3, 3)),
                                        grad=False),
                                 Sample((make((5,), d, r, -3, 3), make((2,), d, r, -3, 3)),
                                        {"invert": True}, grad=False)],
           _ref_isin, dtypes=NO_BOOL))


import op_db_special  # noqa: E402,F401  (the special functions)
import op_db_fft  # noqa: E402,F401  (the DFT prims)
