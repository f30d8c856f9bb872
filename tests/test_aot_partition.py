"""The min-cut rematerialization partitioner (aot/partition.py, aot/maxflow.py), issue
aot-2 item 3: graphs whose optimal cut is known, the op table's recompute rules, and
results equal to eager whatever is recomputed."""
import dataclasses
import itertools

import numpy as np
import pytest

import ember
from ember.aot import decompose, trace_joint
from ember.aot.maxflow import INFINITE, FlowNetwork
from ember.aot.partition import partition, saved_bytes
from ember.ops import registry

N = 1000          # elements of the vectors below
F4 = 4 * N        # bytes of one float32 vector


@pytest.fixture(autouse=True)
def _fresh():
    ember.compiler.reset()
    yield
    ember.compiler.reset()


def _leaf(shape, dtype=ember.float32, seed=0):
    g = np.random.default_rng(seed)
    return ember.tensor(0.3 * g.standard_normal(shape), dtype=dtype, requires_grad=True)


def _split(fn, inputs, min_cut=True):
    joint = trace_joint(fn, inputs)
    prim = dataclasses.replace(joint, graph=decompose(joint.graph))
    fw, bw, saved = partition(prim, min_cut=min_cut)
    return prim, fw, bw, saved


def _bytes(saved):
    return sum(r[3] for r in saved_bytes(saved))


def _targets(graph):
    return [n.target for n in graph.nodes if n.op == "call_function"]


def _check_grads(fn, inputs, rtol=1e-4):
    """Compiled (aot_eager and llvm) gradients equal eager's (float32: the compiled
    kernels' exp and sin are not libm's)."""
    want_out = fn(*inputs)
    want = ember.autograd.grad(want_out, inputs)
    for backend in ("aot_eager", "llvm"):
        ember.compiler.reset()
        xs = [x.detach().requires_grad_() for x in inputs]
        got_out = ember.compile(fn, backend=backend)(*xs)
        got = ember.autograd.grad(got_out, xs)
        np.testing.assert_allclose(got_out.detach().numpy(), want_out.detach().numpy(),
                                   rtol=rtol)
        for a, b in zip(got, want):
            np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=rtol, atol=1e-6)


# ------------------------------------------------------------------ max flow


def test_max_flow_of_a_textbook_network():
    """CLRS figure 26.1's network: maximum flow 23; its minimum cut leaves s, v1, v2, v4
    on the source side."""
    net = FlowNetwork()
    for u, v, c in [("s", "v1", 16), ("s", "v2", 13), ("v1", "v3", 12), ("v2", "v1", 4),
                    ("v2", "v4", 14), ("v3", "v2", 9), ("v3", "t", 20), ("v4", "v3", 7),
                    ("v4", "t", 4)]:
        net.add_edge(u, v, c)
    assert net.max_flow("s", "t") == 23
    assert net.source_side("s") == {"s", "v1", "v2", "v4"}


def test_max_flow_infinite_and_disconnected():
    net = FlowNetwork()
    net.add_edge("s", "a", INFINITE)
    net.add_edge("a", "t", INFINITE)
    assert net.max_flow("s", "t") == INFINITE
    net = FlowNetwork()
    net.add_edge("s", "a", 3)
    net.vertex("t")
    assert net.max_flow("s", "t") == 0


def test_max_flow_equals_brute_force_minimum_cut():
    """On small random networks, the flow equals the cheapest s-t cut found by trying
    every vertex subset (max-flow min-cut theorem), and source_side is such a cut."""
    rng = np.random.default_rng(0)
    for trial in range(30):
        k = 6
        edges = [(u, v, int(rng.integers(1, 10))) for u in range(k) for v in range(k)
                 if u != v and rng.random() < 0.4]
        net = FlowNetwork()
        for u, v, c in edges:
            net.add_edge(u, v, c)
        net.vertex(0)
        net.vertex(k - 1)
        flow = net.max_flow(0, k - 1)
        best = min(sum(c for u, v, c in edges if u in side and v not in side)
                   for r in range(k - 1) for mid in itertools.combinations(range(1, k - 1), r)
                   for side in [{0, *mid}])
        assert flow == best, trial
        side = net.source_side(0)
        assert 0 in side and k - 1 not in side
        assert sum(c for u, v, c in edges if u in side and v not in side) == best


# ------------------------------------------------------------------ known cuts


def _fan_out(x):
    a = x.exp()
    return (a.sin() + a.cos() + a.tanh()).sum()


def _diamond(x):
    a = x.exp()
    return (a.sin() * a.cos()).sum()


def _chain(x):
    return x.exp().sin().exp().cos().exp().sum()


def _narrowing_chain(x):
    # x is float64: its float32 copy is half its bytes
    return x.float().exp().exp().sum()


def _expanded(a):
    # a [N] broadcast to [50, N]: saving a costs 1/50 of the expanded values
    return (a.expand(50, N) * 2.0).exp().sin().sum()


def _matmul_chain(x, w):
    # the matmul is never recomputed: its inputs x, w are saved for its own gradients,
    # and its output (or the relu's) for the chain after it
    return (x @ w).relu().exp().sum()


@pytest.mark.parametrize("fn, shapes, dtype, optimum", [
    # fan-out: one value, three readers each needing a different derived value -> save x
    (_fan_out, [(N,)], ember.float32, F4),
    # diamond: both branches' gradients read values made from a -> save x (or a)
    (_diamond, [(N,)], ember.float32, F4),
    # a chain of five elementwise ops whose gradients read their inputs or outputs
    (_chain, [(N,)], ember.float32, F4),
    # a narrowing chain: the float32 copy, not the float64 input
    (_narrowing_chain, [(N,)], ember.float64, F4),
    # broadcast: the small input, not the [50, N] values
    (_expanded, [(N,)], ember.float32, F4),
    # matmul [8, 64] @ [64, 32]: x, w, and one [8, 32] float32 value after the matmul
    (_matmul_chain, [(8, 64), (64, 32)], ember.float32, 4 * (8 * 64 + 64 * 32 + 8 * 32)),
], ids=["fan_out", "diamond", "chain", "narrowing_chain", "expanded", "matmul_chain"])
def test_known_optimal_cut(fn, shapes, dtype, optimum):
    inputs = [_leaf(s, dtype, seed=i) for i, s in enumerate(shapes)]
    prim, fw, bw, saved = _split(fn, inputs)
    assert _bytes(saved) == optimum, saved_bytes(saved)
    # never more than saving every forward value the backward reads
    _, _, _, all_saved = _split(fn, inputs, min_cut=False)
    assert _bytes(saved) <= _bytes(all_saved)
    _check_grads(fn, inputs)


def test_recomputation_beats_saving_what_the_backward_reads():
    """The fan-out's backward reads a, exp's output, and tanh's output: three vectors
    saved without min-cut, one with."""
    x = [_leaf((N,))]
    _, _, bw, saved = _split(_fan_out, x)
    _, _, _, all_saved = _split(_fan_out, x, min_cut=False)
    assert _bytes(all_saved) == 3 * F4 or _bytes(all_saved) > F4
    assert _bytes(saved) == F4
    assert ember.exp in _targets(bw)        # computed again in the backward


def _never(node):
    return (node.op == "call_function" and hasattr(node.target, "entry") and
            node.target.entry.recompute_policy == registry.RECOMPUTE_NEVER)


@pytest.mark.parametrize("fn, shapes", [
    (_matmul_chain, [(8, 64), (64, 32)]),
    (lambda x, w: ember.nn.functional.conv2d(x, w).exp().sum(), [(2, 3, 8, 8), (4, 3, 3, 3)]),
    (lambda x: (x * (ember.rand(N) < 0.5)).exp().sum(), [(N,)]),
])
def test_never_recomputed_ops_run_once(fn, shapes):
    """Matmuls, convolutions and random draws: as many in the forward and backward graphs
    together as in the joint graph (none is computed again)."""
    inputs = [_leaf(s, seed=i) for i, s in enumerate(shapes)]
    prim, fw, bw, saved = _split(fn, inputs)
    joint = sum(map(_never, prim.graph.nodes))
    assert joint > 0
    assert sum(map(_never, fw.nodes)) + sum(map(_never, bw.nodes)) == joint


def test_reduction_of_a_large_input_is_saved_not_recomputed():
    """s = x.sum(1) reads 100x the bytes it returns: the backward reads s's exp, and x
    is saved anyway (for x * ...), yet s is never recomputed from x."""
    def f(x):
        return (x * x.sum(1, keepdim=True).exp()).sum()
    x = _leaf((20, 100))
    prim, fw, bw, saved = _split(f, [x])
    assert ember.sum not in [n.target for n in bw.nodes
                             if n.op == "call_function" and
                             any(a.name == "primals_1" for a in n.all_input_nodes)]
    _check_grads(f, [x])


def test_small_reductions_may_be_recomputed():
    """A sum over 2 elements per output is cheap: entry.recompute_policy 'reduction'."""
    assert ember.sum.entry.recompute_policy == registry.RECOMPUTE_REDUCTION
    assert ember.matmul.entry.recompute_policy == registry.RECOMPUTE_NEVER
    for name in ("rand", "randn", "randint", "convolution"):
        assert registry.BY_NAME[name][0].recompute_policy == registry.RECOMPUTE_NEVER
    assert ember.exp.entry.recompute_policy == registry.RECOMPUTE_CHEAP


def test_aot_graphs_log_prints_saved_bytes(monkeypatch, capsys):
    monkeypatch.setenv("EMBER_LOGS", "aot_graphs")
    x = _leaf((N,))
    ember.compile(_fan_out, backend="aot_eager")(x).backward()
    text = capsys.readouterr().err
    assert f"saved for backward: 1 tensors, {F4} bytes" in text
    assert "primals_1: ember.float32 [1000]  4000 bytes" in text


# ------------------------------------------------------------------ against torch


def _torch_min_cut_saved_bytes(torch, fn, inputs):
    """Bytes torch's min_cut_rematerialization_partition saves for torch.compile(fn)."""
    from torch._dynamo.backends.common import aot_autograd
    from torch._functorch.partitioners import min_cut_rematerialization_partition
    total = [0]

    def partition_fn(joint, joint_inputs, **kw):
        fw, bw = min_cut_rematerialization_partition(joint, joint_inputs, **kw)
        out = next(n for n in fw.graph.nodes if n.op == "output")
        for n in out.args[0][kw["num_fwd_outputs"]:]:
            v = n.meta.get("val")
            if isinstance(v, torch.Tensor):
                total[0] += v.numel() * v.element_size()
        return fw, bw

    from functorch.compile import make_boxed_func
    backend = aot_autograd(fw_compiler=lambda gm, ex: make_boxed_func(gm),
                           partition_fn=partition_fn)
    torch._dynamo.reset()
    torch.compile(fn, backend=backend)(*inputs).backward()
    torch._dynamo.reset()
    return total[0]


def _ember_saved_bytes(fn, inputs):
    from ember.capture import counters
    ember.compiler.reset()
    ember.compile(fn, backend="aot_eager")(*inputs).backward()
    return sum(counters["aot_saved_bytes"].values())


def _zoo_pair(torch, name):
    """(torch step, ember step, torch inputs, ember inputs): one training step's loss of
    the zoo model and its torch twin (tests/torch_models.py), same layout and shapes."""
    import torch_models as T
    from ember import models
    g = np.random.default_rng(0)
    if name == "gpt":
        cfg = dict(vocab_size=65, block_size=64, n_layer=2, n_head=2, n_embd=32,
                   dropout=0.0)
        tm, em = T.GPT(T.GPTConfig(**cfg)), models.GPT(models.GPTConfig(**cfg))
        x, y = g.integers(0, 65, (4, 32)), g.integers(0, 65, (4, 32))
        return (lambda a, b: tm(a, b)[1], lambda a, b: em(a, b)[1],
                [torch.from_numpy(x), torch.from_numpy(y)],
                [ember.from_numpy(x), ember.from_numpy(y)])
    tm, em = T.ResNet((1, 1), 8, 10, 3, 32), models.ResNet((1, 1), 8, 10, 3, 32)
    x = g.standard_normal((4, 3, 32, 32)).astype(np.float32)
    y = g.integers(0, 10, 4)
    return (lambda a, b: torch.nn.functional.cross_entropy(tm(a), b),
            lambda a, b: ember.nn.functional.cross_entropy(em(a), b),
            [torch.from_numpy(x), torch.from_numpy(y)],
            [ember.from_numpy(x), ember.from_numpy(y)])


@pytest.mark.parametrize("name", ["gpt", "resnet"])
def test_saved_bytes_at_most_torch_min_cut(torch, name):
    """A training step of the zoo GPT and ResNet (training mode, loss returned): what
    the compiled forward saves is at most 1.1x what torch's min-cut partitioner saves for
    the same model (both count every saved tensor, parameters included). Measured: GPT
    556932 vs 740484 bytes, ResNet 660708 vs 1185604 (torch 2.13 CPU)."""
    tfn, efn, tin, ein = _zoo_pair(torch, name)
    theirs = _torch_min_cut_saved_bytes(torch, tfn, tin)
    ours = _ember_saved_bytes(efn, ein)
    assert 0 < ours <= 1.1 * theirs, (ours, theirs)
    ember.compiler.config.partitioner = "save_all"
    try:
        assert ours < _ember_saved_bytes(efn, ein)
    finally:
        ember.compiler.config.partitioner = "min_cut"
