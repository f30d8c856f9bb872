"""An op whose result is unused still runs when it may raise on its values, as eager
does: capture keeps every call, and AOT autograd drops dead nodes only by the prims'
own facts (entry.checks_values: index, index_put, scatter_reduce, integer division,
pow), in the forward and the backward."""
import pytest

import ember
from ember.capture import _hook
from ember.ops import registry

pytestmark = pytest.mark.skipif(not _hook.available, reason="capture needs CPython 3.11")

BACKENDS = ["eager", "aot_eager", "llvm"]


@pytest.fixture(autouse=True)
def fresh():
    ember.compiler.reset()
    yield
    ember.compiler.reset()


def dead_index(x, i):
    x[i]                               # noqa: B018 - unused, but may raise
    return x + 1


def dead_mask_assignment(x, m, v):
    y = x * 2
    y[m] = v                           # y is never read again
    return x + 1


def dead_gather(x, i):
    x.gather(0, i)                     # a decomposition into the index prim
    return x * 3


def dead_gather_of_a_0d_tensor(x, i):
    x.sum().gather(0, i)               # 0-d self: index values still checked (fuzz
    return x * 3                       # seed 23 #833)


def dead_integer_division(x, d):
    ember.tensor([6, 3]) // d          # noqa: B018
    return x + 1


CASES = [
    (dead_index, (ember.tensor([0]),), (ember.tensor([5]),)),
    (dead_mask_assignment, (ember.tensor([True, False, False]), ember.ones(1)),
     (ember.tensor([True, False, False]), ember.ones(2))),
    (dead_gather, (ember.tensor([0, 2]),), (ember.tensor([0, 9]),)),
    (dead_gather_of_a_0d_tensor, (ember.tensor(0),), (ember.tensor(5),)),
    (dead_integer_division, (ember.tensor([1, 2]),), (ember.tensor([1, 0]),)),
]


def _outcome(fn, *args):
    try:
        return fn(*args).tolist()
    except Exception as e:   # noqa: BLE001 - compared below
        return type(e)


@pytest.mark.parametrize("grad", [False, True])
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fn,good,bad", CASES, ids=[c[0].__name__ for c in CASES])
def test_dead_ops_raise_as_eager(fn, good, bad, backend, grad):
    x = ember.ones(3, requires_grad=grad)
    compiled = ember.compile(fn, backend=backend)
    assert _outcome(compiled, x, *good) == _outcome(fn, x, *good)
    want = _outcome(fn, x, *bad)
    assert isinstance(want, type) and issubclass(want, Exception)
    assert _outcome(compiled, x, *bad) is want


def test_the_prims_that_check_values():
    checking = {e.qualified_name for e in registry.ENTRIES if e.prim and e.checks_values}
    assert {"index.Tensor", "index_put", "scatter_reduce.two", "floor_divide",
            "remainder", "div", "pow"} <= checking
    assert not any(e.checks_values for e in registry.ENTRIES if e.name in
                   ("add", "mul", "exp", "view", "sum"))
