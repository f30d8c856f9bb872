"""[dynamic] item 5: LLVM-compiled symbolic graphs that write into their inputs (a KV
cache written at a symbolic position) compile ONCE for every size. A write into a slice
of an input is a kernel storing into the input's own memory (aot/inplace_writes.py turns
the functional scatter chain into copy_ into a view of the input; compiler/lowering.py
write_into_input lowers it), so no copy of the whole input is made or written back;
the result, the input's contents and its version counter equal eager's at every size.
What cannot be written in place (an index_put by a tensor of positions) keeps the
functional value and its full write-back, still in one symbolic graph."""
import numpy as np
import pytest

import ember
from ember import _C, models
from ember.capture import counters
from ember.compiler import backend as B
from ember.compiler.plan import KernelStep

SIZES = list(range(2, 65)) + [127]
# (other dims are 1 or wider than every size: dynamic=True gives equal sizes one
# symbol, as PyTorch's duck sizing does, so a size meeting another recompiles)
W = 200


@pytest.fixture(autouse=True)
def fresh():
    ember.compiler.reset()
    B.recent.clear()
    yield
    ember.compiler.reset()


def _compiled():
    return _C._jit_stats()["compiled"]


def _one_symbolic_graph(cf, jit_after_first):
    assert len(cf._ember_compile_context.graphs) == 1
    assert _compiled() == jit_after_first, "LLVM compiled again at a later size"
    assert counters["stats"]["size_specializations"] == 0
    assert not counters["llvm_dynamic_fallback"], dict(counters["llvm_dynamic_fallback"])
    assert not counters["llvm_fallback"], dict(counters["llvm_fallback"])
    assert len(B.recent) == 1 and B.recent[0].symbolic
    return B.recent[0]


def _written_in_place(g):
    """The inputs a kernel of the plan writes into."""
    return [i for i, spec in enumerate(g.plan[0]) if len(spec) > 2 and spec[2]]


def _check(fn, make, sizes=SIZES, in_place=True):
    cf = ember.compile(fn, backend="llvm", dynamic=True)
    jit_after_first = None
    for n in sizes:
        ember.manual_seed(n)
        args = make(n)
        mine = [a.clone() if isinstance(a, _C.Tensor) else a for a in args]
        theirs = [a.clone() if isinstance(a, _C.Tensor) else a for a in args]
        versions = [a._version if isinstance(a, _C.Tensor) else None for a in mine]
        out = cf(*mine)
        ref = fn(*theirs)
        # (rounding: a split reduction adds in another order than eager)
        assert ember.allclose(out, ref, rtol=1e-5, atol=1e-5), f"output at size {n}"
        for a, b, v in zip(mine, theirs, versions):
            if isinstance(a, _C.Tensor):
                assert ember.equal(a, b), f"the input written at size {n}"
                # the compiled call moves the counter as eager's writes do
                assert a._version - v == b._version - v, f"version at size {n}"
        if jit_after_first is None:
            jit_after_first = _compiled()
    g = _one_symbolic_graph(cf, jit_after_first)
    if in_place:
        assert _written_in_place(g), "the write did not go into the input's memory"
        assert counters["aot_inplace_writes"]["in place"] >= 1
    return g


def test_slice_assignment_at_a_symbolic_position_writes_in_place():
    def fn(cache, x, pos):
        cache[:, pos:pos + x.shape[1]] = x * 2
        return cache[:, :pos + x.shape[1]].sum(1)
    g = _check(fn, lambda n: (ember.zeros(1, 130, W), ember.randn(1, 1, W), n))
    # no kernel copies the whole cache: every kernel's domain is a slice of it
    for s in g.lowered.steps:
        if isinstance(s, KernelStep):
            assert 130 not in [int(n) for n in s.ir.sizes if not hasattr(n, "expr")]


def test_select_assignment_at_a_symbolic_position():
    def fn(cache, x, pos):
        cache[pos] = x + 1
        return cache.mean(0)
    _check(fn, lambda n: (ember.randn(130, W), ember.randn(W), n))


def test_copy_into_a_slice_of_a_symbolic_length():
    """Symbolic cache size, position and length at once."""
    def fn(buf, x):
        buf[1:x.shape[0] + 1].copy_(x * 3 - 1)
        return buf.sum(0) * 2
    _check(fn, lambda n: (ember.randn(n + 3, W), ember.randn(n, W)))


def test_a_value_written_from_the_old_value_is_computed_before_the_write():
    """The value written is computed from the cache's old value (an elementwise value
    the write's kernel would otherwise load while storing): computed first."""
    def fn(cache, x, pos):
        cache[:, pos] = cache[:, pos - 1:pos + 1].sum(1) * 3 + x
        return cache[:, pos - 1:pos + 2] * 2
    _check(fn, lambda n: (ember.randn(1, 130, W), ember.randn(1, W), n))

    def shifted(buf, x):
        # each row written is read (old) by the next row's computation
        buf[1:x.shape[0] + 1] = buf[0:x.shape[0]] * 2 + x
        return buf * 1
    B.recent.clear()
    counters.clear()
    _check(shifted, lambda n: (ember.randn(n + 3, W), ember.randn(n, W)))


def test_index_put_by_positions_keeps_the_full_write_back():
    def fn(cache, x, idx):
        cache.index_put_((idx,), x)
        return cache.sum(0)
    _check(fn, lambda n: (ember.zeros(n + 2, W), ember.randn(n, W),
                          ember.arange(n) + 1), in_place=False)


def test_an_input_compiled_contiguous_but_arriving_strided_is_written_back():
    """A written input the plan reads as a contiguous copy (it arrives as every second
    column of a bigger tensor) gets the copy back after the call."""
    def fn(cache, x, pos):
        cache[pos] = x
        return cache.sum(1)
    cf = ember.compile(fn, backend="llvm", dynamic=True)
    for n in (3, 5, 9):
        big1, big2 = ember.zeros(16, 8), ember.zeros(16, 8)
        x = ember.randn(4)
        out = cf(big1[:, ::2], x, n)
        ref = fn(big2[:, ::2], x, n)
        assert ember.allclose(out, ref)
        assert ember.equal(big1, big2), f"size {n}"
    assert counters["stats"]["size_specializations"] == 0


def _decode(model, prompt, steps, each=None):
    with ember.no_grad():
        model.setup_cache(prompt.shape[0])
        logits = model(prompt, pos=0)[0]
        idx = prompt
        for i in range(steps):
            nxt = logits[:, -1:].argmax(-1)
            idx = ember.cat([idx, nxt], 1)
            logits = model(nxt, pos=idx.shape[1] - 1)[0]
            if each is not None:
                each(i)
    return idx


@pytest.mark.parametrize("batch", [1, 3])
def test_gpt_cached_decode_compiles_once_for_every_position(batch):
    steps = 44
    ember.manual_seed(0)
    cfg = models.GPTConfig(vocab_size=65, block_size=4 + steps + 1, n_layer=2, n_head=2,
                           n_embd=32, dropout=0.0)
    model = models.GPT(cfg).eval()
    prompt = ember.from_numpy(np.random.default_rng(batch).integers(0, 65, (batch, 4)))
    ref = _decode(model, prompt, steps)
    counters.clear()
    model.compile(backend="llvm")
    jit = {}

    def each(i):
        jit[i] = _compiled()
    out = _decode(model, prompt, steps, each)
    assert ember.equal(out, ref)
    assert counters["stats"]["unique_graphs"] <= 2
    assert counters["stats"]["size_specializations"] == 0
    assert not counters["llvm_dynamic_fallback"], dict(counters["llvm_dynamic_fallback"])
    # no LLVM compilation after the second position (the first two: static, symbolic)
    assert jit[steps - 1] == jit[1], (jit[1], jit[steps - 1])
    # each layer's two caches written in place: no full-cache copy written back
    assert counters["aot_inplace_writes"]["in place"] >= 2 * cfg.n_layer
    # and a second generation runs from the same graphs
    again = _decode(model, prompt, steps)
    assert ember.equal(again, ref) and _compiled() == jit[steps - 1]


@pytest.mark.parametrize("backend", ["llvm", "aot_eager"])
def test_an_output_viewing_the_written_input_at_a_symbolic_position(backend):
    """An output that is a view of the input written into is made from the input on
    each call (aot/mutation.py OutputAlias), its view steps' sizes evaluated from the
    call's sizes: it used to replay the trace's symbolic sizes and raise (the call then
    ran eagerly, with a warning)."""
    import warnings

    def fn(cache, x, pos):
        cache[pos:pos + x.shape[0]] = x
        return cache[pos], cache.narrow(0, 1, pos), (cache * 2).sum(0)
    cf = ember.compile(fn, backend=backend, dynamic=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for n in (2, 3, 5, 9, 40):
            c1, c2 = ember.zeros(64, W), ember.zeros(64, W)
            x = ember.randn(3, W)
            got, want = cf(c1, x, n), fn(c2, x, n)
            for a, b in zip(got, want):
                assert a.shape == b.shape and ember.allclose(a, b)
            assert ember.equal(c1, c2)
            # the views share the cache's memory, as eager's do
            got[0].fill_(7.0)
            got[1].mul_(0.0)
            want[0].fill_(7.0)
            want[1].mul_(0.0)
            assert ember.equal(c1, c2)
    assert len(cf._ember_compile_context.graphs) == 1
    assert counters["stats"]["size_specializations"] == 0


def test_a_symbolic_graph_profile_report_prints_its_steps():
    """profile_report labels steps with their views, whose symbolic strides and offsets
    are printed as expressions (comparing them raised: a size-dependent decision)."""
    def fn(cache, x, pos):
        cache[:, pos] = x
        return (cache[:, :pos + 1] @ cache[0, :pos + 1].t()).sum(-1)
    cf = ember.compile(fn, backend="llvm", dynamic=True)
    for n in (3, 4):
        cf(ember.zeros(1, 130, W), ember.randn(1, W), n)
    g = B.recent[-1]
    assert g.symbolic
    g.start_profile()
    cf(ember.zeros(1, 130, W), ember.randn(1, W), 9)
    report = g.profile_report()
    assert "per call" in report and "matmul" in report
