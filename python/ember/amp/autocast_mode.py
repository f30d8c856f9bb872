"""autocast: a context manager (and decorator) under which the ops of PyTorch's CPU
autocast lists (ember/ops/autocast_lists.py) cast their floating arguments, as
torch.autocast does: matmuls and convolutions to bfloat16 (or float16), losses and
factorizations to float32, cat/stack to the widest input type. The state is the
thread's own (C: em_tls.autocast, read by every op call); compiled frames guard on it.
Only "cpu" casts: "cuda" (or any other known device type) warns and does nothing, as
PyTorch without CUDA does."""
from __future__ import annotations

import functools
import warnings

from .. import _C

_DEVICE_TYPES = ("cpu", "cuda", "xpu", "mps", "hpu", "xla", "meta", "mtia", "ipu")
_CPU_DTYPES = (_C.bfloat16, _C.float16)
_cpu_dtype = [_C.bfloat16]      # get/set_autocast_dtype("cpu"): the default of autocast


def is_autocast_available(device_type: str) -> bool:
    return device_type == "cpu"


class autocast:
    """autocast(device_type, dtype=None, enabled=True, cache_enabled=None)"""

    def __init__(self, device_type, dtype=None, enabled=True, cache_enabled=None):
        if not isinstance(device_type, str):
            raise ValueError(f"Expected `device_type` of type `str`, got: "
                             f"`{type(device_type)}`")
        if device_type not in _DEVICE_TYPES:
            raise RuntimeError(f"Invalid device string: '{device_type}'")
        self.device = device_type
        self.fast_dtype = _cpu_dtype[0] if dtype is None else dtype
        self._enabled = bool(enabled)
        self._cache_enabled = cache_enabled
        if device_type != "cpu":
            if enabled:
                warnings.warn("CUDA is not available or torch_xla is imported. Disabling "
                              "autocast." if device_type == "cuda" else
                              f"{device_type} autocast is not available here. Disabling "
                              "autocast.", stacklevel=2)
            self._enabled = False
        elif self._enabled and self.fast_dtype not in _CPU_DTYPES:
            warnings.warn("In CPU autocast, but the target dtype is not supported. "
                          "Disabling autocast.\nCPU Autocast only supports dtypes of "
                          "ember.bfloat16, ember.float16 currently.", stacklevel=2)
            self._enabled = False
        self._prev = []

    def __enter__(self):
        if self.device == "cpu":
            self._prev.append(_C._set_autocast(self.fast_dtype if self._enabled else None))
        return self

    def __exit__(self, *exc):
        if self.device == "cpu":
            _C._set_autocast(self._prev.pop())
        return False

    def __call__(self, fn):
        @functools.wraps(fn)
        def decorated(*args, **kwargs):
            with autocast(self.device, self.fast_dtype, self._enabled, self._cache_enabled):
                return fn(*args, **kwargs)
        return decorated


def is_autocast_enabled(device_type=None):
    """PyTorch's: with no device type, CUDA's state (never on here)."""
    if device_type is None:
        return False
    return device_type == "cpu" and _C._get_autocast() is not None


def is_autocast_cpu_enabled():
    warnings.warn("ember.is_autocast_cpu_enabled() is deprecated. Please use "
                  "ember.is_autocast_enabled('cpu') instead.", DeprecationWarning, stacklevel=2)
    return _C._get_autocast() is not None


def get_autocast_dtype(device_type):
    if device_type not in _DEVICE_TYPES:
        raise RuntimeError(f"Invalid device string: '{device_type}'")
    on = _C._get_autocast() if device_type == "cpu" else None
    return on if on is not None else (_cpu_dtype[0] if device_type == "cpu" else _C.float16)


def get_autocast_cpu_dtype():
    return get_autocast_dtype("cpu")


def set_autocast_enabled(device_type, enabled):
    if device_type == "cpu":
        _C._set_autocast(_cpu_dtype[0] if enabled else None)


def set_autocast_dtype(device_type, dtype):
    if device_type == "cpu":
        _cpu_dtype[0] = dtype
        if _C._get_autocast() is not None:
            _C._set_autocast(dtype)


def custom_fwd(fwd=None, *, device_type="cpu", cast_inputs=None):
    """Decorates an autograd.Function's forward: with cast_inputs, runs it with autocast
    off and its floating tensor inputs cast to cast_inputs (when autocast is on)."""
    if fwd is None:
        return functools.partial(custom_fwd, device_type=device_type, cast_inputs=cast_inputs)

    @functools.wraps(fwd)
    def decorate_fwd(*args, **kwargs):
        if cast_inputs is None or not is_autocast_enabled(device_type):
            return fwd(*args, **kwargs)
        args = [a.to(cast_inputs) if isinstance(a, _C.Tensor) and a.is_floating_point()
                else a for a in args]
        with autocast(device_type, enabled=False):
            return fwd(*args, **kwargs)
    return decorate_fwd


def custom_bwd(bwd=None, *, device_type="cpu"):
    """Decorates an autograd.Function's backward: runs it under the autocast state of
    the time of the call (PyTorch: the forward's)."""
    if bwd is None:
        return functools.partial(custom_bwd, device_type=device_type)
    return bwd
