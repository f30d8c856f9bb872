"""RAdam: Adam with the variance of its adaptive rate rectified (Liu et al.): plain
momentum SGD while the approximated SMA length rho_t is at most 5; optional decoupled
weight decay."""
from . import _math as M
from .adam import _check
from .optimizer import Optimizer, _closure_loss, _scalar, _use_grad


class RAdam(Optimizer):
    """m, v as Adam; rho_t = rho_inf - 2 t beta2^t / (1 - beta2^t); when rho_t > 5:
    p -= lr * m / (1 - beta1^t) * sqrt(1 - beta2^t) / (sqrt(v) + eps) * r_t, else
    p -= lr * m / (1 - beta1^t)."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0,
                 decoupled_weight_decay=False, *, foreach=None, maximize=False,
                 capturable=False, differentiable=False):
        _check(lr, betas, eps, weight_decay)
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                        maximize=maximize, foreach=foreach, capturable=capturable,
                        decoupled_weight_decay=decoupled_weight_decay,
                        differentiable=differentiable)
        super().__init__(params, defaults)

    @_use_grad
    def step(self, closure=None):
        loss = _closure_loss(closure)
        for group in self.param_groups:
            lr, (beta1, beta2), eps = _scalar(group["lr"]), group["betas"], group["eps"]
            weight_decay = group["weight_decay"]
            for p, grad, state in self._grads(group, ("exp_avg", "exp_avg_sq")):
                step = state["step"].item()
                if weight_decay != 0:
                    if group["decoupled_weight_decay"]:
                        p.mul_(1 - lr * weight_decay)
                    else:
                        grad = grad.add(p, alpha=weight_decay)
                exp_avg, exp_avg_sq = state["exp_avg"], state["exp_avg_sq"]
                M.lerp_(exp_avg, grad, 1 - beta1)
                M.addcmul_(exp_avg_sq.mul_(beta2), grad, grad, value=1 - beta2)
                bias_correction1 = 1 - beta1 ** step
                bias_correction2 = 1 - beta2 ** step
                corrected = exp_avg / bias_correction1
                rho_inf = 2 / (1 - beta2) - 1
                rho_t = rho_inf - 2 * step * (beta2 ** step) / bias_correction2
                if rho_t > 5.0:
                    rect = ((rho_t - 4) * (rho_t - 2) * rho_inf /
                            ((rho_inf - 4) * (rho_inf - 2) * rho_t)) ** 0.5
                    adaptive = (bias_correction2 ** 0.5) / M.sqrt(exp_avg_sq).add_(eps)
                    p.add_(corrected * lr * adaptive * rect, alpha=-1.0)
                else:
                    p.add_(corrected * lr, alpha=-1.0)
        return loss
