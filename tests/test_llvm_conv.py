"""Convolutions and pooling compiled by the LLVM backend (compiler/conv.py,
compiler/pooling.py): an im2col kernel and one GEMM per convolution, col2im for the
input's gradient, results equal to eager's (float64 to 1e-10, float32 to the compiled
models' tolerances), eager's output layouts, identical results at 1 and 2 threads."""
import os
import subprocess
import sys

import numpy as np
import pytest

import ember
import ember.nn.functional as F
from ember.capture import counters
from ember.compiler import backend as llvm_backend
from ember.compiler import conv as conv_lowering

F64 = dict(rtol=1e-10, atol=1e-12)
F32 = dict(rtol=1e-4, atol=1e-5)


@pytest.fixture(autouse=True)
def strict(monkeypatch):
    ember.compiler.reset()
    monkeypatch.setattr(ember.compiler.config, "strict", True)
    monkeypatch.setattr(ember.compiler.config, "graph_cache", False)
    threads = ember.get_num_threads()
    yield
    ember.set_num_threads(threads)
    assert not counters["llvm_fallback"], dict(counters["llvm_fallback"])
    assert not counters["backend_fallback"], dict(counters["backend_fallback"])
    ember.compiler.reset()


# (N, Ci, H, W, Co, kh, kw, stride, padding, dilation, bias)
GEOMETRIES = [
    (2, 3, 9, 8, 4, 3, 3, 1, 1, 1, True),
    (2, 3, 9, 8, 4, 3, 3, 2, 1, 1, True),
    (1, 4, 7, 7, 5, 1, 1, 1, 0, 1, False),
    (3, 2, 10, 11, 3, 3, 2, 2, 2, 2, True),
    (2, 5, 6, 9, 2, 2, 3, (2, 1), (0, 1), (1, 2), False),
    (2, 3, 16, 16, 8, 3, 3, 2, 1, 1, False),
]


def _leaves(dtype, geom, seed=0):
    N, Ci, H, W, Co, kh, kw, _, _, _, bias = geom
    g = np.random.default_rng(seed)

    def t(shape):
        return ember.tensor(g.standard_normal(shape), dtype=dtype, requires_grad=True)
    return t((N, Ci, H, W)), t((Co, Ci, kh, kw)), t((Co,)) if bias else None


def _conv(geom):
    s, p, d = geom[7:10]

    def f(x, w, b):
        return (F.conv2d(x, w, b, stride=s, padding=p, dilation=d).relu() * 1.5)
    return f


def _run(f, xs, compiled):
    fn = ember.compile(f, fullgraph=True) if compiled else f
    out = fn(*xs)
    leaves = [t for t in xs if t is not None]
    grads = ember.autograd.grad((out * out).sum(), leaves)
    return out, grads


@pytest.mark.parametrize("eager_float32", [False, True], ids=["gemm", "eager_f32"])
@pytest.mark.parametrize("dtype,tol", [(ember.float64, F64), (ember.float32, F32)],
                         ids=["float64", "float32"])
@pytest.mark.parametrize("geom", GEOMETRIES, ids=[str(i) for i in range(len(GEOMETRIES))])
def test_conv2d_and_its_gradients_match_eager(dtype, tol, geom, eager_float32, monkeypatch):
    monkeypatch.setattr(conv_lowering, "eager_float32", eager_float32)
    want, want_g = _run(_conv(geom), _leaves(dtype, geom), False)
    llvm_backend.recent.clear()
    got, got_g = _run(_conv(geom), _leaves(dtype, geom), True)
    np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), **tol)
    for a, b in zip(got_g, want_g):
        np.testing.assert_allclose(a.numpy(), b.numpy(), **tol)
        assert a.stride() == b.stride()
    assert got.stride() == want.stride()
    text = "\n".join(str(c.lowered) for c in llvm_backend.recent)
    # forward: im2col + one GEMM; backward: the input's gradient by GEMM + col2im, the
    # weight's by the convolution of the input by the output's gradient (no index
    # gather); float32 with eager_float32: conv.c's kernel; a float32 weight gradient:
    # conv.c's weight-gradient kernel (the convolution_weight_grad prim)
    eager = eager_float32 and dtype is ember.float32
    wgrad = dtype is ember.float32
    assert text.count("extern convolution(") == (2 if eager else 0), text
    assert text.count("extern convolution_weight_grad(") == (1 if wgrad else 0), text
    assert text.count("extern") == 2 * eager + wgrad, text
    assert ("im2col" in text) != eager and ("col2im" in text) != eager, text


def test_float32_convolutions_run_the_eager_kernel_with_eager_bits():
    """A float32 convolution is conv.c's kernel as an extern step (its input's
    elementwise chain realized first, the bias added by the kernel): the output bit for
    bit eager's, at 1 and 2 threads; in the backward the input's gradient (a transposed
    convolution) is too, and so is the weight's (conv.c's weight-gradient kernel, the
    convolution_weight_grad prim)."""
    geom = (4, 16, 12, 12, 24, 3, 3, 1, 1, 1, True)
    for threads in (1, 2):
        ember.set_num_threads(threads)
        ember.compiler.reset()
        x, w, b = _leaves(ember.float32, geom, seed=threads)

        def f(x, w, b):
            return F.conv2d((x * 0.5).relu(), w, b, padding=1).relu()
        want = f(x, w, b)
        want_g = ember.autograd.grad(want.sum(), (x, w, b))
        llvm_backend.recent.clear()
        got = ember.compile(f, fullgraph=True)(x, w, b)
        got_g = ember.autograd.grad(got.sum(), (x, w, b))
        np.testing.assert_array_equal(got.detach().numpy(), want.detach().numpy())
        for a, c in zip(got_g[:2], want_g[:2]):
            np.testing.assert_array_equal(a.numpy(), c.numpy())
        np.testing.assert_allclose(got_g[2].numpy(), want_g[2].numpy(), **F32)
        fwd, bwd = (str(c.lowered) for c in llvm_backend.recent)
        assert "extern convolution(" in fwd and "im2col" not in fwd, fwd
        assert bwd.count("extern convolution(") == 1 and "col2im" not in bwd, bwd
        assert bwd.count("extern convolution_weight_grad(") == 1 and "im2col" not in bwd, bwd


def test_forward_is_an_im2col_kernel_and_one_gemm(monkeypatch):
    monkeypatch.setattr(conv_lowering, "eager_float32", False)
    geom = GEOMETRIES[1]
    x, w, b = (t.detach() for t in _leaves(ember.float32, geom))
    llvm_backend.recent.clear()
    with ember.no_grad():
        ember.compile(_conv(geom), fullgraph=True)(x, w, b)
    (graph,) = llvm_backend.recent
    steps = graph.lowered.steps
    assert [s[0] for s in steps].count("matmul") == 1
    assert not [s for s in steps if s[0] == "extern"]
    # bias, relu and scale are one kernel after the GEMM, which writes the output
    after = steps[[s[0] for s in steps].index("matmul") + 1:]
    assert len(after) == 1 and after[0][0] == "kernel", str(graph.lowered)


def test_input_computed_by_elementwise_ops_is_computed_in_the_gather():
    """A BatchNorm-like affine and ReLU feeding an unpadded convolution is computed in
    the im2col pass: no buffer holds it."""
    g = np.random.default_rng(1)
    x = ember.tensor(g.standard_normal((2, 4, 6, 6)))
    w = ember.tensor(g.standard_normal((3, 4, 1, 1)))
    s = ember.tensor(g.standard_normal((1, 4, 1, 1)))

    def f(x, w, s):
        return F.conv2d((x * s + 1).relu(), w)
    llvm_backend.recent.clear()
    got = ember.compile(f, fullgraph=True)(x, w, s)
    np.testing.assert_allclose(got.numpy(), f(x, w, s).numpy(), **F64)
    (graph,) = llvm_backend.recent
    # the gather, then the GEMM's channel-major output copied into eager's layout
    kernels = [s.ir.name for s in graph.lowered.steps if s[0] == "kernel"]
    assert len(kernels) == 2 and "im2col" in kernels[0] and "layout" in kernels[1], kernels


def test_non_contiguous_input_and_weight():
    g = np.random.default_rng(2)
    x = ember.tensor(g.standard_normal((2, 3, 7, 9))).transpose(2, 3)      # (2, 3, 9, 7)
    w = ember.tensor(g.standard_normal((4, 3, 3, 3))).transpose(2, 3)
    b = ember.tensor(g.standard_normal((8,)))[::2]

    def f(x, w, b):
        return F.conv2d(x, w, b, padding=1)
    got = ember.compile(f, fullgraph=True)(x, w, b)
    np.testing.assert_allclose(got.numpy(), f(x, w, b).numpy(), **F64)


def test_grouped_convolution_runs_the_eager_kernel():
    g = np.random.default_rng(3)
    x = ember.tensor(g.standard_normal((2, 4, 6, 6)))
    w = ember.tensor(g.standard_normal((6, 2, 3, 3)))
    llvm_backend.recent.clear()

    def f(x, w):
        return F.conv2d(x, w, groups=2).relu()
    got = ember.compile(f, fullgraph=True)(x, w)
    np.testing.assert_allclose(got.numpy(), f(x, w).numpy(), **F64)
    assert "extern convolution" in str(llvm_backend.recent[0].lowered)


@pytest.mark.parametrize("dtype", [ember.float32, ember.float64])
def test_results_identical_at_one_and_two_threads(dtype):
    geom = (16, 16, 16, 16, 32, 3, 3, 1, 1, 1, True)
    results = []
    for threads in (1, 2):
        ember.set_num_threads(threads)
        ember.compiler.reset()
        out, grads = _run(_conv(geom), _leaves(dtype, geom), True)
        results.append([out.detach().numpy()] + [t.numpy() for t in grads])
    for a, b in zip(*results):
        np.testing.assert_array_equal(a, b)


def test_pooling_and_its_backward_are_lowered():
    """max_pool2d (with its indices, under grad) and avg_pool2d, forward and backward,
    compile with no extern step."""
    g = np.random.default_rng(4)
    x = ember.tensor(g.standard_normal((2, 3, 9, 8)), requires_grad=True)

    def f(x):
        return F.max_pool2d(x, 3, 2, 1) .sum() + F.avg_pool2d(x, 2).pow(2).sum()
    llvm_backend.recent.clear()
    got = ember.compile(f, fullgraph=True)(x)
    (gx,) = ember.autograd.grad(got, (x,))
    want = f(x)
    (wx,) = ember.autograd.grad(want, (x,))
    np.testing.assert_allclose(got.item(), want.item(), **F64)
    np.testing.assert_allclose(gx.numpy(), wx.numpy(), **F64)
    text = "\n".join(str(c.lowered) for c in llvm_backend.recent)
    assert "extern" not in text, text


def _conv_bn(dtype, bias):
    ember.manual_seed(5)
    m = ember.nn.Sequential(ember.nn.Conv2d(3, 6, 3, padding=1, bias=bias),
                            ember.nn.BatchNorm2d(6), ember.nn.ReLU(),
                            ember.nn.Conv2d(6, 4, 1, stride=2), ember.nn.BatchNorm2d(4))
    m.to(dtype)
    # running statistics and affine parameters away from their initial values
    g = np.random.default_rng(6)
    for mod in m:
        if isinstance(mod, ember.nn.BatchNorm2d):
            n = mod.num_features
            mod.running_mean.copy_(ember.tensor(g.standard_normal(n), dtype=dtype))
            mod.running_var.copy_(ember.tensor(g.uniform(0.5, 2.0, n), dtype=dtype))
            with ember.no_grad():
                mod.weight.copy_(ember.tensor(g.standard_normal(n), dtype=dtype))
                mod.bias.copy_(ember.tensor(g.standard_normal(n), dtype=dtype))
    return m


def _weight_is_scaled(graph):
    """Whether a kernel of the graph multiplies the convolution weights (a fold; a
    weight gradient's copy into eager's layout has the weights' sizes too, and no mul)."""
    return any(s[0] == "kernel" and list(s.ir.sizes) in ([6, 3, 3, 3], [4, 6, 1, 1])
               and "= mul " in str(s.ir) for s in graph.lowered.steps)


@pytest.mark.parametrize("dtype,tol", [(ember.float64, F64), (ember.float32, F32)],
                         ids=["float64", "float32"])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("eager_float32", [False, True], ids=["gemm", "eager_f32"])
def test_batchnorm_folds_into_the_convolution_in_inference(dtype, tol, bias, eager_float32,
                                                          monkeypatch):
    monkeypatch.setattr(conv_lowering, "eager_float32", eager_float32)
    m = _conv_bn(dtype, bias).eval()
    x = ember.tensor(np.random.default_rng(7).standard_normal((2, 3, 9, 9)), dtype=dtype)
    with ember.no_grad():
        want = m(x)
        llvm_backend.recent.clear()
        got = ember.compile(m, fullgraph=True)(x)
    np.testing.assert_allclose(got.numpy(), want.numpy(), **tol)
    (graph,) = llvm_backend.recent
    assert _weight_is_scaled(graph), str(graph.lowered)
    # the output pass adds one shift per channel: no running statistics are read there
    # (the eager kernel, an extern step, adds the folded bias itself)
    last = graph.lowered.steps[-1]
    assert last[0] == "extern" or "sqrt" not in str(last.ir), str(graph.lowered)
    assert (last[0] == "extern") == (eager_float32 and dtype is ember.float32)


def test_batchnorm_in_training_mode_is_not_folded():
    m = _conv_bn(ember.float64, True).train()
    twin = _conv_bn(ember.float64, True).train()
    x = ember.tensor(np.random.default_rng(8).standard_normal((2, 3, 9, 9)))
    want = m(x)
    llvm_backend.recent.clear()
    got = ember.compile(twin, fullgraph=True)(x)
    np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), **F64)
    for a, b in zip(m.buffers(), twin.buffers()):       # running statistics updated alike
        np.testing.assert_allclose(a.numpy(), b.numpy(), **F64)
    assert not any(_weight_is_scaled(g) for g in llvm_backend.recent)
    got.sum().backward()
    want.sum().backward()
    for a, b in zip(m.parameters(), twin.parameters()):
        np.testing.assert_allclose(b.grad.numpy(), a.grad.numpy(), **F64)


@pytest.mark.parametrize("dtype,tol", [(ember.float64, F64), (ember.float32, F32)],
                         ids=["float64", "float32"])
def test_products_with_a_small_inner_dim_are_pointwise(dtype, tol):
    """Adaptive average pooling's separable maps ((1, 4) @ (N, C, 4, 4), and in the
    backward K = 1 outer products) and any product with K <= lowerings.SMALL_K are
    pointwise values fused into their users: no BLAS call per matrix; results as eager's,
    broadcast batch dims included."""
    g = np.random.default_rng(9)
    x = ember.tensor(g.standard_normal((3, 5, 4, 4)), dtype=dtype, requires_grad=True)
    a = ember.tensor(g.standard_normal((2, 3, 4)), dtype=dtype)
    b = ember.tensor(g.standard_normal((1, 4, 5)), dtype=dtype)
    c = ember.tensor(g.standard_normal((7, 1)), dtype=dtype)

    def f(x, a, b, c):
        pooled = F.adaptive_avg_pool2d(x.relu(), 1).flatten(1).sin().sum()
        return pooled + (a @ b).sum() + (c @ a[0, :1, :1]).cos().sum()
    llvm_backend.recent.clear()
    got = ember.compile(f, fullgraph=True)(x, a, b, c)
    (gx,) = ember.autograd.grad(got, (x,))
    want = f(x, a, b, c)
    (wx,) = ember.autograd.grad(want, (x,))
    np.testing.assert_allclose(got.item(), want.item(), **tol)
    np.testing.assert_allclose(gx.numpy(), wx.numpy(), **tol)
    text = "\n".join(str(c.lowered) for c in llvm_backend.recent)
    assert len(llvm_backend.recent) == 2 and "matmul" not in text, text


# ------------------------------------------------------------------ weight gradients

# (N, Ci, H, W, Co, kh, kw, stride, padding, dilation, groups); kh None: a 1-d convolution
WGRAD_GEOMETRIES = [
    (4, 16, 12, 12, 24, 3, 3, 1, 1, 1, 1),
    (3, 8, 11, 10, 16, 3, 3, 2, 1, 1, 1),
    (2, 6, 13, 12, 4, 3, 2, (2, 1), (0, 2), (2, 1), 1),
    (2, 8, 9, 9, 12, 3, 3, 1, 1, 1, 4),
    (2, 6, 8, 8, 6, 3, 3, 2, 1, 1, 6),
    (16, 16, 8, 8, 32, 1, 1, 1, 0, 1, 1),
    (3, 4, None, 20, 6, None, 5, 2, 2, 3, 2),
]


def _wgrad_case(geom, seed):
    N, Ci, H, W, Co, kh, kw, s, p, d, groups = geom
    g = np.random.default_rng(seed)
    xs = (N, Ci, W) if H is None else (N, Ci, H, W)
    ws = (Co, Ci // groups, kw) if kh is None else (Co, Ci // groups, kh, kw)
    x = ember.tensor(g.standard_normal(xs), dtype=ember.float32, requires_grad=True)
    w = ember.tensor(g.standard_normal(ws), dtype=ember.float32, requires_grad=True)
    conv = F.conv1d if H is None else F.conv2d

    def f(x, w):
        return conv((x * 0.5).relu(), w, None, s, p, d, groups).relu()
    return f, x, w


def _weight_grads(geom, threads):
    """(compiled, eager) gradients of (x, w), and the backward graph's lowered text."""
    ember.set_num_threads(threads)
    ember.compiler.reset()
    f, x, w = _wgrad_case(geom, seed=threads)
    out = f(x, w)
    want = ember.autograd.grad((out * out).sum(), (x, w))
    llvm_backend.recent.clear()
    out = ember.compile(f, fullgraph=True)(x, w)
    got = ember.autograd.grad((out * out).sum(), (x, w))
    return got, want, str(llvm_backend.recent[-1].lowered)


@pytest.mark.parametrize("geom", WGRAD_GEOMETRIES,
                         ids=[str(i) for i in range(len(WGRAD_GEOMETRIES))])
def test_float32_weight_gradient_runs_the_eager_kernel_with_eager_bits(geom):
    """A float32 convolution's weight gradient is the convolution_weight_grad prim, an
    extern step running conv.c's blocked weight-gradient kernel (eager's, for the
    contiguous input and output gradient it is given): bit for bit eager's, strided,
    padded, dilated, grouped, depthwise, 1x1 and 1-d, at 1 and 2 threads, and the same
    bits at both."""
    results = []
    for threads in (1, 2):
        got, want, bwd = _weight_grads(geom, threads)
        assert bwd.count("extern convolution_weight_grad(") == 1, bwd
        np.testing.assert_array_equal(got[1].numpy(), want[1].numpy())
        np.testing.assert_allclose(got[0].numpy(), want[0].numpy(), **F32)
        assert got[1].stride() == want[1].stride()
        results.append(got[1].numpy())
    f, x, w = _wgrad_case(geom, seed=0)
    ember.set_num_threads(1)
    ember.compiler.reset()
    out = ember.compile(f, fullgraph=True)(x, w)
    one = ember.autograd.grad((out * out).sum(), (w,))[0].numpy()
    ember.set_num_threads(2)
    ember.compiler.reset()
    out = ember.compile(f, fullgraph=True)(x, w)
    np.testing.assert_array_equal(ember.autograd.grad((out * out).sum(), (w,))[0].numpy(), one)


def test_weight_gradient_prim_off_traces_the_convolution(monkeypatch):
    """eager_weight_grad False: the weight gradient is the convolution prim lowered as
    im2col + one GEMM (no extern weight-gradient step), equal to eager's to float32's
    tolerance; float64 never traces the prim."""
    geom = WGRAD_GEOMETRIES[1]
    monkeypatch.setattr(conv_lowering, "eager_weight_grad", False)
    got, want, bwd = _weight_grads(geom, 1)
    assert "convolution_weight_grad" not in bwd and "im2col" in bwd, bwd
    np.testing.assert_allclose(got[1].numpy(), want[1].numpy(), **F32)
    monkeypatch.setattr(conv_lowering, "eager_weight_grad", True)
    ember.compiler.reset()
    x, w, _ = _leaves(ember.float64, GEOMETRIES[0])
    llvm_backend.recent.clear()
    out = ember.compile(lambda x, w: F.conv2d(x, w, padding=1), fullgraph=True)(x, w)
    got = ember.autograd.grad(out.sum(), (w,))[0]
    assert "convolution_weight_grad" not in str(llvm_backend.recent[-1].lowered)
    want = ember.autograd.grad(F.conv2d(x, w, padding=1).sum(), (w,))[0]
    np.testing.assert_allclose(got.numpy(), want.numpy(), **F64)


_AVX2 = "+sse2,+sse3,+ssse3,+sse4.1,+sse4.2,+popcnt,+avx,+avx2,+fma,+f16c,+bmi,+bmi2"


@pytest.mark.skipif(os.environ.get("EMBER_LLVM_FEATURES") == _AVX2,
                    reason="already running with AVX2 features")
def test_weight_gradient_bits_with_avx2_loops():
    """The weight-gradient tests again with EMBER_LLVM_FEATURES forcing AVX2, which
    narrows conv.c's loops (and the JIT's vectors) alike: still eager's bits."""
    env = dict(os.environ, EMBER_LLVM_FEATURES=_AVX2)
    check = subprocess.run([sys.executable, "-c", "from ember import _C; "
                            "print(_C._conv_loops_level())"], env=env, capture_output=True,
                           text=True, timeout=300)
    assert check.returncode == 0 and check.stdout.strip() in ("0", "1"), check.stderr
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                        f"{__file__}::test_float32_weight_gradient_runs_the_eager_kernel_"
                        "with_eager_bits",
                        f"{__file__}::test_float32_convolutions_run_the_eager_kernel_with_"
                        "eager_bits"],
                       env=env, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
