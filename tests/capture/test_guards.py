"""GuardProgram (csrc/capture/guards.c): guard tuples evaluated in C, with reasons."""
import gc
import math
import sys
import weakref

import pytest

import ember
from ember.capture import _hook as hook
from ember.capture._hook import GuardProgram, tensor_match

X = ("arg", 0)
Y = ("arg", 1)


def prog(*guards, argnames=("x", "y", "z")):
    return GuardProgram(list(guards), argnames=argnames)


def ok(p, *args, **kw):
    """check and check_verbose must agree."""
    passed = p.check(args, **kw)
    reason = p.check_verbose(args, **kw)
    assert passed == (reason is None), (passed, reason)
    return passed


def why(p, *args, **kw):
    assert not p.check(args, **kw)
    return p.check_verbose(args, **kw)


# ------------------------------------------------------------------ tensors

def test_tensor_match_passes_on_same_metadata():
    t = ember.ones(8, 4)
    p = prog(tensor_match(X, t))
    assert ok(p, t)
    assert ok(p, ember.zeros(8, 4))   # values are not guarded


@pytest.mark.parametrize("other, message", [
    (lambda: ember.ones(16, 4), "tensor 'x' size mismatch at dim 0: expected 8, got 16"),
    (lambda: ember.ones(8, 5), "tensor 'x' size mismatch at dim 1: expected 4, got 5"),
    (lambda: ember.ones(8, 4, dtype=ember.float64),
     "tensor 'x' dtype mismatch: expected float32, got float64"),
    (lambda: ember.ones(8, 4, 1), "tensor 'x' ndim mismatch: expected 2, got 3"),
    (lambda: ember.ones(4, 8).t(), "tensor 'x' stride mismatch at dim 0: expected 4, got 1"),
    (lambda: ember.ones(9, 4)[1:], "tensor 'x' storage offset mismatch: expected 0, got 4"),
    (lambda: ember.ones(8, 4, requires_grad=True),
     "tensor 'x' requires_grad mismatch: expected False, got True"),
    (lambda: ember.empty(8, 4, device="meta"),
     "tensor 'x' device mismatch: expected cpu, got meta"),
    (lambda: 3, "tensor 'x' type mismatch: expected ember.Tensor, got int"),
])
def test_tensor_match_reports_each_mismatch(other, message):
    p = prog(tensor_match(X, ember.ones(8, 4)))
    assert why(p, other()) == message


def test_tensor_match_exact_type():
    class MyTensor(ember.Tensor):
        pass
    t = ember.ones(2)
    spec = ("TENSOR_MATCH", X, MyTensor, t.dtype, (2,), (1,), 0, False)
    assert "type mismatch: expected MyTensor, got ember.Tensor" in why(prog(spec), t)


def test_tensor_match_dynamic_dims_and_any_strides():
    t = ember.ones(8, 4)
    p = prog(tensor_match(X, t, dynamic_dims=(0,)))
    assert ok(p, ember.ones(3, 4))
    assert why(p, ember.ones(3, 5)) == "tensor 'x' size mismatch at dim 1: expected 4, got 5"
    loose = prog(tensor_match(X, t, check_strides=False))
    assert ok(loose, ember.ones(4, 8).t())
    manual = prog(("TENSOR_MATCH", X, ember.Tensor, ember.float32, (None, 4), None, None,
                   False))
    assert ok(manual, ember.ones(9, 4)[1:])


def test_tensor_match_rejects_bad_specs():
    with pytest.raises(TypeError, match="not a Tensor type"):
        prog(("TENSOR_MATCH", X, int, ember.float32, (2,), (1,), 0, False))
    with pytest.raises(TypeError, match="ember dtype"):
        prog(("TENSOR_MATCH", X, ember.Tensor, "float32", (2,), (1,), 0, False))
    with pytest.raises(TypeError):
        prog(("TENSOR_MATCH", X, ember.Tensor, ember.float32, (2,), (1, 1), 0, False))
    with pytest.raises(ValueError):
        prog(("TENSOR_MATCH", X, ember.Tensor, ember.float32, (2,)))


# ------------------------------------------------------------------ other checks

def test_type_match():
    p = prog(("TYPE_MATCH", X, int))
    assert ok(p, 3)
    assert why(p, True) == "type of 'x' changed: expected int, got bool"


def test_id_match_strong_and_weak():
    class Thing:
        pass
    a, b = Thing(), Thing()
    p = prog(("ID_MATCH", X, a))
    assert ok(p, a)
    assert "'x' is a different object" in why(p, b)
    # weakly held: the guard does not keep `a` alive, and fails once it is gone
    ref = weakref.ref(a)
    del a
    gc.collect()
    assert ref() is None
    assert "no longer exists" in why(p, b)
    assert not p.check((None,))
    # objects without weakref support are held strongly
    n = prog(("ID_MATCH", X, None))
    assert ok(n, None)
    assert not ok(n, 0)


@pytest.mark.parametrize("const, good, bad", [
    (3, 3, 4), (3, 3, 3.0), (3, 3, True), (True, True, 1), (None, None, 0),
    ("relu", "relu", "gelu"), (0.0, 0.0, -0.0), (math.nan, math.nan, 1.0),
    ((1, "a", (2.5, None)), (1, "a", (2.5, None)), (1, "a", (2.5, 0))),
    ((1, 2), (1, 2), [1, 2]), (2**70, 2**70, 2**70 + 1),
])
def test_equals_match(const, good, bad):
    p = prog(("EQUALS_MATCH", X, const))
    assert ok(p, good)
    assert not ok(p, bad)


def test_equals_match_messages_and_validation():
    p = prog(("EQUALS_MATCH", Y, 3))
    assert why(p, 0, 4) == "value of 'y' changed: expected 3, got 4"
    assert why(p, 0, 3.0) == "type of 'y' changed: expected int, got float"
    for bad in ([1], {"a": 1}, object(), (1, [2])):
        with pytest.raises(TypeError, match="EQUALS_MATCH"):
            prog(("EQUALS_MATCH", X, bad))


def test_len_match():
    p = prog(("LEN_MATCH", X, 2))
    assert ok(p, (1, 2)) and ok(p, [1, 2]) and ok(p, {"a": 1, "b": 2})
    assert why(p, (1, 2, 3)) == "length of 'x' changed: expected 2, got 3"
    assert "no longer a list, tuple or dict" in why(p, "ab")


def test_grad_mode():
    p = prog(("GRAD_MODE", True))
    assert ok(p)
    with ember.no_grad():
        assert why(p) == "grad mode changed: expected enabled, got disabled"
        assert ok(prog(("GRAD_MODE", False)))


@pytest.mark.skipif(not hook.available, reason="the capture state needs the hook")
def test_compile_context():
    def mine(info, entries):
        return None

    def other(info, entries):
        return None
    for spec in (("COMPILE_CONTEXT", mine), ("COMPILE_CONTEXT", None, mine)):
        p = prog(spec)
        assert "another ember.compile call" in why(p)       # capture off
        with hook.enable(mine):
            with hook.disable():
                assert not p.check(())
            assert p.check(())
            with hook.enable(other):
                assert not p.check(())
                with hook.run_only():
                    assert p.check(())                      # run-only uses any entry
    assert "ember.compile call running" in prog(("COMPILE_CONTEXT", mine)).guards[0]
    for bad in (("COMPILE_CONTEXT", 42), ("COMPILE_CONTEXT", X, mine),
                ("COMPILE_CONTEXT",)):
        with pytest.raises(ValueError):
            prog(bad)


def test_lambda_guard():
    p = prog(("LAMBDA", X, lambda v: v > 0, "x is positive"))
    assert ok(p, 1)
    assert why(p, -1) == "guard on 'x' failed: x is positive"

    def boom(v):
        raise ZeroDivisionError("from guard")
    with pytest.raises(ZeroDivisionError, match="from guard"):
        prog(("LAMBDA", X, boom, "boom")).check((1,))


def test_guards_run_in_order_and_stop_at_first_failure():
    p = prog(("TYPE_MATCH", X, int), ("EQUALS_MATCH", X, 1), ("LEN_MATCH", X, 2))
    assert why(p, "s") == "type of 'x' changed: expected int, got str"
    assert why(p, 2) == "value of 'x' changed: expected 1, got 2"
    assert "no longer a list" in why(p, 1)


def test_empty_program_passes():
    p = GuardProgram([])
    assert len(p) == 0 and p.check(()) and p.check_verbose(()) is None


def test_bad_guard_specs():
    with pytest.raises(ValueError, match="unknown guard kind"):
        prog(("SHAPE_MATCH", X, 1))
    with pytest.raises(ValueError, match="unknown guard source root"):
        prog(("TYPE_MATCH", ("stack", 0), int))
    with pytest.raises(ValueError, match="a guard must be a tuple"):
        prog("TYPE_MATCH")
    with pytest.raises(TypeError):
        prog(("TYPE_MATCH", X, 3))
    with pytest.raises(ValueError):
        prog(("TYPE_MATCH", X))
    with pytest.raises(ValueError, match="negative"):
        prog(("TYPE_MATCH", ("arg", -1), int))
    with pytest.raises(TypeError):
        prog(("TYPE_MATCH", ("item", X, []), int))   # unhashable key


# ------------------------------------------------------------------ sources

class Layer:
    def __init__(self, w):
        self.weight = w


class Model:
    def __init__(self):
        self.layer = Layer(ember.ones(4, 3))
        self.items = [1, 2, 3]
        self.table = {"k": 5}
        self.gets = 0

    @property
    def counted(self):
        self.gets += 1
        return self.gets


def test_attribute_chain_reads_live_values():
    m = Model()
    self_weight = ("attr", ("attr", ("arg", 0), "layer"), "weight")
    p = GuardProgram([("TYPE_MATCH", ("arg", 0), Model),
                      tensor_match(self_weight, m.layer.weight)], argnames=("self",))
    assert p.check((m,))
    m.layer.weight = ember.ones(5, 3)   # nothing cached: the new value is seen
    assert p.check_verbose((m,)) == ("tensor 'self.layer.weight' size mismatch at dim 0: "
                                     "expected 4, got 5")
    m.layer = Layer(ember.ones(4, 3))
    assert p.check((m,))
    del m.layer
    assert p.check_verbose((m,)) == "'self' has no attribute 'layer'"


def test_chain_form_matches_nested_form():
    m = Model()
    nested = ("item", ("attr", ("arg", 0), "items"), 1)
    chain = ("local", 0, (("attr", "items"), ("item", 1)))
    p = GuardProgram([("EQUALS_MATCH", nested, 2), ("EQUALS_MATCH", chain, 2)],
                     argnames=("self",))
    assert p.sources == ("self", "self.items", "self.items[1]")   # deduplicated
    assert p.check((m,))
    m.items[1] = 7
    assert p.check_verbose((m,)) == "value of 'self.items[1]' changed: expected 2, got 7"


def test_item_and_dict_steps():
    m = Model()
    p = GuardProgram([("EQUALS_MATCH", ("local", 0, (("attr", "table"), ("dict", "k"))), 5),
                      ("EQUALS_MATCH", ("local", 0, (("attr", "items"), ("item", -1))), 3)],
                     argnames=("self",))
    assert p.check((m,))
    del m.table["k"]
    assert p.check_verbose((m,)) == "'self.table' has no key 'k'"
    m.table = [5]
    assert "no longer a dict" in p.check_verbose((m,))
    m.table = {"k": 5}
    m.items = []
    assert p.check_verbose((m,)) == "'self.items' has no index -1 (length 0)"


def test_item_step_through_getitem_and_errors():
    class Box:
        def __getitem__(self, k):
            if k == "bad":
                raise RuntimeError("broken getitem")
            if k == "missing":
                raise KeyError(k)
            return k * 2
    assert GuardProgram([("EQUALS_MATCH", ("item", X, "ab"), "abab")]).check((Box(),))
    assert "has no item 'missing'" in GuardProgram(
        [("EQUALS_MATCH", ("item", X, "missing"), 1)]).check_verbose((Box(),))
    with pytest.raises(RuntimeError, match="broken getitem"):
        GuardProgram([("EQUALS_MATCH", ("item", X, "bad"), 1)]).check((Box(),))


def test_attribute_errors_other_than_missing_propagate():
    class Bad:
        @property
        def p(self):
            raise ValueError("property broke")
    with pytest.raises(ValueError, match="property broke"):
        GuardProgram([("TYPE_MATCH", ("attr", X, "p"), int)]).check((Bad(),))


def test_each_source_is_read_once_per_check_and_not_cached():
    m = Model()
    counted = ("attr", ("arg", 0), "counted")
    p = GuardProgram([("TYPE_MATCH", counted, int), ("LAMBDA", counted, bool, "truthy")])
    assert p.check((m,))
    assert m.gets == 1
    assert p.check((m,))
    assert m.gets == 2
    # a failing first guard stops before later sources are read
    q = GuardProgram([("TYPE_MATCH", ("arg", 0), Layer), ("TYPE_MATCH", counted, int)])
    assert not q.check((m,))
    assert m.gets == 2


SCALE = 2.0


def test_global_builtin_and_object_sources():
    g = {"SCALE": 2.0}
    b = {"len": len, "SCALE": 9.0}
    p = GuardProgram([("EQUALS_MATCH", ("global", "SCALE"), 2.0),
                      ("ID_MATCH", ("global", "len"), len),
                      ("ID_MATCH", ("builtin", "len"), len)])
    assert p.check((), globals=g, builtins=b)
    # LOAD_GLOBAL semantics: a global shadows the builtin, a missing one falls back
    assert not p.check((), globals={"SCALE": 2.0, "len": max}, builtins=b)
    assert p.check_verbose((), globals={}, builtins={"len": len}) == \
        "global name 'SCALE' is not defined"
    assert p.check_verbose((), globals=g, builtins={}) == "global name 'len' is not defined"
    mod = GuardProgram([("EQUALS_MATCH", ("object", sys.modules[__name__], (("attr", "SCALE"),)),
                         2.0)])
    assert mod.check(())
    assert mod.sources[-1].endswith(".SCALE")


def test_closure_sources():
    def make(v):
        def inner():
            return v
        return inner
    f, g = make(1), make(2)
    p = GuardProgram([("EQUALS_MATCH", ("closure", 0), 1)], freenames=("v",))
    assert p.check((), closure=f.__closure__)
    assert p.check_verbose((), closure=g.__closure__) == \
        "value of 'v' changed: expected 1, got 2"
    assert p.check_verbose(()) == "closure variable 'v' is missing"

    def empty_cell():
        def inner():
            return w
        return inner
        w = 1  # noqa: F841 -- never runs: makes w a cell that stays empty
    cl = empty_cell().__closure__
    assert p.check_verbose((), closure=cl) == "closure variable 'v' is empty"


def test_missing_argument_fails():
    assert GuardProgram([("TYPE_MATCH", ("arg", 3), int)], argnames=("a",)).check_verbose(
        (1,)) == "argument 'arg3' is missing"


def test_check_accepts_frame_info():
    info = hook.FrameInfo((None, None, {"K": 3}, {}, (1, 2), None))
    p = GuardProgram([("EQUALS_MATCH", ("arg", 1), 2), ("EQUALS_MATCH", ("global", "K"), 3)])
    assert p.check(info) and p.check_verbose(info) is None


def test_program_introspection():
    spec = [("TYPE_MATCH", X, int), ("GRAD_MODE", True)]
    p = GuardProgram(spec, argnames=["x"])
    assert len(p) == 2
    assert p.guards == ("type(x) is int", "ember.is_grad_enabled() == True")
    assert "2 guards" in repr(p)
    t = GuardProgram([tensor_match(("arg", 0), ember.ones(2, 3), dynamic_dims=(0,))],
                     argnames=["x"])
    assert t.guards == ("x: tensor float32 shape (?, 3) stride (?, 1) requires_grad=False",)


def test_common_guards_run_no_python_code():
    """Arguments, globals, closure cells and plain attributes with tensor, type, identity,
    constant, length and grad-mode checks: no Python frame runs during check()."""
    m = Model()
    t = ember.ones(2, 2)

    def make():
        c = 4
        return (lambda: c).__closure__
    p = GuardProgram([
        ("TYPE_MATCH", ("arg", 0), Model),
        tensor_match(("attr", ("attr", ("arg", 0), "layer"), "weight"), m.layer.weight),
        tensor_match(("arg", 1), t),
        ("ID_MATCH", ("global", "len"), len),
        ("EQUALS_MATCH", ("closure", 0), 4),
        ("LEN_MATCH", ("attr", ("arg", 0), "items"), 3),
        ("EQUALS_MATCH", ("dict", ("attr", ("arg", 0), "table"), "k"), 5),
        ("GRAD_MODE", True),
    ])
    closure = make()
    events = []

    def profiler(frame, event, arg):
        if event == "call":
            events.append(frame.f_code.co_name)
    sys.setprofile(profiler)
    try:
        for _ in range(10):
            assert p.check((m, t), globals=globals(), builtins=__builtins__ if isinstance(
                __builtins__, dict) else vars(__builtins__), closure=closure)
    finally:
        sys.setprofile(None)
    assert events == []


def test_program_with_cycle_is_collected():
    class Pred:
        def __call__(self, v):
            return True
    pred = Pred()
    pred.program = GuardProgram([("LAMBDA", X, pred, "cycle")])
    ref = weakref.ref(pred)
    del pred
    gc.collect()
    assert ref() is None


def test_guard_refcounts_flat():
    t = ember.ones(3)
    m = Model()
    p = GuardProgram([tensor_match(("arg", 0), t), ("TYPE_MATCH", ("arg", 1), Model),
                      ("LEN_MATCH", ("attr", ("arg", 1), "items"), 3)])
    before = (sys.getrefcount(t), sys.getrefcount(m), sys.getrefcount(m.items))
    args = (t, m)
    for _ in range(10_000):
        p.check(args)
        p.check_verbose(args)
    del args
    assert (sys.getrefcount(t), sys.getrefcount(m), sys.getrefcount(m.items)) == before


# ------------------------------------------------------------------ forms used by capture/

def test_tensor_match_from_example_tensor():
    t = ember.ones(9, 4)[1:]
    p = prog(("TENSOR_MATCH", X, t))
    assert ok(p, ember.ones(9, 4)[1:])
    assert why(p, ember.ones(8, 4)) == "tensor 'x' storage offset mismatch: expected 4, got 0"
    ref = weakref.ref(t)
    del t
    gc.collect()
    assert ref() is None   # the example is not kept


def test_dict_keys():
    p = prog(("DICT_KEYS", X, ("a", "b", 3)))
    assert ok(p, {"a": 1, "b": 2, 3: 4})
    assert why(p, {"b": 2, "a": 1, 3: 4}) == \
        "keys of 'x' changed: expected 'a', got 'b' at position 0"
    assert why(p, {"a": 1}) == "keys of 'x' changed: expected 3 keys, got 1"
    assert "no longer a dict" in why(p, [1, 2, 3])


def test_grad_mode_with_none_source():
    p = prog(("GRAD_MODE", None, False))
    with ember.no_grad():
        assert ok(p)
    assert not ok(p)


@pytest.mark.parametrize("make", [dict, __import__("collections").OrderedDict])
def test_dict_item_lookups_see_every_write(make):
    """Item sources of a dict or OrderedDict reuse their last lookup while the dict's
    version tag stands (guards.c dict_item); every kind of write must be seen."""
    item = ("item", X, "w")
    p = prog(("EQUALS_MATCH", item, 1), ("EQUALS_MATCH", ("dict", X, "b"), 2))
    d = make(w=1, b=2)
    for _ in range(3):
        assert ok(p, d)
    d["w"] = 3                                     # same key, new value
    assert "3" in why(p, d)
    d["w"] = 1
    assert ok(p, d)
    d["other"] = 0                                 # another key: still passes
    assert ok(p, d)
    del d["w"]
    assert "no item 'w'" in why(p, d)
    d["w"] = 1
    assert ok(p, d)
    d.update(w=4)
    assert not ok(p, d)
    d.clear()
    assert not ok(p, d)
    fresh = [make(w=1, b=2) for _ in range(50)]    # new dicts (maybe at reused addresses)
    assert all(ok(p, f) for f in fresh)
    for f in fresh:
        f["w"] = 9
        assert not ok(p, f)
    e = make(w=1, b=2)
    d2 = make(w=5, b=2)
    assert ok(p, e) and not ok(p, d2) and ok(p, e)   # alternating dicts
