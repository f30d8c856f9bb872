"""An exception raised by a compiled graph at run time (an index out of range, an
integer division by zero) reaches the caller as eager's exception, from the user's own
function and line, with the side effects eager made before it: nothing the compiled
frame does is visible until its graph has run, so the frame then runs eagerly."""
import traceback

import pytest

import ember
from ember.capture import CaptureError, _hook, counters
from fresh_compiler import fresh_compiler  # noqa: F401  (autouse)

pytestmark = pytest.mark.skipif(not _hook.available, reason="capture needs CPython 3.11")

BACKENDS = ["eager", "aot_eager", "llvm"]


def pick(x, i, log):
    y = x * 2
    log.append("before")
    z = y[i]                                    # IndexError when i is out of range
    log.append("after")
    return z + 1


def divide(a, b):
    c = a + 1
    return c // b                               # integer division by zero


def _frames(exc):
    return [(f.name, f.lineno) for f in traceback.extract_tb(exc.__traceback__)]


def _raised(fn, *args):
    with pytest.raises(Exception) as info:
        fn(*args)
    return info.value


@pytest.mark.parametrize("backend", BACKENDS)
def test_index_error_names_the_users_line_and_keeps_earlier_side_effects(backend):
    compiled = ember.compile(pick, backend=backend)
    log = []
    compiled(ember.ones(3), ember.tensor([0]), log)       # compiles; a good call
    assert log == ["before", "after"]
    log_e, log_c = [], []
    want = _raised(pick, ember.ones(3), ember.tensor([5]), log_e)
    got = _raised(compiled, ember.ones(3), ember.tensor([5]), log_c)
    assert type(got) is type(want) and str(got) == str(want)
    line = pick.__code__.co_firstlineno + 3
    assert ("pick", line) in _frames(got), _frames(got)
    assert log_c == log_e == ["before"]
    assert len(compiled._ember_compile_context.graphs) == 1    # a cache hit raised


@pytest.mark.parametrize("backend", BACKENDS)
def test_integer_division_by_zero_names_the_users_line(backend):
    compiled = ember.compile(divide, backend=backend)
    a, b = ember.tensor([1, 2]), ember.tensor([3, 1])
    assert compiled(a, b).tolist() == divide(a, b).tolist()
    want = _raised(divide, a, ember.tensor([0, 1]))
    got = _raised(compiled, a, ember.tensor([0, 1]))
    assert type(got) is type(want) and str(got) == str(want)
    assert ("divide", divide.__code__.co_firstlineno + 2) in _frames(got)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("loss", ["cross_entropy", "nll_loss"])
@pytest.mark.parametrize("bad", [5, -1])
def test_a_target_out_of_range_raises_eagers_index_error(loss, bad, backend):
    """Found by the fuzzer: the losses' decompositions check their targets in the graph
    too (an index of C elements), so a compiled call with a target out of range raises
    eager's IndexError instead of returning a loss; ignore_index is still ignored."""
    fn = getattr(ember.nn.functional, loss)

    def f(x, t):
        return fn(x, t)
    compiled = ember.compile(f, backend=backend)
    x = ember.randn(4, 5, dtype=ember.float64)
    good = ember.tensor([0, 1, -100, 4])
    assert compiled(x, good).item() == pytest.approx(f(x, good).item(), rel=1e-12)
    t = ember.tensor([0, 1, bad, 3])
    want = _raised(f, x, t)
    got = _raised(compiled, x, t)
    assert type(got) is type(want) is IndexError and str(got) == str(want)
    assert len(compiled._ember_compile_context.graphs) == 1    # a cache hit raised


def _raises_at_run_time(gm, example_inputs):
    calls = []

    def run(*args):
        calls.append(1)
        if len(calls) > 1:
            raise RuntimeError("a broken kernel")
        return gm(*args)
    return run


def test_a_graph_that_raises_where_eager_does_not_is_counted_and_runs_eagerly():
    def fn(x):
        return x * 3
    compiled = ember.compile(fn, backend=_raises_at_run_time)
    compiled(ember.ones(2))
    with pytest.warns(RuntimeWarning, match="a broken kernel"):
        out = compiled(ember.ones(2))
    assert out.tolist() == [3.0, 3.0]
    assert any("a broken kernel" in r for r in counters["runtime_fallback"])
    ember.compiler.reset()
    strict = ember.compile(fn, backend=_raises_at_run_time, fullgraph=True)
    strict(ember.ones(2))
    with pytest.raises(RuntimeError, match="a broken kernel"):
        strict(ember.ones(2))
