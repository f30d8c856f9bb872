"""Graph breaks ([capture-2]): at what it cannot trace, the frame compiles the graph so
far, runs the instruction in CPython and resumes capture of the rest in a resume
function (ember/capture/resume.py), instead of running the whole frame in CPython.

Each case runs compiled under three backends and must equal eager: result, printed
output and side effects (LOG, a list the function writes). Its graph and break counts
are those torch._dynamo.explain reports for the same source (computed here when torch
is installed)."""
import re

import pytest

import ember
from ember.capture import CaptureError, _hook, counters

from break_cases import (Case, check_explain_counts, check_matches_eager,  # noqa: F401
                         check_second_call, fresh_compiler, torch_counts)
from test_catalogue import assert_same, make_namespace

pytestmark = pytest.mark.skipif(not _hook.available, reason="capture needs CPython 3.11")


CASES = [
    Case("print_in_the_middle", """
LOG = []
def fn(x):
    LOG.append("before")
    y = x.sin() * 2
    print("logged", len(LOG), y.shape)
    LOG.append("after")
    return y.cos() + 1
""", "T(3, 4)", 2, 1, r"print\(\)"),
    Case("print_with_keywords", """
def fn(x):
    y = x + 1
    print("a", "b", sep="-", end="!\\n")
    return y * 2
""", "T(3,)", 2, 1, r"print\(\)"),
    Case("branch_on_tensor_true_and_false", """
def fn(x, bias=3):
    y = x.sin()
    if y.sum() > 0:
        y = y + bias
    else:
        y = y - bias
    return y.cos()
""", "T(5,)", 2, 1, r"data-dependent control flow"),
    Case("item", """
def fn(x):
    y = x.sin()
    v = y.sum().item()
    return y * v
""", "T(4,)", 2, 1, r"Tensor\.item\(\)"),
    Case("item_in_an_argument_list", """
def fn(x):
    y = x.sin()
    return torch.add(y, y.sum().item())
""", "T(4,)", 2, 1, r"Tensor\.item\(\)"),
    Case("item_in_a_tensor_method_call", """
def fn(x):
    y = x.sin()
    return y.add(y.sum().item(), alpha=2)
""", "T(4,)", 2, 1, r"Tensor\.item\(\)", torch=(1, 0)),
    # (y.add, a bound method below the break, is rebuilt as attrgetter("add")(y), and
    # the resume function captures its call; torch 2.13 keeps this .item() in its graph)
    Case("print_with_star_arguments", """
def fn(x):
    y = x * 2
    opts = {"sep": ","}
    print(*[1, 2], **opts)
    return y + 1
""", "T(3,)", 2, 1, r"print\(\)"),
    Case("tolist", """
def fn(x):
    y = x * 2
    vals = y.tolist()
    return y + len(vals), vals
""", "T(3,)", 2, 1, r"Tensor\.tolist\(\)"),
    Case("numpy", """
def fn(x):
    y = x * 2
    a = y.numpy()
    return y + 1
""", "T(3,)", 2, 1, r"Tensor\.numpy\(\)", torch=(1, 0)),    # torch traces NumPy
    Case("unknown_c_function", """
import zlib
def fn(x):
    y = x + 1
    h = zlib.crc32(b"ember")
    return y * (h % 7)
""", "T(3,)", 2, 1, r"crc32"),
    Case("two_prints", """
def fn(x):
    y = x * 2
    print("one")
    y = y + 1
    print("two")
    return y.exp()
""", "T(3,)", 3, 2, r"print\(\)"),
    Case("closure", """
def make():
    scale = T(3,)
    def fn(x):
        y = x * scale
        print("scaled")
        return y + scale
    return fn
fn = make()
""", "T(3,)", 2, 1, r"print\(\)"),
    Case("helper_function_breaks", """
def helper(y):
    z = y * 3
    print("in helper")
    return z + 1
def fn(x):
    y = x.sin()
    z = helper(y)
    return z.cos()
""", "T(3,)", 3, 1, r"print\(\)", torch=(4, 3)),
    # a break inside an inlined call breaks there (nested resume): x.sin and y * 3 in
    # one graph, then helper's rest and fn's rest in resume functions; torch 2.13
    # breaks fn at the call, then helper in its own frame, counting the inner break
    # twice, as it restarts analysis
    Case("submodule_forward_breaks", """
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
""", "T(3, 4)", 3, 1, r"print\(\)", torch=(4, 3)),
    # one break, inside Inner.forward: x * 2 and self.lin in the first graph, relu in
    # Inner.forward's resume function, self.out in Outer.forward's (fn's rest has no
    # ops); torch breaks fn at model(x), Outer.forward at self.inner(...) and
    # Inner.forward at print
    Case("backward_and_logging", """
import logging
log = logging.getLogger("graph_break_case")
log.propagate = False                   # (not into pytest's handlers)
log.handlers[:] = [logging.NullHandler()]
W = T(3).requires_grad_()
def fn(x):
    loss = (x * W).sin().sum()
    loss.backward()
    log.warning("loss computed")
    return loss.detach() * 2
""", "T(3,)", 2, 2, r"Tensor\.backward\(\)", torch=(2, 1)),
    # (torch 2.13 does not count the logging call as a break)
    Case("grad_read_after_backward", """
W = T(3).requires_grad_()
def fn(x):
    loss = (x * W).sin().sum()
    loss.backward()
    g = W.grad
    W.grad = None
    return loss.detach() * 2 + g
""", "T(3,)", 2, 1, r"Tensor\.backward\(\)", torch=(2, 1)),
    # (the read and the write of .grad are captured, as torch's: the read a graph input,
    # the write a side effect replayed after the graph)
    Case("inplace_on_input_requiring_grad", """
def fn(x):
    x.add_(1)
    return x * 2
""", "T(3,).requires_grad_() * 1", 1, 1, r"in-place add_ on an input that requires grad",
         torch=(1, 0)),
    # (the add_ runs in CPython: an empty graph before it is no graph)
    # (objects of plain classes made by the frame are captured whole now: the catalogue's
    # classes cases, e.g. plain_object_with_method_and_property)
    Case("deep_recursion", """
def fact(x, n):
    return x if n <= 1 else x * fact(x, n - 1)
def fn(x):
    return fact(x, 40)
""", "T(3,)", 4, 3, r"inlining too deep", torch=(1, 0)),
    # (each fact frame inlines 32 levels, then breaks at its recursive call; n, an int
    # argument that changes between fact's frames, is a size symbol from the second)
]


@pytest.mark.parametrize("backend", ["eager", "aot_eager", "llvm"])
@pytest.mark.parametrize("case", CASES, ids=str)
def test_break_matches_eager(case, backend, capsys):
    check_matches_eager(case, backend, capsys)


@pytest.mark.parametrize("case", CASES, ids=str)
def test_second_call_hits_the_cache(case, capsys):
    check_second_call(case, capsys)


@pytest.mark.parametrize("case", CASES, ids=str)
def test_explain_counts(case, capsys):
    check_explain_counts(case)


def test_torch_counts(torch, capsys):
    """torch 2.13's explain of the same sources gives the counts recorded."""
    got = {name: c[:2] for name, c in torch_counts(torch, CASES).items()}
    assert {c.name: got[c.name] for c in CASES
            if got[c.name] != (c.torch or (c.graphs, c.breaks))} == {}


def test_both_edges_of_a_tensor_branch(capsys):
    case = CASES[2]
    ns, args, kwargs = make_namespace(ember, case)
    fn = ns["fn"]
    compiled = ember.compile(fn, backend="eager")
    x = args[0]
    for v in (x.abs() + 1, -x.abs() - 1, x.abs() + 2):
        assert_same(compiled(v), fn(v))
    assert counters["stats"]["frames_fallback"] == 0


def test_side_effects_replay_before_the_break(capsys):
    seen = []

    class Box:
        pass
    box = Box()
    box.n = 0

    def report():
        seen.append((box.n, list(log)))
    ember.compiler.disable(report)
    log = []

    def fn(x):
        box.n = 1
        log.append("a")
        report()
        box.n = 2
        log.append("b")
        return x + 1

    compiled = ember.compile(fn, backend="eager")
    compiled(ember.ones(2))
    assert seen == [(1, ["a"])]
    assert box.n == 2 and log == ["a", "b"]
    assert counters["stats"]["graph_breaks"] == 1
    assert any("ember.compiler.disable" in r for r in counters["graph_break"])


def test_exception_from_the_break_instruction_propagates(capsys):
    def fn(x):
        y = x * 2
        v = y.sum().item()
        return y[int(v) + 100]          # IndexError eagerly too

    compiled = ember.compile(fn, backend="eager")
    with pytest.raises(IndexError) as got:
        compiled(ember.ones(3))
    with pytest.raises(IndexError) as want:
        fn(ember.ones(3))
    assert str(got.value) == str(want.value)


def test_unbound_local_after_the_break_raises_as_eager(capsys):
    def fn(x, flag):
        if flag:
            z = x
        print("between")
        return z + 1

    compiled = ember.compile(fn, backend="eager")
    assert_same(compiled(ember.ones(2), True), ember.ones(2) + 1)
    with pytest.raises(UnboundLocalError):
        compiled(ember.ones(2), False)


def test_break_in_a_loop_resumes_after_it(capsys):
    """(more in test_graph_breaks_blocks.py)"""
    def fn(x):
        for i in range(3):
            x = x * 2
            print(i)
        return x

    compiled = ember.compile(fn, backend="eager")
    assert_same(compiled(ember.ones(2)), fn(ember.ones(2)))
    assert counters["stats"]["frames_fallback"] == 0
    assert counters["stats"]["graph_breaks"] == 1


def test_break_in_a_loop_whose_local_is_first_bound_in_it_resumes(capsys):
    """y is unbound before the loop and read after it: the loop function passes it on
    (tests/capture/test_graph_breaks_nested.py has the cases where it stays unbound)."""
    def fn(x):
        for i in range(3):
            y = x * i
            print(i)
        return y

    compiled = ember.compile(fn, backend="eager")
    assert_same(compiled(ember.ones(2)), fn(ember.ones(2)))
    assert counters["stats"]["frames_fallback"] == 0, dict(counters["unsupported"])
    assert counters["stats"]["graph_breaks"] == 1


@pytest.mark.parametrize("src,construct,line,hint", [
    ("def fn(x):\n    y = x * 2\n    print(y)\n    return y\n", r"print\(\)", 3,
     "move print out of the compiled function or use ember.compiler.disable"),
    ("def fn(x):\n    if x.sum() > 0:\n        return x\n    return -x\n",
     "data-dependent control flow", 2,
     "use ember.where instead of `if` on a tensor value"),
    ("def fn(x):\n    v = x.sum().item()\n    return x * v\n", r"Tensor\.item\(\)", 2,
     "keep the value a tensor"),
])
def test_fullgraph_names_construct_line_and_fix(src, construct, line, hint):
    ns = {}
    filename = "<graph break fullgraph>"
    exec(compile(src, filename, "exec"), ns)
    compiled = ember.compile(ns["fn"], backend="eager", fullgraph=True)
    with pytest.raises(CaptureError) as info:
        compiled(ember.ones(3))
    msg = str(info.value)
    assert re.search(construct, msg) and f"{filename}:{line} " in msg and hint in msg, msg
    assert counters["stats"]["graph_breaks"] == 0


def test_resume_functions_are_made_from_the_original_code(capsys):
    """A break in a resume function resumes from the original code: one prologue, and
    a resume function per (offset, stack shape), not one nested in another."""
    case = next(c for c in CASES if c.name == "two_prints")
    ns, args, kwargs = make_namespace(ember, case)
    compiled = ember.compile(ns["fn"], backend="eager")
    compiled(*args, **kwargs)
    names = [g.meta["code"].co_qualname for g in compiled._ember_compile_context.graphs]
    assert names[0] == "fn" and len(names) == 3
    assert all(re.fullmatch(r"fn\.<resume at \d+>", n) for n in names[1:]), names


def test_a_prefix_graph_that_raises_runs_the_frame_eagerly_once(capsys):
    """If the graph before a break raises, nothing of the frame is visible yet: the
    whole frame runs eagerly instead, once (one print), and its result is returned."""
    def failing_backend(gm, example_inputs):
        def run(*args):
            raise ValueError("backend failure at run time")
        return run

    log = []

    def fn(x):
        y = x * 2
        log.append("before")
        print("middle")
        return y + 1

    compiled = ember.compile(fn, backend=failing_backend)
    with pytest.warns(RuntimeWarning, match="backend failure at run time"):
        got = compiled(ember.ones(2))
    assert_same(got, ember.ones(2) * 2 + 1)
    assert capsys.readouterr().out == "middle\n"
    assert log == ["before"]
    assert counters["stats"]["graph_breaks"] == 1
    assert any("backend failure" in r for r in counters["runtime_fallback"])


# ------------------------------------------------------------------ memory shared across a break

def _alias_sources():
    """Programs in which tensors sharing memory (views of inputs or of intermediates,
    two names for one memory) are live at a break, then written or differentiated."""
    def view_of_input_written(x):
        x.permute(0, 1).sub_(x)          # the bound method of a view crosses the call
        return x

    def view_of_intermediate_written(x):
        v = x * 1
        v.expand(1, 4)[ember.tensor([0]), 1:] += 5   # the item store is the break
        return v

    def view_written_after_print(x):
        y = x * 2
        t = y.view(2, 2)
        print("mid")
        t.add_(1)
        return y, t

    def two_views_of_one_memory(x):
        y = x + 1
        a, b = y[:2], y[1:]
        print("mid")
        a.mul_(3)
        return b

    def input_view_after_print(x):
        v = x[1:]
        print("mid")
        v.mul_(2)
        return x
    return [view_of_input_written, view_of_intermediate_written, view_written_after_print,
            two_views_of_one_memory, input_view_after_print]


@pytest.mark.parametrize("fn", _alias_sources(), ids=lambda f: f.__name__)
@pytest.mark.parametrize("backend", ["eager", "aot_eager", "llvm"])
def test_memory_shared_across_a_break_is_eagers(fn, backend, capsys):
    """Never a wrong answer: values, the writes into inputs and gradients as eager."""
    ember.compiler.reset()
    shape = (4, 4) if fn.__name__ == "view_of_input_written" else (4,)
    base = ember.randn(*shape, dtype=ember.float64, requires_grad=True)
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
        except RuntimeError as e:       # eager's backward may refuse (a saved value
            return type(e)              # written in place): compiled must as well
        return base.grad.tolist()
    assert grad_of(got) == grad_of(want)
    ember.compiler.reset()
