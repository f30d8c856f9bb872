"""Tensors in shared memory: how batches cross from DataLoader worker processes.

A `Segment` is an anonymous shared memory file (memfd_create; an unlinked temporary
file where that is missing) mapped into this process; a tensor whose storage is a NumPy
array over a segment is *shared*. When multiprocessing pickles a tensor (ForkingPickler:
queues, pipes, process arguments under spawn/forkserver), the reducers registered here
send its segment's file descriptor (multiprocessing's DupFd: passed over a Unix socket,
or to the child at spawn) plus dtype, shape, strides and byte offset, never its data:
the receiver maps the same memory. A tensor that is not shared yet is copied once into
a new segment when pickled (PyTorch moves it into shared memory in place; ember's
storage cannot change under a tensor, so the copy is what is sent). In workers,
default_collate stacks samples straight into a new segment (`empty`), so a batch is
written once and never copied again.

Segments free themselves: the file has no name, so its memory goes when the last
mapping and descriptor close (a mapping lives as long as the NumPy arrays over it). A
received segment keeps no descriptor of its own (only the one mmap holds), so a
received tensor sent on again is copied into a new segment.
"""
from __future__ import annotations

import mmap
import os
import tempfile
from multiprocessing.reduction import DupFd, ForkingPickler

import numpy as np

from ... import _C, _dtypes


def _new_fd(nbytes):
    if hasattr(os, "memfd_create"):
        fd = os.memfd_create("ember-shared", os.MFD_CLOEXEC)
    else:                                       # an unlinked file, in RAM where possible
        shm = "/dev/shm" if os.path.isdir("/dev/shm") else None
        with tempfile.TemporaryFile(dir=shm) as f:
            fd = os.dup(f.fileno())
    try:
        os.ftruncate(fd, nbytes)
    except BaseException:
        os.close(fd)
        raise
    return fd


class Segment(mmap.mmap):
    """nbytes of shared memory mapped here (read-write). `fd` is the descriptor other
    processes receive, or None for a segment received from another process."""

    def __new__(cls, nbytes, fd=None):
        own = fd is None
        if own:
            fd = _new_fd(nbytes)
        try:
            self = super().__new__(cls, fd, nbytes)
        except BaseException:
            os.close(fd)
            raise
        if not own:
            os.close(fd)            # mmap keeps a descriptor of its own
            fd = None
        self.fd = fd
        self.address = np.frombuffer(self, np.uint8, count=1).ctypes.data
        return self

    def __del__(self):
        if getattr(self, "fd", None) is not None:
            os.close(self.fd)
            self.fd = None

    def __reduce__(self):
        if self.fd is None:
            raise TypeError("a received shared memory segment cannot be sent on")
        return (_rebuild_segment, (DupFd(self.fd), len(self)))


def _rebuild_segment(dupfd, nbytes):
    return Segment(nbytes, dupfd.detach())


def empty(shape, dtype):
    """A new tensor of shape and dtype (ember) whose storage is a new shared segment."""
    np_dtype = dtype.numpy_dtype
    nbytes = int(np.prod(shape, dtype=np.int64)) * np_dtype.itemsize
    if nbytes == 0:
        return _C.from_numpy(np.empty(shape, dtype=np_dtype))
    return _C.from_numpy(np.ndarray(shape, dtype=np_dtype, buffer=Segment(nbytes)))


def segment_of(array):
    """(segment, byte offset of array's first element in it) when array's memory is in a
    segment that can be sent on, else (None, 0)."""
    base = array
    while isinstance(base, np.ndarray):
        base = base.base
    if isinstance(base, memoryview):
        base = base.obj
    if isinstance(base, Segment) and base.fd is not None:
        return base, array.__array_interface__["data"][0] - base.address
    return None, 0


def is_shared(tensor):
    """Whether tensor's memory is in a shared segment (made here or received)."""
    if tensor.is_meta:
        return False
    base = tensor.detach().numpy()
    while isinstance(base, np.ndarray):
        base = base.base
    if isinstance(base, memoryview):
        base = base.obj
    return isinstance(base, Segment)


def _reduce_tensor(t):
    from ...nn.parameter import Parameter
    if t.is_meta or t.numel() == 0:
        return t.__reduce_ex__(2)               # no data to share
    if t.requires_grad and not t.is_leaf:
        raise RuntimeError("Cowardly refusing to serialize non-leaf tensor which requires_grad, "
                           "since autograd does not support crossing process boundaries.  If "
                           "you just want to transfer the data, call detach() on the tensor "
                           "before serializing (e.g., putting it on the queue).")
    array = t.detach().numpy()
    seg, offset = segment_of(array)
    strides = array.strides
    if seg is None:
        seg = Segment(array.nbytes)
        copy = np.ndarray(array.shape, dtype=array.dtype, buffer=seg)
        np.copyto(copy, array)
        offset, strides = 0, copy.strides
    return (_rebuild_tensor, (seg, _dtypes.name(t.dtype), tuple(array.shape), strides, offset,
                              bool(t.requires_grad), isinstance(t, Parameter)))


def _rebuild_tensor(seg, dtype_name, shape, strides, offset, requires_grad, parameter):
    dtype = _dtypes.BY_NAME[dtype_name]
    array = np.ndarray(shape, dtype=dtype.numpy_dtype, buffer=seg, offset=offset,
                       strides=strides)
    t = _C.from_numpy(array)
    if parameter:
        from ...nn.parameter import Parameter
        return Parameter(t, requires_grad=requires_grad)
    if requires_grad:
        t.requires_grad_(True)
    return t


def dumps(obj):
    """obj pickled for another process, its tensors by shared memory (bytes)."""
    return bytes(ForkingPickler.dumps(obj))


def loads(data):
    return ForkingPickler.loads(data)


def _install():
    from ...nn.parameter import Parameter
    ForkingPickler.register(_C.Tensor, _reduce_tensor)
    ForkingPickler.register(Parameter, _reduce_tensor)
    _C._add_tensor_attrs({"is_shared": is_shared})


_install()
