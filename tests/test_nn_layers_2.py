"""nn layers and utilities, second part ([eager-2]), against PyTorch with state_dicts
copied across by name: padding layers, instance norm, local response norm, batch norm
3-d, 3-d convolution and pooling, adaptive max pooling, every interpolate mode and
Upsample, pixel/channel shuffle, the recurrent cells, LSTM projections, packed sequences
(nn.utils.rnn and the recurrent layers' packed input), clip_grad_value_."""
import warnings

import numpy as np
import pytest

import ember
import ember.nn as nn
import ember.nn.functional as F
from ember.nn.utils import rnn as rnn_utils

from test_nn_layers import check_layer, copy_weights, randn, rng_for


# ================================================================== padding


PADS = [("ReflectionPad1d", 2, (2, 4, 5)), ("ReflectionPad1d", (1, 3), (4, 5)),
        ("ReflectionPad2d", (1, 2, 0, 3), (2, 3, 4, 5)), ("ReflectionPad2d", 2, (3, 4, 5)),
        ("ReflectionPad3d", (1, 2, 0, 1, 2, 1), (2, 2, 3, 4, 5)),
        ("ReflectionPad3d", 1, (2, 3, 3, 4)),
        ("ReplicationPad1d", (3, 1), (2, 3, 4)), ("ReplicationPad2d", (1, 2, 3, 0), (2, 2, 3, 4)),
        ("ReplicationPad3d", 2, (1, 2, 2, 3, 4)), ("ReplicationPad3d", (0, 1, 2, 0, 1, 3),
                                                   (2, 2, 3, 3)),
        ("CircularPad1d", (1, 2), (2, 3, 4)), ("CircularPad2d", 1, (2, 3, 4, 5)),
        ("CircularPad3d", (1, 0, 2, 1, 0, 1), (1, 2, 3, 3, 4)),
        ("ZeroPad1d", (2, -1), (2, 3, 4)), ("ZeroPad2d", 2, (2, 3, 4, 5)),
        ("ZeroPad2d", (1, -1, 2, 0), (3, 4, 5)),
        ("ZeroPad3d", (1, 2, 0, 1, 2, 0), (1, 2, 3, 4, 2))]


@pytest.mark.parametrize("name,padding,shape", PADS,
                         ids=[f"{n}-{i}" for i, (n, _, _) in enumerate(PADS)])
def test_padding_layers(torch, name, padding, shape):
    rng = rng_for(name, padding, shape)
    tm, em = getattr(torch.nn, name)(padding), getattr(nn, name)(padding)
    assert repr(em) == repr(tm) and em.padding == tm.padding
    check_layer(torch, tm, em, [randn(rng, *shape)])


@pytest.mark.parametrize("nd", [1, 2, 3])
def test_constant_pad(torch, nd):
    rng = rng_for("constpad", nd)
    shape = (2, 3, 4, 5, 3)[:nd + 2]
    for padding, value in ((1, 3.5), (tuple(range(1, 2 * nd + 1)), -1.0)):
        tm = getattr(torch.nn, f"ConstantPad{nd}d")(padding, value)
        em = getattr(nn, f"ConstantPad{nd}d")(padding, value)
        assert repr(em) == repr(tm)
        check_layer(torch, tm, em, [randn(rng, *shape)])


def test_padding_errors_match_torch(torch):
    cases = [("ReflectionPad2d", 3, (1, 2, 3, 3)), ("CircularPad2d", 1, (3, 3)),
             ("ReplicationPad3d", 1, (2, 3)), ("CircularPad1d", 5, (1, 2, 3))]
    for name, padding, shape in cases:
        with pytest.raises(Exception) as t:
            getattr(torch.nn, name)(padding)(torch.ones(*shape))
        with pytest.raises(Exception) as e:
            getattr(nn, name)(padding)(ember.ones(*shape))
        assert type(e.value) is type(t.value), (name, e.value, t.value)


def test_functional_pad_3d_modes(torch):
    rng = rng_for("pad3d")
    x = randn(rng, 2, 2, 3, 4, 5)
    for mode in ("reflect", "replicate", "circular", "constant"):
        for pad in ((1, 2, 0, 1, 2, 1), (2, 2, 2, 2, 2, 2)):
            want = torch.nn.functional.pad(torch.from_numpy(x), pad, mode=mode).numpy()
            got = F.pad(ember.from_numpy(x), pad, mode=mode).numpy()
            np.testing.assert_array_equal(got, want, err_msg=f"{mode} {pad}")


# ================================================================== normalisation


@pytest.mark.parametrize("nd", [1, 2, 3])
@pytest.mark.parametrize("kw", [dict(), dict(affine=True), dict(track_running_stats=True),
                                dict(affine=True, track_running_stats=True, momentum=0.3),
                                dict(affine=True, bias=False, eps=1e-3)],
                         ids=["plain", "affine", "stats", "affine-stats", "no-bias"])
def test_instance_norm(torch, nd, kw):
    rng = rng_for("in", nd, str(kw))
    shape = (3, 4, 5, 3, 4)[:nd + 2]
    tm = getattr(torch.nn, f"InstanceNorm{nd}d")(4, **kw)
    em = getattr(nn, f"InstanceNorm{nd}d")(4, **kw)
    assert repr(em) == repr(tm)
    if kw.get("affine"):
        with torch.no_grad():
            tm.weight.copy_(torch.from_numpy(randn(rng, 4)))
            if tm.bias is not None:
                tm.bias.copy_(torch.from_numpy(randn(rng, 4)))
    for _ in range(3):                 # training steps (running statistics updated)
        check_layer(torch, tm, em, [randn(rng, *shape) * 2 + 1])
        tm.zero_grad()
        em.zero_grad()
    if kw.get("track_running_stats"):
        for name in ("running_mean", "running_var"):
            np.testing.assert_allclose(getattr(em, name).numpy(),
                                       getattr(tm, name).numpy(), rtol=1e-5, atol=1e-6)
        assert em.num_batches_tracked.item() == tm.num_batches_tracked.item()
    tm.eval()
    em.eval()
    check_layer(torch, tm, em, [randn(rng, *shape)])
    check_layer(torch, tm, em, [randn(rng, *shape[1:])])          # unbatched


def test_instance_norm_functional_and_errors(torch):
    rng = rng_for("in functional")
    x = randn(rng, 2, 3, 6)
    rm, rv = randn(rng, 3), np.abs(randn(rng, 3)) + 0.5
    erm, erv = ember.from_numpy(rm.copy()), ember.from_numpy(rv.copy())
    trm, trv = torch.from_numpy(rm.copy()), torch.from_numpy(rv.copy())
    got = F.instance_norm(ember.from_numpy(x), erm, erv, momentum=0.2)
    want = torch.nn.functional.instance_norm(torch.from_numpy(x), trm, trv, momentum=0.2)
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(erm.numpy(), trm.numpy(), rtol=1e-6)
    np.testing.assert_allclose(erv.numpy(), trv.numpy(), rtol=1e-6)
    got = F.instance_norm(ember.from_numpy(x), erm, erv, use_input_stats=False)
    want = torch.nn.functional.instance_norm(torch.from_numpy(x), trm, trv,
                                             use_input_stats=False)
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="more than 1 spatial element"):
        F.instance_norm(ember.ones(2, 3, 1))
    with pytest.raises(ValueError, match="expected 3D or 4D input"):
        nn.InstanceNorm2d(3)(ember.ones(2, 3))
    with pytest.raises(ValueError, match="to match num_features"):
        nn.InstanceNorm1d(3, affine=True)(ember.ones(2, 4, 5))
    with pytest.warns(UserWarning, match="does not match num_features"):
        nn.InstanceNorm1d(3)(ember.ones(2, 4, 5))


def test_local_response_norm(torch):
    rng = rng_for("lrn")
    for kw, shape in ((dict(size=2), (2, 5, 6)), (dict(size=3, alpha=1e-2, beta=0.5, k=2.0),
                                                  (2, 6, 3, 4)),
                      (dict(size=4), (1, 5, 2, 3, 2))):
        tm, em = torch.nn.LocalResponseNorm(**kw), nn.LocalResponseNorm(**kw)
        assert repr(em) == repr(tm)
        check_layer(torch, tm, em, [randn(rng, *shape)])
    with pytest.raises(ValueError, match="3D or higher"):
        F.local_response_norm(ember.ones(2, 3), 2)


def test_batch_norm_3d(torch):
    rng = rng_for("bn3d")
    tm, em = torch.nn.BatchNorm3d(3), nn.BatchNorm3d(3)
    for _ in range(2):
        check_layer(torch, tm, em, [randn(rng, 2, 3, 3, 2, 4) + 1])
        tm.zero_grad()
        em.zero_grad()
    np.testing.assert_allclose(em.running_var.numpy(), tm.running_var.numpy(), rtol=1e-5)
    tm.eval()
    em.eval()
    check_layer(torch, tm, em, [randn(rng, 2, 3, 3, 2, 4)])
    with pytest.raises(ValueError, match="expected 5D input"):
        em(ember.ones(2, 3, 4, 4))


# ================================================================== 3-d convolution, pooling


@pytest.mark.parametrize("kw", [dict(), dict(stride=2, padding=1),
                                dict(stride=(1, 2, 1), padding=(1, 0, 2), dilation=(2, 1, 1),
                                     groups=2, bias=False),
                                dict(padding="same", dilation=(1, 2, 1)),
                                dict(padding=1, padding_mode="reflect"),
                                dict(padding=(1, 0, 1), padding_mode="circular")])
def test_conv3d(torch, kw):
    rng = rng_for("conv3d", str(kw))
    tm, em = torch.nn.Conv3d(4, 6, (3, 2, 3), **kw), nn.Conv3d(4, 6, (3, 2, 3), **kw)
    assert repr(em) == repr(tm)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        check_layer(torch, tm, em, [randn(rng, 2, 4, 5, 6, 5)])
        check_layer(torch, tm, em, [randn(rng, 4, 5, 4, 6)])       # unbatched


@pytest.mark.parametrize("kw", [dict(), dict(stride=2, padding=1, output_padding=1),
                                dict(stride=(2, 1, 2), padding=(0, 1, 1), dilation=(1, 2, 1),
                                     groups=2, bias=False, output_padding=(1, 0, 0))])
def test_conv_transpose3d(torch, kw):
    rng = rng_for("convT3d", str(kw))
    tm = torch.nn.ConvTranspose3d(4, 6, 3, **kw)
    em = nn.ConvTranspose3d(4, 6, 3, **kw)
    check_layer(torch, tm, em, [randn(rng, 2, 4, 3, 4, 3)])
    check_layer(torch, tm, em, [randn(rng, 4, 2, 3, 3)])


def test_conv_transpose3d_output_size(torch):
    rng = rng_for("convT3d size")
    tm = torch.nn.ConvTranspose3d(2, 3, 3, stride=2, padding=1)
    em = nn.ConvTranspose3d(2, 3, 3, stride=2, padding=1)
    check_layer(torch, tm, em, [randn(rng, 1, 2, 3, 3, 3)],
                call=lambda m, x: m(x, output_size=[6, 5, 6]))


def test_pooling_3d(torch):
    rng = rng_for("pool3d")
    x = [randn(rng, 2, 3, 7, 6, 5)]
    for tm, em in (
            (torch.nn.MaxPool3d(2), nn.MaxPool3d(2)),
            (torch.nn.MaxPool3d((3, 2, 3), (2, 1, 2), 1, ceil_mode=True, return_indices=True),
             nn.MaxPool3d((3, 2, 3), (2, 1, 2), 1, ceil_mode=True, return_indices=True)),
            (torch.nn.MaxPool3d(2, 1, dilation=(2, 1, 2)), nn.MaxPool3d(2, 1, dilation=(2, 1, 2))),
            (torch.nn.AvgPool3d(3, 2, 1), nn.AvgPool3d(3, 2, 1)),
            (torch.nn.AvgPool3d(3, 2, 1, ceil_mode=True, count_include_pad=False),
             nn.AvgPool3d(3, 2, 1, ceil_mode=True, count_include_pad=False)),
            (torch.nn.AvgPool3d(2, divisor_override=3), nn.AvgPool3d(2, divisor_override=3))):
        assert repr(em) == repr(tm)
        check_layer(torch, tm, em, x)
        check_layer(torch, tm, em, [x[0][0]])                        # unbatched
    for size in (1, (3, 2, 4), (None, 4, 2)):
        check_layer(torch, torch.nn.AdaptiveAvgPool3d(size), nn.AdaptiveAvgPool3d(size), x)
        check_layer(torch, torch.nn.AdaptiveMaxPool3d(size, return_indices=True),
                    nn.AdaptiveMaxPool3d(size, return_indices=True), x)
    for size in (1, (3, 4), (None, 2), 5):
        check_layer(torch, torch.nn.AdaptiveMaxPool2d(size, return_indices=True),
                    nn.AdaptiveMaxPool2d(size, return_indices=True), [x[0][0]])
    check_layer(torch, torch.nn.AdaptiveMaxPool1d(3, return_indices=True),
                nn.AdaptiveMaxPool1d(3, return_indices=True), [randn(rng, 2, 3, 8)])


def test_max_pool_3d_ties_nan_and_infinities(torch):
    """PyTorch's rule: the first maximum of a window, a NaN wins (the last one); a window
    of -inf picks its first position; the gradient goes to the chosen index."""
    x = np.zeros((1, 2, 4, 4, 4), dtype=np.float32)
    x[0, 0, 1, 1, 1] = x[0, 0, 1, 1, 2] = np.nan
    x[0, 1] = -np.inf
    x[0, 1, 3, 3, 3] = 1.0
    for lib_e, lib_t in ((nn.MaxPool3d(2, 1, 1, return_indices=True),
                          torch.nn.MaxPool3d(2, 1, 1, return_indices=True)),
                         (nn.AdaptiveMaxPool3d(3, return_indices=True),
                          torch.nn.AdaptiveMaxPool3d(3, return_indices=True))):
        ev, ei = lib_e(ember.from_numpy(x))
        tv, ti = lib_t(torch.from_numpy(x))
        np.testing.assert_array_equal(ev.numpy(), tv.numpy())
        np.testing.assert_array_equal(ei.numpy(), ti.numpy())
    check_layer(torch, torch.nn.MaxPool3d(2), nn.MaxPool3d(2),
                [np.zeros((1, 1, 2, 2, 2), dtype=np.float32)])


def test_pool_3d_errors_match_torch(torch):
    cases = [(lambda L, x: L.nn.functional.max_pool3d(x, 2, padding=2), (1, 2, 3, 3, 3)),
             (lambda L, x: L.nn.functional.max_pool3d(x, 4), (1, 2, 3, 3, 3)),
             (lambda L, x: L.nn.functional.max_pool3d(x, (2, 2)), (1, 2, 3, 3, 3)),
             (lambda L, x: L.nn.functional.avg_pool3d(x, 4), (1, 2, 3, 3, 3)),
             (lambda L, x: L.nn.functional.avg_pool3d(x, 2), (2, 3, 3)),
             (lambda L, x: L.nn.functional.adaptive_avg_pool3d(x, 2), (2, 3, 3)),
             (lambda L, x: L.nn.functional.adaptive_max_pool2d(x, 2), (2, 3)),
             (lambda L, x: L.nn.functional.conv3d(x, L.ones(3, 2, 2, 2, 2)), (1, 3, 4, 4, 4))]
    for fn, shape in cases:
        with pytest.raises(Exception) as t:
            fn(torch, torch.ones(*shape))
        with pytest.raises(Exception) as e:
            fn(ember, ember.ones(*shape))
        assert type(e.value) is type(t.value) and str(t.value) in str(e.value), \
            (e.value, t.value)


# ================================================================== resampling


INTERP = [
    ((2, 3, 5, 6), dict(scale_factor=2, mode="bicubic")),
    ((2, 3, 5, 6), dict(size=(7, 4), mode="bicubic", align_corners=True)),
    ((2, 3, 5, 6), dict(scale_factor=1.6, mode="bicubic")),
    ((2, 3, 5, 6), dict(scale_factor=(0.6, 1.5), mode="bicubic", recompute_scale_factor=True)),
    ((1, 2, 3, 4, 5), dict(scale_factor=2, mode="trilinear")),
    ((1, 2, 3, 4, 5), dict(size=(5, 2, 7), mode="trilinear", align_corners=True)),
    ((1, 2, 3, 4, 5), dict(scale_factor=(1.5, 2, 0.7), mode="trilinear")),
    ((1, 2, 3, 4, 5), dict(scale_factor=2)),
    ((1, 2, 3, 4, 5), dict(size=(5, 3, 7))),
    ((1, 2, 3, 4, 5), dict(size=(5, 3, 7), mode="nearest-exact")),
    ((2, 3, 5, 6), dict(scale_factor=1.7, mode="nearest-exact")),
    ((2, 3, 7), dict(size=11, mode="nearest-exact")),
    ((1, 2, 6, 4, 5), dict(size=(3, 2, 4), mode="area")),
    ((1, 2, 6, 4, 5), dict(scale_factor=0.5, mode="area")),
    ((2, 3, 7), dict(scale_factor=1.5, mode="linear")),
]


@pytest.mark.parametrize("shape,kw", INTERP, ids=[str(i) for i in range(len(INTERP))])
def test_interpolate_modes(torch, shape, kw):
    rng = rng_for("interp2", shape, str(kw))
    x = randn(rng, *shape)
    t = torch.from_numpy(x).requires_grad_(True)
    e = ember.from_numpy(x.copy()).requires_grad_(True)
    tr, er = torch.nn.functional.interpolate(t, **kw), F.interpolate(e, **kw)
    assert tuple(er.shape) == tuple(tr.shape)
    np.testing.assert_allclose(er.detach().numpy(), tr.detach().numpy(), rtol=1e-5, atol=2e-6)
    g = randn(rng, *tr.shape)
    tr.backward(torch.from_numpy(g))
    er.backward(ember.from_numpy(g))
    np.testing.assert_allclose(e.grad.numpy(), t.grad.numpy(), rtol=1e-5, atol=1e-5)


def test_interpolate_uint8_bicubic_matches_torch_exactly(torch):
    """PyTorch's uint8 bicubic runs a fixed-point two-pass kernel (int16 weights, each
    pass rounded and clamped): reproduced exactly."""
    rng = np.random.default_rng(3)
    for channels in (3, 6):
        x = rng.integers(0, 256, size=(2, channels, 5, 6)).astype(np.uint8)
        for kw in (dict(size=(10, 12)), dict(size=(3, 4)), dict(size=(7, 9),
                                                                align_corners=True),
                   dict(scale_factor=(1.7, 2.2))):
            want = torch.nn.functional.interpolate(torch.from_numpy(x), mode="bicubic", **kw)
            got = F.interpolate(ember.from_numpy(x), mode="bicubic", **kw)
            assert got.dtype is ember.uint8
            np.testing.assert_array_equal(got.numpy(), want.numpy(), err_msg=str(kw))


def test_interpolate_errors_match_torch(torch):
    cases = [((1, 2, 3, 3), dict(scale_factor=2, mode="trilinear")),
             ((1, 2, 3, 3, 3), dict(scale_factor=2, mode="bicubic")),
             ((1, 2, 3), dict(scale_factor=2, mode="bilinear")),
             ((1, 2, 3, 3), dict(size=(2, 2, 2))),
             ((1, 2, 3, 3), dict(size=2, recompute_scale_factor=True)),
             ((1, 2, 3, 3), dict(scale_factor=2, mode="nearest", align_corners=True)),
             ((1, 2, 3, 3, 3), dict(scale_factor=2, mode="trilinear", antialias=True))]
    for shape, kw in cases:
        with pytest.raises(Exception) as t:
            torch.nn.functional.interpolate(torch.ones(*shape), **kw)
        with pytest.raises(Exception) as e:
            F.interpolate(ember.ones(*shape), **kw)
        assert type(e.value) is type(t.value) and str(e.value) == str(t.value), kw


@pytest.mark.parametrize("kw", [dict(scale_factor=2), dict(scale_factor=2, mode="bicubic"),
                                dict(size=(6, 7), mode="bilinear", align_corners=True),
                                dict(scale_factor=(1.5, 2), mode="nearest-exact")])
def test_upsample_layers(torch, kw):
    rng = rng_for("upsample", str(kw))
    tm, em = torch.nn.Upsample(**kw), nn.Upsample(**kw)
    assert repr(em) == repr(tm)
    check_layer(torch, tm, em, [randn(rng, 2, 3, 4, 5)])
    check_layer(torch, torch.nn.Upsample(scale_factor=2, mode="trilinear"),
                nn.Upsample(scale_factor=2, mode="trilinear"), [randn(rng, 1, 2, 3, 2, 4)])
    check_layer(torch, torch.nn.UpsamplingNearest2d(scale_factor=3),
                nn.UpsamplingNearest2d(scale_factor=3), [randn(rng, 1, 2, 3, 2)])
    check_layer(torch, torch.nn.UpsamplingBilinear2d(size=(5, 7)),
                nn.UpsamplingBilinear2d(size=(5, 7)), [randn(rng, 1, 2, 3, 2)])


# ================================================================== shuffles


def test_pixel_and_channel_shuffle(torch):
    rng = rng_for("shuffle")
    for tm, em, shape in ((torch.nn.PixelShuffle(2), nn.PixelShuffle(2), (2, 12, 3, 4)),
                          (torch.nn.PixelShuffle(3), nn.PixelShuffle(3), (9, 2, 2)),
                          (torch.nn.PixelUnshuffle(2), nn.PixelUnshuffle(2), (2, 3, 4, 6)),
                          (torch.nn.PixelShuffle(2), nn.PixelShuffle(2), (2, 2, 8, 3, 2)),
                          (torch.nn.ChannelShuffle(3), nn.ChannelShuffle(3), (2, 6, 3, 2)),
                          (torch.nn.ChannelShuffle(2), nn.ChannelShuffle(2), (2, 4, 5))):
        assert repr(em) == repr(tm)
        check_layer(torch, tm, em, [randn(rng, *shape)], rtol=0, atol=0)
    x = randn(rng, 2, 8, 4, 6)
    back = F.pixel_unshuffle(F.pixel_shuffle(ember.from_numpy(x), 2), 2)
    np.testing.assert_array_equal(back.numpy(), x)


# ================================================================== recurrent


CELLS = [(c, kw) for c in ("RNNCell", "LSTMCell", "GRUCell")
         for kw in (dict(), dict(bias=False))] + [("RNNCell", dict(nonlinearity="relu"))]


@pytest.mark.parametrize("cls,kw", CELLS, ids=[f"{c}-{i}" for i, (c, _) in enumerate(CELLS)])
def test_cells(torch, cls, kw):
    rng = rng_for(cls, str(kw))
    tm, em = getattr(torch.nn, cls)(3, 5, **kw), getattr(nn, cls)(3, 5, **kw)
    assert repr(em) == repr(tm)
    check_layer(torch, tm, em, [randn(rng, 4, 3)])
    check_layer(torch, tm, em, [randn(rng, 3)])                      # unbatched
    if cls == "LSTMCell":
        check_layer(torch, tm, em, [randn(rng, 4, 3), randn(rng, 4, 5), randn(rng, 4, 5)],
                    call=lambda m, x, h, c: m(x, (h, c)))
        check_layer(torch, tm, em, [randn(rng, 3), randn(rng, 5), randn(rng, 5)],
                    call=lambda m, x, h, c: m(x, (h, c)))
    else:
        check_layer(torch, tm, em, [randn(rng, 4, 3), randn(rng, 4, 5)])
        check_layer(torch, tm, em, [randn(rng, 3), randn(rng, 5)])


def test_cell_sequence_loop_gradients(torch):
    """An LSTMCell unrolled over a sequence, the way cell-based models run it."""
    rng = rng_for("cell loop")
    tm, em = torch.nn.LSTMCell(3, 4), nn.LSTMCell(3, 4)

    def run(m, x):
        h = c = None
        outs = []
        for t in range(x.shape[0]):
            h, c = m(x[t], None if h is None else (h, c))
            outs.append(h)
        return outs[-1], c
    check_layer(torch, tm, em, [randn(rng, 6, 2, 3)], call=run)


def test_cell_errors_match_torch(torch):
    cases = [lambda L: L.nn.GRUCell(3, 4)(L.ones(2, 5)),
             lambda L: L.nn.GRUCell(3, 4)(L.ones(2, 3), L.ones(2, 5)),
             lambda L: L.nn.LSTMCell(3, 4)(L.ones(2, 3, 1)),
             lambda L: L.nn.RNNCell(3, 4)(L.ones(2, 3), L.ones(3, 4)),
             lambda L: L.nn.LSTMCell(3, 4)(L.ones(2, 3), (L.ones(2, 4), L.ones(2, 2, 4)))]
    for fn in cases:
        with pytest.raises(Exception) as t:
            fn(torch)
        with pytest.raises(Exception) as e:
            fn(ember)
        assert type(e.value) is type(t.value), (e.value, t.value)


@pytest.mark.parametrize("kw", [dict(proj_size=2), dict(proj_size=3, num_layers=2,
                                                        bidirectional=True),
                                dict(proj_size=1, batch_first=True, bias=False)])
def test_lstm_projections(torch, kw):
    rng = rng_for("lstm proj", str(kw))
    tm, em = torch.nn.LSTM(3, 5, **kw), nn.LSTM(3, 5, **kw)
    assert repr(em) == repr(tm)
    x = randn(rng, 2, 4, 3) if kw.get("batch_first") else randn(rng, 4, 2, 3)
    check_layer(torch, tm, em, [x])
    L = kw.get("num_layers", 1) * (2 if kw.get("bidirectional") else 1)
    h0, c0 = randn(rng, L, 2, kw["proj_size"]), randn(rng, L, 2, 5)
    check_layer(torch, tm, em, [x, h0, c0], call=lambda m, x, h, c: m(x, (h, c)))
    with pytest.raises(RuntimeError, match=r"Expected hidden\[0\] size"):
        em(ember.from_numpy(x), (ember.zeros(L, 2, 5), ember.zeros(L, 2, 5)))
    with pytest.raises(ValueError, match="proj_size has to be smaller"):
        nn.LSTM(3, 5, proj_size=5)
    with pytest.raises(ValueError, match="only supported for LSTM"):
        nn.GRU(3, 5, proj_size=2)


# ------------------------------------------------------------------ packed sequences


def _padded(rng, lengths, feat=3, batch_first=False):
    T, B = max(lengths), len(lengths)
    x = randn(rng, B, T, feat)
    for b, n in enumerate(lengths):
        x[b, n:] = 0
    return x if batch_first else np.ascontiguousarray(x.transpose(1, 0, 2))


def _same_packed(e, t):
    np.testing.assert_allclose(e.data.detach().numpy(), t.data.detach().numpy(), rtol=1e-5,
                               atol=1e-6)
    assert e.batch_sizes.tolist() == t.batch_sizes.tolist()
    for a, b in ((e.sorted_indices, t.sorted_indices),
                 (e.unsorted_indices, t.unsorted_indices)):
        assert (a is None) == (b is None)
        if a is not None:
            assert a.tolist() == b.tolist()


@pytest.mark.parametrize("lengths,enforce", [([5, 3, 3, 1], True), ([2, 5, 1, 4], False),
                                             ([3], True), ([1, 4, 4, 2], False)])
@pytest.mark.parametrize("batch_first", [False, True])
def test_pack_and_pad(torch, lengths, enforce, batch_first):
    rng = rng_for("pack", str(lengths), batch_first)
    x = _padded(rng, lengths, batch_first=batch_first)
    tx = torch.from_numpy(x).requires_grad_(True)
    ex = ember.from_numpy(x.copy()).requires_grad_(True)
    tp = torch.nn.utils.rnn.pack_padded_sequence(tx, lengths, batch_first=batch_first,
                                                 enforce_sorted=enforce)
    ep = rnn_utils.pack_padded_sequence(ex, lengths, batch_first=batch_first,
                                        enforce_sorted=enforce)
    assert type(ep).__name__ == "PackedSequence" and isinstance(ep, tuple)
    _same_packed(ep, tp)
    for total in (None, max(lengths) + 2):
        tout, tlen = torch.nn.utils.rnn.pad_packed_sequence(
            tp, batch_first=batch_first, padding_value=-1.5, total_length=total)
        eout, elen = rnn_utils.pad_packed_sequence(ep, batch_first=batch_first,
                                                   padding_value=-1.5, total_length=total)
        np.testing.assert_array_equal(eout.detach().numpy(), tout.detach().numpy())
        assert elen.tolist() == tlen.tolist() and elen.dtype is ember.int64
    g = randn(rng, *tout.shape)
    (tout * torch.from_numpy(g)).sum().backward()
    (eout * ember.from_numpy(g)).sum().backward()
    np.testing.assert_array_equal(ex.grad.numpy(), tx.grad.numpy())


def test_pad_sequence_and_pack_sequence(torch):
    rng = rng_for("pad_sequence")
    seqs = [randn(rng, n, 2) for n in (3, 5, 1)]
    for kw in (dict(), dict(batch_first=True, padding_value=2.0),
               dict(padding_side="left")):
        want = torch.nn.utils.rnn.pad_sequence([torch.from_numpy(s) for s in seqs], **kw)
        got = rnn_utils.pad_sequence([ember.from_numpy(s) for s in seqs], **kw)
        np.testing.assert_array_equal(got.numpy(), want.numpy())
    tp = torch.nn.utils.rnn.pack_sequence([torch.from_numpy(s) for s in seqs],
                                          enforce_sorted=False)
    ep = rnn_utils.pack_sequence([ember.from_numpy(s) for s in seqs], enforce_sorted=False)
    _same_packed(ep, tp)
    for a, b in zip(rnn_utils.unpack_sequence(ep), torch.nn.utils.rnn.unpack_sequence(tp)):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    padded, lengths = rnn_utils.pad_packed_sequence(ep, batch_first=True)
    for a, s in zip(rnn_utils.unpad_sequence(padded, lengths, batch_first=True), seqs):
        np.testing.assert_array_equal(a.numpy(), s)
    assert rnn_utils.invert_permutation(ember.tensor([2, 0, 1])).tolist() == [1, 2, 0]
    assert rnn_utils.invert_permutation(None) is None
    for fn in (lambda L: L.nn.utils.rnn.pad_sequence([]),
               lambda L: L.nn.utils.rnn.pack_padded_sequence(L.ones(4, 3, 2), [4, 2, 3]),
               lambda L: L.nn.utils.rnn.pack_padded_sequence(L.ones(4, 3, 2), [4, 0, 3],
                                                             enforce_sorted=False),
               lambda L: L.nn.utils.rnn.pad_sequence([L.ones(2)], padding_side="up")):
        with pytest.raises(RuntimeError) as t:
            fn(torch)
        with pytest.raises(RuntimeError) as e:
            fn(ember)
        assert str(e.value) == str(t.value)


@pytest.mark.parametrize("cls", ["LSTM", "GRU", "RNN"])
@pytest.mark.parametrize("kw", [dict(), dict(num_layers=2, bidirectional=True),
                                dict(batch_first=True, bidirectional=True)])
@pytest.mark.parametrize("enforce", [True, False])
def test_recurrent_packed_input(torch, cls, kw, enforce):
    rng = rng_for("packed rnn", cls, str(kw), enforce)
    lengths = [5, 4, 2, 2, 1] if enforce else [2, 5, 1, 4, 2]
    bf = kw.get("batch_first", False)
    x = _padded(rng, lengths, batch_first=bf)
    tm, em = getattr(torch.nn, cls)(3, 4, **kw), getattr(nn, cls)(3, 4, **kw)
    copy_weights(tm, em)
    L = kw.get("num_layers", 1) * (2 if kw.get("bidirectional") else 1)
    h0 = randn(rng, L, len(lengths), 4)
    c0 = randn(rng, L, len(lengths), 4)

    def run(lib, m, x, with_h0):
        xt = lib.from_numpy(x.copy()).requires_grad_(True)
        p = lib.nn.utils.rnn.pack_padded_sequence(xt, lengths, batch_first=bf,
                                                  enforce_sorted=enforce)
        hx = None
        if with_h0:
            h = lib.from_numpy(h0.copy()).requires_grad_(True)
            c = lib.from_numpy(c0.copy()).requires_grad_(True)
            hx = (h, c) if cls == "LSTM" else h
        out, hn = m(p, hx)
        padded, _ = lib.nn.utils.rnn.pad_packed_sequence(out, batch_first=bf)
        hs = list(hn) if cls == "LSTM" else [hn]
        return xt, hx, out, padded, hs
    for with_h0 in (False, True):
        et = run(ember, em, x, with_h0)
        tt = run(torch, tm, x, with_h0)
        _same_packed(et[2], tt[2])
        np.testing.assert_allclose(et[3].detach().numpy(), tt[3].detach().numpy(), rtol=1e-5,
                                   atol=1e-6)
        for a, b in zip(et[4], tt[4]):
            np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=1e-5,
                                       atol=1e-6)
        g = randn(rng, *tt[3].shape)
        gh = [randn(rng, *h.shape) for h in tt[4]]
        (tt[3] * torch.from_numpy(g)).sum().add(
            sum((h * torch.from_numpy(q)).sum() for h, q in zip(tt[4], gh))).backward()
        (et[3] * ember.from_numpy(g)).sum().add(
            sum((h * ember.from_numpy(q)).sum() for h, q in zip(et[4], gh))).backward()
        np.testing.assert_allclose(et[0].grad.numpy(), tt[0].grad.numpy(), rtol=1e-5,
                                   atol=1e-6)
        tp = dict(tm.named_parameters())
        for n, p in em.named_parameters():
            np.testing.assert_allclose(p.grad.numpy(), tp[n].grad.numpy(), rtol=1e-4,
                                       atol=1e-5, err_msg=n)
        em.zero_grad()
        tm.zero_grad()


def test_packed_lstm_with_projections(torch):
    rng = rng_for("packed proj")
    lengths = [4, 3, 1]
    x = _padded(rng, lengths)
    tm, em = torch.nn.LSTM(3, 5, proj_size=2, bidirectional=True), \
        nn.LSTM(3, 5, proj_size=2, bidirectional=True)
    copy_weights(tm, em)
    tout, (th, tc) = tm(torch.nn.utils.rnn.pack_padded_sequence(torch.from_numpy(x), lengths))
    eout, (eh, ec) = em(rnn_utils.pack_padded_sequence(ember.from_numpy(x), lengths))
    _same_packed(eout, tout)
    np.testing.assert_allclose(eh.detach().numpy(), th.detach().numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ec.detach().numpy(), tc.detach().numpy(), rtol=1e-5, atol=1e-6)


# ================================================================== gradient clipping


def test_clip_grad_value(torch):
    rng = rng_for("clip value")
    grads = [randn(rng, 3, 4) * 3, randn(rng, 5)]
    grads[1][0] = np.nan
    eps = [nn.Parameter(ember.zeros(*g.shape)) for g in grads]
    tps = [torch.nn.Parameter(torch.zeros(*g.shape)) for g in grads]
    for p, tp, g in zip(eps, tps, grads):
        p.grad = ember.from_numpy(g.copy())
        tp.grad = torch.from_numpy(g.copy())
    assert nn.utils.clip_grad_value_(eps, 1.5, foreach=True) is None
    torch.nn.utils.clip_grad_value_(tps, 1.5)
    for p, tp in zip(eps, tps):
        np.testing.assert_array_equal(p.grad.numpy(), tp.grad.numpy())
    p = nn.Parameter(ember.zeros(2))
    p.grad = ember.tensor([3.0, -4.0])
    nn.utils.clip_grad_value_(p, 2)                         # a single tensor
    assert p.grad.tolist() == [2.0, -2.0]


# ================================================================== compiled


class _NewLayers(nn.Module):
    def __init__(self):
        super().__init__()
        self.pad = nn.ReflectionPad2d(1)
        self.c1 = nn.Conv2d(3, 8, 3)
        self.n1 = nn.InstanceNorm2d(8, affine=True)
        self.c2 = nn.Conv2d(8, 12, 3, padding=1)
        self.ps = nn.PixelShuffle(2)
        self.c3 = nn.Conv3d(1, 2, 2)
        self.up = nn.Upsample(scale_factor=2, mode="bicubic")
        self.cs = nn.ChannelShuffle(2)

    def forward(self, x):
        h = F.relu(self.n1(self.c1(self.pad(x))))
        h = self.ps(self.cs(self.c2(h)))
        h = F.pad(self.up(h), (1, 1, 2, 0), mode="replicate")
        v = self.c3(h.unsqueeze(1))
        return (F.max_pool3d(v, 2).sum() + F.avg_pool3d(v, 2).mean() +
                F.adaptive_max_pool2d(h, 2).sum() + F.local_response_norm(h, 3).mean())


def test_new_layers_compile_to_the_eager_result():
    """fullgraph: every new op traces and lowers (no fallback); values and gradients equal
    eager's."""
    ember.manual_seed(0)
    net = _NewLayers().double()
    x = ember.randn(2, 3, 6, 6, dtype=ember.float64, requires_grad=True)
    want = net(x)
    want.backward()
    grads = [p.grad.numpy().copy() for p in net.parameters()] + [x.grad.numpy().copy()]
    net.zero_grad()
    x.grad = None
    got = ember.compile(net, fullgraph=True)(x)
    got.backward()
    assert got.item() == pytest.approx(want.item(), rel=1e-12)
    for g, w in zip([p.grad.numpy() for p in net.parameters()] + [x.grad.numpy()], grads):
        np.testing.assert_allclose(g, w, rtol=1e-9, atol=1e-12)


def test_compiled_instance_norm_updates_running_stats_as_eager():
    ember.manual_seed(1)
    eager = nn.InstanceNorm1d(3, track_running_stats=True)
    comp = nn.InstanceNorm1d(3, track_running_stats=True)
    f = ember.compile(lambda x: comp(x) * 2)
    for _ in range(3):
        x = ember.randn(4, 3, 5)
        np.testing.assert_allclose(f(x).numpy(), (eager(x) * 2).numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(comp.running_mean.numpy(), eager.running_mean.numpy(),
                               rtol=1e-6)
    np.testing.assert_allclose(comp.running_var.numpy(), eager.running_var.numpy(), rtol=1e-6)


def test_signatures_match_torch(torch):
    """Constructors and Python-level functions take PyTorch's arguments, in its order,
    with its defaults."""
    import inspect

    def sig(fn):
        return [(p.name, p.kind, repr(p.default))
                for p in inspect.signature(fn).parameters.values()]
    for name in ("ReflectionPad1d", "ReflectionPad3d", "ReplicationPad2d", "ZeroPad1d",
                 "ZeroPad3d", "ConstantPad2d", "CircularPad3d", "InstanceNorm1d",
                 "InstanceNorm3d", "LocalResponseNorm", "LSTMCell", "GRUCell", "RNNCell",
                 "Conv3d", "ConvTranspose3d", "MaxPool3d", "AvgPool3d", "AdaptiveAvgPool3d",
                 "AdaptiveMaxPool1d", "AdaptiveMaxPool2d", "AdaptiveMaxPool3d", "PixelShuffle",
                 "PixelUnshuffle", "Upsample", "UpsamplingNearest2d", "UpsamplingBilinear2d",
                 "ChannelShuffle", "BatchNorm3d"):
        assert sig(getattr(nn, name).__init__) == sig(getattr(torch.nn, name).__init__), name
    for name in ("pad", "instance_norm", "local_response_norm", "interpolate", "upsample",
                 "upsample_nearest", "upsample_bilinear"):
        assert sig(getattr(F, name)) == sig(getattr(torch.nn.functional, name)), name
    for name in ("pad_sequence", "pack_padded_sequence", "pad_packed_sequence",
                 "pack_sequence", "unpad_sequence", "unpack_sequence", "invert_permutation"):
        assert sig(getattr(rnn_utils, name)) == sig(getattr(torch.nn.utils.rnn, name)), name
    for name in ("weight_norm", "spectral_norm", "orthogonal"):
        assert sig(getattr(nn.utils.parametrizations, name)) == \
            sig(getattr(torch.nn.utils.parametrizations, name)), name
    for name in ("register_parametrization", "remove_parametrizations", "is_parametrized",
                 "type_before_parametrizations", "transfer_parametrizations_and_params"):
        assert sig(getattr(nn.utils.parametrize, name)) == \
            sig(getattr(torch.nn.utils.parametrize, name)), name
    for name in ("weight_norm", "remove_weight_norm", "clip_grad_value_"):
        assert sig(getattr(nn.utils, name)) == sig(getattr(torch.nn.utils, name)), name
