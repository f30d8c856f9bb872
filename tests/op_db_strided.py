"""The op database's entries for diagonal, diagonal_scatter, as_strided and
as_strided_scatter (python/ember/ops/views.py), loaded by op_db.py.

References index NumPy object arrays: diagonal by explicit (row, column) pairs, as_strided
by computing every element's position in the flattened (contiguous) input; none uses the
strides the kernels set."""
from __future__ import annotations

import numpy as np

import ember
from op_db import ALL, ErrorSample, OpInfo, Sample, add, make


def _diag_positions(shape, offset, dim1, dim2):
    nd = len(shape)
    d1, d2 = dim1 % nd, dim2 % nd
    n1, n2 = shape[d1], shape[d2]
    length = max(0, min(n1, n2 - offset) if offset >= 0 else min(n1 + offset, n2))
    rows = [i + max(-offset, 0) for i in range(length)]
    cols = [i + max(offset, 0) for i in range(length)]
    keep = [i for i in range(nd) if i not in (d1, d2)]
    return d1, d2, keep, rows, cols


def _ref_diagonal(a, offset=0, dim1=0, dim2=1):
    a = np.asarray(a, dtype=object)
    d1, d2, keep, rows, cols = _diag_positions(a.shape, offset, dim1, dim2)
    moved = np.transpose(a, keep + [d1, d2])
    out = np.empty(moved.shape[:-2] + (len(rows),), dtype=object)
    for k, (r, c) in enumerate(zip(rows, cols)):
        out[..., k] = moved[..., r, c]
    return out


def _ref_diagonal_scatter(a, src, offset=0, dim1=0, dim2=1):
    a = np.array(a, dtype=object)
    src = np.asarray(src, dtype=object)
    d1, d2, keep, rows, cols = _diag_positions(a.shape, offset, dim1, dim2)
    moved = np.transpose(a, keep + [d1, d2])       # a view of a: writes reach a
    for k, (r, c) in enumerate(zip(rows, cols)):
        moved[..., r, c] = src[..., k]
    return a


def _strided_positions(size, stride, offset):
    pos = np.full(tuple(size), offset, dtype=np.int64)
    for d, (n, st) in enumerate(zip(size, stride)):
        pos += (np.arange(n) * st).reshape([n if i == d else 1 for i in range(len(size))])
    return pos


def _ref_as_strided(a, size, stride, storage_offset=None):
    flat = np.asarray(a, dtype=object).reshape(-1)
    return flat[_strided_positions(size, stride, storage_offset or 0)]


def _ref_as_strided_scatter(a, src, size, stride, storage_offset=None):
    a = np.array(a, dtype=object)
    flat = a.reshape(-1)
    flat[_strided_positions(size, stride, storage_offset or 0).reshape(-1)] = \
        np.asarray(src, dtype=object).reshape(-1)
    return a


def _diagonal_samples(dtype, rng):
    a, b = make((3, 4), dtype, rng), make((2, 3, 4), dtype, rng)
    return [Sample((a,)), Sample((a, 1)), Sample((a, -2)), Sample((a, 5)),
            Sample((b, 0, 0, 2)), Sample((b, 1, -1, 1)), Sample((b, 0, 2, 0))]


def _diagonal_scatter_samples(dtype, rng):
    a, b = make((3, 4), dtype, rng), make((2, 3, 4), dtype, rng)
    return [Sample((a, make((3,), dtype, rng))), Sample((a, make((3,), dtype, rng), 1)),
            Sample((a, make((2,), dtype, rng), -1)),
            Sample((b, make((3, 2), dtype, rng), 1, 0, 2)),
            Sample((b, make((2, 3), dtype, rng), 0, 1, 2))]


def _as_strided_samples(dtype, rng):
    a = make((3, 4), dtype, rng)
    return [Sample((a, (2, 2), (1, 2)), noncontig=False),
            Sample((a, (2, 3), (4, 1), 1), noncontig=False),
            Sample((a, (3, 3), (1, 1)), noncontig=False, desc="overlapping windows"),
            Sample((a, (2, 3), (0, 2), 2), noncontig=False, desc="a zero stride"),
            Sample((a, (), (), 5), noncontig=False),
            Sample((a, (0, 3), (1, 1)), noncontig=False)]


def _as_strided_scatter_samples(dtype, rng):
    a = make((3, 4), dtype, rng)
    return [Sample((a, make((2, 2), dtype, rng), (2, 2), (1, 2)), noncontig=False),
            Sample((a, make((2, 3), dtype, rng), (2, 3), (4, 1), 1), noncontig=False),
            Sample((a, make((), dtype, rng), (), (), 7), noncontig=False)]


def _diag_errors():
    return [ErrorSample((ember.ones(3, 4), 0, 1, -1), {}, RuntimeError,
                        "diagonal dimensions cannot be identical 1, -1", "same dims"),
            ErrorSample((ember.ones(3), 0, 0, 1), {}, IndexError, "Dimension out of range",
                        "1-d")]


def _strided_errors():
    return [ErrorSample((ember.ones(3, 4), (2, 2), (1, 2), 20), {}, RuntimeError,
                        r"setStorage: sizes \[2, 2\], strides \[1, 2\], storage offset 20, "
                        r"and itemsize 4 requiring a storage size of 96 are out of bounds "
                        r"for storage of size 48", "out of bounds",
                        data=True),      # meta tensors have no storage to bound
            ErrorSample((ember.ones(3, 4), (2, 2), (1, 2, 3)), {}, RuntimeError,
                        "mismatch in length of strides and shape", "lengths"),
            ErrorSample((ember.ones(3, 4), (2, 2), (-1, 2)), {}, RuntimeError,
                        "Negative strides are not supported", "negative stride")]


add(OpInfo("diagonal", _diagonal_samples, _ref_diagonal, dtypes=ALL, errors=_diag_errors))
add(OpInfo("diagonal_scatter", _diagonal_scatter_samples, _ref_diagonal_scatter,
           dtypes=ALL))
add(OpInfo("as_strided", _as_strided_samples, _ref_as_strided, dtypes=ALL,
           errors=_strided_errors))
add(OpInfo("as_strided_scatter", _as_strided_scatter_samples, _ref_as_strided_scatter,
           dtypes=ALL))
