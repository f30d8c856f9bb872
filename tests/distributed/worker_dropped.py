"""Worker: non-blocking operations whose handles and buffers the caller dropped before the
other rank had taken part (DDP's used-parameter flags after a forward with no backward,
an async all_reduce whose Work and tensor are let go). Rank 0 drops them and fills the
memory NumPy hands out next with a sentinel; only then does rank 1 join the operations.
A buffer freed while MPI still owns it would take rank 1's data into the sentinels."""
import gc
import sys

import numpy as np

import ember
import ember.distributed as dist
import ember.nn as nn
from ember.nn.parallel import DistributedDataParallel as DDP
from launch import save
from mpi4py import MPI


class Two(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(3, 2)
        self.b = nn.Linear(3, 2)
        self.c = nn.Linear(3, 2)

    def forward(self, x):
        return self.a(x)


def sentinels():
    # NumPy reuses freed small data blocks for the next arrays of the same size
    return [np.full(n, -7, dtype) for n, dtype in ((6, np.int32), (3, np.float64))
            for _ in range(64)]


def main(out_dir):
    dist.init_process_group("mpi")
    r = dist.get_rank()
    ember.manual_seed(0)
    m = DDP(Two().double(), find_unused_parameters=True)   # six parameters: 6 flags
    x = ember.ones(4, 3, dtype=ember.float64)
    res = {}
    if r == 0:
        m(x)                                   # starts the flags' all-reduce; no backward
        t = ember.full((3,), float(r + 1), dtype=ember.float64)
        dist.all_reduce(t, async_op=True)      # the Work and the tensor are dropped
        del m, t
        gc.collect()
        kept = sentinels()
        MPI.COMM_WORLD.Barrier()               # now rank 1 joins both operations
        dist.barrier()                         # ordered after them on the group
        res["sentinels_intact"] = all((a == -7).all() for a in kept)
    else:
        MPI.COMM_WORLD.Barrier()
        m(x)
        m.reducer.step.used_work.wait()
        t = ember.full((3,), 2.0, dtype=ember.float64)
        dist.all_reduce(t)
        res["sum"] = t.numpy()
        dist.barrier()
    from ember.distributed import work
    res["pending_after_drain"] = work.drain(30.0)
    save(out_dir, r, res)


if __name__ == "__main__":
    main(sys.argv[1])
