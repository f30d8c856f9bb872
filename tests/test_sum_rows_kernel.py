"""The vectorised float32 sum/mean over trailing dims of contiguous tensors
(reduction.c's sum_rows_f32): shapes, dims, keepdim, NaN/inf, accuracy on long rows, and
the cases that stay with NumPy (leading dims, non-contiguous, other dtypes)."""
import numpy as np
import pytest

import ember

torch = pytest.importorskip("torch", reason="torch is the reference")


def _pair(shape, seed=0, dtype=np.float32):
    a = np.random.default_rng(seed).standard_normal(shape).astype(dtype)
    return a, ember.from_numpy(a.copy()), torch.from_numpy(a.copy())


@pytest.mark.parametrize("op", ["sum", "mean"])
@pytest.mark.parametrize("shape,dim", [((1000,), None), ((7, 33), -1), ((7, 33), None),
                                        ((3, 5, 1030), (1, 2)), ((3, 5, 17), 2),
                                        ((1, 40), 0), ((4, 1, 9), (0, 1)), ((2, 3, 4), 0),
                                        ((6, 8), (0,)), ((), None), ((5, 0), -1)])
@pytest.mark.parametrize("keepdim", [False, True])
def test_matches_torch(op, shape, dim, keepdim):
    a, e, t = _pair(shape, seed=len(shape))
    if dim is None:
        if keepdim:
            pytest.skip("no keepdim without dim")
        r, rt = getattr(e, op)(), getattr(t, op)()
    else:
        r, rt = getattr(e, op)(dim, keepdim=keepdim), getattr(t, op)(dim, keepdim=keepdim)
    assert tuple(r.shape) == tuple(rt.shape) and r.dtype == ember.float32
    np.testing.assert_allclose(r.numpy(), rt.numpy(), rtol=1e-5, atol=1e-5)


def test_nan_inf_rows():
    a = np.ones((4, 50), np.float32)
    a[0, 3] = np.nan
    a[1, 49] = np.inf
    a[2, 0], a[2, 20] = np.inf, -np.inf
    r = ember.from_numpy(a).sum(-1).numpy()
    assert np.isnan(r[0]) and r[1] == np.inf and np.isnan(r[2]) and r[3] == 50


def test_long_row_is_accurate():
    a = np.full(3_000_001, 0.1, np.float32)
    r = float(ember.from_numpy(a).sum())
    exact = float(np.float64(np.float32(0.1)) * a.size)
    assert abs(r - exact) / exact < 1e-6


def test_non_contiguous_and_other_dtypes_stay_right():
    a, e, t = _pair((30, 40), seed=5)
    np.testing.assert_allclose(e.t().sum(-1).numpy(), t.t().sum(-1).numpy(), rtol=1e-5)
    np.testing.assert_allclose(e[:, ::2].sum().numpy(), t[:, ::2].sum().numpy(), rtol=1e-5)
    a, e, t = _pair((30, 40), seed=6, dtype=np.float64)
    np.testing.assert_allclose(e.sum(-1).numpy(), t.sum(-1).numpy(), rtol=1e-12)
    assert e.float().sum(dtype=ember.float64).dtype == ember.float64
