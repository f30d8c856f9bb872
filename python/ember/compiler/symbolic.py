"""Symbolic kernels ([dynamic]): one compiled graph for every size its guards admit.

A prim graph with size inputs (AOT's symbolic graphs: meta values whose sizes are
fx/shape_env SymInts) is lowered with each size a `SizeInt`: an int (its value at the
captured sizes, so the lowering's arithmetic runs unchanged) that carries its
expression (fx/sym_expr.Expr) through +, -, *, //, %, min and max. A comparison of a
SizeInt is answered only when the symbols' ranges decide it for every size (a size
symbol is at least 2, so `n == 1` is False and `s0*s1 - 1 < s0*s1` True); any other
raises SymbolicLoweringUnsupported, so no decision of the lowering silently depends on
the captured sizes: the graph is then compiled once per size instead
(capture/sym_sizes.specializing), counted in counters["llvm_dynamic_fallback"] with
the comparison that failed. Where the LLVM path would decide by the size (threads, chunks,
the fast instruction selector), a symbolic kernel leaves it to the call.

The lowered plan keeps SizeInts in its fields; `finish` turns them into references to
a table of size expressions (postfix programs over the symbols, each symbol bound to an
input's size or a size input), which csrc/runtime/compiled_graph.c evaluates on every
call: buffer sizes, strides and offsets, each kernel step's outer dim, the kernels' size
arguments (loop bounds and index coefficients: Kernel.spec() writes a symbolic one as
(k,), size argument k, read by the kernel at entry), and its schedule.
"""
from __future__ import annotations

import math
import operator
from typing import NamedTuple

from ..fx import sym_expr as se
from ..fx.shape_env import SymInt
from .values import LoweringError


class SymbolicLoweringUnsupported(LoweringError):
    """A symbolic graph the LLVM path cannot compile for every size at once."""


class SizeInt(int):
    """A size: its value at the captured sizes (the int) and its expression."""

    def __new__(cls, hint, expr, ranges, facts=()):
        v = int.__new__(cls, hint)
        v.expr = expr
        v.ranges = ranges
        v.facts = facts
        return v

    # ---------------------------------------------------------- arithmetic
    def _make(self, hint, expr):
        return make(hint, expr, self.ranges, self.facts)

    def __add__(self, o):
        return self._make(int(self) + int(o), self.expr + _expr(o)) if _intlike(o) \
            else NotImplemented

    __radd__ = __add__

    def __sub__(self, o):
        return self._make(int(self) - int(o), self.expr - _expr(o)) if _intlike(o) \
            else NotImplemented

    def __rsub__(self, o):
        return self._make(int(o) - int(self), _expr(o) - self.expr) if _intlike(o) \
            else NotImplemented

    def __mul__(self, o):
        return self._make(int(self) * int(o), self.expr * _expr(o)) if _intlike(o) \
            else NotImplemented

    __rmul__ = __mul__

    def __neg__(self):
        return self._make(-int(self), -self.expr)

    def __pos__(self):
        return self

    def __floordiv__(self, o):
        if not _intlike(o):
            return NotImplemented
        return self._make(int(self) // int(o), se.floordiv(self.expr, _expr(o), self.ranges))

    def __rfloordiv__(self, o):
        if not _intlike(o):
            return NotImplemented
        return self._make(int(o) // int(self), se.floordiv(_expr(o), self.expr, self.ranges))

    def __mod__(self, o):
        if not _intlike(o):
            return NotImplemented
        return self._make(int(self) % int(o), se.mod(self.expr, _expr(o), self.ranges))

    def __rmod__(self, o):
        if not _intlike(o):
            return NotImplemented
        return self._make(int(o) % int(self), se.mod(_expr(o), self.expr, self.ranges))

    def __truediv__(self, o):
        raise SymbolicLoweringUnsupported(f"true division of the size {self}")

    def __float__(self):
        raise SymbolicLoweringUnsupported(f"the size {self} as a float constant")

    __rtruediv__ = __truediv__

    def __abs__(self):
        if self._decide(">=", 0):
            return self
        return -self

    # ---------------------------------------------------------- comparisons
    def _decide(self, op, o):
        if not _intlike(o):
            return NotImplemented
        rel = se.relation(op, self.expr, _expr(o))
        value = decide(rel, self.ranges, self.facts)
        if value is None:
            raise SymbolicLoweringUnsupported(
                f"the lowering compares sizes: {rel} depends on the sizes")
        return value

    def __eq__(self, o):
        return self._decide("==", o)

    def __ne__(self, o):
        return self._decide("!=", o)

    def __lt__(self, o):
        return self._decide("<", o)

    def __le__(self, o):
        return self._decide("<=", o)

    def __gt__(self, o):
        return self._decide(">", o)

    def __ge__(self, o):
        return self._decide(">=", o)

    def __bool__(self):
        return self._decide("!=", 0)

    def __hash__(self):
        return hash(self.expr)

    def __index__(self):
        return int.__int__(self)

    def __str__(self):
        text = str(self.expr)
        return f"({text})" if len(self.expr.terms) > 1 else text

    __repr__ = __str__

    def __reduce__(self):
        raise SymbolicLoweringUnsupported(f"the size {self} would be stored as a constant")


def decide(rel, ranges, facts=()):
    """The relation's truth for every size the ranges and facts (relations the capture's
    guards hold on every call) admit, or None: interval arithmetic (Rel.static_value),
    else the bounds of the polynomial with each symbol shifted to its lower bound (s =
    lo + t, t >= 0: with every coefficient of the t's of one sign, the constant bounds
    the polynomial from that side), else a fact that implies it or its negation."""
    value = _decide_any(rel, ranges)
    if value is not None or not facts:
        return value
    for want, answer in ((rel, True), (rel.negate(), False)):
        if want.op == "!=":
            continue
        for f in facts:
            if _implies(f, want, ranges):
                return answer
    return None


def _decide_any(rel, ranges):
    """_decide, else _decide_quotients."""
    value = _decide(rel, ranges)
    return value if value is not None else _decide_quotients(rel, ranges)


def _decide_quotients(rel, ranges):
    """rel decided with each quotient a // d (d > 0 a constant) and remainder a % d
    written through a new symbol r in [0, d - 1]: d * (a // d) = a - r and a % d = r, so
    `e <= 0` becomes `d*e <= 0` with its (linear) quotient terms replaced; a split
    reduction's rows, 8*((2*s0)//8) <= 2*s0, are decided so."""
    e = rel.expr
    ranges = dict(ranges)
    done = set()
    while True:
        calls = [a for m in e.terms for a, _ in m
                 if isinstance(a, se.Call) and a.fn in ("floordiv", "mod") and
                 a.b.is_const() and a.b.value > 0 and (a.a, a.b) not in done]
        if not calls:
            break
        num, den = calls[0].a, calls[0].b
        d = den.value
        done.add((num, den))
        r = se.Symbol(f"r{len(done)}")
        ranges[r] = (0, d - 1)
        rem = se.Expr.atom(r)
        out = se.Expr({})
        for m, c in e.terms.items():
            rest, kind = [], None
            for atom, p in m:
                if isinstance(atom, se.Call) and atom.a == num and atom.b == den:
                    if kind is not None or p != 1:
                        return None         # (a quotient squared, or times a remainder)
                    kind = atom.fn
                else:
                    rest.append((atom, p))
            term = se.Expr({tuple(rest): c})
            if kind == "floordiv":
                out = out + term * (num - rem)
            elif kind == "mod":
                out = out + term * rem * d
            else:
                out = out + term * d
        e = out
    if not done:
        return None
    return _decide(se.Rel(rel.op, e), ranges)


def _le_forms(rel):
    """rel as `e <= 0` relations (integers: e < 0 is e + 1 <= 0; e == 0 is two)."""
    if rel.op == "<=":
        return [rel.expr]
    if rel.op == "<":
        return [rel.expr + 1]
    if rel.op == "==":
        return [rel.expr, -rel.expr]
    return []


def _implies(fact, rel, ranges):
    """Whether fact implies rel for every size: each `r <= 0` of rel is at most some
    `f <= 0` of fact, or f times a positive symbol (r - s*f <= 0 decided by the
    ranges: a bound on rows times a row's stride bounds an index)."""
    fs = _le_forms(fact)
    if not fs:
        return False
    rs = _le_forms(rel)
    pos = [se.Expr.atom(s) for s in set().union(*(r.symbols() for r in rs))
           if s in ranges and ranges[s][0] >= 1]
    cands = [f * m for f in fs for m in [se.Expr.const(1)] + pos]
    return bool(rs) and all(
        any(_decide_any(se.Rel("<=", r - f), ranges) is True for f in cands) for r in rs)


def _decide(rel, ranges):
    value = rel.static_value(ranges)
    if value is not None:
        return value
    e = rel.expr
    shift = {}
    for atom in e.atoms():
        if not isinstance(atom, se.Symbol) or atom not in ranges or \
                ranges[atom][0] == -se.INF:
            return None
        shift[atom] = se.Expr.atom(atom) + ranges[atom][0]
    t = se.substitute(e, shift)
    c = t.terms.get((), 0)
    coeffs = [v for m, v in t.terms.items() if m]
    lo = c if all(v >= 0 for v in coeffs) else -se.INF
    hi = c if all(v <= 0 for v in coeffs) else se.INF
    if rel.op in ("==", "!="):
        eq = None
        if lo > 0 or hi < 0:
            eq = False
        return None if eq is None else (eq if rel.op == "==" else not eq)
    if rel.op == "<":
        return True if hi < 0 else False if lo >= 0 else None
    return True if hi <= 0 else False if lo > 0 else None


def _intlike(o):
    return isinstance(o, int) and not isinstance(o, bool)


def _expr(o):
    return o.expr if isinstance(o, SizeInt) else se.Expr.const(int(o))


def make(hint, expr, ranges, facts=()):
    """A SizeInt, or a plain int for a constant expression."""
    if expr.is_const():
        return int(expr.value)
    return SizeInt(hint, expr, ranges, facts)


def same_sizes(a, b):
    """Whether two shapes are the same at every size (the same expressions): a
    structural comparison, where `==` of SizeInts answers only what holds at every
    size and raises otherwise."""
    a, b = tuple(a), tuple(b)
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if isinstance(x, SizeInt) or isinstance(y, SizeInt):
            if _expr(x) != _expr(y):
                return False
        elif x != y:
            return False
    return True


def is_symbolic(v):
    return isinstance(v, SizeInt)


def any_symbolic(values):
    return any(isinstance(v, SizeInt) for v in values)


def sym_minmax(fn):
    def run(a, b):
        if not (isinstance(a, SizeInt) or isinstance(b, SizeInt)):
            return (min if fn == "min" else max)(a, b)
        s = a if isinstance(a, SizeInt) else b
        f = se.minimum if fn == "min" else se.maximum
        hint = (min if fn == "min" else max)(int(a), int(b))
        return make(hint, f(_expr(a), _expr(b), s.ranges), s.ranges, s.facts)
    return run


# ---------------------------------------------------------------- graph values

class Sizes:
    """The symbols of one graph being lowered: SizeInts from its SymInts, and where
    each symbol's value comes from on a call (an input's size, or a size input)."""

    def __init__(self, env):
        self.env = env
        self.ranges = env.ranges()
        self.hints = env.hints()
        # the relations the capture's (and AOT's) guards check on every call
        self.facts = tuple(g.rel for g in env.guards)
        self.binds = {}              # Symbol -> (input, dim); dim -1: a size input

    def size(self, v):
        """A SymInt (or int) as a SizeInt (or int)."""
        if isinstance(v, SymInt):
            e = self.env.simplify(v.expr)
            return make(se.evaluate(e, self.hints), e, self.ranges, self.facts)
        if isinstance(v, SizeInt) or not _intlike(v):
            return v
        return int(v)

    def bind(self, value, i, dim):
        """Input i's size at dim (or the size input i, dim -1) is value."""
        if isinstance(value, SizeInt):
            s = value.expr.as_symbol()
            if s is not None and s not in self.binds:
                self.binds[s] = (i, dim)


# operator functions on sizes a symbolic prim graph holds (SymNodes' vocabulary)
def _sym_min_max():
    from ..fx.shape_env import sym_max, sym_min
    return {sym_min: sym_minmax("min"), sym_max: sym_minmax("max"),
            min: sym_minmax("min"), max: sym_minmax("max")}


SIZE_FUNCTIONS = {operator.add: operator.add, operator.sub: operator.sub,
                  operator.mul: operator.mul, operator.floordiv: operator.floordiv,
                  operator.mod: operator.mod, operator.neg: operator.neg}
SIZE_FUNCTIONS.update(_sym_min_max())


# ---------------------------------------------------------------- the plan

class SymOutput(NamedTuple):
    """A graph output that is a size: expression `expr`'s value (an int)."""
    kind: str
    expr: int


def kernel_size_args(kernel):
    """The distinct symbolic expressions a kernel takes as size arguments, in order:
    its sizes, then its instructions' coefficients and offsets."""
    seen = {}

    def add(v):
        if isinstance(v, SizeInt) and v.expr not in seen:
            seen[v.expr] = v
    for n in kernel.sizes:
        add(n)
    for s in kernel.stmts:
        if s.index is not None:
            for c in s.index.coeffs:
                add(c)
            add(s.index.offset)
        for v in (s.value if isinstance(s.value, tuple) else (s.value,)):
            for w in (v if isinstance(v, tuple) else (v,)):
                add(w)      # (a bound's size, a gather's or scatter's strides)
    return list(seen.values())


def spec_int(v, args):
    """An int of a kernel spec: the int, or (k,) for size argument k (args: expr -> k)."""
    if isinstance(v, SizeInt):
        return (args[v.expr],)
    return int(v)


class _Table:
    def __init__(self, sizes):
        self.sizes = sizes
        self.index = {}
        self.progs = []
        order = list(sizes.binds)
        self.sym_index = {s: k for k, s in enumerate(order)}
        self.binds = tuple(sizes.binds[s] for s in order)

    def expr(self, e):
        if e not in self.index:
            for s in e.symbols():
                if s not in self.sym_index:
                    raise SymbolicLoweringUnsupported(
                        f"no input gives the size {s} (in {e}) on its own")
            prog = []
            for ins in se.postfix(e, self.sym_index):
                if isinstance(ins, se.PushSym):
                    prog += (0, ins.index)
                elif isinstance(ins, se.PushConst):
                    prog += (1, int(ins.value))
                else:
                    prog += (se.APPLY_FUNCTIONS.index(ins.fn) + 2, 0)
            self.index[e] = len(self.progs)
            self.progs.append(tuple(prog))
        return self.index[e]

    def int(self, v):
        if isinstance(v, SizeInt):
            return (self.expr(v.expr),)
        if not _intlike(v):
            raise SymbolicLoweringUnsupported(f"a plan field {v!r}")
        return int(v)

    def ints(self, vs):
        return tuple(self.int(v) for v in vs)


def finish(lowered, sizes, size_inputs):
    """The symbolic plan tuple of a Lowered whose fields hold SizeInts."""
    from . import fusion
    from .plan import (BufferSpec, ExternStep, InputSpec, KernelStep, MatmulStep, View)
    t = _Table(sizes)
    inputs = tuple(InputSpec(t.ints(i.sizes), t.ints(i.strides), i.written)
                   for i in lowered.inputs)
    buffers = tuple(BufferSpec(b.dtype, t.ints(b.sizes), b.extern) for b in lowered.buffers)

    def view(v):
        return View(v.ref, t.ints(v.sizes), t.ints(v.strides), t.int(v.offset))

    def kernel_step(s):
        args = kernel_size_args(s.ir)
        syms = tuple(t.expr(a.expr) for a in args)
        if not syms:
            return s
        points = math.prod(s.ir.sizes)
        return KernelStep(s.kind, s.kernel, s.refs, t.int(s.outer), s.parallel, s.ir, -1,
                          syms, t.int(points))

    steps = []
    for s in lowered.steps:
        if isinstance(s, KernelStep):
            steps.append(kernel_step(s))
        elif isinstance(s, MatmulStep):
            # BLAS with the call's dimensions (blas.c reads them from the views)
            if s.epilogues:
                raise SymbolicLoweringUnsupported("GEMM epilogues over symbolic sizes")
            steps.append(MatmulStep(s.kind, view(s.a), view(s.b), s.out))
        elif isinstance(s, ExternStep):
            # the eager kernel on this call's tensors (its other arguments are constants:
            # a size argument would be a graph value, which extern refuses); its results'
            # shapes are checked against the evaluated ones. Counted: not a kernel yet.
            from ..capture.exc import counters
            counters["llvm_dynamic_extern"][s.name] += 1
            steps.append(ExternStep(s.kind, s.fn, tuple(view(v) for v in s.views),
                                    s.slots, s.name))
        else:
            raise SymbolicLoweringUnsupported(f"step {s!r}")
    outputs = []
    for o in lowered.outputs:
        if o is None:
            outputs.append(None)
        elif isinstance(o, View):
            outputs.append(view(o))
        else:           # a size
            outputs.append(SymOutput("sym", t.expr(_expr(o))))
    schedule = (fusion.PARALLEL_MIN, fusion.CHUNK_POINTS, fusion.CHUNK_MIN_POINTS,
                fusion.MIN_CHUNKS)
    record = (t.binds, tuple(t.progs), tuple(size_inputs), schedule)
    return (inputs, buffers, tuple(steps), tuple(outputs), record)
