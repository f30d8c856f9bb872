"""DistributedSampler: each rank's share of a dataset's indices, as PyTorch's.

The shuffled order is PyTorch's for the same seed and epoch: PyTorch permutes with its
CPU generator (a Mersenne Twister seeded with the low 32 bits of the seed, Fisher-Yates
swapping position i with i + (draw mod (n - i))), and so does this file, with NumPy's
MT19937 under its classic seeding. Ember's own generator (PCG64) gives other streams,
so it is not used here: the same seed then splits a dataset the same way under both."""
from __future__ import annotations

import math

import numpy as np

from .sampler import Sampler


def mt19937_permutation(n, seed):
    """The permutation of range(n) PyTorch's randperm draws from a CPU generator seeded
    with `seed` (n below 2**32)."""
    bits = np.random.MT19937(0)
    bits._legacy_seeding(int(seed) & 0xFFFFFFFF)
    if n <= 1:
        return list(range(n))
    draws = bits.random_raw(n - 1).astype(np.int64)
    pos = np.arange(n - 1, dtype=np.int64)
    targets = (pos + draws % (n - pos)).tolist()
    perm = list(range(n))
    for i, j in enumerate(targets):
        perm[i], perm[j] = perm[j], perm[i]
    return perm


class DistributedSampler(Sampler):
    """Rank `rank` of `num_replicas` visits indices rank, rank + num_replicas, ... of the
    (shuffled with seed + epoch, when shuffle) index list, padded by repeating its start
    to a multiple of num_replicas, or cut to one with drop_last. Call set_epoch(e) at
    each epoch for a new order. num_replicas and rank default to the process group's."""

    def __init__(self, dataset, num_replicas=None, rank=None, shuffle=True, seed=0,
                 drop_last=False):
        if num_replicas is None or rank is None:
            from ... import distributed as dist
            if not dist.is_initialized():
                raise RuntimeError("DistributedSampler: pass num_replicas and rank, or call "
                                   "ember.distributed.init_process_group first")
            num_replicas = dist.get_world_size() if num_replicas is None else num_replicas
            rank = dist.get_rank() if rank is None else rank
        if rank >= num_replicas or rank < 0:
            raise ValueError(f"Invalid rank {rank}, rank should be in the interval "
                             f"[0, {num_replicas - 1}]")
        self.dataset = dataset
        self.num_replicas = num_replicas
        self.rank = rank
        self.epoch = 0
        self.drop_last = drop_last
        n = len(dataset)
        if drop_last and n % num_replicas != 0:
            self.num_samples = math.ceil((n - num_replicas) / num_replicas)
        else:
            self.num_samples = math.ceil(n / num_replicas)
        self.total_size = self.num_samples * num_replicas
        self.shuffle = shuffle
        self.seed = seed

    def __iter__(self):
        n = len(self.dataset)
        order = mt19937_permutation(n, self.seed + self.epoch) if self.shuffle \
            else list(range(n))
        if self.drop_last:
            order = order[:self.total_size]
        else:
            short = self.total_size - len(order)
            while short > 0 and order:
                extra = order[:short]
                order = order + extra
                short -= len(extra)
        assert len(order) == self.total_size
        return iter(order[self.rank:self.total_size:self.num_replicas])

    def __len__(self):
        return self.num_samples

    def set_epoch(self, epoch):
        self.epoch = epoch
