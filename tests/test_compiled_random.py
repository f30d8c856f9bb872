"""Random draws in compiled graphs (issue aot-2 item 2; python/ember/compiler/
random_draws.py, csrc/jit/codegen_random.c): Philox4x32-10 computed in the kernels,
seeded per call from ember's generator.

The kernels' bits equal the reference (python/ember/philox.py) on known counters; a
seeded compiled run is reproducible (in this process and another), consecutive calls
differ and manual_seed resets them; dropout's backward sees the forward's mask; the
draws have the right statistics; dropout compiles into kernels with no extern step;
with config.fallback_random the compiled results are eager's exactly. The reference
and bit tests run again with EMBER_LLVM_FEATURES forcing SSE4.2 vectors.
"""
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import ember
from ember import _C, nn, philox
from ember.capture.config import config
from ember.compiler import backend
from ember.compiler.loop_ir import Affine, Kernel, Op, Param, Stmt, verify
from ember.compiler.jit import JitModule
import ember.nn.functional as F

_NARROW = "+sse2,+sse3,+ssse3,+sse4.1,+sse4.2,+popcnt"
I64, F32, F64 = _C.int64, _C.float32, _C.float64


@pytest.fixture(autouse=True)
def fresh(monkeypatch):
    """Each test compiles its own graphs, with fallback_random as it sets it."""
    monkeypatch.setattr(config, "fallback_random", False)
    ember.compiler.reset()
    yield
    ember.compiler.reset()


def first_seed(seed):
    """The seed the first compiled call after manual_seed(seed) draws with."""
    return ember.Generator().manual_seed(seed)._philox_seed()


def mark():
    """Empties the (bounded) deque of recent graphs, so plans_since(mark()) lists the
    graphs compiled after it, however many came before."""
    backend.recent.clear()
    return 0


def plans_since(n):
    return [g.lowered for g in list(backend.recent)[n:]]


# ------------------------------------------------------------------ the kernels' bits


def _draw_kernel(n):
    """A loop-IR kernel made by hand: for element i, from int64 seed[i], offset[i] and
    index[i], rand and randn in float32 and float64 (params 3..6)."""
    k = Kernel("philox_kat", (n,), 0)
    for j, dt in enumerate((I64, I64, I64, F32, F64, F32, F64)):
        k.params.append(Param(("in", j), dt, n))
    at = Affine((1,), 0)
    k.stmts = [Stmt(Op.LOAD, 0, I64, param=0, index=at),
               Stmt(Op.LOAD, 1, I64, param=1, index=at),
               Stmt(Op.LOAD, 2, I64, param=2, index=at)]
    for j, (op, dt) in enumerate(((Op.RAND, F32), (Op.RAND, F64), (Op.RANDN, F32),
                                  (Op.RANDN, F64))):
        k.stmts.append(Stmt(op, 3 + j, dt, (0, 1, 2)))
        k.stmts.append(Stmt(Op.STORE, args=(3 + j,), param=3 + j, index=at))
    return verify(k)


def _signed(words_lo, words_hi):
    v = (np.asarray(words_hi, np.uint64) << np.uint64(32)) | np.asarray(words_lo, np.uint64)
    return v.view(np.int64)


def run_draw_kernel(seed, offset, index):
    n = len(seed)
    module = JitModule((_draw_kernel(n).spec(),), "philox_kat")
    geometry = ((n,), (1,))
    plan = ((geometry,) * 7, (), (("kernel", 0, tuple(("in", j) for j in range(7)), n,
                                   False),), ())
    ins = [ember.from_numpy(np.ascontiguousarray(a, np.int64))
           for a in (seed, offset, index)]
    outs = [ember.zeros(n, dtype=dt) for dt in (F32, F64, F32, F64)]
    _C.CompiledGraph(module, module.addresses, plan)(*ins, *outs)
    return [o.numpy() for o in outs]


# Random123's known answers (as in tests/test_philox.py), with counter = (index lo,
# index hi, offset lo, offset hi) and key = (seed lo, seed hi)
KAT = [((0, 0, 0, 0), (0, 0), (0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8)),
       ((0xffffffff,) * 4, (0xffffffff,) * 2,
        (0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd)),
       ((0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344), (0xa4093822, 0x299f31d0),
        (0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1))]


def _from_words(w0, w1, w2):
    w0, w1, w2 = (np.asarray(w, np.uint32) for w in (w0, w1, w2))
    u32 = (w0 >> np.uint32(8)).astype(np.float32) * np.float32(2.0 ** -24)
    u64 = ((w0 >> np.uint32(5)).astype(np.float64) * 2.0 ** 26 +
           (w1 >> np.uint32(6)).astype(np.float64)) * 2.0 ** -53
    u1 = 1.0 - (w0 >> np.uint32(8)).astype(np.float64) * 2.0 ** -24
    u2 = (w2 >> np.uint32(8)).astype(np.float64) * 2.0 ** -24
    z = np.sqrt(-2.0 * np.log(u1)) * np.cos(2.0 * np.pi * u2)
    return u32, u64, z


def test_kernel_draws_equal_known_answers():
    """The rand/randn instructions are Philox4x32-10 of (seed; index, offset): their
    values are those of Random123's known-answer words."""
    counters = np.array([c for c, _, _ in KAT], np.uint32)
    keys = np.array([k for _, k, _ in KAT], np.uint32)
    words = np.array([w for _, _, w in KAT], np.uint32)
    got = run_draw_kernel(_signed(keys[:, 0], keys[:, 1]),
                          _signed(counters[:, 2], counters[:, 3]),
                          _signed(counters[:, 0], counters[:, 1]))
    u32, u64, z = _from_words(words[:, 0], words[:, 1], words[:, 2])
    np.testing.assert_array_equal(got[0], u32)
    np.testing.assert_array_equal(got[1], u64)
    np.testing.assert_allclose(got[2], z, rtol=0, atol=2e-5)
    np.testing.assert_allclose(got[3], z, rtol=1e-14, atol=1e-14)


def test_kernel_draws_equal_the_reference_on_many_counters():
    """Seeds, offsets and indices over the whole 64-bit range, against philox.py."""
    rng = np.random.default_rng(0)
    n = 4099                                  # not a multiple of any vector width
    seed, offset, index = (rng.integers(-2 ** 63, 2 ** 63, n, dtype=np.int64)
                           for _ in range(3))
    index[:16] = np.arange(16)
    offset[:16] = 0
    got = run_draw_kernel(seed, offset, index)
    s, o, i = (a.view(np.uint64) for a in (seed, offset, index))
    lo = lambda a: (a & np.uint64(0xFFFFFFFF)).astype(np.uint32)   # noqa: E731
    hi = lambda a: (a >> np.uint64(32)).astype(np.uint32)          # noqa: E731
    w = philox.philox4x32((lo(i), hi(i), lo(o), hi(o)), (lo(s), hi(s)))
    u32, u64, z = _from_words(w[0], w[1], w[2])
    np.testing.assert_array_equal(got[0], u32)
    np.testing.assert_array_equal(got[1], u64)
    np.testing.assert_allclose(got[2], z, rtol=0, atol=2e-5)
    np.testing.assert_allclose(got[3], z, rtol=1e-13, atol=1e-13)


def test_draw_kernels_are_vector_code():
    """A draw is branch-free IR: the loop vectoriser widens the Philox rounds."""
    from ember.aot import decompose, trace_joint
    from ember.compiler.backend import CompiledLLVMGraph
    x = ember.ones(1 << 14)
    g = CompiledLLVMGraph(decompose(trace_joint(
        lambda t: F.dropout(t, 0.25, training=True), [x]).graph), "vec_rand")
    ir = g.module.optimized_ir
    assert "x i32>" in ir or "x i64>" in ir
    assert not [ln for ln in ir.splitlines() if "call " in ln and "@llvm." not in ln]


# ------------------------------------------------------------------ compiled graphs


def draws(x):
    return (ember.rand(3, 5) + x, ember.randn(4, 7, dtype=ember.float64),
            ember.randn(33), ember.rand(9, dtype=ember.float64))


def test_compiled_draws_equal_the_reference():
    """Draw k of a graph is philox.py's uniform / normal of (the call's seed, k)."""
    cf = ember.compile(draws, backend="llvm")
    ember.manual_seed(1234)
    a, b, c, d = (t.numpy() for t in cf(ember.zeros(())))
    s = first_seed(1234)
    np.testing.assert_array_equal(a, philox.uniform(s, 0, (3, 5)))
    np.testing.assert_allclose(b, philox.normal(s, 1, (4, 7), np.float64), rtol=1e-13,
                               atol=1e-13)
    np.testing.assert_allclose(c, philox.normal(s, 2, (33,)), rtol=0, atol=2e-5)
    np.testing.assert_array_equal(d, philox.uniform(s, 3, (9,), np.float64))


def test_draws_of_any_shape_and_through_views():
    """0-d and empty draws, and a draw read transposed: element i is still the i-th of
    the draw's own row-major order."""
    f = ember.compile(lambda x: (ember.rand(()) + x, ember.randn(0, 3) + x,
                                 ember.rand(2, 3).t() + x), backend="llvm")
    ember.manual_seed(6)
    a, b, c = (t.numpy() for t in f(ember.zeros(())))
    s = first_seed(6)
    assert b.shape == (0, 3)
    np.testing.assert_array_equal(a, philox.uniform(s, 0, ()))
    np.testing.assert_array_equal(c, philox.uniform(s, 2, (2, 3)).T)


def test_plan_draws_in_kernels_after_one_seed_step():
    n = mark()
    cf = ember.compile(draws, backend="llvm")
    cf(ember.zeros(()))
    (low,) = plans_since(n)
    kinds = [s.kind for s in low.steps]
    assert kinds.count("seed") == 1 and "extern" not in kinds
    text = str(low)
    assert "rand float32" in text and "randn float64" in text


def test_seeded_run_is_reproducible_and_calls_differ():
    cf = ember.compile(draws, backend="llvm")
    x = ember.zeros(())
    ember.manual_seed(7)
    first = [[t.numpy() for t in cf(x)] for _ in range(3)]
    ember.manual_seed(7)
    again = [[t.numpy() for t in cf(x)] for _ in range(3)]
    for a, b in zip(first, again):
        for u, v in zip(a, b):
            np.testing.assert_array_equal(u, v)
    for u, v in zip(first[0], first[1]):          # consecutive calls draw differently
        assert not np.array_equal(u, v)
    ember.manual_seed(8)
    assert not np.array_equal(cf(x)[0].numpy(), first[0][0])


def test_seeded_run_is_reproducible_in_another_process():
    script = textwrap.dedent("""
        import ember
        import ember.nn.functional as F
        f = ember.compile(lambda x: F.dropout(x, 0.5, training=True) + ember.randn(8),
                          backend="llvm")
        ember.manual_seed(99)
        f(ember.ones(8))
        print(f(ember.ones(8)).numpy().tobytes().hex())
    """)
    f = ember.compile(lambda x: F.dropout(x, 0.5, training=True) + ember.randn(8),
                      backend="llvm")
    ember.manual_seed(99)
    f(ember.ones(8))
    want = f(ember.ones(8)).numpy().tobytes().hex()
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                       timeout=300, env=dict(os.environ, EMBER_KERNEL_CACHE="0"))
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.split()[-1] == want


def test_set_state_restores_the_draws():
    cf = ember.compile(draws, backend="llvm")
    x = ember.zeros(())
    state = ember.get_rng_state()
    a = cf(x)[0].numpy()
    ember.set_rng_state(state)
    np.testing.assert_array_equal(cf(x)[0].numpy(), a)


def test_explicit_generator_is_the_one_drawn_from():
    """A graph whose draw names a generator (capture runs such a draw eagerly, so the
    graph is traced here) takes its seed from that generator."""
    from ember.aot import decompose, trace_joint
    from ember.compiler.backend import CompiledLLVMGraph
    g = ember.Generator().manual_seed(5)
    graph = decompose(trace_joint(lambda x: ember.rand(6, generator=g) + x,
                                  [ember.zeros(())]).graph)
    cg = CompiledLLVMGraph(graph, "explicit_gen")
    assert "philox_seed(generator)" in str(cg.lowered)
    g.manual_seed(5)
    a = cg(ember.zeros(()))[0].numpy()
    np.testing.assert_array_equal(a, philox.uniform(first_seed(5), 0, (6,)))
    ember.manual_seed(0)                       # the default generator is not involved
    g.manual_seed(5)
    np.testing.assert_array_equal(cg(ember.zeros(()))[0].numpy(), a)


@pytest.mark.parametrize("p", [0.1, 0.5, 0.8])
def test_dropout_backward_mask_is_the_forward_mask(p):
    """grad of dropout(x).sum() is mask / (1 - p), mask the forward's kept elements."""
    rng = np.random.default_rng(0)
    x = ember.from_numpy(rng.uniform(1, 2, (64, 33)).astype(np.float32)).requires_grad_()
    f = ember.compile(lambda t: F.dropout(t, p, training=True), backend="llvm")
    ember.manual_seed(3)
    y = f(x)
    y.sum().backward()
    mask = (y.detach().numpy() != 0)
    assert 0 < mask.sum() < mask.size
    np.testing.assert_allclose(x.grad.numpy(), mask / np.float32(1 - p), rtol=1e-6)
    np.testing.assert_allclose(y.detach().numpy(), x.detach().numpy() * mask / (1 - p),
                               rtol=1e-6)


def test_dropout_mask_shared_by_outputs_and_backward_through_a_chain():
    """The mask reaches two outputs and a backward that recomputes exp: one mask."""
    x = ember.linspace(1, 2, 4000).reshape(40, 100).requires_grad_()

    def f(t):
        d = F.dropout(t, 0.5, training=True)
        return d.exp(), d * 2
    cf = ember.compile(f, backend="llvm")
    ember.manual_seed(11)
    e, d2 = cf(x)
    (e.sum() + d2.sum()).backward()
    mask = d2.detach().numpy() != 0
    np.testing.assert_array_equal(e.detach().numpy() != 1, mask)
    d = x.detach().numpy() * 2 * mask
    np.testing.assert_allclose(x.grad.numpy(), 2 * mask * (np.exp(d) + 2), rtol=1e-5)


def _binomial_ok(count, n, p, z=6.0):
    return abs(count - n * p) <= z * np.sqrt(n * p * (1 - p))


def test_draws_do_not_depend_on_the_thread_count():
    """A kernel split across threads draws each element from its index alone."""
    f = ember.compile(lambda t: F.dropout(t, 0.5, training=True) + ember.randn(1 << 18),
                      backend="llvm")
    x = ember.ones(1 << 18)
    before = ember.get_num_threads()
    got = []
    try:
        for threads in (1, 2):
            ember.set_num_threads(threads)
            ember.manual_seed(21)
            got.append(f(x).numpy())
    finally:
        ember.set_num_threads(before)
    np.testing.assert_array_equal(got[0], got[1])


def test_dropout_keep_fraction():
    n, p = 1 << 18, 0.3
    f = ember.compile(lambda t: F.dropout(t, p, training=True), backend="llvm")
    ember.manual_seed(0)
    x = ember.ones(n)
    fractions = [int((f(x).numpy() != 0).sum()) for _ in range(3)]
    assert all(_binomial_ok(k, n, 1 - p) for k in fractions), fractions
    assert len(set(fractions)) == 3


@pytest.mark.parametrize("dtype", [ember.float32, ember.float64])
def test_uniform_and_normal_statistics(dtype):
    n = 1 << 18
    f = ember.compile(lambda x: (ember.rand(n, dtype=dtype) + x,
                                 ember.randn(n, dtype=dtype) + x), backend="llvm")
    ember.manual_seed(1)
    u, z = (t.numpy().astype(np.float64) for t in f(ember.zeros((), dtype=dtype)))
    assert u.min() >= 0 and u.max() < 1
    assert abs(u.mean() - 0.5) < 6 * np.sqrt(1 / 12 / n)
    assert abs(u.var() - 1 / 12) < 6 * np.sqrt(1 / 180 / n)
    counts = np.histogram(u, bins=16, range=(0, 1))[0]
    assert all(_binomial_ok(c, n, 1 / 16) for c in counts)
    assert abs(z.mean()) < 6 / np.sqrt(n) and abs(z.std() - 1) < 6 / np.sqrt(2 * n)
    assert abs((np.abs(z) < 1).mean() - 0.682689492) < 0.005


def test_randint_and_bernoulli_statistics():
    n = 1 << 16

    def f(x):
        return (ember.randint(-3, 4, (n,)) + x, ember.randint(10, (n,), dtype=ember.int32),
                ember.bernoulli(ember.full((n,), 0.25)))
    cf = ember.compile(f, backend="llvm")
    ember.manual_seed(2)
    a, b, c = (t.numpy() for t in cf(ember.zeros((), dtype=ember.int64)))
    assert b.dtype == np.int32
    assert a.min() == -3 and a.max() == 3 and b.min() == 0 and b.max() == 9
    assert all(_binomial_ok((a == v).sum(), n, 1 / 7) for v in range(-3, 4))
    assert set(np.unique(c)) <= {0.0, 1.0} and _binomial_ok(c.sum(), n, 0.25)


def test_samplers_and_multinomial_in_compiled_graphs():
    """uniform_, normal_, bernoulli_ and multinomial decompose into the draws: right
    statistics, reproducible under manual_seed, no extern draw."""
    def f(p, w):
        return (ember.multinomial(p, 4000, replacement=True), w.clone().uniform_(-1, 3),
                w.clone().normal_(2, 3), w.clone().bernoulli_(0.3))
    n0 = mark()
    cf = ember.compile(f, backend="llvm")
    p = ember.tensor([[0.1, 0.2, 0.7, 0.0], [0.25, 0.25, 0.25, 0.25]])
    w = ember.zeros(1 << 16)
    ember.manual_seed(4)
    m, u, z, b = (t.numpy() for t in cf(p, w))
    for row, probs in zip(m, p.numpy()):
        counts = np.bincount(row, minlength=4)
        assert all(_binomial_ok(c, len(row), q) for c, q in zip(counts, probs))
    n = len(u)
    assert u.min() >= -1 and u.max() < 3 and abs(u.mean() - 1) < 6 * 4 / np.sqrt(12 * n)
    assert abs(z.mean() - 2) < 6 * 3 / np.sqrt(n) and abs(z.std() - 3) < 0.05
    assert _binomial_ok(b.sum(), n, 0.3)
    ember.manual_seed(4)
    np.testing.assert_array_equal(cf(p, w)[2].numpy(), z)
    steps = [s for low in plans_since(n0) for s in low.steps]
    assert any(s.kind == "seed" for s in steps)
    assert not any(s.kind == "extern" and "rand" in s.name for s in steps)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(16, 32)
        self.drop = nn.Dropout(0.4)
        self.b = nn.Linear(32, 4)

    def forward(self, x):
        return self.b(self.drop(self.a(x).relu()))


def _training_run(compiled, steps=3):
    ember.manual_seed(0)
    model = Net()
    opt = ember.optim.SGD(model.parameters(), lr=0.1)
    data = ember.randn(8, 16)

    def loss_of(x):
        h = model(x)
        noise = ember.rand(8, 4) * 0.1 + ember.randn(8, 4) * 0.01
        keep = ember.bernoulli(ember.full((8, 4), 0.7))
        return ((h + noise) * keep).pow(2).mean()
    step = ember.compile(loss_of, backend="llvm") if compiled else loss_of
    ember.manual_seed(42)
    losses, grads = [], []
    for _ in range(steps):
        opt.zero_grad()
        loss = step(data)
        loss.backward()
        losses.append(loss.item())
        grads.append(model.a.weight.grad.numpy().copy())
        opt.step()
    return losses, grads, [p.detach().numpy().copy() for p in model.parameters()]


def test_fallback_random_gives_eager_results():
    """fallback_random: the compiled training step draws eager's numbers."""
    config.fallback_random = True
    want = _training_run(False)
    got = _training_run(True)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5)
    for g, w in zip(got[1], want[1]):
        np.testing.assert_array_equal(g == 0, w == 0)      # the same dropout masks
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-6)
    for g, w in zip(got[2], want[2]):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def test_fallback_random_draws_are_eager_bit_for_bit():
    config.fallback_random = True
    x = ember.linspace(-1, 1, 60).reshape(6, 10)

    def f(t):
        return (F.dropout(t, 0.3, training=True), ember.rand(4, 3) * 2,
                ember.randn(5), ember.bernoulli(t.sigmoid()), ember.randint(0, 9, (7,)))
    ember.manual_seed(5)
    want = [t.numpy() for t in f(x)]
    n = mark()
    cf = ember.compile(f, backend="llvm")
    ember.manual_seed(5)
    got = [t.numpy() for t in cf(x)]
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
    assert any("extern" in [s.kind for s in low.steps] for low in plans_since(n))


def test_compiled_dropout_training_has_no_extern_step():
    """A model with dropout in training mode: forward and backward plans are kernels
    and BLAS calls, and the forward draws its mask in a kernel."""
    ember.manual_seed(0)
    model = Net()
    model.train()
    n = mark()
    cm = ember.compile(model, backend="llvm")
    x = ember.randn(8, 16)
    cm(x).pow(2).mean().backward()
    plans = plans_since(n)
    assert len(plans) == 2                       # forward and backward
    for low in plans:
        assert "extern" not in [s.kind for s in low.steps], str(low)
    assert any("rand float32" in str(s) for s in plans[0].steps if s.kind == "kernel")
    assert not any("rand" in str(s) for s in plans[1].steps)    # the backward never draws
    model.eval()                                 # and eval mode draws nothing
    n = mark()
    cm(x)
    assert all(s.kind != "seed" for low in plans_since(n) for s in low.steps)


# ------------------------------------------------------------------ narrow vectors


@pytest.mark.skipif(os.environ.get("EMBER_LLVM_FEATURES") == _NARROW,
                    reason="already running with the narrow features")
def test_same_draws_with_sse_vectors():
    """The bit and reference tests again, JIT-compiled for SSE4.2 (4 lanes, no FMA,
    no AVX-512 64-bit multiplies or conversions)."""
    env = dict(os.environ, EMBER_LLVM_FEATURES=_NARROW)
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                        f"{__file__}::test_kernel_draws_equal_known_answers",
                        f"{__file__}::test_kernel_draws_equal_the_reference_on_many_counters",
                        f"{__file__}::test_compiled_draws_equal_the_reference",
                        f"{__file__}::test_draw_kernels_are_vector_code",
                        f"{__file__}::test_dropout_backward_mask_is_the_forward_mask"],
                       env=env, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
