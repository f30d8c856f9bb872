"""A graph's autograd follows the grad mode it is entered with (AOT autograd decides by
it): grad turned on inside a frame entered under no_grad (enable_grad, set_grad_enabled
(True), leaving a no_grad block a resume frame was entered in) breaks the graph there, so
results made with grad on keep eager's history. Found: under aot_eager and llvm such
results came back without requires_grad."""
import numpy as np
import pytest

import ember

BACKENDS = ["eager", "aot_eager", "llvm"]


def enable_block(x):
    with ember.enable_grad():
        y = x * 2
    return y, x * 3


def set_true(x):
    ember.set_grad_enabled(True)
    y = (x * 2).sin()
    ember.set_grad_enabled(False)
    return y, x + 1


def nested(x):
    y = x.exp()
    with ember.enable_grad():
        z = y * x
        with ember.no_grad():
            w = z * 2
        v = z.cos()
    return v, w, y


def cut_block(x):
    with ember.no_grad():
        y = x * 2
        print("a break inside the block")
        y = y + 1
    return (y * x).sum(), y


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fn", [enable_block, set_true, nested, cut_block],
                         ids=lambda f: f.__name__)
@pytest.mark.parametrize("entry_grad", [False, True])
def test_results_keep_eagers_autograd(fn, backend, entry_grad, capsys):
    x1 = ember.randn(4, dtype=ember.float64, requires_grad=True)
    x2 = x1.detach().clone().requires_grad_(True)
    ember.compiler.reset()
    with ember.set_grad_enabled(entry_grad):
        want = fn(x1)
        got = ember.compile(fn, backend=backend)(x2)
    for g, w in zip(got, want):
        assert g.requires_grad == w.requires_grad
        assert (g.grad_fn is None) == (w.grad_fn is None)
        np.testing.assert_allclose(g.detach().numpy(), w.detach().numpy(), rtol=1e-12)
    outs = [(g, w) for g, w in zip(got, want) if w.requires_grad]
    if outs:
        sum(w.sum() for _, w in outs).backward()
        sum(g.sum() for g, _ in outs).backward()
        np.testing.assert_allclose(x2.grad.numpy(), x1.grad.numpy(), rtol=1e-12)
    assert ember.is_grad_enabled()
