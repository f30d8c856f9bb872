"""The fused eager gradients of nn_grad.c (silu, gelu, softmax, log_softmax, layer_norm,
cross_entropy, embedding): they run in a backward without create_graph, agree with the
op-written formulas (which a create_graph backward takes) and with torch, are
identical at 1 and 2 threads, and leave the other cases (non-contiguous, 0-d, empty,
half dtypes, weights, smoothing, double backward) to the formulas."""
import numpy as np
import pytest

import ember
import ember.nn.functional as F
from ember import _C

torch = pytest.importorskip("torch", reason="torch is the reference")

CASES = {
    "silu": (lambda L, x: L.nn.functional.silu(x), [(70000,), (3, 5)]),
    "gelu": (lambda L, x: L.nn.functional.gelu(x), [(70000,), (3, 5)]),
    "gelu_tanh": (lambda L, x: L.nn.functional.gelu(x, approximate="tanh"), [(70000,), (7,)]),
    "softmax": (lambda L, x: x.softmax(-1), [(3000, 33), (4, 1), (2, 3, 1100)]),
    "log_softmax": (lambda L, x: L.nn.functional.log_softmax(x, -1), [(3000, 33), (5, 17)]),
    "layer_norm": (lambda L, x: L.nn.functional.layer_norm(x, x.shape[-1:]),
                   [(3000, 40), (6, 1), (2, 3, 9)]),
}


def _grads(lib, fn, a, g, create_graph=False, dtype=np.float32):
    x = lib.from_numpy(a.astype(dtype)).requires_grad_()
    y = fn(lib, x)
    gy = lib.from_numpy(g.astype(dtype))
    (gx,) = lib.autograd.grad(y, x, gy, create_graph=create_graph)
    return gx.detach().numpy()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", sorted(CASES))
def test_fused_matches_the_formula_and_torch(name, dtype):
    fn, shapes = CASES[name]
    rng = np.random.default_rng(0)
    for shape in shapes:
        a = (rng.standard_normal(shape) * 3).astype(dtype)
        g = rng.standard_normal(shape).astype(dtype)
        fused = _grads(ember, fn, a, g, dtype=dtype)
        formula = _grads(ember, fn, a, g, create_graph=True, dtype=dtype)
        ref = _grads(torch, fn, a, g, dtype=dtype)
        tol = 2e-5 if dtype == np.float32 else 1e-12
        np.testing.assert_allclose(fused, formula, rtol=tol * 10, atol=tol)
        np.testing.assert_allclose(fused, ref, rtol=tol * 10, atol=tol)


def test_the_fused_path_is_taken_only_with_grad_mode_off():
    """backward() turns grad mode off unless create_graph: the fused kernels run then;
    with grad mode on (create_graph), for strided or half operands they decline."""
    x, g = ember.randn(4, 8), ember.randn(4, 8)
    t, w = ember.tensor([1, 2, 3, 0]), ember.randn(8)
    with ember.no_grad():
        assert _C._grad_pointwise(0, g, x) is not None
        assert _C._grad_softmax(g, x, False) is not None
        assert _C._grad_layer_norm(g, x, 1, w, 1e-5, True, True, True) is not None
        assert _C._grad_cross_entropy(ember.tensor(1.0), x, t, 1, -100) is not None
        assert _C._grad_embedding(g, t, 5, -1) is not None
        assert _C._grad_pointwise(0, g, x.t().contiguous().t()) is None    # strided
        assert _C._grad_pointwise(0, g.half(), x.half()) is None
        assert _C._grad_cross_entropy(ember.tensor(1.0), x, t + 10, 1, -100) is None
    assert _C._grad_pointwise(0, g, x) is None
    assert _C._grad_softmax(g, x, False) is None
    assert _C._grad_layer_norm(g, x, 1, w, 1e-5, True, True, True) is None
    assert _C._grad_cross_entropy(ember.tensor(1.0), x, t, 1, -100) is None
    assert _C._grad_embedding(g, t, 5, -1) is None


def _layer_norm_grads(lib, a, w, b, g, create_graph=False):
    x = lib.from_numpy(a.copy()).requires_grad_()
    wt = lib.from_numpy(w.copy()).requires_grad_()
    bt = lib.from_numpy(b.copy()).requires_grad_()
    y = lib.nn.functional.layer_norm(x, a.shape[-2:], wt, bt)
    gs = lib.autograd.grad(y, (x, wt, bt), lib.from_numpy(g.copy()), create_graph=create_graph)
    return [t.detach().numpy() for t in gs]


@pytest.mark.parametrize("rows", [1, 5, 70, 4000])
def test_layer_norm_weight_and_bias(rows):
    rng = np.random.default_rng(rows)
    a = rng.standard_normal((rows, 3, 12)).astype(np.float32) + 2
    w, b = rng.standard_normal((2, 3, 12)).astype(np.float32)
    g = rng.standard_normal(a.shape).astype(np.float32)
    fused = _layer_norm_grads(ember, a, w, b, g)
    formula = _layer_norm_grads(ember, a, w, b, g, create_graph=True)
    ref = _layer_norm_grads(torch, a, w, b, g)
    for f, o, r in zip(fused, formula, ref):
        np.testing.assert_allclose(f, o, rtol=1e-4, atol=2e-4)
        np.testing.assert_allclose(f, r, rtol=1e-4, atol=2e-4)


def _ce_grads(lib, a, t, reduction, create_graph=False, ignore_index=-100):
    x = lib.from_numpy(a.copy()).requires_grad_()
    loss = lib.nn.functional.cross_entropy(x, lib.from_numpy(t.copy()), reduction=reduction,
                                           ignore_index=ignore_index)
    g = lib.ones_like(loss) if reduction != "none" else lib.from_numpy(
        np.linspace(-1, 2, len(t)).astype(a.dtype))
    (gx,) = lib.autograd.grad(loss, x, g, create_graph=create_graph)
    return gx.detach().numpy()


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_cross_entropy_class_indices(reduction, dtype):
    rng = np.random.default_rng(3)
    a = (rng.standard_normal((3000, 37)) * 4).astype(dtype)
    t = rng.integers(0, 37, 3000)
    t[::7] = 5
    t[::11] = -100                 # ignored rows
    fused = _ce_grads(ember, a, t, reduction)
    formula = _ce_grads(ember, a, t, reduction, create_graph=True)
    ref = _ce_grads(torch, a, t, reduction)
    tol = 1e-6 if dtype == np.float32 else 1e-13
    np.testing.assert_allclose(fused, formula, rtol=1e-5, atol=tol)
    np.testing.assert_allclose(fused, ref, rtol=1e-5, atol=tol)
    assert not fused[::11].any()


def test_cross_entropy_all_ignored_gives_zero_gradients_as_torch():
    a = np.ones((3, 4), np.float32)
    t = np.full(3, -100)
    np.testing.assert_array_equal(_ce_grads(ember, a, t, "mean"),
                                  _ce_grads(torch, a, t, "mean"))


@pytest.mark.parametrize("padding_idx", [None, 3])
def test_embedding(padding_idx):
    rng = np.random.default_rng(4)
    table = rng.standard_normal((50, 40)).astype(np.float32)
    idx = rng.integers(0, 50, (30, 70))
    idx[0, :5] = 3
    g = rng.standard_normal((30, 70, 40)).astype(np.float32)
    out = []
    for lib, cg in ((ember, False), (ember, True), (torch, False)):
        w = lib.from_numpy(table.copy()).requires_grad_()
        y = lib.nn.functional.embedding(lib.from_numpy(idx.copy()), w, padding_idx=padding_idx)
        (gw,) = lib.autograd.grad(y, w, lib.from_numpy(g.copy()), create_graph=cg)
        out.append(gw.detach().numpy())
    np.testing.assert_allclose(out[0], out[1], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(out[0], out[2], rtol=1e-5, atol=1e-5)
    if padding_idx is not None:
        assert not out[0][padding_idx].any()


def test_identical_at_one_and_two_threads():
    rng = np.random.default_rng(5)
    a = rng.standard_normal((5000, 64)).astype(np.float32)
    g = rng.standard_normal((5000, 64)).astype(np.float32)
    w, b = rng.standard_normal((2, 64)).astype(np.float32)
    t = rng.integers(0, 64, 5000)
    idx = rng.integers(0, 100, 5000)
    before = ember.get_num_threads()

    def all_grads():
        out = [_grads(ember, fn, a, g) for fn, _ in CASES.values()]
        out += _layer_norm_grads(ember, a.reshape(5000, 4, 16), w.reshape(4, 16),
                                 b.reshape(4, 16), g.reshape(5000, 4, 16))
        out.append(_ce_grads(ember, a, t, "mean"))
        tw = ember.from_numpy(a[:100].copy()).requires_grad_()
        F.embedding(ember.from_numpy(idx), tw).backward(ember.from_numpy(g))
        out.append(tw.grad.numpy())
        return out
    try:
        ember.set_num_threads(1)
        one = all_grads()
        ember.set_num_threads(2)
        two = all_grads()
    finally:
        ember.set_num_threads(before)
    for u, v in zip(one, two):
        np.testing.assert_array_equal(u, v)


def test_non_contiguous_zero_dim_and_empty_inputs_take_the_formula():
    rng = np.random.default_rng(6)
    a = rng.standard_normal((40, 30)).astype(np.float32)
    for fn, _ in CASES.values():
        x = ember.from_numpy(a.copy()).t().requires_grad_()     # strided
        xt = torch.from_numpy(a.copy()).t().requires_grad_()
        fn(ember, x).sum().backward()
        fn(torch, xt).sum().backward()
        np.testing.assert_allclose(x.grad.numpy(), xt.grad.numpy(), rtol=1e-4, atol=1e-5)
    for shape in [(0, 5), (5, 0)]:
        x = ember.zeros(shape, requires_grad=True)
        x.softmax(-1).sum().backward()
        F.layer_norm(x, shape[-1:]).sum().backward() if shape[-1] else None
        F.silu(x).sum().backward()
        assert x.grad.shape == shape
    s = ember.tensor(0.7, requires_grad=True)
    F.gelu(s).backward()
    st = torch.tensor(0.7, requires_grad=True)
    torch.nn.functional.gelu(st).backward()
    assert abs(s.grad.item() - st.grad.item()) < 1e-6
    s.grad = None
    s.softmax(0).backward()
    assert s.grad.item() == 0.0


def test_double_backward_still_differentiates_the_formula():
    x = ember.randn(6, 9, requires_grad=True)
    xt = torch.from_numpy(x.detach().numpy().copy()).requires_grad_()
    for lib, v in ((ember, x), (torch, xt)):
        y = lib.nn.functional.layer_norm(lib.nn.functional.silu(v), (9,))
        (g,) = lib.autograd.grad((y * y).sum(), v, create_graph=True)
        g.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), xt.grad.numpy(), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("shape", [(16, 8, 10, 10), (5, 3), (4, 6, 33), (2, 2, 1, 1)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_batch_norm_training_forward_backward_and_running_stats(shape, dtype):
    """_C._grad_batch_norm_train (the backward without create_graph) against torch and
    against the formula."""
    rng = np.random.default_rng(7)
    a = (rng.standard_normal(shape) * 2 + 1).astype(dtype)
    g = rng.standard_normal(shape).astype(dtype)
    w, b = rng.standard_normal((2, shape[1])).astype(dtype)
    res = []
    for lib, cg in ((ember, False), (ember, True), (torch, False)):
        bn = lib.nn.BatchNorm1d(shape[1]) if len(shape) < 4 else lib.nn.BatchNorm2d(shape[1])
        bn = bn.to(lib.float64) if dtype == np.float64 else bn
        with lib.no_grad():
            bn.weight.copy_(lib.from_numpy(w.copy()))
            bn.bias.copy_(lib.from_numpy(b.copy()))
        x = lib.from_numpy(a.copy()).requires_grad_()
        y = bn(x)
        gs = lib.autograd.grad(y, (x, bn.weight, bn.bias), lib.from_numpy(g.copy()),
                               create_graph=cg)
        res.append([y.detach().numpy()] + [t.detach().numpy() for t in gs] +
                   [bn.running_mean.numpy(), bn.running_var.numpy()])
    tol = 1e-4 if dtype == np.float32 else 1e-10
    for fused, formula, ref in zip(*res):
        np.testing.assert_allclose(fused, ref, rtol=tol, atol=tol)
        np.testing.assert_allclose(fused, formula, rtol=tol, atol=tol)
    with ember.no_grad():
        x = ember.from_numpy(a.copy())
        assert _C._grad_batch_norm_train(x, x, None, 1e-5, True, False, False) is not None


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_large_embedding_on_the_pool_identical_at_one_and_two_threads(dtype):
    """From 131072 elements embedding's forward (rows copied in fixed chunks of whole
    rows) and its weight gradient (the weight's rows in 64 fixed blocks, each adding its
    gradient rows in index order, repeated indices included) go to the pool at 2
    threads: the same bits at 1 and 2 threads, equal to NumPy's take and to a float64
    scatter-add."""
    rng = np.random.default_rng(7)
    table = rng.standard_normal((1000, 48)).astype(dtype)
    idx = rng.integers(0, 1000, (40, 100))
    idx[0, :10] = 3                                    # one row added many times
    g = rng.standard_normal((40, 100, 48)).astype(dtype)
    before = ember.get_num_threads()

    def run(threads):
        ember.set_num_threads(threads)
        w = ember.from_numpy(table.copy()).requires_grad_()
        jobs = _C._pool_jobs()
        y = F.embedding(ember.from_numpy(idx), w, padding_idx=7)
        fwd_jobs = _C._pool_jobs() - jobs
        y.backward(ember.from_numpy(g))
        return y.detach().numpy(), w.grad.numpy(), fwd_jobs, _C._pool_jobs() - jobs
    try:
        y1, g1, f1, j1 = run(1)
        y2, g2, f2, j2 = run(2)
    finally:
        ember.set_num_threads(before)
    assert (f1, j1, f2, j2) == (0, 0, 1, 2)
    np.testing.assert_array_equal(y1, y2)
    np.testing.assert_array_equal(g1, g2)
    np.testing.assert_array_equal(y1, table[idx])
    want = np.zeros((1000, 48))
    np.add.at(want, idx.reshape(-1), g.reshape(-1, 48).astype(np.float64))
    want[7] = 0
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(g1, want, rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_fused_gradients_and_batch_norm_use_the_kernels_pool_runner(dtype):
    """Every fused gradient and batch_norm's forward run through em_run_chunked (kutil.c),
    the kernels' one runner: one pool job at 2 threads from EM_POOL_FROM (131072)
    elements, none just below it or at 1 thread, and the same bits at 1 and 2 threads."""
    def calls(rows):
        """each fused entry point on (rows, 64) operands (batch_norm: (rows / 8, 8, 64))"""
        rng = np.random.default_rng(rows)
        a = rng.standard_normal((rows, 64)).astype(dtype)
        x, g = ember.from_numpy(a), ember.from_numpy(np.cos(a))
        y = ember.from_numpy(np.exp(a) / np.exp(a).sum(-1, keepdims=True))
        t = ember.from_numpy(rng.integers(0, 64, rows))
        w = ember.from_numpy(np.linspace(0.5, 2, 64).astype(dtype))
        x3, g3 = x.reshape(rows // 8, 8, 64), g.reshape(rows // 8, 8, 64)
        w8 = ember.from_numpy(np.linspace(0.5, 2, 8).astype(dtype))
        rm, rv = ember.zeros(8, dtype=x.dtype), ember.ones(8, dtype=x.dtype)
        return {
            "silu": lambda: _C._grad_pointwise(0, g, x),
            "gelu": lambda: _C._grad_pointwise(1, g, x),
            "softmax": lambda: _C._grad_softmax(g, y, False),
            "log_softmax": lambda: _C._grad_softmax(g, y, True),
            "layer_norm": lambda: _C._grad_layer_norm(g, x, 1, w, 1e-5, True, True, True),
            "cross_entropy": lambda: _C._grad_cross_entropy(ember.tensor(1.0, dtype=x.dtype),
                                                            x, t, 1, -100),
            "batch_norm_grad": lambda: _C._grad_batch_norm_train(g3, x3, w8, 1e-5, True,
                                                                 True, True),
            "batch_norm": lambda: F.batch_norm(x3, rm, rv, w8, None, training=True),
        }

    def run(rows, threads):
        ember.set_num_threads(threads)
        out = {}
        with ember.no_grad():
            for name, f in calls(rows).items():
                jobs = _C._pool_jobs()
                r = f()
                out[name] = (_C._pool_jobs() - jobs,
                             [v.numpy() for v in (r if isinstance(r, tuple) else (r,))])
        return out
    before = ember.get_num_threads()
    try:
        for rows, pooled in ((2048, 1), (2040, 0)):        # 131072 and 130560 elements
            one, two = run(rows, 1), run(rows, 2)
            for name in one:
                assert (one[name][0], two[name][0]) == (0, pooled), (name, rows)
                for u, v in zip(one[name][1], two[name][1]):
                    np.testing.assert_array_equal(u, v)
    finally:
        ember.set_num_threads(before)
