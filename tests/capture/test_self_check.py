"""Self-check mode: options={"check": True} (or EMBER_CHECK=1) runs each new graph's
first call also eagerly on copies and compares results, mutated inputs and replayed
side effects; a mismatch raises SelfCheckError with the graph, the output, the largest
difference and the first diverging op."""
import operator

import numpy as np
import pytest

import ember
from ember.capture import SelfCheckError, _hook, counters
from ember.capture.self_check import SelfCheckingFrame
from fresh_compiler import fresh_compiler  # noqa: F401  (autouse)

pytestmark = pytest.mark.skipif(not _hook.available, reason="capture needs CPython 3.11")

CALLS = 0


def _entries(compiled):
    return compiled._ember_compile_context.graphs


def _swap_mul_for_add(gm, example_inputs):
    """A broken backend: every multiplication of the graph becomes an addition."""
    for n in gm.graph.nodes:
        if n.target is operator.mul:
            n.target = operator.add
    gm.recompile()
    return gm.forward


def _writes_into_its_input(gm, example_inputs):
    def run(*args):
        out = gm(*args)
        args[0].add_(1)             # a side effect eager does not have
        return out
    return run


@pytest.mark.parametrize("backend", ["eager", "aot_eager", "llvm"])
def test_correct_code_passes_and_runs_side_effects_once(backend):
    global CALLS
    CALLS = 0

    def fn(x, acts, cfg):
        global CALLS
        CALLS += 1
        h = (x * 2).relu()
        acts.append(h)
        cfg["n"] = cfg["n"] + 1
        return h.sum(), len(acts)

    acts, cfg = [], {"n": 0}
    compiled = ember.compile(fn, backend=backend, options={"check": True})
    out = compiled(ember.ones(3), acts, cfg)
    assert out[1] == 1 and len(acts) == 1 and cfg == {"n": 1}
    assert CALLS == 1                # the eager reference ran on copies
    assert float(out[0]) == 6.0
    assert counters["stats"]["frames_fallback"] == 0


def test_a_wrong_graph_is_reported_with_output_difference_and_op():
    def fn(x, y):
        a = x + y
        b = a * 3               # the broken backend turns this into a + 3
        return b.exp(), a

    compiled = ember.compile(fn, backend=_swap_mul_for_add, options={"check": True})
    x = ember.from_numpy(np.array([1.0, 2.0], dtype=np.float32))
    with pytest.raises(SelfCheckError) as info:
        compiled(x, x)
    msg = str(info.value)
    assert "result[0]" in msg and "largest difference" in msg, msg
    assert "first diverging op: mul" in msg and "test_self_check.py" in msg, msg
    assert "def forward" in msg            # the captured graph


def test_a_mutated_input_is_compared():
    def fn(x):
        return x * 2

    compiled = ember.compile(fn, backend=_writes_into_its_input, options={"check": True})
    with pytest.raises(SelfCheckError, match="argument x afterwards"):
        compiled(ember.ones(2))


def test_a_side_effect_eager_lacks_is_caught(monkeypatch):
    """The replayed side effects are part of the comparison: break the replay (drop
    every effect of the frame program) and the check names the container."""
    from ember.capture import convert
    real = convert.build_program

    def no_effects(ret, side_effects, *rest):
        program, outputs = real(ret, side_effects, *rest)
        values, effects, result = program
        return (values, (), result), outputs

    monkeypatch.setattr(convert, "build_program", no_effects)

    def fn(x, acts):
        acts.append(x + 1)
        return x

    with pytest.raises(SelfCheckError, match="argument acts afterwards: length 0 "
                                              "compiled, 1 eager"):
        ember.compile(fn, backend="eager", options={"check": True})(ember.ones(2), [])


def test_only_the_first_call_of_each_graph_is_checked():
    def fn(x):
        return x + 1

    compiled = ember.compile(fn, backend="eager", options={"check": True})
    compiled(ember.ones(2))
    compiled(ember.ones(2))
    compiled(ember.ones(3))          # a new shape: a new graph, checked again
    entries = [e for e in _hook.cache_entries(fn.__code__)] if hasattr(
        _hook, "cache_entries") else None
    assert len(_entries(compiled)) == 2
    if entries is not None:
        frames = [f for _, f in entries]
        assert all(isinstance(f, SelfCheckingFrame) and f.checked for f in frames)


def test_environment_variable_turns_it_on(monkeypatch):
    monkeypatch.setenv("EMBER_CHECK", "1")
    compiled = ember.compile(lambda x: x * 3, backend=_swap_mul_for_add)
    with pytest.raises(SelfCheckError):
        compiled(ember.ones(2))
    monkeypatch.setenv("EMBER_CHECK", "0")
    compiled = ember.compile(lambda x: x * 3, backend=_swap_mul_for_add)
    assert compiled(ember.ones(2)).tolist() == [4.0, 4.0]     # wrong, and unchecked


def test_exceptions_must_match():
    def fn(x, i):
        return x[i] * 2

    compiled = ember.compile(fn, backend="eager", options={"check": True})
    compiled(ember.ones(3), ember.tensor([1]))
    ember.compiler.reset()
    compiled = ember.compile(fn, backend="eager", options={"check": True})
    with pytest.raises(IndexError):          # both raise: the eager error propagates
        compiled(ember.ones(3), ember.tensor([7]))
