"""In-place writes into an input, directly or through any view of it, are never dropped:
capture tells a view by its storage (so reshape, flatten, contiguous and to count only
when they return views) and an in-place op by the op table's Tensor(a!). Such a frame is
captured whole ([aot-2]: it used to run in CPython): the graph returns the input's new
value and the compiled function writes it back after the call, with eager's version
counter. A write autograd would follow into an input that requires grad still runs in
CPython, with its reason counted."""
import numpy as np
import pytest

import ember
from ember.capture import CaptureError, _hook, counters
from fresh_compiler import fresh_compiler  # noqa: F401  (autouse)

pytestmark = pytest.mark.skipif(not _hook.available, reason="capture needs CPython 3.11")

VIEWS_OF_INPUT = {
    "reshape_fn": lambda x: ember.reshape(x, (-1,)).add_(1),
    "reshape_method": lambda x: x.reshape(-1).add_(1),
    "flatten": lambda x: x.flatten().mul_(2),
    "narrow": lambda x: x.narrow(0, 0, 1).zero_(),
    "unbind": lambda x: x.unbind(0)[1].fill_(7),
    "chunk": lambda x: x.chunk(2, 1)[0].sub_(1),
    "split": lambda x: x.split(1)[0].neg_(),
    "T": lambda x: x.T.add_(3),
    "mT": lambda x: x.mT.add_(3),
    "t": lambda x: x.t().add_(3),
    "detach": lambda x: x.detach().add_(1),
    "contiguous": lambda x: x.contiguous().add_(1),
    "to_same_dtype": lambda x: x.to(ember.float32).add_(1),
    "view_as": lambda x: x.view_as(x).add_(1),
    "getitem": lambda x: x[0].add_(1),
    "setitem": "x[:, 0] = 9.0",
    "setitem_view": "v = x[1]\n    v[0] = 9.0",
    "setitem_mask": "x[x > 2] = 0.0",
    "iadd_operator": "v = x.view(-1)\n    v += 1",
    "imul_input": "x *= 2",
    "unsqueeze_squeeze": lambda x: x.unsqueeze(0).squeeze(0).clamp_(max=0.5),
    "copy_into_view": lambda x: x[:, 1].copy_(ember.zeros(2)),
}


def _x():
    return ember.from_numpy(np.arange(6, dtype=np.float32).reshape(2, 3))


@pytest.mark.parametrize("backend", ["eager", "aot_eager", "llvm"])
@pytest.mark.parametrize("name", sorted(VIEWS_OF_INPUT))
def test_writes_through_views_of_inputs_reach_the_input(name, backend):
    op = VIEWS_OF_INPUT[name]
    if isinstance(op, str):     # a statement
        ns = {"ember": ember}
        exec(f"def fn(x):\n    {op}\n    return x * 2\n", ns)
        fn = ns["fn"]
    else:
        def fn(x):
            op(x)
            return x * 2

    want_x = _x()
    want = fn(want_x)
    x = _x()
    got = ember.compile(fn, backend=backend, fullgraph=True)(x)
    np.testing.assert_array_equal(x.numpy(), want_x.numpy())
    np.testing.assert_array_equal(got.numpy(), want.numpy())
    assert x._version == want_x._version
    assert counters["stats"]["frames_fallback"] == 0
    assert counters["stats"]["unique_graphs"] == 1
    assert not counters["unsupported"]
    again = _x()
    ember.compile(fn, backend=backend)(again)           # the cached graph, called again
    np.testing.assert_array_equal(again.numpy(), want_x.numpy())
    assert again._version == want_x._version


@pytest.mark.parametrize("backend", ["eager", "aot_eager", "llvm"])
def test_a_write_autograd_follows_into_an_input_that_requires_grad_falls_back(backend):
    """Eager refuses it for a leaf (and the fake of an input is one): the frame breaks
    there and CPython runs the add_, which raises eager's error, with the reason
    counted."""
    def fn(x):
        x.add_(1)
        return x * 2

    x = ember.ones(3, requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        ember.compile(fn, backend=backend)(x)
    assert any("in-place add_ on an input that requires grad" in r
               for r in counters["graph_break"])
    with ember.no_grad():                                  # an optimizer's step
        y = ember.compile(fn, backend=backend, fullgraph=True)(x)
    assert x.tolist() == [2.0] * 3 and y.tolist() == [4.0] * 3 and x._version == 1
    assert x.grad_fn is None and x.requires_grad


@pytest.mark.parametrize("backend", ["eager", "aot_eager", "llvm"])
def test_a_copy_made_by_reshape_is_not_the_input(backend):
    """x.t().reshape(-1) must copy (a transposed tensor has no flat view): writing into
    it leaves x as it is, and the frame is captured."""
    def fn(x):
        y = x.t().reshape(-1)
        y.add_(1)
        return y

    x = _x()
    want = fn(_x())
    got = ember.compile(fn, backend=backend, fullgraph=True)(x)
    np.testing.assert_array_equal(x.numpy(), _x().numpy())
    np.testing.assert_array_equal(got.numpy(), want.numpy())
    assert counters["stats"]["frames_fallback"] == 0


def test_a_module_buffer_updated_in_place_is_applied():
    class M(ember.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("count", ember.zeros(()))

        def forward(self, x):
            self.count.add_(1)
            return x + self.count

    m = M()
    out = ember.compile(m, backend="llvm")(ember.zeros(2))
    assert m.count.item() == 1.0 and out.tolist() == [1.0, 1.0]


_RETURNS_SELF = {
    "flatten": lambda t: t.flatten(),
    "contiguous": lambda t: t.contiguous(),
    "to_own_dtype": lambda t: t.to(ember.float64),
    "double": lambda t: t.double(),
    "with_another_output": lambda t: (t.contiguous(), t * 2)[0],
}


@pytest.mark.parametrize("backend", ["eager", "aot_eager", "llvm"])
@pytest.mark.parametrize("name", sorted(_RETURNS_SELF))
def test_an_op_returning_its_argument_returns_the_same_object(name, backend):
    """Found by the fuzzer: eager's flatten of a 1-d tensor (contiguous of a contiguous
    one, to() of its own dtype) returns the tensor itself; compiled code returned a new
    tensor hanging from the compiled node, so a second backward raised and writes into
    the result missed the input."""
    fn = _RETURNS_SELF[name]
    x = ember.ones(3, dtype=ember.float64, requires_grad=True)
    y = ember.compile(fn, backend=backend)(x)
    assert y is x and y.grad_fn is None
    w = ember.full((3,), 2.0, dtype=ember.float64)
    y.backward(w)
    y.backward(w)                          # a leaf: nothing was freed
    np.testing.assert_array_equal(x.grad.numpy(), [4.0, 4.0, 4.0])
    assert not counters["unsupported"]
