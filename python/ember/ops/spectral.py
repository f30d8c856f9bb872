"""The discrete Fourier transforms under ember.fft, as PyTorch's three ATen prims:
_fft_c2c (complex to complex, forward or inverse), _fft_r2c (real to complex, one-sided or
full) and _fft_c2r (one-sided complex to real), each over a list of dims with a
normalization (0: none, 1: by 1/sqrt(n), 2: by 1/n).

Their eager kernel is NumPy's pocketfft (np.fft, in the input's precision: complex64 for
float32 inputs), computed unnormalized and scaled once; results are laid out as
PyTorch's: the untransformed dims outermost (by the input's strides), the transformed
dims innermost in the order given. Gradients are PyTorch's (the adjoint transforms):
c2c's is the c2c of the other direction; r2c's zero-pads a one-sided gradient back to the
full length and takes the real part of the inverse c2c; c2r's is the one-sided r2c with
the bins that stand for two conjugate terms doubled. The functions users call are in
ember/fft.py."""
import math

import numpy as np

from .. import _C
from ..compiler.lowerings import extern
from . import api as O
from . import meta as M
from .registry import CUSTOM, op

_COMPLEX_OF = {}      # real dtype -> complex dtype, filled on first use


def complex_of(dtype):
    if not _COMPLEX_OF:
        _COMPLEX_OF.update({_C.float32: _C.complex64, _C.float64: _C.complex128})
    return _COMPLEX_OF[dtype]


def real_of(dtype):
    return _C.float64 if dtype is _C.complex128 else _C.float32


def _dims(self, dim):
    nd = max(self.ndim, 1)
    out = []
    for d in dim:
        if not -nd <= d < nd:
            raise IndexError(f"Dimension out of range (expected to be in range of "
                             f"[{-nd}, {nd - 1}], but got {d})")
        out.append(d % nd)
    return out


def _layout_order(self, dims):
    """PyTorch's output layout: the other dims by the input's strides (largest first),
    then the transformed dims in order."""
    strides = self.stride()
    batch = sorted((d for d in range(self.ndim) if d not in dims), key=lambda d: -strides[d])
    return batch + list(dims)


def _strides_for(shape, order):
    strides = [0] * len(shape)
    s = 1
    for d in reversed(order):
        strides[d] = s
        s *= max(shape[d], 1)
    return tuple(strides)


def _meta(self, dims, shape, dtype):
    return M.meta_tensor(shape, dtype, _strides_for(shape, _layout_order(self, dims)))


def _result(self, dims, arr, dtype, scale):
    """arr (NumPy's result) as a tensor of dtype laid out as PyTorch's, times scale."""
    order = _layout_order(self, dims)
    out = np.empty([arr.shape[d] for d in order], dtype=dtype.numpy_dtype)
    view = out.transpose(np.argsort(order))
    if scale != 1.0:
        np.multiply(arr, scale, out=view, casting="unsafe")
    else:
        view[...] = arr
    return _C.from_numpy(view)


def _scale(normalization, n):
    if normalization == 1:
        return 1.0 / math.sqrt(n)
    if normalization == 2:
        return 1.0 / n
    return 1.0


def _is_meta(t):
    return isinstance(t, _C.Tensor) and t.is_meta


def _check_complex(name, self):
    if not self.dtype.is_complex:
        raise RuntimeError(f"{name} expects a complex input tensor, but got "
                           f"{self.dtype._torch_name}")


def _check_real(name, self):
    if self.dtype not in (_C.float32, _C.float64):
        raise RuntimeError(f"{name} expects a real-valued input tensor, but got "
                           f"{self.dtype._torch_name}")


# ------------------------------------------------------------------ complex to complex


def _c2c_meta(entry, args):
    self, dim = args[0], args[1]
    _check_complex("_fft_c2c", self)
    return _meta(self, _dims(self, dim), tuple(self.shape), self.dtype)


def _c2c(self, dim, normalization, forward):
    if _is_meta(self):
        return _c2c_meta(None, (self, dim))
    _check_complex("_fft_c2c", self)
    dims = _dims(self, dim)
    a = self.detach().resolve_conj().numpy()
    if a.size == 0 or not dims:
        return _result(self, dims, a, self.dtype, 1.0)
    r = np.fft.fftn(a, axes=dims) if forward else np.fft.ifftn(a, axes=dims, norm="forward")
    return _result(self, dims, r, self.dtype,
                   _scale(normalization, math.prod(a.shape[d] for d in dims)))


op("_fft_c2c(Tensor self, int[] dim, int normalization, bool forward) -> Tensor", CUSTOM,
   "python", prim=True, lower=extern, impl=_c2c, meta=_c2c_meta, method=False,
   backward=lambda g, out, self, dim, normalization, forward: (
       O._fft_c2c(g, dim, normalization, not forward), None, None, None),
   doc="The complex DFT over dims (forward: exp(-2 pi i jk/n)), normalized as told.")


# ------------------------------------------------------------------ real to complex


def _r2c_shape(self, dims, onesided):
    shape = list(self.shape)
    if onesided and dims:
        shape[dims[-1]] = shape[dims[-1]] // 2 + 1
    return tuple(shape)


def _r2c_meta(entry, args):
    self, dim, _, onesided = args[:4]
    _check_real("_fft_r2c", self)
    dims = _dims(self, dim)
    return _meta(self, dims, _r2c_shape(self, dims, onesided), complex_of(self.dtype))


def _r2c(self, dim, normalization, onesided):
    if _is_meta(self):
        return _r2c_meta(None, (self, dim, normalization, onesided))
    _check_real("_fft_r2c", self)
    dims = _dims(self, dim)
    a = self.detach().resolve_conj().numpy()
    dt = complex_of(self.dtype)
    if a.size == 0 or not dims:
        return _result(self, dims, np.zeros(_r2c_shape(self, dims, onesided)), dt, 1.0)
    r = np.fft.rfftn(a, axes=dims) if onesided else np.fft.fftn(a, axes=dims)
    return _result(self, dims, r, dt, _scale(normalization, math.prod(a.shape[d] for d in dims)))


def _r2c_backward(g, out, self, dim, normalization, onesided):
    dims = _dims(self, dim)
    if onesided:
        last = dims[-1]
        full = self.shape[last]
        missing = full - g.shape[last]
        if missing > 0:
            shape = list(g.shape)
            shape[last] = missing
            g = O.cat([g, O.zeros(shape, dtype=g.dtype)], last)
    return (O.real(O._fft_c2c(g, dims, normalization, False)), None, None, None)


op("_fft_r2c(Tensor self, int[] dim, int normalization, bool onesided) -> Tensor", CUSTOM,
   "python", prim=True, lower=extern, impl=_r2c, meta=_r2c_meta, method=False,
   backward=_r2c_backward,
   doc="The forward DFT of a real tensor over dims; onesided keeps the last dim's "
       "n // 2 + 1 non-negative frequencies.")


# ------------------------------------------------------------------ complex to real


def _c2r_shape(self, dims, last_dim_size):
    shape = list(self.shape)
    shape[dims[-1]] = last_dim_size
    return tuple(shape)


def _c2r_meta(entry, args):
    self, dim, _, last_dim_size = args[:4]
    _check_complex("_fft_c2r", self)
    dims = _dims(self, dim)
    return _meta(self, dims, _c2r_shape(self, dims, last_dim_size), real_of(self.dtype))


def _c2r(self, dim, normalization, last_dim_size):
    if _is_meta(self):
        return _c2r_meta(None, (self, dim, normalization, last_dim_size))
    _check_complex("_fft_c2r", self)
    dims = _dims(self, dim)
    a = self.detach().resolve_conj().numpy()
    shape = _c2r_shape(self, dims, last_dim_size)
    dt = real_of(self.dtype)
    if math.prod(shape) == 0:
        return _result(self, dims, np.zeros(shape), dt, 1.0)
    r = np.fft.irfftn(a, s=[shape[d] for d in dims], axes=dims, norm="forward")
    return _result(self, dims, r, dt, _scale(normalization, math.prod(shape[d] for d in dims)))


def _c2r_backward(g, out, self, dim, normalization, last_dim_size):
    dims = _dims(self, dim)
    gi = O._fft_r2c(g, dims, normalization, True)
    last = dims[-1]
    double = g.shape[last] - gi.shape[last]
    if double > 0:
        w = np.ones(gi.shape[last], dtype=real_of(gi.dtype).numpy_dtype)
        w[1:1 + double] = 2.0
        shape = [1] * gi.ndim
        shape[last] = gi.shape[last]
        gi = O.mul(gi, _C.from_numpy(w.reshape(shape)))
    return (gi, None, None, None)


op("_fft_c2r(Tensor self, int[] dim, int normalization, int last_dim_size) -> Tensor",
   CUSTOM, "python", prim=True, lower=extern, impl=_c2r, meta=_c2r_meta, method=False,
   backward=_c2r_backward,
   doc="The inverse DFT of a one-sided (Hermitian) spectrum over dims, unnormalized "
       "unless told: a real tensor whose last transformed dim has last_dim_size.")
