"""The constructs [capture-2]'s second round closed (max()/min() of a tensor and a
number, ember.tensor/as_tensor of Python data, contextmanager generators with try or
with inside, __exit__ swallowing exceptions, frozen dataclasses, own __setattr__ and
__slots__): their catalogue cases under every backend, and the edges where capture must
break or fall back (counted) to stay exact."""
from __future__ import annotations

import contextlib
import dataclasses

import numpy as np
import pytest

import ember
from catalogue import CASES, make_namespace
from ember.capture import _hook, counters
from test_catalogue import assert_same
from fresh_compiler import fresh_compiler  # noqa: F401  (autouse)

pytestmark = pytest.mark.skipif(not _hook.available, reason="capture needs CPython 3.11")

NEW_CASES = [
    "builtin_max_tensor_and_number_scales", "builtin_min_max_numbers_in_place",
    "builtin_max_norm_floor", "tensor_of_python_numbers", "tensor_of_sizes",
    "tensor_of_nested_lists", "as_tensor_of_values_and_of_a_tensor",
    "contextmanager_try_finally", "contextmanager_with_block_inside",
    "contextmanager_try_except_nested", "exit_returning_true_swallows_raise",
    "exit_swallows_keyerror_of_a_lookup", "contextlib_suppress_python_error",
    "frozen_dataclass_constructed_in_forward", "frozen_dataclass_returned",
    "own_setattr_logs_writes", "slots_object_made_and_mutated",
    "object_made_mutated_and_stored", "builtin_max_of_float_argument_scales_parameter",
    "contextmanager_catches_lookup_error_of_block",
    "contextmanager_finally_then_outer_except", "contextmanager_swallows_raise_in_block",
    "tensor_of_a_list_of_reductions", "tensor_of_nested_indexed_elements",
    "tensor_of_reductions_with_dtypes",
    "builtin_max_of_reduction_and_number_times_attribute",
    "builtin_max_min_of_tensor_and_number_returned",
    "builtin_max_of_tensor_and_number_scaled_by_number"]
BACKENDS = ("eager", "aot_eager", "llvm")


def _case(name):
    return next(c for c in CASES if c.name == name)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", NEW_CASES)
def test_new_case_on_every_backend(name, backend):
    case = _case(name)
    ns_e, args_e, kwargs_e = make_namespace(ember, case)
    want = ns_e["fn"](*args_e, **kwargs_e)
    ns, args, kwargs = make_namespace(ember, case)
    compiled = ember.compile(ns["fn"], backend=backend)
    got = compiled(*args, **kwargs)
    assert dict(counters["unsupported"]) == {}
    assert counters["stats"]["frames_fallback"] == 0
    assert counters["stats"]["graph_breaks"] == 0, dict(counters["graph_break"])
    assert len(compiled._ember_compile_context.graphs) <= case.graphs
    assert_same(got, want)
    assert_same((args, kwargs), (args_e, kwargs_e))
    assert_same(ns.get("LOG"), ns_e.get("LOG"))


def _compare(fn, *args, backend="eager"):
    """fn compiled and eager on copies of args: (compiled result, eager result)."""
    clone = [a.clone() if isinstance(a, ember.Tensor) else a for a in args]
    want = fn(*clone)
    got = ember.compile(fn, backend=backend)(*args)
    return got, want


# ------------------------------------------------------------------ max() / min()

@pytest.mark.parametrize("backend", BACKENDS)
def test_max_of_tensor_and_number_escaping_keeps_the_type_without_a_break(backend):
    """The result goes out as is: a number or the tensor, by the data; the frame
    program calls max()/min() on the graph's outputs after the graph (no break), also
    after `* 2` or a comparison with a number."""
    def fn(x):
        return max(x.sum(), 0.5), min(x.sum(), 100), max(x.sum(), 0.5) * 2, \
            min(x.sum(), 0.5) > 0
    for x in (ember.tensor([1.0, 2.0]), ember.tensor([-1.0, -2.0])):
        ember.compiler.reset()
        got, want = _compare(fn, x, backend=backend)
        assert [type(v) for v in got] == [type(v) for v in want]
        assert [float(v) for v in got] == [float(v) for v in want]
        assert counters["stats"]["graph_breaks"] == 0
        assert counters["stats"]["frames_fallback"] == 0


def test_max_of_tensor_and_number_in_a_branch_breaks_at_the_branch():
    """`if max(s, 0.5) > 1:` depends on the data: one break, at the branch (as torch's),
    with the value rebuilt for CPython."""
    def fn(x):
        m = max(x.sum(), 0.5)
        if m > 1:
            return x * 2
        return x - m
    for x in (ember.tensor([1.0, 2.0]), ember.tensor([-1.0, -2.0])):
        ember.compiler.reset()
        got, want = _compare(fn, x)
        np.testing.assert_array_equal(got.numpy(), want.numpy())
        assert counters["stats"]["graph_breaks"] == 1
        assert counters["stats"]["frames_fallback"] == 0


def test_max_of_a_tensor_and_a_number_returned_is_eagers_item_with_gradients():
    """max(t, 0.5) returned with t requiring grad: eager's item (the number, or the
    tensor with its autograd history) by the data, with no break, and eager's
    gradients (None where eager's backward does not reach)."""
    def h(x):
        return max(x.sum(), 0.5), min(x.sum(), 0.5) * 3

    for backend in ("eager", "aot_eager"):
        for data in ([1.0, 2.0], [-1.0, 0.25]):
            ember.compiler.reset()
            counters.clear()
            x1 = ember.tensor(data, requires_grad=True)
            x2 = x1.detach().clone().requires_grad_()
            want = h(x1)
            got = ember.compile(h, backend=backend)(x2)
            assert [type(v) for v in got] == [type(v) for v in want]
            assert counters["stats"]["graph_breaks"] == 0
            assert counters["stats"]["frames_fallback"] == 0
            for g, w in zip(got, want):
                if isinstance(w, ember.Tensor):
                    assert g.item() == w.item() and g.requires_grad == w.requires_grad
                    g.backward()
                    w.backward()
                else:
                    assert g == w
            assert (x1.grad is None) == (x2.grad is None)
            if x1.grad is not None:
                np.testing.assert_array_equal(x2.grad.numpy(), x1.grad.numpy())


def test_max_of_number_and_tensor_requiring_grad_breaks_with_eagers_gradients():
    def fn(x, w):
        return w * max(x.sum(), 0.5)
    x1 = ember.tensor([-1.0, -2.0], requires_grad=True)
    w1 = ember.ones(3, requires_grad=True)
    x2, w2 = (t.detach().clone().requires_grad_() for t in (x1, w1))
    fn(x1, w1).sum().backward()
    ember.compile(fn, backend="aot_eager")(x2, w2).sum().backward()
    assert x1.grad is None and x2.grad is None
    np.testing.assert_array_equal(w2.grad.numpy(), w1.grad.numpy())
    assert any("requires grad" in r for r in counters["graph_break"])


@pytest.mark.parametrize("backend", BACKENDS)
def test_max_of_tensor_and_number_ties_and_nan_as_eager(backend):
    def fn(x, y):
        return y * max(x, 0.5) + min(-1, x, 2.0) * y
    y = ember.arange(3.0) + 1
    for v in (0.5, float("nan"), -7.0, 9.0):
        ember.compiler.reset()
        got, want = _compare(fn, ember.tensor(v), y, backend=backend)
        np.testing.assert_array_equal(got.numpy(), want.numpy())
        assert counters["stats"]["graph_breaks"] == 0


def test_max_of_a_one_element_tensor_of_another_dtype_breaks():
    """A (1,)-shaped float64 item is dimensioned: y * it would be float64, y * 0.5
    float32; so no graph op."""
    def fn(x, y):
        return y * max(x, 0.5)
    got, want = _compare(fn, ember.tensor([2.0], dtype=ember.float64), ember.ones(3))
    assert got.dtype == want.dtype and got.shape == want.shape
    assert counters["stats"]["graph_breaks"] == 1


# ------------------------------------------------------------------ ember.tensor

def test_tensor_of_python_data_is_graph_ops_and_a_new_tensor_per_call():
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    def fn(x):
        return torch_tensor([[1, 2], [3, x.shape[0]]])
    torch_tensor = ember.tensor
    compiled = ember.compile(fn, backend=backend)
    a, b = compiled(ember.ones(4)), compiled(ember.ones(4))
    assert a is not b and a.dtype == ember.int64
    np.testing.assert_array_equal(a.numpy(), [[1, 2], [3, 4]])
    a.add_(1)
    np.testing.assert_array_equal(b.numpy(), [[1, 2], [3, 4]])
    assert len(graphs) == 1 and counters["stats"]["graph_breaks"] == 0
    targets = {n.target for n in graphs[0].graph.nodes if n.op == "call_function"}
    assert ember.full in targets and ember.stack in targets


def test_tensor_of_sizes_under_dynamic_shapes_follows_the_size():
    def fn(x):
        return x.sum() * ember.tensor([x.shape[0], 1.5])
    compiled = ember.compile(fn, backend="eager", dynamic=True)
    for n in (3, 5, 8):
        x = ember.ones(n)
        np.testing.assert_allclose(compiled(x).numpy(), fn(x).numpy())
    assert counters["stats"]["frames_fallback"] == 0


@pytest.mark.parametrize("data, dtype, reason", [
    ("[x, x]", "None", "raised ValueError: only one element"),
    ("[x.sum(), 200]", "ember.uint8", "holding tensors into ember.uint8"),
    ("[[1, 2], [3]]", "None", "raised"),
    ("[1, 300]", "ember.uint8", "raised"),
])
def test_tensor_data_that_capture_cannot_make_breaks_and_matches_eager(data, dtype, reason):
    ns = {"ember": ember}
    exec(f"def fn(x):\n    return x * 2, ember.tensor({data}, dtype={dtype})\n", ns)
    fn = ns["fn"]
    x = ember.ones(2)
    try:
        want = fn(x)
    except Exception as e:    # noqa: BLE001 - the compiled call raises the same
        with pytest.raises(type(e)) as got:
            ember.compile(fn, backend="eager")(x)
        assert str(got.value) == str(e)
    else:
        got = ember.compile(fn, backend="eager")(x)
        assert_same(got, want)
    assert any(reason in r for r in counters["graph_break"]), dict(counters["graph_break"])


TENSOR_DTYPES = [ember.float16, ember.bfloat16, ember.float32, ember.float64,
                 ember.int64, ember.int32, ember.uint8, ember.bool]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("target", [None, ember.float16, ember.bfloat16, ember.float32,
                                    ember.float64, ember.int64], ids=str)
@pytest.mark.parametrize("dtype", TENSOR_DTYPES, ids=str)
def test_tensor_of_data_holding_tensors_is_eagers_bits(dtype, target, backend):
    """ember.tensor([t0, 2.5, t1[1:2]], dtype=target) with one-element tensors of every
    dtype: a graph op (no break) whose dtype, shape and bits are eager's (.item(),
    one NumPy array, one cast), detached; conversions the graph cannot make exactly
    (floats into int64) break, eager raising or converting."""
    def fn(x, y):
        return ember.tensor([[x.sum(), 2.5], [y[0], y[1:2]]], dtype=target), \
            ember.tensor([x.max(), y[0]], dtype=target)

    x = (ember.arange(3, dtype=ember.float64) * 1.37 - 0.6).to(dtype).requires_grad_(
        dtype.is_floating_point)
    y = ember.tensor([3.3, -0.7, 1.0]).to(dtype)
    want = fn(x, y)
    ember.compiler.reset()
    counters.clear()
    got = ember.compile(fn, backend=backend)(x, y)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape and not g.requires_grad
        assert g.numpy().tobytes() == w.numpy().tobytes()
    # (floats into int64: the break's live views of y cannot cross it, so the frame
    # runs whole in CPython, counted)
    floats_into_int = target is ember.int64        # (2.5 is in the data)
    assert counters["stats"]["graph_breaks"] + counters["stats"]["frames_fallback"] == \
        (1 if floats_into_int else 0), dict(counters["graph_break"])


def test_as_tensor_of_a_list_of_reductions_is_a_new_tensor_per_call():
    def fn(a, b):
        return ember.as_tensor([a.sum(), b.sum()], dtype=ember.float64)
    compiled = ember.compile(fn, backend="eager")
    a, b = ember.ones(3), ember.arange(4.0)
    r1, r2 = compiled(a, b), compiled(a, b)
    assert r1 is not r2 and r1.dtype == ember.float64
    np.testing.assert_array_equal(r1.numpy(), [3.0, 6.0])
    assert counters["stats"]["graph_breaks"] == 0


def test_tensor_requiring_grad_made_inside_breaks():
    def fn(x):
        w = ember.tensor([1.0, 2.0], requires_grad=True)
        return (x * w).sum(), w
    (got, w), (want, w_e) = _compare(fn, ember.ones(2))
    assert w.requires_grad and w.is_leaf
    assert float(got) == float(want)
    assert any("requires_grad" in r for r in counters["graph_break"])


# ------------------------------------------------------------------ generators, `with`

def test_generator_left_suspended_inside_try_is_not_captured_and_runs_its_finally():
    log = []

    def gen():
        try:
            yield 1
            yield 2
        finally:
            log.append("finally")

    def fn(x):
        for v in gen():
            x = x + v
            break
        log.append("after loop")
        return x
    want = fn(ember.zeros(2))
    eager_log, log[:] = list(log), []
    got = ember.compile(fn, backend="eager")(ember.zeros(2))
    np.testing.assert_array_equal(got.numpy(), want.numpy())
    assert log == eager_log == ["finally", "after loop"]
    assert any("left suspended" in r for r in counters["unsupported"])


def test_contextmanager_whose_block_raises_is_captured_whole():
    """contextmanager's __exit__ throws the exception into the generator: the
    interpreter raises it in the generator's frame at its yield, where its `except`
    and `finally` handle it (as CPython's throw()); one graph, no break, as torch."""
    log = []

    @contextlib.contextmanager
    def scope():
        try:
            yield
        except KeyError:
            log.append("caught")
        finally:
            log.append("finally")

    def fn(x, d):
        with scope():
            x = x + d["missing"]
        return x * 2
    for backend in BACKENDS:
        ember.compiler.reset()
        counters.clear()
        log[:] = []
        want = fn(ember.ones(2), {})
        eager_log, log[:] = list(log), []
        compiled = ember.compile(fn, backend=backend)
        got = compiled(ember.ones(2), {})
        np.testing.assert_array_equal(got.numpy(), want.numpy())
        assert log == eager_log == ["caught", "finally"]
        assert counters["stats"]["frames_fallback"] == 0
        assert counters["stats"]["graph_breaks"] == 0
        assert len(compiled._ember_compile_context.graphs) == 1
        log[:] = []
        compiled(ember.ones(2), {})                      # a cache hit: the same effects
        assert log == eager_log


def test_exception_the_contextmanager_lets_out_raises_as_eager():
    """The generator's finally runs and the exception goes on out of the frame: the
    frame runs in CPython (counted), eager's exception and effects."""
    log = []

    @contextlib.contextmanager
    def scope():
        try:
            yield
        finally:
            log.append("finally")

    def lookup(x, d):
        with scope():
            x = x + d["missing"]
        return x

    def raising(x):
        with scope():
            x = x + 1
            raise ValueError("v")
        return x
    for fn, args in ((lookup, (ember.ones(2), {})), (raising, (ember.ones(2),))):
        ember.compiler.reset()
        counters.clear()
        log[:] = []
        with pytest.raises((KeyError, ValueError)) as want:
            fn(*args)
        eager_log, log[:] = list(log), []
        with pytest.raises(want.type) as got:
            ember.compile(fn, backend="eager")(*args)
        assert str(got.value) == str(want.value)
        assert log == eager_log == ["finally"]


def test_throw_into_a_generator_that_yields_again_raises_as_eager():
    """A contextmanager whose generator catches the exception and yields again:
    contextlib raises RuntimeError("generator didn't stop after throw()")."""
    @contextlib.contextmanager
    def stubborn():
        try:
            yield
        except ValueError:
            yield

    def fn(x):
        with stubborn():
            x = x + 1
            raise ValueError("v")
        return x
    with pytest.raises(RuntimeError) as want:
        fn(ember.ones(2))
    with pytest.raises(RuntimeError) as got:
        ember.compile(fn, backend="eager")(ember.ones(2))
    assert str(got.value) == str(want.value)


def test_exit_reading_the_traceback_is_not_captured():
    seen = []

    class Inspect:
        def __enter__(self):
            return self

        def __exit__(self, typ, value, tb):
            seen.append(tb.tb_lineno > 0)
            return True

    def fn(x):
        with Inspect():
            x = x + 1
            raise ValueError("v")
        return x
    want = fn(ember.ones(2))
    got = ember.compile(fn, backend="eager")(ember.ones(2))
    np.testing.assert_array_equal(got.numpy(), want.numpy())
    assert seen == [True, True]
    assert counters["stats"]["frames_fallback"] + counters["stats"]["graph_breaks"] >= 1


def test_exit_returning_false_lets_the_exception_out_as_eager():
    log = []

    class Note:
        def __enter__(self):
            return self

        def __exit__(self, typ, value, tb):
            log.append(typ.__name__)
            return False

    def fn(x, d):
        with Note():
            return x + d["k"]
    with pytest.raises(KeyError):
        fn(ember.ones(2), {})
    with pytest.raises(KeyError):
        ember.compile(fn, backend="eager")(ember.ones(2), {})
    assert log == ["KeyError", "KeyError"]


# ------------------------------------------------------------------ objects

@dataclasses.dataclass(frozen=True)
class Frozen:
    a: ember.Tensor
    n: int = 1


def test_frozen_dataclass_written_after_init_raises_as_eager():
    def fn(x):
        f = Frozen(x * 2)
        f.n = 3
        return f.a
    with pytest.raises(dataclasses.FrozenInstanceError) as want:
        fn(ember.ones(2))
    with pytest.raises(dataclasses.FrozenInstanceError) as got:
        ember.compile(fn, backend="eager")(ember.ones(2))
    assert str(got.value) == str(want.value)


def test_own_setattr_object_returned_is_rebuilt_past_its_setattr():
    """The frame ran the class's __setattr__ (interpreted): the object the program
    rebuilds gets its attributes without running it again (no doubled log)."""
    calls = []

    class Logged:
        def __setattr__(self, name, value):
            calls.append(name)
            object.__setattr__(self, name, value * 2 if name == "k" else value)

    def fn(x):
        o = Logged()
        o.t = x + 1
        o.k = 5
        return o
    want = fn(ember.ones(2))
    eager_calls, calls[:] = list(calls), []
    compiled = ember.compile(fn, backend="eager")
    got = compiled(ember.ones(2))
    assert calls == eager_calls == ["t", "k"]
    assert got.k == want.k == 10 and list(vars(got)) == list(vars(want))
    np.testing.assert_array_equal(got.t.numpy(), want.t.numpy())
    assert counters["stats"]["graph_breaks"] == 0 and counters["stats"]["frames_fallback"] == 0


def test_slots_object_reading_an_unset_slot_raises_as_eager():
    class S:
        __slots__ = ("a", "b")

    def fn(x):
        s = S()
        s.a = x
        return s.a + s.b
    with pytest.raises(AttributeError):
        fn(ember.ones(2))
    with pytest.raises(AttributeError):
        ember.compile(fn, backend="eager")(ember.ones(2))


def test_slots_object_returned_keeps_its_slots():
    class P:
        __slots__ = ("x", "y")

        def __init__(self, x):
            self.x = x
            self.y = None

    def fn(t):
        p = P(t * 2)
        p.y = p.x.sum()
        return p
    got = ember.compile(fn, backend="llvm")(ember.ones(3))
    assert type(got) is P
    np.testing.assert_array_equal(got.x.numpy(), [2.0, 2.0, 2.0])
    assert float(got.y) == 6.0
    assert counters["stats"]["graph_breaks"] == 0 and counters["stats"]["frames_fallback"] == 0
