"""RMSprop: divide the gradient by a running RMS of recent gradients (Hinton), with
optional momentum and centring (Graves)."""
from .. import zeros_like
from . import _math as M
from .optimizer import (Optimizer, _check_capturable, _closure_loss, _scalar,
                        _use_grad)


class RMSprop(Optimizer):
    """v = alpha v + (1 - alpha) g^2; p -= lr g / (sqrt(v - mean(g)^2 if centered) + eps),
    through a momentum buffer when momentum > 0."""

    def __init__(self, params, lr=1e-2, alpha=0.99, eps=1e-8, weight_decay=0, momentum=0,
                 centered=False, capturable=False, foreach=None, maximize=False,
                 differentiable=False):
        for name, value in (("learning rate", lr), ("epsilon value", eps),
                            ("momentum value", momentum),
                            ("weight_decay value", weight_decay), ("alpha value", alpha)):
            if not 0.0 <= value:
                raise ValueError(f"Invalid {name}: {value}")
        defaults = dict(lr=lr, momentum=momentum, alpha=alpha, eps=eps, centered=centered,
                        weight_decay=weight_decay, capturable=capturable, foreach=foreach,
                        maximize=maximize, differentiable=differentiable)
        super().__init__(params, defaults)

    @_use_grad
    def step(self, closure=None):
        loss = _closure_loss(closure)
        for group in self.param_groups:
            lr, alpha, eps = _scalar(group["lr"]), group["alpha"], group["eps"]
            momentum, centered = group["momentum"], group["centered"]
            params = list(self._params_with_grad(group))
            if params:
                _check_capturable(group)
            for p in params:
                state = self.state[p]
                if not state:
                    state["step"] = M.step_counter()
                    state["square_avg"] = zeros_like(p)
                    if momentum > 0:
                        state["momentum_buffer"] = zeros_like(p)
                    if centered:
                        state["grad_avg"] = zeros_like(p)
                grad = -p.grad if group["maximize"] else p.grad
                state["step"].add_(1)
                if group["weight_decay"] != 0:
                    grad = grad.add(p, alpha=group["weight_decay"])
                square_avg = state["square_avg"]
                M.addcmul_(square_avg.mul_(alpha), grad, grad, value=1 - alpha)
                if centered:
                    grad_avg = M.lerp_(state["grad_avg"], grad, 1 - alpha)
                    avg = M.sqrt(M.addcmul_(square_avg.clone(), grad_avg, grad_avg, value=-1))
                else:
                    avg = M.sqrt(square_avg)
                avg = avg.add_(eps)
                if momentum > 0:
                    buf = state["momentum_buffer"]
                    M.addcdiv_(buf.mul_(momentum), grad, avg)
                    p.add_(buf, alpha=-lr)
                else:
                    M.addcdiv_(p, grad, avg, value=-lr)
        return loss
