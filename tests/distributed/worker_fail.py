"""Worker: rank 1 raises while the others wait in an all_reduce it never joins."""
import os
import sys
import time

import ember
import ember.distributed as dist

dist.init_process_group("mpi")
dist.barrier()
if dist.get_rank() == 1:
    with open(os.path.join(sys.argv[1], "raised_at"), "w") as f:
        f.write(repr(time.time()))
    raise ValueError("boom on rank 1")
t = ember.ones(4)
dist.all_reduce(t)
sys.exit("unreachable: the all_reduce completed without rank 1")
