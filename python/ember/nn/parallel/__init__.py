"""ember.nn.parallel: DistributedDataParallel (data parallelism over ember.distributed)."""
from .distributed import DistributedDataParallel

DDP = DistributedDataParallel

__all__ = ["DistributedDataParallel"]
