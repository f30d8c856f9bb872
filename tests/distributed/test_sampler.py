"""DistributedSampler's index lists are PyTorch's for the same dataset size, replicas,
rank, seed, epoch, shuffle and drop_last (no processes needed)."""
import itertools

import pytest

from ember.utils.data.distributed import DistributedSampler, mt19937_permutation


@pytest.mark.parametrize("n", [1, 2, 5, 10, 17, 101])
def test_partitions_match_pytorch(torch, n):
    from torch.utils.data.distributed import DistributedSampler as Torch
    for reps, shuffle, drop_last, epoch, seed in itertools.product(
            (1, 2, 3, 7), (True, False), (True, False), (0, 3), (0, 1234)):
        for rank in range(reps):
            ours = DistributedSampler(range(n), reps, rank, shuffle, seed, drop_last)
            theirs = Torch(range(n), reps, rank, shuffle, seed, drop_last)
            ours.set_epoch(epoch)
            theirs.set_epoch(epoch)
            assert list(ours) == list(theirs), (n, reps, rank, shuffle, drop_last, epoch)
            assert len(ours) == len(theirs)


def test_permutation_is_pytorchs_randperm(torch):
    for n, seed in ((1000, 0), (4097, 2 ** 40 + 5)):
        g = torch.Generator().manual_seed(seed)
        assert mt19937_permutation(n, seed) == torch.randperm(n, generator=g).tolist()


def test_set_epoch_changes_the_order_and_ranks_cover_the_data():
    a = DistributedSampler(range(20), 2, 0, seed=3)
    first = list(a)
    a.set_epoch(1)
    assert list(a) != first
    parts = [list(DistributedSampler(range(20), 4, r, seed=3)) for r in range(4)]
    assert sorted(sum(parts, [])) == list(range(20))


def test_rank_out_of_range():
    with pytest.raises(ValueError, match="Invalid rank"):
        DistributedSampler(range(4), 2, 2)
