"""The loop IR: what a fused kernel computes, as loops over an iteration domain.

A Kernel has a domain (sizes, outer to inner; the last `nreduce` dims are reduced), the
buffers it touches (params), and a list of SSA statements run at every point of the
domain. Buffers are addressed by explicit affine index expressions
`offset + sum(coeffs[d] * i_d)` in elements, so broadcast inputs (coefficient 0) and
strided views (any coefficients) are read in place, never copied.

    kernel k0 [8, 3] reduce 1 (p0: float32 in0, p1: float32 buf0, p2: float32 buf1)
      %0 = load p0[3*i0 + i1]
      %1 = const float32 0.0
      %2 = max float32 %0, %1
      store p1[3*i0 + i1] = %2
      reduce sum p2[i0] += %2

A reduction whose reduced dims are outer in memory (a column sum of a row-major
matrix) runs instead as `accumulate`: the reduced dims become the outer loops, the kept
dims the inner, contiguous ones, and each point folds its value into the output in
memory (which a kernel before it fills with the reduction's identity):

    kernel k1 [128, 512] (p0: float32 in0, p1: float32 buf1)
      %0 = load p0[512*i0 + i1]
      accumulate sum p1[i1] += %0

Every kernel prints as this text, and verify() checks it.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .. import _C

UNARY_OPS = {"neg", "exp", "log", "tanh", "reciprocal", "abs", "sqrt", "not", "floor", "sin",
             "cos", "erf", "expm1", "log1p", "trunc"}
BINARY_OPS = {"add", "sub", "mul", "div", "max", "min", "pow", "and", "or", "xor"}
COMPARE_OPS = {"lt", "le", "gt", "ge", "eq", "ne"}
REDUCE_OPS = {"sum", "max", "min", "prod"}
# what each computes in: float-only ops, integer/bool-only ops, ops bool has no meaning for
FLOAT_OPS = {"exp", "log", "tanh", "reciprocal", "abs", "sqrt", "floor", "sin", "cos", "erf",
             "expm1", "log1p", "trunc", "div", "pow"}
INTEGRAL_OPS = {"not", "and", "or", "xor"}
NOT_BOOL_OPS = {"neg", "sub"}


class LoopIRError(RuntimeError):
    pass


@dataclass(frozen=True)
class Affine:
    coeffs: tuple
    offset: int = 0

    def __str__(self):
        terms = []
        for d, c in enumerate(self.coeffs):
            if c == 0:
                continue
            terms.append(f"i{d}" if c == 1 else f"{c}*i{d}")
        if self.offset or not terms:
            terms.append(str(self.offset))
        return " + ".join(terms)

    def bounds(self, sizes):
        lo = hi = self.offset
        for c, n in zip(self.coeffs, sizes):
            if n == 0:
                continue
            lo += min(0, c) * (n - 1)
            hi += max(0, c) * (n - 1)
        return lo, hi


@dataclass
class Param:
    ref: tuple           # ("in", i) or ("buf", j)
    dtype: object        # ember dtype
    extent: int          # elements addressable from element 0

    def __str__(self):
        return f"{self.dtype.__repr__().split('.')[-1]} {self.ref[0]}{self.ref[1]}"


@dataclass
class Stmt:
    op: str
    dst: int | None = None          # register defined (None for store/reduce)
    dtype: object = None
    args: tuple = ()                # registers read
    param: int | None = None        # load/store/reduce
    index: Affine | None = None
    value: object = None            # const value, iota dim, reduce op

    def __str__(self):
        d = f"%{self.dst} = " if self.dst is not None else ""
        dt = self.dtype.__repr__().split(".")[-1] if self.dtype is not None else ""
        regs = ", ".join(f"%{a}" for a in self.args)
        if self.op == "load":
            return f"{d}load p{self.param}[{self.index}]"
        if self.op == "store":
            return f"store p{self.param}[{self.index}] = {regs}"
        if self.op in ("reduce", "accumulate"):
            return f"{self.op} {self.value} p{self.param}[{self.index}] += {regs}"
        if self.op == "const":
            return f"{d}const {dt} {self.value!r}"
        if self.op == "iota":
            return f"{d}iota {dt} i{self.value}"
        return f"{d}{self.op} {dt} {regs}"


@dataclass
class Kernel:
    name: str
    sizes: tuple
    nreduce: int
    params: list = field(default_factory=list)
    stmts: list = field(default_factory=list)

    def __str__(self):
        head = f"kernel {self.name} {list(self.sizes)}"
        if self.nreduce:
            head += f" reduce {self.nreduce}"
        params = ", ".join(f"p{i}: {p}" for i, p in enumerate(self.params))
        return head + f" ({params})\n" + "".join(f"  {s}\n" for s in self.stmts)


def _name(dtype):
    return repr(dtype).split(".")[-1]


def _check_dtypes(kernel, s, defined):
    """An instruction's operands must be of the dtype it computes in (a cast converts
    them first; nothing converts implicitly), and that dtype must be one it computes."""
    def fail(why):
        raise LoopIRError(f"{kernel.name}: `{s}` {why}")

    def want(reg, dtype, what="operand"):
        if defined[reg] is not dtype:
            fail(f"reads {what} %{reg} of {_name(defined[reg])} where it computes in "
                 f"{_name(dtype)} (insert a cast)")

    if s.op in ("store", "reduce", "accumulate"):
        want(s.args[0], kernel.params[s.param].dtype, "value")
        return
    if s.op == "load":
        if s.dtype is not None and s.dtype is not kernel.params[s.param].dtype:
            fail(f"loads {_name(s.dtype)} from a {_name(kernel.params[s.param].dtype)} "
                 "buffer")
        return
    if s.dtype is None:
        fail("has no dtype")
    if s.op == "cast" or s.op in ("const", "iota"):
        return
    if s.op == "select":
        if len(s.args) != 3:
            fail("needs a condition and two values")
        want(s.args[0], _C.bool, "condition")
        for a in s.args[1:]:
            want(a, s.dtype)
        return
    n = 1 if s.op in UNARY_OPS else 2
    if len(s.args) != n:
        fail(f"takes {n} operand{'s' if n > 1 else ''}")
    for a in s.args:
        want(a, s.dtype)
    if s.op in FLOAT_OPS and not s.dtype.is_floating_point:
        fail(f"computes only in floating dtypes, not {_name(s.dtype)}")
    if s.op in INTEGRAL_OPS and s.dtype.is_floating_point:
        fail(f"computes only in integer and bool dtypes, not {_name(s.dtype)}")
    if s.op in NOT_BOOL_OPS and s.dtype is _C.bool:
        fail("does not compute in bool")


def verify(kernel: Kernel):
    """Raises LoopIRError unless the kernel is well formed: registers defined before use,
    indices of the domain's rank and inside their buffers, reductions over the reduced
    dims only, every operand of the dtype its instruction computes in."""
    nd = len(kernel.sizes)
    if not 0 <= kernel.nreduce <= nd:
        raise LoopIRError(f"{kernel.name}: nreduce {kernel.nreduce} outside 0..{nd}")
    known = UNARY_OPS | BINARY_OPS | COMPARE_OPS | {"load", "const", "iota", "cast", "select"}
    defined = {}
    for s in kernel.stmts:
        for a in s.args:
            if a not in defined:
                raise LoopIRError(f"{kernel.name}: %{a} used before definition in `{s}`")
        if s.param is not None:
            if not 0 <= s.param < len(kernel.params):
                raise LoopIRError(f"{kernel.name}: no parameter p{s.param} in `{s}`")
            if len(s.index.coeffs) != nd:
                raise LoopIRError(f"{kernel.name}: index of rank {len(s.index.coeffs)} in a "
                                  f"rank-{nd} domain: `{s}`")
            lo, hi = s.index.bounds(kernel.sizes)
            extent = kernel.params[s.param].extent
            if any(n == 0 for n in kernel.sizes[:nd - kernel.nreduce]):
                lo = hi = 0
            if lo < 0 or (hi >= extent and extent > 0):
                raise LoopIRError(f"{kernel.name}: `{s}` reaches elements [{lo}, {hi}] of a "
                                  f"buffer of {extent}")
            if s.op == "reduce":
                if any(c != 0 for c in s.index.coeffs[nd - kernel.nreduce:]):
                    raise LoopIRError(f"{kernel.name}: a reduction stores along a reduced "
                                      f"dim: `{s}`")
                if kernel.nreduce == 0:
                    raise LoopIRError(f"{kernel.name}: reduce in a kernel without reduced "
                                      "dims")
                if s.value not in REDUCE_OPS:
                    raise LoopIRError(f"{kernel.name}: unknown reduction {s.value}")
            if s.op == "accumulate":
                if s.value not in REDUCE_OPS:
                    raise LoopIRError(f"{kernel.name}: unknown reduction {s.value}")
                if kernel.params[s.param].dtype is _C.bool:
                    raise LoopIRError(f"{kernel.name}: accumulate into a bool buffer")
        if s.dst is None:
            if s.op not in ("store", "reduce", "accumulate"):
                raise LoopIRError(f"{kernel.name}: unknown statement `{s}`")
        else:
            if s.dst in defined:
                raise LoopIRError(f"{kernel.name}: %{s.dst} defined twice")
            if s.op not in known:
                raise LoopIRError(f"{kernel.name}: unknown statement `{s}`")
        _check_dtypes(kernel, s, defined)
        if s.dst is not None:
            if s.op == "load":
                defined[s.dst] = kernel.params[s.param].dtype
            elif s.op in COMPARE_OPS:
                defined[s.dst] = _C.bool
            else:
                defined[s.dst] = s.dtype
    return kernel
