"""ember.backends.cpu: the vector instruction set the CPU kernels run on (their target
clones), in PyTorch's names: "AVX512", "AVX2" or "DEFAULT"."""
from .. import _sysinfo


def get_cpu_capability():
    feats = _sysinfo.llvm()["vector_features"]
    if "avx512f" in feats:
        return "AVX512"
    if "avx2" in feats:
        return "AVX2"
    return "DEFAULT"
