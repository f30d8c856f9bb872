"""What ember.compile cannot capture (yet), and graph breaks it cannot resume: such a
frame runs whole in CPython, with the eager result, and the reason is counted in
ember.capture.counters["unsupported"]; fullgraph=True (or strict mode) raises instead,
naming the construct and its file:line.

The cases are written like the catalogue's (test_catalogue.py); `torch_graphs` records
what torch._dynamo.explain() reports for them (PyTorch breaks the graph, or captures
what Ember cannot yet), re-checked when torch is installed.
"""
import dataclasses
import re

import pytest

import ember
from ember.capture import CaptureError, _hook, counters

from catalogue import torch_counts
from test_catalogue import assert_same, make_namespace
from fresh_compiler import fresh_compiler  # noqa: F401  (autouse)

pytestmark = pytest.mark.skipif(not _hook.available, reason="capture needs CPython 3.11")


@dataclasses.dataclass
class Break:
    name: str
    src: str
    args: str
    reason: str              # a regex the counted reason matches
    line: int                # the line (of src) the error points at
    torch_graphs: int        # torch._dynamo.explain(fn)(...).graph_count, torch 2.13
                             # (None: explain raises the function's own exception)
    torch_breaks: int = 0    # ... .graph_break_count
    kwargs: str = "{}"
    # reasons counted after two calls, when other frames than fn are tried as well
    # (they run in CPython with capture on); default {reason: 1}
    counted: dict = None
    construct: str = None    # the regex a fullgraph error matches (default: reason)

    def __str__(self):
        return self.name


BREAKS = [
    # graph breaks Ember cannot resume yet (tests/capture/test_graph_breaks.py has
    # the ones it resumes): the frame runs whole in CPython
    Break("print_with_a_view_crossing_the_break", """
def fn(x):
    y = x * 2
    v = y[1:]
    print("mid")
    return v + 1
""", "T(3,)", r"print\(\) inside a compiled function \(graph break not resumable: a "
          r"view made in the graph would cross the graph break\)", 5, 2, 1,
          construct=r"print\(\) inside a compiled function"),
    # (a break inside a try block or with a cell variable resumes:
    # test_graph_breaks_blocks.py)
    Break("raise_statement", """
def fn(x, strict=True):
    y = x + 1
    if strict:
        raise ValueError("strict mode")
    return y
""", "T(3,)", r"raise statement reached: raise ValueError\('strict mode'\)", 5, None),
]


def eager_result(fn, args, kwargs):
    try:
        return fn(*args, **kwargs), None
    except Exception as e:   # noqa: BLE001 - the compiled call must raise the same
        return None, e


@pytest.mark.parametrize("case", BREAKS, ids=str)
def test_falls_back_with_eager_result_and_a_counted_reason(case):
    ns, args, kwargs = make_namespace(ember, case)
    fn = ns["fn"]
    want, want_exc = eager_result(fn, args, kwargs)
    if "CALLS" in ns:
        ns["CALLS"] = 0
    ns2, args, kwargs = make_namespace(ember, case)    # fresh inputs (some cases mutate)
    compiled = ember.compile(ns2["fn"], backend="eager")
    for _ in range(2):       # the second call does not try again (the code is skipped)
        got, got_exc = eager_result(compiled, args, kwargs)
        if want_exc is not None:
            assert type(got_exc) is type(want_exc) and str(got_exc) == str(want_exc)
        else:
            assert_same(got, want)
        ns2.get("CALLS") and ns2.update(CALLS=0)
    reasons = dict(counters["unsupported"])
    counted = case.counted or {case.reason: 1}
    assert len(reasons) == len(counted), reasons
    for pattern, n in counted.items():
        assert any(re.search(pattern, r) and c == n for r, c in reasons.items()), reasons
    assert counters["stats"]["frames_fallback"] == sum(counted.values())
    # no graph of fn itself (frames it calls, such as Pair.__init__, are captured)
    code = ns2["fn"].__code__
    assert [g for g in compiled._ember_compile_context.graphs if g.meta["code"] is code] == []


@pytest.mark.parametrize("case", BREAKS, ids=str)
def test_fullgraph_raises_naming_the_construct_and_line(case):
    ns, args, kwargs = make_namespace(ember, case)
    compiled = ember.compile(ns["fn"], backend="eager", fullgraph=True)
    with pytest.raises(CaptureError) as info:
        compiled(*args, **kwargs)
    msg = str(info.value)
    assert re.search(case.construct or case.reason, msg), msg
    assert f"<catalogue {case.name}>:{case.line} " in msg, msg
    assert "fullgraph=True" in msg


def test_strict_mode_raises_too(monkeypatch):
    case = BREAKS[0]
    for turn_on in (lambda: monkeypatch.setattr(ember.compiler.config, "strict", True),
                    lambda: monkeypatch.setenv("EMBER_STRICT", "1")):
        monkeypatch.undo()
        turn_on()
        ember.compiler.reset()
        ns, args, kwargs = make_namespace(ember, case)
        with pytest.raises(CaptureError, match="print"):
            ember.compile(ns["fn"], backend="eager")(*args)


def test_explain_reports_the_reason():
    case = BREAKS[0]
    ns, args, kwargs = make_namespace(ember, case)
    out = ember.capture.explain(ns["fn"])(*args)
    assert out.graph_count == 0 and out.graph_break_count == 1
    assert "would cross the graph break" in out.break_reasons[0]


def test_torch_counts_for_the_break_cases(torch):
    errors = {}
    counts = torch_counts(torch, BREAKS, errors)
    wrong = {}
    for case in BREAKS:
        if case.name in errors:
            # None: explain raises the function's own exception (eager's, on a new
            # namespace)
            ns, args, kwargs = make_namespace(torch, case)
            _, eager_exc = eager_result(ns["fn"], args, kwargs)
            same = repr(errors[case.name]) == repr(eager_exc)
            got = (None, case.torch_breaks) if same else repr(errors[case.name])[:200]
        else:
            got = counts[case.name][:2]
        if got != (case.torch_graphs, case.torch_breaks):
            wrong[case.name] = got
    assert wrong == {}
