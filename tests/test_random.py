"""Random ops: distributions (moments, ranges), seeding, generators, in-place rules."""
import math

import numpy as np
import pytest

import ember
from ember.ops import registry

N = 20000


def _stats(t):
    a = t.numpy().astype(np.float64)
    return a.mean(), a.std()


@pytest.mark.parametrize("dtype", [ember.float32, ember.float64])
def test_uniform_range_and_moments(dtype):
    ember.manual_seed(0)
    t = ember.empty(N, dtype=dtype).uniform_(-2, 3)
    a = t.numpy()
    assert t.dtype is dtype
    assert a.min() >= -2 and a.max() < 3
    mean, std = _stats(t)
    assert abs(mean - 0.5) < 0.05
    assert abs(std - 5 / math.sqrt(12)) < 0.05


def test_uniform_defaults_and_returns_self():
    t = ember.empty(100)
    v = t._version
    r = t.uniform_()
    assert r is t and t._version == v + 1
    assert 0 <= t.numpy().min() and t.numpy().max() < 1


def test_normal_moments():
    ember.manual_seed(1)
    t = ember.empty(N, dtype=ember.float64).normal_(3.0, 0.5)
    mean, std = _stats(t)
    assert abs(mean - 3.0) < 0.02 and abs(std - 0.5) < 0.02


def test_exponential_moments():
    ember.manual_seed(2)
    t = ember.empty(N).exponential_(lambd=4.0)
    mean, std = _stats(t)
    assert t.numpy().min() >= 0
    assert abs(mean - 0.25) < 0.01 and abs(std - 0.25) < 0.01


def test_bernoulli_forms():
    ember.manual_seed(3)
    p = ember.full((N,), 0.3)
    b = ember.bernoulli(p)
    assert set(np.unique(b.numpy())) <= {0.0, 1.0}
    assert abs(b.numpy().mean() - 0.3) < 0.02
    assert abs(ember.bernoulli(ember.zeros(N), 0.8).numpy().mean() - 0.8) < 0.02
    t = ember.zeros(N, dtype=ember.int64).bernoulli_(0.25)
    assert t.dtype is ember.int64 and abs(t.numpy().mean() - 0.25) < 0.02
    probs = ember.tensor([0.0, 1.0, 0.0, 1.0])
    assert ember.ones(3, 4).bernoulli_(probs).numpy().tolist() == [[0, 1, 0, 1]] * 3
    assert ember.ones(5).bernoulli().numpy().tolist() == [1] * 5


def test_randint_and_randperm():
    ember.manual_seed(4)
    r = ember.randint(10, (N,))
    assert r.dtype is ember.int64 and r.shape == (N,)
    assert r.numpy().min() == 0 and r.numpy().max() == 9
    r = ember.randint(-3, 4, (2, 3), dtype=ember.float32)
    assert r.dtype is ember.float32 and r.shape == (2, 3)
    assert (-3 <= r.numpy()).all() and (r.numpy() < 4).all()
    p = ember.randperm(50)
    assert p.dtype is ember.int64 and sorted(p.tolist()) == list(range(50))
    assert ember.randperm(0).shape == (0,)


def test_manual_seed_reproduces_every_op():
    def draw():
        return [ember.empty(5).uniform_().tolist(), ember.empty(5).normal_().tolist(),
                ember.empty(5).exponential_().tolist(),
                ember.bernoulli(ember.full((5,), 0.5)).tolist(),
                ember.randint(100, (5,)).tolist(), ember.randperm(7).tolist()]
    ember.manual_seed(123)
    a = draw()
    ember.manual_seed(123)
    assert draw() == a
    ember.manual_seed(124)
    assert draw() != a


def test_generator_stream_is_independent_of_default():
    g = ember.Generator().manual_seed(7)

    def draw():
        return (ember.empty(6).uniform_(generator=g).tolist()
                + ember.randint(9, (4,), generator=g).tolist())
    a = draw()
    g.manual_seed(7)
    ember.manual_seed(0)
    ember.rand(10)               # the default stream moving does not matter
    assert draw() == a
    g.manual_seed(7)
    state = g.get_state()
    x = ember.randperm(10, generator=g).tolist()
    g.set_state(state)
    assert ember.randperm(10, generator=g).tolist() == x


def test_uniform_and_normal_take_rand_and_randn_draws():
    """Their decompositions into rand/randn give the eager numbers."""
    for name, args in (("uniform", (-1.0, 3.0)), ("normal_functional", (2.0, 0.5))):
        entry = registry.BY_NAME[name][0]
        ember.manual_seed(5)
        eager = getattr(ember.empty(7), name.split("_")[0] + "_")(*args)
        ember.manual_seed(5)
        dec = entry.decompose(ember.empty(7), *args, None)
        np.testing.assert_array_equal(eager.numpy(), dec.numpy())


def test_leaf_requiring_grad_rejects_in_place_but_no_grad_allows():
    w = ember.ones(3, requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        w.uniform_()
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        w.normal_()
    with ember.no_grad():
        w.normal_()
        w.bernoulli_(0.5)
    assert w.requires_grad and w.is_leaf


def test_writes_through_views():
    base = ember.zeros(4, 6)
    base[:, 1:3].uniform_(5, 6)
    a = base.numpy()
    assert (a[:, 1:3] >= 5).all() and (a[:, [0, 3, 4, 5]] == 0).all()
    t = ember.zeros(3, 2).t()
    t.normal_()
    assert (t.numpy() != 0).all()


def test_errors():
    with pytest.raises(RuntimeError, match="from"):
        ember.empty(3).uniform_(1, 0)
    with pytest.raises(RuntimeError, match="std"):
        ember.empty(3).normal_(0, -1)
    with pytest.raises(RuntimeError, match="lambda"):
        ember.empty(3).exponential_(0)
    with pytest.raises(RuntimeError, match=r"\[0, 1\]"):
        ember.empty(3).bernoulli_(1.5)
    with pytest.raises(RuntimeError, match=r"\[0, 1\]"):
        ember.bernoulli(ember.tensor([0.5, float("nan")]))
    with pytest.raises(RuntimeError, match="from"):
        ember.randint(3, 3, (2,))
    with pytest.raises(RuntimeError, match="floating point"):
        ember.zeros(3, dtype=ember.int64).uniform_()
    with pytest.raises(RuntimeError, match="floating point"):
        ember.randint(3, (2,), requires_grad=True)
    with pytest.raises(RuntimeError, match="non-negative"):
        ember.randperm(-1)
    with pytest.raises(TypeError, match="Generator"):
        ember.empty(3).uniform_(generator=object())


def test_meta_tensors_and_meta_rules():
    m = ember.empty(2, 3, device="meta").uniform_()
    assert m.is_meta and m.shape == (2, 3)
    r = ember.randint(5, (4, 2), device="meta")
    assert r.is_meta and r.dtype is ember.int64 and r.shape == (4, 2)
    from ember.ops import meta as M
    entry = registry.BY_NAME["randperm"][0]
    assert M.infer(entry, (6, None, None, None, False)).shape == (6,)
    entry = registry.BY_NAME["uniform_"][0]
    x = ember.empty(2, 5)
    assert M.infer(entry, (x, 0.0, 1.0, None)).shape == (2, 5)


def test_set_state_refuses_what_get_state_cannot_have_made():
    """As PyTorch's: a TypeError unless a uint8 tensor, a RuntimeError unless of the
    state's size and structure; a refused state leaves the generator as it was."""
    g = ember.Generator().manual_seed(3)
    good = g.get_state()
    assert good.dtype is ember.uint8 and good.numel() == ember.random.STATE_SIZE
    want = ember.randn(5, generator=g.manual_seed(3)).tolist()
    bad_inc = good.clone()
    bad_inc[16] = bad_inc[16] - 1 if int(bad_inc[16]) % 2 else bad_inc[16]   # even
    bad_flag = good.clone()
    bad_flag[32] = 2
    bad_value = good.clone()
    bad_value[52] = 1                                                # >= 2**32
    cases = [([1, 2, 3], TypeError, "ByteTensor"),
             (good.float(), TypeError, "ByteTensor"),
             (ember.tensor([1, 2, 3], dtype=ember.uint8), RuntimeError, "size 64.*3"),
             (ember.zeros(3, dtype=ember.uint8), RuntimeError, "size 64.*3"),
             (good[:-1], RuntimeError, "size 64.*63"),
             (ember.cat([good, good[:1]]), RuntimeError, "size 64.*65"),
             (ember.zeros(64, dtype=ember.uint8), RuntimeError, "increment"),
             (bad_inc, RuntimeError, "increment"),
             (bad_flag, RuntimeError, "32-bit"),
             (bad_value, RuntimeError, "32-bit")]
    for state, exc, match in cases:
        g.manual_seed(3)
        with pytest.raises(exc, match=match):
            g.set_state(state)
        with pytest.raises(exc, match=match):
            ember.set_rng_state(state)
        assert ember.randn(5, generator=g).tolist() == want      # unchanged
    g.manual_seed(99)
    g.set_state(good.view(8, 8))            # any shape with the state's bytes, as torch
    assert ember.randn(5, generator=g).tolist() == want
    # a valid state draws normal numbers, never a stuck stream of zeros
    assert all(v != 0 for v in ember.randn(5, generator=g).tolist())
