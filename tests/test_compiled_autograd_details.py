"""Autograd around compiled graphs ([aot-2] item 5): gradients accumulate into .grad
across calls, tensor and parameter hooks registered outside the graph run as in eager,
module backward hooks (full, pre and the deprecated node-level kind) run eagerly and
compiled, create_graph=True through a compiled graph raises PyTorch's refusal of double
backward, and compiled inference under no_grad or inference_mode saves nothing."""
import numpy as np
import pytest

import ember
from ember.capture import _hook, counters

pytestmark = pytest.mark.skipif(not _hook.available, reason="capture needs CPython 3.11")

AOT = ["aot_eager", "llvm"]
ALL = ["eager", "aot_eager", "llvm"]


@pytest.fixture(autouse=True)
def fresh():
    ember.compiler.reset()
    counters.clear()
    yield
    ember.compiler.reset()


def _mlp():
    ember.manual_seed(3)
    return ember.nn.Sequential(ember.nn.Linear(4, 8), ember.nn.Tanh(),
                               ember.nn.Linear(8, 2)).double()


def _x(seed=0, requires_grad=False):
    rng = np.random.default_rng(seed)
    return ember.tensor(rng.standard_normal((5, 4)), requires_grad=requires_grad)


def _grads(model):
    return {n: p.grad.numpy().copy() for n, p in model.named_parameters()}


# ------------------------------------------------------------------ accumulation

@pytest.mark.parametrize("backend", ALL)
def test_gradients_accumulate_across_calls(backend):
    """Three calls, three backwards, no zero_grad: .grad sums them as in eager, for
    parameters and for an input that requires grad (read twice by the graph)."""
    def loss_of(model):
        def f(x):
            return (model(x) ** 2).sum() + (x * x).sum()
        return f

    res = []
    for compiled in (False, True):
        model = _mlp()
        f = loss_of(model)
        f = ember.compile(f, backend=backend, fullgraph=True) if compiled else f
        x = _x(requires_grad=True)
        for i in range(3):
            f(x * (i + 1) if i == 1 else x).backward()
        res.append((_grads(model), x.grad.numpy().copy()))
    for name in res[0][0]:
        np.testing.assert_allclose(res[1][0][name], res[0][0][name], rtol=1e-12, err_msg=name)
    np.testing.assert_allclose(res[1][1], res[0][1], rtol=1e-12)
    assert counters["stats"]["unique_graphs"] == 1


# ------------------------------------------------------------------ tensor hooks

@pytest.mark.parametrize("backend", ALL)
def test_hooks_registered_outside_the_graph_run_as_in_eager(backend):
    """On a parameter (a leaf: before accumulation, may replace the gradient), on a
    non-leaf input of the graph (its grad_fn's pre-hook) and on the graph's output, with
    retain_grad on both; calls, order and values as eager's."""
    def run(compiled):
        model = _mlp()
        log = []
        w = model[0].weight
        w.register_hook(lambda g: log.append(("w", g.numpy().copy())) or g * 2)
        a = _x(requires_grad=True)
        x = a * 3
        x.register_hook(lambda g: log.append(("x", g.numpy().copy())))
        x.retain_grad()
        f = ember.compile(model, backend=backend, fullgraph=True) if compiled else model
        y = f(x)
        y.register_hook(lambda g: log.append(("y", g.numpy().copy())) or g + 1)
        y.retain_grad()
        y.sum().backward()
        return log, _grads(model), a.grad.numpy(), x.grad.numpy(), y.grad.numpy()
    want, got = run(False), run(True)
    # the output's hook first; then the gradients leave the compiled node in its input
    # order (eager's engine reaches the leaves in its own order: which leaf's hook runs
    # first is no promise of either)
    assert got[0][0][0] == want[0][0][0] == "y"
    assert sorted(k for k, _ in got[0]) == sorted(k for k, _ in want[0]) == ["w", "x", "y"]
    for (gk, gv), (wk, wv) in zip(sorted(got[0], key=lambda e: e[0]),
                                  sorted(want[0], key=lambda e: e[0])):
        assert gk == wk
        np.testing.assert_allclose(gv, wv, rtol=1e-12)
    for name in want[1]:
        np.testing.assert_allclose(got[1][name], want[1][name], rtol=1e-12, err_msg=name)
    for g, w in zip(got[2:], want[2:]):
        np.testing.assert_allclose(g, w, rtol=1e-12)


# ------------------------------------------------------------------ module hooks

class Scale(ember.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = ember.nn.Parameter(ember.tensor([2.0, 3.0], dtype=ember.float64))

    def forward(self, x, y, k):
        return x * self.w * k + y, (x * 2).sum()


def _module_hook_log(module, kind, log):
    def fmt(gs):
        return [None if g is None else np.asarray(g.tolist()) for g in gs]
    if kind == "full":
        return module.register_full_backward_hook(
            lambda m, gin, gout: log.append(("full", fmt(gin), fmt(gout))))
    if kind == "pre":
        return module.register_full_backward_pre_hook(
            lambda m, gout: log.append(("pre", fmt(gout))))
    return module.register_backward_hook(
        lambda m, gin, gout: log.append(("legacy", fmt(gin), fmt(gout))))


def _same_log(got, want):
    assert [e[0] for e in got] == [e[0] for e in want]
    for g, w in zip(got, want):
        for gs, ws in zip(g[1:], w[1:]):
            assert len(gs) == len(ws)
            for a, b in zip(gs, ws):
                assert (a is None) == (b is None)
                if b is not None:
                    np.testing.assert_allclose(a, b, rtol=1e-12)


def test_module_backward_hooks_match_torch(torch):
    """Eagerly, against torch: grad_input per positional argument (None for a number,
    zeros for a tensor that does not require grad), grad_output per output (None for an
    output that got no gradient), the pre-hook first; a hook may replace grad_input."""
    logs = []
    for lib in (torch, ember):
        class M(lib.nn.Module):
            def __init__(self):
                super().__init__()
                self.w = lib.nn.Parameter(lib.tensor([2.0, 3.0], dtype=lib.float64))

            def forward(self, x, y, k):
                return x * self.w * k + y, (x * 2).sum()

        m = M()
        log = []
        _module_hook_log(m, "pre", log)
        h = _module_hook_log(m, "full", log)
        x = lib.ones(2, dtype=lib.float64, requires_grad=True)
        y = lib.ones(2, dtype=lib.float64)
        a, b = m(x, y, 3)
        (a.sum() + b).backward()
        a, b = m(lib.ones(2, dtype=lib.float64), y, 3)     # no input requires grad
        a.sum().backward()
        h.remove()
        m.register_full_backward_hook(lambda mod, gin, gout: (gin[0] * 10, None, None))
        x = lib.ones(2, dtype=lib.float64, requires_grad=True)
        m(x, y, 3)[0].sum().backward()
        log.append(("grad", [x.grad.numpy()]))

        class L(lib.nn.Module):
            def __init__(self):
                super().__init__()
                self.w = lib.nn.Parameter(lib.tensor([2.0, 3.0], dtype=lib.float64))

            def forward(self, x):
                return x * self.w

        layer = L()
        _module_hook_log(layer, "legacy", log)
        layer(lib.ones(2, dtype=lib.float64, requires_grad=True)).sum().backward()
        logs.append(log)
        with pytest.raises(RuntimeError, match="Cannot use both regular backward hooks and "
                                               "full backward hooks"):
            _module_hook_log(layer, "full", [])
    _same_log(logs[1], logs[0])


@pytest.mark.parametrize("backend", ALL)
def test_module_backward_hooks_on_a_compiled_module(backend):
    """The compiled module's hooks run around its compiled forward (its call is eager
    Python): full and pre hooks see eager's gradients, and a hook's replacement reaches
    the input; the deprecated kind runs on the compiled node, with eager's grad_output."""
    res = []
    for compiled in (False, True):
        ember.compiler.reset()
        m = Scale()
        log = []
        _module_hook_log(m, "pre", log)
        _module_hook_log(m, "full", log)
        m.register_full_backward_hook(lambda mod, gin, gout: (gin[0] * 10, None, None))
        f = ember.compile(m, backend=backend, fullgraph=True) if compiled else m
        x = ember.ones(2, dtype=ember.float64, requires_grad=True)
        a, b = f(x, ember.ones(2, dtype=ember.float64), 3)
        (a.sum() + b).backward()
        log.append(("grad", [x.grad.numpy()], [m.w.grad.numpy()]))
        legacy = ember.nn.Linear(2, 2).double()
        _module_hook_log(legacy, "legacy", log)
        g = ember.compile(legacy, backend=backend, fullgraph=True) if compiled else legacy
        g(ember.ones(1, 2, dtype=ember.float64, requires_grad=True)).sum().backward()
        log[-1] = ("legacy", [], log[-1][2])          # grad_input is node-level
        res.append(log)
    _same_log(res[1], res[0])


@pytest.mark.parametrize("backend", ALL)
def test_a_submodule_with_backward_hooks_runs_them(backend):
    """A submodule with backward hooks inside a compiled model: the frame that calls it
    runs it in CPython (Sequential's loop: a graph break, counted) and the submodule's
    own forward compiles, so the hooks
    run with eager's gradients; a hook registered after compiling is seen (the
    captured frame is guarded on the hook tables)."""
    def run(compiled, register_late):
        model = _mlp()
        log = []
        if not register_late:
            _module_hook_log(model[2], "full", log)
        f = ember.compile(model, backend=backend) if compiled else model
        x = _x(requires_grad=True)
        f(x).sum().backward()
        if register_late:
            _module_hook_log(model[2], "full", log)
            f(x).sum().backward()
        return log, x.grad.numpy()
    for late in (False, True):
        ember.compiler.reset()
        counters.clear()
        want, got = run(False, late), run(True, late)
        _same_log(got[0], want[0])
        np.testing.assert_allclose(got[1], want[1], rtol=1e-12)
        assert any("backward hooks" in r for r in
                   list(counters["unsupported"]) + list(counters["graph_break"]))


# ------------------------------------------------------------------ create_graph

@pytest.mark.parametrize("backend", AOT)
def test_create_graph_through_a_compiled_graph_refuses_double_backward(backend):
    """First-order gradients are right; differentiating them raises, as PyTorch's
    compiled functions do (their backward graph is not differentiable)."""
    def f(x):
        return (x ** 3).sum()

    x = ember.tensor([1.0, 2.0], requires_grad=True)
    y = ember.compile(f, backend=backend, fullgraph=True)(x)
    g, = ember.autograd.grad(y, x, create_graph=True)
    assert g.tolist() == [3.0, 12.0] and g.grad_fn.name() == \
        "CompiledFunctionBackwardBackward"
    with pytest.raises(RuntimeError, match="does not currently support double backward"):
        g.sum().backward()


def test_create_graph_through_the_eager_backend_works():
    x = ember.tensor([1.0, 2.0], requires_grad=True)
    y = ember.compile(lambda x: (x ** 3).sum(), backend="eager", fullgraph=True)(x)
    g, = ember.autograd.grad(y, x, create_graph=True)
    g.sum().backward()
    assert x.grad.tolist() == [6.0, 12.0]


# ------------------------------------------------------------------ inference

@pytest.mark.parametrize("backend", AOT)
@pytest.mark.parametrize("mode", ["no_grad", "inference_mode"])
def test_compiled_inference_saves_nothing(backend, mode, monkeypatch):
    """Under no_grad or inference_mode only an inference graph is compiled: no joint
    graph is partitioned (nothing is saved for a backward), the outputs have no
    history, and the inputs' grads stay None."""
    import ember.aot
    partitions = []
    real = ember.aot.partition
    monkeypatch.setattr(ember.aot, "partition",
                        lambda *a, **k: partitions.append(1) or real(*a, **k))
    from ember.compiler import backend as llvm_backend
    llvm_backend.recent.clear()
    model = _mlp()
    x = _x(requires_grad=True)
    ctx = getattr(ember, mode)
    f = ember.compile(model, backend=backend, fullgraph=True)
    with ctx():
        y = f(x)
        y2 = f(x)
    assert y.grad_fn is None and not y.requires_grad and y2.grad_fn is None
    np.testing.assert_allclose(y.numpy(), model(x).detach().numpy(), rtol=1e-12)
    assert partitions == []
    if backend == "llvm":
        assert [g.name.endswith("_inference") for g in llvm_backend.recent] == [True]
    assert all(p.grad is None for p in model.parameters())
    assert counters["stats"]["unique_graphs"] == 1
    y = f(x)                         # grad mode again: its own graph, with a backward
    assert y.requires_grad and partitions == [1]
    assert counters["stats"]["unique_graphs"] == 2
