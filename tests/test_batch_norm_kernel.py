"""batch_norm's eager C forward (batch_norm.c, em_batch_norm_kernel): evaluation, training
without running statistics and training that updates them (in the same pass), for
contiguous float32/float64 inputs; values, running statistics and gradients as torch's,
identical at 1 and 2 threads, and every other case (strided or empty inputs, half
dtypes, one value per channel) left to the decomposition."""
import numpy as np
import pytest

import ember
from ember.ops import nn_ops

torch = pytest.importorskip("torch", reason="torch is the reference")


@pytest.fixture
def decompositions(monkeypatch):
    """How many times batch_norm's decomposition ran (it checks its arguments first)."""
    calls = []
    check = nn_ops._batch_norm_check

    def counting(*args):
        calls.append(1)
        return check(*args)
    monkeypatch.setattr(nn_ops, "_batch_norm_check", counting)
    return calls


def _run(lib, x, w, b, rm, rv, training, g, strided=False):
    """(output, running_mean, running_var, grad x, grad w, grad b) of lib's batch_norm."""
    X = lib.from_numpy(x.copy())
    if strided:                  # the same values read through a transposed layout
        X = lib.from_numpy(np.ascontiguousarray(np.swapaxes(x, 0, -1))).transpose(0, -1)
    X.requires_grad_()
    W = None if w is None else lib.from_numpy(w.copy()).requires_grad_()
    B = None if b is None else lib.from_numpy(b.copy()).requires_grad_()
    RM = None if rm is None else lib.from_numpy(rm.copy())
    RV = None if rv is None else lib.from_numpy(rv.copy())
    y = lib.nn.functional.batch_norm(X, RM, RV, W, B, training=training, momentum=0.3,
                                     eps=1e-4)
    y.backward(lib.from_numpy(g.copy()))
    return [None if t is None else t.detach().numpy()
            for t in (y, RM, RV, X.grad, None if W is None else W.grad,
                      None if B is None else B.grad)]


def _inputs(shape, dtype, seed=0):
    rng = np.random.default_rng(seed)
    C = shape[1]
    x = (rng.standard_normal(shape) * 2 + 0.5).astype(dtype)
    w, b, rm = (rng.standard_normal(C).astype(dtype) for _ in range(3))
    rv = (rng.random(C) + 0.5).astype(dtype)
    g = rng.standard_normal(shape).astype(dtype)
    return x, w, b, rm, rv, g


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(16, 32, 8, 8), (5, 7, 9), (4, 3), (2, 3, 0, 4)])
@pytest.mark.parametrize("mode", ["eval", "train, no running stats", "train, affine off",
                                  "train, running stats"])
@pytest.mark.parametrize("strided", [False, True])
def test_values_and_gradients_match_torch(dtype, shape, mode, strided, decompositions):
    x, w, b, rm, rv, g = _inputs(shape, dtype)
    training = mode != "eval"
    if training and mode != "train, running stats":
        rm = rv = None
    if mode == "train, affine off":
        w = b = None
    if training and shape[0] * int(np.prod(shape[2:])) <= 1:
        pytest.skip("one value per channel")
    got = _run(ember, x, w, b, rm, rv, training, g, strided)
    fused_calls = len(decompositions)
    want = _run(torch, x, w, b, rm, rv, training, g, strided)
    tol = 2e-5 if dtype == np.float32 else 1e-12
    for u, v in zip(got, want):
        if v is None:
            assert u is None
            continue
        assert u.dtype == v.dtype and u.shape == v.shape
        np.testing.assert_allclose(u, v, rtol=tol * 10, atol=tol * 10)
    # the C forward ran unless the input is strided or empty
    assert fused_calls == (1 if strided or 0 in shape else 0)


def test_running_statistics_update_in_c_and_half_dtypes_take_the_decomposition(decompositions):
    x, w, b, rm, rv, g = _inputs((8, 4, 5), np.float32)
    got = _run(ember, x, w, b, rm, rv, True, g)
    assert len(decompositions) == 0
    want = _run(torch, x, w, b, rm, rv, True, g)
    for u, v in zip(got, want):
        np.testing.assert_allclose(u, v, rtol=2e-4, atol=2e-5)
    # the C update agrees with the decomposition's (a strided input takes it)
    dec = _run(ember, x, w, b, rm, rv, True, g, strided=True)
    assert len(decompositions) == 1
    for u, v in zip(got, dec):
        np.testing.assert_allclose(u, v, rtol=1e-6, atol=1e-6)
    decompositions.clear()
    h = ember.from_numpy(x.astype(np.float16))
    ember.nn.functional.batch_norm(h, None, None, training=True)
    assert len(decompositions) == 1


def test_batchnorm_layer_training_steps_track_torch():
    """BatchNorm2d in training over several steps: outputs, running statistics,
    num_batches_tracked and gradients as torch's (momentum 0.1 and None)."""
    rng = np.random.default_rng(5)
    for momentum in (0.1, None):
        layers = [lib.nn.BatchNorm2d(6, momentum=momentum) for lib in (ember, torch)]
        for step in range(4):
            x = (rng.standard_normal((4, 6, 5, 5)) * (step + 1) + step).astype(np.float32)
            outs = []
            for lib, layer in zip((ember, torch), layers):
                X = lib.from_numpy(x.copy()).requires_grad_()
                y = layer(X)
                (y * y).sum().backward()
                outs.append([y.detach().numpy(), X.grad.numpy(), layer.weight.grad.numpy(),
                             layer.running_mean.numpy(), layer.running_var.numpy(),
                             layer.num_batches_tracked.numpy()])
                layer.zero_grad()
            for u, v in zip(*outs):
                np.testing.assert_allclose(u, v, rtol=1e-4, atol=1e-4)


def test_empty_training_batch_leaves_running_statistics_as_torch():
    x, w, b, rm, rv, g = _inputs((2, 3, 0, 4), np.float32)
    got = _run(ember, x, w, b, rm, rv, True, g)
    want = _run(torch, x, w, b, rm, rv, True, g)
    for u, v in zip(got, want):
        np.testing.assert_array_equal(u, v)


def test_identical_at_one_and_two_threads_and_run_to_run():
    x, w, b, rm, rv, g = _inputs((32, 16, 24, 24), np.float32, seed=3)
    before = ember.get_num_threads()
    try:
        outs = []
        for threads in (1, 2, 2):
            ember.set_num_threads(threads)
            outs.append(_run(ember, x, w, b, rm, rv, False, g) +
                        _run(ember, x, w, b, None, None, True, g) +
                        _run(ember, x, w, b, rm, rv, True, g))
    finally:
        ember.set_num_threads(before)
    for other in outs[1:]:
        for u, v in zip(outs[0], other):
            if u is not None:
                np.testing.assert_array_equal(u, v)
