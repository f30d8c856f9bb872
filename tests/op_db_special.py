"""The op database's entries for python/ember/ops/special_functions.py (lgamma, digamma,
polygamma, mvlgamma, erfinv, i0 and special_i0e/i1/i1e, special_ndtri, special_erfcx,
special_zeta, special_entr, special_ndtr, special_log_ndtr, special_xlog1py), loaded by
op_db_api.py. References are mpmath's functions at 40 digits (mpmath comes with torch's
sympy) or Python's math module, element by element; none calls ember or NumPy's special
functions."""
from __future__ import annotations

import math

import numpy as np

import ember
from op_db import (FLOATS, ErrorSample, OpInfo, Sample, _special_sample, add, binary_samples,
                   elementwise, make, unary_samples)

try:
    import mpmath
    mpmath.mp.dps = 40
except ImportError:        # without mpmath only shapes and dtypes are checked
    mpmath = None


def _mp(fn):
    """fn applied in mpmath to float(x): a float, NaN for NaN inputs and complex results."""
    def f(*a):
        a = [float(x) for x in a]
        if any(math.isnan(x) for x in a):
            return math.nan
        r = fn(*[mpmath.mpf(x) for x in a])
        if isinstance(r, mpmath.mpc):
            return math.nan
        return float(r)
    return f if mpmath is not None else None


def _ref(fn, nin=1):
    return elementwise(fn, nin) if fn is not None else None


def _specials(values, wide=()):
    """The special values; also `wide` ones (their results overflow half types) for
    float32 and float64."""
    def samples(dtype, rng):
        return _special_sample(dtype, values + (wide if dtype in ("float32", "float64")
                                                else ()))
    return samples


def _join(*makers):
    def samples(dtype, rng):
        return [s for m in makers for s in m(dtype, rng)]
    return samples


def _negative(low, high):
    def samples(dtype, rng):
        if dtype not in FLOATS:
            return []
        return [Sample((make((6,), dtype, rng, low, high),), desc="negative", grad=False)]
    return samples


NO_HALF = ("float32", "float64")      # PyTorch has no float16/bfloat16 kernel


def _unary(name, fn, samples, torch_fn=None, dtypes=FLOATS, **kw):
    add(OpInfo(name, samples, _ref(fn), dtypes=dtypes, torch_fn=torch_fn, **kw))


def _special_fn(name):
    def fn(torch, *args, **kwargs):
        return getattr(torch.special, name)(*args, **kwargs)
    return fn


def _lgamma(x):
    x = float(x)
    if math.isnan(x):
        return x
    if math.isinf(x):
        return math.inf
    try:
        return math.lgamma(x)
    except ValueError:        # the poles
        return math.inf


def _digamma(x):
    x = float(x)
    if math.isnan(x) or x == -math.inf or (x < 0 and x == math.floor(x)):
        return math.nan
    if x == 0:
        return math.copysign(math.inf, -x)
    if x == math.inf:
        return math.inf
    return float(mpmath.digamma(x))


_unary("lgamma", _lgamma, _join(unary_samples(0.1, 5.0), _negative(-3.0, -0.1),
                                 _specials((math.nan, math.inf, -math.inf, 0.0, -0.0, 1.0,
                                            2.0, -1.0, -2.5, 1e-30))))
_unary("digamma", _digamma if mpmath else None,
       _join(unary_samples(0.1, 5.0), _negative(-3.0, -0.1),
             _specials((math.nan, math.inf, -math.inf, 0.0, -0.0, 1.0, -1.0, -2.5, 1e-30))))


def _erfinv(y):
    y = float(y)
    if math.isnan(y) or abs(y) > 1:
        return math.nan
    if abs(y) == 1:
        return math.copysign(math.inf, y)
    return float(mpmath.erfinv(y)) if y != 0 else y


_unary("erfinv", _erfinv if mpmath else None,
       _join(unary_samples(-0.95, 0.95),
             _specials((math.nan, 1.0, -1.0, 0.0, -0.0, 1.5, -1.5, 0.999999, 1e-30))))

_BESSEL_SPECIALS = (math.nan, math.inf, -math.inf, 0.0, -0.0, 1e-20, 7.5)


def _bessel(nu, scaled):
    def f(x):
        x = float(x)
        if math.isnan(x):
            return x
        if math.isinf(x):
            if not scaled:
                return math.nan        # PyTorch's value at +-inf
            return 0.0 if nu == 0 else math.copysign(0.0, x)
        v = mpmath.besseli(nu, x)
        if scaled:
            v *= mpmath.exp(-abs(x))
        return float(v)
    return f if mpmath else None


def _bessel_samples():
    return _join(unary_samples(-5.0, 5.0), _specials(_BESSEL_SPECIALS, (35.0, -42.5, 85.0)))


_unary("i0", _bessel(0, False), _bessel_samples())
_unary("special_i0e", _bessel(0, True), _bessel_samples(), torch_fn=_special_fn("i0e"))
_unary("special_i1", _bessel(1, False), _bessel_samples(), torch_fn=_special_fn("i1"))
_unary("special_i1e", _bessel(1, True), _bessel_samples(), torch_fn=_special_fn("i1e"))


def _ndtri(p):
    p = float(p)
    if math.isnan(p) or p < 0 or p > 1:
        return math.nan
    if p in (0.0, 1.0):
        return -math.inf if p == 0 else math.inf
    return float(mpmath.sqrt(2) * mpmath.erfinv(2 * mpmath.mpf(p) - 1))


_unary("special_ndtri", _ndtri if mpmath else None,
       _join(unary_samples(0.02, 0.98),
             _specials((math.nan, 0.0, 1.0, -0.1, 1.1, 0.5, 1e-30, 1e-6, 0.999999))),
       torch_fn=_special_fn("ndtri"), dtypes=NO_HALF)


def _erfcx(x):
    x = float(x)
    if math.isnan(x):
        return x
    if x == math.inf:
        return 0.0
    if x == -math.inf or x < -26.7:
        return math.inf
    return float(mpmath.exp(mpmath.mpf(x) ** 2) * mpmath.erfc(x))


_unary("special_erfcx", _erfcx if mpmath else None,
       _join(unary_samples(-3.0, 3.0),
             _specials((math.nan, math.inf, -math.inf, 0.0, -0.0, 12.5, -2.0),
                       (1e10, -9.0, -30.0))),
       torch_fn=_special_fn("erfcx"), dtypes=NO_HALF)


def _entr(x):
    x = float(x)
    if math.isnan(x):
        return x
    if x > 0:
        return -math.inf if math.isinf(x) else -x * math.log(x)
    return 0.0 if x == 0 else -math.inf


_unary("special_entr", _entr,
       _join(unary_samples(0.05, 3.0), _negative(-3.0, -0.1), _specials(
           (math.nan, math.inf, -math.inf, 0.0, -0.0, 1.0, -2.5))),
       torch_fn=_special_fn("entr"), composite_grad=True)


def _ndtr(x):
    x = float(x)
    return x if math.isnan(x) else 0.5 * math.erfc(-x / math.sqrt(2.0))


_unary("special_ndtr", _ndtr,
       _join(unary_samples(-4.0, 4.0), _specials(
           (math.nan, math.inf, -math.inf, 0.0, -0.0, 9.0, -9.0))),
       torch_fn=_special_fn("ndtr"), composite_grad=True)


def _log_ndtr(x):
    x = float(x)
    if math.isnan(x):
        return x
    if math.isinf(x):
        return -0.0 if x > 0 else -math.inf
    return float(mpmath.log(mpmath.ncdf(x)))


_unary("special_log_ndtr", _log_ndtr if mpmath else None,
       _join(unary_samples(-4.0, 4.0), _negative(-40.0, -2.0), _specials(
           (math.nan, math.inf, -math.inf, 0.0, -0.0, 9.0, -30.0, -1.0))),
       torch_fn=_special_fn("log_ndtr"), composite_grad=True, dtypes=NO_HALF)


# ---------------------------------------------------------------- with a second argument


def _polygamma_ref(n, x):
    def f(v):
        v = float(v)
        if math.isnan(v):
            return v
        if n == 0:
            return _digamma(v)
        if v == math.inf:
            return math.nan if n > 1 else 0.0
        return float(mpmath.psi(n, v))
    return elementwise(f, 1)(x)


def _polygamma_samples(dtype, rng):
    out = [Sample((n, make((2, 3), dtype, rng, 0.2, 5.0)), desc=f"n={n}") for n in range(4)]
    out.append(Sample((2, make((5,), dtype, rng, -2.9, -2.1)), desc="n=2 negative", grad=False))
    out.append(Sample((1, make((0,), dtype, rng)), desc="empty"))
    return out


add(OpInfo("polygamma", _polygamma_samples, _polygamma_ref if mpmath else None, dtypes=FLOATS,
           composite_grad=True,
           errors=lambda: [ErrorSample((-1, ember.ones(3)), {}, RuntimeError,
                                       r"does not support negative n", "n < 0")]))


def _mvlgamma_ref(x, p):
    def f(v):
        v = float(v)
        return p * (p - 1) / 4 * math.log(math.pi) + sum(_lgamma(v - j / 2) for j in range(p))
    return elementwise(f, 1)(x)


def _mvlgamma_samples(dtype, rng):
    return [Sample((make((2, 3), dtype, rng, 1.6, 5.0), p), desc=f"p={p}") for p in (1, 2, 3)] + \
        [Sample((make((0, 2), dtype, rng), 2), desc="empty")]


add(OpInfo("mvlgamma", _mvlgamma_samples, _mvlgamma_ref, dtypes=FLOATS, composite_grad=True,
           errors=lambda: [ErrorSample((ember.ones(3), 0), {}, RuntimeError,
                                       r"p has to be greater than or equal to 1", "p = 0")]))


def _zeta(x, q):
    x, q = float(x), float(q)
    if math.isnan(x) or math.isnan(q) or x < 1 or q == math.inf:
        return math.nan
    if x == 1 or (q <= 0 and q == math.floor(q)):
        return math.inf
    if q < 0 and x != math.floor(x):
        return math.nan
    if x == math.inf:
        return 1.0 if q == 1 else (math.inf if q < 1 else math.nan)
    return float(mpmath.zeta(x, q))


def _zeta_samples(dtype, rng):
    out = binary_samples(1.1, 4.0, 0.2, 3.0, numbers=())(dtype, rng)
    if dtype in FLOATS:
        x = ember.from_numpy(np.array([1.0, 0.5, 2.0, 2.0, 2.0, 3.0, 2.5, math.inf, math.nan,
                                       2.0, math.inf], dtype=dtype))
        q = ember.from_numpy(np.array([1.0, 1.0, 0.0, -1.0, -1.5, -2.0, -1.5, 1.0, 1.0,
                                       math.inf, 0.5], dtype=dtype))
        out.append(Sample((x, q), desc="specials", grad=False, noncontig=False))
    return out


add(OpInfo("special_zeta", _zeta_samples, _ref(_zeta if mpmath else None, 2), dtypes=NO_HALF,
           torch_fn=_special_fn("zeta"),
           grad_elsewhere="PyTorch has no derivative for zeta's first argument: "
                          "tests/test_special.py::test_zeta_gradient checks the second's "
                          "and the error"))


def _xlog1py(a, b):
    a, b = float(a), float(b)
    if math.isnan(b):
        return math.nan
    if a == 0:
        return 0.0
    if math.isnan(a):
        return a
    if b < -1:
        return math.nan
    if b == -1:
        return -math.inf * a
    return a * math.log1p(b) if not math.isinf(b) else a * math.inf


add(OpInfo("special_xlog1py", binary_samples(-3.0, 3.0, -0.9, 3.0, numbers=(2.0,)),
           elementwise(_xlog1py, 2), dtypes=FLOATS, composite_grad=True,
           torch_fn=_special_fn("xlog1py")))
