"""Guards at the ember.compile level: when a guarded value changes, the next call
recompiles and runs with the new value; when nothing guarded changes, it reuses the
entry."""
import numpy as np
import pytest

import ember
from ember.capture import _hook, counters
from fresh_compiler import fresh_compiler  # noqa: F401  (autouse)

pytestmark = pytest.mark.skipif(not _hook.available, reason="capture needs CPython 3.11")


def T(*shape, dtype=np.float32, seed=0):
    return ember.from_numpy(np.random.default_rng(seed).standard_normal(shape).astype(dtype))


def close(a, b):
    assert a.shape == b.shape and a.dtype == b.dtype, (a, b)
    np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=1e-6, atol=1e-6)


class Counting:
    """ember.compile(fn) whose graph count can be read back."""

    def __init__(self, fn, **kw):
        self.fn = fn
        self.compiled = ember.compile(fn, backend="eager", **kw)

    def __call__(self, *args, **kwargs):
        return self.compiled(*args, **kwargs)

    @property
    def graphs(self):
        return len(self.compiled._ember_compile_context.graphs)

    @property
    def reasons(self):
        return [r for _, r in self.compiled._ember_compile_context.recompile_reasons]


def scale_shift(x):
    return x * x.shape[0] + x.sum(-1, keepdim=True)


def test_same_metadata_hits():
    f = Counting(scale_shift)
    for seed in range(5):
        x = T(3, 4, seed=seed)
        close(f(x), scale_shift(x))
    assert f.graphs == 1 and f.reasons == []
    entries = _hook.cache_entries(scale_shift.__code__)
    assert len(entries) == 1 and entries[0][1].calls == 5


@pytest.mark.parametrize("change, reason", [
    (lambda: T(5, 4), "size mismatch"),
    (lambda: T(12), "ndim mismatch"),
    (lambda: T(3, 4, dtype=np.float64), "dtype"),
    (lambda: T(4, 3).t(), "stride"),
    (lambda: T(3, 4).requires_grad_(True), "requires_grad"),
    (lambda: T(13)[1:].view(3, 4), "offset"),
])
def test_changed_tensor_metadata_recompiles(change, reason):
    f = Counting(scale_shift)
    x = T(3, 4)
    close(f(x), scale_shift(x))
    y = change()
    close(f(y), scale_shift(y))
    assert f.graphs == 2
    assert reason in f.reasons[0], f.reasons
    # both entries stay: going back hits the first one again
    close(f(x), scale_shift(x))
    close(f(y), scale_shift(y))
    assert f.graphs == 2
    assert counters["stats"]["frames_fallback"] == 0


def test_changed_shape_uses_the_new_value_in_shape_arithmetic():
    def g(x):
        return x.reshape(x.shape[0] * 2, -1) + x.shape[1]
    f = Counting(g)
    a, b = T(4, 6), T(2, 10)
    close(f(a), g(a))
    close(f(b), g(b))
    assert f(b).shape == (4, 5) and f.graphs == 2


SCALE = 2.0
W = T(4)


def uses_globals(x):
    return x * SCALE + W


def test_changed_global_constant_recompiles_and_uses_the_new_value():
    global SCALE
    f = Counting(uses_globals)
    x = T(4)
    close(f(x), x * 2.0 + W)
    try:
        SCALE = 5.0
        close(f(x), x * 5.0 + W)
        assert f.graphs == 2 and "SCALE" in f.reasons[0]
        SCALE = 2.0
        close(f(x), x * 2.0 + W)
        assert f.graphs == 2          # the first entry again
    finally:
        SCALE = 2.0


def test_global_tensor_is_read_on_every_call():
    """A global tensor is an input, read afresh on every call: replacing it with one of
    the same metadata reuses the graph with the new values; different metadata
    recompiles."""
    global W
    f = Counting(uses_globals)
    x, old = T(4), W
    close(f(x), x * 2.0 + W)
    try:
        W = T(4, seed=7)
        close(f(x), x * 2.0 + W)
        assert f.graphs == 1
        W.mul_(3)                     # in place: also seen
        close(f(x), x * 2.0 + W)
        W = T(1, 4, seed=8)
        close(f(x), x * 2.0 + W)
        assert f.graphs == 2
    finally:
        W = old


def test_changed_python_scalar_argument_recompiles():
    def g(x, k, name="a"):
        return x * k if name == "a" else x - k
    f = Counting(g)
    x = T(3)
    close(f(x, 2), x * 2)
    close(f(x, 3), x * 3)
    close(f(x, 3, name="b"), x - 3)
    close(f(x, 3.0), x * 3.0)        # int 3 and float 3.0 are different constants
    assert f.graphs == 4
    close(f(x, 2), x * 2)
    assert f.graphs == 4


def test_changed_grad_mode_recompiles():
    w = T(3).requires_grad_(True)

    def g(x):
        return x * w
    f = Counting(g)
    x = T(3)
    assert f(x).requires_grad
    with ember.no_grad():
        out = f(x)
    assert not out.requires_grad and f.graphs == 2


def test_changed_closure_value_recompiles():
    def make(k):
        def g(x):
            return x + k
        return g
    g1, g2 = make(1.0), make(2.0)
    f1, f2 = Counting(g1), Counting(g2)
    x = T(3)
    close(f1(x), x + 1.0)
    close(f2(x), x + 2.0)          # same code, another cell: its own entry
    close(f1(x), x + 1.0)
    assert len(_hook.cache_entries(g1.__code__)) == 2


def test_changed_list_length_and_dict_keys_recompile():
    def g(xs, d):
        out = xs[0]
        for t in xs[1:]:
            out = out + t
        for k in d:
            out = out * d[k]
        return out
    f = Counting(g)
    a = T(2)
    close(f([a, a], {"x": 2.0}), (a + a) * 2.0)
    close(f([a, a, a], {"x": 2.0}), (a + a + a) * 2.0)
    close(f([a, a, a], {"y": 3.0, "x": 2.0}), (a + a + a) * 3.0 * 2.0)
    assert f.graphs == 3


class Net(ember.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = ember.nn.Linear(4, 4)
        self.layers = ember.nn.ModuleList([ember.nn.Linear(4, 4)])
        self.alpha = 0.5

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return self.lin(x) * self.alpha


def test_module_weights_updated_in_place_need_no_recompile():
    net = Net()
    f = Counting(net)
    x = T(2, 4)
    close(f(x), net(x))
    with ember.no_grad():
        net.lin.weight.mul_(2.0)
        net.lin.bias.fill_(1.0)
    close(f(x), net(x))
    net.lin.weight = ember.nn.Parameter(T(4, 4, seed=3))    # replaced, same metadata
    close(f(x), net(x))
    assert f.graphs == 1


def test_module_attribute_and_structure_changes_recompile():
    net = Net()
    f = Counting(net)
    x = T(2, 4)
    close(f(x), net(x))
    net.alpha = 3.0
    close(f(x), net(x))
    assert f.graphs == 2
    net.layers.append(ember.nn.Linear(4, 4))
    close(f(x), net(x))
    assert f.graphs == 3
    net.lin = ember.nn.Identity()          # another module type
    close(f(x), net(x))
    assert f.graphs == 4
    net.eval()                           # training flag: not read by this forward
    close(f(x), net(x))


def test_cache_size_limit_falls_back_to_eager_with_a_warning():
    def g(x, k):
        return x * k
    f = Counting(g, dynamic=False)        # (else k becomes a symbol: one graph)
    x = T(2)
    limit = ember.compiler.config.cache_size_limit
    for k in range(limit):
        close(f(x, k), x * k)
    with pytest.warns(RuntimeWarning, match="cache_size_limit"):
        close(f(x, 100), x * 100)
    close(f(x, 101), x * 101)
    assert f.graphs == limit
    close(f(x, 1), x * 1)                    # old entries still hit
    assert counters["recompiles"]
