"""The PEP 523 hook and per-code cache (csrc/capture/eval_frame.c, cache.c), through
ember.capture._hook. Cases that could crash the interpreter run in a subprocess, so a
crash is a failure rather than a dead test run."""
import functools
import gc
import os
import subprocess
import sys
import textwrap
import threading
import tracemalloc
import traceback
import types
import weakref

import pytest

import ember
from ember.capture import _hook as hook
from ember.capture._hook import RUN_ONLY, SKIP, GuardProgram

pytestmark = pytest.mark.skipif(not hook.available, reason="the frame hook needs CPython 3.11")

PYTHONPATH = os.path.dirname(os.path.dirname(ember.__file__))


@pytest.fixture(autouse=True)
def clean_hook():
    hook.reset_all()
    hook.reset_counters()
    yield
    assert hook.get_state() is None, "a test left capture on"
    assert hook.counters()["active_threads"] == 0
    hook.reset_all()


def run_py(src, timeout=300):
    """Runs src in a fresh interpreter; a crash or nonzero exit fails the test."""
    env = dict(os.environ, PYTHONPATH=PYTHONPATH + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(src)], capture_output=True,
                       text=True, timeout=timeout, env=env)
    assert r.returncode == 0, f"exit code {r.returncode}\n--- stdout\n{r.stdout}\n--- stderr\n{r.stderr}"
    return r.stdout


class Recorder:
    """A capture callback that records what it is asked and answers with policy()."""

    def __init__(self, policy=None):
        self.policy = policy
        self.calls = []

    def __call__(self, info, entries):
        self.calls.append((info.code, info.args, entries))
        return None if self.policy is None else self.policy(info, entries)

    def names(self):
        return [code.co_name for code, _, _ in self.calls]

    def codes(self):
        return [code for code, _, _ in self.calls]

    def count(self, fn):
        return self.codes().count(fn.__code__)


def compile_as(target, compiled, guards=()):
    """A policy: frames of target get the entry (GuardProgram(guards), compiled)."""
    code = target.__code__ if hasattr(target, "__code__") else target

    def policy(info, entries):
        if info.code is code:
            return GuardProgram(list(guards), argnames=code.co_varnames), compiled
        return None
    return policy


# ------------------------------------------------------------------ install and chain

def test_hook_installed_only_while_a_thread_has_capture_on():
    assert hook.hook_info()["current"] == "default"
    with hook.enable(Recorder()):
        info = hook.hook_info()
        assert info["current"] == "ember" and info["active_threads"] == 1
        with hook.disable():
            assert hook.hook_info()["current"] == "default"
            assert hook.get_state() is None
        assert hook.hook_info()["current"] == "ember"
    info = hook.hook_info()
    assert info["current"] == "default" and not info["linked"]


def test_contexts_nest_and_restore():
    a, b = Recorder(), Recorder()
    with hook.enable(a):
        assert hook.get_state() is a
        with hook.enable(b):
            assert hook.get_state() is b
            with hook.run_only():
                assert hook.get_state() is RUN_ONLY
            assert hook.get_state() is b
        assert hook.get_state() is a
    assert hook.get_state() is None
    old = hook.set_callback(a)
    try:
        with hook.enable():
            assert hook.get_state() is a
    finally:
        hook.set_callback(old)
    with pytest.raises(TypeError):
        hook.set_state(42)
    with pytest.raises(TypeError):
        hook.set_state(SKIP)
    cs = hook.disable()
    with pytest.raises(RuntimeError):
        cs.__exit__(None, None, None)


def test_chains_to_a_hook_installed_before():
    run_py("""
        from ember.capture import _hook as hook
        from ember._C import _capture as c
        def f(x):
            return x + 1
        c._test_hook_install()
        assert hook.hook_info()["current"] == "test"
        with hook.enable(lambda info, entries: None):
            info = hook.hook_info()
            assert info["current"] == "ember" and info["previous"] == "test", info
            before = c._test_hook_calls()
            assert [f(i) for i in range(100)] == list(range(1, 101))
            # every frame ember passes through reaches the earlier hook
            assert c._test_hook_calls() - before >= 100
        assert hook.hook_info()["current"] == "test"
        calls = c._test_hook_uninstall()
        assert calls >= 100
        assert hook.hook_info()["current"] == "default"
        print("ok")
    """)


def test_hook_installed_over_ours_keeps_the_chain():
    run_py("""
        from ember.capture import _hook as hook
        from ember._C import _capture as c
        from ember.capture._hook import GuardProgram
        def f(x):
            return x + 1
        def f_compiled(x):
            return x + 100
        def cb(info, entries):
            return (GuardProgram([]), f_compiled) if info.code is f.__code__ else None
        with hook.enable(cb):
            c._test_hook_install()            # another tool hooks in over us
            assert hook.hook_info()["current"] == "test"
            assert f(1) == 101                # its hook chains to ours
        # we cannot restore our predecessor without cutting the other hook off:
        info = hook.hook_info()
        assert info["current"] == "test" and info["linked"], info
        assert f(1) == 2                      # capture is off: frames pass through us
        c._test_hook_uninstall()              # it restores ours
        assert hook.hook_info()["current"] == "ember"
        assert f(1) == 2
        with hook.enable(cb):
            assert f(1) == 101
        assert hook.hook_info()["current"] == "default"
        print("ok")
    """)


# ------------------------------------------------------------------ what is intercepted

class Widget:
    def method(self, x):
        return x * 2

    @staticmethod
    def static(x):
        return x * 3

    @classmethod
    def klass(cls, x):
        return x * 4


def plain(x, y=1):
    return x + y


def make_closure(k):
    def closure_fn(x):
        return x + k
    return closure_fn


def listcomp_user(n):
    return [i * i for i in range(n)]


def test_intercepts_plain_function_calls():
    rec = Recorder()
    w = Widget()
    lam = lambda x: x - 1  # noqa: E731
    part = functools.partial(plain, y=10)
    inner = make_closure(5)
    with hook.enable(rec):
        results = (plain(1), w.method(2), Widget.static(3), Widget.klass(4), lam(5),
                   part(6), inner(7), listcomp_user(3), list(map(lam, [1, 2])),
                   sorted([3, 1, 2], key=lam))
    assert results == (2, 4, 9, 16, 4, 16, 12, [0, 1, 4], [0, 1], [1, 2, 3])
    names = rec.names()
    for name in ("plain", "method", "static", "klass", "<lambda>", "closure_fn",
                 "listcomp_user", "<listcomp>"):
        assert name in names, (name, names)
    assert names.count("<lambda>") >= 6   # direct, map and sorted's key
    assert names.count("plain") == 2      # direct and through functools.partial


def gen(n):
    for i in range(n):
        yield i


async def coro(x):
    return x + 1


async def agen(n):
    for i in range(n):
        yield i


def test_does_not_intercept_generators_classes_modules_or_exec():
    rec = Recorder()
    src = "def defined_in_exec(x):\n    return x\nvalue = defined_in_exec(3)\n"
    ns = {}
    with hook.enable(rec):
        assert list(gen(3)) == [0, 1, 2]
        c = coro(1)
        try:
            c.send(None)
        except StopIteration as stop:
            assert stop.value == 2
        ag = agen(2).__anext__()
        try:
            ag.send(None)
        except StopIteration as stop:
            assert stop.value == 0

        class Body:
            attr = 1
        exec(compile(src, "<ipython-input-1-abc>", "exec"), ns)
        exec("module_level = 1", {})
    names = rec.names()
    assert names == ["defined_in_exec"], names   # the function called by the cell is
    assert ns["value"] == 3 and Body.attr == 1
    assert hook.counters()["misses"] == 1


def test_generators_send_throw_close_with_capture_on():
    log = []

    def g():
        try:
            while True:
                try:
                    x = yield
                    log.append(("got", x))
                except ValueError as e:
                    log.append(("caught", str(e)))
        finally:
            log.append("finally")
    rec = Recorder()
    with hook.enable(rec):
        it = g()
        next(it)
        it.send(1)
        it.throw(ValueError("v"))
        it.close()
    assert log == [("got", 1), ("caught", "v"), "finally"]
    assert rec.calls == []


# ------------------------------------------------------------------ the cache

def test_hit_calls_the_compiled_callable_instead():
    body_runs = []

    def f(x, y):
        body_runs.append(1)
        return x + y
    compiled_runs = []

    def f_compiled(x, y):
        compiled_runs.append((x, y))
        return x * 100 + y
    rec = Recorder(compile_as(f, f_compiled, [("TYPE_MATCH", ("arg", 0), int)]))
    with hook.enable(rec):
        results = []
        for i in range(101):
            results.append(f(i, 1))
    assert results == [i * 100 + 1 for i in range(101)]
    assert body_runs == []
    assert len(compiled_runs) == 101
    assert rec.count(f) == 1
    c = hook.counters()
    assert c["hits"] == 100 and c["misses"] == 1 and c["callbacks"] == 1
    assert f(1, 1) == 2 and body_runs == [1]   # capture off: the original runs


def test_guard_failure_adds_an_entry_and_keeps_mru_order():
    def f(x):
        return ("eager", x)

    def policy(info, entries):
        if info.code is not f.__code__:
            return None
        x = info.args[0]
        reasons.append(entries[0][0].check_verbose(info) if entries else None)
        return (GuardProgram([("EQUALS_MATCH", ("arg", 0), x)], argnames=("x",)),
                lambda x, tag=x: ("compiled", tag))
    reasons = []
    rec = Recorder(policy)
    with hook.enable(rec):
        assert f(1) == ("compiled", 1)
        assert f(2) == ("compiled", 2)
        order = [e[0].check((2,)) for e in hook.cache_entries(f)]
        assert order == [True, False]       # newest first
        assert f(1) == ("compiled", 1)      # a hit on the second entry ...
        order = [e[0].check((1,)) for e in hook.cache_entries(f)]
        assert order == [True, False]       # ... moves it to the front
        assert f(2) == ("compiled", 2)
    assert rec.count(f) == 2
    assert reasons == [None, "value of 'x' changed: expected 1, got 2"]
    assert hook.counters()["hits"] == 2


def test_none_runs_normally_and_asks_again():
    def f(x):
        return x + 1
    rec = Recorder()
    with hook.enable(rec):
        for i in range(3):
            assert f(i) == i + 1
    assert rec.codes() == [f.__code__] * 3
    assert hook.code_mark(f) is None


def test_skip_persists_until_reset():
    def f(x):
        return x + 1
    rec = Recorder(lambda info, entries: SKIP)
    with hook.enable(rec):
        for i in range(5):
            assert f(i) == i + 1
    assert rec.codes() == [f.__code__]
    assert hook.code_mark(f) is SKIP
    assert f.__code__ in hook.cached_codes()
    hook.reset_code(f)
    assert hook.code_mark(f) is None
    with hook.enable(rec):
        f(0)
    assert rec.count(f) == 2


def test_run_only_mark_and_run_only_mode():
    def f(x):
        return ("eager", x)

    def policy(info, entries):
        if info.code is not f.__code__:
            return None
        if info.args[0] == 1:
            return (GuardProgram([("EQUALS_MATCH", ("arg", 0), 1)]), lambda x: ("compiled", x))
        return RUN_ONLY
    rec = Recorder(policy)
    with hook.enable(rec):
        assert f(1) == ("compiled", 1)
        assert f(2) == ("eager", 2)           # RUN_ONLY: run normally, stop asking
        assert f(3) == ("eager", 3)
        assert f(1) == ("compiled", 1)        # but keep using the entries
    assert rec.count(f) == 2
    assert hook.code_mark(f) is RUN_ONLY

    def g(x):
        return ("eager", x)
    rec2 = Recorder(compile_as(g, lambda x: ("compiled", x), [("EQUALS_MATCH", ("arg", 0), 1)]))
    with hook.enable(rec2):
        g(1)
    with hook.run_only():
        assert g(1) == ("compiled", 1)
        assert g(2) == ("eager", 2)
    assert rec2.count(g) == 1


def test_compiled_python_function_is_marked_skip():
    def f(x):
        return x

    def f_compiled(x):
        return -x
    rec = Recorder(compile_as(f, f_compiled))
    with hook.enable(rec):
        assert f(3) == -3
        assert f_compiled(4) == -4    # called directly: not offered to the callback
    assert rec.codes() == [f.__code__]
    assert hook.code_mark(f_compiled) is SKIP


def helper(x):
    return x * 10


def test_frames_called_by_compiled_code_are_intercepted_but_not_those_of_the_callback():
    def f(x):
        return x

    def f_compiled(x):
        return helper(x) + 1

    def policy(info, entries):
        helper(0)                      # runs with capture off
        return compile_as(f, f_compiled)(info, entries)
    rec = Recorder(policy)
    with hook.enable(rec):
        assert f(2) == 21
        assert f(3) == 31
    assert rec.names() == ["f", "helper", "helper"]


def test_callback_can_enable_capture_inside_itself():
    inner = Recorder()

    def f(x):
        return x

    def outer_cb(info, entries):
        with hook.enable(inner):
            helper(1)
        helper(2)
        return None
    with hook.enable(outer_cb):
        f(1)
        assert hook.get_state() is outer_cb
    assert inner.names() == ["helper"]


def test_disable_in_the_middle_of_a_stack():
    seen = Recorder()

    def f(x):
        with hook.disable():
            r = helper(x)
        return r + helper(x)
    with hook.enable(seen):
        assert f(1) == 20
    assert seen.names().count("helper") == 1 and "f" in seen.names()


# ------------------------------------------------------------------ arguments

def slots(*args, **kwargs):
    return (args, kwargs)


@pytest.mark.parametrize("src, call, expected", [
    ("def f(a, b=2, *args, c, d=4, **kw): pass", "f(1, 5, 6, 7, c=3, e=9)",
     (1, 5, 3, 4, (6, 7), {"e": 9})),
    ("def f(a, b=2): pass", "f(1)", (1, 2)),
    ("def f(a, b=2): pass", "f(b=3, a=1)", (1, 3)),
    ("def f(a, /, b, *, c): pass", "f(1, b=2, c=3)", (1, 2, 3)),
    ("def f(a, /, **kw): pass", "f(1, a=2)", (1, {"a": 2})),   # kwargs key named like a
    ("def f(*args): pass", "f()", ((),)),
    ("def f(**kw): pass", "f(**{'x': 1})", ({"x": 1},)),
    ("def f(a, *, k=None): pass", "f(*[1])", (1, None)),
])
def test_argument_slots_arrive_in_slot_order(src, call, expected):
    ns = {}
    exec(src, ns)
    f = ns["f"]
    got = []
    rec = Recorder(compile_as(f, lambda *a: got.append(a) or "compiled"))
    with hook.enable(rec):
        assert eval(call, ns) == "compiled"
        assert eval(call, ns) == "compiled"   # a hit passes the same slots
    assert got == [expected, expected]
    assert rec.calls[0][1] == expected        # and FrameInfo.args matches


def test_mutable_default_is_passed_as_the_same_object():
    def f(x, acc=[]):  # noqa: B006
        return acc
    got = []
    rec = Recorder(compile_as(f, lambda x, acc: got.append(acc) or acc))
    with hook.enable(rec):
        f(1)
        f(2)
    assert got[0] is got[1] is f.__defaults__[0]


def test_frame_info_contents():
    k = 7

    def f(x, *rest):
        return x + k
    rec = Recorder()
    with hook.enable(rec):
        f(1, 2, 3)
    info_code, args, entries = rec.calls[0]
    assert args == (1, (2, 3)) and entries == ()
    captured = []
    with hook.enable(lambda info, entries: captured.append(info)):
        f(1)
    info = captured[0]
    assert info.code is f.__code__ and info.func is f
    assert info.globals is f.__globals__ and info.builtins["len"] is len
    assert info.closure is f.__closure__ and info.closure[0].cell_contents == 7
    assert isinstance(info, hook.FrameInfo)


# ------------------------------------------------------------------ closures

def make_adder(k):
    def add(x):
        return x + k
    return add


def test_two_closures_sharing_code_get_separate_entries():
    add1, add2 = make_adder(1), make_adder(2)
    assert add1.__code__ is add2.__code__

    def policy(info, entries):
        if info.code is not add1.__code__:
            return None
        k = info.closure[0].cell_contents
        return (GuardProgram([("EQUALS_MATCH", ("closure", 0), k)], freenames=("k",)),
                lambda x, k=k: ("compiled", x + k))
    rec = Recorder(policy)
    with hook.enable(rec):
        results = [add1(10), add2(10), add1(10), add2(10)]
    assert results == [("compiled", 11), ("compiled", 12)] * 2
    assert rec.count(add1) == 2 and len(hook.cache_entries(add1)) == 2


def test_nonlocal_write_in_compiled_code_is_seen_by_the_outer_function():
    def outer():
        count = 0

        def inc(step):
            nonlocal count
            count += step
            return count
        return inc, lambda: count

    def compiled_template():
        count = 0

        def inc_compiled(step):
            nonlocal count
            count += step * 10
            return count
        return inc_compiled
    template = compiled_template()
    inc, read = outer()

    def policy(info, entries):
        if info.code is not inc.__code__:
            return None
        fn = types.FunctionType(template.__code__, info.globals, "inc_compiled", None,
                                info.closure)
        return GuardProgram([]), fn
    with hook.enable(Recorder(policy)):
        assert inc(1) == 10
        assert inc(2) == 30
    assert read() == 30


def test_parameter_captured_by_an_inner_function_arrives_raw():
    def f(a):
        return lambda: a
    got = []
    rec = Recorder(compile_as(f, lambda a: got.append(a) or (lambda: a)))
    with hook.enable(rec):
        assert f(5)() == 5
    assert got == [5]


# ------------------------------------------------------------------ exceptions

def raiser(x):
    return x


def raiser_compiled(x):
    if x < 0:
        raise ValueError(f"negative: {x}")
    return x


def test_exception_in_compiled_code_propagates_with_traceback():
    rec = Recorder(compile_as(raiser, raiser_compiled))
    with hook.enable(rec):
        assert raiser(1) == 1
        with pytest.raises(ValueError, match="negative: -1") as info:
            raiser(-1)
        kept = info.value.__traceback__   # keep a traceback alive, then keep calling
        for i in range(10_000):
            raiser(i)
    frames = traceback.extract_tb(kept)
    assert frames[-1].name == "raiser_compiled"
    assert frames[-1].filename == __file__
    assert "raise ValueError" in frames[-1].line
    assert [f.name for f in frames[:1]] == ["test_exception_in_compiled_code_propagates_with_traceback"]


def test_callback_exception_propagates_and_capture_stays_on():
    def f(x):
        return x

    def cb(info, entries):
        if info.code is f.__code__:
            raise KeyError("converter broke")
    with hook.enable(cb):
        with pytest.raises(KeyError, match="converter broke"):
            f(1)
        assert hook.get_state() is cb


def test_callback_can_stay_disabled_after_an_internal_error():
    def f(x):
        return x
    asked = []

    def cb(info, entries):
        asked.append(info.code)
        if info.code is f.__code__:
            hook.stay_disabled()
            raise RuntimeError("internal error")
    with hook.enable(cb):
        with pytest.raises(RuntimeError, match="internal error"):
            f(1)
        assert hook.get_state() is None          # off for the rest of the region
        assert f(2) == 2
    assert asked.count(f.__code__) == 1
    with pytest.raises(RuntimeError, match="inside the callback"):
        hook.stay_disabled()


def test_guard_exception_propagates():
    def f(x):
        return x

    def bad(v):
        raise ArithmeticError("guard broke")
    rec = Recorder(compile_as(f, lambda x: -x, [("LAMBDA", ("arg", 0), bad, "bad")]))
    with hook.enable(rec):
        assert f(1) == -1                        # the first call runs without guards
        with pytest.raises(ArithmeticError, match="guard broke"):
            f(1)


def test_bad_callback_results():
    def f(x):
        return x
    with hook.enable(lambda info, entries: 42 if info.code is f.__code__ else None):
        with pytest.raises(TypeError, match="must return None, SKIP, RUN_ONLY"):
            f(1)
    with hook.enable(lambda info, entries: (GuardProgram([]), f)
                     if info.code is f.__code__ else None):
        with pytest.raises(ValueError, match="runs the original code"):
            f(1)
    assert hook.cache_entries(f) == ()


# ------------------------------------------------------------------ recursion

def test_recursion_to_near_the_limit_and_a_clean_recursion_error():
    run_py("""
        import sys
        from ember.capture import _hook as hook
        from ember.capture._hook import GuardProgram

        def rsum(n):
            return 0 if n == 0 else n + rsum(n - 1)

        def rsum_compiled(n):
            return 0 if n == 0 else n + rsum(n - 1)

        def even(n):
            return True if n == 0 else odd(n - 1)

        def odd(n):                       # skipped: runs normally, calls compiled even
            return False if n == 0 else even(n - 1)

        def even_compiled(n):
            return True if n == 0 else odd(n - 1)

        def cb(info, entries):
            if info.code is rsum.__code__:
                return GuardProgram([("TYPE_MATCH", ("arg", 0), int)]), rsum_compiled
            if info.code is even.__code__:
                return GuardProgram([]), even_compiled
            return hook.SKIP

        depth = sys.getrecursionlimit() - 50
        with hook.enable(cb):
            assert rsum(depth) == depth * (depth + 1) // 2
            try:
                rsum(sys.getrecursionlimit() + 100)
            except RecursionError:
                pass
            else:
                raise AssertionError("no RecursionError")
            assert rsum(10) == 55
            assert even(depth - 10) == ((depth - 10) % 2 == 0)
        assert hook.counters()["callbacks"] == 3, hook.counters()
        print("ok")
    """)


# ------------------------------------------------------------------ threads

def test_threads_some_enabled_some_not():
    run_py("""
        import threading
        from ember.capture import _hook as hook
        from ember.capture._hook import GuardProgram

        def shared(x, y):
            return x * y + 1

        def shared_compiled(x, y):
            return x * y + 1

        asked_by = []
        def cb(info, entries):
            asked_by.append(threading.get_ident())
            if info.code is shared.__code__:
                return (GuardProgram([("TYPE_MATCH", ("arg", 0), int),
                                      ("TYPE_MATCH", ("arg", 1), int)]), shared_compiled)
            return None

        errors, enabled_ids = [], set()
        start = threading.Barrier(4)
        def work(enabled, n=5000):
            try:
                start.wait()
                if enabled:
                    enabled_ids.add(threading.get_ident())
                    with hook.enable(cb):
                        out = [shared(i, 3) for i in range(n)]
                        # a thread started here begins with capture off
                        child = threading.Thread(
                            target=lambda: errors.append(hook.get_state()))
                        child.start(); child.join()
                else:
                    out = [shared(i, 3) for i in range(n)]
                if out != [i * 3 + 1 for i in range(n)]:
                    errors.append("wrong result")
            except BaseException as e:
                errors.append(e)

        ts = [threading.Thread(target=work, args=(i % 2 == 0,)) for i in range(4)]
        for t in ts: t.start()
        for t in ts: t.join()
        assert errors == [None, None], errors
        assert set(asked_by) <= enabled_ids, (asked_by, enabled_ids)
        c = hook.counters()
        assert c["active_threads"] == 0 and hook.hook_info()["current"] == "default"
        assert c["hits"] >= 2 * 5000 - 2, c   # only the first calls miss
        print("ok")
    """)


def test_guard_that_releases_the_gil_while_another_thread_resets():
    run_py("""
        import threading, time
        from ember.capture import _hook as hook
        from ember.capture._hook import GuardProgram

        def f(x):
            return x + 1

        def slow_guard(v):
            time.sleep(0)          # lets the other thread reset the cache mid-lookup
            return True

        def cb(info, entries):
            if info.code is f.__code__:
                return (GuardProgram([("LAMBDA", ("arg", 0), slow_guard, "slow")]),
                        lambda x: x + 1)
            return None

        stop = threading.Event()
        def resetter():
            while not stop.is_set():
                hook.reset_code(f)
                hook.reset_all()
                time.sleep(0)

        r = threading.Thread(target=resetter)
        r.start()
        try:
            with hook.enable(cb):
                for i in range(20000):
                    assert f(i) == i + 1
        finally:
            stop.set()
            r.join()
        print("ok")
    """)


# ------------------------------------------------------------------ leaks

class Arg:
    pass


def leak_target(a, b, *rest, **kw):
    return a


def leak_compiled(a, b, rest, kw):
    return a


def test_argument_refcounts_stay_flat_on_every_path():
    a, b = Arg(), Arg()
    guards = [("TYPE_MATCH", ("arg", 0), Arg), ("ID_MATCH", ("arg", 1), b)]

    def on_path(cb, n=10_000, expect=None):
        with hook.enable(cb):
            for _ in range(3):   # warm up
                leak_target(a, b, 1, k=2)
            before = (sys.getrefcount(a), sys.getrefcount(b))
            for _ in range(n):
                leak_target(a, b, 1, k=2)
            after = (sys.getrefcount(a), sys.getrefcount(b))
        assert before == after
        hook.reset_all()
    on_path(compile_as(leak_target, leak_compiled, guards))                # hit
    on_path(lambda info, entries: SKIP)                                    # skipped
    on_path(lambda info, entries: None)                                    # default

    def raising(a, b, rest, kw):
        raise ValueError("x")

    def exception_path():
        with hook.enable(compile_as(leak_target, raising, guards)):
            before = (sys.getrefcount(a), sys.getrefcount(b))
            for _ in range(10_000):
                try:
                    leak_target(a, b, 1, k=2)
                except ValueError:
                    pass
            after = (sys.getrefcount(a), sys.getrefcount(b))
        assert before == after
    exception_path()


def test_memory_and_data_stack_stay_flat():
    a, b = Arg(), Arg()
    cb = compile_as(leak_target, leak_compiled,
                    [("TYPE_MATCH", ("arg", 0), Arg), ("ID_MATCH", ("arg", 1), b)])

    def calls(n):
        for _ in range(n):
            leak_target(a, b)
        return hook._c._datastack_top()
    with hook.enable(cb):
        top = calls(100)
        gc.collect()
        tracemalloc.start()
        try:
            calls(10_000)
            gc.collect()
            first, _ = tracemalloc.get_traced_memory()
            top2 = calls(10_000)
            gc.collect()
            second, _ = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert second - first < 1024, f"grew {second - first} bytes over 10,000 calls"
    assert top2 == top


def test_free_function_runs_once_when_a_code_object_dies():
    ns = {}
    exec("def doomed(x):\n    return x\n", ns)
    doomed = ns.pop("doomed")
    compiled = functools.partial(int.__add__, 1)   # not a Python function: no SKIP mark
    rec = Recorder(compile_as(doomed, compiled))
    with hook.enable(rec):
        assert doomed(1) == 2
    ref = weakref.ref(doomed)
    assert doomed.__code__ in hook.cached_codes()
    frees = hook.counters()["frees"]
    del doomed, rec
    gc.collect()
    assert ref() is None
    assert hook.counters()["frees"] == frees + 1
    assert hook.cached_codes() == []


def test_reset_all_releases_compiled_objects_and_guarded_objects():
    class Compiled:
        def __call__(self, x):
            return ("compiled", x)

    class Model:
        pass
    model = Model()

    def f(x):
        return x
    compiled = Compiled()

    def policy(info, entries):
        if info.code is f.__code__:
            return GuardProgram([("ID_MATCH", ("arg", 0), model)]), compiled
        return SKIP               # Compiled.__call__ is a Python frame too
    with hook.enable(policy):
        assert f(model) == ("compiled", model)
        assert f(model) == ("compiled", model)
    cref, mref = weakref.ref(compiled), weakref.ref(model)
    del compiled, model, policy
    gc.collect()
    assert mref() is None          # ID_MATCH holds the model weakly
    assert cref() is not None      # the cache holds the compiled object ...
    hook.reset_all()
    gc.collect()
    assert cref() is None          # ... until reset
    assert hook.cached_codes() == []


def test_reset_code_while_its_compiled_version_runs():
    def f(x):
        return x

    def f_compiled(x):
        hook.reset_code(f)
        gc.collect()
        return ("compiled", x)
    rec = Recorder(compile_as(f, f_compiled))
    with hook.enable(rec):
        assert f(1) == ("compiled", 1)
        assert f(2) == ("compiled", 2)   # converted again after the reset
    assert rec.count(f) == 2


# ------------------------------------------------------------------ tools

def test_tracer_and_profiler_frames_pass_through():
    traced = []

    def tracer(frame, event, arg):
        traced.append(frame.f_code.co_name)
        return tracer

    def profiler(frame, event, arg):
        traced.append(event)

    def f(x):
        return helper(x) + 1
    for install, uninstall in ((lambda: sys.settrace(tracer), lambda: sys.settrace(None)),
                               (lambda: sys.setprofile(profiler),
                                lambda: sys.setprofile(None))):
        rec = Recorder(compile_as(f, lambda x: helper(x) + 1))
        with hook.enable(rec):
            install()
            try:
                results = [f(i) for i in range(5)]
            finally:
                uninstall()
        assert results == [i * 10 + 1 for i in range(5)]
        names = rec.names()
        assert "tracer" not in names and "profiler" not in names, names
        assert traced
        hook.reset_all()


def test_code_under_a_tracer_or_profiler_is_not_captured_until_it_is_removed():
    """Debuggers and coverage set a trace function: the code they watch runs as written
    (neither converted nor replaced by a cached entry), and is captured once they go."""
    def f(x):
        return helper(x) + 1

    for install, uninstall in ((lambda: sys.settrace(lambda *a: None),
                                lambda: sys.settrace(None)),
                               (lambda: sys.setprofile(lambda *a: None),
                                lambda: sys.setprofile(None))):
        rec = Recorder(compile_as(f, lambda x: ("compiled", x)))
        with hook.enable(rec):
            assert f(1) == ("compiled", 1)             # an entry exists
            install()
            try:
                assert [f(i) for i in range(3)] == [1, 11, 21]
            finally:
                uninstall()
            assert f(2) == ("compiled", 2)
        assert rec.count(f) == 1
        hook.reset_all()


def test_notebook_like_code_is_not_intercepted_but_its_functions_are():
    src = "def cell_fn(x):\n    return x * 2\nresult = cell_fn(21)\n"
    rec = Recorder()
    for name in ("<ipython-input-1-abc>", os.path.join("/tmp", "ipykernel_1", "x.py")):
        ns = {}
        with hook.enable(rec):
            exec(compile(src, name, "exec"), ns)
        assert ns["result"] == 42
    assert rec.names() == ["cell_fn", "cell_fn"]
