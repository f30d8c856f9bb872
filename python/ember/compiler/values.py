"""The value model of the lowering: what a graph node's value is while it is lowered.

Every value is lazy. A *buffer value* is data that exists (a graph input, a BLAS
result, a kernel output) seen through a strided view: views (view, permute, expand,
slice) only change its sizes, strides and offset. A *pointwise value* is a function
from an index (one affine expression per dim) to a register of the kernel being built:
elementwise prims compose these functions, so a chain of them is inlined into whoever
consumes it. Values are realized (computed into a buffer) only when they must be
(fusion.py decides when).
"""
from __future__ import annotations

import math

from .. import _C, _dtypes
from ..ops import meta as M
from .loop_ir import Affine
from .plan import View

SUPPORTED_DTYPES = frozenset((_C.bool, _C.uint8, _C.int8, _C.int16, _C.int32, _C.int64,
                              _C.float16, _C.bfloat16, _C.float32, _C.float64))
# storage dtypes: loaded and stored at their width, computed in float32 (op math)
HALF = frozenset(_dtypes.HALF)


def op_math(dtype):
    """The dtype compiled code computes a dtype's values in: float32 for float16 and
    bfloat16 (PyTorch's op math), any other dtype itself."""
    return _C.float32 if dtype in HALF else dtype


class LoweringError(NotImplementedError):
    """The graph uses something the LLVM backend cannot compile (it then runs eagerly)."""


def check_dtype(dtype, what):
    """Values of compiled code are of the dtypes the JIT computes in."""
    if dtype not in SUPPORTED_DTYPES:
        raise LoweringError(f"{what}: dtype {dtype} is not supported by the LLVM backend")


class BufferValue:
    def __init__(self, ref, dtype, sizes, strides, offset=0, extent=None):
        self.ref = ref
        self.dtype = dtype
        self.shape = tuple(sizes)
        self.strides = tuple(strides)
        self.offset = offset
        self.extent = extent if extent is not None else span(sizes, strides, offset)

    def at(self, index, ndim):
        """The element index (affine in ndim loop indices) of this view at `index`."""
        coeffs = [0] * ndim
        off = self.offset
        for a, st in zip(index, self.strides):
            off += a.offset * st
            for d, c in enumerate(a.coeffs):
                coeffs[d] += c * st
        return Affine(tuple(coeffs), off)

    def load(self, kb, index):
        return kb.load(self, self.at(index, len(kb.sizes)))

    def restrided(self, sizes, strides, offset):
        """Another view of the same data."""
        return BufferValue(self.ref, self.dtype, sizes, strides, offset, self.extent)

    def view(self) -> View:
        return View(self.ref, self.shape, self.strides, self.offset)


class PointwiseValue:
    """fn(kb, index) -> register; `cost` counts the ops inlining it would repeat, `depth`
    the pointwise values it calls through (fusion.MAX_DEPTH bounds it: building a
    kernel recurses once per level)."""

    def __init__(self, shape, dtype, fn, cost, node=None, reads=frozenset(), depth=1):
        self.shape = tuple(shape)
        self.dtype = dtype
        self.fn = fn
        self.cost = cost
        self.node = node
        self.reads = reads          # the buffers computing it loads
        self.depth = depth          # the longest chain of pointwise values fn calls through
        self.realized = None        # BufferValue once computed into a buffer
        self.must_realize = False
        # (base, strides_fn) when this value is a permutation of another
        # pointwise value: realizing it realizes the base in its own layout and views that
        self.view_base = None
        self.layout = None          # strides to store it with (a graph output: eager's)

    def load(self, kb, index):
        if self.realized is not None and not kb.stores_elsewhere(self, index):
            return self.realized.load(kb, index)
        reg = self.fn(kb, index)
        if self.must_realize:
            kb.maybe_store(self, index, reg)
        return reg


def depth_of(operands):
    """The depth of a pointwise value computed from operands."""
    return 1 + max((o.depth for o in operands if isinstance(o, PointwiseValue)
                    and o.realized is None), default=0)


def is_value(o):
    return isinstance(o, (BufferValue, PointwiseValue))


def dense(sizes, strides):
    """No gaps, no overlaps: a permutation of a contiguous layout."""
    if any(n == 0 for n in sizes):
        return True
    dims = sorted((st, n) for n, st in zip(sizes, strides) if n > 1)
    expect = 1
    for st, n in dims:
        if st != expect:
            return False
        expect *= n
    return True


def span(sizes, strides, offset):
    if any(n == 0 for n in sizes):
        return offset
    return offset + sum((n - 1) * s for n, s in zip(sizes, strides)) + 1


def reads(operands, shape):
    """The buffers read at full size (not broadcast) computing a value of `shape`."""
    out = set()
    n = math.prod(shape)
    for o in operands:
        if not is_value(o) or math.prod(o.shape) != n:
            continue
        if isinstance(o, BufferValue):
            out.add(o.ref)
        elif isinstance(o, PointwiseValue):
            out |= {o.realized.ref} if o.realized is not None else o.reads
    return frozenset(out)


def domain_index(ndim):
    """The identity index of an ndim domain: entry k is loop dim k."""
    return [Affine(tuple(1 if d == k else 0 for d in range(ndim))) for k in range(ndim)]


def broadcast_index(index, out_shape, in_shape):
    """The index into an operand of in_shape broadcast to out_shape."""
    off = len(out_shape) - len(in_shape)
    zero = Affine(tuple(0 for _ in (index[0].coeffs if index else ())))
    return [zero if in_shape[k] == 1 and out_shape[k + off] != 1 else index[k + off]
            for k in range(len(in_shape))]


def refinement(src, dst):
    """For a reshape that only splits dims (or adds/drops size-1 dims): for each src dim,
    the dst dims it splits into; else None."""
    groups, j = [], 0
    for n in src:
        group, prod = [], 1
        while j < len(dst) and (prod < n or (dst[j] == 1 and prod == n and n != 1)):
            if dst[j] == 1 and prod == n:
                break
            group.append(j)
            prod *= dst[j]
            j += 1
        if prod != n:
            return None
        groups.append(group)
    if any(dst[k] != 1 for k in range(j, len(dst))):
        return None
    if sorted(k for g in groups for k in g) != [k for k in range(len(dst)) if
                                                  any(k in g for g in groups)]:
        return None
    return groups


def layout_strides(value):
    """The strides a value is laid out with, or would be once computed: a buffer's own,
    a permuted pointwise value's base's permuted, any other pointwise value's
    contiguous."""
    if isinstance(value, PointwiseValue):
        if value.realized is not None:
            return value.realized.strides
        if value.view_base is not None:
            base, strides_fn = value.view_base
            fake = BufferValue(("in", -1), base.dtype, base.shape, layout_strides(base), 0,
                               1)
            return strides_fn(fake)[1]
        return M.contiguous_strides(value.shape)
    return value.strides
