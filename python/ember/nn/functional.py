"""ember.nn.functional: the stateless forms of the layers, written with ember ops.

Every function here is differentiable through the ops it calls; layers that need new
ops (convolution, normalisation, softmax, dropout, embedding, ...) join this module as
those ops land in the table.
"""
import warnings

from .. import _C
from .. import ops as _ops


def _O():
    return _ops.api


def linear(input, weight, bias=None):
    """input @ weight^T + bias."""
    out = input.matmul(weight.t())
    return out if bias is None else out + bias


def relu(input, inplace=False):
    return input.relu_() if inplace else input.relu()


def relu_(input):
    return input.relu_()


def leaky_relu(input, negative_slope=0.01, inplace=False):
    out = _O().where(input > 0, input, input * negative_slope)
    return input.copy_(out) if inplace else out


def sigmoid(input):
    return input.sigmoid()


def tanh(input):
    return input.tanh()


def _abs(x):
    """|x| with gradient 0 at 0 (as PyTorch's abs), from the abs op once it exists."""
    if hasattr(x, "abs"):
        return x.abs()
    where = _O().where
    return where(x > 0, x, where(x < 0, -x, x * 0))


# ------------------------------------------------------------------ losses

def _legacy_reduction(size_average, reduce, emit_warning=True):
    """Maps the deprecated size_average/reduce flags to a reduction string."""
    size_average = True if size_average is None else size_average
    reduce = True if reduce is None else reduce
    if size_average and reduce:
        ret = "mean"
    elif reduce:
        ret = "sum"
    else:
        ret = "none"
    if emit_warning:
        warnings.warn(f"size_average and reduce args will be deprecated, please use "
                      f"reduction='{ret}' instead.", stacklevel=3)
    return ret


def _reduce(loss, reduction):
    if reduction == "none":
        return loss
    if reduction == "mean":
        return loss.mean()
    if reduction == "sum":
        return loss.sum()
    raise ValueError(f"{reduction} is not a valid value for reduction")


def _pointwise_loss(name, fn, input, target, size_average, reduce, reduction, weight):
    if not isinstance(input, _C.Tensor) or not isinstance(target, _C.Tensor):
        raise TypeError(f"{name}(): input and target must be Tensors")
    if tuple(target.shape) != tuple(input.shape):
        warnings.warn(f"Using a target size ({target.shape}) that is different to the input "
                      f"size ({input.shape}). This will likely lead to incorrect results due "
                      "to broadcasting. Please ensure they have the same size.", stacklevel=3)
    if size_average is not None or reduce is not None:
        reduction = _legacy_reduction(size_average, reduce)
    if reduction not in ("none", "mean", "sum"):
        raise ValueError(f"{reduction} is not a valid value for reduction")
    loss = fn(input - target)
    if weight is not None:
        loss = loss * weight
    return _reduce(loss, reduction)


def mse_loss(input, target, size_average=None, reduce=None, reduction="mean", weight=None):
    """Mean (or sum, or none) of (input - target) ** 2."""
    return _pointwise_loss("mse_loss", lambda d: d * d, input, target, size_average, reduce,
                           reduction, weight)


def l1_loss(input, target, size_average=None, reduce=None, reduction="mean", weight=None):
    """Mean (or sum, or none) of |input - target|."""
    return _pointwise_loss("l1_loss", _abs, input, target, size_average, reduce, reduction,
                           weight)
