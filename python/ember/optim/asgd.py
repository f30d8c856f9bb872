"""ASGD: averaged stochastic gradient descent (Polyak & Juditsky), with the step size
eta_t = lr / (1 + lambd lr t)^alpha and averaging from step t0 on."""
from functools import partial

from .. import ones, tensor, zeros_like
from .optimizer import Optimizer, _check_lr, _closure_loss, _scalar, _use_grad


def _init(lr, p, state):
    dt = state["step"].dtype
    state["eta"] = tensor(lr, dtype=dt)
    state["mu"] = ones((), dtype=dt)
    state["ax"] = zeros_like(p)


class ASGD(Optimizer):
    """p = p (1 - lambd eta) - eta g; ax += mu (p - ax) (ax = p while mu is 1);
    eta and mu (0-d tensors of the step counter's dtype) follow the step count."""

    def __init__(self, params, lr=1e-2, lambd=1e-4, alpha=0.75, t0=1e6, weight_decay=0,
                 foreach=None, maximize=False, differentiable=False, capturable=False):
        _check_lr(lr)
        if not 0.0 <= weight_decay:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        defaults = dict(lr=lr, lambd=lambd, alpha=alpha, t0=t0, weight_decay=weight_decay,
                        foreach=foreach, maximize=maximize, differentiable=differentiable,
                        capturable=capturable)
        super().__init__(params, defaults)

    @_use_grad
    def step(self, closure=None):
        loss = _closure_loss(closure)
        for group in self.param_groups:
            lr, lambd, alpha, t0 = (_scalar(group["lr"]), group["lambd"], group["alpha"],
                                    group["t0"])
            for p, grad, state in self._grads(group, partial(_init, lr),
                                              "params, mus, etas, and state_steps"):
                step_t, eta, mu, ax = state["step"], state["eta"], state["mu"], state["ax"]
                if group["weight_decay"] != 0:
                    grad = grad.add(p, alpha=group["weight_decay"])
                eta_value = eta.item()
                p.mul_(1 - lambd * eta_value)
                p.add_(grad, alpha=-eta_value)
                if mu.item() != 1:
                    ax.add_(p.sub(ax).mul_(mu))
                else:
                    ax.copy_(p)
                step = step_t.item()
                # through a tensor of the default dtype, as torch.optim's as_tensor
                eta.copy_(tensor(lr / ((1 + lambd * lr * step) ** alpha)))
                mu.copy_(tensor(1 / max(1, step - t0)))
        return loss
