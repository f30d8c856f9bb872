"""View chains: how a view is made from its base, replayed on values.

A view made by a dispatched view op records its steps from its base (the root tensor of
its storage; csrc/autograd/view.c): `t._view_steps` is a tuple of (op, args after self...),
empty for a base, None when unknown. Two things are built from the steps, both with
ordinary ops, so autograd and tracers see them:

- replay(steps, x): the view's value computed from x, a value of the base (any layout:
  an entry's `view_replay` stands in for an op whose result depends on strides);
- scatter(steps, base, src): base with src written where the view sits. Each step's
  entry gives its inverse (`view_scatter`: slice -> slice_scatter, permute -> the
  inverse permute, ...); a chain with a step that has none (expand) is written with one
  index_put at the view's positions, found by replaying the chain on the base's flat
  element indices.

AOT functionalization (ember.aot.functionalize) turns writes into views into functional
writes of their base with them; autograd's CopySlices (ember.autograd.copy_slices) writes
the gradient of an updated view into its base's gradient.
"""
from __future__ import annotations


def steps_of(t):
    """t's view steps from its base: () for a base, None when they are not known."""
    if t._base is None:
        return ()
    return t._view_steps


def base_of(t):
    return t if t._base is None else t._base


def _step(x, op, args):
    replay = op.entry.view_replay
    if replay is not None:
        return replay(x, *args)
    return op._call_bound((x,) + tuple(args))


def replay(steps, x):
    """The value of the view of x's steps (dispatched ops)."""
    for op, *args in steps:
        x = _step(x, op, args)
    return x


def has_inverses(steps):
    return all(step[0].entry.view_scatter is not None for step in steps)


def scatter(steps, base, src):
    """base with src (of the view's shape and base's dtype) written at the view."""
    if not steps:
        return src
    if not has_inverses(steps):
        return _scatter_by_index(steps, base, src)
    values = [base]
    for op, *args in steps[:-1]:
        values.append(_step(values[-1], op, args))
    for (op, *args), v in zip(reversed(steps), reversed(values)):
        src = op.entry.view_scatter(v, src, *args)
    return src


def _scatter_by_index(steps, base, src):
    from . import api as O
    n = base.numel()
    flat_ids = O.arange(n).view(tuple(base.shape))
    positions = replay(steps, flat_ids).reshape(-1)
    flat = base.reshape(-1)
    out = O.index_put(flat, (positions,), src.reshape(-1))
    return out.view(tuple(base.shape))


__all__ = ["steps_of", "base_of", "replay", "scatter", "has_inverses"]
