"""Adagrad: per-element learning rates that shrink with the sum of squared gradients
(Duchi et al.), with learning-rate decay."""
from .. import full_like
from . import _math as M
from .optimizer import Optimizer, _check_nonnegative, _closure_loss, _use_grad


class Adagrad(Optimizer):
    """s += g^2; p -= lr / (1 + (t - 1) lr_decay) * g / (sqrt(s) + eps)."""

    def __init__(self, params, lr=1e-2, lr_decay=0, weight_decay=0,
                 initial_accumulator_value=0, eps=1e-10, foreach=None, *, maximize=False,
                 differentiable=False, fused=None):
        _check_nonnegative(("learning rate", lr), ("lr_decay value", lr_decay),
                           ("weight_decay value", weight_decay),
                           ("initial_accumulator_value value", initial_accumulator_value),
                           ("epsilon value", eps))
        defaults = dict(lr=lr, lr_decay=lr_decay, eps=eps, weight_decay=weight_decay,
                        initial_accumulator_value=initial_accumulator_value, foreach=foreach,
                        maximize=maximize, differentiable=differentiable, fused=fused)
        super().__init__(params, defaults)
        for group in self.param_groups:
            for p in group["params"]:
                state = self.state[p]
                state["step"] = M.step_counter()
                state["sum"] = full_like(p, group["initial_accumulator_value"])

    @_use_grad
    def step(self, closure=None):
        loss = _closure_loss(closure)
        for group in self.param_groups:
            lr, lr_decay, eps = group["lr"], group["lr_decay"], group["eps"]
            for p in self._params_with_grad(group):
                state = self.state[p]
                state["step"].add_(1)
                step = state["step"].item()
                grad = -p.grad if group["maximize"] else p.grad
                if group["weight_decay"] != 0:
                    grad = grad.add(p, alpha=group["weight_decay"])
                clr = lr / (1 + (step - 1) * lr_decay)
                M.addcmul_(state["sum"], grad, grad, value=1)
                std = M.sqrt(state["sum"]).add_(eps)
                M.addcdiv_(p, grad, std, value=-clr)
        return loss
