"""ember.amp: automatic mixed precision on the CPU (PyTorch's torch.amp)."""
from .autocast_mode import autocast, custom_bwd, custom_fwd, is_autocast_available  # noqa: F401
from .grad_scaler import GradScaler  # noqa: F401


def _deprecated(device, default_dtype):
    """torch.<device>.amp's deprecated autocast and GradScaler: ember.amp's with a
    FutureWarning naming the replacement (ember.cpu.amp, ember.cuda.amp)."""
    import warnings

    def autocast(enabled=True, dtype=default_dtype, cache_enabled=True):
        warnings.warn(f"`ember.{device}.amp.autocast(args...)` is deprecated. Please use "
                      f"`ember.amp.autocast('{device}', args...)` instead.", FutureWarning,
                      stacklevel=2)
        return _autocast_cls(device, dtype=dtype, enabled=enabled, cache_enabled=cache_enabled)

    def grad_scaler(init_scale=2.0 ** 16, growth_factor=2.0, backoff_factor=0.5,
                    growth_interval=2000, enabled=True):
        warnings.warn(f"`ember.{device}.amp.GradScaler(args...)` is deprecated. Please use "
                      f"`ember.amp.GradScaler('{device}', args...)` instead.", FutureWarning,
                      stacklevel=2)
        return GradScaler(device, init_scale, growth_factor, backoff_factor, growth_interval,
                          enabled)
    grad_scaler.__name__ = grad_scaler.__qualname__ = "GradScaler"
    return autocast, grad_scaler


_autocast_cls = autocast
