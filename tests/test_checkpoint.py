"""ember.utils.checkpoint: both variants recompute the function in the backward pass and
give the gradients of the plain computation (dropout included: the RNG state is
replayed), free the intermediate values of the forward pass, and follow PyTorch's
rules (warnings, errors, autograd.grad, keyword arguments)."""
import gc
import weakref

import numpy as np
import pytest

import ember
import ember.nn as nn
from ember.utils.checkpoint import CheckpointError, checkpoint, checkpoint_sequential


def _block():
    ember.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Dropout(0.3), nn.Linear(8, 4))


def _grads(model, x):
    return [p.grad.numpy().copy() for p in model.parameters()], x.grad.numpy().copy()


@pytest.mark.parametrize("reentrant", [True, False])
def test_checkpoint_gradients_equal_plain_run_with_dropout(reentrant):
    model = _block()
    x0 = np.random.default_rng(0).standard_normal((5, 4)).astype(np.float32)
    calls = []

    def fn(x):
        calls.append(1)
        return model(x)
    # plain
    ember.manual_seed(7)
    x = ember.from_numpy(x0.copy()).requires_grad_(True)
    out = fn(x)
    (out * out).sum().backward()
    want_params, want_x = _grads(model, x)
    want_out = out.detach().numpy().copy()
    state_after_plain = ember.get_rng_state().numpy().copy()
    model.zero_grad()
    calls.clear()
    # checkpointed
    ember.manual_seed(7)
    x = ember.from_numpy(x0.copy()).requires_grad_(True)
    out = checkpoint(fn, x, use_reentrant=reentrant)
    assert len(calls) == 1
    np.testing.assert_array_equal(out.detach().numpy(), want_out)
    state_after_forward = ember.get_rng_state().numpy().copy()
    np.testing.assert_array_equal(state_after_forward, state_after_plain)
    (out * out).sum().backward()
    assert len(calls) == 2                                  # recomputed in backward
    got_params, got_x = _grads(model, x)
    for g, w in zip(got_params, want_params):
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(got_x, want_x, rtol=1e-6, atol=1e-7)
    # the recomputation replays the random numbers without moving the generator
    np.testing.assert_array_equal(ember.get_rng_state().numpy(), state_after_forward)
    assert out.grad_fn.name() in ("CheckpointFunctionBackward", "CheckpointBackward")


@pytest.mark.parametrize("reentrant", [True, False])
def test_checkpoint_frees_intermediate_values(reentrant):
    lin = nn.Linear(4, 4)
    refs = []

    def fn(x):
        h = (lin(x) * 2).tanh()
        refs.append(weakref.ref(h))
        return lin(h)
    x = ember.randn(3, 4, requires_grad=True)
    out = fn(x)
    gc.collect()
    assert refs[-1]() is not None          # a plain forward keeps h for the backward
    del out
    out = checkpoint(fn, x, use_reentrant=reentrant)
    gc.collect()
    assert refs[-1]() is None              # checkpointed: h is gone until the backward
    out.sum().backward()
    assert x.grad is not None and lin.weight.grad is not None


@pytest.mark.parametrize("reentrant", [True, False])
def test_checkpoint_matches_torch_gradients(torch, reentrant):
    """A two-block model with every block checkpointed, against torch's own checkpoint
    and the plain computation."""
    rng = np.random.default_rng(1)
    w1, w2 = rng.standard_normal((6, 4)), rng.standard_normal((3, 6))
    x0 = rng.standard_normal((5, 4))

    def run(lib, use_ckpt):
        a = lib.nn.Parameter(lib.from_numpy(w1.copy()))
        b = lib.nn.Parameter(lib.from_numpy(w2.copy()))
        x = lib.from_numpy(x0.copy()).requires_grad_(True)

        def block(h, w):
            return lib.nn.functional.gelu(h @ w.T).sin()
        ck = (lib.utils.checkpoint.checkpoint if lib is torch else checkpoint)
        if use_ckpt:
            h = ck(block, x, a, use_reentrant=reentrant)
            y = ck(block, h, b, use_reentrant=reentrant)
        else:
            y = block(block(x, a), b)
        (y ** 2).sum().backward()
        return [t.grad.numpy() for t in (a, b, x)]
    import torch.utils.checkpoint  # noqa: F401
    want = run(torch, True)
    for got in (run(ember, True), run(ember, False)):
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-12)


def test_non_reentrant_supports_grad_kwargs_and_parameters_only():
    lin = nn.Linear(3, 3)

    def fn(x, scale=1.0, bias=None):
        return lin(x) * scale + (0 if bias is None else bias), x.sum()
    x = ember.randn(2, 3, requires_grad=True)
    bias = ember.randn(3, requires_grad=True)
    out, s = checkpoint(fn, x, scale=2.0, bias=bias, use_reentrant=False)
    gx, gb, gw = ember.autograd.grad((out ** 2).sum() + s, (x, bias, lin.weight))
    x2 = x.detach().requires_grad_(True)
    b2 = bias.detach().requires_grad_(True)
    o2, s2 = fn(x2, 2.0, b2)
    wx, wb, ww = ember.autograd.grad((o2 ** 2).sum() + s2, (x2, b2, lin.weight))
    for a, b in ((gx, wx), (gb, wb), (gw, ww)):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-6)
    # no input requires grad: the parameters still get gradients
    lin.zero_grad()
    y = checkpoint(lin, ember.randn(2, 3), use_reentrant=False)
    y.sum().backward()
    assert lin.weight.grad is not None
    # backward(inputs=...) works too
    lin.zero_grad()
    x = ember.randn(2, 3, requires_grad=True)
    checkpoint(lin, x, use_reentrant=False).sum().backward(inputs=[x])
    assert x.grad is not None and lin.weight.grad is None


def test_non_reentrant_closure_over_a_non_leaf_keeps_the_graph():
    w = ember.randn(3, 3, requires_grad=True)
    hidden = w * 2                               # a non-leaf from outside the call

    def fn(x):
        return x @ hidden
    x = ember.randn(2, 3, requires_grad=True)
    with pytest.warns(UserWarning, match="graph is kept"):
        out = checkpoint(fn, x, use_reentrant=False)
    out.sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), 2 * x.detach().numpy().sum(0)[:, None]
                               * np.ones((1, 3)), rtol=1e-6)


def test_reentrant_rules_as_torch(torch):
    lin = nn.Linear(3, 3)
    x = ember.randn(2, 3, requires_grad=True)
    with pytest.raises(ValueError, match="Unexpected keyword arguments: scale"):
        checkpoint(lambda x, scale: lin(x) * scale, x, scale=2, use_reentrant=True)
    out = checkpoint(lin, x, use_reentrant=True)
    with pytest.raises(RuntimeError, match="incompatible with .grad()"):
        ember.autograd.grad(out.sum(), x)
    with pytest.warns(UserWarning, match="None of the inputs have requires_grad=True"):
        y = checkpoint(lin, ember.randn(2, 3), use_reentrant=True)
    assert not y.requires_grad                  # as torch: parameters get no gradient
    with pytest.warns(UserWarning, match="use_reentrant parameter should be passed"):
        checkpoint(lin, x)
    with pytest.raises(ValueError, match="only supported when use_reentrant=False"):
        checkpoint(lin, x, use_reentrant=True, debug=True)
    # torch says the same
    tl = torch.nn.Linear(3, 3)
    with pytest.raises(ValueError, match="Unexpected keyword arguments: scale"):
        torch.utils.checkpoint.checkpoint(lambda x, scale: tl(x) * scale,
                                          torch.randn(2, 3, requires_grad=True), scale=2,
                                          use_reentrant=True)


def test_recomputation_that_differs_is_detected():
    n = [0]

    def fn(x):
        n[0] += 1
        return x * 2 if n[0] == 1 else x.sum(0)
    x = ember.randn(2, 3, requires_grad=True)
    out = checkpoint(fn, x, use_reentrant=False)
    with pytest.raises(CheckpointError, match="different metadata"):
        out.sum().backward()


@pytest.mark.parametrize("reentrant", [True, False])
def test_checkpoint_sequential(reentrant):
    ember.manual_seed(3)
    model = nn.Sequential(*[nn.Linear(4, 4) if i % 2 == 0 else nn.Tanh() for i in range(8)])
    x0 = ember.randn(3, 4)
    x = x0.clone().requires_grad_(True)
    model(x).pow(2).sum().backward()
    want = [p.grad.numpy().copy() for p in model.parameters()] + [x.grad.numpy().copy()]
    model.zero_grad()
    x = x0.clone().requires_grad_(True)
    checkpoint_sequential(model, 3, x, use_reentrant=reentrant).pow(2).sum().backward()
    got = [p.grad.numpy() for p in model.parameters()] + [x.grad.numpy()]
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-7)
