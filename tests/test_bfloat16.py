"""bfloat16 as a real dtype: stored as ml_dtypes' NumPy bfloat16, computed in float32
where NumPy has no loop, promoted as PyTorch promotes, loaded from torch and safetensors
files as bfloat16. (Every op of the table also runs in bfloat16 in tests/test_ops.py.)"""
import io
import warnings

import numpy as np
import pytest

import ember
import ember.nn as nn
from ember.capture import _hook, counters


def _bits(t):
    return t.detach().numpy().view(np.uint16)


def test_storage_is_ml_dtypes_bfloat16():
    import ml_dtypes
    t = ember.tensor([1.0, -2.5, 3.140625], dtype=ember.bfloat16)
    assert t.numpy().dtype == np.dtype(ml_dtypes.bfloat16) and t.element_size() == 2
    assert t.dtype.is_floating_point and t.dtype.itemsize == 2
    assert _bits(t).tolist() == [0x3F80, 0xC020, 0x4049]
    assert ember.from_numpy(np.ones(2, dtype=ml_dtypes.bfloat16)).dtype is ember.bfloat16
    assert "dtype=ember.bfloat16" in repr(t)


def test_promotion_as_pytorch():
    bf, h = ember.bfloat16, ember.float16
    assert ember.promote_types(bf, h) is ember.float32
    assert ember.promote_types(bf, ember.float32) is ember.float32
    assert ember.promote_types(bf, ember.int64) is bf
    x = ember.ones(2, dtype=bf)
    assert (x + 1).dtype is bf and (x + 2.5).dtype is bf
    assert (x + ember.ones(2, dtype=h)).dtype is ember.float32
    assert (ember.arange(2) * x).dtype is bf


def test_rounding_is_to_nearest_even():
    # 1 + 2**-8 lies halfway between 1 and 1 + 2**-7: ties go to the even mantissa
    t = ember.tensor([1 + 2 ** -8, 1 + 3 * 2 ** -8], dtype=ember.float32).bfloat16()
    assert t.tolist() == [1.0, 1 + 2 ** -6]


def test_a_small_model_trains_in_bfloat16_like_torch(torch):
    """Forward and backward of Linear, GELU, LayerNorm and a loss in bfloat16, against
    torch's bfloat16 (both round every op's result to bfloat16)."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((8, 16)).astype(np.float32)
    w = (rng.standard_normal((32, 16)) / 4).astype(np.float32)
    b = rng.standard_normal(32).astype(np.float32)

    def run(lib, from_numpy):
        xt = from_numpy(x).to(lib.bfloat16)
        lin = lib.nn.Linear(16, 32).to(lib.bfloat16)
        with lib.no_grad():
            lin.weight.copy_(from_numpy(w))
            lin.bias.copy_(from_numpy(b))
        norm = lib.nn.LayerNorm(32).to(lib.bfloat16)
        y = norm(lib.nn.functional.gelu(lin(xt)))
        loss = (y * y).mean()
        loss.backward()
        return y.float().detach().numpy(), loss.float().item(), \
            lin.weight.grad.float().numpy(), y.dtype, lin.weight.grad.dtype

    y, loss, g, ydt, gdt = run(ember, ember.from_numpy)
    ty, tloss, tg, _, _ = run(torch, torch.from_numpy)
    assert ydt is ember.bfloat16 and gdt is ember.bfloat16
    np.testing.assert_allclose(y, ty, rtol=3e-2, atol=3e-2)
    assert abs(loss - tloss) <= 2e-2 * abs(tloss)
    np.testing.assert_allclose(g, tg, rtol=5e-2, atol=5e-3)


def test_matmul_accumulates_in_float32():
    """A long sum of bfloat16 products: accumulated in bfloat16 it would stall at 256."""
    n = 4096
    a = ember.ones(1, n, dtype=ember.bfloat16)
    b = ember.ones(n, 1, dtype=ember.bfloat16)
    assert (a @ b).item() == float(n)
    assert ember.ones(n, dtype=ember.bfloat16).sum().item() == float(n)


def test_conversions_to_integers_wrap_as_pytorch(torch):
    x = ember.tensor([-2.0, 300.0, 1.5, -0.5], dtype=ember.bfloat16)
    tx = torch.tensor([-2.0, 300.0, 1.5, -0.5], dtype=torch.bfloat16)
    for name in ("int8", "int16", "int32", "int64", "bool"):
        assert x.to(getattr(ember, name)).tolist() == tx.to(getattr(torch, name)).tolist()


def test_torch_checkpoints_load_as_bfloat16(torch, tmp_path):
    t = torch.randn(3, 4).to(torch.bfloat16)
    path = tmp_path / "w.pt"
    torch.save({"w": t, "col": t[:, 1]}, path)
    got = ember.load(path)
    assert got["w"].dtype is ember.bfloat16 and got["col"].dtype is ember.bfloat16
    assert _bits(got["w"]).tolist() == t.view(torch.int16).numpy().view(np.uint16).tolist()
    assert got["col"].tolist() == t[:, 1].tolist()


def test_safetensors_round_trip_keeps_bfloat16():
    t = ember.randn(5, dtype=ember.bfloat16)
    buf = io.BytesIO()
    ember.serialization.save_safetensors({"t": t}, buf)
    assert b'"BF16"' in buf.getvalue()
    back = ember.load(io.BytesIO(buf.getvalue()))["t"]
    assert back.dtype is ember.bfloat16 and _bits(back).tolist() == _bits(t).tolist()


def test_ember_save_round_trip(tmp_path):
    t = ember.randn(3, dtype=ember.bfloat16)
    ember.save({"t": t}, tmp_path / "t.pt")
    back = ember.load(tmp_path / "t.pt")["t"]
    assert back.dtype is ember.bfloat16 and _bits(back).tolist() == _bits(t).tolist()


@pytest.mark.skipif(not _hook.available, reason="capture needs CPython 3.11")
@pytest.mark.parametrize("backend", ["aot_eager", "llvm"])
def test_compiled_bfloat16_equals_eager(backend):
    """Both backends give eager's bits here (the matmul's product and the sum are each
    rounded once, as eager rounds them); the LLVM backend compiles the graph (no
    fallback)."""
    ember.compiler.reset()

    def f(x, w):
        return ((x @ w).relu() * 2).sum(-1)

    x = ember.randn(4, 8, dtype=ember.bfloat16)
    w = ember.randn(8, 3, dtype=ember.bfloat16)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        got = ember.compile(f, backend=backend)(x, w)
    assert got.dtype is ember.bfloat16
    assert _bits(got).tolist() == _bits(f(x, w)).tolist()
    if backend == "llvm":
        assert not counters["llvm_fallback"], dict(counters["llvm_fallback"])
    ember.compiler.reset()
