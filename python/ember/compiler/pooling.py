"""Max pooling lowered to loop IR (the op table's lower= of max_pool2d_with_indices and
its backward). Average and adaptive pooling need nothing here: they decompose into
matrix products (ops/nn_ops.py), which lower as BLAS calls.

The windows are affine in a domain (..., OH, OW, kh, kw): output (oh, ow)'s tap (i, j)
reads row oh * sh - ph + i * dh and column ow * sw - pw + j * dw. Loads must stay inside
their buffer, so with padding (or a ceil_mode window that runs past the edge) the input
is first copied into a buffer padded with -inf (the lowest integer), where every tap is
an element. Then:

    maxima    reduce max over (kh, kw): NaN wins, as eager's
    indices   reduce max over (kh, kw) of a score that ranks the taps as eager's kernel
              picks them: a NaN (the last one) above everything, else the first tap
              equal to the maximum; taps in the padding score -1. The flat position
              h * W + w is decoded from the winning score.
    values    the tap at the index (reduce max of it and -inf elsewhere), bit for bit
              eager's (the maximum itself may be 0.0 where eager keeps a first -0.0)
    backward  the gradient of each output accumulated (in memory, in output order, as
              eager adds them) at every tap of its window where the tap is the recorded
              index, into a zeroed padded buffer whose interior is the result.

Channels-last inputs (whose results eager lays out channels-last too) and dtypes other
than float32 and float64 run the eager kernel (extern).
"""
from __future__ import annotations

import math

import numpy as np

from .. import _C
from ..ops import meta as M
from .loop_ir import Affine, Op, Reduction
from .lowerings import lowering
from .values import PointwiseValue, domain_index

FLOATS = (_C.float32, _C.float64)


class _Window:
    """The geometry of one pooling: leading dims, input, output, kernel, stride,
    padding, dilation and the padded extents."""

    def __init__(self, shape, out_shape, kernel_size, stride, padding, dilation):
        def pair(v, default=None):
            v = tuple(v) if isinstance(v, (tuple, list)) else (v,)
            if not v:
                return default
            return v[0], v[-1]
        self.kh, self.kw = pair(kernel_size)
        self.sh, self.sw = pair(stride, (self.kh, self.kw))
        self.ph, self.pw = pair(padding)
        self.dh, self.dw = pair(dilation)
        self.lead = tuple(shape[:-2])
        self.H, self.W = shape[-2:]
        self.OH, self.OW = out_shape[-2:]
        # the rows (columns) the taps reach, in padded coordinates
        self.Hp = self.ph + max(self.H, (self.OH - 1) * self.sh - self.ph +
                                (self.kh - 1) * self.dh + 1)
        self.Wp = self.pw + max(self.W, (self.OW - 1) * self.sw - self.pw +
                                (self.kw - 1) * self.dw + 1)

    @property
    def padded(self):
        return (self.Hp, self.Wp) != (self.H, self.W) or self.ph or self.pw

    @property
    def domain(self):
        return self.lead + (self.OH, self.OW, self.kh, self.kw)

    def dims(self):
        """Loop dims of the domain: (lead dims, oh, ow, i, j)."""
        n = len(self.lead)
        return list(range(n)), n, n + 1, n + 2, n + 3

    def tap_index(self, padded):
        """The index (one Affine per dim of the input, or of the padded buffer) of tap
        (i, j) of output (oh, ow)."""
        lead, oh, ow, i, j = self.dims()
        nd = len(self.domain)
        ident = domain_index(nd)

        def axis(o, s, k, d, p):
            coeffs = [0] * nd
            coeffs[o], coeffs[k] = s, d
            return Affine(tuple(coeffs), 0 if padded else -p)
        return [ident[d] for d in lead] + [axis(oh, self.sh, i, self.dh, self.ph),
                                           axis(ow, self.sw, j, self.dw, self.pw)]

    def out_index(self):
        """The index of output (oh, ow) (the taps' coefficients 0)."""
        lead, oh, ow, _, _ = self.dims()
        ident = domain_index(len(self.domain))
        return [ident[d] for d in lead] + [ident[oh], ident[ow]]

    def position(self, kb):
        """(valid, pos) registers at a tap: whether it is inside the input, and its flat
        position h * W + w in the input plane."""
        _, oh, ow, i, j = self.dims()
        i64 = _C.int64

        def coord(o, s, k, d, p):
            r = kb.emit(Op.MUL, i64, (kb.emit(Op.IOTA, i64, value=o), kb.const(s, i64)))
            r = kb.emit(Op.ADD, i64, (r, kb.emit(Op.MUL, i64, (
                kb.emit(Op.IOTA, i64, value=k), kb.const(d, i64)))))
            return kb.emit(Op.SUB, i64, (r, kb.const(p, i64)))
        h = coord(oh, self.sh, i, self.dh, self.ph)
        w = coord(ow, self.sw, j, self.dw, self.pw)
        zero = kb.const(0, i64)
        valid = kb.emit(Op.AND, _C.bool, (kb.emit(Op.GE, i64, (h, zero)),
                                          kb.emit(Op.LT, i64, (h, kb.const(self.H, i64)))))
        valid = kb.emit(Op.AND, _C.bool, (valid, kb.emit(Op.GE, i64, (w, zero))))
        valid = kb.emit(Op.AND, _C.bool, (valid, kb.emit(
            Op.LT, i64, (w, kb.const(self.W, i64)))))
        pos = kb.emit(Op.ADD, i64, (kb.emit(Op.MUL, i64, (h, kb.const(self.W, i64))), w))
        return valid, pos


def _lowest(dtype):
    return -math.inf if dtype.is_floating_point else int(np.iinfo(dtype.numpy_dtype).min)


def _padded_input(ctx, x, win, dtype):
    """x copied into a buffer of lead + (Hp, Wp) filled with the lowest value."""
    shape = win.lead + (win.Hp, win.Wp)
    buf = ctx.new_buffer(dtype, shape)
    kb = ctx.kernel(shape, 0, "fill")
    kb.store(buf, Affine(tuple(buf.strides)), kb.const(_lowest(dtype), dtype))
    ctx.add_kernel(kb)
    inner = win.lead + (win.H, win.W)
    interior = buf.restrided(inner, buf.strides, win.ph * win.Wp + win.pw)
    kb = ctx.kernel(inner, 0, "pad")
    index = domain_index(len(inner))
    kb.store(interior, interior.at(index, len(inner)), kb.cast(x.load(kb, index), dtype))
    ctx.add_kernel(kb)
    return buf


def _channels_last(val):
    return val.ndim == 4 and tuple(val.stride()) != M.contiguous_strides(tuple(val.shape))


@lowering
def lower_max_pool2d_with_indices(ctx, node, val, x, kernel_size, stride=(), padding=0,
                                  dilation=1, ceil_mode=False):
    if x.dtype not in FLOATS or _channels_last(val[0]):
        return ctx.extern(node, val)
    dtype = x.dtype
    win = _Window(tuple(x.shape), tuple(val[0].shape), kernel_size, stride, padding,
                  dilation)
    src = _padded_input(ctx, x, win, dtype) if win.padded else x
    taps = win.tap_index(win.padded)
    nd = len(win.domain)
    out_shape = win.lead + (win.OH, win.OW)

    # the maxima
    m = ctx.new_buffer(dtype, out_shape)
    kb = ctx.kernel(win.domain, 2, "maxpool")
    kb.store(m, m.at(win.out_index(), nd), src.load(kb, taps), Op.REDUCE, Reduction.MAX)
    ctx.add_kernel(kb)

    # the score of each tap, its maximum decoded to the position eager records
    S = win.H * win.W
    i64 = _C.int64
    score = ctx.new_buffer(i64, out_shape)
    kb = ctx.kernel(win.domain, 2, "argmaxpool")
    v = src.load(kb, taps)
    best = m.load(kb, win.out_index())
    valid, pos = win.position(kb)
    nan = kb.emit(Op.AND, _C.bool, (valid, kb.emit(Op.NE, dtype, (v, v))))
    hit = kb.emit(Op.AND, _C.bool, (valid, kb.emit(Op.EQ, dtype, (v, best))))
    s = kb.emit(Op.SELECT, i64, (hit, kb.emit(Op.SUB, i64, (kb.const(S - 1, i64), pos)),
                                 kb.const(-1, i64)))
    s = kb.emit(Op.SELECT, i64, (nan, kb.emit(Op.ADD, i64, (kb.const(2 * S, i64), pos)), s))
    kb.store(score, score.at(win.out_index(), nd), s, Op.REDUCE, Reduction.MAX)
    ctx.add_kernel(kb)

    def decode(kb, index):
        r = score.load(kb, index)
        last_nan = kb.emit(Op.GE, i64, (r, kb.const(2 * S, i64)))
        nan_pos = kb.emit(Op.SUB, i64, (r, kb.const(2 * S, i64)))
        return kb.emit(Op.SELECT, i64, (last_nan, nan_pos,
                                        kb.emit(Op.SUB, i64, (kb.const(S - 1, i64), r))))

    # the values: the tap at the index (the maximum's own bits: a reduce max would turn
    # a first -0.0 tied with 0.0 into 0.0, where eager keeps the first)
    values = ctx.new_buffer(dtype, out_shape)
    kb = ctx.kernel(win.domain, 2, "maxpool_values")
    v = src.load(kb, taps)
    valid, pos = win.position(kb)
    at = decode(kb, win.out_index())
    hit = kb.emit(Op.AND, _C.bool, (valid, kb.emit(Op.EQ, i64, (pos, at))))
    kb.store(values, values.at(win.out_index(), nd),
             kb.emit(Op.SELECT, dtype, (hit, v, kb.const(-math.inf, dtype))),
             Op.REDUCE, Reduction.MAX)
    ctx.add_kernel(kb)
    return values, PointwiseValue(out_shape, i64, decode, 4, node, frozenset({score.ref}))


@lowering
def lower_max_pool2d_with_indices_backward(ctx, node, val, grad_output, x, kernel_size,
                                           stride, padding, dilation, ceil_mode, indices):
    if val.dtype not in FLOATS or _channels_last(val) or grad_output.dtype is not val.dtype:
        return ctx.extern(node, val)
    dtype = val.dtype
    win = _Window(tuple(val.shape), tuple(grad_output.shape), kernel_size, stride, padding,
                  dilation)
    shape = win.lead + (win.Hp, win.Wp)
    buf = ctx.new_buffer(dtype, shape)
    kb = ctx.kernel(shape, 0, "fill")
    kb.store(buf, Affine(tuple(buf.strides)), kb.const(0, dtype))
    ctx.add_kernel(kb)
    nd = len(win.domain)
    kb = ctx.kernel(win.domain, 0, "maxpool_backward")
    g = kb.cast(grad_output.load(kb, win.out_index()), dtype)
    idx = kb.cast(indices.load(kb, win.out_index()), _C.int64)
    valid, pos = win.position(kb)
    hit = kb.emit(Op.AND, _C.bool, (valid, kb.emit(Op.EQ, _C.int64, (pos, idx))))
    add = kb.emit(Op.SELECT, dtype, (hit, g, kb.const(0, dtype)))
    kb.store(buf, buf.at(win.tap_index(True), nd), add, Op.ACCUMULATE, Reduction.SUM)
    ctx.add_kernel(kb)
    if not win.padded:
        return buf
    return buf.restrided(win.lead + (win.H, win.W), buf.strides, win.ph * win.Wp + win.pw)
