"""The plan of a compiled graph: what csrc/runtime/compiled_graph.c runs per call.

Every part is a small named record, and a tuple: the runtime decodes the plan once,
when the graph is built, from the records' fields in order; Python reads them by name
and prints them with their __str__ (the loop IR text, profiles).

    Plan = (inputs, buffers, steps, outputs)
    inputs:  InputSpec(sizes, strides) per graph input
    buffers: BufferSpec(dtype, sizes, extern) per buffer
    steps:   KernelStep, MatmulStep (with its epilogues: kernel steps run on each
             block of the product's rows right after BLAS computes it, epilogue.py),
             ExternStep (kind "extern", or "seed": the seed of the kernels' random
             draws for this call, compiler/random_draws.py)
    outputs: View, or None for an output with no value (a gradient that is None), or
             in a symbolic graph a size (an int; symbolic.SymOutput in the plan tuple)

Lowered prints as the steps' text and verify() checks it.
"""
from __future__ import annotations

import enum
from typing import Callable, NamedTuple

from ..ops import meta as M
from .loop_ir import Affine, Form, Kernel, Op


class PlanError(RuntimeError):
    pass


class StepKind(enum.StrEnum):
    KERNEL = "kernel"
    MATMUL = "matmul"
    EXTERN = "extern"
    SEED = "seed"           # an ExternStep making the seed of the graph's random draws


class Ref(NamedTuple):
    """A graph input ("in", i) or a buffer ("buf", j)."""
    kind: str
    index: int

    def __str__(self):
        return f"{self.kind}{self.index}"


class View(NamedTuple):
    """A strided view of a ref, in elements of its dtype."""
    ref: Ref
    sizes: tuple
    strides: tuple
    offset: int = 0

    def layout(self):
        """'' for a contiguous view from element 0, else its strides and offset (a
        symbolic view's compared as expressions: printing decides nothing by size)."""
        from .symbolic import SymbolicLoweringUnsupported, is_symbolic, same_sizes
        try:
            plain = not is_symbolic(self.offset) and self.offset == 0 and same_sizes(
                self.strides, M.contiguous_strides(tuple(self.sizes)))
        except SymbolicLoweringUnsupported:
            plain = False
        if not plain:
            return f"(strides {list(self.strides)}, offset {self.offset})"
        return ""

    def __str__(self):
        return f"{self.ref}{list(self.sizes)}{self.layout()}"


class InputSpec(NamedTuple):
    """The layout a graph input is compiled for (an input laid out otherwise is copied
    into it when dense). written: a kernel writes into it (lowering.write_into_input;
    the runtime copies such a copy back into the input after the call)."""
    sizes: tuple
    strides: tuple
    written: bool = False


class BufferSpec(NamedTuple):
    """A buffer: allocated per call (contiguous), or made by an extern step."""
    dtype: object
    sizes: tuple
    extern: bool = False


class KernelStep(NamedTuple):
    """Runs kernel number `kernel` (its loop IR: `ir`) on pointers to refs over
    [0, outer) of its dim 0 in chunks of `chunk` indices (0: one chunk), spread over the
    thread pool when parallel. The runtime runs signal handlers between chunks (Ctrl-C
    stops a long kernel), and the chunks' bounds do not depend on the thread count."""
    kind: str
    kernel: int
    refs: tuple
    outer: int
    parallel: bool
    ir: Kernel
    chunk: int = 0
    # a symbolic kernel ([dynamic], symbolic.py): chunk -1, the size expressions its
    # kernel takes (indices into the plan's table) and its domain's points; the runtime
    # decides its threads and chunks on each call (parallel: whether it may)
    syms: tuple = ()
    points: object = 0

    def __str__(self):
        return str(self.ir).rstrip()


class MatmulStep(NamedTuple):
    """buf[out] = a @ b, by BLAS (or numpy.matmul), then its epilogues: kernel steps
    each of whose outer indices reads the product in one band of rows only
    (block_rows), run on every panel of rows right after BLAS has made it, while it is
    in cache (the runtime cuts such a product in panels of rows, multiples of every
    epilogue's band), or over their whole outer dim after the product where it does
    not (numpy.matmul, a layout BLAS cannot read, too few panels for the threads)."""
    kind: str
    a: View
    b: View
    out: int
    epilogues: tuple = ()

    def __str__(self):
        head = (f"blas matmul {list(self.a.sizes)} @ {list(self.b.sizes)}: "
                f"{self.a.ref}{self.a.layout()} @ {self.b.ref}{self.b.layout()} "
                f"-> buf{self.out}")
        if not self.epilogues:
            return head
        body = "\n".join("  " + line for e in self.epilogues for line in str(e).splitlines())
        return f"{head}, then on each block of rows:\n{body}"


def _writes(kernel):
    """{ref: [(op, index), ...]} of what kernel stores or folds."""
    out = {}
    for s in kernel.stmts:
        if s.op.form in (Form.STORE, Form.FOLD, Form.SCATTER):
            out.setdefault(tuple(kernel.params[s.param].ref), []).append((s.op, s.index))
    return out


def block_rows(kernel: Kernel, ref, n: int, rows: int, earlier=()):
    """R when kernel can be an epilogue of a product `ref`, row-major (rows, n), run
    after the epilogues `earlier` (kernels) on each block of rows BLAS makes: its outer
    index i reads the product only in rows [i * R, (i + 1) * R), and reads what an
    earlier epilogue writes only where that epilogue's outer index i wrote it (the
    same domain, and the index it stored or reduced into); it writes neither, runs its
    outer indices independently (it splits its dim 0 and accumulates nothing along
    it), and its outer dim covers all the rows (sizes[0] * R == rows). Else None."""
    sizes = tuple(kernel.sizes)
    if not sizes or kernel.nreduce >= len(sizes) or n <= 0 or rows <= 0:
        return None
    if any(s.op is Op.ACCUMULATE and s.index.coeffs[0] == 0 for s in kernel.stmts):
        return None
    if any(s.op in (Op.GATHER, Op.BOUND) for s in kernel.stmts):
        return None         # (rows read at values, and an error record it has no slot for)
    made = {}               # ref -> indices an earlier epilogue of this domain wrote
    for e in earlier:
        for r, ws in _writes(e).items():
            made.setdefault(r, set()).update(
                i for op, i in ws if op is not Op.ACCUMULATE and tuple(e.sizes) == sizes)
    ref = tuple(ref)
    if ref in _writes(kernel) or made.keys() & _writes(kernel).keys():
        return None
    band = None
    for s in kernel.stmts:
        if s.op.form is not Form.LOAD:
            continue
        src = tuple(kernel.params[s.param].ref)
        if src in made:
            if s.index not in made[src] or rows % sizes[0]:
                return None
            r = rows // sizes[0]
        elif src == ref:
            c0 = s.index.coeffs[0]
            if c0 <= 0 or c0 % n:
                return None
            r = c0 // n
            lo, hi = Affine(tuple(s.index.coeffs[1:]), s.index.offset).bounds(sizes[1:])
            if lo < 0 or hi >= r * n:
                return None
        else:
            continue
        if band not in (None, r):
            return None
        band = r
    if band is None or sizes[0] * band != rows:
        return None
    return band


def product_rows(lowered, step):
    """(n, rows) of a matmul step's product seen as a row-major (rows, n) matrix."""
    sizes = tuple(lowered.buffers[step.out].sizes)
    n = sizes[-1] if sizes else 1
    rows = 1
    for s in sizes[:-1]:
        rows *= s
    return n, rows


class ExternStep(NamedTuple):
    """fn(*tensors of views) -> a tuple of tensors, stored (made contiguous) in the
    buffers slots: a prim's eager kernel run inside the graph."""
    kind: str
    fn: Callable
    views: tuple
    slots: tuple
    name: str

    def __str__(self):
        ins = ", ".join(str(v) for v in self.views)
        outs = ", ".join(f"buf{j}" for j in self.slots)
        return f"{self.kind} {self.name}({ins}) -> {outs}"


class Lowered:
    """A lowered graph: its kernels (loop IR) and the plan that runs them."""

    def __init__(self):
        self.kernels = []           # Kernel, in the order of their steps
        self.inputs = []            # InputSpec per graph input
        self.buffers = []           # BufferSpec per buffer
        self.steps = []             # KernelStep / MatmulStep / ExternStep
        self.outputs = []           # View, or None

    def plan(self):
        return (tuple(self.inputs), tuple(self.buffers), tuple(self.steps),
                tuple(self.outputs))

    def __str__(self):
        outs = ", ".join("None" if o is None else str(o) for o in self.outputs)
        return "\n".join([str(s) for s in self.steps] + [f"return ({outs})"])


def verify(lowered: Lowered):
    """Raises PlanError unless the plan is well formed: every ref names an input or a
    buffer, kernel steps (a matmul's epilogues included, where they run) run their
    kernels in order on those kernels' buffers, an epilogue reads its product only in
    the rows of its outer index (block_rows), and each buffer an extern step makes is
    made once, before any step reads it."""
    made = {j for j, b in enumerate(lowered.buffers) if not b.extern}

    def read(ref, step):
        kind, i = ref
        n = len(lowered.inputs) if kind == "in" else len(lowered.buffers)
        if kind not in ("in", "buf") or not 0 <= i < n:
            raise PlanError(f"`{step}` reads {kind}{i}, which does not exist")
        if kind == "buf" and i not in made:
            raise PlanError(f"`{step}` reads buf{i} before an extern step makes it")

    kernels = 0

    def kernel_step(step):
        nonlocal kernels
        if step.kernel != kernels or lowered.kernels[step.kernel] is not step.ir or \
                step.refs != tuple(p.ref for p in step.ir.params):
            raise PlanError(f"kernel step {step.kernel} is not its kernel's")
        kernels += 1
        for ref in step.refs:
            read(ref, step.ir.name)

    for step in lowered.steps:
        if isinstance(step, KernelStep):
            kernel_step(step)
        elif isinstance(step, MatmulStep):
            read(step.a.ref, step)
            read(step.b.ref, step)
            if step.out not in made:
                raise PlanError(f"`{step}` writes into a buffer an extern step makes")
            n, rows = product_rows(lowered, step)
            for k, e in enumerate(step.epilogues):
                if not isinstance(e, KernelStep):
                    raise PlanError(f"an epilogue of `{step}` is not a kernel step")
                kernel_step(e)
                earlier = [x.ir for x in step.epilogues[:k]]
                if block_rows(e.ir, Ref("buf", step.out), n, rows, earlier) is None:
                    raise PlanError(f"epilogue {e.ir.name} reads buf{step.out} or an "
                                    "earlier epilogue's result outside the rows of "
                                    "its outer index")
        elif isinstance(step, ExternStep):
            for v in step.views:
                read(v.ref, step)
            for j in step.slots:
                if j in made or not lowered.buffers[j].extern:
                    raise PlanError(f"`{step}` makes buf{j} again or in place")
                made.add(j)
        else:
            raise PlanError(f"unknown step {step!r}")
    if kernels != len(lowered.kernels):
        raise PlanError(f"{len(lowered.kernels) - kernels} kernels are never run")
    for o in lowered.outputs:
        if isinstance(o, View):     # (else None, or a size of a symbolic graph)
            read(o.ref, "return")
    return lowered
