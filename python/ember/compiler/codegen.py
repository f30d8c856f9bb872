"""Loop IR -> kernel specs: the plain tuples csrc/jit/codegen.c builds LLVM IR from."""
from __future__ import annotations

from .loop_ir import COMPARE_OPS, Kernel


def kernel_spec(k: Kernel):
    instrs = []
    for s in k.stmts:
        if s.op == "load":
            instrs.append(("load", s.dst, s.param, s.index.coeffs, s.index.offset))
        elif s.op == "store":
            instrs.append(("store", s.param, s.index.coeffs, s.index.offset, s.args[0]))
        elif s.op in ("reduce", "accumulate"):
            instrs.append((s.op, s.param, s.value, s.index.coeffs, s.index.offset,
                           s.args[0]))
        elif s.op == "const":
            instrs.append(("const", s.dst, s.dtype._code, s.value))
        elif s.op == "iota":
            instrs.append(("iota", s.dst, s.dtype._code, s.value))
        elif s.op in ("cast",) or len(s.args) == 1:
            instrs.append((s.op, s.dst, s.dtype._code, s.args[0]))
        elif s.op == "select":
            instrs.append(("select", s.dst, s.dtype._code) + tuple(s.args))
        elif s.op in COMPARE_OPS or len(s.args) == 2:
            instrs.append((s.op, s.dst, s.dtype._code) + tuple(s.args))
        else:
            raise ValueError(f"cannot emit `{s}`")
    return (tuple(k.sizes), k.nreduce, tuple(p.dtype._code for p in k.params), tuple(instrs))
