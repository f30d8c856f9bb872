"""In-place update helpers shared by the optimizers, written with ember ops.

They reproduce PyTorch's CPU arithmetic order where it affects rounding (lerp switches
formula at weight 0.5; addcmul/addcdiv scale the first factor), so ember's optimizers
track torch.optim's step for step.
"""
from .. import _C
from .. import get_default_dtype, zeros


def step_counter():
    """The per-parameter step count: a 0-d float tensor, as torch.optim keeps it."""
    dtype = _C.float64 if get_default_dtype() is _C.float64 else _C.float32
    return zeros((), dtype=dtype)     # not tensor(0.0): ember.compile captures zeros


def sqrt(t):
    return t.sqrt() if hasattr(t, "sqrt") else t ** 0.5


def lerp_(self, end, weight):
    """self += weight * (end - self), in place."""
    if abs(weight) < 0.5:
        return self.add_(end - self, alpha=weight)
    return self.copy_(end - (end - self) * (1 - weight))


def addcmul_(self, t1, t2, value=1.0):
    """self += value * t1 * t2, in place."""
    return self.add_((t1 * value) * t2 if _not_one(value) else t1 * t2)


def addcdiv_(self, t1, t2, value=1.0):
    """self += value * t1 / t2, in place."""
    return self.add_((t1 * value) / t2 if _not_one(value) else t1 / t2)


def _not_one(value):
    """value != 1, for a number or a 0-d tensor (compiled optimizers' step size, which
    is never exactly 1 and must not be branched on)."""
    return isinstance(value, _C.Tensor) or value != 1
