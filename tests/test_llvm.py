"""The LLVM backend (issue llvm-1): loop IR, fusion, LLVM codegen, runtime.

Every test here runs in strict mode (a lowering or LLVM failure raises instead of
falling back) and checks that nothing fell back."""
import numpy as np
import pytest

import ember
from ember import _C
from ember.aot import decompose, trace_joint
from ember.capture import counters
from ember.compiler import backend as llvm_backend
from ember.compiler.backend import CompiledLLVMGraph
from ember.compiler.loop_ir import Affine, Kernel, LoopIRError, Param, Stmt, verify

F32 = dict(rtol=1e-5, atol=1e-6)
F64 = dict(rtol=1e-10, atol=1e-12)


@pytest.fixture(autouse=True)
def strict(monkeypatch):
    ember.compiler.reset()
    monkeypatch.setattr(ember.compiler.config, "strict", True)
    yield
    assert not counters["llvm_fallback"], dict(counters["llvm_fallback"])
    assert not counters["backend_fallback"], dict(counters["backend_fallback"])
    assert not counters["unsupported"], dict(counters["unsupported"])
    ember.compiler.reset()


def example(x, w, b):
    return (x @ w + b).relu().sum()


def _leaves(dtype, seed=0, shapes=((8, 5), (5, 3), (3,))):
    g = np.random.default_rng(seed)
    return [ember.tensor(g.standard_normal(s), dtype=dtype, requires_grad=True)
            for s in shapes]


def test_llvm_is_the_default_backend():
    assert ember.capture.backends.default_backend() == "llvm"
    assert ember.capture.lookup_backend("inductor")[1] is ember.capture.lookup_backend("llvm")[1]


@pytest.mark.parametrize("dtype,tol", [(ember.float32, F32), (ember.float64, F64)])
def test_example_and_its_backward_match_eager(dtype, tol):
    xs = _leaves(dtype)
    want = example(*xs)
    want.backward()
    want_grads = [t.grad.numpy().copy() for t in xs]
    ys = _leaves(dtype)
    got = ember.compile(example, fullgraph=True)(*ys)
    got.backward()
    np.testing.assert_allclose(got.item(), want.item(), **tol)
    for t, w in zip(ys, want_grads):
        np.testing.assert_allclose(t.grad.numpy(), w, **tol)


def test_forward_is_one_blas_call_and_one_fused_kernel():
    xs = _leaves(ember.float32)
    llvm_backend.recent.clear()
    ember.compile(example)(*xs)
    forward = next(c for c in llvm_backend.recent if c.name.endswith("_forward"))
    plan = forward.lowered
    kinds = [s[0] for s in plan.steps]
    # the min-cut partitioner saves relu's mask (1 byte an element), not its output:
    # a second pointwise kernel writes it beside the fused reduction, on each block of
    # the product's rows as BLAS makes it (the product's epilogue)
    assert sorted(kinds) == ["kernel", "matmul"], str(plan)
    mm = next(s for s in plan.steps if s[0] == "matmul")
    assert len(mm.epilogues) == 1 and mm.epilogues[0].ir.nreduce == 0
    outputs = {o[0] for o in plan.outputs if o is not None}
    matmul_out = {("buf", s[3]) for s in plan.steps if s[0] == "matmul"}
    buffers = {("buf", j) for j in range(len(plan.buffers))}
    assert buffers <= outputs | matmul_out, f"intermediate buffers in\n{plan}"
    kernel = next(k for k in plan.kernels if k.nreduce)
    assert kernel.nreduce == 2 and any(s.op == "reduce" for s in kernel.stmts)


def test_inference_graph_has_no_saved_outputs():
    xs = [t.detach() for t in _leaves(ember.float32)]
    llvm_backend.recent.clear()
    with ember.no_grad():
        out = ember.compile(example)(*xs)
    np.testing.assert_allclose(out.item(), example(*xs).item(), **F32)
    (graph,) = list(llvm_backend.recent)
    assert [s[0] for s in graph.lowered.steps] == ["matmul", "kernel"]
    assert len(graph.lowered.buffers) == 2        # the BLAS result and the sum


def test_optimized_ir_uses_host_vector_width():
    features = _C._jit_target()["features"]
    width = "<16 x float>" if "+avx512f" in features else "<8 x float>"
    a, b = ember.randn(64, 256), ember.randn(64, 256)
    joint = trace_joint(lambda x, y: (x * y + 1.0).exp().relu(), [a, b])
    g = CompiledLLVMGraph(decompose(joint.graph), "width")
    assert width in g.module.optimized_ir


def test_output_code_log(monkeypatch, capsys):
    monkeypatch.setenv("EMBER_LOGS", "output_code")
    ember.compile(example)(*[t.detach() for t in _leaves(ember.float32)])
    out = capsys.readouterr()
    text = out.out + out.err          # the output_code artifact logs to stderr
    assert "loop IR" in text and "kernel" in text and "define" in text


def test_bad_shapes_raise_the_eager_error(monkeypatch):
    monkeypatch.setattr(ember.compiler.config, "strict", False)
    x, w, b = _leaves(ember.float32, shapes=((8, 5), (4, 3), (3,)))
    with pytest.raises(RuntimeError) as eager:
        example(x, w, b)
    f = ember.compile(example)
    with pytest.raises(RuntimeError) as compiled:
        f(x, w, b)
    assert str(compiled.value) == str(eager.value)
    counters.clear()


def test_compiled_graph_rejects_wrong_inputs():
    a, b = ember.randn(4, 8), ember.randn(4, 8)
    joint = trace_joint(lambda x, y: x * y, [a, b])
    g = CompiledLLVMGraph(decompose(joint.graph), "check")
    with pytest.raises(RuntimeError, match="compiled for"):
        g(ember.randn(4, 9), b)
    with pytest.raises(TypeError):
        g(a)
    out = g(a.t().contiguous().t(), b)        # another layout is copied in, not misread
    np.testing.assert_allclose(out[0].numpy(), (a * b).numpy())


# ------------------------------------------------------------------ graphs vs eager


def _cases():
    g = np.random.default_rng(1)

    def t(*shape, dtype=ember.float32):
        return ember.tensor(g.standard_normal(shape), dtype=dtype)

    return [
        ("broadcast chain", lambda x, y: (x * 2 + y).tanh() - x / 3, (t(6, 7), t(7))),
        ("exp and log", lambda x: (x.exp() + 1).log(), (t(33, 17),)),
        ("sigmoid", lambda x: x.sigmoid(), (t(100),)),
        ("sum over dims", lambda x: x.sum((0, 2)), (t(3, 4, 5),)),
        ("sum keepdim", lambda x: x.sum(1, keepdim=True) * x, (t(4, 6),)),
        ("mean", lambda x: x.mean(-1), (t(5, 9),)),
        ("amax", lambda x: x.amax(0), (t(7, 3),)),
        ("softmax by hand", lambda x: (x - x.amax(-1, keepdim=True)).exp() /
         (x - x.amax(-1, keepdim=True)).exp().sum(-1, keepdim=True), (t(4, 10),)),
        ("where and compare", lambda x, y: ember.where(x > y, x, y * 0.5), (t(5, 5), t(5))),
        ("int to float", lambda x: x.float() * 0.5, (ember.arange(12).view(3, 4),)),
        ("sum of bool", lambda x: (x > 0).sum(), (t(50),)),
        ("transposed input", lambda x: (x.t() * 2).exp(), (t(8, 3),)),
        ("permute and slice", lambda x: x.permute(2, 0, 1)[1:, :, ::2] + 1, (t(3, 4, 6),)),
        ("expand", lambda x: x.unsqueeze(1).expand(4, 3, 5) * 2, (t(4, 5),)),
        ("reshape of a chain", lambda x: (x * 3).view(6, 4).sum(0), (t(2, 3, 4),)),
        ("batched matmul", lambda x, y: (x @ y).relu(), (t(2, 3, 4), t(2, 4, 5))),
        ("matmul of views", lambda x, y: x.t() @ y.t(), (t(4, 3), t(5, 4))),
        ("float64", lambda x, y: (x * y).sum(-1).exp(), (t(5, 6, dtype=ember.float64),
                                                         t(6, dtype=ember.float64))),
        ("pow", lambda x: x ** 2 + x.abs() ** 0.5 if hasattr(x, "abs") else x ** 2,
         (t(9),)),
        ("constant output", lambda x: ember.zeros(3) + x.sum(), (t(4),)),
        ("gelu and silu", lambda x: ember.ops.api.gelu(x) + ember.ops.api.silu(x),
         (t(7, 9),)),
        ("gelu tanh", lambda x: ember.ops.api.gelu(x, approximate="tanh"), (t(33),)),
        ("softplus and mish", lambda x: ember.ops.api.softplus(x) * 0.5 +
         ember.ops.api.mish(x), (t(40),)),
        ("clamp and sqrt", lambda x: x.clamp(-1, 1) + (x * x + 1).sqrt(), (t(6, 6),)),
        ("sin cos log1p expm1", lambda x: x.sin() * x.cos() + x.abs().log1p() - x.expm1(),
         (t(50),)),
    ]


@pytest.mark.parametrize("name,fn,args", _cases(), ids=[c[0] for c in _cases()])
def test_graph_matches_eager(name, fn, args):
    want = fn(*args)
    got = ember.compile(fn, fullgraph=True)(*args)
    assert got.shape == want.shape and got.dtype == want.dtype
    tol = F64 if want.dtype is ember.float64 else F32
    np.testing.assert_allclose(got.numpy(), want.numpy(), **tol)


@pytest.mark.parametrize("name,fn,args", _cases()[:10], ids=[c[0] for c in _cases()[:10]])
def test_graph_gradients_match_eager(name, fn, args):
    floats = [a.detach().requires_grad_(a.dtype.is_floating_point) for a in args]
    want = fn(*floats)
    if not want.requires_grad:
        pytest.skip("nothing to differentiate")
    want.sum().backward()
    want_grads = [a.grad.numpy().copy() if a.grad is not None else None for a in floats]
    again = [a.detach().requires_grad_(a.dtype.is_floating_point) for a in args]
    ember.compile(fn, fullgraph=True)(*again).sum().backward()
    for a, w in zip(again, want_grads):
        if w is not None:
            np.testing.assert_allclose(a.grad.numpy(), w, rtol=1e-4, atol=1e-5)


def test_expf_accuracy():
    x = np.linspace(-87.0, 88.0, 200_001).astype(np.float32)
    x = np.concatenate([x, np.float32([0.0, -0.0, np.inf, -np.inf, np.nan, -100, 100])])
    joint = trace_joint(lambda t: t.exp(), [ember.from_numpy(x)])
    g = CompiledLLVMGraph(decompose(joint.graph), "expf")
    got = g(ember.from_numpy(x))[0].numpy()
    want = np.exp(x.astype(np.float64))
    finite = (want < 3.0e38) & (want > 1e-37)
    ulp = np.spacing(want[finite].astype(np.float32)).astype(np.float64)
    assert np.max(np.abs(got[finite] - want[finite]) / ulp) <= 2.5
    assert np.isnan(got[-3]) and got[-5] == np.inf and got[-4] == 0.0


# ------------------------------------------------------------------ the loop IR


def test_loop_ir_prints_and_verifies():
    xs = _leaves(ember.float32)
    joint = trace_joint(example, [t.detach() for t in xs])
    g = CompiledLLVMGraph(decompose(joint.graph), "text")
    text = g.describe()
    assert "blas matmul" in text and "reduce sum" in text and "load p" in text
    for k in g.lowered.kernels:
        verify(k)


def test_verifier_rejects_bad_kernels():
    f32 = ember.float32
    k = Kernel("bad", (4,), 0, [Param(("in", 0), f32, 4), Param(("buf", 0), f32, 4)],
               [Stmt("load", 0, f32, param=0, index=Affine((2,), 0)),
                Stmt("store", None, None, (0,), param=1, index=Affine((1,), 0))])
    with pytest.raises(LoopIRError, match="reaches elements"):
        verify(k)
    k2 = Kernel("bad2", (4,), 0, [Param(("buf", 0), f32, 4)],
                [Stmt("store", None, None, (3,), param=0, index=Affine((1,), 0))])
    with pytest.raises(LoopIRError, match="before definition"):
        verify(k2)
    k3 = Kernel("bad3", (4, 2), 1, [Param(("in", 0), f32, 8), Param(("buf", 0), f32, 8)],
                [Stmt("load", 0, f32, param=0, index=Affine((2, 1), 0)),
                 Stmt("reduce", None, None, (0,), param=1, index=Affine((1, 1), 0),
                      value="sum")])
    with pytest.raises(LoopIRError, match="reduced dim"):
        verify(k3)


def test_prims_without_lowering_run_as_extern_steps():
    """argmax and slice_scatter have no loop IR: their eager kernels run inside the
    compiled graph, between fused kernels that read their results."""
    x = ember.randn(6, 5)

    def f(t):
        i = (t * 2).argmax(-1)
        y = ember.slice_scatter(t.exp(), t[:2] * 3, 0, 0, 2)
        return (i.float() + 1) * y.sum(-1)
    joint = trace_joint(f, [x])
    g = CompiledLLVMGraph(decompose(joint.graph), "extern")
    assert any(s[0] == "extern" for s in g.lowered.steps), str(g.lowered)
    np.testing.assert_allclose(g(x)[0].numpy(), f(x).numpy(), rtol=1e-5)
    got = ember.compile(f, fullgraph=True)(x)
    np.testing.assert_allclose(got.numpy(), f(x).numpy(), rtol=1e-5)


# ------------------------------------------------------------------ layouts


def _kernels_of(fn, *args):
    joint = trace_joint(fn, [a.detach() for a in args])
    g = CompiledLLVMGraph(decompose(joint.graph), "layout")
    for k in g.lowered.kernels:
        verify(k)
    return g


@pytest.mark.parametrize("dtype", [ember.float32, ember.float64, ember.int32, ember.int64])
@pytest.mark.parametrize("op", ["sum", "amax", "amin"])
def test_reductions_along_outer_dims_accumulate_in_order(dtype, op):
    """A column reduction (the reduced dim outer in memory) loops the reduced dim outside
    and folds contiguous rows into the output instead of striding down each column; it
    agrees with eager, including NaN propagation of amax and integer extremes."""
    g = np.random.default_rng(3)
    base = g.standard_normal((37, 3, 21)) * 50
    if dtype.is_floating_point:
        base[5, 1, 4] = np.nan
    x = ember.tensor(base, dtype=dtype)
    if not dtype.is_floating_point:
        x = x - 1000             # amax of all-negative columns checks the identity
    fn = (lambda t: getattr(t, op)(0)) if op != "sum" else (lambda t: t.sum(0))
    lowered = _kernels_of(fn, x).lowered
    assert any(s.op == "accumulate" for k in lowered.kernels for s in k.stmts), \
        str(lowered)
    got = ember.compile(fn, fullgraph=True)(x)
    want = fn(x)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, equal_nan=True)


@pytest.mark.parametrize("shape,dims,keepdim", [
    ((64, 33), 0, False), ((64, 33), 0, True), ((5, 6, 7), (0, 1), False),
    ((5, 6, 7), 1, True), ((0, 9), 0, False), ((9, 1), 0, False), ((4, 0, 3), 0, False)])
def test_outer_reductions_shapes(shape, dims, keepdim):
    x = ember.randn(*shape)
    fn = lambda t: (t * 2 + 1).sum(dims, keepdim=keepdim)       # noqa: E731
    got = ember.compile(fn, fullgraph=True)(x)
    want = fn(x)
    assert got.shape == want.shape
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-5)


def _accumulating_steps(g):
    """(step, kernel) of each kernel step that accumulates into its output."""
    out = []
    for s in g.lowered.steps:
        if s[0] == "kernel":
            k = g.lowered.kernels[s[1]]
            if any(st.op == "accumulate" for st in k.stmts):
                out.append((s, k))
    return out


def _chunks(step):
    return -(-step.outer // step.chunk) if step.chunk else 1


def test_accumulating_kernels_are_not_split_across_threads():
    """A kernel folding different dim-0 indices into one element never runs on several
    threads (they would race); a large column sum is instead split into partial sums
    per block of rows, the blocks on different threads, the partials folded in order."""
    x = ember.randn(4096, 64)
    old = ember.get_num_threads()
    try:
        ember.set_num_threads(2)
        g = _kernels_of(lambda t: t.sum(0), x)
        acc = _accumulating_steps(g)
        for s, k in acc:
            racy = any(st.op == "accumulate" and st.index.coeffs[0] == 0 for st in k.stmts)
            assert not (racy and s.parallel), str(g.lowered)
        assert any(s.parallel and _chunks(s) > 1 for s, _ in acc), str(g.lowered)
        np.testing.assert_allclose(g(x)[0].numpy(), x.numpy().sum(0), rtol=1e-4,
                                   atol=1e-4)
    finally:
        ember.set_num_threads(old)


@pytest.mark.parametrize("shape,dims", [
    ((1024, 128), 0),              # a bias gradient: partial sums per block of rows
    ((8, 128, 128), (0, 1)),       # over batch and tokens
    ((8, 128, 512), 0),            # two kept dims: threads take blocks of columns
    ((16, 64, 32, 32), (0,)),
])
def test_outer_reductions_split_across_threads_with_identical_results(shape, dims):
    """Column reductions large enough split into more than one chunk run on the pool,
    and give the same bits on one thread and on two (the split depends on the shape,
    not on the thread count); sum and amax agree with NumPy."""
    x = np.random.default_rng(5).standard_normal(shape).astype(np.float32)
    old = ember.get_num_threads()
    try:
        for fn, want in ((lambda t: (t * 2).sum(dims), (x.astype(np.float64) * 2).sum(dims)),
                         (lambda t: t.amax(dims), x.max(dims))):
            g = _kernels_of(fn, ember.from_numpy(x))
            acc = _accumulating_steps(g)
            assert any(s.parallel and _chunks(s) > 1 for s, _ in acc), str(g.lowered)
            got = []
            for threads in (1, 2, 1):
                ember.set_num_threads(threads)
                got.append(ember.compile(fn, fullgraph=True)(ember.from_numpy(x)).numpy())
            assert np.array_equal(got[0], got[1]) and np.array_equal(got[0], got[2])
            np.testing.assert_allclose(got[0], want, rtol=1e-4, atol=1e-3)
    finally:
        ember.set_num_threads(old)


def test_small_outer_reductions_stay_on_one_thread():
    """Below fusion.PARALLEL_MIN points a column reduction is one kernel on one thread."""
    g = _kernels_of(lambda t: t.sum(0), ember.randn(100, 100))
    acc = _accumulating_steps(g)
    assert len(acc) == 1 and not acc[0][0].parallel, str(g.lowered)


def test_transposed_matmul_operand_is_computed_row_major():
    """relu(x).t() @ y: the pointwise kernel writes relu(x) in its own (row-major)
    layout and BLAS reads it transposed, rather than the kernel gathering columns."""
    x, y = ember.randn(32, 16), ember.randn(32, 8)
    fn = lambda a, b: a.relu().t() @ b        # noqa: E731
    g = _kernels_of(fn, x, y)
    (k,) = [k for k in g.lowered.kernels]
    store = next(s for s in k.stmts if s.op == "store")
    assert store.index.coeffs == (16, 1), str(g.lowered)
    np.testing.assert_allclose(g(x, y)[0].numpy(), fn(x, y).numpy(), rtol=1e-5, atol=1e-5)


def test_verifier_checks_accumulate():
    f32 = ember.float32
    k = Kernel("acc", (4, 2), 0, [Param(("in", 0), f32, 8), Param(("buf", 0), f32, 2)],
               [Stmt("load", 0, f32, param=0, index=Affine((2, 1), 0)),
                Stmt("accumulate", None, None, (0,), param=1, index=Affine((0, 1), 0),
                     value="sum")])
    assert "accumulate sum p1[i1] += %0" in str(verify(k))
    k.stmts[1].value = "mean"
    with pytest.raises(LoopIRError, match="unknown reduction"):
        verify(k)


def test_set_num_threads_governs_kernels_and_blas():
    from ember import _sysinfo
    old = ember.get_num_threads()
    try:
        with pytest.raises(ValueError, match="positive"):
            ember.set_num_threads(0)
        ember.set_num_threads(1)
        assert ember.get_num_threads() == 1
        if _C._blas_info() is not None and _sysinfo.blas()["threads"] is not None:
            assert _sysinfo.blas()["threads"] == 1
            ember.set_num_threads(2)
            assert _sysinfo.blas()["threads"] == 2
    finally:
        ember.set_num_threads(old)


@pytest.mark.parametrize("dtype", [ember.float32, ember.float64])
@pytest.mark.parametrize("e", [-4, -3.5, -2, -1.5, -1, -0.5, 0, 0.5, 1, 1.5, 2, 2.5, 3, 4,
                               0.3, -2.7])
def test_pow_by_constants_matches_eager_special_values(dtype, e):
    """Half-integer and integer exponents become sqrt/mul/div (vectorised); results equal
    eager's pow, signs of zeros and infinities included."""
    base = np.concatenate([np.linspace(-3, 3, 61), [0.0, -0.0, np.inf, -np.inf, np.nan,
                                                    1e-30, 1e30, 1e-20, 1e20]])
    x = ember.tensor(base, dtype=dtype)
    fn = lambda t: t ** e        # noqa: E731
    g = _kernels_of(fn, x)
    ops = {s.op for k in g.lowered.kernels for s in k.stmts}
    assert ("pow" in ops) == (e in (0.3, -2.7)), ops
    got, want = g(x)[0].numpy(), fn(x).numpy()
    np.testing.assert_allclose(got, want, rtol=2e-6 if dtype is ember.float32 else 1e-13,
                               atol=0, equal_nan=True)
    nan = np.isnan(want)
    assert (np.signbit(got) == np.signbit(want))[~nan].all()


def test_value_reading_several_buffers_is_stored_once_for_its_users():
    """A residual stream h = x + y feeding a norm and the next op is stored by the first
    kernel that visits it; later kernels read h, not x and y again."""
    x, y = ember.randn(16, 32), ember.randn(16, 32)

    def fn(a, b):
        h = a + b
        n = (h - h.mean(-1, keepdim=True)) * 2
        return n + h
    g = _kernels_of(fn, x, y)
    inputs_read = [sum(1 for p in k.params if p.ref[0] == "in") for k in g.lowered.kernels]
    assert inputs_read[0] == 2 and all(n == 0 for n in inputs_read[1:]), str(g.lowered)
    np.testing.assert_allclose(g(x, y)[0].numpy(), fn(x, y).numpy(), rtol=1e-5, atol=1e-5)


def test_step_profile():
    x = ember.randn(64, 64)
    g = _kernels_of(lambda t: (t @ t).relu().sum(0), x)
    assert g.run.profile is False and g.run.step_seconds is None
    assert "not profiling" in g.profile_report()
    g(x)
    g.start_profile()
    for _ in range(3):
        g(x)
    assert g.run.calls == 4
    secs = g.run.step_seconds
    assert len(secs) == len(g.lowered.steps) and all(s >= 0 for s in secs)
    assert sum(secs) > 0
    report = g.profile_report()
    assert "blas matmul [64, 64] @ [64, 64]" in report and "kernel" in report
    g.run.profile = False
    assert g.run.step_seconds is None


def test_erff_accuracy():
    """The IR erff (vectorised) against the exact erf: within 3 ulp over the float range,
    odd, exact at 0 and +-inf, NaN for NaN."""
    import math
    x = np.concatenate([np.linspace(-6.0, 6.0, 400_001), np.geomspace(1e-38, 1.0, 20_001),
                        -np.geomspace(1e-38, 1.0, 2001)]).astype(np.float32)
    x = np.concatenate([x, np.float32([0.0, -0.0, np.inf, -np.inf, np.nan])])
    joint = trace_joint(lambda t: t.erf(), [ember.from_numpy(x)])
    g = CompiledLLVMGraph(decompose(joint.graph), "erff")
    assert "@erff(" not in g.module.optimized_ir        # no libm call: vector code
    got = g(ember.from_numpy(x))[0].numpy()
    want = np.array([math.erf(float(v)) for v in x[:-5]])
    ulp = np.spacing(np.abs(want).astype(np.float32)).astype(np.float64)
    assert np.max(np.abs(got[:-5] - want) / ulp) <= 3.0
    assert got[-5] == 0.0 and not np.signbit(got[-5]) and np.signbit(got[-4])
    assert got[-3] == 1.0 and got[-2] == -1.0 and np.isnan(got[-1])


def test_buffers_are_reused_only_when_nothing_holds_them():
    """A compiled graph keeps each buffer's memory for its next call (no fresh mapping
    and page faults per call) but never while a tensor or array still uses it."""
    fn = lambda t: ((t * 0.5).exp() @ t.abs()).sqrt() + 1        # noqa: E731
    xs = [ember.randn(64, 64) for _ in range(4)]
    g = _kernels_of(fn, xs[0])
    out1 = g(xs[0])[0]
    out2 = g(xs[1])[0]
    np.testing.assert_allclose(out1.numpy(), fn(xs[0]).numpy(), rtol=1e-5)   # kept
    np.testing.assert_allclose(out2.numpy(), fn(xs[1]).numpy(), rtol=1e-5)
    ptr = out2.data_ptr()
    del out2
    out3 = g(xs[2])[0]
    assert out3.data_ptr() == ptr                        # the dropped output's memory
    view = out3.numpy()
    del out3
    out4 = g(xs[3])[0]
    np.testing.assert_allclose(view, fn(xs[2]).numpy(), rtol=1e-5)           # held
    np.testing.assert_allclose(out4.numpy(), fn(xs[3]).numpy(), rtol=1e-5)
    assert out4.data_ptr() != view.ctypes.data


@pytest.mark.parametrize("case", [
    lambda t: ember.slice_scatter(t * 2, t[:, 2:5] + 1, 1, 2, 5),
    lambda t: ember.slice_scatter(t, t[:, ::3] * 0 + 7, 1, 0, None, 3),
    lambda t: ember.slice_scatter(ember.zeros(6, 10, 4), t[1:4].exp(), 0, 1, 4),
    lambda t: ember.slice_scatter(t, t[:, -3:] - 1, 1, -3),
    lambda t: ember.slice_scatter(t, t[:, 10:], 1, 10),
    lambda t: ember.slice_scatter(t, t[..., 1:2] * 5, -1, 1, 2),
])
def test_slice_scatter_is_two_kernels(case):
    x = ember.randn(6, 10, 4)
    g = _kernels_of(case, x)
    assert [s[0] for s in g.lowered.steps] == ["kernel"] * len(g.lowered.steps)
    np.testing.assert_allclose(g(x)[0].numpy(), case(x).numpy(), rtol=1e-6, atol=1e-6)


def test_split_backward_compiles_without_extern_steps():
    """q, k, v = qkv.split(...): the gradient of qkv gathers three slices."""
    x = ember.randn(4, 12).requires_grad_()

    def f(t):
        q, k, v = (t * 2).split(4, dim=1)
        return (q * k).exp().sum() + v.tanh().sum()
    f(x).backward()
    want = x.grad.numpy().copy()
    x.grad = None
    backend_steps = []
    llvm_backend.recent.clear()
    ember.compile(f, fullgraph=True)(x).backward()
    for c in llvm_backend.recent:
        backend_steps += [s[0] for s in c.lowered.steps]
    assert "extern" not in backend_steps
    np.testing.assert_allclose(x.grad.numpy(), want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("sa,sb", [((8, 64, 32), (32, 16)), ((2, 3, 5, 7), (7, 4)),
                                   ((1, 5, 7), (7, 4)), ((4, 5, 7), (1, 7, 4)),
                                   ((4, 5, 7), (4, 7, 4)), ((7, 4), (3, 4, 5)),
                                   ((2, 1, 5, 7), (3, 7, 4)), ((3, 5, 7), (2, 1, 7, 4))])
@pytest.mark.parametrize("transpose", [None, "a", "b"])
def test_blas_batched_and_broadcast_products(sa, sb, transpose):
    """Products of every batch/broadcast layout straight into BLAS (a shared 2-D weight
    is one (batch*m) x k GEMM), against NumPy."""
    g = np.random.default_rng(5)

    def make(shape, t):
        if t:
            arr = g.standard_normal(shape[:-2] + (shape[-1], shape[-2])).astype(np.float32)
            return ember.from_numpy(arr).transpose(-1, -2)
        return ember.from_numpy(g.standard_normal(shape).astype(np.float32))
    a, b = make(sa, transpose == "a"), make(sb, transpose == "b")
    fn = lambda x, y: (x * 1) @ (y * 1) if transpose is None else x @ y   # noqa: E731
    got = ember.compile(fn, fullgraph=True)(a, b)
    np.testing.assert_allclose(got.numpy(), a.numpy() @ b.numpy(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [ember.float32, ember.float64])
@pytest.mark.parametrize("op", ["amax", "amin"])
def test_inner_max_min_reductions_vectorise_and_propagate_nan(dtype, op):
    """Max/min over the innermost dim fold order-preserving integer keys (vector code)
    and a NaN flag: NaN anywhere in a row gives NaN, infinities and signs are kept."""
    g = np.random.default_rng(7)
    base = g.standard_normal((6, 5, 67)) * 100
    base[0, 0, 3] = np.nan
    base[1, 1, :] = -np.inf
    base[2, 2, :] = np.inf
    base[3, 3, 10] = np.inf
    base[3, 4, 11] = -np.inf
    base[4, 0, :] = np.nan
    base[5, 1, :] = -np.abs(base[5, 1, :])
    x = ember.tensor(base, dtype=dtype)
    fn = lambda t: getattr(t, op)(-1)        # noqa: E731
    g_ = _kernels_of(fn, x)
    width = "<16 x float>" if dtype is ember.float32 else "<8 x double>"
    if "+avx512f" in _C._jit_target()["features"]:
        assert width in g_.module.optimized_ir
    got, want = g_(x)[0].numpy(), fn(x).numpy()
    np.testing.assert_array_equal(got, want)


def test_an_unused_input_that_requires_grad_gets_no_gradient():
    """The backward graph returns None for it: the compiled graph passes None through."""
    def f(x, z):
        return x * 2

    x, z = _leaves(ember.float64, shapes=((3, 4), (3, 4)))
    ember.compile(f, fullgraph=True)(x, z).backward(ember.ones(3, 4, dtype=ember.float64))
    np.testing.assert_array_equal(x.grad.numpy(), np.full((3, 4), 2.0))
    assert z.grad is None


def test_view_of_a_buffer_laid_out_otherwise_than_traced():
    """y = x.t() * 2 is transposed-dense when traced but its buffer is contiguous: the
    view of y.t() that the traced layout allows is made of a contiguous copy."""
    def f(x):
        y = x.t() * 2
        s = y.exp().sum()
        return y.t().view(-1) + s

    x = ember.randn(3, 4, dtype=ember.float64)
    np.testing.assert_allclose(ember.compile(f, fullgraph=True)(x).numpy(), f(x).numpy(),
                               **F64)
