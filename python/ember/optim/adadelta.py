"""Adadelta: per-element step sizes from running averages of squared gradients and of
squared updates (Zeiler), so the unit of the update matches the parameter's."""
from . import _math as M
from .optimizer import (Optimizer, _check_lr, _check_nonnegative, _closure_loss, _scalar,
                        _use_grad)


class Adadelta(Optimizer):
    """v = rho v + (1 - rho) g^2; delta = sqrt(u + eps) / sqrt(v + eps) * g;
    u = rho u + (1 - rho) delta^2; p -= lr * delta."""

    def __init__(self, params, lr=1.0, rho=0.9, eps=1e-6, weight_decay=0, foreach=None, *,
                 capturable=False, maximize=False, differentiable=False):
        _check_lr(lr)
        if not 0.0 <= rho <= 1.0:
            raise ValueError(f"Invalid rho value: {rho}")
        _check_nonnegative(("epsilon value", eps), ("weight_decay value", weight_decay))
        defaults = dict(lr=lr, rho=rho, eps=eps, weight_decay=weight_decay, maximize=maximize,
                        capturable=capturable, foreach=foreach, differentiable=differentiable)
        super().__init__(params, defaults)

    @_use_grad
    def step(self, closure=None):
        loss = _closure_loss(closure)
        for group in self.param_groups:
            lr, rho, eps = _scalar(group["lr"]), group["rho"], group["eps"]
            weight_decay = group["weight_decay"]
            for p, grad, state in self._grads(group, ("square_avg", "acc_delta"), xla=False):
                if weight_decay != 0:
                    grad = grad.add(p, alpha=weight_decay)
                square_avg, acc_delta = state["square_avg"], state["acc_delta"]
                M.addcmul_(square_avg.mul_(rho), grad, grad, value=1 - rho)
                std = M.sqrt(square_avg.add(eps))
                delta = M.sqrt(acc_delta.add(eps)).div_(std).mul_(grad)
                M.addcmul_(acc_delta.mul_(rho), delta, delta, value=1 - rho)
                p.add_(delta, alpha=-lr)
        return loss
