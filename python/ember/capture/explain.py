"""explain(fn)(*args): what capturing fn does, without keeping anything compiled:
graphs, how many, why frames fell back, and the guards (torch._dynamo.explain)."""
from __future__ import annotations

from dataclasses import dataclass, field

from . import _hook
from .convert import CompileContext, make_callback
from .exc import counters


@dataclass
class ExplainOutput:
    graphs: list = field(default_factory=list)
    graph_count: int = 0
    graph_break_count: int = 0
    break_reasons: list = field(default_factory=list)
    op_count: int = 0
    ops_per_graph: list = field(default_factory=list)

    def __str__(self):
        lines = [f"Graph Count: {self.graph_count}",
                 f"Graph Break Count: {self.graph_break_count}",
                 f"Op Count: {self.op_count}"]
        if self.break_reasons:
            lines.append("Break Reasons:")
            lines += [f"  {r}" for r in self.break_reasons]
        return "\n".join(lines)


def explain(fn):
    def run(*args, **kwargs):
        from .backends import lookup
        _hook.reset_all()
        name, backend = lookup("eager")
        ctx = CompileContext(name, backend, fullgraph=False)
        before = dict(counters["unsupported"])
        with _hook.enable(make_callback(ctx)):
            fn(*args, **kwargs)
        # graph breaks taken, then frames that fell back whole
        reasons = list(ctx.break_reasons) + [
            r for r, n in counters["unsupported"].items() if n > before.get(r, 0)]
        out = ExplainOutput(graphs=list(ctx.graphs), graph_count=len(ctx.graphs),
                            graph_break_count=len(reasons), break_reasons=reasons)
        for gm in ctx.graphs:
            ops = [n for n in gm.graph.nodes if n.op in ("call_function", "call_method",
                                                          "call_module")]
            out.ops_per_graph.append(ops)
            out.op_count += len(ops)
        _hook.reset_all()
        return out
    return run
