"""Lowering a prim graph to kernels and a plan: which loops run, which BLAS calls, which
buffers live, in what order.

Every node's value is lazy. A *buffer value* is data that exists (a graph input, a BLAS
result, a kernel output) seen through a strided view: views (view, permute, expand,
slice) only change its sizes, strides and offset. A *pointwise value* is a function
from an index (one affine expression per dim) to a register of the kernel being built:
elementwise prims compose these functions, so a chain of them is inlined into whoever
consumes it. Values are realized (computed into a buffer) only when they must be: a
graph output, a BLAS operand, a view that is not affine, or a value many consumers
would otherwise recompute. A reduction becomes one kernel over its input's domain,
with the reduced dims innermost; the elementwise chain feeding it runs in the same
loops, and values of that chain that must also be realized are stored from there too.
So (x @ w + b).relu().sum() is one BLAS call and one kernel, with no intermediate
buffer.
"""
from __future__ import annotations

import math
import operator

import numpy as np

from .. import _C
from .. import fx
from ..ops import meta as M
from .loop_ir import Affine, COMPARE_OPS, Kernel, Param, Stmt, verify


class LoweringError(NotImplementedError):
    """The graph uses something the LLVM backend cannot compile (it then runs eagerly)."""


SUPPORTED_DTYPES = ("bool", "uint8", "int8", "int16", "int32", "int64", "float32", "float64")
INLINE_LIMIT = 24          # pointwise ops a value may cost before several users realize it
PARALLEL_MIN = 1 << 16     # domain points below which a kernel runs on one thread


def _check_dtype(dtype, what):
    if repr(dtype).split(".")[-1] not in SUPPORTED_DTYPES:
        raise LoweringError(f"{what}: dtype {dtype} is not supported by the LLVM backend")


def contiguous_strides(shape):
    return M.contiguous_strides(tuple(shape))


# ------------------------------------------------------------------ values


class BufferValue:
    def __init__(self, ref, dtype, sizes, strides, offset=0, extent=None):
        self.ref = ref
        self.dtype = dtype
        self.shape = tuple(sizes)
        self.strides = tuple(strides)
        self.offset = offset
        self.extent = extent if extent is not None else _span(sizes, strides, offset)

    def at(self, index, ndim):
        """The element index (affine in ndim loop indices) of this view at `index`."""
        coeffs = [0] * ndim
        off = self.offset
        for a, st in zip(index, self.strides):
            off += a.offset * st
            for d, c in enumerate(a.coeffs):
                coeffs[d] += c * st
        return Affine(tuple(coeffs), off)

    def load(self, kb, index):
        return kb.load(self, self.at(index, len(kb.sizes)))

    def view_spec(self):
        return (self.ref, self.shape, self.strides, self.offset)


def _dense(sizes, strides):
    """No gaps, no overlaps: a permutation of a contiguous layout."""
    if any(n == 0 for n in sizes):
        return True
    dims = sorted((st, n) for n, st in zip(sizes, strides) if n > 1)
    expect = 1
    for st, n in dims:
        if st != expect:
            return False
        expect *= n
    return True


def _span(sizes, strides, offset):
    if any(n == 0 for n in sizes):
        return offset
    return offset + sum((n - 1) * s for n, s in zip(sizes, strides)) + 1


class PointwiseValue:
    """fn(kb, index) -> register; `cost` counts the ops inlining it would repeat."""

    def __init__(self, shape, dtype, fn, cost, node=None, reads=frozenset()):
        self.shape = tuple(shape)
        self.dtype = dtype
        self.fn = fn
        self.cost = cost
        self.node = node
        self.reads = reads          # the buffers computing it loads
        self.realized = None        # BufferValue once computed into a buffer
        self.must_realize = False
        # (base, strides_fn) when this value is a permutation of another
        # pointwise value: realizing it realizes the base in its own layout and views that
        self.view_base = None

    def load(self, kb, index):
        if self.realized is not None:
            return self.realized.load(kb, index)
        reg = self.fn(kb, index)
        if self.must_realize:
            kb.maybe_store(self, index, reg)
        return reg


def load(value, kb, index):
    return value.load(kb, index)


def _reads(operands, shape):
    """The buffers read at full size (not broadcast) computing a value of `shape`."""
    out = set()
    n = math.prod(shape)
    for o in operands:
        if not _is_value(o) or math.prod(o.shape) != n:
            continue
        if isinstance(o, BufferValue):
            out.add(o.ref)
        elif isinstance(o, PointwiseValue):
            out |= {o.realized.ref} if o.realized is not None else o.reads
    return frozenset(out)


def _mark_realize(value):
    """Asks for a value (or the base a view of it is made from) to be stored by the
    first kernel that visits all of it."""
    while value.view_base is not None and value.view_base[0].realized is None:
        value = value.view_base[0]
    value.must_realize = True


# ------------------------------------------------------------------ kernel building


class KernelBuilder:
    def __init__(self, lowering, name, sizes, nreduce):
        self.lowering = lowering
        self.kernel = Kernel(name, tuple(sizes), nreduce)
        self.sizes = tuple(sizes)
        self.params = {}
        self.loads = {}
        self.next_reg = 0
        self.reg_dtype = {}         # register -> the dtype of its value
        self.stored = []            # pointwise values this kernel realizes

    def param(self, buf: BufferValue):
        key = buf.ref
        if key not in self.params:
            extent = self.lowering.extent_of(buf.ref)
            self.params[key] = len(self.kernel.params)
            self.kernel.params.append(Param(buf.ref, buf.dtype, extent))
        return self.params[key]

    def emit(self, op, dtype=None, args=(), param=None, index=None, value=None, dst=True):
        """Appends a statement; returns the register it defines. `dtype` is what the
        statement computes in, so its operands must already be of it (the verifier
        checks): convert them with cast() first."""
        reg = None
        if dst:
            reg = self.next_reg
            self.next_reg += 1
            self.reg_dtype[reg] = _C.bool if op in COMPARE_OPS else dtype
        self.kernel.stmts.append(Stmt(op, reg, dtype, tuple(args), param, index, value))
        return reg

    def load(self, buf, index):
        p = self.param(buf)
        key = (p, index)
        if key not in self.loads:
            self.loads[key] = self.emit("load", buf.dtype, param=p, index=index)
        return self.loads[key]

    def const(self, value, dtype):
        if dtype.is_floating_point:
            value = float(value)
        elif dtype is _C.bool:
            value = int(bool(value))
        else:
            value = int(value)
        key = ("const", value, dtype)
        if key not in self.loads:
            self.loads[key] = self.emit("const", dtype, value=value)
        return self.loads[key]

    def cast(self, reg, dtype):
        """reg converted to dtype (reg itself when it has that dtype already); each
        register is converted to a dtype once per kernel."""
        if self.reg_dtype[reg] is dtype:
            return reg
        key = ("cast", reg, dtype)
        if key not in self.loads:
            self.loads[key] = self.emit("cast", dtype, args=(reg,))
        return self.loads[key]

    def identity_dims(self, index):
        """The loop dim each index entry is, if index is a permutation of loop dims."""
        dims = []
        for a in index:
            nz = [d for d, c in enumerate(a.coeffs) if c != 0]
            if a.offset != 0 or len(nz) != 1 or a.coeffs[nz[0]] != 1:
                return None
            dims.append(nz[0])
        if sorted(dims) != list(range(len(self.sizes))):
            return None
        return dims

    def maybe_store(self, value, index, reg):
        """Stores a value that must be realized when this kernel visits all of it."""
        if value.realized is not None or value in self.stored:
            return
        dims = self.identity_dims(index)
        if dims is None or tuple(self.sizes[d] for d in dims) != value.shape:
            return
        buf = self.lowering.new_buffer(value.dtype, value.shape)
        coeffs = [0] * len(self.sizes)
        for k, d in enumerate(dims):
            coeffs[d] = buf.strides[k]
        self.emit("store", param=self.param(buf), index=Affine(tuple(coeffs)),
                  args=(reg,), dst=False)
        self.stored.append(value)
        value.realized = buf

    def finish(self):
        return self.kernel


def _domain_index(ndim):
    return [Affine(tuple(1 if d == k else 0 for d in range(ndim))) for k in range(ndim)]


# ------------------------------------------------------------------ the lowering


class Lowered:
    def __init__(self):
        self.kernels = []
        self.input_geoms = []       # (sizes, strides) per graph input
        self.buffers = []           # (dtype, sizes) per buffer
        self.steps = []             # ("kernel", k, refs) / ("matmul", a, b, j)
        self.outputs = []           # view specs, or None

    def plan(self):
        return (tuple(self.input_geoms),
                tuple((d._code, tuple(s), e) for d, s, e in self.buffers),
                tuple(self.steps), tuple(self.outputs))

    def __str__(self):
        lines = []
        for step in self.steps:
            if step[0] == "kernel":
                lines.append(str(self.kernels[step[1]]).rstrip())
            elif step[0] == "extern":
                ins = ", ".join(_ref(v) for v in step[2])
                outs = ", ".join(f"buf{j}" for j in step[3])
                lines.append(f"extern {step[4]}({ins}) -> {outs}")
            else:
                lines.append(f"blas matmul {_ref(step[1])} @ {_ref(step[2])} -> buf{step[3]}")
        outs = ", ".join("None" if o is None else _ref(o) for o in self.outputs)
        lines.append(f"return ({outs})")
        return "\n".join(lines)


def _ref(view):
    (kind, i), sizes, strides, offset = view
    s = f"{kind}{i}{list(sizes)}"
    if offset or strides != contiguous_strides(sizes):
        s += f"(strides {list(strides)}, offset {offset})"
    return s


class Lowering:
    def __init__(self, graph, name):
        self.graph = graph
        self.name = name
        self.out = Lowered()
        self.env = {}
        self.input_extents = {}

    # -------------------------------------------------- buffers

    def new_buffer(self, dtype, shape, extern=False):
        """A buffer allocated per call (contiguous), or filled by an extern op."""
        _check_dtype(dtype, "a buffer")
        j = len(self.out.buffers)
        self.out.buffers.append((dtype, tuple(shape), extern))
        return BufferValue(("buf", j), dtype, shape, contiguous_strides(shape))

    def extent_of(self, ref):
        if ref[0] == "in":
            return self.input_extents[ref[1]]
        dtype, shape, _ = self.out.buffers[ref[1]]
        return math.prod(shape)

    def kernel(self, sizes, nreduce, tag):
        name = f"{self.name}_{tag}{len(self.out.kernels)}"
        return KernelBuilder(self, name, sizes, nreduce)

    def add_kernel(self, kb):
        k = verify(kb.finish())
        idx = len(self.out.kernels)
        self.out.kernels.append(k)
        split = k.nreduce < len(k.sizes)
        outer = k.sizes[0] if split else 1
        # threads split dim 0; accumulating along it would race
        racy = any(st.op == "accumulate" and st.index.coeffs[0] == 0 for st in k.stmts)
        parallel = split and outer > 1 and not racy and math.prod(k.sizes) >= PARALLEL_MIN
        self.out.steps.append(("kernel", idx, tuple(p.ref for p in k.params), outer,
                               parallel))

    def realize(self, value) -> BufferValue:
        if isinstance(value, BufferValue):
            return value
        if value.realized is not None:
            return value.realized
        if value.view_base is not None:
            base, strides_fn = value.view_base
            b = self.realize(base)
            sizes, strides, offset = strides_fn(b)
            value.realized = BufferValue(b.ref, b.dtype, sizes, strides, offset, b.extent)
            return value.realized
        shape = value.shape
        kb = self.kernel(shape, 0, "pointwise")
        value.must_realize = True
        reg = value.fn(kb, _domain_index(len(shape)))
        kb.maybe_store(value, _domain_index(len(shape)), reg)
        if value.realized is None:
            raise LoweringError("could not store a pointwise value")
        self.add_kernel(kb)
        return value.realized

    # -------------------------------------------------- the graph

    def _must_realize(self):
        """Nodes whose values will have to exist as buffers: graph outputs and BLAS
        operands (known before lowering, so a kernel that computes one on the way to
        something else can store it then)."""
        must = set()
        for node in self.graph.nodes:
            if node.op == "output":
                must.update(a for a in node.args[0] if a is not None)
            elif node.op == "call_function" and isinstance(node.target, _C.Op) and \
                    node.target.entry.name == "matmul":
                must.update(a for a in node.args if hasattr(a, "users"))
        return must

    def run(self):
        users = {n: len(n.users) for n in self.graph.nodes}
        must = self._must_realize()
        inputs = 0
        for node in self.graph.nodes:
            if node.op == "placeholder":
                v = node.meta["val"]
                _check_dtype(v.dtype, f"input {node.name}")
                shape = tuple(v.shape)
                # inputs are read with the strides traced for them when those are dense;
                # anything else (an expanded gradient, a strided view) is compiled for a
                # contiguous input, and the runtime copies an input into that layout
                strides = tuple(v.stride()) if _dense(shape, tuple(v.stride())) else \
                    contiguous_strides(shape)
                self.out.input_geoms.append((shape, strides))
                extent = _span(shape, strides, 0)
                self.input_extents[inputs] = extent
                self.env[node] = BufferValue(("in", inputs), v.dtype, shape, strides, 0,
                                             extent)
                inputs += 1
            elif node.op == "call_function":
                self.env[node] = self.lower_node(node)
                val = self.env[node]
                # a value several consumers use is stored (by the first kernel that
                # visits all of it) when recomputing it would repeat many ops or read
                # several buffers: a residual stream feeding a norm and the next block
                if isinstance(val, PointwiseValue) and (node in must or (
                        users[node] > 1 and (val.cost > INLINE_LIMIT or
                                             len(val.reads) > 1))):
                    _mark_realize(val)
            elif node.op == "output":
                self.lower_output(node)
            else:
                raise LoweringError(f"node {node.format_node()}")
        return self.out

    def lower_output(self, node):
        outs = node.args[0]
        for o in outs:
            if o is not None:
                v = self.env[o]
                if isinstance(v, PointwiseValue):
                    _mark_realize(v)
        for o in outs:
            if o is None:
                self.out.outputs.append(None)
                continue
            buf = self.realize(self.env[o])
            self.out.outputs.append(buf.view_spec())

    def arg(self, a):
        if hasattr(a, "op") and hasattr(a, "users"):
            return self.env[a]
        return a

    def lower_node(self, node):
        target = node.target
        if target is operator.getitem:
            parts = self.env[node.args[0]]
            if not isinstance(parts, tuple):
                raise LoweringError("getitem of a value that is not a tuple")
            return parts[node.args[1]]
        if not isinstance(target, _C.Op):
            raise LoweringError(f"call of {target!r}")
        name = target.entry.name
        val = node.meta.get("val")
        if isinstance(val, _C.Tensor):
            _check_dtype(val.dtype, name)
        handler = getattr(self, "op_" + name.lstrip("_"), None)
        if handler is None:
            return self.extern(node, val)
        args = [self.arg(a) for a in node.args]
        kwargs = {k: self.arg(v) for k, v in node.kwargs.items()}
        return handler(node, val, *args, **kwargs)

    # -------------------------------------------------- extern ops

    def extern(self, node, val):
        """A prim without a loop-IR lowering (a scatter, a sort, a random draw, ...) runs
        its eager kernel inside the compiled graph: its tensor arguments are realized,
        and its results become buffers the kernels after it read."""
        if val is None:
            raise LoweringError(f"{node.target.entry.name} returns nothing")
        views = []

        def template(a):
            if hasattr(a, "op") and hasattr(a, "users"):
                buf = self.realize(self.env[a])
                views.append(buf.view_spec())
                return _Slot(len(views) - 1)
            if isinstance(a, (list, tuple)):
                return type(a)(template(x) for x in a)
            return a

        args = tuple(template(a) for a in node.args)
        kwargs = {k: template(v) for k, v in node.kwargs.items()}
        outs = val if isinstance(val, tuple) else (val,)
        slots = []
        for v in outs:
            if not isinstance(v, _C.Tensor):
                raise LoweringError(f"{node.target.entry.name} returns a "
                                    f"{type(v).__name__}")
            _check_dtype(v.dtype, node.target.entry.name)
            slots.append(self.new_buffer(v.dtype, tuple(v.shape), extern=True))
        fn = _extern_call(node.target, args, kwargs, isinstance(val, tuple))
        self.out.steps.append(("extern", fn, tuple(views), tuple(b.ref[1] for b in slots),
                               node.target.entry.qualified_name))
        return tuple(slots) if isinstance(val, tuple) else slots[0]

    # -------------------------------------------------- elementwise

    def computation_dtype(self, node, val):
        """The dtype node's op computes in, from the graph's dtype facts (the meta values
        of its operands and result): meta.computation_dtype, the dtype eager's
        TensorIterator converts every operand to."""
        return M.computation_dtype(node.target.entry, _meta_args(node), val)

    def pointwise(self, node, val, operands, body, cost=1, dtypes=None):
        """A pointwise value: operands broadcast to val's shape and converted, each once,
        to the dtype node's op computes in (or to dtypes[i]); body(kb, regs) -> register.
        This is the one place operands meet their computation dtype."""
        shape = tuple(val.shape)
        dtype = val.dtype
        if dtypes is None:
            dtypes = [self.computation_dtype(node, val)] * len(operands)
        for o in operands:
            if not _is_value(o) and not isinstance(o, (int, float, bool)):
                raise LoweringError(f"{node.target.entry.name}: operand {o!r}")
        total = cost + sum(o.cost for o in operands if isinstance(o, PointwiseValue))

        def fn(kb, index):
            regs = []
            for o, want in zip(operands, dtypes):
                if _is_value(o):
                    r = o.load(kb, _broadcast_index(index, shape, o.shape))
                    regs.append(kb.cast(r, want))
                else:
                    regs.append(kb.const(o, want))
            out = body(kb, regs)
            if kb.reg_dtype[out] is not dtype:
                raise LoweringError(f"{node.target.entry.name}: computes a "
                                    f"{kb.reg_dtype[out]} where its value is {dtype}")
            return out

        return PointwiseValue(shape, dtype, fn, total, node, _reads(operands, shape))

    def _binary(self, node, val, a, b, op):
        compute = self.computation_dtype(node, val)
        return self.pointwise(node, val, [a, b], lambda kb, r: kb.emit(op, compute, r))

    def op_add(self, node, val, a, b, alpha=1):
        if alpha != 1:
            compute = self.computation_dtype(node, val)
            b = self.pointwise(node, _shape_of(b, val), [b, alpha],
                               lambda kb, r: kb.emit("mul", compute, r))
        return self._binary(node, val, a, b, "add")

    def op_div(self, node, val, a, b, rounding_mode=None):
        compute = self.computation_dtype(node, val)
        if not compute.is_floating_point or rounding_mode == "floor":
            # integer division (its zero-divisor error) and Python's floor division of
            # floats (fmod-based: 1 // 0.1 is 9) run eager's kernel
            return self.extern(node, val)
        if rounding_mode is None:
            return self._binary(node, val, a, b, "div")
        return self.pointwise(node, val, [a, b], lambda kb, r: kb.emit(
            "trunc", compute, (kb.emit("div", compute, r),)))

    def op_mul(self, node, val, a, b):
        return self._binary(node, val, a, b, "mul")

    def op_maximum(self, node, val, a, b):
        return self._binary(node, val, a, b, "max")

    def op_bitwise_and(self, node, val, a, b):
        return self._binary(node, val, a, b, "and")

    def op_bitwise_or(self, node, val, a, b):
        return self._binary(node, val, a, b, "or")

    def _unary(self, node, val, a, op):
        compute = self.computation_dtype(node, val)
        return self.pointwise(node, val, [a], lambda kb, r: kb.emit(op, compute, r))

    def op_neg(self, node, val, a):
        return self._unary(node, val, a, "neg")

    def op_reciprocal(self, node, val, a):
        return self._unary(node, val, a, "reciprocal")

    def op_exp(self, node, val, a):
        return self._unary(node, val, a, "exp")

    def op_log(self, node, val, a):
        return self._unary(node, val, a, "log")

    def op_tanh(self, node, val, a):
        return self._unary(node, val, a, "tanh")

    def _float_unary(self, node, val, a, op):
        if not val.dtype.is_floating_point:
            raise LoweringError(f"{op} of {val.dtype}")
        return self._unary(node, val, a, op)

    def op_sqrt(self, node, val, a):
        return self._float_unary(node, val, a, "sqrt")

    def op_sin(self, node, val, a):
        return self._float_unary(node, val, a, "sin")

    def op_cos(self, node, val, a):
        return self._float_unary(node, val, a, "cos")

    def op_erf(self, node, val, a):
        return self._float_unary(node, val, a, "erf")

    def op_expm1(self, node, val, a):
        return self._float_unary(node, val, a, "expm1")

    def op_log1p(self, node, val, a):
        return self._float_unary(node, val, a, "log1p")

    def op_bitwise_xor(self, node, val, a, b):
        if val.dtype.is_floating_point:
            raise LoweringError("xor of floats")
        return self._binary(node, val, a, b, "xor")

    def op_pow(self, node, val, a, b):
        # a constant exponent that is a multiple of 1/2 up to 4 in size becomes
        # multiplications, a sqrt and a division (x ** -0.5 is layer norm's rsqrt), which
        # vectorise; other exponents call libm's pow per element
        if not _is_value(b) and isinstance(b, (int, float)) and not isinstance(b, bool) \
                and _is_value(a) and val.dtype.is_floating_point and \
                float(2 * b).is_integer() and abs(b) <= 4:
            e = float(b)

            def body(kb, r, e=e):
                dt = val.dtype
                x = r[0]
                if e == 0.5:             # eager (NumPy) computes x ** 0.5 as sqrt(x)
                    return kb.emit("sqrt", dt, (x,))
                one = kb.const(1.0, dt)
                if e == 0:
                    return one
                whole, half = int(abs(e)), abs(e) % 1 == 0.5
                y = None
                if half:
                    # pow's special cases: (-0) ** e and (-inf) ** e are those of +0 and
                    # +inf when e is not an integer; other negative x give NaN (the sqrt)
                    zero = kb.const(0.0, dt)
                    ninf = kb.emit("eq", dt, (x, kb.const(-math.inf, dt)))
                    x = kb.emit("select", dt, (kb.emit("eq", dt, (x, zero)), zero, x))
                    x = kb.emit("select", dt, (ninf, kb.const(math.inf, dt), x))
                    y = kb.emit("sqrt", dt, (x,))
                    if e < 0:
                        y = kb.emit("div", dt, (one, y))
                # negative powers multiply reciprocals (x ** -1.5 of a large x
                # underflows gradually instead of overflowing first)
                b = kb.emit("div", dt, (one, x)) if e < 0 and whole else x
                for _ in range(whole):
                    y = b if y is None else kb.emit("mul", dt, (y, b))
                return y
            return self.pointwise(node, val, [a], body)
        if not val.dtype.is_floating_point:
            raise LoweringError("integer pow")
        return self._binary(node, val, a, b, "pow")

    def _compare(self, node, val, a, b, op):
        return self._binary(node, val, a, b, op)

    def op_eq(self, node, val, a, b):
        return self._compare(node, val, a, b, "eq")

    def op_ne(self, node, val, a, b):
        return self._compare(node, val, a, b, "ne")

    def op_lt(self, node, val, a, b):
        return self._compare(node, val, a, b, "lt")

    def op_le(self, node, val, a, b):
        return self._compare(node, val, a, b, "le")

    def op_where(self, node, val, cond, a, b):
        compute = self.computation_dtype(node, val)
        return self.pointwise(node, val, [cond, a, b],
                              lambda kb, r: kb.emit("select", compute, r),
                              dtypes=(_C.bool, compute, compute))

    def op_to_copy(self, node, val, a, dtype=None):
        return self.pointwise(node, val, [a], lambda kb, r: r[0])

    def op_clone(self, node, val, a, memory_format=None):
        return self.pointwise(node, val, [a], lambda kb, r: r[0])

    def op_full(self, node, val, size, fill_value, dtype=None, device=None,
                requires_grad=False):
        return self.pointwise(node, val, [fill_value], lambda kb, r: r[0], cost=0)

    def op_arange(self, node, val, end, dtype=None, device=None, requires_grad=False):
        out = val.dtype
        return PointwiseValue(tuple(val.shape), out,
                              lambda kb, index: _iota(kb, index[0], out), 1, node)

    # -------------------------------------------------- views

    def _view_of(self, value, shape, strides_fn, index_fn, base_layout=False):
        """A view: strided for buffers, an index transform for pointwise values.
        base_layout: when the view has to become a buffer, compute its source in the
        source's own layout and view that (a transposed operand of a matmul is computed
        row by row and handed to BLAS transposed, not gathered column by column)."""
        if isinstance(value, PointwiseValue) and value.realized is not None:
            value = value.realized
        if isinstance(value, BufferValue):
            sizes, strides, offset = strides_fn(value)
            return BufferValue(value.ref, value.dtype, sizes, strides, offset, value.extent)
        src = value

        def fn(kb, index):
            return src.load(kb, index_fn(index))
        view = PointwiseValue(shape, src.dtype, fn, src.cost, None, src.reads)
        if base_layout:
            view.view_base = (src, strides_fn)
        return view

    def op_permute(self, node, val, a, dims):
        nd = len(dims)
        dims = [M.wrap_dim(d, nd) for d in dims]
        inv = [0] * nd
        for i, d in enumerate(dims):
            inv[d] = i
        return self._view_of(
            a, tuple(val.shape),
            lambda b: (tuple(b.shape[d] for d in dims), tuple(b.strides[d] for d in dims),
                       b.offset),
            lambda index: [index[inv[k]] for k in range(nd)], base_layout=True)

    def op_expand(self, node, val, a, size, implicit=False):
        shape = tuple(val.shape)
        off = len(shape) - len(a.shape)

        def strides(b):
            st = [0] * len(shape)
            for k in range(len(b.shape)):
                if b.shape[k] == shape[k + off]:
                    st[k + off] = b.strides[k]
            return shape, tuple(st), b.offset
        return self._view_of(a, shape, strides,
                             lambda index: _broadcast_index(index, shape, a.shape))

    def op_slice(self, node, val, a, dim=0, start=None, end=None, step=1):
        nd = len(a.shape)
        d = M.wrap_dim(dim, nd)
        size = a.shape[d]
        s = 0 if start is None else start
        if s < 0:
            s += size
        s = min(max(s, 0), size)

        def strides(b):
            sizes = list(val.shape)
            st = list(b.strides)
            st[d] = b.strides[d] * step
            return tuple(sizes), tuple(st), b.offset + s * b.strides[d]

        def index_fn(index):
            out = list(index)
            a_d = index[d]
            out[d] = Affine(tuple(c * step for c in a_d.coeffs), a_d.offset * step + s)
            return out
        return self._view_of(a, tuple(val.shape), strides, index_fn)

    def op_view(self, node, val, a, size):
        shape = tuple(val.shape)
        if isinstance(a, PointwiseValue) and a.realized is None:
            mapping = _refinement(a.shape, shape)
            if mapping is None:
                a = self.realize(a)
            else:
                def index_fn(index, mapping=mapping, shape=shape):
                    out = []
                    for group in mapping:
                        coeffs = [0] * len(index[0].coeffs) if index else []
                        offset, mult = 0, 1
                        for k in reversed(group):
                            coeffs = [c + mult * x for c, x in zip(coeffs, index[k].coeffs)]
                            offset += mult * index[k].offset
                            mult *= shape[k]
                        out.append(Affine(tuple(coeffs), offset))
                    return out
                return self._view_of(a, shape, None, index_fn)

        if isinstance(a, PointwiseValue):
            a = self.realize(a)
        if M.compute_stride(a.shape, a.strides, math.prod(a.shape), shape) is None:
            # the buffer is laid out otherwise than the traced value was (buffers are
            # made contiguous, or in a source's layout): its view is a reshape, of a copy
            a = self._contiguous_copy(a)

        def strides(b):
            st = M.compute_stride(b.shape, b.strides, math.prod(b.shape), shape)
            if st is None:
                raise LoweringError("view of a buffer its strides cannot express")
            return shape, st, b.offset
        return self._view_of(a, shape, strides, None)

    def _contiguous_copy(self, buf):
        copy = PointwiseValue(buf.shape, buf.dtype, lambda kb, index: buf.load(kb, index), 1,
                              None, frozenset({buf.ref}))
        out = self.realize(copy)
        if out.strides != tuple(contiguous_strides(out.shape)):
            raise LoweringError("a copy of a buffer was not made contiguous")
        return out

    def op_slice_scatter(self, node, val, a, src, dim=0, start=None, end=None, step=1):
        """A copy of `a` with src written over a slice of it: one kernel copies (or
        computes) `a` into a new buffer, a second stores src into the slice."""
        shape = tuple(val.shape)
        out = self.new_buffer(val.dtype, shape)
        nd = len(shape)
        kb = self.kernel(shape, 0, "pointwise")
        index = _domain_index(nd)
        reg = a.load(kb, _broadcast_index(index, shape, a.shape))
        kb.emit("store", param=kb.param(out), index=out.at(index, nd),
                args=(kb.cast(reg, val.dtype),), dst=False)
        self.add_kernel(kb)
        if math.prod(src.shape) == 0:
            return out
        d = M.wrap_dim(dim, nd)
        s0 = 0 if start is None else start
        if s0 < 0:
            s0 += shape[d]
        s0 = min(max(s0, 0), shape[d])
        strides = list(out.strides)
        strides[d] *= step
        dst = BufferValue(out.ref, out.dtype, tuple(src.shape), tuple(strides),
                          s0 * out.strides[d], out.extent)
        kb = self.kernel(tuple(src.shape), 0, "scatter")
        index = _domain_index(nd)
        reg = src.load(kb, index)
        kb.emit("store", param=kb.param(dst), index=dst.at(index, nd),
                args=(kb.cast(reg, val.dtype),), dst=False)
        self.add_kernel(kb)
        return out

    # -------------------------------------------------- reductions and BLAS

    def _reduce(self, node, val, a, dims, keepdim, op, acc_dtype):
        nd = len(a.shape)
        mask = M.reduce_mask(dims if dims != () else None, nd) if nd else []
        kept = [d for d in range(nd) if not mask[d]]
        reduced = [d for d in range(nd) if mask[d]]
        out = self.new_buffer(val.dtype, tuple(val.shape))
        if not reduced:
            # nothing to reduce (a 0-d input): each element is its own result
            order = kept
            kb = self.kernel(tuple(a.shape), 0, "reduce")
            stmt = "store"
        elif _outer_reduction(a, kept, reduced) and acc_dtype is not _C.bool:
            # the reduced dims are outer in memory: fold rows into the output in place
            # (contiguous, vectorised) instead of walking each column with a stride
            order = reduced + kept
            fill = self.kernel(tuple(val.shape), 0, "fill")
            reg = fill.const(_identity(op, acc_dtype), acc_dtype)
            fill.emit("store", param=fill.param(out),
                      index=Affine(tuple(out.strides)), args=(reg,), dst=False)
            self.add_kernel(fill)
            kb = self.kernel(tuple(a.shape[d] for d in order), 0, "reduce")
            stmt = "accumulate"
        else:
            order = kept + reduced
            kb = self.kernel(tuple(a.shape[d] for d in order), len(reduced), "reduce")
            stmt = "reduce"
        index = [None] * nd
        for pos, d in enumerate(order):
            index[d] = Affine(tuple(1 if k == pos else 0 for k in range(nd)))
        out_coeffs = [0] * nd
        out_dims = [d for d in range(nd) if keepdim or not mask[d]]
        for k, d in enumerate(out_dims):
            if not mask[d]:
                out_coeffs[order.index(d)] = out.strides[k]
        reg = a.load(kb, index) if nd else a.load(kb, [])
        reg = kb.cast(reg, acc_dtype)
        kb.emit(stmt, param=kb.param(out), index=Affine(tuple(out_coeffs)), args=(reg,),
                value=None if stmt == "store" else op, dst=False)
        self.add_kernel(kb)
        return out

    def op_sum(self, node, val, a, dim=None, keepdim=False, dtype=None):
        return self._reduce(node, val, a, dim, keepdim, "sum", val.dtype)

    def op_amax(self, node, val, a, dim=(), keepdim=False):
        return self._reduce(node, val, a, dim, keepdim, "max", val.dtype)

    def op_amin(self, node, val, a, dim=(), keepdim=False):
        return self._reduce(node, val, a, dim, keepdim, "min", val.dtype)

    def op_matmul(self, node, val, a, b):
        if not val.dtype.is_floating_point:
            raise LoweringError("integer matmul")
        av, bv = self.realize(a), self.realize(b)
        out = self.new_buffer(val.dtype, tuple(val.shape))
        self.out.steps.append(("matmul", av.view_spec(), bv.view_spec(), out.ref[1]))
        return out


class _Slot:
    """Where the i-th tensor goes in an extern op's arguments."""

    def __init__(self, i):
        self.i = i


def _extern_call(op, args, kwargs, multi):
    """fn(*tensors) -> tuple of result tensors, calling op with the tensors in place."""
    def fill(a, ts):
        if isinstance(a, _Slot):
            return ts[a.i]
        if isinstance(a, (list, tuple)):
            return type(a)(fill(x, ts) for x in a)
        return a

    def call(*ts):
        r = op(*fill(args, ts), **{k: fill(v, ts) for k, v in kwargs.items()})
        return tuple(r) if multi else (r,)
    return call


def _is_value(o):
    return isinstance(o, (BufferValue, PointwiseValue))


def _meta_args(node):
    """node's arguments bound to its op's parameters, graph values as their meta values
    (fake tensors with the traced shapes and dtypes)."""
    def meta(a):
        if isinstance(a, fx.Node):
            return a.meta["val"]
        if isinstance(a, (list, tuple)):
            return type(a)(meta(x) for x in a)
        return a
    pos = list(node.args)
    out = []
    for p in node.target.entry.schema.params:
        if not p.kwonly and pos:
            out.append(meta(pos.pop(0)))
        else:
            out.append(meta(node.kwargs.get(p.name, p.default if p.has_default else None)))
    return out


def _shape_of(o, val):
    class _V:
        shape = o.shape if _is_value(o) else tuple(val.shape)
        dtype = val.dtype
    return _V


def _broadcast_index(index, out_shape, in_shape):
    """The index into an operand of in_shape broadcast to out_shape."""
    off = len(out_shape) - len(in_shape)
    zero = Affine(tuple(0 for _ in (index[0].coeffs if index else ())))
    return [zero if in_shape[k] == 1 and out_shape[k + off] != 1 else index[k + off]
            for k in range(len(in_shape))]


def _refinement(src, dst):
    """For a reshape that only splits dims (or adds/drops size-1 dims): for each src dim,
    the dst dims it splits into; else None."""
    groups, j = [], 0
    for n in src:
        group, prod = [], 1
        while j < len(dst) and (prod < n or (dst[j] == 1 and prod == n and n != 1)):
            if dst[j] == 1 and prod == n:
                break
            group.append(j)
            prod *= dst[j]
            j += 1
        if prod != n:
            return None
        if n == 1 and not group:
            pass
        groups.append(group)
    if any(dst[k] != 1 for k in range(j, len(dst))):
        return None
    if sorted(k for g in groups for k in g) != [k for k in range(len(dst)) if
                                                  any(k in g for g in groups)]:
        return None
    return groups


def _layout_strides(value):
    """The strides a value is laid out with, or would be once computed: a buffer's own,
    a permuted pointwise value's base's permuted, any other pointwise value's
    contiguous."""
    if isinstance(value, PointwiseValue):
        if value.realized is not None:
            return value.realized.strides
        if value.view_base is not None:
            base, strides_fn = value.view_base
            fake = BufferValue(("in", -1), base.dtype, base.shape, _layout_strides(base), 0,
                               1)
            return strides_fn(fake)[1]
        return contiguous_strides(value.shape)
    return value.strides


def _outer_reduction(a, kept, reduced):
    """Whether a reduction's input is contiguous along a kept dim (the smallest stride
    belongs to a kept dim), so that looping kept dims innermost reads it in order."""
    if not kept or not reduced:
        return False
    strides = _layout_strides(a)
    dims = [d for d in range(len(a.shape)) if a.shape[d] > 1 and strides[d] != 0]
    if not dims or all(a.shape[d] <= 1 for d in reduced):
        return False
    inner = min(dims, key=lambda d: (abs(strides[d]), -d))
    return inner in kept


def _identity(op, dtype):
    if op == "sum":
        return 0
    if op == "prod":
        return 1
    if dtype.is_floating_point:
        return -math.inf if op == "max" else math.inf
    info = np.iinfo(dtype.numpy_dtype)
    return info.min if op == "max" else info.max


def _iota(kb, affine, dtype):
    """The value of arange at an affine index: offset + sum(coeff * loop index)."""
    reg = None
    for d, c in enumerate(affine.coeffs):
        if c == 0:
            continue
        term = kb.emit("iota", dtype, value=d)
        if c != 1:
            term = kb.emit("mul", dtype, (term, kb.const(c, dtype)))
        reg = term if reg is None else kb.emit("add", dtype, (reg, term))
    if reg is None:
        return kb.const(affine.offset, dtype)
    if affine.offset:
        reg = kb.emit("add", dtype, (reg, kb.const(affine.offset, dtype)))
    return reg


def lower(graph, name="graph") -> Lowered:
    return Lowering(graph, name).run()
