"""ember.fft: PyTorch's torch.fft over the three DFT prims of ops/spectral.py
(_fft_c2c, _fft_r2c, _fft_c2r). Each function resizes its input to the requested n / s
(trimming or zero-padding, as PyTorch), maps norm ("backward", "ortho", "forward") to the
prim's normalization for its direction, and promotes integers to the default float and
real inputs to complex where the transform needs it; float16/bfloat16 are refused as
PyTorch's CPU kernels refuse them. Gradients come from the prims."""
from __future__ import annotations

from . import _C
from .ops import api as O
from .ops.spectral import complex_of

__all__ = ["fft", "ifft", "fft2", "ifft2", "fftn", "ifftn", "rfft", "irfft", "rfft2",
           "irfft2", "rfftn", "irfftn", "hfft", "ihfft", "fftfreq", "rfftfreq", "fftshift",
           "ifftshift"]

_NONE, _BY_ROOT_N, _BY_N = 0, 1, 2


def _mode(norm, forward):
    if norm is None or norm == "backward":
        return _NONE if forward else _BY_N
    if norm == "ortho":
        return _BY_ROOT_N
    if norm == "forward":
        return _BY_N if forward else _NONE
    raise RuntimeError(f'Invalid normalization mode: "{norm}"')


def _check_dtype(x):
    if x.dtype in (_C.float16, _C.bfloat16):
        raise RuntimeError(f"Unsupported dtype {x.dtype._torch_name}")


def _floating(x):
    """x as float32/float64 (integers and bool in the default dtype) or complex."""
    _check_dtype(x)
    if x.dtype.is_complex or x.dtype in (_C.float32, _C.float64):
        return x
    return O._to_copy(x, dtype=_C.get_default_dtype())


def _to_complex(x):
    x = _floating(x)
    return x if x.dtype.is_complex else O._to_copy(x, dtype=complex_of(x.dtype))


def _wrap(dim, ndim):
    nd = max(ndim, 1)
    if not -nd <= dim < nd:
        raise IndexError(f"Dimension out of range (expected to be in range of [{-nd}, "
                         f"{nd - 1}], but got {dim})")
    return dim % nd


def _resize(x, dims, sizes):
    """x trimmed or zero-padded (at the end) to sizes along dims."""
    for d, n in zip(dims, sizes):
        if n is None or n == -1:
            continue
        if n < 1:
            raise RuntimeError(f"Invalid number of data points ({n}) specified")
        cur = x.shape[d]
        if n < cur:
            x = O.narrow(x, d, 0, n)
        elif n > cur:
            shape = list(x.shape)
            shape[d] = n - cur
            x = O.cat([x, O.zeros(shape, dtype=x.dtype)], d)
    return x


def _dims_and_sizes(x, s, dim, default_all=True):
    """fftn's (s, dim) rules: both given: same length; s only: the last len(s) dims; dim
    only: its sizes; neither: every dim."""
    if dim is not None:
        dim = [dim] if isinstance(dim, int) else list(dim)
        dims = [_wrap(d, x.ndim) for d in dim]
        if len(set(dims)) != len(dims):
            raise RuntimeError("FFT dims must be unique")
        if s is not None:
            s = list(s)
            if len(s) != len(dims):
                raise RuntimeError("When given, dim and shape arguments must have the same "
                                   "length")
    elif s is not None:
        s = list(s)
        if len(s) > x.ndim:
            raise RuntimeError(f"Got shape with {len(s)} values but input tensor only has "
                               f"{x.ndim} dimensions.")
        dims = list(range(x.ndim - len(s), x.ndim))
    else:
        dims = list(range(x.ndim))
    sizes = s if s is not None else [None] * len(dims)
    return dims, sizes


# ------------------------------------------------------------------ complex transforms


def _c2c_n(input, s, dim, norm, forward):
    x = _to_complex(input)
    dims, sizes = _dims_and_sizes(x, s, dim)
    x = _resize(x, dims, sizes)
    return O._fft_c2c(x, dims, _mode(norm, forward), forward)


def _r_or_c(input, s, dim, norm, forward):
    """fft of a real input through the full r2c (a real gradient, as PyTorch); of a
    complex one through c2c."""
    x = _floating(input)
    if x.dtype.is_complex or not forward:
        return _c2c_n(x, s, dim, norm, forward)
    dims, sizes = _dims_and_sizes(x, s, dim)
    x = _resize(x, dims, sizes)
    return O._fft_r2c(x, dims, _mode(norm, True), False)


def fft(input, n=None, dim=-1, norm=None):
    """The one-dimensional DFT of input along dim (n points: trimmed or zero-padded)."""
    return _r_or_c(input, None if n is None else [n], [dim], norm, True)


def ifft(input, n=None, dim=-1, norm=None):
    """The one-dimensional inverse DFT of input along dim."""
    return _r_or_c(input, None if n is None else [n], [dim], norm, False)


def fftn(input, s=None, dim=None, norm=None):
    return _r_or_c(input, s, dim, norm, True)


def ifftn(input, s=None, dim=None, norm=None):
    return _r_or_c(input, s, dim, norm, False)


def fft2(input, s=None, dim=(-2, -1), norm=None):
    return fftn(input, s, dim, norm)


def ifft2(input, s=None, dim=(-2, -1), norm=None):
    return ifftn(input, s, dim, norm)


# ------------------------------------------------------------------ real transforms


def _real_input(name, input):
    x = _floating(input)
    if x.dtype.is_complex:
        raise RuntimeError(f"{name} expects a real input tensor, but got "
                           f"{x.dtype._torch_name}")
    return x


def rfftn(input, s=None, dim=None, norm=None):
    x = _real_input("rfftn", input)
    dims, sizes = _dims_and_sizes(x, s, dim)
    if not dims:
        raise RuntimeError("rfftn must transform at least one axis")
    x = _resize(x, dims, sizes)
    return O._fft_r2c(x, dims, _mode(norm, True), True)


def rfft(input, n=None, dim=-1, norm=None):
    """The DFT of a real input along dim, its n // 2 + 1 non-negative frequencies."""
    x = _real_input("rfft", input)
    d = _wrap(dim, x.ndim)
    x = _resize(x, [d], [n])
    return O._fft_r2c(x, [d], _mode(norm, True), True)


def rfft2(input, s=None, dim=(-2, -1), norm=None):
    return rfftn(input, s, dim, norm)


def _c2r_n(name, input, s, dim, norm, forward, conj=False):
    x = _to_complex(input)
    dims, sizes = _dims_and_sizes(x, s, dim)
    if not dims:
        raise RuntimeError(f"{name} must transform at least one axis")
    last = sizes[-1] if sizes[-1] is not None else 2 * (x.shape[dims[-1]] - 1)
    if last < 1:
        raise RuntimeError(f"Invalid number of data points ({last}) specified")
    x = _resize(x, dims, list(sizes[:-1]) + [last // 2 + 1])
    if conj:
        x = O.conj(x)
    return O._fft_c2r(x, dims, _mode(norm, forward), last)


def irfftn(input, s=None, dim=None, norm=None):
    return _c2r_n("irfftn", input, s, dim, norm, False)


def irfft(input, n=None, dim=-1, norm=None):
    """The inverse of rfft: a real signal of n points (2 (m - 1) by default) from the
    m non-negative frequencies along dim."""
    return _c2r_n("irfft", input, None if n is None else [n], [dim], norm, False)


def irfft2(input, s=None, dim=(-2, -1), norm=None):
    return irfftn(input, s, dim, norm)


def hfft(input, n=None, dim=-1, norm=None):
    """The DFT of a Hermitian-symmetric signal given by its first half: a real result of
    n points (2 (m - 1) by default)."""
    return _c2r_n("hfft", input, None if n is None else [n], [dim], norm, True, conj=True)


def ihfft(input, n=None, dim=-1, norm=None):
    """The inverse of hfft: the n // 2 + 1 first terms of a real signal's inverse DFT."""
    x = _real_input("ihfft", input)
    d = _wrap(dim, x.ndim)
    x = _resize(x, [d], [n])
    return O.conj(O._fft_r2c(x, [d], _mode(norm, False), True))


# ------------------------------------------------------------------ helpers


def _freq_dtype(dtype):
    return dtype if dtype is not None else _C.get_default_dtype()


def fftfreq(n, d=1.0, *, dtype=None, layout=None, device=None, requires_grad=False):
    """The sample frequencies of an n-point DFT: [0, 1, ..., ceil(n/2) - 1, -floor(n/2),
    ..., -1] / (d n)."""
    dt = _freq_dtype(dtype)
    k = O.arange(n, dtype=dt)
    k = O.where(O.ge(k, (n + 1) // 2), O.sub(k, n), k)
    out = O.mul(k, 1.0 / (d * n))
    return out.requires_grad_(True) if requires_grad else out


def rfftfreq(n, d=1.0, *, dtype=None, layout=None, device=None, requires_grad=False):
    """The sample frequencies of rfft's n // 2 + 1 outputs: [0, ..., n // 2] / (d n)."""
    dt = _freq_dtype(dtype)
    out = O.mul(O.arange(n // 2 + 1, dtype=dt), 1.0 / (d * n))
    return out.requires_grad_(True) if requires_grad else out


def _shift_dims(input, dim):
    if dim is None:
        return list(range(input.ndim))
    return [dim] if isinstance(dim, int) else list(dim)


def fftshift(input, dim=None):
    """input rolled so that the zero frequency is in the middle (size // 2 per dim)."""
    dims = _shift_dims(input, dim)
    if not dims:
        return O.clone(input)
    return O.roll(input, [input.shape[d] // 2 for d in dims], dims)


def ifftshift(input, dim=None):
    """The inverse of fftshift ((size + 1) // 2 per dim)."""
    dims = _shift_dims(input, dim)
    if not dims:
        return O.clone(input)
    return O.roll(input, [(input.shape[d] + 1) // 2 for d in dims], dims)

