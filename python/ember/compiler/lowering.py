"""Lowering a prim graph to kernels and a plan: which loops run, which BLAS calls, which
buffers live, in what order.

The graph is walked in order. Each node's value (values.py) comes from its op's
lowering, the op table entry's `lower` (lowerings.py: pointwise, reduction, extern,
or a function), called as lower(ctx, node, val, *args, **kwargs) with this GraphLowering
as ctx, the node's meta value as val and graph values in place of nodes. An op without
one runs its eager kernel as an extern step. Fusion (fusion.py) decides which values
are stored on the way; buffers.py plans the memory; the result is a plan.Lowered.
"""
from __future__ import annotations

import operator

from .. import _C
from .. import fx
from ..ops import meta as M
from . import epilogue, fusion, plan, rows, symbolic
from .buffers import BufferPlan
from .conv_fold import fold_conv_affine
from .fusion import KernelBuilder
from .loop_ir import Affine, verify
from .lowerings import extern
from .plan import ExternStep, KernelStep, Lowered, StepKind
from .values import (BufferValue, LoweringError, PointwiseValue, broadcast_index,
                     check_dtype, dense, depth_of, domain_index, is_value, op_math,
                     reads)

__all__ = ["GraphLowering", "LoweringError", "lower"]


class GraphLowering:
    """The lowering of one graph, and the building blocks op lowerings use."""

    def __init__(self, graph, name, sizes=None):
        self.graph = graph
        self.name = name
        # a symbolic graph ([dynamic]): its symbols (symbolic.Sizes); sizes are SizeInts
        self.sizes = sizes
        self.size_inputs = []
        self._sized = {}
        self.out = Lowered()
        self.buffers = BufferPlan(self.out)
        self.env = {}
        self.seeds = {}         # random_draws.seed_buffer: generator -> its seed buffer
        self.draws = 0          # the random draws lowered so far (the next one's offset)

    # -------------------------------------------------- building blocks

    def new_buffer(self, dtype, shape, extern=False, strides=None):
        return self.buffers.new_buffer(dtype, shape, extern, strides)

    def kernel(self, sizes, nreduce, tag):
        name = f"{self.name}_{tag}{len(self.out.kernels)}"
        return KernelBuilder(self.buffers, name, sizes, nreduce)

    def add_kernel(self, kb):
        k = verify(kb.kernel)
        outer, parallel, chunk = fusion.schedule(k)
        self.out.steps.append(KernelStep(StepKind.KERNEL, len(self.out.kernels),
                                         tuple(p.ref for p in k.params), outer, parallel, k,
                                         chunk))
        self.out.kernels.append(k)

    def add_step(self, step):
        self.out.steps.append(step)

    def realize(self, value) -> BufferValue:
        """The value as a buffer: computed by a kernel of its own unless it is one."""
        if isinstance(value, BufferValue):
            return value
        if value.realized is not None:
            return value.realized
        if value.view_base is not None:
            base, strides_fn = value.view_base
            b = self.realize(base)
            value.realized = b.restrided(*strides_fn(b))
            return value.realized
        kb = self.kernel(value.shape, 0, "pointwise")
        index = domain_index(len(value.shape))
        value.must_realize = True
        kb.maybe_store(value, index, value.fn(kb, index))
        if value.realized is None:
            raise LoweringError("could not store a pointwise value")
        self.add_kernel(kb)
        return value.realized

    def computation_dtype(self, node, val):
        """The dtype node's op computes in, from the graph's dtype facts (the meta values
        of its operands and result): meta.computation_dtype, the dtype eager's
        TensorIterator converts every operand to, float32 for float16 and bfloat16
        (values.op_math: eager computes them in float32 too, rounding each op's result,
        where a kernel rounds a value once, where it stores it, as TorchInductor does)."""
        return op_math(M.computation_dtype(node.target.entry, _meta_args(node), val))

    def pointwise(self, node, val, operands, body, cost=1, dtypes=None):
        """A pointwise value: operands broadcast to val's shape and converted, each once,
        to the dtype node's op computes in (or to dtypes[i]); body(kb, regs) -> register
        (of val's dtype, or float32 for a float16/bfloat16 value, rounded where stored).
        This is the one place operands meet their computation dtype."""
        shape = tuple(val.shape)
        dtype = val.dtype
        what = node.target.entry.name
        if dtypes is None:
            dtypes = [self.computation_dtype(node, val)] * len(operands)
        for o in operands:
            if not is_value(o) and not isinstance(o, (int, float, bool)):
                raise LoweringError(f"{what}: operand {o!r}")
        total = cost + sum(o.cost for o in operands if isinstance(o, PointwiseValue))

        def fn(kb, index):
            regs = []
            for o, want in zip(operands, dtypes):
                if is_value(o):
                    r = o.load(kb, broadcast_index(index, shape, o.shape))
                    regs.append(kb.cast(r, want))
                else:
                    regs.append(kb.const(o, want))
            out = body(kb, regs)
            if kb.reg_dtype[out] not in (dtype, op_math(dtype)):
                raise LoweringError(f"{what}: computes a {kb.reg_dtype[out]} where its "
                                    f"value is {dtype}")
            return out

        return PointwiseValue(shape, dtype, fn, total, node, reads(operands, shape),
                              depth_of(operands))

    def extern(self, node, val):
        """A prim without a loop-IR lowering (a scatter, a sort, a random draw, ...) runs
        its eager kernel inside the compiled graph: its tensor arguments are realized,
        and its results become buffers the kernels after it read."""
        what = node.target.entry.qualified_name
        if val is None:
            raise LoweringError(f"{node.target.entry.name} returns nothing")
        views = []

        def slot(a):
            views.append(self.realize(self.env[a]).view())
            return _Slot(len(views) - 1)

        args, kwargs = fx.map_arg((tuple(node.args), dict(node.kwargs)), slot)
        outs = val if isinstance(val, tuple) else (val,)
        slots = []
        for v in outs:
            if not isinstance(v, _C.Tensor):
                raise LoweringError(f"{node.target.entry.name} returns a "
                                    f"{type(v).__name__}")
            check_dtype(v.dtype, node.target.entry.name)
            slots.append(self.new_buffer(v.dtype, tuple(v.shape), extern=True))
        fn = ExternCall(node.target, args, kwargs, isinstance(val, tuple))
        self.add_step(ExternStep(StepKind.EXTERN, fn, tuple(views),
                                 tuple(b.ref.index for b in slots), what))
        return tuple(slots) if isinstance(val, tuple) else slots[0]

    # -------------------------------------------------- the graph

    def val(self, node):
        """node's meta value; in a symbolic graph with SizeInts for its SymInts."""
        val = node.meta.get("val") if isinstance(node, fx.Node) else None
        if self.sizes is None:
            return val
        if node not in self._sized:
            self._sized[node] = _sized(val, self.sizes)
        return self._sized[node]

    def placeholder(self, node):
        val = self.val(node)
        if self.sizes is not None and not isinstance(val, _C.Tensor):
            if not isinstance(val, int) or isinstance(val, bool):
                raise LoweringError(f"input {node.name} is a {type(val).__name__}")
            i = len(self.out.inputs)            # a size input (an int on each call)
            self.out.inputs.append(plan.InputSpec((), ()))
            self.buffers.input_extents.append(0)
            self.size_inputs.append(i)
            self.sizes.bind(val, i, -1)
            return val
        value = self.buffers.add_input(val, f"input {node.name}")
        if self.sizes is not None:
            # (its strides are expressions too: the runtime evaluates them and copies an
            # input laid out otherwise, as for fixed sizes)
            for d, n in enumerate(value.shape):
                self.sizes.bind(n, value.ref.index, d)
        return value

    def run(self):
        users = {n: len(n.users) for n in self.graph.nodes}
        must = fusion.must_realize(self.graph)
        for node in self.graph.nodes:
            if node.op == "placeholder":
                self.env[node] = self.placeholder(node)
            elif node.op == "call_function" and self.sizes is not None and \
                    node.target in symbolic.SIZE_FUNCTIONS:
                self.env[node] = symbolic.SIZE_FUNCTIONS[node.target](
                    *[self.arg(a) for a in node.args])
            elif node.op == "call_function":
                val = self.env[node] = self.lower_node(node)
                if fusion.worth_storing(val, node, users[node], must):
                    fusion.mark_realize(val)
                if isinstance(val, PointwiseValue) and val.depth >= fusion.MAX_DEPTH:
                    # a long chain of elementwise ops: computed here, so that building
                    # the kernels of its users does not recurse through all of it
                    self.realize(val)
            elif node.op == "output":
                self.lower_output(node)
            else:
                raise LoweringError(f"node {node.format_node()}")
        merged = rows.merge(self.out)
        if self.sizes is not None:
            # (GEMM epilogues cut products into bands of rows fixed when compiled)
            return plan.verify(merged)
        return plan.verify(epilogue.fuse(merged))

    def lower_output(self, node):
        """The graph's outputs, each laid out as eager lays it out (the strides traced
        for it): users see strides (is_contiguous, view, as_strided, a graph break's
        next frame), so a compiled result keeps eager's."""
        outs = node.args[0]
        for o in outs:
            if isinstance(o, fx.Node) and isinstance(self.env[o], PointwiseValue):
                v = self.env[o]
                fusion.mark_realize(v)
                want = _eager_strides(self.val(o))
                if want is not None and v.realized is None and v.view_base is None:
                    v.layout = want
        for o in outs:
            if o is None:
                self.out.outputs.append(None)
                continue
            v = self.env[o] if isinstance(o, fx.Node) else o
            if not is_value(v):
                if self.sizes is None or not isinstance(v, int):
                    raise LoweringError(f"output {v!r}")
                self.out.outputs.append(v)          # a size (symbolic.finish)
                continue
            b = self.realize(v)
            want = _eager_strides(self.val(o), contiguous=True)
            if want is not None and b.ref[0] == "buf" and not _same_layout(b, want):
                b = self.copy_to_layout(b, want)
            self.out.outputs.append(b.view())

    def copy_to_layout(self, b, strides):
        """A kernel copying buffer value b into a new buffer laid out with strides."""
        kb = self.kernel(b.shape, 0, "layout")
        index = domain_index(len(b.shape))
        reg = b.load(kb, index)
        out = self.new_buffer(b.dtype, b.shape, strides=strides)
        kb.store(out, Affine(tuple(out.strides)), reg)
        self.add_kernel(kb)
        return out

    def write_into_input(self, node):
        """copy_(a view of an input, src) (aot/inplace_writes.py made it from a write into
        a slice of the input): one kernel storing src into the input's own memory, the
        input marked written (the runtime copies it back when it ran on a copy of it).
        Every value still to be computed from the input's old value is computed first
        (inplace_writes.py puts every read of the old value before the write; a fused
        value would otherwise load it in a kernel after this one)."""
        if len(node.args) != 2 or node.kwargs:
            raise LoweringError("copy_ with options")
        dst, src = (self.arg(a) for a in node.args)
        if not isinstance(dst, BufferValue) or dst.ref.kind != "in":
            raise LoweringError("copy_ into a value that is not a view of an input")
        placeholder = [n for n in self.graph.nodes if n.op == "placeholder"][dst.ref.index]
        seen, stack = set(), [placeholder]
        while stack:
            for u in stack.pop().users:
                if u in seen or u is node or u not in self.env:
                    continue
                seen.add(u)
                stack.append(u)
                v = self.env[u]
                if isinstance(v, PointwiseValue) and v.realized is None and (
                        u in node.args or any(w not in self.env for w in u.users)):
                    self.realize(v)
        if isinstance(src, PointwiseValue) and src.realized is not None:
            src = src.realized
        nd = len(dst.shape)
        kb = self.kernel(dst.shape, 0, "write")
        index = domain_index(nd)
        if is_value(src):
            reg = kb.cast(src.load(kb, broadcast_index(index, dst.shape, src.shape)),
                          dst.dtype)
        else:
            reg = kb.const(src, dst.dtype)
        kb.store(dst, dst.at(index, nd), reg)
        self.add_kernel(kb)
        i = dst.ref.index
        self.out.inputs[i] = self.out.inputs[i]._replace(written=True)
        return dst

    def arg(self, a):
        if isinstance(a, fx.Node):
            return self.env[a]
        return a

    def lower_node(self, node):
        target = node.target
        if target is operator.getitem:
            parts = self.env[node.args[0]]
            if not isinstance(parts, tuple):
                raise LoweringError("getitem of a value that is not a tuple")
            return parts[node.args[1]]
        if target is _C.Tensor.copy_:
            return self.write_into_input(node)
        if not isinstance(target, _C.Op):
            raise LoweringError(f"call of {target!r}")
        entry = target.entry
        val = self.val(node)
        if isinstance(val, _C.Tensor):
            check_dtype(val.dtype, entry.name)
        lower = entry.lower if entry.lower is not None else extern
        args = [self.arg(a) for a in node.args]
        kwargs = {k: self.arg(v) for k, v in node.kwargs.items()}
        return lower(self, node, val, *args, **kwargs)


class _Slot:
    """Where the i-th tensor goes in an extern op's arguments."""

    def __init__(self, i):
        self.i = i


class ExternCall:
    """fn(*tensors) -> tuple of result tensors, calling op with the tensors in place of
    the _Slot markers in args and kwargs (its fields are plain data: the graph cache
    stores them)."""

    __slots__ = ("op", "args", "kwargs", "multi")

    def __init__(self, op, args, kwargs, multi):
        self.op, self.args, self.kwargs, self.multi = op, args, kwargs, multi

    def __call__(self, *ts):
        a, kw = fx.map_aggregate((self.args, self.kwargs),
                                 lambda x: ts[x.i] if isinstance(x, _Slot) else x)
        r = self.op(*a, **kw)
        return tuple(r) if self.multi else (r,)


def _meta_args(node):
    """node's arguments bound to its op's parameters, graph values as their meta values
    (fake tensors with the traced shapes and dtypes)."""
    def meta(a):
        return fx.map_arg(a, lambda n: n.meta["val"])
    pos = list(node.args)
    out = []
    for p in node.target.entry.schema.params:
        if not p.kwonly and pos:
            out.append(meta(pos.pop(0)))
        else:
            out.append(meta(node.kwargs.get(p.name, p.default if p.has_default else None)))
    return out


def lower(graph, name="graph") -> Lowered:
    fold_conv_affine(graph)
    return GraphLowering(graph, name).run()


def lower_symbolic(graph, name="graph"):
    """(Lowered, its plan tuple) of a prim graph with symbolic sizes (symbolic.py): one
    plan for every size; raises SymbolicLoweringUnsupported where it cannot."""
    env = symbolic_env(graph)
    gl = GraphLowering(graph, name, symbolic.Sizes(env))
    lowered = gl.run()
    return lowered, symbolic.finish(lowered, gl.sizes, gl.size_inputs)


def symbolic_env(graph):
    """The ShapeEnv of a graph's symbolic meta values, or None."""
    from ..fx.shape_env import SymInt
    from ..fx.sym_fake import SymFake
    for n in graph.nodes:
        v = n.meta.get("val")
        if isinstance(v, SymInt):
            return v.env
        if isinstance(v, SymFake):
            for d in tuple(v._sym_shape) + tuple(v._sym_strides):
                if isinstance(d, SymInt):
                    return d.env
    return None


def _sized(val, sizes):
    """A meta value with SizeInts for its SymInts (a SymFake made again with them)."""
    from ..fx.shape_env import SymInt
    from ..fx.sym_fake import SymFake
    if isinstance(val, SymFake):
        return SymFake.make(tuple(sizes.size(n) for n in val._sym_shape),
                            tuple(sizes.size(n) for n in val._sym_strides), val.dtype)
    if isinstance(val, (tuple, list)):
        return type(val)(_sized(v, sizes) for v in val)
    if isinstance(val, SymInt):
        return sizes.size(val)
    return val


def _eager_strides(val, contiguous=False):
    """The dense strides eager gives a value (its meta value val) when they are not
    contiguous, or whatever they are with contiguous=True (a buffer laid out otherwise,
    such as a convolution's channel-major output or the interior of a padded buffer, is
    copied into them); None for values that are not dense tensors."""
    if not isinstance(val, _C.Tensor):
        return None
    shape, strides = tuple(val.shape), tuple(val.stride())
    if not dense(shape, strides) or (
            not contiguous and _same(shape, strides, M.contiguous_strides(shape))):
        return None
    return strides


def _same(shape, a, b):
    return all(x == y for n, x, y in zip(shape, a, b) if n > 1)


def _same_layout(b, strides):
    return _same(b.shape, b.strides, strides)
