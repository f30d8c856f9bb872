"""Gradients through compiled graphs (ember.compile -> AOT autograd -> "aot_eager" and
"llvm") behave as eager autograd: a second backward raises, inputs that get no gradient
keep .grad None, outputs that get no gradient contribute nothing, empty and 0-d inputs.

The second half is a generated sweep: common ops compiled under both backends with
unused inputs, outputs left out of the loss, empty inputs and 0-d inputs, each compared
with eager (outputs, .grad, which .grad are None) and a second backward raising.

Every test runs in strict mode (no fallback to eager) and checks that the compiled
node really ran (grad_fn is CompiledFunctionBackward)."""
import warnings
import weakref
import zlib

import numpy as np
import pytest

import ember
import ember.nn.functional as F
from ember.capture import counters

BACKENDS = ["aot_eager", "llvm"]
TOL = {ember.float32: dict(rtol=1e-5, atol=1e-6), ember.float64: dict(rtol=1e-12, atol=1e-12)}
SECOND_TIME = "backward through the graph a second time"


@pytest.fixture(autouse=True)
def strict(monkeypatch):
    ember.compiler.reset()
    monkeypatch.setattr(ember.compiler.config, "strict", True)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        yield
    assert not counters["llvm_fallback"], dict(counters["llvm_fallback"])
    assert not counters["backend_fallback"], dict(counters["backend_fallback"])
    assert not counters["unsupported"], dict(counters["unsupported"])
    ember.compiler.reset()


def _compiled(t):
    fn = t.grad_fn
    assert fn is not None and fn.name() == "CompiledFunctionBackward", fn
    return t


def _leaf(a, dtype=ember.float64, grad=True):
    return ember.tensor(np.asarray(a), dtype=dtype, requires_grad=grad)


def _same_grads(got, want, tol):
    """got and want are lists of leaves: the same .grad (None where None)."""
    for i, (g, w) in enumerate(zip(got, want)):
        if w.grad is None:
            assert g.grad is None, f"input {i}: eager leaves .grad None, compiled gave one"
            continue
        assert g.grad is not None, f"input {i}: eager gives .grad, compiled left None"
        assert tuple(g.grad.shape) == tuple(w.grad.shape), i
        assert g.grad.dtype is w.grad.dtype, i
        np.testing.assert_allclose(g.grad.numpy(), w.grad.numpy(), equal_nan=True,
                                   err_msg=f"grad of input {i}", **tol)


# ================================================================== a second backward


@pytest.mark.parametrize("backend", BACKENDS)
def test_second_backward_raises_as_eager(backend):
    def f(x, w):
        return (x.exp() * w).sum()
    x, w = _leaf([0.5, -1.0, 2.0]), _leaf([1.0, 2.0, 3.0])
    with pytest.raises(RuntimeError, match=SECOND_TIME):
        y = f(x, w)
        y.backward()
        y.backward()
    want = x.grad.numpy().copy()
    x.grad = w.grad = None
    y = _compiled(ember.compile(f, backend=backend)(x, w))
    y.backward()
    with pytest.raises(RuntimeError, match=SECOND_TIME):
        y.backward()
    # the failed second backward added nothing
    np.testing.assert_allclose(x.grad.numpy(), want, rtol=1e-15)
    with pytest.raises(RuntimeError, match=SECOND_TIME):
        ember.autograd.grad(y, [x])


@pytest.mark.parametrize("backend", BACKENDS)
def test_retain_graph_backwards_accumulate_as_eager(backend):
    def f(x, w):
        return (x.tanh() * w).sum()
    xe, we = _leaf([0.5, -1.0, 2.0]), _leaf([1.0, 2.0, 3.0])
    ye = f(xe, we)
    ye.backward(retain_graph=True)
    ye.backward(retain_graph=True)
    ye.backward()
    x, w = _leaf([0.5, -1.0, 2.0]), _leaf([1.0, 2.0, 3.0])
    y = _compiled(ember.compile(f, backend=backend)(x, w))
    y.backward(retain_graph=True)
    g1 = ember.autograd.grad(y, [x], retain_graph=True)[0]
    y.backward(retain_graph=True)
    y.backward()
    _same_grads([x, w], [xe, we], TOL[ember.float64])
    np.testing.assert_allclose(g1.numpy(), xe.grad.numpy() / 3, rtol=1e-12)
    with pytest.raises(RuntimeError, match=SECOND_TIME):
        y.backward()


@pytest.mark.parametrize("backend", BACKENDS)
def test_backward_frees_saved_tensors(backend):
    def f(x, w):
        return (x.exp() * w).sum()
    cf = ember.compile(f, backend=backend)
    x = _leaf([0.5, -1.0, 2.0])
    w = _leaf([1.0, 2.0, 3.0], grad=False)      # only the backward holds it
    alive = weakref.ref(w)
    y = _compiled(cf(x, w))
    del w
    y.backward(retain_graph=True)
    assert alive() is not None
    y.backward()
    assert alive() is None, "the compiled backward kept its saved tensors"


MODIFIED = "modified by an inplace operation"


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_saved_value_written_in_place_after_the_call_raises_as_eager(backend):
    """A tensor the compiled backward saved (here an input) written in place after the
    call: eager's saved variable raises at backward; the compiled backward raised
    nothing and read the new values (a wrong gradient; fuzz seed 12 #394). Every saved
    tensor's version is checked (csrc/runtime/aot_function.c)."""
    def square(v):
        return v * v

    def scaled(v):
        return (v * 3.0).sin() * v

    cases = ((square, lambda v, y: v.add_(1)), (scaled, lambda v, y: v.mul_(2)))
    for f, write in cases:
        ember.compiler.reset()
        for run in (f, ember.compile(f, backend=backend)):
            x = _leaf([0.5, -1.0, 2.0])
            v = x * 1.0
            y = run(v)
            if run is not f:
                _compiled(y)
            write(v, y)
            with pytest.raises(RuntimeError, match=MODIFIED):
                y.sum().backward()
            assert x.grad is None
        # untouched, the same call's backward is eager's
        xe, xc = _leaf([0.5, -1.0, 2.0]), _leaf([0.5, -1.0, 2.0])
        f(xe * 1.0).sum().backward()
        _compiled(ember.compile(f, backend=backend)(xc * 1.0)).sum().backward()
        _same_grads([xc], [xe], TOL[ember.float64])


@pytest.mark.parametrize("backend", BACKENDS)
def test_create_graph_refuses_a_double_backward_instead_of_a_wrong_one(backend):
    """The compiled backward reads its saved values as constants: its gradients are
    right, but differentiating them again would miss the terms through those values."""
    def f(x):
        return (x.sin() * x).sum()
    xe, x = _leaf([1.0, 2.0]), _leaf([1.0, 2.0])
    ge, = ember.autograd.grad(f(xe), [xe], create_graph=True)
    g, = ember.autograd.grad(_compiled(ember.compile(f, backend=backend)(x)), [x],
                             create_graph=True)
    np.testing.assert_allclose(g.detach().numpy(), ge.detach().numpy(), rtol=1e-12)
    assert g.requires_grad
    with pytest.raises(RuntimeError, match="does not currently support double backward"):
        g.sum().backward()
    assert x.grad is None
    y = ember.compile(f, backend=backend)(x)
    y.backward(create_graph=True)              # first-order .grad, as eager
    np.testing.assert_allclose(x.grad.detach().numpy(), ge.detach().numpy(), rtol=1e-12)


# ================================================================== missing gradients


class Gated(ember.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = ember.nn.Linear(4, 3).double()
        self.gate = ember.nn.Parameter(ember.tensor([1.0, -2.0, 3.0], dtype=ember.float64))
        self.unused = ember.nn.Parameter(ember.ones(2, dtype=ember.float64))
        self.scale = ember.nn.Parameter(ember.tensor(2.0, dtype=ember.float64))

    def forward(self, x):
        h = self.lin(x).relu()
        h = h * (self.gate > 0)                             # gate: a comparison only
        k = (self.scale * 10).long() % 3                    # scale: integer ops only
        return (h * k).sum() + (self.scale > 1).sum()


@pytest.mark.parametrize("backend", BACKENDS)
def test_inputs_without_gradient_keep_grad_none(backend):
    ember.manual_seed(0)
    x = ember.randn(5, 4, dtype=ember.float64)
    eager = Gated()
    model = Gated()
    model.load_state_dict(eager.state_dict())
    eager(x).backward()
    _compiled(ember.compile(model, backend=backend)(x)).backward()
    assert eager.gate.grad is None and eager.unused.grad is None and eager.scale.grad is None
    _same_grads(list(model.parameters()), list(eager.parameters()), TOL[ember.float64])


@pytest.mark.parametrize("backend", BACKENDS)
def test_autograd_grad_allow_unused_through_compiled_graph(backend):
    def f(a, b, c):
        return (a * 2).sum() + (c > 0).sum()
    a, b, c = _leaf([1.0, 2.0]), _leaf([3.0, 4.0]), _leaf([-1.0, 1.0])
    y = _compiled(ember.compile(f, backend=backend)(a, b, c))
    ga, gb, gc = ember.autograd.grad(y, [a, b, c], allow_unused=True, retain_graph=True)
    np.testing.assert_array_equal(ga.numpy(), [2.0, 2.0])
    assert gb is None and gc is None
    ye = f(a, b, c)
    with pytest.raises(RuntimeError) as eager_err:
        ember.autograd.grad(ye, [a, b])
    with pytest.raises(RuntimeError) as compiled_err:
        ember.autograd.grad(y, [a, b])
    assert str(compiled_err.value) == str(eager_err.value)
    assert "allow_unused=True" in str(eager_err.value)


def _two_heads(x, w, v):
    h = x @ w
    p = h.softmax(-1)
    return (p * v).sum(), p.log(), (x * 3).tanh()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("used", [(0,), (1,), (2,), (0, 2), (1, 2), (0, 1, 2)])
def test_outputs_without_gradient_contribute_nothing(backend, used):
    """Outputs left out of the loss: the inputs only they reach keep .grad None, and
    no zeros flow through their formulas (p.log() has -inf where p underflowed: a zero
    gradient through it would be NaN)."""
    g = np.random.default_rng(0)
    xs = g.standard_normal((4, 3))
    xs[0, 0] = -800.0                               # p[0] underflows to 0
    ws, vs = g.standard_normal((3, 5)), g.standard_normal((4, 5))
    eager = [_leaf(xs), _leaf(ws), _leaf(vs)]
    comp = [_leaf(xs), _leaf(ws), _leaf(vs)]
    cf = ember.compile(_two_heads, backend=backend)
    for leaves, fn in ((eager, _two_heads), (comp, cf)):
        outs = fn(*leaves)
        loss = sum((outs[i] * 1.5).sum() for i in used)
        loss.backward()
    _compiled(cf(*comp)[0])
    _same_grads(comp, eager, TOL[ember.float64])
    if 1 not in used:
        assert np.isfinite(comp[0].grad.numpy()).all()


@pytest.mark.parametrize("backend", BACKENDS)
def test_grad_of_a_subset_of_outputs_then_the_rest(backend):
    """Several calls with different gradient patterns through one compiled function."""
    g = np.random.default_rng(1)
    xs, ws, vs = g.standard_normal((4, 3)), g.standard_normal((3, 5)), g.standard_normal((4, 5))
    comp = [_leaf(xs), _leaf(ws), _leaf(vs)]
    eager = [_leaf(xs), _leaf(ws), _leaf(vs)]
    cf = ember.compile(_two_heads, backend=backend)
    for pattern in [(0,), (2,), (0, 1, 2), (1,), (0,)]:
        got, want = [
            ember.autograd.grad([outs[i] for i in pattern], leaves,
                                [ember.ones_like(outs[i]) for i in pattern], allow_unused=True)
            for leaves, outs in ((comp, _outputs(cf(*comp))),
                                 (eager, _outputs(_two_heads(*eager))))]
        for a, b in zip(got, want):
            assert (a is None) == (b is None), pattern
            if a is not None:
                np.testing.assert_allclose(a.numpy(), b.numpy(), **TOL[ember.float64])


def test_variants_are_built_once_per_gradient_pattern():
    from ember.aot import aot_compile, eager_compiler
    names = []

    def bw_compiler(graph, name):
        names.append(name)
        return eager_compiler(graph, name)
    g = np.random.default_rng(2)
    leaves = [_leaf(g.standard_normal(s)) for s in ((4, 3), (3, 5), (4, 5))]
    fn = aot_compile(_two_heads, leaves, bw_compiler=bw_compiler, name="heads")
    assert names == ["heads_backward"]
    for pattern in [(0,), (0,), (0, 1, 2), (2,), (0,)]:
        outs = fn(*leaves)
        sum(outs[i].sum() for i in pattern).backward()
    assert names == ["heads_backward", "heads_backward_100", "heads_backward_001"]


def test_a_variant_that_needs_an_unsaved_value_raises():
    """The guard behind the variants: a forward value the compiled forward does not
    save is never replaced by anything else (here nothing counts as saved)."""
    from ember.aot import decompose, eager_compiler, trace_joint
    from ember.aot.variants import BackwardVariants
    g = np.random.default_rng(3)
    leaves = [_leaf(g.standard_normal(s)) for s in ((4, 3), (3, 5), (4, 5))]
    joint = trace_joint(_two_heads, leaves)
    values = {}
    decompose(joint.graph, values)
    variants = BackwardVariants(joint, values, [], eager_compiler, "heads")
    with pytest.raises(RuntimeError, match="does not save"):
        variants((True, False, False))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("shape", [(2, 0, 3), (4, 2, 3)])
def test_a_variant_reads_forward_values_its_own_formulas_need(backend, shape):
    """Found by the fuzzer: with one output left out of the backward, the variant's
    formulas (logsumexp's exp(x - lse), recomputed in the backward) read a forward value
    the full backward's prims did not: the forward saves it too."""
    def f(x0, x1):
        v0 = x1 * x0
        v3 = v0[-2::3, :]
        return v3.logsumexp(dim=[-2, 0, -1], keepdim=True), v0

    g = np.random.default_rng(5)
    x0 = ember.from_numpy(g.standard_normal(shape).astype(np.float32))
    x1, x1c = _leaf(g.standard_normal(3)), None
    x1c = _leaf(x1.detach().numpy())
    out = ember.compile(f, backend=backend)(x0, x1c)
    _compiled(out[0])
    out[0].sum().backward()
    f(x0, x1)[0].sum().backward()
    np.testing.assert_allclose(x1c.grad.numpy(), x1.grad.numpy(), **TOL[ember.float64])


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_variant_reads_forward_values_no_forward_output_needs(backend):
    """Found by the fuzzer: max's indices, computed by the forward but needed by no
    forward output (only the values are returned), are read by max's formula in the
    backward of the values alone: the forward saves them too."""
    def f(x, y):
        values, _ = ember.max(x, 1, True)
        return values, y * y

    g = np.random.default_rng(2)
    x, y = _leaf(g.standard_normal((3, 4))), _leaf(g.standard_normal(2))
    xc, yc = _leaf(x.detach().numpy()), _leaf(y.detach().numpy())
    out = ember.compile(f, backend=backend)(xc, yc)
    _compiled(out[0])
    out[0].sum().backward()
    f(x, y)[0].sum().backward()
    np.testing.assert_allclose(xc.grad.numpy(), x.grad.numpy(), **TOL[ember.float64])
    assert yc.grad is None and y.grad is None


# ================================================================== empty tensors


@pytest.mark.parametrize("backend", [None] + BACKENDS)
def test_cat_with_an_empty_flipped_input(backend, torch):
    def f(a, e):
        return ember.cat([a, e.flip(0)]) * 2
    a, e = _leaf([1.0, 2.0, 3.0]), _leaf(np.zeros(0))
    fn = f if backend is None else ember.compile(f, backend=backend)
    out = fn(a, e)
    if backend is not None:
        _compiled(out)
    out.sum().backward()
    ta = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64, requires_grad=True)
    te = torch.zeros(0, dtype=torch.float64, requires_grad=True)
    (torch.cat([ta, te.flip(0)]) * 2).sum().backward()
    np.testing.assert_array_equal(out.detach().numpy(), [2.0, 4.0, 6.0])
    np.testing.assert_array_equal(a.grad.numpy(), ta.grad.numpy())
    assert e.grad is not None and tuple(e.grad.shape) == tuple(te.grad.shape) == (0,)


LAYER_NORM_SHAPES = [((3, 0), (0,)), ((0, 4), (4,)), ((2, 0, 3), (0, 3)), ((0, 0), (0,))]


@pytest.mark.parametrize("backend", [None] + BACKENDS)
@pytest.mark.parametrize("shape,normalized", LAYER_NORM_SHAPES)
def test_layer_norm_over_empty_tensors(backend, shape, normalized, torch):
    def f(x, w, b):
        return F.layer_norm(x, normalized, w, b)
    g = np.random.default_rng(0)
    xs, ws, bs = (g.standard_normal(s) for s in (shape, normalized, normalized))
    leaves = [_leaf(xs), _leaf(ws), _leaf(bs)]
    fn = f if backend is None else ember.compile(f, backend=backend)
    out = fn(*leaves)
    if backend is not None:
        _compiled(out)
    (out * 2).sum().backward()
    tl = [torch.tensor(a, requires_grad=True) for a in (xs, ws, bs)]
    tout = torch.nn.functional.layer_norm(tl[0], normalized, tl[1], tl[2])
    (tout * 2).sum().backward()
    assert tuple(out.shape) == tuple(tout.shape)
    for got, want in zip(leaves, tl):
        assert tuple(got.grad.shape) == tuple(want.grad.shape)
        np.testing.assert_array_equal(got.grad.numpy(), want.grad.numpy())


@pytest.mark.parametrize("backend", [None] + BACKENDS)
def test_empty_reductions_give_pytorchs_values_and_gradients(backend, torch):
    def f(x, y):
        return x.mean(), x.sum(), y.mean(0), y.var(0), y.logsumexp(1), x.prod()
    xs, ys = np.zeros(0), np.zeros((0, 3))
    leaves = [_leaf(xs), _leaf(ys)]
    fn = f if backend is None else ember.compile(f, backend=backend)
    outs = fn(*leaves)
    tl = [torch.tensor(a, requires_grad=True) for a in (xs, ys)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        touts = (tl[0].mean(), tl[0].sum(), tl[1].mean(0), tl[1].var(0),
                 tl[1].logsumexp(1), tl[0].prod())
    for o, t in zip(outs, touts):
        assert tuple(o.shape) == tuple(t.shape)
        np.testing.assert_array_equal(o.detach().numpy(), t.detach().numpy())
    sum(o.sum() for o in outs if o.requires_grad).backward()
    sum(t.sum() for t in touts).backward()
    for got, want in zip(leaves, tl):
        assert tuple(got.grad.shape) == tuple(want.grad.shape)


# ================================================================== the sweep
#
# A case is (name, fn, inputs per mode). An input is a shape (a float tensor requiring
# grad), or ("long", values) (an integer tensor). Modes: "full", "empty" (zero-size
# inputs), "0d" (0-d inputs); a mode a case has no inputs for is skipped.


def _idx(*v):
    return ("long", v)


CASES = [
    ("add", lambda a, b: a + b,
     {"full": [(3, 4), (3, 4)], "empty": [(0, 4), (0, 4)], "0d": [(), ()]}),
    ("mul_broadcast", lambda a, b: a * b,
     {"full": [(3, 4), (4,)], "empty": [(0, 4), (4,)], "0d": [(), (3,)]}),
    ("div_sub", lambda a, b: (a - b) / (b * b + 1.0),
     {"full": [(3, 4), (3, 1)], "empty": [(3, 0), (3, 1)], "0d": [(), ()]}),
    ("unary_chain", lambda a: (a.tanh() * a.exp()).sigmoid() + a.abs().sqrt(),
     {"full": [(3, 4)], "empty": [(0,)], "0d": [()]}),
    ("activations", lambda a: F.gelu(a) + a.relu() * 2 + F.silu(a),
     {"full": [(2, 5)], "empty": [(2, 0)], "0d": [()]}),
    ("pow_clamp", lambda a: (a ** 2).clamp(0.1, 1.5) + a.pow(3),
     {"full": [(4, 3)], "empty": [(0, 3)], "0d": [()]}),
    ("sum_keepdim", lambda a: a.sum(-1, keepdim=True) * a,
     {"full": [(3, 4)], "empty": [(0, 4)], "0d": [()]}),
    ("sum_over_empty", lambda a: a.sum(1) + 1.0,
     {"full": [(3, 4)], "empty": [(3, 0)]}),
    ("sum_all", lambda a: a.sum(),
     {"full": [(3, 4)], "empty": [(0, 4)], "0d": [()]}),
    ("mean", lambda a: a.mean(-1),
     {"full": [(3, 4)], "empty": [(0, 4)], "0d": [()]}),
    ("mean_over_empty", lambda a: a.mean(),
     {"full": [(5,)], "empty": [(0,)]}),
    ("amax_keepdim", lambda a: a.amax(1, keepdim=True) - a,
     {"full": [(3, 4)], "empty": [(0, 4)]}),
    ("var_std", lambda a: a.var(1) + a.std(1, keepdim=True).sum(1),
     {"full": [(3, 4)], "empty": [(0, 4)]}),
    ("logsumexp", lambda a: a.logsumexp(1),
     {"full": [(3, 4)], "empty": [(0, 4)]}),
    ("matmul", lambda a, b: a @ b,
     {"full": [(3, 4), (4, 2)], "empty": [(3, 0), (0, 2)]}),
    ("matmul_empty_rows", lambda a, b: a @ b,
     {"full": [(2, 3, 4), (4, 2)], "empty": [(0, 4), (4, 2)]}),
    ("linear", lambda x, w, b: F.linear(x, w, b).tanh(),
     {"full": [(5, 4), (3, 4), (3,)], "empty": [(0, 4), (3, 4), (3,)]}),
    ("softmax", lambda a: a.softmax(-1),
     {"full": [(3, 4)], "empty": [(0, 4)], "0d": [()]}),
    ("log_softmax", lambda a: a.log_softmax(0),
     {"full": [(3, 4)], "empty": [(0, 4)], "0d": [()]}),
    ("layer_norm", lambda x, w, b: F.layer_norm(x, tuple(x.shape[-1:]), w, b),
     {"full": [(3, 4), (4,), (4,)], "empty": [(3, 0), (0,), (0,)]}),
    ("layer_norm_empty_batch", lambda x, w, b: F.layer_norm(x, tuple(x.shape[-1:]), w, b),
     {"full": [(2, 3, 4), (4,), (4,)], "empty": [(0, 3, 4), (4,), (4,)]}),
    ("linear_no_features", lambda x, w, b: F.linear(x, w, b) * 2,
     {"full": [(5, 2), (3, 2), (3,)], "empty": [(5, 0), (3, 0), (3,)]}),
    ("group_norm", lambda x, w, b: F.group_norm(x, 2, w, b),
     {"full": [(2, 4, 3), (4,), (4,)], "empty": [(0, 4, 3), (4,), (4,)]}),
    ("sdpa", lambda q, k, v: F.scaled_dot_product_attention(q, k, v),
     {"full": [(2, 3, 4), (2, 5, 4), (2, 5, 6)], "empty": [(2, 3, 4), (2, 0, 4), (2, 0, 6)]}),
    ("embedding", lambda w, i: F.embedding(i, w) * 2,
     {"full": [(5, 3), _idx(4, 0, 4)], "empty": [(5, 0), _idx(4, 0, 4)]}),
    ("cat", lambda a, b: ember.cat([a, b * 2], 0),
     {"full": [(2, 3), (1, 3)], "empty": [(0, 3), (2, 3)]}),
    ("cat_legacy_empty", lambda a, e: ember.cat([a, e.flip(0)]) * 3,
     {"full": [(3,), (2,)], "empty": [(3,), (0,)]}),
    ("stack", lambda a, b: ember.stack([a, b.exp()], -1),
     {"full": [(2, 3), (2, 3)], "empty": [(0, 3), (0, 3)], "0d": [(), ()]}),
    ("slicing", lambda a: a[1:, ::2] * a[:-1, 1::2],
     {"full": [(4, 4)], "empty": [(0, 4)]}),
    ("select_unsqueeze", lambda a: a[..., None] * 2,
     {"full": [(2, 3)], "empty": [(0,)], "0d": [()]}),
    ("index_tensor", lambda a, i: a[i] * 2,
     {"full": [(4, 3), _idx(2, 0, 2)], "empty": [(4, 3), _idx()]}),
    ("gather", lambda a, i: a.gather(1, i),
     {"full": [(2, 3), ("long", ((0, 2, 2), (1, 1, 0)))],
      "empty": [(0, 3), ("long", np.zeros((0, 3), np.int64))]}),
    ("where", lambda c, a, b: ember.where(c > 0, a, b * 2),
     {"full": [(3, 4), (3, 4), (4,)], "empty": [(0, 4), (0, 4), (4,)], "0d": [(), (), ()]}),
    ("masked_fill", lambda a, m: a.masked_fill(m > 0, 0.5) * a,
     {"full": [(3, 4), (3, 4)], "empty": [(0, 4), (0, 4)], "0d": [(), ()]}),
    ("views", lambda a, b: (a.t() @ b).reshape(-1).expand(2, -1),
     {"full": [(3, 2), (3, 4)], "empty": [(0, 2), (0, 4)]}),
    ("mse_loss", lambda a, b: F.mse_loss(a, b),
     {"full": [(3, 4), (3, 4)], "empty": [(0, 4), (0, 4)], "0d": [(), ()]}),
    ("cross_entropy", lambda x, t: F.cross_entropy(x, t),
     {"full": [(4, 3), _idx(0, 2, 1, 2)], "empty": [(0, 3), _idx()]}),
]

DTYPES = [ember.float32, ember.float64]
MODES = ["full", "empty", "0d"]
# plain: the loss is a weighted sum of the outputs; unused: extra inputs requiring grad
# that are unused, used only in a comparison, or only through integer ops; aux_kept /
# aux_dropped: a second output (of the first input) that the loss leaves out, or that
# is the whole loss
VARIANTS = ["plain", "unused", "aux_kept", "aux_dropped"]


def _sweep_params():
    for name, fn, modes in CASES:
        for mode in MODES:
            if mode not in modes:
                continue
            for variant in VARIANTS:
                if mode != "full" and variant.startswith("aux_"):
                    continue
                yield pytest.param(name, mode, variant, id=f"{name}-{mode}-{variant}")


CASE_FNS = {name: (fn, modes) for name, fn, modes in CASES}


def _wrap(fn, variant):
    if variant == "unused":
        def f(*args):
            *xs, spare, gate, counts = args
            out = fn(*xs)
            k = (counts * 10).long() % 3 + 1                 # integer ops only
            return out * (gate > 0) * k.sum()                # gate: a comparison only
        return f
    if variant.startswith("aux_"):
        def f(*xs):
            return fn(*xs), (xs[0] * 3).exp()
        return f
    return fn


def _make_inputs(specs, variant, dtype, seed):
    g = np.random.default_rng(seed)
    vals = []
    for s in specs:
        if isinstance(s, tuple) and s and s[0] == "long":
            vals.append(("long", np.asarray(s[1], dtype=np.int64)))
        else:
            vals.append(("float", g.standard_normal(s) * 0.8))
    if variant == "unused":
        vals += [("float", g.standard_normal(3)), ("float", np.array(0.7)),
                 ("float", g.standard_normal(2))]

    def build():
        return [ember.tensor(v, dtype=ember.int64) if k == "long"
                else ember.tensor(v, dtype=dtype, requires_grad=True) for k, v in vals]
    return build


def _outputs(res):
    return list(res) if isinstance(res, tuple) else [res]


def _loss(outs, variant, weights):
    parts = list(zip(outs, weights))
    if variant == "aux_kept":
        parts = parts[:1]
    elif variant == "aux_dropped":
        parts = parts[1:]
    return sum((o * w).sum() for o, w in parts)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
@pytest.mark.parametrize("name,mode,variant", list(_sweep_params()))
def test_sweep_compiled_gradients_match_eager(name, mode, variant, dtype, backend):
    fn, modes = CASE_FNS[name]
    build = _make_inputs(modes[mode], variant, dtype, seed=zlib.crc32(name.encode()))
    f = _wrap(fn, variant)
    tol = TOL[dtype]

    eager_in = build()
    eager_outs = _outputs(f(*eager_in))
    g = np.random.default_rng(7)
    weights = [ember.tensor(g.standard_normal(tuple(o.shape)), dtype=o.dtype)
               for o in eager_outs]
    eager_loss = _loss(eager_outs, variant, weights)
    eager_loss.backward()

    comp_in = build()
    comp_outs = _outputs(ember.compile(f, backend=backend, fullgraph=True)(*comp_in))
    assert any(o.grad_fn is not None for o in comp_outs)
    for o in comp_outs:
        if o.requires_grad:
            _compiled(o)
    assert len(comp_outs) == len(eager_outs)
    for o, w in zip(comp_outs, eager_outs):
        assert tuple(o.shape) == tuple(w.shape) and o.dtype is w.dtype
        np.testing.assert_allclose(o.detach().numpy(), w.detach().numpy(), equal_nan=True,
                                   **tol)
    comp_loss = _loss(comp_outs, variant, weights)
    comp_loss.backward()
    _same_grads(comp_in, eager_in, tol)

    if variant == "unused":
        spare, gate, counts = comp_in[-3:]
        assert spare.grad is None and gate.grad is None and counts.grad is None

    # a second backward raises, in eager and compiled alike, and adds nothing
    before = [None if t.grad is None else t.grad.numpy().copy() for t in comp_in]
    for loss in (eager_loss, comp_loss):
        with pytest.raises(RuntimeError, match=SECOND_TIME):
            loss.backward()
    for t, b in zip(comp_in, before):
        if b is not None:
            np.testing.assert_array_equal(t.grad.numpy(), b)


def test_sweep_covers_every_mode_and_variant():
    params = list(_sweep_params())
    seen = {(p.values[1], p.values[2]) for p in params}
    assert {("full", v) for v in VARIANTS} <= seen
    assert {("empty", "plain"), ("empty", "unused"), ("0d", "plain"), ("0d", "unused")} <= seen
    assert len(params) > 4 * len(CASES)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("make", [
    lambda: ember.randn(4, 0, 3, dtype=ember.float64).permute(2, 0, 1),
    lambda: ember.randn(3, 0, 4, dtype=ember.float64).transpose(0, 2),
    lambda: ember.randn(5, 3, dtype=ember.float64)[5:].t(),
], ids=["permuted", "transposed", "sliced"])
def test_empty_inputs_in_any_layout(backend, make):
    """Empty inputs laid out as a permutation: the saved values of the forward (made in
    the compiled forward's own layout) reach the backward graph, which reads no
    element of them."""
    def f(x, w):
        h = (x * 2).exp()
        return (h * w).sum(-1), h * w
    xe, x = make().requires_grad_(), make().requires_grad_()
    we, w = (ember.randn(xe.shape[-1:], dtype=ember.float64).requires_grad_()
             for _ in range(2))
    w = we.detach().clone().requires_grad_()
    for leaves, fn in (((xe, we), f), ((x, w), ember.compile(f, backend=backend))):
        a, b = fn(*leaves)
        (a.sum() + b.sum()).backward()
    _compiled(a)
    _same_grads([x, w], [xe, we], TOL[ember.float64])


def test_compiled_graph_reads_an_empty_input_in_another_layout():
    from ember.aot import decompose, trace_joint
    from ember.compiler.backend import CompiledLLVMGraph
    a = ember.randn(4, 0, 3).permute(2, 0, 1)
    g = CompiledLLVMGraph(decompose(trace_joint(lambda x: x * 2, [a]).graph), "empty")
    assert tuple(g.run.plan[0][0][:2]) == ((3, 4, 0), tuple(a.stride()))
    out = g(ember.randn(3, 4, 0))[0]                  # contiguous: another layout
    assert tuple(out.shape) == (3, 4, 0)
