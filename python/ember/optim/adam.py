"""Adam and AdamW: adaptive moment estimation (Kingma & Ba), with L2 (Adam) or
decoupled (AdamW, Loshchilov & Hutter) weight decay and the AMSGrad variant."""
from . import _math as M
from ..compiler import is_compiling
from .optimizer import Optimizer, _check_nonnegative, _closure_loss, _scalar, _use_grad


def _check(lr, betas, eps, weight_decay):
    _check_nonnegative(("learning rate", lr), ("epsilon value", eps))
    for i in (0, 1):
        if not 0.0 <= betas[i] < 1.0:
            raise ValueError(f"Invalid beta parameter at index {i}: {betas[i]}")
    _check_nonnegative(("weight_decay value", weight_decay))


class Adam(Optimizer):
    """m = lerp(m, g, 1 - beta1); v = beta2 v + (1 - beta2) g^2;
    p -= lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0,
                 amsgrad=False, *, foreach=None, maximize=False, capturable=False,
                 differentiable=False, fused=None, decoupled_weight_decay=False):
        _check(lr, betas, eps, weight_decay)
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                        amsgrad=amsgrad, maximize=maximize, foreach=foreach,
                        capturable=capturable, differentiable=differentiable, fused=fused,
                        decoupled_weight_decay=decoupled_weight_decay)
        super().__init__(params, defaults)

    @_use_grad
    def step(self, closure=None):
        loss = _closure_loss(closure)
        for group in self.param_groups:
            lr, (beta1, beta2), eps = _scalar(group["lr"]), group["betas"], group["eps"]
            weight_decay, amsgrad = group["weight_decay"], group["amsgrad"]
            buffers = ("exp_avg", "exp_avg_sq") + (("max_exp_avg_sq",) if amsgrad else ())
            for p, grad, state in self._grads(group, buffers):
                if weight_decay != 0:
                    if group["decoupled_weight_decay"]:
                        p.mul_(1 - lr * weight_decay)
                    else:
                        grad = grad.add(p, alpha=weight_decay)
                exp_avg, exp_avg_sq = state["exp_avg"], state["exp_avg_sq"]
                M.lerp_(exp_avg, grad, 1 - beta1)
                M.addcmul_(exp_avg_sq.mul_(beta2), grad, grad, value=1 - beta2)
                # compiled, the step count stays a tensor (a graph input, not a Python
                # number baked into the graph), as torch.optim's does under compile
                step = state["step"] if is_compiling() else state["step"].item()
                step_size = lr / (1 - beta1 ** step)
                bias_correction2_sqrt = (1 - beta2 ** step) ** 0.5
                second = exp_avg_sq
                if amsgrad:
                    second = state["max_exp_avg_sq"]
                    second.copy_(second.maximum(exp_avg_sq))
                denom = (M.sqrt(second) / bias_correction2_sqrt).add_(eps)
                M.addcdiv_(p, exp_avg, denom, value=-step_size)
        return loss


class AdamW(Adam):
    """Adam with decoupled weight decay: p *= 1 - lr * weight_decay before the update."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2,
                 amsgrad=False, *, maximize=False, foreach=None, capturable=False,
                 differentiable=False, fused=None):
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad, foreach=foreach,
                         maximize=maximize, capturable=capturable,
                         differentiable=differentiable, fused=fused,
                         decoupled_weight_decay=True)
