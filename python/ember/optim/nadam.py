"""NAdam: Adam with Nesterov momentum (Dozat), its momentum schedule
mu_t = beta1 (1 - 0.5 * 0.96^(t * momentum_decay)), and optional decoupled weight
decay (NAdamW)."""
from .. import ones, zeros_like
from . import _math as M
from .adam import _check
from .optimizer import Optimizer, _closure_loss, _scalar, _use_grad


def _init(p, state):
    # the product of the mu's: a 0-d tensor of the step counter's dtype, as torch.optim
    # keeps it (so it rounds as torch's does)
    state["mu_product"] = ones((), dtype=state["step"].dtype)
    state["exp_avg"] = zeros_like(p)
    state["exp_avg_sq"] = zeros_like(p)


class NAdam(Optimizer):
    """m, v as Adam; with mu_t and the running product of the mu's:
    p -= lr (1 - mu_t) / (1 - prod mu) * g / d + lr mu_{t+1} / (1 - prod mu mu_{t+1}) * m / d,
    d = sqrt(v / (1 - beta2^t)) + eps."""

    def __init__(self, params, lr=2e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0,
                 momentum_decay=4e-3, decoupled_weight_decay=False, *, foreach=None,
                 maximize=False, capturable=False, differentiable=False):
        _check(lr, betas, eps, weight_decay)
        if not 0.0 <= momentum_decay:
            raise ValueError(f"Invalid momentum_decay value: {momentum_decay}")
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                        momentum_decay=momentum_decay,
                        decoupled_weight_decay=decoupled_weight_decay, maximize=maximize,
                        foreach=foreach, capturable=capturable, differentiable=differentiable)
        super().__init__(params, defaults)

    @_use_grad
    def step(self, closure=None):
        loss = _closure_loss(closure)
        for group in self.param_groups:
            lr, (beta1, beta2), eps = _scalar(group["lr"]), group["betas"], group["eps"]
            weight_decay, momentum_decay = group["weight_decay"], group["momentum_decay"]
            for p, grad, state in self._grads(group, _init,
                                              "params, mu_products and state_steps"):
                mu_product = state["mu_product"]
                step = state["step"].item()
                bias_correction2 = 1 - beta2 ** step
                if weight_decay != 0:
                    if group["decoupled_weight_decay"]:
                        p.mul_(1 - lr * weight_decay)
                    else:
                        grad = grad.add(p, alpha=weight_decay)
                mu = beta1 * (1.0 - 0.5 * (0.96 ** (step * momentum_decay)))
                mu_next = beta1 * (1.0 - 0.5 * (0.96 ** ((step + 1) * momentum_decay)))
                mu_product.mul_(mu)
                exp_avg, exp_avg_sq = state["exp_avg"], state["exp_avg_sq"]
                M.lerp_(exp_avg, grad, 1 - beta1)
                M.addcmul_(exp_avg_sq.mul_(beta2), grad, grad, value=1 - beta2)
                denom = M.sqrt(exp_avg_sq.div(bias_correction2)).add_(eps)
                prod = mu_product.item()
                mu_product_next = prod * mu_next
                M.addcdiv_(p, grad, denom, value=-lr * (1.0 - mu) / (1.0 - prod))
                M.addcdiv_(p, exp_avg, denom, value=(-lr * mu_next) / (1.0 - mu_product_next))
        return loss
