"""Parameter: the Tensor subclass a Module collects as a learnable weight.

Assigning a Parameter to a module attribute registers it (Module.__setattr__), so
parameters(), state_dict() and optimizers find it. It shares the data of the tensor it
wraps, is a leaf, and requires grad unless asked not to. Ops on a Parameter return plain
Tensors, as in PyTorch.
"""
from .. import _C
from .._C import Tensor


def _rebuild_parameter(data, requires_grad):
    return Parameter(data, requires_grad)


def _empty_parameter(shape, dtype, device, present=True):
    """An uninitialised Parameter of shape (reset_parameters fills it), or None where the
    module has no such parameter (register_parameter takes either)."""
    if not present:
        return None
    from .. import empty
    return Parameter(empty(shape, dtype=dtype, device=device))


class Parameter(Tensor):
    """Parameter(data=None, requires_grad=True): a tensor a Module owns and trains."""

    def __new__(cls, data=None, requires_grad=True):
        if data is None:
            from .. import empty
            data = empty(0)
        if not isinstance(data, Tensor):
            raise TypeError(f"Parameter(): data must be a Tensor, not {type(data).__name__}")
        if requires_grad and not data.dtype.is_floating_point:
            raise RuntimeError("Only Tensors of floating point dtype can require gradients")
        return Tensor._make_subclass(cls, data, bool(requires_grad))

    def __repr__(self):
        return "Parameter containing:\n" + Tensor.__repr__(self)

    def __deepcopy__(self, memo):
        """A Parameter over a copy of the data (the gradient is not copied, as in
        PyTorch)."""
        if id(self) in memo:
            return memo[id(self)]
        result = type(self)(self.data.clone(), self.requires_grad)
        memo[id(self)] = result
        return result

    def __reduce_ex__(self, protocol):
        """Pickles as a Parameter around the plain tensor's pickle."""
        return (_rebuild_parameter, (self.detach(), self.requires_grad))


def is_parameter(obj):
    return isinstance(obj, Parameter)


def _dtype_tensor_name(t):
    """'FloatTensor', 'LongTensor', ...: the legacy type names PyTorch prints."""
    names = {"float32": "Float", "float64": "Double", "float16": "Half",
             "bfloat16": "BFloat16", "int64": "Long",
             "int32": "Int", "int16": "Short", "int8": "Char", "uint8": "Byte",
             "bool": "Bool"}
    return names.get(t.dtype._name, "") + "Tensor"


def typename(obj):
    """torch.typename: 'ember.FloatTensor' for tensors, the qualified type otherwise."""
    if isinstance(obj, _C.Tensor):
        return "ember." + _dtype_tensor_name(obj)
    cls = obj if isinstance(obj, type) else type(obj)
    module = getattr(cls, "__module__", "builtins")
    return cls.__qualname__ if module in ("builtins", None) else f"{module}.{cls.__qualname__}"
