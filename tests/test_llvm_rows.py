"""Row kernels (compiler/rows.py, the loop IR's `phase`): a softmax or a layer_norm is
one kernel whose phases read each row from memory once, forward and backward; compiled
results equal eager's and are identical run to run and at 1 and 2 threads; the verifier
and the JIT keep registers in their phase and memory reads where a point wrote."""
import os
import subprocess
import sys

import numpy as np
import pytest

import ember
import ember.nn.functional as F
from ember import _C
from ember.compiler import rows
from ember.compiler.jit import JitModule
from ember.compiler.loop_ir import Affine, Kernel, LoopIRError, Op, Param, Stmt, verify

f32 = _C.float32


@pytest.fixture(autouse=True)
def _strict():
    """A graph the LLVM backend cannot compile raises here, instead of running eagerly."""
    from ember.compiler import config
    before = config.strict
    config.strict = True
    yield
    config.strict = before


def _lowered(fn, arrays, grad=False):
    from ember.aot import decompose, trace_joint
    from ember.compiler.backend import CompiledLLVMGraph
    ts = [ember.from_numpy(a.copy()).requires_grad_(grad) for a in arrays]
    return str(CompiledLLVMGraph(decompose(trace_joint(fn, ts).graph), "rows").lowered)


def _softmax(x):
    return (x * 0.125).softmax(-1)


def _ln_gelu(x, r, w, b):
    return F.gelu(F.layer_norm(x, (x.shape[-1],), w, b)) + r


def _ln_inputs(rows_, d, seed=0):
    g = np.random.default_rng(seed)
    return [g.standard_normal((rows_, d)).astype(np.float32),
            g.standard_normal((rows_, d)).astype(np.float32),
            (g.standard_normal(d) * 0.1 + 1).astype(np.float32),
            (g.standard_normal(d) * 0.1).astype(np.float32)]


def test_softmax_is_one_kernel_computing_exp_once():
    x = np.random.default_rng(0).standard_normal((64, 1000)).astype(np.float32)
    text = str(_lowered(_softmax, [x]))
    assert text.count("kernel ") == 1, text
    assert text.count("  phase\n") == 2
    assert text.count(" exp float32") == 1      # stored by the sum's phase, loaded back


def test_layer_norm_gelu_residual_is_one_kernel():
    text = str(_lowered(_ln_gelu, _ln_inputs(64, 768)))
    assert text.count("kernel ") == 1 and text.count("  phase\n") == 2, text


def test_merging_off_gives_the_separate_kernels():
    x = np.random.default_rng(0).standard_normal((64, 1000)).astype(np.float32)
    rows.ENABLED = False
    try:
        text = str(_lowered(_softmax, [x]))
    finally:
        rows.ENABLED = True
    assert text.count("kernel ") == 3 and "phase" not in text


@pytest.mark.parametrize("n", [1, 15, 16, 17, 100, 1000])
def test_compiled_softmax_and_backward_equal_eager(n):
    rng = np.random.default_rng(n)
    a = (rng.standard_normal((24, n)) * 10).astype(np.float32)
    a[0, n // 2] = np.nan
    a[1, :] = -np.inf
    a[2, n - 1] = np.inf
    a[4, 0] = 80.0
    gout = rng.standard_normal((24, n)).astype(np.float32)
    x = ember.from_numpy(a.copy()).requires_grad_(True)
    xc = ember.from_numpy(a.copy()).requires_grad_(True)
    want = _softmax(x)
    got = ember.compile(_softmax, backend="llvm")(xc)
    (want * ember.from_numpy(gout)).sum().backward()
    (got * ember.from_numpy(gout)).sum().backward()
    for w, g in ((want.detach().numpy(), got.detach().numpy()), (x.grad.numpy(), xc.grad.numpy())):
        np.testing.assert_array_equal(np.isnan(g), np.isnan(w))
        keep = ~np.isnan(w)
        np.testing.assert_allclose(g[keep], w[keep], rtol=2e-5, atol=1e-6)


@pytest.mark.parametrize("d", [17, 768])
def test_compiled_layer_norm_gelu_residual_and_backward_equal_eager(d):
    arrays = _ln_inputs(48, d, seed=d)
    eager = [ember.from_numpy(a.copy()).requires_grad_(True) for a in arrays]
    comp = [ember.from_numpy(a.copy()).requires_grad_(True) for a in arrays]
    want = _ln_gelu(*eager)
    got = ember.compile(_ln_gelu, backend="llvm")(*comp)
    want.sum().backward()
    got.sum().backward()
    np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), rtol=1e-5,
                               atol=2e-5)
    for e, c in zip(eager, comp):
        np.testing.assert_allclose(c.grad.numpy(), e.grad.numpy(), rtol=1e-4, atol=1e-4)


def test_backward_rows_are_merged_too():
    """The joint graph's row kernels (softmax's backward: sum(g y) then y (g - s)) join."""
    x = np.random.default_rng(0).standard_normal((64, 512)).astype(np.float32)
    fn = lambda t: (_softmax(t) * t).sum()      # noqa: E731
    text = str(_lowered(fn, [x], grad=True))
    rows.ENABLED = False
    try:
        apart = str(_lowered(fn, [x], grad=True))
    finally:
        rows.ENABLED = True
    assert "phase" in text and text.count("kernel ") < apart.count("kernel ")


@pytest.mark.parametrize("case", ["softmax", "ln"])
def test_identical_run_to_run_and_across_thread_counts(case):
    if case == "softmax":
        fn, arrays = _softmax, [np.random.default_rng(1).standard_normal((2048, 1024))
                                .astype(np.float32)]
    else:
        fn, arrays = _ln_gelu, _ln_inputs(2048, 768)
    from ember.aot import decompose, trace_joint
    from ember.compiler.backend import CompiledLLVMGraph
    ts = [ember.from_numpy(a) for a in arrays]
    graphs = [CompiledLLVMGraph(decompose(trace_joint(fn, ts).graph), f"same{i}")
              for i in range(2)]
    before = ember.get_num_threads()
    results = []
    try:
        for threads in (1, 2, 2, 1):
            ember.set_num_threads(threads)
            for g in graphs:
                results.append(g(*ts)[0].numpy())
    finally:
        ember.set_num_threads(before)
    for r in results[1:]:
        np.testing.assert_array_equal(r, results[0])


# ------------------------------------------------------------------ the IR rules


def _phased(stmts, nreduce=1):
    params = [Param(("in", 0), f32, 12), Param(("buf", 0), f32, 3),
              Param(("buf", 1), f32, 12)]
    return Kernel("k", (3, 4), nreduce, params, stmts)


_ROW = Affine((4, 1))
_KEPT = Affine((1, 0))


def _max_then_sub():
    return [Stmt("load", 0, f32, param=0, index=_ROW),
            Stmt("reduce", None, None, (0,), param=1, index=_KEPT, value="max"),
            Stmt("phase"),
            Stmt("load", 1, f32, param=0, index=_ROW),
            Stmt("load", 2, f32, param=1, index=_KEPT),
            Stmt("sub", 3, f32, (1, 2)),
            Stmt("store", None, None, (3,), param=2, index=_ROW)]


def test_a_phased_kernel_prints_verifies_and_runs():
    from ember.compiler.plan import BufferSpec, InputSpec, KernelStep, StepKind, View
    k = verify(_phased(_max_then_sub()))
    assert "\n  phase\n" in str(k) and ("phase",) in k.spec().instrs
    module = JitModule((k.spec(),), "phased")
    plan = ((InputSpec((3, 4), (4, 1)),), (BufferSpec(f32, (3,)), BufferSpec(f32, (3, 4))),
            (KernelStep(StepKind.KERNEL, 0, (("in", 0), ("buf", 0), ("buf", 1)), 3, False, k),),
            (View(("buf", 1), (3, 4), (4, 1), 0),))
    run = _C.CompiledGraph(module, module.addresses, plan)
    x = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    (got,) = run(ember.from_numpy(x))
    np.testing.assert_array_equal(got.numpy(), x - x.max(1, keepdims=True))


def test_a_register_lives_in_its_phase():
    stmts = _max_then_sub()
    stmts[5] = Stmt("sub", 3, f32, (0, 2))         # %0 is the first phase's
    with pytest.raises(LoopIRError, match="used before definition"):
        verify(_phased(stmts))
    spec = _phased(_max_then_sub()).spec()
    instrs = list(spec.instrs)
    instrs[5] = ("sub", 3, f32._code, 0, 2)
    with pytest.raises(ValueError, match="register 0 used before definition"):
        JitModule((spec._replace(instrs=tuple(instrs)),), "crossing")


def test_a_reduction_is_read_only_in_a_later_phase():
    stmts = _max_then_sub()
    del stmts[2]                                    # no phase: the max is not done yet
    stmts[2:] = [Stmt("load", 2, f32, param=1, index=_KEPT)]
    with pytest.raises(LoopIRError, match="where this point has not written it"):
        verify(_phased(stmts))


def test_a_phase_needs_reduced_dims():
    with pytest.raises(LoopIRError, match="without reduced dims"):
        verify(_phased(_max_then_sub(), nreduce=0))


def _kernel(name, stmts, params):
    return Kernel(name, (8, 16), 1, params, stmts)


def test_a_kernel_reading_another_row_does_not_join():
    """A later kernel reading an earlier one's output elsewhere than where the same
    point wrote it (here the next row) would see it unwritten: the run stops."""
    p_in, p_out = Param(("in", 0), f32, 128), Param(("buf", 0), f32, 128)
    first = _kernel("a", [Stmt("load", 0, f32, param=0, index=Affine((16, 1))),
                          Stmt("store", None, None, (0,), param=1, index=Affine((16, 1)))],
                    [p_in, p_out])
    first.nreduce = 0
    same = _kernel("c", [Stmt("load", 0, f32, param=0, index=Affine((16, 1))),
                         Stmt("reduce", None, None, (0,), param=1, index=Affine((1, 0)),
                              value="sum")],
                   [p_out, Param(("buf", 1), f32, 8)])
    assert rows._joins([first], 0, same)
    other_row = _kernel("d", [Stmt("load", 0, f32, param=0, index=Affine((16, 1), 16)),
                              Stmt("reduce", None, None, (0,), param=1,
                                   index=Affine((1, 0)), value="sum")],
                        [Param(("buf", 0), f32, 144), Param(("buf", 1), f32, 8)])
    assert not rows._joins([first], 0, other_row)
    overwrite = _kernel("e", [Stmt("load", 0, f32, param=0, index=Affine((16, 1))),
                              Stmt("store", None, None, (0,), param=1, index=Affine((16, 1)))],
                        [Param(("buf", 2), f32, 128), p_in])
    overwrite.nreduce = 0
    assert not rows._joins([first], 0, overwrite)     # writes what the run reads


_AVX2 = ("+sse2,+sse3,+ssse3,+sse4.1,+sse4.2,+popcnt,+avx,+avx2,+fma,+f16c,+bmi,+bmi2")


def test_same_results_with_avx2_vectors():
    """The row kernels again, JIT-compiled for AVX2 (8 lanes)."""
    if os.environ.get("EMBER_LLVM_FEATURES"):
        pytest.skip("already running with forced features")
    env = dict(os.environ, EMBER_LLVM_FEATURES=_AVX2)
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                        f"{__file__}::test_compiled_softmax_and_backward_equal_eager",
                        f"{__file__}::test_compiled_layer_norm_gelu_residual_and_backward_equal_eager",
                        f"{__file__}::test_a_phased_kernel_prints_verifies_and_runs"],
                       env=env, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]


def test_layer_norm_backward_rows_step_over_the_column_sums():
    """The joint graph of layer_norm + gelu + residual: the statistics, the forward and
    the input's gradient are one row kernel; the weight and bias gradients (column sums)
    and the loss's full sum are stepped over and run after it."""
    text = _lowered(lambda x, r, w, b: _ln_gelu(x, r, w, b).sum(), _ln_inputs(256, 64),
                    grad=True)
    heads = [line for line in text.splitlines() if line.startswith("kernel ")]
    assert sum("[256, 64] reduce 1 " in h for h in heads) == 1, text
    assert "_rows" in heads[0] and not any("pointwise" in h and "[256, 64]" in h
                                           for h in heads), text


def test_stepping_over_keeps_dependencies():
    """A kernel that reads what a stepped-over kernel writes is not moved before it."""
    p = [Param(("in", 0), f32, 128), Param(("buf", 0), f32, 8), Param(("buf", 1), f32, 128),
         Param(("buf", 2), f32, 128)]
    row, kept = Affine((16, 1)), Affine((1, 0))
    a = Kernel("a", (8, 16), 1, [p[0], p[1]], [Stmt("load", 0, f32, param=0, index=row),
                                              Stmt("reduce", None, None, (0,), param=1,
                                                   index=kept, value="sum")])
    b = Kernel("b", (8, 16), 0, [p[0], p[2]], [Stmt("load", 0, f32, param=0, index=row),
                                              Stmt("store", None, None, (0,), param=1,
                                                   index=row)])
    c = Kernel("c", (8, 16), 0, [p[2], p[3]], [Stmt("load", 0, f32, param=0, index=row),
                                              Stmt("store", None, None, (0,), param=1,
                                                   index=row)])
    assert not rows._independent(c, [type("S", (), {"ir": b})()])
    assert rows._independent(a, [type("S", (), {"ir": b})()])
