"""ember.backends: the backend flags scripts commonly set (cudnn.benchmark,
cuda.matmul.allow_tf32, ...). Ember runs on the CPU, so the CUDA, cuDNN and MPS
backends are not available; their flags are kept (reading one back gives what was
set, with PyTorch's defaults) and change nothing. Unknown flags are refused as
PyTorch refuses them."""
from . import cpu, cuda, cudnn, mps  # noqa: F401
