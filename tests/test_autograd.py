"""Eager autograd: backward, accumulation, retain_graph, grad modes (thread-local),
autograd.grad, higher-order gradients, hooks, broadcasting and dtypes of gradients, the
Python-callable node, and the in-place checks on saved values."""
import threading

import numpy as np
import pytest

import ember
from ember import autograd


def leaf(values, dtype=ember.float64):
    return ember.tensor(values, dtype=dtype, requires_grad=True)


def close(t, want, tol=1e-12):
    np.testing.assert_allclose(t.detach().numpy(), np.asarray(want, dtype=np.float64),
                               rtol=tol, atol=tol)


# ---------------------------------------------------------------- backward


def test_backward_on_a_small_graph():
    x = leaf([1.0, 2.0, 3.0])
    w = leaf([0.5, -1.0, 2.0])
    y = (x * w).sum() + (x * x).mean() * 3 - w.exp().sum()
    y.backward()
    # dy/dx = w + 2x,  dy/dw = x - exp(w)
    close(x.grad, [0.5 + 2, -1 + 4, 2 + 6])
    close(w.grad, [1 - np.exp(0.5), 2 - np.exp(-1.0), 3 - np.exp(2.0)])
    assert x.grad.dtype is ember.float64 and not x.grad.requires_grad
    assert x.grad.grad_fn is None


def test_backward_through_views_matmul_and_reductions():
    an = np.arange(6.0).reshape(2, 3)
    bn = np.array([[1.0, -2.0], [0.5, 3.0], [2.0, 1.0]])
    a, b = leaf(an.tolist()), leaf(bn.tolist())
    y = (a.t()[1:] @ b[:2]).relu().amax()
    y.backward()
    prod = an.T[1:] @ bn[:2]            # 2x2, no ties
    i, j = np.unravel_index(np.argmax(prod), prod.shape)
    ga_t = np.zeros((3, 2))             # gradient of a.T
    ga_t[1 + i, :] = bn[:2, j]
    close(a.grad, ga_t.T)
    gb = np.zeros((3, 2))
    gb[:2, j] = an.T[1 + i]
    close(b.grad, gb)


def test_amax_ties_share_the_gradient():
    x = leaf([[1.0, 3.0, 3.0], [2.0, 2.0, 0.0]])
    x.amax().backward()
    close(x.grad, [[0, 0.5, 0.5], [0, 0, 0]])
    x.grad = None
    x.amax(1).sum().backward()
    close(x.grad, [[0, 0.5, 0.5], [0.5, 0.5, 0]])


def test_gradient_accumulates_over_two_backward_calls():
    x = leaf([1.0, 2.0])
    (x * 3).sum().backward()
    g1 = x.grad
    (x * x).sum().backward()
    close(x.grad, [3 + 2, 3 + 4])
    assert g1 is x.grad                   # accumulated in place, as PyTorch does
    x.grad = None
    (x * 2).sum().backward()
    close(x.grad, [2, 2])


def test_leaf_grads_own_dense_memory():
    a = leaf(np.ones((2, 3)).tolist())
    b = leaf(np.ones((2, 3)).tolist())
    (a + b).sum().backward()            # both receive the same (expanded) gradient
    assert a.grad is not b.grad
    assert a.grad.is_contiguous() and a.grad.stride() == (3, 1)
    a.grad[0, 0] = 5.0                  # an optimizer's in-place update
    close(a.grad, [[5, 1, 1], [1, 1, 1]])
    close(b.grad, np.ones((2, 3)))
    g = ember.tensor([1.0, 2.0], dtype=ember.float64)
    x = leaf([0.0, 0.0])
    x.backward(g)
    assert x.grad is not g
    x.grad.mul_(2)
    close(g, [1.0, 2.0])


def test_backward_with_explicit_gradient():
    x = leaf([1.0, 2.0, 3.0])
    y = x * x
    y.backward(ember.tensor([1.0, 0.5, 0.0], dtype=ember.float64))
    close(x.grad, [2.0, 2.0, 0.0])
    with pytest.raises(RuntimeError, match="scalar outputs"):
        (x * 2).backward()
    with pytest.raises(RuntimeError, match="shape"):
        (x * 2).backward(ember.ones(2, dtype=ember.float64))
    with pytest.raises(RuntimeError):
        ember.ones(2).sum().backward()      # does not require grad


def test_retain_graph():
    x = leaf([1.0, 2.0])
    y = (x.exp() * x).sum()
    y.backward(retain_graph=True)
    y.backward()
    close(x.grad, 2 * (np.exp([1.0, 2.0]) * (1 + np.array([1.0, 2.0]))))
    z = (x.exp() * x).sum()
    z.backward()
    with pytest.raises(RuntimeError, match="second time"):
        z.backward()


def test_multi_output_op_gradient_goes_to_the_selected_index():
    x = leaf([[1.0, 5.0, 2.0], [7.0, 0.0, 3.0]])
    values, indices = ember.max(x, 1)
    values.sum().backward()
    close(x.grad, [[0, 1, 0], [1, 0, 0]])
    assert indices.tolist() == [1, 0] and not indices.requires_grad


# ---------------------------------------------------------------- grad modes


def test_no_grad_enable_grad_set_grad_enabled():
    x = leaf([1.0])
    with ember.no_grad():
        assert not ember.is_grad_enabled()
        y = x * 2
        with ember.enable_grad():
            z = x * 2
        assert not ember.is_grad_enabled()
    assert ember.is_grad_enabled()
    assert not y.requires_grad and y.grad_fn is None
    assert z.requires_grad and z.grad_fn is not None
    with ember.set_grad_enabled(False):
        assert not (x * 2).requires_grad
    assert ember.is_grad_enabled()
    ember.set_grad_enabled(False)
    try:
        assert not ember.is_grad_enabled()
    finally:
        ember.set_grad_enabled(True)

    @ember.no_grad()
    def f(t):
        return t * 2
    assert not f(x).requires_grad
    with ember.inference_mode():
        assert not (x * 2).requires_grad


def test_grad_mode_is_thread_local():
    x = leaf([1.0, 2.0])
    seen = {}

    def worker():
        seen["enabled"] = ember.is_grad_enabled()
        y = (x * 3).sum()
        seen["requires_grad"] = y.requires_grad
        y.backward()

    with ember.no_grad():
        t = threading.Thread(target=worker)
        t.start()
        t.join()
        assert not ember.is_grad_enabled()
    assert seen == {"enabled": True, "requires_grad": True}
    close(x.grad, [3.0, 3.0])


# ---------------------------------------------------------------- autograd.grad


def test_autograd_grad_returns_and_leaves_grad_untouched():
    x = leaf([1.0, 2.0])
    w = leaf([3.0, 4.0])
    y = (x * w).sum()
    gx, gw = autograd.grad(y, (x, w))
    close(gx, [3.0, 4.0])
    close(gw, [1.0, 2.0])
    assert x.grad is None and w.grad is None
    assert not gx.requires_grad


def test_autograd_grad_of_non_leaf_and_allow_unused():
    x = leaf([1.0, 2.0])
    h = x * 2
    y = (h * h).sum()
    (gh,) = autograd.grad(y, h, retain_graph=True)
    close(gh, [4.0, 8.0])
    unused = leaf([5.0])
    with pytest.raises(RuntimeError, match="allow_unused"):
        autograd.grad(y, (x, unused), retain_graph=True)
    gx, gu = autograd.grad(y, (x, unused), allow_unused=True)
    close(gx, [8.0, 16.0])
    assert gu is None
    with pytest.raises(RuntimeError):
        autograd.grad((x * 2).sum(), ember.ones(1))      # input does not require grad


def test_create_graph_second_derivative():
    x = leaf([0.5, -1.0, 2.0])
    y = (x ** 3).sum()
    (g,) = autograd.grad(y, x, create_graph=True)
    close(g, 3 * np.array([0.5, -1.0, 2.0]) ** 2)
    assert g.requires_grad
    (g2,) = autograd.grad(g.sum(), x)
    close(g2, 6 * np.array([0.5, -1.0, 2.0]))
    # and through backward(create_graph=True)
    z = leaf([1.5])
    (z ** 3).sum().backward(create_graph=True)
    assert z.grad.requires_grad
    gz = z.grad
    z.grad = None
    gz.sum().backward()
    close(z.grad, [9.0])


def test_second_derivative_of_sigmoid_and_tanh():
    x = leaf([0.3, -1.2])
    (g,) = autograd.grad(x.sigmoid().sum(), x, create_graph=True)
    (h,) = autograd.grad(g.sum(), x)
    s = 1 / (1 + np.exp(-np.array([0.3, -1.2])))
    close(h, s * (1 - s) * (1 - 2 * s), 1e-10)
    (g,) = autograd.grad(x.tanh().sum(), x, create_graph=True)
    (h,) = autograd.grad(g.sum(), x)
    t = np.tanh([0.3, -1.2])
    close(h, -2 * t * (1 - t * t), 1e-10)


# ---------------------------------------------------------------- hooks


def test_hooks_on_leaf_and_non_leaf():
    x = leaf([1.0, 2.0])
    calls = []
    hx = x.register_hook(lambda g: calls.append(("x", g.tolist())))
    h = x * 3
    h.register_hook(lambda g: g * 10)           # replaces the gradient flowing on
    y = (h * h).sum()
    y.backward()
    # dy/dh = 2h = [6, 12], times 10, times 3
    close(x.grad, [180.0, 360.0])
    assert calls == [("x", [180.0, 360.0])]
    hx.remove()
    x.grad = None
    (x * 1).sum().backward()
    assert len(calls) == 1
    with pytest.raises(RuntimeError):
        ember.ones(2).register_hook(lambda g: g)


def test_hooks_run_for_autograd_grad():
    x = leaf([1.0, 2.0])
    calls = []
    x.register_hook(lambda g: (calls.append(1), g * 2)[1])
    (g,) = autograd.grad((x * 3).sum(), x)
    close(g, [6.0, 6.0])
    assert calls == [1] and x.grad is None
    h = x * 2
    h.register_hook(lambda g: g * 10)
    (gh,) = autograd.grad((h * h).sum(), h)
    close(gh, [40.0, 80.0])


def test_retain_grad_sees_the_hooked_gradient():
    x = leaf([1.0, 2.0])
    h = x * 2
    h.retain_grad()
    h.register_hook(lambda g: g * 100)      # registered later, still runs first
    h.sum().backward()
    close(h.grad, [100.0, 100.0])
    close(x.grad, [200.0, 200.0])


def test_leaf_hook_can_replace_the_accumulated_gradient():
    x = leaf([1.0, 2.0])
    x.register_hook(lambda g: g * 0 + 7)
    (x * 5).sum().backward()
    close(x.grad, [7.0, 7.0])


def test_retain_grad():
    x = leaf([1.0, 2.0])
    h = x * x
    h.retain_grad()
    assert h.retains_grad or h.grad is None
    assert h.grad is None
    (h * 3).sum().backward()
    close(h.grad, [3.0, 3.0])
    close(x.grad, [6.0, 12.0])
    assert x.grad is not None
    with pytest.raises(RuntimeError):
        ember.ones(2).retain_grad()


# ---------------------------------------------------------------- shapes and dtypes


def test_broadcast_gradients_are_reduced_to_input_shapes():
    a = leaf(np.ones((2, 3)).tolist())
    b = leaf([1.0, 2.0, 3.0])
    c = leaf([[1.0], [2.0]])
    s = leaf(2.0)
    y = (a * b + c * s).sum()
    y.backward()
    assert tuple(a.grad.shape) == (2, 3) and tuple(b.grad.shape) == (3,)
    assert tuple(c.grad.shape) == (2, 1) and tuple(s.grad.shape) == ()
    close(a.grad, np.tile([1.0, 2.0, 3.0], (2, 1)))
    close(b.grad, [2.0, 2.0, 2.0])
    close(c.grad, [[6.0], [6.0]])
    close(s.grad, 9.0)
    e = leaf([[1.0, 2.0]])
    (e.expand(3, 2) * ember.arange(6, dtype=ember.float64).view(3, 2)).sum().backward()
    close(e.grad, [[0 + 2 + 4, 1 + 3 + 5]])


def test_gradient_dtypes_equal_input_dtypes():
    x = ember.tensor([1.0, 2.0], dtype=ember.float32, requires_grad=True)
    s = ember.tensor(3.0, dtype=ember.float64, requires_grad=True)
    y = x * s                       # float32: a 0-d float64 does not promote
    assert y.dtype is ember.float32
    y.sum().backward()
    assert x.grad.dtype is ember.float32 and s.grad.dtype is ember.float64
    close(x.grad, [3.0, 3.0], 1e-6)
    close(s.grad, 3.0, 1e-6)
    h = ember.tensor([1.0], dtype=ember.float16, requires_grad=True)
    (h.to(ember.float64) * 2).sum().backward()
    assert h.grad.dtype is ember.float16


def test_integer_outputs_do_not_require_grad():
    x = leaf([1.0, 3.0, 2.0])
    assert not x.argmax().requires_grad
    assert not (x > 1).requires_grad
    assert (x.sum() * 1).requires_grad


# ---------------------------------------------------------------- Python-callable node


def test_python_callable_node():
    x = leaf([1.0, 2.0])
    w = leaf([3.0, 4.0])
    with ember.no_grad():
        out = x * w                      # computed outside autograd
    seen = []

    def backward(g):
        seen.append(g.tolist())
        return g * w.detach(), g * x.detach()

    node = ember._C._make_node(backward, (x, w), (out,), "MyMulBackward")
    assert out.grad_fn is node and out.requires_grad
    assert node.name() == "MyMulBackward"
    (out * out).sum().backward()
    assert seen == [[6.0, 16.0]]
    close(x.grad, [18.0, 64.0])
    close(w.grad, [6.0, 32.0])


def test_python_node_with_a_non_tensor_input_and_none_gradient():
    x = leaf([1.0, 2.0])
    with ember.no_grad():
        out = x * 5
    ember._C._make_node(lambda g: (g * 5, None), (x, 5), (out,), "ScaleBackward")
    out.sum().backward()
    close(x.grad, [5.0, 5.0])


# ---------------------------------------------------------------- in-place changes


def test_modified_saved_input_raises_and_unused_one_does_not():
    x = leaf([1.0, 2.0])
    a = x * 1
    y = a * a                       # mul reads both inputs
    with ember.no_grad():
        a.add_(1)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()
    b = x * 1
    z = b + 1                       # add reads neither input
    with ember.no_grad():
        b.add_(1)
    z.sum().backward()
    close(x.grad, [1.0, 1.0])


def test_inplace_on_an_output_whose_formula_ignores_it():
    x = leaf([1.0, -2.0])
    h = x * 2
    h.add_(1)                       # MulBackward does not read its result
    h.relu_()                       # ReluBackward reads its result: that is h now
    h.sum().backward()
    close(x.grad, [2.0, 0.0])
    e = x.exp()
    e.add_(1)                       # ExpBackward reads its result
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        e.sum().backward()


def test_leaf_inplace_is_refused():
    x = leaf([1.0])
    with pytest.raises(RuntimeError, match="leaf"):
        x.add_(1)
    with ember.no_grad():
        x.add_(1)
    close(x, [2.0])


def _model(L, x, w1, b1, w2, scale):
    h = (x @ w1 + b1).relu()                  # broadcast bias
    h2 = h * h.sigmoid() + h.tanh()           # h used three times (a diamond)
    m, _ = L.max(h2, 1, keepdim=True)
    z = L.where(h2 > 0.1, h2 - m, h2 * 0.5)   # where with a number
    y = (z @ w2).squeeze(-1)
    t = y.view(2, 2).t().reshape(-1)
    return (t * scale).exp().mean() + (w1 ** 2).sum() * 1e-2 - h2[:, 1:].amax()


def test_engine_matches_torch_on_a_model(torch):
    rng = np.random.default_rng(0)
    arrays = [rng.normal(size=(4, 3)), rng.normal(size=(3, 5)), rng.normal(size=(5,)),
              rng.normal(size=(5, 1)), np.array(0.7)]
    grads = []
    for L in (ember, torch):
        ts = [L.tensor(a.tolist(), dtype=L.float64, requires_grad=True) for a in arrays]
        out = _model(L, *ts)
        out.backward()
        grads.append([t.grad.detach().numpy() for t in ts] + [out.detach().numpy()])
    for g_e, g_t in zip(*grads):
        np.testing.assert_allclose(g_e, g_t, rtol=1e-10, atol=1e-12)


def test_several_roots_and_none_gradients():
    x = leaf([1.0, 2.0])
    a, b = x * 2, x * 3
    autograd.backward([a.sum(), b.sum()])
    close(x.grad, [5.0, 5.0])
    v, i = ember.max(leaf([[1.0, 2.0]]), 1)
    assert i.grad_fn is None
    x2 = leaf([[3.0, 1.0]])
    v, i = ember.max(x2, 1)
    (v * 0).sum().backward()
    close(x2.grad, [[0.0, 0.0]])


# ---------------------------------------------------------------- missing gradients


def test_a_node_reached_only_by_a_missing_gradient_does_not_run():
    """A formula (here a Python node's) gives None for an input: the nodes behind that
    input get no gradient, their formulas never see None, and the leaves keep .grad
    None, as in PyTorch."""
    w = leaf([1.0, 2.0])
    v = leaf([3.0, 4.0])
    h = w.exp().flip(0) * 2                   # ExpBackward, FlipBackward, MulBackward
    with ember.no_grad():
        out = h + v
    ember._C._make_node(lambda g: (None, g), (h, v), (out,), "DropFirstBackward")
    out.sum().backward()
    assert w.grad is None
    close(v.grad, [1.0, 1.0])


def test_a_multi_output_node_with_some_missing_gradients(torch):
    """A node some of whose outputs get no gradient: its formula takes None for those."""
    x = leaf([[3.0, 1.0, 2.0], [0.0, 5.0, 4.0]])
    values, _ = x.sort(1)
    top, _ = x.max(1)
    (values[:, :1].sum() + top.sum() * 2).backward()
    tx = torch.tensor(x.detach().numpy(), requires_grad=True)
    tvalues, _ = tx.sort(1)
    ttop, _ = tx.max(1)
    (tvalues[:, :1].sum() + ttop.sum() * 2).backward()
    close(x.grad, tx.grad.numpy())


def test_cat_gives_a_skipped_empty_input_an_empty_gradient(torch):
    got, want = [], []
    for L, out in ((ember, got), (torch, want)):
        a = L.tensor([1.0, 2.0], dtype=L.float64, requires_grad=True)
        e = L.zeros(0, dtype=L.float64, requires_grad=True)
        f = L.zeros(0, 3, dtype=L.float64, requires_grad=True)
        (L.cat([a, e.flip(0)]) * 3).sum().backward()
        L.cat([f, f * 2]).sum().backward()
        out += [a.grad.numpy(), e.grad.numpy(), f.grad.numpy()]
    for g, w in zip(got, want):
        assert g.shape == w.shape
        np.testing.assert_array_equal(g, w)


# ---------------------------------------------------------------- empty tensors


def _empty_cases(L):
    F = L.nn.functional

    def mk(*s):
        return L.tensor(np.random.default_rng(len(s)).standard_normal(s), dtype=L.float64,
                        requires_grad=True)

    idx = L.tensor([1, 0, 2])
    none = L.zeros(0, dtype=L.int64)
    return {
        "layer_norm_empty_dim": (lambda x, w, b: F.layer_norm(x, (0,), w, b),
                                 [mk(3, 0), mk(0), mk(0)]),
        "layer_norm_empty_batch": (lambda x, w, b: F.layer_norm(x, (4,), w, b),
                                   [mk(0, 4), mk(4), mk(4)]),
        "group_norm_empty_batch": (lambda x, w, b: F.group_norm(x, 2, w, b),
                                   [mk(0, 4, 3), mk(4), mk(4)]),
        "group_norm_no_channels": (lambda x: F.group_norm(x, 2), [mk(2, 0, 3)]),
        "linear_no_features": (lambda x, w, b: F.linear(x, w, b), [mk(5, 0), mk(3, 0), mk(3)]),
        "linear_no_outputs": (lambda x, w, b: F.linear(x, w, b), [mk(5, 2), mk(0, 2), mk(0)]),
        "linear_3d_no_features": (lambda x, w: F.linear(x, w), [mk(2, 5, 0), mk(3, 0)]),
        "embedding_no_dims": (lambda w: F.embedding(idx, w), [mk(4, 0)]),
        "cross_entropy_probs": (lambda x, t: F.cross_entropy(x, t), [mk(0, 3), mk(0, 3)]),
        "cross_entropy_empty": (lambda x: F.cross_entropy(x, none), [mk(0, 3)]),
        "sdpa_no_keys": (lambda q, k, v: F.scaled_dot_product_attention(q, k, v),
                         [mk(2, 3, 4), mk(2, 0, 4), mk(2, 0, 5)]),
        "mean_empty": (lambda x: x.mean(), [mk(0)]),
        "var_empty": (lambda x: x.var(0), [mk(0, 2)]),
        "mse_empty": (lambda x, y: F.mse_loss(x, y), [mk(0), mk(0)]),
    }


@pytest.mark.parametrize("name", list(_empty_cases(ember)))
def test_empty_tensors_give_pytorchs_results_and_gradients(name, torch):
    import warnings
    results = []
    for L in (ember, torch):
        fn, xs = _empty_cases(L)[name]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")      # torch warns about dof <= 0
            out = fn(*xs)
        (out * 2).sum().backward()
        results.append([out.detach().numpy()] + [x.grad.numpy() for x in xs])
    for got, want in zip(*results):
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12, equal_nan=True)
