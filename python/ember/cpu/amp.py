"""ember.cpu.amp: PyTorch's deprecated torch.cpu.amp names."""
import warnings

from .. import amp as _amp
from .._C import bfloat16


def autocast(enabled=True, dtype=bfloat16, cache_enabled=True):
    warnings.warn("`ember.cpu.amp.autocast(args...)` is deprecated. Please use "
                  "`ember.amp.autocast('cpu', args...)` instead.", FutureWarning, stacklevel=2)
    return _amp.autocast("cpu", dtype=dtype, enabled=enabled, cache_enabled=cache_enabled)


def GradScaler(init_scale=2.0 ** 16, growth_factor=2.0, backoff_factor=0.5,
               growth_interval=2000, enabled=True):
    warnings.warn("`ember.cpu.amp.GradScaler(args...)` is deprecated. Please use "
                  "`ember.amp.GradScaler('cpu', args...)` instead.", FutureWarning,
                  stacklevel=2)
    return _amp.GradScaler("cpu", init_scale, growth_factor, backoff_factor,
                           growth_interval, enabled)
