"""The capture catalogue: functions and modules that ember.compile must capture with no
more graphs and breaks than TorchDynamo, no fallback, and eager's results and side effects.

The cases live in catalogue/ (one module per class of construct, see catalogue/case.py;
catalogue/coverage.py names the cases of each class of [capture-2] item 2). Each is
source text that says `torch`, executed with `torch` bound to ember (the case must
capture and match eager ember) and, when PyTorch is installed, with `torch` bound to
PyTorch, where torch._dynamo.explain() must report the graph (and break) counts stored
for the case in catalogue/counts.json (written by write_catalogue_counts.py from
PyTorch's counts). So the expected counts are PyTorch's, and Ember is held to them:
three checks per case, results and side effects equal eager's, graph count and break
count no more than torch's (equal, for the cases torch captures whole).
"""
from __future__ import annotations

import types

import numpy as np
import pytest

import ember
from catalogue import CASES, MODULES, explain_case, make_namespace, stored_counts, torch_counts
from catalogue.coverage import CLASSES
from ember.capture import _hook, counters
from fresh_compiler import fresh_compiler  # noqa: F401  (autouse)

pytestmark = pytest.mark.skipif(not _hook.available, reason="capture needs CPython 3.11")


def flatten(value):
    """Leaves of a nested result, for comparison (objects by their attributes)."""
    if isinstance(value, (tuple, list)):
        return [type(value).__name__] + [leaf for v in value for leaf in flatten(v)]
    if isinstance(value, dict):
        return [(k,) for k in value] + [leaf for v in value.values() for leaf in flatten(v)]
    if hasattr(value, "__dict__") and not isinstance(
            value, (ember.Tensor, ember.nn.Module, type, types.FunctionType,
                    types.ModuleType)):
        return [type(value).__name__] + flatten(dict(vars(value)))
    return [value]


def same_type(a, b):
    """The same class, or the classes one case defines in its two namespaces."""
    ta, tb = type(a), type(b)
    return ta is tb or (ta.__module__, ta.__qualname__) == (tb.__module__, tb.__qualname__) \
        and ta.__module__.startswith("catalogue_")


def assert_same(got, want):
    assert same_type(got, want), (got, want)
    g, w = flatten(got), flatten(want)
    assert len(g) == len(w), (g, w)
    for a, b in zip(g, w):
        if isinstance(b, ember.Tensor):
            assert isinstance(a, ember.Tensor)
            assert a.shape == b.shape and a.dtype == b.dtype, (a, b)
            assert a.requires_grad == b.requires_grad, (a, b)
            np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=1e-6, atol=1e-6)
        else:
            assert same_type(a, b) and a == b, (a, b)


def _structure(value):
    """Container types and lengths of a value (what guards on lengths and keys see)."""
    if isinstance(value, (tuple, list)):
        return (type(value), [_structure(v) for v in value])
    if isinstance(value, dict):
        return (dict, [(k, _structure(v)) for k, v in value.items()])
    return type(value)


def _run_twice(ns, args, kwargs):
    """Eager's two results, and whether the first call changed the structure of its
    inputs or LOG (then the second call may rightly compile again, as torch's would:
    a guard on a length or on dict keys fails)."""
    before = _structure((args, kwargs, ns.get("LOG")))
    first = ns["fn"](*args, **kwargs)
    changed = _structure((args, kwargs, ns.get("LOG"))) != before
    return [first, ns["fn"](*args, **kwargs)], changed


@pytest.mark.parametrize("case", CASES, ids=str)
def test_case_captures_and_matches_eager(case):
    # eager and compiled each run on a namespace of their own (the same inputs,
    # modules, globals): the inputs and LOG afterwards are the side effects compared
    ns_e, args_e, kwargs_e = make_namespace(ember, case)
    want, changes_structure = _run_twice(ns_e, args_e, kwargs_e)
    ns, args, kwargs = make_namespace(ember, case)
    compiled = ember.compile(ns["fn"], backend="eager")
    got = [compiled(*args, **kwargs)]
    assert dict(counters["unsupported"]) == {}
    assert counters["stats"]["frames_fallback"] == 0
    graphs = compiled._ember_compile_context.graphs
    breaks = counters["stats"]["graph_breaks"]
    if case.breaks == 0:
        assert (len(graphs), breaks) == (case.graphs, 0), dict(counters["graph_break"])
    else:
        assert len(graphs) <= case.graphs and breaks <= case.breaks
    # the second call hits the cache (unless the first changed what the guards check):
    # same result, nothing recompiled
    unique = counters["stats"]["unique_graphs"]
    got.append(compiled(*args, **kwargs))
    assert counters["stats"]["unique_graphs"] == unique or changes_structure
    for g, w in zip(got, want):
        assert_same(g, w)
    assert_same((args, kwargs), (args_e, kwargs_e))
    assert_same(ns.get("LOG"), ns_e.get("LOG"))
    out = explain_case(ember, ember.capture.explain, case)
    assert out.graph_count <= case.graphs and out.graph_break_count <= case.breaks


def test_catalogue_size():
    assert len(CASES) >= 250 and len({c.name for c in CASES}) == len(CASES)
    assert all(len(m.CASES) >= 3 for m in MODULES)


def test_every_class_has_three_cases():
    names = {c.name for c in CASES}
    assert {k: [n for n in v if n not in names] for k, v in CLASSES.items()} == \
        {k: [] for k in CLASSES}
    assert all(len(set(v)) >= 3 for v in CLASSES.values())


def test_every_case_has_a_stored_count():
    assert sorted(stored_counts()) == sorted(c.name for c in CASES)


def test_torch_explain_agrees_with_stored_counts(torch):
    """The stored counts are torch's: re-check them (one test, one torch import)."""
    got = torch_counts(torch, CASES)
    assert {c.name: got[c.name] for c in CASES
            if got[c.name][:2] != (c.graphs, c.breaks)} == {}


def test_builtin_max_of_tensors_requiring_grad_keeps_eagers_gradients():
    """max(a, b) of one-element tensors requiring grad: eager's backward reaches the
    item taken alone (the other's .grad stays None), which a graph op cannot know; so
    the call is run by the frame program on the graph's outputs where it leaves the
    frame (`max(...) * 3` returned: no break), and breaks where a tensor op needs it;
    the gradients are eager's, None included."""
    def h(x, y):
        return max(x.sum(), y.sum()) * 3

    def g(x, y, w):
        return w * max(x.sum(), y.sum())
    for backend in ("eager", "aot_eager", "llvm"):
        for fn, breaks in ((h, 0), (g, 1)):
            ember.compiler.reset()
            counters.clear()
            x1 = ember.tensor([1.0, 2.0], requires_grad=True)
            y1 = ember.tensor([0.5, 0.25], requires_grad=True)
            x2, y2 = (t.detach().clone().requires_grad_() for t in (x1, y1))
            extra = (ember.ones(2),) if fn is g else ()
            fn(x1, y1, *extra).sum().backward()
            ember.compile(fn, backend=backend)(x2, y2, *extra).sum().backward()
            assert y1.grad is None and y2.grad is None
            np.testing.assert_array_equal(x2.grad.numpy(), x1.grad.numpy())
            assert counters["stats"]["graph_breaks"] == breaks, dict(counters["graph_break"])
            assert breaks == 0 or any("requires grad" in r for r in counters["graph_break"])
            assert counters["stats"]["frames_fallback"] == 0


def test_builtin_max_of_larger_tensors_raises_as_eager():
    def g(x, y):
        return max(x, y)
    with pytest.raises(RuntimeError) as want:
        g(ember.ones(3), ember.zeros(3))
    with pytest.raises(RuntimeError) as got:
        ember.compile(g, backend="eager")(ember.ones(3), ember.zeros(3))
    assert str(got.value) == str(want.value)


def test_objects_made_inside_are_new_per_call_and_cross_a_break():
    """An instance the frame made and returns is a new object per call, with eager's
    attributes in eager's order, also when a graph break passes it to a resume
    function; one that stays inside costs nothing after the graph."""
    class Rec:
        def __init__(self, t):
            self.t = t
            self.n = 1

    def fn(x):
        r = Rec(x * 2)
        print("break")
        r.n += 1
        return r.t + 1, r

    def inside(x):
        r = Rec(x * 2)
        return r.t + r.n

    x = ember.arange(3.0)
    compiled = ember.compile(fn, backend="eager")
    (a, ra), (b, rb) = compiled(x), compiled(x)
    want, rw = fn(x)
    assert ra is not rb and type(ra) is Rec
    assert list(vars(ra)) == list(vars(rw)) == ["t", "n"] and ra.n == rw.n == 2
    np.testing.assert_array_equal(ra.t.numpy(), rw.t.numpy())
    np.testing.assert_array_equal(a.numpy(), want.numpy())
    assert counters["stats"]["frames_fallback"] == 0 and counters["stats"]["graph_breaks"] == 1
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward
    ember.compile(inside, backend=backend)(x)
    outputs = [n for n in graphs[0].graph.nodes if n.op == "output"][0].args[0]
    assert len(outputs) == 1       # r.t is no graph output: r stays inside
