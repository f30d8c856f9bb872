"""Prims are lowered through their op table entry: `entry.lower` (compiler/lowerings.py)
is the only thing that says how a prim compiles."""
import numpy as np
import pytest

import ember
from ember.aot import decompose, trace_joint
from ember.compiler import lowerings
from ember.compiler.backend import CompiledLLVMGraph
from ember.compiler.lowerings import OpLowering
from ember.compiler.plan import ExternStep, KernelStep
from ember.ops import registry


def test_every_prim_declares_its_lowering():
    missing = [e.qualified_name for e in registry.prims()
               if not isinstance(e.lower, OpLowering)]
    assert not missing, f"prims without lower=: {missing}"
    assert not [e.qualified_name for e in registry.ENTRIES
                if not e.prim and e.lower is not None], "lower= is for prims"


def test_pointwise_and_reduction_lowerings_name_loop_ir_instructions():
    from ember.compiler.loop_ir import Op, Reduction
    with pytest.raises(ValueError):
        lowerings.pointwise("fma")
    with pytest.raises(ValueError):
        lowerings.reduction("mean")
    assert repr(lowerings.pointwise(Op.EXP)) == "<lowering pointwise(exp)>"
    assert repr(lowerings.reduction(Reduction.SUM)) == "<lowering reduction(sum)>"


def _compile(fn, *args):
    return CompiledLLVMGraph(decompose(trace_joint(fn, list(args)).graph), "lowerings")


def test_the_lowering_is_read_from_the_entry(monkeypatch):
    """Swapping exp's lower for extern makes exp an extern step; its own (a pointwise
    exp instruction) fuses it into the kernel."""
    x = ember.randn(4, 5)
    fn = lambda t: (t * 2).exp() + 1          # noqa: E731
    (exp,) = ember.ops.registry.BY_NAME["exp"]
    g = _compile(fn, x)
    assert not any(isinstance(s, ExternStep) for s in g.lowered.steps)
    assert "exp float32" in str(g.lowered)
    monkeypatch.setattr(exp, "lower", lowerings.extern)
    g = _compile(fn, x)
    ext = [s for s in g.lowered.steps if isinstance(s, ExternStep)]
    assert [s.name for s in ext] == ["exp"], str(g.lowered)
    assert "exp float32" not in str(g.lowered)
    np.testing.assert_allclose(g(x)[0].numpy(), fn(x).numpy(), rtol=1e-6)


def test_operands_of_a_lowering_that_reads_buffers_are_stored_on_the_way(monkeypatch):
    """matmul's lowering reads buffers (reads_buffers): the sum's kernel, which visits
    all of the matmul's operand first, stores it on the way; otherwise a kernel of its
    own computes it again for BLAS."""
    x = ember.randn(8, 8)

    def fn(t):
        u = t * 2
        return u.sum(), u @ t
    g = _compile(fn, x)
    kernels = [s for s in g.lowered.steps if isinstance(s, KernelStep)]
    assert len(kernels) == 1, str(g.lowered)
    (matmul,) = ember.ops.registry.BY_NAME["matmul"]
    monkeypatch.setattr(matmul.lower, "reads_buffers", False)
    g = _compile(fn, x)
    kernels = [s for s in g.lowered.steps if isinstance(s, KernelStep)]
    assert len(kernels) == 2, str(g.lowered)


def _libm_prims():
    return [e for e in registry.prims() if e.lower.name.startswith("libm(")]


def test_prims_of_a_c_math_function_compile_to_its_call_and_keep_its_tail():
    """A prim lowered as libm(fn) (atan, the hyperbolic and arc functions) is one call in
    its kernel, equal to eager to float64 rounding. erfc, an instruction of its own now
    (vector code in float32), keeps libm's float64 erfc and so its tail, where a
    decomposition would lose everything: erfc(10) is 2.1e-45, 1 - erf(10) is 0."""
    from ember.compiler.loop_ir import LIBM
    prims = _libm_prims()
    assert "atan" in [e.name for e in prims]
    assert {e.name for e in prims} <= set(LIBM)
    with pytest.raises(ValueError):
        lowerings.libm("atan", 2)            # atan is declared with one operand
    with pytest.raises(ValueError):
        lowerings.libm("fma", 3)
    x = ember.tensor([-4.0, -1.0, 0.0, 0.5, 3.0, 10.0, 26.0], dtype=ember.float64)
    for e in prims:
        fn = e.name
        g = _compile(lambda t: getattr(t * 1, fn)(), x)
        assert f"call float64 {fn}(" in str(g.lowered), str(g.lowered)
        got, want = g(x)[0].numpy(), getattr(x, fn)().numpy()
        np.testing.assert_allclose(got, want, rtol=1e-15, atol=0, err_msg=fn)
    assert ember.compile(lambda t: t.erfc(), backend="llvm")(x)[-2].item() > 1e-45
