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
from catalogue import CASES, MODULES, make_namespace, stored_counts
from catalogue.coverage import CLASSES
from ember.capture import _hook, counters

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


@pytest.fixture(autouse=True)
def fresh():
    ember.compiler.reset()
    yield
    ember.compiler.reset()


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
    ns, args, kwargs = make_namespace(ember, case)
    out = ember.capture.explain(ns["fn"])(*args, **kwargs)
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
    import torch._dynamo
    wrong = {}
    for case in CASES:
        torch._dynamo.reset()
        ns, args, kwargs = make_namespace(torch, case)
        mode = torch.is_grad_enabled()
        try:
            out = torch._dynamo.explain(ns["fn"])(*args, **kwargs)
        finally:
            torch.set_grad_enabled(mode)
        if (out.graph_count, out.graph_break_count) != (case.graphs, case.breaks):
            wrong[case.name] = (out.graph_count, out.break_reasons)
    torch._dynamo.reset()
    assert wrong == {}
