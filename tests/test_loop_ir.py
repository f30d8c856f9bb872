"""The loop IR's instruction set is closed and declared once (loop_ir.Op): the C header
csrc/jit/loop_ir.h is generated from it, every instruction prints, verifies and
compiles, and a name outside the set is refused on both sides."""
import pathlib

import numpy as np
import pytest

import ember
from ember import _C
from ember.compiler import loop_ir_header
from ember.compiler.jit import JitModule
from ember.compiler.loop_ir import (LIBM, OPERANDS, Affine, Domain, Form, Kernel, LoopIRError, Op,
                                    Param, Reduction, Stmt, verify)

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_generated_header_is_current():
    """Regenerate with `python -m ember.compiler.loop_ir_header` after changing Op."""
    checked_in = (ROOT / loop_ir_header.PATH).read_text()
    assert checked_in == loop_ir_header.text(), \
        "csrc/jit/loop_ir.h is stale: run python -m ember.compiler.loop_ir_header"


def test_codes_are_declaration_order_and_match_the_header():
    loop_ir_header.check_codes()
    text = loop_ir_header.text()
    for op in Op:
        assert f"EM_IR_{op.name} = {op.code}," in text
        assert f'{{"{op.value}", EM_FORM_{op.form.name}, EM_DOMAIN_{op.domain.name}}}' in text
    for r in Reduction:
        assert f"EM_REDUCE_{r.name} = {r.code}," in text


def test_unknown_instructions_are_refused():
    with pytest.raises(LoopIRError, match="unknown instruction"):
        Stmt("fma", 0, _C.float32, (0, 0))
    f32 = _C.float32._code
    spec = ((4,), 0, (f32, f32), (("load", 0, 0, (1,), 0), ("fma", 1, f32, 0, 0),
                                  ("store", 1, (1,), 0, 1)))
    with pytest.raises(ValueError, match="unknown instruction 'fma'"):
        JitModule((spec,), "unknown")
    bad_fold = ((4,), 1, (f32, f32), (("load", 0, 0, (1,), 0),
                                      ("reduce", 1, "mean", (0,), 0, 0)))
    with pytest.raises(ValueError, match="unknown reduction 'mean'"):
        JitModule((bad_fold,), "unknown_reduction")


def test_instructions_outside_their_domain_are_refused_by_the_jit():
    """The domain of each instruction (loop_ir.Op) is checked by C from the header."""
    f32, i32 = _C.float32._code, _C.int32._code
    spec = ((4,), 0, (i32, i32), (("load", 0, 0, (1,), 0), ("sqrt", 1, i32, 0),
                                  ("store", 1, (1,), 0, 1)))
    with pytest.raises(NotImplementedError, match="sqrt on int32"):
        JitModule((spec,), "domain")
    spec = ((4,), 0, (f32, f32), (("load", 0, 0, (1,), 0), ("xor", 1, f32, 0, 0),
                                  ("store", 1, (1,), 0, 1)))
    with pytest.raises(NotImplementedError, match="xor on float32"):
        JitModule((spec,), "domain")


def _value_of(kb_stmts, op, dtype, regs):
    n = len(kb_stmts)
    kb_stmts.append(Stmt(op, n, dtype, tuple(regs)))
    return n


def _kernel_with_every_op(dtype, ops):
    """A kernel over [8] computing each op of `ops` (in dtype) of the inputs, summing
    every result (cast to float64) into one output."""
    f64 = _C.float64
    i = Affine((1,))
    params = [Param(("in", 0), dtype, 8), Param(("in", 1), dtype, 8),
              Param(("buf", 0), f64, 8)]
    stmts = [Stmt("load", 0, dtype, param=0, index=i), Stmt("load", 1, dtype, param=1, index=i)]
    total = _value_of(stmts, Op.CAST, f64, [0])
    for op in ops:
        regs = [0, 1][:OPERANDS[op.form]]
        if op.form is Form.SELECT:
            cond = _value_of(stmts, Op.LT, dtype, [0, 1])
            regs = [cond, 0, 1]
        r = _value_of(stmts, op, dtype, regs)
        r = _value_of(stmts, Op.CAST, f64, [r])
        total = _value_of(stmts, Op.ADD, f64, [total, r])
    stmts.append(Stmt("store", None, None, (total,), param=2, index=i))
    return verify(Kernel(f"every_{dtype._name}", (8,), 0, params, stmts))


@pytest.mark.parametrize("dtype", [_C.float32, _C.float64, _C.int32, _C.bool])
def test_every_value_instruction_prints_verifies_and_compiles(dtype):
    ops = [op for op in Op if op.form in (Form.UNARY, Form.BINARY, Form.COMPARE, Form.SELECT)
           and op is not Op.CAST and op.allows(dtype)]
    k = _kernel_with_every_op(dtype, ops)
    text = str(k)
    for op in ops:
        assert f"= {op.value} " in text
    module = JitModule((k.spec(),), k.name)
    assert module.addresses and module.addresses[0]


def test_domains_are_the_instructions_dtype_rules():
    assert Op.SQRT.domain is Domain.FLOAT and not Op.SQRT.allows(_C.int64)
    assert Op.XOR.domain is Domain.INTEGRAL and not Op.XOR.allows(_C.float32)
    assert Op.NEG.domain is Domain.NOT_BOOL and not Op.NEG.allows(_C.bool)
    assert all(op.allows(_C.bool) for op in Op if op.domain is Domain.ANY)
    k = Kernel("d", (4,), 0, [Param(("in", 0), _C.int32, 4)],
               [Stmt("load", 0, _C.int32, param=0, index=Affine((1,))),
                Stmt("sqrt", 1, _C.int32, (0,))])
    with pytest.raises(LoopIRError, match="only in floating dtypes"):
        verify(k)


def test_statements_print_as_the_loop_ir_text():
    i = Affine((3, 1))
    assert str(Stmt("load", 0, _C.float32, param=0, index=i)) == "%0 = load p0[3*i0 + i1]"
    assert str(Stmt("const", 1, _C.float32, value=0.0)) == "%1 = const float32 0.0"
    assert str(Stmt("max", 2, _C.float32, (0, 1))) == "%2 = max float32 %0, %1"
    assert str(Stmt("store", None, None, (2,), param=1, index=i)) == "store p1[3*i0 + i1] = %2"
    assert str(Stmt("reduce", None, None, (2,), param=2, index=Affine((1, 0)), value="sum")) \
        == "reduce sum p2[i0] += %2"
    assert str(Stmt("iota", 3, _C.int64, value=1)) == "%3 = iota int64 i1"
    s = Stmt("accumulate", None, None, (0,), param=0, index=Affine((0, 1)), value="max")
    assert s.op is Op.ACCUMULATE and s.value is Reduction.MAX and s.op == "accumulate"


def test_kernel_specs_compile_and_run_as_the_ir_says():
    """A reduce kernel built by hand: its spec (Kernel.spec) runs as its text reads."""
    from ember.compiler.plan import BufferSpec, InputSpec, KernelStep, StepKind, View
    f32 = _C.float32
    k = verify(Kernel("rowmax", (3, 5), 1, [Param(("in", 0), f32, 15),
                                            Param(("buf", 0), f32, 3)],
                      [Stmt("load", 0, f32, param=0, index=Affine((5, 1))),
                       Stmt("reduce", None, None, (0,), param=1, index=Affine((1, 0)),
                            value="max")]))
    module = JitModule((k.spec(),), "rowmax")
    ref_in, ref_out = ("in", 0), ("buf", 0)
    plan = ((InputSpec((3, 5), (5, 1)),), (BufferSpec(f32, (3,)),),
            (KernelStep(StepKind.KERNEL, 0, (ref_in, ref_out), 3, False, k),),
            (View(ref_out, (3,), (1,), 0),))
    run = _C.CompiledGraph(module, module.addresses, plan)
    x = np.random.default_rng(0).standard_normal((3, 5)).astype(np.float32)
    (got,) = run(ember.from_numpy(x))
    np.testing.assert_array_equal(got.numpy(), x.max(1))


def _call_kernel(fn, dtype, n=6):
    i = Affine((1,))
    return Kernel(f"call_{fn}_{dtype._name}", (n,), 0,
                  [Param(("in", 0), dtype, n), Param(("buf", 0), dtype, n)],
                  [Stmt("load", 0, dtype, param=0, index=i),
                   Stmt("call", 1, dtype, (0,), value=fn),
                   Stmt("store", None, None, (1,), param=1, index=i)])


@pytest.mark.parametrize("fn", sorted(LIBM))
@pytest.mark.parametrize("dtype", [_C.float32, _C.float64])
def test_a_call_is_the_c_math_library_function_of_its_operands(fn, dtype):
    """`call` prints with its function, compiles to a call of libm's fn (fnf in float32)
    and computes what libm does: here checked against Python's math module (libm's
    double functions) over values reaching each function's tail."""
    import math
    from ember.compiler.plan import BufferSpec, InputSpec, KernelStep, StepKind, View
    k = verify(_call_kernel(fn, dtype))
    assert f"%1 = call {dtype._name} {fn}(%0)" in str(k)
    assert k.spec().instrs[1] == ("call", 1, dtype._code, fn, 0)
    module = JitModule((k.spec(),), k.name)
    assert f"{fn}{'f' if dtype is _C.float32 else ''}(" in module.ir
    ref_in, ref_out = ("in", 0), ("buf", 0)
    plan = ((InputSpec((6,), (1,)),), (BufferSpec(dtype, (6,)),),
            (KernelStep(StepKind.KERNEL, 0, (ref_in, ref_out), 6, False, k),),
            (View(ref_out, (6,), (1,), 0),))
    run = _C.CompiledGraph(module, module.addresses, plan)
    np_dt = np.float32 if dtype is _C.float32 else np.float64
    x = np.array([-3.0, -0.5, 0.0, 0.75, 5.0, 9.0], dtype=np_dt)
    (got,) = run(ember.from_numpy(x))
    def ref(v):
        try:
            return getattr(math, fn)(float(v))
        except ValueError:          # outside the domain: libm's NaN
            return math.nan
    want = np.array([ref(v) for v in x]).astype(np_dt)
    rtol = 1e-6 if dtype is _C.float32 else 1e-15
    np.testing.assert_allclose(got.numpy(), want, rtol=rtol, atol=0)


def test_a_call_names_a_function_of_libm_only():
    k = _call_kernel("system", _C.float64)
    with pytest.raises(LoopIRError, match="calls a function not in LIBM"):
        verify(k)
    f64 = _C.float64._code
    spec = ((4,), 0, (f64, f64), (("load", 0, 0, (1,), 0),
                                  ("call", 1, f64, "no_such_fn", 0),
                                  ("store", 1, (1,), 0, 1)))
    with pytest.raises(ValueError, match="no function no_such_fn in the C math library"):
        JitModule((spec,), "nofn")
    spec = ((4,), 0, (f64, f64), (("load", 0, 0, (1,), 0), ("call", 1, f64, "erfc"),
                                  ("store", 1, (1,), 0, 1)))
    with pytest.raises(ValueError, match="1 or 2 operands"):
        JitModule((spec,), "noargs")
    i32 = _C.int32._code
    spec = ((4,), 0, (i32, i32), (("load", 0, 0, (1,), 0), ("call", 1, i32, "erfc", 0),
                                  ("store", 1, (1,), 0, 1)))
    with pytest.raises(NotImplementedError, match="call on int32"):
        JitModule((spec,), "intcall")
