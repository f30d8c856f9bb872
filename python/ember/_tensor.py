"""Tensor methods written in Python: autograd entry points, hooks, conversions and
protocols that run once per call site rather than per element. Installed on the C type."""
from __future__ import annotations

import weakref

from . import _C
from . import autograd as _autograd
from . import ops as _ops


class RemovableHandle:
    """Returned by register_hook; remove() unregisters the hook."""

    def __init__(self, hooks, entry):
        self._hooks = hooks
        self._entry = entry

    def remove(self):
        try:
            self._hooks.remove(self._entry)
        except ValueError:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.remove()


def backward(self, gradient=None, retain_graph=None, create_graph=False, inputs=None):
    """Accumulates the gradient of this tensor into the .grad of the leaves."""
    _autograd.backward(self, gradient, retain_graph, create_graph, inputs=inputs)


def register_hook(self, hook):
    """hook(grad) -> None or a replacement gradient, called when this tensor's gradient
    is computed."""
    if not self.requires_grad:
        raise RuntimeError("cannot register a hook on a tensor that doesn't require gradient")
    if self.grad_fn is None:
        hooks = self._backward_hooks
        hooks.append(hook)
        return RemovableHandle(hooks, hook)
    entry = (self.output_nr, hook)
    hooks = self.grad_fn._pre_hooks
    # retain_grad's hook stays last, so .grad sees what the other hooks made of it
    at = next((i for i, (_, h) in enumerate(hooks) if getattr(h, "_retains_grad", False)),
              len(hooks))
    hooks.insert(at, entry)
    return RemovableHandle(hooks, entry)


def retain_grad(self):
    """Keeps the gradient of a non-leaf tensor in .grad after backward."""
    if not self.requires_grad:
        raise RuntimeError("can't retain_grad on Tensor that has requires_grad=False")
    if self.grad_fn is None or getattr(self, "_retain_handle", None) is not None:
        return
    ref = weakref.ref(self)

    def keep(grad):
        t = ref()
        if t is not None:
            g = grad.detach()
            t.grad = g if t.grad is None else (t.grad + g)
    keep._retains_grad = True
    self._retain_handle = register_hook(self, keep)
    _C.Tensor.retain_grad_flag(self) if hasattr(_C.Tensor, "retain_grad_flag") else None


def __iter__(self):
    if self.ndim == 0:
        raise TypeError("iteration over a 0-d tensor")
    return iter(self.unbind(0))


def __reversed__(self):
    return self.flip(0) if hasattr(self, "flip") else iter(list(self)[::-1])


def __contains__(self, element):
    if isinstance(element, (_C.Tensor, int, float, bool)):
        return bool((self == element).sum().item() > 0)
    raise RuntimeError(f"Tensor.__contains__ only supports Tensor or scalar, but you passed "
                       f"in a {type(element)}.")


def __format__(self, spec):
    if self.ndim == 0 and not self.is_meta:
        return self.item().__format__(spec)
    return object.__format__(self, spec)


def _cast(dtype_name):
    def method(self, memory_format=None):
        return self.to(getattr(_C, dtype_name))
    method.__name__ = dtype_name
    method.__doc__ = f"self.to(ember.{dtype_name})"
    return method


def type_as(self, other):
    """self in other's dtype (self itself when it already has it)."""
    return self.to(other.dtype)


_TYPE_NAMES = {"Float": "float32", "Double": "float64", "Half": "float16", "Long": "int64",
               "Int": "int32", "Short": "int16", "Char": "int8", "Byte": "uint8",
               "Bool": "bool"}


def type(self, dtype=None, non_blocking=False, **kwargs):
    """Without dtype, the tensor type's name in PyTorch's spelling ('torch.FloatTensor',
    as scripts compare it); with one (a dtype or such a name), self converted to it
    (self itself when it already has it)."""
    if dtype is None:
        return f"torch.{self.dtype._torch_name}Tensor"
    if isinstance(dtype, str):
        name = dtype
        for prefix in ("torch.", "ember."):
            if name.startswith(prefix):
                name = name[len(prefix):]
        if name.startswith("cuda."):
            raise RuntimeError("ember runs on the CPU only: CUDA is not available")
        if not name.endswith("Tensor") or name[:-len("Tensor")] not in _TYPE_NAMES:
            raise ValueError(f"invalid type: '{dtype}'")
        dtype = getattr(_C, _TYPE_NAMES[name[:-len("Tensor")]])
    return self.to(dtype, non_blocking=non_blocking)


def new(self, *args, **kwargs):
    """The legacy constructor in self's dtype: new(*sizes) (uninitialised), new(data)
    (a copy of the data), new() (empty)."""
    from ._tensor_new import tensor
    dtype = self.dtype
    kwargs.pop("device", None)
    if kwargs:     # as PyTorch: new() takes no dtype (new_empty, new_tensor do)
        raise TypeError(f"new() received an invalid combination of arguments: unexpected "
                        f"keyword arguments {sorted(kwargs)}")
    if not args:
        return _ops.api.empty([0], dtype=dtype)
    if len(args) == 1 and isinstance(args[0], _C.Size):
        return _ops.api.empty(list(args[0]), dtype=dtype)
    if all(isinstance(a, int) and not isinstance(a, bool) for a in args):
        return _ops.api.empty(list(args), dtype=dtype)
    if len(args) == 1:
        if isinstance(args[0], _C.Tensor):
            if args[0].dtype is not dtype:
                raise TypeError(f"expected {dtype} (got {args[0].dtype})")
            return args[0].detach()
        return tensor(args[0], dtype=dtype)
    raise TypeError("new() takes sizes (ints) or one sequence of data")


def cpu(self, memory_format=None):
    return self


def cuda(self, *args, **kwargs):
    raise RuntimeError("ember runs on the CPU only: CUDA is not available")


def _T(self):
    """Tensor.T: the numpy_T op (a C composite: permute)."""
    return _ops.api.numpy_T(self)


def _mT(self):
    """Tensor.mT: the mT op (a C composite: transpose(-2, -1))."""
    return _ops.api.mT(self)


def _real(self):
    """Tensor.real: the real parts, a writable view (self for a real tensor)."""
    return _ops.api.real(self)


def _set_real(self, value):
    view = _ops.api.real(self)
    view.copy_(value) if isinstance(value, _C.Tensor) else view.fill_(value)


def _imag(self):
    """Tensor.imag: the imaginary parts, a writable view (complex tensors only)."""
    return _ops.api.imag(self)


def _set_imag(self, value):
    view = _ops.api.imag(self)
    view.copy_(value) if isinstance(value, _C.Tensor) else view.fill_(value)


def _mH(self):
    """Tensor.mH: the conjugate transpose of the last two dims (adjoint())."""
    return _ops.api.mT(self).conj()


def _H(self):
    """Tensor.H: the conjugate transpose of a matrix (t().conj())."""
    if self.ndim not in (0, 2):
        raise RuntimeError(f"tensor.H is only supported on matrices (2-D tensors). Got "
                           f"{self.ndim}-D tensor.")
    return _ops.api.numpy_T(self).conj()


def _install():
    attrs = dict(
        backward=backward, register_hook=register_hook, retain_grad=retain_grad,
        __iter__=__iter__, __reversed__=__reversed__, __contains__=__contains__,
        __format__=__format__,
        float=_cast("float32"), double=_cast("float64"), half=_cast("float16"),
        bfloat16=_cast("bfloat16"), cfloat=_cast("complex64"), cdouble=_cast("complex128"),
        long=_cast("int64"), int=_cast("int32"), short=_cast("int16"),
        char=_cast("int8"), byte=_cast("uint8"), bool=_cast("bool"),
        type_as=type_as, type=type, new=new, cpu=cpu, cuda=cuda,
        T=property(_T), mT=property(_mT), real=property(_real, _set_real),
        imag=property(_imag, _set_imag), mH=property(_mH), H=property(_H), adjoint=_mH, __complex__=lambda self: complex(self.item()),
        __array_priority__=1000,
    )
    _C._add_tensor_attrs(attrs)


_install()
