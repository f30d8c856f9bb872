"""SGD: stochastic gradient descent with optional momentum (heavy ball or Nesterov),
dampening, weight decay and maximisation."""
from .optimizer import Optimizer, _closure_loss, _use_grad


class SGD(Optimizer):
    """p -= lr * d, where d is the gradient (plus weight_decay * p), or its momentum
    buffer b = momentum * b + (1 - dampening) * d (Nesterov: d + momentum * b)."""

    def __init__(self, params, lr=1e-3, momentum=0, dampening=0, weight_decay=0,
                 nesterov=False, *, maximize=False, foreach=None, differentiable=False,
                 fused=None):
        if lr < 0.0:
            raise ValueError(f"Invalid learning rate: {lr}")
        if momentum < 0.0:
            raise ValueError(f"Invalid momentum value: {momentum}")
        if weight_decay < 0.0:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("Nesterov momentum requires a momentum and zero dampening")
        defaults = dict(lr=lr, momentum=momentum, dampening=dampening,
                        weight_decay=weight_decay, nesterov=nesterov, maximize=maximize,
                        foreach=foreach, differentiable=differentiable, fused=fused)
        super().__init__(params, defaults)

    @_use_grad
    def step(self, closure=None):
        loss = _closure_loss(closure)
        for group in self.param_groups:
            lr, momentum, dampening = group["lr"], group["momentum"], group["dampening"]
            weight_decay, nesterov = group["weight_decay"], group["nesterov"]
            for p in self._params_with_grad(group):
                d = -p.grad if group["maximize"] else p.grad
                if weight_decay != 0:
                    d = d.add(p, alpha=weight_decay)
                if momentum != 0:
                    state = self.state[p]
                    buf = state.get("momentum_buffer")
                    if buf is None:
                        buf = d.detach().clone()
                        state["momentum_buffer"] = buf
                    else:
                        buf.mul_(momentum).add_(d, alpha=1 - dampening)
                    d = d.add(buf, alpha=momentum) if nesterov else buf
                p.add_(d, alpha=-lr)
        return loss
