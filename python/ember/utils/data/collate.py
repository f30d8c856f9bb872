"""default_collate: turns a list of samples into one batch, recursively, as PyTorch's
does (tensors and NumPy arrays are stacked along a new first dimension, numbers become
1-D tensors, dicts and sequences are collated field by field, strings are kept)."""
from __future__ import annotations

import collections.abc

import numpy as np

from ... import _C
from . import _shared
from ._worker import get_worker_info


def _stack(tensors):
    """Stacks equal-shaped tensors along a new dimension 0.

    Without autograd history this is one NumPy copy (in a DataLoader worker, into shared
    memory); with it, the batch is built with select_scatter so gradients flow back to
    every sample."""
    from ... import ops
    first = tensors[0]
    for i, t in enumerate(tensors):
        if tuple(t.shape) != tuple(first.shape):
            raise RuntimeError("stack expects each tensor to be equal size, but got "
                               f"{list(first.shape)} at entry 0 and {list(t.shape)} at entry "
                               f"{i}")
    api = ops.api
    grad = any(t.requires_grad for t in tensors) and _C.is_grad_enabled()
    if not grad and get_worker_info() is not None:
        # in a worker: stack straight into shared memory, the batch is never copied again
        dtype = _C.result_type(*tensors) if len(tensors) > 1 else first.dtype
        out = _shared.empty((len(tensors), *first.shape), dtype)
        np.stack([t.detach().numpy() for t in tensors], out=out.numpy(), casting="unsafe")
        return out
    if hasattr(api, "stack"):
        return api.stack(list(tensors))
    dtype = _C.result_type(*tensors) if len(tensors) > 1 else first.dtype
    if not grad:
        return _C.from_numpy(np.stack([t.detach().numpy() for t in tensors]).astype(
            dtype.numpy_dtype, copy=False))
    out = api.zeros((len(tensors), *first.shape), dtype=dtype)
    for i, t in enumerate(tensors):
        out = api.select_scatter(out, t.to(dtype), 0, i)
    return out


def default_convert(data):
    """batch_size=None: NumPy arrays become tensors, containers are converted inside,
    everything else is kept."""
    if isinstance(data, _C.Tensor):
        return data
    if isinstance(data, np.ndarray) and data.dtype.kind not in "SaUO":
        return _C.from_numpy(data)
    if isinstance(data, np.generic) and data.dtype.kind not in "SaUO":
        from ... import as_tensor
        return as_tensor(data)
    if isinstance(data, collections.abc.Mapping):
        converted = {k: default_convert(v) for k, v in data.items()}
        try:
            return type(data)(converted)
        except TypeError:
            return converted
    if isinstance(data, tuple) and hasattr(data, "_fields"):
        return type(data)(*(default_convert(d) for d in data))
    if isinstance(data, tuple):
        return [default_convert(d) for d in data]
    if isinstance(data, collections.abc.Sequence) and not isinstance(data, (str, bytes)):
        converted = [default_convert(d) for d in data]
        try:
            return type(data)(converted)
        except TypeError:
            return converted
    return data


def default_collate(batch):
    """One batch from a list of samples of the same structure."""
    from ... import tensor
    elem = batch[0]
    if isinstance(elem, _C.Tensor):
        return _stack(batch)
    if isinstance(elem, np.ndarray):
        if elem.dtype.kind in "SaUO":
            raise TypeError("default_collate: batch must contain tensors, numpy arrays, "
                            f"numbers, dicts or lists; found {elem.dtype}")
        return _stack([_C.from_numpy(np.ascontiguousarray(b)) for b in batch])
    if isinstance(elem, np.generic):
        if elem.dtype.kind in "SaUO":
            return batch
        return _C.from_numpy(np.array(batch))
    if isinstance(elem, float):
        return tensor(batch, dtype=_C.float64)
    if isinstance(elem, int):
        return tensor(batch)
    if isinstance(elem, (str, bytes)):
        return batch
    if isinstance(elem, collections.abc.Mapping):
        collated = {key: default_collate([d[key] for d in batch]) for key in elem}
        try:
            return type(elem)(collated)
        except TypeError:
            return collated
    if isinstance(elem, tuple) and hasattr(elem, "_fields"):
        return type(elem)(*(default_collate(list(s)) for s in zip(*batch)))
    if isinstance(elem, collections.abc.Sequence):
        if any(len(s) != len(elem) for s in batch):
            raise RuntimeError("each element in list of batch should be of equal size")
        transposed = [default_collate(list(s)) for s in zip(*batch)]
        if isinstance(elem, tuple):
            return transposed    # tuples collate to lists, as in PyTorch
        try:
            return type(elem)(transposed)
        except TypeError:
            return transposed
    raise TypeError("default_collate: batch must contain tensors, numpy arrays, numbers, "
                    f"dicts or lists; found {type(elem)}")
