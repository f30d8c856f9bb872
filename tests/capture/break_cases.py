"""The harness of the graph-break tests (test_graph_breaks, test_graph_breaks_blocks,
test_graph_breaks_nested): a Case is a source with a function `fn`, its arguments and
the counts expected of it; the checks run it eagerly and compiled and compare result,
autograd flags, printed output, LOG (the side effects in order) and grad mode, then the
counters."""
import dataclasses
import re

import ember
from ember.capture import counters

from catalogue import explain_case, torch_counts  # noqa: F401 - the tests import it here
from test_catalogue import assert_same, flatten, make_namespace
from fresh_compiler import fresh_compiler  # noqa: F401  (autouse)


@dataclasses.dataclass
class Case:
    name: str
    src: str
    args: str
    graphs: int              # ember's graph count
    breaks: int              # ... and break count
    reason: str = ""         # a regex the (first) break reason matches
    kwargs: str = "{}"
    torch: tuple = None      # torch's (graph_count, graph_break_count) where it differs

    def __str__(self):
        return self.name


def grad_flags(result):
    return [(t.requires_grad, t.grad_fn is not None) for t in flatten(result)
            if isinstance(t, ember.Tensor)]


def run_case(lib, case, capsys, compile=None):
    """(result, printed, LOG, grad mode after the call) of case's fn, compiled by
    `compile` when given; the grad mode is put back afterwards."""
    mode = lib.is_grad_enabled()
    try:
        ns, args, kwargs = make_namespace(lib, case)
        fn = ns["fn"] if compile is None else compile(ns["fn"])
        capsys.readouterr()
        result = fn(*args, **kwargs)
        printed = capsys.readouterr().out
        return result, printed, list(ns.get("LOG", [])), lib.is_grad_enabled()
    finally:
        lib.set_grad_enabled(mode)


def check_matches_eager(case, backend, capsys, fallbacks=0):
    """Compiled under `backend`, case equals eager; `fallbacks` whole frames run in
    CPython (each one break fewer)."""
    want = run_case(ember, case, capsys)
    got = run_case(ember, case, capsys, lambda fn: ember.compile(fn, backend=backend))
    assert_same(got[0], want[0])
    assert grad_flags(got[0]) == grad_flags(want[0])       # autograd as eager's
    assert got[1:] == want[1:]                             # printed, LOG, grad mode
    assert counters["stats"]["frames_fallback"] == fallbacks, dict(counters["unsupported"])
    assert counters["stats"]["graph_breaks"] == case.breaks - fallbacks, \
        dict(counters["graph_break"])
    assert any(re.search(case.reason, r) for r in counters["graph_break"])


def check_second_call(case, capsys, converts_again=False):
    """A second call on equal values gives the same result and, unless the case's
    LOG grows (its length is guarded) or `converts_again`, converts nothing again."""
    ns, args, kwargs = make_namespace(ember, case)
    compiled = ember.compile(ns["fn"], backend="eager")
    first = compiled(*args, **kwargs)
    breaks = counters["stats"]["graph_breaks"]
    recompiles = dict(counters["recompiles"])
    _, args, kwargs = make_namespace(ember, case)
    second = compiled(*args, **kwargs)
    assert_same(second, first)
    if "LOG" not in ns and not converts_again:
        assert counters["stats"]["graph_breaks"] == breaks
        assert dict(counters["recompiles"]) == recompiles


def check_explain_counts(case):
    out = explain_case(ember, ember.capture.explain, case)
    assert (out.graph_count, out.graph_break_count) == (case.graphs, case.breaks), out
    assert re.search(case.reason, out.break_reasons[0])
