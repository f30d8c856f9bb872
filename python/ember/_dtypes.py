"""The dtype table: every ember dtype once, in the order of their codes (the order of
PyTorch's promotion lattice). Names come from the dtype objects themselves (`_name`:
"float32"; `_torch_name`: "Float", as PyTorch's messages print them)."""
from . import _C

ALL = (_C.bool, _C.uint8, _C.int8, _C.int16, _C.int32, _C.int64, _C.float16, _C.float32,
       _C.float64, _C.bfloat16, _C.complex64, _C.complex128)
BY_NAME = {d._name: d for d in ALL}
FLOATING = tuple(d for d in ALL if d.is_floating_point)
HALF = (_C.float16, _C.bfloat16)      # computed in float32 (PyTorch's op math)
COMPLEX = (_C.complex64, _C.complex128)


def name(dtype) -> str:
    """'float32' for ember.float32."""
    return dtype._name
