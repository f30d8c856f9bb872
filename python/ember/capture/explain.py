"""explain(fn)(*args): what capturing fn does, without keeping anything compiled
(torch._dynamo.explain): the graphs and their ops, the graph breaks and frames that
fell back with their reasons and user source lines, the guards of every entry in
words, and the compile time of each frame."""
from __future__ import annotations

import time
from dataclasses import dataclass, field

from . import _hook
from .convert import CompileContext, make_callback


@dataclass
class ExplainOutput:
    """torch._dynamo.explain's ExplainOutput, field for field. break_reasons holds
    exc.BreakReason (a str "reason at file:line in fn" with .reason, .user_stack and
    .graph_break); ops_per_graph the targets of each graph's calls; out_guards one
    sentence per guard, e.g. "len(xs) == 3"."""
    graphs: list = field(default_factory=list)
    graph_count: int = 0
    graph_break_count: int = 0
    break_reasons: list = field(default_factory=list)
    op_count: int = 0
    ops_per_graph: list = field(default_factory=list)
    out_guards: list = field(default_factory=list)
    compile_times: str = ""

    def __str__(self):
        lines = [f"Graph Count: {self.graph_count}",
                 f"Graph Break Count: {self.graph_break_count}",
                 f"Op Count: {self.op_count}"]
        lines.append("Break Reasons:")
        for i, r in enumerate(self.break_reasons, 1):
            kind = "" if r.graph_break else " (the frame ran in CPython)"
            lines.append(f"  Break Reason {i}{kind}:")
            lines.append(f"    Reason: {r.reason}")
            lines.append("    User Stack:")
            for fs in r.user_stack:
                lines.append(f"      {fs.filename}:{fs.lineno} in {fs.name}")
                if fs.line:
                    lines.append(f"        {fs.line}")
        lines.append("Ops per Graph:")
        for i, ops in enumerate(self.ops_per_graph, 1):
            lines.append(f"  Ops {i}:")
            lines += [f"    {_op_name(op)}" for op in ops]
        lines.append("Out Guards:")
        lines += [f"  {g}" for g in self.out_guards]
        lines.append(f"Compile Times: {self.compile_times}")
        return "\n".join(lines)


def _op_name(target):
    if isinstance(target, str):
        return target
    return getattr(target, "__qualname__", None) or getattr(target, "__name__", None) \
        or str(target)


def explain(fn):
    def run(*args, **kwargs):
        from .backends import lookup
        _hook.reset_all()
        name, backend = lookup("eager")
        ctx = CompileContext(name, backend, fullgraph=False)
        convert = make_callback(ctx)
        programs, times = [], {}

        def callback(frame_info, entries):
            t0 = time.perf_counter()
            result = convert(frame_info, entries)
            if isinstance(result, tuple):
                programs.append(result[0])
                code = frame_info.code
                key = f"{code.co_name} ({code.co_filename}:{code.co_firstlineno})"
                times[key] = times.get(key, 0.0) + time.perf_counter() - t0
            return result
        ctx.callback = callback       # the entries' COMPILE_CONTEXT guard names this one
        try:
            with _hook.enable(callback):
                fn(*args, **kwargs)
        finally:
            _hook.reset_all()
        out = ExplainOutput(graphs=list(ctx.graphs), graph_count=len(ctx.graphs),
                            graph_break_count=len(ctx.break_reasons),
                            break_reasons=list(ctx.break_reasons))
        for gm in ctx.graphs:
            ops = [n.target for n in gm.graph.nodes
                   if n.op in ("call_function", "call_method", "call_module")]
            out.ops_per_graph.append(ops)
            out.op_count += len(ops)
        seen = set()
        for program in programs:
            for g in program.guards:
                if g not in seen:
                    seen.add(g)
                    out.out_guards.append(g)
        out.compile_times = ", ".join(f"{k}: {v:.4f} s" for k, v in times.items())
        return out
    return run
