"""The eager convolution's blocked loops (conv.c): columns gathered per cache-sized block
of output positions and multiplied by BLAS per block, images on the thread pool; the
stride-1 transposed convolution as a forward one with the weight flipped; the fused
weight gradient (_C._grad_conv_weight). Values and gradients against torch across
strides, padding, dilation, groups, 1-d, 1x1 and blocks that end mid-row; identical at
1 and 2 threads."""
import numpy as np
import pytest

import ember
from ember import _C

torch = pytest.importorskip("torch", reason="torch is the reference")

GEOMS = [
    # (N, C, H, W, Cout, k, stride, padding, dilation, groups)
    (2, 3, 9, 11, 4, 3, 1, 1, 1, 1),
    (3, 4, 10, 7, 6, 3, 2, 1, 1, 2),
    (2, 6, 12, 12, 6, 3, 1, 2, 2, 3),
    (2, 8, 5, 5, 8, 1, 1, 0, 1, 1),          # 1x1: no gather
    (1, 2, 7, 9, 3, (2, 3), (2, 1), (0, 1), 1, 1),
    (2, 96, 30, 29, 5, 3, 1, 1, 1, 1),       # Cin*K = 864: blocks of 64 positions
    (2, 4, 6, 6, 2, 3, 1, 0, 1, 1),
]


def _both(geom, dtype=np.float32, transposed=False):
    N, C, H, W, Co, k, s, p, d, g = geom
    kh, kw = (k, k) if isinstance(k, int) else k
    rng = np.random.default_rng(hash(geom) % 2**32)
    x = rng.standard_normal((N, C, H, W)).astype(dtype)
    if transposed:
        w = rng.standard_normal((C, Co // g, kh, kw)).astype(dtype)
    else:
        w = rng.standard_normal((Co, C // g, kh, kw)).astype(dtype)
    out = []
    for lib in (ember, torch):
        xt = lib.from_numpy(x.copy()).requires_grad_()
        wt = lib.from_numpy(w.copy()).requires_grad_()
        f = lib.nn.functional.conv_transpose2d if transposed else lib.nn.functional.conv2d
        y = f(xt, wt, None, s, p, dilation=d, groups=g)
        gy = np.random.default_rng(1).standard_normal(tuple(y.shape)).astype(dtype)
        y.backward(lib.from_numpy(gy))
        out.append([y.detach().numpy(), xt.grad.numpy(), wt.grad.numpy()])
    return out


@pytest.mark.parametrize("geom", GEOMS, ids=str)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_conv2d_values_and_gradients_match_torch(geom, dtype):
    e, t = _both(geom, dtype)
    tol = 1e-4 if dtype == np.float32 else 1e-10
    for a, b in zip(e, t):
        np.testing.assert_allclose(a, b, rtol=tol, atol=tol)


@pytest.mark.parametrize("geom", GEOMS[:4], ids=str)
def test_conv_transpose2d_values_and_gradients_match_torch(geom):
    e, t = _both(geom, transposed=True)
    for a, b in zip(e, t):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)


def test_conv1d_weight_gradient():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((3, 4, 50)).astype(np.float32)
    w = rng.standard_normal((5, 4, 3)).astype(np.float32)
    grads = []
    for lib in (ember, torch):
        wt = lib.from_numpy(w.copy()).requires_grad_()
        lib.nn.functional.conv1d(lib.from_numpy(x.copy()), wt, padding=1, stride=2).sum().backward()
        grads.append(wt.grad.numpy())
    np.testing.assert_allclose(grads[0], grads[1], rtol=1e-4, atol=1e-4)


def test_weight_gradient_kernel_declines_what_it_does_not_handle():
    x, g = ember.randn(2, 3, 8, 8), ember.randn(2, 4, 8, 8)
    with ember.no_grad():
        assert _C._grad_conv_weight(x, g, 3, 3, (1, 1), (1, 1), (1, 1), 1) is not None
        assert _C._grad_conv_weight(x, g, 3, 3, (1, 1), (0, 0), (1, 1), 1) is None  # sizes
        assert _C._grad_conv_weight(x.double(), g, 3, 3, (1, 1), (1, 1), (1, 1), 1) is None
    assert _C._grad_conv_weight(x, g, 3, 3, (1, 1), (1, 1), (1, 1), 1) is None  # grad mode


def test_double_backward_through_conv_uses_the_formula():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 3, 6, 6)).astype(np.float64)
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float64)
    res = []
    for lib in (ember, torch):
        xt = lib.from_numpy(x.copy()).requires_grad_()
        wt = lib.from_numpy(w.copy()).requires_grad_()
        y = lib.nn.functional.conv2d(xt, wt, padding=1)
        (gw,) = lib.autograd.grad((y * y).sum(), wt, create_graph=True)
        (gx,) = lib.autograd.grad(gw.sum(), xt)
        res.append(gx.numpy())
    np.testing.assert_allclose(res[0], res[1], rtol=1e-10, atol=1e-10)


def test_channels_last_and_non_contiguous_inputs():
    rng = np.random.default_rng(4)
    x = rng.standard_normal((2, 6, 9, 9)).astype(np.float32)
    w = rng.standard_normal((4, 6, 3, 3)).astype(np.float32)
    ys = []
    for lib in (ember, torch):
        xt = lib.from_numpy(x.copy()).requires_grad_()
        xc = xt.permute(0, 2, 3, 1).contiguous().permute(0, 3, 1, 2)    # channels-last
        wt = lib.from_numpy(w.copy()).requires_grad_()
        y = lib.nn.functional.conv2d(xc[:, ::2], wt[:, ::2], padding=1)
        y.sum().backward()
        ys += [y.detach().numpy(), xt.grad.numpy(), wt.grad.numpy()]
    for a, b in zip(ys[:3], ys[3:]):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)


def test_empty_batch_and_channels():
    for shape, wshape in (((0, 3, 5, 5), (4, 3, 3, 3)), ((2, 0, 5, 5), (4, 0, 3, 3))):
        x = ember.zeros(shape, requires_grad=True)
        w = ember.zeros(wshape, requires_grad=True)
        y = ember.nn.functional.conv2d(x, w, padding=1)
        y.sum().backward()
        assert tuple(y.shape) == (shape[0], 4, 5, 5)
        assert tuple(w.grad.shape) == wshape and not w.grad.numpy().any()


def test_identical_at_one_and_two_threads():
    rng = np.random.default_rng(5)
    x = rng.standard_normal((8, 16, 20, 20)).astype(np.float32)
    w = rng.standard_normal((16, 16, 3, 3)).astype(np.float32)
    wt_ = rng.standard_normal((16, 8, 3, 3)).astype(np.float32)
    before = ember.get_num_threads()

    def run():
        xt = ember.from_numpy(x.copy()).requires_grad_()
        wt = ember.from_numpy(w.copy()).requires_grad_()
        y = ember.nn.functional.conv2d(xt, wt, padding=1, stride=1)
        y.backward(ember.from_numpy(x.copy()))
        t = ember.nn.functional.conv_transpose2d(ember.from_numpy(x), ember.from_numpy(wt_),
                                                 stride=2, padding=1)
        return [y.detach().numpy(), xt.grad.numpy(), wt.grad.numpy(), t.numpy()]
    try:
        ember.set_num_threads(1)
        one = run()
        ember.set_num_threads(2)
        two = run()
    finally:
        ember.set_num_threads(before)
    for a, b in zip(one, two):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("features, level", [("+sse4.2,+avx,+avx2,+fma", 1),
                                             ("+sse4.2", 0)])
def test_narrower_loops_match_torch(features, level):
    """The AVX2 and generic register tiles (conv_loops.c), reached on any host through
    EMBER_LLVM_FEATURES (the switch that narrows the JIT's vectors): this module's value
    and gradient tests run in a process on that path."""
    import os
    import subprocess
    import sys
    if _C._conv_loops_level() < level:
        pytest.skip("the host has not even this path")
    env = dict(os.environ, EMBER_LLVM_FEATURES=features)
    probe = subprocess.run([sys.executable, "-c",
                            "from ember import _C; print(_C._conv_loops_level())"],
                           env=env, capture_output=True, text=True, check=True)
    assert int(probe.stdout) == level
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                        __file__, "-k", "match_torch and not narrower"],
                       env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    assert " passed" in r.stdout


@pytest.mark.parametrize("shape", [(16, 32, 4, 4), (7, 8, 5, 3), (3, 16, 2, 9)])
def test_weight_gradient_of_small_images_in_units_of_several(shape):
    """Images of fewer than 128 output positions go several to a unit of work (one deeper
    product per group): the weight gradient agrees with torch's and is identical at 1 and
    2 threads."""
    N, C, H, W = shape
    rng = np.random.default_rng(4)
    x = rng.standard_normal(shape).astype(np.float32)
    w = rng.standard_normal((24, C // 2, 3, 3)).astype(np.float32)
    g = rng.standard_normal((N, 24, H, W)).astype(np.float32)
    before = ember.get_num_threads()
    outs = []
    try:
        for threads in (1, 2):
            ember.set_num_threads(threads)
            with ember.no_grad():
                outs.append(_C._grad_conv_weight(ember.from_numpy(x), ember.from_numpy(g),
                                                 3, 3, (1, 1), (1, 1), (1, 1), 2).numpy())
    finally:
        ember.set_num_threads(before)
    np.testing.assert_array_equal(outs[0], outs[1])
    tx = torch.from_numpy(x).requires_grad_()
    tw = torch.from_numpy(w).requires_grad_()
    torch.nn.functional.conv2d(tx, tw, padding=1, groups=2).backward(torch.from_numpy(g))
    np.testing.assert_allclose(outs[0], tw.grad.numpy(), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("shape", [(16, 32, 4, 4), (9, 8, 6, 5)])
def test_forward_and_input_gradient_of_small_images_in_units_of_several(shape):
    """The forward convolution (and the stride-1 input gradient, a forward convolution
    with the weight flipped) of small float32 images in units of several images: equal
    to torch's, identical at 1 and 2 threads."""
    N, C, H, W = shape
    rng = np.random.default_rng(5)
    x = rng.standard_normal(shape).astype(np.float32)
    w = rng.standard_normal((12, C, 3, 3)).astype(np.float32)
    g = rng.standard_normal((N, 12, H, W)).astype(np.float32)
    before = ember.get_num_threads()
    outs = []
    try:
        for threads in (1, 2):
            ember.set_num_threads(threads)
            ex = ember.from_numpy(x).requires_grad_()
            y = ember.nn.functional.conv2d(ex, ember.from_numpy(w), padding=1)
            y.backward(ember.from_numpy(g))
            outs.append((y.detach().numpy(), ex.grad.numpy()))
    finally:
        ember.set_num_threads(before)
    for u, v in zip(*outs):
        np.testing.assert_array_equal(u, v)
    tx = torch.from_numpy(x).requires_grad_()
    ty = torch.nn.functional.conv2d(tx, torch.from_numpy(w), padding=1)
    ty.backward(torch.from_numpy(g))
    np.testing.assert_allclose(outs[0][0], ty.detach().numpy(), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(outs[0][1], tx.grad.numpy(), rtol=1e-4, atol=1e-4)
