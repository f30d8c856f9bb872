"""Ember: a small deep-learning compiler.

An eager, PyTorch-style tensor library whose tensors live in NumPy arrays (`import ember
as torch` runs common model code), and the compile stack around it.
"""
from . import _C
from ._C import (Size, Tensor, UntypedStorage, dtype, from_numpy, get_default_dtype,
                 get_num_threads, is_grad_enabled, promote_types, result_type,
                 set_default_dtype, set_num_threads)
from ._C import (bool as _bool, bfloat16, complex64, complex128, float16, float32, float64,
                 int8, int16, int32, int64, uint8)
from . import ops as _ops
from .device import device, get_default_device, set_default_device

_ops.install(globals())

from ._tensor_new import as_tensor, tensor  # noqa: E402
from ._tensor_str import set_printoptions, tensor_repr as _tensor_repr  # noqa: E402
from . import autograd  # noqa: E402
from .autograd import enable_grad, inference_mode, no_grad, set_grad_enabled  # noqa: E402
from . import random  # noqa: E402
from .random import (Generator, get_rng_state, initial_seed, manual_seed, seed,  # noqa: E402
                     set_rng_state)
from . import _tensor  # noqa: E402,F401
from ._interop import from_dlpack, to_dlpack  # noqa: E402
from ._type_info import finfo, iinfo  # noqa: E402
from . import return_types  # noqa: E402,F401
from . import prims  # noqa: E402,F401
from . import linalg  # noqa: E402
linalg.install(globals())     # ember.inverse, det, svd, ...; norm(p='nuc')
from . import functional  # noqa: E402
functional.install(globals())  # meshgrid, broadcast_tensors, atleast_*, tensor_split, ...
from . import special  # noqa: E402
special.install(globals())     # Tensor.polygamma, mvlgamma_
from . import fft  # noqa: E402,F401
from . import _settings  # noqa: E402
_settings.install(globals())    # set_float32_matmul_precision, use_deterministic_algorithms

_C._set_tensor_hooks(_tensor_repr, device("cpu"), device("meta"))

# PyTorch's dtype aliases (assigned last: they shadow builtins in this module)
globals().update({"bool": _bool, "float": float32, "double": float64, "half": float16,
                  "long": int64, "int": int32, "short": int16, "cfloat": complex64,
                  "cdouble": complex128})
preserve_format = "preserve_format"
contiguous_format = "contiguous_format"

__version__ = "0.1.0"


def is_tensor(obj):
    return isinstance(obj, Tensor)


def numel(t):
    return t.numel()

from . import nn, optim, utils  # noqa: E402
cosine_similarity = nn.functional.cosine_similarity
pairwise_distance = nn.functional.pairwise_distance
from .serialization import load, save  # noqa: E402
from . import capture  # noqa: E402
from . import backends, cuda, cpu, amp  # noqa: E402,F401
from .amp import autocast  # noqa: E402
from .amp.autocast_mode import (get_autocast_cpu_dtype, get_autocast_dtype,  # noqa: E402
                                is_autocast_cpu_enabled, is_autocast_enabled,
                                set_autocast_dtype, set_autocast_enabled)
from . import aot  # noqa: E402,F401  (registers backend "aot_eager")
from . import compiler  # noqa: E402
from .capture import compile  # noqa: E402,F811
from .capture.logs import set_logs  # noqa: E402

_dynamo = capture
sys_modules = __import__("sys").modules
sys_modules[__name__ + "._dynamo"] = capture
del sys_modules
