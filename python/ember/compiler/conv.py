"""2-d convolutions lowered to loop IR and one GEMM (the op table's lower= of the
convolution prim).

A convolution of x (N, Ci, H, W) by w (Co, Ci, kh, kw) is one matrix product

    out (Co, N*OH*OW) = w (Co, Ci*kh*kw) @ cols (Ci*kh*kw, N*OH*OW)

where cols, the receptive fields, are gathered by one kernel over the domain
(Ci, kh, kw, N, OH, OW): row (ci, i, j), column (n, oh, ow) is x[n, ci, oh*sh + i*dh - ph,
ow*sw + j*dw - pw]. The kernel loads x as a value, so the elementwise chain producing it
(a BatchNorm and ReLU of the previous layer) is computed in that pass, with no buffer of
its own; with padding x is first stored into a zero-filled padded buffer (loads stay
inside their buffer), which is that pass. One GEMM for the whole batch (rather than one
per image) keeps BLAS's panels large on small images (the last stage of a ResNet is 4x4),
and the output, laid out channel-major (Co, N, OH, OW), is the value the graph goes on
with: a strided view (N, Co, OH, OW), whose rows are contiguous for its consumers. The
bias is a pointwise add of that view, fused into whatever consumes it.

A transposed convolution (the gradient of a convolution with respect to its input)
reverses this: cols (Co*kh*kw, N*H*W) = w^T @ g (Ci, N*H*W) (g channel-major: copied
so unless it already is, as a forward convolution's output is), then each column
accumulated into its output position of a zero-filled padded buffer (col2im, split
across threads by output channel, which never share an element); the interior of that
buffer is the result.

Grouped, 1-d, channels-last and float16/bfloat16 convolutions run the eager kernel, and
so do float32 convolutions other than a weight gradient's while eager_float32 is True
(below). A float32 weight gradient is its own prim, convolution_weight_grad, run by
eager's kernel (an extern step) while eager_weight_grad is True.
"""
from __future__ import annotations

from .. import _C
from ..ops import meta as M
from .loop_ir import Affine, Op, Reduction
from .lowerings import lowering
from .plan import MatmulStep, StepKind
from .values import BufferValue, PointwiseValue, depth_of, domain_index

FLOATS = (_C.float32, _C.float64)

# float32 convolutions and transposed convolutions (a forward's, an input gradient's)
# run conv.c's kernel (im2col by blocks that stay in cache, multiplied by the
# register-tiled loops of conv_loops.c; the transposed ones weight^T @ input by blocks,
# then col2im) as an extern step: measured faster than this module's whole-batch im2col
# (col2im) + one BLAS GEMM at every shape of the zoo's ResNet-style CNN at 1 thread (a
# 16-channel 32x32 layer of 16 images: forward 1.0 vs 1.8 ms CPU time, transposed 1.4 vs
# 2.2 ms; the elementwise chain feeding one is then realized in a pass of its own).
# False lowers them as below. A weight gradient's convolution (narrower than its taps)
# is always lowered.
eager_float32 = True

# A float32 convolution's weight gradient is traced (ops/nn_ops._conv_weight_grad) as
# the convolution_weight_grad prim, conv.c's blocked weight-gradient kernel (eager's),
# an extern step here: eager's bits, and faster than the weight gradient as one
# convolution prim lowered as above (im2col + one GEMM). False traces that convolution
# instead (read at trace time: compiler.reset() after changing it).
eager_weight_grad = True


def _pair(v):
    v = tuple(v) if isinstance(v, (tuple, list)) else (v,)
    return v[0], v[-1]


def _channels_last(val):
    return val.ndim == 4 and tuple(val.stride()) != M.contiguous_strides(tuple(val.shape))


def _supported(node, val, x, weight, groups, dtype):
    """An input or weight in any layout is read as a value (a transposed one: a weight
    gradient, ops/nn_ops._weight_grad_as_convolution); the output eager lays out
    otherwise (channels-last) runs the eager kernel."""
    metas = [a.meta.get("val") for a in node.args[:2]]
    return (dtype in FLOATS and x.dtype is dtype and weight.dtype is dtype
            and len(x.shape) == 4 and len(weight.shape) == 4 and groups == 1
            and not _channels_last(val) and not any(m is None for m in metas)
            and all(n > 0 for n in tuple(val.shape) + tuple(x.shape)))


def _matrix(ctx, w, rows, cols):
    """The weight as a contiguous (rows, cols) matrix view (copied if it is not
    contiguous)."""
    b = ctx.realize(w)
    if b.strides != M.contiguous_strides(b.shape):
        b = ctx.copy_to_layout(b, M.contiguous_strides(b.shape))
    return b.restrided((rows, cols), (cols, 1), b.offset)


def _fill_zero(ctx, buf):
    kb = ctx.kernel(tuple(buf.shape), 0, "fill")
    kb.store(buf, Affine(tuple(buf.strides)), kb.const(0, buf.dtype))
    ctx.add_kernel(kb)


def _with_bias(ctx, out, bias):
    """out + bias[c] over dim 1, a pointwise value (or out itself). A bias computed by
    elementwise ops (a folded BatchNorm's shift) is computed once per channel first."""
    if bias is None:
        return out
    if isinstance(bias, PointwiseValue):
        bias = ctx.realize(bias)

    def fn(kb, index):
        return kb.emit(Op.ADD, out.dtype, (out.load(kb, index),
                                           kb.cast(bias.load(kb, [index[1]]), out.dtype)))
    return PointwiseValue(out.shape, out.dtype, fn, 1, None, frozenset({out.ref}),
                          depth_of([bias]))


def _gather_index(lead, geom, padded):
    """Index into x (N, C, H, W) (or its padded copy) of domain
    (C, kh, kw, N, OH, OW)."""
    (sh, sw), (dh, dw), (ph, pw) = geom
    nd = 6

    def axis(o, s, k, d, p):
        coeffs = [0] * nd
        coeffs[o], coeffs[k] = s, d
        return Affine(tuple(coeffs), 0 if padded else -p)
    ident = domain_index(nd)
    return [ident[3], ident[0], axis(4, sh, 1, dh, ph), axis(5, sw, 2, dw, pw)]


@lowering
def lower_convolution(ctx, node, val, x, weight, bias, stride, padding, dilation,
                      transposed, output_padding, groups):
    dtype = val.dtype if isinstance(val, _C.Tensor) else None
    if not _supported(node, val, x, weight, groups, dtype):
        return ctx.extern(node, val)
    geom = (_pair(stride), _pair(dilation), _pair(padding))
    if eager_float32 and dtype is _C.float32 and (transposed or
                                                  val.shape[3] >= weight.shape[3]):
        return ctx.extern(node, val)
    if transposed:
        out = _transposed(ctx, val, x, weight, geom)
    else:
        out = _forward(ctx, val, x, weight, geom)
    return _with_bias(ctx, out, bias)


def _forward(ctx, val, x, weight, geom):
    dtype = val.dtype
    N, Ci, H, W = x.shape
    Co, _, kh, kw = weight.shape
    OH, OW = val.shape[2:]
    (sh, sw), (dh, dw), (ph, pw) = geom
    src, padded = x, bool(ph or pw)
    if padded:
        # the rows and columns the taps reach, in padded coordinates
        Hp = ph + max(H, (OH - 1) * sh - ph + (kh - 1) * dh + 1)
        Wp = pw + max(W, (OW - 1) * sw - pw + (kw - 1) * dw + 1)
        src = ctx.new_buffer(dtype, (N, Ci, Hp, Wp))
        _fill_zero(ctx, src)
        interior = src.restrided((N, Ci, H, W), src.strides, ph * Wp + pw)
        kb = ctx.kernel((N, Ci, H, W), 0, "conv_pad")
        index = domain_index(4)
        kb.store(interior, interior.at(index, 4), kb.cast(x.load(kb, index), dtype))
        ctx.add_kernel(kb)
    K, L = Ci * kh * kw, N * OH * OW
    domain = (Ci, kh, kw, N, OH, OW)
    index = _gather_index(None, geom, padded)
    if OW >= kw:
        cols = ctx.new_buffer(dtype, (K, L))
        dst = cols.restrided(domain, M.contiguous_strides(domain), 0)
        kb = ctx.kernel(domain, 0, "im2col")
        ident = domain_index(6)
    else:
        # fewer output columns than taps (a weight gradient's convolution: the taps are
        # the forward's output positions): the columns stored transposed, (L, K), the
        # kernel's inner loop along the taps' width, which reads the input's rows
        cols = ctx.new_buffer(dtype, (L, K)).restrided((K, L), (1, K), 0)
        order = (3, 4, 5, 0, 1, 2)            # the domain (N, OH, OW, Ci, kh, kw)
        kb = ctx.kernel(tuple(domain[o] for o in order), 0, "im2col_t")
        ident = [None] * 6
        for pos, o in enumerate(order):
            ident[o] = domain_index(6)[pos]
        index = [Affine(tuple(a.coeffs[o] for o in order), a.offset) for a in index]
        dst = cols.restrided(domain, (kh * kw, kw, 1, OH * OW * K, OW * K, K), 0)
    reg = kb.cast(src.load(kb, index), dtype)
    kb.store(dst, dst.at(ident, 6), reg)
    ctx.add_kernel(kb)
    out = ctx.new_buffer(dtype, (Co, L))
    ctx.add_step(MatmulStep(StepKind.MATMUL, _matrix(ctx, weight, Co, K).view(), cols.view(),
                            out.ref.index))
    # (Co, N, OH, OW) in memory, seen as (N, Co, OH, OW)
    return out.restrided((N, Co, OH, OW), (OH * OW, L, OW, 1), 0)


def _channel_major(ctx, g):
    """g (N, C, H, W) as a (C, N*H*W) matrix: g's own buffer when it is laid out
    (C, N, H, W), else a copy."""
    N, C, H, W = g.shape
    want = (H * W, N * H * W, W, 1)
    if isinstance(g, BufferValue) and g.offset == 0 and all(
            n == 1 or s == t for n, s, t in zip(g.shape, g.strides, want)):
        return g.restrided((C, N * H * W), (N * H * W, 1), 0)
    buf = ctx.new_buffer(g.dtype, (C, N * H * W))
    kb = ctx.kernel((C, N, H, W), 0, "channel_major")
    index = domain_index(4)
    reg = g.load(kb, [index[1], index[0], index[2], index[3]])
    dst = buf.restrided((C, N, H, W), M.contiguous_strides((C, N, H, W)), 0)
    kb.store(dst, dst.at(index, 4), reg)
    ctx.add_kernel(kb)
    return buf


def _transposed(ctx, val, g, weight, geom):
    """val (N, Co, OH, OW) = the transposed convolution of g (N, Ci, H, W) by weight
    (Ci, Co, kh, kw)."""
    dtype = val.dtype
    N, Ci, H, W = g.shape
    _, Co, kh, kw = weight.shape
    OH, OW = val.shape[2:]
    (sh, sw), (dh, dw), (ph, pw) = geom
    K, L = Co * kh * kw, N * H * W
    gm = _channel_major(ctx, g)
    wm = _matrix(ctx, weight, Ci, K)
    cols = ctx.new_buffer(dtype, (K, L))
    ctx.add_step(MatmulStep(StepKind.MATMUL,
                            wm.restrided((K, Ci), (1, K), wm.offset).view(),
                            gm.view(), cols.ref.index))
    # col2im: column (n, h, w) of row (co, i, j) adds into output (n, co, h*sh + i*dh - ph,
    # w*sw + j*dw - pw), in a buffer padded so that every tap is an element
    Hp = max((H - 1) * sh + (kh - 1) * dh + 1, ph + OH)
    Wp = max((W - 1) * sw + (kw - 1) * dw + 1, pw + OW)
    out = ctx.new_buffer(dtype, (N, Co, Hp, Wp))
    _fill_zero(ctx, out)
    domain = (Co, kh, kw, N, H, W)
    kb = ctx.kernel(domain, 0, "col2im")
    src = cols.restrided(domain, M.contiguous_strides(domain), 0)
    reg = src.load(kb, domain_index(6))
    kb.store(out, out.at(_gather_index(None, geom, True), 6), reg, Op.ACCUMULATE,
             Reduction.SUM)
    ctx.add_kernel(kb)
    return out.restrided((N, Co, OH, OW), out.strides, ph * Wp + pw)
