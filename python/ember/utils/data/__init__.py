"""ember.utils.data: datasets, samplers, collation and the DataLoader, as
torch.utils.data (in this process, or in worker processes with batches in shared
memory)."""
from . import _shared  # noqa: F401  (tensors cross processes by shared memory)
from ._worker import WorkerInfo, get_worker_info
from .collate import default_collate, default_convert
from .dataloader import DataLoader
from .dataset import (ConcatDataset, Dataset, IterableDataset, Subset, TensorDataset,
                      random_split)
from .sampler import (BatchSampler, RandomSampler, Sampler, SequentialSampler,
                      SubsetRandomSampler)

__all__ = ["Dataset", "IterableDataset", "TensorDataset", "Subset", "ConcatDataset",
           "random_split", "DataLoader", "default_collate", "default_convert", "Sampler",
           "SequentialSampler", "RandomSampler", "SubsetRandomSampler", "BatchSampler",
           "get_worker_info", "WorkerInfo"]
