"""Backend "llvm" (the default; "inductor" is an alias): AOT autograd with forward and
backward graphs compiled to fused LLVM kernels plus BLAS calls.

A graph the LLVM path cannot compile (an op without a lowering, a dtype it does not
support, an LLVM failure) runs under "aot_eager" instead, with one warning per
(graph, reason); strict mode raises.
"""
from __future__ import annotations

import collections
import functools
import os
import warnings

from .. import _C
from ..aot import aot_compile, eager_compiler
from ..capture.backends import register_backend
from ..capture import logs
from ..capture.config import config
from ..capture.exc import counters
from . import autotune, graph_cache
from .jit import JitModule
from .lowering import lower, lower_symbolic, symbolic_env
from .symbolic import SymbolicLoweringUnsupported

_warned = set()


def _find_blas():
    """Points compiled graphs at the BLAS NumPy bundles (else they call numpy.matmul)."""
    from .._sysinfo import openblas_path
    path = openblas_path()
    return bool(path) and _C._set_blas(path)


BLAS = _find_blas()
# the most recent compiled graphs, for inspection (tests, the demo, debugging)
recent = collections.deque(maxlen=32)


class CompiledLLVMGraph:
    """A graph compiled by the LLVM backend: the loop IR, the JIT module, the plan."""

    def __init__(self, graph, name, tune=False, symbolic=False):
        # symbolic: a graph with size inputs, one plan for every size (symbolic.py)
        self.symbolic = symbolic
        if symbolic:
            if tune:
                raise SymbolicLoweringUnsupported("max-autotune times fixed sizes")
            self.lowered, plan = lower_symbolic(graph, name)
        else:
            self.lowered = lower(graph, name)
            plan = self.lowered.plan()
        self.plan = plan
        specs = tuple(k.spec() for k in self.lowered.kernels)
        self.module = JitModule(specs, name) if specs else None
        addresses = self.module.addresses if self.module is not None else ()
        self.run = _C.CompiledGraph(self.module, addresses, plan)
        if tune:            # mode="max-autotune": the first call times the schedules
            autotune.install(self.run, self.module, plan, name)
        self.name = name
        if logs.enabled("output_code"):
            logs.log("output_code", self.describe(llvm=True))

    def describe(self, llvm=False):
        text = f"===== loop IR ({self.name}) =====\n{self.lowered}\n"
        if llvm and self.module is not None:
            text += f"===== LLVM IR ({self.name}, optimised) =====\n{self.module.optimized_ir}"
        return text

    def __call__(self, *args):
        return self.run(*args)

    def start_profile(self):
        """Times every step of the calls from now on (see profile_report)."""
        self.run.profile = True
        self._profile_from = self.run.calls

    def profile_report(self, top=None):
        """The steps by time spent in them since start_profile()."""
        secs = self.run.step_seconds
        if secs is None:
            return f"{self.name}: not profiling (call start_profile() first)"
        calls = max(self.run.calls - getattr(self, "_profile_from", 0), 1)
        labels = [str(step).splitlines()[0] for step in self.lowered.steps]
        rows = sorted(zip(secs, labels), reverse=True)[:top]
        total = sum(secs)
        lines = [f"===== {self.name}: {total / calls * 1e3:.3f} ms per call over "
                 f"{len(secs)} steps ====="]
        lines += [f"{t / calls * 1e6:10.1f} us {100 * t / max(total, 1e-12):5.1f}%  {label}"
                  for t, label in rows]
        return "\n".join(lines)


def llvm_compiler(graph, name, made=None, tune=False, strict_symbolic=False):
    """fw/bw compiler for aot_compile: the LLVM path, or eager ops if it cannot. made, a
    list, gets the CompiledLLVMGraph (None when it fell back); tune: max-autotune. A
    graph with symbolic sizes compiles one plan for every size; with strict_symbolic
    what cannot raises (the caller compiles per size instead), else it runs eagerly."""
    symbolic = symbolic_env(graph) is not None
    try:
        compiled = CompiledLLVMGraph(graph, name, tune, symbolic=symbolic)
        recent.append(compiled)
        if made is not None:
            made.append(compiled)
        return compiled.run
    except Exception as e:   # noqa: BLE001 - lowering or LLVM failure: run eagerly
        strict = config.strict or os.environ.get("EMBER_STRICT") == "1"
        if strict or (symbolic and strict_symbolic):
            raise
        reason = f"{type(e).__name__}: {e}"
        counters["llvm_fallback"][reason] += 1
        key = (name, reason)
        if key not in _warned:
            _warned.add(key)
            warnings.warn(f"ember.compile: the LLVM backend could not compile {name} "
                          f"({reason}); that graph runs under 'aot_eager' instead.",
                          RuntimeWarning, stacklevel=2)
        if made is not None:
            made.append(None)
        return eager_compiler(graph, name)


@register_backend("llvm")
def llvm(gm, example_inputs, tune=False):
    """AOT autograd with both graphs lowered to LLVM kernels; a graph an earlier process
    compiled comes from the graph cache (graph_cache.py) instead. tune: mode
    "max-autotune" (autotune.py), the same graphs with their schedules timed on their
    first calls."""
    code = getattr(gm, "meta", {}).get("code")
    name = code.co_name if code else "graph"
    key = graph_cache.key(gm, example_inputs, name)
    later = functools.partial(llvm_compiler, tune=tune)      # backward variants
    if key is not None:
        cached = graph_cache.load(key, gm, example_inputs, name, later, tune=tune)
        if cached is not None:
            return cached
    made = []
    recording = [True]

    def compiler(graph, gname):       # the graphs aot_compile makes (not later variants)
        return llvm_compiler(graph, gname, made if recording[0] else None, tune)

    record = {} if key is not None else None
    fn = aot_compile(gm, example_inputs, fw_compiler=compiler, bw_compiler=compiler,
                     name=name, record=record)
    recording[0] = False
    if key is not None:
        graph_cache.store(key, record, made)
    return fn


register_backend("inductor", llvm)      # torch's name for its default backend


def llvm_symbolic(gm, example_inputs):
    """Backend "llvm" for a captured graph with size inputs: AOT autograd traces it
    symbolically and both graphs compile to one plan for every size (symbolic.py).
    Raises SymbolicAOTUnsupported (the caller compiles per size) when the trace or a
    graph's lowering is not symbolic; backward variants made later that cannot be run
    eagerly instead, with the usual warning."""
    code = getattr(gm, "meta", {}).get("code")
    name = code.co_name if code else "graph"
    during = [True]

    def compiler(graph, gname):
        return llvm_compiler(graph, gname, strict_symbolic=during[0])
    # a write into a slice of an input is a kernel storing into the input's memory
    # (aot/inplace_writes.py, lowering.write_into_input): no copy of the whole input
    compiler.writes_in_place = "kernels"

    fn = aot_compile(gm, example_inputs, fw_compiler=compiler, bw_compiler=compiler,
                     name=name)
    during[0] = False
    return fn


llvm.symbolic = llvm_symbolic


def llvm_autotuned(gm, example_inputs):
    """Backend "llvm" under mode="max-autotune"."""
    return llvm(gm, example_inputs, tune=True)


llvm.autotuned = llvm_autotuned         # what ember.compile(mode="max-autotune") uses
