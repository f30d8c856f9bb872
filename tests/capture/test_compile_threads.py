"""ember.compile across threads, under recursion, and nested in other compiled code."""
import sys
import threading

import numpy as np
import pytest

import ember
from ember.capture import _hook, counters
from run_threads import run_threads

pytestmark = pytest.mark.skipif(not _hook.available, reason="capture needs CPython 3.11")


@pytest.fixture(autouse=True)
def fresh():
    ember.compiler.reset()
    yield
    assert _hook.get_state() is None and _hook.counters()["active_threads"] == 0
    ember.compiler.reset()


def T(*shape, seed=0):
    return ember.from_numpy(np.random.default_rng(seed).standard_normal(shape)
                            .astype(np.float32))


def close(a, b):
    assert a.shape == b.shape and a.dtype == b.dtype
    np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=1e-6, atol=1e-6)


def body(x, w):
    return (x @ w).relu() + x.sum(-1, keepdim=True)


def plain(x):
    return x * 2 + 1


def test_threads_without_capture_convert_nothing():
    """Capture is per thread: while one thread runs compiled code (so the hook is
    installed), other threads' frames run normally, and new threads start off."""
    compiled = ember.compile(body, backend="eager")
    x, w = T(4, 4), T(4, 4, seed=1)
    done = threading.Event()

    def compiled_loop(i):
        while not done.is_set():
            close(compiled(x, w), body(x, w))

    def plain_calls(i):
        for _ in range(2000):
            close(plain(x), x * 2 + 1)
        done.set()
    run_threads(2, lambda i: (compiled_loop, plain_calls)[i](i))
    assert plain.__code__ not in _hook.cached_codes()
    assert _hook.code_mark(plain.__code__) is None
    assert counters["stats"]["calls_captured"] == 1

    seen = []
    with _hook.enable(lambda info, entries: seen.append(info.code)):
        t = threading.Thread(target=plain, args=(x,))   # started from a capturing thread
        t.start()
        t.join()
    assert plain.__code__ not in seen


def test_four_threads_call_one_compiled_function_at_once():
    # (sizes specialised: one entry per shape; automatic dynamic would share one)
    compiled = ember.compile(body, backend="eager", dynamic=False)
    barrier = threading.Barrier(4)
    shapes = [(3, 4), (5, 4), (3, 4), (2, 4)]        # two threads share an entry

    def work(i):
        x, w = T(*shapes[i], seed=i), T(4, 4, seed=10 + i)
        want = body(x, w)
        barrier.wait()
        for _ in range(500):
            close(compiled(x, w), want)
    run_threads(4, work)
    graphs = compiled._ember_compile_context.graphs
    assert 3 <= len(graphs) <= 4         # one per shape (a race may compile one twice)
    assert counters["stats"]["frames_fallback"] == 0


def test_threads_with_different_grad_modes():
    w = T(3).requires_grad_(True)

    def g(x):
        return x * w
    compiled = ember.compile(g, backend="eager")
    barrier = threading.Barrier(4)

    def work(i):
        x = T(3, seed=i)
        barrier.wait()
        for _ in range(200):
            if i % 2:
                with ember.no_grad():
                    assert not compiled(x).requires_grad
            else:
                assert compiled(x).requires_grad
    run_threads(4, work)


def power(x, n):
    return x if n <= 1 else x * power(x, n - 1)


def test_recursive_function_with_constant_depth_is_inlined():
    compiled = ember.compile(power, backend="eager")
    x = T(3)
    for n in (1, 3, 5):
        close(compiled(x, n), power(x, n))
    assert len(compiled._ember_compile_context.graphs) == 3
    assert counters["stats"]["frames_fallback"] == 0


def countdown(x, n):
    if n == 0:
        return x
    return countdown(x + 1, n - 1)


def test_deep_recursion_runs_in_cpython_with_the_right_result():
    compiled = ember.compile(countdown, backend="eager")
    x = T(2)
    close(compiled(x, 300), x + 300)
    # each level breaks at its recursive call, which runs as a frame of its own
    assert "inlining too deep (recursion?)" in counters["graph_break"]
    close(compiled(x, 300), x + 300)


def test_recursion_limit_is_a_clean_recursion_error():
    compiled = ember.compile(countdown, backend="eager")
    with pytest.raises(RecursionError):
        compiled(T(2), sys.getrecursionlimit() + 100)
    close(compiled(T(2), 5), T(2) + 5)


inner = ember.compile(lambda t: t * 3 + 1, backend="eager")


def outer(t):
    return inner(t).relu() - 1


def test_compiled_function_called_inside_another_is_inlined():
    compiled = ember.compile(outer, backend="eager", fullgraph=True)
    before = len(inner._ember_compile_context.graphs)
    x = T(5)
    close(compiled(x), (x * 3 + 1).relu() - 1)
    assert len(compiled._ember_compile_context.graphs) == 1
    assert inner._ember_compile_context.graphs == []
    close(inner(x), x * 3 + 1)                 # on its own it is compiled as usual
    assert len(inner._ember_compile_context.graphs) == before + 1


def test_compiled_module_inside_a_compiled_module():
    lin = ember.nn.Linear(4, 2)
    compiled_lin = ember.compile(lin, backend="eager")

    class Outer(ember.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = compiled_lin

        def forward(self, x):
            return self.inner(x).relu() * self.inner.weight.shape[0]
    net = Outer()
    compiled = ember.compile(net, backend="eager", fullgraph=True)
    x = T(3, 4)
    close(compiled(x), net(x))
    with ember.no_grad():
        lin.weight.mul_(-1)                     # read through the wrapper, live
    close(compiled(x), net(x))
    assert len(compiled._ember_compile_context.graphs) == 1
    assert counters["stats"]["frames_fallback"] == 0


def test_compiled_function_called_from_code_that_fell_back():
    def host(t):
        print_free = inner(t)                   # captured as inner's own frame
        for _ in range(1):
            k = 0
            if t.sum() > 100:                   # a break in a loop whose local k may
                return t                        # be unbound after it: host runs in
        return print_free * 2 + k               # CPython
    compiled = ember.compile(host, backend="eager")
    before = len(inner._ember_compile_context.graphs)
    x = T(4)
    close(compiled(x), (x * 3 + 1) * 2)
    assert counters["stats"]["frames_fallback"] == 1
    # inner's wrapper turns its own callback on: its graph is compiled with its options
    assert compiled._ember_compile_context.graphs == []
    assert len(inner._ember_compile_context.graphs) == before + 1
