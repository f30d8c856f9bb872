"""nn layers against PyTorch: the same state_dict keys and shapes, weights copied across by
name, then the forward result, the input gradients and every parameter's gradient compared
(dropout off); batch norm's running statistics after training steps; default
initialisations; the functional forms (interpolate, losses, attention, dropout)."""
import math
import warnings

import numpy as np
import pytest

import ember
import ember.nn as nn
import ember.nn.functional as F


def rng_for(*key):
    return np.random.default_rng(abs(hash(key)) % (2 ** 32))


def to_ember(t):
    return ember.from_numpy(np.ascontiguousarray(t.detach().numpy()))


def copy_weights(tmod, emod):
    """Loads torch's state_dict into the ember module, checking that both have the same
    keys, in the same order, with the same shapes."""
    tsd, esd = tmod.state_dict(), emod.state_dict()
    assert list(tsd) == list(esd), f"keys differ:\n torch {list(tsd)}\n ember {list(esd)}"
    for k in tsd:
        assert tuple(tsd[k].shape) == tuple(esd[k].shape), f"{k}: {tsd[k].shape} vs " \
            f"{esd[k].shape}"
    emod.load_state_dict({k: to_ember(v) for k, v in tsd.items()})


def _leaves(torch, arrays):
    T, E = [], []
    for a in arrays:
        if isinstance(a, np.ndarray):
            t = torch.from_numpy(a.copy())
            e = ember.from_numpy(a.copy())
            if a.dtype.kind == "f":
                t.requires_grad_(True)
                e.requires_grad_(True)
            T.append(t)
            E.append(e)
        else:
            T.append(a)
            E.append(a)
    return T, E


def _first(out):
    return out[0] if isinstance(out, tuple) else out


def check_layer(torch, tmod, emod, inputs, call=None, rtol=1e-4, atol=1e-5, grads=True,
                outputs=None):
    """Copies tmod's weights into emod, runs both on inputs (numpy arrays become tensors;
    float ones require grad), compares the outputs and, with a random upstream gradient,
    the input and parameter gradients."""
    copy_weights(tmod, emod)
    T, E = _leaves(torch, inputs)
    call = call or (lambda m, *a: m(*a))
    tout, eout = call(tmod, *T), call(emod, *E)
    touts = list(tout) if isinstance(tout, (tuple, list)) else [tout]
    eouts = list(eout) if isinstance(eout, (tuple, list)) else [eout]
    flat_t, flat_e = [], []
    for a, b in zip(touts, eouts):
        if isinstance(a, (tuple, list)):
            flat_t += list(a)
            flat_e += list(b)
        else:
            flat_t.append(a)
            flat_e.append(b)
    for i, (a, b) in enumerate(zip(flat_t, flat_e)):
        if a is None:
            assert b is None, f"output {i}: torch None, ember {b}"
            continue
        assert tuple(a.shape) == tuple(b.shape), f"output {i}: {a.shape} vs {b.shape}"
        np.testing.assert_allclose(b.detach().numpy(), a.detach().numpy(), rtol=rtol,
                                   atol=atol, err_msg=f"output {i}")
    if not grads:
        return
    rng = np.random.default_rng(0)
    tl = el = 0
    for a, b in zip(flat_t, flat_e):
        if a is None or not a.requires_grad:
            continue
        g = rng.standard_normal(tuple(a.shape)).astype(a.detach().numpy().dtype)
        tl = tl + (a * torch.from_numpy(g)).sum()
        el = el + (b * ember.from_numpy(g)).sum()
    tl.backward()
    el.backward()
    for i, (t, e) in enumerate(zip(T, E)):
        if hasattr(t, "grad") and getattr(t, "requires_grad", False):
            assert (t.grad is None) == (e.grad is None), f"input {i} grad presence"
            if t.grad is not None:
                np.testing.assert_allclose(e.grad.numpy(), t.grad.numpy(), rtol=rtol,
                                           atol=atol, err_msg=f"input {i} grad")
    tparams = dict(tmod.named_parameters())
    for name, p in emod.named_parameters():
        tp = tparams[name]
        assert (tp.grad is None) == (p.grad is None), f"{name}: grad presence"
        if tp.grad is not None:
            # a weight gradient sums products over the batch and the positions: in float32
            # an element that cancels to a small fraction of the largest carries the
            # rounding of the largest terms (summation order differs by BLAS and blocks)
            want = tp.grad.numpy()
            scale = float(np.abs(want).max()) if want.dtype == np.float32 and want.size else 0
            np.testing.assert_allclose(p.grad.numpy(), want, rtol=rtol,
                                       atol=max(atol, 1e-6 * scale),
                                       err_msg=f"grad of {name}")


def randn(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


# ================================================================== linear, conv


def test_linear_and_bilinear(torch):
    rng = rng_for("linear")
    check_layer(torch, torch.nn.Linear(4, 3), nn.Linear(4, 3), [randn(rng, 2, 5, 4)])
    check_layer(torch, torch.nn.Linear(4, 3, bias=False), nn.Linear(4, 3, bias=False),
                [randn(rng, 4)])
    check_layer(torch, torch.nn.Bilinear(3, 4, 5), nn.Bilinear(3, 4, 5),
                [randn(rng, 2, 3), randn(rng, 2, 4)])


@pytest.mark.parametrize("kw", [dict(), dict(stride=2, padding=1),
                                dict(padding=(2, 1), dilation=(2, 1), groups=2, bias=False),
                                dict(padding="same", dilation=2), dict(padding="valid")])
def test_conv2d(torch, kw):
    rng = rng_for("conv2d", str(kw))
    check_layer(torch, torch.nn.Conv2d(4, 6, 3, **kw), nn.Conv2d(4, 6, 3, **kw),
                [randn(rng, 2, 4, 7, 6)])


def test_conv2d_unbatched_and_conv1d(torch):
    rng = rng_for("conv1d")
    check_layer(torch, torch.nn.Conv2d(3, 2, (2, 3)), nn.Conv2d(3, 2, (2, 3)),
                [randn(rng, 3, 5, 6)])
    check_layer(torch, torch.nn.Conv1d(4, 6, 3, stride=2, padding=1, groups=2),
                nn.Conv1d(4, 6, 3, stride=2, padding=1, groups=2), [randn(rng, 2, 4, 9)])
    check_layer(torch, torch.nn.Conv1d(3, 2, 4, padding="same"),
                nn.Conv1d(3, 2, 4, padding="same"), [randn(rng, 2, 3, 7)])


@pytest.mark.parametrize("kw", [dict(), dict(stride=2, padding=1, output_padding=1),
                                dict(stride=(2, 3), dilation=2, groups=2, bias=False)])
def test_conv_transpose2d(torch, kw):
    rng = rng_for("convT", str(kw))
    check_layer(torch, torch.nn.ConvTranspose2d(4, 6, 3, **kw),
                nn.ConvTranspose2d(4, 6, 3, **kw), [randn(rng, 2, 4, 4, 5)])


def test_conv_transpose_output_size(torch):
    rng = rng_for("convT size")
    check_layer(torch, torch.nn.ConvTranspose2d(3, 2, 3, stride=2, padding=1),
                nn.ConvTranspose2d(3, 2, 3, stride=2, padding=1), [randn(rng, 1, 3, 4, 4)],
                call=lambda m, x: m(x, output_size=[8, 8]))
    check_layer(torch, torch.nn.ConvTranspose1d(3, 2, 3, stride=2),
                nn.ConvTranspose1d(3, 2, 3, stride=2), [randn(rng, 2, 3, 5)])


def test_conv_errors():
    with pytest.raises(ValueError, match="divisible by groups"):
        nn.Conv2d(3, 4, 3, groups=2)
    with pytest.raises(RuntimeError, match=r"conv2d\(\).*Given groups=1, weight of size"):
        nn.Conv2d(3, 4, 3)(ember.randn(1, 2, 5, 5))


# ================================================================== pooling, resampling


def test_pooling_layers(torch):
    rng = rng_for("pool")
    x = [randn(rng, 2, 3, 7, 6)]
    check_layer(torch, torch.nn.MaxPool2d(2), nn.MaxPool2d(2), x)
    check_layer(torch, torch.nn.MaxPool2d(3, 2, 1, ceil_mode=True, return_indices=True),
                nn.MaxPool2d(3, 2, 1, ceil_mode=True, return_indices=True), x)
    check_layer(torch, torch.nn.MaxPool2d(2, 1, dilation=2), nn.MaxPool2d(2, 1, dilation=2), x)
    check_layer(torch, torch.nn.AvgPool2d(3, 2, 1), nn.AvgPool2d(3, 2, 1), x)
    check_layer(torch, torch.nn.AvgPool2d(3, 2, 1, ceil_mode=True, count_include_pad=False),
                nn.AvgPool2d(3, 2, 1, ceil_mode=True, count_include_pad=False), x)
    check_layer(torch, torch.nn.AvgPool2d(2, divisor_override=3),
                nn.AvgPool2d(2, divisor_override=3), x)
    for size in (1, (3, 2), (None, 4), 5):
        check_layer(torch, torch.nn.AdaptiveAvgPool2d(size), nn.AdaptiveAvgPool2d(size), x)
    x1 = [randn(rng, 2, 3, 9)]
    check_layer(torch, torch.nn.MaxPool1d(3, 2, 1), nn.MaxPool1d(3, 2, 1), x1)
    check_layer(torch, torch.nn.AvgPool1d(3, 2), nn.AvgPool1d(3, 2), x1)
    check_layer(torch, torch.nn.AdaptiveAvgPool1d(4), nn.AdaptiveAvgPool1d(4), x1)


def test_max_pool_gradient_goes_to_the_first_maximum(torch):
    x = np.zeros((1, 1, 2, 2), dtype=np.float32)    # all tied
    check_layer(torch, torch.nn.MaxPool2d(2), nn.MaxPool2d(2), [x])


@pytest.mark.parametrize("kw", [dict(scale_factor=2), dict(size=(5, 9)),
                                dict(scale_factor=1.7, mode="bilinear"),
                                dict(size=(4, 11), mode="bilinear", align_corners=True),
                                dict(scale_factor=(2, 0.5), mode="bilinear",
                                     recompute_scale_factor=True)])
def test_interpolate(torch, kw):
    rng = rng_for("interp", str(kw))
    x = randn(rng, 2, 3, 5, 6)
    t = torch.from_numpy(x).requires_grad_(True)
    e = ember.from_numpy(x.copy()).requires_grad_(True)
    tr, er = torch.nn.functional.interpolate(t, **kw), F.interpolate(e, **kw)
    np.testing.assert_allclose(er.detach().numpy(), tr.detach().numpy(), rtol=1e-5, atol=1e-6)
    g = randn(rng, *tr.shape)
    tr.backward(torch.from_numpy(g))
    er.backward(ember.from_numpy(g))
    np.testing.assert_allclose(e.grad.numpy(), t.grad.numpy(), rtol=1e-5, atol=1e-5)


def test_interpolate_1d_and_upsample(torch):
    rng = rng_for("interp1d")
    x = randn(rng, 2, 3, 7)
    for kw in (dict(scale_factor=2), dict(size=4, mode="linear"),
               dict(size=10, mode="linear", align_corners=True)):
        np.testing.assert_allclose(
            F.interpolate(ember.from_numpy(x), **kw).numpy(),
            torch.nn.functional.interpolate(torch.from_numpy(x), **kw).numpy(), rtol=1e-5,
            atol=1e-6)
    check_layer(torch, torch.nn.Upsample(scale_factor=2, mode="bilinear"),
                nn.Upsample(scale_factor=2, mode="bilinear"), [randn(rng, 1, 2, 3, 4)])
    with pytest.raises(ValueError, match="align_corners"):
        F.interpolate(ember.ones(1, 1, 2, 2), scale_factor=2, align_corners=True)
    with pytest.raises(ValueError, match="only one of size or scale_factor"):
        F.interpolate(ember.ones(1, 1, 2, 2), size=3, scale_factor=2)


# ================================================================== normalisation


def test_layer_norm_and_group_norm(torch):
    rng = rng_for("norms")
    check_layer(torch, torch.nn.LayerNorm(6), nn.LayerNorm(6), [randn(rng, 2, 3, 6)])
    check_layer(torch, torch.nn.LayerNorm((3, 6), elementwise_affine=False),
                nn.LayerNorm((3, 6), elementwise_affine=False), [randn(rng, 2, 3, 6)])
    check_layer(torch, torch.nn.LayerNorm(6, bias=False, eps=1e-3),
                nn.LayerNorm(6, bias=False, eps=1e-3), [randn(rng, 4, 6)])
    check_layer(torch, torch.nn.GroupNorm(2, 6), nn.GroupNorm(2, 6), [randn(rng, 2, 6, 3, 2)])
    check_layer(torch, torch.nn.GroupNorm(3, 6, affine=False),
                nn.GroupNorm(3, 6, affine=False), [randn(rng, 2, 6, 4)])
    check_layer(torch, torch.nn.RMSNorm(6), nn.RMSNorm(6), [randn(rng, 2, 3, 6)])
    with pytest.raises(ValueError, match="divisible by num_groups"):
        nn.GroupNorm(4, 6)


def _set_affine(torch, rng, m):
    with torch.no_grad():
        m.weight.copy_(torch.from_numpy(randn(rng, m.num_features)))
        m.bias.copy_(torch.from_numpy(randn(rng, m.num_features)))


@pytest.mark.parametrize("cls,shape", [("BatchNorm1d", (4, 3)), ("BatchNorm1d", (4, 3, 5)),
                                       ("BatchNorm2d", (3, 3, 4, 2))])
def test_batch_norm_train_and_eval(torch, cls, shape):
    rng = rng_for("bn", cls, shape)
    tm, em = getattr(torch.nn, cls)(3), getattr(nn, cls)(3)
    _set_affine(torch, rng, tm)
    for step in range(3):           # three training steps: outputs, grads, running stats
        check_layer(torch, tm, em, [randn(rng, *shape) * 2 + 1])
        tm.zero_grad()
        em.zero_grad()
    for name in ("running_mean", "running_var", "num_batches_tracked"):
        np.testing.assert_allclose(getattr(em, name).numpy(),
                                   getattr(tm, name).detach().numpy(), rtol=1e-5, atol=1e-6,
                                   err_msg=name)
    tm.eval()
    em.eval()
    check_layer(torch, tm, em, [randn(rng, *shape)])


def test_batch_norm_options(torch):
    rng = rng_for("bn options")
    for kw in (dict(momentum=None), dict(affine=False), dict(track_running_stats=False),
               dict(momentum=0.3, eps=1e-3)):
        tm, em = torch.nn.BatchNorm2d(2, **kw), nn.BatchNorm2d(2, **kw)
        for _ in range(2):
            check_layer(torch, tm, em, [randn(rng, 3, 2, 2, 2)])
            tm.zero_grad()
            em.zero_grad()
        tm.eval()
        em.eval()
        check_layer(torch, tm, em, [randn(rng, 3, 2, 2, 2)])
    with pytest.raises(ValueError, match="expected 4D input"):
        nn.BatchNorm2d(2)(ember.ones(2, 2))
    with pytest.raises(ValueError, match="more than 1 value per channel"):
        nn.BatchNorm1d(2)(ember.ones(1, 2))


def test_batch_norm_running_stats_are_updated_in_place():
    bn = nn.BatchNorm1d(2)
    rm = bn.running_mean
    v = rm._version
    bn(ember.randn(4, 2))
    assert bn.running_mean is rm and rm._version > v
    assert rm.abs().sum().item() > 0
    assert bn.num_batches_tracked.item() == 1


# ================================================================== embedding, dropout


def test_embedding(torch):
    idx = np.array([[1, 2, 0, 4], [4, 3, 2, 0]])
    for kw in (dict(), dict(padding_idx=0), dict(padding_idx=-1),
               dict(scale_grad_by_freq=True)):
        check_layer(torch, torch.nn.Embedding(5, 3, **kw), nn.Embedding(5, 3, **kw), [idx])
    e = nn.Embedding(5, 3, padding_idx=2)
    assert np.all(e.weight.detach().numpy()[2] == 0)
    with pytest.raises(IndexError, match="index out of range"):
        e(ember.tensor([5]))


def test_embedding_max_norm_and_from_pretrained(torch):
    w = np.random.default_rng(0).standard_normal((5, 3)).astype(np.float32) * 3
    t = torch.nn.Embedding.from_pretrained(torch.from_numpy(w.copy()), max_norm=1.0)
    e = nn.Embedding.from_pretrained(ember.from_numpy(w.copy()), max_norm=1.0)
    idx = np.array([1, 3, 3])
    np.testing.assert_allclose(e(ember.from_numpy(idx)).numpy(),
                               t(torch.from_numpy(idx)).numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(e.weight.detach().numpy(), t.weight.detach().numpy(),
                               rtol=1e-5, atol=1e-6)
    assert not e.weight.requires_grad


def test_dropout():
    x = ember.ones(200, 100)
    d = nn.Dropout(0.3)
    y = d(x).numpy()
    kept = y != 0
    assert abs(kept.mean() - 0.7) < 0.02
    np.testing.assert_allclose(y[kept], 1 / 0.7, rtol=1e-6)
    d.eval()
    assert d(x) is x
    assert F.dropout(x, 0.5, training=False) is x
    assert np.all(F.dropout(x, 1.0).numpy() == 0)
    g1 = ember.Generator().manual_seed(3)
    g2 = ember.Generator().manual_seed(3)
    np.testing.assert_array_equal(F.dropout(x, 0.5, generator=g1).numpy(),
                                  F.dropout(x, 0.5, generator=g2).numpy())
    ember.manual_seed(5)
    a = F.dropout(x, 0.5).numpy()
    ember.manual_seed(5)
    np.testing.assert_array_equal(a, F.dropout(x, 0.5).numpy())
    with pytest.raises(ValueError, match="between 0 and 1"):
        nn.Dropout(1.5)
    xr = ember.ones(4, 6, 3, 3).requires_grad_(True)
    out = F.dropout2d(xr, 0.5)
    per_channel = out.detach().numpy().reshape(24, 9)
    assert all(len(set(row.tolist())) == 1 for row in per_channel)
    out.sum().backward()
    np.testing.assert_array_equal(xr.grad.numpy(), out.detach().numpy())


def test_dropout_gradient_uses_the_mask():
    x = ember.randn(50, 40).requires_grad_(True)
    y = F.dropout(x, 0.4)
    y.sum().backward()
    mask = (y.detach().numpy() != 0)
    np.testing.assert_allclose(x.grad.numpy(), mask / 0.6, rtol=1e-6)


# ================================================================== activations, softmax


def test_activation_layers(torch):
    rng = rng_for("act")
    x = [randn(rng, 3, 6) * 3]
    for name, args in (("GELU", ()), ("GELU", ("tanh",)), ("SiLU", ()), ("Mish", ()),
                       ("Softplus", (2.0, 5.0)), ("ELU", (0.5,)), ("Hardtanh", (-0.5, 2.0)),
                       ("ReLU6", ()), ("LogSigmoid", ()), ("GLU", ()), ("Softmax", (1,)),
                       ("LogSoftmax", (-1,)), ("Softmin", (0,)), ("Softmax", (0,))):
        check_layer(torch, getattr(torch.nn, name)(*args), getattr(nn, name)(*args), x)


def test_softmax_implicit_dim_warns(torch):
    x = np.random.default_rng(1).standard_normal((2, 3, 4)).astype(np.float32)
    with pytest.warns(UserWarning, match="Implicit dimension choice for softmax"):
        e = F.softmax(ember.from_numpy(x))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t = torch.nn.functional.softmax(torch.from_numpy(x))
    np.testing.assert_allclose(e.numpy(), t.numpy(), rtol=1e-6)
    np.testing.assert_allclose(F.log_softmax(ember.from_numpy(x), 1, dtype=ember.float64)
                               .numpy(), torch.log_softmax(torch.from_numpy(x), 1,
                                                           dtype=torch.float64).numpy(),
                               rtol=1e-12)


# ================================================================== attention


@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize("need_weights", [True, False])
def test_multihead_self_attention(torch, batch_first, need_weights):
    rng = rng_for("mha", batch_first, need_weights)
    E, H, L, N = 8, 2, 5, 3
    x = randn(rng, N, L, E) if batch_first else randn(rng, L, N, E)
    kpm = np.zeros((N, L), dtype=bool)
    kpm[0, -2:] = True
    mask = np.triu(np.ones((L, L), dtype=bool), 1)
    tm = torch.nn.MultiheadAttention(E, H, batch_first=batch_first)
    em = nn.MultiheadAttention(E, H, batch_first=batch_first)

    def call(m, x, kpm, mask):
        return m(x, x, x, key_padding_mask=kpm, attn_mask=mask, need_weights=need_weights)
    check_layer(torch, tm, em, [x, kpm, mask], call=call)


def test_multihead_attention_variants(torch):
    rng = rng_for("mha variants")
    E, H, L, S, N = 8, 4, 4, 6, 2
    q, k, v = randn(rng, L, N, E), randn(rng, S, N, 5), randn(rng, S, N, 3)
    # cross-attention with other key/value widths, per-head weights, a float mask
    tm = torch.nn.MultiheadAttention(E, H, kdim=5, vdim=3)
    em = nn.MultiheadAttention(E, H, kdim=5, vdim=3)
    fmask = randn(rng, L, S)
    check_layer(torch, tm, em, [q, k, v, fmask],
                call=lambda m, q, k, v, mk: m(q, k, v, attn_mask=mk,
                                               average_attn_weights=False))
    # bias_k / bias_v, zero attention, a 3-d bool mask, no bias
    tm = torch.nn.MultiheadAttention(E, H, add_bias_kv=True, add_zero_attn=True, bias=False)
    em = nn.MultiheadAttention(E, H, add_bias_kv=True, add_zero_attn=True, bias=False)
    kv = randn(rng, S, N, E)
    m3 = rng.uniform(size=(N * H, L, S)) < 0.3
    check_layer(torch, tm, em, [q, kv, m3],
                call=lambda m, q, kv, mk: m(q, kv, kv, attn_mask=mk))
    # unbatched input, causal hint
    tm, em = torch.nn.MultiheadAttention(E, H), nn.MultiheadAttention(E, H)
    causal = np.triu(np.full((L, L), -np.inf, dtype=np.float32), 1)
    check_layer(torch, tm, em, [randn(rng, L, E), causal],
                call=lambda m, x, mk: m(x, x, x, attn_mask=mk, is_causal=True,
                                        need_weights=False))


def test_scaled_dot_product_attention_dropout():
    q = ember.randn(2, 3, 4, 8)
    out = F.scaled_dot_product_attention(q, q, q, dropout_p=0.0)
    g = ember.Generator().manual_seed(0)
    assert out.shape == (2, 3, 4, 8)
    ember.manual_seed(0)
    a = F.scaled_dot_product_attention(q, q, q, dropout_p=0.5).numpy()
    ember.manual_seed(0)
    b = F.scaled_dot_product_attention(q, q, q, dropout_p=0.5).numpy()
    np.testing.assert_array_equal(a, b)
    assert not np.allclose(a, out.numpy())
    del g


def test_scaled_dot_product_attention_fully_masked_rows(torch):
    q = np.random.default_rng(2).standard_normal((1, 3, 4)).astype(np.float32)
    mask = np.ones((3, 3), dtype=bool)
    mask[1] = False
    e = F.scaled_dot_product_attention(*[ember.from_numpy(q)] * 3,
                                       attn_mask=ember.from_numpy(mask))
    t = torch.nn.functional.scaled_dot_product_attention(*[torch.from_numpy(q)] * 3,
                                                         attn_mask=torch.from_numpy(mask))
    np.testing.assert_allclose(e.numpy(), t.numpy(), rtol=1e-5, atol=1e-6)


# ================================================================== transformer


@pytest.mark.parametrize("norm_first", [False, True])
def test_transformer_encoder_layer(torch, norm_first):
    rng = rng_for("enc", norm_first)
    kw = dict(d_model=8, nhead=2, dim_feedforward=16, dropout=0.0, norm_first=norm_first,
              batch_first=True, activation="gelu")
    x = randn(rng, 3, 5, 8)
    kpm = np.zeros((3, 5), dtype=bool)
    kpm[1, 3:] = True
    check_layer(torch, torch.nn.TransformerEncoderLayer(**kw),
                nn.TransformerEncoderLayer(**kw), [x, kpm],
                call=lambda m, x, k: m(x, src_key_padding_mask=k))


def test_transformer_decoder_layer_and_stacks(torch):
    rng = rng_for("dec")
    kw = dict(d_model=8, nhead=2, dim_feedforward=16, dropout=0.0)
    tgt, mem = randn(rng, 4, 2, 8), randn(rng, 6, 2, 8)
    mask = np.triu(np.full((4, 4), -np.inf, dtype=np.float32), 1)
    check_layer(torch, torch.nn.TransformerDecoderLayer(**kw),
                nn.TransformerDecoderLayer(**kw), [tgt, mem, mask],
                call=lambda m, t, mm, mk: m(t, mm, tgt_mask=mk, tgt_is_causal=True))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tenc = torch.nn.TransformerEncoder(torch.nn.TransformerEncoderLayer(**kw), 2,
                                           norm=torch.nn.LayerNorm(8))
    eenc = nn.TransformerEncoder(nn.TransformerEncoderLayer(**kw), 2, norm=nn.LayerNorm(8))
    check_layer(torch, tenc, eenc, [mem])
    tdec = torch.nn.TransformerDecoder(torch.nn.TransformerDecoderLayer(**kw), 2)
    edec = nn.TransformerDecoder(nn.TransformerDecoderLayer(**kw), 2)
    check_layer(torch, tdec, edec, [tgt, mem, mask],
                call=lambda m, t, mm, mk: m(t, mm, tgt_mask=mk))


def test_transformer(torch):
    rng = rng_for("transformer")
    kw = dict(d_model=8, nhead=2, num_encoder_layers=2, num_decoder_layers=1,
              dim_feedforward=16, dropout=0.0, batch_first=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tm = torch.nn.Transformer(**kw)
    em = nn.Transformer(**kw)
    src, tgt = randn(rng, 2, 5, 8), randn(rng, 2, 4, 8)
    mask = em.generate_square_subsequent_mask(4).numpy()
    np.testing.assert_array_equal(mask, tm.generate_square_subsequent_mask(4).numpy())
    kpm = np.zeros((2, 5), dtype=bool)
    kpm[0, -1] = True
    check_layer(torch, tm, em, [src, tgt, mask, kpm],
                call=lambda m, s, t, mk, k: m(s, t, tgt_mask=mk, src_key_padding_mask=k,
                                              memory_key_padding_mask=k))


# ================================================================== recurrent


@pytest.mark.parametrize("cls", ["LSTM", "GRU", "RNN"])
@pytest.mark.parametrize("kw", [dict(), dict(num_layers=2, batch_first=True),
                                dict(num_layers=2, bidirectional=True, bias=False)])
def test_recurrent(torch, cls, kw):
    rng = rng_for(cls, str(kw))
    tm, em = getattr(torch.nn, cls)(3, 4, **kw), getattr(nn, cls)(3, 4, **kw)
    x = randn(rng, 2, 5, 3) if kw.get("batch_first") else randn(rng, 5, 2, 3)
    check_layer(torch, tm, em, [x])


@pytest.mark.parametrize("cls", ["LSTM", "GRU"])
def test_recurrent_initial_state_and_unbatched(torch, cls):
    rng = rng_for(cls, "h0")
    tm, em = getattr(torch.nn, cls)(3, 4, 2), getattr(nn, cls)(3, 4, 2)
    h0 = randn(rng, 2, 2, 4)
    x = randn(rng, 5, 2, 3)
    if cls == "LSTM":
        c0 = randn(rng, 2, 2, 4)
        check_layer(torch, tm, em, [x, h0, c0], call=lambda m, x, h, c: m(x, (h, c)))
    else:
        check_layer(torch, tm, em, [x, h0], call=lambda m, x, h: m(x, h))
    check_layer(torch, tm, em, [randn(rng, 4, 3)])


# ================================================================== losses


_CE_IDX = np.array([1, 0, 3, 4])


@pytest.mark.parametrize("name,kw,make", [
    ("CrossEntropyLoss", {}, lambda r: [randn(r, 4, 5), _CE_IDX]),
    ("CrossEntropyLoss", dict(ignore_index=3, label_smoothing=0.2, reduction="sum"),
     lambda r: [randn(r, 4, 5), _CE_IDX]),
    ("CrossEntropyLoss", dict(reduction="none"), lambda r: [randn(r, 2, 5, 3),
                                                            np.array([[1, 2, 3], [0, 4, 4]])]),
    ("CrossEntropyLoss", dict(label_smoothing=0.1),
     lambda r: [randn(r, 4, 5), np.abs(randn(r, 4, 5))]),
    ("NLLLoss", {}, lambda r: [randn(r, 4, 5), _CE_IDX]),
    ("NLLLoss", dict(ignore_index=0, reduction="none"), lambda r: [randn(r, 4, 5), _CE_IDX]),
    ("BCELoss", {}, lambda r: [np.random.default_rng(1).uniform(0.1, 0.9, (3, 4))
                               .astype(np.float32), np.abs(randn(r, 3, 4)) % 1]),
    ("BCEWithLogitsLoss", {}, lambda r: [randn(r, 3, 4) * 3, np.abs(randn(r, 3, 4)) % 1]),
    ("SmoothL1Loss", dict(beta=0.5), lambda r: [randn(r, 3, 4), randn(r, 3, 4)]),
    ("HuberLoss", dict(delta=0.7, reduction="sum"), lambda r: [randn(r, 3, 4), randn(r, 3, 4)]),
    ("KLDivLoss", dict(reduction="batchmean"),
     lambda r: [randn(r, 3, 4), np.abs(randn(r, 3, 4))]),
    ("KLDivLoss", dict(reduction="sum", log_target=True), lambda r: [randn(r, 3, 4),
                                                                     randn(r, 3, 4)]),
    ("MSELoss", {}, lambda r: [randn(r, 3, 4), randn(r, 3, 4)]),
    ("L1Loss", dict(reduction="none"), lambda r: [randn(r, 3, 4), randn(r, 3, 4)]),
])
def test_loss_modules(torch, name, kw, make):
    rng = rng_for(name, str(kw))
    check_layer(torch, getattr(torch.nn, name)(**kw), getattr(nn, name)(**kw), make(rng))


def test_weighted_losses(torch):
    rng = rng_for("weighted")
    w = np.abs(randn(rng, 5)) + 0.5
    x = randn(rng, 4, 5)
    for cls, kw in (("CrossEntropyLoss", dict(label_smoothing=0.1)),
                    ("CrossEntropyLoss", dict(ignore_index=4)), ("NLLLoss", {})):
        tm = getattr(torch.nn, cls)(weight=torch.from_numpy(w), **kw)
        em = getattr(nn, cls)(weight=ember.from_numpy(w.copy()), **kw)
        check_layer(torch, tm, em, [x, _CE_IDX])
    pw = np.abs(randn(rng, 4)) + 0.5
    tm = torch.nn.BCEWithLogitsLoss(weight=torch.from_numpy(pw), pos_weight=torch.from_numpy(pw))
    em = nn.BCEWithLogitsLoss(weight=ember.from_numpy(pw.copy()),
                              pos_weight=ember.from_numpy(pw.copy()))
    check_layer(torch, tm, em, [randn(rng, 3, 4), np.abs(randn(rng, 3, 4)) % 1])
    p = np.random.default_rng(3).uniform(0.1, 0.9, (3, 4)).astype(np.float32)
    tm, em = torch.nn.BCELoss(weight=torch.from_numpy(pw)), nn.BCELoss(
        weight=ember.from_numpy(pw.copy()))
    check_layer(torch, tm, em, [p, np.abs(randn(rng, 3, 4)) % 1])


def test_functional_losses_extras(torch):
    x = np.random.default_rng(4).standard_normal((3, 4)).astype(np.float32)
    y = np.random.default_rng(5).standard_normal((3, 4)).astype(np.float32)
    w = np.abs(np.random.default_rng(6).standard_normal((3, 4)).astype(np.float32))
    for fn in ("mse_loss", "l1_loss", "huber_loss"):
        e = getattr(F, fn)(ember.from_numpy(x), ember.from_numpy(y), weight=ember.from_numpy(w))
        t = getattr(torch.nn.functional, fn)(torch.from_numpy(x), torch.from_numpy(y),
                                             weight=torch.from_numpy(w))
        np.testing.assert_allclose(e.numpy(), t.numpy(), rtol=1e-5)
    with pytest.warns(UserWarning, match="target size"):
        F.mse_loss(ember.ones(3, 4), ember.ones(4))
    with pytest.raises(ValueError, match="not a valid value for reduction"):
        F.mse_loss(ember.ones(3), ember.ones(3), reduction="avg")
    with pytest.raises(ValueError, match="Target size"):
        F.binary_cross_entropy_with_logits(ember.ones(3, 4), ember.ones(3))
    with pytest.raises(IndexError, match="Target 7 is out of bounds"):
        F.cross_entropy(ember.ones(2, 4), ember.tensor([1, 7]))
    one_hot = F.one_hot(ember.tensor([0, 3, 1]))
    assert one_hot.dtype is ember.int64 and tuple(one_hot.shape) == (3, 4)


# ================================================================== initialisation


def test_default_initialisation_bounds():
    ember.manual_seed(0)
    conv = nn.Conv2d(4, 8, 3)
    bound = 1 / math.sqrt(4 * 9)
    assert np.abs(conv.weight.detach().numpy()).max() <= bound
    assert np.abs(conv.bias.detach().numpy()).max() <= bound
    assert conv.weight.detach().numpy().std() > bound / 3
    convt = nn.ConvTranspose2d(4, 6, 3, groups=2)
    assert tuple(convt.weight.shape) == (4, 3, 3, 3)
    assert np.abs(convt.weight.detach().numpy()).max() <= 1 / math.sqrt(3 * 9)
    lstm = nn.LSTM(3, 5)
    assert all(np.abs(p.detach().numpy()).max() <= 1 / math.sqrt(5) for p in
               lstm.parameters())
    emb = nn.Embedding(100, 20)
    assert abs(emb.weight.detach().numpy().std() - 1) < 0.1
    mha = nn.MultiheadAttention(8, 2)
    assert np.all(mha.in_proj_bias.detach().numpy() == 0)
    assert np.all(mha.out_proj.bias.detach().numpy() == 0)
    limit = math.sqrt(6 / (8 + 24))
    assert np.abs(mha.in_proj_weight.detach().numpy()).max() <= limit
    ln, bn = nn.LayerNorm(4), nn.BatchNorm2d(3)
    assert np.all(ln.weight.detach().numpy() == 1) and np.all(ln.bias.detach().numpy() == 0)
    assert np.all(bn.running_var.numpy() == 1) and bn.num_batches_tracked.dtype is ember.int64
    bil = nn.Bilinear(4, 3, 2)
    assert np.abs(bil.weight.detach().numpy()).max() <= 0.5


def test_state_dict_keys_match_torch(torch):
    pairs = [(torch.nn.LSTM(3, 4, 2, bidirectional=True), nn.LSTM(3, 4, 2, bidirectional=True)),
             (torch.nn.GRU(3, 4, bias=False), nn.GRU(3, 4, bias=False)),
             (torch.nn.MultiheadAttention(8, 2, kdim=4, vdim=4, add_bias_kv=True),
              nn.MultiheadAttention(8, 2, kdim=4, vdim=4, add_bias_kv=True)),
             (torch.nn.BatchNorm1d(3, track_running_stats=False),
              nn.BatchNorm1d(3, track_running_stats=False)),
             (torch.nn.CrossEntropyLoss(weight=torch.ones(3)),
              nn.CrossEntropyLoss(weight=ember.ones(3)))]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pairs.append((torch.nn.Transformer(8, 2, 1, 1, 16), nn.Transformer(8, 2, 1, 1, 16)))
    for t, e in pairs:
        copy_weights(t, e)


# ================================================================== linear algebra


def _grad_parity(torch, fe, ft, arrays, rtol=1e-10, atol=1e-12):
    T, E = _leaves(torch, [np.asarray(a, dtype=np.float64) for a in arrays])
    te, tt = fe(*E), ft(*T)
    np.testing.assert_allclose(te.detach().numpy(), tt.detach().numpy(), rtol=rtol, atol=atol)
    g = np.random.default_rng(0).standard_normal(tuple(tt.shape))
    tt.backward(torch.from_numpy(g))
    te.backward(ember.from_numpy(g))
    for i, (a, b) in enumerate(zip(E, T)):
        np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=rtol, atol=atol,
                                   err_msg=f"grad {i}")


@pytest.mark.parametrize("sa,sb", [((3,), (3,)), ((3,), (3, 4)), ((2, 3), (3,)),
                                   ((2, 3), (3, 4)), ((5, 2, 3), (3, 4)), ((3,), (5, 3, 4)),
                                   ((2, 1, 2, 3), (4, 3, 2)), ((5, 2, 3), (5, 3, 4)),
                                   ((1, 2, 3), (6, 3, 1)), ((4, 1, 3), (3,))])
def test_matmul_broadcasting_and_backward(torch, sa, sb):
    rng = rng_for("matmul", sa, sb)
    _grad_parity(torch, ember.matmul, torch.matmul,
                 [rng.standard_normal(sa), rng.standard_normal(sb)])


def test_mm_bmm_addmm_einsum_backward(torch):
    rng = rng_for("linalg")
    r = rng.standard_normal
    _grad_parity(torch, ember.mm, torch.mm, [r((3, 4)), r((4, 2))])
    _grad_parity(torch, ember.bmm, torch.bmm, [r((2, 3, 4)), r((2, 4, 5))])
    _grad_parity(torch, lambda a, b, c: ember.addmm(a, b, c, beta=0.3, alpha=-2),
                 lambda a, b, c: torch.addmm(a, b, c, beta=0.3, alpha=-2),
                 [r((1, 5)), r((3, 4)), r((4, 5))])
    for eq, shapes in (("ij,jk->ik", [(2, 3), (3, 4)]), ("bij,bjk->bik", [(2, 2, 3), (2, 3, 4)]),
                       ("bhqd,bhkd->bhqk", [(1, 2, 3, 4), (1, 2, 5, 4)]),
                       ("i,i->", [(4,), (4,)]), ("ij->ji", [(2, 3)]), ("i,j->ij", [(2,), (3,)]),
                       ("ii->i", [(3, 3)]), ("ii", [(3, 3)]), ("bij->bj", [(2, 3, 4)]),
                       ("...ij,...jk->...ik", [(2, 2, 3), (3, 4)]),
                       ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 2)]),
                       ("bn,anm,bm->ba", [(2, 3), (4, 3, 5), (2, 5)])):
        _grad_parity(torch, lambda *a, eq=eq: ember.einsum(eq, *a),
                     lambda *a, eq=eq: torch.einsum(eq, *a), [r(s) for s in shapes])


def test_einsum_list_form_and_errors():
    a, b = ember.ones(2, 3), ember.ones(3, 4)
    np.testing.assert_array_equal(ember.einsum("ij,jk->ik", [a, b]).numpy(),
                                  np.full((2, 4), 3.0))
    with pytest.raises(RuntimeError, match=r"einsum\(\).*output subscript j appears more"):
        ember.einsum("ij->jj", a)


def test_compiled_batch_norm_writes_running_stats_as_eager():
    x = ember.randn(8, 3) * 2 + 1
    ref = nn.BatchNorm1d(3)
    ref(x)
    ref(x)
    ember.compiler.reset()
    bn = nn.BatchNorm1d(3)
    c = ember.compile(bn, backend="aot_eager")
    c(x)
    c(x)
    # eager updates the statistics in C (batch_norm.c: double, rounded once), the graph
    # with the decomposition's float32 prims: equal to rounding
    for name in ("running_mean", "running_var", "num_batches_tracked"):
        np.testing.assert_allclose(getattr(bn, name).numpy(), getattr(ref, name).numpy(),
                                   rtol=1e-6, atol=1e-7)
        assert getattr(bn, name)._version == getattr(ref, name)._version
    # the op itself is traced with the update ([aot-2]: it used to refuse, a loud
    # fallback): one graph, whose new statistics are written back after the call
    from ember.capture import counters
    bn2 = nn.BatchNorm1d(3)

    def f(x):
        return ember.batch_norm(x, None, None, bn2.running_mean, bn2.running_var, True, 0.1,
                                1e-5, False)
    before = sum(counters["backend_fallback"].values())
    ember.compile(f, backend="aot_eager", fullgraph=True)(x)
    assert sum(counters["backend_fallback"].values()) == before
    ref2 = nn.BatchNorm1d(3)
    ref2(x)
    np.testing.assert_allclose(bn2.running_mean.numpy(), ref2.running_mean.numpy(), rtol=1e-6,
                               atol=1e-7)
    np.testing.assert_allclose(bn2.running_var.numpy(), ref2.running_var.numpy(), rtol=1e-6,
                               atol=1e-7)
    # evaluation compiles into one graph
    bn.eval()
    np.testing.assert_allclose(ember.compile(bn, backend="aot_eager")(x).detach().numpy(),
                               ref.eval()(x).detach().numpy(), rtol=1e-6)


@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular"])
def test_conv_padding_modes(torch, mode):
    rng = rng_for("padding_mode", mode)
    check_layer(torch, torch.nn.Conv2d(2, 3, 3, padding=(1, 2), padding_mode=mode),
                nn.Conv2d(2, 3, 3, padding=(1, 2), padding_mode=mode), [randn(rng, 2, 2, 5, 6)])
    check_layer(torch, torch.nn.Conv1d(2, 3, 4, padding="same", padding_mode=mode),
                nn.Conv1d(2, 3, 4, padding="same", padding_mode=mode), [randn(rng, 2, 2, 7)])


def test_interpolate_area(torch):
    x = np.random.default_rng(3).standard_normal((2, 3, 7, 9)).astype(np.float32)
    for kw in (dict(size=(3, 4)), dict(scale_factor=0.5)):
        np.testing.assert_allclose(
            F.interpolate(ember.from_numpy(x), mode="area", **kw).numpy(),
            torch.nn.functional.interpolate(torch.from_numpy(x), mode="area", **kw).numpy(),
            rtol=1e-5, atol=1e-6)


def test_unfold_and_fold(torch):
    rng = rng_for("fold")
    x = randn(rng, 2, 3, 6, 7)
    kw = dict(kernel_size=(2, 3), dilation=(1, 2), padding=1, stride=(2, 1))
    check_layer(torch, torch.nn.Unfold(**kw), nn.Unfold(**kw), [x])
    cols = torch.nn.functional.unfold(torch.from_numpy(x), **kw)
    check_layer(torch, torch.nn.Fold((6, 7), **kw), nn.Fold((6, 7), **kw),
                [cols.numpy().copy()])
