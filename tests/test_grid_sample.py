"""nn.functional.grid_sample and affine_grid against torch: 4-d and 5-d inputs, bilinear
(trilinear) and nearest, every padding mode, both align_corners, values and gradients for
the input, the grid and theta; the functionals' exception types and warnings; a spatial
transformer step (affine_grid then grid_sample) compiled as eager."""
import itertools
import warnings

import numpy as np
import pytest

import ember

torch = pytest.importorskip("torch", reason="torch is the reference")


def _np(t):
    return t.detach().numpy()


@pytest.mark.parametrize("nd", [4, 5])
@pytest.mark.parametrize("mode,padding_mode,align_corners", list(itertools.product(
    ["bilinear", "nearest"], ["zeros", "border", "reflection"], [False, True])))
def test_values_and_gradients_match_torch(nd, mode, padding_mode, align_corners):
    rng = np.random.default_rng(7)
    sp = (4, 5, 6) if nd == 5 else (5, 6)
    x = rng.standard_normal((2, 3) + sp)
    theta = rng.standard_normal((2, nd - 2, nd - 1)) * 0.8
    grid = rng.uniform(-1.4, 1.4, (2,) + sp[:-1] + (3, nd - 2))
    outs = []
    for lib in (ember, torch):
        X = lib.from_numpy(x.copy()).requires_grad_()
        G = lib.from_numpy(grid.copy()).requires_grad_()
        y = lib.nn.functional.grid_sample(X, G, mode=mode, padding_mode=padding_mode,
                                          align_corners=align_corners)
        (y * y).sum().backward()
        T = lib.from_numpy(theta.copy()).requires_grad_()
        a = lib.nn.functional.affine_grid(T, (2, 3) + sp, align_corners=align_corners)
        z = lib.nn.functional.grid_sample(X.detach(), a, mode=mode, padding_mode=padding_mode,
                                          align_corners=align_corners)
        (a.sum() + z.sum()).backward()
        outs.append([_np(y), _np(X.grad), _np(G.grad), _np(a), _np(z), _np(T.grad)])
    for u, v in zip(*outs):
        assert u.shape == v.shape
        np.testing.assert_allclose(u, v, rtol=1e-10, atol=1e-12)


def test_float32_matches_torch():
    rng = np.random.default_rng(8)
    x = rng.standard_normal((2, 4, 16, 16)).astype(np.float32)
    grid = rng.uniform(-1.1, 1.1, (2, 8, 8, 2)).astype(np.float32)
    got, want = (lib.nn.functional.grid_sample(lib.from_numpy(x), lib.from_numpy(grid),
                                               align_corners=False) for lib in (ember, torch))
    assert got.dtype is ember.float32
    np.testing.assert_allclose(_np(got), _np(want), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("call", [
    lambda L: L.nn.functional.grid_sample(L.ones(1, 1, 2, 2), L.zeros(1, 2, 2, 2),
                                          mode="area", align_corners=False),
    lambda L: L.nn.functional.grid_sample(L.ones(1, 1, 2, 2), L.zeros(1, 2, 2, 2),
                                          padding_mode="circular", align_corners=False),
    lambda L: L.nn.functional.grid_sample(L.ones(1, 1, 2, 2), L.zeros(1, 2, 2, 3),
                                          align_corners=False),
    lambda L: L.nn.functional.grid_sample(L.ones(1, 1, 2, 2, dtype=L.int64),
                                          L.zeros(1, 2, 2, 2, dtype=L.int64),
                                          align_corners=False),
    lambda L: L.nn.functional.affine_grid(L.ones(1, 2, 3, dtype=L.int64), [1, 1, 2, 2],
                                          align_corners=False),
    lambda L: L.nn.functional.affine_grid(L.ones(1, 2, 3), [1, 1, 2, 2, 2],
                                          align_corners=False),
    lambda L: L.nn.functional.affine_grid(L.ones(1, 2, 3), [1, 1, 2], align_corners=False),
    lambda L: L.nn.functional.affine_grid(L.ones(1, 2, 3), [1, 1, 0, 2], align_corners=False),
])
def test_exceptions_are_torchs(call):
    errs = []
    for lib in (ember, torch):
        with pytest.raises(Exception) as e:
            call(lib)
        errs.append(e.value)
    assert type(errs[0]) is type(errs[1]), errs
    if type(errs[0]) is ValueError:
        assert str(errs[0]).replace("ember", "torch") == str(errs[1])


def test_align_corners_none_warns_as_torch():
    for lib in (ember, torch):
        with pytest.warns(UserWarning, match="align_corners=False since 1.3.0"):
            lib.nn.functional.grid_sample(lib.ones(1, 1, 2, 2), lib.zeros(1, 1, 1, 2))
        with pytest.warns(UserWarning, match="align_corners=False since 1.3.0"):
            lib.nn.functional.affine_grid(lib.ones(1, 2, 3), [1, 1, 2, 2])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ember.nn.functional.grid_sample(ember.ones(1, 1, 2, 2), ember.zeros(1, 1, 1, 2),
                                        align_corners=True)


def test_spatial_transformer_compiles_as_eager():
    rng = np.random.default_rng(9)
    x = ember.from_numpy(rng.standard_normal((2, 3, 8, 8)).astype(np.float32))
    theta = ember.from_numpy((np.eye(2, 3) + rng.standard_normal((2, 2, 3)) * 0.1)
                             .astype(np.float32))

    def stn(x, theta):
        grid = ember.nn.functional.affine_grid(theta, list(x.shape), align_corners=False)
        return ember.nn.functional.grid_sample(x, grid, padding_mode="border",
                                               align_corners=False)
    want = stn(x, theta)
    got = ember.compile(stn, backend="aot_eager")(x, theta)
    np.testing.assert_allclose(_np(got), _np(want), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("padding_mode,align_corners", list(itertools.product(
    ["zeros", "border", "reflection"], [False, True])))
def test_bicubic_values_and_gradients_match_torch(dtype, padding_mode, align_corners):
    rng = np.random.default_rng(11)
    x = rng.standard_normal((2, 3, 5, 6)).astype(dtype)
    grid = rng.uniform(-1.3, 1.3, (2, 4, 3, 2)).astype(dtype)
    outs = []
    for lib in (ember, torch):
        X = lib.from_numpy(x.copy()).requires_grad_()
        G = lib.from_numpy(grid.copy()).requires_grad_()
        y = lib.nn.functional.grid_sample(X, G, mode="bicubic", padding_mode=padding_mode,
                                          align_corners=align_corners)
        (y * y).sum().backward()
        outs.append([_np(y), _np(X.grad), _np(G.grad)])
    for u, v in zip(*outs):
        assert u.dtype == v.dtype and u.shape == v.shape
        if dtype == "float64":
            np.testing.assert_allclose(u, v, rtol=1e-10, atol=1e-12)
        else:       # float32 sums of up to 16 terms per channel: rounding relative to the
            #         largest values (ember's are computed in double and rounded once)
            np.testing.assert_allclose(u, v, rtol=1e-5, atol=4e-6 * np.abs(v).max())


def test_bicubic_refuses_5d_input_as_torch():
    for lib in (ember, torch):
        with pytest.raises(RuntimeError, match="bicubic interpolation only supports 4D"):
            lib.nn.functional.grid_sample(lib.ones(1, 1, 2, 2, 2), lib.zeros(1, 1, 1, 1, 3),
                                          mode="bicubic", align_corners=False)


@pytest.mark.parametrize("nd,mode", [(4, "bilinear"), (4, "bicubic"), (5, "nearest"),
                                     (5, "bilinear")])
def test_one_and_two_threads_give_the_same_bits(nd, mode):
    """Large enough for the pool (fixed chunks), with 20 channels: three channel blocks
    of grad_input whose grad_grid shares are added in block order."""
    rng = np.random.default_rng(12)
    sp = (6, 20, 20) if nd == 5 else (40, 40)
    x = rng.standard_normal((3, 20) + sp).astype(np.float32)
    grid = rng.uniform(-1.1, 1.1, (3,) + sp + (nd - 2,)).astype(np.float32)
    res = []
    prev = ember.get_num_threads()
    try:
        for n in (1, 2):
            ember.set_num_threads(n)
            X = ember.from_numpy(x.copy()).requires_grad_()
            G = ember.from_numpy(grid.copy()).requires_grad_()
            y = ember.nn.functional.grid_sample(X, G, mode=mode, padding_mode="reflection",
                                                align_corners=False)
            (y * y).sum().backward()
            res.append([_np(y), _np(X.grad), _np(G.grad)])
    finally:
        ember.set_num_threads(prev)
    for u, v in zip(*res):
        assert u.tobytes() == v.tobytes()
