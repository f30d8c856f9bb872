"""The op database's entries for python/ember/ops/spectral.py (the DFT prims _fft_c2c,
_fft_r2c, _fft_c2r), loaded by op_db_api.py. The reference is the DFT's definition
summed in Python complex arithmetic, term by term (no FFT library); complex samples are
float32/float64 pairs viewed as complex. Gradients:
tests/test_fft.py compares them with torch.autograd for every ember.fft function."""
from __future__ import annotations

import cmath
import itertools
import math

import numpy as np

import ember
from op_db import ErrorSample, OpInfo, Sample, add, make

REALS = ("float32", "float64")


def _complex_or_real(shape, dtype, rng, transpose=False):
    """A complex sample (a float32/float64 pair viewed as complex) for those dtypes, a
    real one for the others (which the complex prims refuse)."""
    if dtype not in REALS:
        return make(shape, dtype, rng)
    if 0 in shape:
        return ember.zeros(shape, dtype=ember.complex64 if dtype == "float32" else
                           ember.complex128)
    z = ember.view_as_complex(make(tuple(shape) + (2,), dtype, rng)).clone()
    return z.t() if transpose else z


def _dft(a, dims, forward, scale):
    """sum_k a[k] exp(-+2 pi i j.k / n) over dims, times scale (object arrays)."""
    a = np.asarray(a, dtype=object)
    out = np.empty(a.shape, dtype=object)
    sign = -1 if forward else 1
    for idx in np.ndindex(*a.shape):
        acc = 0j
        for ks in itertools.product(*[range(a.shape[d]) for d in dims]):
            src = list(idx)
            phase = 0.0
            for d, k in zip(dims, ks):
                src[d] = k
                phase += idx[d] * k / a.shape[d]
            acc += complex(a[tuple(src)]) * cmath.exp(sign * 2j * math.pi * phase)
        out[idx] = acc * scale
    return out


def _scale(norm, n):
    return 1.0 / math.sqrt(n) if norm == 1 else 1.0 / n if norm == 2 else 1.0


def _norm_dims(a, dim):
    return [d % a.ndim for d in dim]


def _ref_c2c(a, dim, normalization, forward):
    a = np.asarray(a, dtype=object)
    dims = _norm_dims(a, dim)
    return _dft(a, dims, forward, _scale(normalization, math.prod(a.shape[d] for d in dims)))


def _ref_r2c(a, dim, normalization, onesided):
    a = np.asarray(a, dtype=object)
    dims = _norm_dims(a, dim)
    full = _dft(a, dims, True, _scale(normalization, math.prod(a.shape[d] for d in dims)))
    if onesided:
        full = np.take(full, range(a.shape[dims[-1]] // 2 + 1), axis=dims[-1])
    return full


def _ref_c2r(a, dim, normalization, last_dim_size):
    """The Hermitian extension of the one-sided spectrum along the last dim (the
    imaginary parts of its self-conjugate bins dropped, as pocketfft and PyTorch do),
    then the inverse DFT's real part."""
    a = np.asarray(a, dtype=object)
    dims = _norm_dims(a, dim)
    last, n = dims[-1], last_dim_size
    shape = list(a.shape)
    shape[last] = n
    full = np.empty(shape, dtype=object)
    others = [d for d in dims[:-1]]
    for idx in np.ndindex(*shape):
        k = idx[last]
        if k < a.shape[last] and k <= n // 2:
            v = complex(a[idx])
            if k == 0 or 2 * k == n:      # a self-conjugate bin: its mirror is itself
                mirror = list(idx)
                for d in others:
                    mirror[d] = (-idx[d]) % shape[d]
                v = (v + complex(a[tuple(mirror)]).conjugate()) / 2
        else:
            src = list(idx)
            src[last] = (n - k) % n
            for d in others:
                src[d] = (-idx[d]) % shape[d]
            v = complex(a[tuple(src)]).conjugate() if src[last] < a.shape[last] else 0j
        full[idx] = v
    out = _dft(full, dims, False, _scale(normalization, math.prod(shape[d] for d in dims)))
    return np.vectorize(lambda z: z.real, otypes=[object])(out)


def _c2c_samples(dtype, rng):
    x = _complex_or_real((3, 4), dtype, rng)
    return [Sample((x, [1], 0, True), desc="last dim forward", grad=False),
            Sample((x, [0], 2, False), desc="dim 0 inverse by n", grad=False),
            Sample((_complex_or_real((2, 3, 2), dtype, rng), [0, 2], 1, True),
                   desc="two dims ortho", grad=False),
            Sample((_complex_or_real((3, 4), dtype, rng, transpose=True), [1], 0, False),
                   desc="transposed", grad=False)]


def _r2c_samples(dtype, rng):
    return [Sample((make((3, 5), dtype, rng), [1], 0, True), desc="onesided odd"),
            Sample((make((4, 2), dtype, rng), [0], 2, True), desc="onesided dim 0 by n"),
            Sample((make((2, 3, 4), dtype, rng), [0, 2], 1, False), desc="full two dims"),
            Sample((make((2, 4), dtype, rng), [1, 0], 0, True), desc="onesided two dims")]


def _c2r_samples(dtype, rng):
    return [Sample((_complex_or_real((3, 3), dtype, rng), [1], 0, 4), desc="n 4",
                   grad=False),
            Sample((_complex_or_real((3, 3), dtype, rng), [1], 2, 5), desc="n 5 by n",
                   grad=False),
            Sample((_complex_or_real((2, 3), dtype, rng), [0, 1], 1, 4), desc="two dims",
                   grad=False)]


def _torch_prim(name):
    def fn(torch, *args, **kwargs):
        return getattr(torch, name)(*args, **kwargs)
    return fn


# c2c and c2r list float64 only (their complex128 samples): test_complex.py compares the
# gradients of every float32 entry at float64's tolerance; test_matches_torch still
# checks the complex64 samples
add(OpInfo("_fft_c2c", _c2c_samples, _ref_c2c, dtypes=("float64",), torch_fn=_torch_prim("_fft_c2c"),
           grad_elsewhere="complex inputs: tests/test_fft.py::test_gradients_match_torch",
           errors=lambda: [ErrorSample((ember.ones(3), [0], 0, True), {}, RuntimeError,
                                       "expects a complex input tensor", "real input")]))
add(OpInfo("_fft_r2c", _r2c_samples, _ref_r2c, dtypes=REALS, torch_fn=_torch_prim("_fft_r2c"),
           errors=lambda: [ErrorSample((ember.ones(3, dtype=ember.complex64), [0], 0, True), {},
                                       RuntimeError, "expects a real-valued input tensor",
                                       "complex input")]))
add(OpInfo("_fft_c2r", _c2r_samples, _ref_c2r, dtypes=("float64",), torch_fn=_torch_prim("_fft_c2r"),
           grad_elsewhere="complex inputs: tests/test_fft.py::test_gradients_match_torch",
           errors=lambda: [ErrorSample((ember.ones(3), [0], 0, 4), {}, RuntimeError,
                                       "expects a complex input tensor", "real input")]))
