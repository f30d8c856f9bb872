"""[dynamic] text generation compiled: the zoo GPT's decode loops, with and without its
KV cache (ember/models/gpt.py), under automatic dynamic (dynamic=None).

The cached decode step takes its position as an int that changes every call, writes
the new token's keys and values into per-layer cache buffers at that position (slice
assignment: a side effect on module buffers, which must be left as eager leaves them)
and attends over the prefix [0, pos + 1), a slice with a symbolic bound. Both loops must
capture at most two graphs (the prompt, then one symbolic step) and give eager's tokens;
the llvm and aot_eager backends compile the symbolic step once per size
(sym_sizes.specializing). Also the indexing forms a cache update may take with a
symbolic position (capture/sym_indexing.py): slice assignment, int-index assignment,
index_put at arange(pos, pos + T), narrow."""
import pytest

import ember
from ember.capture import counters
from ember.models.gpt import GPT, GPTConfig
from fresh_compiler import fresh_compiler  # noqa: F401  (autouse)

BACKENDS = ["eager", "aot_eager", "llvm"]


def _model(block_size=32):
    ember.manual_seed(0)
    return GPT(GPTConfig(block_size=block_size, vocab_size=65, n_layer=2, n_head=2,
                         n_embd=32)).eval()


def _prompt(batch, length=4):
    return ember.randint(0, 65, (batch, length), generator=ember.Generator().manual_seed(1))


def _caches(m):
    return [(b.attn.k_cache, b.attn.v_cache) for b in m.transformer.h]


def _graphs():
    return counters["stats"]["unique_graphs"]


def _clean():
    assert not counters["unsupported"], dict(counters["unsupported"])
    assert not counters["dynamic_fallback"], dict(counters["dynamic_fallback"])
    assert not counters["graph_break"], dict(counters["graph_break"])
    assert not counters["backend_fallback"], dict(counters["backend_fallback"])


# ------------------------------------------------------------------ the model, eagerly


@pytest.mark.parametrize("batch", [1, 8])
def test_cached_generate_equals_uncached(batch):
    m = _model()
    idx = _prompt(batch)
    assert ember.equal(m.generate(idx, 20, top_k=1, use_cache=True),
                       m.generate(idx, 20, top_k=1))
    g1, g2 = ember.Generator().manual_seed(5), ember.Generator().manual_seed(5)
    assert ember.equal(
        m.generate(idx, 12, temperature=0.8, top_k=5, generator=g1, use_cache=True),
        m.generate(idx, 12, temperature=0.8, top_k=5, generator=g2))


def test_cached_logits_equal_the_full_forward():
    m = _model()
    idx = _prompt(3, 5)
    m.setup_cache(3)
    with ember.no_grad():
        logits, _ = m(idx, pos=0)
        assert ember.allclose(logits, m(idx)[0], atol=1e-5, rtol=0)
        for _ in range(10):
            nxt = logits[:, -1:].argmax(-1)
            idx = ember.cat([idx, nxt], 1)
            logits, _ = m(nxt, pos=idx.shape[1] - 1)
            assert ember.allclose(logits[:, -1], m(idx)[0][:, -1], atol=1e-5, rtol=0)
        # several tokens at a position past 0: the causal mask is offset by pos
        more = _prompt(3, 3)
        full = ember.cat([idx, more], 1)
        logits, _ = m(more, pos=idx.shape[1])
        assert ember.allclose(logits, m(full)[0][:, -3:], atol=1e-5, rtol=0)


def test_cached_generate_past_block_size_continues_uncached():
    m = _model(block_size=12)
    idx = _prompt(2, 5)
    assert ember.equal(m.generate(idx, 15, top_k=1, use_cache=True),
                       m.generate(idx, 15, top_k=1))


def test_the_cache_is_not_state_dict():
    m = _model()
    with pytest.raises(RuntimeError, match="setup_cache"):
        m(_prompt(2, 2), pos=0)
    m.setup_cache(2)
    assert not any("cache" in k for k in m.state_dict())
    with pytest.raises(ValueError, match="block size"):
        m(_prompt(2, 2), pos=31)


# ------------------------------------------------------------------ compiled decode loops


@pytest.mark.parametrize("batch", [1, 8])
@pytest.mark.parametrize("backend", BACKENDS)
def test_cached_decode_loop_compiles_at_most_twice(backend, batch):
    ref, m = _model(), _model()
    idx = _prompt(batch)
    want = ref.generate(idx, 16, top_k=1, use_cache=True)
    m.compile(backend=backend)
    got = m.generate(idx, 16, top_k=1, use_cache=True)
    assert ember.equal(got, want)
    assert _graphs() <= 2, dict(counters["recompiles"])
    assert counters["stats"]["calls_captured"] <= 2
    _clean()
    # the cache buffers after the loop: as eager left them (the eager backend runs the
    # captured ops themselves; the AOT backends may round matmuls differently)
    tol = 0 if backend == "eager" else 1e-6
    for (rk, rv), (k, v) in zip(_caches(ref), _caches(m)):
        assert ember.allclose(k, rk, atol=tol, rtol=0)
        assert ember.allclose(v, rv, atol=tol, rtol=0)
    # the whole cache was written, past the prompt (not a zero left where a step wrote)
    assert float(_caches(m)[0][0][:, :, 4 + 14].abs().sum()) > 0
    assert float(_caches(m)[0][0][:, :, 4 + 15:].abs().sum()) == 0


@pytest.mark.parametrize("batch", [1, 8])
@pytest.mark.parametrize("backend", BACKENDS)
def test_uncached_decode_loop_compiles_at_most_twice(backend, batch):
    ref, m = _model(), _model()
    idx = _prompt(batch)
    want = ref.generate(idx, 12, top_k=1)
    m.compile(backend=backend)
    assert ember.equal(m.generate(idx, 12, top_k=1), want)
    assert _graphs() <= 2, dict(counters["recompiles"])
    _clean()


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_sampled_cached_generation_with_a_seed_equals_eager(backend):
    ref, m = _model(), _model()
    idx = _prompt(8)
    want = ref.generate(idx, 12, temperature=0.7, top_k=5,
                        generator=ember.Generator().manual_seed(3), use_cache=True)
    m.compile(backend=backend)
    got = m.generate(idx, 12, temperature=0.7, top_k=5,
                     generator=ember.Generator().manual_seed(3), use_cache=True)
    assert ember.equal(got, want)
    assert _graphs() <= 2
    _clean()


def test_a_second_generation_reuses_the_graphs():
    m = _model()
    m.compile(backend="eager")
    idx = _prompt(2)
    a = m.generate(idx, 10, top_k=1, use_cache=True)
    captured = counters["stats"]["calls_captured"]
    b = m.generate(idx, 10, top_k=1, use_cache=True)
    assert ember.equal(a, b)
    assert counters["stats"]["calls_captured"] == captured


# ------------------------------------------------------------------ cache updates


class _Cache(ember.nn.Module):
    def __init__(self, form):
        super().__init__()
        self.form = form
        self.register_buffer("cache", ember.zeros(2, 3, 16, 4), persistent=False)

    def forward(self, x, pos):
        T = x.shape[2]
        if self.form == "slice":
            self.cache[:, :, pos:pos + T] = x
        elif self.form == "select":
            self.cache[:, :, pos] = x[:, :, 0]
        elif self.form == "index_put":
            self.cache.index_put_((None, None, ember.arange(pos, pos + T)), x)
        elif self.form == "narrow":
            self.cache.narrow(2, pos, T).copy_(x)
        k = self.cache[:, :, :pos + T]
        return (k * 2).sum(2), k.narrow(2, 1, pos + T - 1).sum(), k[:, 1, pos]


def _run_cache(m, positions):
    g = ember.Generator().manual_seed(0)
    with ember.no_grad():
        return [m(ember.randn(2, 3, 1, 4, generator=g), p) for p in positions]


@pytest.mark.parametrize("form", ["slice", "select", "index_put", "narrow"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_cache_write_at_a_symbolic_position(backend, form):
    ref, m = _Cache(form), _Cache(form)
    m.compile(backend=backend)
    positions = [0, 3, 4, 5, 9, 15]
    for want, got in zip(_run_cache(ref, positions), _run_cache(m, positions)):
        for a, b in zip(want, got):
            assert a.shape == b.shape
            assert ember.allclose(a, b, atol=1e-6, rtol=1e-5)
    assert ember.equal(ref.cache, m.cache)
    assert _graphs() <= 2, dict(counters["recompiles"])
    _clean()


@pytest.mark.parametrize("form", ["slice", "select", "index_put", "narrow"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_chunks_of_a_symbolic_length_at_a_symbolic_position(backend, form):
    """Several tokens per call, a different number each time: the written length is a
    symbol too (index_put's values of a symbolic length: its meta rule guards the
    shape check instead of falling back to one graph per size)."""
    calls = [(2, 0), (3, 2), (4, 5), (2, 9), (5, 11)]

    def run(m):
        g = ember.Generator().manual_seed(0)
        with ember.no_grad():
            return [m(ember.randn(2, 3, T, 4, generator=g), p) for T, p in calls]
    ref, m = _Cache(form), _Cache(form)
    m.compile(backend=backend)
    for want, got in zip(run(ref), run(m)):
        for a, b in zip(want, got):
            assert a.shape == b.shape
            assert ember.allclose(a, b, atol=1e-6, rtol=1e-5)
    assert ember.equal(ref.cache, m.cache)
    assert _graphs() <= 2, dict(counters["recompiles"])
    _clean()


def test_a_symbolic_index_out_of_range_raises_as_eager():
    m = _Cache("select")
    m.compile(backend="eager")
    _run_cache(m, [0, 3, 4])
    with pytest.raises(IndexError):
        _run_cache(m, [16])
    with pytest.raises(RuntimeError):           # narrow past the end
        _run_cache(_compiled_narrow(), [0, 3, 16])


def _compiled_narrow():
    m = _Cache("narrow")
    m.compile(backend="eager")
    return m


@pytest.mark.parametrize("backend", ["aot_eager", "llvm"])
def test_gradients_through_a_symbolic_select_and_narrow(backend):
    def f(x, p):
        return (x[:, p] * 3).sum() + x.narrow(1, p, 2).pow(2).sum()

    cf = ember.compile(f, backend=backend)
    for p in (0, 3, 4, 6):
        x1 = ember.randn(3, 9, requires_grad=True)
        x2 = x1.detach().clone().requires_grad_(True)
        a, b = f(x1, p), cf(x2, p)
        a.backward()
        b.backward()
        assert ember.allclose(a, b, atol=1e-5)
        assert ember.allclose(x1.grad, x2.grad, atol=1e-6)
    assert _graphs() == 2
    _clean()
