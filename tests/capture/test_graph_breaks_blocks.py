"""Graph breaks inside blocks ([capture-2]): a `with` block (grad-mode and Python
context managers), a `try` block, a loop body, and a frame with cell variables. The
frame compiles the graph so far, runs the instruction in CPython and resumes in a
resume function (ember/capture/resume.py) that continues inside the block: the block's
__exit__ passed on as a stack value, the frame's exception table kept, so an exception
after the break (or from the break's instruction itself) reaches the block's handler;
cells passed on as themselves. A break inside a loop ends the graph before the loop,
which a loop function runs in CPython, and capture resumes at the loop's exits.

Each case runs compiled under three backends and must equal eager: result (with its
requires_grad and grad_fn), printed output, LOG and grad mode after the call. `graphs`/`breaks` are ember's counts;
`torch` is torch 2.13 explain's (graph_count, graph_break_count) for the same source
(checked by test_torch_counts) where it differs: torch skips a frame whose break is
inside a try block, a Python context manager's `with` block or a loop (0 graphs), and
ember resumes there instead."""
import re

import pytest

import ember
from ember.capture import CaptureError, _hook, counters

from break_cases import (Case, check_explain_counts, check_matches_eager,  # noqa: F401
                         check_second_call, fresh_compiler, torch_counts)
from test_catalogue import assert_same, make_namespace

pytestmark = pytest.mark.skipif(not _hook.available, reason="capture needs CPython 3.11")

SKIPPED = (0, -1)        # torch 2.13 explain of a frame it skips: no graph

CASES = [
    # ------------------------------------------------------------ with blocks
    Case("no_grad_block", """
def fn(x):
    y = x * 2
    with torch.no_grad():
        z = y + 1
        print("inside", z.requires_grad)
        z = z * 3
    return z + y, z.requires_grad, y.requires_grad
""", "T(3).requires_grad_()", 2, 1, r"print\(\)"),
    Case("enable_grad_block_under_no_grad", """
def fn(x):
    with torch.no_grad():
        y = x * 2
        with torch.enable_grad():
            z = x.sin()
            print("inner", torch.is_grad_enabled())
            z = z * y
        w = z + 1
    return w, z.requires_grad, w.requires_grad, torch.is_grad_enabled()
""", "T(3).requires_grad_()", 2, 1, r"print\(\)"),
    Case("set_grad_enabled_block", """
def fn(x):
    with torch.set_grad_enabled(False):
        y = x.exp()
        v = y.sum().item()
        z = y * v
    return z + x, z.requires_grad
""", "T(3).requires_grad_()", 2, 1, r"Tensor\.item\(\)"),
    Case("two_breaks_in_no_grad_block", """
def fn(x):
    y = x * 2
    with torch.no_grad():
        print("one")
        z = y + 1
        print("two")
        z = z.cos()
    return z * y
""", "T(3).requires_grad_()", 3, 2, r"print\(\)"),
    Case("branch_on_tensor_in_no_grad_block", """
def fn(x):
    with torch.no_grad():
        y = x.sin()
        if y.sum() > 0:
            y = y + 1
        else:
            y = y - 1
    return y * x
""", "T(4).requires_grad_()", 2, 1, r"data-dependent control flow"),
    Case("python_context_manager", """
LOG = []
class Tag:
    def __init__(self, name):
        self.name = name
    def __enter__(self):
        LOG.append("enter " + self.name)
        return self
    def __exit__(self, *exc):
        LOG.append("exit " + self.name)
        return False
tag = Tag("a")
def fn(x):
    y = x * 2
    with tag as t:
        z = y + 1
        print("in", t.name)
        z = z * 3
    LOG.append("after")
    return z + y
""", "T(3)", 2, 1, r"print\(\)", torch=SKIPPED),
    Case("helper_breaks_inside_a_no_grad_block", """
def helper(y):
    z = y * 3
    print("in helper", torch.is_grad_enabled())
    return z + 1
def fn(x):
    y = x.sin()
    with torch.no_grad():
        z = helper(y)
        w = z * y
    return w + x, w.requires_grad
""", "T(3).requires_grad_()", 3, 1, r"print\(\)", torch=(4, 3)),
    # (helper breaks at its print inside fn's block, and resumes there: helper's rest,
    # then fn's, each in the mode its frame had; torch breaks fn at the call, then
    # helper at its print, counting the inner break twice)
    # ------------------------------------------------------------ try blocks
    Case("try_except_not_raised", """
def fn(x):
    y = x * 2
    try:
        z = y + 1
        print("in try")
        z = z * 3
    except ValueError:
        z = y
    return z + y
""", "T(3)", 2, 1, r"print\(\)", torch=SKIPPED),
    Case("try_except_raised_after_the_break", """
LOG = []
def fn(x):
    y = x * 2
    try:
        z = y + 1
        print("in try")
        LOG.append("before raise")
        raise ValueError("after the break")
    except ValueError as e:
        LOG.append(str(e))
        z = y - 1
    return z * y
""", "T(3)", 2, 1, r"print\(\)", torch=SKIPPED),
    Case("try_finally", """
LOG = []
def fn(x):
    y = x * 2
    try:
        z = y + 1
        print("in try")
        z = z * 3
    finally:
        LOG.append("finally")
        y = y + 1
    return z + y
""", "T(3)", 2, 1, r"print\(\)", torch=SKIPPED),
    Case("break_instruction_raises_in_try", """
import zlib
LOG = []
def fn(x):
    y = x * 2
    try:
        z = y + 1
        zlib.crc32("not bytes")
        z = z * 3
    except TypeError as e:
        LOG.append(str(e))
        z = y - 1
    return z * y
""", "T(3)", 1, 1, r"crc32", torch=SKIPPED),
    # (the handler, and the frame after it, run in CPython: a resume function the hook
    # skips)
    Case("try_in_no_grad_block", """
LOG = []
def fn(x):
    with torch.no_grad():
        y = x * 2
        try:
            print("in")
            z = y.sum().item()
        except RuntimeError:
            z = 0.0
        LOG.append(torch.is_grad_enabled())
    return x * z + y
""", "T(3).requires_grad_()", 3, 2, r"print\(\)", torch=SKIPPED),
]

CELL_CASES = [
    Case("cell_read_by_inner_function", """
def fn(x):
    y = x * 2
    def inner():
        return y + 1
    print("between")
    return inner() * 2
""", "T(3)", 2, 1, r"print\(\)"),
    Case("cell_written_after_the_break", """
def fn(x):
    y = x * 2
    def inner():
        return y + 1
    a = inner()
    print("between")
    y = y * 10
    return inner() + a
""", "T(3)", 2, 1, r"print\(\)"),
    Case("free_and_cell_variables", """
def make():
    scale = T(3)
    def fn(x):
        y = x * scale
        def inner(v):
            return v * y + scale
        print("between")
        return inner(x)
    return fn
fn = make()
""", "T(3)", 2, 1, r"print\(\)"),
    Case("lambda_over_a_free_variable", """
def make():
    scale = T(3)
    def fn(x):
        f = lambda v: v * scale
        y = f(x)
        print("between")
        return f(y)
    return fn
fn = make()
""", "T(3)", 2, 1, r"print\(\)"),
    Case("cell_assigned_after_the_break", """
def fn(x):
    y = x * 2
    print("between")
    z = y + 1
    g = lambda: z * y
    return g()
""", "T(3)", 2, 1, r"print\(\)"),
    Case("cells_and_free_variables_in_a_no_grad_block", """
def make():
    scale = T(3)
    def fn(x):
        y = x * scale
        get = lambda: y * scale
        with torch.no_grad():
            z = get()
            print("in", z.requires_grad)
            y = z + 1
        return get() + x, y.requires_grad
    return fn
fn = make()
""", "T(3).requires_grad_()", 2, 1, r"print\(\)"),
    Case("loop_with_cells_in_a_no_grad_block", """
def make():
    scale = T(3)
    def fn(x):
        y = x * scale
        get = lambda: y + scale
        with torch.no_grad():
            for i in range(2):
                y = y * 2
                print(i, y.requires_grad)
        return get() * x
    return fn
fn = make()
""", "T(3).requires_grad_()", 2, 1, r"print\(\)", torch=(1, 0)),
    # (torch skips fn, and captures the lambda called after the loop on its own)
    Case("argument_captured_by_inner_function", """
def fn(x, k):
    def inner(v):
        return v * x + k
    y = inner(x)
    print("between")
    x = y + 1
    return inner(y)
""", "T(3), 2.0", 2, 1, r"print\(\)"),
]
CASES += CELL_CASES

# A break inside a loop: the graph ends before the loop, a loop function runs the loop
# in CPython (torch 2.13 runs the whole frame so), and capture resumes at its exits.
LOOP_CASES = [
    Case("loop_over_range", """
def fn(x):
    y = x.sin()
    for i in range(3):
        y = y * 2
        print(i)
    return y.cos() + 1
""", "T(3)", 2, 1, r"print\(\)", torch=SKIPPED),
    Case("loop_over_a_tuple", """
def fn(x):
    y = x * 2
    for s in (1.5, 2.5):
        y = y * s
        print(s)
    return y + 1
""", "T(3)", 2, 1, r"print\(\)", torch=SKIPPED),
    Case("loop_over_a_list_argument", """
def fn(x, scales):
    y = x * 2
    for s in scales:
        y = y * s
        print(s)
    return y + 1
""", "T(3), [1.5, 2.5, 3.5]", 2, 1, r"print\(\)", torch=SKIPPED),
    Case("while_loop_with_break_and_else", """
def fn(x):
    y = x * 2
    i = 0
    while i < 4:
        y = y + 1
        if y.sum() > 1000:
            break
        i += 1
    else:
        y = y * 3
    return y - i
""", "T(3)", 2, 1, r"data-dependent control flow", torch=SKIPPED),
    Case("loop_with_continue_and_item", """
def fn(x):
    total = 0.0
    y = x * 2
    for i in range(4):
        if i == 2:
            continue
        total += (y * i).sum().item()
    return y * total
""", "T(3)", 2, 1, r"Tensor\.item\(\)", torch=SKIPPED),
    Case("nested_loops", """
LOG = []
def fn(x):
    y = x + 1
    for i in range(2):
        for j in range(2):
            y = y * 2
            LOG.append((i, j, float(y.sum())))
    return y.exp()
""", "T(3)", 2, 1, r"float", torch=SKIPPED),
    Case("loop_in_a_no_grad_block", """
def fn(x):
    y = x * 2
    with torch.no_grad():
        for i in range(2):
            y = y + 1
            print(i, y.requires_grad)
        z = y * 3
    return z + x, z.requires_grad
""", "T(3).requires_grad_()", 2, 1, r"print\(\)", torch=SKIPPED),
    Case("loop_in_a_try_block", """
LOG = []
def fn(x):
    y = x * 2
    try:
        for i in range(3):
            y = y + i
            print(i)
            if i == 1:
                raise KeyError(i)
    except KeyError as e:
        LOG.append(repr(e))
    return y * 2
""", "T(3)", 1, 1, r"print\(\)", torch=SKIPPED),
    # (the exception reaches the handler inside the loop function, which runs the rest
    # of the frame in CPython: the graph after the loop is never reached)
    Case("loop_with_a_cell_variable", """
def fn(x):
    y = x * 2
    get = lambda: y
    for i in range(2):
        y = y + 1
        print(i)
    return get() * 3
""", "T(3)", 2, 1, r"print\(\)", torch=SKIPPED),
    Case("loop_in_a_helper", """
def helper(y):
    for i in range(2):
        y = y + 1
        print(i)
    return y
def fn(x):
    y = x * 2
    z = helper(y)
    return z * 3
""", "T(3)", 2, 1, r"print\(\)", torch=(2, 1)),
    # (one break, in helper's loop: the first graph holds x * 2, a loop function runs
    # helper's loop in CPython, then fn's resume function gets its result; torch breaks
    # fn at the call and skips helper's frame, uncounted)
    Case("loop_over_a_module_list", """
class Block(nn.Module):
    def forward(self, x):
        print("block")
        return x * 2
blocks = nn.ModuleList([Block(), Block()])
def fn(x):
    y = x + 1
    for b in blocks:
        y = b(y) + 1
    return y.sin()
""", "T(3)", 3, 2, r"print\(\)", torch=(1, 0)),
]
CASES += LOOP_CASES


@pytest.mark.parametrize("backend", ["eager", "aot_eager", "llvm"])
@pytest.mark.parametrize("case", CASES, ids=str)
def test_break_in_block_matches_eager(case, backend, capsys):
    check_matches_eager(case, backend, capsys)


@pytest.mark.parametrize("case", CASES, ids=str)
def test_second_call_hits_the_cache(case, capsys):
    check_second_call(case, capsys)
    assert counters["stats"]["frames_fallback"] == 0, dict(counters["unsupported"])


@pytest.mark.parametrize("case", CASES, ids=str)
def test_explain_counts(case, capsys):
    check_explain_counts(case)


def test_torch_counts(torch, capsys):
    """torch 2.13's counts are those recorded; ember's are no more (where torch
    skips the frame, ember resumes instead: more graphs, none of them a fallback)."""
    got = {name: c[:2] for name, c in torch_counts(torch, CASES).items()}
    assert {c.name: got[c.name] for c in CASES
            if got[c.name] != (c.torch or (c.graphs, c.breaks))} == {}
    assert [c.name for c in CASES if c.torch is None and
            (c.graphs > got[c.name][0] or c.breaks > got[c.name][1])] == []


@pytest.mark.parametrize("case", CASES, ids=str)
def test_fullgraph_raises_at_the_first_break(case, capsys):
    ns, args, kwargs = make_namespace(ember, case)
    compiled = ember.compile(ns["fn"], backend="eager", fullgraph=True)
    with pytest.raises(CaptureError, match=case.reason):
        compiled(*args, **kwargs)
    assert counters["stats"]["graph_breaks"] == 0


class _Tag:
    """A context manager that logs its enter and exit (with the exception's type)."""

    def __init__(self):
        self.log = []

    def __enter__(self):
        self.log.append("enter")

    def __exit__(self, kind, exc, tb):
        self.log.append(("exit", kind))
        return False


def _raising_block_sources():
    def in_no_grad(x, tag):
        y = x * 2
        with ember.no_grad():
            z = y + 1
            tag.log.append(int("not a number"))    # ValueError from the break's call
            z = z * 3
        return z

    def in_python_block(x, tag):
        y = x * 2
        with tag:
            z = y + 1
            tag.log.append(int("not a number"))
            z = z * 3
        return z

    def raised_after_the_break_in_no_grad(x, tag):
        y = x * 2
        with ember.no_grad():
            print("mid")
            z = y[10]                                # IndexError after the break
        return z
    return [in_no_grad, in_python_block, raised_after_the_break_in_no_grad]


@pytest.mark.parametrize("fn", _raising_block_sources(), ids=lambda f: f.__name__)
@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_exception_leaves_the_block_as_eager(fn, backend, capsys):
    """An exception from the break's instruction (or after it) leaves the block through
    its __exit__: grad mode restored, the context manager told, eager's exception."""
    x = ember.ones(3, requires_grad=True)
    want_tag = _Tag()
    with pytest.raises(Exception) as want:
        fn(x, want_tag)
    assert ember.is_grad_enabled()
    compiled = ember.compile(fn, backend=backend)
    for _ in range(2):
        tag = _Tag()
        with pytest.raises(type(want.value)) as got:
            compiled(x, tag)
        assert str(got.value) == str(want.value)
        assert ember.is_grad_enabled()
        assert tag.log == want_tag.log
    assert counters["stats"]["frames_fallback"] == 0, dict(counters["unsupported"])


def _loop_sources():
    def early_return(x):
        y = x * 2
        for i in range(5):
            y = y + 1
            if y.sum() > 12:
                return y * 100
        return y - 1

    def raises_out_of_the_loop(x):
        y = x * 2
        for i in range(3):
            y = y + 1
            if i == 2:
                raise ValueError(float(y.sum()))
        return y

    def appends_to_the_list_it_walks(x):
        y = x * 2
        todo = [1, 2]
        for v in todo:
            y = y * v
            if v < 3:
                todo.append(v + 2)
            print(v)
        return y + len(todo)

    def while_true_with_break(x):
        y = x * 2
        n = 0
        while True:
            n += 1
            y = y + 1
            if y.sum() > 20:
                break
        return y * n

    def while_condition_on_a_tensor(x):
        y = x * 2
        while y.sum() < 20:
            y = y + 1
        return y.exp()

    def for_else_and_enumerate(x):
        y = x + 1
        for i, s in enumerate([1.0, 2.0]):
            y = y * s
            print(i)
        else:
            y = y - 1
        return y
    return [early_return, raises_out_of_the_loop, appends_to_the_list_it_walks,
            while_true_with_break, while_condition_on_a_tensor, for_else_and_enumerate]


@pytest.mark.parametrize("fn", _loop_sources(), ids=lambda f: f.__name__)
@pytest.mark.parametrize("backend", ["eager", "llvm"])
def test_loops_as_eager(fn, backend, capsys):
    """Breaks inside loops of all shapes: eager's result, exception and output, on
    inputs that take the loop different numbers of times; no frame falls back."""
    compiled = ember.compile(fn, backend=backend)
    for scale in (1.0, 3.0, -1.0):
        x = ember.ones(3) * scale
        try:
            want, want_exc = fn(x), None
        except ValueError as e:
            want, want_exc = None, e
        printed = capsys.readouterr().out
        try:
            got, got_exc = compiled(x), None
        except ValueError as e:
            got, got_exc = None, e
        assert capsys.readouterr().out == printed
        assert repr(got_exc) == repr(want_exc)
        if want_exc is None:
            assert_same(got, want)
    assert counters["stats"]["graph_breaks"] >= 1
    assert counters["stats"]["frames_fallback"] == 0, dict(counters["unsupported"])


def _alias_block_sources():
    def view_in_a_no_grad_block(x):
        y = x * 2
        t = y.view(2, 2)
        with ember.no_grad():
            print("mid")
            t.add_(1)
        return y, t

    def input_view_in_a_loop(x):
        v = x[1:]
        for i in range(2):
            print(i)
            v.mul_(2)
        return x

    def view_in_a_try_block(x):
        y = x + 1
        a, b = y[:2], y[1:]
        try:
            print("mid")
            a.mul_(3)
        except RuntimeError:
            pass
        return b
    return [view_in_a_no_grad_block, input_view_in_a_loop, view_in_a_try_block]


@pytest.mark.parametrize("fn", _alias_block_sources(), ids=lambda f: f.__name__)
@pytest.mark.parametrize("backend", ["eager", "aot_eager", "llvm"])
def test_memory_shared_across_a_break_in_a_block_is_eagers(fn, backend, capsys):
    """Views and aliases crossing a break inside a block keep eager's answer: values,
    writes into the input and gradients."""
    base = ember.randn(4, dtype=ember.float64, requires_grad=True)
    want_in, got_in = base.clone(), base.clone()
    want = fn(want_in)
    got = ember.compile(fn, backend=backend)(got_in)
    want, got = (want if isinstance(want, tuple) else (want,)), \
        (got if isinstance(got, tuple) else (got,))
    for w, g in zip(want, got):
        assert g.tolist() == w.tolist()
    assert got_in.tolist() == want_in.tolist()
    assert got_in._version == want_in._version

    def grad_of(outs):
        base.grad = None
        try:
            sum(o.sum() for o in outs).backward()
        except RuntimeError as e:
            return type(e)
        return base.grad.tolist()
    assert grad_of(got) == grad_of(want)
