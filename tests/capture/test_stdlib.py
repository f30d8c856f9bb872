"""The interpreter's builtins and standard library (capture/stdlib.py): what is run
exactly (lazily, in eager's order) and what falls back. The constructs that capture are
in the catalogue (catalogue/*.py); these tests pin the edges."""
import pytest

import ember
from ember.capture import _hook, counters

from fresh_compiler import fresh_compiler  # noqa: F401

pytestmark = pytest.mark.skipif(not _hook.available, reason="capture needs CPython 3.11")


def _captured(fn, *args):
    """fn compiled (eager backend) and called: (result, whether it captured whole)."""
    compiled = ember.compile(fn, backend="eager")
    out = compiled(*args)
    whole = not counters["unsupported"] and counters["stats"]["frames_fallback"] == 0 \
        and not counters["graph_break"]
    return out, whole


def _fell_back(pattern):
    return any(pattern in reason
               for reason in list(counters["unsupported"]) + list(counters["graph_break"]))


def test_map_runs_its_function_when_the_consumer_asks():
    def fn(x):
        log = []

        def f(t):
            log.append("f")
            return t * 2
        it = map(f, [x, x])
        log.append("made")
        out = [t for t in it]
        return out, log
    x = ember.ones(2)
    (out, log), whole = _captured(fn, x)
    assert whole and log == ["made", "f", "f"]


def test_generator_function_interleaves_with_its_consumer():
    def gen(box):
        for i in range(3):
            yield box[0] * i

    def fn(x):
        box = [1]
        out = []
        for v in gen(box):
            out.append(x * v)
            box[0] += 1       # the generator reads the new value at its next step
        return out
    x = ember.ones(2)
    out, whole = _captured(fn, x)
    assert whole
    assert [float(t[0]) for t in out] == [0.0, 2.0, 6.0]


def test_except_clause_does_not_catch_the_interpreters_own_limits():
    def fn(x):
        try:
            print("unsupported inside try")
        except Exception:
            return x * 0
        return x + 1
    x = ember.ones(2)
    out, whole = _captured(fn, x)
    assert not whole and _fell_back("print")
    assert float(out[0]) == 2.0


def test_exception_leaving_the_frame_falls_back_with_eagers_exception():
    def fn(x):
        d = {"a": x}
        return d["b"]
    with pytest.raises(KeyError):
        ember.compile(fn, backend="eager")(ember.ones(2))
    assert _fell_back("KeyError")


def test_generator_function_with_try_run_to_its_end_is_captured():
    def gen(x):
        try:
            yield x
        finally:
            pass

    def fn(x):
        return list(gen(x))[0] * 2
    out, whole = _captured(fn, ember.ones(2))
    assert whole


def test_generator_function_left_suspended_in_try_falls_back():
    def gen(x):
        try:
            yield x
            yield x
        finally:
            pass

    def fn(x):
        return next(iter(gen(x))) * 2
    out, whole = _captured(fn, ember.ones(2))
    assert not whole and _fell_back("left suspended inside try or with")


def test_set_of_tensors_falls_back():
    def fn(x):
        s = {x}
        return len(s) * x
    out, whole = _captured(fn, ember.ones(2))
    assert not whole and _fell_back("not constants")


def test_module_built_in_the_frame_may_not_leave_it():
    def fn(x):
        m = ember.nn.ReLU()
        return m(x), m
    (out, m), whole = _captured(fn, ember.ones(2))
    assert not whole and _fell_back("a module the compiled code built")


def test_module_with_parameters_built_in_the_frame_falls_back():
    def fn(x):
        return ember.nn.PReLU()(x) if hasattr(ember.nn, "PReLU") else ember.nn.Linear(2, 2)(x)
    out, whole = _captured(fn, ember.ones(2))
    assert not whole


def test_grad_mode_block_holds_no_op_that_may_raise():
    def fn(x, i):
        with ember.no_grad():
            y = x[i]
        return y
    x = ember.ones(3)
    out, whole = _captured(fn, x, ember.tensor([0, 2]))
    assert not whole and _fell_back("inside a grad-mode block")
    assert ember.is_grad_enabled()


def test_grad_mode_is_restored_when_capture_gives_up_inside_a_block():
    def fn(x):
        with ember.no_grad():
            print("unsupported inside no_grad")
            y = x * 2
        return y
    out, whole = _captured(fn, ember.ones(2))
    assert not whole and ember.is_grad_enabled()


def test_grad_mode_regions_run_in_one_graph_with_default_backend():
    def fn(x):
        with ember.no_grad():
            a = x * 2
        b = x * 3
        return a, b
    x = ember.ones(2).requires_grad_()
    compiled = ember.compile(fn)
    a, b = compiled(x)
    assert not a.requires_grad and b.requires_grad
    assert not counters["unsupported"]
    b.sum().backward()
    assert x.grad.tolist() == [3.0, 3.0]
    assert ember.is_grad_enabled()


def test_to_the_real_device_keeps_the_tensor():
    def fn(x, y):
        return y.to(x.device) is y, x.device
    y = ember.ones(2)
    (same, dev), whole = _captured(fn, ember.ones(2), y)
    assert whole and same is True and str(dev) == "cpu"


def test_yield_from_gives_the_generators_return_value():
    # (torch 2.13 gets r wrong here: None)
    def g(n):
        yield from range(n)
        return 7

    def fn(x):
        def outer():
            r = yield from g(2)
            yield r
        return [x * v for v in outer()]
    out, whole = _captured(fn, ember.ones(2))
    assert whole and [float(t[0]) for t in out] == [0.0, 1.0, 7.0]


def test_stop_iteration_leaving_a_generator_falls_back():
    def gen(it):
        yield next(it)
        yield next(it)       # a RuntimeError in CPython (PEP 479)

    def fn(x):
        try:
            return [x * v for v in gen(iter([1]))]
        except RuntimeError:
            return x
    out, whole = _captured(fn, ember.ones(2))
    assert not whole and float(out[0]) == 1.0
