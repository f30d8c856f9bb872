"""Adamax: Adam with the infinity norm (Kingma & Ba, section 7)."""
from . import _math as M
from .adam import _check
from .optimizer import Optimizer, _closure_loss, _scalar, _use_grad


class Adamax(Optimizer):
    """m = lerp(m, g, 1 - beta1); u = max(beta2 u, |g| + eps);
    p -= lr / (1 - beta1^t) * m / u."""

    def __init__(self, params, lr=2e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0,
                 foreach=None, *, maximize=False, differentiable=False, capturable=False):
        _check(lr, betas, eps, weight_decay)
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                        foreach=foreach, maximize=maximize, differentiable=differentiable,
                        capturable=capturable)
        super().__init__(params, defaults)

    @_use_grad
    def step(self, closure=None):
        loss = _closure_loss(closure)
        for group in self.param_groups:
            lr, (beta1, beta2), eps = _scalar(group["lr"]), group["betas"], group["eps"]
            weight_decay = group["weight_decay"]
            for p, grad, state in self._grads(group, ("exp_avg", "exp_inf")):
                if weight_decay != 0:
                    grad = grad.add(p, alpha=weight_decay)
                exp_avg, exp_inf = state["exp_avg"], state["exp_inf"]
                M.lerp_(exp_avg, grad, 1 - beta1)
                exp_inf.copy_(exp_inf.mul_(beta2).maximum(grad.abs().add_(eps)))
                clr = lr / (1 - beta1 ** state["step"].item())
                M.addcdiv_(p, exp_avg, exp_inf, value=-clr)
        return loss
