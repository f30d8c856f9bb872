"""mode="reduce-overhead" (capture/api.py, csrc/capture/eval_frame.c FastCall): a
function's cache hits are called straight from C; every other call takes the ordinary
wrapper, and results are those of the default mode."""
import warnings

import numpy as np
import pytest

import ember
from ember import nn
from ember.capture import _hook
from fresh_compiler import fresh_compiler  # noqa: F401

pytestmark = pytest.mark.skipif(not _hook.available, reason="no frame hook here")


def ten_ops(x, y):
    a = x + y
    b = a * x
    c = b - y
    d = c.relu()
    e = d * 2.0
    g = e + x
    h = g.tanh()
    i = h * y
    j = i.exp()
    return j.sum()


def inputs(n=64, grad=False):
    x = ember.from_numpy(np.linspace(-1, 1, n, dtype=np.float32))
    y = ember.from_numpy(np.linspace(1, 2, n, dtype=np.float32))
    return x.requires_grad_(grad), y


def fast_hits():
    return _hook.counters()["fast_hits"]


def test_hits_take_the_fast_path_and_agree_with_default():
    fast = ember.compile(ten_ops, mode="reduce-overhead")
    x, y = inputs()
    want = ten_ops(x, y).item()
    assert fast(x, y).item() == pytest.approx(want, rel=1e-6)     # compiles (slow path)
    before = fast_hits()
    outs = [fast(x, y).item() for _ in range(5)]
    assert fast_hits() - before == 5
    default = ember.compile(ten_ops)
    assert outs == [default(x, y).item()] * 5


def test_gradients_through_a_fast_hit():
    fast = ember.compile(ten_ops, mode="reduce-overhead")
    x, y = inputs(grad=True)
    fast(x, y)
    before = fast_hits()
    fast(x, y).backward()
    assert fast_hits() - before == 1
    g = x.grad.numpy().copy()
    x.grad = None
    ten_ops(x, y).backward()
    np.testing.assert_allclose(g, x.grad.numpy(), rtol=1e-5, atol=1e-6)


def test_calls_the_fast_path_cannot_take_still_work():
    fast = ember.compile(ten_ops, mode="reduce-overhead")
    x, y = inputs()
    want = ten_ops(x, y).item()
    fast(x, y)
    before = fast_hits()
    assert fast(x, y=y).item() == pytest.approx(want, rel=1e-6)        # a keyword
    x2, y2 = inputs(48)                                                 # a new shape:
    assert fast(x2, y2).item() == pytest.approx(ten_ops(x2, y2).item(), rel=1e-6)
    assert fast_hits() == before                                        # a miss, compiled
    assert fast(x2, y2).item() == pytest.approx(ten_ops(x2, y2).item(), rel=1e-6)
    assert fast_hits() == before + 1                                    # then hits

    from ember.capture import counters
    counters.clear()
    outer = ember.compile(lambda a, b: fast(a, b) * 2, fullgraph=True)  # inlined
    assert outer(x, y).item() == pytest.approx(2 * want, rel=1e-6)
    assert not counters["graph_break"]
    with pytest.raises(TypeError):
        fast(x)


def test_it_looks_like_the_function_and_binds_as_a_method():
    fast = ember.compile(ten_ops, mode="reduce-overhead")
    assert fast.__name__ == "ten_ops" and fast.__wrapped__ is ten_ops
    assert fast._orig_fn is ten_ops

    class Scaler:
        def __init__(self, k):
            self.k = k

        @ember.compile(mode="reduce-overhead")
        def scale(self, t):
            return t * self.k + 1

    s = Scaler(3.0)
    t = ember.ones(4)
    for _ in range(3):
        assert s.scale(t).tolist() == [4.0] * 4
    assert Scaler(5.0).scale(t).tolist() == [6.0] * 4


def test_an_error_in_a_fast_hit_is_eagers():
    def take(x, i):
        return (x * 2)[i]

    fast = ember.compile(take, mode="reduce-overhead")
    x = ember.arange(4.0)
    assert fast(x, ember.tensor([1, 3])).tolist() == [2.0, 6.0]
    assert fast(x, ember.tensor([0, 2])).tolist() == [0.0, 4.0]
    with pytest.raises(IndexError):
        fast(x, ember.tensor([0, 9]))


def test_a_module_warns_and_behaves_as_default():
    from ember.capture import api
    api._warned_modes.discard(("reduce-overhead", "module"))
    net = nn.Linear(3, 2)
    with pytest.warns(UserWarning, match="behaves as 'default' for a module"):
        m = ember.compile(net, mode="reduce-overhead")
    x = ember.ones(4, 3)
    np.testing.assert_allclose(m(x).detach().numpy(), net(x).detach().numpy(), rtol=1e-6)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ember.compile(ten_ops, mode="reduce-overhead")      # no warning for a function


def test_strict_or_fullgraph_keep_the_wrapper():
    f = ember.compile(ten_ops, mode="reduce-overhead", fullgraph=True)
    assert not isinstance(f, _hook.FastCall)
    x, y = inputs()
    assert f(x, y).item() == pytest.approx(ten_ops(x, y).item(), rel=1e-6)
