"""Eager matmul and linear run the runtime's blocked BLAS products on Ember's pool (BLAS's
own threads at 1 meanwhile, as compiled graphs' products): identical at 1 and 2 threads,
equal to float64 references, a long contraction with a small output (a Linear's weight
gradient) split along k in fixed chunks, and the other layouts left to NumPy."""
import numpy as np
import pytest

import ember
from ember import _C


def _threads(n, fn):
    before = ember.get_num_threads()
    try:
        ember.set_num_threads(n)
        return fn()
    finally:
        ember.set_num_threads(before)


CASES = {
    "rows": ((4096, 64), (64, 96), False),
    "k-split (g^T x)": ((64, 40000), (40000, 48), True),
    "k-split, odd k": ((3, 9001), (9001, 5), False),
    "batched": ((6, 300, 64), (6, 64, 80), False),
}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_products_agree_with_float64_and_across_thread_counts(case, dtype):
    sa, sb, transposed = CASES[case]
    rng = np.random.default_rng(1)
    a = rng.standard_normal(sa[::-1] if transposed else sa).astype(dtype)
    b = rng.standard_normal(sb).astype(dtype)

    def run():
        ea = ember.from_numpy(a)
        ea = ea.t() if transposed else ea
        return ea.matmul(ember.from_numpy(b)).numpy()
    one = _threads(1, run)
    calls = _C._blas_pool_calls()
    two = [_threads(2, run) for _ in range(2)]
    pooled = _C._blas_pool_calls() - calls
    want = (a.T if transposed else a).astype(np.float64) @ b
    tol = 1e-4 if dtype == np.float32 else 1e-10
    np.testing.assert_allclose(one, want, rtol=tol, atol=tol * np.abs(want).max())
    for t in two:
        np.testing.assert_array_equal(one, t)
    big = np.prod(sa) * sb[-1] >= (1 << 18)        # POOL_GEMM_MIN multiply-adds
    if _C._blas_info() is not None:                 # on the pool at 2 threads
        assert pooled == (2 if big else 0)


def test_linear_forward_and_backward_identical_at_one_and_two_threads():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((20000, 64)).astype(np.float32)
    w = rng.standard_normal((32, 64)).astype(np.float32)
    b = rng.standard_normal(32).astype(np.float32)
    g = rng.standard_normal((20000, 32)).astype(np.float32)

    def run():
        X, W, B = (ember.from_numpy(v.copy()).requires_grad_() for v in (x, w, b))
        y = ember.nn.functional.linear(X, W, B)
        y.backward(ember.from_numpy(g))
        return [y.detach().numpy(), X.grad.numpy(), W.grad.numpy(), B.grad.numpy()]
    one, two = _threads(1, run), _threads(2, run)
    for u, v in zip(one, two):
        np.testing.assert_array_equal(u, v)
    x64, w64, g64 = (v.astype(np.float64) for v in (x, w, g))
    want = [x64 @ w64.T + b, g64 @ w64, g64.T @ x64, g64.sum(0)]
    for u, v in zip(one, want):
        np.testing.assert_allclose(u, v, rtol=1e-4, atol=1e-3)


def test_other_layouts_and_dtypes_take_numpy():
    rng = np.random.default_rng(3)
    a = rng.standard_normal((9, 7)).astype(np.float32)
    v = rng.standard_normal(7).astype(np.float32)
    np.testing.assert_allclose(ember.from_numpy(a).matmul(ember.from_numpy(v)).numpy(),
                               a @ v, rtol=1e-5, atol=1e-6)
    neg = ember.from_numpy(a).flip(0)            # a negative stride BLAS cannot read
    np.testing.assert_allclose(neg.matmul(ember.from_numpy(a.T.copy())).numpy(),
                               a[::-1] @ a.T, rtol=1e-5, atol=1e-5)
    ia = rng.integers(-5, 5, (6, 4))
    np.testing.assert_array_equal(
        ember.from_numpy(ia).matmul(ember.from_numpy(ia.T.copy())).numpy(), ia @ ia.T)


def test_small_products_leave_blas_threads_alone():
    """A product below POOL_GEMM_MIN multiply-adds is single-threaded in BLAS anyway:
    it does not set BLAS's threads to 1 and back (two library calls a product); a large
    one does, and both give the same values at 1 and 2 threads."""
    if _C._blas_info() is None:
        pytest.skip("no BLAS found")
    rng = np.random.default_rng(4)
    small = [rng.standard_normal(s).astype(np.float32) for s in ((32, 48), (48, 40))]
    large = [rng.standard_normal(s).astype(np.float32) for s in ((256, 128), (128, 96))]

    def product(a, b):
        return ember.from_numpy(a).matmul(ember.from_numpy(b)).numpy()

    def switches(a, b):
        before = _C._blas_thread_switches()
        out = product(a, b)
        return _C._blas_thread_switches() - before, out
    n_small, out_small = _threads(2, lambda: switches(*small))
    n_large, out_large = _threads(2, lambda: switches(*large))
    assert (n_small, n_large) == (0, 1)
    np.testing.assert_array_equal(out_small, _threads(1, lambda: product(*small)))
    np.testing.assert_array_equal(out_large, _threads(1, lambda: product(*large)))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("b_transposed", [False, True])
@pytest.mark.parametrize("a_form", ["row", "strided row", "batch of rows"])
def test_one_row_products_take_gemv_equal_across_thread_counts(a_form, b_transposed, dtype):
    """A product with one output row per matrix (a decode step's Linear) runs as BLAS's
    matrix-vector product (blas.c gemv_row, about 4x faster than its gemm there): equal to
    float64, identical at 1 and 2 threads (blocks of columns on the pool)."""
    rng = np.random.default_rng(3)
    k, n = 1024, 700
    w = rng.standard_normal((n, k) if b_transposed else (k, n)).astype(dtype)
    if a_form == "row":
        a = rng.standard_normal((1, k)).astype(dtype)
    elif a_form == "strided row":
        a = rng.standard_normal((k, 3)).astype(dtype)[:, 1:2].T     # stride 3 along k
    else:
        a = rng.standard_normal((5, 1, k)).astype(dtype)

    def run():
        eb = ember.from_numpy(w)
        eb = eb.t() if b_transposed else eb
        return ember.from_numpy(a).matmul(eb).numpy()
    one = _threads(1, run)
    two = [_threads(2, run) for _ in range(2)]
    want = a.astype(np.float64) @ (w.T if b_transposed else w).astype(np.float64)
    tol = 1e-4 if dtype == np.float32 else 1e-10
    np.testing.assert_allclose(one, want, rtol=tol, atol=tol * np.abs(want).max())
    for t in two:
        np.testing.assert_array_equal(one, t)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("a_shape, b_shape, b_batch", [
    ((3, 4), (2, 4, 15), (1, 4, 15)),          # a 2-d, b's batch a zero-stride copy
    ((3, 4), (1, 2, 4, 15), (1, 1, 4, 15)),
    ((1, 3, 4), (5, 4, 6), (1, 4, 6)),         # a's size-1 batch, b expanded
])
def test_a_broadcast_matrix_times_a_zero_stride_batch_is_numpys(a_shape, b_shape, b_batch,
                                                               dtype):
    """b the same matrix for every batch (its batch dims expanded: stride 0) and a
    broadcast over them: not one (batch * m) x k product, whose rows a does not have
    (it read past a's memory: upsample_nearest3d of an input expanded over channels
    gave garbage eagerly, fuzz seed 14 #477)."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal(a_shape).astype(dtype)
    b = np.broadcast_to(rng.standard_normal(b_batch).astype(dtype), b_shape)
    got = ember.matmul(ember.from_numpy(a), ember.from_numpy(b).expand(*b_shape))
    np.testing.assert_allclose(got.numpy(), np.matmul(a, b), rtol=1e-5, atol=1e-5)


def test_upsample_nearest3d_of_an_input_expanded_over_channels():
    base = np.random.default_rng(1).standard_normal((1, 1, 4, 3, 5))
    x = ember.from_numpy(np.broadcast_to(base, (1, 2, 4, 3, 5)))
    got = ember.upsample_nearest3d(x, [3, 7, 4])
    want = ember.upsample_nearest3d(x.contiguous(), [3, 7, 4])
    np.testing.assert_array_equal(got.numpy(), want.numpy())
