"""Graph breaks inside inlined calls ([capture-2]): a break inside a helper function, a
method or a submodule's forward that the frame inlines breaks there and resumes there
(nested resume, convert.compile_break and resume.entry_function). The graph before the
break holds the caller's ops before the call and the callee's before the break; CPython
runs the unsupported instruction; the callee's rest runs as a resume function whose
return value feeds the caller's resume function. Breaks by print, .item(), a
data-dependent `if`, an ember.compiler.disable'd call; two levels deep; inside loops
(the caller's or the callee's); inside a `with no_grad()` and a Python context manager
in the callee; in a method reached through super(); with keyword, default and star
arguments; in closures (a factory's, and one the compiled function makes over its own
cells, written after the break); exceptions crossing the frames.

Each case runs compiled under the backends eager, aot_eager and llvm and must equal
eager: result (values, requires_grad and grad_fn), printed output, LOG (side effects in
order) and grad mode after the call. `graphs`/`breaks` are ember's counts; torch 2.13's
explain (graph_count, graph_break_count) for the same source is computed here
(test_counts_are_no_more_than_torchs), never taken from ember: ember's are no more."""
import re

import pytest

import ember
from ember.capture import _hook, counters

from break_cases import (Case, check_explain_counts, check_matches_eager,  # noqa: F401
                         check_second_call, fresh_compiler, torch_counts)
from test_catalogue import assert_same, make_namespace

pytestmark = pytest.mark.skipif(not _hook.available, reason="capture needs CPython 3.11")

CASES = [
    Case("helper_print", """
LOG = []
def helper(y):
    LOG.append("helper before")
    z = y * 3
    print("in helper", z.shape)
    LOG.append("helper after")
    return z + 1
def fn(x):
    LOG.append("fn before")
    y = x.sin()
    z = helper(y)
    LOG.append("fn after")
    return z.cos()
""", "T(3).requires_grad_()", 3, 1, r"print\(\)"),
    Case("helper_item", """
def helper(y):
    s = y.sum().item()
    return y * s
def fn(x):
    y = x + 1
    return helper(y) - x
""", "T(4)", 3, 1, r"Tensor\.item\(\)"),
    Case("helper_data_dependent_if", """
def helper(y):
    z = y * 2
    if z.sum() > 0:
        return z + 1
    return z - 1
def fn(x):
    y = x.exp()
    return helper(y).sin()
""", "T(4)", 3, 1, r"data-dependent control flow"),
    Case("helper_calls_a_disabled_function", """
LOG = []
@torch.compiler.disable
def report(t):
    LOG.append(("report", t.shape[0]))
def helper(y):
    z = y.relu()
    report(z)
    return z * 2
def fn(x):
    y = x * 3
    return helper(y) + y
""", "T(5)", 3, 1, r"ember\.compiler\.disable|disable"),
    Case("helper_reads_an_attribute_it_cannot_trace", """
def helper(y):
    z = y * 3
    g = z.grad_fn
    return z + 1, g is None
def fn(x):
    y = x.sin()
    z, none = helper(y)
    return z.cos(), none
""", "T(3).requires_grad_()", 3, 1, r"grad_fn", torch=(2, 1)),
    # (the break is a LOAD_ATTR of helper's: the entry function names its attribute;
    # torch breaks fn at the call and skips helper's frame, whose y * 3 and z + 1 it
    # runs uncompiled)
    Case("two_breaks_in_the_helper", """
def helper(y):
    z = y * 3
    print("one")
    z = z + 1
    print("two", end="\\n")
    return z * 2
def fn(x):
    y = x.sin()
    return helper(y).cos()
""", "T(3)", 4, 2, r"print\(\)"),
    # (the second break is in helper's resume function, a frame of its own)
    Case("submodule_forward_print", """
class Inner(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
    def forward(self, x):
        y = self.lin(x)
        print("inner")
        return y.relu()
class Outer(nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = Inner()
        self.out = nn.Linear(4, 2)
    def forward(self, x):
        return self.out(self.inner(x * 2))
torch.manual_seed(0)
model = Outer()
def fn(x):
    return model(x)
""", "T(3, 4)", 3, 1, r"print\(\)"),
    Case("two_levels_deep", """
LOG = []
def inner(y):
    LOG.append("inner")
    print("deep")
    return y * 5
def middle(y):
    z = inner(y + 1)
    LOG.append("middle")
    return z - y
def fn(x):
    a = x.cos()
    b = middle(a)
    return a + b
""", "T(3).requires_grad_()", 4, 1, r"print\(\)"),
    Case("break_in_a_method_called_through_super", """
class Base(nn.Module):
    def forward(self, x):
        y = x * 2
        print("base")
        return y + 1
class Child(Base):
    def forward(self, x):
        return super().forward(x + 1) * 3
model = Child()
def fn(x):
    return model(x).sum()
""", "T(3)", 4, 1, r"print\(\)"),
    # (three frames resume: Base.forward's add, Child.forward's mul, fn's sum)
    Case("super_called_after_the_break", """
class Base(nn.Module):
    def forward(self, x):
        return x * 2
class Child(Base):
    def forward(self, x):
        y = x + 1
        print("child")
        return super().forward(y) * 3
model = Child()
def fn(x):
    return model(x).sum()
""", "T(3)", 3, 1, r"print\(\)"),
    # (zero-argument super() in the resume function: its first argument and the
    # __class__ cell kept)
    Case("keyword_default_and_star_arguments", """
def helper(y, scale=2.0, *rest, shift=0.5, **opts):
    z = y * scale + shift
    print("helper", len(rest), sorted(opts))
    for r in rest:
        z = z + r
    return z * opts.get("gain", 1.0)
def fn(x):
    args = (x, 3.0, x)
    return helper(*args, shift=1.0, gain=2.0) + helper(x)
""", "T(3)", 5, 2, r"print\(\)"),
    Case("factory_closure", """
def make():
    scale = T(3)
    def helper(y):
        z = y * scale
        print("scaled")
        return z + scale
    def fn(x):
        return helper(x.sin()).cos()
    return fn
fn = make()
""", "T(3)", 3, 1, r"print\(\)"),
    Case("closure_made_in_the_frame_writes_its_cell_after_the_break", """
def fn(x):
    k = x * 2
    n = 1
    def helper(y):
        nonlocal n
        z = y + k
        print("closure")
        n = n + 1
        return z * n
    w = helper(x)
    return w + k, n
""", "T(3)", 3, 1, r"print\(\)"),
    Case("helper_called_inside_a_loop", """
def helper(y):
    print("step")
    return y * 2
def fn(x):
    y = x + 1
    for i in range(3):
        y = helper(y) + i
    return y.sum()
""", "T(3)", 3, 2, r"print\(\)", torch=(1, 0)),
    # (the call is inside fn's loop: the break moves before the loop, which a loop
    # function runs in CPython, helper's frames breaking on their own; torch skips
    # fn's frame)
    Case("break_inside_the_callees_loop", """
def helper(y):
    for i in range(2):
        y = y + 1
        print(i)
    return y * 2
def fn(x):
    y = x * 3
    return helper(y).exp()
""", "T(3)", 3, 1, r"print\(\)", torch=(2, 1)),
    # (a loop function runs helper's loop, helper's rest and fn's resume; torch breaks
    # fn at the call and skips helper's frame, whose y * 2 it runs uncompiled)
    Case("no_grad_block_in_the_callee", """
def helper(y):
    with torch.no_grad():
        z = y * 2
        print("in no_grad", torch.is_grad_enabled())
        z = z + 1
    return z * y, z.requires_grad
def fn(x):
    y = x.sin()
    w, flag = helper(y)
    return w + x, flag, torch.is_grad_enabled()
""", "T(3).requires_grad_()", 3, 1, r"print\(\)"),
    Case("python_context_manager_in_the_callee", """
LOG = []
class Tag:
    def __enter__(self):
        LOG.append("enter")
        return self
    def __exit__(self, *exc):
        LOG.append(("exit", exc[0] is None))
        return False
tag = Tag()
def helper(y):
    with tag:
        z = y * 2
        print("in tag")
        z = z + 1
    return z
def fn(x):
    return helper(x + 1) * x
""", "T(3)", 3, 1, r"print\(\)", torch=(2, 1)),
    # (torch skips helper's frame, a break inside a Python context manager's block)
    Case("exception_from_the_break_caught_by_the_caller", """
LOG = []
@torch.compiler.disable
def check(t):
    LOG.append("check")
    raise ValueError("too big")
def helper(y):
    z = y * 2
    check(z)
    return z
def fn(x):
    y = x + 1
    try:
        w = helper(y)
    except ValueError as e:
        LOG.append(str(e))
        w = y * 10
    return w.sin()
""", "T(3)", 1, 1, r"disable", torch=(1, 0)),
    # (the exception goes to fn's handler, which runs in CPython with fn's rest; torch
    # skips fn's frame, a break inside a try block)
    Case("exception_after_the_break_caught_by_the_caller", """
LOG = []
def helper(y, n):
    z = y * 2
    print("before raising")
    if n > 1:
        raise KeyError(n)
    return z
def fn(x):
    y = x + 1
    try:
        w = helper(y, 2)
    except KeyError:
        LOG.append("caught")
        w = y
    return w * 3
""", "T(3)", 1, 2, r"print\(\)", torch=(1, 0)),
    # (helper's resume function raises: a frame leaving by an exception runs in
    # CPython, as any, listed by explain (FALLBACKS); fn's handler catches it)
    Case("break_in_the_callee_inside_the_callers_no_grad_block", """
def helper(y):
    v = y.sum().item()
    return y * v
def fn(x):
    y = x * 2
    with torch.no_grad():
        z = helper(y)
    return z + y, z.requires_grad
""", "T(3).requires_grad_()", 3, 1, r"Tensor\.item\(\)"),
    # breaks in a hook, a property getter, a callback given to a helper: the hook runs
    # from the module call (no CALL of the frame's to resume in), so the break moves out
    # to the submodule's call, whose frames (the hook's) convert on their own; a getter
    # and a callback resume where they broke
    Case("forward_pre_hook_prints", """
LOG = []
def pre(mod, args):
    LOG.append("pre")
    print("pre hook")
    return (args[0] * 2,)
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 3)
        self.lin.register_forward_pre_hook(pre)
    def forward(self, x):
        return self.lin(x).relu()
torch.manual_seed(0)
model = M()
def fn(x):
    return model(x)
""", "T(2, 3)", 3, 2, r"print\(\)"),
    Case("forward_hook_item", """
def post(mod, args, out):
    s = out.sum().item()
    return out * s
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 3)
        self.lin.register_forward_hook(post)
    def forward(self, x):
        return self.lin(x + 1).tanh()
torch.manual_seed(0)
model = M()
def fn(x):
    return model(x)
""", "T(2, 3)", 5, 2, r"Tensor\.item\(\)"),
    Case("property_getter_prints", """
LOG = []
class Scaled:
    def __init__(self, t):
        self.t = t
    @property
    def doubled(self):
        v = self.t * 2
        print("getter")
        LOG.append("got")
        return v + 1
def fn(x):
    s = Scaled(x.sin())
    return s.doubled * 3
""", "T(3)", 4, 2, r"print\(\)", torch=(0, -1)),
    Case("callback_passed_to_a_helper_prints", """
LOG = []
def apply(f, v):
    a = v + 1
    b = f(a)
    LOG.append("applied")
    return b * 2
def cb(t):
    u = t.sin()
    print("cb")
    return u.cos()
def fn(x):
    return apply(cb, x) - 1
""", "T(3)", 4, 1, r"print\(\)", torch=(5, 4)),
    Case("lambda_callback_reads_item", """
def apply(f, v):
    return f(v * 2) + 1
def fn(x):
    return apply(lambda t: t * t.sum().item(), x) * 3
""", "T(3)", 4, 1, r"Tensor\.item\(\)"),
]


# frames that run whole in CPython (counted in counters["unsupported"]) by design
FALLBACKS = {"exception_after_the_break_caught_by_the_caller": 1}
# the break's result is a new object each call, which the resume function guards by
# identity (as after a frame's own break): it converts again on the next call
NEW_EACH_CALL = {"helper_reads_an_attribute_it_cannot_trace"}   # (the grad_fn node)


@pytest.mark.parametrize("backend", ["eager", "aot_eager", "llvm"])
@pytest.mark.parametrize("case", CASES, ids=str)
def test_nested_break_matches_eager(case, backend, capsys):
    check_matches_eager(case, backend, capsys, fallbacks=FALLBACKS.get(case.name, 0))


@pytest.mark.parametrize("case", CASES, ids=str)
def test_second_call_hits_the_cache(case, capsys):
    check_second_call(case, capsys, converts_again=case.name in NEW_EACH_CALL)


@pytest.mark.parametrize("case", CASES, ids=str)
def test_explain_counts(case, capsys):
    check_explain_counts(case)


def test_counts_are_no_more_than_torchs(torch, capsys):
    """torch 2.13's explain, run here on the same sources: ember's graph and break
    counts are no more than torch's (torch breaks the caller at the call and the
    callee in its own frame; ember once, inside). `torch` records torch's counts where
    it skips a frame (a break inside a loop, a try block or a Python context manager's
    block: no graph), which ember resumes instead (checked, so a change in torch
    shows)."""
    got = {name: c[:2] for name, c in torch_counts(torch, CASES).items()}
    assert {c.name: (got[c.name], (c.graphs, c.breaks)) for c in CASES if c.torch is None
            and (c.graphs > got[c.name][0] or c.breaks > got[c.name][1])} == {}
    assert {c.name: got[c.name] for c in CASES
            if c.torch is not None and got[c.name] != c.torch} == {}


def test_the_first_graph_holds_the_callers_and_the_callees_ops(capsys):
    """The break is inside helper, not at its call: the graph before it has fn's sin
    and helper's mul; helper's add and fn's cos come after it."""
    case = CASES[0]
    ns, args, kwargs = make_namespace(ember, case)
    out = ember.capture.explain(ns["fn"])(*args, **kwargs)
    targets = [[str(n.target) for n in gm.graph.nodes if n.op == "call_function" or
                n.op == "call_method"] for gm in out.graphs]
    assert any("sin" in t for t in targets[0]) and any("mul" in t for t in targets[0]), \
        targets
    assert not any("cos" in t for t in targets[0])
    rest = [t for g in targets[1:] for t in g]
    assert any("add" in t for t in rest) and any("cos" in t for t in rest), targets
    assert out.break_reasons[0].user_stack[-1].name == "helper"


def test_both_edges_of_a_branch_inside_a_helper(capsys):
    case = next(c for c in CASES if c.name == "helper_data_dependent_if")
    ns, args, kwargs = make_namespace(ember, case)
    fn = ns["fn"]
    compiled = ember.compile(fn, backend="eager")
    x = args[0]
    for v in (x.abs() + 1, -x.abs() - 5, x.abs() + 2):
        assert_same(compiled(v), fn(v))
    assert counters["stats"]["frames_fallback"] == 0
    assert counters["stats"]["graph_breaks"] == 1


def test_gradients_flow_through_the_nested_resume(capsys):
    """The backward of a result made across the break (caller, callee, both resume
    functions) gives eager's gradient."""
    case = CASES[0]
    ns, args, _ = make_namespace(ember, case)
    x = args[0]
    want = ns["fn"](x).sum()
    want.backward()
    g_want = x.grad.clone()
    x.grad = None
    for backend in ("eager", "aot_eager", "llvm"):
        ember.compiler.reset()
        got = ember.compile(ns["fn"], backend=backend)(x).sum()
        got.backward()
        assert x.grad.tolist() == pytest.approx(g_want.tolist(), rel=1e-5)
        x.grad = None


# ---------------------------------------------------------------- loop locals
# A local first bound inside a loop and read after it: the break inside the loop moves
# before it (a loop function runs the loop in CPython); at each exit the loop function
# passes the local, or UNBOUND where the loop never bound it (the resume function
# deletes it, so the read raises eager's UnboundLocalError), instead of the frame
# falling back whole.

def _loop_local_sources():
    def for_loop_binds(x, n):
        y = x * 2
        for i in range(n):
            z = y + i
            print(i)
        return z * 2, i

    def while_loop_binds(x, n):
        y = x + 1
        k = 0
        while k < n:
            last = y * k
            print("k", k)
            k += 1
        return last + y

    def bound_on_some_iterations(x, n):
        y = x.sin()
        for i in range(n):
            if i == 1:
                found = y * 10
            print(i)
        return found - y

    def deleted_in_the_loop(x, n):
        y = x * 3
        tmp = y
        for i in range(n):
            print(i)
            if i == 2:
                del tmp
        return tmp + 1

    def break_in_the_loop_of_a_helper(x, n):
        def helper(y, n):
            for i in range(n):
                w = y * i
                print("helper", i)
            return w
        return helper(x + 1, n).cos()
    return [for_loop_binds, while_loop_binds, bound_on_some_iterations,
            deleted_in_the_loop, break_in_the_loop_of_a_helper]


@pytest.mark.parametrize("fn", _loop_local_sources(), ids=lambda f: f.__name__)
@pytest.mark.parametrize("backend", ["eager", "aot_eager", "llvm"])
def test_local_bound_in_a_loop_and_read_after_it(fn, backend, capsys):
    """eager's result, output and exception for loops that bind the local, bind it on
    some iterations, never run, or delete it; no frame falls back where the local is
    bound."""
    compiled = ember.compile(fn, backend=backend)
    for n in (3, 2, 1, 0):
        x = ember.ones(3) * (n + 1)
        try:
            want, want_exc = fn(x, n), None
        except UnboundLocalError as e:
            want, want_exc = None, e
        printed = capsys.readouterr().out
        fallbacks = counters["stats"]["frames_fallback"]
        try:
            got, got_exc = compiled(x, n), None
        except UnboundLocalError as e:
            got, got_exc = None, e
        assert capsys.readouterr().out == printed
        assert repr(got_exc) == repr(want_exc)
        if want_exc is None:
            assert_same(got, want)
            assert counters["stats"]["frames_fallback"] == fallbacks, \
                dict(counters["unsupported"])
    assert counters["stats"]["graph_breaks"] >= 1
    assert not any("unbound" in r for r in counters["unsupported"]), \
        dict(counters["unsupported"])


@pytest.mark.parametrize("backend", ["eager", "llvm"])
def test_an_exception_reaches_the_callees_handler_then_the_callers(backend):
    """The break's instruction raises inside helper's try block: helper's handler
    runs (in CPython, from its handler resume function), and when it re-raises, fn's
    handler around the call; eager's results and order of events on every path."""
    log = []

    @ember.compiler.disable
    def check(t, fail):
        log.append("check")
        if fail:
            raise ValueError("bad")

    def helper(y, fail):
        z = y * 2
        try:
            check(z, fail)
            z = z + 1
        except ValueError:
            log.append("inner caught")
            z = z * 10
            if fail == 2:
                raise
        return z

    def fn(x, fail):
        y = x + 1
        try:
            w = helper(y, fail)
        except ValueError:
            log.append("outer caught")
            w = y
        return w.sin()

    compiled = ember.compile(fn, backend=backend)
    for fail in (0, 1, 2, 0):
        log.clear()
        want, want_log = fn(ember.ones(3), fail), list(log)
        log.clear()
        got = compiled(ember.ones(3), fail)
        assert log == want_log
        assert_same(got, want)
    assert counters["stats"]["frames_fallback"] == 0, dict(counters["unsupported"])
