"""GradScaler: loss scaling for float16 training (PyTorch's torch.amp.GradScaler). The
loss is multiplied by the scale before backward; step() unscales the gradients and skips
the optimizer step when any is inf or NaN; update() halves the scale after a skipped
step and doubles it after growth_interval good ones. Only "cpu" scales: "cuda" warns and
is disabled (every call passes through), as PyTorch without CUDA is."""
from __future__ import annotations

import math
import warnings

from .. import _C


class GradScaler:
    def __init__(self, device="cpu", init_scale=2.0 ** 16, growth_factor=2.0,
                 backoff_factor=0.5, growth_interval=2000, enabled=True):
        self._device = device
        if enabled and device != "cpu":
            warnings.warn(f"ember.amp.GradScaler is enabled, but {device} is not "
                          "available.  Disabling.", stacklevel=2)
            enabled = False
        if growth_factor <= 1.0:
            raise ValueError("The growth factor must be > 1.0.")
        if backoff_factor >= 1.0:
            raise ValueError("The backoff factor must be < 1.0.")
        self._enabled = enabled
        self._scale = float(init_scale)
        self._init_scale = float(init_scale)
        self._growth_factor = growth_factor
        self._backoff_factor = backoff_factor
        self._growth_interval = growth_interval
        self._growth_tracker = 0
        self._per_optimizer = {}     # id(optimizer) -> {"unscaled": bool, "found_inf": bool}

    def is_enabled(self):
        return self._enabled

    def get_scale(self):
        return self._scale if self._enabled else 1.0

    def get_growth_factor(self):
        return self._growth_factor

    def get_backoff_factor(self):
        return self._backoff_factor

    def get_growth_interval(self):
        return self._growth_interval

    def scale(self, outputs):
        if not self._enabled:
            return outputs
        if isinstance(outputs, _C.Tensor):
            return outputs * self._scale
        if isinstance(outputs, (list, tuple)):
            return type(outputs)(self.scale(o) for o in outputs)
        raise ValueError("outputs must be a Tensor or an iterable of Tensors")

    def _state(self, optimizer):
        return self._per_optimizer.setdefault(id(optimizer),
                                              {"unscaled": False, "found_inf": False})

    def unscale_(self, optimizer):
        if not self._enabled:
            return
        st = self._state(optimizer)
        if st["unscaled"]:
            raise RuntimeError("unscale_() has already been called on this optimizer since "
                               "the last update().")
        inv = 1.0 / self._scale
        found = False
        from ..autograd import no_grad
        with no_grad():
            for group in optimizer.param_groups:
                for p in group["params"]:
                    if p.grad is None:
                        continue
                    if p.grad.dtype is _C.float16:
                        raise ValueError("Attempting to unscale FP16 gradients.")
                    p.grad.mul_(inv)
                    if not bool(p.grad.isfinite().all()):
                        found = True
        st["unscaled"] = True
        st["found_inf"] = found

    def step(self, optimizer, *args, **kwargs):
        if not self._enabled:
            return optimizer.step(*args, **kwargs)
        if "closure" in kwargs:
            raise RuntimeError("Closure use is not currently supported if GradScaler is "
                               "enabled.")
        st = self._state(optimizer)
        if not st["unscaled"]:
            self.unscale_(optimizer)
        if not st["found_inf"]:
            return optimizer.step(*args, **kwargs)
        return None

    def update(self, new_scale=None):
        if not self._enabled:
            return
        if new_scale is not None:
            self._scale = float(new_scale.item() if isinstance(new_scale, _C.Tensor)
                                else new_scale)
        elif self._per_optimizer:
            if any(st["found_inf"] for st in self._per_optimizer.values()):
                self._scale *= self._backoff_factor
                self._growth_tracker = 0
            else:
                self._growth_tracker += 1
                if self._growth_tracker == self._growth_interval:
                    grown = self._scale * self._growth_factor
                    if math.isfinite(grown):
                        self._scale = grown
                    self._growth_tracker = 0
        self._per_optimizer = {}

    def state_dict(self):
        if not self._enabled:
            return {}
        return {"scale": self._scale, "growth_factor": self._growth_factor,
                "backoff_factor": self._backoff_factor,
                "growth_interval": self._growth_interval,
                "_growth_tracker": self._growth_tracker}

    def load_state_dict(self, state_dict):
        if not self._enabled:
            return
        if len(state_dict) == 0:
            raise RuntimeError("The source state dict is empty, possibly because it was saved "
                               "from a disabled instance of GradScaler.")
        self._scale = float(state_dict["scale"])
        self._growth_factor = state_dict["growth_factor"]
        self._backoff_factor = state_dict["backoff_factor"]
        self._growth_interval = state_dict["growth_interval"]
        self._growth_tracker = state_dict["_growth_tracker"]
