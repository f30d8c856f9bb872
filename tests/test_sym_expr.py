"""ember.fx.sym_expr: canonical forms, ranges, simplification, relations, printing and
postfix programs, checked against plain integer arithmetic on many bindings."""
import itertools
import random

import pytest

from ember.fx import sym_expr as se
from ember.fx.sym_expr import Expr, Symbol

s0, s1, s2 = Expr.symbol("s0"), Expr.symbol("s1"), Expr.symbol("s2")
SIZES = {Symbol("s0"): (2, se.INF), Symbol("s1"): (2, se.INF), Symbol("s2"): (2, se.INF)}


def test_equal_expressions_are_one_value():
    assert s0 + s0 == 2 * s0
    assert (s0 + 1) - 1 == s0
    assert hash((s0 + 1) * s1) == hash(s1 * s0 + s1)
    assert (s0 - s0).is_const() and (s0 - s0).value == 0
    assert s0 * s1 - s1 * s0 == 0
    assert (s0 + 1) * (s0 - 1) == s0 * s0 - 1


@pytest.mark.parametrize("expr, text", [
    (s0, "s0"), (2 * s0, "2*s0"), (s0 - 1, "s0 - 1"), (-s0, "-s0"),
    (s0 * s1 * 2 + s0 - 1, "2*s0*s1 + s0 - 1"), (s0 * s0, "s0**2"),
    (Expr.const(0), "0"), (Expr.const(-3), "-3"), (1 - s1, "-s1 + 1"),
])
def test_expressions_print_as_python(expr, text):
    assert str(expr) == text
    values = {"s0": 5, "s1": 7}
    assert eval(text, {}, values) == se.evaluate(expr, values)


def test_floordiv_and_mod_simplify_when_ranges_decide():
    assert se.floordiv(2 * s0 + 1, 2, SIZES) == s0
    assert se.mod(2 * s0 + 1, 2, SIZES) == 1
    assert se.floordiv(4 * s0, 4, SIZES) == s0
    assert se.floordiv(s0, 1) == s0
    assert se.floordiv(Expr.const(-7), 2).value == -4
    assert se.mod(Expr.const(-7), 2).value == 1
    assert se.floordiv(s0 * s1, s0 * s1, SIZES) == 1
    q = se.floordiv(s0, 4, SIZES)
    assert q.as_symbol() is None and str(q) == "(s0//4)"
    assert str(se.mod(s0, s1, SIZES)) == "(s0 % s1)"
    with pytest.raises(ZeroDivisionError):
        se.floordiv(s0, 0)


def test_min_max_fold_by_ranges_and_are_symmetric():
    assert se.maximum(s0, 1, SIZES) == s0
    assert se.minimum(s0, 1, SIZES) == 1
    assert se.minimum(s0, s0 + 3, SIZES) == s0
    assert se.minimum(s0, s1, SIZES) == se.minimum(s1, s0, SIZES)
    assert str(se.maximum(s1, s0, SIZES)) == "max(s0, s1)"


def test_ranges():
    assert se.value_range(s0 * s1 - 1, SIZES) == (3, se.INF)
    assert se.value_range(-s0, SIZES) == (-se.INF, -2)
    assert se.value_range(se.floordiv(s0, 4, SIZES), SIZES) == (0, se.INF)
    assert se.value_range(se.mod(s0, 4, SIZES), SIZES) == (0, 3)
    assert se.value_range(s0 * s0, {Symbol("s0"): (-3, 2)}) == (0, 9)
    assert se.value_range(s0 * s0 * s0, {Symbol("s0"): (-3, 2)}) == (-27, 8)


def test_relations_decided_by_ranges_need_no_guard():
    assert se.relation("==", s0, 1).static_value(SIZES) is False
    assert se.relation("!=", s0, 0).static_value(SIZES) is True
    assert se.relation(">=", s0, 2).static_value(SIZES) is True
    assert se.relation(">", s0, 1).static_value(SIZES) is True
    assert se.relation("<", s0 * s1, 4).static_value(SIZES) is False
    assert se.relation(">", s0, 2).static_value(SIZES) is None
    assert se.relation("==", s0, s1).static_value(SIZES) is None
    assert str(se.relation(">", s0, 1)) == "1 < s0"
    assert str(se.relation("==", s0, s1)) == "s0 == s1"


def test_negation_is_the_complement_on_every_binding():
    rels = [se.relation(op, a, b) for op in ("==", "!=", "<", "<=", ">", ">=")
            for a, b in [(s0, s1), (s0 + 3, 2 * s1), (se.floordiv(s0, 3), s1 - 4)]]
    for rel in rels:
        for v0, v1 in itertools.product(range(-5, 9), range(-5, 9)):
            b = {"s0": v0, "s1": v1}
            assert rel.evaluate(b) != rel.negate().evaluate(b)


def random_expr(rng, depth=3):
    syms = [s0, s1, s2]
    if depth == 0 or rng.random() < 0.25:
        return rng.choice(syms) if rng.random() < 0.7 else Expr.const(rng.randint(-9, 9))
    a, b = random_expr(rng, depth - 1), random_expr(rng, depth - 1)
    kind = rng.choice(["add", "sub", "mul", "floordiv", "mod", "min", "max"])
    if kind in ("floordiv", "mod"):
        b = Expr.const(rng.randint(1, 7)) if rng.random() < 0.6 else b * b + 1
    return {"add": lambda: a + b, "sub": lambda: a - b, "mul": lambda: a * b,
            "floordiv": lambda: se.floordiv(a, b, SIZES), "mod": lambda: se.mod(a, b, SIZES),
            "min": lambda: se.minimum(a, b, SIZES), "max": lambda: se.maximum(a, b, SIZES)}[kind]()


def test_random_expressions_agree_with_python_everywhere():
    """Simplification, printing, postfix programs and substitution against evaluation
    on bindings inside the ranges the simplifier assumed (sizes >= 2)."""
    rng = random.Random(0)
    index = {Symbol("s0"): 0, Symbol("s1"): 1, Symbol("s2"): 2}
    for _ in range(400):
        e = random_expr(rng)
        prog = se.postfix(e, index)
        for _ in range(6):
            vals = [rng.randint(2, 40) for _ in range(3)]
            b = dict(zip(("s0", "s1", "s2"), vals))
            v = se.evaluate(e, b)
            assert eval(str(e), {}, dict(b)) == v, str(e)
            assert se.run_postfix(prog, vals) == v
            lo, hi = se.value_range(e, SIZES)
            assert lo <= v <= hi, (str(e), b)
            sub = se.substitute(e, {Symbol("s2"): s0 + 1})
            assert se.evaluate(sub, b) == se.evaluate(e, dict(b, s2=b["s0"] + 1))


def test_bad_values_are_refused():
    with pytest.raises(TypeError):
        se.as_expr(1.5)
    with pytest.raises(ValueError):
        se.Rel(">", s0)
    with pytest.raises(ValueError):
        (s0 + 1).value
