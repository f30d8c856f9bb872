"""The names added for the api-surface issue that op_db cannot cover: keyword forms,
random draws' distributions, results under ember.compile."""
import numpy as np
import pytest

import ember


def test_split_takes_split_size_or_sections(torch):
    x = ember.arange(7)
    for arg in (3, [2, 5]):
        got = [p.tolist() for p in ember.split(x, split_size_or_sections=arg)]
        want = [p.tolist() for p in torch.split(torch.arange(7), split_size_or_sections=arg)]
        assert got == want
    assert [p.tolist() for p in x.split(split_size=3)] == \
        [p.tolist() for p in torch.arange(7).split(split_size=3)]


def test_topk_unsorted_gives_the_same_set(torch):
    g = np.random.default_rng(0)
    a = g.permutation(20).astype(np.float32).reshape(4, 5)
    v, i = ember.topk(ember.tensor(a), 3, sorted=False)
    tv, ti = torch.topk(torch.tensor(a), 3, sorted=False)
    assert sorted(map(sorted, v.tolist())) == sorted(map(sorted, tv.tolist()))
    assert np.array_equal(np.take_along_axis(a, i.numpy(), -1), v.numpy())


def test_unique_unsorted_is_sorted_as_torch_on_the_cpu(torch):
    x = [3, 1, 2, 3, 1]
    got = ember.unique(ember.tensor(x), sorted=False, return_inverse=True)
    want = torch.unique(torch.tensor(x), sorted=False, return_inverse=True)
    assert [t.tolist() for t in got] == [t.tolist() for t in want]


@pytest.mark.parametrize("replacement", [True, False])
def test_multinomial_distribution(replacement):
    ember.manual_seed(0)
    p = ember.tensor([1.0, 2.0, 0.0, 5.0])
    n = 4000
    if replacement:
        draws = ember.multinomial(p, n, replacement=True).numpy()
        freq = np.bincount(draws, minlength=4) / n
        assert freq[2] == 0
        assert np.allclose(freq, [1 / 8, 2 / 8, 0, 5 / 8], atol=0.03)
    else:
        firsts = np.array([int(ember.multinomial(p, 1)[0]) for _ in range(n // 4)])
        freq = np.bincount(firsts, minlength=4) / len(firsts)
        assert freq[2] == 0
        assert np.allclose(freq, [1 / 8, 2 / 8, 0, 5 / 8], atol=0.05)
        rows = ember.multinomial(ember.ones(3, 6), 6).numpy()
        assert all(sorted(r) == list(range(6)) for r in rows)   # no repeats
        assert ember.multinomial(p, 4).tolist()[-1] == 2   # zero probability drawn last


def test_multinomial_is_reproducible():
    g = ember.Generator().manual_seed(5)
    a = ember.multinomial(ember.ones(10), 5, generator=g).tolist()
    g.manual_seed(5)
    assert ember.multinomial(ember.ones(10), 5, generator=g).tolist() == a


@pytest.mark.parametrize("backend", ["eager", "aot_eager", "llvm"])
def test_composites_compile_with_their_gradients(backend):
    def f(x, y):
        d, _ = ember.cummax(x, 0)
        v, m = ember.var_mean(x)
        return (ember.outer(x, y).sum() + ember.diff(x, prepend=y[:1]).sum() +
                ember.kthvalue(x, 2).values + d.sum() + ember.isclose(x, y).sum() + v + m +
                ember.cdist(x[None], y[None]).sum() + ember.repeat_interleave(x, 2).sum() +
                ember.block_diag(x[None], y[None]).sum() + ember.take(x, ember.tensor([0, -1])).sum())
    x = ember.randn(5, requires_grad=True)
    y = ember.randn(5)
    r0, r1 = f(x, y), ember.compile(f, backend=backend)(x, y)
    g0, = ember.autograd.grad(r0, [x])
    g1, = ember.autograd.grad(r1, [x])
    assert float(r0) == pytest.approx(float(r1), rel=1e-6)
    assert np.allclose(g0.numpy(), g1.numpy(), rtol=1e-6, atol=1e-6)
