"""Buffer planning: the memory a compiled graph reads and writes.

Graph inputs are read in place with the strides traced for them when those are dense;
anything else (an expanded gradient, a strided view) is compiled for a contiguous
input, and the runtime copies an input into that layout. Buffers are dense, contiguous
unless a graph output needs eager's layout (a permutation: a value computed from a
transposed input keeps its order, as eager's TensorIterator keeps it), and allocated per
call (the runtime reuses last call's memory when nothing holds it), or made by an extern
step. Outputs are views of inputs or buffers.
"""
from __future__ import annotations

import math

from ..ops.meta import contiguous_strides
from .plan import BufferSpec, InputSpec, Ref
from .values import BufferValue, check_dtype, dense, span


class BufferPlan:
    """The inputs and buffers of a Lowered, with the extent of each."""

    def __init__(self, lowered):
        self.out = lowered
        self.input_extents = []

    def add_input(self, meta, what):
        """The value of the next graph input, whose traced (meta) value is `meta`."""
        check_dtype(meta.dtype, what)
        shape = tuple(meta.shape)
        strides = tuple(meta.stride())
        if not dense(shape, strides):
            strides = contiguous_strides(shape)
        i = len(self.out.inputs)
        self.out.inputs.append(InputSpec(shape, strides))
        extent = span(shape, strides, 0)
        self.input_extents.append(extent)
        return BufferValue(Ref("in", i), meta.dtype, shape, strides, 0, extent)

    def new_buffer(self, dtype, shape, extern=False, strides=None):
        """A buffer allocated per call (contiguous, or laid out with the dense strides
        given), or filled by an extern step."""
        check_dtype(dtype, "a buffer")
        shape = tuple(shape)
        if strides is None or extern or not dense(shape, strides):
            strides = contiguous_strides(shape)
        # memory order: the dims by decreasing stride (a dense layout is contiguous there)
        order = sorted(range(len(shape)), key=lambda d: -strides[d])
        j = len(self.out.buffers)
        self.out.buffers.append(BufferSpec(dtype, tuple(shape[d] for d in order), extern))
        return BufferValue(Ref("buf", j), dtype, shape, tuple(strides))

    def extent_of(self, ref):
        """Elements addressable from element 0 of a ref."""
        if ref[0] == "in":
            return self.input_extents[ref[1]]
        return math.prod(self.out.buffers[ref[1]].sizes)
