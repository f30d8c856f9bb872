"""Integer expressions over size symbols: the values symbolic sizes ([dynamic]) carry.

An expression is kept in one canonical form, a polynomial with integer coefficients
over atoms, so that equal expressions compare and hash equal: `s0 + s0` and `2*s0` are
one value, `(s0 + 1) - 1` is `s0`. Atoms are symbols and the operations a polynomial
cannot hold: floor division, modulo, min and max of polynomials, which simplify when
the value ranges of their operands decide them (`(2*s0 + 1) // 2` is `s0`, `max(s0, 1)`
is `s0` for a size symbol, which is at least 2).

Every symbol has a range; size symbols start at [2, inf) because sizes 0 and 1 stay
specialised (as in PyTorch). Ranges make some relations static: `s0 == 1` is False and
`s0 >= 0` is True without a guard. Relations are kept as `expr OP 0` with OP one of
==, !=, <, <=.

Expressions print as Python (`2*s0*s1 + s0 - 1`, `(s0//4)`, `max(s0, s1)`), evaluate
with bindings, and flatten into a postfix program (a closed set of named records) that
the guard evaluator runs.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Union

INF = math.inf


# ---------------------------------------------------------------- atoms

@dataclass(frozen=True, order=True)
class Symbol:
    """A size symbol, named s0, s1, ... by its ShapeEnv."""
    name: str

    def __str__(self):
        return self.name


@dataclass(frozen=True)
class Call:
    """An atom a polynomial cannot hold: fn(a, b) for fn in FUNCTIONS."""
    fn: str
    a: "Expr"
    b: "Expr"

    def __post_init__(self):
        if self.fn not in FUNCTIONS:
            raise ValueError(f"sym_expr: unknown function {self.fn!r}")

    def __str__(self):
        if self.fn == "floordiv":
            return f"({_operand(self.a)}//{_operand(self.b)})"
        if self.fn == "mod":
            return f"({_operand(self.a)} % {_operand(self.b)})"
        return f"{self.fn}({self.a}, {self.b})"

    def sort_key(self):
        return (1, self.fn, str(self.a), str(self.b))


FUNCTIONS = ("floordiv", "mod", "min", "max")


def _operand(expr):
    """expr as an operand of // or %: parenthesised unless one atom or a constant >= 0."""
    if len(expr.terms) <= 1:
        (m, c), = expr.terms.items() if expr.terms else (((), 0),)
        if (m == () and c >= 0) or (c == 1 and len(m) == 1 and m[0][1] == 1):
            return str(expr)
    return f"({expr})"
Atom = Union[Symbol, Call]


def _atom_key(atom):
    return (0, atom.name) if isinstance(atom, Symbol) else atom.sort_key()


# ---------------------------------------------------------------- expressions

class Expr:
    """sum(coeff * prod(atom ** power)) + const, with integer coefficients.

    `terms` maps a monomial (a tuple of (atom, power) sorted by atom) to its nonzero
    coefficient; the empty monomial is the constant term.
    """
    __slots__ = ("terms", "_hash")

    def __init__(self, terms):
        self.terms = {m: c for m, c in terms.items() if c != 0}
        self._hash = None

    # construction
    @staticmethod
    def const(value):
        if isinstance(value, bool) or not isinstance(value, int):
            value = _as_int(value)
        return Expr({(): value})

    @staticmethod
    def atom(atom):
        return Expr({((atom, 1),): 1})

    @staticmethod
    def symbol(name):
        return Expr.atom(Symbol(name))

    # inspection
    def is_const(self):
        return all(m == () for m in self.terms)

    @property
    def value(self):
        """The constant's value (an expression with symbols has none)."""
        if not self.is_const():
            raise ValueError(f"sym_expr: {self} is not a constant")
        return self.terms.get((), 0)

    def as_symbol(self):
        """The Symbol when the expression is exactly one symbol, else None."""
        if len(self.terms) == 1:
            (m, c), = self.terms.items()
            if c == 1 and len(m) == 1 and m[0][1] == 1 and isinstance(m[0][0], Symbol):
                return m[0][0]
        return None

    def atoms(self):
        """Every atom, those inside calls included."""
        out = set()
        for m in self.terms:
            for atom, _ in m:
                out.add(atom)
                if isinstance(atom, Call):
                    out |= atom.a.atoms() | atom.b.atoms()
        return out

    def symbols(self):
        return {a for a in self.atoms() if isinstance(a, Symbol)}

    def __eq__(self, other):
        if isinstance(other, int) and not isinstance(other, bool):
            other = Expr.const(other)
        return isinstance(other, Expr) and self.terms == other.terms

    def __hash__(self):
        if self._hash is None:
            self._hash = hash(frozenset(self.terms.items()))
        return self._hash

    # arithmetic
    def __add__(self, other):
        other = as_expr(other)
        terms = dict(self.terms)
        for m, c in other.terms.items():
            terms[m] = terms.get(m, 0) + c
        return Expr(terms)

    __radd__ = __add__

    def __neg__(self):
        return Expr({m: -c for m, c in self.terms.items()})

    def __sub__(self, other):
        return self + (-as_expr(other))

    def __rsub__(self, other):
        return as_expr(other) - self

    def __mul__(self, other):
        other = as_expr(other)
        terms = {}
        for m1, c1 in self.terms.items():
            for m2, c2 in other.terms.items():
                m = _monomial_mul(m1, m2)
                terms[m] = terms.get(m, 0) + c1 * c2
        return Expr(terms)

    __rmul__ = __mul__

    def __repr__(self):
        return f"Expr({self})"

    def __str__(self):
        if not self.terms:
            return "0"
        parts = []
        monos = sorted((m for m in self.terms if m),
                       key=lambda m: (-sum(p for _, p in m), [_atom_key(a) for a, _ in m]))
        for m in monos:
            c = self.terms[m]
            body = "*".join(str(a) if p == 1 else f"{a}**{p}" for a, p in m)
            mag = abs(c)
            text = body if mag == 1 else f"{mag}*{body}"
            parts.append(("-" if c < 0 else "+", text))
        if () in self.terms:
            c = self.terms[()]
            parts.append(("-" if c < 0 else "+", str(abs(c))))
        sign, first = parts[0]
        out = ("-" if sign == "-" else "") + first
        for sign, text in parts[1:]:
            out += f" {sign} {text}"
        return out


def _monomial_mul(m1, m2):
    powers = dict(m1)
    for atom, p in m2:
        powers[atom] = powers.get(atom, 0) + p
    return tuple(sorted(powers.items(), key=lambda ap: _atom_key(ap[0])))


def _as_int(value):
    if hasattr(value, "__index__") and not isinstance(value, bool):
        return value.__index__()
    raise TypeError(f"sym_expr: expected an integer, got {type(value).__name__}")


def as_expr(value):
    if isinstance(value, Expr):
        return value
    if isinstance(value, bool):
        return Expr.const(int(value))
    return Expr.const(_as_int(value))


# ---------------------------------------------------------------- ranges

def _imul(a, b):
    """Interval product, with 0 * inf = 0 (a zero bound multiplies to zero)."""
    prods = []
    for x in a:
        for y in b:
            prods.append(0 if x == 0 or y == 0 else x * y)
    return (min(prods), max(prods))


def _ipow(r, p):
    lo, hi = r
    if p % 2 == 1 or lo >= 0:       # monotone
        return (_pw(lo, p), _pw(hi, p))
    if hi <= 0:
        return (_pw(hi, p), _pw(lo, p))
    return (0, max(_pw(lo, p), _pw(hi, p)))


def _pw(x, p):
    return x ** p if not math.isinf(x) else (x if p % 2 == 1 else INF)


def value_range(expr, ranges):
    """(lo, hi) of expr when each symbol lies in ranges[symbol] (inclusive; inf
    bounds allowed). Symbols without a range are unbounded."""
    lo = hi = 0
    for m, c in expr.terms.items():
        r = (1, 1)
        for atom, p in m:
            r = _imul(r, _ipow(_atom_range(atom, ranges), p))
        r = _imul(r, (c, c))
        lo, hi = lo + r[0], hi + r[1]
    return (lo, hi)


def _atom_range(atom, ranges):
    if isinstance(atom, Symbol):
        return ranges.get(atom, (-INF, INF))
    a = value_range(atom.a, ranges)
    b = value_range(atom.b, ranges)
    if atom.fn == "min":
        return (min(a[0], b[0]), min(a[1], b[1]))
    if atom.fn == "max":
        return (max(a[0], b[0]), max(a[1], b[1]))
    if atom.fn == "mod":
        if b[0] > 0:
            return (0, b[1] - 1)
        return (-INF, INF)
    # floordiv by a positive divisor
    if b[0] > 0 and a[0] >= 0:
        return (_fdiv(a[0], b[1]), _fdiv(a[1], b[0]))
    return (-INF, INF)


def _fdiv(x, y):
    if math.isinf(x):
        return x
    if math.isinf(y):
        return 0 if x >= 0 else -1
    return x // y


# ---------------------------------------------------------------- functions

def floordiv(a, b, ranges=None):
    a, b = as_expr(a), as_expr(b)
    ranges = ranges or {}
    if b.is_const():
        d = b.value
        if d == 0:
            raise ZeroDivisionError("sym_expr: division by zero")
        if a.is_const():
            return Expr.const(a.value // d)
        if d == 1:
            return a
        if d > 0:
            # a = d*q + r with q's coefficients whole: a // d = q when 0 <= r < d
            q = Expr({m: c // d for m, c in a.terms.items()})
            r = a - q * d
            lo, hi = value_range(r, ranges)
            if lo >= 0 and hi < d:
                return q
    elif a == b and value_range(b, ranges)[0] > 0:
        return Expr.const(1)
    return Expr.atom(Call("floordiv", a, b))


def mod(a, b, ranges=None):
    a, b = as_expr(a), as_expr(b)
    ranges = ranges or {}
    if b.is_const():
        d = b.value
        if d == 0:
            raise ZeroDivisionError("sym_expr: modulo by zero")
        if a.is_const():
            return Expr.const(a.value % d)
        if d == 1:
            return Expr.const(0)
        if d > 0:
            q = Expr({m: c // d for m, c in a.terms.items()})
            r = a - q * d
            lo, hi = value_range(r, ranges)
            if lo >= 0 and hi < d:
                return r
    elif a == b and value_range(b, ranges)[0] > 0:
        return Expr.const(0)
    return Expr.atom(Call("mod", a, b))


def minimum(a, b, ranges=None):
    return _minmax("min", as_expr(a), as_expr(b), ranges or {})


def maximum(a, b, ranges=None):
    return _minmax("max", as_expr(a), as_expr(b), ranges or {})


def _minmax(fn, a, b, ranges):
    if a == b:
        return a
    lo, hi = value_range(a - b, ranges)
    if hi <= 0:         # a <= b
        return a if fn == "min" else b
    if lo >= 0:         # a >= b
        return b if fn == "min" else a
    if str(b) < str(a):   # one order for min(a, b) and min(b, a)
        a, b = b, a
    return Expr.atom(Call(fn, a, b))


# ---------------------------------------------------------------- relations

RELATIONS = ("==", "!=", "<", "<=")


@dataclass(frozen=True)
class Rel:
    """expr OP 0."""
    op: str
    expr: Expr

    def __post_init__(self):
        if self.op not in RELATIONS:
            raise ValueError(f"sym_expr: unknown relation {self.op!r}")

    def negate(self):
        if self.op == "==":
            return Rel("!=", self.expr)
        if self.op == "!=":
            return Rel("==", self.expr)
        if self.op == "<":       # not (e < 0)  <=>  -e <= 0
            return Rel("<=", -self.expr)
        return Rel("<", -self.expr)   # not (e <= 0)  <=>  -e < 0

    def static_value(self, ranges):
        """True or False when the ranges decide the relation, else None."""
        lo, hi = value_range(self.expr, ranges)
        if self.op in ("==", "!="):
            if lo == hi == 0:
                eq = True
            elif lo > 0 or hi < 0:
                eq = False
            else:
                return None
            return eq if self.op == "==" else not eq
        if self.op == "<":
            return True if hi < 0 else False if lo >= 0 else None
        return True if hi <= 0 else False if lo > 0 else None

    def evaluate(self, bindings):
        v = evaluate(self.expr, bindings)
        return {"==": v == 0, "!=": v != 0, "<": v < 0, "<=": v <= 0}[self.op]

    def __str__(self):
        """As a reader would write it: terms with a minus sign move to the right."""
        pos = Expr({m: c for m, c in self.expr.terms.items() if c > 0})
        neg = Expr({m: -c for m, c in self.expr.terms.items() if c < 0})
        return f"{pos} {self.op} {neg}"


def relation(op, a, b):
    """The relation `a op b` for op in ==, !=, <, <=, >, >=."""
    a, b = as_expr(a), as_expr(b)
    if op == ">":
        return Rel("<", b - a)
    if op == ">=":
        return Rel("<=", b - a)
    return Rel(op, a - b)


# ---------------------------------------------------------------- evaluation

def evaluate(expr, bindings):
    """The value of expr with symbol names bound to integers."""
    total = 0
    for m, c in expr.terms.items():
        v = c
        for atom, p in m:
            v *= _atom_value(atom, bindings) ** p
        total += v
    return total


def _atom_value(atom, bindings):
    if isinstance(atom, Symbol):
        return bindings[atom.name]
    a, b = evaluate(atom.a, bindings), evaluate(atom.b, bindings)
    if atom.fn == "floordiv":
        return a // b
    if atom.fn == "mod":
        return a % b
    return min(a, b) if atom.fn == "min" else max(a, b)


def substitute(expr, mapping):
    """expr with symbols replaced: mapping takes a Symbol to an Expr."""
    out = Expr({})
    for m, c in expr.terms.items():
        term = Expr.const(c)
        for atom, p in m:
            a = _substitute_atom(atom, mapping)
            for _ in range(p):
                term = term * a
        out = out + term
    return out


def _substitute_atom(atom, mapping):
    if isinstance(atom, Symbol):
        return mapping.get(atom, Expr.atom(atom))
    a, b = substitute(atom.a, mapping), substitute(atom.b, mapping)
    return {"floordiv": floordiv, "mod": mod, "min": minimum, "max": maximum}[atom.fn](a, b)


# ---------------------------------------------------------------- postfix programs

@dataclass(frozen=True)
class PushSym:
    index: int


@dataclass(frozen=True)
class PushConst:
    value: int


@dataclass(frozen=True)
class Apply:
    """Pop b, pop a, push fn(a, b) for fn in add, mul, floordiv, mod, min, max."""
    fn: str


APPLY_FUNCTIONS = ("add", "mul") + FUNCTIONS


def postfix(expr, index_of):
    """expr as a postfix program; index_of maps a Symbol to its slot."""
    prog = []
    terms = sorted(expr.terms.items(), key=lambda mc: str(Expr({mc[0]: 1})))
    if not terms:
        return [PushConst(0)]
    for k, (m, c) in enumerate(terms):
        prog.append(PushConst(c))
        for atom, p in m:
            for _ in range(p):
                _postfix_atom(atom, index_of, prog)
                prog.append(Apply("mul"))
        if k:
            prog.append(Apply("add"))
    return prog


def _postfix_atom(atom, index_of, prog):
    if isinstance(atom, Symbol):
        prog.append(PushSym(index_of[atom]))
        return
    prog.extend(postfix(atom.a, index_of))
    prog.extend(postfix(atom.b, index_of))
    prog.append(Apply(atom.fn))


def run_postfix(prog, values):
    """The reference evaluator of a postfix program (values: slot -> integer)."""
    stack = []
    for ins in prog:
        if isinstance(ins, PushSym):
            stack.append(values[ins.index])
        elif isinstance(ins, PushConst):
            stack.append(ins.value)
        else:
            b, a = stack.pop(), stack.pop()
            stack.append({"add": lambda: a + b, "mul": lambda: a * b,
                          "floordiv": lambda: a // b, "mod": lambda: a % b,
                          "min": lambda: min(a, b), "max": lambda: max(a, b)}[ins.fn]())
    if len(stack) != 1:
        raise ValueError("sym_expr: malformed postfix program")
    return stack[0]
