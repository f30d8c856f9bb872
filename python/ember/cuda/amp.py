"""ember.cuda.amp: PyTorch's deprecated torch.cuda.amp names. There is no CUDA here:
autocast and GradScaler warn and are disabled, as PyTorch's are without CUDA."""
from .. import amp as _amp
from .._C import float16

autocast, GradScaler = _amp._deprecated("cuda", float16)
custom_fwd = _amp.custom_fwd
custom_bwd = _amp.custom_bwd
