"""On a cache hit each source is resolved once: the guards' values are the compiled
frame's inputs (no second walk of the attribute and item chains)."""
import pytest

import ember
from ember.capture import _hook
from fresh_compiler import fresh_compiler  # noqa: F401  (autouse)

pytestmark = pytest.mark.skipif(not _hook.available, reason="capture needs CPython 3.11")


class CountingList(list):
    """A list whose item reads (through __getitem__, as guards and inputs read items of
    list subclasses) are counted."""
    reads = 0

    def __getitem__(self, i):
        CountingList.reads += 1
        return list.__getitem__(self, i)


def test_a_hit_walks_each_input_chain_once():
    def f(xs):
        return xs[0] * 2 + xs[1]

    compiled = ember.compile(f, backend="eager")
    xs = CountingList([ember.ones(2), ember.ones(2)])
    compiled(xs)
    CountingList.reads = 0
    for _ in range(5):
        assert compiled(xs).tolist() == [3.0, 3.0]
    assert CountingList.reads == 5 * 2       # xs[0] and xs[1], once per call each


def test_module_parameters_are_read_afresh_on_every_call():
    lin = ember.nn.Linear(2, 2)
    compiled = ember.compile(lin, backend="eager")
    x = ember.ones(1, 2)
    compiled(x)
    with ember.no_grad():
        lin.weight.fill_(0.0)
        lin.bias.fill_(1.0)
    assert compiled(x).tolist() == [[1.0, 1.0]]
    lin.weight = ember.nn.Parameter(ember.ones(2, 2))     # a new object at the same path
    assert compiled(x).tolist() == [[3.0, 3.0]]


def test_dict_items_read_through_the_memo_follow_every_change():
    """Dict items (a dict argument, a module's _parameters) resolve through a memo of
    (dict, version) and its fast path in guards.c resolve: a value written into the
    same dict, another dict at the same source, and a parameter set through
    _parameters are each read afresh."""
    def f(d):
        return d["a"] * 2 + d["b"]

    compiled = ember.compile(f, backend="eager")
    b = ember.ones(2)
    d = {"a": ember.ones(2), "b": b}
    compiled(d)
    assert compiled(d).tolist() == [3.0, 3.0]
    d["a"] = ember.full((2,), 2.0)                         # the same dict, a new version
    assert compiled(d).tolist() == [5.0, 5.0]
    other = {"a": ember.full((2,), 3.0), "b": b}           # another dict, same source
    assert compiled(other).tolist() == [7.0, 7.0]
    assert compiled(d).tolist() == [5.0, 5.0]
    del d["a"]
    d["a"] = ember.full((2,), 4.0)                         # removed and set again
    d["b"], d["a"] = d["a"], d["b"]                          # keys kept, values swapped
    assert compiled(d).tolist() == [6.0, 6.0]

    lin = ember.nn.Linear(2, 2)
    m = ember.compile(lin, backend="eager")
    x = ember.ones(1, 2)
    m(x)
    m(x)
    lin._parameters["weight"] = ember.nn.Parameter(ember.full((2, 2), 2.0))
    with ember.no_grad():
        lin.bias.fill_(0.0)
    assert m(x).tolist() == [[4.0, 4.0]]
