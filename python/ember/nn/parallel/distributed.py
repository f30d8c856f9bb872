"""DistributedDataParallel: a module replicated on every rank of a process group, its
gradients averaged across ranks during the backward (reducer.py), as PyTorch's."""
from __future__ import annotations

import contextlib

from ..modules.module import Module
from .compiled import active_ddp
from .reducer import Reducer


def _tensors_in(obj, out):
    from ..._C import Tensor
    if isinstance(obj, Tensor):
        out.append(obj)
    elif isinstance(obj, (list, tuple)):
        for o in obj:
            _tensors_in(o, out)
    elif isinstance(obj, dict):
        for o in obj.values():
            _tensors_in(o, out)
    elif hasattr(obj, "__dataclass_fields__"):
        for k in obj.__dataclass_fields__:
            _tensors_in(getattr(obj, k), out)
    return out


class DistributedDataParallel(Module):
    """Wraps `module`: at construction rank 0's parameters and buffers are broadcast to
    every rank; each forward (with broadcast_buffers) broadcasts rank 0's buffers; each
    backward all-reduces the gradients bucket by bucket (bucket_cap_mb) as they become
    ready and leaves .grad holding their average over the ranks. no_sync() skips the
    reduction (gradients accumulate locally until the next synchronised backward).
    find_unused_parameters=True allows parameters that take no part in the outputs.
    device_ids/output_device/gradient_as_bucket_view/static_graph are accepted (CPU only:
    they change nothing)."""

    def __init__(self, module, device_ids=None, output_device=None, dim=0,
                 broadcast_buffers=True, init_sync=True, process_group=None,
                 bucket_cap_mb=None, find_unused_parameters=False, check_reduction=False,
                 gradient_as_bucket_view=False, static_graph=False, delay_all_reduce_named_params=None,
                 param_to_hook_all_reduce=None, mixed_precision=None, device_mesh=None):
        super().__init__()
        from ...distributed import process_group as pg_mod
        from ...distributed.collectives import broadcast
        group = pg_mod._group(process_group)
        self.module = module
        self.process_group = group
        self.dim = dim
        self.device_ids = device_ids
        self.output_device = output_device
        self.broadcast_buffers = broadcast_buffers
        self.find_unused_parameters = find_unused_parameters
        self.gradient_as_bucket_view = gradient_as_bucket_view
        self.static_graph = static_graph
        self.bucket_bytes_cap = int((25 if bucket_cap_mb is None else bucket_cap_mb) * (1 << 20))
        self.require_backward_grad_sync = True
        self.require_forward_param_sync = True
        self._comm = group.comm.Dup()         # DDP's traffic apart from the user's
        self._world = group.size()
        self._src = group.ranks[0]
        seen = set()
        params = []
        for p in module.parameters():
            if p.requires_grad and id(p) not in seen:
                seen.add(id(p))
                params.append(p)
        self._params = params
        self._check_same_model(group)
        if init_sync:
            for t in list(module.parameters()) + list(module.buffers()):
                broadcast(t, src=self._src, group=group)
        self.reducer = Reducer(params, self._comm, self._world, self.bucket_bytes_cap,
                               find_unused_parameters)

    def _check_same_model(self, group):
        shapes = [(tuple(p.shape), str(p.dtype)) for p in self._params]
        every = group.comm.allgather(shapes)
        for r, other in enumerate(every):
            if other != shapes:
                raise RuntimeError(f"DistributedDataParallel: rank {group.ranks[r]}'s model "
                                   f"has other parameters (shapes/dtypes) than rank "
                                   f"{group.ranks[group.rank()]}'s")

    def _sync_buffers(self):
        from ...distributed.collectives import broadcast
        for b in self.module.buffers():
            broadcast(b, src=self._src, group=self.process_group)

    def forward(self, *inputs, **kwargs):
        from ... import is_grad_enabled
        if self.broadcast_buffers and self._world > 1 and self.require_forward_param_sync:
            self._sync_buffers()
        with active_ddp(self):       # a graph captured inside is split at bucket ends
            out = self.module(*inputs, **kwargs)
        if is_grad_enabled() and self.require_backward_grad_sync and self._params:
            self.reducer.prepare(_tensors_in(out, []))
        return out

    @contextlib.contextmanager
    def no_sync(self):
        """Backward passes inside accumulate gradients locally; the first synchronised
        backward after it averages the accumulated gradients."""
        old = self.require_backward_grad_sync
        self.require_backward_grad_sync = False
        try:
            yield
        finally:
            self.require_backward_grad_sync = old

    @property
    def bucket_count(self):
        return len(self.reducer.buckets)

    def _bucket_parameters(self):
        """The parameters of each bucket, in bucket order."""
        return [[self._params[i] for i in b.members] for b in self.reducer.buckets]
