"""Rprop: resilient backpropagation (Riedmiller & Braun): per-element step sizes grown by
etaplus while the gradient keeps its sign and shrunk by etaminus when it flips."""
from functools import partial

from .. import full_like, zeros_like
from . import _math as M
from .optimizer import Optimizer, _check_lr, _closure_loss, _scalar, _use_grad


def _init(lr, p, state):
    state["prev"] = zeros_like(p)
    state["step_size"] = full_like(p.grad, lr)


class Rprop(Optimizer):
    """s = clamp(s * eta(sign(g * prev)), step_sizes); where the sign flipped g = 0;
    p -= sign(g) * s; prev = g."""

    def __init__(self, params, lr=1e-2, etas=(0.5, 1.2), step_sizes=(1e-6, 50), *,
                 capturable=False, foreach=None, maximize=False, differentiable=False):
        _check_lr(lr)
        if not 0.0 < etas[0] < 1.0 < etas[1]:
            raise ValueError(f"Invalid eta values: {etas[0]}, {etas[1]}")
        defaults = dict(lr=lr, etas=etas, step_sizes=step_sizes, foreach=foreach,
                        maximize=maximize, differentiable=differentiable,
                        capturable=capturable)
        super().__init__(params, defaults)

    @_use_grad
    def step(self, closure=None):
        loss = _closure_loss(closure)
        for group in self.param_groups:
            etaminus, etaplus = group["etas"]
            step_size_min, step_size_max = group["step_sizes"]
            for p, grad, state in self._grads(group, partial(_init, _scalar(group["lr"]))):
                prev, step_size = state["prev"], state["step_size"]
                sign = grad.mul(prev).sign()
                factor = full_like(sign, 1.0).masked_fill(sign > 0, etaplus) \
                    .masked_fill(sign < 0, etaminus)
                step_size.mul_(factor).clamp_(step_size_min, step_size_max)
                grad = grad.masked_fill(factor == etaminus, 0.0)
                M.addcmul_(p, grad.sign(), step_size, value=-1)
                prev.copy_(grad)
        return loss
