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
