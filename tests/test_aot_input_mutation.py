"""Writes into inputs inside compiled graphs ([aot-2] item 1): every form runs under the
eager, aot_eager and llvm backends with fullgraph=True and leaves values, version
counters and autograd metadata as eager leaves them, in one graph with no fallback. The
graphs return the inputs' new values and the compiled function writes them back after
each call (ember/aot/mutation.py, csrc/runtime/aot_function.c)."""
import warnings

import numpy as np
import pytest

import ember
from ember.aot import aot_compile
from ember.capture import _hook, counters

pytestmark = pytest.mark.skipif(not _hook.available, reason="capture needs CPython 3.11")

BACKENDS = ["eager", "aot_eager", "llvm"]


@pytest.fixture(autouse=True)
def strict(monkeypatch):
    ember.compiler.reset()
    counters.clear()
    monkeypatch.setattr(ember.compiler.config, "strict", True)
    yield
    assert not counters["llvm_fallback"], dict(counters["llvm_fallback"])
    assert not counters["backend_fallback"], dict(counters["backend_fallback"])
    assert not counters["runtime_fallback"], dict(counters["runtime_fallback"])
    ember.compiler.reset()


def _t(a, dtype=ember.float32, requires_grad=False):
    t = ember.tensor(np.asarray(a, dtype=np.float64), dtype=dtype)
    return t.requires_grad_() if requires_grad else t


def _arr(x):
    return x.detach().numpy() if isinstance(x, ember.Tensor) else x


def _flat(out):
    return list(out) if isinstance(out, (tuple, list)) else [out]


def _assert_same(got, want):
    for g, w in zip(_flat(got), _flat(want)):
        if isinstance(w, ember.Tensor):
            assert g.dtype == w.dtype and tuple(g.shape) == tuple(w.shape)
            np.testing.assert_allclose(_arr(g), _arr(w), rtol=1e-6, atol=1e-6)
        else:
            assert g == w


def run_both(fn, make_inputs, backend, calls=3, grad=True):
    """Runs fn eagerly and compiled (fullgraph) `calls` times on fresh inputs; checks
    outputs, the inputs' values and versions, and that one graph did it all."""
    want_in, got_in = make_inputs(), make_inputs()
    compiled = ember.compile(fn, backend=backend, fullgraph=True)
    with ember.set_grad_enabled(grad):
        for _ in range(calls):
            want = fn(*want_in)
            got = compiled(*got_in)
            _assert_same(got, want)
            for g, w in zip(got_in, want_in):
                if isinstance(w, ember.Tensor):
                    np.testing.assert_allclose(_arr(g), _arr(w), rtol=1e-6, atol=1e-6)
                    assert g._version == w._version
                    assert g.requires_grad == w.requires_grad
                    assert (g.grad_fn is None) == (w.grad_fn is None)
    assert counters["stats"]["unique_graphs"] == 1, dict(counters["stats"])
    assert counters["stats"].get("frames_fallback", 0) == 0
    assert not counters["unsupported"], dict(counters["unsupported"])
    return got_in, want_in, got, want


# ------------------------------------------------------------------ forms of writes

def buffer_momentum(x, buf):
    buf.mul_(0.9).add_(x.sum(0))
    return x * 2


def sgd_momentum_step(p, g, m):
    m.mul_(0.9).add_(g)
    p.add_(m, alpha=-0.1)
    return p.sum()


def masked_fill_(x, buf):
    buf.masked_fill_(x > 0.5, -1.0)
    return buf * 1


def setitem_mask_scalar(x, buf):
    buf[x > 0.5] = 0.0
    return x + buf


def setitem_mask_tensor_value(x, buf):
    buf[x > 0.5] = x[0, 0] * 3
    return buf.sum()


IDX = ember.tensor([2, 0])


def index_put_(x, buf):
    buf.index_put_((IDX,), x[:2] * 2)
    return buf * 1


TWICE = ember.tensor([1, 1])


def index_put_accumulate(x, buf):
    buf.index_put_((TWICE,), x[:2], accumulate=True)
    return x.sum()


def select_add_(x, buf):
    buf[0].add_(x[1])
    return buf[1] * 1


def transposed_setitem(x, buf):
    buf.t()[1] = 0.0
    return x.sum()


def strided_view_mul_(x, buf):
    buf.view(-1)[::2].mul_(2)
    return buf * x


def narrow_copy_(x, buf):
    buf.narrow(1, 0, 2).copy_(x[:, 1:3])
    return x * 1


def slice_sub_(x, buf):
    buf[:, 1:].sub_(x[:, :3])
    return buf


def zero_and_fill(x, buf):
    buf.zero_()
    buf[1].fill_(3.0)
    return x * buf


def copy_from_int(x, buf):
    buf.copy_(ember.arange(16).reshape(4, 4))
    return x + buf


def read_before_and_after(x, buf):
    before = buf * 1
    buf.add_(x)
    return before, buf * 1


def two_inputs_written(x, buf):
    x.add_(buf)
    buf.mul_(2)
    return x.sum() + buf.sum()


FORMS = [buffer_momentum, masked_fill_, setitem_mask_scalar, setitem_mask_tensor_value,
         index_put_, index_put_accumulate, select_add_, transposed_setitem,
         strided_view_mul_, narrow_copy_, slice_sub_, zero_and_fill, copy_from_int,
         read_before_and_after, two_inputs_written]


def _x_buf(dtype=ember.float32):
    rng = np.random.default_rng(0)
    return lambda: [ember.tensor(rng.random((4, 4)), dtype=dtype),
                    ember.tensor(rng.random((4, 4)), dtype=dtype)]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fn", FORMS, ids=lambda f: f.__name__)
def test_write_into_an_input_matches_eager(fn, backend):
    rng = np.random.default_rng(0)
    data = [rng.random((4, 4)), rng.random((4, 4))]
    run_both(fn, lambda: [ember.tensor(d, dtype=ember.float32) for d in data], backend)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fn", [buffer_momentum, select_add_, read_before_and_after],
                         ids=lambda f: f.__name__)
def test_write_into_an_input_with_grad_inputs_matches_eager(fn, backend):
    """x requires grad (the graph has a backward). Where the value written into the
    buffer depends on x, eager gives the buffer a history and so does the write-back
    (copy_ under grad mode); gradients through the outputs and the buffer are eager's."""
    rng = np.random.default_rng(1)
    data = [rng.random((4, 4)), rng.random((4, 4))]

    def make():
        return [ember.tensor(data[0], dtype=ember.float64, requires_grad=True),
                ember.tensor(data[1], dtype=ember.float64)]
    got_in, want_in, got, want = run_both(fn, make, backend, calls=1)
    for ins, outs in ((got_in, got), (want_in, want)):
        total = sum(o.sum() for o in _flat(outs) if o.requires_grad)
        if ins[1].requires_grad:
            total = total + (ins[1] * ins[1]).sum()
        total.backward()
    np.testing.assert_allclose(got_in[0].grad.numpy(), want_in[0].grad.numpy(), rtol=1e-12)


@pytest.mark.parametrize("backend", BACKENDS)
def test_optimizer_style_update_under_no_grad(backend):
    """p is a leaf that requires grad, written under no_grad as optimizers do: it stays
    a leaf with no history, its momentum buffer and version counters as eager's."""
    rng = np.random.default_rng(2)
    data = [rng.random((3, 5)) for _ in range(3)]

    def make():
        p = ember.tensor(data[0], requires_grad=True)
        return [p, ember.tensor(data[1]), ember.tensor(data[2])]
    got_in, want_in, _, _ = run_both(sgd_momentum_step, make, backend, grad=False)
    assert got_in[0].requires_grad and got_in[0].grad_fn is None and got_in[0].is_leaf
    assert got_in[0]._version == 3 and got_in[2]._version == 6


@pytest.mark.parametrize("backend", BACKENDS)
def test_integer_counter_buffer(backend):
    def step(x, n):
        n.add_(1)
        return x * n

    run_both(step, lambda: [ember.ones(3), ember.tensor(0)], backend, calls=4)


@pytest.mark.parametrize("backend", BACKENDS)
def test_returned_input_is_the_input_and_returned_view_shares_its_memory(backend):
    def ret_self(x):
        return x.add_(1)

    def ret_view(x):
        x.mul_(2)
        return x[0], x.view(-1)

    x = ember.ones(2, 3)
    c = ember.compile(ret_self, backend=backend, fullgraph=True)
    assert c(x) is x and x.tolist() == [[2.0] * 3] * 2 and x._version == 1
    y = ember.ones(2, 3)
    row, flat = ember.compile(ret_view, backend=backend, fullgraph=True)(y)
    assert row._base is y and flat._base is y
    row.add_(1)                  # a write into the result reaches the input, as in eager
    assert y.tolist() == [[3.0] * 3, [2.0] * 3] and flat.tolist()[:3] == [3.0] * 3


@pytest.mark.parametrize("backend", BACKENDS)
def test_write_of_a_value_that_requires_grad_into_a_buffer(backend):
    """buf does not require grad; the value written into it does: eager gives buf a
    history (CopyBackwards) through which gradients reach w. Compiled, the new value
    hangs from the compiled node and is written back with copy_ under grad mode."""
    def f(w, buf):
        buf.copy_(w * 2)
        return (buf * w).sum()

    rng = np.random.default_rng(3)
    data = rng.random(4)

    def make():
        return [ember.tensor(data, dtype=ember.float64, requires_grad=True),
                ember.zeros(4, dtype=ember.float64)]
    got_in, want_in, got, want = run_both(f, make, backend, calls=1)
    assert got_in[1].requires_grad and got_in[1].grad_fn is not None
    (got + (got_in[1] * 3).sum()).backward()
    (want + (want_in[1] * 3).sum()).backward()
    np.testing.assert_allclose(got_in[0].grad.numpy(), want_in[0].grad.numpy(), rtol=1e-12)


# ------------------------------------------------------------------ aliasing inputs

@pytest.mark.parametrize("backend", BACKENDS)
def test_inputs_sharing_memory_with_an_input_written_run_eagerly(backend):
    """The graph takes its inputs as separate tensors; a call in which an input written
    into shares memory with another runs the captured graph eagerly, counted."""
    def f(a, b):
        a.add_(1)
        return b * 2

    compiled = ember.compile(f, backend=backend, fullgraph=True)
    x, y = ember.zeros(4), ember.zeros(4)
    np.testing.assert_array_equal(compiled(x, y).numpy(), np.zeros(4))
    assert not counters["aliased_inputs"]
    base = ember.zeros(4)
    want_base = ember.zeros(4)
    want = f(want_base, want_base.view(2, 2))
    got = compiled(base, base.view(2, 2))         # b sees a's write, as in eager
    np.testing.assert_array_equal(got.numpy(), want.numpy())
    np.testing.assert_array_equal(base.numpy(), want_base.numpy())
    assert base._version == want_base._version
    assert sum(counters["aliased_inputs"].values()) == 1


def test_the_same_tensor_twice_runs_eagerly():
    def f(a, b):
        a.mul_(2)
        return a + b

    x = ember.ones(3)
    fn = aot_compile(f, [ember.ones(3), ember.ones(3)])
    (out,) = fn(x, x)
    assert out.tolist() == [4.0] * 3 and x.tolist() == [2.0] * 3
    assert sum(counters["aliased_inputs"].values()) == 1
    (out,) = fn(x, ember.ones(3))                  # overlapping no more: compiled
    assert out.tolist() == [5.0] * 3 and x.tolist() == [4.0] * 3
    assert sum(counters["aliased_inputs"].values()) == 1


# ------------------------------------------------------------------ raising graphs

@pytest.mark.parametrize("backend", BACKENDS)
def test_a_graph_that_raises_has_written_nothing(backend, monkeypatch):
    """The graph raises after its write (an index out of range, known only from the
    values): nothing was written back, the frame runs eagerly and raises eager's error
    with the write applied once, as eager applied it."""
    monkeypatch.setattr(ember.compiler.config, "strict", False)

    def f(x, w, idx):
        x.add_(1)
        return ember.index_select(w, 0, idx)

    w = ember.ones(3, 2)
    compiled = ember.compile(f, backend=backend)
    x = ember.zeros(2)
    compiled(x, w, ember.tensor([0, 1]))
    assert x.tolist() == [1.0, 1.0] and x._version == 1
    with pytest.raises(IndexError):
        compiled(x, w, ember.tensor([0, 7]))
    assert x.tolist() == [2.0, 2.0] and x._version == 2
    assert not counters["runtime_fallback"]


class _AddOne(ember.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x + 1

    @staticmethod
    def backward(ctx, g):
        return g


def _failing_backend(gm, example_inputs):
    raise RuntimeError("this backend cannot compile anything")


def _writes_then_raises(x, w, idx):
    x.add_(1)
    return ember.index_select(w, 0, idx)


def _writes_calls_a_function_then_raises(x, w, idx):
    x.add_(1)
    y = _AddOne.apply(w)
    return ember.index_select(y, 0, idx)


# Graphs whose writes into inputs run in place (as captured, not functionalized): the
# eager backend's graphs calling an autograd.Function, the graph of a failing backend,
# and a call whose inputs alias one written into. A call that raises must leave the
# inputs as they were (memory and version), so the frame's eager rerun writes once.
IN_PLACE_CASES = {
    "eager_autograd_function": ("eager", _writes_calls_a_function_then_raises),
    "failing_backend": (_failing_backend, _writes_then_raises),
    "failing_backend_autograd_function": (_failing_backend,
                                          _writes_calls_a_function_then_raises),
}


@pytest.mark.parametrize("case", sorted(IN_PLACE_CASES))
def test_a_graph_writing_in_place_that_raises_writes_once(case, monkeypatch):
    monkeypatch.setattr(ember.compiler.config, "strict", False)
    backend, f = IN_PLACE_CASES[case]
    w = ember.ones(3, 2)
    compiled = ember.compile(f, backend=backend)
    x = ember.zeros(2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        compiled(x, w, ember.tensor([0, 1]))
        assert counters["stats"]["unique_graphs"] == 1
        assert x.tolist() == [1.0, 1.0] and x._version == 1
        with pytest.raises(IndexError):
            compiled(x, w, ember.tensor([0, 7]))
    assert x.tolist() == [2.0, 2.0] and x._version == 2
    assert not counters["runtime_fallback"]
    assert bool(counters["backend_fallback"]) == (backend is _failing_backend)
    counters["backend_fallback"].clear()      # expected here (the fixture refuses it)


@pytest.mark.parametrize("backend", BACKENDS)
def test_aliased_inputs_run_in_place_and_a_raise_writes_once(backend, monkeypatch):
    """A call whose inputs share memory with one written into runs the captured graph
    in place (counted); if it raises, the eager rerun starts from untouched inputs."""
    monkeypatch.setattr(ember.compiler.config, "strict", False)

    def f(a, b, idx):
        a.add_(1)
        return ember.index_select(b, 0, idx)

    compiled = ember.compile(f, backend=backend)
    compiled(ember.zeros(4), ember.zeros(4), ember.tensor([0]))
    base = ember.zeros(4)
    with pytest.raises(IndexError):
        compiled(base, base, ember.tensor([9]))
    assert base.tolist() == [1.0] * 4 and base._version == 1
    assert sum(counters["aliased_inputs"].values()) == 1


def test_a_restored_input_keeps_its_views_memory():
    """The restore writes into the inputs' memory (views see it), not a new array."""
    from ember.aot.eager import restoring_inputs
    x = ember.arange(6.0)
    v = x[2:4]

    def writes_then_raises(t):
        t.mul_(10)
        raise ValueError("late")

    with pytest.raises(ValueError):
        restoring_inputs(writes_then_raises, [0])(x)
    assert x.tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0] and x._version == 0
    assert v.tolist() == [2.0, 3.0]
    v.add_(1)
    assert x.tolist() == [0.0, 1.0, 3.0, 4.0, 4.0, 5.0]


# ------------------------------------------------------------------ autograd of inputs

def test_write_autograd_follows_into_a_non_leaf_input():
    """(aot_compile directly: capture sends such frames to CPython.) x has a history;
    the write into it hangs from the compiled node and continues x's history, so the
    gradient reaching the leaf behind x is eager's."""
    def f(x):
        x.mul_(x.detach() + 1)
        return x.sum() * 2

    data = np.array([0.5, 1.5, -2.0])

    def leaf():
        return ember.tensor(data, dtype=ember.float64, requires_grad=True)
    a = leaf()
    x = a * 3
    want = f(x)
    (want + (x * x).sum()).backward()
    b = leaf()
    y = b * 3
    fn = aot_compile(f, [y])
    (got,) = fn(y)
    assert y._version == x._version and y.grad_fn is not None
    np.testing.assert_allclose(y.detach().numpy(), x.detach().numpy(), rtol=1e-12)
    (got + (y * y).sum()).backward()
    np.testing.assert_allclose(got.item(), want.item(), rtol=1e-12)
    np.testing.assert_allclose(b.grad.numpy(), a.grad.numpy(), rtol=1e-12)
    # called with a leaf that requires grad, eager's in-place error, nothing written
    z = leaf()
    with pytest.raises(RuntimeError, match="a leaf Variable that requires grad"):
        fn(z)
    assert z._version == 0


# ------------------------------------------------------------------ batch norm

@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("layer,shape", [(ember.nn.BatchNorm1d, (6, 3)),
                                         (ember.nn.BatchNorm1d, (4, 3, 5)),
                                         (ember.nn.BatchNorm2d, (2, 3, 4, 4))])
def test_batch_norm_training_compiles_whole(layer, shape, backend):
    rng = np.random.default_rng(4)
    data = rng.standard_normal(shape)
    want_bn, got_bn = layer(3).double(), layer(3).double()
    compiled = ember.compile(got_bn, backend=backend, fullgraph=True)
    for _ in range(3):
        x1 = ember.tensor(data, dtype=ember.float64, requires_grad=True)
        x2 = ember.tensor(data, dtype=ember.float64, requires_grad=True)
        want, got = want_bn(x1), compiled(x2)
        np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), rtol=1e-10)
        want.pow(2).sum().backward()
        got.pow(2).sum().backward()
        np.testing.assert_allclose(x2.grad.numpy(), x1.grad.numpy(), rtol=1e-9, atol=1e-12)
    for name, w in want_bn.named_buffers():
        g = dict(got_bn.named_buffers())[name]
        np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-12)
        assert g._version == w._version and not g.requires_grad
    for name, w in want_bn.named_parameters():
        g = dict(got_bn.named_parameters())[name]
        np.testing.assert_allclose(g.grad.numpy(), w.grad.numpy(), rtol=1e-9, atol=1e-12)
    assert counters["stats"]["unique_graphs"] == 1
    assert counters["stats"].get("frames_fallback", 0) == 0


def test_batch_norm_statistics_are_computed_in_llvm_kernels():
    """The llvm plans of a BatchNorm training step have no extern step: the batch
    statistics, the running ones' update and the counter are loop-IR kernels."""
    from ember.compiler import backend as llvm_backend
    from ember.compiler.plan import ExternStep
    llvm_backend.recent.clear()
    bn = ember.nn.BatchNorm2d(4)
    x = ember.randn(2, 4, 3, 3, requires_grad=True)
    ember.compile(bn, backend="llvm", fullgraph=True)(x).sum().backward()
    assert len(llvm_backend.recent) == 2                     # forward and backward
    for g in llvm_backend.recent:
        assert not [s for s in g.lowered.steps if isinstance(s, ExternStep)], str(g.lowered)
    assert bn.num_batches_tracked.item() == 1


@pytest.mark.parametrize("backend", BACKENDS)
def test_functional_batch_norm_training_compiles(backend):
    rng = np.random.default_rng(5)
    data = rng.standard_normal((5, 2, 3))

    def f(x, rm, rv):
        return ember.nn.functional.batch_norm(x, rm, rv, training=True, momentum=0.2)
    run_both(f, lambda: [ember.tensor(data), ember.zeros(2), ember.ones(2)], backend)


def test_batch_norm_with_momentum_none_breaks_counted(monkeypatch):
    """A cumulative average reads num_batches_tracked as a number: .item() is a graph
    break (as in torch.compile), with its reason counted, or the frame runs eagerly."""
    monkeypatch.setattr(ember.compiler.config, "strict", False)
    want_bn, got_bn = ember.nn.BatchNorm1d(2, momentum=None), \
        ember.nn.BatchNorm1d(2, momentum=None)
    x = ember.randn(4, 2)
    for _ in range(2):
        want_bn(x)
        ember.compile(got_bn, backend="aot_eager")(x)
    np.testing.assert_allclose(got_bn.running_var.numpy(), want_bn.running_var.numpy())
    assert counters["stats"]["frames_fallback"] + counters["stats"]["graph_breaks"] >= 1
    assert any("item" in r for r in list(counters["unsupported"]) +
               list(counters["graph_break"]))


@pytest.mark.parametrize("backend", BACKENDS)
def test_returned_view_of_a_buffer_written_with_a_grad_value(backend):
    """The output is a view of the buffer written: made again from the buffer after the
    write-back (copy_ under grad mode), so it shares its memory and its gradient
    reaches w through the buffer's new history, as in eager."""
    def f(w, buf):
        buf.copy_(w * 2)
        return buf[1:]

    res = []
    for fn in (f, ember.compile(f, backend=backend, fullgraph=True)):
        w = ember.tensor([1.0, 2.0, 3.0], requires_grad=True)
        buf = ember.zeros(3)
        out = fn(w, buf)
        (out * out).sum().backward()
        res.append((out.tolist(), out._base is buf, buf._version, w.grad.tolist(),
                    out.grad_fn is not None, buf.requires_grad))
    assert res[0] == res[1]
    assert res[1][1] and res[1][3] == [0.0, 16.0, 24.0]


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_same_tensor_passed_twice_then_two_tensors(backend):
    """Captured with one tensor for both arguments, the graph has one input: the guard
    that both arguments are one tensor sends a call with two to a graph of its own."""
    def f(a, b):
        a.add_(1)
        return b * 2

    compiled = ember.compile(f, backend=backend, fullgraph=True)
    for make in (lambda: (lambda t: (t, t))(ember.ones(3)),
                 lambda: (ember.ones(3), ember.zeros(3))):
        want_in, got_in = make(), make()
        want, got = f(*want_in), compiled(*got_in)
        np.testing.assert_array_equal(got.numpy(), want.numpy())
        for g, w in zip(got_in, want_in):
            np.testing.assert_array_equal(g.numpy(), w.numpy())
            assert g._version == w._version
    assert counters["stats"]["unique_graphs"] == 2
    assert not counters["aliased_inputs"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_instance_norm_with_running_statistics_compiles_whole(backend):
    """instance_norm writes its running statistics (the mean of the per-sample batch_norm
    updates) like batch_norm: in the graph, written back after the call."""
    rng = np.random.default_rng(6)
    data = rng.standard_normal((4, 3, 5))
    want_in, got_in = ember.nn.InstanceNorm1d(3, track_running_stats=True).double(), \
        ember.nn.InstanceNorm1d(3, track_running_stats=True).double()
    compiled = ember.compile(got_in, backend=backend, fullgraph=True)
    for _ in range(3):
        np.testing.assert_allclose(compiled(ember.tensor(data)).numpy(),
                                   want_in(ember.tensor(data)).numpy(), rtol=1e-12)
    for name in ("running_mean", "running_var"):
        g, w = getattr(got_in, name), getattr(want_in, name)
        np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-12)
        assert g._version == w._version
    assert counters["stats"]["unique_graphs"] == 1


@pytest.mark.parametrize("backend", ["aot_eager", "llvm"])
def test_backward_reads_the_value_of_a_written_input_the_forward_read(backend):
    """x * b after b.mul_(0.5), b a buffer: the gradient of x is b's value after the
    write, which the forward read. Found: the backward read b itself after the runtime
    had written the new value back into it again (saved inputs written into are copied
    in the forward now, partition.py), so x.grad came out halved."""
    def fn(x, b):
        b.mul_(0.5)
        return x * b, b

    x1, b1 = _t([0.5, -1.0, 2.0], requires_grad=True), _t([1.0, 3.0, -4.0])
    x2, b2 = x1.detach().clone().requires_grad_(), b1.clone()
    want = fn(x1, b1)
    got = ember.compile(fn, backend=backend, fullgraph=True)(x2, b2)
    want[0].sum().backward()
    got[0].sum().backward()
    np.testing.assert_array_equal(_arr(got[0]), _arr(want[0]))
    np.testing.assert_array_equal(b2.numpy(), b1.numpy())
    np.testing.assert_array_equal(x2.grad.numpy(), x1.grad.numpy())
