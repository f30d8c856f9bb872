"""Gradient clipping: rescale (clip_grad_norm_) or clamp (clip_grad_value_) the .grad of
parameters in place, as PyTorch does before an optimizer step."""
import math

from ... import _C
from ...autograd import no_grad


def _grads(parameters):
    if isinstance(parameters, _C.Tensor):
        parameters = [parameters]
    return [p.grad for p in parameters if p.grad is not None]


def _abs(x):
    from ...ops import api
    return x.abs() if hasattr(x, "abs") else api.where(x < 0, -x, x)


def _vector_norm(x, norm_type):
    """The norm_type-norm of all elements of x, as a 0-d tensor."""
    if norm_type == math.inf:
        return _abs(x).amax() if x.numel() else x.sum() * 0
    if norm_type == 2:
        return (x * x).sum() ** 0.5
    if norm_type == 1:
        return _abs(x).sum()
    if norm_type == 0:
        return (x != 0).sum().to(x.dtype)
    return (_abs(x) ** norm_type).sum() ** (1.0 / norm_type)


def _total_norm(grads, norm_type, error_if_nonfinite):
    from ... import tensor
    norm_type = float(norm_type)
    if not grads:
        return tensor(0.0)
    norms = [_vector_norm(g.detach(), norm_type) for g in grads]
    if norm_type == math.inf:
        total = norms[0]
        for n in norms[1:]:
            total = total.maximum(n)
    elif norm_type == 2:
        total = sum((n * n for n in norms[1:]), norms[0] * norms[0]) ** 0.5
    else:
        total = sum((_abs(n) ** norm_type for n in norms[1:]),
                    _abs(norms[0]) ** norm_type) ** (1.0 / norm_type)
    if error_if_nonfinite and not math.isfinite(total.item()):
        raise RuntimeError(f"The total norm of order {norm_type} for gradients from "
                           "`parameters` is non-finite, so it cannot be clipped. To disable "
                           "this error and scale the gradients by the non-finite norm anyway, "
                           "set `error_if_nonfinite=False`")
    return total


def clip_grad_norm_(parameters, max_norm, norm_type=2.0, error_if_nonfinite=False,
                    foreach=None):
    """Scales all gradients by min(1, max_norm / (total_norm + 1e-6)); returns the total
    norm of the gradients before clipping (a 0-d tensor)."""
    with no_grad():
        grads = _grads(parameters)
        total = _total_norm(grads, norm_type, error_if_nonfinite)
        if not grads:
            return total
        coef = float(max_norm) / (total + 1e-6)
        from ...ops import api
        coef = api.where(coef < 1.0, coef, 1.0)
        for g in grads:
            g.mul_(coef.to(g.dtype))
        return total


def clip_grad_value_(parameters, clip_value, foreach=None):
    """Clamps every gradient element into [-clip_value, clip_value] (NaN stays NaN)."""
    from ...ops import api
    v = float(clip_value)
    with no_grad():
        for g in _grads(parameters):
            g.copy_(api.where(g > v, v, api.where(g < -v, -v, g)))
