"""RMSprop: divide the gradient by a running RMS of recent gradients (Hinton), with
optional momentum and centring (Graves)."""
from . import _math as M
from .optimizer import Optimizer, _check_nonnegative, _closure_loss, _scalar, _use_grad


class RMSprop(Optimizer):
    """v = alpha v + (1 - alpha) g^2; p -= lr g / (sqrt(v - mean(g)^2 if centered) + eps),
    through a momentum buffer when momentum > 0."""

    def __init__(self, params, lr=1e-2, alpha=0.99, eps=1e-8, weight_decay=0, momentum=0,
                 centered=False, capturable=False, foreach=None, maximize=False,
                 differentiable=False):
        _check_nonnegative(("learning rate", lr), ("epsilon value", eps),
                           ("momentum value", momentum), ("weight_decay value", weight_decay),
                           ("alpha value", alpha))
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
            buffers = ("square_avg",) + (("momentum_buffer",) if momentum > 0 else ()) + \
                (("grad_avg",) if centered else ())
            for p, grad, state in self._grads(group, buffers):
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
