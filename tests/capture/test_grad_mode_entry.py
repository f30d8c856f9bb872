"""Grad-mode regions in one graph: no_grad() / enable_grad() / set_grad_enabled(b) inside
captured code are nodes of the graph (as TorchDynamo records its _set_grad_enabled), and
AOT autograd traces through them (ember/aot/grad_mode.py): ops inside a no_grad region
make results that require no grad and get no backward; an enable_grad region inside a
graph entered with grad off makes results that require grad, with a grad_fn, whose
gradients are eager's. Found first: under aot_eager and llvm such results came back
without requires_grad (AOT autograd decided a graph's autograd by its entry mode), so
turning grad on inside a graph entered with it off was a graph break; it is not any
more, and the graph and break counts are no more than torch 2.13's explain() (computed
here with torch, under the same entry mode)."""
import linecache

import numpy as np
import pytest

import ember
from ember.capture import counters

BACKENDS = ["eager", "aot_eager", "llvm"]

# every case is source text saying `torch`, run with torch bound to ember or PyTorch
SRC = {
    "enable_block": """
def fn(x):
    with torch.enable_grad():
        y = x * 2
    return y, x * 3
""",
    "set_true": """
def fn(x):
    torch.set_grad_enabled(True)
    y = (x * 2).sin()
    torch.set_grad_enabled(False)
    return y, x + 1
""",
    "nested": """
def fn(x):
    y = x.exp()
    with torch.enable_grad():
        z = y * x
        with torch.no_grad():
            w = z * 2
        v = z.cos()
    return v, w, y
""",
    "no_grad_block": """
def fn(x):
    with torch.no_grad():
        y = x * 2
    return (y * x).sum(), y
""",
    "set_grad_enabled_block": """
def fn(x):
    with torch.set_grad_enabled(False):
        a = x.sin()
    with torch.set_grad_enabled(True):
        b = (x * a).cos()
    return a + b, a
""",
    "enable_then_no_grad_mixed": """
def fn(x, w):
    h = x @ w
    with torch.enable_grad():
        g = (h.tanh() * w.sum()).sum()
    with torch.no_grad():
        s = h.abs().max()
    return g / s, s
""",
    "region_reads_outside_values": """
def fn(x):
    a = x * x
    with torch.enable_grad():
        b = a.sigmoid() * x
    c = b + a
    return c, b
""",
    "input_returned_beside_a_region": """
def fn(x):
    with torch.enable_grad():
        y = x * 2
    return y, x
""",
    "write_into_a_temporary_in_no_grad": """
def fn(x):
    t = x * 1.5
    with torch.no_grad():
        t.add_(1)
        u = t * 2
    return t * x, u
""",
    "write_into_an_input_in_no_grad": """
def fn(x, b):
    with torch.no_grad():
        b.mul_(0.5)
        u = x * b
    return x * b, u, b
""",
}

CUT = """
def fn(x):
    with torch.no_grad():
        y = x * 2
        print("a break inside the block")
        y = y + 1
    return (y * x).sum(), y
"""


def build(lib, name, src):
    filename = f"<grad-mode {name}>"
    linecache.cache[filename] = (len(src), None, src.splitlines(True), filename)
    ns = {"torch": lib}
    exec(compile(src, filename, "exec"), ns)
    return ns["fn"]


def inputs(lib, name):
    rng = np.random.default_rng(0)
    x = rng.standard_normal(4)
    out = [lib.from_numpy(x).requires_grad_(True)]
    if name == "enable_then_no_grad_mixed":
        out = [lib.from_numpy(rng.standard_normal((3, 4))).requires_grad_(True),
               lib.from_numpy(rng.standard_normal((4, 2))).requires_grad_(True)]
    if name == "write_into_an_input_in_no_grad":
        out.append(lib.from_numpy(rng.standard_normal(4)))     # a buffer
    return out


def tensors(result):
    return [t for t in result if isinstance(t, ember.Tensor)]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", list(SRC) + ["cut_block"])
@pytest.mark.parametrize("entry_grad", [False, True])
def test_results_keep_eagers_autograd(name, backend, entry_grad, capsys):
    fn = build(ember, name, SRC.get(name, CUT))
    x1 = inputs(ember, name)
    x2 = [x.detach().clone().requires_grad_(x.requires_grad) for x in x1]
    ember.compiler.reset()
    counters.clear()
    with ember.set_grad_enabled(entry_grad):
        want = fn(*x1)
        mode_after = ember.is_grad_enabled()
        ember.set_grad_enabled(entry_grad)
        got = ember.compile(fn, backend=backend)(*x2)
        assert ember.is_grad_enabled() == mode_after     # the frame leaves it as eager's
    assert counters["stats"]["frames_fallback"] == 0, dict(counters["unsupported"])
    for g, w in zip(tensors(got), tensors(want)):
        assert g.requires_grad == w.requires_grad
        assert (g.grad_fn is None) == (w.grad_fn is None)
        np.testing.assert_allclose(g.detach().numpy(), w.detach().numpy(), rtol=1e-12)
    outs = [(g, w) for g, w in zip(tensors(got), tensors(want)) if w.requires_grad]
    if outs:
        sum(w.sum() for _, w in outs).backward()
        sum(g.sum() for g, _ in outs).backward()
        for a, b in zip(x2, x1):
            assert (a.grad is None) == (b.grad is None)
            if b.grad is not None:
                np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=1e-12)
    assert ember.is_grad_enabled()


@pytest.mark.parametrize("entry_grad", [False, True])
def test_a_region_turning_grad_on_stays_in_the_graph(entry_grad):
    """The counts ember's explain gives, here written down: one graph, no break, in
    either entry mode (before, entry_grad=False broke at the region: 2 graphs for
    set_true, none for enable_block); test_counts_no_more_than_torchs checks torch
    gives the same."""
    for name in SRC:
        fn = build(ember, name, SRC[name])
        with ember.set_grad_enabled(entry_grad):
            out = ember.capture.explain(fn)(*inputs(ember, name))
        assert (out.graph_count, out.graph_break_count) == (1, 0), (name, str(out))


def test_counts_no_more_than_torchs(torch, capsys):
    import torch._dynamo
    worse = {}
    for name in list(SRC) + ["cut_block"]:
        src = SRC.get(name, CUT)
        for entry_grad in (False, True):
            fn = build(ember, name, src)
            with ember.set_grad_enabled(entry_grad):
                out = ember.capture.explain(fn)(*inputs(ember, name))
            ours = (out.graph_count, out.graph_break_count)
            torch._dynamo.reset()
            tfn = build(torch, name, src)
            with torch.set_grad_enabled(entry_grad):
                t = torch._dynamo.explain(tfn)(*inputs(torch, name))
            theirs = (t.graph_count, t.graph_break_count)
            if ours[0] > theirs[0] or ours[1] > theirs[1]:
                worse[(name, entry_grad)] = (ours, theirs)
    torch._dynamo.reset()
    assert worse == {}


def test_the_graph_holds_the_regions():
    """The captured graph itself changes the mode: its _set_grad_enabled nodes."""
    fn = build(ember, "nested", SRC["nested"])
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward
    with ember.no_grad():
        ember.compile(fn, backend=backend)(*inputs(ember, "nested"))
    from ember import _C
    modes = [n.args[0] for n in graphs[0].graph.nodes
             if n.op == "call_function" and n.target is _C._set_grad_enabled]
    assert len(graphs) == 1 and modes == [True, False, True, False]


def test_graphs_with_regions_are_not_in_the_graph_cache(
        tmp_path, monkeypatch):
    """Its compiled function is called with grad on (aot/grad_mode.py), and the graph
    cache rebuilds bare AOTFunctions: a stored one would come back without the region's
    autograd. A graph holding grad-mode nodes is not cached at all (its key refuses a
    call of _set_grad_enabled), so it is compiled in every process, with eager's
    autograd."""
    from ember.capture.config import config
    from ember.compiler import graph_cache
    path = tmp_path / "cache"
    path.mkdir(mode=0o700)
    monkeypatch.setattr(config, "cache_dir", str(path))
    monkeypatch.setattr(config, "kernel_cache", True)
    monkeypatch.setattr(config, "graph_cache", True)
    monkeypatch.setattr(graph_cache, "_written", set())
    fn = build(ember, "enable_block", SRC["enable_block"])
    for entry_grad, stored in ((False, 0), (True, 0)):
        for _ in range(2):           # the second time stands for another process
            ember.compiler.reset()
            graph_cache._written.clear()
            x = inputs(ember, "enable_block")[0]
            with ember.set_grad_enabled(entry_grad):
                y, _ = ember.compile(fn, backend="llvm")(x)
            assert y.requires_grad and y.grad_fn is not None
            y.sum().backward()
            np.testing.assert_allclose(x.grad.numpy(), np.full(4, 2.0))
        assert len(list((path / "graphs").glob("*.json"))) == stored
    ember.compiler.reset()
