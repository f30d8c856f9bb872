"""Classes of failures the differential fuzzer found (README.md here), each kept as a
regression test: compiled under llvm and aot_eager, values, inputs after the call and
gradients as eager computes them, and no llvm fallback for an internal error."""
import numpy as np
import pytest

import ember
from ember.capture import _hook, counters

pytestmark = pytest.mark.skipif(not _hook.available, reason="capture needs CPython 3.11")


@pytest.fixture(autouse=True)
def fresh():
    ember.compiler.reset()
    counters.clear()
    yield
    assert not counters["llvm_fallback"], dict(counters["llvm_fallback"])
    ember.compiler.reset()


def run(fn, make_inputs, backend, grad_weights_seed=0):
    """(outputs, inputs after the call, grads of the inputs requiring grad)."""
    inputs = make_inputs()
    out = fn(*inputs) if backend is None else ember.compile(fn, backend=backend)(*inputs)
    outs = out if isinstance(out, tuple) else (out,)
    rng = np.random.default_rng(grad_weights_seed)
    diff = [o for o in outs if o.requires_grad]
    if diff:
        ember.autograd.backward(diff, grad_tensors=[
            ember.from_numpy(rng.standard_normal(tuple(o.shape)).astype(o.detach().numpy().dtype))
            if o.dim() else ember.tensor(1.0, dtype=o.dtype) for o in diff])
    leaves = [x for x in inputs if x.requires_grad and x.is_leaf]
    return ([o.detach().numpy().copy() for o in outs],
            [x.detach().numpy().copy() for x in inputs],
            [None if x.grad is None else x.grad.numpy().copy() for x in leaves])


def check(fn, make_inputs):
    want = run(fn, make_inputs, None)
    for backend in ("aot_eager", "llvm"):
        got = run(fn, make_inputs, backend)
        for w, g in zip(want, got):
            for a, b in zip(w, g):
                if a is None or b is None:
                    assert a is None and b is None, backend
                else:
                    np.testing.assert_allclose(b, a, rtol=1e-6, atol=1e-6, err_msg=backend)


# ------------------------------------------------------------------ AOT partitioner

def test_an_input_written_into_is_never_saved_for_backward_as_is():
    """Fuzz seed 0, #2302: the min cut saved input x0 (cheaper than x0 + x1) and the
    backward computed x0 + x1 again after the call had written 3 into x0."""
    def f(x0, x1):
        v0 = x0 + x1
        v1 = v0.cumprod(-2)
        x0.transpose(0, -1).fill_(3)
        return v1

    def inputs():
        rng = np.random.default_rng(1)
        x0 = ember.from_numpy(rng.standard_normal((2, 3, 4)).astype(np.float32))
        x1 = ember.from_numpy(rng.standard_normal((3, 4))).requires_grad_()
        return x0, x1

    check(f, inputs)


# ------------------------------------------------------------------ llvm internal errors
# classes the fuzzer reported as llvm fallbacks for an internal error (issue 18 item 5)

def test_a_reduction_over_dims_of_size_one():
    """"reduce in a kernel without reduced dims": sums and means over dims of size 1,
    and over no dim of a 0-dim tensor."""
    def f(x, s):
        return x.sum(1), x.mean((1, 3), keepdim=True), s.sum(), (x * 2).amax(1), s.mean()

    def inputs():
        rng = np.random.default_rng(3)
        return (ember.from_numpy(rng.standard_normal((3, 1, 4, 1)).astype(np.float32))
                .requires_grad_(),
                ember.from_numpy(np.array(1.5, dtype=np.float32)).requires_grad_())

    check(f, inputs)


def test_sort_then_floor_under_grad():
    """A sort followed by floor under grad (floor's gradient is zero)."""
    def f(x):
        v, i = x.sort(-1)
        return v.floor() + v * 0.5, i

    def inputs():
        rng = np.random.default_rng(4)
        return (ember.from_numpy(rng.standard_normal((4, 7)).astype(np.float32) * 3)
                .requires_grad_(),)

    check(f, inputs)


@pytest.mark.parametrize("backend", ["eager", "aot_eager", "llvm"])
def test_a_break_inside_an_inlined_call_whose_frame_made_a_recursive_closure(backend,
                                                                           capsys):
    """seed 5 #141: a break (NumPy's array in ember.tensor, which capture now makes as
    graph ops) inside an inlined call whose frame made a function over its own cell;
    building the program went round that cycle until RecursionError (an internal error,
    the frame run in CPython). The cycle is refused and the break moves out a frame."""
    def helper(y):
        def rec(n):
            return 0 if n == 0 else rec(n - 1) + 1
        z = y * rec(2)
        print("break")
        return z + rec(1)

    def f(x1):
        return helper(x1 * 2) * 3

    x = ember.randn(2, 3, 4, dtype=ember.float64)
    assert ember.equal(ember.compile(f, backend=backend)(x), f(x))
    assert not any("internal error" in r for r in counters["unsupported"]), \
        dict(counters["unsupported"])
    assert any("recursive closure" in r for r in counters["unsupported"]), \
        dict(counters["unsupported"])
    assert counters["graph_break"]["print() inside a compiled function"] == 1
