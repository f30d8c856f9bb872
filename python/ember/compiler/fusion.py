"""Fusion and scheduling: which values a kernel computes on the way, which values are
stored, and how a kernel runs.

A kernel is built by loading values at its domain's indices (KernelBuilder): a
pointwise value inlines its whole chain, so elementwise ops fuse into whoever consumes
them. A value is stored (realized) when it must exist as a buffer: a graph output or
the operand of an op that reads buffers (BLAS); or when several consumers would
otherwise recompute it at a high cost (more than INLINE_LIMIT ops, or reading several
buffers). It is stored by the first kernel that visits all of it, in that kernel's
loops, so (x @ w + b).relu().sum() is one BLAS call and one kernel, with no
intermediate buffer. A kernel's outer dim is split across threads when its domain is
large enough (PARALLEL_MIN) and no point of it accumulates along that dim; it is run in
chunks of its outer dim (CHUNK_POINTS points each), between which the runtime runs
signal handlers.
"""
from __future__ import annotations

import math

from .. import _C
from .loop_ir import Affine, Form, Kernel, Op, Param, Stmt
from .symbolic import SizeInt, SymbolicLoweringUnsupported, any_symbolic
from .values import HALF, PointwiseValue

INLINE_LIMIT = 24          # pointwise ops a value may cost before several users realize it
MAX_DEPTH = 64             # pointwise values a chain may inline before it is realized
PARALLEL_MIN = 1 << 16     # domain points below which a kernel runs on one thread
CHUNK_POINTS = 1 << 16     # domain points per chunk the runtime hands a thread, at most
# a parallel kernel has at least MIN_CHUNKS chunks (of CHUNK_MIN_POINTS or more), so that
# threads taking chunks off the pool's counter end together: with whole CHUNK_POINTS
# chunks a kernel of 1.5 of them splits 2:1 over two threads, one of 1 not at all
MIN_CHUNKS = 8
CHUNK_MIN_POINTS = 1 << 13


class KernelBuilder:
    """The kernel being built: statements, with each load, constant and cast emitted
    once."""

    def __init__(self, buffers, name, sizes, nreduce):
        self.buffers = buffers      # buffers.BufferPlan: extents, new buffers
        self.kernel = Kernel(name, tuple(sizes), nreduce)
        self.sizes = tuple(sizes)
        self.params = {}
        self.loads = {}
        self.next_reg = 0
        self.reg_dtype = {}         # register -> the dtype of its value
        # id(value) -> (value, the index) of each pointwise value this kernel realizes
        self.stored_at = {}

    def param(self, buf):
        key = buf.ref
        if key not in self.params:
            self.params[key] = len(self.kernel.params)
            self.kernel.params.append(Param(buf.ref, buf.dtype, self.buffers.extent_of(key)))
        return self.params[key]

    def emit(self, op, dtype=None, args=(), param=None, index=None, value=None):
        """Appends a statement; returns the register it defines (None for a store or a
        fold). `dtype` is what the statement computes in, so its operands must already
        be of it (the verifier checks): convert them with cast() first."""
        op = Op(op)
        reg = None
        if op.form not in (Form.STORE, Form.FOLD, Form.SCATTER):
            reg = self.next_reg
            self.next_reg += 1
            self.reg_dtype[reg] = _C.bool if op.form is Form.COMPARE else dtype
        self.kernel.stmts.append(Stmt(op, reg, dtype, tuple(args), param, index, value))
        return reg

    def store(self, buf, index, reg, fold=None, reduction=None):
        """buf[index] = reg, or folds reg into it (fold: Op.REDUCE or Op.ACCUMULATE).
        A float16/bfloat16 buffer stores reg rounded to its dtype (a value computed in
        float32 is rounded once, where it is stored) and folds float32 values."""
        if buf.dtype in HALF:
            reg = self.cast(reg, _C.float32 if fold else buf.dtype)
        self.emit(fold or Op.STORE, args=(reg,), param=self.param(buf), index=index,
                  value=reduction)

    def load(self, buf, index):
        p = self.param(buf)
        key = (p, index)
        if key not in self.loads:
            self.loads[key] = self.emit(Op.LOAD, buf.dtype, param=p, index=index)
        return self.loads[key]

    def const(self, value, dtype):
        if isinstance(value, SizeInt):
            # a size as a value (a mean's count): the kernel's size argument, converted
            if dtype is _C.bool:
                raise SymbolicLoweringUnsupported(f"the size {value} as a bool")
            key = ("const", value.expr, dtype)
            if key not in self.loads:
                self.loads[key] = self.emit(Op.CONST, dtype, value=value)
            return self.loads[key]
        if dtype.is_floating_point:
            value = float(value)
        elif dtype is _C.bool:
            value = int(bool(value))
        else:
            value = int(value)
        key = ("const", value, dtype)
        if key not in self.loads:
            self.loads[key] = self.emit(Op.CONST, dtype, value=value)
        return self.loads[key]

    def cast(self, reg, dtype):
        """reg converted to dtype (reg itself when it has that dtype already); each
        register is converted to a dtype once per kernel."""
        if self.reg_dtype[reg] is dtype:
            return reg
        key = ("cast", reg, dtype)
        if key not in self.loads:
            self.loads[key] = self.emit(Op.CAST, dtype, args=(reg,))
        return self.loads[key]

    def identity_dims(self, index):
        """The loop dim each index entry is, if index is a permutation of loop dims."""
        dims = []
        # (a symbolic coefficient or offset is never the constant 0 or 1: SizeInts are
        # not constants, and one such as s0 // 8 may be 0 at some sizes, so it is not
        # compared)
        for a in index:
            nz = [d for d, c in enumerate(a.coeffs) if isinstance(c, SizeInt) or c != 0]
            if isinstance(a.offset, SizeInt) or a.offset != 0 or len(nz) != 1 or \
                    isinstance(a.coeffs[nz[0]], SizeInt) or a.coeffs[nz[0]] != 1:
                return None
            dims.append(nz[0])
        if sorted(dims) != list(range(len(self.sizes))):
            return None
        return dims

    def maybe_store(self, value, index, reg):
        """Stores a value that must be realized when this kernel visits all of it."""
        if value.realized is not None or id(value) in self.stored_at:
            return
        dims = self.identity_dims(index)
        if dims is None or tuple(self.sizes[d] for d in dims) != value.shape:
            return
        buf = self.buffers.new_buffer(value.dtype, value.shape, strides=value.layout)
        coeffs = [0] * len(self.sizes)
        for k, d in enumerate(dims):
            coeffs[d] = buf.strides[k]
        self.store(buf, Affine(tuple(coeffs)), reg)
        self.stored_at[id(value)] = (value, tuple(index))
        value.realized = buf

    def stores_elsewhere(self, value, index):
        """Whether this kernel stores value at another index than `index`: that element
        may not be written yet (an earlier point, or another thread's), so the value is
        computed again there instead of loaded."""
        at = self.stored_at.get(id(value))
        return at is not None and at[1] != tuple(index)


def mark_realize(value):
    """Asks for a value (or the base a view of it is made from) to be stored by the
    first kernel that visits all of it."""
    while value.view_base is not None and value.view_base[0].realized is None:
        value = value.view_base[0]
    value.must_realize = True


def must_realize(graph):
    """Nodes whose values will have to exist as buffers: graph outputs and operands of
    lowerings that read buffers (known before lowering, so a kernel that computes one
    on the way to something else can store it then)."""
    must = set()
    for node in graph.nodes:
        if node.op == "output":
            must.update(a for a in node.args[0] if a is not None)
        elif node.op == "call_function" and isinstance(node.target, _C.Op):
            lower = node.target.entry.lower
            if lower is not None and lower.reads_buffers:
                must.update(a for a in node.args if hasattr(a, "users"))
    return must


def worth_storing(value, node, users, must):
    """Whether a node's pointwise value is to be stored for its users: it must exist,
    or recomputing it per user would repeat many ops or read several buffers (a residual
    stream feeding a norm and the next block)."""
    return isinstance(value, PointwiseValue) and (node in must or (
        users > 1 and (value.cost > INLINE_LIMIT or len(value.reads) > 1)))


def schedule(kernel):
    """(outer, parallel, chunk): the kernel runs over [0, outer) of its dim 0 in chunks
    of `chunk` indices (about CHUNK_POINTS domain points each; a parallel kernel at
    least MIN_CHUNKS of them, down to CHUNK_MIN_POINTS), split across threads when
    parallel."""
    split = kernel.nreduce < len(kernel.sizes)
    outer = kernel.sizes[0] if split else 1
    # threads split dim 0; accumulating along it would race
    # (a scatter's points may fold into one element whatever their dim 0)
    racy = any((s.op is Op.ACCUMULATE and s.index.coeffs[0] == 0) or s.op is Op.SCATTER
               for s in kernel.stmts)
    if any_symbolic(kernel.sizes):
        # a symbolic kernel: the runtime decides threads and chunks from the call's
        # sizes, as below (compiled_graph.c bind_sizes); chunk -1
        return outer, split and not racy, -1
    points = math.prod(kernel.sizes)
    parallel = split and outer > 1 and not racy and points >= PARALLEL_MIN
    per_index = points // outer if outer else 0
    target = CHUNK_POINTS
    if parallel:        # from the sizes alone: the bounds never depend on the threads
        target = max(CHUNK_MIN_POINTS, min(CHUNK_POINTS, points // MIN_CHUNKS))
    chunk = max(1, -(-target // per_index)) if per_index else outer
    return outer, parallel, min(chunk, outer)

