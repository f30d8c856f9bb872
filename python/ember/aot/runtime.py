"""Running compiled forward and backward graphs as one node of eager autograd.

The forward graph runs with grad mode off and returns the outputs and the saved values;
the outputs that need gradients hang from one node of the C autograd engine whose
backward runs the backward graph on the saved values and the incoming gradients. When
some outputs get no gradient it runs the backward traced for the others instead (see
variants.py), so no zeros stand in for a missing gradient and inputs only those outputs
reach get None, as in eager. Without retain_graph its saved values are freed after it
ran and a second backward raises, as in eager. To the rest of the program it is an
ordinary autograd node: .backward() fills .grad of the inputs that require grad, and of
no others. A graph that writes into its inputs returns their new values last; the
runtime writes them back after each call and makes the outputs that are views of those
inputs again from them (mutation.py). The call path is C (csrc/runtime/aot_function.c).
"""
from __future__ import annotations

from .. import _C
from .joint import JointGraph

CompiledFunction = _C.AOTFunction


def compiled_function(joint: JointGraph, forward, backward, name, variants=None, *,
                      fallback=None, forward_grad=False):
    """variants(present) -> (backward, saved indices, tangent indices) for calls whose
    differentiable outputs get only the gradients flagged in present (variants.py).
    backward None: an inference graph (no output is differentiable). fallback(*inputs)
    runs the program eagerly, for calls in which an input written into shares memory
    with another input. forward_grad: the forward runs with the caller's grad mode and
    records its own history (the eager backend), instead of hanging from one node."""
    tangent_meta = tuple((tuple(joint.forward_output_meta[i][0]),
                          joint.forward_output_meta[i][1])
                         for i in joint.differentiable_outputs)
    return _C.AOTFunction(forward, backward, joint.num_forward_outputs,
                          tuple(joint.differentiable_outputs),
                          tuple(joint.primals_requiring_grad), tangent_meta,
                          "CompiledFunctionBackward", variants,
                          mutations=tuple(m.spec() for m in joint.mutations),
                          aliases=tuple(a.spec() for a in joint.output_aliases),
                          fallback=fallback, forward_grad=forward_grad)
