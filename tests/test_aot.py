"""AOT autograd: joint tracing, decomposition into prims, partition, the autograd node and
backend "aot_eager" (issue aot-1)."""
import math
import operator

import numpy as np
import pytest

import ember
import ember.nn as nn
from ember import _C
from ember.aot import PrimVerificationError, aot_compile, decompose, trace_joint, \
    verify_prims
from ember.ops import registry

import op_db

F32 = dict(rtol=1e-5, atol=1e-6)
F64 = dict(rtol=1e-10, atol=1e-12)


@pytest.fixture(autouse=True)
def _fresh():
    ember.compiler.reset()
    yield
    ember.compiler.reset()


def example(x, w, b):
    return (x @ w + b).relu().sum()


def _leaves(dtype, seed=0):
    g = np.random.default_rng(seed)
    x = ember.tensor(g.standard_normal((8, 5)), dtype=dtype, requires_grad=True)
    w = ember.tensor(g.standard_normal((5, 3)), dtype=dtype, requires_grad=True)
    b = ember.tensor(g.standard_normal(3), dtype=dtype, requires_grad=True)
    return x, w, b


def _grads(ts):
    return [t.grad.numpy().copy() for t in ts]


@pytest.mark.parametrize("dtype,tol", [(ember.float32, F32), (ember.float64, F64)])
def test_example_forward_and_backward_match_eager(dtype, tol):
    xs = _leaves(dtype)
    want = example(*xs)
    want.backward()
    want_grads = _grads(xs)
    ys = _leaves(dtype)
    got = ember.compile(example, backend="aot_eager", fullgraph=True)(*ys)
    assert got.grad_fn is not None and got.grad_fn.name() == "CompiledFunctionBackward"
    got.backward()
    np.testing.assert_allclose(got.item(), want.item(), **tol)
    for g, w in zip(_grads(ys), want_grads):
        np.testing.assert_allclose(g, w, **tol)


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(6, 16)
        self.fc2 = nn.Linear(16, 2)

    def forward(self, x, target):
        y = self.fc2(self.fc1(x).tanh())
        return ((y - target) ** 2).mean()


@pytest.mark.parametrize("dtype,tol", [(ember.float32, F32), (ember.float64, F64)])
def test_two_layer_mlp_with_loss(dtype, tol):
    ember.manual_seed(0)
    model = MLP().to(dtype)
    x = ember.randn(10, 6, dtype=dtype)
    t = ember.randn(10, 2, dtype=dtype)
    loss = model(x, t)
    loss.backward()
    want = [p.grad.numpy().copy() for p in model.parameters()]
    model.zero_grad()
    compiled = ember.compile(model, backend="aot_eager", fullgraph=True)
    got_loss = compiled(x, t)
    got_loss.backward()
    np.testing.assert_allclose(got_loss.item(), loss.item(), **tol)
    for p, w in zip(model.parameters(), want):
        np.testing.assert_allclose(p.grad.numpy(), w, **tol)
    assert x.grad is None and t.grad is None


def test_inputs_without_requires_grad_get_no_grad():
    x, w, b = _leaves(ember.float32)
    x.requires_grad_(False)
    out = ember.compile(example, backend="aot_eager")(x, w, b)
    out.backward()
    assert x.grad is None
    assert w.grad is not None and b.grad is not None


def test_gradients_accumulate_over_two_backward_calls():
    xs = _leaves(ember.float64)
    for _ in range(2):
        example(*xs).backward()
    want = _grads(xs)
    ys = _leaves(ember.float64)
    f = ember.compile(example, backend="aot_eager")
    for _ in range(2):
        f(*ys).backward()
    for g, w in zip(_grads(ys), want):
        np.testing.assert_allclose(g, w, **F64)


def test_no_grad_capture_compiles_no_backward():
    seen = []

    def backend(gm, inputs):
        fn = ember.aot.aot_eager(gm, inputs)
        seen.append("CompiledFunction" if isinstance(fn, ember.aot.CompiledFunction)
                    else "inference")
        return fn

    xs = _leaves(ember.float32)
    f = ember.compile(example, backend=backend)
    with ember.no_grad():
        out = f(*xs)
    assert out.grad_fn is None and seen == ["inference"]
    out = f(*xs)          # grad mode is guarded: a second graph, with a backward
    assert seen == ["inference", "CompiledFunction"]
    assert out.grad_fn is not None


def test_decomposed_joint_graph_holds_only_prims():
    joint = trace_joint(example, _leaves(ember.float32))
    ops = {n.target for n in joint.graph.nodes if n.op == "call_function"}
    assert any(not o.entry.prim for o in ops if isinstance(o, _C.Op)), \
        "the example should use non-prims (relu, sum's backward) before decomposition"
    prim = decompose(joint.graph)
    verify_prims(prim)
    for n in prim.nodes:
        if n.op == "call_function" and n.target is not operator.getitem:
            assert n.target.entry.prim, n.format_node()


def test_verifier_rejects_non_prims():
    joint = trace_joint(lambda x: x.sigmoid(), [ember.ones(3)])
    with pytest.raises(PrimVerificationError, match="sigmoid"):
        verify_prims(joint.graph)


def test_aot_graphs_log(monkeypatch, capsys):
    monkeypatch.setenv("EMBER_LOGS", "aot_graphs")
    out = ember.compile(example, backend="aot_eager")(*_leaves(ember.float32))
    text = capsys.readouterr().err
    assert "AOT forward graph" in text and "AOT backward graph" in text
    assert "saved for backward" in text and "bytes" in text
    out.backward()


# ------------------------------------------------------------------ every decomposition


def _decomposable():
    out = []
    for key, info in op_db.all_infos().items():
        e = info.entry
        if e.prim or e.composite or e.inplace or e.decompose is None:
            continue
        if info.random or info.ref is None or info.dynamic_shape:
            continue      # (a value-dependent shape cannot be traced on meta tensors)
        out.append(pytest.param(info, id=key))
    return out


def _run_graph(graph, inputs):
    return ember.fx.GraphModule({}, graph).forward(*inputs)


@pytest.mark.parametrize("info", _decomposable())
def test_decomposition_matches_the_op(info):
    """The decomposed (prims-only) graph of every op computes what the op computes,
    forward and backward, on the op's float64 samples."""
    rng = np.random.default_rng(0)
    dtype = "float64" if "float64" in info.dtypes else info.dtypes[-1]
    op = info.entry.c_op
    checked = 0
    params = info.entry.schema.params
    for sample in info.samples(dtype, rng):
        positions = [i for i, a in enumerate(sample.args)
                     if isinstance(a, ember.Tensor) and i < len(params) and params[i].is_tensor]
        tensors = [sample.args[i] for i in positions]

        def call(*ts, _s=sample, _pos=positions):
            args = list(_s.args)
            for p, t in zip(_pos, ts):
                args[p] = t
            r = op(*args, **_s.kwargs)
            return tuple(r) if isinstance(r, tuple) else r

        want = call(*tensors)
        want = want if isinstance(want, tuple) else (want,)
        joint = trace_joint(call, tensors, with_backward=False)
        prim = decompose(joint.graph)       # every decomposition exists: no skips
        got = _run_graph(prim, tensors)
        for g, w in zip(got, want):
            assert g.shape == w.shape and g.dtype == w.dtype, info.name
            np.testing.assert_allclose(g.numpy().astype(np.float64),
                                       w.numpy().astype(np.float64),
                                       rtol=1e-6, atol=1e-9, equal_nan=True,
                                       err_msg=f"{info.name} {sample}")
            if w.dtype.is_floating_point:
                # zeros keep eager's sign (1 / -0.0 is -inf)
                wz = w.numpy() == 0
                np.testing.assert_array_equal(np.signbit(g.numpy()[wz]),
                                              np.signbit(w.numpy()[wz]),
                                              err_msg=f"sign of zero: {info.name} {sample}")
        checked += 1
        floats = [t for t in tensors if t.dtype.is_floating_point]
        if not (info.entry.backward and sample.grad and floats and dtype == "float64"):
            continue
        leaves = [t.detach().requires_grad_(t.dtype.is_floating_point) for t in tensors]
        joint = trace_joint(call, leaves)
        if joint.num_tangents == 0:
            continue
        prim = decompose(joint.graph)
        outs = call(*leaves)
        outs = outs if isinstance(outs, tuple) else (outs,)
        tangents = [ember.ones(tuple(outs[i].shape), dtype=outs[i].dtype)
                    for i in joint.differentiable_outputs]
        res = _run_graph(prim, [t.detach() for t in leaves] + tangents)
        grads = res[joint.num_forward_outputs:]
        diff_outs = [outs[i] for i in joint.differentiable_outputs]
        want_grads = ember.autograd.grad(diff_outs, [leaves[i] for i in
                                                     joint.primals_requiring_grad],
                                         tangents, allow_unused=True)
        for g, w in zip([grads[i] for i in joint.primals_requiring_grad], want_grads):
            if w is None:
                continue
            np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-8, atol=1e-10,
                                       err_msg=f"gradient of {info.name} {sample}")
    assert checked > 0, f"no usable sample for {info.name}"


@pytest.mark.parametrize("backend", ["aot_eager", "llvm"])
def test_gelu_keeps_its_tail_compiled(backend):
    """Found by the fuzzer: gelu decomposed as x/2 (1 + erf(x/sqrt 2)) gave 0 where eager
    (x/2 erfc(-x/sqrt 2)) gives 1e-44, so x / gelu(x) was inf; forward and backward now
    follow eager in the tail."""
    x = ember.tensor([-30.0, -12.0, -3.0, 0.5, 20.0], dtype=ember.float64,
                     requires_grad=True)
    xc = x.detach().requires_grad_(True)
    f = ember.nn.functional.gelu
    want, got = f(x), ember.compile(f, backend=backend)(xc)
    np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), rtol=1e-13)
    assert got[0].item() != 0
    want.sum().backward()
    got.sum().backward()
    np.testing.assert_allclose(xc.grad.numpy(), x.grad.numpy(), rtol=1e-12, atol=1e-300)


@pytest.mark.parametrize("backend", ["aot_eager", "llvm"])
def test_non_differentiable_outputs_of_inputs_that_require_grad(backend):
    """Found by the fuzzer: inputs require grad, yet no output is differentiable
    (scatter with a reduce has no gradient in ember): the compiled outputs record no
    history, as eager's."""
    x = ember.randn(3, 4, dtype=ember.float64, requires_grad=True)
    i = ember.zeros(1, 4, dtype=ember.int64)
    src = ember.randn(1, 4, dtype=ember.float64, requires_grad=True)

    def f(x, i, src):
        v = x.scatter(0, i, src, reduce="add")
        return v, v.t()

    want = f(x, i, src)
    got = ember.compile(f, backend=backend)(x, i, src)
    assert [t.requires_grad for t in got] == [t.requires_grad for t in want] == [False] * 2
    assert all(t.grad_fn is None for t in got)


@pytest.mark.parametrize("backend", ["aot_eager", "llvm"])
def test_an_input_detached_and_returned_is_a_new_tensor_requiring_no_grad(backend):
    """x.detach() of a graph input has no node of its own in the trace, so the graph
    returned the input itself (requiring grad, the same object): a training step
    returning loss.detach() after loss.backward() (a break) gave a loss requiring
    grad. The runtime now detaches the input (mutation.DetachedInput), as eager."""
    import ember.nn as enn
    for fn in (lambda x: x.detach(), lambda x: (x.detach(), x * 2),
               lambda x: (x.detach(), x.detach())):
        x = ember.randn(3, requires_grad=True) * 1
        want = fn(x)
        got = ember.compile(fn, backend=backend)(x)
        want = want if isinstance(want, tuple) else (want,)
        got = got if isinstance(got, tuple) else (got,)
        assert [g.requires_grad for g in got] == [w.requires_grad for w in want]
        assert not any(g is x for g in got)
        got[0].add_(1)                       # a detached tensor: writable, x sees it
        assert ember.equal(x.detach(), got[0])
    lin = enn.Linear(3, 1)

    def step(x, y):
        loss = ((lin(x) - y) ** 2).mean()
        loss.backward()
        return loss.detach()
    out = ember.compile(step, backend=backend)(ember.randn(4, 3), ember.randn(4, 1))
    assert not out.requires_grad and out.grad_fn is None
