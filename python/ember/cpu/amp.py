"""ember.cpu.amp: PyTorch's deprecated torch.cpu.amp names."""
from .. import amp as _amp
from .._C import bfloat16

autocast, GradScaler = _amp._deprecated("cpu", bfloat16)
