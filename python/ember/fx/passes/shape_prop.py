"""ShapeProp: run a graph once and record each value's tensor metadata on its node.

Later stages read node.meta["tensor_meta"] instead of re-deriving shapes: the
printed graph shows them (GraphModule.print_readable), and passes that need a
shape or dtype consult it. Propagating meta tensors (device="meta") computes the
metadata without doing the arithmetic.
"""
from __future__ import annotations

from typing import Any, NamedTuple

import ember
from ..interpreter import Interpreter
from ..node import Node, map_aggregate


class TensorMetadata(NamedTuple):
    shape: ember.Size
    dtype: ember.dtype
    stride: tuple
    requires_grad: bool

    def __str__(self):
        dtype = str(self.dtype).removeprefix("ember.")
        return f"{dtype}[{', '.join(str(s) for s in self.shape)}]"


def extract_tensor_metadata(t: ember.Tensor) -> TensorMetadata:
    return TensorMetadata(t.shape, t.dtype, tuple(t.stride()), t.requires_grad)


class ShapeProp(Interpreter):
    """ShapeProp(gm).propagate(*args) runs gm and sets, on every node whose value is
    a tensor or holds tensors, meta["tensor_meta"]: a TensorMetadata, or the same
    tuple/list/dict structure of them. meta["type"] is the value's type."""

    def run_node(self, n: Node) -> Any:
        result = super().run_node(n)
        found = False

        def extract(v):
            nonlocal found
            if isinstance(v, ember.Tensor):
                found = True
                return extract_tensor_metadata(v)
            return v
        meta = map_aggregate(result, extract)
        if found:
            n.meta["tensor_meta"] = meta
        n.meta["type"] = type(result)
        return result

    def propagate(self, *args) -> Any:
        return self.run(*args)
