"""Values a frame only moves are not guarded (capture/variables.py ValueVar): a local
(a resume function's argument included) whose value the frame stores, passes on to
what runs in CPython at a break, or returns, without reading it, is fetched again on
each call instead of being guarded by value or identity. The values .item(), .tolist()
and .numpy() return at a break are new each call: guarded, each call compiled the
resume function again until the recompile limit sent the rest of the frame to CPython.
A value the frame does read (arithmetic, a branch, an attribute) is still guarded."""
import numpy as np
import pytest

import ember
from ember.capture import _hook, counters
from fresh_compiler import fresh_compiler  # noqa: F401  (autouse)

pytestmark = pytest.mark.skipif(not _hook.available, reason="capture needs CPython 3.11")

BACKENDS = ["eager", "aot_eager", "llvm"]


def same(got, want):
    if isinstance(want, ember.Tensor):
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6)
    elif isinstance(want, (tuple, list)):
        assert type(got) is type(want) and len(got) == len(want)
        for g, w in zip(got, want):
            same(g, w)
    elif isinstance(want, np.ndarray):
        np.testing.assert_array_equal(got, want)
    else:
        assert got == want and type(got) is type(want)


def run_many(fn, backend, capsys, calls=12):
    compiled = ember.compile(fn, backend=backend)
    for i in range(calls):
        x = ember.arange(3, dtype=ember.float32) * (i + 1)
        want = fn(x)
        printed = capsys.readouterr().out
        same(compiled(x), want)
        assert capsys.readouterr().out == printed
    return counters["recompiles"]


def tolist_returned(x):
    y = x * 2
    values = y.tolist()
    return y + 1, values


def numpy_in_a_dead_local(x):
    y = x * 2
    a = y.numpy()          # noqa: F841 - bound, never read again
    return y + 1


def item_printed(x):
    y = x * 2
    v = y.sum().item()
    print("loss", v)
    return y - 1


def item_moved_into_a_tuple(x):
    y = x * 2
    v = y.max().item()
    pair = (v, "max")
    return y.sin(), pair


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fn", [tolist_returned, numpy_in_a_dead_local, item_printed,
                                item_moved_into_a_tuple], ids=lambda f: f.__name__)
def test_a_value_only_moved_compiles_once(fn, backend, capsys):
    recompiles = run_many(fn, backend, capsys)
    assert not recompiles, dict(recompiles)
    assert counters["stats"]["frames_fallback"] == 0


def item_used_in_the_graph(x):
    y = x * 2
    v = y.sum().item()
    return y + v


def item_branched_on(x):
    y = x * 2
    v = y.sum().item()
    if v > 20:
        return y + 1
    return y - 1


def numpy_array_read(x):
    y = x * 2
    a = y.numpy()
    return y + float(a[1])


@pytest.mark.parametrize("fn", [item_used_in_the_graph, item_branched_on, numpy_array_read],
                         ids=lambda f: f.__name__)
def test_a_value_read_is_still_guarded(fn, capsys):
    """Equal to eager on every call: the value is guarded, so another value compiles
    again (counted) instead of reusing the graph made for the first."""
    recompiles = run_many(fn, "eager", capsys, calls=5)
    assert sum(recompiles.values()) >= 1, dict(recompiles)


class Obj:
    def __init__(self, k):
        self.k = k


@pytest.mark.parametrize("backend", BACKENDS)
def test_two_locals_one_object_then_two(backend):
    """Two arguments that were one object at capture: the graph's treatment of them as
    one is guarded (ALIAS), so two distinct objects later compile again."""
    def fn(x, a, b):
        b.k = b.k + 1
        return x + 1, a, b

    compiled = ember.compile(fn, backend=backend)
    o = Obj(1)
    compiled(ember.ones(2), o, o)
    o, p = Obj(1), Obj(2)
    got = compiled(ember.ones(2), o, p)
    assert got[1] is o and got[2] is p
    assert (o.k, p.k) == (1, 3)


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_object_moved_then_read_after_another_break(backend, capsys):
    """An object only moved by the first resume function and read by the second: the
    second guards it."""
    def fn(x, box):
        y = x * 2
        print("a")
        y = y + box.k
        print("b")
        return y * box.k

    compiled = ember.compile(fn, backend=backend)
    for k in (1, 2, 3):
        same(compiled(ember.ones(2), Obj(k)), fn(ember.ones(2), Obj(k)))
