"""nn.c's float32 cross_entropy (row logsumexp from cloops.c's vectorised loop) against
torch: class counts around the lane and buffer sizes, label smoothing, ignore_index,
every reduction, NaN/inf logits and the out-of-range error."""
import numpy as np
import pytest

import ember
import ember.nn.functional as F

torch = pytest.importorskip("torch", reason="torch is the reference")


def _both(x, t, **kw):
    e = F.cross_entropy(ember.from_numpy(x.copy()), ember.from_numpy(t.copy()), **kw)
    r = torch.nn.functional.cross_entropy(torch.from_numpy(x.copy()), torch.from_numpy(t.copy()),
                                          **kw)
    return e.numpy(), r.numpy()


@pytest.mark.parametrize("C", [1, 5, 16, 17, 64, 255, 256, 257, 1000])
@pytest.mark.parametrize("kw", [{}, {"label_smoothing": 0.2}, {"reduction": "none"},
                                {"reduction": "sum", "ignore_index": 0}])
def test_matches_torch(C, kw):
    rng = np.random.default_rng(C)
    x = (rng.standard_normal((40, C)) * 5).astype(np.float32)
    t = rng.integers(0, C, 40)
    e, r = _both(x, t, **kw)
    assert e.dtype == np.float32
    np.testing.assert_allclose(e, r, rtol=1e-5, atol=1e-5)


def test_nan_and_inf_logits():
    x = np.random.default_rng(1).standard_normal((4, 40)).astype(np.float32)
    x[0, 20] = np.nan
    x[1, 3] = np.inf
    x[2, :] = -np.inf
    e, r = _both(x, np.array([1, 2, 3, 4]), reduction="none")
    np.testing.assert_array_equal(np.isnan(e), np.isnan(r))
    np.testing.assert_allclose(e[3], r[3], rtol=1e-5)


def test_out_of_range_target():
    x = ember.zeros(3, 20)
    with pytest.raises(IndexError):
        F.cross_entropy(x, ember.tensor([1, 20, 2]))
    F.cross_entropy(x, ember.tensor([1, -100, 2]))


def test_large_float32_cross_entropy_on_the_pool_identical_at_one_and_two_threads():
    """From 131072 logits the float32 rows' logsumexp runs on the pool in fixed chunks
    of whole rows (the mean adds the rows in order afterwards): every reduction and
    label smoothing give the same bits at 1 and 2 threads, and a row's loss equals a
    small (one-thread) call's."""
    import ember
    g = np.random.default_rng(22)
    x = ember.from_numpy(g.standard_normal((4099, 100)).astype(np.float32))
    t = ember.from_numpy(g.integers(0, 100, 4099))
    F = ember.nn.functional
    before = ember.get_num_threads()
    outs = []
    try:
        for threads in (1, 2):
            ember.set_num_threads(threads)
            jobs = ember._C._pool_jobs()
            F.cross_entropy(x, t)
            assert ember._C._pool_jobs() - jobs == threads - 1      # on the pool at 2
            outs.append([F.cross_entropy(x, t, reduction=r, label_smoothing=s).numpy()
                         for r in ("none", "mean", "sum") for s in (0.0, 0.1)])
    finally:
        ember.set_num_threads(before)
    for u, v in zip(*outs):
        np.testing.assert_array_equal(u, v)
    small = F.cross_entropy(x[:1000], t[:1000], reduction="none").numpy()
    np.testing.assert_array_equal(outs[1][0][:1000], small)
