"""Complex numbers: the views between a complex tensor and its parts (view_as_real,
view_as_complex, real, imag), conj, complex, polar, angle.

complex64/complex128 tensors are NumPy complex arrays; the elementwise ops that take them
(rule COMPLEX: add, sub, mul, div, neg, reciprocal, exp, eq, ne, sum, mean, abs) run
NumPy's complex loops. conj is materialised (conj_physical): PyTorch's lazy conjugate
bit is not modelled, so writing into conj(x) does not write into x.

Gradients follow PyTorch's convention for complex inputs: the gradient of a real loss L
with respect to z = x + iy is dL/dx + i dL/dy (the conjugate Wirtinger derivative, times
two), so a holomorphic f's formula is grad * conj(f'(z)). Writing an op over real and imag
(angle's value, polar) gets that gradient from the views' formulas by itself.
"""
import math

from .. import _C
from . import api as O
from . import meta as M
from ._decomp import run_decomposition
from ..compiler.lowerings import extern
from .registry import COMPLEX, CUSTOM, UNARY, VIEW, op


def _complex_of(dtype):
    return _C.complex128 if dtype is _C.float64 else _C.complex64


def _view_as_real_meta(entry, args):
    self = args[0]
    if not self.dtype.is_complex:
        raise RuntimeError("view_as_real is only supported for complex tensors")
    M.check_ndim(entry.name, self.ndim + 1)
    return _C._meta_tensor(tuple(self.shape) + (2,), M.complex_value_type(self.dtype),
                           tuple(2 * s for s in self.stride()) + (1,))


def _view_as_complex_meta(entry, args):
    self = args[0]
    if self.dtype not in (_C.float32, _C.float64):
        raise RuntimeError("view_as_complex is only supported for float and double tensors, "
                           f"but got a tensor of scalar type: {self.dtype._torch_name}")
    if self.ndim == 0:
        raise RuntimeError("Input tensor must have one or more dimensions")
    if self.shape[-1] != 2:
        raise RuntimeError("Tensor must have a last dimension of size 2")
    if self.stride()[-1] != 1:
        raise RuntimeError("Tensor must have a last dimension with stride 1")
    if any(s % 2 for s in self.stride()[:-1]):
        raise RuntimeError("Tensor must have a stride divisible by 2 for all but last "
                           "dimension")
    if self.storage_offset() % 2:
        raise RuntimeError("Tensor must have a storage_offset divisible by 2")
    return _C._meta_tensor(tuple(self.shape[:-1]), _complex_of(self.dtype),
                           tuple(s // 2 for s in self.stride()[:-1]))


op("view_as_real(Tensor(a) self) -> Tensor(a)", VIEW, "view_as_real", prim=True,
   lower=extern, meta=_view_as_real_meta, method=False,
   backward=lambda g, out, self: (O.view_as_complex(g.contiguous()),),
   view_scatter=lambda self, src: O.view_as_complex(src.contiguous()),
   doc="A complex tensor's memory as real numbers: a last dim of 2 (real, imaginary), "
       "sharing memory.")

op("view_as_complex(Tensor(a) self) -> Tensor(a)", VIEW, "view_as_complex", prim=True,
   lower=extern, meta=_view_as_complex_meta, method=False,
   backward=lambda g, out, self: (O.view_as_real(g),),
   view_scatter=lambda self, src: O.view_as_real(src),
   doc="A float32/float64 tensor with a last dim of 2 (stride 1) as complex numbers, "
       "sharing memory.")


def _real(self):
    if not self.dtype.is_complex:
        return self
    return O.select(O.view_as_real(self), -1, 0)


def _imag(self):
    if not self.dtype.is_complex:
        raise RuntimeError("imag is not implemented for tensors with non-complex dtypes.")
    return O.select(O.view_as_real(self), -1, 1)


op("real(Tensor(a) self) -> Tensor(a)", CUSTOM, "python", composite=True, impl=_real,
   method=False,
   doc="The real parts of a complex tensor, a view (writable); self for a real tensor.")

op("imag(Tensor(a) self) -> Tensor(a)", CUSTOM, "python", composite=True, impl=_imag,
   method=False,
   doc="The imaginary parts of a complex tensor, a view (writable).")

op("_conj_physical(Tensor self) -> Tensor", UNARY, "ufunc", ufunc="conjugate", rule=COMPLEX,
   prim=True, lower=extern,
   backward=lambda g, out, self: (O._conj_physical(g),),
   doc="The complex conjugate, computed (a copy of a real tensor).")


def _conj(self):
    return O._conj_physical(self) if self.dtype.is_complex else self


op("conj_physical(Tensor self) -> Tensor", CUSTOM, "python", composite=True, impl=_conj,
   doc="The complex conjugate, computed; self for a real tensor (as PyTorch).")


op("conj(Tensor(a) self) -> Tensor(a)", CUSTOM, "python", composite=True, impl=_conj,
   doc="The complex conjugate (materialised, not PyTorch's lazy view); self for a real "
       "tensor.")

op("resolve_conj(Tensor(a) self) -> Tensor(a)", CUSTOM, "python", composite=True,
   impl=lambda self: self, doc="self: ember's conj is never lazy.")

op("resolve_neg(Tensor(a) self) -> Tensor(a)", CUSTOM, "python", composite=True,
   impl=lambda self: self, doc="self: ember has no lazy negation.")

op("is_conj(Tensor self) -> bool", CUSTOM, "python", composite=True,
   impl=lambda self: False, doc="False: ember's conj is never lazy.")


def _check_parts(name, real, imag):
    ok = (_C.float32, _C.float64)
    if real.dtype not in ok or imag.dtype not in ok:
        kinds = "Float or Double" if name == "complex" else "Float or Double"
        raise RuntimeError(f"Expected both inputs to be Half, {kinds} tensors but got "
                           f"{real.dtype._torch_name} and {imag.dtype._torch_name}")
    if real.dtype is not imag.dtype:
        raise RuntimeError(f"Expected object of scalar type {real.dtype._torch_name} but got "
                           f"scalar type {imag.dtype._torch_name} for second argument")


def _complex_decompose(real, imag):
    _check_parts("complex", real, imag)
    shape = M.broadcast_shapes("complex", tuple(real.shape), tuple(imag.shape))
    a, b = real.expand(shape), imag.expand(shape)
    # the pairs stacked in the result's layout (TensorIterator's, from the inputs' strides)
    strides = M.elementwise_strides([real, imag], shape)
    perm = sorted(range(len(shape)), key=lambda d: -strides[d])
    inverse = [perm.index(d) for d in range(len(shape))]
    z = O.view_as_complex(O.stack([a.permute(perm), b.permute(perm)], -1))
    return z.permute(inverse).clone()


op("complex(Tensor real, Tensor imag) -> Tensor", CUSTOM, "decomposed", method=False,
   meta=run_decomposition, decompose=_complex_decompose,
   backward=lambda g, out, real, imag: (O.real(g), O.imag(g)),
   doc="real + i imag (both float32 or both float64, broadcast).")


def _polar(abs, angle):
    _check_parts("polar", abs, angle)
    return O.complex(O.mul(abs, O.cos(angle)), O.mul(abs, O.sin(angle)))


op("polar(Tensor abs, Tensor angle) -> Tensor", CUSTOM, "python", composite=True,
   impl=_polar, method=False,
   doc="abs * (cos(angle) + i sin(angle)): complex(abs * cos(angle), abs * sin(angle)).")


def _angle_decompose(self):
    if self.dtype.is_complex:     # contiguous, as PyTorch's result
        return O.atan2(O.imag(self), O.real(self)).contiguous()
    x = self if self.dtype.is_floating_point else O._to_copy(
        self, dtype=_C.get_default_dtype())
    sign = O.where(O.lt(x, 0), math.pi, O.zeros_like(x))
    return O.where(O.ne(x, x), x, sign)


def _angle_backward(g, out, self):
    if not self.dtype.is_complex:
        return (O.zeros_like(self) if self.dtype.is_floating_point else None,)
    # d angle / dx = -y / |z|^2, d / dy = x / |z|^2: grad * i z / |z|^2 (0 at z = 0)
    mag2 = O.mul(O.real(self), O.real(self)) + O.mul(O.imag(self), O.imag(self))
    safe = O.where(O.eq(mag2, 0), 1, mag2)
    rot = O.mul(self, 1j)
    return (O.where(O.eq(mag2, 0), 0, O.mul(O.div(g, safe), rot)),)


op("angle(Tensor self) -> Tensor", CUSTOM, "decomposed", meta=run_decomposition,
   decompose=_angle_decompose, backward=_angle_backward,
   doc="The argument of each element in (-pi, pi]: atan2(imag, real) for complex tensors, "
       "0 or pi for real ones (NaN stays NaN).")
