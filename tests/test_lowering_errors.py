"""Graphs that once failed inside the LLVM lowering (an internal error, not an op it
does not support) and fell back to aot_eager: each class found by the differential
fuzzer has a reproducer here, compiled in strict mode (a fallback raises) and compared
with eager."""
import numpy as np
import pytest

import ember
from ember.capture import counters


@pytest.fixture(autouse=True)
def strict(monkeypatch):
    ember.compiler.reset()
    monkeypatch.setattr(ember.compiler.config, "strict", True)
    yield
    ember.compiler.reset()


def _leaves(*arrays):
    return [ember.from_numpy(np.asarray(a)).requires_grad_() for a in arrays]


def _check(fn, arrays, grad=True, rtol=1e-6):
    """fn compiled (llvm, strict) equals eager: outputs and, with grad, the gradients of
    the leaves under a sum of the float outputs."""
    results = []
    for run in (fn, ember.compile(fn, backend="llvm")):
        xs = _leaves(*arrays) if grad else [ember.from_numpy(np.asarray(a)) for a in arrays]
        out = run(*xs)
        outs = out if isinstance(out, tuple) else (out,)
        grads = []
        if grad:
            loss = sum((o.double() * (k + 1)).sum() for k, o in enumerate(outs)
                       if o.requires_grad)
            loss.backward()
            grads = [x.grad.numpy().copy() for x in xs]
        results.append(([o.detach().numpy().copy() for o in outs], grads))
    (want, want_g), (got, got_g) = results
    for w, g in zip(want + want_g, got + got_g):
        np.testing.assert_allclose(g, w, rtol=rtol, atol=1e-12)
    assert not counters["llvm_fallback"], dict(counters["llvm_fallback"])


def test_reduction_over_an_empty_slice():
    """A sum over an empty slice (its loads reach past the buffer, but no point of the
    empty reduced dims runs them) stores its identity; once rejected by the verifier."""
    def fn(x, y):
        return ember.slice(x, 0, 10, 20).sum(dim=(-1,)), y[:, 3:].sum(dim=1) * 2
    _check(fn, [np.arange(5.0), np.arange(12.0).reshape(4, 3)])


def test_full_reduction_of_an_empty_narrow():
    """std of an empty narrow of a 4-d tensor (every dim reduced, one of them empty):
    NaN, as eager gives, and the gradient of the input is zeros."""
    def fn(x):
        v = x.narrow(3, 3, 0)
        return v.std(unbiased=False).mean(), v.sum(dim=(0, 1, 3)) + 1
    _check(fn, [np.arange(72.0).reshape(4, 3, 2, 3)])


def test_a_long_chain_of_elementwise_ops():
    """A chain of 1200 elementwise ops: inlined whole, building its kernel recursed once
    per op past Python's recursion limit (RecursionError); chains are now realized
    every fusion.MAX_DEPTH values."""
    from ember.compiler import backend, fusion

    def fn(x):
        for k in range(400):
            x = x * 1.0001 + (x.sin() if k % 2 else x.cos()) * 0.001
        return x
    _check(fn, [np.linspace(-1, 1, 64)], rtol=1e-9)
    kernels = len(backend.recent[-2].lowered.kernels)
    assert 1200 // fusion.MAX_DEPTH <= kernels <= 1200 // fusion.MAX_DEPTH + 2, kernels
