"""The op database's entries for the linear-algebra and nn ops (python/ember/ops/linalg.py,
nn_ops.py): samples and independent float64 references, loaded by op_db.py.

The references follow the definitions, not the kernels: convolution adds one shifted,
strided slice of the padded input per kernel tap (or scatters the input through the taps,
for the transposed form), pooling and resampling loop over windows and source indices
(nearest's indices computed in float32, as PyTorch's), normalisation and the losses sum
with math.fsum, matrix products are explicit loops or np.einsum. The kernels use im2col and
BLAS, resampling matrices and prims, so nothing is shared.
"""
from __future__ import annotations

import itertools
import math

import numpy as np

import ember
from op_db import (BOOL, FLOATS, dt, NO_BOOL, NUMBERS, ErrorSample, OpInfo, Sample, _t,
                   _ref_matmul, add, make)

F32_64 = ("float32", "float64")


def _f(a):
    return np.asarray(a, dtype=np.float64)


def _fsum(a, axis):
    """math.fsum along axes (a float64 array); keeps the dims (size 1)."""
    a = np.asarray(a, dtype=np.float64)
    axes = tuple(sorted(d % a.ndim for d in axis))
    moved = np.moveaxis(a, axes, tuple(range(a.ndim - len(axes), a.ndim)))
    keep = moved.shape[:a.ndim - len(axes)]
    flat = moved.reshape(keep + (-1,))
    out = np.empty(keep, dtype=np.float64)
    for idx in np.ndindex(*keep):
        out[idx] = math.fsum(flat[idx])
    shape = list(a.shape)
    for d in axes:
        shape[d] = 1
    return out.reshape(shape)


def _reduce(loss, reduction):
    loss = _f(loss)
    if reduction == 0:
        return loss
    s = math.fsum(loss.reshape(-1))
    if reduction == 2:
        return np.array(s)
    return np.array(s / loss.size if loss.size else math.nan)


def _T(*shape, dtype="float32"):
    return ember.ones(*shape, dtype=getattr(ember, dtype))


# ================================================================== mm, bmm, addmm, linear


def _mm_samples(dtype, rng):
    return [Sample((make((2, 3), dtype, rng, -2, 2), make((3, 4), dtype, rng, -2, 2))),
            Sample((make((1, 3), dtype, rng, -2, 2), make((3, 1), dtype, rng, -2, 2))),
            Sample((make((0, 3), dtype, rng, -2, 2), make((3, 2), dtype, rng, -2, 2)))]


add(OpInfo("mm", _mm_samples, _ref_matmul, reduction=True, dtypes=NUMBERS,
           errors=lambda: [
               ErrorSample((_T(2, 3), _T(4, 5)), {}, RuntimeError,
                           r"mm\(\).*shapes cannot be multiplied \(2x3 and 4x5\)", "inner"),
               ErrorSample((_T(3), _T(3, 5)), {}, RuntimeError, r"mm\(\).*self must be a matrix",
                           "1-d"),
               ErrorSample((_T(2, 3), _T(3, 2, dtype="float64")), {}, RuntimeError,
                           r"mm\(\).*same dtype.*float != double", "dtype"),
               ErrorSample((_T(2, 3, dtype="bool"), _T(3, 2, dtype="bool")), {},
                           NotImplementedError, r"mm\(\).*Bool", "bool")]))


def _bmm_samples(dtype, rng):
    return [Sample((make((2, 2, 3), dtype, rng, -2, 2), make((2, 3, 4), dtype, rng, -2, 2))),
            Sample((make((1, 1, 3), dtype, rng, -2, 2), make((1, 3, 2), dtype, rng, -2, 2)))]


add(OpInfo("bmm", _bmm_samples, _ref_matmul, reduction=True, dtypes=NUMBERS,
           errors=lambda: [
               ErrorSample((_T(2, 3), _T(2, 3, 4)), {}, RuntimeError,
                           r"bmm\(\).*batch1 must be a 3D tensor", "2-d"),
               ErrorSample((_T(2, 2, 3), _T(3, 3, 4)), {}, RuntimeError,
                           r"bmm\(\).*\[2, 3\] but got: \[3, 3\]", "batch"),
               ErrorSample((_T(2, 2, 3), _T(2, 3, 4, dtype="float64")), {}, RuntimeError,
                           r"bmm\(\).*Float but found Double", "dtype")]))


def _addmm_ref(self, m1, m2, beta=1, alpha=1):
    prod = _f(_ref_matmul(m1, m2))
    if beta == 0:
        return prod * alpha
    return beta * np.broadcast_to(_f(self), prod.shape) + alpha * prod


def _addmm_samples(dtype, rng):
    def mk(s):
        return make(s, dtype, rng, -2, 2)
    out = [Sample((mk((4,)), mk((2, 3)), mk((3, 4)))),
           Sample((mk((2, 4)), mk((2, 3)), mk((3, 4)))),
           Sample((mk((2, 1)), mk((2, 3)), mk((3, 4))))]
    if dtype in FLOATS:
        out += [Sample((mk((4,)), mk((2, 3)), mk((3, 4))), {"beta": 0.5, "alpha": 2.0}),
                Sample((mk((2, 4)), mk((2, 3)), mk((3, 4))), {"beta": 0}, desc="beta 0")]
    return out


add(OpInfo("addmm", _addmm_samples, _addmm_ref, reduction=True, dtypes=NUMBERS,
           errors=lambda: [
               ErrorSample((_T(5), _T(2, 3), _T(4, 5)), {}, RuntimeError,
                           r"addmm\(\).*2x3 and 4x5", "inner"),
               ErrorSample((_T(3, 5), _T(2, 3), _T(3, 5)), {}, RuntimeError,
                           r"addmm\(\).*expanded size", "self"),
               ErrorSample((_T(5), _T(3), _T(3, 5)), {}, RuntimeError,
                           r"addmm\(\).*mat1 must be a matrix", "1-d"),
               ErrorSample((_T(5, dtype="float64"), _T(2, 3), _T(3, 5)), {}, RuntimeError,
                           r"addmm\(\).*same dtype", "dtype")]))


def _linear_ref(x, w, b=None):
    x, w = np.asarray(x, dtype=object), np.asarray(w, dtype=object)
    out = _ref_matmul(x, w.T if w.ndim == 2 else w)
    if b is not None:
        out = np.asarray(out, dtype=object) + np.asarray(b, dtype=object)
    return out


def _linear_samples(dtype, rng):
    def mk(s):
        return make(s, dtype, rng, -2, 2)
    return [Sample((mk((2, 3)), mk((4, 3)), mk((4,)))),
            Sample((mk((2, 5, 3)), mk((4, 3)))),
            Sample((mk((3,)), mk((4, 3)), mk((4,))), desc="1-d input"),
            Sample((mk((2, 3)), mk((3,))), desc="1-d weight"),
            Sample((mk((0, 3)), mk((4, 3)), mk((4,))), desc="empty")]


add(OpInfo("linear", _linear_samples, _linear_ref, reduction=True, dtypes=NUMBERS,
           torch_fn=lambda torch, *a, **k: torch.nn.functional.linear(*a, **k),
           errors=lambda: [
               ErrorSample((_T(2, 3), _T(4, 5)), {}, RuntimeError,
                           r"linear\(\).*2x3 and 5x4", "inner"),
               ErrorSample((_T(2, 3), _T(4, 3), _T(5)), {}, RuntimeError,
                           r"linear\(\).*expanded size of the tensor \(4\)", "bias"),
               ErrorSample((_T(2, 3), _T(4, 3, dtype="float64")), {}, RuntimeError,
                           r"linear\(\).*same dtype", "dtype"),
               ErrorSample((_T(2, 3), _T(4, 3, 3)), {}, RuntimeError,
                           r"linear\(\).*3D", "3-d weight")]))


# ------------------------------------------------------------------ einsum (composite)


def _einsum_samples(dtype, rng):
    def mk(*s):
        return make(s, dtype, rng, -2, 2)
    out = [Sample(("ij,jk->ik", (mk(2, 3), mk(3, 4),)), noncontig=False),
           Sample(("bij,bjk->bik", (mk(2, 2, 3), mk(2, 3, 4),)), noncontig=False),
           Sample(("bhqd,bhkd->bhqk", (mk(1, 2, 3, 4), mk(1, 2, 5, 4),)), noncontig=False),
           Sample(("i,i->", (mk(4), mk(4),)), noncontig=False),
           Sample(("ij->ji", (mk(2, 3),)), noncontig=False),
           Sample(("i,j->ij", (mk(2), mk(3),)), noncontig=False),
           Sample(("bi,bj->bij", (mk(2, 3), mk(2, 4),)), noncontig=False),
           Sample(("ij,jk", (mk(2, 3), mk(3, 2),)), noncontig=False, desc="implicit output"),
           Sample(("...ij,...jk->...ik", (mk(2, 2, 3), mk(3, 4),)), noncontig=False),
           Sample(("ijk->", (mk(2, 3, 2),)), noncontig=False),
           Sample(("ij,ij->i", (mk(2, 3), mk(2, 3),)), noncontig=False)]
    return out


def _einsum_ref(eq, tensors, path=None):
    arrs = [_f(t) for t in tensors]
    return np.einsum(eq, *arrs)


add(OpInfo("einsum", _einsum_samples, _einsum_ref, reduction=True, dtypes=NUMBERS,
           errors=lambda: [
               ErrorSample(("ij,jk->ik", (_T(2, 3), _T(4, 4),)), {}, RuntimeError,
                           r"einsum\(\).*subscript j has size 4", "size"),
               ErrorSample(("ij,jk", (_T(2, 3),)), {}, RuntimeError,
                           r"einsum\(\).*fewer operands", "operands"),
               ErrorSample(("ij", (_T(2),)), {}, RuntimeError,
                           r"einsum\(\).*number of subscripts", "subscripts"),
               ErrorSample(("ij->k", (_T(2, 3),)), {}, RuntimeError,
                           r"einsum\(\).*output subscript k", "output")]))


# ================================================================== convolution


def _as2d(x, nsp):
    return x if nsp == 2 else x[:, :, None, :]


def _params(v, nsp):
    v = tuple(v) if isinstance(v, (tuple, list)) else (v,)
    v = v * nsp if len(v) == 1 else v
    return (1, v[0]) if nsp == 1 else tuple(v)


def _pad0(v, nsp):
    v = tuple(v) if isinstance(v, (tuple, list)) else (v,)
    v = v * nsp if len(v) == 1 else v
    return (0, v[0]) if nsp == 1 else tuple(v)


def _ref_convolution(x, w, b, stride, padding, dilation, transposed, output_padding, groups):
    x, w = _f(x), _f(w)
    nsp = w.ndim - 2
    x, w = _as2d(x, nsp), _as2d(w, nsp)
    sh, sw = _params(stride, nsp)
    ph, pw = _pad0(padding, nsp)
    dh, dw = _params(dilation, nsp)
    oph, opw = _pad0(output_padding, nsp)
    G = groups
    N, C, H, W = x.shape
    if not transposed:
        cout, cig, kh, kw = w.shape
        cog = cout // G
        OH = (H + 2 * ph - dh * (kh - 1) - 1) // sh + 1
        OW = (W + 2 * pw - dw * (kw - 1) - 1) // sw + 1
        xp = np.zeros((N, C, H + 2 * ph, W + 2 * pw))
        xp[:, :, ph:ph + H, pw:pw + W] = x
        out = np.zeros((N, cout, OH, OW))
        for g in range(G):
            for ki in range(kh):
                for kj in range(kw):
                    patch = xp[:, g * cig:(g + 1) * cig,
                               ki * dh:ki * dh + sh * (OH - 1) + 1:sh,
                               kj * dw:kj * dw + sw * (OW - 1) + 1:sw]
                    out[:, g * cog:(g + 1) * cog] += np.einsum(
                        "nchw,oc->nohw", patch, w[g * cog:(g + 1) * cog, :, ki, kj])
    else:
        cin, cog, kh, kw = w.shape
        cig, cout = cin // G, cog * G
        OH = (H - 1) * sh - 2 * ph + dh * (kh - 1) + oph + 1
        OW = (W - 1) * sw - 2 * pw + dw * (kw - 1) + opw + 1
        big = np.zeros((N, cout, OH + 2 * ph + sh + dh * kh, OW + 2 * pw + sw + dw * kw))
        for g in range(G):
            for ki in range(kh):
                for kj in range(kw):
                    big[:, g * cog:(g + 1) * cog, ki * dh:ki * dh + sh * (H - 1) + 1:sh,
                        kj * dw:kj * dw + sw * (W - 1) + 1:sw] += np.einsum(
                        "nchw,co->nohw", x[:, g * cig:(g + 1) * cig],
                        w[g * cig:(g + 1) * cig, :, ki, kj])
        out = big[:, :, ph:ph + OH, pw:pw + OW]
    if b is not None:
        out = out + _f(b)[None, :, None, None]
    return out if nsp == 2 else out[:, :, 0, :]


def _conv_samples(dtype, rng):
    def mk(*s):
        return make(s, dtype, rng, -2, 2)
    S = Sample
    return [
        S((mk(2, 3, 5, 5), mk(4, 3, 3, 3), mk(4), [1, 1], [0, 0], [1, 1], False, [0, 0], 1)),
        S((mk(1, 4, 6, 5), mk(6, 2, 2, 3), None, [2, 1], [1, 2], [2, 1], False, [0, 0], 2),
          desc="grouped strided dilated padded"),
        S((mk(1, 3, 4, 4), mk(3, 1, 3, 3), mk(3), [1], [1], [1], False, [0], 3),
          desc="depthwise, one value per param"),
        S((mk(2, 2, 3, 3), mk(2, 3, 2, 2), mk(3), [2, 2], [0, 1], [1, 1], True, [1, 0], 1),
          desc="transposed"),
        S((mk(1, 4, 3, 2), mk(4, 1, 3, 2), None, [2, 3], [1, 0], [2, 1], True, [1, 2], 2),
          desc="transposed grouped dilated"),
        S((mk(2, 3, 7), mk(4, 3, 3), mk(4), [2], [1], [1], False, [0], 1), desc="1-d"),
        S((mk(2, 2, 4), mk(2, 3, 3), None, [2], [1], [2], True, [1], 1),
          desc="1-d transposed"),
        S((mk(0, 3, 4, 4), mk(2, 3, 3, 3), None, [1, 1], [0, 0], [1, 1], False, [0, 0], 1),
          desc="empty batch", grad=False),
        S((mk(1, 2, 4, 4), mk(3, 2, 1, 1), mk(3), [1, 1], [0, 0], [1, 1], False, [0, 0], 1),
          desc="1x1"),
    ]


def _conv_errors():
    def E(args, match, desc, exc=RuntimeError):
        return ErrorSample(args, {}, exc, r"convolution\(\).*" + match, desc)
    std = ([1, 1], [0, 0], [1, 1], False, [0, 0], 1)
    return [
        E((_T(1, 3, 5), _T(8, 3, 3, 3), None) + std, r"4-dimensional input", "rank"),
        E((_T(1, 4, 5, 5), _T(8, 3, 3, 3), None) + std, r"groups=1.*3 channels, but got 4",
          "channels"),
        E((_T(1, 4, 5, 5), _T(3, 2, 3, 3), None) + std[:5] + (2,), r"divisible by 2",
          "groups"),
        E((_T(1, 3, 2, 2), _T(8, 3, 3, 3), None) + std, r"Kernel size can't be greater",
          "kernel too large"),
        E((_T(1, 3, 5, 5), _T(8, 3, 3, 3), None, [1, 1], [-1, 0], [1, 1], False, [0, 0], 1),
          r"negative padding", "negative padding"),
        E((_T(1, 3, 5, 5), _T(8, 3, 3, 3), None, [0, 1], [0, 0], [1, 1], False, [0, 0], 1),
          r"non-positive stride", "stride"),
        E((_T(1, 3, 5, 5), _T(8, 3, 3, 3), _T(7)) + std, r"bias.*8 elements", "bias"),
        E((_T(1, 3, 5, 5), _T(8, 3, 3, 3, dtype="float64"), None) + std,
          r"Float but found Double", "dtype"),
        E((_T(1, 3, 5, 5, dtype="bool"), _T(8, 3, 3, 3, dtype="bool"), None) + std,
          r"Bool", "bool", NotImplementedError),
        E((_T(1, 3, 5, 5), _T(3, 8, 3, 3), None, [2, 2], [0, 0], [1, 1], True, [2, 2], 1),
          r"output padding must be smaller", "output padding"),
        E((_T(1, 3, 5, 5), _T(8, 3, 3, 3), None, [1, 2, 3], [0, 0], [1, 1], False, [0, 0], 1),
          r"stride=\[1, 2, 3\]", "stride length"),
        E((_T(1, 2, 5, 5), _T(3, 4, 3, 3), None, [1, 1], [0, 0], [1, 1], True, [0, 0], 1),
          r"transposed=1.*3 channels, but got 2", "transposed channels"),
    ]


# PyTorch's CPU convolutions: every floating dtype and int64; the narrower integers only
# in the plain (undilated, untransposed) kernel, which the torch-parity test checks
CONV_DTYPES = FLOATS + ("int64",)
add(OpInfo("convolution", _conv_samples, _ref_convolution, reduction=True, dtypes=CONV_DTYPES,
           errors=_conv_errors))


def _ref_convolution_weight_grad(x, go, kernel_size, stride, padding, dilation, groups):
    """By the definition: tap (i, j) of w[co, ci] sums grad_output times the input
    element that tap multiplies, over the samples and output positions."""
    x, go = _f(x), _f(go)
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = (_params(v, 2) for v in
                                              (kernel_size, stride, padding, dilation))
    N, C, H, W = x.shape
    _, Co, OH, OW = go.shape
    cig, cog = C // groups, Co // groups
    xp = np.zeros((N, C, H + 2 * ph, W + 2 * pw))
    xp[:, :, ph:ph + H, pw:pw + W] = x
    out = np.zeros((Co, cig, kh, kw))
    for co in range(Co):
        g = co // cog
        for i in range(kh):
            for j in range(kw):
                patch = xp[:, g * cig:(g + 1) * cig, i * dh:i * dh + sh * (OH - 1) + 1:sh,
                           j * dw:j * dw + sw * (OW - 1) + 1:sw]
                out[co, :, i, j] = np.einsum("nchw,nhw->c", patch, go[:, co])
    return out


def _conv_weight_grad_samples(dtype, rng):
    def mk(*s):
        return make(s, dtype, rng, -2, 2)
    S = Sample
    return [
        S((mk(2, 3, 5, 5), mk(2, 4, 3, 3), [3, 3], [1, 1], [0, 0], [1, 1], 1)),
        S((mk(2, 3, 6, 7), mk(2, 4, 3, 4), [3, 3], [2, 2], [1, 1], [1, 1], 1),
          desc="strided padded"),
        S((mk(1, 4, 6, 5), mk(1, 6, 3, 7), [2, 3], [2, 1], [1, 2], [2, 1], 2),
          desc="grouped strided dilated padded"),
        S((mk(3, 3, 4, 4), mk(3, 3, 4, 4), [3, 3], [1], [1], [1], 3),
          desc="depthwise, one value per param"),
        S((mk(2, 2, 4, 4), mk(2, 3, 4, 4), [1, 1], [1, 1], [0, 0], [1, 1], 1), desc="1x1"),
        S((mk(2, 3, 7, 6), mk(2, 2, 3, 2), [3, 3], [2, 2], [0, 0], [1, 1], 1),
          desc="stride drops input rows"),
    ] + ([S((mk(0, 3, 4, 4), mk(0, 2, 2, 2), [3, 3], [1, 1], [0, 0], [1, 1], 1),
            desc="empty batch", grad=False)] if dtype in ("float32", "float64") else [])


def _conv_weight_grad_errors():
    def E(args, match, desc, exc=RuntimeError):
        return ErrorSample(args, {}, exc, r"convolution_weight_grad\(\).*" + match, desc)
    std = ([3, 3], [1, 1], [0, 0], [1, 1], 1)
    return [
        E((_T(1, 3, 5), _T(1, 2, 3, 3)) + std, r"4-d input", "rank"),
        E((_T(1, 3, 5, 5), _T(1, 2, 4, 4)) + std, r"not the output", "sizes"),
        E((_T(1, 3, 5, 5), _T(1, 2, 3, 3)) + std[:4] + (2,), r"not the output", "groups"),
        E((_T(1, 3, 5, 5, dtype="int64"), _T(1, 2, 3, 3, dtype="int64")) + std,
          r"float32 or float64", "dtype", NotImplementedError),
    ]


def _torch_conv_weight_grad(torch, x, go, k, s, p, d, g):
    """PyTorch's convolution_backward, weight output only. Ember's prim is the float
    kernel only (conv2d's backward traces it for float32 alone; other dtypes keep the
    decomposition), so the dtypes torch also computes raise as Ember's do."""
    if x.dtype not in (torch.float32, torch.float64):
        raise NotImplementedError("float32 or float64 only")
    w = torch.empty((go.shape[1], x.shape[1] // g) + tuple(k), dtype=x.dtype)
    return torch.ops.aten.convolution_backward(go, x, w, None, s, p, d, False, [0, 0], g,
                                               (False, True, False))[1]


add(OpInfo("convolution_weight_grad", _conv_weight_grad_samples, _ref_convolution_weight_grad,
           reduction=True, dtypes=("float32", "float64"), errors=_conv_weight_grad_errors,
           torch_fn=_torch_conv_weight_grad))


def _conv2d_samples(dtype, rng):
    def mk(*s):
        return make(s, dtype, rng, -2, 2)
    return [Sample((mk(2, 3, 5, 5), mk(4, 3, 3, 3), mk(4))),
            Sample((mk(1, 4, 6, 5), mk(6, 2, 2, 3)), {"stride": (2, 1), "padding": 1,
                                                        "dilation": (2, 1), "groups": 2}),
            Sample((mk(3, 5, 5), mk(2, 3, 3, 3)), {"padding": "same"}, desc="unbatched same"),
            Sample((mk(1, 3, 5, 6), mk(2, 3, 4, 3), mk(2)), {"padding": "same",
                                                              "dilation": (1, 2)},
                   desc="same, even kernel"),
            Sample((mk(1, 3, 5, 6), mk(2, 3, 4, 3)), {"padding": "valid"})]


def _conv2d_ref(x, w, b=None, stride=1, padding=0, dilation=1, groups=1):
    x = _f(x)
    unbatched = x.ndim == 3
    if unbatched:
        x = x[None]
    if isinstance(padding, str):
        k = np.shape(w)[2:]
        d = _params(dilation, 2)
        total = [d[i] * (k[i] - 1) for i in range(2)] if padding == "same" else [0, 0]
        left = [t // 2 for t in total]
        xp = np.zeros(x.shape[:2] + (x.shape[2] + total[0], x.shape[3] + total[1]))
        xp[:, :, left[0]:left[0] + x.shape[2], left[1]:left[1] + x.shape[3]] = x
        x, padding = xp, [0, 0]
    out = _ref_convolution(x, w, b, stride, padding, dilation, False, [0, 0], groups)
    return out[0] if unbatched else out


add(OpInfo("conv2d", _conv2d_samples, _conv2d_ref, reduction=True, dtypes=CONV_DTYPES,
           torch_fn=lambda torch, *a, **k: torch.nn.functional.conv2d(*a, **k),
           errors=lambda: [
               ErrorSample((_T(3, 5), _T(8, 3, 3, 3)), {}, RuntimeError,
                           r"conv2d\(\).*3D \(unbatched\) or 4D", "rank"),
               ErrorSample((_T(1, 3, 5, 5), _T(8, 3, 3, 3)), {"padding": "same", "stride": 2},
                           RuntimeError, r"conv2d\(\).*strided", "same strided"),
               ErrorSample((_T(1, 3, 5, 5), _T(8, 3, 3, 3)), {"padding": "bad"}, RuntimeError,
                           r"conv2d\(\).*Invalid padding string", "bad padding")]))


def _conv1d_samples(dtype, rng):
    def mk(*s):
        return make(s, dtype, rng, -2, 2)
    return [Sample((mk(2, 3, 7), mk(4, 3, 3), mk(4)), {"stride": 2, "padding": 1}),
            Sample((mk(3, 6), mk(2, 3, 4)), {"padding": "same", "dilation": 3},
                   desc="unbatched same")]


def _conv1d_ref(x, w, b=None, stride=1, padding=0, dilation=1, groups=1):
    x = _f(x)
    unbatched = x.ndim == 2
    if unbatched:
        x = x[None]
    if isinstance(padding, str):
        d = _params(dilation, 1)[1]
        total = d * (np.shape(w)[2] - 1) if padding == "same" else 0
        xp = np.zeros(x.shape[:2] + (x.shape[2] + total,))
        xp[:, :, total // 2:total // 2 + x.shape[2]] = x
        x, padding = xp, 0
    out = _ref_convolution(x, w, b, [stride] if isinstance(stride, int) else stride,
                           [padding] if isinstance(padding, int) else padding,
                           [dilation] if isinstance(dilation, int) else dilation, False, [0],
                           groups)
    return out[0] if unbatched else out


add(OpInfo("conv1d", _conv1d_samples, _conv1d_ref, reduction=True, dtypes=CONV_DTYPES,
           torch_fn=lambda torch, *a, **k: torch.nn.functional.conv1d(*a, **k)))


def _conv_t2d_samples(dtype, rng):
    def mk(*s):
        return make(s, dtype, rng, -2, 2)
    return [Sample((mk(2, 3, 3, 4), mk(3, 2, 3, 3), mk(2)), {"stride": 2, "padding": 1,
                                                              "output_padding": 1}),
            Sample((mk(4, 3, 3), mk(4, 1, 2, 2)), {"groups": 2, "dilation": 2},
                   desc="unbatched grouped")]


def _conv_t2d_ref(x, w, b=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1):
    x = _f(x)
    unbatched = x.ndim == 3
    out = _ref_convolution(x[None] if unbatched else x, w, b, _params(stride, 2),
                           _pad0(padding, 2), _params(dilation, 2), True,
                           _pad0(output_padding, 2), groups)
    return out[0] if unbatched else out


add(OpInfo("conv_transpose2d", _conv_t2d_samples, _conv_t2d_ref, reduction=True,
           dtypes=CONV_DTYPES,
           torch_fn=lambda torch, *a, **k: torch.nn.functional.conv_transpose2d(*a, **k)))


# ================================================================== pooling


def _pair(v, fallback=None):
    v = tuple(v) if isinstance(v, (tuple, list)) else (v,)
    if not v:
        return fallback
    return (v[0], v[-1])


def _pool_len(n, k, p, s, d, ceil_mode):
    num = n + 2 * p - d * (k - 1) - 1 + (s - 1 if ceil_mode else 0)
    o = num // s + 1
    if ceil_mode and (o - 1) * s >= n + p:
        o -= 1
    return o


def _ref_max_pool(x, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
    x = np.asarray(x, dtype=object)
    kh, kw = _pair(kernel_size)
    sh, sw = _pair(stride, (kh, kw))
    ph, pw = _pair(padding)
    dh, dw = _pair(dilation)
    H, W = x.shape[-2:]
    OH, OW = _pool_len(H, kh, ph, sh, dh, ceil_mode), _pool_len(W, kw, pw, sw, dw, ceil_mode)
    lead = x.shape[:-2]
    vals = np.empty(lead + (OH, OW), dtype=object)
    idx = np.empty(lead + (OH, OW), dtype=object)
    for l in np.ndindex(*lead):
        for oh in range(OH):
            for ow in range(OW):
                best = None
                for i in range(kh):
                    for j in range(kw):
                        h, w = oh * sh - ph + i * dh, ow * sw - pw + j * dw
                        if not (0 <= h < H and 0 <= w < W):
                            continue
                        v = x[l + (h, w)]
                        isnan = isinstance(v, float) and math.isnan(v)
                        if best is None or isnan or v > best[0]:
                            best = (v, h * W + w)
                vals[l + (oh, ow)], idx[l + (oh, ow)] = best
    return vals, idx


def _max_pool_samples(dtype, rng):
    def mk(*s):
        return make(s, dtype, rng, -3, 3)
    return [Sample((mk(2, 3, 5, 5), [2, 2])),
            Sample((mk(1, 2, 7, 6), [3, 3], [2, 2], [1, 1], [1, 1], True), desc="ceil, pad"),
            Sample((mk(2, 6, 5), [3, 2], [1, 2], [1, 0], [2, 1]), desc="3-d, dilated"),
            Sample((mk(0, 2, 4, 4), [2, 2]), desc="empty batch", grad=False)]


def _max_pool_errors():
    def E(args, match, desc, exc=RuntimeError):
        return ErrorSample(args, {}, exc, r"max_pool2d_with_indices\(\).*" + match, desc)
    return [E((_T(3, 5), [2, 2]), r"3D or 4D", "rank"),
            E((_T(1, 3, 5, 5), [2, 2, 2]), r"kernel_size must", "kernel list"),
            E((_T(1, 3, 5, 5), [3, 3], [1, 1], [2, 2]), r"pad should be at most half", "pad"),
            E((_T(1, 3, 2, 2), [3, 3]), r"Output size is too small", "too small"),
            E((_T(1, 3, 5, 5), [2, 2], [0, 1]), r"stride should not be zero", "zero stride"),
            E((_T(1, 3, 5, 5, dtype="bool"), [2, 2]), r"Bool", "bool", NotImplementedError)]


add(OpInfo("max_pool2d_with_indices", _max_pool_samples, _ref_max_pool, dtypes=NO_BOOL,
           torch_fn=_t("max_pool2d_with_indices"), errors=_max_pool_errors))


def _max_pool_backward_samples(dtype, rng):
    out = []
    for s in _max_pool_samples("float64", rng):
        x = s.args[0]
        if x.numel() == 0:
            continue
        vals, idx = ember.max_pool2d_with_indices(*s.args)
        x = x.to(getattr(ember, dtype) if dtype != "bool" else ember.bool)
        g = make(tuple(vals.shape), dtype, rng)
        params = list(s.args[1:]) + [None] * (5 - len(s.args[1:]))
        k, st, p, d, c = params
        out.append(Sample((g, x, k, st if st is not None else [], p if p is not None else 0,
                           d if d is not None else 1, bool(c), idx),
                          desc=s.desc, noncontig=False))
    return out


def _ref_max_pool_backward(g, x, kernel_size, stride, padding, dilation, ceil_mode, indices):
    g, idx = np.asarray(g, dtype=object), np.asarray(indices, dtype=object)
    x = np.asarray(x, dtype=object)
    H, W = x.shape[-2:]
    out = np.zeros(x.shape, dtype=np.float64)
    for l in np.ndindex(*g.shape[:-2]):
        for oh in range(g.shape[-2]):
            for ow in range(g.shape[-1]):
                i = idx[l + (oh, ow)]
                out[l + (i // W, i % W)] += g[l + (oh, ow)]
    return out


add(OpInfo("max_pool2d_with_indices_backward", _max_pool_backward_samples,
           _ref_max_pool_backward, dtypes=FLOATS,
           torch_fn=_t("max_pool2d_with_indices_backward"),
           errors=lambda: [ErrorSample(
               (_T(1, 3, 3, 2), _T(1, 3, 5, 5), [2, 2], [2, 2], [0, 0], [1, 1], False,
                ember.zeros(1, 3, 2, 2, dtype=ember.int64)), {}, RuntimeError,
               r"max_pool2d_with_indices_backward\(\).*size\[2\] == 2", "grad shape")]))


def _ref_avg_pool(x, kernel_size, stride=(), padding=0, ceil_mode=False,
                  count_include_pad=True, divisor_override=None):
    x = np.asarray(x, dtype=object)
    kh, kw = _pair(kernel_size)
    sh, sw = _pair(stride, (kh, kw))
    ph, pw = _pair(padding)
    H, W = x.shape[-2:]
    OH, OW = _pool_len(H, kh, ph, sh, 1, ceil_mode), _pool_len(W, kw, pw, sw, 1, ceil_mode)
    floaty = any(isinstance(v, float) for v in x.reshape(-1))
    out = np.empty(x.shape[:-2] + (OH, OW), dtype=object)
    for l in np.ndindex(*x.shape[:-2]):
        for oh in range(OH):
            for ow in range(OW):
                h0, w0 = oh * sh - ph, ow * sw - pw
                h1, w1 = min(h0 + kh, H + ph), min(w0 + kw, W + pw)
                pool = (h1 - h0) * (w1 - w0)
                h0, w0, h1, w1 = max(h0, 0), max(w0, 0), min(h1, H), min(w1, W)
                vals = [x[l + (h, w)] for h in range(h0, h1) for w in range(w0, w1)]
                if divisor_override is not None:
                    div = divisor_override
                elif count_include_pad:
                    div = pool
                else:
                    div = (h1 - h0) * (w1 - w0)
                if floaty:
                    out[l + (oh, ow)] = math.fsum(vals) / div
                else:
                    s = sum(vals)
                    q = abs(s) // div
                    out[l + (oh, ow)] = q if s >= 0 else -q
    return out


def _avg_pool_samples(dtype, rng):
    def mk(*s):
        return make(s, dtype, rng, -3, 3)
    return [Sample((mk(2, 3, 5, 5), [2, 2])),
            Sample((mk(1, 2, 7, 6), [3, 3], [2, 2], [1, 1], True), desc="ceil, pad"),
            Sample((mk(1, 2, 7, 6), [3, 3], [2, 2], [1, 1], True, False),
                   desc="ceil, pad, no count_include_pad"),
            Sample((mk(2, 6, 5), [3, 2], [1, 2], [1, 0]), desc="3-d"),
            Sample((mk(1, 2, 5, 4), [2, 3], [2, 2], [1, 1], False, True, 5), desc="divisor")]


add(OpInfo("avg_pool2d", _avg_pool_samples, _ref_avg_pool, dtypes=FLOATS + ("int64",),
           torch_fn=_t("avg_pool2d"),
           errors=lambda: [
               ErrorSample((_T(1, 3, 5, 5), [2, 2], [1, 1], [2, 2]), {}, RuntimeError,
                           r"avg_pool2d\(\).*pad should be at most half", "pad"),
               ErrorSample((_T(1, 3, 5, 5), [2, 2], [1, 1], [1, 1], False, True, 0), {},
                           RuntimeError, r"avg_pool2d\(\).*divisor must be not zero",
                           "divisor"),
               ErrorSample((_T(1, 3, 5, 5, dtype="bool"), [2, 2]), {}, NotImplementedError,
                           r"avg_pool2d\(\).*Bool", "bool")]))


def _ref_adaptive(x, output_size):
    x = np.asarray(x, dtype=object)
    H, W = x.shape[-2:]
    OH, OW = output_size
    out = np.empty(x.shape[:-2] + (OH, OW), dtype=object)
    for l in np.ndindex(*x.shape[:-2]):
        for oh in range(OH):
            h0, h1 = (oh * H) // OH, -((-(oh + 1) * H) // OH)
            for ow in range(OW):
                w0, w1 = (ow * W) // OW, -((-(ow + 1) * W) // OW)
                vals = [x[l + (h, w)] for h in range(h0, h1) for w in range(w0, w1)]
                out[l + (oh, ow)] = math.fsum(vals) / len(vals)
    return out


def _adaptive_samples(dtype, rng):
    def mk(*s):
        return make(s, dtype, rng, -3, 3)
    return [Sample((mk(2, 3, 7, 6), [3, 2])), Sample((mk(2, 3, 5, 5), [1, 1])),
            Sample((mk(3, 4, 5), [6, 5]), desc="3-d, larger"),
            Sample((mk(1, 2, 4, 4), [4, 4]), desc="same size")]


add(OpInfo("adaptive_avg_pool2d", _adaptive_samples, _ref_adaptive, dtypes=FLOATS,
           torch_fn=_t("adaptive_avg_pool2d"),
           errors=lambda: [
               ErrorSample((_T(1, 3, 5, 5), [2]), {}, RuntimeError,
                           r"adaptive_avg_pool2d\(\).*output_size must be 2", "size"),
               ErrorSample((_T(3, 5), [2, 2]), {}, RuntimeError,
                           r"adaptive_avg_pool2d\(\).*3D or 4D", "rank")]))


def _ref_nearest(x, output_size, scales_h=None, scales_w=None):
    x = np.asarray(x, dtype=object)
    H, W = x.shape[-2:]
    OH, OW = output_size

    def src(o, n_in, n_out, scale):
        if n_out == n_in:
            return o
        if n_out == 2 * n_in:
            return o >> 1
        sc = np.float32(1.0 / scale) if scale else np.float32(n_in) / np.float32(n_out)
        return min(int(math.floor(np.float32(o) * sc)), n_in - 1)
    out = np.empty(x.shape[:-2] + (OH, OW), dtype=object)
    for l in np.ndindex(*x.shape[:-2]):
        for oh in range(OH):
            for ow in range(OW):
                out[l + (oh, ow)] = x[l + (src(oh, H, OH, scales_h), src(ow, W, OW, scales_w))]
    return out


def _upsample_samples(extra):
    def samples(dtype, rng):
        def mk(*s):
            return make(s, dtype, rng, 0, 3)
        return [Sample((mk(2, 3, 4, 5), [8, 10]) + extra),
                Sample((mk(1, 2, 5, 6), [7, 4]) + extra, desc="odd sizes"),
                Sample((mk(1, 1, 3, 3), [3, 9]) + extra, desc="one axis kept"),
                Sample((mk(1, 2, 3, 4), [6, 8]) + extra + (2.0, 2.0), desc="scales")]
    return samples


_UPSAMPLE_DTYPES = ("uint8",) + FLOATS

add(OpInfo("upsample_nearest2d", _upsample_samples(()), _ref_nearest, dtypes=_UPSAMPLE_DTYPES,
           torch_fn=_t("upsample_nearest2d"),
           errors=lambda: [
               ErrorSample((_T(2, 3, 3), [6, 5]), {}, RuntimeError,
                           r"upsample_nearest2d\(\).*input_size equals to 4", "rank"),
               ErrorSample((_T(1, 2, 3, 3), [0, 5]), {}, RuntimeError,
                           r"upsample_nearest2d\(\).*greater than 0", "empty")]))


def _ref_bilinear_up(x, output_size, align_corners, scales_h=None, scales_w=None):
    x = _f(x)
    H, W = x.shape[-2:]
    OH, OW = output_size

    def weights(o, n_in, n_out, scale):
        if align_corners:
            sc = (n_in - 1) / (n_out - 1) if n_out > 1 else 0.0
            real = sc * o
        else:
            sc = 1.0 / scale if scale else n_in / n_out
            real = max(sc * (o + 0.5) - 0.5, 0.0)
        i0 = min(int(math.floor(real)), n_in - 1)
        lam = min(max(real - i0, 0.0), 1.0)
        i1 = i0 + (1 if i0 < n_in - 1 else 0)
        return i0, i1, 1.0 - lam, lam
    out = np.zeros(x.shape[:-2] + (OH, OW))
    for oh in range(OH):
        h0, h1, a0, a1 = weights(oh, H, OH, scales_h)
        for ow in range(OW):
            w0, w1, b0, b1 = weights(ow, W, OW, scales_w)
            out[..., oh, ow] = (a0 * (b0 * x[..., h0, w0] + b1 * x[..., h0, w1]) +
                                a1 * (b0 * x[..., h1, w0] + b1 * x[..., h1, w1]))
    return out


def _bilinear_up_samples(dtype, rng):
    return (_upsample_samples((False,))(dtype, rng) +
            [Sample(s.args[:2] + (True,), desc=s.desc + " align_corners")
             for s in _upsample_samples(())(dtype, rng)[:3]])


add(OpInfo("upsample_bilinear2d", _bilinear_up_samples, _ref_bilinear_up, dtypes=FLOATS,
           torch_fn=_t("upsample_bilinear2d")))


# ================================================================== normalisation


def _ref_layer_norm(x, normalized_shape, weight=None, bias=None, eps=1e-5, cudnn_enable=True):
    x = _f(x)
    dims = tuple(range(x.ndim - len(normalized_shape), x.ndim))
    n = int(np.prod([x.shape[d] for d in dims]))
    mean = _fsum(x, dims) / n
    var = _fsum((x - mean) ** 2, dims) / n
    y = (x - mean) / np.sqrt(var + eps)
    if weight is not None:
        y = y * _f(weight)
    if bias is not None:
        y = y + _f(bias)
    return y


def _layer_norm_samples(dtype, rng):
    def mk(*s):
        return make(s, dtype, rng, -3, 3)
    return [Sample((mk(2, 3, 4), [4], mk(4), mk(4))),
            Sample((mk(3, 2, 3), [2, 3], mk(2, 3), None), desc="2 dims, no bias"),
            Sample((mk(5,), [5]), desc="no affine"),
            Sample((mk(2, 4), [4], None, mk(4), 1e-3), desc="bias only, eps")]


add(OpInfo("layer_norm", _layer_norm_samples, _ref_layer_norm, reduction=True, dtypes=FLOATS,
           errors=lambda: [
               ErrorSample((_T(2, 3), [4]), {}, RuntimeError,
                           r"layer_norm\(\).*normalized_shape=\[4\].*\[2, 3\]", "shape"),
               ErrorSample((_T(2, 3), [3], _T(4)), {}, RuntimeError,
                           r"layer_norm\(\).*weight of shape \[4\]", "weight"),
               ErrorSample((_T(2, 3, dtype="int64"), [3]), {}, NotImplementedError,
                           r"layer_norm\(\).*Long", "int")]))


def _ref_group_norm(x, num_groups, weight=None, bias=None, eps=1e-5, cudnn_enabled=True):
    x = _f(x)
    N, C = x.shape[:2]
    xg = x.reshape(N, num_groups, -1)
    n = xg.shape[2]
    mean = _fsum(xg, (2,)) / n
    var = _fsum((xg - mean) ** 2, (2,)) / n
    y = ((xg - mean) / np.sqrt(var + eps)).reshape(x.shape)
    cs = (C,) + (1,) * (x.ndim - 2)
    if weight is not None:
        y = y * _f(weight).reshape(cs)
    if bias is not None:
        y = y + _f(bias).reshape(cs)
    return y


def _group_norm_samples(dtype, rng):
    def mk(*s):
        return make(s, dtype, rng, -3, 3)
    return [Sample((mk(2, 4, 3), 2, mk(4), mk(4))),
            Sample((mk(2, 6, 2, 2), 3, mk(6), None), desc="4-d"),
            Sample((mk(3, 4), 4), desc="2-d, groups = channels")]


add(OpInfo("group_norm", _group_norm_samples, _ref_group_norm, reduction=True, dtypes=FLOATS,
           errors=lambda: [
               ErrorSample((_T(2, 5, 3), 2), {}, RuntimeError,
                           r"group_norm\(\).*divisible by num_groups", "groups"),
               ErrorSample((_T(2, 4, 3), 2, _T(3)), {}, RuntimeError,
                           r"group_norm\(\).*weight of shape \[3\]", "weight")]))


def _ref_bn(x, weight, bias, running_mean, running_var, training, momentum, eps):
    x = _f(x)
    C = x.shape[1]
    red = (0,) + tuple(range(2, x.ndim))
    cs = (1, C) + (1,) * (x.ndim - 2)
    n = x.size // C
    if training:
        mean = _fsum(x, red) / n
        var = _fsum((x - mean) ** 2, red) / n
        rstd = 1 / np.sqrt(var + eps)
        if running_mean is not None:
            new_m = (1 - momentum) * _f(running_mean) + momentum * mean.reshape(C)
            new_v = (1 - momentum) * _f(running_var) + momentum * var.reshape(C) * n / (n - 1)
        else:
            new_m = new_v = np.zeros(0)
        mean, rstd = mean.reshape(C), rstd.reshape(C)
    else:
        mean = _f(running_mean)
        rstd = 1 / np.sqrt(_f(running_var) + eps)
        new_m, new_v = _f(running_mean), _f(running_var)
    y = (x - mean.reshape(cs)) * rstd.reshape(cs)
    if weight is not None:
        y = y * _f(weight).reshape(cs)
    if bias is not None:
        y = y + _f(bias).reshape(cs)
    return y, mean, rstd, new_m, new_v


def _bn_samples(dtype, rng):
    def mk(*s, lo=-3, hi=3):
        return make(s, dtype, rng, lo, hi)
    return [Sample((mk(3, 2, 2), mk(2), mk(2), mk(2), mk(2, lo=0.5, hi=2), True, 0.1, 1e-5)),
            Sample((mk(4, 3), None, None, None, None, True, 0.1, 1e-5), desc="no stats"),
            Sample((mk(2, 2, 3), mk(2), mk(2), mk(2), mk(2, lo=0.5, hi=2), False, 0.1, 1e-5),
                   desc="eval")]


def _bn_torch(torch, x, w, b, rm, rv, training, momentum, eps):
    """What the functional form returns, from torch's batch_norm (on copies of the stats)."""
    if not x.dtype.is_floating_point:
        # (torch raises NotImplementedError for contiguous inputs, but a RuntimeError from
        # its mean() for some strided ones: the contiguous case is the kernel's answer)
        return torch.batch_norm(x.contiguous(), None, None, None, None, True, momentum, eps,
                                False)
    C = x.shape[1]
    red = [0] + list(range(2, x.ndim))
    rm2, rv2 = (rm.clone() if rm is not None else None), (rv.clone() if rv is not None
                                                           else None)
    out = torch.batch_norm(x, w, b, rm2, rv2, training, momentum, eps, False)
    if training:       # statistics in the op-math dtype (float32 for float16)
        xs = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
        mean = xs.mean(red)
        rstd = (xs.var(red, unbiased=False) + eps).rsqrt()
        if rm is None:
            rm2 = rv2 = torch.zeros(0, dtype=x.dtype)
    else:
        up = (lambda t: t.float()) if x.dtype in (torch.float16, torch.bfloat16) \
            else (lambda t: t)
        mean, rstd = up(rm).clone(), (up(rv) + eps).rsqrt()
    return out, mean, rstd, rm2, rv2


add(OpInfo("_native_batch_norm_legit_functional", _bn_samples, _ref_bn, reduction=True,
           dtypes=FLOATS, torch_fn=_bn_torch,
           errors=lambda: [
               ErrorSample((_T(2, 3), _T(4), None, None, None, True, 0.1, 1e-5), {},
                           RuntimeError, r"weight should contain 3 elements not 4", "weight"),
               ErrorSample((_T(2, 3), None, None, None, None, False, 0.1, 1e-5), {},
                           RuntimeError, r"running_mean and running_var must be defined",
                           "eval without stats")]))


# ================================================================== embedding, one_hot


def _ref_embedding(weight, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    w = np.asarray(weight, dtype=object)
    idx = np.asarray(indices, dtype=object)
    out = np.empty(idx.shape + (w.shape[1],), dtype=object)
    for i in np.ndindex(*idx.shape):
        out[i] = w[int(idx[i])]
    return out


def _embedding_samples(dtype, rng):
    def idx(*s, dt="int64"):
        return ember.from_numpy(rng.integers(0, 5, size=s).astype(dt))
    w = make((5, 3), dtype, rng)
    return [Sample((w, idx(2, 3))),
            # PyTorch's gradient leaves the padding row out and divides by the counts: not
            # the derivative of the forward, so these two are compared with torch instead
            Sample((w, idx(4, dt="int32"), 1), desc="int32, padding_idx", grad=False),
            Sample((w, idx(7), -1, True), desc="scale_grad_by_freq", grad=False),
            Sample((w, idx()), desc="0-d index"),
            Sample((w, idx(0)), desc="no index")]


add(OpInfo("embedding", _embedding_samples, _ref_embedding,
           errors=lambda: [
               ErrorSample((_T(5, 3), ember.tensor([1, 5])), {}, IndexError,
                           r"embedding\(\).*index out of range", "range", data=True),
               ErrorSample((_T(5, 3), ember.tensor([1.0, 2.0])), {}, RuntimeError,
                           r"embedding\(\).*Long, Int", "float indices"),
               ErrorSample((_T(5, 3, 2), ember.tensor([1, 2])), {}, RuntimeError,
                           r"embedding\(\).*'weight' must be 2-D", "weight rank")]))


def _ref_one_hot(t, num_classes=-1):
    t = np.asarray(t, dtype=object)
    n = num_classes if num_classes >= 0 else int(max(t.reshape(-1))) + 1
    out = np.zeros(t.shape + (n,), dtype=object)
    for i in np.ndindex(*t.shape):
        out[i + (int(t[i]),)] = 1
    return out


def _one_hot_samples(dtype, rng):
    if dtype != "int64":
        return [Sample((make((3,), dtype, rng, 0, 3), 4), noncontig=False)]
    return [Sample((ember.from_numpy(rng.integers(0, 4, (2, 3))), 5)),
            Sample((ember.tensor(2), 3), desc="0-d")]


add(OpInfo("one_hot", _one_hot_samples, _ref_one_hot, dtypes=("int64",),
           torch_fn=lambda torch, *a, **k: torch.nn.functional.one_hot(*a, **k),
           errors=lambda: [
               ErrorSample((ember.tensor([1, 5]), 3), {}, RuntimeError,
                           r"one_hot\(\).*smaller than num_classes", "range", data=True),
               ErrorSample((ember.tensor([1, -5]), 3), {}, RuntimeError,
                           r"one_hot\(\).*non-negative", "negative", data=True),
               ErrorSample((ember.tensor([1, 2], dtype=ember.int32), 3), {}, RuntimeError,
                           r"one_hot\(\).*LongTensor", "int32")]))


# ================================================================== attention, bilinear


def _ref_sdpa(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
              enable_gqa=False):
    q, k, v = _f(q), _f(k), _f(v)
    L, S, E = q.shape[-2], k.shape[-2], q.shape[-1]
    sc = 1 / math.sqrt(E) if scale is None else scale
    s = np.einsum("...le,...se->...ls", q, k) * sc
    if is_causal:
        s = np.where(np.tril(np.ones((L, S), dtype=bool)), s, -np.inf)
    if attn_mask is not None:
        m = np.asarray(attn_mask, dtype=object)
        if m.size and isinstance(m.reshape(-1)[0], bool):
            s = np.where(m.astype(bool), s, -np.inf)
        else:
            s = s + _f(m)
    mx = np.max(s, axis=-1, keepdims=True)
    mx = np.where(np.isneginf(mx), 0.0, mx)
    e = np.exp(s - mx)
    tot = e.sum(-1, keepdims=True)
    p = e / np.where(tot == 0, 1.0, tot)
    return np.einsum("...ls,...sv->...lv", p, v)


def _sdpa_samples(dtype, rng):
    def mk(*s):
        return make(s, dtype, rng, -2, 2)
    boolmask = ember.from_numpy(rng.integers(0, 2, (4, 5)).astype(bool))
    boolmask.numpy()[:, 0] = True
    return [Sample((mk(2, 3, 4, 8), mk(2, 3, 5, 8), mk(2, 3, 5, 6))),
            Sample((mk(2, 4, 8), mk(2, 4, 8), mk(2, 4, 6)), {"is_causal": True},
                   desc="causal"),
            Sample((mk(2, 4, 8), mk(2, 5, 8), mk(2, 5, 6), mk(4, 5)), {"scale": 0.3},
                   desc="float mask, scale"),
            Sample((mk(2, 4, 8), mk(2, 5, 8), mk(2, 5, 6), boolmask), desc="bool mask")]


add(OpInfo("scaled_dot_product_attention", _sdpa_samples, _ref_sdpa, reduction=True,
           dtypes=F32_64,
           torch_fn=lambda torch, *a, **k: torch.nn.functional.scaled_dot_product_attention(
               *a, **k),
           errors=lambda: [ErrorSample((_T(2, 4, 8), _T(2, 4, 8), _T(2, 4, 8), _T(4, 4)),
                                       {"is_causal": True}, RuntimeError,
                                       r"scaled_dot_product_attention\(\).*is_causal",
                                       "mask and causal")]))


def _ref_bilinear(x1, x2, w, b=None):
    out = np.einsum("...i,oij,...j->...o", _f(x1), _f(w), _f(x2))
    return out + _f(b) if b is not None else out


def _bilinear_samples(dtype, rng):
    def mk(*s):
        return make(s, dtype, rng, -2, 2)
    return [Sample((mk(2, 3), mk(2, 4), mk(5, 3, 4), mk(5))),
            Sample((mk(2, 2, 3), mk(2, 2, 4), mk(5, 3, 4)), desc="3-d, no bias")]


add(OpInfo("bilinear", _bilinear_samples, _ref_bilinear, reduction=True, dtypes=F32_64 +
           ("float16",),
           errors=lambda: [ErrorSample((_T(2, 3), _T(2, 4), _T(5, 4, 4)), {}, RuntimeError,
                                       r"bilinear\(\).*input1 size", "size")]))


# ================================================================== losses


def _elementwise_loss(fn):
    def ref(a, b, reduction=1, *extra, **kw):
        a, b = np.broadcast_arrays(_f(a), _f(b))
        out = np.vectorize(lambda x, y: fn(x, y, *extra, **kw), otypes=[np.float64])(a, b) \
            if a.size else np.zeros(a.shape)
        return _reduce(out, reduction)
    return ref


def _loss_samples(lo=-2, hi=2, tlo=None, thi=None, extra=(), reductions=(0, 1, 2)):
    tlo = lo if tlo is None else tlo
    thi = hi if thi is None else thi

    def samples(dtype, rng):
        out = []
        for r in reductions:
            out.append(Sample((make((3, 4), dtype, rng, lo, hi),
                               make((3, 4), dtype, rng, tlo, thi), r) + extra,
                              desc=f"reduction {r}"))
        out.append(Sample((make((3, 4), dtype, rng, lo, hi), make((4,), dtype, rng, tlo, thi),
                           0) + extra, desc="broadcast target"))
        out.append(Sample((make((0, 4), dtype, rng, lo, hi), make((0, 4), dtype, rng, tlo, thi),
                           1) + extra, desc="empty", grad=False))
        return out
    return samples


def _smooth_l1(x, y, beta=1.0):
    d = abs(x - y)
    if beta == 0:
        return d
    return 0.5 * d * d / beta if d < beta else d - 0.5 * beta


def _huber(x, y, delta=1.0):
    d = abs(x - y)
    return 0.5 * d * d if d < delta else delta * (d - 0.5 * delta)


_RED = {0: "none", 1: "mean", 2: "sum"}


def _torch_loss(name, *names):
    """torch.nn.functional.<name> with the reduction given as ATen's int."""
    def fn(torch, x, t, reduction=1, *extra):
        return getattr(torch.nn.functional, name)(x, t, reduction=_RED.get(reduction, reduction),
                                                  **dict(zip(names, extra)))
    return fn


add(OpInfo("mse_loss", _loss_samples(), _elementwise_loss(lambda x, y: (x - y) ** 2),
           reduction=True, dtypes=FLOATS, torch_fn=_torch_loss("mse_loss"),
           errors=lambda: [
               ErrorSample((_T(3, 4), _T(5), 1), {}, RuntimeError,
                           r"mse_loss\(\).*\(4\).*\(5\)", "shape"),
               ErrorSample((_T(3, 4), _T(3, 4), 5), {}, ValueError,
                           r"mse_loss\(\).*not a valid value for reduction", "reduction")]))
add(OpInfo("l1_loss", _loss_samples(), _elementwise_loss(lambda x, y: abs(x - y)),
           reduction=True, dtypes=FLOATS, torch_fn=_torch_loss("l1_loss")))
add(OpInfo("smooth_l1_loss", _loss_samples(extra=(0.5,)), _elementwise_loss(_smooth_l1),
           reduction=True, dtypes=FLOATS, torch_fn=_torch_loss("smooth_l1_loss", "beta"),
           errors=lambda: [ErrorSample((_T(3, 4), _T(3, 4), 1, -1.0), {}, RuntimeError,
                                       r"smooth_l1_loss\(\).*negative values for beta",
                                       "beta")]))
add(OpInfo("huber_loss", _loss_samples(extra=(0.7,)), _elementwise_loss(_huber),
           reduction=True, dtypes=FLOATS, torch_fn=_torch_loss("huber_loss", "delta")))


def _kl(log_target):
    def fn(x, t):
        if log_target:
            return math.exp(t) * (t - x)
        if t == 0:
            return -t * x
        if t < 0:
            return math.nan
        return t * math.log(t) - t * x
    return fn


def _kl_ref(x, t, reduction=1, log_target=False):
    return _elementwise_loss(_kl(log_target))(x, t, reduction)


def _kl_samples(dtype, rng):
    out = _loss_samples(tlo=0.05, thi=1.0)(dtype, rng)
    out.append(Sample((make((3, 4), dtype, rng), make((3, 4), dtype, rng), 2),
                      {"log_target": True}, desc="log target"))
    t = make((2, 3), dtype, rng, 0.1, 1.0)
    t.numpy()[0, 0] = 0
    out.append(Sample((make((2, 3), dtype, rng), t, 0), desc="zero target", grad=False))
    return out


add(OpInfo("kl_div", _kl_samples, _kl_ref, reduction=True, dtypes=FLOATS,
           torch_fn=lambda torch, x, t, reduction=1, **kw: torch.nn.functional.kl_div(
               x, t, reduction={0: "none", 1: "mean", 2: "sum"}[reduction], **kw),
           errors=lambda: [ErrorSample((_T(3, 4, dtype="int64"), _T(3, 4, dtype="int64")), {},
                                       RuntimeError, r"kl_div\(\).*Integral", "int")]))


def _bce_ref(x, t, weight=None, reduction=1):
    x, t = _f(x), _f(t)
    w = np.broadcast_to(_f(weight), x.shape) if weight is not None else np.ones(x.shape)
    out = np.zeros(x.shape)
    for i in np.ndindex(*x.shape):
        lx = max(math.log(x[i]) if x[i] > 0 else -math.inf, -100.0)
        l1x = max(math.log(1 - x[i]) if x[i] < 1 else -math.inf, -100.0)
        out[i] = -w[i] * (t[i] * lx + (1 - t[i]) * l1x)
    return _reduce(out, reduction)


def _bce_samples(dtype, rng):
    def mk(*s):
        return make(s, dtype, rng, 0.05, 0.95)
    return [Sample((mk(3, 4), mk(3, 4), None, 1)),
            Sample((mk(3, 4), mk(3, 4), None, 0)),
            Sample((mk(3, 4), mk(3, 4), mk(4), 2), desc="weight", grad=False),
            Sample((mk(2, 3), ember.from_numpy(rng.integers(0, 2, (2, 3)).astype(dtype)),
                    None, 1), desc="hard targets")]


add(OpInfo("binary_cross_entropy", _bce_samples, _bce_ref, reduction=True, dtypes=FLOATS,
           torch_fn=lambda torch, x, t, weight=None, reduction=1:
           torch.nn.functional.binary_cross_entropy(
               x, t, weight, reduction={0: "none", 1: "mean", 2: "sum"}[reduction]),
           errors=lambda: [
               ErrorSample((_T(3, 4) * 2, _T(3, 4)), {}, RuntimeError,
                           r"binary_cross_entropy\(\).*between 0 and 1", "range", data=True),
               ErrorSample((_T(3, 4) * 0.5, _T(3, 4, dtype="float64")), {}, RuntimeError,
                           r"binary_cross_entropy\(\).*Found dtype Double but expected Float",
                           "dtype")]))


def _bce_logits_ref(x, t, weight=None, pos_weight=None, reduction=1):
    x, t = np.broadcast_arrays(_f(x), _f(t))
    w = np.broadcast_to(_f(weight), x.shape) if weight is not None else np.ones(x.shape)
    pw = np.broadcast_to(_f(pos_weight), x.shape) if pos_weight is not None else \
        np.ones(x.shape)
    out = np.zeros(x.shape)
    for i in np.ndindex(*x.shape):
        sp = math.log1p(math.exp(-abs(x[i]))) + max(-x[i], 0.0)   # log(1 + exp(-x))
        out[i] = w[i] * ((1 - t[i]) * x[i] + (1 + (pw[i] - 1) * t[i]) * sp)
    return _reduce(out, reduction)


def _bce_logits_samples(dtype, rng):
    def mk(*s, lo=-4, hi=4):
        return make(s, dtype, rng, lo, hi)
    return [Sample((mk(3, 4), mk(3, 4, lo=0, hi=1), None, None, 1)),
            Sample((mk(3, 4), mk(3, 4, lo=0, hi=1), mk(4, lo=0.2, hi=2), mk(4, lo=0.5, hi=3),
                    0), desc="weights"),
            Sample((mk(3, 4, lo=-30, hi=30), mk(3, 4, lo=0, hi=1), None, None, 2),
                   desc="large logits")]


add(OpInfo("binary_cross_entropy_with_logits", _bce_logits_samples, _bce_logits_ref,
           reduction=True, dtypes=FLOATS,
           errors=lambda: [ErrorSample((_T(3, 4, dtype="int64"), _T(3, 4, dtype="int64")), {},
                                       NotImplementedError,
                                       r"binary_cross_entropy_with_logits\(\).*Long", "int"),
                           ErrorSample((_T(3, 4, dtype="int64"), _T(3, 4, dtype="float64")),
                                       {}, NotImplementedError,
                                       r"binary_cross_entropy_with_logits\(\).*Long",
                                       "int logits, float target")]))


def _class_dim(x):
    return 1 if x.ndim >= 2 else 0


def _ref_nll_like(x, target, weight, reduction, ignore_index, label_smoothing=0.0,
                  log_softmax=False):
    x = _f(x)
    cd = _class_dim(x)
    C = x.shape[cd]
    if log_softmax:
        xm = np.moveaxis(x, cd, -1)
        lp = np.empty(xm.shape)
        for i in np.ndindex(*xm.shape[:-1]):
            row = xm[i]
            m = max(row)
            lse = m + math.log(math.fsum(math.exp(v - m) for v in row))
            lp[i] = row - lse
        x = np.moveaxis(lp, -1, cd)
    w = _f(weight) if weight is not None else np.ones(C)
    xm = np.moveaxis(x, cd, -1)
    tgt = np.asarray(target, dtype=object)
    prob = tgt.shape == x.shape
    losses, denom = [], []
    for i in np.ndindex(*xm.shape[:-1]):
        row = xm[i]
        if prob:
            q = np.moveaxis(_f(tgt), cd, -1)[i]
            q = q * (1 - label_smoothing) + label_smoothing / C
            losses.append(-math.fsum(q[c] * w[c] * row[c] for c in range(C)))
            denom.append(1.0)
            continue
        t = int(tgt[i])
        if t == ignore_index:
            losses.append(0.0)
            denom.append(0.0)
            continue
        nll = -w[t] * row[t]
        smooth = -math.fsum(w[c] * row[c] for c in range(C))
        losses.append((1 - label_smoothing) * nll + label_smoothing / C * smooth)
        denom.append(w[t])
    losses = np.array(losses).reshape(xm.shape[:-1])
    if reduction == 0:
        return losses
    s = math.fsum(losses.reshape(-1))
    if reduction == 2:
        return np.array(s)
    d = math.fsum(denom)
    return np.array(s / d if d else math.nan)


def _targets(rng, shape, C, ignore=None):
    t = rng.integers(0, C, shape)
    if ignore is not None and t.size > 1:
        t.reshape(-1)[0] = ignore
    return ember.from_numpy(np.array(t, dtype=np.int64))


def _nll_samples(dtype, rng):
    def mk(*s):
        return make(s, dtype, rng, -3, 0)
    return [Sample((mk(4, 5), _targets(rng, (4,), 5), None, 1, -100)),
            Sample((mk(4, 5), _targets(rng, (4,), 5, ignore=2), mk(5), 1, 2),
                   desc="weight, ignore_index", grad=False),
            Sample((mk(2, 5, 3), _targets(rng, (2, 3), 5), None, 0, -100), desc="spatial"),
            Sample((mk(5), _targets(rng, (), 5), None, 2, -100), desc="unbatched"),
            Sample((mk(4, 5), _targets(rng, (4,), 5, ignore=-100), None, 2, -100),
                   desc="ignored sample")]


add(OpInfo("nll_loss", _nll_samples, lambda x, t, w=None, reduction=1, ignore_index=-100:
           _ref_nll_like(x, t, w, reduction, ignore_index), reduction=True, dtypes=FLOATS,
           torch_fn=lambda torch, x, t, w=None, reduction=1, ignore_index=-100:
           torch.nn.functional.nll_loss(x, t, w, ignore_index=ignore_index,
                                        reduction={0: "none", 1: "mean", 2: "sum"}[reduction]),
           errors=lambda: [
               ErrorSample((_T(3, 4), ember.tensor([1, 2])), {}, ValueError,
                           r"nll_loss\(\).*batch_size \(3\).*\(2\)", "batch"),
               ErrorSample((_T(3, 4), ember.tensor([1.0, 2, 3])), {}, RuntimeError,
                           r"nll_loss\(\).*Long or Byte", "float target"),
               ErrorSample((_T(3, 4), ember.tensor([1, 2, 7])), {}, IndexError,
                           r"nll_loss\(\).*Target 7 is out of bounds", "bounds", data=True),
               ErrorSample((_T(3, 4), ember.tensor([1, 2, 3]), _T(3)), {}, RuntimeError,
                           r"nll_loss\(\).*all 4 classes", "weight")]))


def _ce_samples(dtype, rng):
    def mk(*s, lo=-3, hi=3):
        return make(s, dtype, rng, lo, hi)
    return [Sample((mk(4, 5), _targets(rng, (4,), 5), None, 1, -100, 0.0)),
            Sample((mk(4, 5), _targets(rng, (4,), 5, ignore=1), mk(5, lo=0.2, hi=2), 1, 1,
                    0.2), desc="weight, ignore_index, smoothing", grad=False),
            Sample((mk(4, 5), _targets(rng, (4,), 5, ignore=1), None, 1, 1, 0.3),
                   desc="ignore_index, smoothing"),
            Sample((mk(2, 5, 3), _targets(rng, (2, 3), 5), None, 0, -100, 0.1),
                   desc="spatial, smoothing"),
            Sample((mk(5), _targets(rng, (), 5), None, 2, -100, 0.0), desc="unbatched"),
            Sample((mk(4, 5), mk(4, 5, lo=0, hi=1), None, 1, -100, 0.0), desc="probabilities"),
            Sample((mk(3, 4), mk(3, 4, lo=0, hi=1), mk(4, lo=0.2, hi=2), 0, -100, 0.25),
                   desc="probabilities, weight, smoothing", grad=False)]


add(OpInfo("cross_entropy_loss", _ce_samples,
           lambda x, t, w=None, reduction=1, ignore_index=-100, label_smoothing=0.0:
           _ref_nll_like(x, t, w, reduction, ignore_index, label_smoothing, True),
           reduction=True, dtypes=FLOATS,
           torch_fn=lambda torch, x, t, w=None, reduction=1, ignore_index=-100,
           label_smoothing=0.0: torch.nn.functional.cross_entropy(
               x, t, w, ignore_index=ignore_index, label_smoothing=label_smoothing,
               reduction={0: "none", 1: "mean", 2: "sum"}[reduction]),
           errors=lambda: [
               ErrorSample((_T(3, 4), ember.tensor([1, 2])), {}, ValueError,
                           r"cross_entropy_loss\(\).*batch_size", "batch"),
               ErrorSample((_T(3, 4), ember.tensor([1, 2, 3]), None, 1, -100, 1.5), {},
                           RuntimeError, r"cross_entropy_loss\(\).*label_smoothing", "smoothing"),
               ErrorSample((_T(3, 4), _T(3, 4), None, 1, 1), {}, RuntimeError,
                           r"cross_entropy_loss\(\).*ignore_index is not supported", "ignore"),
               ErrorSample((_T(3, 4), ember.tensor([1, 2, 4])), {}, IndexError,
                           r"cross_entropy_loss\(\).*Target 4", "bounds", data=True)]))


# ================================================================== im2col (unfold)


def _ref_im2col(x, kernel_size, dilation, padding, stride):
    x = np.asarray(x, dtype=object)
    batched = x.ndim == 4
    if not batched:
        x = x[None]
    (kh, kw), (dh, dw), (ph, pw), (sh, sw) = (_pair(kernel_size), _pair(dilation),
                                              _pair(padding), _pair(stride))
    N, C, H, W = x.shape
    oh = (H + 2 * ph - dh * (kh - 1) - 1) // sh + 1
    ow = (W + 2 * pw - dw * (kw - 1) - 1) // sw + 1
    zero = False if N * C * H * W and isinstance(x.reshape(-1)[0], bool) else 0
    out = np.empty((N, C * kh * kw, oh * ow), dtype=object)
    for n in range(N):
        for c in range(C):
            for i in range(kh):
                for j in range(kw):
                    for a in range(oh):
                        for b in range(ow):
                            h, w = a * sh - ph + i * dh, b * sw - pw + j * dw
                            v = x[n, c, h, w] if 0 <= h < H and 0 <= w < W else zero
                            out[n, (c * kh + i) * kw + j, a * ow + b] = v
    return out if batched else out[0]


def _im2col_samples(dtype, rng):
    def mk(*s):
        return make(s, dtype, rng)
    return [Sample((mk(2, 3, 4, 5), [2, 2], [1, 1], [0, 0], [1, 1])),
            Sample((mk(1, 2, 5, 6), [3, 2], [1, 2], [1, 1], [2, 1]), desc="padded strided"),
            Sample((mk(3, 4, 4), [2, 3], [1, 1], [1, 0], [1, 2]), desc="unbatched")]


add(OpInfo("im2col", _im2col_samples, _ref_im2col, dtypes=FLOATS + BOOL,
           torch_fn=_t("im2col"),
           errors=lambda: [
               ErrorSample((_T(1, 2, 4, 4), [0, 2], [1, 1], [0, 0], [1, 1]), {}, RuntimeError,
                           r"im2col\(\).*kernel size should be greater than zero", "kernel"),
               ErrorSample((_T(1, 2, 4, 4), [5, 2], [1, 1], [0, 0], [1, 1]), {}, RuntimeError,
                           r"im2col\(\).*must be at least one", "too small"),
               ErrorSample((_T(1, 2, 4, 4, dtype="int64"), [2, 2], [1, 1], [0, 0], [1, 1]), {},
                           NotImplementedError, r"im2col\(\).*Long", "int64")]))


# ================================================================== [eager-2] 3-d and more
#
# 3-d convolution and pooling, adaptive max pooling, bicubic/trilinear/3-d nearest and
# nearest-exact resizing, pixel and channel shuffle, instance norm. The references loop
# over output positions, windows and taps (or permute with NumPy for the shuffles).


def _triple_p(v, fallback=None):
    v = tuple(v) if isinstance(v, (tuple, list)) else (v,)
    if not v:
        return fallback
    return v * 3 if len(v) == 1 else v


def _ref_conv3d_core(x, w, b, s, p, d, transposed, op_, G):
    """Direct 3-d (transposed) convolution: one strided slice of the padded input per tap
    (or the input scattered through each tap)."""
    x, w = _f(x), _f(w)
    N, C = x.shape[:2]
    sp = x.shape[2:]
    ks = w.shape[2:]
    if not transposed:
        cout, cig = w.shape[:2]
        cog = cout // G
        out_sp = [(sp[i] + 2 * p[i] - d[i] * (ks[i] - 1) - 1) // s[i] + 1 for i in range(3)]
        xp = np.zeros((N, C) + tuple(sp[i] + 2 * p[i] for i in range(3)))
        xp[:, :, p[0]:p[0] + sp[0], p[1]:p[1] + sp[1], p[2]:p[2] + sp[2]] = x
        out = np.zeros((N, cout) + tuple(out_sp))
        for g in range(G):
            for taps in np.ndindex(*ks):
                sl = tuple(slice(taps[i] * d[i], taps[i] * d[i] + s[i] * (out_sp[i] - 1) + 1,
                                 s[i]) for i in range(3))
                patch = xp[(slice(None), slice(g * cig, (g + 1) * cig)) + sl]
                out[:, g * cog:(g + 1) * cog] += np.einsum(
                    "ncdhw,oc->nodhw", patch, w[(slice(g * cog, (g + 1) * cog), slice(None))
                                                + taps])
    else:
        cin, cog = w.shape[:2]
        cig, cout = cin // G, cog * G
        out_sp = [(sp[i] - 1) * s[i] - 2 * p[i] + d[i] * (ks[i] - 1) + op_[i] + 1
                  for i in range(3)]
        big = np.zeros((N, cout) + tuple(out_sp[i] + 2 * p[i] + s[i] + d[i] * ks[i]
                                         for i in range(3)))
        for g in range(G):
            for taps in np.ndindex(*ks):
                sl = tuple(slice(taps[i] * d[i], taps[i] * d[i] + s[i] * (sp[i] - 1) + 1,
                                 s[i]) for i in range(3))
                big[(slice(None), slice(g * cog, (g + 1) * cog)) + sl] += np.einsum(
                    "ncdhw,co->nodhw", x[:, g * cig:(g + 1) * cig],
                    w[(slice(g * cig, (g + 1) * cig), slice(None)) + taps])
        out = big[(slice(None), slice(None)) + tuple(slice(p[i], p[i] + out_sp[i])
                                                     for i in range(3))]
    if b is not None:
        out = out + _f(b)[None, :, None, None, None]
    return out


def _ref_conv3d(x, w, b=None, stride=1, padding=0, dilation=1, groups=1):
    x = _f(x)
    unbatched = x.ndim == 4
    if unbatched:
        x = x[None]
    d = _triple_p(dilation)
    if isinstance(padding, str):
        ks = np.shape(w)[2:]
        total = [d[i] * (ks[i] - 1) if padding == "same" else 0 for i in range(3)]
        xp = np.zeros(x.shape[:2] + tuple(x.shape[2 + i] + total[i] for i in range(3)))
        lo = [t // 2 for t in total]
        xp[:, :, lo[0]:lo[0] + x.shape[2], lo[1]:lo[1] + x.shape[3],
           lo[2]:lo[2] + x.shape[4]] = x
        x, padding = xp, 0
    out = _ref_conv3d_core(x, w, b, _triple_p(stride), _triple_p(padding), d, False,
                           (0, 0, 0), groups)
    return out[0] if unbatched else out


def _conv3d_samples(dtype, rng):
    def mk(*s):
        return make(s, dtype, rng, -2, 2)
    return [Sample((mk(2, 3, 4, 5, 4), mk(4, 3, 2, 3, 2), mk(4))),
            Sample((mk(1, 4, 5, 4, 6), mk(6, 2, 3, 2, 2)),
                   {"stride": (2, 1, 2), "padding": (1, 0, 1), "dilation": (1, 2, 1),
                    "groups": 2}, desc="grouped strided dilated padded"),
            Sample((mk(3, 4, 5, 3), mk(2, 3, 2, 3, 2)), {"padding": "same"},
                   desc="unbatched same"),
            Sample((mk(1, 2, 3, 4, 3), mk(2, 2, 1, 1, 1), mk(2)), desc="1x1x1"),
            Sample((mk(0, 2, 3, 3, 3), mk(2, 2, 2, 2, 2)), desc="empty batch", grad=False)]


add(OpInfo("conv3d", _conv3d_samples, _ref_conv3d, reduction=True, dtypes=CONV_DTYPES,
           torch_fn=lambda torch, *a, **k: torch.nn.functional.conv3d(*a, **k),
           errors=lambda: [
               ErrorSample((_T(1, 2, 4, 4, 4, 4), _T(3, 2, 2, 2, 2)), {}, RuntimeError,
                           r"conv3d\(\).*4D \(unbatched\) or 5D", "rank"),
               ErrorSample((_T(1, 3, 4, 4, 4), _T(3, 2, 2, 2, 2)), {}, RuntimeError,
                           r"conv3d\(\).*to have 2 channels, but got 3", "channels"),
               ErrorSample((_T(1, 2, 1, 4, 4), _T(3, 2, 2, 2, 2)), {}, RuntimeError,
                           r"conv3d\(\).*Kernel size can't be greater", "too small"),
               ErrorSample((_T(1, 2, 4, 4, 4), _T(3, 2, 2, 2, 2)), {"stride": (1, 2)},
                           RuntimeError, r"conv3d\(\).*list of 3 values", "stride length"),
               ErrorSample((_T(1, 2, 4, 4, 4), _T(3, 2, 2, 2, 2)),
                           {"padding": "same", "stride": 2}, RuntimeError,
                           r"conv3d\(\).*strided", "same strided"),
               ErrorSample((_T(1, 2, 4, 4, 4, dtype="int32"), _T(3, 2, 2, 2, 2, dtype="int32")),
                           {"dilation": 2}, NotImplementedError, r"conv3d\(\).*Int",
                           "dilated int32"),
               ErrorSample((_T(1, 2, 4, 4, 4, dtype="bool"), _T(3, 2, 2, 2, 2, dtype="bool")),
                           {}, NotImplementedError, r"conv3d\(\).*Bool", "bool")]))


def _ref_conv_t3d(x, w, b=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1):
    x = _f(x)
    unbatched = x.ndim == 4
    out = _ref_conv3d_core(x[None] if unbatched else x, w, b, _triple_p(stride),
                           _triple_p(padding), _triple_p(dilation), True,
                           _triple_p(output_padding), groups)
    return out[0] if unbatched else out


def _conv_t3d_samples(dtype, rng):
    def mk(*s):
        return make(s, dtype, rng, -2, 2)
    return [Sample((mk(2, 3, 2, 3, 2), mk(3, 2, 2, 3, 2), mk(2)),
                   {"stride": 2, "padding": 1, "output_padding": 1}),
            Sample((mk(4, 2, 3, 2), mk(4, 1, 2, 2, 3)),
                   {"stride": (1, 2, 1), "groups": 2, "dilation": (2, 1, 1),
                    "output_padding": (1, 1, 0)}, desc="unbatched grouped dilated"),
            Sample((mk(1, 2, 2, 2, 2), mk(2, 3, 1, 1, 1)), desc="1x1x1")]


add(OpInfo("conv_transpose3d.input", _conv_t3d_samples, _ref_conv_t3d, reduction=True,
           dtypes=CONV_DTYPES,
           torch_fn=lambda torch, *a, **k: torch.nn.functional.conv_transpose3d(*a, **k),
           errors=lambda: [
               ErrorSample((_T(1, 2, 3, 3, 3), _T(2, 3, 2, 2, 2)),
                           {"stride": 2, "output_padding": 2}, RuntimeError,
                           r"conv_transpose3d\(\).*output padding must be smaller", "op"),
               ErrorSample((_T(1, 3, 3, 3, 3), _T(2, 3, 2, 2, 2)), {}, RuntimeError,
                           r"conv_transpose3d\(\).*transposed=1.*2 channels", "channels"),
               ErrorSample((_T(1, 2, 3, 3, 3, dtype="int32"), _T(2, 3, 2, 2, 2, dtype="int32")),
                           {}, NotImplementedError, r"conv_transpose3d\(\).*Int", "int32")]))


# ------------------------------------------------------------------ windowed maxima


def _ref_window_max(x, windows):
    """Maxima of x's last len(windows) dims and their flat indices: windows[i][o] lists
    the input positions of output o along dim i in window order. PyTorch's rule: the
    first maximum, a NaN wins (the last one seen)."""
    x = np.asarray(x, dtype=object)
    nsp = len(windows)
    sizes = x.shape[x.ndim - nsp:]
    lead = x.shape[:x.ndim - nsp]
    outs = tuple(len(w) for w in windows)
    vals = np.empty(lead + outs, dtype=object)
    idx = np.empty(lead + outs, dtype=object)
    for l in np.ndindex(*lead):
        for o in np.ndindex(*outs):
            best = None
            for pos in itertools.product(*[windows[i][o[i]] for i in range(nsp)]):
                v = x[l + pos]
                isnan = isinstance(v, float) and math.isnan(v)
                if best is None or isnan or v > best[0]:
                    flat = 0
                    for i in range(nsp):
                        flat = flat * sizes[i] + pos[i]
                    best = (v, flat)
            vals[l + o], idx[l + o] = best
    return vals, idx


def _pool_windows(n, k, s, p, d, ceil_mode):
    o_n = _pool_len(n, k, p, s, d, ceil_mode)
    return [[o * s - p + i * d for i in range(k) if 0 <= o * s - p + i * d < n]
            for o in range(o_n)]


def _ref_max_pool3d(x, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
    k = _triple_p(kernel_size)
    s, p, d = _triple_p(stride, k), _triple_p(padding), _triple_p(dilation)
    sp = np.shape(x)[-3:]
    return _ref_window_max(x, [_pool_windows(sp[i], k[i], s[i], p[i], d[i], ceil_mode)
                               for i in range(3)])


def _max_pool3d_samples(dtype, rng):
    def mk(*s):
        return make(s, dtype, rng, -3, 3)
    return [Sample((mk(2, 2, 4, 4, 5), [2, 2, 2])),
            Sample((mk(1, 2, 5, 4, 6), [3, 2, 3], [2, 1, 2], [1, 1, 1], [1, 1, 1], True),
                   desc="ceil, pad"),
            Sample((mk(2, 5, 4, 5), [2, 2, 2], [1, 2, 1], [0, 1, 1], [2, 1, 2]),
                   desc="4-d, dilated"),
            Sample((mk(0, 2, 3, 3, 3), [2, 2, 2]), desc="empty batch", grad=False)]


def _max_pool3d_errors():
    def E(args, match, desc, exc=RuntimeError):
        return ErrorSample(args, {}, exc, r"max_pool3d_with_indices\(\).*" + match, desc)
    return [E((_T(2, 3, 3), [2, 2, 2]), r"4D or 5D", "rank"),
            E((_T(1, 2, 3, 3, 3), [2, 2]), r"kernel_size must", "kernel list"),
            E((_T(1, 2, 3, 3, 3), [2, 2, 2], [1, 1, 1], [2, 2, 2]),
              r"pad should be at most half", "pad"),
            E((_T(1, 2, 3, 3, 3), [4, 4, 4]), r"Output size is too small", "too small"),
            E((_T(1, 2, 3, 3, 3), [2, 2, 2], [0, 1, 1]), r"stride should not be zero",
              "zero stride"),
            E((_T(1, 2, 3, 3, 3, dtype="bool"), [2, 2, 2]), r"Bool", "bool",
              NotImplementedError)]


add(OpInfo("max_pool3d_with_indices", _max_pool3d_samples, _ref_max_pool3d, dtypes=NO_BOOL,
           torch_fn=_t("max_pool3d_with_indices"), errors=_max_pool3d_errors))


def _adaptive_windows(n, o_n):
    return [list(range((o * n) // o_n, -((-(o + 1) * n) // o_n))) for o in range(o_n)]


def _ref_adaptive_max(x, output_size):
    nsp = len(output_size)
    sp = np.shape(x)[-nsp:]
    return _ref_window_max(x, [_adaptive_windows(sp[i], output_size[i]) for i in range(nsp)])


def _adaptive_max_samples(nsp):
    def samples(dtype, rng):
        def mk(*s):
            return make(s, dtype, rng, -3, 3)
        if nsp == 2:
            return [Sample((mk(2, 3, 7, 5), [3, 2])), Sample((mk(3, 5, 4), [5, 6]),
                                                             desc="3-d, larger"),
                    Sample((mk(1, 2, 4, 4), [1, 1]), desc="global")]
        return [Sample((mk(2, 2, 5, 4, 6), [3, 2, 4])),
                Sample((mk(2, 3, 4, 5), [1, 4, 3]), desc="4-d"),
                Sample((mk(1, 1, 3, 3, 3), [3, 3, 3]), desc="same size")]
    return samples


for _n in (2, 3):
    add(OpInfo(f"adaptive_max_pool{_n}d", _adaptive_max_samples(_n), _ref_adaptive_max,
               dtypes=FLOATS, torch_fn=_t(f"adaptive_max_pool{_n}d"),
               errors=(lambda n: lambda: [
                   ErrorSample((_T(*([2] * n)), [2] * n), {}, RuntimeError,
                               rf"adaptive_max_pool{n}d\(\).*Expected {n + 1}D or {n + 2}D",
                               "rank"),
                   ErrorSample((_T(*([2] * (n + 2)), dtype="int64"), [2] * n), {},
                               NotImplementedError, rf"adaptive_max_pool{n}d\(\).*Long",
                               "int")])(_n)))


# ------------------------------------------------------------------ 3-d average pooling


def _ref_avg_pool3d(x, kernel_size, stride=(), padding=0, ceil_mode=False,
                    count_include_pad=True, divisor_override=None):
    x = np.asarray(x, dtype=object)
    k = _triple_p(kernel_size)
    s, p = _triple_p(stride, k), _triple_p(padding)
    sp = x.shape[-3:]
    outs = [_pool_len(sp[i], k[i], p[i], s[i], 1, ceil_mode) for i in range(3)]
    floaty = any(isinstance(v, float) for v in x.reshape(-1))
    out = np.empty(x.shape[:-3] + tuple(outs), dtype=object)
    for l in np.ndindex(*x.shape[:-3]):
        for o in np.ndindex(*outs):
            lo = [o[i] * s[i] - p[i] for i in range(3)]
            hi = [min(lo[i] + k[i], sp[i] + p[i]) for i in range(3)]
            pool = (hi[0] - lo[0]) * (hi[1] - lo[1]) * (hi[2] - lo[2])
            lo = [max(v, 0) for v in lo]
            hi = [min(hi[i], sp[i]) for i in range(3)]
            vals = [x[l + (a, b, c)] for a in range(lo[0], hi[0]) for b in range(lo[1], hi[1])
                    for c in range(lo[2], hi[2])]
            if divisor_override is not None:
                div = divisor_override
            elif count_include_pad:
                div = pool
            else:
                div = (hi[0] - lo[0]) * (hi[1] - lo[1]) * (hi[2] - lo[2])
            if floaty:
                out[l + o] = math.fsum(vals) / div
            else:
                tot = sum(vals)
                q = abs(tot) // div
                out[l + o] = q if tot >= 0 else -q
    return out


def _avg_pool3d_samples(dtype, rng):
    def mk(*s):
        return make(s, dtype, rng, -3, 3)
    return [Sample((mk(2, 2, 4, 4, 5), [2, 2, 2])),
            Sample((mk(1, 2, 5, 4, 6), [3, 2, 3], [2, 1, 2], [1, 1, 1], True), desc="ceil, pad"),
            Sample((mk(1, 2, 5, 4, 6), [3, 2, 3], [2, 1, 2], [1, 1, 1], True, False),
                   desc="ceil, pad, no count_include_pad"),
            Sample((mk(2, 5, 4, 5), [3, 2, 2], [1, 2, 1], [1, 0, 1]), desc="4-d"),
            Sample((mk(1, 2, 4, 3, 4), [2, 3, 2], [2, 2, 2], [1, 1, 1], False, True, 5),
                   desc="divisor")]


add(OpInfo("avg_pool3d", _avg_pool3d_samples, _ref_avg_pool3d,
           dtypes=("float32", "float64", "int64"), torch_fn=_t("avg_pool3d"),
           errors=lambda: [
               ErrorSample((_T(1, 2, 3, 3, 3), [2, 2, 2], [1, 1, 1], [2, 2, 2]), {},
                           RuntimeError, r"avg_pool3d\(\).*pad should be at most half", "pad"),
               ErrorSample((_T(1, 2, 3, 3, 3), [4, 4, 4]), {}, RuntimeError,
                           r"avg_pool3d\(\).*smaller than kernel size", "too small"),
               ErrorSample((_T(1, 2, 3, 3, 3), [2, 2, 2], [1, 1, 1], [1, 1, 1], False, True, 0),
                           {}, RuntimeError, r"avg_pool3d\(\).*divisor must be not zero",
                           "divisor"),
               ErrorSample((_T(1, 2, 3, 3, 3, dtype="float16"), [2, 2, 2]), {},
                           NotImplementedError, r"avg_pool3d\(\).*Half", "half")]))


def _ref_adaptive3d(x, output_size):
    x = np.asarray(x, dtype=object)
    sp = x.shape[-3:]
    wins = [_adaptive_windows(sp[i], output_size[i]) for i in range(3)]
    out = np.empty(x.shape[:-3] + tuple(output_size), dtype=object)
    for l in np.ndindex(*x.shape[:-3]):
        for o in np.ndindex(*output_size):
            vals = [x[l + pos] for pos in itertools.product(*[wins[i][o[i]]
                                                              for i in range(3)])]
            out[l + o] = math.fsum(vals) / len(vals)
    return out


def _adaptive3d_samples(dtype, rng):
    def mk(*s):
        return make(s, dtype, rng, -3, 3)
    return [Sample((mk(2, 2, 5, 4, 6), [3, 2, 4])), Sample((mk(2, 3, 4, 5), [1, 1, 1]),
                                                           desc="4-d, global"),
            Sample((mk(1, 2, 3, 2, 3), [4, 5, 3]), desc="larger")]


add(OpInfo("adaptive_avg_pool3d", _adaptive3d_samples, _ref_adaptive3d, dtypes=FLOATS,
           torch_fn=_t("adaptive_avg_pool3d"),
           errors=lambda: [
               ErrorSample((_T(1, 2, 3, 3, 3), [2, 2]), {}, RuntimeError,
                           r"adaptive_avg_pool3d\(\).*output_size must be 3", "size"),
               ErrorSample((_T(2, 3, 3), [2, 2, 2]), {}, RuntimeError,
                           r"adaptive_avg_pool3d\(\).*4D or 5D", "rank")]))


# ------------------------------------------------------------------ resampling


def _src_nearest(o, n_in, n_out, scale, exact):
    sc = np.float32(1.0 / scale) if scale else np.float32(n_in) / np.float32(n_out)
    if exact:
        return min(int(math.floor(np.float32(np.float32(o + 0.5) * sc))), n_in - 1)
    if n_out == n_in:
        return o
    if n_out == 2 * n_in:
        return o >> 1
    return min(int(math.floor(np.float32(o) * sc)), n_in - 1)


def _ref_nearest_nd(exact):
    def ref(x, output_size, *scales):
        x = np.asarray(x, dtype=object)
        nsp = len(output_size)
        sp = x.shape[-nsp:]
        scales = list(scales) + [None] * (nsp - len(scales))
        maps = [[_src_nearest(o, sp[i], output_size[i], scales[i], exact)
                 for o in range(output_size[i])] for i in range(nsp)]
        out = np.empty(x.shape[:-nsp] + tuple(output_size), dtype=object)
        for l in np.ndindex(*x.shape[:-nsp]):
            for o in np.ndindex(*output_size):
                out[l + o] = x[l + tuple(maps[i][o[i]] for i in range(nsp))]
        return out
    return ref


def _resize_samples(nsp, extra=()):
    def samples(dtype, rng):
        def mk(*s):
            return make(s, dtype, rng, 0, 3)
        if nsp == 2:
            shapes = [((2, 3, 4, 5), [8, 10]), ((1, 2, 5, 6), [7, 4]), ((1, 1, 3, 3), [3, 9])]
            scales = (2.0, 1.5)
        else:
            shapes = [((1, 2, 3, 4, 3), [6, 8, 6]), ((1, 2, 4, 3, 5), [3, 7, 4]),
                      ((2, 1, 2, 3, 2), [2, 3, 5])]
            scales = (2.0, 1.5, 0.7)
        out = [Sample((mk(*s), size) + extra) for s, size in shapes]
        s0 = shapes[0][0]
        size = [int(math.floor(n * f)) for n, f in zip(s0[2:], scales)]
        out.append(Sample((mk(*s0), size) + extra + scales, desc="scales"))
        return out
    return samples


_RESIZE_DTYPES = ("uint8",) + FLOATS

add(OpInfo("upsample_nearest3d", _resize_samples(3), _ref_nearest_nd(False),
           dtypes=_RESIZE_DTYPES, torch_fn=_t("upsample_nearest3d"),
           errors=lambda: [
               ErrorSample((_T(1, 2, 3, 3), [4, 4, 4]), {}, RuntimeError,
                           r"upsample_nearest3d\(\).*input_size equals to 5", "rank")]))
add(OpInfo("_upsample_nearest_exact2d", _resize_samples(2), _ref_nearest_nd(True),
           dtypes=_RESIZE_DTYPES, torch_fn=_t("_upsample_nearest_exact2d")))
add(OpInfo("_upsample_nearest_exact3d", _resize_samples(3), _ref_nearest_nd(True),
           dtypes=_RESIZE_DTYPES, torch_fn=_t("_upsample_nearest_exact3d")))


def _lin_taps(o, n_in, n_out, align_corners, scale):
    if align_corners:
        real = (n_in - 1) / (n_out - 1) * o if n_out > 1 else 0.0
    else:
        sc = 1.0 / scale if scale else n_in / n_out
        real = max(sc * (o + 0.5) - 0.5, 0.0)
    i0 = min(int(math.floor(real)), n_in - 1)
    lam = min(max(real - i0, 0.0), 1.0)
    return [(i0, 1.0 - lam), (i0 + (1 if i0 < n_in - 1 else 0), lam)]


def _cubic_taps(o, n_in, n_out, align_corners, scale):
    A = -0.75
    if align_corners:
        real = (n_in - 1) / (n_out - 1) * o if n_out > 1 else 0.0
    else:
        sc = 1.0 / scale if scale else n_in / n_out
        real = sc * (o + 0.5) - 0.5
    i0 = min(int(math.floor(real)), n_in - 1)
    t = min(max(real - i0, 0.0), 1.0)

    def near(z):
        return ((A + 2) * z - (A + 3)) * z * z + 1

    def far(z):
        return ((A * z - 5 * A) * z + 8 * A) * z - 4 * A
    ws = (far(t + 1), near(t), near(1 - t), far(2 - t))
    return [(min(max(i0 - 1 + j, 0), n_in - 1), ws[j]) for j in range(4)]


def _ref_separable(taps_fn):
    def ref(x, output_size, align_corners, *scales):
        x = _f(x)
        nsp = len(output_size)
        sp = x.shape[-nsp:]
        scales = list(scales) + [None] * (nsp - len(scales))
        taps = [[taps_fn(o, sp[i], output_size[i], align_corners, scales[i])
                 for o in range(output_size[i])] for i in range(nsp)]
        out = np.zeros(x.shape[:-nsp] + tuple(output_size))
        for o in np.ndindex(*output_size):
            acc = 0.0
            for combo in itertools.product(*[taps[i][o[i]] for i in range(nsp)]):
                w = 1.0
                for _, wi in combo:
                    w *= wi
                acc = acc + w * x[(Ellipsis,) + tuple(c[0] for c in combo)]
            out[(Ellipsis,) + o] = acc
        return out
    return ref


def _with_corners(samples):
    def both(dtype, rng):
        out = samples(dtype, rng)
        plain = [Sample(s.args[:2] + (False,) + s.args[2:], desc=s.desc) for s in out]
        corners = [Sample(s.args[:2] + (True,), desc=(s.desc or "") + " align_corners")
                   for s in out[:3]]
        return plain + corners
    return both


add(OpInfo("upsample_trilinear3d", _with_corners(_resize_samples(3)), _ref_separable(_lin_taps),
           dtypes=FLOATS, torch_fn=_t("upsample_trilinear3d")))
add(OpInfo("upsample_bicubic2d", _with_corners(_resize_samples(2)), _ref_separable(_cubic_taps),
           dtypes=FLOATS, torch_fn=_t("upsample_bicubic2d"),
           errors=lambda: [
               ErrorSample((_T(1, 2, 3), [4, 4], False), {}, RuntimeError,
                           r"upsample_bicubic2d\(\).*input_size equals to 4", "rank"),
               ErrorSample((_T(1, 2, 3, 3), [0, 4], False), {}, RuntimeError,
                           r"upsample_bicubic2d\(\).*greater than 0", "empty"),
               ErrorSample((_T(1, 2, 3, 3, dtype="int32"), [4, 4], False), {},
                           NotImplementedError, r"upsample_bicubic2d\(\).*Int", "int")]))


# ------------------------------------------------------------------ shuffles


def _ref_pixel_shuffle(x, r):
    a = np.asarray(x, dtype=object)
    *lead, c, h, w = a.shape
    a = a.reshape(tuple(lead) + (c // (r * r), r, r, h, w))
    n = len(lead)
    a = a.transpose(tuple(range(n)) + (n, n + 3, n + 1, n + 4, n + 2))
    return a.reshape(tuple(lead) + (c // (r * r), h * r, w * r))


def _ref_pixel_unshuffle(x, r):
    a = np.asarray(x, dtype=object)
    *lead, c, h, w = a.shape
    n = len(lead)
    a = a.reshape(tuple(lead) + (c, h // r, r, w // r, r))
    a = a.transpose(tuple(range(n)) + (n, n + 2, n + 4, n + 1, n + 3))
    return a.reshape(tuple(lead) + (c * r * r, h // r, w // r))


def _ref_channel_shuffle(x, groups):
    a = np.asarray(x, dtype=object)
    out = np.empty_like(a)
    c = a.shape[1]
    per = c // groups
    for g in range(groups):
        for i in range(per):
            out[:, i * groups + g] = a[:, g * per + i]
    return out


def _shuffle_samples(kind):
    def samples(dtype, rng):
        def mk(*s):
            return make(s, dtype, rng)
        if kind == "shuffle":
            return [Sample((mk(2, 8, 3, 2), 2)), Sample((mk(9, 2, 2), 3), desc="unbatched"),
                    Sample((mk(2, 1, 4, 2, 3), 2), desc="5-d"), Sample((mk(1, 3, 2, 2), 1),
                                                                       desc="factor 1")]
        if kind == "unshuffle":
            return [Sample((mk(2, 2, 4, 6), 2)), Sample((mk(1, 6, 3), 3), desc="unbatched"),
                    Sample((mk(2, 2, 3, 2, 2), 1), desc="factor 1")]
        return [Sample((mk(2, 6, 3, 2), 3)), Sample((mk(3, 4, 5), 2), desc="3-d"),
                Sample((mk(1, 4, 2, 1, 2), 4), desc="5-d, groups = channels")]
    return samples


add(OpInfo("pixel_shuffle", _shuffle_samples("shuffle"), _ref_pixel_shuffle,
           errors=lambda: [
               ErrorSample((_T(4, 2), 2), {}, RuntimeError,
                           r"pixel_shuffle\(\).*at least 3 dimensions", "rank"),
               ErrorSample((_T(1, 5, 2, 2), 2), {}, RuntimeError,
                           r"pixel_shuffle\(\).*divisible by the square", "channels"),
               ErrorSample((_T(1, 4, 2, 2), 0), {}, RuntimeError,
                           r"pixel_shuffle\(\).*positive upscale_factor", "factor")]))
add(OpInfo("pixel_unshuffle", _shuffle_samples("unshuffle"), _ref_pixel_unshuffle,
           errors=lambda: [
               ErrorSample((_T(1, 1, 3, 4), 2), {}, RuntimeError,
                           r"pixel_unshuffle\(\).*height to be divisible", "height"),
               ErrorSample((_T(1, 1, 4, 3), 2), {}, RuntimeError,
                           r"pixel_unshuffle\(\).*width to be divisible", "width")]))
add(OpInfo("channel_shuffle", _shuffle_samples("channel"), _ref_channel_shuffle,
           errors=lambda: [
               ErrorSample((_T(1, 5, 2, 2), 2), {}, RuntimeError,
                           r"channel_shuffle\(\).*divisible by groups", "channels"),
               ErrorSample((_T(1, 4, 2, 2), 0), {}, RuntimeError,
                           r"channel_shuffle\(\).*must be positive", "groups"),
               ErrorSample((_T(4, 2), 2), {}, RuntimeError,
                           r"channel_shuffle\(\).*> 2 dims", "rank")]))
add(OpInfo("native_channel_shuffle", _shuffle_samples("channel"), _ref_channel_shuffle,
           torch_fn=lambda torch, *a, **k: torch.native_channel_shuffle(*a, **k)))


# ------------------------------------------------------------------ instance norm


def _ref_instance_norm(x, weight, bias, running_mean, running_var, use_input_stats, momentum,
                       eps, cudnn_enabled):
    x = _f(x)
    C = x.shape[1]
    cs = (1, C) + (1,) * (x.ndim - 2)
    if use_input_stats:
        red = tuple(range(2, x.ndim))
        n = int(np.prod([x.shape[d] for d in red]))
        mean = _fsum(x, red) / n
        var = _fsum((x - mean) ** 2, red) / n
    else:
        mean, var = _f(running_mean).reshape(cs), _f(running_var).reshape(cs)
    y = (x - mean) / np.sqrt(var + eps)
    if weight is not None:
        y = y * _f(weight).reshape(cs)
    if bias is not None:
        y = y + _f(bias).reshape(cs)
    return y


def _instance_norm_samples(dtype, rng):
    def mk(*s, lo=-3, hi=3):
        return make(s, dtype, rng, lo, hi)
    return [Sample((mk(2, 3, 5), mk(3), mk(3), None, None, True, 0.1, 1e-5, False)),
            Sample((mk(2, 3, 3, 4), None, None, None, None, True, 0.1, 1e-3, False),
                   desc="4-d, no affine"),
            Sample((mk(1, 2, 2, 3, 2), mk(2), None, mk(2), mk(2, lo=0.5, hi=2), False, 0.1,
                    1e-5, False), desc="5-d, running statistics")]


add(OpInfo("instance_norm", _instance_norm_samples, _ref_instance_norm, reduction=True,
           dtypes=FLOATS,
           errors=lambda: [
               ErrorSample((_T(2, 3, 4), _T(2), None, None, None, True, 0.1, 1e-5, False), {},
                           RuntimeError, r"instance_norm\(\).*weight should contain 6",
                           "weight"),
               ErrorSample((_T(2, 3, 4), None, None, None, None, False, 0.1, 1e-5, False), {},
                           RuntimeError, r"instance_norm\(\).*running_mean", "no stats"),
               ErrorSample((_T(2, 3, 4, dtype="int64"), None, None, None, None, True, 0.1, 1e-5,
                            False), {}, NotImplementedError, r"instance_norm\(\).*Long",
                           "int")]))


# ================================================================== fused attention (prims)


def _flash_scores(q, k, is_causal, attn_mask, scale):
    q, k = _f(q), _f(k)
    L, S, E = q.shape[-2], k.shape[-2], q.shape[-1]
    sc = 1 / math.sqrt(E) if scale is None else scale
    s = np.einsum("...le,...se->...ls", q, k) * sc
    if is_causal:
        s = np.where(np.tril(np.ones((L, S), dtype=bool)), s, -np.inf)
    if attn_mask is not None:
        m = np.asarray(attn_mask, dtype=object)
        if m.size and isinstance(m.reshape(-1)[0], bool):
            s = np.where(m.astype(bool), s, -np.inf)
        else:
            s = s + _f(m)
    return s.astype(np.float64)


def _ref_flash(q, k, v, dropout_p=0.0, is_causal=False, attn_mask=None, scale=None):
    s = _flash_scores(q, k, is_causal, attn_mask, scale)
    mx = np.max(s, axis=-1, keepdims=True)
    mx = np.where(np.isneginf(mx), 0.0, mx)
    e = np.exp(s - mx)
    tot = e.sum(-1, keepdims=True)
    out = np.einsum("...ls,...sv->...lv", e / np.where(tot == 0, 1.0, tot), _f(v))
    t = tot[..., 0].astype(np.float64)
    lse = np.log(np.where(t == 0, 1.0, t)) + mx[..., 0]     # a row with no key: 0
    return out, lse


def _flash_samples(dtype, rng):
    def mk(*s):
        return make(s, dtype, rng, -2, 2)
    hidden = np.where(rng.integers(0, 2, (1, 3, 4, 5)).astype(bool), 0.0, -np.inf)
    hidden[..., 0] = 0.0
    hidden[0, 0, 1] = -np.inf       # a row that sees no key: output 0, logsumexp 0
    hidden = ember.from_numpy(hidden.astype(dtype))
    # PyTorch 2.13's kernel gives wrong values for inputs whose last dim is strided:
    # tests/test_attention.py checks those against the decomposition
    return [Sample((mk(2, 3, 4, 8), mk(2, 3, 5, 8), mk(2, 3, 5, 8)), noncontig=False),
            Sample((mk(1, 2, 6, 4), mk(1, 2, 6, 4), mk(1, 2, 6, 4), 0.0, True), desc="causal",
                   noncontig=False),
            Sample((mk(2, 3, 4, 8), mk(2, 3, 5, 8), mk(2, 3, 5, 8)),
                   {"attn_mask": mk(4, 5), "scale": 0.3}, desc="float mask, scale",
                   noncontig=False),
            Sample((mk(2, 3, 4, 8), mk(2, 3, 5, 8), mk(2, 3, 5, 8)), {"attn_mask": hidden},
                   desc="-inf mask", noncontig=False, grad=False)]


def _flash_errors():
    name = r"_scaled_dot_product_flash_attention_for_cpu\(\).*"
    return [ErrorSample((_T(2, 4, 8), _T(2, 4, 8), _T(2, 4, 8)), {}, RuntimeError,
                        name + "4-d", "3-d"),
            ErrorSample((_T(1, 2, 4, 8), _T(1, 2, 4, 8), _T(1, 2, 4, 8), 0.5), {},
                        RuntimeError, name + "dropout", "dropout"),
            ErrorSample((_T(1, 2, 4, 8, dtype="int64"),) * 3, {}, RuntimeError,
                        name + "data type", "int64")]


add(OpInfo("_scaled_dot_product_flash_attention_for_cpu", _flash_samples, _ref_flash,
           reduction=True, dtypes=FLOATS, torch_fn=_t("_scaled_dot_product_flash_attention_for_cpu"),
           errors=_flash_errors))


def _ref_flash_backward(g, q, k, v, out, lse, dropout_p, is_causal, attn_mask=None,
                        scale=None):
    s = _flash_scores(q, k, is_causal, attn_mask, scale)
    sc = 1 / math.sqrt(_f(q).shape[-1]) if scale is None else scale
    lse = _f(lse).astype(np.float64)[..., None]
    p = np.where(np.isneginf(lse), 0.0, np.exp(s - np.where(np.isneginf(lse), 0.0, lse)))
    g, qf, kf, vf = (_f(x).astype(np.float64) for x in (g, q, k, v))
    dv = np.einsum("...ls,...lv->...sv", p, g)
    dp = np.einsum("...lv,...sv->...ls", g, vf)
    ds = p * (dp - (dp * p).sum(-1, keepdims=True))
    return (np.einsum("...ls,...se->...le", ds, kf) * sc,
            np.einsum("...ls,...le->...se", ds, qf) * sc, dv)


def _flash_backward_samples(dtype, rng):
    """The forward's results in float64 (float32 for float16: its logsumexp is float32),
    then cast: other dtypes must raise as PyTorch's."""
    flash = ember.ops.public()["_scaled_dot_product_flash_attention_for_cpu"]
    out = []
    to = dt(dtype)
    for s in _flash_samples("float64" if dtype != "float16" else "float16", rng):
        o, lse = flash(*s.args, **s.kwargs)
        q, k, v = (t.to(to) for t in s.args[:3])
        causal = s.args[4] if len(s.args) > 4 else False
        kw = {n: (t.to(to) if isinstance(t, ember.Tensor) else t) for n, t in s.kwargs.items()}
        g = make(tuple(o.shape), "float64", rng, -2, 2).to(to)
        lse = lse.to(ember.float64 if dtype == "float64" else ember.float32)
        out.append(Sample((g, q, k, v, o.to(to), lse, 0.0, causal), kw, desc=s.desc,
                          grad=False, noncontig=False))
    return out


add(OpInfo("_scaled_dot_product_flash_attention_for_cpu_backward", _flash_backward_samples,
           _ref_flash_backward, reduction=True, dtypes=FLOATS,
           torch_fn=_t("_scaled_dot_product_flash_attention_for_cpu_backward")))
