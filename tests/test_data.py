"""ember.utils.data: datasets, collation, DataLoader batching and reproducible
shuffling, random_split."""
from collections import namedtuple

import numpy as np
import pytest

import ember
from ember.utils.data import (BatchSampler, ConcatDataset, DataLoader, Dataset,
                              IterableDataset, RandomSampler, SequentialSampler, Subset,
                              TensorDataset, default_collate, random_split)


def _tds(n=10):
    x = ember.arange(n * 3, dtype=ember.float32).reshape(n, 3)
    y = ember.arange(n)
    return TensorDataset(x, y)


def test_tensor_dataset_and_subset():
    ds = _tds()
    assert len(ds) == 10
    x, y = ds[4]
    assert x.tolist() == [12.0, 13.0, 14.0] and y.item() == 4
    with pytest.raises(ValueError, match="Size mismatch"):
        TensorDataset(ember.ones(3), ember.ones(4))
    sub = Subset(ds, [7, 2])
    assert len(sub) == 2 and sub[0][1].item() == 7 and [s[1].item() for s in sub[[1, 0]]] == [
        2, 7]
    cat = ds + sub
    assert isinstance(cat, ConcatDataset) and len(cat) == 12 and cat[11][1].item() == 2
    assert cat[-1][1].item() == 2


def test_dataloader_sequential_batches_match_torch(torch):
    x = np.arange(30, dtype=np.float32).reshape(10, 3)
    y = np.arange(10)
    eds = TensorDataset(ember.from_numpy(x), ember.from_numpy(y))
    tds = torch.utils.data.TensorDataset(torch.from_numpy(x), torch.from_numpy(y))
    for kw in (dict(batch_size=4), dict(batch_size=4, drop_last=True), dict(batch_size=1),
               dict(batch_size=10)):
        eb, tb = list(DataLoader(eds, **kw)), list(torch.utils.data.DataLoader(tds, **kw))
        assert len(eb) == len(tb) == len(DataLoader(eds, **kw))
        for (ex, ey), (tx, ty) in zip(eb, tb):
            assert ex.dtype is ember.float32 and ey.dtype is ember.int64
            np.testing.assert_array_equal(ex.numpy(), tx.numpy())
            np.testing.assert_array_equal(ey.numpy(), ty.numpy())
    batch = next(iter(DataLoader(eds, batch_size=4)))
    assert isinstance(batch, list)          # tuples collate to lists, as in PyTorch


def test_shuffle_is_a_permutation_and_reproducible():
    ds = _tds(23)

    def order(loader):
        return [int(v) for _, y in loader for v in y.tolist()]

    g = ember.Generator().manual_seed(3)
    first = order(DataLoader(ds, batch_size=5, shuffle=True, generator=g))
    assert sorted(first) == list(range(23)) and first != list(range(23))
    second_epoch = order(DataLoader(ds, batch_size=5, shuffle=True, generator=g))
    assert second_epoch != first                      # the generator moved on
    g.manual_seed(3)
    assert order(DataLoader(ds, batch_size=5, shuffle=True, generator=g)) == first
    ember.manual_seed(9)
    a = order(DataLoader(ds, batch_size=4, shuffle=True))
    ember.manual_seed(9)
    assert order(DataLoader(ds, batch_size=4, shuffle=True)) == a
    loader = DataLoader(ds, batch_size=4, shuffle=True, drop_last=True)
    assert len(loader) == 5 and all(len(y) == 4 for _, y in loader)


def test_collate_structures():
    Point = namedtuple("Point", "x y")
    batch = [{"a": ember.tensor([1.0, 2.0]), "b": 3, "c": 0.5, "s": "x",
              "n": np.array([1, 2]), "t": (1, 2), "p": Point(1, 2.0)},
             {"a": ember.tensor([3.0, 4.0]), "b": 4, "c": 1.5, "s": "y",
              "n": np.array([3, 4]), "t": (3, 4), "p": Point(3, 4.0)}]
    out = default_collate(batch)
    assert out["a"].tolist() == [[1.0, 2.0], [3.0, 4.0]]
    assert out["b"].dtype is ember.int64 and out["b"].tolist() == [3, 4]
    assert out["c"].dtype is ember.float64 and out["c"].tolist() == [0.5, 1.5]
    assert out["s"] == ["x", "y"]
    assert out["n"].tolist() == [[1, 2], [3, 4]] and out["n"].dtype is ember.int64
    assert isinstance(out["t"], list) and [t.tolist() for t in out["t"]] == [[1, 3], [2, 4]]
    assert isinstance(out["p"], Point) and out["p"].y.tolist() == [2.0, 4.0]
    assert default_collate([[1, 2], [3, 4]])[0].tolist() == [1, 3]
    assert default_collate([True, False]).dtype is ember.bool
    with pytest.raises(RuntimeError, match="equal size"):
        default_collate([[1, 2], [3]])
    with pytest.raises(RuntimeError, match="stack expects each tensor to be equal size"):
        default_collate([ember.ones(2), ember.ones(3)])
    with pytest.raises(TypeError, match="default_collate"):
        default_collate([object()])


def test_collate_keeps_gradients():
    a = ember.tensor([1.0, 2.0], requires_grad=True)
    b = ember.tensor([3.0, 4.0], requires_grad=True)
    out = default_collate([a, b])
    assert out.shape == (2, 2) and out.requires_grad
    (out * ember.tensor([[1.0, 1.0], [2.0, 2.0]])).sum().backward()
    assert a.grad.tolist() == [1.0, 1.0] and b.grad.tolist() == [2.0, 2.0]


def test_collate_matches_torch(torch):
    samples = [(np.float32(i), {"v": [i, i + 1]}, np.full((2,), i, np.float64))
               for i in range(3)]
    e = default_collate(samples)
    t = torch.utils.data.default_collate(samples)
    assert type(e) is type(t)
    np.testing.assert_array_equal(e[0].numpy(), t[0].numpy())
    assert [v.tolist() for v in e[1]["v"]] == [v.tolist() for v in t[1]["v"]]
    np.testing.assert_array_equal(e[2].numpy(), t[2].numpy())
    assert str(e[2].dtype).split(".")[-1] == str(t[2].dtype).split(".")[-1]


def test_custom_dataset_collate_fn_sampler_and_no_batching():
    class Squares(Dataset):
        def __len__(self):
            return 7

        def __getitem__(self, i):
            return i * i

    ds = Squares()
    assert [b.tolist() for b in DataLoader(ds, batch_size=3)] == [[0, 1, 4], [9, 16, 25],
                                                                   [36]]
    assert list(DataLoader(ds, batch_size=None)) == [0, 1, 4, 9, 16, 25, 36]
    assert list(DataLoader(ds, batch_size=2, collate_fn=sum)) == [1, 13, 41, 36]
    assert [b.tolist() for b in DataLoader(ds, sampler=[6, 0, 3], batch_size=2)] == [
        [36, 0], [9]]
    bs = BatchSampler(SequentialSampler(ds), 3, drop_last=True)
    assert [b.tolist() for b in DataLoader(ds, batch_sampler=bs)] == [[0, 1, 4], [9, 16, 25]]
    with pytest.raises(ValueError, match="mutually exclusive with shuffle"):
        DataLoader(ds, sampler=[0], shuffle=True)
    with pytest.raises(ValueError, match="mutually exclusive with batch_size"):
        DataLoader(ds, batch_sampler=bs, batch_size=2)
    assert [b.tolist() for b in DataLoader(ds, batch_size=3, num_workers=2,
                                           multiprocessing_context="fork", timeout=60)] == [
        [0, 1, 4], [9, 16, 25], [36]]          # worker processes: tests/test_data_workers.py
    rs = RandomSampler(ds, replacement=True, num_samples=40,
                       generator=ember.Generator().manual_seed(0))
    draws = list(rs)
    assert len(draws) == 40 and set(draws) <= set(range(7))


def test_iterable_dataset():
    class Stream(IterableDataset):
        def __iter__(self):
            return iter(range(5))

    assert [b.tolist() for b in DataLoader(Stream(), batch_size=2)] == [[0, 1], [2, 3], [4]]
    assert [b.tolist() for b in DataLoader(Stream(), batch_size=2, drop_last=True)] == [
        [0, 1], [2, 3]]
    with pytest.raises(ValueError, match="shuffle"):
        DataLoader(Stream(), shuffle=True)


def test_random_split():
    ds = _tds(10)
    a, b = random_split(ds, [7, 3], generator=ember.Generator().manual_seed(1))
    idx = a.indices + b.indices
    assert len(a) == 7 and len(b) == 3 and sorted(idx) == list(range(10))
    a2, b2 = random_split(ds, [7, 3], generator=ember.Generator().manual_seed(1))
    assert a2.indices == a.indices and b2.indices == b.indices
    parts = random_split(range(11), [0.5, 0.3, 0.2])
    assert [len(p) for p in parts] == [6, 3, 2]          # remainder goes to the first
    assert sorted(sum((p.indices for p in parts), [])) == list(range(11))
    with pytest.raises(ValueError, match="Sum of input lengths"):
        random_split(ds, [5, 4])
    with pytest.warns(UserWarning, match="is 0"):
        random_split(range(2), [0.9, 0.1, 0.0])
