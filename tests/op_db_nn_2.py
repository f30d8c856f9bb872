"""The op database's entries for embedding_bag (python/ember/ops/embedding_bag.py), grid
sampling and affine grids (ops/sampling.py) and the CTC loss (ops/ctc.py): samples and
independent float64 references written from the definitions (loops over bags, output
pixels and alignment paths), loaded by op_db.py.
"""
from __future__ import annotations

import itertools
import math

import numpy as np

import ember
from op_db import FLOATS, ErrorSample, OpInfo, Sample, add, make


def _f(a):
    return np.asarray(a, dtype=np.float64)


def _T(*shape, dtype="float32"):
    return ember.ones(*shape, dtype=getattr(ember, dtype))


def _I(values, dtype="int64"):
    return ember.tensor(values, dtype=getattr(ember, dtype))


# ------------------------------------------------------------------ embedding_bag


def _ref_embedding_bag(weight, indices, offsets, scale_grad_by_freq=False, mode=0, sparse=False,
                       per_sample_weights=None, include_last_offset=False, padding_idx=None):
    """Bag b holds positions offsets[b] .. offsets[b + 1] (the last to the end); padding
    entries count in no bag; an empty bag is zeros; max picks the first largest."""
    w = _f(weight)
    idx = np.asarray(indices).reshape(-1).astype(np.int64)
    off = [int(o) for o in np.asarray(offsets)]
    n, D = idx.shape[0], w.shape[1]
    B = max(len(off) - 1, 0) if include_last_offset else len(off)
    pad = None if padding_idx is None else padding_idx % w.shape[0]
    psw = None if per_sample_weights is None else _f(per_sample_weights).reshape(-1)
    out = np.zeros((B, D))
    bag_of = np.zeros(n, dtype=np.int64)
    sizes = np.zeros(B, dtype=np.int64)
    argmax = np.zeros((B, D), dtype=np.int64)
    for b in range(B):
        end = off[b + 1] if b + 1 < B or include_last_offset else n
        members = [i for i in range(off[b], end) if idx[i] != pad]
        bag_of[off[b]:end] = b
        sizes[b] = len(members)
        if not members:
            continue
        if mode == 2:
            for d in range(D):
                best = members[0]
                for i in members[1:]:
                    if w[idx[i], d] > w[idx[best], d]:
                        best = i
                out[b, d] = w[idx[best], d]
                argmax[b, d] = idx[best]
            continue
        for d in range(D):
            out[b, d] = math.fsum(w[idx[i], d] * (1.0 if psw is None else psw[i])
                                  for i in members)
        if mode == 1:
            out[b] /= len(members)
    if include_last_offset and B > 0:
        bag_of[off[B]:] = B - 1      # positions after the last offset: in no bag's sum
    if mode == 0:
        sizes_out, extra = np.zeros(B, dtype=np.int64), np.zeros(B, dtype=np.int64)
    elif mode == 1:
        sizes_out, extra = sizes, sizes
    else:
        sizes_out, extra = sizes, argmax
    return out, bag_of, sizes_out, extra


def _bag_samples(dtype, rng):
    def w(*s):
        return make(s, dtype, rng, -2, 2)
    idx = _I([1, 4, 2, 4, 0, 6, 3, 5, 2])
    off = _I([0, 3, 3, 6])
    return [
        Sample((w(7, 4), idx, off), {"mode": 0}, desc="sum, an empty bag"),
        Sample((w(7, 4), idx, off), {"mode": 1}, desc="mean"),
        Sample((w(7, 4), idx, off), {"mode": 2}, desc="max"),
        Sample((w(7, 3), idx, off, False, 0, False, w(9)), desc="per_sample_weights"),
        # (torch takes padding_idx positionally only)
        Sample((w(7, 3), idx, off, False, 1, False, None, False, 4), desc="mean, padding_idx"),
        Sample((w(7, 3), idx, off, False, 2, False, None, False, -1), desc="max, padding -1"),
        Sample((w(7, 3), idx, _I([0, 2, 5, 9])), {"mode": 0, "include_last_offset": True},
               desc="include_last_offset"),
        Sample((w(5, 2), _I([3, 1, 1, 0], "int32"), _I([0, 2], "int32")), {"mode": 1},
               desc="int32 indices"),
        Sample((w(5, 2), _I([], "int64"), _I([0, 0])), {"mode": 1}, desc="no indices",
               grad=False),
    ]


add(OpInfo("embedding_bag", _bag_samples, _ref_embedding_bag, dtypes=FLOATS, reduction=True,
           composite_grad=True,
           # torch's internal results (offset2bag, bag_size, max_indices) differ between its
           # kernels (its fast sum path leaves offset2bag empty): the output is compared
           torch_fn=lambda torch, *a, **k: torch.embedding_bag(*a, **k)[:1],
           errors=lambda: [
               ErrorSample((_T(5, 2), _I([1, 2]), _I([1])), {}, RuntimeError,
                           r"offsets\[0\] has to be 0", "offsets[0]", data=True),
               ErrorSample((_T(5, 2), _I([1, 2]), _I([0, 3])), {}, RuntimeError,
                           r"offsets\[-1\] can not be greater than input's length 2", "last",
                           data=True),
               ErrorSample((_T(5, 2), _I([1, 7]), _I([0])), {}, RuntimeError,
                           r"embedding_bag.*out of bounds", "index", data=True),
               ErrorSample((_T(5, 2), _T(2), _I([0])), {}, RuntimeError,
                           r"'indices'.*Long, Int.*embedding_bag", "float indices"),
               ErrorSample((_T(5, 2, dtype="int32"), _I([1]), _I([0])), {}, RuntimeError,
                           r"'weight'.*Half, BFloat16, Float, Double.*embedding_bag", "int"),
               ErrorSample((_T(5), _I([1]), _I([0])), {}, RuntimeError,
                           r"weight has to be a 2D Tensor", "weight 1-d"),
               ErrorSample((_T(5, 2), _I([1]), _I([[0]])), {}, RuntimeError,
                           r"offsets has to be a 1D Tensor", "offsets 2-d"),
               ErrorSample((_T(5, 2), _I([1]), _I([0])), {"mode": 3}, RuntimeError,
                           r"`mode` must be sum, mean, or max", "mode"),
               ErrorSample((_T(5, 2), _I([1]), _I([0]), False, 1, False, _T(1)), {},
                           RuntimeError, r"embedding_bag: per_sample_weights only supported",
                           "psw mean"),
               ErrorSample((_T(5, 2), _I([1]), _I([0]), False, 0, False,
                            _T(1, dtype="float64")), {}, RuntimeError,
                           r"same type as tensor for argument #1 'per_sample_weights'.*"
                           r"embedding_bag", "psw dtype"),
               ErrorSample((_T(5, 2), _I([1]), _I([0]), False, 0, False, None, False, 5), {},
                           RuntimeError,
                           r"padding_idx must be within the number of embeddings, -5 through "
                           r"4, but got 5", "padding_idx")]))


_BAG_PARAMS = ("scale_grad_by_freq", "mode", "sparse", "per_sample_weights",
               "include_last_offset", "padding_idx")
_BAG_DEFAULTS = (False, 0, False, None, False, None)


def _prim_bag_args(s):
    """embedding_bag's sample as _embedding_bag's nine arguments (padding_idx -1: none,
    else non-negative)"""
    vals = list(s.args[3:]) + list(_BAG_DEFAULTS[len(s.args) - 3:])
    for k, v in s.kwargs.items():
        vals[_BAG_PARAMS.index(k)] = v
    w = s.args[0]
    vals[5] = -1 if vals[5] is None else vals[5] % w.shape[0]
    return tuple(s.args[:3]) + tuple(vals)


def _prim_bag_samples(dtype, rng):
    return [Sample(_prim_bag_args(s), desc=s.desc, grad=s.grad)
            for s in _bag_samples(dtype, rng)]


def _ref_prim_bag(weight, indices, offsets, scale_grad_by_freq, mode, sparse,
                  per_sample_weights, include_last_offset, padding_idx):
    return _ref_embedding_bag(weight, indices, offsets, scale_grad_by_freq, mode, sparse,
                              per_sample_weights, include_last_offset,
                              None if padding_idx == -1 else padding_idx)


# torch's _embedding_bag (and its backward) read non-contiguous indices wrongly (its public
# embedding_bag makes them contiguous first): they are given contiguous ones
def _contiguous_ints(a):
    return tuple(t.contiguous() if hasattr(t, "is_floating_point") and
                 not t.is_floating_point() else t for t in a)


add(OpInfo("_embedding_bag", _prim_bag_samples, _ref_prim_bag, dtypes=FLOATS, reduction=True,
           torch_fn=lambda torch, *a, **k: torch._embedding_bag(*_contiguous_ints(a),
                                                                **k)[:1]))


def _bag_backward_cases(dtype, rng):
    """(grad, forward arguments, forward results) per _embedding_bag sample with bags"""
    out = []
    if dtype not in FLOATS:      # (the forward refuses them)
        return out
    for s in _prim_bag_samples(dtype, rng):
        a = s.args
        if a[1].numel() == 0:
            continue
        res = ember._embedding_bag(*a)
        grad = make(tuple(res[0].shape), dtype, rng, -1, 1)
        out.append((grad, a, res, s.desc))
    return out


def _bag_backward_samples(dtype, rng):
    return [Sample((g, a[1], a[2], r[1], r[2], r[3], a[0].shape[0], a[3], a[4], a[5], a[6],
                    a[8]), desc=d, grad=False, noncontig=False)
            for g, a, r, d in _bag_backward_cases(dtype, rng)]
# (scale_grad_by_freq: torch's _embedding_bag_backward called directly scales by counts it
# takes from its own offset2bag layout; tests/test_embedding_bag.py compares the gradient
# through nn.functional.embedding_bag with torch's)


def _counted(indices, offsets, B, padding_idx):
    """per position: its bag, or None when it counts in no bag"""
    idx = [int(v) for v in np.asarray(indices).reshape(-1)]
    off = [int(v) for v in np.asarray(offsets)]
    bags = []
    for i, r in enumerate(idx):
        b = max(k for k in range(B) if off[k] <= i)
        end = off[b + 1] if b + 1 < len(off) else len(idx)
        bags.append(None if r == padding_idx or i >= end else b)
    return idx, bags


def _ref_bag_backward(grad, indices, offsets, offset2bag, bag_size, maximum_indices,
                      num_weights, scale_grad_by_freq, mode, sparse, per_sample_weights,
                      padding_idx=-1):
    g = _f(grad)
    B, D = g.shape
    out = np.zeros((num_weights, D))
    idx, bags = _counted(indices, offsets, B, padding_idx)
    if mode == 2:
        mi, size = np.asarray(maximum_indices), np.asarray(bag_size)
        for b, j in itertools.product(range(B), range(D)):
            if size[b] > 0:
                out[mi[b, j], j] += g[b, j]
        return out
    psw = None if per_sample_weights is None else _f(per_sample_weights).reshape(-1)
    for i, (r, b) in enumerate(zip(idx, bags)):
        if b is None:
            continue
        scale = 1.0 if psw is None else psw[i]
        if mode == 1:
            scale /= max(sum(1 for v in bags if v == b), 1)
        if scale_grad_by_freq:
            scale /= idx.count(r)
        out[r] += scale * g[b]
    return out


add(OpInfo("_embedding_bag_backward", _bag_backward_samples, _ref_bag_backward,
           dtypes=FLOATS, reduction=True,
           torch_fn=lambda torch, *a, **k: torch.ops.aten._embedding_bag_backward(
               *_contiguous_ints(a[:9]), False, *a[10:], **k)))


def _psw_backward_samples(dtype, rng):
    return [Sample((g, a[0], a[1], a[2], r[1], 0, a[8]), desc=d, grad=False, noncontig=False)
            for g, a, r, d in _bag_backward_cases(dtype, rng) if a[4] == 0]


def _ref_psw_backward(grad, weight, indices, offsets, offset2bag, mode, padding_idx=-1):
    g, w = _f(grad), _f(weight)
    idx, bags = _counted(indices, offsets, g.shape[0], padding_idx)
    return np.array([0.0 if b is None else math.fsum(g[b] * w[r])
                     for r, b in zip(idx, bags)])


add(OpInfo("_embedding_bag_per_sample_weights_backward", _psw_backward_samples,
           _ref_psw_backward, dtypes=FLOATS, reduction=True,
           torch_fn=lambda torch, *a, **k:
           torch.ops.aten._embedding_bag_per_sample_weights_backward(*_contiguous_ints(a),
                                                                      **k)))


# ------------------------------------------------------------------ ctc_loss


def _ctc_labels(tg, b, tl, starts):
    t = np.asarray(tg)
    return [int(v) for v in (t.reshape(-1)[starts[b]:starts[b] + tl[b]] if t.ndim == 1
                             else t[b, :tl[b]])]


def _ctc_paths(lp, b, Tb, labels, blank):
    """Every alignment of Tb frames that collapses (repeats merged, blanks dropped) to
    labels, with its probability: the definition, enumerated."""
    C = lp.shape[2]
    for path in itertools.product(range(C), repeat=Tb):
        merged = [c for i, c in enumerate(path) if i == 0 or c != path[i - 1]]
        if [c for c in merged if c != blank] == labels:
            yield path, math.prod(math.exp(lp[t, b, c]) for t, c in enumerate(path))


def _ctc_starts(tl):
    return [sum(tl[:b]) for b in range(len(tl))]


def _ref_ctc_alpha(lp, b, Tb, labels, blank, S2, T):
    """alpha in probability space: the summed probability of the prefixes of the extended
    labels (blank, l1, blank, ..., blank) ending in state s after t + 1 frames."""
    ext = [blank]
    for c in labels:
        ext += [c, blank]
    S = len(ext)
    out = np.full((T, S2), -math.inf)
    a = [math.exp(lp[0, b, ext[s]]) if s < 2 else 0.0 for s in range(S)] if Tb else []
    for t in range(Tb):
        if t:
            prev = a
            a = []
            for s in range(S):
                terms = [prev[s]] + ([prev[s - 1]] if s else []) + \
                    ([prev[s - 2]] if s >= 2 and ext[s] != blank and ext[s] != ext[s - 2]
                     else [])
                a.append(math.fsum(terms) * math.exp(lp[t, b, ext[s]]))
        out[t, :S] = [math.log(v) if v > 0 else -math.inf for v in a]
    return out


def _ref_ctc(log_probs, targets, input_lengths, target_lengths, blank=0, zero_infinity=False):
    lp = _f(log_probs)
    T, N, _ = lp.shape
    tl, starts = list(target_lengths), _ctc_starts(list(target_lengths))
    S2 = 2 * max(tl, default=0) + 1
    nll, alpha = np.zeros(N), np.zeros((N, T, S2))
    for b in range(N):
        labels = _ctc_labels(targets, b, tl, starts)
        p = math.fsum(pr for _, pr in _ctc_paths(lp, b, input_lengths[b], labels, blank))
        nll[b] = -math.log(p) if p > 0 else math.inf
        alpha[b] = _ref_ctc_alpha(lp, b, input_lengths[b], labels, blank, S2, T)
    return nll, alpha


def _ref_ctc_backward(grad, log_probs, targets, input_lengths, target_lengths, nll, log_alpha,
                      blank, zero_infinity=False):
    """exp(lp) minus the posterior probability that frame t emits class c (the paths
    through c at t over all paths), times grad; zero past the input length."""
    lp, g = _f(log_probs), _f(grad)
    T, N, C = lp.shape
    tl, starts = list(target_lengths), _ctc_starts(list(target_lengths))
    out = np.zeros((T, N, C))
    for b in range(N):
        Tb = input_lengths[b]
        paths = list(_ctc_paths(lp, b, Tb, _ctc_labels(targets, b, tl, starts), blank))
        total = math.fsum(pr for _, pr in paths)
        if total == 0 and zero_infinity:
            continue
        for t in range(Tb):
            for c in range(C):
                occ = math.fsum(pr for path, pr in paths if path[t] == c)
                post = occ / total if total > 0 else math.nan
                out[t, b, c] = (math.exp(lp[t, b, c]) - post) * g[b]
    return out


def _log_probs(dtype, rng, T, N, C):
    x = make((T, N, C), dtype, rng, -2, 2)
    if dtype not in ("float32", "float64"):
        return x
    return ember.from_numpy(x.numpy().astype(np.float64)).log_softmax(2).to(x.dtype)


def _ctc_cases(dtype, rng):
    """(args, desc): padded and concatenated targets, repeated labels, an empty target, a
    short input, blank not 0, an impossible alignment"""
    return [
        ((_log_probs(dtype, rng, 5, 2, 3), _I([[1, 2], [2, 2]]), [5, 4], [2, 2]), {},
         "padded, a repeated label"),
        ((_log_probs(dtype, rng, 4, 3, 3), _I([1, 2, 1, 2], "int32"), [4, 3, 2], [2, 0, 2]),
         {}, "concatenated int32, an empty target"),
        ((_log_probs(dtype, rng, 4, 1, 3), _I([[0, 1]]), [4], [2]), {"blank": 2},
         "blank 2"),
        ((_log_probs(dtype, rng, 3, 2, 3), _I([[1, 1], [1, 2]]), [2, 3], [2, 2]),
         {"zero_infinity": True}, "impossible alignment, zero_infinity"),
    ]


def _ctc_samples(dtype, rng):
    # torch 2.13 reads strided concatenated targets at the wrong offsets (sample b starts
    # at its position, not position * stride): that sample stays contiguous here and
    # tests/test_ctc_loss.py checks ember's strided targets against contiguous ones
    return [Sample(a, k, desc=d, grad=False, noncontig=a[1].ndim != 1)
            for a, k, d in _ctc_cases(dtype, rng)]


def _ctc_backward_samples(dtype, rng):
    out = []
    for a, k, d in _ctc_cases(dtype, rng):
        blank, zi = k.get("blank", 0), k.get("zero_infinity", False)
        lp = a[0]
        if lp.dtype in (ember.float32, ember.float64):
            nll, alpha = ember._ctc_loss(*a, blank, zi)
        else:        # the kernel refuses the dtype before it reads these
            nll = alpha = ember.zeros(a[0].shape[1])
        grad = make((lp.shape[1],), "float64" if lp.dtype is ember.float64 else "float32",
                    rng, 0.5, 2).to(nll.dtype)
        out.append(Sample((grad,) + a + (nll, alpha, blank, zi), desc=d, grad=False,
                          noncontig=False))
    return out


def _ctc_errors():
    lp = _T(4, 2, 3)
    return [
        ErrorSample((_T(4, 2, 3, dtype="float16"), _I([[1], [1]]), [4, 4], [1, 1]), {},
                    NotImplementedError, r"\"ctc_loss_cpu\" not implemented for 'Half'", "half"),
        ErrorSample((lp, _T(2, 1), [4, 4], [1, 1]), {}, RuntimeError,
                    r"'targets' to have scalar type Int.*FloatTensor", "float targets"),
        ErrorSample((_T(4, 3), _I([[1], [1]]), [4, 4], [1, 1]), {}, RuntimeError,
                    r"Expected 3-dimensional tensor, but got 2-dimensional.*'log_probs'", "2-d"),
        ErrorSample((lp, _I([[1], [1]]), [4, 4], [1, 1], 3), {}, RuntimeError,
                    r"blank must be in label range", "blank"),
        ErrorSample((lp, _I([[1], [1]]), [4], [1, 1]), {}, RuntimeError,
                    r"input_lengths must be of size batch_size", "input_lengths"),
        ErrorSample((lp, _I([[1], [1]]), [4, 4], [1]), {}, RuntimeError,
                    r"target_lengths must be of size batch_size", "target_lengths"),
        ErrorSample((lp, _I([[1], [1]]), [5, 4], [1, 1]), {}, RuntimeError,
                    r"Expected input_lengths to have value at most 4, but got value 5", "long"),
        ErrorSample((lp, _I([[1], [1]]), [4, -1], [1, 1]), {}, RuntimeError,
                    r"input_lengths to have value at least 0, but got value -1", "negative"),
        ErrorSample((lp, _I([[1], [1]]), [4, 4], [2, 1]), {}, RuntimeError,
                    r"size at least 2 at dimension 1, but got size 1 for argument #2 'targets'",
                    "short targets"),
        ErrorSample((lp, _I([1, 1, 1]), [4, 4], [1, 1]), {}, RuntimeError,
                    r"Expected tensor to have size 2 at dimension 0, but got size 3", "concat"),
        ErrorSample((lp, _I([[1], [1]]), [4, 4], [1, -1]), {}, RuntimeError,
                    r"target_lengths to have value at least 0", "negative target length")]


_CTC_GRAD = ("PyTorch's gradient of the CTC loss is exp(log_probs) minus the posteriors, the "
             "derivative through the log_softmax that made log_probs, not for log_probs "
             "themselves: tests/test_ctc_loss.py gradchecks ctc_loss(log_softmax(x)) for x")
add(OpInfo("_ctc_loss", _ctc_samples, _ref_ctc, dtypes=("float32", "float64"),
           reduction=True, grad_elsewhere=_CTC_GRAD,
           # torch leaves log_alpha uninitialised outside each sample's frames and states
           torch_fn=lambda torch, *a, **k: torch._ctc_loss(*a, **k)[:1], errors=_ctc_errors))
add(OpInfo("_ctc_loss_backward", _ctc_backward_samples, _ref_ctc_backward,
           dtypes=("float32", "float64"), reduction=True,
           # (torch's backward trusts its arguments: the forward's checks are tested there)
           torch_fn=lambda torch, *a, **k: torch.ops.aten._ctc_loss_backward(*a, **k)))


def _ref_ctc_loss(log_probs, targets, input_lengths, target_lengths, blank=0, reduction=1,
                  zero_infinity=False):
    nll, _ = _ref_ctc(log_probs, targets, input_lengths, target_lengths, blank)
    if zero_infinity:
        nll = np.where(np.isinf(nll), 0.0, nll)
    if reduction == 1:
        return np.array(math.fsum(nll / np.maximum(np.array(target_lengths), 1)) / len(nll))
    if reduction == 2:
        return np.array(math.fsum(nll))
    return nll


def _ctc_loss_samples(dtype, rng):
    out = []
    for (a, k, d), red in zip(_ctc_cases(dtype, rng), (0, 1, 2, 1)):
        out.append(Sample(a, dict(k, reduction=red), desc=f"{d}, reduction {red}", grad=False,
                          noncontig=a[1].ndim != 1))
    return out


add(OpInfo("ctc_loss.IntList", _ctc_loss_samples, _ref_ctc_loss, dtypes=("float32", "float64"),
           reduction=True, grad_elsewhere=_CTC_GRAD))


# ------------------------------------------------------------------ grid_sampler, affine_grid


def _ref_source(g, size, padding_mode, align_corners):
    c = (g + 1) / 2 * (size - 1) if align_corners else ((g + 1) * size - 1) / 2
    if padding_mode == 1:
        c = min(max(c, 0.0), size - 1.0)
    elif padding_mode == 2:
        lo, hi = (0.0, size - 1.0) if align_corners else (-0.5, size - 0.5)
        if hi == lo:
            c = 0.0
        else:
            span = hi - lo
            while c < lo or c > hi:        # fold at the ends until inside
                c = 2 * lo - c if c < lo else 2 * hi - c
        c = min(max(c, 0.0), size - 1.0)
    return c


def _ref_grid_sampler(input, grid, interpolation_mode, padding_mode, align_corners):
    """Each output point of a 4-d input: its source position per axis, then the four
    neighbours weighted by distance (or the nearest, ties to even); zeros outside."""
    x, g = _f(input), _f(grid)
    N, C, H, W = x.shape
    _, Ho, Wo, _ = g.shape
    out = np.zeros((N, C, Ho, Wo))
    for n, i, j in itertools.product(range(N), range(Ho), range(Wo)):
        cx = _ref_source(g[n, i, j, 0], W, padding_mode, align_corners)
        cy = _ref_source(g[n, i, j, 1], H, padding_mode, align_corners)
        if interpolation_mode == 1:
            taps = [(np.round(cy), np.round(cx), 1.0)]
        else:
            y0, x0 = math.floor(cy), math.floor(cx)
            taps = [(y0 + a, x0 + b, (1 - abs(cy - y0 - a)) * (1 - abs(cx - x0 - b)))
                    for a in (0, 1) for b in (0, 1)]
        for yy, xx, w in taps:
            if 0 <= yy < H and 0 <= xx < W:
                out[n, :, i, j] += w * x[n, :, int(yy), int(xx)]
    return out


def _grid_at(dtype, rng, shape, sizes, align_corners, lo, hi):
    """A grid of shape in [lo, hi); for float16 and bfloat16 at quarter-pixel positions
    (k + 1/4 or k + 3/4 of input sizes (x, y[, z])): ember computes the half types in
    float32 where torch rounds each step to the type, so a position near a pixel (or
    half-pixel, for nearest) could fall on another side; a quarter pixel away cannot."""
    if dtype not in ("float16", "bfloat16"):
        return make(shape, dtype, rng, lo, hi)
    g = rng.uniform(lo, hi, shape)
    for a, size in enumerate(sizes):
        if align_corners and size == 1:
            continue
        c = (g[..., a] + 1) / 2 * (size - 1) if align_corners else \
            ((g[..., a] + 1) * size - 1) / 2
        c = np.floor(c) + rng.choice([0.25, 0.75], c.shape)
        g[..., a] = 2 * c / (size - 1) - 1 if align_corners else (2 * c + 1) / size - 1
    return ember.from_numpy(g).to(getattr(ember, dtype))


def _grid_samples(dtype, rng):
    def mk(*s, lo=-2.0, hi=2.0):
        return make(s, dtype, rng, lo, hi)
    out = []
    for mode, pad, ac in itertools.product((0, 1), (0, 1, 2), (False, True)):
        grid = _grid_at(dtype, rng, (2, 3, 2, 2), (5, 4), ac, -1.4, 1.4)
        out.append(Sample((mk(2, 2, 4, 5), grid, mode, pad, ac),
                          desc=f"mode {mode}, padding {pad}, align_corners {ac}",
                          grad=mode == 0))
    out.append(Sample((mk(1, 1, 1, 3), mk(1, 2, 2, 2, lo=-1.2, hi=1.2), 0, 2, True),
                      desc="height 1, reflection"))
    return out


def _grid_errors():
    return [
        ErrorSample((_T(1, 1, 2, 2), _T(1, 2, 2, 2, dtype="float64"), 0, 0, False), {},
                    RuntimeError, r"grid_sampler\(\): expected input and grid to have same "
                    r"dtype", "dtype"),
        ErrorSample((_T(1, 1, 2), _T(1, 2, 2), 0, 0, False), {}, RuntimeError,
                    r"grid_sampler\(\): expected 4D or 5D input", "rank"),
        ErrorSample((_T(2, 1, 2, 2), _T(1, 2, 2, 2), 0, 0, False), {}, RuntimeError,
                    r"grid_sampler\(\): expected grid and input to have same batch size", "N"),
        ErrorSample((_T(1, 1, 2, 2), _T(1, 2, 2, 3), 0, 0, False), {}, RuntimeError,
                    r"grid_sampler\(\): expected grid to have size 2 in last dimension", "d"),
        ErrorSample((_T(1, 1, 0, 2), _T(1, 2, 2, 2), 0, 0, False), {}, RuntimeError,
                    r"grid_sampler\(\): expected input to have non-empty spatial", "empty")]


add(OpInfo("grid_sampler", _grid_samples, _ref_grid_sampler, dtypes=("float32", "float64"),
           composite_grad=True, errors=_grid_errors))


def _ref_pad(c, size, padding_mode, align_corners):
    """a position (or a bicubic tap) through the padding mode, folding at the ends"""
    if padding_mode == 1:
        return min(max(c, 0.0), size - 1.0)
    if padding_mode == 2:
        lo, hi = (0.0, size - 1.0) if align_corners else (-0.5, size - 0.5)
        if hi == lo:
            return 0.0
        while c < lo or c > hi:
            c = 2 * lo - c if c < lo else 2 * hi - c
        return min(max(c, 0.0), size - 1.0)
    return c


def _keys(s, derivative=False):
    """Keys' cubic convolution kernel (A = -0.75) at distance s, or its derivative"""
    A, a = -0.75, abs(s)
    sign = 1.0 if s >= 0 else -1.0
    if a <= 1:
        return sign * (3 * (A + 2) * a * a - 2 * (A + 3) * a) if derivative else \
            (A + 2) * a ** 3 - (A + 3) * a * a + 1
    if a < 2:
        return sign * (3 * A * a * a - 10 * A * a + 8 * A) if derivative else \
            A * a ** 3 - 5 * A * a * a + 8 * A * a - 4 * A
    return 0.0


def _ref_axis(g, size, mode, padding_mode, align_corners):
    """One axis of a grid point: [(index or None outside, weight, d weight / d position)]
    and d position / d grid coordinate (a central difference: the position is piecewise
    linear in g)."""
    def pos(v):
        c = (v + 1) / 2 * (size - 1) if align_corners else ((v + 1) * size - 1) / 2
        return c if mode == 2 else _ref_pad(c, size, padding_mode, align_corners)
    c, h = pos(g), 2.0 ** -14
    mult = (pos(g + h) - pos(g - h)) / (2 * h)

    def at(i):
        return int(i) if 0 <= i <= size - 1 else None
    if mode == 1:
        return [(at(np.round(c)), 1.0, 0.0)], mult
    lo = math.floor(c)
    t = c - lo
    if mode == 0:
        return [(at(lo), 1 - t, -1.0), (at(lo + 1), t, 1.0)], mult
    return [(at(_ref_pad(float(lo - 1 + k), size, padding_mode, align_corners)),
             _keys(t - (k - 1)), _keys(t - (k - 1), True)) for k in range(4)], mult


def _ref_sample(input, grid, mode, padding_mode, align_corners, grad=None):
    """grid_sampler of a 4-d or 5-d input from the definition (the sum over corners of
    the products of the axes' weights); with grad, the gradients for input and grid."""
    x, g = _f(input), _f(grid)
    N, C = x.shape[:2]
    sp = x.shape[2:]
    d = len(sp)
    outsp = g.shape[1:-1]
    out = np.zeros((N, C) + outsp)
    gx, gg = np.zeros(x.shape), np.zeros(g.shape)
    go = None if grad is None else _f(grad)
    for n in range(N):
        for q in itertools.product(*[range(s) for s in outsp]):
            axes = [_ref_axis(g[(n,) + q + (a,)], sp[d - 1 - a], mode, padding_mode,
                              align_corners) for a in range(d)]      # x, y, z
            for taps in itertools.product(*[ax[0] for ax in axes]):
                if any(t[0] is None for t in taps):
                    continue
                where = tuple(taps[d - 1 - k][0] for k in range(d))   # (z,) y, x
                wt = math.prod(t[1] for t in taps)
                vals = x[(n, slice(None)) + where]
                out[(n, slice(None)) + q] += wt * vals
                if go is not None:
                    gvec = go[(n, slice(None)) + q]
                    gx[(n, slice(None)) + where] += wt * gvec
                    for a in range(d):
                        dw = taps[a][2] * math.prod(taps[b][1] for b in range(d) if b != a)
                        gg[(n,) + q + (a,)] += axes[a][1] * dw * float(gvec @ vals)
    return out if go is None else (gx, gg)


def _ref_sampler_backward(grad, input, grid, mode, padding_mode, align_corners):
    return _ref_sample(input, grid, mode, padding_mode, align_corners, grad)


def _grid_samples_3d(dtype, rng):
    def mk(*s, lo=-2.0, hi=2.0):
        return make(s, dtype, rng, lo, hi)
    return [Sample((mk(1, 2, 3, 4, 3), _grid_at(dtype, rng, (1, 2, 2, 3, 3), (3, 4, 3), ac,
                                                -1.3, 1.3), mode, pad, ac),
                   desc=f"mode {mode}, padding {pad}, align_corners {ac}", grad=mode == 0)
            for mode, pad, ac in itertools.product((0, 1), (0, 1, 2), (False, True))]


def _bicubic_samples(dtype, rng):
    return [Sample((make((2, 2, 4, 5), dtype, rng, -2, 2),
                    _grid_at(dtype, rng, (2, 3, 2, 2), (5, 4), ac, -1.3, 1.3), 2, pad, ac),
                   desc=f"bicubic, padding {pad}, align_corners {ac}")
            for pad, ac in itertools.product((0, 1, 2), (False, True))]


def _grid_samples_2d_all(dtype, rng):
    return _grid_samples(dtype, rng) + _bicubic_samples(dtype, rng)


add(OpInfo("grid_sampler_2d", _grid_samples_2d_all, _ref_sample,
           dtypes=("float32", "float64"), reduction=True,
           torch_fn=lambda torch, *a, **k: torch.grid_sampler_2d(*a, **k)))
add(OpInfo("grid_sampler_3d", _grid_samples_3d, _ref_sample, dtypes=("float32", "float64"),
           reduction=True, torch_fn=lambda torch, *a, **k: torch.grid_sampler_3d(*a, **k)))


def _backward_samples(forward_samples):
    def samples(dtype, rng):
        out = []
        for s in forward_samples(dtype, rng):
            x, g = s.args[:2]
            if s.args[2] == 2 and dtype in ("float16", "bfloat16"):
                continue    # torch sums bicubic's 16 terms per channel in the half type
            #               (bfloat16: 8 bits): its grid gradient is off by more than 0.1
            grad = make(tuple(x.shape[:2]) + tuple(g.shape[1:-1]), dtype, rng, -1, 1)
            out.append(Sample((grad,) + tuple(s.args), desc=s.desc, grad=False))
        return out
    return samples


for _d, _samples in ((2, _grid_samples_2d_all), (3, _grid_samples_3d)):
    add(OpInfo(f"grid_sampler_{_d}d_backward", _backward_samples(_samples),
               _ref_sampler_backward, dtypes=("float32", "float64"), reduction=True,
               torch_fn=lambda torch, *a, **k: torch.ops.aten.grid_sampler_2d_backward(
                   *a, (True, True), **k) if a[1].ndim == 4 else
               torch.ops.aten.grid_sampler_3d_backward(*a, (True, True), **k)))


def _ref_affine_grid(theta, size, align_corners):
    th = _f(theta)
    N, sp = size[0], list(size[2:])
    d = len(sp)

    def base(n):
        if n <= 1:
            return np.zeros(n)
        if align_corners:
            return np.array([-1 + 2 * i / (n - 1) for i in range(n)])
        return np.array([(2 * i + 1) / n - 1 for i in range(n)])
    axes = [base(n) for n in reversed(sp)]
    out = np.zeros([N] + sp + [d])
    for n in range(N):
        for pos in itertools.product(*[range(s) for s in sp]):
            v = [axes[k][pos[d - 1 - k]] for k in range(d)] + [1.0]
            out[(n,) + pos] = [math.fsum(th[n, r, c] * v[c] for c in range(d + 1))
                               for r in range(d)]
    return out


def _affine_samples(dtype, rng):
    def th(*s):
        return make(s, dtype, rng, -1.5, 1.5)
    out = [Sample((th(2, 2, 3), [2, 3, 4, 5], False), desc="2-d"),
           Sample((th(1, 3, 4), [1, 2, 2, 3, 4], False), desc="3-d"),
           Sample((th(1, 3, 4), [1, 1, 3, 2, 2], True), desc="3-d, align_corners")]
    if dtype not in ("float16", "bfloat16"):   # torch's half unit grid: "tensor_cpu" refuses
        out.append(Sample((th(2, 2, 3), [2, 1, 3, 1], True),
                          desc="2-d, align_corners, unit width"))
    return out


# compared with F.affine_grid: torch's op also makes (meaningless) integer grids, which
# ember refuses as F.affine_grid does
add(OpInfo("affine_grid_generator", _affine_samples, _ref_affine_grid, dtypes=FLOATS,
           composite_grad=True, reduction=True,
           torch_fn=lambda torch, *a, **k: torch.nn.functional.affine_grid(*a, **k),
           errors=lambda: [ErrorSample((_T(2, 2, 3, dtype="int64"), [2, 3, 4, 5], False), {},
                                       ValueError, r"Expected theta to have floating point",
                                       "int theta")]))
