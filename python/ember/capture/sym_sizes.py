"""Symbolic sizes in a capture ([dynamic]): inputs whose dims are symbols, the graph
values computing size expressions, and the guards a ShapeEnv leaves.

An input tensor with symbolic dims (capture/dynamic.py decides which) gets a SymFake
whose sizes are the ShapeEnv's symbols and whose strides are the contiguous strides of
those sizes. Every new symbol is a graph input of its own, a placeholder named after
it (`s0: Sym(s0)`) whose value the compiled frame reads from the tensor
(`SizeSource`: `x.size(0)`). A size expression an op or the user's code needs as a
value (`x.view(2 * s0, -1)`) becomes graph nodes over those placeholders
(`sym_node`), one per distinct expression.

The guards: the input's TENSOR_MATCH leaves its symbolic sizes and the strides that
depend on them open; SYM_REL guards (csrc/capture/guards.c) check, in C, every size a
symbol stands for is at least 2 (sizes 0 and 1 are specialised), the dims duck sizing
gave one symbol are equal, the open strides are the contiguous ones, and every
relation the capture branched on (`s0 > 4`, `s0 == s1`) still holds.
"""
from __future__ import annotations

import operator

from .. import fx
from ..fx.node import map_arg
from ..fx import sym_expr as se
from ..fx.shape_env import ShapeEnv, SymInt
from ..fx.sym_fake import SymFake
from ..ops import meta as M
from .exc import Unsupported
from .source import SizeSource


class SymbolicUnsupported(Unsupported):
    """A symbolic capture met what it cannot do with symbolic sizes: the frame is
    captured again with its sizes specialised."""


class SymbolicInputs:
    """The symbolic side of one capture (OutputGraph.sym)."""

    def __init__(self, out):
        self.out = out
        self.env = ShapeEnv()
        self.sources = {}         # "x.size(0)" -> SizeSource
        self.placeholders = {}    # Symbol -> placeholder node
        self.nodes = {}           # Expr -> node computing it
        self.open = {}            # input Source -> (sizes, strides) left open in its
                                  # TENSOR_MATCH: SymInts by dim

    def fake(self, value, source, dims, after):
        """A SymFake for input `value` with `dims` symbolic; new symbols become
        placeholders inserted after node `after`."""
        shape = []
        for d, n in enumerate(value.shape):
            if d not in dims:
                shape.append(n)
                continue
            src = SizeSource(source, d)
            self.sources[src.name()] = src
            known = len(self.env.symbols)
            sym = self.env.create_symbol(n, src.name())
            if len(self.env.symbols) > known:
                after = self._placeholder(sym, src, n, after)
            shape.append(sym)
        if not any(isinstance(n, SymInt) for n in shape):
            return None
        strides = M.contiguous_strides(shape)
        self.open[source] = ({d: n for d, n in enumerate(shape) if isinstance(n, SymInt)},
                             {d: n for d, n in enumerate(strides) if isinstance(n, SymInt)})
        fake = SymFake.make(shape, strides, value.dtype)
        if value.requires_grad:
            fake.requires_grad_(True)
        return fake

    def int_input(self, value, source):
        """A SymVar for an int argument (its own source), a graph input of its own
        (None for 0 and 1, which stay constants)."""
        from .variables import SymVar
        if value in (0, 1):
            return None
        known = len(self.env.symbols)
        self.sources[source.name()] = source
        sym = self.env.create_symbol(value, source.name())
        if len(self.env.symbols) > known:
            self._placeholder(sym, source, value, None)
        return SymVar(sym)

    def _placeholder(self, sym, src, hint, after):
        """The graph input of a new symbol, after node `after` (None: after the other
        placeholders, which come before every op)."""
        (symbol,) = sym.expr.symbols()
        graph = self.out.graph
        if after is None:
            placeholders = [n for n in graph.nodes if n.op == "placeholder"]
            first_op = next((n for n in graph.nodes if n.op != "placeholder"), None)
            at = graph.inserting_after(placeholders[-1]) if placeholders else \
                graph.inserting_before(first_op)
        else:
            at = graph.inserting_after(after)
        with at:
            node = graph.placeholder(symbol.name, type_expr=SymTypeExpr(symbol.name))
        node.meta["example_value"] = sym
        node.meta["source"] = src.name()
        self.placeholders[symbol] = node
        self.nodes[sym.expr] = node
        self.out.inputs.append((src, node, hint))
        return node

    def node(self, value):
        """The graph value of a size: an int as itself, a SymInt as nodes computing it."""
        if not isinstance(value, SymInt):
            return value
        return self._expr_node(value.expr)

    def _expr_node(self, expr):
        known = self.nodes.get(expr)
        if known is not None:
            return known
        if expr.is_const():
            return expr.value
        graph = self.out.graph
        total = None
        for m, c in sorted(expr.terms.items(), key=lambda mc: str(se.Expr({mc[0]: 1}))):
            term = None
            for atom, p in m:
                a = self._atom_node(atom)
                for _ in range(p):
                    term = a if term is None else graph.call_function(operator.mul,
                                                                      (term, a), {})
            if term is None:
                term = c
            elif c != 1:
                term = graph.call_function(operator.mul, (term, c), {})
            total = term if total is None else graph.call_function(operator.add,
                                                                   (total, term), {})
        self.nodes[expr] = total
        return total

    _CALLS = {"floordiv": operator.floordiv, "mod": operator.mod, "min": min, "max": max}

    def _atom_node(self, atom):
        if isinstance(atom, se.Symbol):
            node = self.placeholders.get(atom)
            if node is None:
                raise SymbolicUnsupported(f"size symbol {atom} has no graph input")
            return node
        a, b = self._expr_node(atom.a), self._expr_node(atom.b)
        return self.out.graph.call_function(self._CALLS[atom.fn], (a, b), {})

    # ------------------------------------------------------------ guards

    def guard_tuples(self):
        """SYM_REL guard tuples (csrc/capture/guards.c) for what the capture assumed."""
        env, out = self.env, []
        first = {s: self.sources[info.sources[0]] for s, info in env.symbols.items()}

        def rel_guard(rel, text):
            syms = sorted(rel.expr.symbols())
            index = {s: i for i, s in enumerate(syms)}
            prog = []
            for ins in se.postfix(rel.expr, index):
                if isinstance(ins, se.PushSym):
                    prog += [0, ins.index]
                elif isinstance(ins, se.PushConst):
                    prog += [1, ins.value]
                else:
                    prog += [_APPLY[ins.fn], 0]
            where = ", ".join(f"{s} = {first[s].name()}" for s in syms)
            out.append(("SYM_REL", tuple(first[s].getter() for s in syms), tuple(prog),
                        rel.op, f"{text} ({where})" if where else text))

        for s, info in env.symbols.items():
            lo, hi = info.range
            rel_guard(se.relation(">=", se.Expr.atom(s), lo), f"{s} >= {lo}")
            if hi != se.INF:
                rel_guard(se.relation("<=", se.Expr.atom(s), hi), f"{s} <= {hi}")
            for other in info.sources[1:]:
                src = self.sources[other]
                # duck sizing: another dim of the same size read as the same symbol
                out.append(("SYM_REL", (first[s].getter(), src.getter()),
                            (0, 0, 0, 1, 1, -1, 3, 0, 2, 0), "==",
                            f"{first[s].name()} == {src.name()} (both {s})"))
        for source, (_, strides) in self.open.items():
            for d, stride in strides.items():
                # an open stride: the contiguous stride of the symbolic sizes
                src = SizeSource(source, d, stride=True)
                t = se.Symbol(f"{source.name()}.stride({d})")
                first[t] = src
                rel_guard(se.Rel("==", se.Expr.atom(t) - env.simplify(stride.expr)),
                          f"{src.name()} == {stride}")
        for s, rep in env.replacements.items():
            rel_guard(se.Rel("==", se.Expr.atom(s) - rep), f"{s} == {rep}")
        for g in env.guards:
            rel_guard(g.rel, str(g.rel))
        return out

    def open_dims(self, source):
        """(dims, stride dims) an input's TENSOR_MATCH leaves to the SYM_REL guards."""
        sizes, strides = self.open.get(source, ({}, {}))
        return tuple(sizes), tuple(strides)


_APPLY = {"add": 2, "mul": 3, "floordiv": 4, "mod": 5, "min": 6, "max": 7}


class SymTypeExpr:
    """The annotation of a size placeholder: prints as Sym(s0)."""

    def __init__(self, name):
        self.name = name

    @property
    def sym_annotation(self):
        return f"Sym({self.name})"

    def __repr__(self):
        return self.sym_annotation


def has_symbols(gm):
    return any(n.op == "placeholder" and isinstance(n.type, SymTypeExpr)
               for n in gm.graph.nodes)


def specialize(gm, sizes):
    """A copy of gm whose size placeholders are the constants `sizes` ({name: int})
    and whose arithmetic on them is folded: a static graph for backends that compile
    fixed sizes. Its placeholders are gm's tensor placeholders, in order."""
    graph = fx.Graph()
    env = {}
    for node in gm.graph.nodes:
        if node.op == "placeholder" and isinstance(node.type, SymTypeExpr):
            env[node] = sizes[node.target]
            continue
        args = map_arg(node.args, lambda n: env[n])
        kwargs = map_arg(node.kwargs, lambda n: env[n])
        if node.op == "call_function" and node.target in _FOLDABLE and \
                not _holds_node((args, kwargs)):
            env[node] = node.target(*args, **kwargs)
            continue
        new = graph.create_node(node.op, node.target, args, kwargs, name=node.name,
                                type_expr=node.type)
        new.meta = dict(node.meta)
        env[node] = new
    out = fx.GraphModule(gm, graph, class_name=type(gm).__name__)
    out.meta = dict(getattr(gm, "meta", {}))
    return out


def split_constant_outputs(gm):
    """gm with outputs that are not graph values (sizes folded to ints) taken out:
    returns ({output position: the int}, the number of outputs); backends compile
    tensor outputs only."""
    output = next(n for n in gm.graph.nodes if n.op == "output")
    values = output.args[0]
    consts = {i: v for i, v in enumerate(values) if not isinstance(v, fx.Node)}
    if consts:
        output.args = (tuple(v for v in values if isinstance(v, fx.Node)),)
        gm.recompile()
    return consts, len(values)


_FOLDABLE = {operator.add, operator.mul, operator.sub, operator.floordiv, operator.mod,
             operator.neg, min, max}


def _holds_node(v):
    found = []
    map_arg(v, lambda n: found.append(n) or n)
    return bool(found)


def sym_arg_positions(gm):
    """(indices of the size placeholders, their names) among gm's placeholders."""
    idx, names = [], []
    for i, n in enumerate(n for n in gm.graph.nodes if n.op == "placeholder"):
        if isinstance(n.type, SymTypeExpr):
            idx.append(i)
            names.append(n.target)
    return idx, names


class specializing:
    """A graph with size inputs, for a backend that compiles fixed sizes: on each call
    the backend's compilation of the graph at the call's sizes (specialize), made once
    per distinct sizes and kept. The capture, its guards and the cache entry serve
    every size; only the backend's work is per size. Counted in
    counters["stats"]["size_specializations"]."""

    def __init__(self, gm, backend):
        self.gm = gm
        self.backend = backend
        self.positions, self.names = sym_arg_positions(gm)
        self.skip = set(self.positions)
        self.compiled = {}

    def __call__(self, *args):
        key = tuple(args[i] for i in self.positions)
        fn = self.compiled.get(key)
        tensors = [a for i, a in enumerate(args) if i not in self.skip]
        if fn is None:
            from .exc import counters
            counters["stats"]["size_specializations"] += 1
            static = specialize(self.gm, dict(zip(self.names, key)))
            consts, total = split_constant_outputs(static)
            fn = self.compiled[key] = _with_constants(self.backend(static, tensors), consts,
                                                      total)
        return fn(*tensors)


def _with_constants(fn, consts, total):
    """fn, its outputs with the constant ones put back at their positions."""
    if not consts:
        return fn

    def run(*args):
        outs = iter(fn(*args))
        return tuple(consts[i] if i in consts else next(outs) for i in range(total))
    return run
