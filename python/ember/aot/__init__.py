"""AOT autograd (AOTAutograd's and PrimTorch's roles): from a captured graph to a forward
graph and a backward graph over prims, wrapped as one eager-autograd node.

    captured graph --trace on fake tensors--> joint forward+backward graph (ops)
                   --decompose--> prims only (verified)
                   --partition--> forward graph (saves what backward needs) + backward graph
                   --fw/bw compilers--> CompiledFunction (runtime.py)
    and, for calls where some outputs get no gradient, the backward of the others
    (variants.py), traced again over the joint trace's fakes

Writes into the graph's inputs are functionalized too: their new values are extra
forward outputs, written back into the inputs by the runtime after each call
(mutation.py; the eager backend's graphs that write into inputs take the same path,
eager.py).

A graph may change grad mode inside (no_grad / enable_grad regions): the joint trace
runs through the mode-setting calls, so each region's ops record autograd as eager's
do there (grad_mode.py).

Backend "aot_eager" compiles both graphs with eager ops. counters["aot_saved_bytes"]
[graph name] adds up the bytes each compiled forward saves for its backward.
"""
from __future__ import annotations

import dataclasses

from .. import _C
from .. import fx
from ..capture.backends import register_backend
from ..capture.exc import counters
from .decompose import PrimVerificationError, decompose, verify_prims
from .grad_mode import turns_grad_on, with_grad_on
from .inplace_writes import write_in_place, writes_in_place
from .joint import JointGraph, trace_joint
from .partition import log_graphs, log_mutations, partition, saved_bytes
from .runtime import CompiledFunction, compiled_function
from .sym_check import check_other_sizes
from .variants import BackwardVariants


def _in_place(joint, graph, compiler):
    """joint with the mutations graph (a forward of it) now writes in place."""
    first = joint.num_forward_outputs - len(joint.mutations)
    bumps = writes_in_place(compiler) is True      # ("kernels": no version counter)
    return dataclasses.replace(
        joint, mutations=write_in_place(graph, joint.mutations, first, bumps))


def _graph_fn(graph, name):
    return fx.GraphModule({}, graph, class_name=name).forward


def eager_compiler(graph, name):
    """Runs a prim graph with eager ops."""
    return _graph_fn(graph, name)


eager_compiler.writes_in_place = True     # inplace_writes.py


def aot_compile(gm, example_inputs, fw_compiler=eager_compiler, bw_compiler=eager_compiler,
                name="graph", record=None):
    """Compiles a captured GraphModule (called with example_inputs) into a callable
    returning a tuple of outputs, differentiable through one autograd node. Writes into
    the inputs come back as extra forward outputs that the runtime writes into the
    inputs after each call (mutation.py); a call whose inputs share memory with an input
    written into runs gm eagerly instead (counted). record, a dict, gets the joint
    graph's facts the result is made from (compiler/graph_cache.py stores them)."""
    symbolic = symbolic_inputs(gm)
    if symbolic is not None:
        return _symbolic_compile(gm, example_inputs, symbolic, fw_compiler, bw_compiler,
                                 name, record)
    return _compile(gm, example_inputs, None, fw_compiler, bw_compiler, name, record)


def _compile(gm, example_inputs, symbolic, fw_compiler, bw_compiler, name, record):
    def run(*args):
        if symbolic is not None:
            return _SymbolicRun(gm).run(*args)
        return gm(*args)

    # a graph entered with grad off whose region turns it on (grad_mode.py)
    grad_inside = not _C.is_grad_enabled() and turns_grad_on(gm)
    joint = trace_joint(run, example_inputs, grad_inside=grad_inside, symbolic=symbolic)
    if record is not None:
        record["joint"] = joint
    fallback = _aliased_inputs_fallback(gm, name) if joint.mutations else None
    if joint.num_tangents == 0:
        # nothing needs a gradient: the forward alone (its ops record no autograd
        # history, as no input requires grad or grad mode is off)
        graph = decompose(joint.graph)
        if symbolic is not None:
            check_other_sizes(graph, _env_of(symbolic))
        _strip_grads(graph, joint.num_forward_outputs)
        if writes_in_place(fw_compiler):
            joint = _in_place(joint, graph, fw_compiler)
        log_mutations(joint, name)
        fw = fw_compiler(graph, f"{name}_inference")
        if joint.mutations or joint.output_aliases:
            return compiled_function(joint, fw, None, name, fallback=fallback)
        if record is not None:
            record["without_grad"] = any(getattr(x, "requires_grad", False)
                                         for x in example_inputs)
        if any(getattr(x, "requires_grad", False) for x in example_inputs):
            # inputs require grad but no output is differentiable (scatter with a
            # reduce): the eager prims must record no history either
            return _without_grad(fw)
        return fw
    prim_values = {}
    prim_joint = dataclasses.replace(joint, graph=decompose(joint.graph, prim_values))
    if symbolic is not None:
        # no size of the graph is a constant read at the captured sizes
        check_other_sizes(prim_joint.graph, _env_of(symbolic))
    # a call whose outputs get only some gradients runs a backward traced for those
    # (variants.py), whose formulas read forward values the full backward's prims may
    # not: every forward value an op-level formula reads is saved too
    also = _formula_reads(joint, prim_values) if joint.num_tangents > 1 else ()
    if also and symbolic is not None:
        # the sizes too: a variant's formulas may read one the full backward does not
        also = list(also) + _size_inputs(prim_joint.graph)
    fw, bw, saved = partition(prim_joint, also_save=also, min_cut=_min_cut())
    if record is not None:
        record["num_saved"] = len(saved)
    log_graphs(fw, bw, saved, name)
    counters["aot_saved_bytes"][name] += sum(r[3] for r in saved_bytes(saved))
    if writes_in_place(fw_compiler):
        prim_joint = _in_place(prim_joint, fw, fw_compiler)
    log_mutations(prim_joint, name)
    # calls whose outputs get only some gradients run the backward of those alone
    variants = BackwardVariants(joint, prim_values, saved, bw_compiler, name) \
        if joint.num_tangents > 1 else None
    compiled = compiled_function(prim_joint, fw_compiler(fw, f"{name}_forward"),
                                 bw_compiler(bw, f"{name}_backward"), name, variants,
                                 fallback=fallback)
    return with_grad_on(compiled) if grad_inside else compiled


class SymbolicAOTUnsupported(RuntimeError):
    """A graph with size inputs that AOT autograd cannot trace symbolically: the caller
    compiles it once per size instead (capture/sym_sizes.specializing)."""


def symbolic_inputs(gm):
    """Per placeholder of a captured graph with size inputs (capture/sym_sizes.py), what
    the joint trace takes for it: the SymFake of a tensor with symbolic sizes, the
    SymInt of a size input, None for the others; None for a graph without sizes."""
    from ..capture.sym_sizes import has_symbols
    from ..fx.shape_env import SymInt
    from ..fx.sym_fake import SymFake
    if not hasattr(gm, "graph") or not has_symbols(gm):
        return None
    out = []
    for n in gm.graph.nodes:
        if n.op != "placeholder":
            continue
        v = n.meta.get("example_value")
        out.append(v if isinstance(v, (SymFake, SymInt)) else None)
    return out


class _SymbolicRun(fx.Interpreter):
    """Runs a captured graph for the joint trace with min and max of sizes as
    expressions (shape_env.sym_min/sym_max), as the capture computed them: Python's
    would compare the operands, a guard."""

    def call_function(self, target, args, kwargs):
        if target is min or target is max:
            from ..fx.shape_env import SymInt, sym_max, sym_min
            if len(args) == 2 and not kwargs and any(isinstance(a, SymInt) for a in args):
                return (sym_min if target is min else sym_max)(*args)
        return target(*args, **kwargs)


def _env_of(symbolic):
    """The ShapeEnv of a capture's symbolic inputs."""
    for v in symbolic:
        if hasattr(v, "env"):
            return v.env
        for d in getattr(v, "_sym_shape", ()):
            if hasattr(d, "env"):
                return d.env
    raise ValueError("no symbolic input")


def _symbolic_compile(gm, example_inputs, symbolic, fw_compiler, bw_compiler, name,
                      record):
    """AOT autograd over symbolic sizes: one forward and one backward serving every
    size the capture's guards admit. The backward formulas and decompositions read
    sizes through the SymFakes, so they compute with the symbols; a branch they take
    on a size is a guard of the capture's ShapeEnv (built into the frame's guards after
    the backend ran), counted in counters["aot_dynamic_guards"]. What cannot be traced
    symbolically raises SymbolicAOTUnsupported."""
    env = _env_of(symbolic)
    known = len(env.guards), len(env.replacements)
    try:
        compiled = _compile(gm, example_inputs, symbolic, fw_compiler, bw_compiler, name,
                            record)
    except Exception as e:   # noqa: BLE001 - any failure: compiled per size instead
        # the per-size compilations need none of the guards this trace took
        del env.guards[known[0]:]
        for s in list(env.replacements)[known[1]:]:
            del env.replacements[s]
        raise SymbolicAOTUnsupported(f"{type(e).__name__}: {e}") from e
    for g in env.guards[known[0]:]:
        counters["aot_dynamic_guards"][f"{name}: {g}"] += 1
    for s, rep in list(env.replacements.items())[known[1]:]:
        counters["aot_dynamic_guards"][f"{name}: {s} == {rep}"] += 1
    return compiled


def backward_variants(gm, example_inputs, bw_compiler, name="graph"):
    """(the BackwardVariants aot_compile makes for gm, how many values its forward
    saves), traced again: for a compiled function whose graphs came from the graph
    cache (compiler/graph_cache.py), the first time a call's outputs get only some
    gradients (grad mode is on while it traces, as when gm was captured)."""
    def run(*args):
        return gm(*args)

    prev = _C._set_grad_enabled(True)
    try:
        joint = trace_joint(run, example_inputs)
    finally:
        _C._set_grad_enabled(prev)
    prim_values = {}
    prim_joint = dataclasses.replace(joint, graph=decompose(joint.graph, prim_values))
    also = _formula_reads(joint, prim_values)
    _, _, saved = partition(prim_joint, also_save=also, min_cut=_min_cut())
    return BackwardVariants(joint, prim_values, saved, bw_compiler, name), len(saved)


def _min_cut():
    from ..capture.config import config
    if config.partitioner not in ("min_cut", "save_all"):
        raise ValueError(f"ember.compiler.config.partitioner: expected 'min_cut' or "
                         f"'save_all', got {config.partitioner!r}")
    return config.partitioner == "min_cut"


def _aliased_inputs_fallback(gm, name):
    """Runs the captured graph eagerly: for calls in which an input the graph writes
    into shares memory with another input (the compiled graph treats them as
    separate), counted in counters["aliased_inputs"]."""
    from .eager import restoring_inputs, written_inputs
    forward = gm.forward if hasattr(gm, "forward") else gm
    if hasattr(gm, "graph"):     # in place: a call that raises leaves the inputs as they were
        forward = restoring_inputs(forward, written_inputs(gm))

    def run_eagerly(*args):
        counters["aliased_inputs"][f"{name}: an input written into shares memory with "
                                   "another input; the graph ran eagerly"] += 1
        out = forward(*args)
        return tuple(out) if isinstance(out, (tuple, list)) else (out,)
    return run_eagerly


def _formula_reads(joint, prim_values):
    """Prim nodes of the forward values the joint graph's backward part reads: values
    the forward's trace recorded (those no forward output needs included: the indices
    of a max whose values alone are returned), read by nodes the backward's trace
    recorded (tangent-free chains a formula computes included)."""
    forward = joint.forward_nodes
    reads = []
    for n in joint.graph.nodes:
        if n.op != "call_function" or n in forward:
            continue
        for a in n.all_input_nodes:
            fake = prim_values.get(a) if a in forward else None
            node = getattr(fake, "_trace", None) if isinstance(fake, _C.Tensor) else None
            if node is not None:
                reads.append(node)
    return reads


def _size_inputs(graph):
    from ..fx.shape_env import SymInt
    return [n for n in graph.nodes
            if n.op == "placeholder" and isinstance(n.meta.get("val"), SymInt)]


def _without_grad(fn):
    def run(*args):
        prev = _C._set_grad_enabled(False)
        try:
            return fn(*args)
        finally:
            _C._set_grad_enabled(prev)
    return run


def _strip_grads(graph, n):
    out = next(n_ for n_ in graph.nodes if n_.op == "output")
    out.args = (tuple(out.args[0][:n]),)
    graph.eliminate_dead_code()
    graph.lint()


@register_backend("aot_eager")
def aot_eager(gm, example_inputs):
    code = getattr(gm, "meta", {}).get("code")
    return aot_compile(gm, example_inputs, name=code.co_name if code else "graph")


__all__ = ["aot_compile", "SymbolicAOTUnsupported", "symbolic_inputs", "aot_eager",
           "trace_joint", "decompose", "verify_prims",
           "partition", "saved_bytes", "PrimVerificationError", "CompiledFunction"]
