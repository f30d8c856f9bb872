"""Names of torch's namespace written in Python over ops (ember/functional.py: meshgrid,
broadcast_tensors/shapes, atleast_*d, chain_matmul, tensor_split and the directional
splits, column_stack, dstack, logspace, the constants) and the nn layers and functions
added with them (SELU, CELU, Hardsigmoid, Hardswish, Softsign, Tanhshrink, Softshrink,
Hardshrink, Threshold, PReLU, CosineSimilarity, PairwiseDistance): values, dtypes,
shapes and gradients against PyTorch."""
import warnings

import numpy as np
import pytest

import ember

RNG = np.random.default_rng(0)
A = np.arange(24, dtype=np.float64).reshape(2, 3, 4) * 0.37 - 3
B = RNG.standard_normal((2, 3, 4))


def _compare(torch, fn, grad=True):
    outs = []
    for L in (ember, torch):
        x = L.tensor(A.copy(), requires_grad=grad)
        y = L.tensor(B.copy(), requires_grad=grad)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out = fn(L, x, y)
        res = out if isinstance(out, (tuple, list)) else (out,)
        if grad and any(r.requires_grad for r in res):
            sum((r * r).sum() for r in res if r.requires_grad).backward()
        outs.append((res, x.grad, y.grad))
    (re, gxe, gye), (rt, gxt, gyt) = outs
    assert len(re) == len(rt)
    for e, t in zip(re, rt):
        assert tuple(e.shape) == tuple(t.shape)
        assert str(e.dtype).split(".")[1] == str(t.dtype).split(".")[1]
        # 1e-6: torch's elu (celu) computes exp(x) - 1 where ember's uses expm1
        np.testing.assert_allclose(e.detach().numpy(), t.detach().numpy(), rtol=1e-6,
                                   atol=1e-10, equal_nan=True)
    for ge, gt in ((gxe, gxt), (gye, gyt)):
        if gt is None:
            assert ge is None or not ge.numpy().any()
        else:
            np.testing.assert_allclose(ge.numpy(), gt.numpy(), rtol=1e-6, atol=1e-10)


FUNCTIONAL = {
    "meshgrid_ij": lambda L, x, y: L.meshgrid(x[0, 0], y[0, :, 0], indexing="ij"),
    "meshgrid_xy": lambda L, x, y: L.meshgrid(x[0, 0], y[0, :, 0], x[1, 1, :2], indexing="xy"),
    "meshgrid_list": lambda L, x, y: L.meshgrid([x[0, 0], y[0, :, 0]]),
    "broadcast_tensors": lambda L, x, y: L.broadcast_tensors(x, y[0, :, :1]),
    "atleast_1d": lambda L, x, y: L.atleast_1d(x[0, 0, 0]),
    "atleast_2d": lambda L, x, y: L.atleast_2d(x[0, 0], x),
    "atleast_3d": lambda L, x, y: L.atleast_3d(x[0, 0], x[0], x[0, 0, 0]),
    "chain_matmul": lambda L, x, y: L.chain_matmul(x[0], y[1].t(), x[0]),
    "tensor_split_sections": lambda L, x, y: L.tensor_split(x, 3, dim=2),
    "tensor_split_indices": lambda L, x, y: x.tensor_split([1, 3, -1], 2),
    "tensor_split_more_than_size": lambda L, x, y: x.tensor_split(5, 1),
    "tensor_split_tensor": lambda L, x, y: x.tensor_split(L.tensor([1, 2]), 1),
    "hsplit": lambda L, x, y: x.hsplit(3),
    "vsplit": lambda L, x, y: L.vsplit(x, [1]),
    "dsplit": lambda L, x, y: x.dsplit(2),
    "column_stack": lambda L, x, y: L.column_stack([x[0, :, 0], y[0]]),
    "dstack": lambda L, x, y: L.dstack([x[0], y[1]]),
    "logspace": lambda L, x, y: L.logspace(-1, 2, 7),
    "logspace_base": lambda L, x, y: L.logspace(0, 3, 4, base=2, dtype=L.float64),
}


@pytest.mark.parametrize("name", sorted(FUNCTIONAL))
def test_functional_names_match_torch(torch, name):
    _compare(torch, FUNCTIONAL[name])


def test_constants_and_shapes(torch):
    for n in ("pi", "e", "inf", "newaxis"):
        assert getattr(ember, n) == getattr(torch, n)
    assert np.isnan(ember.nan)
    assert ember.broadcast_shapes((2, 1), (3,), 1) == (2, 3)
    assert isinstance(ember.broadcast_shapes((2, 1)), ember.Size)
    with pytest.raises(RuntimeError):
        ember.broadcast_shapes((2,), (3,))
    with pytest.raises(RuntimeError):
        ember.hsplit(ember.ones(2, 5), 2)         # not divisible, as torch
    with pytest.raises(RuntimeError):
        ember.vsplit(ember.ones(4), 2)            # needs 2 dims
    with pytest.warns(UserWarning, match="indexing"):
        ember.meshgrid(ember.ones(2), ember.ones(3))


F = {
    "selu": lambda L, x, y: L.nn.functional.selu(x),
    "celu": lambda L, x, y: L.nn.functional.celu(x, 0.3),
    "hardsigmoid": lambda L, x, y: L.nn.functional.hardsigmoid(x),
    "hardswish": lambda L, x, y: L.nn.functional.hardswish(x),
    "softsign": lambda L, x, y: L.nn.functional.softsign(x),
    "tanhshrink": lambda L, x, y: L.nn.functional.tanhshrink(x),
    "softshrink": lambda L, x, y: L.nn.functional.softshrink(x, 1.0),
    "hardshrink": lambda L, x, y: L.nn.functional.hardshrink(x),
    "threshold": lambda L, x, y: L.nn.functional.threshold(x, 0.2, -3.0),
    "prelu": lambda L, x, y: L.nn.functional.prelu(x, y[0, :, 0]),
    "cosine_similarity": lambda L, x, y: L.nn.functional.cosine_similarity(x, y),
    "cosine_similarity_bcast": lambda L, x, y: L.cosine_similarity(x, y[0], dim=-1),
    "cosine_similarity_zero": lambda L, x, y: L.nn.functional.cosine_similarity(x * 0, y, 2),
    "pairwise_distance": lambda L, x, y: L.nn.functional.pairwise_distance(x, y),
    "pairwise_distance_p1": lambda L, x, y: L.pairwise_distance(x, y, p=1, keepdim=True),
    "SELU": lambda L, x, y: L.nn.SELU()(x),
    "CELU": lambda L, x, y: L.nn.CELU(0.5)(x),
    "Hardsigmoid": lambda L, x, y: L.nn.Hardsigmoid()(x),
    "Hardswish": lambda L, x, y: L.nn.Hardswish()(x),
    "Softsign": lambda L, x, y: L.nn.Softsign()(x),
    "Tanhshrink": lambda L, x, y: L.nn.Tanhshrink()(x),
    "Softshrink": lambda L, x, y: L.nn.Softshrink(0.7)(x),
    "Hardshrink": lambda L, x, y: L.nn.Hardshrink(0.7)(x),
    "Threshold": lambda L, x, y: L.nn.Threshold(0.1, 20)(x),
    "PReLU": lambda L, x, y: L.nn.PReLU(3).double()(x),
    "CosineSimilarity": lambda L, x, y: L.nn.CosineSimilarity(dim=0)(x, y),
    "PairwiseDistance": lambda L, x, y: L.nn.PairwiseDistance()(x, y),
}


@pytest.mark.parametrize("name", sorted(F))
def test_nn_names_match_torch(torch, name):
    _compare(torch, F[name])


def test_prelu_module_learns_like_torch(torch):
    out = []
    for L in (ember, torch):
        m = L.nn.PReLU(3, init=0.1).double()
        opt = L.optim.SGD(m.parameters(), lr=0.5)
        for _ in range(3):
            opt.zero_grad()
            loss = (m(L.tensor(A)) ** 2).mean()
            loss.backward()
            opt.step()
        out.append(m.weight.detach().numpy())
    np.testing.assert_allclose(out[0], out[1], rtol=1e-12)
    assert repr(ember.nn.PReLU(3)) == repr(torch.nn.PReLU(3))


def test_predicates_and_tensor_facts(torch):
    for L in (ember, torch):
        x = L.ones(2, 3)
        assert (x.itemsize, x.nbytes, x.is_cpu, x.get_device()) == (4, 24, True, -1)
        assert x.is_signed() and not L.ones(2, dtype=L.uint8).is_signed()
        assert L.is_signed(x) and L.is_floating_point(x) and not L.is_complex(x)
        assert L.is_nonzero(L.tensor([1.5])) and not x[0, 0].sub(1).is_nonzero()
        assert L.is_same_size(x, L.zeros(2, 3)) and not x.is_same_size(L.zeros(3, 2))
        assert not x.is_inference()
        with pytest.raises(RuntimeError):
            L.is_nonzero(x)
    names = ["bool", "uint8", "int8", "int64", "float16", "bfloat16", "float64",
             "complex64"]
    for a in names:
        for b in names:
            assert ember.can_cast(getattr(ember, a), getattr(ember, b)) == \
                torch.can_cast(getattr(torch, a), getattr(torch, b)), (a, b)


def test_random_helpers_shapes_dtypes_and_gradients(torch):
    for L in (ember, torch):
        assert tuple(L.normal(L.zeros(3), 1.0).shape) == (3,)
        assert tuple(L.normal(0.0, L.ones(2, 1)).shape) == (2, 1)
        assert tuple(L.normal(L.zeros(3), L.ones(2, 1)).shape) == (2, 3)
        assert tuple(L.normal(2.0, 3.0, (4,)).shape) == (4,)
        assert L.randint_like(L.ones(2, 2, dtype=L.int32), 5).dtype is L.int32
        r = L.randint_like(L.ones(1000), 3, 7)
        assert r.min() >= 3 and r.max() < 7 and r.dtype is L.float32
        assert L.empty_strided((2, 3), (1, 2)).stride() == (1, 2)
        assert L.scalar_tensor(3).dtype is L.float32 and L.scalar_tensor(3).ndim == 0
        with pytest.raises(RuntimeError):
            L.normal(L.zeros(2), -1.0)
    m = ember.zeros(3, requires_grad=True)
    s = ember.ones(3, requires_grad=True)
    ember.manual_seed(0)
    out = ember.normal(m, s)
    out.sum().backward()
    assert m.grad.tolist() == [1.0] * 3
    np.testing.assert_allclose(s.grad.numpy(), out.detach().numpy(), rtol=1e-6)   # = noise
    ember.manual_seed(3)
    big = ember.normal(1.0, 2.0, (20000,))
    assert abs(big.mean().item() - 1.0) < 0.05 and abs(big.std().item() - 2.0) < 0.05


def test_settings_are_kept_and_reported(torch):
    try:
        for L in (ember, torch):
            L.set_float32_matmul_precision("high")
            assert L.get_float32_matmul_precision() == "high"
            L.use_deterministic_algorithms(True, warn_only=True)
            assert L.are_deterministic_algorithms_enabled()
            assert L.is_deterministic_algorithms_warn_only_enabled()
            assert L.get_deterministic_debug_mode() == 1
            L.set_deterministic_debug_mode("error")
            assert L.get_deterministic_debug_mode() == 2
            L.set_warn_always(True)
            assert L.is_warn_always_enabled()
        with pytest.raises(RuntimeError):
            ember.set_float32_matmul_precision("fast")
        a = ember.randn(8, 8)
        assert ember.equal(a @ a, a @ a)
    finally:
        for L in (ember, torch):
            L.set_float32_matmul_precision("highest")
            L.use_deterministic_algorithms(False)
            L.set_warn_always(False)
    assert ember.get_num_interop_threads() >= 1


def _pm1(L, x):
    return L.where(x > 0, L.ones_like(x), -L.ones_like(x))


LOSSES = {
    "margin_ranking": lambda L, x, y: L.nn.functional.margin_ranking_loss(
        x, y, _pm1(L, x.detach() * y.detach() + 0.3), margin=0.2),
    "margin_ranking_module": lambda L, x, y: L.nn.MarginRankingLoss(0.5, reduction="sum")(
        x, y, _pm1(L, y.detach())),
    "hinge_embedding": lambda L, x, y: L.nn.functional.hinge_embedding_loss(
        x, _pm1(L, y.detach()), margin=2.0),
    "hinge_embedding_module": lambda L, x, y: L.nn.HingeEmbeddingLoss(reduction="none")(
        x, _pm1(L, y.detach())),
    "soft_margin": lambda L, x, y: L.nn.functional.soft_margin_loss(x, _pm1(L, y.detach())),
    "soft_margin_module": lambda L, x, y: L.nn.SoftMarginLoss(reduction="sum")(
        x, _pm1(L, y.detach())),
    "cosine_embedding": lambda L, x, y: L.nn.functional.cosine_embedding_loss(
        x[0], y[0], _pm1(L, y.detach()[1, :, 0]), margin=0.1),
    "cosine_embedding_module": lambda L, x, y: L.nn.CosineEmbeddingLoss(reduction="none")(
        x[0], y[0], _pm1(L, y.detach()[1, :, 0])),
    "triplet_margin": lambda L, x, y: L.nn.functional.triplet_margin_loss(
        x[0], y[0], x[1], margin=3.0),
    "triplet_margin_swap_p1": lambda L, x, y: L.nn.TripletMarginLoss(2.0, p=1, swap=True)(
        x[0], y[0], y[1]),
    "poisson_nll": lambda L, x, y: L.nn.functional.poisson_nll_loss(x * 0.3, y.abs() * 3),
    "poisson_nll_full": lambda L, x, y: L.nn.PoissonNLLLoss(log_input=False, full=True)(
        x.abs() + 0.1, (y.abs() * 3).floor()),
    "gaussian_nll": lambda L, x, y: L.nn.functional.gaussian_nll_loss(x, y, y.abs() + 0.1),
    "gaussian_nll_full_1d_var": lambda L, x, y: L.nn.GaussianNLLLoss(full=True, reduction="sum")(
        x, y, y[..., 0].abs() * 0 + 1e-8),
    "multilabel_soft_margin": lambda L, x, y: L.nn.functional.multilabel_soft_margin_loss(
        x[0], (y[0] > 0).to(x.dtype)),
    "multilabel_soft_margin_weight": lambda L, x, y: L.nn.MultiLabelSoftMarginLoss(
        weight=L.arange(4.0, dtype=x.dtype))(x[0], (y[0] > 0).to(x.dtype)),
}


@pytest.mark.parametrize("name", sorted(LOSSES))
def test_losses_match_torch(torch, name):
    _compare(torch, LOSSES[name])


def test_softmax2d_and_dropout3d(torch):
    _compare(torch, lambda L, x, y: L.nn.Softmax2d()(x))
    _compare(torch, lambda L, x, y: L.nn.Softmax2d()(x[None]))
    x = ember.ones(4, 6, 2, 3, 3)
    ember.manual_seed(0)
    out = ember.nn.Dropout3d(0.5)(x)
    per_channel = out.reshape(4, 6, -1)
    assert bool(((per_channel == 0).all(-1) | (per_channel == 2).all(-1)).all())
    assert 0 < int((per_channel[..., 0] == 0).sum()) < 24
    assert ember.nn.Dropout3d(0.5).eval()(x) is x
    with pytest.raises(RuntimeError):
        ember.nn.functional.dropout3d(ember.ones(2, 3), 0.5)


def test_inplace_functions_and_methods(torch):
    """torch.<op>_(t) writes into t as t.<op>_() does; the composites' in-place methods
    refuse results that cannot be cast back, as PyTorch's."""
    for name in ("exp_", "sigmoid_", "tanh_", "clamp_", "asinh_", "relu_", "zero_",
                 "deg2rad_", "sinc_", "logit_"):
        outs = []
        for L in (ember, torch):
            x = L.tensor([[0.25, -0.5], [0.75, 0.1]], dtype=L.float64)
            args = (0.0, 0.5) if name == "clamp_" else ()
            r = getattr(L, name)(x, *args)
            assert r is x
            outs.append(x.numpy().copy())
        np.testing.assert_allclose(outs[0], outs[1], rtol=1e-12, err_msg=name)
    for name, args in (("xlogy_", (2.0,)), ("sgn_", ()), ("copysign_", (-1.0,)),
                       ("hypot_", ("v",)), ("heaviside_", ("v",))):
        outs = []
        for L in (ember, torch):
            x = L.tensor([0.5, -2.0, 0.0, 3.0], dtype=L.float64)
            a = (L.tensor([7.0, 7.0, 7.0, 7.0], dtype=L.float64),) if args == ("v",) else args
            assert getattr(x, name)(*a) is x
            outs.append(x.numpy().copy())
        np.testing.assert_allclose(outs[0], outs[1], rtol=1e-12, err_msg=name)
    for L in (ember, torch):
        with pytest.raises(RuntimeError):
            L.tensor([1, 2]).xlogy_(2.0)         # float result into an int64 tensor
        with pytest.raises(RuntimeError):
            L.tensor([1, 2]).deg2rad_()


@pytest.mark.parametrize("name", ["hann_window", "hamming_window", "blackman_window",
                                  "bartlett_window"])
def test_windows_match_torch(torch, name):
    for n in (0, 1, 2, 5, 16):
        for periodic in (True, False):
            e = getattr(ember, name)(n, periodic)
            t = getattr(torch, name)(n, periodic)
            assert e.dtype is ember.float32 and tuple(e.shape) == tuple(t.shape)
            np.testing.assert_allclose(e.numpy(), t.numpy(), rtol=1e-6, atol=1e-7)
    e = getattr(ember, name)(7, dtype=ember.float64)
    np.testing.assert_allclose(e.numpy(), getattr(torch, name)(7, dtype=torch.float64).numpy(),
                               rtol=1e-12, atol=1e-14)
    with pytest.raises(RuntimeError):
        getattr(ember, name)(4, dtype=ember.int64)
    w = ember.hamming_window(9, True, 0.5, 0.5)
    np.testing.assert_allclose(w.numpy(), torch.hamming_window(9, True, 0.5, 0.5).numpy(),
                               rtol=1e-6, atol=1e-7)


def test_detach_adjoint_get_device(torch):
    x = ember.ones(2, 3, requires_grad=True)
    assert not ember.detach(x).requires_grad
    assert tuple(ember.adjoint(x).shape) == (3, 2) and ember.get_device(x) == -1
