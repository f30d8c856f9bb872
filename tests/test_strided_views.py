"""diagonal, diag_embed and as_strided beyond op_db's samples: writes through the views,
gradients through in-place writes, and compiled functions (diagonal traced into graphs,
as_strided run by CPython with the break counted)."""
import numpy as np
import pytest

import ember

torch = pytest.importorskip("torch", reason="torch is the reference")


def _pair(shape, seed):
    a = np.random.default_rng(seed).standard_normal(shape)
    return ember.from_numpy(a.copy()), torch.from_numpy(a.copy())


def test_writes_through_views_reach_the_base():
    for lib_x in (_pair((3, 4), 1),):
        e, t = lib_x
        e.diagonal(1).mul_(10)
        t.diagonal(1).mul_(10)
        e.as_strided((2, 2), (4, 1), 2).zero_()
        t.as_strided((2, 2), (4, 1), 2).zero_()
        np.testing.assert_array_equal(e.numpy(), t.numpy())


def test_gradients_through_in_place_diagonal_writes_and_overlapping_as_strided():
    a, ta = _pair((4, 4), 2)
    e = a.clone().requires_grad_(True)
    t = ta.clone().requires_grad_(True)
    for lib, x in ((ember, e), (torch, t)):
        y = x * 2
        y.diagonal().mul_(3)
        w = y.as_strided((3, 3), (1, 1))          # overlapping windows of y's storage
        (w.pow(2).sum() + lib.diag_embed(y.diagonal(-1), 1).sum()).backward()
    np.testing.assert_allclose(e.grad.numpy(), t.grad.numpy(), rtol=1e-12)


@pytest.mark.parametrize("backend", ["eager", "aot_eager", "llvm"])
def test_diagonal_compiles_into_one_graph(backend):
    a, ta = _pair((2, 5, 5), 3)

    def f(x):
        y = x * 2
        y.diagonal(0, -2, -1).add_(1)
        return y.diagonal(1, 1, 2).sum(-1) + ember.diag_embed(x[..., 0]).sum((-1, -2)), y

    ex = ember._dynamo.explain(f)(a)
    assert (ex.graph_count, ex.graph_break_count) == (1, 0)
    got, want = ember.compile(f, backend=backend, fullgraph=True)(a), f(a)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-12)
    x1 = a.clone().requires_grad_(True)
    x2 = a.clone().requires_grad_(True)
    f(x1)[0].sum().backward()
    ember.compile(f, backend=backend)(x2)[0].sum().backward()
    np.testing.assert_allclose(x2.grad.numpy(), x1.grad.numpy(), rtol=1e-12)


@pytest.mark.parametrize("backend", ["eager", "aot_eager", "llvm"])
def test_as_strided_in_a_compiled_function_runs_in_cpython(backend):
    a, _ = _pair((4, 4), 4)

    def f(x):
        y = x.t() + 1
        return y.as_strided((2, 2), (1, 4), 1) * 3

    ex = ember._dynamo.explain(f)(a)
    assert ex.graph_break_count >= 1
    assert any("as_strided" in str(r) for r in ex.break_reasons)
    np.testing.assert_array_equal(ember.compile(f, backend=backend)(a).numpy(), f(a).numpy())
    with pytest.raises(Exception, match="as_strided"):
        ember.compile(f, backend=backend, fullgraph=True)(a)
