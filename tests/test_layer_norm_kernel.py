"""The float32 layer_norm rows of cloops.c (vectorised lane sums): row lengths around
the lane and chunk sizes, weight/bias present or not, a large mean over a small spread,
and NaN/inf rows, against torch."""
import numpy as np
import pytest

import ember
import ember.nn.functional as F

torch = pytest.importorskip("torch", reason="torch is the reference")


def _run(a, w, b, shape, eps=1e-5):
    e = F.layer_norm(ember.from_numpy(a.copy()), shape,
                     None if w is None else ember.from_numpy(w.copy()),
                     None if b is None else ember.from_numpy(b.copy()), eps)
    t = torch.nn.functional.layer_norm(torch.from_numpy(a.copy()), shape,
                                       None if w is None else torch.from_numpy(w.copy()),
                                       None if b is None else torch.from_numpy(b.copy()), eps)
    return e.numpy(), t.numpy()


@pytest.mark.parametrize("n", [1, 3, 15, 16, 17, 100, 1023, 1024, 1025, 5000])
@pytest.mark.parametrize("affine", ["both", "weight", "bias", "none"])
def test_rows_match_torch(n, affine):
    rng = np.random.default_rng(n)
    a = rng.standard_normal((5, n)).astype(np.float32)
    w = rng.standard_normal(n).astype(np.float32) if affine in ("both", "weight") else None
    b = rng.standard_normal(n).astype(np.float32) if affine in ("both", "bias") else None
    e, t = _run(a, w, b, (n,))
    assert e.dtype == np.float32
    np.testing.assert_allclose(e, t, rtol=1e-4, atol=1e-4)


def test_large_mean_small_spread_and_multi_dim_shape():
    rng = np.random.default_rng(1)
    a = (1e4 + rng.standard_normal((4, 6, 70))).astype(np.float32)
    e, t = _run(a, None, None, (6, 70))
    np.testing.assert_allclose(e, t, rtol=1e-3, atol=2e-3)


def test_nan_and_inf_rows():
    a = np.random.default_rng(2).standard_normal((4, 40)).astype(np.float32)
    a[0, 7] = np.nan
    a[1, 39] = np.inf
    a[2, :] = 3.0
    e, t = _run(a, None, None, (40,))
    np.testing.assert_array_equal(np.isnan(e), np.isnan(t))
    np.testing.assert_allclose(e[2:], t[2:], rtol=1e-5, atol=1e-5)


def test_non_contiguous_input():
    a = np.random.default_rng(3).standard_normal((64, 48)).astype(np.float32)
    e = F.layer_norm(ember.from_numpy(a).t(), (64,))
    t = torch.nn.functional.layer_norm(torch.from_numpy(a).t(), (64,))
    np.testing.assert_allclose(e.numpy(), t.numpy(), rtol=1e-4, atol=1e-4)


def test_large_layer_norm_on_the_pool_identical_at_one_and_two_threads():
    """From 131072 elements the forward kernel's rows go to the pool in fixed chunks of
    whole rows: float32 and float64 give the same bits at 1 and 2 threads, and a row
    equals a small (one-thread) call's."""
    import ember
    g = np.random.default_rng(24)
    before = ember.get_num_threads()
    for dt in (np.float32, np.float64):
        x = ember.from_numpy(g.standard_normal((3001, 96)).astype(dt))
        w = ember.from_numpy(g.standard_normal(96).astype(dt))
        b = ember.from_numpy(g.standard_normal(96).astype(dt))
        outs = []
        try:
            for threads in (1, 2):
                ember.set_num_threads(threads)
                jobs = ember._C._pool_jobs()
                outs.append(ember.nn.functional.layer_norm(x, (96,), w, b).numpy())
                assert ember._C._pool_jobs() - jobs == threads - 1
        finally:
            ember.set_num_threads(before)
        np.testing.assert_array_equal(outs[0], outs[1])
        small = ember.nn.functional.layer_norm(x[:100], (96,), w, b).numpy()
        np.testing.assert_array_equal(outs[1][:100], small)
