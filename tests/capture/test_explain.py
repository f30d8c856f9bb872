"""ember._dynamo.explain(fn)(*args) ([capture-2] item 4): graph and break counts, the
break reasons with the user's source lines, the ops of each graph, the guards in
words and the compile times, as torch._dynamo.explain's ExplainOutput; nothing stays
compiled."""
import dataclasses

import numpy as np
import pytest

import ember
from ember.capture import _hook
from fresh_compiler import fresh_compiler  # noqa: F401  (autouse)

pytestmark = pytest.mark.skipif(not _hook.available, reason="capture needs CPython 3.11")


def T(lib, *shape):
    data = np.arange(np.prod(shape), dtype=np.float32).reshape(shape) / 10
    return lib.from_numpy(data)


def line_of(fn, text):
    """The line number of the line of fn's source that contains text."""
    import inspect
    lines, first = inspect.getsourcelines(fn)
    return first + next(i for i, line in enumerate(lines) if text in line)


def printing(x):
    y = x.sin() * 2
    print("middle", end="")
    return y.cos() + 1


def helper(y):
    print("in helper", end="")
    return y - 1


def calls_a_printing_helper(x):
    y = x * 3
    z = helper(y)
    return z.exp()


class Net(ember.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = ember.nn.Linear(3, 2)

    def forward(self, x, xs):
        if self.training:
            x = x * 2
        return self.lin(x) + len(xs)


def test_fields_are_torchs(torch):
    from torch._dynamo.backends.debugging import ExplainOutput
    ours = [f.name for f in dataclasses.fields(ember._dynamo.explain(printing)(T(ember, 3))
                                               .__class__)]
    assert ours == [f.name for f in dataclasses.fields(ExplainOutput)]


def test_print_in_the_middle_counts_as_torch(torch, capsys):
    import torch._dynamo
    out = ember._dynamo.explain(printing)(T(ember, 4))
    torch._dynamo.reset()
    want = torch._dynamo.explain(printing)(T(torch, 4))
    torch._dynamo.reset()
    assert (out.graph_count, out.graph_break_count) == (2, 1)
    assert (out.graph_count, out.graph_break_count) == (want.graph_count,
                                                        want.graph_break_count)
    # (torch counts call_function nodes only, and records x.sin() as call_method:
    # its op_count is 2; Ember's graph has both methods and functions)
    assert out.op_count == 4
    names = [[getattr(op, "__name__", op) for op in ops] for ops in out.ops_per_graph]
    assert names == [["sin", "mul"], ["cos", "add"]]
    assert len(out.graphs) == 2 and all(hasattr(g, "graph") for g in out.graphs)
    assert "middle" in capsys.readouterr().out      # the function really ran


def test_break_reason_names_the_users_line():
    out = ember._dynamo.explain(printing)(T(ember, 4))
    (reason,) = out.break_reasons
    assert "print()" in reason.reason and reason.graph_break
    frame = reason.user_stack[-1]
    assert (frame.filename, frame.lineno, frame.name) == (__file__,
                                                         line_of(printing, "print("),
                                                         "printing")
    assert frame.line.startswith("print(")
    assert f"{__file__}:{frame.lineno} in printing" in reason      # the text form


def test_break_inside_an_inlined_call_has_the_whole_user_stack():
    out = ember._dynamo.explain(calls_a_printing_helper)(T(ember, 4))
    assert out.graph_break_count >= 1
    stack = out.break_reasons[0].user_stack
    assert [(f.name, f.lineno) for f in stack] == [
        ("calls_a_printing_helper", line_of(calls_a_printing_helper, "helper(y)")),
        ("helper", line_of(helper, "print("))]


def test_guards_are_in_words():
    net = Net()
    out = ember._dynamo.explain(net)(T(ember, 4, 3), [1, 2, 3])
    assert out.graph_count == 1 and out.graph_break_count == 0
    guards = out.out_guards
    assert "x: tensor float32 shape (4, 3) stride (3, 1) requires_grad=False" in guards
    assert "self.training == True" in guards
    assert "len(xs) == 3" in guards
    assert "ember.is_grad_enabled() == True" in guards
    assert any(g.endswith("Parameter float32 shape (2, 3) stride (3, 1) "
                          "requires_grad=True") for g in guards), guards
    assert len(set(guards)) == len(guards)
    assert "forward" in out.compile_times and " s" in out.compile_times


def test_str_is_readable():
    text = str(ember._dynamo.explain(printing)(T(ember, 4)))
    assert text.startswith("Graph Count: 2\nGraph Break Count: 1\nOp Count: 4\n")
    for part in ("Break Reasons:", "  Break Reason 1:", "    Reason: print()",
                 f"      {__file__}:{line_of(printing, 'print(')} in printing",
                 "Ops per Graph:", "  Ops 1:", "    sin", "Out Guards:",
                 "  x: tensor float32 shape (4,) stride (1,) requires_grad=False",
                 "Compile Times: printing ("):
        assert part in text, (part, text)


def test_nothing_stays_compiled():
    calls = []

    def f(x):
        calls.append(1)
        return x + 1
    ember._dynamo.explain(f)(T(ember, 2))
    assert not _hook.cache_entries(f.__code__)
    assert f.__code__ not in _hook.cached_codes()
    assert _hook.get_state() is None
    np.testing.assert_allclose(f(T(ember, 2)).numpy(), [1.0, 1.1])


def keeps_an_iterator(x):
    it = iter([x, x + 1])
    print("middle", end="")
    return next(it)


def test_a_frame_that_ran_in_cpython_is_listed_with_its_line():
    """A break that cannot be resumed (here a live iterator across it) runs the whole
    frame in CPython: listed as a break reason that took no break."""
    out = ember._dynamo.explain(keeps_an_iterator)(T(ember, 2))
    assert (out.graph_count, out.graph_break_count) == (0, 1)
    (reason,) = out.break_reasons
    assert not reason.graph_break and "not resumable" in reason.reason
    assert [(f.name, f.lineno) for f in reason.user_stack] == [
        ("keeps_an_iterator", line_of(keeps_an_iterator, "print("))]
    assert "Break Reason 1 (the frame ran in CPython):" in str(out)
