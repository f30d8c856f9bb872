"""ember.distributed: torch.distributed's API on MPI (mpi4py over Open MPI).

Start N processes with `python -m ember.distributed.run --nproc-per-node N script.py`
(or any MPI launcher), call init_process_group() in each, then use the collectives on
ember tensors. See docs/design.md, "Distributed training"."""
from __future__ import annotations

from ._mpi import INSTALL_HINT, MPIUnavailable
from .collectives import (ReduceOp, all_gather, all_gather_into_tensor, all_reduce,
                          barrier, broadcast, gather, irecv, isend, recv, reduce,
                          reduce_scatter, reduce_scatter_tensor, scatter, send)
from .objects import (all_gather_object, broadcast_object_list, gather_object,
                      scatter_object_list)
from .process_group import (Backend, GroupMember, ProcessGroup, destroy_process_group,
                            get_backend, get_global_rank, get_group_rank, get_local_rank,
                            get_node_local_rank, get_process_group_ranks, get_rank,
                            get_world_size, init_process_group, is_available,
                            is_initialized, is_mpi_available, new_group)
from .work import Work, progress

_all_gather_base = all_gather_into_tensor
_reduce_scatter_base = reduce_scatter_tensor

__all__ = [
    "Backend", "GroupMember", "INSTALL_HINT", "MPIUnavailable", "ProcessGroup", "ReduceOp",
    "Work", "all_gather", "all_gather_into_tensor", "all_gather_object", "all_reduce",
    "barrier", "broadcast", "broadcast_object_list", "destroy_process_group", "gather",
    "gather_object", "get_backend", "get_global_rank", "get_group_rank", "get_local_rank",
    "get_node_local_rank", "get_process_group_ranks", "get_rank", "get_world_size",
    "init_process_group", "irecv", "is_available", "is_initialized", "is_mpi_available",
    "isend", "new_group", "progress", "recv", "reduce", "reduce_scatter",
    "reduce_scatter_tensor", "scatter", "scatter_object_list", "send",
]
