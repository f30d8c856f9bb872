"""ember.utils.dlpack: DLPack interop, as torch.utils.dlpack (from_dlpack, to_dlpack,
DLDeviceType). The implementation is ember._interop."""
from .._interop import DLDeviceType, from_dlpack, to_dlpack

__all__ = ["DLDeviceType", "from_dlpack", "to_dlpack"]
