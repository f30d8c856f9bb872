"""Symbolic sizes ([dynamic]): SymInt and SymBool values and the ShapeEnv that owns
their symbols and the guards taken on them.

A SymInt is an integer expression (sym_expr.Expr) together with its ShapeEnv; its hint
is its value at the sizes seen when the graph was captured. Arithmetic on SymInts makes
SymInts; a comparison makes a SymBool, and asking a SymBool for its truth value (an `if`
on it, `and`/`or`, `assert`) answers with the hint's outcome and records that outcome as a
guard, unless the symbols' ranges decide the relation already (a size symbol is at least
2, so `s0 == 1` is False with no guard). `int(s)` (and every use as an index) specialises:
it guards `s == hint`. Like PyTorch's, a SymInt is not hashable.

Sizes 0 and 1 stay constants (they are not given symbols), and by default sizes equal at
capture share one symbol ("duck sizing"): then each further source of that symbol must
still equal the first on later calls, which `bind` checks.

`check(sizes)` runs every guard on new sizes and returns the first that fails, in words
("s0 > 1", "x.size(0) == y.size(1)"), which becomes the recompile reason.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from . import sym_expr as se
from .sym_expr import Expr, Rel, Symbol


@dataclass
class SymbolInfo:
    symbol: Symbol
    hint: int
    sources: list = field(default_factory=list)   # the first binds the symbol
    range: tuple = (2, se.INF)


@dataclass(frozen=True)
class Guard:
    rel: Rel          # holds on the captured sizes
    where: str = ""   # the user's file:line, when known

    def __str__(self):
        return str(self.rel)


class ShapeEnv:
    def __init__(self, *, specialize_zero_one=True, duck_shape=True):
        self.specialize_zero_one = specialize_zero_one
        self.duck_shape = duck_shape
        self.symbols = {}          # Symbol -> SymbolInfo
        self.guards = []           # Guard, in the order taken
        self.replacements = {}     # Symbol -> Expr learnt from equality guards
        self._by_hint = {}

    # ------------------------------------------------------------ symbols
    def create_symbol(self, hint, source):
        """A SymInt for a size `hint` read from `source` (a string such as
        "x.size(0)"); 0 and 1 come back as plain ints when they are specialised."""
        hint = int(hint)
        if hint < 0:
            raise ValueError(f"ShapeEnv: a size cannot be negative ({source} = {hint})")
        if self.specialize_zero_one and hint in (0, 1):
            return hint
        if self.duck_shape and hint in self._by_hint:
            info = self.symbols[self._by_hint[hint]]
            info.sources.append(source)
            return SymInt(self, Expr.atom(info.symbol))
        sym = Symbol(f"s{len(self.symbols)}")
        lo = 2 if self.specialize_zero_one else 0
        self.symbols[sym] = SymbolInfo(sym, hint, [source], (lo, se.INF))
        self._by_hint.setdefault(hint, sym)
        return SymInt(self, Expr.atom(sym))

    def ranges(self):
        return {s: info.range for s, info in self.symbols.items()}

    def simplify(self, expr):
        if not self.replacements:
            return expr
        return se.substitute(expr, self.replacements)

    def hints(self):
        return {s.name: info.hint for s, info in self.symbols.items()}

    def hint(self, expr):
        return se.evaluate(expr, self.hints())

    # ------------------------------------------------------------ guards
    def evaluate(self, rel, where=""):
        """The truth of `rel` at the captured sizes, guarded unless ranges decide it."""
        rel = Rel(rel.op, self.simplify(rel.expr))
        static = rel.static_value(self.ranges())
        if static is not None:
            return static
        value = rel.evaluate(self.hints())
        held = rel if value else rel.negate()
        self.guards.append(Guard(held, where))
        self._refine(held)
        return value

    def _refine(self, rel):
        """Learn from a guard: s == t or s == c replaces s; s < c, s > c narrow s's range."""
        expr = rel.expr
        syms = expr.symbols()
        if len(syms) == 0:
            return
        if rel.op == "==":
            for s in sorted(syms):
                # expr = c*s + rest with c = +-1 and s not in rest: s = -rest/c
                coeff = expr.terms.get(((s, 1),), 0)
                rest = expr - Expr.atom(s) * coeff
                if coeff in (1, -1) and s not in rest.symbols():
                    self.replacements[s] = rest * (-coeff)
                    self.replacements = {k: se.substitute(v, self.replacements)
                                         for k, v in self.replacements.items()}
                    return
        if rel.op in ("<", "<=") and len(expr.terms) <= 2:
            s = expr.as_symbol() if () not in expr.terms else \
                Expr({m: c for m, c in expr.terms.items() if m}).as_symbol()
            neg = Expr({m: -c for m, c in expr.terms.items() if m}).as_symbol()
            c = expr.terms.get((), 0)
            strict = 1 if rel.op == "<" else 0
            if s is not None and s in self.symbols:         # s + c < 0: s <= -c - strict
                lo, hi = self.symbols[s].range
                self.symbols[s].range = (lo, min(hi, -c - strict))
            elif neg is not None and neg in self.symbols:   # -s + c < 0: s >= c + strict
                lo, hi = self.symbols[neg].range
                self.symbols[neg].range = (max(lo, c + strict), hi)

    def guard_texts(self):
        return [str(g) for g in self.guards]

    def bind(self, sizes):
        """Symbol values from {source: size} of a new call, or (None, reason) when a
        size that was a symbol is now 0 or 1, or two sources of one symbol differ."""
        values = {}
        for s, info in self.symbols.items():
            first = sizes[info.sources[0]]
            if self.specialize_zero_one and first in (0, 1):
                return None, f"{info.sources[0]} == {first} (was a symbol, {s})"
            for other in info.sources[1:]:
                if sizes[other] != first:
                    return None, f"{info.sources[0]} == {other}"
            values[s.name] = first
        return values, None

    def check(self, sizes):
        """None when every guard holds for {source: size}, else the failing one in words."""
        values, reason = self.bind(sizes)
        if reason is not None:
            return reason
        for s, rep in self.replacements.items():
            if values[s.name] != se.evaluate(rep, values):
                return f"{s} == {rep}"
        for g in self.guards:
            if not g.rel.evaluate(values):
                return str(g)
        return None


# ---------------------------------------------------------------- values

def _expr_of(value):
    return value.expr if isinstance(value, SymInt) else se.as_expr(value)


class SymInt:
    """An integer size expression of a ShapeEnv's symbols."""
    __slots__ = ("env", "expr")

    def __init__(self, env, expr):
        self.env = env
        self.expr = expr

    def _wrap(self, expr):
        return _make(self.env, expr)

    @property
    def hint(self):
        return self.env.hint(self.expr)

    def __add__(self, other):
        return self._wrap(self.expr + _expr_of(other))

    __radd__ = __add__

    def __sub__(self, other):
        return self._wrap(self.expr - _expr_of(other))

    def __rsub__(self, other):
        return self._wrap(_expr_of(other) - self.expr)

    def __mul__(self, other):
        return self._wrap(self.expr * _expr_of(other))

    __rmul__ = __mul__

    def __neg__(self):
        return self._wrap(-self.expr)

    def __pos__(self):
        return self

    def __floordiv__(self, other):
        return self._wrap(se.floordiv(self.expr, _expr_of(other), self.env.ranges()))

    def __rfloordiv__(self, other):
        return self._wrap(se.floordiv(_expr_of(other), self.expr, self.env.ranges()))

    def __mod__(self, other):
        return self._wrap(se.mod(self.expr, _expr_of(other), self.env.ranges()))

    def __rmod__(self, other):
        return self._wrap(se.mod(_expr_of(other), self.expr, self.env.ranges()))

    def __truediv__(self, other):
        return int(self) / (int(other) if isinstance(other, SymInt) else other)

    def __rtruediv__(self, other):
        return other / int(self)

    def _rel(self, op, other):
        if not isinstance(other, (int, SymInt)) or isinstance(other, bool):
            return NotImplemented
        return SymBool(self.env, se.relation(op, self.expr, _expr_of(other)))

    def __eq__(self, other):
        return self._rel("==", other)

    def __ne__(self, other):
        return self._rel("!=", other)

    def __lt__(self, other):
        return self._rel("<", other)

    def __le__(self, other):
        return self._rel("<=", other)

    def __gt__(self, other):
        return self._rel(">", other)

    def __ge__(self, other):
        return self._rel(">=", other)

    def __bool__(self):
        return bool(self != 0)

    def __int__(self):
        """Specialise: the graph is valid only at this value from now on."""
        hint = self.hint
        self.env.evaluate(se.relation("==", self.expr, hint))
        return hint

    __index__ = __int__

    def __float__(self):
        return float(int(self))

    __hash__ = None   # as torch's SymInt: unhashable

    def __repr__(self):
        return str(self.expr)


class SymBool:
    """A relation between SymInts; its truth value is guarded."""
    __slots__ = ("env", "rel")

    def __init__(self, env, rel):
        self.env = env
        self.rel = rel

    def __bool__(self):
        return self.env.evaluate(self.rel)

    def __invert__(self):
        return SymBool(self.env, self.rel.negate())

    __hash__ = None

    def __repr__(self):
        return str(self.rel)


def _make(env, expr):
    expr = env.simplify(expr)
    return expr.value if expr.is_const() else SymInt(env, expr)


def sym_min(a, b):
    """min of sizes without a guard: a min expression when either is a SymInt."""
    if isinstance(a, SymInt) or isinstance(b, SymInt):
        env = (a if isinstance(a, SymInt) else b).env
        return _make(env, se.minimum(_expr_of(a), _expr_of(b), env.ranges()))
    return min(a, b)


def sym_max(a, b):
    """max of sizes without a guard: a max expression when either is a SymInt."""
    if isinstance(a, SymInt) or isinstance(b, SymInt):
        env = (a if isinstance(a, SymInt) else b).env
        return _make(env, se.maximum(_expr_of(a), _expr_of(b), env.ranges()))
    return max(a, b)
