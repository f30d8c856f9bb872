"""The tiled copy of permuted dense layouts (csrc/kernels/transpose_copy.c) behind
contiguous()/clone()/copy_ of transposes: odd and non-square sizes, batched and strided
sources, every item size, and the cases it leaves to NumPy (overlap, casts)."""
import numpy as np
import pytest

import ember

torch = pytest.importorskip("torch", reason="torch is the reference")

DTYPES = ["float32", "int32", "float64", "int8", "int16", "bool", "float16", "int64",
          "complex64"]


def _pair(shape, dtype, seed=0):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal(shape) * 50
    if dtype == "complex64":
        a = a + 1j * rng.standard_normal(shape)
    a = a.astype(dtype)
    return ember.from_numpy(a.copy()), torch.from_numpy(a.copy())


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(8, 8), (33, 70), (100, 9), (1, 40), (40, 1), (5, 3),
                                   (257, 65), (66, 131)])
def test_transposed_contiguous_matches_torch(dtype, shape):
    e, t = _pair(shape, dtype)
    r = e.t().contiguous()
    assert r.is_contiguous()
    np.testing.assert_array_equal(r.numpy(), t.t().contiguous().numpy())


@pytest.mark.parametrize("dtype", ["float32", "float64", "int8", "bool"])
@pytest.mark.parametrize("perm", [(0, 2, 1), (2, 1, 0), (1, 2, 0), (2, 0, 1)])
def test_batched_permutes_match_torch(dtype, perm):
    e, t = _pair((3, 37, 45), dtype, seed=1)
    r = e.permute(*perm).contiguous()
    np.testing.assert_array_equal(r.numpy(), t.permute(*perm).contiguous().numpy())
    r = e.permute(*perm).clone(memory_format=ember.contiguous_format)
    np.testing.assert_array_equal(r.numpy(), t.permute(*perm).contiguous().numpy())


def test_strided_and_sliced_sources():
    e, t = _pair((6, 64, 50), "float32", seed=2)
    for f in (lambda x: x[:, ::2, 3:].transpose(1, 2), lambda x: x[1:5:2].transpose(-1, -2),
              lambda x: x.transpose(0, 2)[::3], lambda x: x.transpose(1, 2)[:, :, 5:40]):
        np.testing.assert_array_equal(f(e).contiguous().numpy(), f(t).contiguous().numpy())


def test_nan_inf_and_signed_zero_are_copied_bit_for_bit():
    a = np.random.default_rng(3).standard_normal((20, 30)).astype(np.float32)
    a[::3, ::4] = np.nan
    a[1, :] = np.inf
    a[2, :] = -0.0
    r = ember.from_numpy(a).t().contiguous().numpy()
    np.testing.assert_array_equal(r.view(np.int32), a.T.copy().view(np.int32))


def test_copy_into_itself_transposed_and_casting_copies():
    e, t = _pair((40, 40), "float32", seed=4)
    before = e.numpy().copy()
    e.copy_(e.t())  # overlapping: NumPy's copy, which buffers (torch refuses this one)
    np.testing.assert_array_equal(e.numpy(), before.T)
    e = ember.from_numpy(before.copy())
    d = ember.empty(40, 40, dtype=ember.float64)
    d.copy_(e.t())
    np.testing.assert_array_equal(d.numpy(), t.t().double().numpy())
    dst = ember.zeros(30, 20)
    src, tsrc = _pair((20, 30), "float32", seed=5)
    dst.copy_(src.t())
    np.testing.assert_array_equal(dst.numpy(), tsrc.t().numpy())


def test_empty_and_zero_sized():
    for shape in [(0, 16), (16, 0), (3, 0, 9)]:
        e, t = _pair(shape, "float32")
        r = e.transpose(-1, -2).contiguous()
        assert tuple(r.shape) == tuple(t.transpose(-1, -2).shape)


def _same_bytes_on_the_pool(shape, dtype, view):
    """view(x) made contiguous (cloned when it is already) at 1 and 2 threads: one pool
    job at 2 threads, none at 1, the same bytes both times and as torch."""
    e, t = _pair(shape, dtype, seed=3)
    before, outs = ember.get_num_threads(), []
    try:
        for threads in (1, 2):
            ember.set_num_threads(threads)
            jobs = ember._C._pool_jobs()
            v = view(e)
            outs.append((v.clone() if v.is_contiguous() else v.contiguous()).numpy())
            assert ember._C._pool_jobs() - jobs == threads - 1, (shape, threads)
    finally:
        ember.set_num_threads(before)
    want = view(t).contiguous().numpy()
    assert outs[0].tobytes() == outs[1].tobytes() == want.tobytes(), shape


@pytest.mark.parametrize("dtype", ["float32", "float64", "int16", "int8"])
def test_large_copies_on_the_pool_identical_at_one_and_two_threads(dtype):
    """From 131072 elements the tiled copy's bands of 32 rows go to the pool in fixed
    chunks at 2 threads (a 2-d transpose and a batched permute): the same bytes as at 1
    thread and as torch."""
    for shape, view in [((700, 300), lambda x: x.t()),
                        ((3, 200, 330), lambda x: x.permute(0, 2, 1))]:
        _same_bytes_on_the_pool(shape, dtype, view)


@pytest.mark.parametrize("dtype", ["float32", "float64", "int16", "bool", "complex64"])
def test_other_strided_copies_on_the_pool_identical_at_one_and_two_threads(dtype):
    """Layouts the tiled copy does not take whose last dim is contiguous (a permute
    keeping the last dim, row slices, a broadcast, a plain clone) copy the destination's
    rows on the pool in fixed chunks from 131072 elements: the same bytes at 1 and 2
    threads and as torch; small ones and a step along the last dim stay with NumPy."""
    for shape, view in [((64, 40, 96), lambda x: x.permute(1, 0, 2)),
                        ((600, 1400), lambda x: x[::2, 100:1300]),
                        ((1, 900), lambda x: x.expand(400, 900)),
                        ((5, 7, 3, 2000), lambda x: x[:, :, ::2].permute(1, 0, 2, 3)),
                        ((1, 150000), lambda x: x.t()),
                        ((250, 800), lambda x: x)]:
        _same_bytes_on_the_pool(shape, dtype, view)
    before = ember.get_num_threads()
    ember.set_num_threads(2)
    try:
        jobs = ember._C._pool_jobs()
        for shape, view in [((50, 60), lambda x: x[::2]),
                            ((600, 1400), lambda x: x[::2, 1::3])]:
            e, t = _pair(shape, dtype)
            np.testing.assert_array_equal(view(e).contiguous().numpy(),
                                          view(t).contiguous().numpy())
        assert ember._C._pool_jobs() == jobs
    finally:
        ember.set_num_threads(before)
