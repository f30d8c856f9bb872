"""CopySlices: the backward of an in-place update of a view (csrc/autograd/view.c).

When an in-place op updates a view of a base, the base's history is rebased: its
grad_fn becomes a CopySlices node whose inputs are the base's old history and the other
inputs of the in-place op. Its backward takes the gradient g of the new base, runs the
in-place op's own node on the part of g where the view sits (the view's steps replayed
on g), and writes the gradient that node gives for the view's old value back into that
part of g (the steps' scatter), which is the old base's gradient, as PyTorch's
CopySlices does.
"""
from __future__ import annotations

from .. import _C
from ..ops import view_replay


def backward_for(fn_node, steps):
    """The backward of CopySlices for the in-place op's node fn_node on the view made
    from the base by steps."""
    def backward(g):
        gv = view_replay.replay(steps, g)
        grads = fn_node._apply(gv)
        g_self = grads[0]
        if g_self is None:
            g_self = gv * 0
        elif g_self.dtype is not g.dtype:
            g_self = g_self.to(g.dtype)
        return (view_replay.scatter(steps, g, g_self),) + tuple(grads[1:])
    return backward


_C._set_copy_slices(backward_for)
