"""Plans are records (python/ember/compiler/plan.py): each step prints itself, the same
text in the lowered graph and in profiles, and csrc/runtime/compiled_graph.c decodes a
plan once, when the graph is built, refusing a malformed one there."""
import pytest

import ember
from ember import _C
from ember.aot import decompose, trace_joint
from ember.compiler.backend import CompiledLLVMGraph
from ember.compiler.plan import (BufferSpec, ExternStep, InputSpec, KernelStep, MatmulStep,
                                 Ref, StepKind, View)


def _graph(fn, *args):
    return CompiledLLVMGraph(decompose(trace_joint(fn, list(args)).graph), "plan")


def _mixed(t):
    i = (t * 2).argmax(-1)
    return (t.t() @ t).relu().sum(0) + i.float()


def test_steps_are_named_records_and_plain_tuples():
    x = ember.randn(16, 16)
    g = _graph(_mixed, x)
    kinds = {type(s) for s in g.lowered.steps}
    assert kinds == {KernelStep, MatmulStep, ExternStep}
    for s in g.lowered.steps:
        assert isinstance(s, tuple) and s[0] == s.kind and s.kind in tuple(StepKind)
        if isinstance(s, KernelStep):
            assert g.lowered.kernels[s.kernel] is s.ir
            assert s.refs == tuple(p.ref for p in s.ir.params)
        if isinstance(s, MatmulStep):
            assert isinstance(s.a, View) and isinstance(s.a.ref, Ref)
            assert g.lowered.buffers[s.out].dtype is ember.float32
    assert g.run.plan == g.lowered.plan()
    assert all(isinstance(i, InputSpec) for i in g.run.plan[0])
    assert all(isinstance(b, BufferSpec) for b in g.run.plan[1])


def test_one_text_per_step_in_the_listing_and_the_profile():
    x = ember.randn(16, 16)
    g = _graph(_mixed, x)
    text = str(g.lowered)
    for s in g.lowered.steps:
        assert str(s) in text
    assert text.endswith("return (" + ", ".join(str(o) for o in g.lowered.outputs) + ")")
    g.start_profile()
    g(x)
    report = g.profile_report()
    for s in g.lowered.steps:
        assert str(s).splitlines()[0] in report
    m = next(s for s in g.lowered.steps if isinstance(s, MatmulStep))
    assert str(m).startswith("blas matmul [16, 16] @ [16, 16]: in0(strides [1, 16]")
    e = next(s for s in g.lowered.steps if isinstance(s, ExternStep))
    assert str(e) == f"extern argmax({e.views[0]}) -> buf{e.slots[0]}"
    k = next(s for s in g.lowered.steps if isinstance(s, KernelStep))
    assert str(k) == str(k.ir).rstrip()


def test_a_malformed_plan_is_refused_when_the_graph_is_built():
    x = ember.randn(8, 8)
    # (a sum of all of the product is not an epilogue: a kernel step of its own)
    g = _graph(lambda t: (t @ t).exp().sum(), x)
    inputs, buffers, steps, outputs = g.lowered.plan()
    addresses = g.module.addresses

    def build(*plan):
        return _C.CompiledGraph(g.module, addresses, plan)

    build(inputs, buffers, steps, outputs)(x)                 # the plan as made
    mm = next(i for i, s in enumerate(steps) if isinstance(s, MatmulStep))
    kernel = next(i for i, s in enumerate(steps) if isinstance(s, KernelStep))

    def with_step(i, step):
        return steps[:i] + (step,) + steps[i + 1:]

    bad = [
        # a buffer that does not exist, as a matmul's output and as a kernel's operand
        with_step(mm, steps[mm]._replace(out=len(buffers))),
        with_step(kernel, steps[kernel]._replace(refs=(Ref("buf", 99),))),
        # a kernel the module does not have
        with_step(kernel, steps[kernel]._replace(kernel=len(addresses))),
        # an input that does not exist
        with_step(mm, steps[mm]._replace(a=steps[mm].a._replace(ref=Ref("in", 3)))),
        # a ref of no kind, a step of no kind
        with_step(mm, steps[mm]._replace(a=steps[mm].a._replace(ref=("out", 0)))),
        with_step(kernel, ("copy",) + tuple(steps[kernel][1:])),
    ]
    for s in bad:
        with pytest.raises(ValueError, match="bad plan"):
            build(inputs, buffers, s, outputs)
    with pytest.raises(TypeError):
        build(inputs, (BufferSpec("float32", (8, 8)),) + buffers[1:], steps, outputs)
    with pytest.raises(ValueError, match="bad plan: a shape"):
        build((InputSpec((8,) * 65, (1,) * 65),), buffers, steps, outputs)



def test_the_plan_verifier():
    """plan.verify (run on every lowered graph) refuses refs to nothing, reads of an
    extern's buffer before the extern runs, and kernel steps that are not their
    kernels'."""
    import copy
    from ember.compiler.plan import PlanError, verify
    x = ember.randn(8, 8)
    g = _graph(_mixed, x)
    verify(g.lowered)
    ext = next(i for i, s in enumerate(g.lowered.steps) if isinstance(s, ExternStep))
    kernel = next(i for i, s in enumerate(g.lowered.steps) if isinstance(s, KernelStep))

    def broken(change):
        lowered = copy.copy(g.lowered)
        lowered.steps = list(g.lowered.steps)
        lowered.outputs = list(g.lowered.outputs)
        change(lowered)
        return lowered

    def move_extern_last(lw):
        lw.steps.append(lw.steps.pop(ext))

    def output_nothing(lw):
        lw.outputs[0] = lw.outputs[0]._replace(ref=Ref("buf", 99))

    def other_refs(lw):
        s = lw.steps[kernel]
        lw.steps[kernel] = s._replace(refs=s.refs[::-1] + (Ref("in", 0),))

    def drop_kernel(lw):
        del lw.steps[kernel]

    for change, message in ((move_extern_last, "before an extern step makes it"),
                            (output_nothing, "does not exist"),
                            (other_refs, "not its kernel's"),
                            (drop_kernel, "not its kernel's|never run")):
        with pytest.raises(PlanError, match=message):
            verify(broken(change))
