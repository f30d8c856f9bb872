"""nn ops: convolution, pooling, normalisation, embedding, dropout, resampling, attention
and the losses.

Prims (C kernels in csrc/kernels/conv.c and pool.c):

- convolution: 1-d and 2-d, strided, padded, dilated, grouped, transposed (im2col + BLAS);
  its backward: the input's gradient is the transposed convolution of the output's
  gradient, the weight's the output's gradient times the input's im2col columns;
- max_pool2d_with_indices and max_pool2d_with_indices_backward.

Everything else decomposes into prims; those ops' eager kernels run their decomposition
(kernel "decomposed", csrc/kernels/nn.c) and autograd records their own backward formula.
Average pooling, adaptive average pooling and nearest/bilinear interpolation are linear
maps that act on the rows and the columns separately: out = A_h @ x @ A_w^T with small
matrices built from the geometry by prims (arange, comparisons), so they decompose into
two matmuls and their backward is A_h^T @ g @ A_w. The composites (conv1d/conv2d/
conv_transpose*, max_pool2d, batch_norm, dropout, scaled_dot_product_attention) run
other ops, as PyTorch's CompositeImplicitAutograd functions do.

The block at the end adds 3-d convolution (composites over the 2-d prim: depth taps
become channels), 3-d and adaptive max pooling (windows gathered with the index prim),
3-d average and adaptive pooling and the 3-d, bicubic and nearest-exact resizes (the
separable matrices with a depth axis), pixel/channel shuffle and instance_norm.
"""
from __future__ import annotations

import math

from .. import _C, _dtypes
from .. import prims as P
from . import api as O
from . import meta as M
from ._decomp import run_decomposition
from .linalg import torch_type
from ..compiler import conv as conv_lowering
from ..compiler.conv import lower_convolution
from ..compiler.lowerings import extern
from ..compiler.pooling import (lower_max_pool2d_with_indices,
                                lower_max_pool2d_with_indices_backward)
from .registry import CUSTOM, op


def _is_tensor(x):
    return isinstance(x, _C.Tensor)


def _has_data(t):
    """Whether t's values can be read (checks that depend on them are eager-only)."""
    return not t.is_meta and _C._get_mode()[0] == _C.MODE_EAGER and t.numel() > 0


def _shape(t):
    return str(list(t.shape))


def _reshape_p(x, shape):
    """reshape with prims: a view when the strides allow, else a contiguous copy viewed."""
    if M.compute_stride(tuple(x.shape), x.stride(), x.numel(),
                        M.infer_size(shape, x.numel())) is None:
        x = P.clone(x, memory_format="contiguous_format")
    return P.view(x, shape)


def _not_implemented(kernel, dtype):
    return NotImplementedError(f"\"{kernel}\" not implemented for '{torch_type(dtype)}'")


def _float_or_raise(kernel, *ts):
    for t in ts:
        if t is not None and not t.dtype.is_floating_point:
            raise _not_implemented(kernel, t.dtype)


def _decomposed(schema, decompose, backward, doc, kernel="decomposed", **kw):
    """An op whose eager kernel runs its decomposition (or a C kernel for its common cases
    that falls back to the decomposition)."""
    kw.setdefault("method", False)
    return op(schema, CUSTOM, kernel, meta=run_decomposition, decompose=decompose,
              backward=backward, doc=doc, **kw)


def _expand_param(values, n, name, opname=None):
    values = tuple(values) if isinstance(values, (tuple, list)) else (values,)
    if len(values) == 1:
        return values * n
    if len(values) != n:
        raise RuntimeError(f"expected {name} to be a single integer value or a list of {n} "
                           f"values to match the convolution dimensions, but got "
                           f"{name}={list(values)}")
    return values


# ================================================================== convolution (prim)


def _conv_geometry(input, weight, bias, stride, padding, dilation, transposed,
                   output_padding, groups):
    """The output shape of convolution(...), with PyTorch's checks and messages (the
    twin of conv_setup in csrc/kernels/conv.c)."""
    wd = weight.ndim
    if wd not in (3, 4):
        if wd == 5:
            raise NotImplementedError("3-d convolutions are not supported")
        raise RuntimeError(f"weight should have at least three dimensions, but got weight "
                           f"of size {_shape(weight)}")
    if input.ndim != wd:
        raise RuntimeError(f"Expected {wd}-dimensional input for {wd}-dimensional weight "
                           f"{_shape(weight)}, but got {input.ndim}-dimensional input of "
                           f"size {_shape(input)} instead")
    nsp = wd - 2
    s = _expand_param(stride, nsp, "stride")
    p = _expand_param(padding, nsp, "padding")
    d = _expand_param(dilation, nsp, "dilation")
    op_ = _expand_param(output_padding, nsp, "output_padding")
    cout, out = _conv_output(input, weight, bias, s, p, d, op_, groups, transposed, dilation)
    return (input.shape[0], cout) + tuple(out), (s, p, d, op_)


def _conv_output(input, weight, bias, s, p, d, op_, groups, transposed, dilation):
    """PyTorch's checks of a batched convolution whose weight has the input's rank, with
    its messages (dilation: as given, for the message); returns the output's channels
    and spatial size."""
    nsp = input.ndim - 2
    if weight.dtype is not input.dtype:
        raise RuntimeError(f"expected scalar type {torch_type(input.dtype)} but found "
                           f"{torch_type(weight.dtype)}")
    for i in range(nsp):
        if p[i] < 0:
            raise RuntimeError("negative padding is not supported")
        if op_[i] < 0:
            raise RuntimeError("negative output_padding is not supported")
        if s[i] <= 0:
            raise RuntimeError("non-positive stride is not supported")
    if any(x <= 0 for x in d):
        raise RuntimeError(f"dilation should be greater than zero, but got {list(dilation)}")
    if groups <= 0:
        raise RuntimeError("non-positive groups is not supported")
    if weight.shape[0] < 1 or weight.shape[0] % groups:
        what = "at least" if weight.shape[0] < 1 else "divisible by"
        raise RuntimeError(f"Given groups={groups}, expected weight to be {what} "
                           f"{1 if weight.shape[0] < 1 else groups} at dimension 0, but got "
                           f"weight of size {_shape(weight)} instead")
    C = input.shape[1]
    if not transposed:
        if C != weight.shape[1] * groups:
            raise RuntimeError(f"Given groups={groups}, weight of size {_shape(weight)}, "
                               f"expected input{_shape(input)} to have "
                               f"{weight.shape[1] * groups} channels, but got {C} channels "
                               "instead")
        cout = weight.shape[0]
    else:
        if C != weight.shape[0]:
            raise RuntimeError(f"Given transposed=1, weight of size {_shape(weight)}, "
                               f"expected input{_shape(input)} to have {weight.shape[0]} "
                               f"channels, but got {C} channels instead")
        cout = weight.shape[1] * groups
    if bias is not None and (bias.ndim != 1 or bias.shape[0] != cout):
        raise RuntimeError(f"Given weight of size {_shape(weight)}, expected bias to be "
                           f"1-dimensional with {cout} elements, but got bias of size "
                           f"{_shape(bias)} instead")
    spatial_in = tuple(input.shape[2:])
    ks = tuple(weight.shape[2:])
    if not transposed:
        padded = [spatial_in[i] + 2 * p[i] for i in range(nsp)]
        eff = [d[i] * (ks[i] - 1) + 1 for i in range(nsp)]
        if any(padded[i] < eff[i] for i in range(nsp)):
            raise RuntimeError(
                f"Calculated padded input size per channel: ({' x '.join(map(str, padded))})."
                f" Kernel size: ({' x '.join(map(str, eff))}). Kernel size can't be greater "
                "than actual input size")
        out = [(padded[i] - eff[i]) // s[i] + 1 for i in range(nsp)]
    else:
        if any(op_[i] >= s[i] and op_[i] >= d[i] for i in range(nsp)):
            if nsp == 1:
                raise RuntimeError(
                    f"output padding must be smaller than either stride or dilation, but got "
                    f"output_padding: {op_[0]} stride: {s[0]} dilation: {d[0]}")
            axes = ("depth", "height", "width")[3 - nsp:]
            got = " ".join(f"{what}_{axis}: {v[i]}" for what, v in
                           (("output_padding", op_), ("stride", s), ("dilation", d))
                           for i, axis in enumerate(axes))
            raise RuntimeError("output padding must be smaller than either stride or "
                               f"dilation, but got {got}")
        out = [(spatial_in[i] - 1) * s[i] - 2 * p[i] + d[i] * (ks[i] - 1) + op_[i] + 1
               for i in range(nsp)]
        if any(o <= 0 for o in out):
            # a 1-d convolution's sizes are shown as those of the 2-d one it runs as
            sizes = [" x ".join(map(str, (1,) * (nsp == 1) + tuple(v)))
                     for v in (spatial_in, out)]
            raise RuntimeError(f"Given input size per channel: ({sizes[0]}). Calculated "
                               f"output size per channel: ({sizes[1]}). Output size is too "
                               "small")
    dilated = any(x > 1 for x in d)
    dt = input.dtype
    if input.shape[0] > 0 and (dt is _C.bool or (not dt.is_floating_point and
                                                  dt is not _C.int64 and
                                                  (dilated or transposed))):
        kernels = ("slow_conv_transpose3d_out_cpu", "compute_columns3d") if nsp == 3 else \
            ("slow_conv_transpose2d_out_cpu", "slow_conv2d_cpu")
        raise _not_implemented(kernels[0] if transposed else
                               "slow_conv_dilated<>" if dilated else kernels[1], dt)
    return cout, out


def _channels_last(t):
    """(N, C, H, W) stored as (N, H, W, C), or (N, C, L) as (N, L, C); not contiguous."""
    if t.ndim not in (3, 4) or M.is_contiguous(t):
        return False
    expected = 1
    for dim in ((1, 3, 2, 0) if t.ndim == 4 else (1, 2, 0)):
        if t.shape[dim] != 1 and t.stride()[dim] != expected:
            return False
        expected *= t.shape[dim]
    return True


def _channels_last_strides(shape):
    if len(shape) == 3:
        n, c, w = shape
        return (c * w, 1, c)
    n, c, h, w = shape
    return (c * h * w, 1, w * c, c)


def _convolution_meta(entry, args):
    input, weight = args[0], args[1]
    shape, _ = _conv_geometry(*args)
    if _channels_last(input) or _channels_last(weight):
        return M.meta_tensor(shape, input.dtype, _channels_last_strides(shape))
    return M.meta_tensor(shape, input.dtype)


def _conv_weight_grad(inp, gout, kshape, s, p, d, groups):
    """The weight gradient of a convolution of inp (N, Ci, ...) giving gout (N, Co, ...):
    per sample and group, gout (Co/G, L) @ im2col(inp)^T (L, Ci/G*K), summed over the
    batch — GEMMs over the same columns the forward multiplies. (A transposed
    convolution's weight gradient is this with inp and gout trading places.)"""
    nsp = len(kshape)
    N, Ci = inp.shape[0], inp.shape[1]
    Co = gout.shape[1]
    cig, cog = Ci // groups, Co // groups
    if nsp == 1:
        x4 = inp.unsqueeze(2)
        k, dd, pp, ss = (1, kshape[0]), (1, d[0]), (0, p[0]), (1, s[0])
        out_sp = (1,) + tuple(gout.shape[2:])
    else:
        x4, k, dd, pp, ss = inp, tuple(kshape), tuple(d), tuple(p), tuple(s)
        out_sp = tuple(gout.shape[2:])
    if _C._get_mode()[0] == _C.MODE_EAGER and not _C.is_grad_enabled():
        # eager, no create_graph: gathered and multiplied block by block by the
        # convolution's loops (conv.c)
        fused = _C._grad_conv_weight(x4.contiguous(), (gout.unsqueeze(2) if nsp == 1 else gout)
                                     .contiguous(), k[0], k[1], ss, pp, dd, groups)
        if fused is not None:
            return fused.reshape((Co, cig) + tuple(kshape))
    if _C._get_mode()[0] == _C.MODE_TRACE and conv_lowering.eager_weight_grad and \
            nsp <= 2 and inp.dtype is _C.float32 and gout.dtype is _C.float32 and \
            not _C.is_grad_enabled() and _conv_out_size(x4.shape[2:], k, ss, pp, dd) == out_sp:
        # traced where eager runs the blocked kernel above: the prim of that kernel (an
        # extern step compiled), eager's bits
        gw = O.convolution_weight_grad(x4, gout.unsqueeze(2) if nsp == 1 else gout, list(k),
                                       list(ss), list(pp), list(dd), groups)
        return gw.reshape((Co, cig) + tuple(kshape))
    if _C._get_mode()[0] == _C.MODE_TRACE and groups == 1 and nsp == 2:
        gw = _weight_grad_as_convolution(inp, gout, kshape, s, p, d)
        if gw is not None:
            return gw
    cols = O.im2col(x4, list(k), list(dd), list(pp), list(ss))       # (N, Ci*K, OH*OW)
    K = k[0] * k[1]
    H = (x4.shape[2] + 2 * pp[0] - (dd[0] * (k[0] - 1) + 1)) // ss[0] + 1
    Wd = (x4.shape[3] + 2 * pp[1] - (dd[1] * (k[1] - 1) + 1)) // ss[1] + 1
    if (H, Wd) != out_sp:          # a transposed output_padding: the first positions
        cols = cols.reshape(N, Ci * K, H, Wd).slice(2, 0, out_sp[0]).slice(3, 0, out_sp[1])
    L = out_sp[0] * out_sp[1]
    if groups == 1:
        # one GEMM over the whole batch: (Co, N*L) @ (N*L, Ci*K), the batch folded into
        # the products' inner dim (N small GEMMs and a sum over them cost more, compiled
        # and eager)
        go = gout.reshape(N, Co, L).transpose(0, 1).reshape(Co, N * L)
        co = cols.reshape(N, Ci * K, L).transpose(0, 1).reshape(Ci * K, N * L)
        return go.matmul(co.t()).reshape((Co, cig) + tuple(kshape))
    go = gout.reshape(N, groups, cog, L)
    co = cols.reshape(N, groups, cig * K, L).transpose(2, 3)
    return go.matmul(co).sum(0).reshape((Co, cig) + tuple(kshape))


def _conv_out_size(sp, k, s, p, d):
    """The output size of a convolution of input size sp (2-d), or None where the
    kernel is larger than the padded input."""
    out = []
    for i in range(2):
        eff = d[i] * (k[i] - 1) + 1
        if sp[i] + 2 * p[i] < eff:
            return None
        out.append((sp[i] + 2 * p[i] - eff) // s[i] + 1)
    return tuple(out)


def _weight_grad_geometry(args):
    """(Co, Ci/G, kh, kw) of convolution_weight_grad's arguments, or RuntimeError."""
    inp, gout, k, s, p, d, groups = args
    k, s, p, d = (_expand_param(v, 2, name) for v, name in
                  ((k, "kernel_size"), (s, "stride"), (p, "padding"), (d, "dilation")))
    if inp.ndim != 4 or gout.ndim != 4:
        raise RuntimeError(f"convolution_weight_grad(): expected 4-d input and grad_output, "
                           f"got {_shape(inp)} and {_shape(gout)}")
    if inp.dtype not in (_C.float32, _C.float64) or gout.dtype is not inp.dtype:
        raise NotImplementedError("convolution_weight_grad(): expected float32 or float64 "
                                  "input and grad_output of one dtype")
    N, C, Co = inp.shape[0], inp.shape[1], gout.shape[1]
    ok = (groups > 0 and C % groups == 0 and Co % groups == 0 and gout.shape[0] == N and
          all(v > 0 for v in k + s + d) and all(v >= 0 for v in p))
    if not ok or _conv_out_size(inp.shape[2:], k, s, p, d) != tuple(gout.shape[2:]):
        raise RuntimeError(f"convolution_weight_grad(): grad_output {_shape(gout)} is not "
                           f"the output of a convolution of input {_shape(inp)} by this "
                           "geometry")
    return (Co, C // groups) + tuple(k)


def _convolution_weight_grad_meta(entry, args):
    return M.meta_tensor(_weight_grad_geometry(args), args[0].dtype)


def _convolution_weight_grad_backward(g, out, inp, gout, kernel_size, stride, padding,
                                      dilation, groups):
    """The weight gradient is bilinear in (input, grad_output): the gradient for the input
    is the transposed convolution of grad_output by g, for grad_output the convolution of
    the input by g."""
    s, p, d = (list(_expand_param(v, 2, "")) for v in (stride, padding, dilation))
    gi = gg = None
    if inp.requires_grad:
        opad = [inp.shape[2 + i] - ((gout.shape[2 + i] - 1) * s[i] - 2 * p[i] +
                                    d[i] * (g.shape[2 + i] - 1) + 1) for i in range(2)]
        gi = O.convolution(gout, g, None, s, p, d, True, opad, groups)
    if gout.requires_grad:
        gg = O.convolution(inp, g, None, s, p, d, False, [0, 0], groups)
    return gi, gg


op("convolution_weight_grad(Tensor input, Tensor grad_output, SymInt[] kernel_size, "
   "SymInt[] stride, SymInt[] padding, SymInt[] dilation, SymInt groups) -> Tensor",
   CUSTOM, "convolution_weight_grad", prim=True, method=False,
   meta=_convolution_weight_grad_meta, lower=extern,
   backward=_convolution_weight_grad_backward,
   doc="The weight gradient (Co, Ci/groups, kh, kw) of a 2-d convolution of input "
       "(N, Ci, H, W) whose output's gradient is grad_output (N, Co, OH, OW), float32 or "
       "float64 (csrc/kernels/conv.c's blocked loops, eager's kernel for it).")


def _weight_grad_as_convolution(inp, gout, kshape, s, p, d):
    """A 2-d, one-group weight gradient traced into a graph as one convolution prim: tap
    (i, j) of gw[co, ci] sums gout[n, co, oh, ow] * inp[n, ci, i*d + oh*s - p, ...] over
    (n, oh, ow), which is the convolution of inp^T (Ci, N, H, W) by gout^T (Co, N, OH,
    OW) with stride and dilation trading places, (Ci, Co, kh, kw), transposed (and laid
    out contiguously, as eager's gradient is: compiled, the GEMM wrote it so). The
    compiler lowers it as its convolutions (im2col and one GEMM, compiler/conv.py), with
    no index gather. Where the symmetric padding would give more taps than the kernel's
    (a strided convolution, whose floor dropped input rows), the input is padded (or
    cropped) to exactly the rows the taps reach instead, so no tap is computed to be
    thrown away. None where the output would not cover the kernel."""
    H, W = inp.shape[2], inp.shape[3]
    OH, OW = gout.shape[2], gout.shape[3]
    kh = (H + 2 * p[0] - s[0] * (OH - 1) - 1) // d[0] + 1
    kw = (W + 2 * p[1] - s[1] * (OW - 1) - 1) // d[1] + 1
    if kh < kshape[0] or kw < kshape[1]:
        return None
    x, pad = inp.transpose(0, 1), list(p)
    if (kh, kw) != tuple(kshape):
        # padded coordinates 0 .. (k-1)*d + (O-1)*s: p before, the rest after (< 0 crops)
        reach = [(kshape[i] - 1) * d[i] + (gout.shape[2 + i] - 1) * s[i] + 1
                 for i in range(2)]
        x = O.pad(x, [p[1], reach[1] - p[1] - W, p[0], reach[0] - p[0] - H], "constant", 0.0)
        pad = [0, 0]
    return O.convolution(x, gout.transpose(0, 1), None, list(d), pad, list(s), False, [0, 0],
                         1).transpose(0, 1).contiguous()


def _convolution_backward(g, out, input, weight, bias, stride, padding, dilation,
                          transposed, output_padding, groups):
    nsp = weight.ndim - 2
    s = _expand_param(stride, nsp, "stride")
    p = _expand_param(padding, nsp, "padding")
    d = _expand_param(dilation, nsp, "dilation")
    ks = tuple(weight.shape[2:])
    sp_in = tuple(input.shape[2:])
    gi = gw = gb = None
    if input.requires_grad:
        if not transposed:
            sp_out = tuple(g.shape[2:])
            opad = [sp_in[i] - ((sp_out[i] - 1) * s[i] - 2 * p[i] + d[i] * (ks[i] - 1) + 1)
                    for i in range(nsp)]
            gi = O.convolution(g, weight, None, list(s), list(p), list(d), True, opad, groups)
        else:
            gi = O.convolution(g, weight, None, list(s), list(p), list(d), False, [0] * nsp,
                               groups)
            for i, n in enumerate(sp_in):
                if gi.shape[2 + i] != n:
                    gi = gi.slice(2 + i, 0, n)
    if weight.requires_grad:
        if not transposed:
            gw = _conv_weight_grad(input, g, ks, s, p, d, groups)
        else:
            gw = _conv_weight_grad(g, input, ks, s, p, d, groups)
    if bias is not None and bias.requires_grad:
        gb = g.sum([0] + list(range(2, g.ndim)))
    return gi, gw, gb


op("convolution(Tensor input, Tensor weight, Tensor? bias, SymInt[] stride, SymInt[] padding,"
   " SymInt[] dilation, bool transposed, SymInt[] output_padding, SymInt groups) -> Tensor",
   CUSTOM, "convolution", ufunc="matmul", prim=True, method=False, meta=_convolution_meta,
   lower=lower_convolution,
   backward=_convolution_backward,
   doc="N-d (1-d, 2-d) convolution or transposed convolution: strided, padded, dilated, "
       "grouped; output channels-last when the input or weight is.")


# ------------------------------------------------------------------ conv1d/conv2d/... (composites)


def _pad_right(x, extra):
    """x with `extra[i]` zeros appended after spatial dim i (differentiable ops)."""
    for i, e in enumerate(extra):
        if e:
            dim = 2 + i
            shape = list(x.shape)
            shape[dim] += e
            x = O.slice_scatter(O.zeros(shape, dtype=x.dtype), x, dim, 0, x.shape[dim])
    return x


def _batched(name, nsp, input):
    """(input with a batch dim, whether it had one) for an nsp-d convolution."""
    if input.ndim not in (nsp + 1, nsp + 2):
        raise RuntimeError(f"Expected {nsp + 1}D (unbatched) or {nsp + 2}D (batched) input to "
                           f"{name}, but got input of size: {_shape(input)}")
    batched = input.ndim == nsp + 2
    return (input if batched else input.unsqueeze(0)), batched


def _conv_nd(name, nsp, input, weight, bias, stride, padding, dilation, groups):
    x, batched = _batched(name, nsp, input)
    x, s, p, d = _conv_args(nsp, x, weight, stride, padding, dilation)
    out = O.convolution(x, weight, bias, list(s), list(p), list(d), False, [0] * nsp, groups)
    return out if batched else out.squeeze(0)


def _conv_args(nsp, x, weight, stride, padding, dilation):
    """(x, stride, padding, dilation) of an nsp-d convolution, padding='valid' or 'same'
    as numbers: x padded on the right where 'same' pads an odd total."""
    s = _expand_param(stride, nsp, "stride")
    d = _expand_param(dilation, nsp, "dilation")
    if isinstance(padding, str):
        if padding == "valid":
            p = (0,) * nsp
        elif padding == "same":
            if any(v != 1 for v in s):
                raise RuntimeError("padding='same' is not supported for strided convolutions")
            ks = tuple(weight.shape[2:]) if weight.ndim == nsp + 2 else (1,) * nsp
            total = [d[i] * (ks[i] - 1) for i in range(nsp)]
            p = tuple(t // 2 for t in total)
            x = _pad_right(x, [t - 2 * (t // 2) for t in total])
        else:
            raise RuntimeError(f"Invalid padding string: '{padding}'")
    else:
        p = _expand_param(padding, nsp, "padding")
    return x, s, p, d


def _conv_transpose_nd(name, nsp, input, weight, bias, stride, padding, output_padding, groups,
                       dilation):
    x, batched = _batched(name, nsp, input)
    out = O.convolution(x, weight, bias, list(_expand_param(stride, nsp, "stride")),
                        list(_expand_param(padding, nsp, "padding")),
                        list(_expand_param(dilation, nsp, "dilation")), True,
                        list(_expand_param(output_padding, nsp, "output_padding")), groups)
    return out if batched else out.squeeze(0)


for _n in (1, 2):
    _dims = "[1]" if _n == 1 else "[1, 1]"
    _zeros = "[0]" if _n == 1 else "[0, 0]"
    _conv_impl = (lambda n: lambda input, weight, bias, stride, padding, dilation, groups:
                  _conv_nd(f"conv{n}d", n, input, weight, bias, stride, padding, dilation,
                           groups))(_n)
    op(f"conv{_n}d(Tensor input, Tensor weight, Tensor? bias=None, int[{_n}] stride={_dims}, "
       f"int[{_n}] padding={_zeros}, int[{_n}] dilation={_dims}, SymInt groups=1) "
       "-> Tensor", CUSTOM, "python", composite=True, method=False, impl=_conv_impl,
       doc=f"{_n}-d convolution over a batched or unbatched input (convolution).")
    op(f"conv{_n}d.padding(Tensor input, Tensor weight, Tensor? bias=None, int[{_n}] "
       f"stride={_dims}, str padding=\"valid\", int[{_n}] dilation={_dims}, SymInt groups=1)"
       " -> Tensor", CUSTOM, "python", composite=True, method=False, impl=_conv_impl,
       doc=f"conv{_n}d with padding='valid' or 'same'.")
    op(f"conv_transpose{_n}d(Tensor input, Tensor weight, Tensor? bias=None, int[{_n}] "
       f"stride={_dims}, int[{_n}] padding={_zeros}, int[{_n}] output_padding={_zeros}, "
       f"SymInt groups=1, int[{_n}] dilation={_dims}) -> Tensor", CUSTOM, "python",
       composite=True, method=False,
       impl=(lambda n: lambda input, weight, bias, stride, padding, output_padding, groups,
             dilation: _conv_transpose_nd(f"conv_transpose{n}d", n, input, weight, bias, stride,
                                          padding, output_padding, groups, dilation))(_n),
       doc=f"{_n}-d transposed convolution (the gradient of conv{_n}d with respect to its "
           "input).")


# ------------------------------------------------------------------ im2col (unfold)


def _im2col_geometry(self, kernel_size, dilation, padding, stride):
    """((kh, kw), (dh, dw), (ph, pw), (sh, sw), OH, OW) with PyTorch's checks."""
    vals = []
    for name, v in (("kernel_size", kernel_size), ("dilation", dilation),
                    ("padding", padding), ("stride", stride)):
        v = _as_tuple(v)
        if len(v) != 2:
            raise RuntimeError(f"It is expected {name} equals to 2, but got size {len(v)}")
        vals.append(v)
    (kh, kw), (dh, dw), (ph, pw), (sh, sw) = vals
    if kh <= 0 or kw <= 0:
        raise RuntimeError(f"kernel size should be greater than zero, but got kernel_height: "
                           f"{kh} kernel_width: {kw}")
    if dh <= 0 or dw <= 0:
        raise RuntimeError(f"dilation should be greater than zero, but got dilation_height: "
                           f"{dh} dilation_width: {dw}")
    if ph < 0 or pw < 0:
        raise RuntimeError(f"padding should be non-negative, but got pad_height: {ph} "
                           f"pad_width: {pw}")
    if sh <= 0 or sw <= 0:
        raise RuntimeError(f"stride should be greater than zero, but got stride_height: {sh} "
                           f"stride_width: {sw}")
    if self.ndim < 3:
        raise IndexError(f"Dimension out of range (expected to be in range of "
                         f"[{-max(self.ndim, 1)}, {max(self.ndim, 1) - 1}], but got 2)")
    if self.ndim > 4 or any(n == 0 for n in self.shape[-3:]):
        raise RuntimeError(f"Expected 3D or 4D (batch mode) tensor with possibly 0 batch size "
                           f"and other non-zero dimensions for input, but got: {_shape(self)}")
    H, W = self.shape[-2], self.shape[-1]
    oh = (H + 2 * ph - (dh * (kh - 1) + 1)) // sh + 1
    ow = (W + 2 * pw - (dw * (kw - 1) + 1)) // sw + 1
    if oh < 1 or ow < 1:
        raise RuntimeError(f"Given input with spatial size ({H}, {W}), kernel_size=({kh}, {kw}),"
                           f" dilation=({dh}, {dw}), padding=({ph}, {pw}), calculated shape of "
                           f"the array of sliding blocks as ({oh}, {ow}), but its components "
                           "must be at least one.")
    if not self.dtype.is_floating_point and self.dtype is not _C.bool:
        raise _not_implemented("im2col_out_cpu", self.dtype)
    return (kh, kw), (dh, dw), (ph, pw), (sh, sw), oh, ow


def _block_indices(k, d, s, n_out, lib):
    """(k, n_out) rows of the padded input read by tap i at output position o: i*d + o*s."""
    taps = lib.arange(k).view([k, 1]) if lib is O else P.view(P.arange(k), [k, 1])
    pos = lib.arange(n_out).view([1, n_out]) if lib is O else P.view(P.arange(n_out),
                                                                       [1, n_out])
    if lib is O:
        return taps * d + pos * s
    return P.add(P.mul(taps, d), P.mul(pos, s))


def _im2col_decompose(self, kernel_size, dilation, padding, stride):
    (kh, kw), (dh, dw), (ph, pw), (sh, sw), oh, ow = _im2col_geometry(
        self, kernel_size, dilation, padding, stride)
    x = self if self.ndim == 4 else P.view(self, [1] + list(self.shape))
    N, C, H, W = x.shape
    if ph or pw:
        rows = P.slice_scatter(P.full([N, C, H + 2 * ph, W], False if x.dtype is _C.bool else 0,
                                      dtype=x.dtype), x, 2, ph, ph + H)
        x = P.slice_scatter(P.full([N, C, H + 2 * ph, W + 2 * pw],
                                   False if x.dtype is _C.bool else 0, dtype=x.dtype),
                            rows, 3, pw, pw + W)
    hidx = P.view(_block_indices(kh, dh, sh, oh, P), [kh, 1, oh, 1])
    widx = P.view(_block_indices(kw, dw, sw, ow, P), [1, kw, 1, ow])
    cols = _reshape_p(P.index(x, (None, None, hidx, widx)), [N, C * kh * kw, oh * ow])
    return cols if self.ndim == 4 else P.view(cols, [C * kh * kw, oh * ow])


def _col2im(g, shape, kernel_size, dilation, padding, stride):
    """The adjoint of im2col (nn.functional.fold): the columns added back into an input of
    the given shape, with ops."""
    (kh, kw), (dh, dw), (ph, pw), (sh, sw) = (_as_tuple(kernel_size), _as_tuple(dilation),
                                              _as_tuple(padding), _as_tuple(stride))
    batched = len(shape) == 4
    N, C, H, W = shape if batched else (1,) + tuple(shape)
    oh = (H + 2 * ph - (dh * (kh - 1) + 1)) // sh + 1
    ow = (W + 2 * pw - (dw * (kw - 1) + 1)) // sw + 1
    g6 = g.reshape(N, C, kh, kw, oh, ow)
    hidx = _block_indices(kh, dh, sh, oh, O).view(kh, 1, oh, 1)
    widx = _block_indices(kw, dw, sw, ow, O).view(1, kw, 1, ow)
    out = O.zeros((N, C, H + 2 * ph, W + 2 * pw), dtype=g.dtype).index_put(
        (None, None, hidx, widx), g6, accumulate=True)
    if ph or pw:
        out = out.slice(2, ph, ph + H).slice(3, pw, pw + W)
    return out if batched else out.squeeze(0)


_decomposed("im2col(Tensor self, int[2] kernel_size, int[2] dilation, int[2] padding, "
            "int[2] stride) -> Tensor", _im2col_decompose,
            lambda g, out, self, kernel_size, dilation, padding, stride: (
                _col2im(g, tuple(self.shape), kernel_size, dilation, padding, stride),
                None, None, None, None),
            "The sliding kh x kw blocks of a zero-padded (N, C, H, W) input as columns, "
            "(N, C*kh*kw, OH*OW) (nn.functional.unfold); the index prim at tap/position "
            "coordinates, a C loop eagerly.", kernel="im2col")


# ================================================================== max pooling (prims)


def _as_tuple(v):
    return tuple(v) if isinstance(v, (tuple, list)) else (v,)


def _pool_ints(values, n, what, opname="max_pool2d", may_be_empty=False, fallback=None,
               msg=None):
    """A pooling argument as n ints (one int repeated; fallback when it may be empty and
    is), with PyTorch's message (or msg) for any other length."""
    values = _as_tuple(values)
    if not values and may_be_empty:
        return tuple(fallback)
    if len(values) not in (1, n):
        raise RuntimeError(msg or f"{opname}: {what} must either be "
                           f"{'omitted, ' if may_be_empty else ''}a single int, or a tuple of "
                           f"{'two' if n == 2 else 'three'} ints")
    return values * n if len(values) == 1 else tuple(values)


def _pool_out(n, k, pad, stride, dil, ceil_mode):
    if stride == 0:
        raise RuntimeError("stride should not be zero")
    if pad < 0:
        raise RuntimeError(f"pad must be non-negative, but got pad: {pad}")
    if pad > ((k - 1) * dil + 1) // 2:
        raise RuntimeError(f"pad should be at most half of effective kernel size, but got "
                           f"pad={pad}, kernel_size={k} and dilation={dil}")
    num = n + 2 * pad - dil * (k - 1) - 1 + (stride - 1 if ceil_mode else 0)
    o = num // stride + 1
    if ceil_mode and (o - 1) * stride >= n + pad:
        o -= 1
    return o


def _max_pool_geometry(self, kernel_size, stride, padding, dilation, ceil_mode):
    kh, kw = _pool_ints(kernel_size, 2, "kernel_size")
    sh, sw = _pool_ints(stride, 2, "stride", "max_pool2d", True, (kh, kw))
    ph, pw = _pool_ints(padding, 2, "padding")
    dh, dw = _pool_ints(dilation, 2, "dilation")
    oh, ow = _pool2d_output(self, kh, kw, sh, sw, ph, pw, dh, dw, ceil_mode)
    if self.dtype is _C.bool:
        raise NotImplementedError("\"max_pool2d\" not implemented for 'Bool'")
    return tuple(self.shape[:-2]) + (oh, ow)


def _pool2d_output(self, kh, kw, sh, sw, ph, pw, dh, dw, ceil_mode):
    """The output size (oh, ow) of 2-d pooling, with PyTorch's checks and messages."""
    if self.ndim not in (3, 4):
        raise RuntimeError("non-empty 3D or 4D (batch mode) tensor expected for input")
    H, W = self.shape[-2], self.shape[-1]
    oh = _pool_out(H, kh, ph, sh, dh, ceil_mode)
    ow = _pool_out(W, kw, pw, sw, dw, ceil_mode)
    if kh <= 0 or kw <= 0:
        raise RuntimeError(f"kernel size should be greater than zero, but got kH: {kh} kW: "
                           f"{kw}")
    if sh <= 0 or sw <= 0:
        raise RuntimeError(f"stride should be greater than zero, but got dH: {sh} dW: {sw}")
    if dh <= 0 or dw <= 0:
        raise RuntimeError(f"dilation should be greater than zero, but got dilationH: {dh} "
                           f"dilationW: {dw}")
    if any(n <= 0 for n in self.shape[-3:]):
        raise RuntimeError(f"Expected 3D or 4D (batch mode) tensor with optional 0 dim batch "
                           f"size for input, but got:{_shape(self)}")
    if kw // 2 < pw or kh // 2 < ph:
        raise RuntimeError(f"pad should be smaller than or equal to half of kernel size, but "
                           f"got padW = {pw}, padH = {ph}, kW = {kw}, kH = {kh}")
    if oh < 1 or ow < 1:
        c = self.shape[-3]
        raise RuntimeError(f"Given input size: ({c}x{H}x{W}). Calculated output size: "
                           f"({c}x{oh}x{ow}). Output size is too small")
    return oh, ow


def _pooled_meta(shape, dtype, like):
    if like.ndim == 4 and _channels_last(like):
        return M.meta_tensor(shape, dtype, _channels_last_strides(shape))
    return M.meta_tensor(shape, dtype)


def _max_pool_meta(entry, args):
    shape = _max_pool_geometry(*args)
    self = args[0]
    return _pooled_meta(shape, self.dtype, self), _pooled_meta(shape, _C.int64, self)


def _max_pool_backward(grads, outs, self, kernel_size, stride, padding, dilation, ceil_mode):
    g = grads[0]
    if g is None:
        return (None,)
    return (O.max_pool2d_with_indices_backward(g, self, kernel_size, stride, padding, dilation,
                                               ceil_mode, outs[1]),)


op("max_pool2d_with_indices(Tensor self, int[2] kernel_size, int[2] stride=[], "
   "int[2] padding=0, int[2] dilation=1, bool ceil_mode=False) -> (Tensor, Tensor)",
   CUSTOM, "max_pool2d_with_indices", prim=True, lower=lower_max_pool2d_with_indices,
   method=False, meta=_max_pool_meta,
   backward=_max_pool_backward,
   doc="2-d max pooling: the maxima and their flat indices (h * W + w) in each input plane; "
       "NaN propagates.")


def _check_pooled(t, self, shape):
    nd = self.ndim
    if t.ndim != nd:
        raise RuntimeError(f"Expected a tensor of dimension {nd} but got: dimension {t.ndim}")
    for dim in range(nd):
        if t.shape[dim] != shape[dim]:
            raise RuntimeError(f"Expected a tensor of dimension {nd} and tensor.size[{dim}] == "
                               f"{shape[dim]} but got: dimension {nd} and tensor.size[{dim}] = "
                               f"{t.shape[dim]}")


def _max_pool_backward_meta(entry, args):
    g, self, kernel_size, stride, padding, dilation, ceil_mode, indices = args
    shape = _max_pool_geometry(self, kernel_size, stride, padding, dilation, ceil_mode)
    if not self.dtype.is_floating_point:
        raise _not_implemented("max_pool2d_backward", self.dtype)
    if g.dtype is not self.dtype:
        raise RuntimeError(f"expected dtype {self.dtype._name} for `gradOutput` "
                           f"but got dtype {g.dtype._name}")
    if indices.dtype is not _C.int64:
        raise RuntimeError(f"expected scalar type Long but found {torch_type(indices.dtype)}")
    _check_pooled(g, self, shape)
    _check_pooled(indices, self, shape)
    return _pooled_meta(tuple(self.shape), self.dtype, self)


def _max_pool_backward_backward(g, out, grad_output, self, kernel_size, stride, padding,
                                dilation, ceil_mode, indices):
    """The gradient with respect to grad_output: g gathered at the indices (a max pool of
    g with the same windows picks g where the recorded maxima were)."""
    flat = g.reshape(tuple(g.shape[:-2]) + (-1,))
    n = flat.shape[-1]
    idx = indices.reshape(tuple(indices.shape[:-2]) + (-1,))
    onehot = idx.unsqueeze(-1) == O.arange(n)
    picked = O.where(onehot, flat.unsqueeze(-2), 0).sum(-1)
    return picked.reshape(tuple(indices.shape)), None, None, None, None, None, None, None


op("max_pool2d_with_indices_backward(Tensor grad_output, Tensor self, int[2] kernel_size, "
   "int[2] stride, int[2] padding, int[2] dilation, bool ceil_mode, Tensor indices) -> Tensor",
   CUSTOM, "max_pool2d_with_indices_backward", prim=True,
   lower=lower_max_pool2d_with_indices_backward, method=False,
   meta=_max_pool_backward_meta, backward=_max_pool_backward_backward,
   doc="The gradient of max_pool2d_with_indices: grad_output added at the indices.")


def _max_pool2d(self, kernel_size, stride, padding, dilation, ceil_mode):
    return O.max_pool2d_with_indices(self, kernel_size, stride, padding, dilation,
                                     ceil_mode)[0]


op("max_pool2d(Tensor self, int[2] kernel_size, int[2] stride=[], int[2] padding=0, "
   "int[2] dilation=1, bool ceil_mode=False) -> Tensor", CUSTOM, "python", composite=True,
   method=False, impl=_max_pool2d, doc="2-d max pooling (max_pool2d_with_indices' values).")


# ================================================================== separable resampling
#
# Average pooling, adaptive average pooling and nearest/bilinear interpolation compute each
# output pixel as a weighted sum over a window that factors into a row part and a column
# part, so out = A_h @ x @ A_w^T for matrices A (out_size x in_size) that depend on the
# geometry only. The matrices are built from prims (arange, comparisons, sums), so the
# decompositions trace; the backward is A_h^T @ g @ A_w.

_MATRIX_CACHE: dict = {}


def _eager():
    return _C._get_mode()[0] == _C.MODE_EAGER


def _cached(key, build):
    """Eager calls reuse the matrices of a geometry; tracing and meta mode rebuild them so
    they are made of recorded prims (or meta tensors)."""
    if not _eager():
        return build()
    r = _MATRIX_CACHE.get(key)
    if r is None:
        if len(_MATRIX_CACHE) > 256:
            _MATRIX_CACHE.clear()
        r = _MATRIX_CACHE[key] = build()
    return r


def _col(v):
    return P.view(v, [v.shape[0], 1])


def _row(v):
    return P.view(v, [1, v.shape[0]])


def _minimum(a, b):
    return P.neg(P.maximum(P.neg(a), P.neg(b) if _is_tensor(b) else -b))


def _window_mask(n_in, n_out, k, s, p):
    """(n_out, n_in) bool: input i is in output o's window [o*s - p, o*s - p + k)."""
    lo = P.add(P.mul(P.arange(n_out), s), -p)
    i = _row(P.arange(n_in))
    return P.bitwise_and(P.le(_col(lo), i), P.lt(i, _col(P.add(lo, k)))), lo


def _avg_axis(n_in, n_out, k, s, p, include_pad, dtype):
    """The averaging matrix of one axis (rows sum to 1), or (mask, counts) for integer
    inputs (dtype None)."""
    def build():
        mask, lo = _window_mask(n_in, n_out, k, s, p)
        if include_pad:
            cnt = P.add(_minimum(P.add(lo, k), n_in + p), P.neg(lo))
        else:
            cnt = P.sum(mask, [1])
        if dtype is None:
            return P._to_copy(mask, dtype=_C.float64), cnt
        return P.mul(P._to_copy(mask, dtype=dtype),
                     _col(P.reciprocal(P._to_copy(cnt, dtype=dtype))))
    return _cached(("avg", n_in, n_out, k, s, p, include_pad, dtype), build)


def _sum_axis(n_in, n_out, k, s, p, dtype):
    return _cached(("sum", n_in, n_out, k, s, p, dtype), lambda: P._to_copy(
        _window_mask(n_in, n_out, k, s, p)[0], dtype=dtype))


def _adaptive_axis(n_in, n_out, dtype):
    """Row o averages inputs [floor(o*I/O), ceil((o+1)*I/O))."""
    def build():
        o = _col(P.arange(n_out))
        i = _row(P.arange(n_in))
        mask = P.bitwise_and(P.lt(P.mul(o, n_in), P.mul(P.add(i, 1), n_out)),
                             P.lt(P.mul(i, n_out), P.mul(P.add(o, 1), n_in)))
        cnt = P.sum(mask, [1])
        return P.mul(P._to_copy(mask, dtype=dtype),
                     _col(P.reciprocal(P._to_copy(cnt, dtype=dtype))))
    return _cached(("adaptive", n_in, n_out, dtype), build)


def _f32(x):
    import numpy as np
    return float(np.float32(x))


def _nearest_axis(n_in, n_out, scale, dtype):
    """PyTorch's nearest_idx: min(floor(o * scale), I - 1) in float32 (o when the sizes
    match, o >> 1 when the output is twice the input)."""
    if n_out == n_in:
        return None
    if n_out != 2 * n_in:
        scale = _f32(1.0 / scale) if scale is not None and scale > 0 else \
            _f32(_f32(n_in) / _f32(n_out))
    else:
        scale = 0.5

    def build():
        v = _col(P.mul(P.arange(n_out, dtype=_C.float32), scale))
        i_f = _row(P.arange(n_in, dtype=_C.float32))
        mask = P.bitwise_and(P.le(i_f, v), P.lt(v, P.add(i_f, 1)))
        last = P.bitwise_and(P.eq(_row(P.arange(n_in)), n_in - 1), P.le(float(n_in), v))
        return P._to_copy(P.bitwise_or(mask, last), dtype=dtype)
    return _cached(("nearest", n_in, n_out, scale, dtype), build)


def _linear_axis(n_in, n_out, align_corners, scale, dtype):
    """PyTorch's linear interpolation weights along one axis (area_pixel_compute_scale,
    area_pixel_compute_source_index, guard_index_and_lambda) in the op-math dtype."""
    np_t = "float64" if dtype is _C.float64 else "float32"
    import numpy as np
    cast = getattr(np, np_t)
    if align_corners:
        sc = float(cast(n_in - 1) / cast(n_out - 1)) if n_out > 1 else 0.0
    elif scale is not None and scale > 0:
        sc = float(cast(1.0 / scale))           # 1/scale in double, then op math
    else:
        sc = float(cast(n_in) / cast(n_out))

    def build():
        o = P.arange(n_out, dtype=dtype)
        if align_corners:
            real = P.mul(o, sc)
        else:
            real = P.maximum(P.add(P.mul(P.add(o, 0.5), sc), -0.5), 0.0)
        real = _col(real)
        i_f = _row(P.arange(n_in, dtype=dtype))
        m0 = P.bitwise_or(P.bitwise_and(P.le(i_f, real), P.lt(real, P.add(i_f, 1))),
                          P.bitwise_and(P.eq(i_f, n_in - 1), P.le(float(n_in), real)))
        m0f = P._to_copy(m0, dtype=dtype)
        i0 = P.sum(P.mul(m0f, i_f), [1], True)
        lam = _minimum(P.maximum(P.add(real, P.neg(i0)), 0.0), 1.0)
        i1 = P.add(i0, P._to_copy(P.lt(i0, n_in - 1), dtype=dtype))
        m1f = P._to_copy(P.eq(i_f, i1), dtype=dtype)
        return P.add(P.mul(m0f, P.add(P.neg(lam), 1.0)), P.mul(m1f, lam))
    return _cached(("linear", n_in, n_out, align_corners, sc, dtype), build)


def _resample(x, ah, aw):
    """ah @ x @ aw^T over the last two dims (None: that axis is left alone)."""
    if ah is not None:
        x = P.matmul(ah, x)
    if aw is not None:
        x = P.matmul(x, P.permute(aw, [1, 0]))
    return x


def _resample_backward(g, ah, aw):
    if ah is not None:
        g = O.matmul(ah.t(), g)
    if aw is not None:
        g = O.matmul(g, aw)
    return g


def _compute_dtype(dt):
    """float16 and bfloat16 compute in float32 (PyTorch's op math), others in their
    own dtype."""
    return _C.float32 if dt in _dtypes.HALF else dt


# ------------------------------------------------------------------ avg_pool2d


def _avg_pool_params(self, kernel_size, stride, padding, ceil_mode, divisor_override):
    kh, kw = _pool_ints(kernel_size, 2, "kernel_size", "avg_pool2d")
    sh, sw = _pool_ints(stride, 2, "stride", "avg_pool2d", True, (kh, kw))
    ph, pw = _pool_ints(padding, 2, "padding", "avg_pool2d")
    if divisor_override is not None and divisor_override == 0:
        raise RuntimeError("divisor must be not zero")
    out = _pool2d_output(self, kh, kw, sh, sw, ph, pw, 1, 1, ceil_mode)
    if not self.dtype.is_floating_point and self.dtype is not _C.int64:
        raise _not_implemented("avg_pool2d", self.dtype)
    return (kh, kw), (sh, sw), (ph, pw), tuple(self.shape[-2:]), out


def _avg_pool(params):
    """avg_pool2d's or avg_pool3d's decomposition and backward: averaging matrices per
    axis (summing ones with divisor_override); integers are summed exactly in float64,
    then divided truncating, as PyTorch's kernel. params(self, kernel_size, stride,
    padding, ceil_mode, divisor_override) checks the arguments and returns (kernel,
    stride, padding, input size, output size) per axis."""
    def mats(k, s, p, sp, out, include_pad, divisor_override, dtype):
        if divisor_override is not None:
            return [_sum_axis(sp[i], out[i], k[i], s[i], p[i], dtype) for i in range(len(sp))]
        return [_avg_axis(sp[i], out[i], k[i], s[i], p[i], include_pad, dtype)
                for i in range(len(sp))]

    def decompose(self, kernel_size, stride, padding, ceil_mode, count_include_pad,
                  divisor_override):
        k, s, p, sp, out = params(self, kernel_size, stride, padding, ceil_mode,
                                  divisor_override)
        if not self.dtype.is_floating_point:
            masks = mats(k, s, p, sp, out, count_include_pad, None, None)
            tot = _resample_n(P._to_copy(self, dtype=_C.float64), [m for m, _ in masks])
            counts = [c for _, c in masks]
            if divisor_override is not None:
                div = P.full([], float(divisor_override), dtype=_C.float64)
            elif len(sp) == 2:
                div = P._to_copy(P.mul(_col(counts[0]), _row(counts[1])), dtype=_C.float64)
            else:
                cd, ch, cw = (P._to_copy(c, dtype=_C.float64) for c in counts)
                div = P.mul(P.view(cd, [out[0], 1, 1]), P.mul(P.view(ch, [1, out[1], 1]),
                                                              P.view(cw, [1, 1, out[2]])))
            rd = P.reciprocal(div)
            q = P.mul(tot, rd)
            nudge = P.mul(P.where(P.lt(q, 0.0), -0.25, 0.25), rd)
            return P._to_copy(P.add(q, nudge), dtype=self.dtype)
        cdt = _compute_dtype(self.dtype)
        x = self if cdt is self.dtype else P._to_copy(self, dtype=cdt)
        y = _resample_n(x, mats(k, s, p, sp, out, count_include_pad, divisor_override, cdt))
        if divisor_override is not None:
            y = P.mul(y, 1.0 / divisor_override)
        return y if cdt is self.dtype else P._to_copy(y, dtype=self.dtype)

    def backward(g, out_, self, kernel_size, stride, padding, ceil_mode, count_include_pad,
                 divisor_override):
        k, s, p, sp, out = params(self, kernel_size, stride, padding, ceil_mode,
                                  divisor_override)
        cdt = _compute_dtype(g.dtype)
        gc = g if cdt is g.dtype else g.to(cdt)
        r = _resample_n_backward(gc, mats(k, s, p, sp, out, count_include_pad,
                                          divisor_override, cdt))
        if divisor_override is not None:
            r = r * (1.0 / divisor_override)
        return (r if cdt is g.dtype else r.to(g.dtype),)
    return decompose, backward


_decomposed("avg_pool2d(Tensor self, int[2] kernel_size, int[2] stride=[], int[2] padding=0, "
            "bool ceil_mode=False, bool count_include_pad=True, int? divisor_override=None) "
            "-> Tensor", *_avg_pool(_avg_pool_params),
            "2-d average pooling (two matmuls with averaging matrices; integers divide "
            "truncating, as PyTorch's kernel).")


# ------------------------------------------------------------------ adaptive_avg_pool2d


def _adaptive_avg_mats(self, output_size, nsp, dtype):
    """adaptive_avg_pool{nsp}d's averaging matrices per spatial axis (None where the size
    stays), after PyTorch's checks."""
    name = f"adaptive_avg_pool{nsp}d"
    if len(output_size) != nsp:
        raise RuntimeError(f"{name}: output_size must be {nsp}")
    if self.ndim not in (nsp + 1, nsp + 2):
        raise RuntimeError(f"{name}(): Expected {nsp + 1}D or {nsp + 2}D tensor, but got "
                           f"{_shape(self)}")
    for i in range(1 if self.ndim == nsp + 2 else 0, self.ndim):
        if self.shape[i] == 0:
            raise RuntimeError(f"{name}(): Expected input to have non-zero size for non-batch "
                               f"dimensions, but input has sizes {_shape(self)} with dimension "
                               f"{i} being empty")
    if any(n < 0 for n in output_size):
        raise RuntimeError(f"{name}: elements of output_size must be greater than or equal to "
                           f"0 but received {list(output_size)}")
    if tuple(output_size) == (1,) * nsp and not self.dtype.is_floating_point:
        raise RuntimeError(f"mean(): could not infer output dtype. Input dtype must be either "
                           f"a floating point or complex dtype. Got: {torch_type(self.dtype)}")
    _float_or_raise(name if nsp == 2 else name + "_cpu", self)
    return [None if o == n else _adaptive_axis(n, o, dtype)
            for n, o in zip(self.shape[-nsp:], output_size)]


def _adaptive_avg_pool(nsp):
    """adaptive_avg_pool{nsp}d's decomposition and backward."""
    def decompose(self, output_size):
        cdt = _compute_dtype(self.dtype)
        return _resample_op(self, _adaptive_avg_mats(self, output_size, nsp, cdt), cdt)

    def backward(g, out, self, output_size):
        mats = _adaptive_avg_mats(self, output_size, nsp, _compute_dtype(g.dtype))
        return (_resample_op_backward(g, mats),)
    return decompose, backward


_decomposed("adaptive_avg_pool2d(Tensor self, int[2] output_size) -> Tensor",
            *_adaptive_avg_pool(2),
            "2-d adaptive average pooling: output cell o averages inputs "
            "[floor(o*I/O), ceil((o+1)*I/O)).")


# ------------------------------------------------------------------ upsampling


def _upsample_mats(name, axis, self, output_size, scales, cdt=None, kernel=None):
    """The resampling matrices of an upsampling op (one per spatial axis, built by
    axis(n_in, n_out, scale, dtype)) after its checks, and the dtype they compute in:
    cdt, else float64 for float64 and float32 for the rest. A bool or signed integer
    input raises kernel's (default: name_channels_last) not-implemented error."""
    sp = _upsample_check(name, self, output_size, len(scales))
    _float_or_byte(kernel or f"{name}_channels_last", self)
    if cdt is None:
        cdt = _C.float64 if self.dtype is _C.float64 else _C.float32
    return [axis(sp[i], output_size[i], scales[i], cdt) for i in range(len(sp))], cdt


_decomposed("upsample_nearest2d(Tensor self, int[2] output_size, float? scales_h=None, "
            "float? scales_w=None) -> Tensor",
            lambda self, output_size, sh, sw: _resample_op(self, *_upsample_mats(
                "upsample_nearest2d", _nearest_axis, self, output_size, (sh, sw))),
            lambda g, out, self, output_size, sh, sw: (_resample_op_backward(
                g, _upsample_mats("upsample_nearest2d", _nearest_axis, self, output_size,
                                    (sh, sw), _compute_dtype(g.dtype))[0]),),
            "Nearest-neighbour resize of (N, C, H, W) to output_size: source index "
            "floor(o * scale), scale = 1/scales or in/out.")


def _uint8_precision(n_in, n_out, align_corners, scale):
    """The fixed-point precision of PyTorch's uint8 linear-interpolation weights: the
    largest p < 22 with round(w_max * 2^(p+1)) < 2^15."""
    import numpy as np
    o = np.arange(n_out, dtype=np.float32)
    if align_corners:
        sc = np.float32(n_in - 1) / np.float32(n_out - 1) if n_out > 1 else np.float32(0)
        real = o * sc
    else:
        sc = np.float32(1.0 / scale) if scale else \
            np.float32(n_in) / np.float32(n_out)
        real = np.maximum((o + np.float32(0.5)) * sc - np.float32(0.5), np.float32(0))
    i0 = np.minimum(np.floor(real), n_in - 1)
    lam = np.clip(real - i0, 0, 1)
    w = np.where(i0 < n_in - 1, np.maximum(lam, 1 - lam), 1.0)
    w_max = float(w.max())
    p = 0
    while p < 22 and int(0.5 + w_max * (1 << (p + 1))) < (1 << 15):
        p += 1
    return p


def _uint8_linear_pass(y, n_in, n_out, align_corners, scale, rows):
    """One pass of PyTorch's uint8 kernel: int16 fixed-point weights, a rounding shift and
    a clamp to [0, 255] (exact in float64)."""
    p = _uint8_precision(n_in, n_out, align_corners, scale)
    a = _linear_axis(n_in, n_out, align_corners, scale, _C.float64)
    q = P._to_copy(P._to_copy(P.add(P.mul(a, float(1 << p)), 0.5), dtype=_C.int64),
                   dtype=_C.float64)
    y = P.matmul(q, y) if rows else P.matmul(y, P.permute(q, [1, 0]))
    y = P._to_copy(P.mul(P.add(y, float(1 << (p - 1))), 1.0 / (1 << p)), dtype=_C.int64)
    return P._to_copy(P.maximum(_minimum(y, 255), 0), dtype=_C.float64)


def _bilinear_mats(self, output_size, align_corners, scales_h, scales_w, cdt=None):
    return _upsample_mats("upsample_bilinear2d",
                            lambda n_in, n_out, sc, dt: _linear_axis(n_in, n_out, align_corners,
                                                                     sc, dt),
                            self, output_size, (scales_h, scales_w), cdt)


def _bilinear_decompose(self, output_size, align_corners, scales_h, scales_w):
    if self.dtype is not _C.uint8:
        return _resample_op(self, *_bilinear_mats(self, output_size, align_corners, scales_h,
                                                  scales_w))
    (H, W), (oh, ow) = _upsample_check("upsample_bilinear2d", self, output_size, 2), output_size
    # columns, then rows, each rounded to uint8
    y = P._to_copy(self, dtype=_C.float64)
    y = _uint8_linear_pass(y, W, ow, align_corners, scales_w, False)
    y = _uint8_linear_pass(y, H, oh, align_corners, scales_h, True)
    return P._to_copy(y, dtype=_C.uint8)


def _bilinear_backward(g, out, self, output_size, align_corners, scales_h, scales_w):
    return (_resample_op_backward(g, _bilinear_mats(self, output_size, align_corners,
                                                    scales_h, scales_w,
                                                    _compute_dtype(g.dtype))[0]),)


_decomposed("upsample_bilinear2d(Tensor self, int[2] output_size, bool align_corners, "
            "float? scales_h=None, float? scales_w=None) -> Tensor", _bilinear_decompose,
            _bilinear_backward,
            "Bilinear resize of (N, C, H, W) to output_size (align_corners as PyTorch).")


# ================================================================== normalisation

def _upcast(x):
    """float16 and bfloat16 compute in float32; the result is cast back."""
    return P._to_copy(x, dtype=_C.float32) if x.dtype in _dtypes.HALF else x


def _contiguous_p(x):
    """x, or a contiguous copy (PyTorch's normalisation kernels work on and return
    contiguous data)."""
    return x if M.is_contiguous(x) else P.clone(x, memory_format="contiguous_format")


def _per_count_p(t, n):
    """t times 1 / n (a count of elements), in prims; a symbolic count ([dynamic])
    divides in the graph (1 / n as a Python float would specialise it)."""
    if not isinstance(n, int):
        return P.div(t, n)
    return P.mul(t, 1.0 / n if n else math.nan)


def _per_count_o(t, n):
    """The same with ops."""
    if not isinstance(n, int):
        return t / n
    return t * (1.0 / n if n else math.nan)


def _normalize_p(x, dims, eps):
    """(x - mean) * rstd over dims, with the mean and rstd (keepdim), in prims."""
    n = math.prod(x.shape[d] for d in dims)
    mean = _per_count_p(P.sum(x, list(dims), True), n)
    xc = P.add(x, P.neg(mean))
    var = _per_count_p(P.sum(P.mul(xc, xc), list(dims), True), n)
    rstd = P.pow(P.add(var, eps), -0.5)
    return P.mul(xc, rstd), mean, rstd


def _normalize_o(x, dims, eps):
    """The same with ops (backward formulas: differentiable again)."""
    n = math.prod(x.shape[d] for d in dims)
    mean = _per_count_o(x.sum(list(dims), keepdim=True), n)
    xc = x - mean
    var = _per_count_o((xc * xc).sum(list(dims), keepdim=True), n)
    rstd = (var + eps) ** -0.5
    return xc * rstd, rstd


def _norm_input_grad(gxhat, xhat, rstd, dims):
    """d/dx of xhat = (x - mean(x)) * rstd(x) over dims, given d/dxhat."""
    n = math.prod(gxhat.shape[d] for d in dims)
    # (n == 0: the gradient is empty anyway)
    gm = _per_count_o(gxhat.sum(list(dims), keepdim=True), n)
    gxm = _per_count_o((gxhat * xhat).sum(list(dims), keepdim=True), n)
    return rstd * (gxhat - gm - xhat * gxm)


def _as_cdt(t):
    return t.to(_C.float32) if t is not None and t.dtype in _dtypes.HALF else t


def _layer_norm_check(input, normalized_shape, weight, bias):
    ns = list(normalized_shape)
    if not ns:
        raise RuntimeError("Expected normalized_shape to be at least 1-dimensional, i.e., "
                           "containing at least one element, but got normalized_shape = []")
    for name, t in (("weight", weight), ("bias", bias)):
        if t is not None and list(t.shape) != ns:
            raise RuntimeError(f"Expected {name} to be of same shape as normalized_shape, but "
                               f"got {name} of shape {_shape(t)} and normalized_shape = {ns}")
    k = len(ns)
    if input.ndim < k or list(input.shape[input.ndim - k:]) != ns:
        raise RuntimeError(f"Given normalized_shape={ns}, expected input with shape "
                           f"[*, {', '.join(map(str, ns))}], but got input of size"
                           f"{_shape(input)}")
    _float_or_raise("LayerNormKernelImpl", input)
    return list(range(input.ndim - k, input.ndim))


def _layer_norm_decompose(input, normalized_shape, weight, bias, eps, cudnn_enable):
    dims = _layer_norm_check(input, normalized_shape, weight, bias)
    x = _upcast(_contiguous_p(input))
    y, _, _ = _normalize_p(x, dims, eps)
    if weight is not None:
        y = P.mul(y, _upcast(weight))
    if bias is not None:
        y = P.add(y, _upcast(bias))
    return P._to_copy(y, dtype=input.dtype) if y.dtype is not input.dtype else y


def _layer_norm_backward(g, out, input, normalized_shape, weight, bias, eps, cudnn_enable):
    dims = _layer_norm_check(input, normalized_shape, weight, bias)
    # contiguous float rows in a backward without create_graph: one C pass (nn_grad.c)
    fused = _C._grad_layer_norm(g, input, len(dims), weight, eps, input.requires_grad,
                                weight is not None and weight.requires_grad,
                                bias is not None and bias.requires_grad)
    if fused is not None and (bias is None or bias.dtype is input.dtype):
        return fused[0], None, fused[1], fused[2], None, None
    x, gc = _as_cdt(input), _as_cdt(g)
    xhat, rstd = _normalize_o(x, dims, eps)
    lead = list(range(input.ndim - len(dims)))
    gx = gw = gb = None
    if input.requires_grad:
        gxhat = gc * _as_cdt(weight) if weight is not None else gc
        gx = _norm_input_grad(gxhat, xhat, rstd, dims).to(input.dtype)
    if weight is not None and weight.requires_grad:
        gw = ((gc * xhat).sum(lead) if lead else gc * xhat).to(weight.dtype)
    if bias is not None and bias.requires_grad:
        gb = (gc.sum(lead) if lead else gc).to(bias.dtype)
    return gx, None, gw, gb, None, None


_decomposed("layer_norm(Tensor input, int[] normalized_shape, Tensor? weight=None, "
            "Tensor? bias=None, float eps=1e-05, bool cudnn_enable=True) -> Tensor",
            _layer_norm_decompose, _layer_norm_backward,
            "Normalises over the trailing normalized_shape dims (biased variance), then "
            "weight and bias.", kernel="layer_norm")


def _group_norm_check(input, num_groups, weight, bias):
    if input.ndim < 2:
        raise RuntimeError(f"Expected at least 2 dimensions for input tensor but received "
                           f"{input.ndim}")
    C = input.shape[1]
    if num_groups <= 0 or C % num_groups:
        raise RuntimeError(f"Expected number of channels in input to be divisible by "
                           f"num_groups, but got input of shape {_shape(input)} and "
                           f"num_groups={num_groups}")
    for name, t in (("weight", weight), ("bias", bias)):
        if t is not None and (t.ndim != 1 or t.shape[0] != C):
            raise RuntimeError(f"Expected {name} to be a vector of size equal to the number of "
                               f"channels in input, but got {name} of shape {_shape(t)} and "
                               f"input of shape {_shape(input)}")
    _float_or_raise("GroupNormKernelImpl", input)
    return C


def _group_norm_decompose(input, num_groups, weight, bias, eps, cudnn_enabled):
    C = _group_norm_check(input, num_groups, weight, bias)
    N = input.shape[0]
    x = _upcast(_contiguous_p(input))
    xg = _reshape_p(x, [N, num_groups, math.prod(input.shape[1:]) // num_groups])
    y, _, _ = _normalize_p(xg, [2], eps)
    y = P.view(y, list(input.shape))
    cs = [C] + [1] * (input.ndim - 2)
    if weight is not None:
        y = P.mul(y, P.view(_upcast(weight), cs))
    if bias is not None:
        y = P.add(y, P.view(_upcast(bias), cs))
    return P._to_copy(y, dtype=input.dtype) if y.dtype is not input.dtype else y


def _group_norm_backward(g, out, input, num_groups, weight, bias, eps, cudnn_enabled):
    C = _group_norm_check(input, num_groups, weight, bias)
    N = input.shape[0]
    x, gc = _as_cdt(input), _as_cdt(g)
    shape = list(input.shape)
    cs = [C] + [1] * (input.ndim - 2)
    per_group = math.prod(input.shape[1:]) // num_groups     # not -1: ambiguous when N is 0
    xg = x.reshape(N, num_groups, per_group)
    xhat_g, rstd = _normalize_o(xg, [2], eps)
    xhat = xhat_g.reshape(shape)
    red = [0] + list(range(2, input.ndim))
    gx = gw = gb = None
    if input.requires_grad:
        gxhat = gc * _as_cdt(weight).reshape(cs) if weight is not None else gc
        gx = _norm_input_grad(gxhat.reshape(N, num_groups, per_group), xhat_g, rstd, [2]) \
            .reshape(shape).to(input.dtype)
    if weight is not None and weight.requires_grad:
        gw = (gc * xhat).sum(red).to(weight.dtype)
    if bias is not None and bias.requires_grad:
        gb = gc.sum(red).to(bias.dtype)
    return gx, None, gw, gb, None, None


_decomposed("group_norm(Tensor input, int num_groups, Tensor? weight=None, Tensor? bias=None, "
            "float eps=1e-05, bool cudnn_enabled=True) -> Tensor",
            _group_norm_decompose, _group_norm_backward,
            "Normalises each group of C/num_groups channels (with the spatial dims) per "
            "sample, then per-channel weight and bias.")


def _batch_norm_check(input, weight, bias, running_mean, running_var, training):
    if input.ndim < 2:
        raise RuntimeError(f"batch_norm(): Expected at least 2 dimensions for input tensor "
                           f"but received {input.ndim}")
    C = input.shape[1]
    for name, t in (("weight", weight), ("bias", bias), ("running_mean", running_mean),
                    ("running_var", running_var)):
        if t is not None and t.numel() != C:
            raise RuntimeError(f"{name} should contain {C} elements not {t.numel()}")
    if not training and (running_mean is None or running_var is None):
        raise RuntimeError("running_mean and running_var must be defined in evaluation mode")
    _float_or_raise("batch_norm", input)
    return C


def _bn_functional_decompose(input, weight, bias, running_mean, running_var, training,
                             momentum, eps):
    C = _batch_norm_check(input, weight, bias, running_mean, running_var, training)
    x = _upcast(_contiguous_p(input))
    cdt = x.dtype
    cs = [C] + [1] * (input.ndim - 2)
    red = [0] + list(range(2, input.ndim))
    def stat(t):
        return P._to_copy(P.view(t, [C]), dtype=cdt) if t.dtype is not cdt else P.view(t, [C])
    if training:
        y, mean, rstd = _normalize_p(x, red, eps)
        mean, rstd = P.view(mean, [C]), P.view(rstd, [C])
        n = input.numel() // C if C else 0
        if running_mean is not None and isinstance(n, int) and n == 0:
            # an empty batch leaves the running statistics as they were (PyTorch's)
            new_mean, new_var = P.clone(running_mean), P.clone(running_var)
        elif running_mean is not None:
            var = P.add(P.pow(rstd, -2.0), -eps)
            unbiased = P.div(P.mul(var, n), n - 1) if not isinstance(n, int) else \
                P.mul(var, n / (n - 1) if n > 1 else math.inf)     # (symbolic n: [dynamic])
            new_mean = P.add(P.mul(stat(running_mean), 1 - momentum), P.mul(mean, momentum))
            new_var = P.add(P.mul(stat(running_var), 1 - momentum), P.mul(unbiased, momentum))
            new_mean = P._to_copy(new_mean, dtype=running_mean.dtype)
            new_var = P._to_copy(new_var, dtype=running_var.dtype)
        else:        # two results: one tensor twice would say they share memory
            new_mean = P.full([0], 0, dtype=input.dtype)
            new_var = P.full([0], 0, dtype=input.dtype)
    else:
        mean = P.clone(stat(running_mean))           # an output: never a view of an input
        rstd = P.pow(P.add(stat(running_var), eps), -0.5)
        y = P.mul(P.add(x, P.neg(P.view(mean, cs))), P.view(rstd, cs))
        new_mean, new_var = P.clone(running_mean), P.clone(running_var)
    if weight is not None:
        y = P.mul(y, P.view(_upcast(weight), cs))
    if bias is not None:
        y = P.add(y, P.view(_upcast(bias), cs))
    if y.dtype is not input.dtype:
        y = P._to_copy(y, dtype=input.dtype)
    return y, mean, rstd, new_mean, new_var


def _bn_functional_backward(grads, outs, input, weight, bias, running_mean, running_var,
                            training, momentum, eps):
    """Gradients of all five outputs: the normalised output, the saved statistics and the
    new running statistics (each a function of the input, or of the running ones).

    The running statistics are read through the outputs only (mean and rstd are theirs in
    evaluation, the new ones have their shape and dtype): batch_norm overwrites them in
    place after this op, which must not invalidate the graph (as in PyTorch)."""
    g, g_mean, g_rstd, g_nm, g_nv = grads
    if training and g is not None and g_mean is None and g_rstd is None and g_nm is None \
            and g_nv is None:
        # only the output's gradient, in a backward without create_graph: one C pass per
        # channel (nn_grad.c)
        fused = _C._grad_batch_norm_train(
            g, input, weight, eps, input.requires_grad,
            weight is not None and weight.requires_grad, bias is not None and bias.requires_grad)
        if fused is not None and (bias is None or bias.dtype is input.dtype):
            return fused + (None,) * 5
    C = input.shape[1]
    cs = [C] + [1] * (input.ndim - 2)
    red = [0] + list(range(2, input.ndim))
    n = input.numel() // C if C else 0
    x = _as_cdt(input)
    cdt = x.dtype
    if training:
        xhat, rstd = _normalize_o(x, red, eps)
    else:
        rstd = outs[2].reshape(cs)
        xhat = (x - outs[1].reshape(cs)) * rstd
    stats = outs[3].numel() > 0          # running statistics were given
    gx = gw = gb = grm = grv = None

    def add(a, b):
        return b if a is None else a + b
    if g is not None:
        gc = g.to(cdt)
        gxhat = gc * _as_cdt(weight).reshape(cs) if weight is not None else gc
        if training:
            gx = _norm_input_grad(gxhat, xhat, rstd, red)
        else:
            gx = gxhat * rstd
            grm = -(gxhat * rstd).sum(red)
            grv = (gxhat * xhat).sum(red) * (-0.5) * (rstd * rstd).reshape(C)
        if weight is not None:
            gw = (gc * xhat).sum(red)
        if bias is not None:
            gb = gc.sum(red)
    if training:
        xc = xhat / rstd                                      # x - mean
        if g_mean is not None:
            gx = add(gx, _per_count_o(g_mean.to(cdt), n).reshape(cs).expand(list(x.shape)))
        if g_rstd is not None:                                # d rstd = -rstd^3 dvar / 2
            gx = add(gx, _per_count_o((g_rstd.to(cdt).reshape(cs) * -(rstd ** 3)) * xc, n))
        if g_nm is not None and stats:
            grm = add(grm, g_nm.to(cdt) * (1 - momentum))
            gx = add(gx, (_per_count_o(g_nm.to(cdt) * momentum, n) if not isinstance(n, int)
                          else g_nm.to(cdt) * (momentum / n)).reshape(cs).expand(list(x.shape)))
        if g_nv is not None and stats:
            grv = add(grv, g_nv.to(cdt) * (1 - momentum))
            gx = add(gx, g_nv.to(cdt).reshape(cs) * (momentum / (n - 1) * 2.0) * xc
                     if isinstance(n, int) else
                     g_nv.to(cdt).reshape(cs) * (momentum * 2.0) * xc / (n - 1))
    else:
        if g_mean is not None:
            grm = add(grm, g_mean.to(cdt))
        if g_rstd is not None:
            grv = add(grv, g_rstd.to(cdt) * -0.5 * rstd.reshape(C) ** 3)
        if g_nm is not None:
            grm = add(grm, g_nm.to(cdt))
        if g_nv is not None:
            grv = add(grv, g_nv.to(cdt))

    def cast(t, like):
        return None if t is None or like is None else t.to(like.dtype).reshape(like.shape)
    return (cast(gx, input), cast(gw, weight), cast(gb, bias),
            cast(grm, outs[3]) if stats else None, cast(grv, outs[4]) if stats else None,
            None, None, None)


_decomposed("_native_batch_norm_legit_functional(Tensor input, Tensor? weight, Tensor? bias, "
            "Tensor? running_mean, Tensor? running_var, bool training, float momentum, "
            "float eps) -> (Tensor, Tensor, Tensor, Tensor, Tensor)",
            _bn_functional_decompose, _bn_functional_backward,
            "Batch normalisation without side effects: (output, mean, rstd, new_running_mean, "
            "new_running_var); batch statistics in training (the running ones updated with "
            "momentum and the unbiased variance), running statistics in evaluation.",
            kernel="batch_norm_functional")


def _batch_norm(input, weight, bias, running_mean, running_var, training, momentum, eps,
                cudnn_enabled):
    out, _, _, new_mean, new_var = O._native_batch_norm_legit_functional(
        input, weight, bias, running_mean, running_var, training, momentum, eps)
    if training and running_mean is not None:
        # autograd does not follow the update (PyTorch's buffers keep requires_grad
        # False); traced, the writes are functionalized and the compiled function writes
        # the new statistics back after each call (ember/aot/mutation.py)
        prev = _C._set_grad_enabled(False)
        try:
            running_mean.copy_(new_mean)
            running_var.copy_(new_var)
        finally:
            _C._set_grad_enabled(prev)
    return out


op("batch_norm(Tensor input, Tensor? weight, Tensor? bias, Tensor(a!)? running_mean, "
   "Tensor(b!)? running_var, bool training, float momentum, float eps, bool cudnn_enabled) "
   "-> Tensor", CUSTOM, "python", composite=True, method=False, impl=_batch_norm,
   doc="Batch normalisation; in training the running statistics are updated in place "
       "(copy_ of _native_batch_norm_legit_functional's new statistics).")


# ================================================================== dropout (composite)


def _dropout(input, p, train, generator=None):
    if p < 0 or p > 1:
        raise RuntimeError(f"dropout probability has to be between 0 and 1, but got {p}")
    if not train or p == 0 or input.numel() == 0:
        return input
    if not input.dtype.is_floating_point:
        raise RuntimeError(f"result type Float can't be cast to the desired output type "
                           f"{torch_type(input.dtype)}")
    if p == 1:
        return input * 0
    keep = O.rand(tuple(input.shape), generator=generator, dtype=input.dtype) >= p
    return input * keep * (1.0 / (1.0 - p))


op("dropout(Tensor input, float p, bool train, *, Generator? generator=None) -> Tensor",
   CUSTOM, "python", composite=True, method=False, impl=_dropout,
   doc="Zeroes each element with probability p (drawn from generator or the default one) "
       "and scales the rest by 1/(1-p); the input itself when not training.")


# ================================================================== embedding, one_hot


def _embedding_check(weight, indices):
    if indices.dtype not in (_C.int64, _C.int32):
        raise RuntimeError(f"Expected tensor for argument #1 'indices' to have one of the "
                           f"following scalar types: Long, Int; but got "
                           f"{_legacy_name(indices)} instead (while checking arguments for "
                           f"embedding)")
    if weight.ndim != 2:
        raise RuntimeError("'weight' must be 2-D")
    if _has_data(indices):
        a = indices.detach().numpy()
        if a.min() < 0 or a.max() >= weight.shape[0]:
            raise IndexError("index out of range in self")


def _legacy_name(t):
    return "torch." + torch_type(t.dtype) + "Tensor"


def _one_hot_p(idx, n, dtype):
    """(*idx.shape, n): 1 where the class equals idx (dtype) — from eq and arange."""
    return P._to_copy(P.eq(P.view(idx, list(idx.shape) + [1]), P.arange(n)), dtype=dtype)


def _embedding_decompose(weight, indices, padding_idx, scale_grad_by_freq, sparse):
    _embedding_check(weight, indices)
    from .indexing import no_negative
    rows = P.index(weight, (no_negative(_reshape_p(indices, [indices.numel()])),))  # (M, D)
    return P.view(rows, list(indices.shape) + [weight.shape[1]])


def _embedding_backward(g, out, weight, indices, padding_idx, scale_grad_by_freq, sparse):
    """The rows of g added into a zero weight-shaped gradient at the indices (index_put
    with accumulate); padding_idx's row gets none; scale_grad_by_freq divides each row by
    how often its index occurs."""
    V, D = weight.shape
    # rows added in order by one C loop (nn_grad.c); a symbolic V ([dynamic]) is traced
    if not scale_grad_by_freq and isinstance(V, int):
        fused = _C._grad_embedding(g, indices, V, padding_idx if padding_idx is not None
                                   else -1)
        if fused is not None:
            return fused, None, None, None, None
    flat = indices.reshape(-1)
    g2 = g.reshape(flat.shape[0], D)        # not -1: ambiguous when D is 0
    gw = O.zeros((V, D), dtype=g.dtype).index_put((flat,), g2, accumulate=True)
    if scale_grad_by_freq:
        counts = O.zeros((V,), dtype=g.dtype).index_put(
            (flat,), O.ones((flat.shape[0],), dtype=g.dtype), accumulate=True)
        gw = gw / O.maximum(counts, 1.0).unsqueeze(1)
    if padding_idx is not None and padding_idx >= 0:
        gw = gw * (O.arange(V) != padding_idx).to(g.dtype).unsqueeze(1)
    return gw, None, None, None, None


op("embedding(Tensor weight, Tensor indices, SymInt padding_idx=-1, "
   "bool scale_grad_by_freq=False, bool sparse=False) -> Tensor", CUSTOM, "embedding",
   method=False, meta=run_decomposition, decompose=_embedding_decompose,
   backward=_embedding_backward,
   doc="Rows of weight picked by indices (the index prim; the eager kernel takes the rows); "
       "padding_idx rows get no gradient.")


def _one_hot_decompose(self, num_classes):
    if self.dtype is not _C.int64:
        raise RuntimeError("one_hot is only applicable to index tensor of type LongTensor.")
    if num_classes == -1:
        if not _has_data(self) and self.numel():
            raise RuntimeError("one_hot(): num_classes=-1 needs the values of self (the "
                               "result's shape depends on them); give num_classes")
        if self.numel() == 0:
            raise RuntimeError("Can not infer total number of classes from empty tensor.")
        num_classes = int(self.detach().numpy().max()) + 1
    elif num_classes < -1:
        raise RuntimeError("Class values must be smaller than num_classes.")
    if _has_data(self):
        a = self.detach().numpy()
        if a.min() < 0:
            raise RuntimeError("Class values must be non-negative.")
        if a.max() >= num_classes:
            raise RuntimeError("Class values must be smaller than num_classes.")
    return _contiguous_p(_one_hot_p(self, num_classes, _C.int64))


_decomposed("one_hot(Tensor self, int num_classes=-1) -> Tensor", _one_hot_decompose, None,
            "int64 one-hot encoding along a new last dim of size num_classes (-1: max + 1).")


# ================================================================== attention (composite)


def _safe_softmax_decompose(self, dim, dtype):
    x = P._to_copy(self, dtype=dtype) if dtype is not None and dtype is not self.dtype \
        else self
    x = _contiguous_p(x)        # a dense result, as softmax's
    d = M.wrap_dim(dim, x.ndim)
    if not x.dtype.is_floating_point:
        if x.numel() == 0:      # no kernel runs: an empty result of the input's dtype
            return P.full(x.shape, 0, dtype=x.dtype)
        raise NotImplementedError(f'"softmax_kernel_impl" not implemented for '
                                  f"'{x.dtype._torch_name}'")
    if x.ndim and x.shape[d] == 0:   # no keys: an empty softmax (amax would refuse it)
        return P.full(x.shape, 0.0, dtype=x.dtype)
    m = P.amax(x, [d], True)
    m = P.where(P.eq(m, -math.inf), 0.0, m)
    e = P.exp(P.add(x, P.neg(m)))
    s = P.sum(e, [d], True)
    return P.div(e, P.where(P.eq(s, 0), 1.0, s))


# its own op (as ATen's) for its gradient: softmax's, which reads the result alone, so
# a compiled forward saves one value for it, not the chain of ops it is made of
_decomposed("_safe_softmax(Tensor self, int dim, ScalarType? dtype=None) -> Tensor",
            _safe_softmax_decompose,
            lambda g, out, self, dim, dtype: (out * (g - (g * out).sum(dim, keepdim=True)),),
            "softmax that gives 0 (not NaN) in rows that are all -inf (fully masked).")


def _sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
          enable_gqa=False):
    fused = _sdpa_fused(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa)
    if fused is not None:
        return fused
    return _sdpa_math(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa)


def _grad_enabled():
    from ..autograd import is_grad_enabled
    return is_grad_enabled()


def _broadcasts_to(shape, target):
    if len(shape) > len(target):
        return False
    return all(s == 1 or s == t for s, t in zip(reversed(shape), reversed(target)))


def _sdpa_fused(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa):
    """The fused kernel's result (_scaled_dot_product_flash_attention_for_cpu) when it
    applies, else None: 3-d or 4-d float32/float64 inputs of one dtype with equal batch
    and head sizes, no dropout, a bool mask (turned into 0 / -inf of its own shape) or one
    of query's dtype that broadcasts and needs no gradient (others take the
    decomposition)."""
    nd = query.ndim
    if nd not in (3, 4) or key.ndim != nd or value.ndim != nd or dropout_p != 0.0:
        return None
    dt = query.dtype
    if dt not in (_C.float32, _C.float64) or key.dtype is not dt or value.dtype is not dt:
        return None
    if query.shape[:-2] != key.shape[:-2] or value.shape[:-2] != key.shape[:-2] or \
            key.shape[-1] != query.shape[-1] or value.shape[-2] != key.shape[-2] or \
            query.shape[-1] == 0 or (is_causal and attn_mask is not None):
        return None
    if attn_mask is not None:
        if attn_mask.dtype is not _C.bool and attn_mask.dtype is not dt:
            return None
        if attn_mask.requires_grad and _grad_enabled():
            return None
        target = tuple(query.shape[:-1]) + (key.shape[-2],)
        if not _broadcasts_to(tuple(attn_mask.shape), target):
            return None
        if nd == 3 and attn_mask.ndim == 3:
            attn_mask = attn_mask.unsqueeze(1)
        if attn_mask.dtype is _C.bool:      # the kernel adds a mask of query's dtype
            attn_mask = O.where(attn_mask, 0.0, -math.inf).to(dt)
    if nd == 3:         # (N, L, E) as (N, 1, L, E): the result stays contiguous
        query, key, value = query.unsqueeze(1), key.unsqueeze(1), value.unsqueeze(1)
    out = O._scaled_dot_product_flash_attention_for_cpu(
        query, key, value, 0.0, is_causal, attn_mask=attn_mask, scale=scale)[0]
    return out.squeeze(1) if nd == 3 else out


def _sdpa_math(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False,
               scale=None, enable_gqa=False):
    for name, t in (("key", key), ("value", value)):
        if t.dtype is not query.dtype:
            raise RuntimeError(f"Expected query, key, and value to have the same dtype, but "
                               f"got query.dtype: {_dt(query)} key.dtype: {_dt(key)} and "
                               f"value.dtype: {_dt(value)} instead.")
    if not query.dtype.is_floating_point:
        raise RuntimeError(f"expected scalar type Float but found {torch_type(query.dtype)}")
    if is_causal and attn_mask is not None:
        raise RuntimeError("_scaled_dot_product_attention: Explicit attn_mask should not be set "
                           "when is_causal=True")
    L, S, E = query.shape[-2], key.shape[-2], query.shape[-1]
    if enable_gqa and query.ndim >= 3 and key.shape[-3] != query.shape[-3]:
        rep = query.shape[-3] // key.shape[-3]

        def repeat(t):
            shp = list(t.shape)
            t = t.unsqueeze(-3).expand(shp[:-2] + [rep] + shp[-2:])
            return t.reshape(shp[:-3] + [shp[-3] * rep] + shp[-2:])
        key, value = repeat(key), repeat(value)
    sc = 1.0 / math.sqrt(E) if scale is None else scale
    attn = query.matmul(key.transpose(-2, -1)) * sc
    if is_causal:
        causal = O.arange(S).unsqueeze(0) <= O.arange(L).unsqueeze(1)
        attn = O.where(causal, attn, -math.inf)
    if attn_mask is not None:
        if attn_mask.dtype is _C.bool:
            attn = O.where(attn_mask, attn, -math.inf)
        else:
            attn = attn + attn_mask
    attn = O._safe_softmax(attn, -1)
    if dropout_p > 0.0:
        attn = O.dropout(attn, dropout_p, True)
    return attn.matmul(value)


def _dt(t):
    return "torch." + t.dtype._name


op("scaled_dot_product_attention(Tensor query, Tensor key, Tensor value, "
   "Tensor? attn_mask=None, float dropout_p=0., bool is_causal=False, *, float? scale=None, "
   "bool enable_gqa=False) -> Tensor", CUSTOM, "python", composite=True, method=False,
   impl=_sdpa,
   doc="softmax(q k^T * scale + mask) v; attn_mask bool (True = attend) or float (added); "
       "is_causal; dropout_p. The fused kernel (_scaled_dot_product_flash_attention_for_cpu) "
       "where it applies, else PyTorch's math reference; fully masked rows give 0.")


# ================================================================== fused attention (prims)


def _flash_checks(name, q, k, v, attn_mask):
    for t in (q, k, v):
        if t.ndim != 4:
            raise RuntimeError(f"{name}: Expected query, key and value to be 4-d (batch, heads, "
                               f"sequence, head dim), got {q.ndim}, {k.ndim} and {v.ndim} dims")
    if k.dtype is not q.dtype or v.dtype is not q.dtype:
        raise RuntimeError(f"{name}: Expected query, key, and value to have the same dtype, "
                           f"but got query.dtype: {torch_type(q.dtype)} key.dtype: "
                           f"{torch_type(k.dtype)} and value.dtype: {torch_type(v.dtype)} "
                           "instead.")
    if q.dtype not in (_C.float32, _C.float64) + _dtypes.HALF:
        raise RuntimeError(f"{name}: Expected data type in FP32, FP64, BF16, FP16, but got "
                           f"{torch_type(q.dtype)} instead.")
    if k.shape[:2] != q.shape[:2] or v.shape[:2] != q.shape[:2]:
        raise RuntimeError(f"{name}: Expected query, key and value to have the same batch "
                           "size and number of heads")
    if k.shape[3] != q.shape[3] or v.shape[2] != k.shape[2]:
        raise RuntimeError(f"{name}: Expected key to have query's head dim and value key's "
                           f"sequence length, got query {_shape(q)}, key {_shape(k)}, value "
                           f"{_shape(v)}")
    if attn_mask is not None:
        if attn_mask.dtype is not q.dtype:       # as PyTorch's kernel: no boolean mask
            raise RuntimeError(f"{name}: Attention mask is the same data type as query (expected "
                               f"{torch_type(q.dtype)}, got {torch_type(attn_mask.dtype)})")
        target = tuple(q.shape[:3]) + (k.shape[2],)
        if not _broadcasts_to(tuple(attn_mask.shape), target):
            raise RuntimeError(f"{name}: attn_mask of shape {_shape(attn_mask)} does not "
                               f"broadcast to {list(target)}")


def _flash_dropout(name, dropout_p):
    if dropout_p != 0.0:        # scaled_dot_product_attention takes its decomposition then
        raise RuntimeError(f"{name}: Currently do not support dropout > 0")


def _flash_lse_dtype(dtype):
    return _C.float64 if dtype is _C.float64 else _C.float32


def _blhx(shape, dtype):
    """A meta tensor of shape (B, H, L[, X]) laid out (B, L, H[, X]), as PyTorch's kernel."""
    if len(shape) == 4:
        B, H, L, X = shape
        return M.meta_tensor(shape, dtype, (L * H * X, X, H * X, 1))
    B, H, L = shape
    return M.meta_tensor(shape, dtype, (L * H, 1, H))


def _flash_meta(entry, args):
    q, k, v, dropout_p, is_causal, attn_mask, scale = args
    name = "_scaled_dot_product_flash_attention_for_cpu"
    _flash_checks(name, q, k, v, attn_mask)
    _flash_dropout(name, dropout_p)
    B, H, L = q.shape[:3]
    out = M._dense_like(q, q.dtype) if v.shape[3] == q.shape[3] else \
        M.meta_tensor((B, H, L, v.shape[3]), q.dtype)
    return out, _blhx((B, H, L), _flash_lse_dtype(q.dtype))


def _flash_backward(grads, outs, query, key, value, dropout_p, is_causal, attn_mask, scale):
    g, glse = grads
    if g is None and glse is None:
        return None, None, None, None, None, None, None
    if g is None:
        g = O.zeros_like(outs[0])
    dq, dk, dv = O._scaled_dot_product_flash_attention_for_cpu_backward(
        g, query, key, value, outs[0], outs[1], dropout_p, is_causal, attn_mask=attn_mask,
        scale=scale)
    if glse is not None:
        # d logsumexp_i / d score_ij = P_ij: formed in full, as only a caller that
        # differentiates logsumexp itself asks for it (scaled_dot_product_attention never)
        sc = 1.0 / math.sqrt(query.shape[-1]) if scale is None else scale
        s = query.matmul(key.transpose(-2, -1)) * sc
        if is_causal:
            L, S = query.shape[-2], key.shape[-2]
            s = O.where(O.arange(S).unsqueeze(0) <= O.arange(L).unsqueeze(1), s, -math.inf)
        if attn_mask is not None:
            s = O.where(attn_mask, s, -math.inf) if attn_mask.dtype is _C.bool else s + attn_mask
        lse = outs[1].unsqueeze(-1)
        p = O.where(lse == -math.inf, 0.0, (s - O.where(lse == -math.inf, 0.0, lse)).exp())
        ds = (p * glse.unsqueeze(-1)).to(query.dtype) * sc
        dq = dq + ds.matmul(key)
        dk = dk + ds.transpose(-2, -1).matmul(query)
    return dq, dk, dv, None, None, None, None


op("_scaled_dot_product_flash_attention_for_cpu(Tensor query, Tensor key, Tensor value, "
   "float dropout_p=0.0, bool is_causal=False, *, Tensor? attn_mask=None, float? scale=None) "
   "-> (Tensor output, Tensor logsumexp)", CUSTOM, "flash_attention", prim=True, lower=extern,
   method=False, meta=_flash_meta, backward=_flash_backward,
   doc="Fused attention (csrc/kernels/attention.c): softmax(q k^T * scale + mask) v by "
       "blocks with an online softmax, never forming the score matrix; and each row's "
       "log-sum-exp of its scores (output and logsumexp 0 for a row that sees no key). 4-d "
       "(B, H, L, E) float32/float64 (float16 computed in float32); dropout_p must be 0.")


def _flash_backward_meta(entry, args):
    g, q, k, v, out, lse, dropout_p, is_causal, attn_mask, scale = args
    name = "_scaled_dot_product_flash_attention_for_cpu_backward"
    if not q.dtype.is_floating_point:
        raise _not_implemented("flash_attention_backward", q.dtype)
    _flash_checks(name, q, k, v, attn_mask)
    _flash_dropout(name, dropout_p)
    B, H, L = q.shape[:3]
    for what, t, shape, dt in (("grad_out", g, (B, H, L, v.shape[3]), q.dtype),
                               ("out", out, (B, H, L, v.shape[3]), q.dtype),
                               ("logsumexp", lse, (B, H, L), _flash_lse_dtype(q.dtype))):
        if tuple(t.shape) != shape or t.dtype is not dt:
            raise RuntimeError(f"{name}: Expected {what} of shape {list(shape)} and dtype "
                               f"{torch_type(dt)}, got {_shape(t)} and {torch_type(t.dtype)}")
    return (_blhx(tuple(q.shape), q.dtype), _blhx(tuple(k.shape), q.dtype),
            _blhx(tuple(v.shape), q.dtype))


op("_scaled_dot_product_flash_attention_for_cpu_backward(Tensor grad_out, Tensor query, "
   "Tensor key, Tensor value, Tensor out, Tensor logsumexp, float dropout_p, bool is_causal, "
   "*, Tensor? attn_mask=None, float? scale=None) -> (Tensor grad_query, Tensor grad_key, "
   "Tensor grad_value)", CUSTOM, "flash_attention_backward", prim=True, lower=extern,
   method=False, meta=_flash_backward_meta,
   doc="The gradients of _scaled_dot_product_flash_attention_for_cpu: the probabilities of "
       "each block recomputed from logsumexp, dK and dV summed over query blocks, dQ over "
       "key blocks.")


# ================================================================== bilinear (composite)


def _bilinear(input1, input2, weight, bias=None):
    if input1.ndim != input2.ndim:
        raise RuntimeError(f"bilinear(): input dimensions do not match: got {input1.ndim} and "
                           f"{input2.ndim}")
    if weight.ndim != 3:
        raise RuntimeError(f"bilinear(): weight must be three-dimensional, but got "
                           f"{weight.ndim} dimensions")
    if input1.shape[-1] != weight.shape[1]:
        raise RuntimeError(f"bilinear(): input1 size does not match weight size: got "
                           f"{input1.shape[-1]} but expected {weight.shape[1]}")
    if input2.shape[-1] != weight.shape[2]:
        raise RuntimeError(f"bilinear(): input2 size does not match weight size: got "
                           f"{input2.shape[-1]} but expected {weight.shape[2]}")
    O_, I, J = weight.shape
    lead = list(input1.shape[:-1])
    x1 = input1.reshape(-1, I)
    x2 = input2.reshape(-1, J)
    u = x1.matmul(weight.permute(1, 0, 2).reshape(I, O_ * J)).reshape(-1, O_, J)
    out = (u * x2.unsqueeze(1)).sum(-1)
    if out.dtype is not u.dtype:           # integer sums widen; PyTorch keeps the dtype
        out = out.to(u.dtype)
    if bias is not None:
        out = out + bias
    return out.reshape(lead + [O_])


op("bilinear(Tensor input1, Tensor input2, Tensor weight, Tensor? bias=None) -> Tensor",
   CUSTOM, "python", composite=True, method=False, impl=_bilinear,
   doc="y[..., o] = sum_ij x1[..., i] W[o, i, j] x2[..., j] + b[o].")


# ================================================================== losses
#
# reduction as in ATen: 0 none, 1 mean, 2 sum (nn.functional maps the strings).

_REDUCTIONS = {0: "none", 1: "mean", 2: "sum"}


def _check_reduction(reduction):
    if reduction not in _REDUCTIONS:
        raise ValueError(f"{reduction} is not a valid value for reduction")


def _reduce_p(loss, reduction):
    if reduction == 0:
        return loss
    s = P.sum(loss)
    if reduction == 2:
        return s
    n = loss.numel()
    if not isinstance(n, int):     # a symbolic count ([dynamic]): divided in the graph
        return P.div(s, n)
    return P.mul(s, 1.0 / n if n else math.nan)


def _unreduce(g, reduction, shape):
    """The gradient of each element from the gradient of the reduced loss."""
    if reduction == 0:
        return g
    n = math.prod(shape)
    if reduction == 1:
        g = g / n if not isinstance(n, int) else g * (1.0 / n if n else math.nan)
    return g.expand(list(shape))


def _pair_shape(name, a, b):
    return M.broadcast_shapes(name, tuple(a.shape), tuple(b.shape))


def _loss_dtype(kernel, self, target):
    dt = M.result_type(self, target)
    if not dt.is_floating_point:
        raise _not_implemented(kernel, dt)
    return dt


def _sub_p(a, b):
    return P.add(a, P.neg(b))


def _abs_p(x):
    return P.where(P.lt(x, 0), P.neg(x), x)


def _sign_o(x):
    return (x > 0).to(x.dtype) - (x < 0).to(x.dtype)


# ------------------------------------------------------------------ mse, l1, smooth_l1


def _mse_decompose(self, target, reduction):
    _check_reduction(reduction)
    _pair_shape("mse_loss", self, target)
    _loss_dtype("mse_cpu", self, target)
    d = _sub_p(self, target)
    return _reduce_p(P.mul(d, d), reduction)


def _mse_backward(g, out, self, target, reduction):
    d = self - target
    gd = _unreduce(g, reduction, d.shape) * d * 2
    return gd, -gd


_decomposed("mse_loss(Tensor self, Tensor target, int reduction=1) -> Tensor",
            _mse_decompose, _mse_backward,
            "(self - target)^2, reduced (0 none, 1 mean, 2 sum).")


def _l1_decompose(self, target, reduction):
    _check_reduction(reduction)
    _pair_shape("l1_loss", self, target)
    if self.dtype is _C.bool and target.dtype is _C.bool:
        raise RuntimeError("Subtraction, the `-` operator, with two bool tensors is not "
                           "supported. Use the `^` or `logical_xor()` operator instead.")
    dt = M.result_type(self, target)
    if reduction == 1 and not dt.is_floating_point:
        raise RuntimeError(f"mean(): could not infer output dtype. Input dtype must be either "
                           f"a floating point or complex dtype. Got: {torch_type(dt)}")
    return _reduce_p(_abs_p(_sub_p(self, target)), reduction)


def _l1_backward(g, out, self, target, reduction):
    d = self - target
    gd = _unreduce(g, reduction, d.shape) * _sign_o(d)
    return gd, -gd


_decomposed("l1_loss(Tensor self, Tensor target, int reduction=1) -> Tensor",
            _l1_decompose, _l1_backward, "|self - target|, reduced.")


def _smooth_l1_decompose(self, target, reduction, beta):
    _check_reduction(reduction)
    _pair_shape("smooth_l1_loss", self, target)
    if beta < 0:
        raise RuntimeError("smooth_l1_loss does not support negative values for beta.")
    _loss_dtype("smooth_l1_cpu", self, target)
    ad = _abs_p(_sub_p(self, target))
    if beta == 0:
        return _reduce_p(ad, reduction)
    quad = P.mul(P.mul(ad, ad), 0.5 / beta)
    return _reduce_p(P.where(P.lt(ad, beta), quad, P.add(ad, -0.5 * beta)), reduction)


def _smooth_l1_backward(g, out, self, target, reduction, beta):
    d = self - target
    sg = _sign_o(d)
    if beta > 0:
        sg = O.where((d * sg) < beta, d * (1.0 / beta), sg)
    gd = _unreduce(g, reduction, d.shape) * sg
    return gd, -gd, None, None


_decomposed("smooth_l1_loss(Tensor self, Tensor target, int reduction=1, float beta=1.) "
            "-> Tensor", _smooth_l1_decompose, _smooth_l1_backward,
            "0.5 d^2 / beta where |d| < beta, else |d| - 0.5 beta (d = self - target).")


def _huber_decompose(self, target, reduction, delta):
    _check_reduction(reduction)
    _pair_shape("huber_loss", self, target)
    if delta <= 0:
        raise RuntimeError("huber_loss does not support non-positive values for delta.")
    _loss_dtype("huber_cpu", self, target)
    ad = _abs_p(_sub_p(self, target))
    quad = P.mul(P.mul(ad, ad), 0.5)
    lin = P.mul(P.add(ad, -0.5 * delta), delta)
    return _reduce_p(P.where(P.lt(ad, delta), quad, lin), reduction)


def _huber_backward(g, out, self, target, reduction, delta):
    d = self - target
    sg = O.where((d * _sign_o(d)) < delta, d, _sign_o(d) * delta)
    gd = _unreduce(g, reduction, d.shape) * sg
    return gd, -gd, None, None


_decomposed("huber_loss(Tensor self, Tensor target, int reduction=1, float delta=1.) -> Tensor",
            _huber_decompose, _huber_backward,
            "0.5 d^2 where |d| < delta, else delta (|d| - 0.5 delta).")


# ------------------------------------------------------------------ binary cross entropy


def _bce_check(self, target, weight):
    if not self.dtype.is_floating_point:
        raise _not_implemented("binary_cross_entropy", self.dtype)
    if target.dtype is not self.dtype:
        raise RuntimeError(f"Found dtype {torch_type(target.dtype)} but expected "
                           f"{torch_type(self.dtype)}")
    if tuple(target.shape) != tuple(self.shape):
        raise RuntimeError(f"binary_cross_entropy(): expected target of the input's shape "
                           f"{_shape(self)}, got {_shape(target)}")
    if weight is not None:
        shape = M.broadcast_shapes("binary_cross_entropy", tuple(weight.shape),
                                   tuple(self.shape))
        if shape != tuple(self.shape):
            raise RuntimeError(f"binary_cross_entropy(): weight of shape {_shape(weight)} does "
                               f"not broadcast to the input's shape {_shape(self)}")


def _bce_decompose(self, target, weight, reduction):
    _check_reduction(reduction)
    _bce_check(self, target, weight)
    if _has_data(self):
        a = self.detach().numpy()
        if not ((a >= 0) & (a <= 1)).all():
            raise RuntimeError("all elements of input should be between 0 and 1")
    x, t = _upcast(self), _upcast(target)
    logx = P.maximum(P.log(x), -100.0)
    log1mx = P.maximum(P.log(P.add(P.neg(x), 1.0)), -100.0)
    loss = P.neg(P.add(P.mul(t, logx), P.mul(P.add(P.neg(t), 1.0), log1mx)))
    if weight is not None:
        loss = P.mul(loss, _upcast(weight))
    out = _reduce_p(loss, reduction)
    return P._to_copy(out, dtype=self.dtype) if out.dtype is not self.dtype else out


def _bce_backward(g, out, self, target, weight, reduction):
    x, t, gc = _as_cdt(self), _as_cdt(target), _as_cdt(g)
    ge = _unreduce(gc, reduction, x.shape)
    if weight is not None:
        ge = ge * _as_cdt(weight)
    gx = ge * (x - t) / O.maximum((1 - x) * x, 1e-12)
    gt = None
    if target.requires_grad:
        gt = (ge * (O.maximum((1 - x).log(), -100.0) - O.maximum(x.log(), -100.0))) \
            .to(target.dtype)
    return gx.to(self.dtype), gt, None, None


_decomposed("binary_cross_entropy(Tensor self, Tensor target, Tensor? weight=None, "
            "int reduction=1) -> Tensor", _bce_decompose, _bce_backward,
            "-w (t log x + (1 - t) log(1 - x)) with the logs clamped at -100, reduced.")


def _softplus_neg_p(x):
    """log(1 + exp(-x)) computed stably: max(-x, 0) + log(exp(-max) + exp(-x - max))."""
    m = P.maximum(P.neg(x), 0.0)
    return P.add(P.log(P.add(P.exp(P.neg(m)), P.exp(P.add(P.neg(x), P.neg(m))))), m)


def _softplus_neg_o(x):
    m = O.maximum(-x, 0.0)
    return ((-m).exp() + (-x - m).exp()).log() + m


def _bce_logits_decompose(self, target, weight, pos_weight, reduction):
    _check_reduction(reduction)
    dt = M.result_type(self, target)
    if not self.dtype.is_floating_point:        # PyTorch's log_sigmoid of the logits
        raise _not_implemented("log_sigmoid_cpu", self.dtype)
    M.broadcast_shapes("binary_cross_entropy_with_logits", tuple(self.shape),
                       tuple(target.shape))
    # computed in the result's dtype (integer logits too: PyTorch promotes them first)
    x = _upcast(self if self.dtype is dt else P._to_copy(self, dtype=dt))
    t = _upcast(target if target.dtype is dt else P._to_copy(target, dtype=dt))
    sp = _softplus_neg_p(x)
    if pos_weight is not None:
        lw = P.add(P.mul(P.add(_upcast(pos_weight), -1.0), t), 1.0)
        sp = P.mul(lw, sp)
    loss = P.add(P.mul(P.add(P.neg(t), 1.0), x), sp)
    if weight is not None:
        loss = P.mul(loss, _upcast(weight))
    out = _reduce_p(loss, reduction)
    return P._to_copy(out, dtype=dt) if out.dtype is not dt else out


def _bce_logits_backward(g, out, self, target, weight, pos_weight, reduction):
    dt = M.result_type(self, target)
    x, t, gc = _as_cdt(self.to(dt)), _as_cdt(target.to(dt)), _as_cdt(g)
    shape = M.broadcast_shapes("binary_cross_entropy_with_logits", tuple(self.shape),
                               tuple(target.shape))
    ge = _unreduce(gc, reduction, shape)
    if weight is not None:
        ge = ge * _as_cdt(weight)
    sig_neg = (-x).sigmoid()
    lw = (_as_cdt(pos_weight) - 1) * t + 1 if pos_weight is not None else None
    gx = ge * ((1 - t) - (lw * sig_neg if lw is not None else sig_neg))
    gt = gpw = gw = None
    if target.requires_grad:
        gt = ge * (-x + ((_as_cdt(pos_weight) - 1) * _softplus_neg_o(x)
                         if pos_weight is not None else 0))
        gt = gt.to(target.dtype)
    if pos_weight is not None and pos_weight.requires_grad:
        gpw = (ge * t * _softplus_neg_o(x)).to(pos_weight.dtype)
    if weight is not None and weight.requires_grad:
        sp = _softplus_neg_o(x)
        loss = (1 - t) * x + (lw * sp if lw is not None else sp)
        gw = (_unreduce(gc, reduction, shape) * loss).to(weight.dtype)
    return gx.to(self.dtype), gt, gw, gpw, None


_decomposed("binary_cross_entropy_with_logits(Tensor self, Tensor target, Tensor? weight=None, "
            "Tensor? pos_weight=None, int reduction=1) -> Tensor", _bce_logits_decompose,
            _bce_logits_backward,
            "(1 - t) x + (1 + (pos_weight - 1) t) log(1 + exp(-x)), weighted and reduced "
            "(stable for large |x|).")


# ------------------------------------------------------------------ kl_div


def _kl_decompose(self, target, reduction, log_target):
    _check_reduction(reduction)
    if not self.dtype.is_floating_point or not target.dtype.is_floating_point:
        raise RuntimeError("kl_div: Integral inputs not supported.")
    M.broadcast_shapes("kl_div", tuple(self.shape), tuple(target.shape))
    if log_target:
        loss = P.mul(P.exp(target), _sub_p(target, self))
    else:
        xlogy = P.where(P.eq(target, 0), 0.0, P.mul(target, P.log(target)))
        loss = _sub_p(xlogy, P.mul(target, self))
    return _reduce_p(loss, reduction)


def _kl_backward(g, out, self, target, reduction, log_target):
    shape = M.broadcast_shapes("kl_div", tuple(self.shape), tuple(target.shape))
    ge = _unreduce(g, reduction, shape)
    if log_target:
        et = target.exp()
        gx = -ge * et
        gt = ge * et * (target - self + 1) if target.requires_grad else None
    else:
        gx = -ge * target
        gt = ge * (O.where(target == 0, 0.0, target.log() + 1) - self) \
            if target.requires_grad else None
    return gx, gt, None, None


_decomposed("kl_div(Tensor self, Tensor target, int reduction=1, *, bool log_target=False) "
            "-> Tensor", _kl_decompose, _kl_backward,
            "target (log target - self) pointwise (self holds log-probabilities), reduced.")


# ------------------------------------------------------------------ nll_loss, cross_entropy


def _log_softmax_p(x, dim):
    m = P.amax(x, [dim], True)
    z = P.add(x, P.neg(m))
    return P.add(z, P.neg(P.log(P.sum(P.exp(z), [dim], True))))


def _log_softmax_o(x, dim):
    z = x - x.amax(dim, keepdim=True).detach()
    return z - z.exp().sum(dim, keepdim=True).log()


def _class_targets_check(name, self, target, weight, kernel):
    """Shape, dtype and weight checks of nll_loss / cross_entropy with class indices;
    returns the class dim."""
    if target.dtype not in (_C.int64, _C.uint8):
        raise RuntimeError(f"expected target dtype to be Long or Byte, but got "
                           f"{torch_type(target.dtype)}")
    if self.ndim == 0:
        raise RuntimeError(f"{name}(): input tensor should be at least 1D")
    cd = 1 if self.ndim >= 2 else 0
    if self.ndim == 1:
        if target.ndim != 0:
            raise RuntimeError("0D or 1D target tensor expected, multi-target not supported")
    else:
        if target.ndim == 0 or (target.ndim >= 1 and self.shape[0] != target.shape[0] and
                                self.ndim == target.ndim + 1):
            if target.ndim == 0:
                raise RuntimeError("0D or 1D target tensor expected, multi-target not "
                                   "supported")
            raise ValueError(f"Expected input batch_size ({self.shape[0]}) to match target "
                             f"batch_size ({target.shape[0]}).")
        if self.ndim == 2 and target.ndim != 1:
            if target.ndim == 2 and target.shape[0] != self.shape[0]:
                raise ValueError(f"Expected input batch_size ({self.shape[0]}) to match "
                                 f"target batch_size ({target.shape[0]}).")
            raise RuntimeError("0D or 1D target tensor expected, multi-target not supported")
        if self.ndim > 2:
            if target.ndim == 1:
                raise RuntimeError(f"only batches of spatial targets supported ("
                                   f"{self.ndim - 1}D tensors) but got targets of dimension: 1")
            want = [self.shape[0]] + list(self.shape[2:])
            if list(target.shape) != want:
                raise RuntimeError(f"Expected target size {want}, got {_shape(target)}")
    C = self.shape[cd]
    if weight is not None:
        if weight.numel() != C:
            raise RuntimeError(f"weight tensor should be defined either for all {C} classes "
                               f"or no classes but got weight tensor of shape: "
                               f"{_shape(weight)}")
        if weight.dtype is not self.dtype:
            raise RuntimeError(f"expected scalar type {torch_type(self.dtype)} but found "
                               f"{torch_type(weight.dtype)}")
    _float_or_raise(kernel, self)
    return cd


def _check_target_values(target, C, ignore_index):
    """Class indices in [0, C) or ignore_index: checked on the values eagerly, and by an
    op in the graph when traced (_check_targets_p)."""
    if not _has_data(target):
        t = P._to_copy(target, dtype=_C.int64) if target.dtype is not _C.int64 else target
        _check_targets_p(t, C, ignore_index)
        return
    a = target.detach().numpy().astype("int64")
    bad = a[(a != ignore_index) & ((a < 0) | (a >= C))]
    if bad.size:
        raise IndexError(f"Target {int(bad.reshape(-1)[0])} is out of bounds.")


def _class_view(t, ndim, cd):
    shape = [1] * ndim
    shape[cd] = t.numel()
    return shape


def _check_targets_p(t, C, ignore_index):
    """An index of C elements at the targets (ignored ones at 0, negative ones past the
    end): it raises where a target is out of range, so a compiled graph raises where
    eager does (its frame then runs eagerly and the user gets eager's IndexError)."""
    if C == 0:
        return
    safe = P.where(P.eq(t, ignore_index), 0, t)
    safe = P.where(P.lt(safe, 0), C, safe)
    P.index(P.full([C], 0, dtype=_C.int8), (safe,))


def _target_coeffs_p(self, target, weight, ignore_index, cd, cdt, smoothing=0.0):
    """For class indices: the coefficients a (input's shape) with loss_n = -sum_c a logp,
    and the per-sample weights w_t (target's shape; their sum divides 'mean')."""
    C = self.shape[cd]
    t = P._to_copy(target, dtype=_C.int64) if target.dtype is not _C.int64 else target
    onehot = P.eq(P.view(t, list(t.shape[:cd]) + [1] + list(t.shape[cd:])),
                  P.view(P.arange(C), _class_view(P.arange(C), self.ndim, cd)))
    valid = P._to_copy(P.ne(t, ignore_index), dtype=cdt)
    oh = P._to_copy(onehot, dtype=cdt)
    wv = None
    if weight is not None:
        wv = P.view(P._to_copy(weight, dtype=cdt) if weight.dtype is not cdt else weight,
                    _class_view(weight, self.ndim, cd))
        oh_w = P.mul(oh, wv)
    else:
        oh_w = oh
    w_t = P.mul(P.sum(oh_w, [cd]), valid)
    vcol = P.view(valid, list(valid.shape[:cd]) + [1] + list(valid.shape[cd:]))
    a = P.mul(oh_w, vcol)
    if smoothing > 0:
        smooth = P.mul(vcol, wv if wv is not None else 1.0)
        a = P.add(P.mul(a, 1.0 - smoothing), P.mul(P.expand(smooth, list(self.shape)),
                                                   smoothing / C))
    return a, w_t


def _weighted_reduce_p(loss, w_t, reduction):
    if reduction == 0:
        return loss
    s = P.sum(loss)
    if reduction == 2:
        return s
    return P.mul(s, P.reciprocal(P.sum(w_t)))


def _nll_decompose(self, target, weight, reduction, ignore_index):
    _check_reduction(reduction)
    cd = _class_targets_check("nll_loss", self, target, weight, "nll_loss_out_frame")
    _check_target_values(target, self.shape[cd], ignore_index)
    x = _upcast(self)
    a, w_t = _target_coeffs_p(self, target, weight, ignore_index, cd, x.dtype)
    loss = P.neg(P.sum(P.mul(a, x), [cd]))
    out = _weighted_reduce_p(loss, w_t, reduction)
    return P._to_copy(out, dtype=self.dtype) if out.dtype is not self.dtype else out


def _grad_scale(g, reduction, w_t, shape):
    """Per-sample gradient scale (target's shape) from the reduced loss's gradient."""
    if reduction == 0:
        return g
    if reduction == 1:
        g = g / w_t.sum()
    return g.expand(list(shape))


def _nll_backward(g, out, self, target, weight, reduction, ignore_index):
    cd = 1 if self.ndim >= 2 else 0
    a, w_t = _target_coeffs_p(self, target, weight, ignore_index, cd, _as_cdt(self).dtype)
    gs = _grad_scale(_as_cdt(g), reduction, w_t, target.shape).unsqueeze(cd)
    return (-(a * gs)).to(self.dtype), None, None, None, None


_decomposed("nll_loss(Tensor self, Tensor target, Tensor? weight=None, int reduction=1, "
            "SymInt ignore_index=-100) -> Tensor", _nll_decompose, _nll_backward,
            "-w[t] self[n, t] per sample (class dim 1, or 0 for an unbatched input; extra "
            "spatial dims allowed); 'mean' divides by the weights' sum.")


def _ce_is_prob(self, target):
    return tuple(target.shape) == tuple(self.shape) and self.ndim >= 1


def _ce_coeffs(self, target, weight, ignore_index, label_smoothing, cd, cdt, prob):
    """(a, denominator-weights or None) for cross_entropy: loss_n = -sum_c a logp."""
    C = self.shape[cd]
    if prob:
        t = P._to_copy(target, dtype=cdt) if target.dtype is not cdt else target
        if label_smoothing > 0:
            t = P.add(P.mul(t, 1.0 - label_smoothing), label_smoothing / C)
        if weight is not None:
            t = P.mul(t, P.view(P._to_copy(weight, dtype=cdt), _class_view(weight, self.ndim,
                                                                            cd)))
        return t, None
    return _target_coeffs_p(self, target, weight, ignore_index, cd, cdt, label_smoothing)


def _ce_check(self, target, weight, ignore_index, label_smoothing):
    if not 0.0 <= label_smoothing <= 1.0:
        raise RuntimeError(f"label_smoothing must be between 0.0 and 1.0. Got: "
                           f"{label_smoothing}")
    if self.ndim == 0:
        raise RuntimeError("cross_entropy(): input tensor should be at least 1D")
    cd = 1 if self.ndim >= 2 else 0
    prob = _ce_is_prob(self, target)
    if prob:
        if not target.dtype.is_floating_point:
            raise RuntimeError(f"Expected floating point type for target with class "
                               f"probabilities, got {torch_type(target.dtype)}")
        if ignore_index != -100:
            raise RuntimeError("ignore_index is not supported for floating point target")
        if weight is not None and weight.numel() != self.shape[cd]:
            raise RuntimeError(f"weight tensor should be defined either for all "
                               f"{self.shape[cd]} classes or no classes but got weight tensor "
                               f"of shape: {_shape(weight)}")
        _float_or_raise("log_softmax_lastdim_kernel_impl", self)
    else:
        _class_targets_check("cross_entropy", self, target, weight,
                             "log_softmax_lastdim_kernel_impl")
        _check_target_values(target, self.shape[cd], ignore_index)
    return cd, prob


def _ce_decompose(self, target, weight, reduction, ignore_index, label_smoothing):
    _check_reduction(reduction)
    cd, prob = _ce_check(self, target, weight, ignore_index, label_smoothing)
    rdt = M.result_type(self, target) if prob else self.dtype
    cdt = _compute_dtype(rdt)
    x = P._to_copy(self, dtype=cdt) if self.dtype is not cdt else self
    logp = _log_softmax_p(x, cd)
    a, w_t = _ce_coeffs(self, target, weight, ignore_index, label_smoothing, cd, cdt, prob)
    loss = P.neg(P.sum(P.mul(a, logp), [cd]))
    if prob:
        if reduction == 1:
            n = self.numel() // self.shape[cd] if self.shape[cd] else 0
            out = P.mul(P.sum(loss), 1.0 / n if n else math.nan)
        else:
            out = _reduce_p(loss, reduction)
    else:
        out = _weighted_reduce_p(loss, w_t, reduction)
    return P._to_copy(out, dtype=rdt) if out.dtype is not rdt else out


def _ce_backward(g, out, self, target, weight, reduction, ignore_index, label_smoothing):
    if weight is None and label_smoothing == 0.0 and not target.dtype.is_floating_point:
        # (N, C) logits and class indices: softmax minus one-hot in one C pass (nn_grad.c)
        fused = _C._grad_cross_entropy(g, self, target, reduction, ignore_index)
        if fused is not None:
            return fused, None, None, None, None, None
    cd = 1 if self.ndim >= 2 else 0
    prob = _ce_is_prob(self, target)
    cdt = _compute_dtype(out.dtype)
    x = self.to(cdt)
    a, w_t = _ce_coeffs(self, target, weight, ignore_index, label_smoothing, cd, cdt, prob)
    gc = g.to(cdt)
    if prob:
        shape = list(self.shape[:cd]) + list(self.shape[cd + 1:])
        if reduction == 0:
            gs = gc
        else:
            n = self.numel() // self.shape[cd] if self.shape[cd] else 0
            gs = (gc * (1.0 / n if n else math.nan) if reduction == 1 else gc).expand(shape)
    else:
        gs = _grad_scale(gc, reduction, w_t, target.shape)
    gs = gs.unsqueeze(cd)
    logp = _log_softmax_o(x, cd)
    p = logp.exp()
    gx = gs * (p * a.sum(cd, keepdim=True) - a)
    gt = None
    if prob and target.requires_grad:
        coef = 1.0 - label_smoothing
        wv = weight.to(cdt).reshape(_class_view(weight, self.ndim, cd)) if weight is not None \
            else 1.0
        gt = (-gs * logp * wv * coef).to(target.dtype)
    return gx.to(self.dtype), gt, None, None, None, None


_decomposed("cross_entropy_loss(Tensor self, Tensor target, Tensor? weight=None, "
            "int reduction=1, SymInt ignore_index=-100, float label_smoothing=0.) -> Tensor",
            _ce_decompose, _ce_backward,
            "log_softmax over the class dim, then nll (class indices, ignore_index, weight) or "
            "-sum(target * logp) (class probabilities); label smoothing as PyTorch.",
            kernel="cross_entropy_loss")


# ================================================================== [eager-2] 3-d and more
#
# 3-d convolution and pooling, bicubic/trilinear/nearest-exact resampling, pixel and
# channel shuffle, instance norm. The 3-d convolutions are composites over the 2-d
# convolution prim (the depth taps become channels); pooling and resampling extend the
# separable matrices above to a depth axis; max pooling gathers its windows with the
# index prim.


# ------------------------------------------------------------------ conv3d (composites)


def _conv3d_checks(x, weight, bias, s, p, d, groups, transposed, op_=(0, 0, 0)):
    """PyTorch's checks of a 3-d convolution (shapes, channels, bias, kernel size) on a
    batched input, with its messages; returns the output's spatial size."""
    if weight.ndim != 5:
        raise RuntimeError(f"weight should have at least three dimensions, but got weight of "
                           f"size {_shape(weight)}" if weight.ndim < 3 else
                           f"Expected {weight.ndim}-dimensional input for {weight.ndim}-"
                           f"dimensional weight {_shape(weight)}, but got 5-dimensional input "
                           f"of size {_shape(x)} instead")
    return _conv_output(x, weight, bias, s, p, d, op_, groups, transposed, d)[1]


def _depth_taps(k, dil, stride, n_out):
    """(k, n_out) depth positions read by tap i at output o: i * dil + o * stride."""
    return O.arange(k).view(k, 1) * dil + O.arange(n_out).view(1, n_out) * stride


def _conv3d(input, weight, bias, stride, padding, dilation, groups):
    x, batched = _batched("conv3d", 3, input)
    x, s, p, d = _conv_args(3, x, weight, stride, padding, dilation)
    od, oh, ow = _conv3d_checks(x, weight, bias, s, p, d, groups, False)
    N, C, D = x.shape[0], x.shape[1], x.shape[2]
    Co, cig, KD = weight.shape[0], weight.shape[1], weight.shape[2]
    if p[0]:
        x = O.pad(x, [0, 0, 0, 0, p[0], p[0]])
    # the depth taps of every output depth as channels: (N * OD, C * KD, H, W)
    cols = O.index(x, (None, None, _depth_taps(KD, d[0], s[0], od)))   # N, C, KD, OD, H, W
    cols = cols.permute(0, 3, 1, 2, 4, 5).reshape(N * od, C * KD, x.shape[3], x.shape[4])
    w2 = weight.reshape(Co, cig * KD, weight.shape[3], weight.shape[4])
    y = O.convolution(cols, w2, bias, [s[1], s[2]], [p[1], p[2]], [d[1], d[2]], False, [0, 0],
                      groups)
    out = y.reshape(N, od, Co, oh, ow).permute(0, 2, 1, 3, 4).contiguous()
    return out if batched else out.squeeze(0)


op("conv3d(Tensor input, Tensor weight, Tensor? bias=None, int[3] stride=[1, 1, 1], "
   "int[3] padding=[0, 0, 0], int[3] dilation=[1, 1, 1], SymInt groups=1) -> Tensor",
   CUSTOM, "python", composite=True, method=False, impl=_conv3d,
   doc="3-d convolution over a batched or unbatched input: the depth taps of each output "
       "depth gathered as channels (index), then one 2-d convolution.")
op("conv3d.padding(Tensor input, Tensor weight, Tensor? bias=None, int[3] stride=[1, 1, 1], "
   "str padding=\"valid\", int[3] dilation=[1, 1, 1], SymInt groups=1) -> Tensor",
   CUSTOM, "python", composite=True, method=False, impl=_conv3d,
   doc="conv3d with padding='valid' or 'same'.")


def _conv_transpose3d(input, weight, bias, stride, padding, output_padding, groups, dilation):
    x, batched = _batched("conv_transpose3d", 3, input)
    s = _expand_param(stride, 3, "stride")
    p = _expand_param(padding, 3, "padding")
    d = _expand_param(dilation, 3, "dilation")
    op_ = _expand_param(output_padding, 3, "output_padding")
    od, oh, ow = _conv3d_checks(x, weight, bias, s, p, d, groups, True, op_)
    N, Ci, D, H, W = x.shape
    cog, KD = weight.shape[1], weight.shape[2]
    Co = cog * groups
    # each input depth through a 2-d transposed convolution whose channels are
    # (output channel, depth tap); the taps are then added at their output depths
    x2 = x.permute(0, 2, 1, 3, 4).reshape(N * D, Ci, H, W)
    w2 = weight.reshape(Ci, cog * KD, weight.shape[3], weight.shape[4])
    y = O.convolution(x2, w2, None, [s[1], s[2]], [p[1], p[2]], [d[1], d[2]], True,
                      [op_[1], op_[2]], groups)                      # N*D, Co*KD, OH, OW
    y = y.reshape(N, D, Co, KD, oh, ow).permute(0, 2, 1, 3, 4, 5)    # N, Co, D, KD, OH, OW
    full = (D - 1) * s[0] + d[0] * (KD - 1) + 1 + op_[0]
    taps = O.arange(D).view(D, 1) * s[0] + O.arange(KD).view(1, KD) * d[0]
    out = O.zeros((N, Co, full, oh, ow), dtype=y.dtype).index_put((None, None, taps), y,
                                                                  accumulate=True)
    if p[0] or full != od:
        out = out.slice(2, p[0], p[0] + od)
    out = out + bias.view(1, Co, 1, 1, 1) if bias is not None else out.contiguous()
    return out if batched else out.squeeze(0)


op("conv_transpose3d.input(Tensor input, Tensor weight, Tensor? bias=None, "
   "int[3] stride=[1, 1, 1], int[3] padding=[0, 0, 0], int[3] output_padding=[0, 0, 0], "
   "SymInt groups=1, int[3] dilation=[1, 1, 1]) -> Tensor",
   CUSTOM, "python", composite=True, method=False, impl=_conv_transpose3d,
   doc="3-d transposed convolution: a 2-d transposed convolution per input depth, its "
       "depth taps added at their output depths (index_put with accumulate).")


# ------------------------------------------------------------------ 3-d max pooling


def _max_pool3d_geometry(self, kernel_size, stride, padding, dilation, ceil_mode):
    k = _pool_ints(kernel_size, 3, "kernel_size", "max_pool3d")
    s = _pool_ints(stride, 3, "stride", "max_pool3d", True, k)
    p = _pool_ints(padding, 3, "padding", "max_pool3d")
    d = _pool_ints(dilation, 3, "dilation", "max_pool3d",
                   msg="max_pool3d: dilation must be either a single int, or a tuple of three "
                       "ints")
    if self.ndim not in (4, 5):
        raise RuntimeError("non-empty 4D or 5D (batch mode) tensor expected for input")
    sp = tuple(self.shape[-3:])
    out = tuple(_pool_out(sp[i], k[i], p[i], s[i], d[i], ceil_mode) for i in range(3))
    _pool3d_shape_check(self, k, s, p, d, sp, out, "max_pool3d")
    if self.dtype is _C.bool:
        raise _not_implemented("max_pool3d", self.dtype)
    return k, s, p, d, out


def _pool3d_shape_check(self, k, s, p, d, sp, out, name, check_input_size=False):
    if min(k) <= 0:
        raise RuntimeError(f"kernel size should be greater than zero, but got kT: {k[0]} "
                           f"kH: {k[1]} kW: {k[2]}")
    if min(s) <= 0:
        raise RuntimeError(f"stride should be greater than zero, but got dT: {s[0]} dH: {s[1]} "
                           f"dW: {s[2]}")
    if min(d) <= 0:
        raise RuntimeError(f"dilation should be greater than zero, but got dilationT: {d[0]} "
                           f"dilationH: {d[1]} dilationW: {d[2]}")
    for i in range(self.ndim):
        if not (self.ndim == 5 and i == 0) and self.shape[i] <= 0:
            raise RuntimeError(f"{name}: Expected input's non-batch dimensions to have positive "
                               f"length, but input has a shape of {_shape(self)} and non-batch "
                               f"dimension {self.shape[i]} has length zero!")
    if check_input_size and any(sp[i] < k[i] for i in range(3)):
        raise RuntimeError(f"input image (T: {sp[0]} H: {sp[1]} W: {sp[2]}) smaller than kernel "
                           f"size (kT: {k[0]} kH: {k[1]} kW: {k[2]})")
    if any(k[i] / 2 < p[i] for i in range(3)):
        raise RuntimeError(f"pad should be smaller than or equal to half of kernel size, but got "
                           f"kT: {k[0]} kW: {k[2]} kH: {k[1]} padT: {p[0]} padW: {p[2]} padH: "
                           f"{p[1]}")
    if min(out) < 1:
        c = self.shape[-4]
        raise RuntimeError(f"Given input size: ({c}x{sp[0]}x{sp[1]}x{sp[2]}). Calculated output "
                           f"size: ({c}x{out[0]}x{out[1]}x{out[2]}). Output size is too small")


def _window_positions(pos, n):
    """(k, o) window positions clamped into [0, n), and whether each was in it."""
    valid = P.bitwise_and(P.le(0, pos), P.lt(pos, n))
    return P.where(valid, pos, 0), valid


def _max_over_windows(x, axes, name):
    """The maxima of x's last len(axes) dims over windows and their flat indices: axes[i]
    is (clamped positions (k, o), valid (k, o)) for dim i. PyTorch's rule: the first
    maximum in window order, but a NaN wins (the last NaN)."""
    nax = len(axes)
    lead = tuple(x.shape[:x.ndim - nax])
    sizes = tuple(x.shape[x.ndim - nax:])
    idx, valid = [], None
    for i, (pos, ok) in enumerate(axes):
        k, o = pos.shape
        shape = [1] * (2 * nax)
        shape[2 * i], shape[2 * i + 1] = k, o
        idx.append(P.view(pos, shape))
        v = P.view(ok, shape)
        valid = v if valid is None else P.bitwise_and(valid, v)
    win = P.index(x, (None,) * len(lead) + tuple(idx))          # lead, k0, o0, k1, o1, ...
    nl = len(lead)
    perm = list(range(nl)) + [nl + 2 * i + 1 for i in range(nax)] + \
        [nl + 2 * i for i in range(nax)]
    outs = [pos.shape[1] for pos, _ in axes]
    ks = [pos.shape[0] for pos, _ in axes]
    K = math.prod(ks)
    win = _reshape_p(P.permute(win, perm), list(lead) + outs + [K])
    valid = _reshape_p(P.permute(valid, [2 * i + 1 for i in range(nax)] +
                                 [2 * i for i in range(nax)]), outs + [K])
    # flat input index of every window position
    flat = None
    for i, (pos, _) in enumerate(axes):
        shape = [1] * (2 * nax)
        shape[2 * i], shape[2 * i + 1] = pos.shape
        term = P.view(pos, shape)
        flat = term if flat is None else P.add(P.mul(flat, sizes[i]), term)
    flat = _reshape_p(P.permute(P.expand(flat, [s for pos, _ in axes for s in pos.shape]),
                                [2 * i + 1 for i in range(nax)] + [2 * i for i in range(nax)]),
                      outs + [K])
    arange_k = P.arange(K)
    if x.dtype.is_floating_point:
        notnan = P.eq(win, win)
        usable = P.bitwise_and(valid, notnan)
        key = P.where(usable, win, -math.inf)
    else:
        lowest = -(1 << (8 * _itemsize(x.dtype) - 1)) if x.dtype is not _C.uint8 else 0
        key = P.where(valid, win, P.full([], lowest, dtype=x.dtype))
    best = P.amax(key, [-1], True)
    cand = P.bitwise_and(valid, P.eq(key, best))
    if x.dtype.is_floating_point:
        cand = P.bitwise_and(cand, notnan)
    first = P.argmax(P._to_copy(cand, dtype=_C.uint8), -1, True)
    local = first
    value = P.view(best, list(best.shape[:-1]))
    if x.dtype.is_floating_point:
        nan_at = P.bitwise_and(valid, P.ne(win, win))
        last_nan = P.amax(P.where(nan_at, arange_k, -1), [-1], True)
        has_nan = P.le(0, last_nan)
        local = P.where(has_nan, last_nan, first)
        value = P.where(P.view(has_nan, list(value.shape)), math.nan, value)
    pick = P.eq(arange_k, local)
    index = P.sum(P.where(pick, flat, 0), [-1])
    return value, index


def _itemsize(dt):
    return {_C.int8: 1, _C.uint8: 1, _C.int16: 2, _C.int32: 4, _C.int64: 8}[dt]


def _pool_axis(n, k, s, p, d, o):
    starts = P.add(P.add(P.mul(_col(P.arange(k)), d), P.mul(_row(P.arange(o)), s)), -p)
    return _window_positions(starts, n)


def _max_pool3d_decompose(self, kernel_size, stride, padding, dilation, ceil_mode):
    k, s, p, d, out = _max_pool3d_geometry(self, kernel_size, stride, padding, dilation,
                                           ceil_mode)
    sp = tuple(self.shape[-3:])
    axes = [_pool_axis(sp[i], k[i], s[i], p[i], d[i], out[i]) for i in range(3)]
    return _max_over_windows(self, axes, "max_pool3d")


def _scatter_planes(g, self, indices, nsp):
    """A max pool's input gradient: grad_output added at the flat per-plane indices of
    the maxima (scatter_add, so it is differentiable again)."""
    lead = tuple(self.shape[:self.ndim - nsp])
    flat = lead + (math.prod(g.shape[len(lead):]),)
    out = O.zeros(lead + (math.prod(self.shape[self.ndim - nsp:]),), dtype=g.dtype)
    return out.scatter_add(-1, indices.reshape(flat), g.reshape(flat)).reshape(tuple(self.shape))


def _max_pool3d_backward(grads, outs, self, kernel_size, stride, padding, dilation, ceil_mode):
    g = grads[0]
    if g is None:
        return (None,)
    return (_scatter_planes(g, self, outs[1], 3),)


_decomposed("max_pool3d_with_indices(Tensor self, int[3] kernel_size, int[3] stride=[], "
            "int[3] padding=0, int[3] dilation=1, bool ceil_mode=False) -> (Tensor, Tensor)",
            _max_pool3d_decompose, _max_pool3d_backward,
            "3-d max pooling: the maxima and their flat indices (d * H * W + h * W + w) in "
            "each input volume (the first maximum of a window; NaN wins). The windows are "
            "gathered with the index prim.")


def _max_pool3d(self, kernel_size, stride, padding, dilation, ceil_mode):
    return O.max_pool3d_with_indices(self, kernel_size, stride, padding, dilation,
                                     ceil_mode)[0]


op("max_pool3d(Tensor self, int[3] kernel_size, int[3] stride=[], int[3] padding=0, "
   "int[3] dilation=1, bool ceil_mode=False) -> Tensor", CUSTOM, "python", composite=True,
   method=False, impl=_max_pool3d, doc="3-d max pooling (max_pool3d_with_indices' values).")


# ------------------------------------------------------------------ adaptive max pooling


def _adaptive_window_axis(n_in, n_out):
    """Output o covers [floor(o*I/O), ceil((o+1)*I/O)): positions (kmax, o) and validity."""
    kmax = max(-((-(o + 1) * n_in) // n_out) - (o * n_in) // n_out for o in range(n_out)) \
        if n_out else 1
    o = _row(P.arange(n_out))
    start = P.floor_divide(P.mul(o, n_in), n_out)
    end = P.neg(P.floor_divide(P.mul(P.add(o, 1), -n_in), n_out))
    pos = P.add(start, _col(P.arange(kmax)))
    valid = P.lt(pos, end)
    return P.where(valid, pos, 0), valid


def _adaptive_max_check(name, self, output_size, nsp):
    if len(output_size) != nsp:
        raise RuntimeError(f"{name}(): internal error: output_size.size() must be {nsp}")
    if self.ndim not in (nsp + 1, nsp + 2):
        raise RuntimeError(f"{name}(): Expected {nsp + 1}D or {nsp + 2}D tensor, but got: "
                           f"{_shape(self)}")
    for i in range(1 if self.ndim == nsp + 2 else 0, self.ndim):
        if self.shape[i] <= 0:
            raise RuntimeError(f"{name}(): Expected input to have non-zero size for non-batch "
                               f"dimensions, but input has sizes {_shape(self)} with dimension "
                               f"{i} being empty")
    _float_or_raise(name, self)


def _adaptive_max_decompose(nsp):
    name = f"adaptive_max_pool{nsp}d"

    def decompose(self, output_size):
        _adaptive_max_check(name, self, output_size, nsp)
        sp = tuple(self.shape[-nsp:])
        axes = [_adaptive_window_axis(sp[i], output_size[i]) for i in range(nsp)]
        return _max_over_windows(self, axes, name)
    return decompose


def _adaptive_max_backward(nsp):
    def backward(grads, outs, self, output_size):
        g = grads[0]
        return (None,) if g is None else (_scatter_planes(g, self, outs[1], nsp),)
    return backward


for _n in (2, 3):
    _decomposed(f"adaptive_max_pool{_n}d(Tensor self, int[{_n}] output_size) -> "
                "(Tensor, Tensor)", _adaptive_max_decompose(_n), _adaptive_max_backward(_n),
                f"{_n}-d adaptive max pooling: output cell o covers inputs "
                "[floor(o*I/O), ceil((o+1)*I/O)) per axis; the maxima and their flat indices "
                "per input plane (NaN wins).")


# ------------------------------------------------------------------ 3-d average pooling


def _along_depth(x, a):
    """a (out, in) applied to x's third-from-last dim."""
    if a is None:
        return x
    lead = list(x.shape[:-3])
    D, H, W = x.shape[-3:]
    y = P.matmul(a, _reshape_p(x, lead + [D, H * W]))
    return P.view(y, lead + [a.shape[0], H, W])


def _along_depth_backward(g, a):
    if a is None:
        return g
    lead = list(g.shape[:-3])
    D, H, W = g.shape[-3:]
    y = O.matmul(a.t(), g.reshape(lead + [D, H * W]))
    return y.reshape(lead + [a.shape[1], H, W])


def _resample_n(x, mats):
    """x resampled along its last 2 or 3 dims by mats (one per axis, None: left alone)."""
    if len(mats) == 3:
        return _resample(_along_depth(x, mats[0]), mats[1], mats[2])
    return _resample(x, *mats)


def _resample_n_backward(g, mats):
    if len(mats) == 3:
        return _along_depth_backward(_resample_backward(g, mats[1], mats[2]), mats[0])
    return _resample_backward(g, *mats)


def _avg_pool3d_params(self, kernel_size, stride, padding, ceil_mode, divisor_override):
    k = _pool_ints(kernel_size, 3, "kernel_size", "avg_pool3d",
                   msg="avg_pool3d: kernel_size must be a single int, or a tuple of three ints")
    s = _pool_ints(stride, 3, "stride", "avg_pool3d", True, k,
                   "avg_pool3d: stride must be omitted, a single int, or a tuple of three ints")
    p = _pool_ints(padding, 3, "padding", "avg_pool3d",
                   msg="avg_pool3d: padding must be a single int, or a tuple of three ints")
    if self.ndim not in (4, 5):
        raise RuntimeError("non-empty 4D or 5D (batch mode) tensor expected for input")
    if divisor_override is not None and divisor_override == 0:
        raise RuntimeError("divisor must be not zero")
    sp = tuple(self.shape[-3:])
    out = tuple(_pool_out(sp[i], k[i], p[i], s[i], 1, ceil_mode) for i in range(3))
    _pool3d_shape_check(self, k, s, p, (1, 1, 1), sp, out, "avg_pool3d", True)
    if not (self.dtype in (_C.float32, _C.float64) or self.dtype is _C.int64):
        raise _not_implemented("avg_pool3d_out_frame", self.dtype)
    return k, s, p, sp, out


_decomposed("avg_pool3d(Tensor self, int[3] kernel_size, int[3] stride=[], int[3] padding=0, "
            "bool ceil_mode=False, bool count_include_pad=True, int? divisor_override=None) "
            "-> Tensor", *_avg_pool(_avg_pool3d_params),
            "3-d average pooling (averaging matrices along depth, height and width; int64 "
            "divides truncating, as PyTorch's kernel).")


# ------------------------------------------------------------------ adaptive_avg_pool3d


_decomposed("adaptive_avg_pool3d(Tensor self, int[3] output_size) -> Tensor",
            *_adaptive_avg_pool(3),
            "3-d adaptive average pooling: output cell o averages inputs "
            "[floor(o*I/O), ceil((o+1)*I/O)) along each axis.")


# ------------------------------------------------------------------ resampling: 3-d, bicubic


def _upsample_check(name, self, output_size, nsp):
    if len(output_size) != nsp:
        raise RuntimeError(f"It is expected output_size equals to {nsp}, but got size "
                           f"{len(output_size)}")
    if self.ndim != nsp + 2:
        raise RuntimeError(f"It is expected input_size equals to {nsp + 2}, but got size "
                           f"{self.ndim}")
    sp = tuple(self.shape[2:])
    if min(sp) <= 0 or min(output_size) <= 0:
        names = ("D", "H", "W")[3 - nsp:]
        ins = ", ".join(f"{n}: {v}" for n, v in zip(names, sp))
        outs = ", ".join(f"{n}: {v}" for n, v in zip(names, output_size))
        raise RuntimeError(f"Input and output sizes should be greater than 0, but got input "
                           f"({ins}) output ({outs})")
    return sp


def _resample_op(self, mats, cdt):
    x = self if cdt is self.dtype else P._to_copy(self, dtype=cdt)
    out = _resample_n(x, mats)
    if out is x:
        out = P.clone(x, memory_format="contiguous_format")
    return out if cdt is self.dtype else P._to_copy(out, dtype=self.dtype)


def _resample_op_backward(g, mats):
    cdt = _compute_dtype(g.dtype)
    gc = g if cdt is g.dtype else g.to(cdt)
    r = _resample_n_backward(gc, mats)
    return r if cdt is g.dtype else r.to(g.dtype)


def _float_or_byte(name, self):
    if self.dtype is _C.bool or self.dtype in (_C.int8, _C.int16, _C.int32, _C.int64):
        raise _not_implemented(name, self.dtype)


def _nearest3d_mats(self, output_size, sd, sh, sw, exact=False):
    return _upsample_mats("upsample_nearest3d", _nearest_exact_axis if exact else
                          _nearest_axis, self, output_size, (sd, sh, sw),
                          kernel="_upsample_nearest_exact3d_out_frame" if exact else
                          "upsample_nearest3d_out_frame")


_decomposed("upsample_nearest3d(Tensor self, int[3] output_size, float? scales_d=None, "
            "float? scales_h=None, float? scales_w=None) -> Tensor",
            lambda self, output_size, sd, sh, sw: _resample_op(
                self, *_nearest3d_mats(self, output_size, sd, sh, sw)),
            lambda g, out, self, output_size, sd, sh, sw: (_resample_op_backward(
                g, _nearest3d_mats(self, output_size, sd, sh, sw)[0]),),
            "Nearest-neighbour resize of (N, C, D, H, W) to output_size (source index "
            "floor(o * scale) per axis).")


def _nearest_exact_axis(n_in, n_out, scale, dtype):
    """PyTorch's nearest-exact source index: min(floor((o + 0.5) * scale), I - 1), scale
    in float32 (1/scales or in/out)."""
    if n_out == n_in:
        return None
    scale = _f32(1.0 / scale) if scale is not None and scale > 0 else \
        _f32(_f32(n_in) / _f32(n_out))

    def build():
        v = _col(P.mul(P.add(P.arange(n_out, dtype=_C.float32), 0.5), scale))
        i_f = _row(P.arange(n_in, dtype=_C.float32))
        mask = P.bitwise_and(P.le(i_f, v), P.lt(v, P.add(i_f, 1)))
        last = P.bitwise_and(P.eq(_row(P.arange(n_in)), n_in - 1), P.le(float(n_in), v))
        return P._to_copy(P.bitwise_or(mask, last), dtype=dtype)
    return _cached(("nearest_exact", n_in, n_out, scale, dtype), build)


def _nearest_exact2d_mats(self, output_size, sh, sw):
    return _upsample_mats("_upsample_nearest_exact2d", _nearest_exact_axis, self, output_size,
                          (sh, sw), kernel="_upsample_nearest_exact2d_out_frame")


_decomposed("_upsample_nearest_exact2d(Tensor self, int[2] output_size, float? scales_h=None, "
            "float? scales_w=None) -> Tensor",
            lambda self, output_size, sh, sw: _resample_op(
                self, *_nearest_exact2d_mats(self, output_size, sh, sw)),
            lambda g, out, self, output_size, sh, sw: (_resample_op_backward(
                g, _nearest_exact2d_mats(self, output_size, sh, sw)[0]),),
            "Nearest-neighbour resize of (N, C, H, W) with PyTorch's 'nearest-exact' source "
            "index min(floor((o + 0.5) * scale), I - 1).")
_decomposed("_upsample_nearest_exact3d(Tensor self, int[3] output_size, float? scales_d=None, "
            "float? scales_h=None, float? scales_w=None) -> Tensor",
            lambda self, output_size, sd, sh, sw: _resample_op(
                self, *_nearest3d_mats(self, output_size, sd, sh, sw, True)),
            lambda g, out, self, output_size, sd, sh, sw: (_resample_op_backward(
                g, _nearest3d_mats(self, output_size, sd, sh, sw, True)[0]),),
            "Nearest-neighbour resize of (N, C, D, H, W) with the 'nearest-exact' source "
            "index.")


def _trilinear_mats(self, output_size, align_corners, sd, sh, sw):
    sp = _upsample_check("upsample_trilinear3d", self, output_size, 3)
    if not self.dtype.is_floating_point:
        raise _not_implemented("upsample_trilinear3d_channels_last", self.dtype)
    cdt = _C.float64 if self.dtype is _C.float64 else _C.float32
    return [_linear_axis(sp[i], output_size[i], align_corners, sc, cdt)
            for i, sc in enumerate((sd, sh, sw))], cdt


_decomposed("upsample_trilinear3d(Tensor self, int[3] output_size, bool align_corners, "
            "float? scales_d=None, float? scales_h=None, float? scales_w=None) -> Tensor",
            lambda self, output_size, ac, sd, sh, sw: _resample_op(
                self, *_trilinear_mats(self, output_size, ac, sd, sh, sw)),
            lambda g, out, self, output_size, ac, sd, sh, sw: (_resample_op_backward(
                g, _trilinear_mats(self, output_size, ac, sd, sh, sw)[0]),),
            "Trilinear resize of (N, C, D, H, W) to output_size (align_corners as PyTorch).")


def _cubic_axis(n_in, n_out, align_corners, scale, dtype):
    """PyTorch's bicubic weights along one axis (cubic convolution, A = -0.75): source
    index as area_pixel_compute_source_index with cubic=True (not clamped at 0), guarded
    to [.., I - 1]; taps i0 - 1 .. i0 + 2 clamped into [0, I - 1], their weights added."""
    import numpy as np
    cast = np.float64 if dtype is _C.float64 else np.float32
    if align_corners:
        sc = float(cast(n_in - 1) / cast(n_out - 1)) if n_out > 1 else 0.0
    elif scale is not None and scale > 0:
        sc = float(cast(1.0 / scale))
    else:
        sc = float(cast(n_in) / cast(n_out))
    A = -0.75

    def cc1(x):      # |x| <= 1
        return P.add(P.mul(P.mul(P.add(P.mul(x, A + 2), -(A + 3)), x), x), 1.0)

    def cc2(x):      # 1 < |x| < 2
        return P.add(P.mul(P.add(P.mul(P.add(P.mul(x, A), -5 * A), x), 8 * A), x), -4 * A)

    def build():
        o = P.arange(n_out, dtype=dtype)
        real = P.mul(o, sc) if align_corners else P.add(P.mul(P.add(o, 0.5), sc), -0.5)
        real = _col(real)
        i_f = _row(P.arange(-1, n_in, dtype=dtype))              # floor(real) >= -1
        m0 = P.bitwise_or(P.bitwise_and(P.le(i_f, real), P.lt(real, P.add(i_f, 1))),
                          P.bitwise_and(P.eq(i_f, n_in - 1), P.le(float(n_in), real)))
        i0 = P.sum(P.mul(P._to_copy(m0, dtype=dtype), i_f), [1], True)
        t = _minimum(P.maximum(P.add(real, P.neg(i0)), 0.0), 1.0)
        ws = (cc2(P.add(t, 1.0)), cc1(t), cc1(P.add(P.neg(t), 1.0)),
              cc2(P.add(P.neg(t), 2.0)))
        cols = _row(P.arange(n_in, dtype=dtype))
        mat = None
        for j, w in enumerate(ws):
            tap = _minimum(P.maximum(P.add(i0, j - 1), 0.0), float(n_in - 1))
            term = P.mul(P._to_copy(P.eq(cols, tap), dtype=dtype), w)
            mat = term if mat is None else P.add(mat, term)
        return mat
    return _cached(("cubic", n_in, n_out, align_corners, sc, dtype), build)


def _cubic_weights_np(n_in, n_out, align_corners, scale):
    """The bicubic matrix of one axis in NumPy float64 (as _cubic_axis builds it with
    prims): only its largest entry is read, for the uint8 kernel's precision."""
    import numpy as np
    A = -0.75
    if align_corners:
        sc = (n_in - 1) / (n_out - 1) if n_out > 1 else 0.0
    else:
        sc = 1.0 / scale if scale is not None and scale > 0 else n_in / n_out
    o = np.arange(n_out, dtype=np.float64)
    real = sc * o if align_corners else sc * (o + 0.5) - 0.5
    i0 = np.minimum(np.floor(real), n_in - 1)
    t = np.clip(real - i0, 0.0, 1.0)

    def cc1(x):
        return ((A + 2) * x - (A + 3)) * x * x + 1

    def cc2(x):
        return ((A * x - 5 * A) * x + 8 * A) * x - 4 * A
    mat = np.zeros((n_out, n_in))
    for j, w in enumerate((cc2(t + 1), cc1(t), cc1(1 - t), cc2(2 - t))):
        np.add.at(mat, (np.arange(n_out), np.clip(i0 - 1 + j, 0, n_in - 1).astype(np.int64)),
                  w)
    return mat


def _uint8_cubic_pass(y, n_in, n_out, align_corners, scale, rows):
    """One pass of PyTorch's uint8 bicubic kernel on float64 y holding uint8 values: the
    axis's bicubic matrix (float64) as int16 fixed point (rounded away from zero, the
    precision fixed by its largest entry), a rounding shift and a clamp to [0, 255]."""
    w_max = float(_cubic_weights_np(n_in, n_out, align_corners, scale).max())
    p = 0
    while p < 22 and int(0.5 + w_max * (1 << (p + 1))) < (1 << 15):
        p += 1
    a = P.mul(_cubic_axis(n_in, n_out, align_corners, scale, _C.float64), float(1 << p))
    q = P._to_copy(P._to_copy(P.add(a, P.where(P.lt(a, 0.0), -0.5, 0.5)), dtype=_C.int64),
                   dtype=_C.float64)
    y = P.matmul(q, y) if rows else P.matmul(y, P.permute(q, [1, 0]))
    y = P._to_copy(P.mul(P.add(y, float(1 << (p - 1))), 1.0 / (1 << p)), dtype=_C.int64)
    return P._to_copy(P.maximum(_minimum(y, 255), 0), dtype=_C.float64)


def _bicubic_decompose(self, output_size, align_corners, scales_h, scales_w):
    if self.dtype is _C.uint8:      # columns, then rows, each rounded to uint8
        sp = _upsample_check("upsample_bicubic2d", self, output_size, 2)
        y = P._to_copy(self, dtype=_C.float64)
        y = _uint8_cubic_pass(y, sp[1], output_size[1], align_corners, scales_w, False)
        y = _uint8_cubic_pass(y, sp[0], output_size[0], align_corners, scales_h, True)
        return P._to_copy(y, dtype=_C.uint8)
    return _resample_op(self, *_bicubic_mats(self, output_size, align_corners, scales_h,
                                             scales_w))


def _bicubic_mats(self, output_size, align_corners, sh, sw):
    return _upsample_mats("upsample_bicubic2d", lambda n_in, n_out, sc, dt: _cubic_axis(
        n_in, n_out, align_corners, sc, dt), self, output_size, (sh, sw))


_decomposed("upsample_bicubic2d(Tensor self, int[2] output_size, bool align_corners, "
            "float? scales_h=None, float? scales_w=None) -> Tensor",
            _bicubic_decompose,
            lambda g, out, self, output_size, ac, sh, sw: (_resample_op_backward(
                g, _bicubic_mats(self, output_size, ac, sh, sw)[0]),),
            "Bicubic resize of (N, C, H, W) to output_size: PyTorch's cubic convolution "
            "(A = -0.75) with border taps clamped, align_corners either way.")


# ------------------------------------------------------------------ pixel / channel shuffle


def _shuffle_out(x, shape):
    """A new contiguous tensor of x's values (x is a permuted view) in shape."""
    return O.clone(x, memory_format="contiguous_format").view(shape)


def _pixel_shuffle(self, upscale_factor):
    if self.ndim < 3:
        raise RuntimeError(f"pixel_shuffle expects input to have at least 3 dimensions, but got "
                           f"input with {self.ndim} dimension(s)")
    r = upscale_factor
    if r <= 0:
        raise RuntimeError(f"pixel_shuffle expects a positive upscale_factor, but got {r}")
    c, h, w = self.shape[-3:]
    if c % (r * r):
        raise RuntimeError(f"pixel_shuffle expects its input's 'channel' dimension to be "
                           f"divisible by the square of upscale_factor, but input.size(-3)={c} "
                           f"is not divisible by {r * r}")
    lead = tuple(self.shape[:-3])
    oc = c // (r * r)
    n = len(lead)
    x = self.reshape(lead + (oc, r, r, h, w))
    x = x.permute(list(range(n)) + [n, n + 3, n + 1, n + 4, n + 2])
    return _shuffle_out(x, lead + (oc, h * r, w * r))


def _pixel_unshuffle(self, downscale_factor):
    if self.ndim < 3:
        raise RuntimeError(f"pixel_unshuffle expects input to have at least 3 dimensions, but "
                           f"got input with {self.ndim} dimension(s)")
    r = downscale_factor
    if r <= 0:
        raise RuntimeError(f"pixel_unshuffle expects a positive downscale_factor, but got {r}")
    c, h, w = self.shape[-3:]
    if h % r:
        raise RuntimeError(f"pixel_unshuffle expects height to be divisible by downscale_factor,"
                           f" but input.size(-2)={h} is not divisible by {r}")
    if w % r:
        raise RuntimeError(f"pixel_unshuffle expects width to be divisible by downscale_factor, "
                           f"but input.size(-1)={w} is not divisible by {r}")
    lead = tuple(self.shape[:-3])
    n = len(lead)
    x = self.reshape(lead + (c, h // r, r, w // r, r))
    x = x.permute(list(range(n)) + [n, n + 2, n + 4, n + 1, n + 3])
    return _shuffle_out(x, lead + (c * r * r, h // r, w // r))


op("pixel_shuffle(Tensor self, int upscale_factor) -> Tensor", CUSTOM, "python",
   composite=True, impl=_pixel_shuffle,
   doc="(*, C*r*r, H, W) -> (*, C, H*r, W*r): sub-pixel convolution's rearrangement.")
op("pixel_unshuffle(Tensor self, int downscale_factor) -> Tensor", CUSTOM, "python",
   composite=True, impl=_pixel_unshuffle,
   doc="(*, C, H*r, W*r) -> (*, C*r*r, H, W): the inverse of pixel_shuffle.")


def _channel_shuffle(self, groups):
    if self.ndim <= 2:
        raise RuntimeError(f"channel_shuffle expects input with > 2 dims, but got input with "
                           f"sizes {_shape(self)}")
    if groups <= 0:
        raise RuntimeError(f"Number of groups to divide channels in must be positive. Value of "
                           f"groups:{groups}")
    c = self.shape[1]
    if c % groups:
        raise RuntimeError(f"Number of channels must be divisible by groups. Got {c} channels "
                           f"and {groups} groups.")
    n, rest = self.shape[0], tuple(self.shape[2:])
    x = self.reshape((n, groups, c // groups) + rest)
    return _shuffle_out(x.transpose(1, 2), tuple(self.shape))


op("channel_shuffle(Tensor self, SymInt groups) -> Tensor", CUSTOM, "python", composite=True,
   impl=_channel_shuffle,
   doc="Interleaves the channels of (N, C, *) from groups (ShuffleNet): channel "
       "g * C/groups + i goes to i * groups + g.")
op("native_channel_shuffle(Tensor self, SymInt groups) -> Tensor", CUSTOM, "python",
   composite=True, method=False, impl=_channel_shuffle, doc="channel_shuffle.")


# ------------------------------------------------------------------ instance norm (composite)


def _instance_norm(input, weight, bias, running_mean, running_var, use_input_stats, momentum,
                   eps, cudnn_enabled):
    """batch_norm over the (1, N*C, *) view, weight, bias and running statistics repeated
    per sample; the running statistics then take the mean of the samples' updates, as
    PyTorch's instance_norm does."""
    if not use_input_stats and (running_mean is None or running_var is None):
        raise RuntimeError("Expected running_mean and running_var to be defined when "
                           "use_input_stats is false")
    if input.ndim < 2:
        raise RuntimeError(f"batch_norm(): Expected at least 2 dimensions for input tensor but "
                           f"received {input.ndim}")
    b, c = input.shape[0], input.shape[1]
    shape = [1, b * c] + list(input.shape[2:])

    def rep(t):
        return None if t is None else t.repeat(b)
    x = input.contiguous().view(shape)
    rm, rv = rep(running_mean), rep(running_var)
    out = O.batch_norm(x, rep(weight), rep(bias), rm, rv, use_input_stats, momentum, eps,
                       cudnn_enabled)
    if running_mean is not None and use_input_stats:
        prev = _C._set_grad_enabled(False)
        try:
            running_mean.copy_(rm.view(b, c).mean(0))
            running_var.copy_(rv.view(b, c).mean(0))
        finally:
            _C._set_grad_enabled(prev)
    return out.view(list(input.shape))


op("instance_norm(Tensor input, Tensor? weight, Tensor? bias, Tensor(a!)? running_mean, "
   "Tensor(b!)? running_var, bool use_input_stats, float momentum, float eps, "
   "bool cudnn_enabled) "
   "-> Tensor", CUSTOM, "python", composite=True, method=False, impl=_instance_norm,
   doc="Normalises each (sample, channel) plane over its spatial dims (batch_norm over the "
       "(1, N*C, ...) view); with running statistics, updates them with the mean of the "
       "per-sample updates.")
