"""Process groups over MPI communicators: init_process_group (backend "mpi"), the default
group, new_group, ranks and sizes, as torch.distributed's."""
from __future__ import annotations

import os
import sys
import traceback

from ._mpi import mpi

_world = None              # the default ProcessGroup once initialised


class ProcessGroup:
    """A set of ranks sharing an MPI communicator (a duplicate of the user's, so user MPI
    traffic never matches ours). `ranks` are global ranks in group-rank order."""

    def __init__(self, comm, ranks):
        self.comm = comm
        self.ranks = list(ranks)
        self._group_of = {g: i for i, g in enumerate(self.ranks)}

    def rank(self):
        return self.comm.Get_rank()

    def size(self):
        return self.comm.Get_size()

    def group_rank(self, global_rank, what="rank"):
        try:
            return self._group_of[global_rank]
        except KeyError:
            raise ValueError(f"{what} {global_rank} is not in the group (ranks "
                             f"{self.ranks})") from None

    def __repr__(self):
        return f"<ProcessGroup ranks={self.ranks}>"


class GroupMember:
    WORLD = None
    NON_GROUP_MEMBER = object()


class Backend(str):
    MPI = "mpi"
    GLOO = "gloo"


def is_available():
    from ._mpi import available
    return available()


def is_mpi_available():
    return is_available()


def is_initialized():
    return _world is not None


def _env_int(name):
    v = os.environ.get(name)
    return None if v in (None, "") else int(v)


def init_process_group(backend=None, init_method=None, timeout=None, world_size=-1, rank=-1,
                       store=None, group_name="", pg_options=None, device_id=None):
    """Joins the job's processes. MPI knows them already (mpirun or any MPI launcher started
    them): rank and world size come from MPI; those passed here or set by a launcher in
    RANK/WORLD_SIZE (init_method "env://" or None) must agree, or this raises. backend may
    be "mpi" (or "gloo"/"cpu:gloo", accepted so that PyTorch scripts run: MPI does the
    work). An uncaught exception on any rank then aborts the whole job, naming the rank."""
    global _world
    if _world is not None:
        raise RuntimeError("trying to initialize the default process group twice!")
    if backend is not None and str(backend).split(":")[-1] not in ("mpi", "gloo", "nccl"):
        raise ValueError(f"ember.distributed: unsupported backend {backend!r} (ember runs "
                         f"on MPI: use backend='mpi')")
    if init_method not in (None, "env://") and not str(init_method).startswith("env://"):
        raise ValueError(f"ember.distributed: init_method {init_method!r} is not supported: "
                         f"MPI's launcher connects the processes (use None or 'env://')")
    MPI = mpi()
    world = MPI.COMM_WORLD
    want_size = world_size if world_size not in (None, -1) else _env_int("WORLD_SIZE")
    want_rank = rank if rank not in (None, -1) else _env_int("RANK")
    if want_size is not None and want_size != world.Get_size():
        raise RuntimeError(f"ember.distributed.init_process_group: world_size={want_size} but "
                           f"MPI started {world.Get_size()} process(es); start "
                           f"{want_size} with python -m ember.distributed.run "
                           f"--nproc-per-node {want_size} (or mpirun -n {want_size})")
    if want_rank is not None and want_rank != world.Get_rank():
        raise RuntimeError(f"ember.distributed.init_process_group: rank={want_rank} but MPI "
                           f"gave this process rank {world.Get_rank()}")
    _world = ProcessGroup(world.Dup(), range(world.Get_size()))
    GroupMember.WORLD = _world
    _abort_job_on_uncaught_exception()


def _abort_job_on_uncaught_exception():
    """An exception that ends one rank's script must end the job, not leave the others
    blocked in a collective: print it with the rank, then MPI_Abort."""
    previous = sys.excepthook

    def hook(kind, value, tb):
        if _world is None:
            return previous(kind, value, tb)
        r = mpi().COMM_WORLD.Get_rank()
        text = "".join(traceback.format_exception(kind, value, tb))
        sys.stderr.write(f"ember.distributed: rank {r} failed:\n{text}"
                         f"ember.distributed: aborting the job (rank {r} failed)\n")
        sys.stderr.flush()
        mpi().COMM_WORLD.Abort(1)
    sys.excepthook = hook


def destroy_process_group(group=None):
    """Completes the pending operations (their buffers stay in use until then), then
    frees the group's communicator."""
    global _world
    from .work import drain
    drain()
    if group is None or group is _world:
        if _world is not None:
            _world.comm.Free()
        _world = None
        GroupMember.WORLD = None
    elif isinstance(group, ProcessGroup):
        group.comm.Free()


def _default():
    if _world is None:
        raise RuntimeError("Default process group has not been initialized, please make sure "
                           "to call init_process_group.")
    return _world


def _group(group):
    if group is None:
        return _default()
    if group is GroupMember.NON_GROUP_MEMBER:
        raise RuntimeError("this rank is not a member of the group")
    return group


def get_rank(group=None):
    if group is GroupMember.NON_GROUP_MEMBER:
        return -1
    return _group(group).rank()


def get_world_size(group=None):
    if group is GroupMember.NON_GROUP_MEMBER:
        return -1
    return _group(group).size()


def get_local_rank():
    """This process's rank among those on its machine (LOCAL_RANK, else MPI's)."""
    v = _env_int("LOCAL_RANK")
    if v is not None:
        return v
    for name in ("OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "MV2_COMM_WORLD_LOCAL_RANK"):
        v = _env_int(name)
        if v is not None:
            return v
    _default()
    MPI = mpi()
    node = MPI.COMM_WORLD.Split_type(MPI.COMM_TYPE_SHARED)
    try:
        return node.Get_rank()
    finally:
        node.Free()


def get_node_local_rank(fallback_rank=None):
    try:
        return get_local_rank()
    except RuntimeError:
        if fallback_rank is not None:
            return fallback_rank
        raise


def get_global_rank(group, group_rank):
    return _group(group).ranks[group_rank]


def get_group_rank(group, global_rank):
    return _group(group).group_rank(global_rank)


def get_process_group_ranks(group):
    return list(_group(group).ranks)


def get_backend(group=None):
    _group(group)
    return "mpi"


def new_group(ranks=None, timeout=None, backend=None, pg_options=None,
              use_local_synchronization=False):
    """A group of the given global ranks (all ranks by default). Every rank of the default
    group must call it, as in PyTorch; ranks outside get GroupMember.NON_GROUP_MEMBER."""
    world = _default()
    ranks = sorted(set(range(world.size()) if ranks is None else ranks))
    for r in ranks:
        if not 0 <= r < world.size():
            raise ValueError(f"new_group: rank {r} is outside the world (size {world.size()})")
    MPI = mpi()
    color = 0 if world.rank() in ranks else MPI.UNDEFINED
    comm = world.comm.Split(color, ranks.index(world.rank()) if color == 0 else 0)
    if comm == MPI.COMM_NULL:
        return GroupMember.NON_GROUP_MEMBER
    return ProcessGroup(comm, ranks)
