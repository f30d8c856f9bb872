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

float16 and bfloat16 are storage dtypes: a kernel loads and stores them at their width
and computes in float32, so only a cast computes in them (it rounds to nearest even),
a store of one takes a register of its dtype, and a fold into one takes float32 values
(the result is rounded once, when stored).

A row kernel (`rows.py` merges consecutive kernels of one domain into one) runs its
reduced dims' loops once per *phase*, in order, at each point of the kept dims; `phase`
separates the phases' instructions. A register lives in its phase; a later phase reads
what an earlier one reduced, or stored, where that phase wrote it (at this kept point),
so the row is read from memory once and again from cache:

    kernel k2 [64, 1024] reduce 1 (p0: float32 in0, p1: float32 buf0, p2: float32 buf1)
      %0 = load p0[1024*i0 + i1]
      reduce max p1[i0] += %0
      phase
      %1 = load p0[1024*i0 + i1]
      %2 = load p1[i0]
      %3 = sub float32 %1, %2
      store p2[1024*i0 + i1] = %3

A gathered load reads a buffer at an index taken from another tensor (x[idx],
index_select, embedding, gather): `bound` wraps and checks the index value against
the size of the dim it indexes (n, a size argument in a symbolic kernel; @0 names
the index tensor in the IndexError), and `gather` adds its result, times the dim's
stride, to an affine index:

    kernel k3 [s0, 64] (p0: int64 in1, p1: float32 in0, p2: float32 buf0)
      %0 = load p0[i0]
      %1 = bound int64 %0 < 1000 @0
      %2 = gather p1[i1 + 64*%1]
      store p2[64*i0 + i1] = %2

and `scatter` folds a value into memory at such an index (its first register is the
value, the others are index terms):

    scatter sum p2[i1 + 64*%1] += %3

The instruction set is closed: `Op` lists every instruction once, with its form (which
operands it has, hence its text and its spec tuple) and the dtypes it computes in.
csrc/jit/loop_ir.h is generated from it (loop_ir_header.py). Every kernel prints as
this text, and verify() checks it; Kernel.spec() is the plain tuple the JIT builds it
from (csrc/jit/codegen_loops.c).
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import NamedTuple

from .. import _C, _dtypes


class LoopIRError(RuntimeError):
    pass


class Form(enum.Enum):
    """What an instruction reads and defines (its text and its spec tuple follow)."""
    LOAD = "load"              # %d = load p[index]
    STORE = "store"            # store p[index] = %a
    FOLD = "fold"              # reduce/accumulate <reduction> p[index] += %a
    CONST = "const"            # %d = const dtype value
    IOTA = "iota"              # %d = iota dtype i<dim>
    UNARY = "unary"            # %d = op dtype %a           (cast: the only conversion)
    BINARY = "binary"          # %d = op dtype %a, %b
    COMPARE = "compare"        # %d = op dtype %a, %b       (the result is bool)
    SELECT = "select"          # %d = select dtype %c, %a, %b   (%c bool)
    CALL = "call"              # %d = call dtype fn(%a[, %b])   (fn: one of LIBM)
    RANDOM = "random"          # %d = op dtype %seed, %offset, %index   (all int64)
    PHASE = "phase"            # phase   (the reduced dims' loops run again from here)
    BOUND = "bound"            # %d = bound int64 %a < n @k   (an index value, checked)
    GATHER = "gather"          # %d = gather p[index + s*%a ...]   (%a: bound results)
    SCATTER = "scatter"        # scatter <reduction> p[index + s*%a ...] += %v


# the registers an instruction of each form reads (a call: its function's arity)
OPERANDS = {Form.LOAD: 0, Form.STORE: 1, Form.FOLD: 1, Form.CONST: 0, Form.IOTA: 0,
            Form.UNARY: 1, Form.BINARY: 2, Form.COMPARE: 2, Form.SELECT: 3,
            Form.CALL: -1, Form.RANDOM: 3, Form.PHASE: 0, Form.BOUND: 1,
            Form.GATHER: -1, Form.SCATTER: -1}

MAX_GATHERED = 3       # the registers a gather adds to its index, at most

# The C math library's functions a `call` may name, with their arity: in float64 it
# calls `fn`, in float32 `fn`f, per element (libm's own accuracy, not vectorised). The
# op table declares them: a prim whose value is one lowers as lowerings.libm(fn), which
# adds it here, so the set is closed once the table is installed.
LIBM: dict[str, int] = {}


class Domain(enum.Enum):
    """The dtypes an instruction computes in."""
    ANY = "any"
    FLOAT = "float"            # floating dtypes only
    INTEGRAL = "integral"      # integer and bool dtypes only
    NOT_BOOL = "not_bool"      # anything but bool


class Op(enum.StrEnum):
    """The instructions. An Op is its name (a str), as the text prints it."""

    def __new__(cls, name, form, domain=Domain.ANY):
        op = str.__new__(cls, name)
        op._value_ = name
        op.form = form
        op.domain = domain
        op.code = len(cls.__members__)       # csrc/jit/loop_ir.h: EM_IR_<NAME>
        return op

    LOAD = "load", Form.LOAD
    STORE = "store", Form.STORE
    REDUCE = "reduce", Form.FOLD             # into a register, over the reduced dims
    ACCUMULATE = "accumulate", Form.FOLD     # into memory, along outer dims
    CONST = "const", Form.CONST
    IOTA = "iota", Form.IOTA
    CAST = "cast", Form.UNARY
    NEG = "neg", Form.UNARY, Domain.NOT_BOOL
    EXP = "exp", Form.UNARY, Domain.FLOAT
    LOG = "log", Form.UNARY, Domain.FLOAT
    TANH = "tanh", Form.UNARY, Domain.FLOAT
    RECIPROCAL = "reciprocal", Form.UNARY, Domain.FLOAT
    ABS = "abs", Form.UNARY, Domain.FLOAT
    SQRT = "sqrt", Form.UNARY, Domain.FLOAT
    NOT = "not", Form.UNARY, Domain.INTEGRAL
    FLOOR = "floor", Form.UNARY, Domain.FLOAT
    TRUNC = "trunc", Form.UNARY, Domain.FLOAT
    SIN = "sin", Form.UNARY, Domain.FLOAT
    COS = "cos", Form.UNARY, Domain.FLOAT
    ERF = "erf", Form.UNARY, Domain.FLOAT
    EXPM1 = "expm1", Form.UNARY, Domain.FLOAT
    LOG1P = "log1p", Form.UNARY, Domain.FLOAT
    ERFC = "erfc", Form.UNARY, Domain.FLOAT
    ADD = "add", Form.BINARY                 # of bools: or (True + True is True)
    SUB = "sub", Form.BINARY, Domain.NOT_BOOL
    MUL = "mul", Form.BINARY
    DIV = "div", Form.BINARY, Domain.FLOAT
    MAX = "max", Form.BINARY                 # floats: NaN propagates
    MIN = "min", Form.BINARY
    POW = "pow", Form.BINARY, Domain.FLOAT
    AND = "and", Form.BINARY, Domain.INTEGRAL
    OR = "or", Form.BINARY, Domain.INTEGRAL
    XOR = "xor", Form.BINARY, Domain.INTEGRAL
    LT = "lt", Form.COMPARE
    LE = "le", Form.COMPARE
    GT = "gt", Form.COMPARE
    GE = "ge", Form.COMPARE
    EQ = "eq", Form.COMPARE
    NE = "ne", Form.COMPARE
    SELECT = "select", Form.SELECT
    CALL = "call", Form.CALL, Domain.FLOAT
    # Philox4x32-10 of key seed and counter (index, offset) (python/ember/philox.py):
    # rand its U[0, 1) value, randn its N(0, 1) value (Box-Muller)
    RAND = "rand", Form.RANDOM, Domain.FLOAT
    RANDN = "randn", Form.RANDOM, Domain.FLOAT
    # a row kernel's next phase: its reduced dims' loops run again (see the module text)
    PHASE = "phase", Form.PHASE
    # indirect addressing ([dynamic] item 4: x[idx], index_select, embedding, gather):
    # bound wraps an int64 index value v into [0, n) as eager's indexing does (v + n
    # for v < 0) and checks it: a value outside [-n, n) is recorded (the kernel's
    # error record: the runtime raises eager's IndexError after the kernel, naming
    # index tensor k) and read as 0, so no load leaves its buffer; gather loads
    # p[affine index + sum(stride_j * %a_j)] at registers bound defined
    BOUND = "bound", Form.BOUND, Domain.INTEGRAL
    GATHER = "gather", Form.GATHER
    # folds %v into p at a gathered index, in memory, in the order of the domain's
    # points (index_put with accumulate: embedding's and index_select's gradients); a
    # kernel scattering runs on one thread (two points may fold into one element)
    SCATTER = "scatter", Form.SCATTER

    def allows(self, dtype):
        """Whether the instruction computes in dtype."""
        if self.domain is Domain.FLOAT:
            return dtype.is_floating_point
        if self.domain is Domain.INTEGRAL:
            return not dtype.is_floating_point
        if self.domain is Domain.NOT_BOOL:
            return dtype is not _C.bool
        return True


class Reduction(enum.StrEnum):
    """What reduce and accumulate fold with."""

    def __new__(cls, name):
        r = str.__new__(cls, name)
        r._value_ = name
        r.code = len(cls.__members__)        # csrc/jit/loop_ir.h: EM_REDUCE_<NAME>
        return r

    SUM = "sum"
    PROD = "prod"
    MAX = "max"
    MIN = "min"


_REDUCTIONS = frozenset(Reduction)
_HALF = frozenset(_dtypes.HALF)
_DOMAIN_TEXT = {Domain.FLOAT: "only in floating dtypes",
                Domain.INTEGRAL: "only in integer and bool dtypes",
                Domain.NOT_BOOL: "in any dtype but bool"}


def _known_zero(n):
    """n is 0 (a symbolic size, a symbol of range >= 2 or an expression such as s0 // 8,
    is not known to be: it is never compared)."""
    from .symbolic import SizeInt
    return not isinstance(n, SizeInt) and n == 0


@dataclass(frozen=True)
class Affine:
    coeffs: tuple
    offset: int = 0

    def __str__(self):
        terms = []
        for d, c in enumerate(self.coeffs):
            if _known_zero(c):
                continue
            terms.append(f"i{d}" if _known_zero(c - 1) else f"{c}*i{d}")
        if not _known_zero(self.offset) or not terms:
            terms.append(str(self.offset))
        return " + ".join(terms)

    def bounds(self, sizes):
        """The lowest and highest element reached over a domain of sizes. (A symbolic
        size that may be 0 counts as n - 1 = -1: its domain is then empty, and the
        bounds only narrow, so no check fails on them.)"""
        lo = hi = self.offset
        for c, n in zip(self.coeffs, sizes):
            if _known_zero(n):
                continue
            if c >= 0:
                hi += c * (n - 1)
            else:
                lo += c * (n - 1)
        return lo, hi


@dataclass
class Param:
    ref: tuple           # plan.Ref: ("in", i) or ("buf", j)
    dtype: object        # ember dtype
    extent: int          # elements addressable from element 0

    def __str__(self):
        return f"{self.dtype._name} {self.ref[0]}{self.ref[1]}"


@dataclass
class Stmt:
    """One instruction: op (an Op, or its name), the register it defines (None for
    store, reduce, accumulate), the dtype it computes in, the registers it reads, and
    by form: a buffer and index (load, store, reduce, accumulate), a value (const: the
    constant, iota: the dim, reduce/accumulate: the Reduction, call: the function)."""
    op: Op
    dst: int | None = None
    dtype: object = None
    args: tuple = ()
    param: int | None = None
    index: Affine | None = None
    value: object = None

    def __post_init__(self):
        try:
            self.op = Op(self.op)
        except ValueError:
            raise LoopIRError(f"unknown instruction {self.op!r}") from None
        if self.op.form is Form.FOLD and self.value in _REDUCTIONS:
            self.value = Reduction(self.value)

    def __str__(self):
        form = self.op.form
        regs = ", ".join(f"%{a}" for a in self.args)
        if form is Form.STORE:
            return f"store p{self.param}[{self.index}] = {regs}"
        if form is Form.FOLD:
            return f"{self.op} {self.value} p{self.param}[{self.index}] += {regs}"
        d = f"%{self.dst} = " if self.dst is not None else ""
        if form is Form.LOAD:
            return f"{d}load p{self.param}[{self.index}]"
        if form in (Form.GATHER, Form.SCATTER):
            strides = self.value if form is Form.GATHER else self.value[1]
            idx = self.args if form is Form.GATHER else self.args[1:]
            terms = " + ".join(f"{'' if _known_zero(st - 1) else f'{st}*'}%{a}"
                               for st, a in zip(strides, idx))
            base = str(self.index)
            at = terms if base == "0" else f"{base} + {terms}"
            if form is Form.SCATTER:
                return f"scatter {self.value[0]} p{self.param}[{at}] += %{self.args[0]}"
            return f"{d}gather p{self.param}[{at}]"
        dt = self.dtype._name if self.dtype is not None else ""
        if form is Form.CONST:
            return f"{d}const {dt} {self.value!r}"
        if form is Form.IOTA:
            return f"{d}iota {dt} i{self.value}"
        if form is Form.CALL:
            return f"{d}call {dt} {self.value}({regs})"
        if form is Form.PHASE:
            return "phase"
        if form is Form.BOUND:
            return f"{d}bound {dt} {regs} < {self.value[0]} @{self.value[1]}"
        return f"{d}{self.op} {dt} {regs}"

    def spec(self, args=None):
        """The instruction as csrc/jit reads it: its name, then by form
            load     dst, param, coeffs, offset
            store    param, coeffs, offset, src
            fold     param, reduction, coeffs, offset, src
            const    dst, dtype, value           iota   dst, dtype, dim
            unary    dst, dtype, a               binary, compare  dst, dtype, a, b
            select   dst, dtype, c, a, b         call   dst, dtype, fn, a[, b]
            random   dst, dtype, seed, offset, index
            phase    (no fields)
            bound    dst, dtype, n, k, a
            gather   dst, param, coeffs, offset, strides, a[, b[, c]]
            scatter  param, reduction, coeffs, offset, strides, v, a[, b[, c]]
        (dtypes as their codes). In a symbolic kernel (args: its size arguments, expression
        -> k) a symbolic coefficient or offset is (k,) (compiler/symbolic.py)."""
        form, name = self.op.form, self.op.value
        if form is Form.PHASE:
            return (name,)
        coeffs = offset = None
        if self.index is not None:
            coeffs, offset = self.index.coeffs, self.index.offset
            if args:
                from .symbolic import spec_int
                coeffs = tuple(spec_int(c, args) for c in coeffs)
                offset = spec_int(offset, args)
        if form is Form.LOAD:
            return (name, self.dst, self.param, coeffs, offset)
        if form in (Form.BOUND, Form.GATHER, Form.SCATTER):
            from .symbolic import spec_int
            ints = (lambda v: spec_int(v, args)) if args else int
            if form is Form.BOUND:
                return (name, self.dst, self.dtype._code, ints(self.value[0]),
                        int(self.value[1]), self.args[0])
            if form is Form.SCATTER:
                return (name, self.param, str(self.value[0]), coeffs, offset,
                        tuple(ints(v) for v in self.value[1])) + tuple(self.args)
            return (name, self.dst, self.param, coeffs, offset,
                    tuple(ints(v) for v in self.value)) + tuple(self.args)
        if form is Form.STORE:
            return (name, self.param, coeffs, offset, self.args[0])
        if form is Form.FOLD:
            return (name, self.param, str(self.value), coeffs, offset, self.args[0])
        if form in (Form.CONST, Form.IOTA):
            value = self.value
            if args and form is Form.CONST:
                from .symbolic import spec_int
                if not isinstance(value, (float, bool)):
                    value = spec_int(value, args)
            return (name, self.dst, self.dtype._code, value)
        if form is Form.CALL:
            return (name, self.dst, self.dtype._code, self.value) + tuple(self.args)
        return (name, self.dst, self.dtype._code) + tuple(self.args)


class KernelSpec(NamedTuple):
    """A kernel as csrc/jit builds it: the domain, each param's dtype code and the
    instructions' spec tuples."""
    sizes: tuple
    nreduce: int
    params: tuple
    instrs: tuple


class SymKernelSpec(NamedTuple):
    """A symbolic kernel ([dynamic], symbolic.py): a KernelSpec whose sizes,
    coefficients and offsets may be (k,), its size argument k of nsyms."""
    sizes: tuple
    nreduce: int
    params: tuple
    instrs: tuple
    nsyms: int


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

    def spec(self) -> KernelSpec:
        from .symbolic import kernel_size_args, spec_int
        sym = kernel_size_args(self)
        if sym:
            args = {v.expr: k for k, v in enumerate(sym)}
            return SymKernelSpec(tuple(spec_int(n, args) for n in self.sizes),
                                 self.nreduce, tuple(p.dtype._code for p in self.params),
                                 tuple(s.spec(args) for s in self.stmts), len(sym))
        return KernelSpec(tuple(self.sizes), self.nreduce,
                          tuple(p.dtype._code for p in self.params),
                          tuple(s.spec() for s in self.stmts))


# ------------------------------------------------------------------ the verifier


def _check_dtypes(kernel, s, defined):
    """An instruction's operands must be of the dtype it computes in (a cast converts
    them first; nothing converts implicitly), and that dtype must be one it computes."""
    def fail(why):
        raise LoopIRError(f"{kernel.name}: `{s}` {why}")

    def want(reg, dtype, what="operand"):
        if defined[reg] is not dtype:
            fail(f"reads {what} %{reg} of {defined[reg]._name} where it computes in "
                 f"{dtype._name} (insert a cast)")

    form = s.op.form
    if form is Form.STORE:
        want(s.args[0], kernel.params[s.param].dtype, "value")
        return
    if form is Form.FOLD:     # into a float16/bfloat16 buffer: float32 values
        dt = kernel.params[s.param].dtype
        want(s.args[0], _C.float32 if dt in _HALF else dt, "value")
        return
    if form is Form.SCATTER:
        for a in s.args[1:]:
            want(a, _C.int64, "index")
        dt = kernel.params[s.param].dtype
        want(s.args[0], _C.float32 if dt in _HALF else dt, "value")
        return
    if form is Form.GATHER:
        for a in s.args:
            want(a, _C.int64, "index")
    if form in (Form.LOAD, Form.GATHER):
        if s.dtype is not None and s.dtype is not kernel.params[s.param].dtype:
            fail(f"loads {s.dtype._name} from a {kernel.params[s.param].dtype._name} "
                 "buffer")
        return
    if form is Form.PHASE:
        return
    if s.dtype is None:
        fail("has no dtype")
    if s.op is Op.CAST:
        return
    if s.dtype in _HALF:
        fail(f"computes in {s.dtype._name}, a storage dtype (computed in float32: only a "
             "cast converts to it)")
    if form in (Form.CONST, Form.IOTA):
        return
    if form is Form.BOUND and s.dtype is not _C.int64:
        fail("checks int64 index values only")
    if form is Form.RANDOM:
        for a in s.args:
            want(a, _C.int64)
    elif form is Form.SELECT:
        want(s.args[0], _C.bool, "condition")
        for a in s.args[1:]:
            want(a, s.dtype)
        return
    else:
        for a in s.args:
            want(a, s.dtype)
    if not s.op.allows(s.dtype):
        fail(f"computes {_DOMAIN_TEXT[s.op.domain]}, not {s.dtype._name}")


_DEFINES = {Form.LOAD, Form.CONST, Form.IOTA, Form.UNARY, Form.BINARY, Form.COMPARE,
            Form.SELECT, Form.CALL, Form.RANDOM, Form.BOUND, Form.GATHER}
_ADDRESSES = {Form.LOAD, Form.STORE, Form.FOLD, Form.GATHER, Form.SCATTER}
_WRITES = (Form.STORE, Form.FOLD, Form.SCATTER)


def _check_address(kernel, s, bounds=None):
    """bounds: register -> the n of the `bound` defining it (a gather's index terms)."""
    nd = len(kernel.sizes)
    if not 0 <= s.param < len(kernel.params):
        raise LoopIRError(f"{kernel.name}: no parameter p{s.param} in `{s}`")
    if len(s.index.coeffs) != nd:
        raise LoopIRError(f"{kernel.name}: index of rank {len(s.index.coeffs)} in a "
                          f"rank-{nd} domain: `{s}`")
    lo, hi = s.index.bounds(kernel.sizes)
    if s.op.form in (Form.GATHER, Form.SCATTER):
        scatter = s.op.form is Form.SCATTER
        idx = s.args[1:] if scatter else s.args
        strides = s.value[1] if scatter else s.value
        if not 1 <= len(idx) <= MAX_GATHERED or len(strides) != len(idx) or (
                scatter and s.value[0] not in _REDUCTIONS):
            raise LoopIRError(f"{kernel.name}: `{s}` adds 1 to {MAX_GATHERED} index "
                              "registers, each with its stride")
        for st, a in zip(strides, idx):
            if a not in bounds:
                raise LoopIRError(f"{kernel.name}: `{s}` adds %{a}, which no `bound` "
                                  "checked")
            if bounds[a] == 0:       # every value is out of range: nothing is read
                continue
            lo += min(0, st) * (bounds[a] - 1)
            hi += max(0, st) * (bounds[a] - 1)
    extent = kernel.params[s.param].extent
    kept = kernel.sizes[:nd - kernel.nreduce]
    # an empty domain runs no statement, except that a reduce over empty reduced dims
    # still stores its identity at every point of the kept ones
    if any(_known_zero(n) for n in kept) or (
            any(_known_zero(n) for n in kernel.sizes) and s.op is not Op.REDUCE):
        lo = hi = 0
    if lo < 0 or (hi >= extent and extent > 0):
        raise LoopIRError(f"{kernel.name}: `{s}` reaches elements [{lo}, {hi}] of a "
                          f"buffer of {extent}")
    if s.op.form is Form.SCATTER and kernel.params[s.param].dtype is _C.bool:
        raise LoopIRError(f"{kernel.name}: scatter into a bool buffer")
    if s.op.form is not Form.FOLD:
        return
    if s.value not in _REDUCTIONS:
        raise LoopIRError(f"{kernel.name}: unknown reduction {s.value}")
    if s.op is Op.REDUCE:
        if any(c != 0 for c in s.index.coeffs[nd - kernel.nreduce:]):
            raise LoopIRError(f"{kernel.name}: a reduction stores along a reduced "
                              f"dim: `{s}`")
        if kernel.nreduce == 0:
            raise LoopIRError(f"{kernel.name}: reduce in a kernel without reduced dims")
    elif kernel.params[s.param].dtype is _C.bool:
        raise LoopIRError(f"{kernel.name}: accumulate into a bool buffer")


def _check_written_loads(kernel, s, written):
    """A kernel reads a buffer it writes only where this point has written it: any other
    element may not be written yet (an earlier point of the loops, or another thread's
    part)."""
    if s.param in written and (s.op is Op.GATHER or s.index not in written[s.param]):
        raise LoopIRError(f"{kernel.name}: `{s}` reads p{s.param}, which this kernel "
                          "writes, where this point has not written it")


def verify(kernel: Kernel):
    """Raises LoopIRError unless the kernel is well formed: registers defined before use
    (in their phase), indices of the domain's rank and inside their buffers, reductions
    over the reduced dims only, every operand of the dtype its instruction computes in,
    and a buffer the kernel writes read only where the same point wrote it before (a
    reduction's result: in a later phase, at its own index)."""
    nd = len(kernel.sizes)
    if not 0 <= kernel.nreduce <= nd:
        raise LoopIRError(f"{kernel.name}: nreduce {kernel.nreduce} outside 0..{nd}")
    defined = {}
    ever = set()            # every register defined so far, in any phase
    # buffers the kernel writes -> the indices stored so far (a folded one: none)
    written = {s.param: set() for s in kernel.stmts if s.op.form in _WRITES}
    folded = {s.param for s in kernel.stmts if s.op.form in (Form.FOLD, Form.SCATTER)}
    bounds = {}             # register -> the n its `bound` checked against
    for s in kernel.stmts:
        form = s.op.form
        if form is Form.PHASE:
            if kernel.nreduce == 0:
                raise LoopIRError(f"{kernel.name}: a phase in a kernel without reduced dims")
            if s.dst is not None or s.args:
                raise LoopIRError(f"{kernel.name}: `phase` takes no operands")
            defined = {}        # registers live in their phase
            for r in kernel.stmts:   # what earlier phases reduced is readable at its index
                if r is s:
                    break
                if r.op is Op.REDUCE:
                    written[r.param].add(r.index)
            continue
        if form is Form.CALL and s.value not in LIBM:
            raise LoopIRError(f"{kernel.name}: `{s}` calls a function not in LIBM")
        n = LIBM[s.value] if form is Form.CALL else len(s.args) if form in (
            Form.GATHER, Form.SCATTER) else OPERANDS[form]
        if len(s.args) != n:
            raise LoopIRError(f"{kernel.name}: `{s}` takes {n} operand"
                              f"{'s' if n != 1 else ''}")
        for a in s.args:
            if a not in defined:
                raise LoopIRError(f"{kernel.name}: %{a} used before definition in `{s}`")
        if form in _ADDRESSES:
            _check_address(kernel, s, bounds)
        if form is Form.BOUND:
            if not isinstance(s.value, tuple) or len(s.value) != 2 or s.value[0] < 0:
                raise LoopIRError(f"{kernel.name}: `{s}` needs a size n >= 0 and the "
                                  "index tensor's number")
            bounds[s.dst] = s.value[0]
        if (s.dst is not None) != (form in _DEFINES):
            raise LoopIRError(f"{kernel.name}: `{s}` " + (
                "defines no register" if form in _DEFINES else "defines a register"))
        if s.dst in ever:
            raise LoopIRError(f"{kernel.name}: %{s.dst} defined twice")
        if s.dst is not None:
            ever.add(s.dst)
        _check_dtypes(kernel, s, defined)
        if form in (Form.LOAD, Form.GATHER):
            _check_written_loads(kernel, s, written)
        elif form is Form.STORE and s.param not in folded:
            written[s.param].add(s.index)
        if form in (Form.LOAD, Form.GATHER):
            defined[s.dst] = kernel.params[s.param].dtype
        elif form is Form.COMPARE:
            defined[s.dst] = _C.bool
        elif s.dst is not None:
            defined[s.dst] = s.dtype
    return kernel
