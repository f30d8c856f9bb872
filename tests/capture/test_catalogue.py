"""The capture catalogue: functions and modules that ember.compile must capture whole
(one graph, no fallback) and run with eager's results.

The cases live in catalogue/ (one module per class of construct, see catalogue/case.py).
Each is source text that says `torch`, executed twice: with `torch` bound to ember (the
case must capture and match eager ember) and, when PyTorch is installed, with `torch`
bound to PyTorch, where torch._dynamo.explain() must report the graph count stored for
the case in catalogue/counts.json (written by write_catalogue_counts.py from PyTorch's
counts). So the expected counts are PyTorch's, and Ember is held to them.
"""
from __future__ import annotations

import numpy as np
import pytest

import ember
from catalogue import CASES, MODULES, make_namespace, stored_counts
from ember.capture import _hook, counters

pytestmark = pytest.mark.skipif(not _hook.available, reason="capture needs CPython 3.11")


def flatten(value):
    """Leaves of a nested result, for comparison."""
    if isinstance(value, (tuple, list)):
        return [leaf for v in value for leaf in flatten(v)]
    if isinstance(value, dict):
        return [(k,) for k in value] + [leaf for v in value.values() for leaf in flatten(v)]
    return [value]


def assert_same(got, want):
    assert type(got) is type(want), (got, want)
    g, w = flatten(got), flatten(want)
    assert len(g) == len(w)
    for a, b in zip(g, w):
        if isinstance(b, ember.Tensor):
            assert isinstance(a, ember.Tensor)
            assert a.shape == b.shape and a.dtype == b.dtype, (a, b)
            np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=1e-6, atol=1e-6)
        else:
            assert type(a) is type(b) and a == b, (a, b)


@pytest.fixture(autouse=True)
def fresh():
    ember.compiler.reset()
    yield
    ember.compiler.reset()


@pytest.mark.parametrize("case", CASES, ids=str)
def test_case_captures_whole_and_matches_eager(case):
    ns, args, kwargs = make_namespace(ember, case)
    fn = ns["fn"]
    want = fn(*args, **kwargs)
    compiled = ember.compile(fn, backend="eager")
    got = compiled(*args, **kwargs)
    assert dict(counters["unsupported"]) == {}
    assert counters["stats"]["frames_fallback"] == 0
    graphs = compiled._ember_compile_context.graphs
    assert len(graphs) == case.graphs
    assert_same(got, want)
    # the second call hits the cache: same result, nothing recompiled
    assert_same(compiled(*args, **kwargs), want)
    assert len(graphs) == case.graphs and counters["stats"]["unique_graphs"] == case.graphs
    assert ember.capture.explain(fn)(*args, **kwargs).graph_count == case.graphs


def test_catalogue_size():
    assert len(CASES) >= 250 and len({c.name for c in CASES}) == len(CASES)
    assert all(len(m.CASES) >= 3 for m in MODULES)


def test_every_case_has_a_stored_count():
    assert sorted(stored_counts()) == sorted(c.name for c in CASES)


def test_torch_explain_agrees_with_stored_counts(torch):
    """The stored counts are torch's: re-check them (one test, one torch import)."""
    import torch._dynamo
    wrong = {}
    for case in CASES:
        torch._dynamo.reset()
        ns, args, kwargs = make_namespace(torch, case)
        out = torch._dynamo.explain(ns["fn"])(*args, **kwargs)
        if out.graph_count != case.graphs or out.graph_break_count:
            wrong[case.name] = (out.graph_count, out.break_reasons)
    torch._dynamo.reset()
    assert wrong == {}
