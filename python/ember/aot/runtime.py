"""Running compiled forward and backward graphs as one node of eager autograd.

The forward graph runs with grad mode off and returns the outputs and the saved values;
the outputs that need gradients hang from one Python node of the C autograd engine
(ember._C._make_node), whose backward runs the backward graph on the saved values and
the incoming gradients. To the rest of the program it is an ordinary autograd node:
.backward() fills .grad of the inputs that require grad, and of no others.
"""
from __future__ import annotations

from .. import _C
from .joint import JointGraph


class CompiledFunction:
    def __init__(self, joint: JointGraph, forward, backward, num_saved, name):
        self.forward = forward
        self.backward = backward
        self.num_outputs = joint.num_forward_outputs
        self.num_saved = num_saved
        self.diff_outputs = joint.differentiable_outputs
        self.primals_requiring_grad = joint.primals_requiring_grad
        self.output_meta = joint.forward_output_meta
        self.name = name

    def __call__(self, *inputs):
        prev = _C._set_grad_enabled(False)
        try:
            res = self.forward(*inputs)
        finally:
            _C._set_grad_enabled(prev)
        outs = list(res[:self.num_outputs])
        saved = list(res[self.num_outputs:])
        ids = {id(x) for x in inputs}
        for i, o in enumerate(outs):
            if id(o) in ids or any(o is outs[j] for j in range(i)):
                outs[i] = o.alias() if hasattr(o, "alias") else o.view(o.shape)
        diff = tuple(outs[i] for i in self.diff_outputs)
        if diff and self.backward is not None:
            _C._make_node(self._backward_fn(saved, len(inputs)), tuple(inputs), diff,
                          "CompiledFunctionBackward")
        return tuple(outs)

    def _backward_fn(self, saved, num_inputs):
        backward = self.backward
        needs = self.primals_requiring_grad
        meta = [self.output_meta[i] for i in self.diff_outputs]

        def run_backward(*grads):
            from .. import zeros
            tangents = [g if g is not None else zeros(shape, dtype=dtype)
                        for g, (shape, dtype) in zip(grads, meta)]
            result = backward(*saved, *tangents)
            out = [None] * num_inputs
            for i, g in zip(needs, result):
                out[i] = g
            return tuple(out)
        return run_backward
