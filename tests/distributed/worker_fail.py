"""Worker: rank 1 raises while the others wait in an all_reduce it never joins."""
import sys

import ember
import ember.distributed as dist

dist.init_process_group("mpi")
dist.barrier()
if dist.get_rank() == 1:
    raise ValueError("boom on rank 1")
t = ember.ones(4)
dist.all_reduce(t)
sys.exit("unreachable: the all_reduce completed without rank 1")
