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
