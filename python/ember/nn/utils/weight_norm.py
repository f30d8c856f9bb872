"""nn.utils.weight_norm / remove_weight_norm (the hook-based form PyTorch keeps beside
parametrizations.weight_norm): module.<name> is recomputed as g * v / ||v|| before each
forward from the parameters <name>_g and <name>_v."""
from __future__ import annotations

import warnings

from ..parameter import Parameter

__all__ = ["weight_norm", "remove_weight_norm"]


def _norm_except_dim(v, pow_, dim):
    """The pow_-norm of v over every dim but dim, keeping dims (dim -1: over all)."""
    if dim == -1:
        return (v.abs() ** pow_).sum() ** (1.0 / pow_) if pow_ != 2 else (v * v).sum() ** 0.5
    d = dim % v.ndim
    others = [i for i in range(v.ndim) if i != d]
    if pow_ == 2:
        return (v * v).sum(others, keepdim=True) ** 0.5
    return (v.abs() ** pow_).sum(others, keepdim=True) ** (1.0 / pow_)


def _weight_norm(v, g, dim=0):
    """v * (g / ||v||), the norm over every dim but dim."""
    return v * (g / _norm_except_dim(v, 2, dim))


class WeightNorm:
    def __init__(self, name, dim):
        self.name = name
        self.dim = -1 if dim is None else dim

    def compute_weight(self, module):
        return _weight_norm(getattr(module, self.name + "_v"),
                            getattr(module, self.name + "_g"), self.dim)

    @staticmethod
    def apply(module, name, dim):
        warnings.warn("torch.nn.utils.weight_norm is deprecated in favor of "
                      "torch.nn.utils.parametrizations.weight_norm.", FutureWarning,
                      stacklevel=3)
        for hook in module._forward_pre_hooks.values():
            if isinstance(hook, WeightNorm) and hook.name == name:
                raise RuntimeError(f"Cannot register two weight_norm hooks on the same "
                                   f"parameter {name}")
        fn = WeightNorm(name, dim)
        weight = getattr(module, name)
        del module._parameters[name]
        module.register_parameter(name + "_g",
                                  Parameter(_norm_except_dim(weight, 2, fn.dim).detach()))
        module.register_parameter(name + "_v", Parameter(weight.detach()))
        setattr(module, name, fn.compute_weight(module))
        module.register_forward_pre_hook(fn)
        return fn

    def remove(self, module):
        weight = self.compute_weight(module)
        delattr(module, self.name)
        del module._parameters[self.name + "_g"]
        del module._parameters[self.name + "_v"]
        setattr(module, self.name, Parameter(weight.detach()))

    def __call__(self, module, inputs):
        setattr(module, self.name, self.compute_weight(module))


def weight_norm(module, name="weight", dim=0):
    """Replaces module.<name> by <name>_g (its norm over every dim but dim) and <name>_v
    (its direction), recombined before every forward. Returns module."""
    WeightNorm.apply(module, name, dim)
    return module


def remove_weight_norm(module, name="weight"):
    """Folds <name>_g and <name>_v back into one parameter <name>."""
    for k, hook in list(module._forward_pre_hooks.items()):
        if isinstance(hook, WeightNorm) and hook.name == name:
            hook.remove(module)
            del module._forward_pre_hooks[k]
            module._forward_pre_hooks_with_kwargs.pop(k, None)
            return module
    raise ValueError(f"weight_norm of '{name}' not found in {module}")
