"""GEMM epilogues: the kernels consuming a matrix product run on each panel of its rows
right after BLAS has computed that panel, while it is in cache.

A plan made by lowering computes a product (a MatmulStep into buf `out`) and, some
steps later, the kernels reading it: a Linear's bias and activation, a residual add, a
scaling, a cast, the split of a fused QKV projection into heads, a residual add with
the statistics of the layer norm after it, an activation's backward applied to a
product of the backward. fuse() moves each kernel step that reads the product only in
one band of rows per outer index (plan.block_rows: R rows of the product per index of
its dim 0, which it runs independently) into the product's step as an epilogue,
when nothing between the two steps makes what it reads or reads or writes what it
writes, and it writes nothing the product reads. The runtime (csrc/runtime/blas.c)
cuts such a product into its grid of blocks with rows in multiples of every epilogue's
band, and the thread finishing a panel of rows runs each epilogue on that panel's outer
indices right away, while it is in cache; a product it cannot run that way
(numpy.matmul's, a batch of matrices whose rows the bands cross, too few panels for
the threads) runs its epilogues after the whole product, as the separate steps they
were.

The product itself is still written whole (a graph output, or read by another kernel
that is not an epilogue, sees all of it); the epilogues' own results are written once.
stats counts the kernels fused and the reasons others were not.
"""
from __future__ import annotations

import collections
import dataclasses

from . import fusion
from .loop_ir import Affine, Form, Kernel, Op, verify
from .plan import ExternStep, KernelStep, MatmulStep, Ref, block_rows, product_rows

stats = collections.Counter()
# False: no epilogues (graphs compiled meanwhile run each consumer as a step of its own;
# for measuring what they buy, benchmarks/epilogue_cpu.py)
enabled = True


def reads_writes(step):
    """(refs a step reads, refs it writes), as sets of Ref."""
    if isinstance(step, KernelStep):
        if step.ir is None:
            refs = {Ref(*r) for r in step.refs}
            return refs, refs
        reads, writes = set(), set()
        for s in step.ir.stmts:
            if s.op.form in (Form.LOAD, Form.GATHER):
                reads.add(Ref(*step.ir.params[s.param].ref))
            elif s.op.form in (Form.STORE, Form.FOLD, Form.SCATTER):
                writes.add(Ref(*step.ir.params[s.param].ref))
        return reads, writes
    if isinstance(step, MatmulStep):
        reads, writes = {Ref(*step.a.ref), Ref(*step.b.ref)}, {Ref("buf", step.out)}
        for e in step.epilogues:
            r, w = reads_writes(e)
            reads |= r
            writes |= w
        return reads, writes
    if isinstance(step, ExternStep):
        return {Ref(*v.ref) for v in step.views}, {Ref("buf", j) for j in step.slots}
    refs = set()
    return refs, refs


def collapsed(kernel):
    """kernel with its outer dims merged (0 with 1, while it keeps two dims or more and
    every index and iota allows), so that its outer index spans as few rows of a
    product as it can: a (B, T, n) consumer of a (B*T, n) product becomes (B*T, n), one
    row per outer index, and a (B, H, m, n) consumer of a batched product (B*H, m, n)
    runs by blocks of one matrix's rows. kernel itself when nothing merges."""
    k = kernel
    while len(k.sizes) - k.nreduce >= 2 and len(k.sizes) >= 3:
        inner = k.sizes[1]
        if any(s.op is Op.IOTA and s.value in (0, 1) for s in k.stmts) or any(
                s.index is not None and s.index.coeffs[0] != s.index.coeffs[1] * inner
                for s in k.stmts):
            break
        stmts = []
        for s in k.stmts:
            if s.index is not None:
                s = dataclasses.replace(s, index=Affine(s.index.coeffs[1:], s.index.offset))
            elif s.op is Op.IOTA:
                s = dataclasses.replace(s, value=s.value - 1)
            stmts.append(s)
        k = Kernel(k.name, (k.sizes[0] * inner,) + tuple(k.sizes[2:]), k.nreduce,
                   list(k.params), stmts)
    return k if k is kernel else verify(k)


def _as_epilogue(step):
    """The kernel step with its kernel collapsed (and scheduled again)."""
    ir = collapsed(step.ir)
    if ir is step.ir:
        return step
    outer, parallel, chunk = fusion.schedule(ir)
    return step._replace(ir=ir, outer=outer, parallel=parallel, chunk=chunk)


def _why_not(step, product, n, rows, operands, epilogues, between):
    """None when kernel step `step` can be an epilogue of the product after
    `epilogues`, else the reason."""
    if step.ir is None:
        return "no loop IR"
    if block_rows(step.ir, product, n, rows, [e.ir for e in epilogues]) is None:
        return "reads the product or an epilogue's result across rows"
    reads, writes = reads_writes(step)
    if writes & operands:
        return "writes an operand of the product"
    for r, w in between:
        if w & (reads | writes) or r & writes:
            return "depends on a step between"
    return None


def _with_epilogues(lowered, steps, i, moved):
    mm = steps[i]
    product = Ref("buf", mm.out)
    n, rows = product_rows(lowered, mm)
    if n <= 0 or rows <= 0:
        return mm
    operands = {Ref(*mm.a.ref), Ref(*mm.b.ref)}
    epilogues, fused_writes, between = [], set(), []
    for j in range(i + 1, len(steps)):
        if j in moved:          # an earlier product's epilogue: it runs before
            continue
        step = steps[j]
        reads, writes = reads_writes(step)
        if product in writes:
            break
        if isinstance(step, KernelStep) and (product in reads or reads & fused_writes):
            why = "no loop IR"
            if step.ir is not None:
                step = _as_epilogue(step)
                why = _why_not(step, product, n, rows, operands, epilogues, between)
            if why is None:
                epilogues.append(step)
                moved.add(j)
                fused_writes |= writes
                stats["fused"] += 1
                continue
            stats[why] += 1
        between.append((reads, writes))
    return mm._replace(epilogues=tuple(epilogues)) if epilogues else mm


def fuse(lowered):
    """Moves the kernels that can be epilogues into their products' steps, then numbers
    the kernels in the order they run. Returns lowered."""
    if not enabled:
        return lowered
    steps = list(lowered.steps)
    moved = set()
    out = []
    for i, step in enumerate(steps):
        if i in moved:
            continue
        if isinstance(step, MatmulStep):
            step = _with_epilogues(lowered, steps, i, moved)
        out.append(step)
    kernels = []

    def number(step):
        if isinstance(step, KernelStep):
            kernels.append(step.ir)
            return step._replace(kernel=len(kernels) - 1)
        if isinstance(step, MatmulStep) and step.epilogues:
            return step._replace(epilogues=tuple(number(e) for e in step.epilogues))
        return step

    lowered.steps = [number(s) for s in out]
    lowered.kernels = kernels
    return lowered
