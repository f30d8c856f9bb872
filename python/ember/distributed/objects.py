"""Collectives of small Python objects. They travel pickled (mpi4py pickles them), so
use them only between the processes of your own job: unpickling runs code, and a pickle
from anywhere else must never be given to them."""
from __future__ import annotations

from .process_group import _group


def broadcast_object_list(object_list, src=0, group=None, device=None, group_src=None):
    """object_list (the same length on every rank) becomes src's."""
    g = _group(group)
    root = group_src if group_src is not None else g.group_rank(src, "src")
    objs = g.comm.bcast(list(object_list) if g.rank() == root else None, root=root)
    object_list[:] = objs


def all_gather_object(object_list, obj, group=None):
    """object_list (group size long) gets every rank's obj, in rank order."""
    g = _group(group)
    if len(object_list) != g.size():
        raise ValueError(f"all_gather_object: object_list must hold {g.size()} entries")
    object_list[:] = g.comm.allgather(obj)


def gather_object(obj, object_gather_list=None, dst=0, group=None, group_dst=None):
    g = _group(group)
    root = group_dst if group_dst is not None else g.group_rank(dst, "dst")
    got = g.comm.gather(obj, root=root)
    if g.rank() == root:
        if object_gather_list is None or len(object_gather_list) != g.size():
            raise ValueError(f"gather_object: the destination must pass a list of "
                             f"{g.size()} entries")
        object_gather_list[:] = got


def scatter_object_list(scatter_object_output_list, scatter_object_input_list=None, src=0,
                        group=None, group_src=None):
    g = _group(group)
    root = group_src if group_src is not None else g.group_rank(src, "src")
    got = g.comm.scatter(list(scatter_object_input_list) if g.rank() == root else None,
                         root=root)
    scatter_object_output_list[0] = got
