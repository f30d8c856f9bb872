"""[dynamic] item 6: a cache hit with symbolic sizes runs no Python of ember's own.

sys.setprofile cannot tell: a profile function turns capture off (the frame hook passes
every frame through while one is set, so debuggers see the code they expect), and the
call would run eagerly. The frame hook records instead: `_capture.record_frames(list)`
keeps the hook linked and appends the code of every frame evaluated, the compiled
graph's own frames included (it runs with capture off). A warm call at a size never
seen before, served by the one symbolic graph, may run: the function's own frame (the
hook is given it and calls the graph instead), the generated graph code (aot_eager and
the eager backend run their graph as Python) and the entry wrapper of the default mode
(capture/api.py `compiled`, nn.Module's __call__ for a module); with
mode="reduce-overhead" (the C entry) not even that. No guard, size or symbol is
evaluated in Python."""
import collections
import os

import pytest

import ember
from ember._C import _capture
from ember.capture.backends import register_backend
from ember.models.gpt import GPT, GPTConfig
from fresh_compiler import fresh_compiler  # noqa: F401  (autouse)

EMBER = os.path.dirname(ember.__file__)
ENTRY = {("compiled", os.path.join("capture", "api.py")),
         ("__call__", os.path.join("nn", "modules", "module.py")),
         ("_call_impl", os.path.join("nn", "modules", "module.py"))}


def _ember_frames(call, allowed=()):
    """The frames of ember's own modules call(*) evaluates, but the codes allowed."""
    log = []
    _capture.record_frames(log)
    try:
        call()
    finally:
        _capture.record_frames(None)
    out = collections.Counter()
    for code in log:
        if code in allowed or not code.co_filename.startswith(EMBER + os.sep):
            continue
        rel = os.path.relpath(code.co_filename, EMBER)
        if (code.co_name, rel) not in ENTRY:
            out[(code.co_name, rel, code.co_firstlineno)] += 1
    return out


def _fn(x, y):
    return (x * 2 + y).softmax(-1).sum(0)


def _inputs(n):
    g = ember.Generator().manual_seed(n)
    return ember.randn((n, 4), generator=g), ember.randn((n, 4), generator=g)


@register_backend("test_no_python_control")
def _control(gm, example_inputs):
    """A backend whose compiled function calls ember Python on every call."""
    from ember.aot.mutation import _detach
    fw = gm.forward

    def run(*args):
        return tuple(_detach(t) for t in fw(*args))
    return run


def test_the_recorder_sees_frames_inside_a_compiled_call():
    f = ember.compile(_fn, backend="test_no_python_control", dynamic=True)
    for n in (3, 5):
        f(*_inputs(n))
    x, y = _inputs(5)
    frames = _ember_frames(lambda: f(x, y))
    assert any(name == "_detach" for name, _, _ in frames), frames


@pytest.mark.parametrize("mode", [None, "reduce-overhead"])
@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_a_symbolic_hit_runs_no_ember_python(backend, mode):
    f = ember.compile(_fn, backend=backend, dynamic=True, mode=mode)
    for n in (3, 5, 7):
        f(*_inputs(n))
    for n in (9, 64, 1000):     # sizes never seen: the symbolic graph's guards admit them
        x, y = _inputs(n)
        want = _fn(x, y)
        got = []
        frames = _ember_frames(lambda: got.append(f(x, y)), allowed={_fn.__code__})
        assert not frames, frames
        assert ember.allclose(got[0], want, atol=1e-5, rtol=1e-5)
    if mode == "reduce-overhead":
        # the C entry: not even the wrapper's frame
        x, y = _inputs(11)
        log = []
        _capture.record_frames(log)
        try:
            f(x, y)
        finally:
            _capture.record_frames(None)
        assert not [c for c in log if c.co_filename.startswith(EMBER + os.sep)], log


def test_the_gpt_cached_decode_step_runs_no_ember_python_under_aot_eager():
    ember.manual_seed(0)
    m = GPT(GPTConfig(block_size=64, vocab_size=65, n_layer=2, n_head=2, n_embd=32)).eval()
    m.compile(backend="aot_eager")
    idx = ember.randint(0, 65, (1, 8), generator=ember.Generator().manual_seed(1))
    with ember.no_grad():
        m.setup_cache(1)
        m(idx, pos=0)
        for p in range(8, 12):
            m(idx[:, :1], pos=p)
        for p in (12, 30, 63):   # new positions: the one symbolic step graph
            frames = _ember_frames(lambda: m(idx[:, :1], pos=p),
                                   allowed={GPT.forward.__code__})
            assert not frames, frames
