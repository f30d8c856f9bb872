"""Pooling compiled by the LLVM backend (compiler/pooling.py): max_pool2d and its
backward as loop-IR kernels (no extern step), average and adaptive pooling through
their matrix-product decompositions; all equal to eager, exactly for max pooling (its
values and gradients are selected and added in eager's order), and nothing falls back."""
import numpy as np
import pytest

import ember
from ember.capture import counters
from ember.compiler import backend
from ember.compiler.plan import ExternStep

F = ember.nn.functional

MAX_CASES = [dict(kernel_size=2), dict(kernel_size=3, stride=2, padding=1),
             dict(kernel_size=3, stride=2, ceil_mode=True),
             dict(kernel_size=(3, 2), stride=(1, 2), padding=(1, 1), dilation=(2, 1))]


@pytest.fixture(autouse=True)
def strict(monkeypatch):
    ember.compiler.reset()
    monkeypatch.setattr(ember.compiler.config, "strict", True)
    yield
    ember.compiler.reset()


def _run(fn, a, dtype):
    """fn's outputs and the input's gradient under a weighted sum of the float ones."""
    x = ember.from_numpy(a).to(dtype).requires_grad_()
    outs = fn(x)
    loss = 0
    for o in outs:
        if o.dtype.is_floating_point:
            w = np.arange(o.numel(), dtype=np.float64).reshape(tuple(o.shape)) % 7 - 3
            loss = loss + (o * ember.from_numpy(w).to(o.dtype)).sum()
    loss.backward()
    return [o.detach().numpy().copy() for o in outs], x.grad.numpy().copy()


def _sample(shape, seed=0):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal(shape)
    a.flat[5] = a.flat[6]                    # a tie
    a.flat[-1] = a.flat[-2] = np.nan         # two NaNs in a window: the last one wins
    a.flat[9] = -np.inf
    a.flat[12:14] = (-0.0, 0.0)              # tied zeros: eager keeps the first's sign
    a.flat[14] = a.flat[15] = -5.0
    return a


@pytest.mark.parametrize("kw", MAX_CASES, ids=lambda kw: "-".join(map(str, kw.values())))
@pytest.mark.parametrize("shape", [(2, 3, 9, 8), (3, 7, 7)], ids=["4d", "3d"])
@pytest.mark.parametrize("dtype", [ember.float32, ember.float64], ids=["f32", "f64"])
def test_max_pool2d_with_indices_and_its_backward_are_kernels_equal_to_eager(kw, shape,
                                                                             dtype):
    def fn(x):
        v, i = F.max_pool2d(x, return_indices=True, **kw)
        return v * 2, i
    a = _sample(shape)
    (want, want_i), want_g = _run(fn, a, dtype)
    (got, got_i), got_g = _run(ember.compile(fn, backend="llvm"), a, dtype)
    np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))
    np.testing.assert_array_equal(got_i, want_i)
    np.testing.assert_array_equal(got_g, want_g)
    assert not counters["llvm_fallback"], dict(counters["llvm_fallback"])
    fw, bw = list(backend.recent)[-2:]
    for g in (fw, bw):
        assert not [s for s in g.lowered.steps if isinstance(s, ExternStep)], g.describe()
    assert "maxpool" in str(fw.lowered) and "maxpool_backward" in str(bw.lowered)


def test_max_pool2d_of_a_channels_last_input_runs_the_eager_kernel():
    """(whose result eager lays out channels-last too)"""
    a = _sample((2, 4, 6, 6))
    # NCHW sizes over NHWC memory (eager's result is laid out so too)
    x = ember.from_numpy(a.transpose(0, 2, 3, 1).copy()).to(ember.float32).permute(0, 3, 1, 2)
    fn = lambda t: F.max_pool2d(t, 2) + 1       # noqa: E731
    got = ember.compile(fn, backend="llvm")(x)
    np.testing.assert_array_equal(got.numpy(), fn(x).numpy())
    (fw,) = list(backend.recent)[-1:]
    assert [s.name for s in fw.lowered.steps if isinstance(s, ExternStep)] == [
        "max_pool2d_with_indices"], fw.describe()
    assert not counters["llvm_fallback"], dict(counters["llvm_fallback"])


AVG_CASES = [
    ("avg2", lambda x: F.avg_pool2d(x, 2)),
    ("avg3-pad", lambda x: F.avg_pool2d(x, 3, stride=2, padding=1, count_include_pad=False)),
    ("avg3-ceil", lambda x: F.avg_pool2d(x, 3, stride=2, ceil_mode=True, divisor_override=4)),
    ("adaptive", lambda x: F.adaptive_avg_pool2d(x, (3, 5))),
    ("adaptive1", lambda x: F.adaptive_avg_pool2d(x, 1)),
]


@pytest.mark.parametrize("name,pool", AVG_CASES, ids=[c[0] for c in AVG_CASES])
@pytest.mark.parametrize("dtype", [ember.float32, ember.float64], ids=["f32", "f64"])
def test_average_pools_and_their_backward_compile_without_fallback(name, pool, dtype):
    def fn(x):
        return (pool(x).tanh(),)
    a = np.random.default_rng(1).standard_normal((2, 3, 9, 8))
    (want,), want_g = _run(fn, a, dtype)
    (got,), got_g = _run(ember.compile(fn, backend="llvm"), a, dtype)
    rtol = 1e-5 if dtype is ember.float32 else 1e-12
    np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol)
    np.testing.assert_allclose(got_g, want_g, rtol=rtol, atol=rtol)
    assert not counters["llvm_fallback"], dict(counters["llvm_fallback"])


def test_max_pool2d_keeps_the_sign_of_a_first_zero_tied_with_zero():
    """Eager keeps the first of tied maxima: -0.0 before 0.0 gives -0.0 (a reduce max
    would give 0.0); the value is read at the recorded index."""
    a = np.array([[[-0.0, 0.0, 0.0, -0.0], [-1.0, -2.0, -3.0, -4.0]]])
    fn = lambda t: F.max_pool2d(t, 2, return_indices=True)     # noqa: E731
    for dtype in (ember.float32, ember.float64):
        x = ember.from_numpy(a).to(dtype)
        want_v, want_i = fn(x)
        got_v, got_i = ember.compile(fn, backend="llvm")(x)
        assert np.signbit(want_v.numpy()).tolist() == [[[True, False]]]
        np.testing.assert_array_equal(np.signbit(got_v.numpy()), np.signbit(want_v.numpy()))
        np.testing.assert_array_equal(got_i.numpy(), want_i.numpy())
        ember.compiler.reset()
    assert not counters["llvm_fallback"], dict(counters["llvm_fallback"])


def test_large_max_pool2d_on_the_pool_identical_at_one_and_two_threads():
    """From 131072 input elements the forward runs on the pool in fixed chunks of whole
    planes: values and indices (NaNs and ties included) are the same at 1 and 2 threads
    and equal those of a call small enough to run on one thread."""
    import ember
    g = np.random.default_rng(21)
    a = g.standard_normal((4, 32, 40, 40)).astype(np.float32)
    a[0, 3, 5, 7] = np.nan
    a[2, 9, :4, :4] = 1.0
    x = ember.from_numpy(a)
    before = ember.get_num_threads()
    outs = []
    try:
        for threads in (1, 2):
            ember.set_num_threads(threads)
            jobs = ember._C._pool_jobs()
            v, i = ember.nn.functional.max_pool2d(x, 3, 2, 1, return_indices=True)
            assert ember._C._pool_jobs() - jobs == (threads - 1)   # on the pool at 2
            outs.append((v.numpy(), i.numpy()))
    finally:
        ember.set_num_threads(before)
    np.testing.assert_array_equal(outs[0][0], outs[1][0])
    np.testing.assert_array_equal(outs[0][1], outs[1][1])
    sv, si = ember.nn.functional.max_pool2d(ember.from_numpy(a[2:3].copy()), 3, 2, 1,
                                            return_indices=True)
    np.testing.assert_array_equal(outs[1][0][2:3], sv.numpy())
    np.testing.assert_array_equal(outs[1][1][2:3], si.numpy())
    assert np.isnan(outs[1][0][0, 3]).any()


def test_large_max_pool2d_backward_on_the_pool_identical_at_one_and_two_threads():
    import ember
    g = np.random.default_rng(23)
    a = g.standard_normal((4, 32, 40, 40)).astype(np.float32)
    a[1, 2, :3, :3] = 0.5                                      # ties: overlapping windows
    go = g.standard_normal((4, 32, 20, 20)).astype(np.float32)
    before = ember.get_num_threads()
    grads = []
    try:
        for threads in (1, 2):
            ember.set_num_threads(threads)
            x = ember.from_numpy(a.copy()).requires_grad_()
            ember.nn.functional.max_pool2d(x, 3, 2, 1).backward(ember.from_numpy(go))
            grads.append(x.grad.numpy())
    finally:
        ember.set_num_threads(before)
    np.testing.assert_array_equal(grads[0], grads[1])
    torch = pytest.importorskip("torch")
    tx = torch.from_numpy(a.copy()).requires_grad_()
    torch.nn.functional.max_pool2d(tx, 3, 2, 1).backward(torch.from_numpy(go))
    np.testing.assert_allclose(grads[1], tx.grad.numpy(), rtol=1e-6, atol=1e-6)
