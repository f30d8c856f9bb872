"""Python side effects inside captured code: containers, attributes, modules, globals and
closure cells written by the frame are replayed after its graph, in program order, with
the graph's tensors in place; reads after writes inside the frame see the written value.

Each case defines `fn`, `make()` -> the call's arguments (fresh objects) and `state()` ->
what the call may have changed (containers, objects, globals). The case runs eagerly and
compiled, each on its own fresh namespace, CALLS times; results and states must be equal
after every call, the frame must be captured (no fallback, no unsupported reason) and
compile `graphs` graphs in all. With torch installed, torch._dynamo.explain() is run on
the same source for its graph count (test_torch_captures_the_same).
"""
from __future__ import annotations

import dataclasses
import linecache
import math

import numpy as np
import pytest

import ember
from ember.capture import CaptureError, _hook, counters

pytestmark = pytest.mark.skipif(not _hook.available, reason="capture needs CPython 3.11")


@dataclasses.dataclass
class Case:
    name: str
    src: str
    graphs: int = 1           # graphs Ember compiles over `calls` calls
    calls: int = 2
    torch_graphs: int = None  # torch._dynamo.explain's count for one call (None: 1)
    backends: tuple = ("eager", "aot_eager", "llvm")

    def __str__(self):
        return self.name


CASES = [
    # ------------------------------------------------------------ dicts
    Case("dict_counter", """
def make():
    return (T(3), CFG)
CFG = {"n": 0}
def fn(x, cfg):
    cfg["n"] = cfg["n"] + 1
    return x * cfg["n"]
def state():
    return CFG
""", graphs=2),       # the int is guarded: the second call sees n == 1
    Case("dict_methods", """
def make():
    return (T(3), {"a": T(3), "b": 2, "c": 3, "d": 4})
def fn(x, d):
    d.update({"e": x * 2}, f=5)
    d.update([("g", 7)])
    b = d.pop("b")
    d.setdefault("h", x + b)
    d.setdefault("a", None)
    del d["c"]
    s = d["a"] + d["e"] + d["h"]
    k, v = d.popitem()
    d["k"] = v
    d |= {"z": x.sum()}
    return s, k, len(d)
def state():
    return None
"""),
    Case("dict_clear_and_refill", """
def make():
    return (T(2), {"x": 1, "y": 2})
def fn(x, d):
    old = d["x"]
    d.clear()
    d["w"] = x * old
    return d
"""),
    Case("dict_of_lists", """
def make():
    return (T(2, 2), {"acts": [], "n": 0})
def fn(x, store):
    h = x.relu()
    store["acts"].append(h)
    store["acts"].append(h * 2)
    store["n"] += 1
    return h.sum()
"""),
    # ------------------------------------------------------------ lists
    Case("list_append_activations", """
def make():
    return (T(4), [])
def fn(x, acts):
    h = x + 1
    acts.append(h)
    h2 = h * 2
    acts.append(h2)
    return h2.sum(), len(acts)
"""),
    Case("list_methods", """
def make():
    return (T(3), [1, 5, 3, 4, 2])
def fn(x, xs):
    xs.append(9)
    xs.extend([7, 8])
    xs.insert(0, 0)
    last = xs.pop()
    first = xs.pop(0)
    xs.remove(5)
    xs.sort()
    xs.reverse()
    xs[1] = 100
    xs[2:4] = [-1, -2, -3]
    del xs[0]
    del xs[-2:]
    xs += [11]
    return x * last + first, xs.index(100), xs.count(-1)
"""),
    Case("list_clear_and_imul", """
def make():
    return (T(3), [1, 2], [3])
def fn(x, a, b):
    a.clear()
    b *= 3
    a.append(x)
    return x * len(b)
"""),
    Case("nested_list", """
def make():
    return (T(2), [[1], [2, 3]])
def fn(x, xs):
    xs[0].append(x * 2)
    xs[1][0] = 10
    xs.append([x])
    return x + xs[1][0]
"""),
    Case("list_swap_items", """
def make():
    return (T(2), [T(2), T(2), 3])
def fn(x, xs):
    xs[0], xs[1] = xs[1], xs[0]
    xs[2] = xs[0] * x
    return xs[0] - xs[1]
"""),
    Case("list_grown_while_iterating", """
def make():
    return (T(2), [1, 2])
def fn(x, xs):
    total = x
    for v in xs:             # a live iterator: reaches the items appended below
        if v < 4:
            xs.append(v + 2)
        total = total + v
    return total
"""),
    # ------------------------------------------------------------ plain objects
    Case("object_attributes", """
class Box:
    pass
BOX = Box()
BOX.scale = 2.0
def make():
    BOX.old = 1
    return (T(3), BOX)
def fn(x, box):
    box.last = x * box.scale
    y = box.last + 1
    box.scale = 3.0
    setattr(box, "count", 1)
    del box.old
    return y * box.scale, box.count, hasattr(box, "last")
def state():
    return sorted(vars(BOX).items())
""", graphs=2),      # box.scale changed: the second call recompiles
    Case("attribute_and_global_order", """
class Box:
    pass
BOX = Box()
G_A = 1
G_B = 2
def make():
    for k in list(vars(BOX)):
        delattr(BOX, k)
    BOX.a = 1
    BOX.b = 2
    return (T(3), BOX)
def fn(x, box):
    global G_A, G_C
    box.h = x
    box.k = x * 2
    box.h = x * 3        # h keeps its place, before k
    del box.a
    box.a = 5            # created anew: it moves to the end
    box.b = 7            # keeps its place
    del G_A
    G_C = 3
    G_A = 4              # created anew: after G_C
    return x + 1
def state():
    return list(vars(BOX).items()), [k for k in globals() if k.startswith("G_")]
""", graphs=2),       # G_C exists at the second call: its write is guarded anew
    Case("object_attribute_replaced_list", """
class Box:
    pass
def make():
    b = Box()
    b.items = [1]
    return (T(2), b)
def fn(x, b):
    old = b.items
    old.append(2)
    b.items = [x]
    b.items.append(x * 2)
    return len(old), len(b.items)
""", graphs=2),       # plain objects are guarded by identity: a new Box recompiles
    Case("same_object_stored_twice_and_returned", """
class Box:
    pass
def make():
    return (T(2), {}, Box())
def fn(x, d, box):
    new = [x * 2]
    d["last"] = new
    box.last = new
    return new
def check(result, args):
    d, box = args[1], args[2]
    assert result is d["last"] and result is box.last
""", graphs=2),       # a new Box each call
    Case("returns_input_containers_as_themselves", """
def make():
    return (T(2), [1], {"a": 1}, (T(1),))
def fn(x, lst, d, tup):
    lst.append(x)
    return lst, d, tup, x
def check(result, args):
    assert result[0] is args[1] and result[1] is args[2] and result[2] is args[3]
    assert result[3] is args[0]
""", torch_graphs=0),     # no tensor op: torch makes no graph
    # ------------------------------------------------------------ modules
    Case("module_attributes_and_buffers", """
class Counter(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 3)
        self.register_buffer("last", torch.zeros(3))
        self.steps = 0
    def forward(self, x):
        h = self.lin(x)
        self.steps = self.steps + 1
        self.last = h.detach().sum(0)
        self.note = "ran"
        return h * self.steps + self.last
M = Counter()
def make():
    return (T(2, 3),)
def fn(x):
    return M(x)
def state():
    return (M.steps, M.last, M.note, sorted(dict(M.named_buffers())))
""", graphs=2),       # steps is an int attribute: guarded
    Case("module_forward_hooks_collect_activations", """
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(4, 4)
        self.b = nn.Linear(4, 2)
    def forward(self, x):
        return self.b(self.a(x).relu())
NET = Net()
ACTS = []
NET.a.register_forward_hook(lambda m, inp, out: ACTS.append(out))
NET.b.register_forward_hook(lambda m, inp, out: out * 10)
NET.a.register_forward_pre_hook(lambda m, inp: (inp[0] + 1,))
def make():
    return (T(3, 4),)
def fn(x):
    return NET(x)
def state():
    return ACTS
""", graphs=2),       # ACTS' length is guarded
    # ------------------------------------------------------------ globals and cells
    Case("global_counter", """
CALLS = 0
def make():
    return (T(3),)
def fn(x):
    global CALLS
    CALLS += 1
    return x * CALLS
def state():
    return CALLS
""", graphs=2),
    Case("global_tensor_and_delete", """
LAST = None
def make():
    global SCRATCH
    SCRATCH = 1
    return (T(3),)
def fn(x):
    global LAST, SCRATCH
    LAST = x * 2
    y = LAST + SCRATCH
    del SCRATCH
    return y
def state():
    return (LAST, "SCRATCH" in globals())
"""),
    Case("python_module_attribute", """
import types
from fresh_compiler import fresh_compiler  # noqa: F401  (autouse)
settings = types.ModuleType("settings")
settings.scale = 2
def make():
    return (T(3),)
def fn(x):
    settings.scale = settings.scale + 1
    settings.seen = x.sum()
    return x * settings.scale
def state():
    return (settings.scale, settings.seen)
""", graphs=2),
    Case("nonlocal_counter", """
def make_counter():
    count = 0
    def fn(x):
        nonlocal count
        count += 1
        return x * count
    def state():
        return count
    return fn, state
fn, state = make_counter()
def make():
    return (T(3),)
""", graphs=2),
    Case("inlined_closure_writes", """
def make_acc():
    total = []
    n = 0
    def add(v):
        nonlocal n
        n += 1
        total.append(v)
        return n
    def state():
        return (n, total)
    return add, state
add, state = make_acc()
def make():
    return (T(2),)
def fn(x):
    a = add(x)
    b = add(x * 2)
    return x * (a + b)
""", graphs=2),
    # ------------------------------------------------------------ aliasing
    Case("one_list_through_two_arguments", """
SHARED = []
def make():
    return (T(2), SHARED, SHARED)
def fn(x, a, b):
    a.append(x)
    return len(b)
def state():
    return SHARED
""", graphs=2, torch_graphs=0),
]

CASE_BY_NAME = {c.name: c for c in CASES}


def make_namespace(lib, case):
    rng = np.random.default_rng(0)

    def T(*shape):
        return lib.from_numpy(rng.standard_normal(shape).astype(np.float32))

    filename = f"<side effects {case.name}>"
    linecache.cache[filename] = (len(case.src), None, case.src.splitlines(True), filename)
    ns = {"torch": lib, "nn": lib.nn, "F": lib.nn.functional, "math": math, "T": T,
          "__name__": f"side_effects_{case.name}"}
    lib.manual_seed(0)
    exec(compile(case.src, filename, "exec"), ns)
    return ns


def _same(got, want, path="result"):
    assert type(got).__qualname__ == type(want).__qualname__, \
        f"{path}: {type(got).__name__} != {type(want).__name__}"
    if isinstance(want, ember.Tensor):
        assert got.shape == want.shape and got.dtype == want.dtype, path
        np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(),
                                   rtol=1e-6, atol=1e-6, err_msg=path)
    elif isinstance(want, (list, tuple)):
        assert len(got) == len(want), f"{path}: length {len(got)} != {len(want)}"
        for i, (a, b) in enumerate(zip(got, want)):
            _same(a, b, f"{path}[{i}]")
    elif isinstance(want, dict):
        assert list(got) == list(want), f"{path}: keys {list(got)} != {list(want)}"
        for k in want:
            _same(got[k], want[k], f"{path}[{k!r}]")
    elif hasattr(want, "__dict__") and not isinstance(want, type) and \
            not callable(want):
        # objects of the two namespaces' own classes: same class name, same attributes
        assert type(got).__qualname__ == type(want).__qualname__, path
        _same(dict(vars(got)), dict(vars(want)), f"{path}.__dict__")
    else:
        assert got == want, f"{path}: {got!r} != {want!r}"


def _observe(ns, args):
    """Everything a case's call can change: its arguments and the case's state()."""
    st = ns["state"]() if "state" in ns else None
    return ([a for a in args if not isinstance(a, ember.Tensor)], st)


def _run(ns, fn, calls):
    out = []
    for _ in range(calls):
        args = ns["make"]()
        res = fn(*args)
        if "check" in ns:
            ns["check"](res, args)
        out.append((res, _observe(ns, args)))
    return out


@pytest.mark.parametrize("backend", ["eager", "aot_eager", "llvm"])
@pytest.mark.parametrize("case", CASES, ids=str)
def test_side_effects_replay_as_eager(case, backend):
    if backend not in case.backends:
        pytest.skip(f"{case.name} is not run under {backend}")
    ns = make_namespace(ember, case)
    want = _run(ns, ns["fn"], case.calls)
    ns2 = make_namespace(ember, case)
    compiled = ember.compile(ns2["fn"], backend=backend, fullgraph=True)
    got = _run(ns2, compiled, case.calls)
    for i, (g, w) in enumerate(zip(got, want)):
        _same(g[0], w[0], f"call {i} result")
        _same(g[1], w[1], f"call {i} state")
    assert dict(counters["unsupported"]) == {}
    assert counters["stats"]["frames_fallback"] == 0
    assert len(compiled._ember_compile_context.graphs) == case.graphs


def test_side_effects_are_in_the_graph_module_meta():
    ns = make_namespace(ember, CASE_BY_NAME["dict_of_lists"])
    compiled = ember.compile(ns["fn"], backend="eager")
    compiled(*ns["make"]())
    gm = compiled._ember_compile_context.graphs[0]
    lines = gm.meta["side_effects"]
    assert any("store" in line and "items changed" in line for line in lines), lines
    from ember.capture.program import describe
    text = describe(gm.meta["program"])
    assert "list_set" in text and "dict_set" in text, text


def test_reads_after_writes_see_the_written_value():
    class Box:
        pass

    box = Box()
    box.v = 1

    def fn(x, d, lst):
        d["k"] = x * 3
        lst.append(d["k"] + 1)
        box.v = lst[-1] * 2
        return box.v + d["k"]

    d, lst = {}, []
    out = ember.compile(fn, backend="llvm", fullgraph=True)(ember.ones(2), d, lst)
    assert out.tolist() == [11.0, 11.0]
    assert d["k"].tolist() == [3.0, 3.0] and lst[0].tolist() == [4.0, 4.0]
    assert box.v.tolist() == [8.0, 8.0]


def test_aliasing_of_mutated_lists_is_guarded():
    """Traced with two distinct lists, then called with one list twice (and the other
    way round): the writes and reads must follow the objects, not the first trace."""
    def fn(x, a, b):
        a.append(1)
        return x * len(b)

    compiled = ember.compile(fn, backend="eager")
    a, b = [], []
    assert compiled(ember.ones(1), a, b).item() == 0 and a == [1] and b == []
    s = []
    assert compiled(ember.ones(1), s, s).item() == 1 and s == [1]
    assert "ALIAS" in "\n".join(compiled._ember_compile_context.recompile_reasons[0][1:])\
        or len(compiled._ember_compile_context.graphs) == 2
    p, q = [], []
    assert compiled(ember.ones(1), p, q).item() == 0 and p == [1] and q == []


def test_cells_of_another_closure_are_not_written():
    """Two closures over the same code: the graph traced with one's cell must not write
    the other's."""
    def make():
        n = 0

        def fn(x):
            nonlocal n
            n += 1
            return x * n

        return fn, lambda: n

    f1, s1 = make()
    f2, s2 = make()
    ember.compile(f1, backend="eager")(ember.ones(1))
    ember.compile(f2, backend="eager")(ember.ones(1))
    assert (s1(), s2()) == (1, 1)


def test_a_break_after_side_effects_applies_them_once():
    def fn(x, acts):
        acts.append(x)
        print("side effect")      # a graph break: the append is replayed before it
        return x * 2

    acts = []
    ember.compile(fn, backend="eager")(ember.ones(1), acts)
    assert len(acts) == 1
    assert counters["stats"]["graph_breaks"] == 1
    assert counters["stats"]["frames_fallback"] == 0


def test_a_fallback_after_side_effects_applies_them_once():
    def fn(x, acts):
        acts.append(x)
        y = x * 2
        v = y[1:]                 # a view made in the graph crossing the break
        print("side effect")      # below: the frame runs in CPython
        return v * 2

    acts = []
    ember.compile(fn, backend="eager")(ember.ones(1), acts)
    assert len(acts) == 1
    assert counters["stats"]["frames_fallback"] == 1


# ------------------------------------------------------------ what still falls back

FALLBACKS = {
    "custom_setattr": ("""
class Rec:
    def __setattr__(self, k, v):
        object.__setattr__(self, k, v * 2)
R = Rec()
def fn(x):
    R.v = 1
    return x
""", "defines __setattr__"),
    "property_setter": ("""
class P:
    _v = 0
    @property
    def v(self):
        return self._v
    @v.setter
    def v(self, value):
        self._v = value + 1
OBJ = P()
def fn(x):
    OBJ.v = 1
    return x * OBJ.v
""", "data descriptor"),
    "class_attribute": ("""
class K:
    n = 0
def fn(x):
    K.n = K.n + 1
    return x
""", "of class K"),
    "list_subclass": ("""
class L(list):
    pass
def fn(x, xs):
    xs.append(x)
    return x
""", "only plain lists and dicts"),
    "tensor_attribute": ("""
def fn(x):
    x.tag = 1
    return x
""", "assigning attribute 'tag'"),
    "delete_created_attribute": ("""
class B:
    pass
OBJ = B()
def fn(x):
    OBJ.tmp = 1
    del OBJ.tmp
    return x
""", "created"),
}


@pytest.mark.parametrize("name", sorted(FALLBACKS))
def test_unreplayable_writes_run_in_cpython_with_a_reason(name):
    """Each write runs in CPython: a graph break at the store (the frame's own
    STORE_ATTR), or the frame falls back whole (a write inside a call it inlines that
    cannot break, or one the replay cannot express), with its reason counted."""
    src, reason = FALLBACKS[name]
    ns = {"torch": ember, "__name__": f"fallback_{name}"}
    exec(compile(src, f"<fallback {name}>", "exec"), ns)
    args = (ember.ones(2),) + (([],) if name != "list_subclass" else (ns["L"](),))
    nargs = ns["fn"].__code__.co_argcount
    args = args[:nargs]
    ns2 = {"torch": ember, "__name__": f"fallback_{name}"}
    exec(compile(src, f"<fallback {name}>", "exec"), ns2)
    args2 = (ember.ones(2),) + (([],) if name != "list_subclass" else (ns2["L"](),))
    want = ns["fn"](*args)
    got = ember.compile(ns2["fn"], backend="eager")(*args2[:nargs])
    assert got.tolist() == want.tolist()
    reasons = "\n".join(list(counters["unsupported"]) + list(counters["graph_break"]))
    assert reason in reasons, reasons
    assert counters["stats"]["frames_fallback"] + counters["stats"]["graph_breaks"] >= 1
    with pytest.raises(CaptureError, match="cannot capture"):
        ember.compile(ns2["fn"], backend="eager", fullgraph=True)(*args2[:nargs])


def test_torch_captures_the_same(torch):
    """torch.compile captures each case in one graph too (Ember is not behind)."""
    import torch._dynamo
    wrong = {}
    for case in CASES:
        torch._dynamo.reset()
        ns = make_namespace(torch, case)
        out = torch._dynamo.explain(ns["fn"])(*ns["make"]())
        want = case.torch_graphs if case.torch_graphs is not None else 1
        if out.graph_count != want or out.graph_break_count > 0:
            wrong[case.name] = (out.graph_count, out.break_reasons)
    torch._dynamo.reset()
    assert wrong == {}


def test_a_dict_changing_size_during_iteration_raises_as_eager():
    def fn(x, d):
        for k in d:
            d[k + "!"] = x
        return x

    with pytest.raises(RuntimeError, match="changed size during iteration"):
        fn(ember.ones(1), {"a": 1})
    with pytest.raises(RuntimeError, match="changed size during iteration"):
        ember.compile(fn, backend="eager")(ember.ones(1), {"a": 1})
    assert any("changed size" in r for r in counters["unsupported"])
