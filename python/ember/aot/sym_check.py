"""A symbolic joint graph run again at other sizes ([dynamic]).

AOT autograd traces a graph with size inputs once, so every size a formula, a
decomposition or a C helper computed must be an expression of the symbols. A size read
as a C int at the hints (a value the tracer cannot see as symbolic) would be a constant
of the graph, right at the captured sizes only. `check_other_sizes` binds the symbols to
other values the guards admit and runs the prim joint graph on meta tensors of those
sizes: every node's result must have the shape its symbolic value has there. A graph
that does not is refused (SymbolicSizeMismatch): the caller compiles it per size.
"""
from __future__ import annotations

from .. import _C
from .. import fx
from ..fx import sym_expr as se
from ..fx.shape_env import SymInt
from ..fx.sym_fake import SymFake
from ..fx.sym_meta import dispatch_mode


class SymbolicSizeMismatch(RuntimeError):
    pass


def other_sizes(env, tries=(1, 3, 7, 2, -1, -2)):
    """{symbol name: value} other than the hints for which every guard of env holds
    (each symbol moved by the same offset, up or down, or doubled), or None."""
    hints = {s: info.hint for s, info in env.symbols.items()}
    candidates = [{s: h + k for s, h in hints.items()} for k in tries]
    candidates.append({s: 2 * h + 1 for s, h in hints.items()})
    for c in candidates:
        values = {s.name: v for s, v in c.items()}
        for s, rep in env.replacements.items():
            values[s.name] = se.evaluate(rep, values)
        ok = all(lo <= values[s.name] <= (hi if hi != se.INF else values[s.name])
                 for s, (lo, hi) in ((s, i.range) for s, i in env.symbols.items()))
        moved = any(values[s.name] != h for s, h in hints.items())
        if ok and moved and all(g.rel.evaluate(values) for g in env.guards):
            return values
    return None


def _at(value, values):
    if isinstance(value, SymInt):
        return se.evaluate(value.env.simplify(value.expr), values)
    return value


def _shape_at(fake, values):
    if isinstance(fake, SymFake):
        return (tuple(_at(n, values) for n in fake._sym_shape),
                tuple(_at(n, values) for n in fake._sym_strides))
    return tuple(fake.shape), tuple(fake.stride())


class _Rerun(fx.Interpreter):
    def __init__(self, graph, values):
        super().__init__({}, garbage_collect_values=False, graph=graph)
        self.values = values

    def run_node(self, n):
        out = super().run_node(n)
        val = n.meta.get("val")
        if isinstance(val, SymInt):
            want = _at(val, self.values)
            if out != want:
                raise SymbolicSizeMismatch(f"{n.name} is {out} at sizes {self.values}, "
                                           f"its expression {val} gives {want}")
        elif isinstance(val, _C.Tensor) and isinstance(out, _C.Tensor):
            want = _shape_at(val, self.values)[0]
            if tuple(out.shape) != want:
                raise SymbolicSizeMismatch(
                    f"{n.name} ({n.format_node()}) has shape {list(out.shape)} at sizes "
                    f"{self.values}, its symbolic shape {list(val.shape)} gives "
                    f"{list(want)}: a size was read at the captured value")
        return out

    def placeholder(self, target, args, kwargs):
        n = next(p for p in self.graph.nodes if p.op == "placeholder" and p.target == target)
        val = n.meta["val"]
        if isinstance(val, SymInt):
            return _at(val, self.values)
        shape, strides = _shape_at(val, self.values)
        return _C._meta_tensor(shape, val.dtype, strides)


def check_other_sizes(graph, env):
    """Raises SymbolicSizeMismatch unless graph (a prim joint graph with size inputs)
    computes at other sizes the shapes its symbolic values say. Graphs whose guards
    admit no other sizes pass."""
    values = other_sizes(env)
    if values is None:
        return
    prev = _C._set_grad_enabled(False)
    try:
        with dispatch_mode(_C.MODE_META):
            _Rerun(graph, values).run()
    except SymbolicSizeMismatch:
        raise
    except Exception as e:   # noqa: BLE001 - a graph that raises at other sizes
        raise SymbolicSizeMismatch(f"at sizes {values} the graph raised "
                                   f"{type(e).__name__}: {e}") from e
    finally:
        _C._set_grad_enabled(prev)

