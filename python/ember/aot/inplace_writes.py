"""In-place writes into inputs: a functional write into a slice of a graph input run as
a write into the input's own memory.

Functionalization (functionalize.py) makes `cache[:, :, p:p + 1] = k` into a new value
of the whole cache, `slice_scatter(cache, k, 2, p, p + 1)` (one scatter per view step:
slice_scatter(cache, slice_scatter(slice(cache, 0), ...), 0) for a chain of views), and
the runtime copies that new value back into the input (mutation.py). A KV-cache decode
step then allocates and copies the whole cache twice per layer for one position.

When the write is the only thing the graph does with the input, the functional chain is
replaced by the write itself: `copy_(slice(...slice(cache)...), k)` where the innermost
scatter was, and every read of the new value reads the input. So the graph allocates
nothing for it and the runtime has nothing to copy back (the new value is the input
itself; csrc/runtime/aot_function.c only moves the version counter, by the writes the
graph did not do itself). Exact when, as checked here (else the full copy stays, with
the reason counted in counters["aot_inplace_writes"]):

- the input's new value is a chain of slice/select/diagonal scatters rooted at the
  input's placeholder, each inner scatter's base the matching view of the outer one's,
  each used once, and the views used only by the chain;
- every value computed from the input's old value (a view of it, the value written,
  anything made from them) is computed before the write and is no output of the graph
  (so no read of the old memory comes after the write, however an op aliases its
  input, and the forward does not save the input for a backward);
- autograd does not follow the write (not `differentiable`) and the input does not
  require grad;
- the new value is no other output of the graph.

Aliasing between inputs is the runtime's check (a call whose written input shares
memory with another input runs the program eagerly). A graph that raises after the
write has written the region, as eager's own in-place op would have at that point;
the written value does not depend on the input, so running the program again (eagerly)
writes the same values.

For forward compilers that say they can (`writes_in_place` set): aot_eager's and the
eager backend's, which run the graph's ops as they are (the copy_ moves the version
counter: `in_graph` set), and the llvm backend's symbolic graphs ("kernels":
compiler/lowering.py's write_into_input stores src into the input's memory in a kernel
after every value computed from the old value, and moves no version counter, so the
runtime moves it by all the writes).
"""
from __future__ import annotations

import dataclasses

from .. import fx
from ..capture.exc import counters
from .. import _C

# scatter op -> the view op whose region it writes (the same arguments after the base)
def _ops():
    import ember
    return {ember.slice_scatter: ember.slice, ember.select_scatter: ember.select,
            ember.diagonal_scatter: ember.diagonal}


_VIEW_OF = {}


def _same(a, b):
    if isinstance(a, fx.Node) or isinstance(b, fx.Node):
        return a is b
    return type(a) is type(b) and a == b


def _chain(top, placeholder):
    """(scatters outer to inner, the views they write through, the innermost value) of
    a scatter chain rooted at placeholder, or a reason it is not one."""
    base, node = placeholder, top
    scatters, views = [], []
    while True:
        if node.op != "call_function" or node.target not in _VIEW_OF or node.kwargs \
                or len(node.args) < 2 or node.args[0] is not base:
            return "the new value is not a slice/select write into the input"
        scatters.append(node)
        src, args = node.args[1], node.args[2:]
        if isinstance(src, fx.Node) and src.op == "call_function" \
                and src.target in _VIEW_OF and len(src.users) == 1 and not src.kwargs:
            v = src.args[0]
            if isinstance(v, fx.Node) and v.op == "call_function" \
                    and v.target is _VIEW_OF[node.target] and not v.kwargs \
                    and v.args[0] is base and len(v.args) == len(args) + 1 \
                    and all(_same(a, b) for a, b in zip(v.args[1:], args)):
                views.append(v)
                base, node = v, src
                continue
        return scatters, views, src


def _refusal(graph, out, position, m, placeholder):
    """Why input mutation m (its new value at out's position) must stay a full copy, or
    (scatters, views, src) to write in place."""
    if m.differentiable:
        return "autograd follows the write"
    val = placeholder.meta.get("val")
    if getattr(val, "requires_grad", False):
        return "the input requires grad"
    outs = out.args[0]
    top = outs[position]
    if not isinstance(top, fx.Node):
        return "the new value is not a node"
    if sum(o is top for o in outs) != 1:
        return "the new value is also an output"
    found = _chain(top, placeholder)
    if isinstance(found, str):
        return found
    scatters, views, src = found
    # everything computed from the input's old value (but the chain's scatters: the
    # write itself) runs before the write and is no output: so nothing reads the old
    # memory after it, through a view or an op that may return its input
    order = {n: i for i, n in enumerate(graph.nodes)}
    at = order[scatters[-1]]
    chain, seen, stack = set(scatters), set(), [placeholder]
    while stack:
        for u in stack.pop().users:
            if u in chain or u in seen:
                continue
            if u.op == "output":
                return "the input's old value (or a value made from it) is an output"
            if order[u] > at:
                return "the graph reads the input's old value after the write"
            seen.add(u)
            stack.append(u)
    return found


def write_in_place(graph, mutations, first, bumps_versions=True):
    """Rewrites graph (whose outputs first + k are the new values of mutations[k]) so
    that the writes that can be are done in place; returns the mutations with `in_graph`
    set for those (the version bumps the graph's copy_ does, unless not
    bumps_versions: a compiled kernel's write moves no counter)."""
    if not mutations:
        return mutations
    if not _VIEW_OF:
        _VIEW_OF.update(_ops())
    out = next(n for n in graph.nodes if n.op == "output")
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    result = []
    for k, m in enumerate(mutations):
        found = _refusal(graph, out, first + k, m, placeholders[m.index])
        if isinstance(found, str):
            counters["aot_inplace_writes"][f"full copy: {found}"] += 1
            result.append(m)
            continue
        scatters, views, src = found
        inner = scatters[-1]
        with graph.inserting_before(inner):
            region = graph.call_function(_VIEW_OF[inner.target],
                                         (inner.args[0],) + tuple(inner.args[2:]))
            write = graph.call_function(_C.Tensor.copy_, (region, src))
        # (the region has the shape of the value written into it: compilers lower it
        # from its meta value)
        val = src.meta.get("val") if isinstance(src, fx.Node) else None
        if val is not None:
            region.meta["val"] = write.meta["val"] = val
        placeholder = placeholders[m.index]
        scatters[0].replace_all_uses_with(placeholder)
        for s in scatters:
            graph.erase_node(s)
        counters["aot_inplace_writes"]["in place"] += 1
        result.append(dataclasses.replace(m, in_graph=1 if bumps_versions else 0))
    graph.lint()
    return tuple(result)


def writes_in_place(compiler):
    """Whether a forward compiler takes writes into slices of inputs as copy_ nodes:
    True (it runs the ops of its graph as they are) or "kernels" (its kernels write,
    moving no version counter)."""
    return getattr(compiler, "writes_in_place", False)
