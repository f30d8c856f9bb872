"""[dynamic] in capture: symbolic sizes from the inputs through x.shape arithmetic into
the graph, guards on them evaluated in C, automatic dynamic, dynamic=True/False and the
mark_dynamic/mark_static API (ember/capture/dynamic.py, sym_sizes.py, fx/sym_meta.py).

Each case is compared with eager on every call (values and dtypes), under the eager
backend (which runs the symbolic graph as it is) and the AOT backends (which compile it
per size: sym_sizes.specializing)."""
import math

import pytest

import ember
import ember.nn as nn
import ember.nn.functional as F
from ember import _C
from ember.capture import _hook, counters
from fresh_compiler import fresh_compiler  # noqa: F401  (autouse)

BACKENDS = ["eager", "aot_eager", "llvm"]


def _same(a, b):
    if isinstance(a, (tuple, list)):
        assert type(a) is type(b) and len(a) == len(b)
        for x, y in zip(a, b):
            _same(x, y)
        return
    if isinstance(a, _C.Tensor):
        assert a.dtype == b.dtype and tuple(a.shape) == tuple(b.shape)
        assert ember.allclose(a, b, rtol=1e-4, atol=1e-5, equal_nan=True), (a, b)
        return
    assert a == b


def _graphs(fn):
    return len(fn._ember_compile_context.graphs)


def _reasons(fn):
    return [r for _, r in fn._ember_compile_context.recompile_reasons]


@pytest.mark.parametrize("backend", BACKENDS)
def test_mlp_over_many_batch_sizes_compiles_twice(backend):
    """The issue's case: an MLP called with 38 batch sizes compiled 24 graphs; as
    torch.compile, automatic dynamic compiles a static graph, then one symbolic one."""
    ember.manual_seed(0)
    mlp = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 4))
    cm = ember.compile(mlp, backend=backend)
    for n in range(2, 40):
        x = ember.randn(n, 16)
        _same(cm(x), mlp(x))
    assert _graphs(cm) == 2
    assert counters["stats"]["calls_captured"] == 2
    assert not counters["dynamic_fallback"]


def test_the_second_graph_takes_sizes_as_inputs():
    def f(x):
        b, t = x.shape
        return x.view(b * t).cumsum(0).view(b, t) + t

    cf = ember.compile(f, backend="eager")
    cf(ember.randn(3, 5))
    cf(ember.randn(4, 5))
    code = cf._ember_compile_context.graphs[1].code
    assert 's0: "Sym(s0)"' in code and "operator.mul(s0, 5)" in code, code
    for n in (6, 9, 17):
        x = ember.randn(n, 5)
        _same(cf(x), f(x))
    assert _graphs(cf) == 2
    assert _reasons(cf)[0].startswith("tensor 'x' size mismatch at dim 0")


@pytest.mark.parametrize("backend", BACKENDS)
def test_dynamic_true_is_symbolic_from_the_first_call(backend):
    def f(x, y):
        n = x.shape[0]
        return (x[: n - 1] * 2).sum(0) + y.view(-1)[: x.shape[1]]

    cf = ember.compile(f, backend=backend, dynamic=True)
    for n, m in ((3, 4), (5, 4), (7, 6), (4, 9)):
        x, y = ember.randn(n, m), ember.randn(m * 2)
        _same(cf(x, y), f(x, y))
    assert _graphs(cf) == 1


def test_dynamic_false_specialises_every_size():
    cf = ember.compile(lambda x: x * 2, backend="eager", dynamic=False)
    for n in (3, 4, 5):
        cf(ember.randn(n))
    assert _graphs(cf) == 3


def test_mark_dynamic_makes_the_first_capture_symbolic_and_mark_static_wins():
    def f(x):
        return x.sum(0) * x.shape[0]

    cf = ember.compile(f, backend="eager")
    x = ember.randn(5, 3)
    ember._dynamo.mark_dynamic(x, 0)
    _same(cf(x), f(x))
    for n in (6, 8):
        y = ember.randn(n, 3)
        _same(cf(y), f(y))
    assert _graphs(cf) == 1

    ember.compiler.reset()
    cg = ember.compile(f, backend="eager", dynamic=True)
    x = ember.randn(5, 3)
    ember._dynamo.mark_static(x, 0)
    cg(x)
    assert _graphs(cg) == 1
    cg(ember.randn(6, 3))           # dim 0 was static in the first capture
    assert _graphs(cg) == 2
    with pytest.raises(IndexError):
        ember._dynamo.mark_dynamic(x, 2)


def test_sizes_zero_and_one_stay_specialised():
    cf = ember.compile(lambda x: x + 1, backend="eager", dynamic=True)
    for n in (4, 5, 1, 0, 1, 0, 9):
        x = ember.randn(n)
        _same(cf(x), x + 1)
    assert _graphs(cf) == 3           # symbolic, 1, 0
    assert any("s0 >= 2" in r for r in _reasons(cf)), _reasons(cf)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_branch_on_a_size_is_guarded_and_named_in_the_reason(backend):
    def f(x):
        if x.shape[0] > 4:
            return x * 2
        return x - 1

    cf = ember.compile(f, backend=backend, dynamic=True)
    for n in (6, 7, 9, 3, 2, 4, 12):
        x = ember.randn(n)
        _same(cf(x), f(x))
    assert _graphs(cf) == 2
    assert any("s0 >= 5" in r and "x.size(0)" in r for r in _reasons(cf)), _reasons(cf)


def test_equal_sizes_share_a_symbol_guarded_equal():
    def f(x, y):
        return x + y.flip(0)

    cf = ember.compile(f, backend="eager", dynamic=True)
    x, y = ember.randn(5), ember.randn(5)
    _same(cf(x, y), f(x, y))
    x, y = ember.randn(7), ember.randn(7)
    _same(cf(x, y), f(x, y))
    assert _graphs(cf) == 1
    x, y = ember.randn(7), ember.randn(3)
    with pytest.raises(RuntimeError):
        cf(x, y)                      # eager raises on the broadcast: so does compiled
    assert any("x.size(0) == y.size(0)" in r for r in _reasons(cf)), _reasons(cf)


def test_relations_between_sizes_are_guarded():
    def f(x, y):
        if x.shape[0] == 2 * y.shape[0] - 2:
            return x.sum() + y.sum()
        return x.sum() - y.sum()

    cf = ember.compile(f, backend="eager", dynamic=True)
    for a, b in ((6, 4), (10, 6), (9, 4), (8, 5), (14, 8)):
        x, y = ember.randn(a), ember.randn(b)
        _same(cf(x, y), f(x, y))
    assert _graphs(cf) == 2


def test_strides_of_symbolic_sizes_are_guarded():
    def f(x):
        return x * 3

    cf = ember.compile(f, backend="eager", dynamic=True)
    cf(ember.randn(4, 6))
    y = ember.randn(5, 7)
    _same(cf(y), f(y))
    t = ember.randn(7, 5).t()          # not contiguous: its strides are not (s1, 1)
    _same(cf(t), f(t))
    assert _graphs(cf) == 2


@pytest.mark.parametrize("backend", BACKENDS)
def test_causal_attention_over_a_growing_sequence(backend):
    """arange, masks and softmax over a symbolic length, the shape of text generation."""
    def f(q, k):
        t = q.shape[1]
        mask = ember.ones(t, t).tril().bool()
        s = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
        s = s.masked_fill(~mask, float("-inf")).softmax(-1)
        return s @ k + ember.arange(t).view(1, t, 1)

    cf = ember.compile(f, backend=backend)
    for t in range(3, 12):
        q, k = ember.randn(2, t, 8), ember.randn(2, t, 8)
        _same(cf(q, k), f(q, k))
    assert _graphs(cf) == 2
    assert not counters["dynamic_fallback"]


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_greedy_generation_with_the_zoo_gpt_compiles_twice(backend):
    """The seed's inference example: a compiled model called with a sequence one token
    longer each time (it recompiled at every length and hit the recompile limit)."""
    from ember.models.gpt import GPT, GPTConfig
    ember.manual_seed(0)
    m = GPT(GPTConfig(block_size=64, vocab_size=65, n_layer=2, n_head=2, n_embd=32)).eval()
    cm = ember.compile(m, backend=backend)
    idx = ember.randint(0, 65, (2, 3))
    with ember.no_grad():
        a = b = idx
        for _ in range(20):
            a = ember.cat([a, cm(a)[0][:, -1:].argmax(-1)], 1)
            b = ember.cat([b, m(b)[0][:, -1:].argmax(-1)], 1)
    assert ember.equal(a, b)
    assert _graphs(cm) == 2
    assert counters["stats"]["calls_captured"] == 2
    assert not counters["unsupported"] and not counters["dynamic_fallback"]


def test_an_op_without_a_symbolic_rule_captures_specialised():
    from ember.fx import sym_meta

    def f(x):
        return x.sum() * 2

    cf = ember.compile(f, backend="eager", dynamic=True)
    real = sym_meta.SymbolicMeta._rule

    def refuse(self, op, entry, args):
        raise sym_meta.NotSymbolic(f"{entry.qualified_name}: refused by the test")
    sym_meta.SymbolicMeta._rule = refuse
    try:
        for n in (4, 5):
            x = ember.randn(n)
            _same(cf(x), f(x))
    finally:
        sym_meta.SymbolicMeta._rule = real
    assert counters["dynamic_fallback"], dict(counters)
    assert _graphs(cf) == 2           # specialised: one graph per size


def test_a_size_used_as_a_python_constant_is_specialised():
    def f(x):
        n = x.shape[0]
        return x * float(n) + sum(range(n))

    cf = ember.compile(f, backend="eager", dynamic=True)
    for n in (4, 4, 5):
        x = ember.randn(n)
        _same(cf(x), f(x))
    assert _graphs(cf) == 2
    assert any("s0 == 4" in r for r in _reasons(cf)), _reasons(cf)


@pytest.mark.parametrize("backend", BACKENDS)
def test_sizes_inside_a_tuple_seen_by_isinstance_len_and_type_stay_symbolic(backend):
    """isinstance(), len() and type() of a tuple holding sizes read no size's value
    (they read every argument as a constant first: F.layer_norm(x, (x.shape[-1],)) went
    through isinstance and specialised the width, 8 recompiles then eager)."""
    def f(x, w, b):
        shape = (x.shape[-1],)
        assert isinstance(shape, (tuple, list)) and len(shape) == 1 and type(shape) is tuple
        return F.layer_norm(x, shape, w, b)

    cf = ember.compile(f, backend=backend, dynamic=True)
    for d in range(2, 14):
        x, w, b = ember.randn(3, d), ember.randn(d), ember.randn(d)
        _same(cf(x, w, b), f(x, w, b))
    assert _graphs(cf) == 1, _reasons(cf)


def test_parameters_and_buffers_stay_static_under_dynamic_true():
    lin = nn.Linear(6, 3)
    cm = ember.compile(lin, backend="eager", dynamic=True)
    for n in (4, 9):
        x = ember.randn(n, 6)
        _same(cm(x), lin(x))
    gm = cm._ember_compile_context.graphs[0]
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    assert [n.target for n in placeholders if "weight" in n.target or "bias" in n.target]
    # the input's two dims, none of the weight's or the bias's
    assert [n.meta["source"] for n in placeholders if str(n.target).startswith("s")] == \
        ["input.size(0)", "input.size(1)"]


# ------------------------------------------------------------------ SYM_REL in C

def _program(guards):
    return _hook.GuardProgram(guards, ("x",), ())


def _check(prog, *args):
    return prog.check_verbose(args)


def test_sym_rel_evaluates_postfix_programs_over_sizes():
    size0, size1 = ("size", ("arg", 0), 0), ("size", ("arg", 0), 1)
    # x.size(0) == 2 * x.size(1) - 2 ; (x.size(0) // 3) % 2 <= 0 ; max(s0, s1) - 9 < 0
    prog = _program([
        ("SYM_REL", (size0, size1), (0, 0, 1, -2, 0, 1, 3, 0, 2, 0, 1, 2, 2, 0), "==", "a"),
        ("SYM_REL", (size0,), (0, 0, 1, 3, 4, 0, 1, 2, 5, 0), "<=", "b"),
        ("SYM_REL", (size0, size1), (0, 0, 0, 1, 7, 0, 1, -9, 2, 0), "<", "c"),
    ])
    assert _check(prog, ember.zeros(6, 4)) is None
    assert _check(prog, ember.zeros(7, 4)) == "size guard failed: a"
    assert _check(prog, ember.zeros(4, 3)) == "size guard failed: b"    # 4 // 3 = 1
    assert _check(prog, ember.zeros(8, 5)) is None
    assert _check(prog, ember.zeros(14, 8)) == "size guard failed: c"


def test_sym_rel_follows_python_floor_division_and_fails_on_overflow():
    stride0 = ("stride", ("arg", 0), 0)
    # (x.stride(0) - 10) // 4 == -2 (Python floors: -7 // 4 == -2), mod likewise
    prog = _program([("SYM_REL", (stride0,), (0, 0, 1, -10, 2, 0, 1, 4, 4, 0, 1, 2, 2, 0),
                      "==", "floor")])
    assert _check(prog, ember.zeros(2, 3)) is None
    big = _program([("SYM_REL", (stride0,), (0, 0, 1, 2 ** 62, 3, 0, 1, 0, 2, 0), "<", "o")])
    assert _check(big, ember.zeros(2, 3)) == "o: overflow"
    div0 = _program([("SYM_REL", (stride0,), (0, 0, 1, 0, 4, 0), "==", "z")])
    assert "division by zero" in _check(div0, ember.zeros(2, 3))
    # a dim the tensor does not have fails the guard, never reads out of bounds
    far = _program([("SYM_REL", (("size", ("arg", 0), 5),), (0, 0), "<", "far")])
    assert "has 2 dims" in _check(far, ember.zeros(2, 3))


@pytest.mark.parametrize("bad", [
    (("SYM_REL", (), (0, 0), "==", "d"), "source index"),
    (("SYM_REL", (), (2, 0), "==", "d"), "stack"),
    (("SYM_REL", (), (1, 1, 1, 2), "==", "d"), "result"),
    (("SYM_REL", (), (9, 0), "==", "d"), "opcode"),
    (("SYM_REL", (), (1, 0), ">", "d"), "relation"),
    (("SYM_REL", (), (1, 0, 1), "==", "d"), "pairs"),
    (("SYM_REL", (), tuple([1, 0] * 40), "==", "d"), "stack"),
    (("SYM_REL", (("size", ("arg", 0), -1),), (0, 0), "==", "d"), "out of range"),
])
def test_malformed_sym_rel_programs_are_refused_when_built(bad):
    spec, match = bad
    with pytest.raises((ValueError, TypeError), match=match):
        _program([spec])


@pytest.mark.parametrize("backend", BACKENDS)
def test_len_min_max_and_operator_functions_of_sizes_stay_symbolic(backend):
    import operator

    def f(x, y):
        n = min(len(x), y.shape[0])
        m = max(x.size(0), 3)
        k = operator.floordiv(operator.add(n, m), 2)
        return x[:n].sum() + y[:n].sum() * k + ember.zeros(k).sum() + ember.full((m,), 2.0).sum()

    cf = ember.compile(f, backend=backend, dynamic=True)
    # min and max are expressions of the graph (no guard on which operand wins)
    for a, b in ((5, 7), (6, 9), (8, 11), (9, 4), (12, 6), (2, 2)):
        x, y = ember.randn(a), ember.randn(b)
        _same(cf(x, y), f(x, y))
    assert _graphs(cf) == 1, _reasons(cf)
    code = cf._ember_compile_context.graphs[0].code
    assert "min(" in code and "max(" in code, code


@pytest.mark.parametrize("backend", BACKENDS)
def test_int_arguments_that_change_become_symbolic(backend):
    """Automatic dynamic covers ints: a size passed in (or to a resume function after a
    graph break) that changes becomes a symbol instead of a recompile per value."""
    def f(x, n):
        return x[:n] * n + ember.arange(n).sum()

    cf = ember.compile(f, backend=backend)
    for n in (3, 4, 5, 6, 7, 9):
        x = ember.randn(12)
        _same(cf(x, n), f(x, n))
    assert _graphs(cf) == 2, _reasons(cf)
    x = ember.randn(12)
    _same(cf(x, 1), f(x, 1))                  # 1 stays a constant: a graph of its own
    assert _graphs(cf) == 3
    assert _reasons(cf) == ["value of 'n' changed: expected 3, got 4",
                            "size guard failed: s0 >= 2 (s0 = n)"]


def test_sizes_crossing_a_graph_break_stay_symbolic_in_the_resume_function():
    def f(x):
        b, t = x.shape
        print("", end="")                    # a graph break
        return x.view(b * t) + b

    cf = ember.compile(f, backend="eager")
    for n in (3, 4, 5, 6, 7, 8, 9, 10, 11, 12):
        x = ember.randn(n, 4)
        _same(cf(x), f(x))
    # torch.compile: 2 graphs before and after the break, each static then dynamic
    assert counters["stats"]["calls_captured"] <= 4, dict(counters["recompiles"])
    assert not any("limit" in r for r in _reasons(cf))
