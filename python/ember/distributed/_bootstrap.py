"""What each rank runs under mpirun (ember.distributed.run puts it there): sets RANK,
LOCAL_RANK, WORLD_SIZE from MPI's variables, then runs the user's script or module as
__main__. An exception escaping the script is printed with the rank and ends the whole
job (MPI_Abort when MPI is up), so the other ranks never wait forever."""
from __future__ import annotations

import os
import runpy
import sys
import traceback

_RANK = ("OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "MV2_COMM_WORLD_RANK")
_SIZE = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "MV2_COMM_WORLD_SIZE")
_LOCAL = ("OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "MV2_COMM_WORLD_LOCAL_RANK")


def _first(names):
    for n in names:
        v = os.environ.get(n)
        if v not in (None, ""):
            return v
    return None


def set_environment():
    rank = _first(_RANK)
    if rank is None:
        sys.exit("ember.distributed._bootstrap: no MPI rank in the environment (run it "
                 "through python -m ember.distributed.run)")
    os.environ["RANK"] = rank
    size = _first(_SIZE)
    if size is not None:
        os.environ["WORLD_SIZE"] = size
    local = _first(_LOCAL)
    os.environ["LOCAL_RANK"] = local if local is not None else rank
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29500")


def _fail(rank):
    text = traceback.format_exc()
    sys.stderr.write(f"ember.distributed: rank {rank} failed:\n{text}"
                     f"ember.distributed: aborting the job (rank {rank} failed)\n")
    sys.stderr.flush()
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is not None and mpi.Is_initialized() and not mpi.Is_finalized():
        mpi.COMM_WORLD.Abort(1)
    os._exit(1)


def main():
    set_environment()
    args = sys.argv[1:]
    as_module = bool(args) and args[0] == "-m"
    if as_module:
        args = args[1:]
    if not args:
        sys.exit("ember.distributed._bootstrap: no script given")
    target = args[0]
    sys.argv = list(args)
    rank = os.environ["RANK"]
    try:
        if as_module:
            runpy.run_module(target, run_name="__main__", alter_sys=True)
        else:
            sys.path[0] = os.path.dirname(os.path.abspath(target))
            runpy.run_path(target, run_name="__main__")
    except SystemExit as e:
        if e.code not in (None, 0):
            sys.stderr.write(f"ember.distributed: rank {rank} exited with {e.code!r}\n")
            _fail_exit(rank, e.code)
        raise
    except BaseException:
        _fail(rank)


def _fail_exit(rank, code):
    mpi = sys.modules.get("mpi4py.MPI")
    sys.stderr.flush()
    if mpi is not None and mpi.Is_initialized() and not mpi.Is_finalized():
        mpi.COMM_WORLD.Abort(code if isinstance(code, int) else 1)
    os._exit(code if isinstance(code, int) else 1)


if __name__ == "__main__":
    main()
