"""Folding a per-channel affine map that follows a convolution into its weight and bias
(a graph pass run before lowering): an inference BatchNorm.

    conv(x, w, b) -> add c1 -> mul s1 -> mul s2 -> add c2          (each value used once)

where every c, s is a per-output-channel value (shape (Co, 1, 1), (1, Co, 1, 1), a size-1
value or a number) that does not depend on the convolution, is

    conv(x, w * S, b * S + B),   S = s1 * s2,  B = (c1 * s1) * s2 + c2

computed once per call on the weights (Co * Ci * kh * kw elements) instead of once per
output element. An eval-mode BatchNorm decomposes into exactly that chain (its running
mean negated and added, times 1/sqrt(var + eps), times its weight, plus its bias), so the
output pass no longer computes it. A training-mode BatchNorm normalises by statistics
computed from the convolution's output itself, which the chain must not depend on: it
is never folded. Results differ from eager's by rounding only (the products are
associated differently).
"""
from __future__ import annotations

from .. import _C
from .. import prims as P
from ..ops import meta as M

FLOATS = (_C.float32, _C.float64)


def _val(n):
    return n.meta.get("val") if hasattr(n, "meta") else None


def _depends_on(node, target, limit=64):
    """Whether node's value is computed from target (a bounded walk back)."""
    seen, todo = set(), [node]
    while todo and len(seen) < limit * 16:
        n = todo.pop()
        if n is target:
            return True
        if n in seen:
            continue
        seen.add(n)
        todo.extend(n.all_input_nodes)
    return bool(todo)            # undecided: treat as dependent


def _per_channel(operand, co, dtype, conv):
    """operand as a (Co, 1, 1)-broadcastable per-channel factor: (kind, value) with kind
    "number" or "node", or None."""
    if isinstance(operand, (int, float)) and not isinstance(operand, bool):
        return ("number", float(operand))
    v = _val(operand)
    if not isinstance(v, _C.Tensor) or v.dtype is not dtype:
        return None
    shape = tuple(v.shape)
    while shape and shape[0] == 1 and len(shape) > 3:
        shape = shape[1:]
    if len(shape) > 3 or any(n != 1 for n in shape[1:]) or (shape and shape[0] not in (1, co)):
        return None
    if len(shape) < 3 and shape and shape[-1] != 1:
        return None                # (Co,) broadcasts against the width, not channels
    if _depends_on(operand, conv):
        return None
    return ("node", operand)


def _chain(conv):
    """The add/mul nodes after conv with per-channel operands, each the only user of the
    one before: [(op, (kind, value))]."""
    val = _val(conv)
    co, dtype = val.shape[1], val.dtype
    steps, cur = [], conv
    while len(cur.users) == 1:
        (user,) = cur.users
        if user.op != "call_function" or user.target not in (P.add, P.mul):
            break
        if user.kwargs.get("alpha", 1) != 1 or len(user.args) != 2:
            break
        uv = _val(user)
        if not isinstance(uv, _C.Tensor) or tuple(uv.shape) != tuple(val.shape) or \
                uv.dtype is not dtype:
            break
        a, b = user.args
        other = b if a is cur else a if b is cur else None
        if other is None or other is cur:
            break
        f = _per_channel(other, co, dtype, conv)
        if f is None:
            break
        steps.append((user.target, f, user))
        cur = user
    return steps


def fold_conv_affine(graph):
    """Folds each convolution's per-channel affine chain (an inference BatchNorm) into its
    weight and bias; returns how many convolutions were folded."""
    folded = 0
    for conv in list(graph.nodes):
        if conv.op != "call_function" or conv.target is not P.convolution:
            continue
        val = _val(conv)
        args = list(conv.args)
        if not isinstance(val, _C.Tensor) or val.dtype not in FLOATS or val.ndim != 4 or \
                len(args) != 9 or args[6] or conv.kwargs:
            continue
        w = args[1]
        wv = _val(w)
        if not isinstance(wv, _C.Tensor) or wv.ndim != 4 or wv.dtype is not val.dtype:
            continue
        steps = _chain(conv)
        if not any(op is P.mul for op, _, _ in steps):
            continue
        co, dtype = val.shape[1], val.dtype
        last = steps[-1][2]
        with graph.inserting_before(last):
            def node(op, a, b, shape):
                n = graph.call_function(op, (a, b))
                n.meta["val"] = M.meta_tensor(shape, dtype)
                return n

            def channel(f):
                kind, v = f
                if kind == "number":
                    return v
                n = graph.call_function(P.view, (v, [_val(v).numel()]))
                n.meta["val"] = M.meta_tensor((_val(v).numel(),), dtype)
                if _val(v).numel() == 1 and co != 1:
                    n = node(P.mul, n, graph_ones, (co,))
                return n

            graph_ones = graph.call_function(P.full, ([co], 1.0), {"dtype": dtype})
            graph_ones.meta["val"] = M.meta_tensor((co,), dtype)
            scale = graph_ones
            shift = args[2]              # the convolution's bias (Co,), or None
            for op, f, _ in steps:
                c = channel(f)
                if op is P.mul:
                    scale = node(P.mul, scale, c, (co,))
                    if shift is not None:
                        shift = node(P.mul, shift, c, (co,))
                elif shift is None:
                    shift = c if not isinstance(c, float) else node(P.mul, graph_ones, c,
                                                                     (co,))
                else:
                    shift = node(P.add, shift, c, (co,))
            s4 = graph.call_function(P.view, (scale, [co, 1, 1, 1]))
            s4.meta["val"] = M.meta_tensor((co, 1, 1, 1), dtype)
            w2 = node(P.mul, w, s4, tuple(wv.shape))
            new = graph.call_function(P.convolution, tuple([args[0], w2, shift] + args[3:]))
            new.meta["val"] = M.meta_tensor(tuple(val.shape), dtype)
        last.replace_all_uses_with(new)
        for _, _, n in reversed(steps):
            graph.erase_node(n)
        graph.erase_node(conv)
        folded += 1
    return folded
