"""Interop with other array libraries: DLPack both ways, and array-likes as tensors.

DLPack capsules are ember's own (csrc/tensor/dlpack.c), not NumPy's, whose exporter and
importer refuse dtypes without a NumPy DLPack code (bfloat16): an ember tensor's data is
a NumPy array (its view of the storage, with the tensor's own strides), which
`Tensor.__dlpack__` wraps in a capsule, and `from_dlpack` wraps the array C builds over
the producer's memory (every ember dtype: bool, integers, float16, bfloat16, float32,
float64, complex64, complex128). Both are zero-copy: the capsule keeps the array, hence
the storage, alive, and an imported tensor's storage is the producer's memory, released
through the producer's deleter when the last view dies. As in PyTorch, a tensor that
requires grad is refused (BufferError); read-only data stays read-only (exported with
DLPack 1.0's read-only flag, imported as a read-only tensor); an imported tensor with
strides ember cannot hold (negative ones) is copied unless copy=False.

`array_like(obj)` turns any other array-like (a PyTorch tensor or anything with
__dlpack__, a NumPy scalar, an object with __array_interface__, __array_struct__ or
__array__) into an ember tensor or a NumPy array sharing its memory where it can; it
serves ember.tensor and ember.as_tensor.
"""
from __future__ import annotations

import enum

import numpy as np

from . import _C


class DLDeviceType(enum.IntEnum):
    """Device codes of the DLPack specification (the ones PyTorch names)."""
    kDLCPU = 1
    kDLCUDA = 2
    kDLCUDAHost = 3
    kDLOpenCL = 4
    kDLVulkan = 7
    kDLMetal = 8
    kDLVPI = 9
    kDLROCM = 10
    kDLROCMHost = 11
    kDLExtDev = 12
    kDLCUDAManaged = 13
    kDLOneAPI = 14
    kDLWebGPU = 15
    kDLHexagon = 16
    kDLMAIA = 17


_CPU = (DLDeviceType.kDLCPU, 0)
# devices whose memory the CPU reads directly (pinned host memory)
_HOST = (DLDeviceType.kDLCPU, DLDeviceType.kDLCUDAHost, DLDeviceType.kDLROCMHost)


def _export_array(t):
    """The NumPy array with exactly t's geometry over t's memory."""
    arr = t.numpy()
    itemsize = arr.dtype.itemsize
    strides = tuple(s * itemsize for s in t.stride())
    if arr.strides != strides:       # empty tensors: NumPy keeps zero strides
        arr = np.lib.stride_tricks.as_strided(arr, tuple(t.shape), strides,
                                              writeable=arr.flags.writeable)
    return arr


def tensor_dlpack(self, *, stream=-1, max_version=None, dl_device=None, copy=None):
    """A DLPack capsule of this tensor (zero-copy): "dltensor_versioned" when the caller
    passes max_version >= (1, 0), else the legacy "dltensor". As PyTorch's: a tensor
    that requires grad is refused, and stream must be None or -1 on the CPU."""
    if self.requires_grad:
        raise BufferError("Can't export tensors that require gradient, use tensor.detach()")
    if self.is_meta:
        raise BufferError("Can't export meta tensors: they have no data")
    if stream is not None and type(stream) is not int:
        raise TypeError("stream must be ``int`` or ``none``")
    if stream is not None and stream != -1:
        raise AssertionError("stream should be None on cpu.")
    if dl_device is not None and tuple(dl_device) != _CPU:
        raise BufferError(f"ember tensors are on the CPU; cannot export to DLPack device "
                          f"{tuple(dl_device)}")
    arr = _export_array(self)
    if copy:
        arr = arr.copy()
    versioned = max_version is not None and max_version[0] >= 1
    if not versioned and not arr.flags.writeable:
        raise BufferError("Can't export a read-only tensor as a legacy DLPack capsule "
                          "(it has no read-only flag); ask for max_version=(1, 0)")
    return _C._dlpack_export(arr, versioned, bool(copy))


def tensor_dlpack_device(self):
    """(DLDeviceType.kDLCPU, 0): ember tensors live in CPU memory."""
    if self.is_meta:
        raise ValueError("Unknown device type meta for Dlpack")
    return _CPU


def _check_device(device):
    if device is None:
        return
    name = device if isinstance(device, str) else getattr(device, "type", str(device))
    if str(name).split(":")[0] != "cpu":
        raise RuntimeError(f"ember runs on the CPU only: device {device!r} is not available")


def _wrap(arr, copy, what):
    """An ember tensor over arr (a NumPy array of an ember dtype, imported through
    DLPack)."""
    if any(s < 0 for s in arr.strides):
        if copy is False:
            raise BufferError(f"{what}: the tensor has negative strides, which ember "
                              "tensors cannot hold; copy=False forbids the copy")
        arr = arr.copy()
    return _C.from_numpy(arr)


def from_dlpack(ext_tensor, *, device=None, copy=None):
    """An ember tensor sharing the memory of ext_tensor: any object with __dlpack__ and
    __dlpack_device__ (a PyTorch tensor, a NumPy array, ...) or a DLPack capsule (which
    can be consumed once). copy=True copies; copy=False never copies."""
    _check_device(device)
    if hasattr(ext_tensor, "__dlpack__"):
        dev = ext_tensor.__dlpack_device__()
        if dev[0] not in _HOST:
            raise BufferError(f"ember.from_dlpack: ember runs on the CPU only; the tensor is "
                              f"on DLPack device {tuple(dev)}")
        try:     # the versioned protocol (DLPack 1.0), else the legacy one
            capsule = ext_tensor.__dlpack__(max_version=(1, 0), copy=copy)
        except TypeError:
            capsule = ext_tensor.__dlpack__()
        arr, copied, _ = _C._dlpack_import(capsule)
        if copy and not copied:
            arr = arr.copy()
    else:
        if copy is not None:
            raise AssertionError("device and copy kwargs not supported when ext_tensor is "
                                 "already a DLPack capsule.")
        if type(ext_tensor).__name__ != "PyCapsule":
            raise TypeError(f"ember.from_dlpack: expected an object with __dlpack__ or a "
                            f"DLPack capsule, got {type(ext_tensor).__name__}")
        try:
            arr = _C._dlpack_import(ext_tensor)[0]
        except ValueError:
            raise RuntimeError("from_dlpack received an invalid capsule. Note that DLTensor "
                               "capsules can be consumed only once, so you might have "
                               "already constructed a tensor from it once.") from None
    return _wrap(arr, copy, "ember.from_dlpack")


def to_dlpack(tensor):
    """A legacy DLPack capsule ("dltensor") sharing the tensor's memory; it can be
    consumed once, by from_dlpack here or in another library."""
    return tensor.__dlpack__()


# ------------------------------------------------------------------ array-likes

def _has_array_protocol(obj):
    return any(hasattr(obj, a) for a in ("__array_interface__", "__array_struct__",
                                         "__array__"))


def array_like(obj):
    """obj (not a sequence, not an ember tensor or NumPy array) as an ember tensor or
    NumPy array sharing its memory, or None when obj is no array-like. Tensors of other
    libraries come through DLPack (one that requires grad is detached first, as
    ember.tensor copies it and as_tensor cannot keep another library's autograd)."""
    if isinstance(obj, np.generic):
        return np.asarray(obj)
    if hasattr(obj, "__dlpack__") and hasattr(obj, "__dlpack_device__") and \
            not isinstance(obj, type):
        if getattr(obj, "requires_grad", False) and callable(getattr(obj, "detach", None)):
            obj = obj.detach()
        try:
            return from_dlpack(obj)
        except BufferError:
            if not _has_array_protocol(obj):
                raise
    if _has_array_protocol(obj) and not isinstance(obj, type):
        arr = np.asarray(obj)
        if arr.dtype.hasobject:
            raise TypeError(f"Could not infer dtype of {type(obj).__name__}")
        return arr
    return None


def _install():
    _C._add_tensor_attrs({"__dlpack__": tensor_dlpack,
                          "__dlpack_device__": tensor_dlpack_device})


_install()
