"""ember.backends.cuda: CUDA matmul flags (kept, no effect: ember runs on the CPU)."""
from ._flags import Flags

matmul = Flags(allow_tf32=False, allow_fp16_reduced_precision_reduction=True,
               allow_bf16_reduced_precision_reduction=True)


def is_built():
    return False
