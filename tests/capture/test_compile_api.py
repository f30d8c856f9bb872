"""ember.compile's API surface, as torch.compile's: decorator forms, functions and
modules, backends, arguments, ember._dynamo, ember.compiler's helpers, backend failures,
and exceptions raised inside compiled code."""
import contextlib
import os
import traceback
import warnings

import numpy as np
import pytest

import ember
import ember.nn as nn
from ember.capture import CaptureError, _hook, counters

pytestmark = pytest.mark.skipif(not _hook.available, reason="capture needs CPython 3.11")

HERE = os.path.abspath(__file__)


@pytest.fixture(autouse=True)
def fresh():
    ember.compiler.reset()
    yield
    assert _hook.get_state() is None
    ember.compiler.reset()


def T(*shape, seed=0):
    return ember.from_numpy(np.random.default_rng(seed).standard_normal(shape)
                            .astype(np.float32))


def close(a, b):
    assert a.shape == b.shape and a.dtype == b.dtype
    np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=1e-6, atol=1e-6)


def graphs_of(compiled):
    return compiled._ember_compile_context.graphs


# ------------------------------------------------------------------ decorator forms

def test_decorator_without_and_with_arguments():
    @ember.compile
    def f(x):
        return x.relu() * 2

    @ember.compile(backend="eager", fullgraph=True)
    def g(x):
        return x.sigmoid() + 1
    x = T(5)
    close(f(x), x.relu() * 2)
    close(g(x), x.sigmoid() + 1)
    assert f.__name__ == "f" and f.__wrapped__ is not None
    assert len(graphs_of(g)) == 1 and graphs_of(g)[0].graph is not None


class MLP(ember.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = ember.nn.Linear(4, 8)
        self.fc2 = ember.nn.Linear(8, 2)

    def forward(self, x):
        return self.fc2(self.fc1(x).relu())


def test_modules_compile_and_keep_their_interface():
    net = MLP()
    compiled = ember.compile(net, backend="eager")
    x = T(3, 4)
    close(compiled(x), net(x))
    assert isinstance(compiled, ember.nn.Module)
    assert compiled._orig_mod is net
    assert compiled.fc1 is net.fc1                       # attributes read through
    assert [n for n, _ in compiled.named_parameters()] == \
        ["_orig_mod." + n for n, _ in net.named_parameters()]
    deco = ember.compile(backend="eager")(MLP())
    close(deco(x), deco._orig_mod(x))
    assert len(graphs_of(compiled)) == 1


def test_module_parameters_are_read_each_call():
    net = MLP()
    compiled = ember.compile(net, backend="eager")
    x = T(3, 4)
    compiled(x)
    opt = ember.optim.SGD(net.parameters(), lr=0.5)
    for _ in range(3):                                   # training steps update in place
        loss = compiled(x).sum()
        loss.backward()
        opt.step()
        opt.zero_grad()
        close(compiled(x), net(x))
    assert len(graphs_of(compiled)) == 1


def test_disable_argument_returns_the_model_itself():
    def f(x):
        return x
    assert ember.compile(f, disable=True) is f


# ------------------------------------------------------------------ backends

@pytest.mark.parametrize("name", ["aot_eager", "llvm", "inductor"])
def test_planned_backends_work_or_say_they_are_not_built(name):
    def f(x):
        return (x * 2 + 1).relu()
    x = T(8)
    try:
        compiled = ember.compile(f, backend=name)
    except NotImplementedError as e:
        assert name in str(e) and "not built yet" in str(e) and "eager" in str(e)
        return
    close(compiled(x), f(x))                 # once built: it must give eager's result


def test_unknown_backend_is_a_value_error():
    with pytest.raises(ValueError, match="unknown backend 'nope'.*eager"):
        ember.compile(lambda x: x, backend="nope")
    with pytest.raises(TypeError):
        ember.compile(lambda x: x, backend=42)


def test_callable_backend_gets_the_graph_module_and_real_example_inputs():
    seen = []

    def my_backend(gm, example_inputs):
        seen.append((gm, list(example_inputs)))
        return gm.forward

    w = T(4, 4, seed=1)

    def f(x, y):
        return (x @ w + y).tanh()
    x, y = T(2, 4), T(4, seed=2)
    compiled = ember.compile(f, backend=my_backend)
    close(compiled(x, y), f(x, y))
    close(compiled(x, y), f(x, y))
    assert len(seen) == 1
    gm, inputs = seen[0]
    assert isinstance(gm, ember.fx.GraphModule)
    assert [n.op for n in gm.graph.nodes].count("placeholder") == 3
    assert len(inputs) == 3 and all(type(t) is ember.Tensor for t in inputs)
    assert {id(t) for t in inputs} == {id(x), id(y), id(w)}     # the real tensors
    assert not any(t.is_meta for t in inputs)
    assert "tanh" in gm.code


def test_fullgraph_raises_for_code_an_earlier_compile_let_fall_back():
    class Net(ember.nn.Module):
        def forward(self, x):
            return x.sum().item() * x

    def f(x):
        print(end="")
        return x + 1
    x = T(3)
    net = Net()
    close(ember.compile(f, backend="eager")(x), x + 1)
    close(ember.compile(net, backend="eager")(x), net(x))
    with pytest.raises(CaptureError, match="print"):
        ember.compile(f, backend="eager", fullgraph=True)(x)
    with pytest.raises(CaptureError, match="item"):
        ember.compile(net, backend="eager", fullgraph=True)(x)
    close(ember.compile(f, backend="eager")(x), x + 1)   # non-strict: falls back again


def test_each_compile_call_keeps_its_own_entries():
    """The cache is per code object, but an entry is only used by the ember.compile
    call that made it (torch's BACKEND_MATCH guard): compiling a function again with
    another backend or options compiles again."""
    seen = []

    def recording(gm, example_inputs):
        seen.append(gm)
        return gm.forward

    def f(x):
        return x * 2
    x = T(3)
    first = ember.compile(f, backend="eager")
    second = ember.compile(f, backend=recording)
    close(first(x), x * 2)
    close(second(x), x * 2)
    assert len(seen) == 1
    close(first(x), x * 2)
    close(second(x), x * 2)
    assert len(seen) == 1 and len(_hook.cache_entries(f.__code__)) == 2
    assert "another ember.compile call" in second._ember_compile_context.recompile_reasons[0][1]
    strict = ember.compile(f, backend="eager", fullgraph=True)
    close(strict(x), x * 2)
    assert len(graphs_of(strict)) == 1


def test_backend_returning_another_callable_is_used():
    def doubling_backend(gm, example_inputs):
        return lambda *args: tuple(o * 2 for o in gm(*args))
    compiled = ember.compile(lambda x: x + 1, backend=doubling_backend)
    x = T(3)
    close(compiled(x), (x + 1) * 2)


def test_failing_backend_falls_back_with_one_warning_per_code_and_reason():
    def broken(gm, example_inputs):
        raise RuntimeError("backend exploded")

    def f(x, k):
        return x * k
    compiled = ember.compile(f, backend=broken)
    x = T(3)
    with pytest.warns(RuntimeWarning, match="backend exploded") as record:
        close(compiled(x, 2), x * 2)
    assert len(record) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        close(compiled(x, 2), x * 2)          # the entry runs the graph eagerly
        close(compiled(x, 3), x * 3)          # recompiles: same (code, reason), no warning
    assert counters["backend_fallback"]["RuntimeError: backend exploded"] == 2


def test_failing_backend_raises_in_strict_mode(monkeypatch):
    def broken(gm, example_inputs):
        raise RuntimeError("backend exploded")

    def f(x):
        return x + 1
    x = T(2)
    with pytest.raises(RuntimeError, match="backend exploded"):
        ember.compile(f, backend=broken, fullgraph=True)(x)
    ember.compiler.reset()
    monkeypatch.setattr(ember.compiler.config, "strict", True)
    with pytest.raises(RuntimeError, match="backend exploded"):
        ember.compile(f, backend=broken)(x)
    monkeypatch.undo()
    ember.compiler.reset()
    monkeypatch.setenv("EMBER_STRICT", "1")
    with pytest.raises(RuntimeError, match="backend exploded"):
        ember.compile(f, backend=broken)(x)


def test_backend_returning_a_non_callable_falls_back():
    compiled = ember.compile(lambda x: x - 1, backend=lambda gm, inputs: 42)
    x = T(2)
    with pytest.warns(RuntimeWarning, match="not a callable"):
        close(compiled(x), x - 1)


# ------------------------------------------------------------------ arguments

def test_dynamic_takes_none_true_or_false():
    for mode in (True, False, None):
        ember.compile(lambda x: x, dynamic=mode, backend="eager")
    with pytest.raises(TypeError, match="dynamic"):
        ember.compile(lambda x: x, dynamic="yes")


def test_max_autotune_warns_once_for_a_backend_that_cannot_tune():
    from ember.capture import api
    api._warned_modes.discard(("max-autotune", "eager"))
    with pytest.warns(UserWarning, match="max-autotune") as record:
        ember.compile(lambda x: x, mode="max-autotune", backend="eager")
    assert len(record) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ember.compile(lambda x: x, mode="max-autotune", backend="eager")
        ember.compile(lambda x: x, mode="default", backend="eager")


def test_mode_and_options_together_are_a_runtime_error_as_torchs():
    with pytest.raises(RuntimeError, match="mode or options"):
        ember.compile(lambda x: x, mode="default", options={"max_autotune": True})


def test_dynamo_alias():
    import ember._dynamo
    assert ember._dynamo is ember.capture
    assert ember._dynamo.explain is ember.capture.explain
    assert ember._dynamo.reset is ember.capture.reset


# ------------------------------------------------------------------ ember.compiler

def test_is_compiling_is_true_only_while_capturing():
    def f(x):
        return x + 1 if ember.compiler.is_compiling() else x - 1
    x = T(3)
    assert not ember.compiler.is_compiling()
    close(f(x), x - 1)
    compiled = ember.compile(f, backend="eager", fullgraph=True)
    close(compiled(x), x + 1)


def test_disable_runs_in_cpython_and_is_a_graph_break_inside_captured_code():
    calls = []

    @ember.compiler.disable
    def helper(t):
        calls.append(1)
        return t * 2

    def f(x):
        return helper(x) + 1
    x = T(3)
    compiled = ember.compile(f, backend="eager")
    close(compiled(x), x * 2 + 1)
    assert calls == [1]
    # the call is a graph break: the graph before it, the call in CPython, the rest
    # (`+ 1`) captured in a resume function
    assert any("ember.compiler.disable" in r for r in counters["graph_break"])
    assert counters["stats"]["frames_fallback"] == 0
    with pytest.raises(CaptureError, match="ember.compiler.disable"):
        ember.compile(f, backend="eager", fullgraph=True)(x)


def test_disable_recursive_covers_callees_and_survives_reset():
    def callee(t):
        return t * 3

    @ember.compiler.disable
    def top(t):
        return callee(t)

    @ember.compiler.disable(recursive=False)
    def shallow(t):
        return callee(t) + 1
    def run_top(t):
        return top(t)

    def run_shallow(t):
        return shallow(t)
    x = T(2)
    for _ in range(2):
        ember.compiler.reset()
        with traced() as seen:
            close(ember.compile(run_top, backend="eager")(x), x * 3)
        # breaks at top(t), which runs uncaptured; then run_top's resume function
        assert seen == ["run_top", "run_top"]
        with traced() as seen:
            close(ember.compile(run_shallow, backend="eager")(x), x * 3 + 1)
        assert seen == ["run_shallow", "callee", "run_shallow"]   # not shallow itself


def test_allow_in_graph_puts_one_opaque_node():
    def fancy(a, b):
        return (a * b).sum(-1) + len(a.shape)       # traced as one call
    ember.compiler.allow_in_graph(fancy)
    try:
        def f(x, y):
            return fancy(x, y).relu()
        compiled = ember.compile(f, backend="eager", fullgraph=True)
        x, y = T(2, 3), T(2, 3, seed=1)
        close(compiled(x, y), f(x, y))
        gm = graphs_of(compiled)[0]
        targets = [n.target for n in gm.graph.nodes if n.op == "call_function"]
        assert fancy in targets and len(targets) == 1
    finally:
        ember.compiler._allowed_in_graph.discard(fancy)


def test_reset_forgets_compiled_code():
    def f(x):
        return x * 5
    compiled = ember.compile(f, backend="eager")
    x = T(2)
    compiled(x)
    assert _hook.cache_entries(f.__code__)
    ember.compiler.reset()
    assert not _hook.cache_entries(f.__code__)
    assert not counters["stats"]
    assert graphs_of(compiled) == []     # the context lets go of its graphs too
    compiled(x)
    assert len(graphs_of(compiled)) == 1


@contextlib.contextmanager
def traced():
    """The names of the frames the converter interprets meanwhile."""
    from ember.capture import convert
    seen, orig = [], convert.trace_frame

    def recording(info, **kw):
        if "stop_path" not in kw:   # (not the second trace up to a graph break)
            seen.append(info.code.co_name)
        return orig(info, **kw)
    convert.trace_frame = recording
    try:
        yield seen
    finally:
        convert.trace_frame = orig


def test_library_frames_are_not_converted():
    """Python helpers of NumPy and the standard library that run under eager kernels
    (numpy's argmax wrapper under Tensor.max) are left to CPython."""
    def f(x):
        return x.max(dim=1)
    compiled = ember.compile(f, backend="eager", fullgraph=True)
    x = T(3, 4)
    with traced() as seen:
        values, indices = compiled(x)
    close(values, x.max(dim=1).values)
    assert seen == ["f"]


# ------------------------------------------------------------------ exceptions

def bad_matmul(x, y):
    z = x * 2
    return z @ y                                         # the failing line


def user_frames(exc):
    return [(f.name, f.lineno) for f in traceback.extract_tb(exc.__traceback__)
            if f.filename == HERE]


def test_error_found_during_capture_is_raised_by_eager_at_the_users_line():
    """The capture runs ops on fake tensors, so it meets shape errors first: the frame
    then runs in CPython and raises the eager error, traceback and all."""
    compiled = ember.compile(bad_matmul, backend="eager")
    x, y = T(2, 3), T(2, 3)
    with pytest.raises(RuntimeError) as eager_info:
        bad_matmul(x, y)
    with pytest.raises(RuntimeError) as info:
        compiled(x, y)
    assert type(info.value) is type(eager_info.value)
    assert str(info.value) == str(eager_info.value)
    line = bad_matmul.__code__.co_firstlineno + 2
    assert ("bad_matmul", line) in user_frames(info.value)


def check_finite(t):
    """Raises on the data (so only when the graph runs): opaque to the capture."""
    if not t.is_meta and not np.isfinite(t.detach().numpy()).all():
        raise ValueError("check_finite: the tensor has inf or nan")
    return t * 1


def scaled(x, k):
    y = x / k
    z = check_finite(y)                                  # the failing line
    return z + 1


def test_error_raised_by_a_cached_graph_has_the_users_frame():
    ember.compiler.allow_in_graph(check_finite)
    try:
        compiled = ember.compile(scaled, backend="eager", fullgraph=True)
        x = T(4)
        close(compiled(x, ember.ones(4)), scaled(x, ember.ones(4)))
        with pytest.raises(ValueError, match="inf or nan") as info:
            compiled(x, ember.zeros(4))                  # a cache hit that raises
        assert len(graphs_of(compiled)) == 1
        frames = user_frames(info.value)
        line = scaled.__code__.co_firstlineno + 2
        assert ("scaled", line) in frames, frames
        assert frames.index(("scaled", line)) < frames.index(
            ("check_finite", check_finite.__code__.co_firstlineno + 3)), frames
        # the graph raised, so the frame ran eagerly: the traceback is eager's
        eager = pytest.raises(ValueError, scaled, x, ember.zeros(4))
        assert frames[-2:] == user_frames(eager.value)[-2:]   # scaled, check_finite
        try:
            compiled(x, ember.zeros(4))
        except ValueError:
            pass                                         # ordinary except works
    finally:
        ember.compiler._allowed_in_graph.discard(check_finite)


def test_except_inside_the_caller_of_compiled_code():
    compiled = ember.compile(bad_matmul, backend="eager")
    try:
        compiled(T(2, 3), T(2, 3))
    except RuntimeError as e:
        caught = e
    assert "bad_matmul" in "".join(traceback.format_tb(caught.__traceback__))


# ------------------------------------------------------------------ modes and options

def test_an_unknown_mode_raises_as_torch():
    with pytest.raises(RuntimeError, match="Unrecognized mode=fastest, should be one of: "
                       "default, .*reduce-overhead.*max-autotune"):
        ember.compile(lambda x: x, mode="fastest", backend="eager")
    torch = pytest.importorskip("torch", reason="torch's own message for comparison")
    with pytest.raises(RuntimeError) as want:
        torch.compile(lambda x: x, mode="fastest")
    with pytest.raises(RuntimeError) as got:
        ember.compile(lambda x: x, mode="fastest")
    assert str(got.value) == str(want.value)


def test_options_keys_are_checked():
    with pytest.raises(RuntimeError, match="Unexpected optimization option bogus, known "
                       "options are"):
        ember.compile(lambda x: x, options={"bogus": 1}, backend="eager")
    with pytest.raises(TypeError, match="options must be a dict"):
        ember.compile(lambda x: x, options=[("check", True)], backend="eager")
    from ember.capture import api
    api._warned_modes.discard("epilogue_fusion")
    with pytest.warns(UserWarning, match="epilogue_fusion.*no effect"):
        f = ember.compile(lambda x: x * 2, options={"epilogue_fusion": True},
                          backend="eager")
    assert f(ember.ones(2)).tolist() == [2.0, 2.0]
    assert ember.compile(lambda x: x + 1, options={"check": True},
                         backend="eager")(ember.ones(1)).tolist() == [2.0]


# ------------------------------------------------------------------ Module.compile

def test_module_compile_is_in_place_and_keeps_the_module():
    net = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2))
    x = ember.randn(5, 4)
    want = net(x)
    keys = list(net.state_dict())
    assert net.compile(backend="aot_eager") is None
    assert type(net) is nn.Sequential and list(net.state_dict()) == keys
    got = net(x)
    np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), rtol=1e-6)
    assert counters["stats"]["unique_graphs"] == 1
    got.sum().backward()
    assert net[0].weight.grad is not None
    net(x)
    assert counters["stats"]["unique_graphs"] == 1     # a cache hit


def test_module_compile_arguments_are_ember_compiles():
    net = nn.Linear(2, 2)
    with pytest.raises(RuntimeError, match="Unrecognized mode"):
        net.compile(mode="warp")
    with pytest.raises(ValueError, match="unknown backend"):
        net.compile(backend="nope")


# ------------------------------------------------------------------ logs

def _logged(capsys, fn, *args):
    fn(*args)
    return capsys.readouterr().err


@pytest.mark.parametrize("artifact, text", [
    ("graph_code", "captured graph of f"),
    ("guards", "TENSOR_MATCH"),
    ("aot_graphs", "AOT forward graph"),
    ("output_code", "loop IR"),
])
def test_each_log_artifact_writes_through_logging(artifact, text, capsys):
    def f(x):
        return (x * 2).sin()

    try:
        ember.set_logs(**{artifact: True})
        err = _logged(capsys, ember.compile(f, backend="llvm"),
                      ember.ones(3, requires_grad=True))
    finally:
        ember.set_logs()
    assert text in err and f"[ember.{artifact}]" in err
    err = _logged(capsys, ember.compile(lambda x: (x * 3).sin(), backend="llvm"),
                  ember.ones(3))
    assert "[ember." not in err


def test_recompiles_and_graph_breaks_are_logged_with_reasons(capsys):
    def f(x):
        return x + 1

    def g(x):
        print("side")
        return x + 1

    ember.set_logs(recompiles=True, graph_breaks=True)
    try:
        c = ember.compile(f, backend="eager")
        c(ember.ones(2))
        err = _logged(capsys, c, ember.ones(3))
        assert "[ember.recompiles] recompiling f" in err and "size mismatch" in err
        err = _logged(capsys, ember.compile(g, backend="eager"), ember.ones(2))
        assert "[ember.graph_breaks]" in err and "print" in err
    finally:
        ember.set_logs()


def test_ember_logs_environment_variable(monkeypatch, capsys):
    monkeypatch.setenv("EMBER_LOGS", "guards,+recompiles")
    err = _logged(capsys, ember.compile(lambda x: x - 1, backend="eager"), ember.ones(2))
    assert "[ember.guards]" in err
    monkeypatch.setenv("EMBER_LOGS", "")
    err = _logged(capsys, ember.compile(lambda x: x - 2, backend="eager"), ember.ones(2))
    assert "[ember." not in err


def test_set_logs_checks_its_arguments():
    with pytest.raises(ValueError, match="unknown log artifact 'graphs'"):
        ember.set_logs(graphs=True)
    with pytest.raises(TypeError, match="True or False"):
        ember.set_logs(guards=1)


def test_log_records_reach_logging_handlers():
    import logging
    seen = []

    class Keep(logging.Handler):
        def emit(self, record):
            seen.append(record.getMessage())

    h = Keep()
    logging.getLogger("ember.graph_code").addHandler(h)
    try:
        ember.set_logs(graph_code=True)
        ember.compile(lambda x: x * 5, backend="eager")(ember.ones(1))
    finally:
        ember.set_logs()
        logging.getLogger("ember.graph_code").removeHandler(h)
    assert any("captured graph" in m for m in seen)
