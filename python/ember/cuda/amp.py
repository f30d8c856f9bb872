"""ember.cuda.amp: PyTorch's deprecated torch.cuda.amp names. There is no CUDA here:
autocast and GradScaler warn and are disabled, as PyTorch's are without CUDA."""
import warnings

from .. import amp as _amp
from .._C import float16


def autocast(enabled=True, dtype=float16, cache_enabled=True):
    warnings.warn("`ember.cuda.amp.autocast(args...)` is deprecated. Please use "
                  "`ember.amp.autocast('cuda', args...)` instead.", FutureWarning, stacklevel=2)
    return _amp.autocast("cuda", dtype=dtype, enabled=enabled, cache_enabled=cache_enabled)


def GradScaler(init_scale=2.0 ** 16, growth_factor=2.0, backoff_factor=0.5,
               growth_interval=2000, enabled=True):
    warnings.warn("`ember.cuda.amp.GradScaler(args...)` is deprecated. Please use "
                  "`ember.amp.GradScaler('cuda', args...)` instead.", FutureWarning,
                  stacklevel=2)
    return _amp.GradScaler("cuda", init_scale, growth_factor, backoff_factor,
                           growth_interval, enabled)


custom_fwd = _amp.custom_fwd
custom_bwd = _amp.custom_bwd
