"""The fused attention kernel (csrc/kernels/attention.c) behind
scaled_dot_product_attention: values and gradients against PyTorch and against the
decomposition (PyTorch's math path, ops/nn_ops.py _sdpa_math), compiled equal to eager,
and no score matrix for long sequences."""
import tracemalloc

import numpy as np
import pytest

import ember
import ember.nn.functional as F
from ember.ops import nn_ops

from op_db import noncontig

FLASH = "_scaled_dot_product_flash_attention_for_cpu"
TOL = {np.float32: (2e-5, 2e-5), np.float64: (1e-11, 1e-11)}


def _arrays(rng, dtype, B, H, L, S, E, Ev):
    return [rng.standard_normal(s).astype(dtype)
            for s in ((B, H, L, E), (B, H, S, E), (B, H, S, Ev), (B, H, L, Ev))]


def _mask(rng, kind, shape, dtype):
    if kind is None:
        return None
    if kind == "bool":
        m = rng.integers(0, 2, shape).astype(bool)
        m[..., 0] = True
        return m
    return rng.standard_normal(shape).astype(dtype)


def _grad_run(fn, arrays, mask, causal, wrap, leaf):
    q, k, v, g = arrays
    ts = [leaf(wrap(a)) for a in (q, k, v)]
    m = None if mask is None else wrap(mask)
    out = fn(*ts, attn_mask=m, is_causal=causal)
    out.backward(wrap(g))
    return [out.detach()] + [t.grad for t in ts]


def _ember(a):
    return ember.from_numpy(a.copy())


def _ember_leaf(t):
    return t.requires_grad_(True)


CASES = [
    # B, H, L, S, E, Ev, causal, mask kind, mask shape
    (2, 3, 17, 200, 8, 8, False, None, None),
    (1, 2, 200, 200, 64, 64, True, None, None),
    (2, 2, 1, 17, 64, 64, False, None, None),
    (1, 1, 300, 130, 64, 32, True, None, None),
    (1, 2, 200, 17, 8, 8, True, None, None),
    (2, 2, 33, 70, 16, 16, False, "bool", (33, 70)),
    (2, 2, 33, 70, 16, 16, False, "float", (2, 1, 33, 70)),
    (2, 2, 33, 70, 16, 16, False, "float", (1, 70)),
    (2, 2, 33, 140, 16, 16, False, "bool", (2, 2, 33, 140)),
    (1, 1, 1, 1, 8, 8, False, None, None),
]


def _ids():
    return ["-".join(str(x) for x in c if x is not None) for c in CASES]


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("case", CASES, ids=_ids())
def test_values_and_gradients_match_torch_and_decomposition(torch, case, dtype):
    B, H, L, S, E, Ev, causal, mk, mshape = case
    rng = np.random.default_rng(abs(hash(case)) % 2**32)
    arrays = _arrays(rng, dtype, B, H, L, S, E, Ev)
    mask = _mask(rng, mk, mshape, dtype) if mk else None
    got = _grad_run(F.scaled_dot_product_attention, arrays, mask, causal, _ember, _ember_leaf)
    assert got[0].grad_fn is None
    decomposed = _grad_run(nn_ops._sdpa_math, arrays, mask, causal, _ember, _ember_leaf)
    want = _grad_run(torch.nn.functional.scaled_dot_product_attention, arrays, mask, causal,
                     lambda a: torch.from_numpy(a.copy()), lambda t: t.requires_grad_(True))
    rtol, atol = TOL[dtype]
    for name, a, b, c in zip(("out", "dq", "dk", "dv"), got, decomposed, want):
        a = a.numpy()
        assert a.dtype == dtype and a.shape == tuple(c.shape), name
        np.testing.assert_allclose(a, b.numpy(), rtol=rtol, atol=atol, err_msg=name)
        np.testing.assert_allclose(a, c.detach().numpy(), rtol=rtol, atol=atol, err_msg=name)


def test_fused_kernel_is_the_op_recorded():
    q = ember.randn(1, 2, 5, 8, requires_grad=True)
    out = F.scaled_dot_product_attention(q, q, q, is_causal=True)
    assert "ScaledDotProductFlashAttentionForCpuBackward0" in repr(out.grad_fn)
    # dropout keeps the decomposition
    out = F.scaled_dot_product_attention(q, q, q, dropout_p=0.5)
    assert "Flash" not in repr(out.grad_fn)


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
def test_non_contiguous_inputs(dtype):
    rng = np.random.default_rng(5)
    q, k, v, g = _arrays(rng, dtype, 2, 3, 19, 70, 16, 16)
    mask = rng.standard_normal((19, 70)).astype(dtype)
    base = _grad_run(F.scaled_dot_product_attention, (q, k, v, g), mask, False, _ember,
                     _ember_leaf)
    # last two dims swapped in memory, and the (B, L, H, E) layout of a split projection
    for lay in (noncontig, lambda t: ember.from_numpy(
            np.ascontiguousarray(t.numpy().transpose(0, 2, 1, 3))).transpose(1, 2)):
        ts = [lay(_ember(a)).requires_grad_(True) for a in (q, k, v)]
        assert not any(t.is_contiguous() for t in ts)
        out = F.scaled_dot_product_attention(*ts, attn_mask=lay(_ember(mask[None, None])))
        out.backward(_ember(g))
        for a, b in zip([out.detach()] + [t.grad for t in ts], base):
            np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-6)


def test_3d_inputs_and_empty_sizes(torch):
    rng = np.random.default_rng(3)
    q, k, v = (rng.standard_normal(s).astype(np.float32) for s in ((4, 9, 8), (4, 11, 8),
                                                                    (4, 11, 8)))
    e = F.scaled_dot_product_attention(_ember(q), _ember(k), _ember(v), is_causal=True)
    t = torch.nn.functional.scaled_dot_product_attention(
        torch.from_numpy(q), torch.from_numpy(k), torch.from_numpy(v), is_causal=True)
    assert e.stride() == t.stride()
    np.testing.assert_allclose(e.numpy(), t.numpy(), rtol=1e-5, atol=1e-6)
    for shapes in [((0, 2, 5, 8), (0, 2, 7, 8)), ((2, 2, 0, 8), (2, 2, 7, 8)),
                   ((2, 2, 5, 8), (2, 2, 0, 8))]:
        qa, ka = (rng.standard_normal(s).astype(np.float32) for s in shapes)
        ts = [_ember(a).requires_grad_(True) for a in (qa, ka, ka)]
        out = F.scaled_dot_product_attention(*ts)
        tt = torch.nn.functional.scaled_dot_product_attention(
            *[torch.from_numpy(a) for a in (qa, ka, ka)])
        assert tuple(out.shape) == tuple(tt.shape)
        np.testing.assert_array_equal(out.detach().numpy(), tt.numpy())
        out.sum().backward()
        for t in ts:
            assert t.grad.shape == t.shape and not np.any(t.grad.numpy())


def test_fully_masked_rows_give_zero_and_zero_gradient():
    q = ember.randn(1, 1, 4, 8, requires_grad=True)
    mask = np.zeros((4, 6), dtype=np.float32)
    mask[2] = -np.inf
    out = F.scaled_dot_product_attention(q, q.detach()[:, :, :1].expand(1, 1, 6, 8), q.detach()
                                         [:, :, :1].expand(1, 1, 6, 8).contiguous(),
                                         attn_mask=ember.from_numpy(mask))
    assert not np.any(out.detach().numpy()[0, 0, 2])
    out.sum().backward()
    assert np.all(np.isfinite(q.grad.numpy())) and not np.any(q.grad.numpy()[0, 0, 2])
    _, lse = ember.ops.public()[FLASH](q.detach(), q.detach(), q.detach(),
                                       attn_mask=ember.from_numpy(mask[:, :4].copy()))
    assert lse.numpy()[0, 0, 2] == 0.0       # as PyTorch's kernel


def test_many_threads_give_the_same_result():
    rng = np.random.default_rng(9)
    q, k, v, g = _arrays(rng, np.float64, 1, 2, 333, 333, 32, 32)
    before = ember.get_num_threads()
    try:
        results = []
        for n in (1, 2, 3):
            ember.set_num_threads(n)
            results.append(_grad_run(F.scaled_dot_product_attention, (q, k, v, g), None, True,
                                     _ember, _ember_leaf))
    finally:
        ember.set_num_threads(before)
    for r in results[1:]:
        for a, b in zip(r, results[0]):
            np.testing.assert_array_equal(a.numpy(), b.numpy())


@pytest.mark.parametrize("backend", ["eager", "aot_eager", "llvm"])
def test_compiled_equals_eager(backend):
    rng = np.random.default_rng(11)
    q, k, v, g = _arrays(rng, np.float32, 2, 2, 70, 90, 16, 16)
    mask = rng.standard_normal((70, 90)).astype(np.float32)

    def fn(q, k, v, m):
        a = F.scaled_dot_product_attention(q * 2, k, v, attn_mask=m)
        b = F.scaled_dot_product_attention(q, k[:, :, :70], v[:, :, :70], is_causal=True)
        return (a + b).tanh()

    compiled = ember.compile(fn, backend=backend, fullgraph=True)
    eager = _grad_run(lambda q, k, v, attn_mask, is_causal: fn(q, k, v, attn_mask),
                      (q, k, v, g), mask, False, _ember, _ember_leaf)
    got = _grad_run(lambda q, k, v, attn_mask, is_causal: compiled(q, k, v, attn_mask),
                    (q, k, v, g), mask, False, _ember, _ember_leaf)
    for a, b in zip(got, eager):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-6)
    if backend == "llvm":
        from ember.compiler import backend as llvm_backend
        text = "\n".join(str(c.lowered) for c in list(llvm_backend.recent)[-2:])
        assert FLASH + "_backward" in text and FLASH + "(" in text, text


def _peak_bytes(fn):
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_long_sequences_never_form_the_score_matrix():
    L, S, E = 1024, 8192, 32
    rng = np.random.default_rng(13)
    q, k, v, g = (_ember(a) for a in _arrays(rng, np.float32, 1, 1, L, S, E, E))
    scores = L * S * 4
    for t in (q, k, v):
        t.requires_grad_(True)

    def fused():
        out = F.scaled_dot_product_attention(q, k, v, is_causal=False)
        out.backward(g)

    def decomposed():
        nn_ops._sdpa_math(q.detach(), k.detach(), v.detach())

    # the measurement sees NumPy's allocations: the decomposition's scores are there
    assert _peak_bytes(decomposed) >= scores
    peak = _peak_bytes(fused)        # forward and backward: gradients, O(S * E) buffers
    assert peak < scores / 4, peak
