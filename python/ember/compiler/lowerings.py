"""The op lowerings: how each prim becomes loop IR or a plan step. The op table names
one per prim (`lower=` of its entry in python/ember/ops/):

    pointwise("add")         one loop-IR instruction (loop_ir.Op) of the operands, in
                             the dtype the op computes in (meta.computation_dtype)
    libm("erfc")             a call of the C math library's function of the operands,
                             in that dtype (declared in loop_ir.LIBM)
    reduction("sum")         a reduce (or accumulate) kernel (loop_ir.Reduction)
    extern                   the eager kernel, run as a plan step between kernels
    a function below         anything else (views, BLAS, pow by constants, ...)

A lowering is called as lower(ctx, node, val, *args, **kwargs): ctx is the
lowering.GraphLowering (its building blocks: pointwise, realize, kernel, add_kernel,
new_buffer, extern, add_step), val the node's meta value, args and kwargs the node's
with graph values (values.py) in place of nodes. It returns the node's value.
"""
from __future__ import annotations

import math

import numpy as np

from .. import _C
from ..ops import meta as M
from . import fusion
from .loop_ir import LIBM, MAX_GATHERED, Affine, Op, Reduction
from .plan import MatmulStep, StepKind
from .symbolic import any_symbolic
from .values import (HALF, BufferValue, LoweringError, PointwiseValue, broadcast_index,
                     depth_of, domain_index, is_value, layout_strides, op_math, reads,
                     refinement)


class OpLowering:
    """A prim's lowering. reads_buffers: its tensor operands are read as buffers (so
    the kernels computing them store them on the way)."""

    def __init__(self, fn, name, reads_buffers=False):
        self.fn = fn
        self.name = name
        self.reads_buffers = reads_buffers

    def __call__(self, ctx, node, val, *args, **kwargs):
        return self.fn(ctx, node, val, *args, **kwargs)

    def __repr__(self):
        return f"<lowering {self.name}>"


def lowering(fn=None, *, reads_buffers=False):
    """Makes a function a prim's lowering (a decorator)."""
    if fn is None:
        return lambda f: lowering(f, reads_buffers=reads_buffers)
    return OpLowering(fn, fn.__name__.removeprefix("lower_"), reads_buffers)


# ------------------------------------------------------------------ the vocabulary


def _instruction(ctx, node, val, op, operands):
    compute = ctx.computation_dtype(node, val)
    if not op.allows(compute):
        raise LoweringError(f"{op} of {compute}")
    dtypes = [compute] * len(operands)
    if op is Op.SELECT:
        dtypes[0] = _C.bool
    return ctx.pointwise(node, val, operands, lambda kb, r: kb.emit(op, compute, r),
                         dtypes=dtypes)


def pointwise(op):
    """The prim is one instruction of its operands (select: condition first)."""
    op = Op(op)

    def lower(ctx, node, val, *operands):
        return _instruction(ctx, node, val, op, list(operands))
    return OpLowering(lower, f"pointwise({op})")


def libm(fn, arity=1):
    """The prim is the C math library's function fn (float64; fn`f` in float32) of its
    operands: one call instruction. Declares fn in loop_ir.LIBM."""
    if not fn.isidentifier() or LIBM.get(fn, arity) != arity or arity not in (1, 2):
        raise ValueError(f"libm({fn!r}, {arity}): not a C math function of 1 or 2 "
                         "operands")
    LIBM[fn] = arity

    def lower(ctx, node, val, *operands):
        compute = ctx.computation_dtype(node, val)
        if not Op.CALL.allows(compute):
            raise LoweringError(f"{fn} of {compute}")
        return ctx.pointwise(node, val, list(operands),
                             lambda kb, r: kb.emit(Op.CALL, compute, r, value=fn))
    return OpLowering(lower, f"libm({fn})")


def reduction(op):
    """The prim reduces its first operand over dims (all of them for none)."""
    op = Reduction(op)

    def lower(ctx, node, val, a, dim=None, keepdim=False, **_):
        return _reduce(ctx, val, a, dim, keepdim, op, val.dtype)
    return OpLowering(lower, f"reduction({op})")


extern = OpLowering(lambda ctx, node, val, *args, **kwargs: ctx.extern(node, val),
                    "extern")


# ------------------------------------------------------------------ elementwise


@lowering
def lower_add(ctx, node, val, a, b, alpha=1):
    if alpha != 1:
        compute = ctx.computation_dtype(node, val)
        shape = b.shape if is_value(b) else tuple(val.shape)
        b = ctx.pointwise(node, _Like(shape, val.dtype), [b, alpha],
                          lambda kb, r: kb.emit(Op.MUL, compute, r))
    return _instruction(ctx, node, val, Op.ADD, [a, b])


@lowering
def lower_div(ctx, node, val, a, b, rounding_mode=None):
    compute = ctx.computation_dtype(node, val)
    if not compute.is_floating_point or rounding_mode == "floor":
        # integer division (its zero-divisor error) and Python's floor division of
        # floats (fmod-based: 1 // 0.1 is 9) run eager's kernel
        return ctx.extern(node, val)
    if rounding_mode is None:
        return _instruction(ctx, node, val, Op.DIV, [a, b])
    return ctx.pointwise(node, val, [a, b], lambda kb, r: kb.emit(
        Op.TRUNC, compute, (kb.emit(Op.DIV, compute, r),)))


@lowering
def lower_pow(ctx, node, val, a, b):
    # a constant exponent that is a multiple of 1/2 up to 4 in size becomes
    # multiplications, a sqrt and a division (x ** -0.5 is layer norm's rsqrt), which
    # vectorise; other exponents call libm's pow per element
    if not is_value(b) and isinstance(b, (int, float)) and not isinstance(b, bool) \
            and is_value(a) and val.dtype.is_floating_point and \
            float(2 * b).is_integer() and abs(b) <= 4:
        return ctx.pointwise(node, val, [a], lambda kb, r: _pow_by(kb, r[0], float(b),
                                                                   op_math(val.dtype)))
    if not val.dtype.is_floating_point:
        raise LoweringError("integer pow")
    return _instruction(ctx, node, val, Op.POW, [a, b])


def _pow_by(kb, x, e, dt):
    """x ** e for a multiple e of 1/2, |e| <= 4, as eager computes it."""
    if e == 0.5:             # eager (NumPy) computes x ** 0.5 as sqrt(x)
        return kb.emit(Op.SQRT, dt, (x,))
    one = kb.const(1.0, dt)
    if e == 0:
        return one
    whole, half = int(abs(e)), abs(e) % 1 == 0.5
    y = None
    if half:
        # pow's special cases: (-0) ** e and (-inf) ** e are those of +0 and +inf when e
        # is not an integer; other negative x give NaN (the sqrt)
        zero = kb.const(0.0, dt)
        ninf = kb.emit(Op.EQ, dt, (x, kb.const(-math.inf, dt)))
        x = kb.emit(Op.SELECT, dt, (kb.emit(Op.EQ, dt, (x, zero)), zero, x))
        x = kb.emit(Op.SELECT, dt, (ninf, kb.const(math.inf, dt), x))
        y = kb.emit(Op.SQRT, dt, (x,))
        if e < 0:
            y = kb.emit(Op.DIV, dt, (one, y))
    # negative powers multiply reciprocals (x ** -1.5 of a large x underflows gradually
    # instead of overflowing first)
    b = kb.emit(Op.DIV, dt, (one, x)) if e < 0 and whole else x
    for _ in range(whole):
        y = b if y is None else kb.emit(Op.MUL, dt, (y, b))
    return y


@lowering
def copy(ctx, node, val, a, **_):
    """_to_copy and clone: the value itself (converted to val's dtype). A conversion to
    float16 or bfloat16 rounds there (a value of that dtype computed in float32 is
    rounded where it is stored)."""
    dtypes = None
    if val.dtype in HALF and a.dtype is not val.dtype:
        dtypes = [val.dtype]
    return ctx.pointwise(node, val, [a], lambda kb, r: r[0], dtypes=dtypes)


@lowering
def lower_full(ctx, node, val, size, fill_value, **_):
    return ctx.pointwise(node, val, [fill_value], lambda kb, r: r[0], cost=0)


@lowering
def lower_arange(ctx, node, val, end, **_):
    out = op_math(val.dtype)
    return PointwiseValue(tuple(val.shape), val.dtype,
                          lambda kb, index: _iota(kb, index[0], out), 1, node)


def _iota(kb, affine, dtype):
    """The value of arange at an affine index: offset + sum(coeff * loop index)."""
    reg = None
    for d, c in enumerate(affine.coeffs):
        if c == 0:
            continue
        term = kb.emit(Op.IOTA, dtype, value=d)
        if c != 1:
            term = kb.emit(Op.MUL, dtype, (term, kb.const(c, dtype)))
        reg = term if reg is None else kb.emit(Op.ADD, dtype, (reg, term))
    if reg is None:
        return kb.const(affine.offset, dtype)
    if affine.offset:
        reg = kb.emit(Op.ADD, dtype, (reg, kb.const(affine.offset, dtype)))
    return reg


class _Like:
    """A stand-in meta value of another shape."""

    def __init__(self, shape, dtype):
        self.shape = shape
        self.dtype = dtype


# ------------------------------------------------------------------ views


def _view_of(value, shape, strides_fn, index_fn, base_layout=False):
    """A view: strided for buffers, an index transform for pointwise values.
    base_layout: when the view has to become a buffer, compute its source in the
    source's own layout and view that (a transposed operand of a matmul is computed
    row by row and handed to BLAS transposed, not gathered column by column)."""
    if isinstance(value, PointwiseValue) and value.realized is not None:
        value = value.realized
    if isinstance(value, BufferValue):
        return value.restrided(*strides_fn(value))
    src = value

    def fn(kb, index):
        return src.load(kb, index_fn(index))
    view = PointwiseValue(shape, src.dtype, fn, src.cost, None, src.reads, depth_of([src]))
    if base_layout:
        view.view_base = (src, strides_fn)
    return view


@lowering
def lower_permute(ctx, node, val, a, dims):
    nd = len(dims)
    dims = [M.wrap_dim(d, nd) for d in dims]
    inv = [0] * nd
    for i, d in enumerate(dims):
        inv[d] = i
    return _view_of(
        a, tuple(val.shape),
        lambda b: (tuple(b.shape[d] for d in dims), tuple(b.strides[d] for d in dims),
                   b.offset),
        lambda index: [index[inv[k]] for k in range(nd)], base_layout=True)


@lowering
def lower_expand(ctx, node, val, a, size, implicit=False):
    shape = tuple(val.shape)
    off = len(shape) - len(a.shape)

    def strides(b):
        st = [0] * len(shape)
        for k in range(len(b.shape)):
            if b.shape[k] == shape[k + off]:
                st[k + off] = b.strides[k]
        return shape, tuple(st), b.offset
    return _view_of(a, shape, strides, lambda index: broadcast_index(index, shape, a.shape))


def _clamp_start(start, size):
    s = 0 if start is None else start
    if s < 0:
        s += size
    return min(max(s, 0), size)


@lowering
def lower_slice(ctx, node, val, a, dim=0, start=None, end=None, step=1):
    d = M.wrap_dim(dim, len(a.shape))
    s = _clamp_start(start, a.shape[d])

    def strides(b):
        st = list(b.strides)
        st[d] = b.strides[d] * step
        return tuple(val.shape), tuple(st), b.offset + s * b.strides[d]

    def index_fn(index):
        out = list(index)
        a_d = index[d]
        out[d] = Affine(tuple(c * step for c in a_d.coeffs), a_d.offset * step + s)
        return out
    return _view_of(a, tuple(val.shape), strides, index_fn)


@lowering
def lower_view(ctx, node, val, a, size):
    shape = tuple(val.shape)
    if isinstance(a, PointwiseValue) and a.realized is None:
        mapping = refinement(a.shape, shape)
        if mapping is None:
            a = ctx.realize(a)
        else:
            return _view_of(a, shape, None, lambda index: _merge(index, mapping, shape))
    if isinstance(a, PointwiseValue):
        a = ctx.realize(a)
    if M.compute_stride(a.shape, a.strides, math.prod(a.shape), shape) is None:
        # the buffer is laid out otherwise than the traced value was (buffers are made
        # contiguous, or in a source's layout): its view is a reshape, of a copy
        a = _contiguous_copy(ctx, a)

    def strides(b):
        st = M.compute_stride(b.shape, b.strides, math.prod(b.shape), shape)
        if st is None:
            raise LoweringError("view of a buffer its strides cannot express")
        return shape, st, b.offset
    return _view_of(a, shape, strides, None)


def _merge(index, mapping, shape):
    """The index into a value split by a reshape (refinement's mapping) from the index
    into the reshaped one."""
    out = []
    for group in mapping:
        coeffs = [0] * len(index[0].coeffs) if index else []
        offset, mult = 0, 1
        for k in reversed(group):
            coeffs = [c + mult * x for c, x in zip(coeffs, index[k].coeffs)]
            offset += mult * index[k].offset
            mult *= shape[k]
        out.append(Affine(tuple(coeffs), offset))
    return out


def _contiguous_copy(ctx, buf):
    copied = PointwiseValue(buf.shape, buf.dtype, lambda kb, index: buf.load(kb, index), 1,
                            None, frozenset({buf.ref}))
    out = ctx.realize(copied)
    if out.strides != M.contiguous_strides(out.shape):
        raise LoweringError("a copy of a buffer was not made contiguous")
    return out


@lowering
def lower_slice_scatter(ctx, node, val, a, src, dim=0, start=None, end=None, step=1):
    """A copy of `a` with src written over a slice of it: one kernel copies (or
    computes) `a` into a new buffer, a second stores src into the slice."""
    shape = tuple(val.shape)
    out = ctx.new_buffer(val.dtype, shape)
    nd = len(shape)
    kb = ctx.kernel(shape, 0, "pointwise")
    index = domain_index(nd)
    reg = a.load(kb, broadcast_index(index, shape, a.shape))
    kb.store(out, out.at(index, nd), kb.cast(reg, val.dtype))
    ctx.add_kernel(kb)
    if math.prod(src.shape) == 0:
        return out
    d = M.wrap_dim(dim, nd)
    strides = list(out.strides)
    strides[d] *= step
    dst = out.restrided(tuple(src.shape), tuple(strides),
                        _clamp_start(start, shape[d]) * out.strides[d])
    kb = ctx.kernel(tuple(src.shape), 0, "scatter")
    reg = src.load(kb, index)
    kb.store(dst, dst.at(index, nd), kb.cast(reg, val.dtype))
    ctx.add_kernel(kb)
    return out


@lowering
def lower_cat(ctx, node, val, tensors, dim=0):
    """One kernel per tensor, each storing it (or computing it: a pointwise value is
    fused) into its slice of a new buffer along dim; legacy empty 1-D tensors are
    skipped, as eager skips them."""
    shape = tuple(val.shape)
    nd = len(shape)
    if nd == 0:
        raise LoweringError("cat of 0-d tensors")
    d = M.wrap_dim(dim, nd)
    out = ctx.new_buffer(val.dtype, shape)
    offset = 0
    index = domain_index(nd)
    for t in (ctx.arg(x) for x in tensors):
        if not is_value(t):
            raise LoweringError(f"cat of {t!r}")
        if len(t.shape) == 1 and nd != 1 and t.shape[0] == 0:
            continue
        if len(t.shape) != nd:
            raise LoweringError("cat of tensors of different ranks")
        if math.prod(t.shape) != 0:
            dst = out.restrided(tuple(t.shape), tuple(out.strides),
                                offset * out.strides[d])
            kb = ctx.kernel(tuple(t.shape), 0, "cat")
            reg = t.load(kb, index)
            kb.store(dst, dst.at(index, nd), kb.cast(reg, val.dtype))
            ctx.add_kernel(kb)
        offset = offset + t.shape[d]
    return out


# ------------------------------------------------------------------ reductions and BLAS


def _reduce(ctx, val, a, dims, keepdim, op, acc_dtype):
    """float16 and bfloat16 accumulate in float32 (as eager does), rounded once."""
    acc_dtype = op_math(acc_dtype)
    nd = len(a.shape)
    mask = M.reduce_mask(dims if dims != () else None, nd) if nd else []
    kept = [d for d in range(nd) if not mask[d]]
    reduced = [d for d in range(nd) if mask[d]]
    out = ctx.new_buffer(val.dtype, tuple(val.shape))
    result = out
    if not reduced:
        # nothing to reduce (a 0-d input): each element is its own result
        order = kept
        kb = ctx.kernel(tuple(a.shape), 0, "reduce")
        fold = None
    elif _outer_reduction(a, kept, reduced) and acc_dtype is not _C.bool:
        # the reduced dims are outer in memory: fold rows into the output in place
        # (contiguous, vectorised) instead of walking each column with a stride
        order = reduced + kept
        if val.dtype in HALF:
            # accumulated in memory: in a float32 buffer, rounded where it is stored
            out = ctx.new_buffer(acc_dtype, tuple(val.shape))
            result = _rounded(out, val.dtype)
        lead = _column_block_dim(a, kept)
        if lead is not None:
            # a kept dim outermost: threads take blocks of it (of output columns), each
            # folding every row into its own columns, still reading rows in order
            order = [lead] + reduced + [d for d in kept if d != lead]
            parts = 0
        else:
            sizes = tuple(a.shape[d] for d in order)
            kept_points = math.prod(a.shape[d] for d in kept)
            parts = _sym_partials(sizes, kept_points) if any_symbolic(sizes) else \
                _partials(sizes, kept_points)
        if parts:
            _split_outer_reduce(ctx, val, a, order, kept, mask, keepdim, out, op,
                                acc_dtype, parts)
            return result
        _fill(ctx, out, op, acc_dtype)
        kb = ctx.kernel(tuple(a.shape[d] for d in order), 0, "reduce")
        fold = Op.ACCUMULATE
    else:
        order = kept + reduced
        kb = ctx.kernel(tuple(a.shape[d] for d in order), len(reduced), "reduce")
        fold = Op.REDUCE
    index = [None] * nd
    for pos, d in enumerate(order):
        index[d] = Affine(tuple(1 if k == pos else 0 for k in range(nd)))
    out_coeffs = [0] * nd
    out_dims = [d for d in range(nd) if keepdim or not mask[d]]
    for k, d in enumerate(out_dims):
        if not mask[d]:
            out_coeffs[order.index(d)] = out.strides[k]
    reg = kb.cast(a.load(kb, index), acc_dtype)
    kb.store(out, Affine(tuple(out_coeffs)), reg, fold, op if fold else None)
    ctx.add_kernel(kb)
    return result


def _rounded(buf, dtype):
    """A float32 buffer's values rounded to dtype (float16 or bfloat16)."""
    return PointwiseValue(buf.shape, dtype, lambda kb, index: kb.cast(buf.load(kb, index),
                                                                      dtype),
                          1, None, frozenset({buf.ref}))


def _as_float32(ctx, value):
    """A float16/bfloat16 value as a float32 buffer (for BLAS)."""
    f32 = PointwiseValue(value.shape, _C.float32, lambda kb, index: kb.cast(
        value.load(kb, index), _C.float32), 1, None, frozenset(), depth_of([value]))
    return ctx.realize(f32)


def _fill(ctx, out, op, acc_dtype):
    """A kernel setting every element of the (contiguous) buffer out to op's identity."""
    fill = ctx.kernel(tuple(out.shape), 0, "fill")
    fill.store(out, Affine(tuple(out.strides)), fill.const(_identity(op, acc_dtype), acc_dtype))
    ctx.add_kernel(fill)


MAX_PARTIALS = 16      # partial results an outer reduction is split into, at most


def _column_block_dim(a, kept):
    """The kept dim an outer reduction puts outermost so that threads can split it, or
    None: one that is not the innermost in memory (its blocks are whole rows of
    output columns), the one with the largest stride, on inputs large enough to split."""
    if len(kept) < 2 or any_symbolic(a.shape) or math.prod(a.shape) < fusion.PARALLEL_MIN:
        return None         # (symbolic sizes: one kernel, whose rows the runtime splits)
    strides = layout_strides(a)
    cands = [d for d in kept if a.shape[d] > 1]
    if len(cands) < 2:
        return None
    inner = min(cands, key=lambda d: (abs(strides[d]), -d))
    lead = max((d for d in cands if d != inner), key=lambda d: (abs(strides[d]), -d))
    return lead


SYM_PARTIALS = 8      # the partial results of an outer reduction over a symbolic dim


def _sym_partials(sizes, kept_points):
    """The partials an outer reduction whose outermost (reduced) dim is symbolic is
    split into: SYM_PARTIALS blocks of sizes[0] // SYM_PARTIALS rows, the remaining rows
    folded into the last one (a kernel of their own), whatever the sizes at a call, so
    that the threads the runtime gives the first kernel split its blocks (the partials
    cost 2 * SYM_PARTIALS points per output point more: little beside the input's rows
    but at the smallest sizes)."""
    if not sizes or not any_symbolic(sizes[:1]):
        return 0
    return SYM_PARTIALS


def _partials(sizes, kept_points):
    """How many blocks of its outermost dim an outer reduction over domain `sizes`
    (reduced dims first) folds into partial results of their own, so that the blocks
    can run on different threads (0: not split; one kernel folds every row into the
    output, on one thread). The count depends on the shape only, never on the thread
    count: results are the same on any number of threads. Not split where the
    partials would be more than an eighth of the input (few rows per block)."""
    if any_symbolic(sizes):
        return 0            # symbolic sizes: the shape is not known until the call
    points = math.prod(sizes)
    if points < fusion.PARALLEL_MIN or not sizes or sizes[0] < 2:
        return 0
    if 8 * 2 * kept_points > points:
        return 0
    want = min(MAX_PARTIALS, sizes[0], max(2, points // fusion.CHUNK_POINTS))
    for p in range(want, 1, -1):        # the largest count dividing the outer dim
        if sizes[0] % p == 0 and 8 * p * kept_points <= points:
            return p
    return 0


def _split_outer_reduce(ctx, val, a, order, kept, mask, keepdim, out, op, acc_dtype, parts):
    """An outer reduction in two steps: each of `parts` blocks of the outermost reduced
    dim folds its rows into a partial result of its own (one kernel, split across
    threads by block: no two threads fold into the same element), then the partials
    are folded into the output in order (a small kernel)."""
    nd = len(a.shape)
    sizes = [a.shape[d] for d in order]
    rows = sizes[0] // parts
    rem = sizes[0] - parts * rows      # (symbolic sizes: the rows after the blocks)
    kept_shape = tuple(a.shape[d] for d in kept)
    partial = ctx.new_buffer(out.dtype, (parts,) + kept_shape)   # float32 for half types
    _fill(ctx, partial, op, acc_dtype)
    # domain: [block, row in block] + the other dims of `order`
    kb = ctx.kernel(tuple([parts, rows] + sizes[1:]), 0, "reduce")
    dims = nd + 1
    index = [None] * nd
    for pos, d in enumerate(order):
        if pos == 0:
            index[d] = Affine(tuple(rows if k == 0 else 1 if k == 1 else 0
                                    for k in range(dims)))
        else:
            index[d] = Affine(tuple(1 if k == pos + 1 else 0 for k in range(dims)))
    coeffs = [0] * dims
    coeffs[0] = partial.strides[0]
    for k, d in enumerate(kept):
        coeffs[order.index(d) + 1] = partial.strides[k + 1]
    reg = kb.cast(a.load(kb, index), acc_dtype)
    kb.store(partial, Affine(tuple(coeffs)), reg, Op.ACCUMULATE, op)
    ctx.add_kernel(kb)
    if any_symbolic([rem]):
        # the rows after the blocks, into the last partial (none when it divides)
        kb = ctx.kernel(tuple([rem] + sizes[1:]), 0, "reduce")
        index = [None] * nd
        for pos, d in enumerate(order):
            index[d] = Affine(tuple(1 if k == pos else 0 for k in range(nd)),
                              parts * rows if pos == 0 else 0)
        coeffs = [0] * nd
        for k, d in enumerate(kept):
            coeffs[order.index(d)] = partial.strides[k + 1]
        reg = kb.cast(a.load(kb, index), acc_dtype)
        kb.store(partial, Affine(tuple(coeffs), (parts - 1) * partial.strides[0]), reg,
                 Op.ACCUMULATE, op)
        ctx.add_kernel(kb)
    # the partials, folded into the output in block order
    _fill(ctx, out, op, acc_dtype)
    kb = ctx.kernel((parts,) + kept_shape, 0, "reduce")
    out_dims = [d for d in range(nd) if keepdim or not mask[d]]
    coeffs = [0] * (len(kept) + 1)
    for k, d in enumerate(out_dims):
        if not mask[d]:
            coeffs[kept.index(d) + 1] = out.strides[k]
    reg = kb.cast(partial.load(kb, domain_index(len(kept) + 1)), acc_dtype)
    kb.store(out, Affine(tuple(coeffs)), reg, Op.ACCUMULATE, op)
    ctx.add_kernel(kb)
    return out


def _outer_reduction(a, kept, reduced):
    """Whether a reduction's input is contiguous along a kept dim (the smallest stride
    belongs to a kept dim), so that looping kept dims innermost reads it in order."""
    if not kept or not reduced:
        return False
    strides = layout_strides(a)
    dims = [d for d in range(len(a.shape)) if a.shape[d] > 1 and strides[d] != 0]
    if not dims or all(a.shape[d] <= 1 for d in reduced):
        return False
    inner = min(dims, key=lambda d: (abs(strides[d]), -d))
    return inner in kept


def _identity(op, dtype):
    if op is Reduction.SUM:
        return 0
    if op is Reduction.PROD:
        return 1
    if dtype.is_floating_point:
        return -math.inf if op is Reduction.MAX else math.inf
    info = np.iinfo(dtype.numpy_dtype)
    return info.min if op is Reduction.MAX else info.max


@lowering(reads_buffers=True)
def lower_matmul(ctx, node, val, a, b):
    if not val.dtype.is_floating_point:
        raise LoweringError("integer matmul")
    if val.dtype in HALF:
        # float16/bfloat16: BLAS in float32 on converted copies, the product rounded
        # once (as eager computes it)
        av, bv = _as_float32(ctx, a), _as_float32(ctx, b)
        out = ctx.new_buffer(_C.float32, tuple(val.shape))
        ctx.add_step(MatmulStep(StepKind.MATMUL, av.view(), bv.view(), out.ref.index))
        return _rounded(out, val.dtype)
    if len(a.shape) >= 2 and len(b.shape) >= 2 and not any_symbolic(
            tuple(a.shape) + tuple(b.shape) + tuple(val.shape)) and \
            a.shape[-1] <= SMALL_K and len(val.shape) == max(len(a.shape), len(b.shape)):
        return _small_product(val, a, b)
    av, bv = ctx.realize(a), ctx.realize(b)
    out = ctx.new_buffer(val.dtype, tuple(val.shape))
    ctx.add_step(MatmulStep(StepKind.MATMUL, av.view(), bv.view(), out.ref.index))
    return out


# ------------------------------------------------------------------ indexing


class _Indexing:
    """self[indices]'s geometry (as eager lays it out, ops/indexing.index_geometry): the
    index tensors (entries: (dim, value)) broadcast to bshape, which replaces the
    indexed dims where they are adjacent and goes first otherwise; `at` gives, at a
    point of the result, the gathered address into src (a buffer value)."""

    def __init__(self, ctx, shape, indices):
        self.entries, cursor = [], 0
        for t in indices:
            t = ctx.arg(t)
            if t is None:
                cursor += 1
                continue
            if not is_value(t) or t.dtype not in (_C.int64, _C.int32):
                raise LoweringError("index by a mask")
            self.entries.append((cursor, t))
            cursor += 1
        if not self.entries or len(self.entries) > MAX_GATHERED:
            raise LoweringError(f"index by {len(self.entries)} tensors")
        self.bshape = tuple(M.broadcast_shapes(
            "index", *[tuple(t.shape) for _, t in self.entries]))
        dims = [d for d, _ in self.entries]
        rest = [d for d in range(len(shape)) if d not in dims]
        adjacent = dims == list(range(dims[0], dims[0] + len(dims)))
        before = [d for d in rest if d < dims[0]] if adjacent else []
        after = [d for d in rest if d not in before]
        self.nbefore = len(before)
        # the result's position of each dim of self not indexed
        self.pos = {d: k for k, d in enumerate(before)}
        self.pos.update({d: len(before) + len(self.bshape) + k for k, d in enumerate(after)})
        self.shape = tuple(shape[d] for d in before) + self.bshape + tuple(
            shape[d] for d in after)

    def at(self, kb, src, index):
        """(affine part, index registers, strides) of src at the result's point index."""
        ndom = len(kb.sizes)
        coeffs, off = [0] * ndom, src.offset
        for d, p in self.pos.items():
            off += index[p].offset * src.strides[d]
            for j, c in enumerate(index[p].coeffs):
                coeffs[j] += c * src.strides[d]
        nb = len(self.bshape)
        bidx = index[self.nbefore:self.nbefore + nb]
        regs, strides = [], []
        for k, (d, t) in enumerate(self.entries):
            r = kb.cast(t.load(kb, broadcast_index(bidx, self.bshape, t.shape)), _C.int64)
            regs.append(kb.emit(Op.BOUND, _C.int64, (r,), value=(src.shape[d], k)))
            strides.append(src.strides[d])
        return Affine(tuple(coeffs), off), tuple(regs), tuple(strides)

    def operands(self):
        return [t for _, t in self.entries]


@lowering
def lower_index(ctx, node, val, a, indices):
    """self[indices] (the index prim: x[idx], index_select, embedding and gather lower
    to it): a pointwise value whose every point gathers self at the index tensors'
    values (loop IR `bound` and `gather`), fused into the kernels that read it. Each
    index value is checked at run time: one out of range raises eager's IndexError
    after the kernel. Boolean masks (a shape from the values) run eager's kernel."""
    try:
        geo = _Indexing(ctx, a.shape, indices)
    except LoweringError:
        return ctx.extern(node, val)
    shape = tuple(val.shape)
    if math.prod(shape) == 0:
        return ctx.extern(node, val)
    src = ctx.realize(a)

    def fn(kb, index):
        affine, regs, strides = geo.at(kb, src, index)
        return kb.emit(Op.GATHER, src.dtype, regs, param=kb.param(src), index=affine,
                       value=strides)

    operands = geo.operands()
    value = PointwiseValue(shape, val.dtype, fn, 2 + sum(
        o.cost for o in operands if isinstance(o, PointwiseValue)), node,
        reads(operands, shape) | {src.ref}, depth_of(operands))
    if not node.users:
        # unused, still checked as eager checks (the graph keeps it: checks_values):
        # a kernel of its own computes it
        ctx.realize(value)
    return value


@lowering
def lower_index_put(ctx, node, val, a, indices, values, accumulate=False):
    """index_put with accumulate (the gradient of indexing, index_select and
    embedding: index_add, scatter_add): a kernel copies self into the result, a second
    folds values into it at the gathered indices (loop IR `scatter`), point by point in
    the order eager adds them, on one thread. Without accumulate (which element wins
    among duplicates is eager's order) and with masks: eager's kernel."""
    if not accumulate or not val.dtype.is_floating_point:
        return ctx.extern(node, val)
    try:
        geo = _Indexing(ctx, a.shape, indices)
    except LoweringError:
        return ctx.extern(node, val)
    shape = tuple(val.shape)
    nd = len(shape)
    out = ctx.new_buffer(val.dtype, shape)
    kb = ctx.kernel(shape, 0, "pointwise")
    index = domain_index(nd)
    kb.store(out, out.at(index, nd), kb.cast(a.load(kb, broadcast_index(index, shape,
                                                                          a.shape)),
                                              val.dtype))
    ctx.add_kernel(kb)
    if math.prod(geo.shape) == 0:
        return out
    kb = ctx.kernel(geo.shape, 0, "scatter")
    index = domain_index(len(geo.shape))
    acc = op_math(val.dtype)
    v = kb.cast(values.load(kb, broadcast_index(index, geo.shape, values.shape)), acc)
    affine, regs, strides = geo.at(kb, out, index)
    kb.emit(Op.SCATTER, args=(v,) + regs, param=kb.param(out), index=affine,
            value=(Reduction.SUM, strides))
    ctx.add_kernel(kb)
    return out


# A product whose inner dim is at most this is a pointwise value (its K products added in
# order), fused into what reads it, instead of a BLAS call per matrix: such a product reads
# and writes more than it computes, and a batch of tiny ones (adaptive average pooling's
# separable maps over a CNN's last 4x4 maps, (1, 4) @ (16, 128, 4, 4); their backward, a
# K = 1 outer product per matrix) costs one BLAS call per matrix.
SMALL_K = 4


def _small_product(val, a, b):
    shape = tuple(val.shape)
    nd, K = len(shape), a.shape[-1]
    batch = shape[:-2]
    a_shape, b_shape = batch + (shape[-2], K), batch + (K, shape[-1])

    def fn(kb, index):
        acc = None
        for k in range(K):
            tap = Affine(tuple(0 for _ in range(len(kb.sizes))), k)
            x = a.load(kb, broadcast_index(list(index[:-1]) + [tap], a_shape, a.shape))
            y = b.load(kb, broadcast_index(list(index[:-2]) + [tap, index[-1]], b_shape,
                                           b.shape))
            term = kb.emit(Op.MUL, val.dtype, (kb.cast(x, val.dtype), kb.cast(y, val.dtype)))
            acc = term if acc is None else kb.emit(Op.ADD, val.dtype, (acc, term))
        return acc if acc is not None else kb.const(0, val.dtype)
    return PointwiseValue(shape, val.dtype, fn, 2 * K, None,
                          frozenset().union(*(
                              {v.ref} if isinstance(v, BufferValue) else
                              {v.realized.ref} if v.realized is not None else v.reads
                              for v in (a, b))),
                          depth_of([a, b]) + 1)
