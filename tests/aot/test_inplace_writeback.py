"""[dynamic] a compiled graph's write into a slice of an input runs in place
(ember/aot/inplace_writes.py): the graph writes the slice into the input's own memory
and the runtime copies nothing back, instead of a new value of the whole input and a
copy of it into the input after each call. The KV-cache decode step of the zoo GPT is
the case: one position written per layer per call into a cache of block_size positions.

Every case compares the outputs, the written inputs and their version counters with
eager's. Two checks tell the in-place write from the full copy: a warm call allocates
far less than the cache's size (tracemalloc follows the arrays' memory), and a value put
outside the slice after the graph ran but before the runtime's write-back survives (the
full copy would overwrite it with the graph's new value of the whole input). What cannot
be written in place exactly keeps the full copy, its reason counted."""
import tracemalloc

import pytest

import ember
from ember.aot import aot_compile, eager_compiler
from ember.capture import counters
from ember.capture.backends import register_backend
from ember.models.gpt import GPT, GPTConfig


@pytest.fixture(autouse=True)
def fresh():
    ember.compiler.reset()
    yield
    ember.compiler.reset()


def _write_and_read(cache, v, p):
    cache[:, p:p + 1] = v
    return (cache[:, :p + 1] * 2).sum(1)


def _pair(shape=(3, 40)):
    g = ember.Generator().manual_seed(0)
    a = ember.randn(shape, generator=g)
    return a, a.clone()


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
@pytest.mark.parametrize("dynamic", [True, None])
def test_slice_write_in_place_equals_eager(backend, dynamic):
    f = ember.compile(_write_and_read, backend=backend, dynamic=dynamic)
    ref, cache = _pair()
    g = ember.Generator().manual_seed(1)
    with ember.no_grad():
        for p in range(0, 30, 3):
            v = ember.randn((3, 1), generator=g)
            want = _write_and_read(ref, v, p)
            got = f(cache, v, p)
            assert ember.allclose(got, want, atol=1e-6, rtol=0)
            assert ember.equal(cache, ref)
            assert cache._version == ref._version
    assert counters["aot_inplace_writes"]["in place"] >= 1
    assert not any(k.startswith("full copy") for k in counters["aot_inplace_writes"])


def test_a_warm_call_allocates_no_new_cache():
    """The functional graph allocated a new cache (4 MB) per call; in place, only the
    slice and the output."""
    f = ember.compile(_write_and_read, backend="aot_eager", dynamic=True)
    cache = ember.zeros((2, 1 << 19))
    v = ember.ones((2, 1))
    with ember.no_grad():
        f(cache, v, 0)
        f(cache, v, 1)
        tracemalloc.start()
        try:
            f(cache, v, 2)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert peak < cache.numel() * 4 // 4, peak
    assert float(cache[:, :3].sum()) == 6 and float(cache.sum()) == 6
    assert counters["aot_inplace_writes"]["in place"] >= 1


SENTINEL = []


def _sneaky_compiler(graph, name):
    """aot_eager's forward, and then, behind the graph's back, a sentinel at the last
    column of the first input (outside the slice written): the full copy of the graph's
    new value would overwrite it."""
    fw = eager_compiler(graph, name)

    def run(*args):
        out = fw(*args)
        for a in args:
            if isinstance(a, ember.Tensor) and a.dim() == 2 and a.shape[1] == 40:
                with ember.no_grad():
                    a.numpy()[:, -1] = 123.0
                SENTINEL.append(name)
                break
        return out
    return run


_sneaky_compiler.writes_in_place = True


@register_backend("test_inplace_sneaky")
def _sneaky(gm, example_inputs):
    return aot_compile(gm, example_inputs, fw_compiler=_sneaky_compiler, name="sneaky")


def test_only_the_slice_is_written_back():
    f = ember.compile(_write_and_read, backend="test_inplace_sneaky", dynamic=True)
    cache = ember.zeros((3, 40))
    with ember.no_grad():
        for p in (0, 5, 9):
            f(cache, ember.ones((3, 1)), p)
            assert SENTINEL
            # the sentinel put after the graph ran is still there: nothing but the
            # slice was written into the cache
            assert float(cache[0, -1]) == 123.0
            assert float(cache[0, p]) == 1.0


# ------------------------------------------------------------------ the full copy stays


def _reads_old_value(cache, v, p):
    old = cache * 1
    cache[:, p:p + 1] = v
    return old + cache


def _shift(cache, v, p):
    cache[:, 1:] = cache[:, :-1].clone()
    cache[:, :1] = v
    return cache.sum()


def _returns_new_value(cache, v, p):
    cache[:, p:p + 1] = v
    return cache + 0


def _whole(cache, v, p):
    cache.mul_(2)
    return cache.sum()


@pytest.mark.parametrize("fn", [_reads_old_value, _shift, _returns_new_value, _whole])
@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_writes_that_stay_a_full_copy_equal_eager(fn, backend):
    f = ember.compile(fn, backend=backend, dynamic=True)
    ref, cache = _pair()
    with ember.no_grad():
        for p in (1, 4, 7):
            v = ember.full((3, 1), float(p))
            want = fn(ref, v, p)
            got = f(cache, v, p)
            assert ember.allclose(got, want, atol=1e-5, rtol=0)
            assert ember.allclose(cache, ref, atol=1e-6, rtol=0)
            assert cache._version == ref._version


def test_the_old_value_read_keeps_the_full_copy_counted():
    f = ember.compile(_reads_old_value, backend="aot_eager", dynamic=True)
    cache = ember.zeros((3, 40))
    with ember.no_grad():
        f(cache, ember.ones((3, 1)), 2)
    assert counters["aot_inplace_writes"][
        "full copy: the graph reads the input's old value after the write"]
    assert not counters["aot_inplace_writes"]["in place"]


def test_aliasing_inputs_run_eagerly():
    f = ember.compile(_write_and_read, backend="aot_eager", dynamic=True)
    ref, cache = _pair()
    with ember.no_grad():
        f(cache, ember.ones((3, 1)), 1)
        _write_and_read(ref, ember.ones((3, 1)), 1)
        # the value written is a view of the cache itself
        want = _write_and_read(ref, ref[:, 5:6], 3)
        got = f(cache, cache[:, 5:6], 3)
    assert ember.allclose(got, want, atol=1e-6, rtol=0)
    assert ember.equal(cache, ref)


def test_non_contiguous_cache():
    f = ember.compile(_write_and_read, backend="aot_eager", dynamic=True)
    rbase, base = _pair((40, 3))
    ref, cache = rbase.t(), base.t()
    g = ember.Generator().manual_seed(2)
    with ember.no_grad():
        for p in (0, 3, 8):
            v = ember.randn((3, 1), generator=g)
            assert ember.allclose(f(cache, v, p), _write_and_read(ref, v, p), atol=1e-6,
                                  rtol=0)
            assert ember.equal(base, rbase)


def test_a_write_autograd_follows_keeps_the_full_copy():
    def fn(cache, v, p):
        cache[:, p:p + 1] = v * 2
        return cache.sum()

    f = ember.compile(fn, backend="aot_eager", dynamic=True)
    for p in (1, 3, 6):
        rc, c = ember.zeros((3, 40)), ember.zeros((3, 40))
        rv = ember.randn((3, 1), generator=ember.Generator().manual_seed(p))
        rv.requires_grad_(True)
        v = rv.detach().clone().requires_grad_(True)
        rc2, c2 = rc * 1, c * 1       # not leaves: autograd follows the write
        fn(rc2, rv, p).backward()
        f(c2, v, p).backward()
        assert ember.allclose(c2.detach(), rc2.detach())
        assert ember.allclose(v.grad, rv.grad)
    assert counters["aot_inplace_writes"]["full copy: autograd follows the write"]


# ------------------------------------------------------------------ the GPT's KV cache


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_gpt_cached_decode_writes_the_cache_in_place(backend):
    def model():
        ember.manual_seed(0)
        return GPT(GPTConfig(block_size=32, vocab_size=65, n_layer=2, n_head=2,
                             n_embd=32)).eval()

    ref, m = model(), model()
    idx = ember.randint(0, 65, (2, 4), generator=ember.Generator().manual_seed(1))
    want = ref.generate(idx, 16, top_k=1, use_cache=True)
    m.compile(backend=backend)
    assert ember.equal(m.generate(idx, 16, top_k=1, use_cache=True), want)
    for rb, b in zip(ref.transformer.h, m.transformer.h):
        assert ember.allclose(b.attn.k_cache, rb.attn.k_cache, atol=1e-6, rtol=0)
        assert ember.allclose(b.attn.v_cache, rb.attn.v_cache, atol=1e-6, rtol=0)
    # every layer's two caches, in the prompt's graph and the step's
    assert counters["aot_inplace_writes"]["in place"] >= 4
    assert not any(k.startswith("full copy") for k in counters["aot_inplace_writes"])
