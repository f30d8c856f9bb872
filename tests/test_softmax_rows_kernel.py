"""cloops.c's float32 softmax rows (vector max with a NaN flag): NaN and infinities in the
full 16-lane blocks and in the tail, all -inf rows, row lengths around the lane size."""
import numpy as np
import pytest

import ember

torch = pytest.importorskip("torch", reason="torch is the reference")


@pytest.mark.parametrize("fn", ["softmax", "log_softmax"])
@pytest.mark.parametrize("n", [1, 15, 16, 17, 37, 64, 1000])
def test_rows_with_specials_match_torch(fn, n):
    rng = np.random.default_rng(n)
    a = (rng.standard_normal((6, n)) * 10).astype(np.float32)
    a[0, n // 2] = np.nan
    a[1, :] = -np.inf
    a[2, n - 1] = np.inf
    a[3, n - 1] = np.nan
    a[4, 0] = 80.0
    e = getattr(ember, fn)(ember.from_numpy(a.copy()), -1).numpy()
    t = getattr(torch, fn)(torch.from_numpy(a.copy()), -1).numpy()
    np.testing.assert_array_equal(np.isnan(e), np.isnan(t))
    keep = ~np.isnan(t)
    np.testing.assert_allclose(e[keep], t[keep], rtol=1e-5, atol=1e-6)


def test_large_softmax_rows_on_the_pool_identical_at_one_and_two_threads():
    """From 131072 elements the rows go to the pool in chunks of whole rows: softmax and
    log_softmax give the same bits at 1 and 2 threads."""
    import ember
    x = ember.from_numpy(np.random.default_rng(3).standard_normal((3001, 77))
                         .astype(np.float32))
    before = ember.get_num_threads()
    outs = []
    try:
        for threads in (1, 2):
            ember.set_num_threads(threads)
            outs.append([x.softmax(-1).numpy(), x.log_softmax(-1).numpy(),
                         x.double().softmax(-1).numpy()])
    finally:
        ember.set_num_threads(before)
    for u, v in zip(*outs):
        np.testing.assert_array_equal(u, v)
