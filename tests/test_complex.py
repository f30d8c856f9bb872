"""Complex tensors: complex64/complex128 against PyTorch (dtypes, promotion with Python
complex numbers, printing, views of the parts sharing memory, the errors PyTorch raises),
values and gradients of real losses through complex ops (PyTorch's convention: the
gradient of a complex input is dL/dre + i dL/dim), Llama's rotary embeddings forward and
backward, and ember.compile of functions on complex tensors."""
import warnings

import numpy as np
import pytest

import ember

RNG = np.random.default_rng(0)
CDTYPES = ["complex64", "complex128"]
TOL = {"complex64": 1e-6, "complex128": 1e-12, "float32": 1e-6, "float64": 1e-12}


def crandn(shape, dtype="complex64", rng=RNG):
    real = rng.standard_normal(shape) + 1j * rng.standard_normal(shape)
    return real.astype(dtype)


def both(torch, a, requires_grad=False):
    """An ember tensor and a torch tensor over copies of the NumPy array a."""
    e = ember.from_numpy(np.array(a, copy=True))
    t = torch.from_numpy(np.array(a, copy=True))
    if requires_grad:
        e.requires_grad_(True)
        t.requires_grad_(True)
    return e, t


def close(got, want, tol):
    want = want.detach().resolve_conj().numpy() if hasattr(want, "detach") else want
    got = got.detach().numpy() if isinstance(got, ember.Tensor) else got
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    assert got.shape == want.shape, (got.shape, want.shape)
    scale = max(1.0, float(np.max(np.abs(want))) if want.size else 1.0)
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * scale, equal_nan=True)


# ---------------------------------------------------------------- dtypes and promotion


def test_dtype_objects():
    assert ember.cfloat is ember.complex64 and ember.cdouble is ember.complex128
    for d in (ember.complex64, ember.complex128):
        assert d.is_complex and not d.is_floating_point and d.is_signed
    assert not ember.float32.is_complex
    assert ember.complex64.itemsize == 8 and ember.complex128.itemsize == 16
    x = ember.zeros(2, dtype=ember.cfloat)
    assert x.is_complex() and not x.is_floating_point()
    assert not ember.zeros(2).is_complex()
    assert x.cdouble().dtype is ember.complex128 and x.cdouble().cfloat().dtype is ember.complex64


def test_finfo_and_conjugate_transposes(torch):
    for name in CDTYPES:
        e, t = ember.finfo(getattr(ember, name)), torch.finfo(getattr(torch, name))
        assert (e.bits, e.eps, e.max, e.dtype) == (t.bits, t.eps, t.max, t.dtype)
    e, t = both(torch, crandn((2, 3, 4)))
    close(e.mH, t.mH, 0)
    close(e.adjoint(), t.adjoint(), 0)
    close(e[0].H, t[0].H, 0)
    with pytest.raises(RuntimeError):
        e.H


def test_tensor_infers_complex(torch):
    for data in ([1 + 2j, 3], [[1.5, 2j]], 2j, [1, True, 1j]):
        assert str(ember.tensor(data).dtype).split(".")[-1] == \
            str(torch.tensor(data).dtype).split(".")[-1]
    ember.set_default_dtype(ember.float64)
    try:
        assert ember.tensor([1j]).dtype is ember.complex128
    finally:
        ember.set_default_dtype(ember.float32)
    assert ember.tensor(np.array([1j], dtype=np.complex64)).dtype is ember.complex64


@pytest.mark.parametrize("a,b,want", [
    ("float32", "complex64", "complex64"), ("float64", "complex64", "complex128"),
    ("int64", "complex64", "complex64"), ("bool", "complex128", "complex128"),
    ("float16", "complex64", "complex64"), ("complex64", "complex128", "complex128")])
def test_promotion(torch, a, b, want):
    x, y = ember.ones(2, dtype=getattr(ember, a)), ember.ones(2, dtype=getattr(ember, b))
    assert (x + y).dtype is getattr(ember, want)
    assert (x * y).dtype is getattr(ember, want)
    tx, ty = torch.ones(2, dtype=getattr(torch, a)), torch.ones(2, dtype=getattr(torch, b))
    assert str((tx + ty).dtype) == f"torch.{want}"


def test_python_complex_numbers(torch):
    for dt in ("float32", "float64", "int64", "complex64"):
        e = ember.ones(2, dtype=getattr(ember, dt)) * (1 - 2j)
        t = torch.ones(2, dtype=getattr(torch, dt)) * (1 - 2j)
        assert str(e.dtype).split(".")[-1] == str(t.dtype).split(".")[-1]
        close(e, t, 1e-6)
    close(ember.tensor([1 + 1j]) + 2.5, torch.tensor([1 + 1j]) + 2.5, 1e-6)


def test_printing_matches_torch(torch):
    cases = [
        lambda L: L.tensor([1 + 2j, 3 - 1j]),
        lambda L: L.tensor([[1 + 2j, -3.5j], [0.25, 1e-5j]]),
        lambda L: L.tensor([1 + 1j], dtype=L.complex128),
        lambda L: L.tensor(2.5 - 0.5j),
        lambda L: L.tensor([0j, -0.0 - 0.0j, complex("nan+infj")]),
        lambda L: L.zeros(0, dtype=L.complex64),
        lambda L: L.zeros(2, 0, dtype=L.complex128),
        lambda L: L.view_as_complex(L.arange(4000.).reshape(-1, 2)),
        lambda L: L.tensor([123456. + 0.1j, 1j]),
    ]
    for case in cases:
        assert repr(case(ember)) == repr(case(torch)).replace("torch.", "ember.")


# ---------------------------------------------------------------- views of the parts


def test_view_as_real_shares_memory(torch):
    a = crandn((3, 4))
    e, t = both(torch, a)
    r = ember.view_as_real(e)
    close(r, torch.view_as_real(t), 0)
    assert tuple(r.stride()) == tuple(torch.view_as_real(t).stride())
    r[1, 2, 0] = 7.0
    assert e[1, 2].item() == complex(7.0, a[1, 2].imag)
    # a column of a complex matrix: strides and offset in real units
    col = ember.view_as_real(e[:, 1])
    tcol = torch.view_as_real(t[:, 1])
    assert tuple(col.stride()) == tuple(tcol.stride())
    assert col.storage_offset() == tcol.storage_offset()


def test_view_as_complex_shares_memory(torch):
    a = RNG.standard_normal((2, 3, 2)).astype(np.float32)
    e, t = both(torch, a)
    c = ember.view_as_complex(e)
    close(c, torch.view_as_complex(t), 0)
    c[0, 0] = 5 + 6j
    assert e[0, 0].tolist() == [5.0, 6.0]
    f64 = ember.view_as_complex(ember.zeros(4, 2, dtype=ember.float64))
    assert f64.dtype is ember.complex128


def test_real_and_imag_are_writable_views(torch):
    a = crandn((2, 3), "complex128")
    e, t = both(torch, a)
    close(e.real, t.real, 0)
    close(e.imag, t.imag, 0)
    close(ember.real(e), torch.real(t), 0)
    close(ember.imag(e), torch.imag(t), 0)
    e.real[0, 0] = 10.0
    e.imag.mul_(2)
    t.real[0, 0] = 10.0
    t.imag.mul_(2)
    close(e, t, 0)
    e.real = ember.zeros(2, 3, dtype=ember.float64)
    t.real = torch.zeros(2, 3, dtype=torch.float64)
    close(e, t, 0)
    x = ember.tensor([1.0, 2.0])
    assert x.real is x
    with pytest.raises(RuntimeError, match="imag is not implemented"):
        x.imag


def test_view_errors_match_torch(torch):
    cases = [
        lambda L: L.view_as_real(L.ones(2)),
        lambda L: L.view_as_complex(L.ones(3)),
        lambda L: L.view_as_complex(L.ones(2, 2).t()),
        lambda L: L.view_as_complex(L.ones(3, 2)[:, :1].expand(3, 2)),
        lambda L: L.view_as_complex(L.ones(3, 4)[:, 1:3]),
        lambda L: L.view_as_complex(L.ones((), dtype=L.float32)),
        lambda L: L.view_as_complex(L.ones(2, 2, dtype=L.int64)),
    ]
    for case in cases:
        with pytest.raises(RuntimeError) as te:
            case(torch)
        with pytest.raises(RuntimeError) as ee:
            case(ember)
        assert type(ee.value) is type(te.value)


def test_unsupported_ops_raise_as_torch(torch):
    a = crandn((3,))
    e, t = both(torch, a)
    for fn in (lambda x: x < x, lambda x: x >= x, lambda x: x.max(), lambda x: x.amax(),
               lambda x: ember.clamp(x, 0, 1) if isinstance(x, ember.Tensor) else
               torch.clamp(x, 0, 1), lambda x: x.floor()):
        with pytest.raises(RuntimeError):
            fn(t)
        with pytest.raises(RuntimeError):
            fn(e)
    with pytest.raises(RuntimeError):      # complex into a real tensor in place
        ember.zeros(3).add_(e)
    for value in (1j, ember.tensor(1j)):   # never just the real part
        with pytest.raises(RuntimeError):
            ember.zeros(2).masked_fill(ember.tensor([True, False]), value)
        with pytest.raises((RuntimeError, TypeError)):
            ember.zeros(2).fill_(value)
    with pytest.raises(RuntimeError):
        ember.ones(2).requires_grad_(True).mul_(e[:2])
    close(e == e, t == t, 0)
    close(e != e.conj(), t != t.conj(), 0)


def test_ops_without_complex_kernels_refuse_them():
    """No silent wrong answers: ops without complex support raise (torch supports some of
    these, ember does not yet)."""
    e = ember.tensor([1j, 2.0])
    for fn in (lambda x: x.cumsum(0), lambda x: x.cumprod(0), lambda x: x.argmax(),
               lambda x: x.argmin(), lambda x: x.sort(), lambda x: x.topk(1),
               lambda x: x.sign(), lambda x: x.prod(), lambda x: x.var(), lambda x: x // 2,
               lambda x: x.erf(), lambda x: x.relu(), lambda x: x.floor()):
        with pytest.raises(RuntimeError):
            fn(e)


def test_more_refusals_and_isclose_match_torch(torch):
    a = crandn((2, 3, 4, 4))
    e, t = both(torch, a)
    for fn in (lambda L, x: x.clone().abs_(), lambda L, x: L.nn.functional.max_pool2d(x, 2)):
        with pytest.raises(RuntimeError):
            fn(torch, t)
        with pytest.raises(RuntimeError):
            fn(ember, e)
    # torch computes these; ember has no complex kernel for them yet and refuses
    for fn in (lambda L, x: L.nn.functional.conv2d(x, x[:1, :, :2, :2]),
               lambda L, x: L.logsumexp(x, 0)):
        with pytest.raises(NotImplementedError):
            fn(ember, e)
    x = np.array([1 + 2j, 3 + 1e-3j, complex("nan+1j"), 1j], dtype=np.complex64)
    y = np.array([1.00001 + 2j, 3, complex("1+nanj"), 1j], dtype=np.complex64)
    (ex, tx), (ey, ty) = both(torch, x), both(torch, y)
    for nan in (False, True):
        close(ember.isclose(ex, ey, equal_nan=nan), torch.isclose(tx, ty, equal_nan=nan), 0)
    assert ember.allclose(ex[:2], ex[:2]) and not ember.allclose(ex[:2], ey[:2])
    e2, t2 = both(torch, x.copy())
    close(e2.eq_(ey), t2.eq_(ty), 0)


def test_factories_with_complex(torch):
    for case in (lambda L: L.full((2,), 1 + 2j), lambda L: L.ones(2, dtype=L.cfloat),
                 lambda L: L.zeros(2, 1, dtype=L.cdouble).fill_(2j),
                 lambda L: L.zeros_like(L.ones(2, dtype=L.cfloat)),
                 lambda L: L.cat([L.tensor([1j]), L.tensor([2.0])]),
                 lambda L: L.where(L.tensor([True, False]), L.tensor([1j, 2j]), 0)):
        assert repr(case(ember)) == repr(case(torch)).replace("torch.", "ember.")
    import tempfile, os
    path = os.path.join(tempfile.mkdtemp(), "c.pt")
    torch.save({"z": torch.tensor([1 + 2j, 3j]), "w": torch.ones(2, 1, dtype=torch.cdouble)}, path)
    loaded = ember.load(path)
    assert loaded["z"].dtype is ember.complex64 and loaded["z"].tolist() == [1 + 2j, 3j]
    assert loaded["w"].dtype is ember.complex128
    x = ember.tensor([[1 + 2j, 3j]], dtype=ember.complex128)
    import io
    from ember.serialization import save_safetensors
    with pytest.raises(TypeError, match="complex128"):
        save_safetensors({"x": x}, io.BytesIO())
    buf = io.BytesIO()
    ember.save({"x": x}, buf)
    buf.seek(0)
    y = ember.load(buf)["x"]
    assert y.dtype is ember.complex128 and y.tolist() == x.tolist()


def test_to_real_discards_the_imaginary_part(torch):
    a = crandn((4,))
    e, t = both(torch, a)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        close(e.to(ember.float32), t.to(torch.float32), 0)
        close(e.to(ember.float64), t.to(torch.float64), 0)
    close(ember.tensor([1.5, -2.0]).to(ember.complex128),
          torch.tensor([1.5, -2.0]).to(torch.complex128), 0)


# ---------------------------------------------------------------- values


UNARY = {
    "neg": lambda L, x: -x,
    "exp": lambda L, x: L.exp(x),
    "abs": lambda L, x: L.abs(x),
    "angle": lambda L, x: L.angle(x),
    "conj": lambda L, x: x.conj(),
    "conj_physical": lambda L, x: L.conj_physical(x),
    "real": lambda L, x: L.real(x),
    "imag": lambda L, x: L.imag(x),
    "reciprocal": lambda L, x: L.reciprocal(x),
    "sum": lambda L, x: x.sum(),
    "sum_dim": lambda L, x: x.sum(-1),
    "mean": lambda L, x: x.mean(0),
    "view_as_real": lambda L, x: L.view_as_real(x),
    "scale": lambda L, x: x * 2.5,
    "rotate": lambda L, x: x * (0.5 - 1j),
    "add_alpha": lambda L, x: L.add(x, x * x, alpha=2),
    "sub": lambda L, x: x - x.conj() * 3,
    "square": lambda L, x: x * x,
}

BINARY = {
    "linear": lambda L, x, y: L.nn.functional.linear(x, y),
    "linear_bias": lambda L, x, y: L.nn.functional.linear(x, y, y[:, 0]),
    "linear_vec": lambda L, x, y: L.nn.functional.linear(x, y[0]),
    "mm": lambda L, x, y: L.mm(x, y.t()),
    "bmm": lambda L, x, y: L.bmm(x[None], y.t()[None]),
    "addmm": lambda L, x, y: L.addmm(x[:, 0], x, y.t(), beta=0.5, alpha=2 - 1j),
    "einsum": lambda L, x, y: L.einsum("ij,kj->ik", x, y),
    "add": lambda L, x, y: x + y,
    "sub": lambda L, x, y: x - y,
    "mul": lambda L, x, y: x * y,
    "div": lambda L, x, y: x / y,
    "matmul": lambda L, x, y: x @ y.transpose(-1, -2),
    "matmul_vec": lambda L, x, y: x @ y[0],
}


@pytest.mark.parametrize("dtype", CDTYPES)
@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_values(torch, name, dtype):
    a = crandn((3, 4), dtype)
    e, t = both(torch, a)
    close(UNARY[name](ember, e), UNARY[name](torch, t), TOL[dtype])


@pytest.mark.parametrize("dtype", CDTYPES)
@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_values(torch, name, dtype):
    e1, t1 = both(torch, crandn((3, 4), dtype))
    e2, t2 = both(torch, crandn((3, 4), dtype))
    close(BINARY[name](ember, e1, e2), BINARY[name](torch, t1, t2), TOL[dtype])


@pytest.mark.parametrize("real", ["float32", "float64"])
def test_mixed_real_and_complex(torch, real):
    e1, t1 = both(torch, crandn((3, 4), "complex64"))
    e2, t2 = both(torch, RNG.standard_normal((4,)).astype(real))
    for fn in BINARY.values():
        if fn not in (BINARY[k] for k in ("add", "sub", "mul", "div")):
            continue
        close(fn(ember, e1, e2), fn(torch, t1, t2), 1e-6)
        close(fn(ember, e2, e1), fn(torch, t2, t1), 1e-6)


def test_complex_polar_and_angle_of_reals(torch):
    for dt in ("float32", "float64"):
        (er, tr), (ei, ti) = (both(torch, RNG.standard_normal((3, 1)).astype(dt)),
                              both(torch, RNG.standard_normal((4,)).astype(dt)))
        close(ember.complex(er, ei), torch.complex(tr, ti), 0)
        close(ember.polar(er.abs(), ei), torch.polar(tr.abs(), ti), TOL[dt])
    x = [-2.0, -0.0, 0.0, 3.0, float("nan"), float("-inf"), float("inf")]
    close(ember.angle(ember.tensor(x)), torch.angle(torch.tensor(x)), 0)
    close(ember.angle(ember.tensor([-2, 0, 3])), torch.angle(torch.tensor([-2, 0, 3])), 0)
    close(ember.atan2(ember.tensor(x), ember.tensor(x[::-1])),
          torch.atan2(torch.tensor(x), torch.tensor(x[::-1])), 1e-6)
    with pytest.raises(RuntimeError):
        ember.complex(ember.ones(2), ember.ones(2, dtype=ember.float64))
    with pytest.raises(RuntimeError):
        ember.complex(ember.ones(2, dtype=ember.int64), ember.ones(2, dtype=ember.int64))


# ---------------------------------------------------------------- gradients


def _loss(L, out):
    """A real loss that depends on the real and imaginary parts differently."""
    out = out.resolve_conj()
    if out.is_complex():
        r = L.view_as_real(out)
        w = L.arange(r.numel(), dtype=r.dtype).reshape(r.shape) / r.numel() - 0.3
        return (r * w).sum() + (r * r).sum() * 0.25
    w = L.arange(out.numel(), dtype=out.dtype).reshape(out.shape) / max(out.numel(), 1)
    return (out * (w - 0.3)).sum() + (out * out).sum() * 0.25


@pytest.mark.parametrize("dtype", CDTYPES)
@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_gradients(torch, name, dtype):
    a = crandn((3, 4), dtype)
    e, t = both(torch, a, requires_grad=True)
    _loss(ember, UNARY[name](ember, e)).backward()
    _loss(torch, UNARY[name](torch, t)).backward()
    close(e.grad, t.grad, TOL[dtype] * 10)


@pytest.mark.parametrize("dtype", CDTYPES)
@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_gradients(torch, name, dtype):
    e1, t1 = both(torch, crandn((3, 4), dtype), requires_grad=True)
    e2, t2 = both(torch, crandn((3, 4), dtype), requires_grad=True)
    _loss(ember, BINARY[name](ember, e1, e2)).backward()
    _loss(torch, BINARY[name](torch, t1, t2)).backward()
    close(e1.grad, t1.grad, TOL[dtype] * 10)
    close(e2.grad, t2.grad, TOL[dtype] * 10)


@pytest.mark.parametrize("real", ["float32", "float64"])
def test_gradients_of_real_inputs_are_real(torch, real):
    """A real input of a complex op gets the real part of the complex gradient."""
    e1, t1 = both(torch, crandn((3, 4), "complex128"), requires_grad=True)
    e2, t2 = both(torch, RNG.standard_normal((3, 4)).astype(real), requires_grad=True)
    for name in ("add", "mul", "div", "sub"):
        e1.grad = e2.grad = t1.grad = t2.grad = None
        _loss(ember, BINARY[name](ember, e2, e1)).backward()
        _loss(torch, BINARY[name](torch, t2, t1)).backward()
        close(e2.grad, t2.grad, TOL[real] * 10)
        close(e1.grad, t1.grad, TOL[real] * 10)


@pytest.mark.parametrize("dt", ["float32", "float64"])
def test_gradients_of_complex_polar_angle_abs(torch, dt):
    (er, tr) = both(torch, np.abs(RNG.standard_normal((3, 4))).astype(dt) + 0.1,
                    requires_grad=True)
    (ea, ta) = both(torch, RNG.standard_normal((3, 4)).astype(dt), requires_grad=True)
    _loss(ember, ember.polar(er, ea)).backward()
    _loss(torch, torch.polar(tr, ta)).backward()
    close(er.grad, tr.grad, TOL[dt] * 10)
    close(ea.grad, ta.grad, TOL[dt] * 10)
    er.grad = ea.grad = tr.grad = ta.grad = None
    _loss(ember, ember.complex(er, ea)).backward()
    _loss(torch, torch.complex(tr, ta)).backward()
    close(er.grad, tr.grad, TOL[dt] * 10)
    close(ea.grad, ta.grad, TOL[dt] * 10)
    # view_as_complex of a real tensor, back through view_as_real
    (ex, tx) = both(torch, RNG.standard_normal((3, 2)).astype(dt), requires_grad=True)
    z_e, z_t = ember.view_as_complex(ex), torch.view_as_complex(tx)
    _loss(ember, ember.angle(z_e) + ember.abs(z_e * z_e)).backward()
    _loss(torch, torch.angle(z_t) + torch.abs(z_t * z_t)).backward()
    close(ex.grad, tx.grad, TOL[dt] * 10)


def test_abs_and_angle_gradients_at_zero(torch):
    a = np.array([0j, 1 + 1j, -2j], dtype=np.complex128)
    for fn in (lambda L, x: L.abs(x), lambda L, x: L.angle(x)):
        e, t = both(torch, a, requires_grad=True)
        fn(ember, e).sum().backward()
        fn(torch, t).sum().backward()
        close(e.grad, t.grad, 1e-12)


# ---------------------------------------------------------------- rotary embeddings


def _precompute_freqs_cis(L, dim, end, theta=10000.0, dtype="float32"):
    freqs = 1.0 / (theta ** (L.arange(0, dim, 2)[: (dim // 2)].to(getattr(L, dtype)) / dim))
    t = L.arange(end, dtype=freqs.dtype)
    freqs = L.outer(t, freqs)
    return L.polar(L.ones_like(freqs), freqs)


def _apply_rotary_emb(L, xq, xk, freqs_cis):
    xq_ = L.view_as_complex(xq.float().reshape(*xq.shape[:-1], -1, 2))
    xk_ = L.view_as_complex(xk.float().reshape(*xk.shape[:-1], -1, 2))
    shape = [d if i == 1 or i == xq_.ndim - 1 else 1 for i, d in enumerate(xq_.shape)]
    freqs_cis = freqs_cis.view(*shape)
    xq_out = L.view_as_real(xq_ * freqs_cis).flatten(3)
    xk_out = L.view_as_real(xk_ * freqs_cis).flatten(3)
    return xq_out.type_as(xq), xk_out.type_as(xk)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_llama_rotary_embeddings(torch, dtype):
    bsz, seqlen, heads, head_dim = 2, 5, 3, 8
    eq, tq = both(torch, RNG.standard_normal((bsz, seqlen, heads, head_dim)).astype(dtype),
                  requires_grad=True)
    ek, tk = both(torch, RNG.standard_normal((bsz, seqlen, heads, head_dim)).astype(dtype),
                  requires_grad=True)
    fe = _precompute_freqs_cis(ember, head_dim, seqlen, dtype=dtype)
    ft = _precompute_freqs_cis(torch, head_dim, seqlen, dtype=dtype)
    close(fe, ft, TOL[dtype])
    oq, ok = _apply_rotary_emb(ember, eq.double() if dtype == "float64" else eq,
                               ek.double() if dtype == "float64" else ek, fe)
    wq, wk = _apply_rotary_emb(torch, tq.double() if dtype == "float64" else tq,
                               tk.double() if dtype == "float64" else tk, ft)
    tol = TOL[dtype]
    assert oq.dtype is getattr(ember, dtype)
    close(oq, wq, tol)
    close(ok, wk, tol)
    _loss(ember, oq * ok).backward()
    _loss(torch, wq * wk).backward()
    close(eq.grad, tq.grad, tol)
    close(ek.grad, tk.grad, tol)


def test_llama_rotary_float64_inputs_exact(torch):
    """float64 queries and keys with complex128 frequencies: 1e-12 against torch."""
    x = RNG.standard_normal((1, 4, 2, 6))
    e, t = both(torch, x, requires_grad=True)
    fe = _precompute_freqs_cis(ember, 6, 4, dtype="float64")
    ft = _precompute_freqs_cis(torch, 6, 4, dtype="float64")
    oe = ember.view_as_real(ember.view_as_complex(e.reshape(1, 4, 2, 3, 2)) *
                            fe.view(1, 4, 1, 3)).flatten(3)
    ot = torch.view_as_real(torch.view_as_complex(t.reshape(1, 4, 2, 3, 2)) *
                            ft.view(1, 4, 1, 3)).flatten(3)
    close(oe, ot, 1e-12)
    _loss(ember, oe).backward()
    _loss(torch, ot).backward()
    close(e.grad, t.grad, 1e-12)


# ---------------------------------------------------------------- compile


def _rope_fn(L):
    def f(x, freqs):
        z = L.view_as_complex(x.reshape(*x.shape[:-1], -1, 2))
        return L.view_as_real(z * freqs).flatten(-2)
    return f


@pytest.mark.parametrize("backend", ["llvm", "aot_eager", "eager"])
def test_compile_on_complex_tensors_falls_back(backend):
    from ember.capture import counters, reset
    reset()
    x = ember.from_numpy(RNG.standard_normal((3, 4)).astype(np.float32))
    freqs = _precompute_freqs_cis(ember, 4, 3)
    f = _rope_fn(ember)
    want = f(x, freqs)
    cf = ember.compile(f, backend=backend)
    got = cf(x, freqs)
    close(got, want.numpy(), 0)
    got = cf(x, freqs)
    close(got, want.numpy(), 0)
    reasons = " ".join(str(k) for k in counters["unsupported"])
    assert "complex" in reasons, dict(counters)

    def g(z):                     # a complex argument, and a complex result
        return z * z + 1
    z = ember.from_numpy(crandn((5,)))
    cg = ember.compile(g, backend=backend)
    close(cg(z), g(z).numpy(), 0)


def test_compile_with_gradients_on_complex_tensors():
    x = ember.from_numpy(RNG.standard_normal((3, 4)).astype(np.float32))
    freqs = _precompute_freqs_cis(ember, 4, 3)
    f = _rope_fn(ember)
    x1 = x.detach().requires_grad_(True)
    _loss(ember, f(x1, freqs)).backward()
    x2 = x.detach().requires_grad_(True)
    _loss(ember, ember.compile(f)(x2, freqs)).backward()
    close(x2.grad, x1.grad.numpy(), 0)


# ---------------------------------------------------------------- the whole op table


def _op_db():
    import op_db
    from test_ops import INFOS, to_torch
    return op_db, INFOS, to_torch


def _complexified(t, rng):
    if isinstance(t, ember.Tensor) and t.dtype is ember.float32:
        a = t.detach().numpy().astype(np.float64)
        return ember.from_numpy(np.asarray(a + 1j * rng.standard_normal(a.shape)))
    if isinstance(t, tuple):
        return tuple(_complexified(x, rng) for x in t)
    return t


# ember computes these where torch refuses complex: linear maps with real weights and
# equality-based ops, whose values are well defined
_EMBER_ONLY = {"_upsample_nearest_exact2d", "_upsample_nearest_exact3d", "upsample_bicubic2d",
               "upsample_bilinear2d", "upsample_nearest2d", "upsample_nearest3d",
               "unique_consecutive", "empty_like"}


def test_every_op_on_complex_inputs_raises_or_matches_torch(torch):
    """Each op_db op with its float32 samples' tensors made complex128: ember raises, or
    its values and the gradients of a real loss equal torch's (no silent real parts)."""
    op_db, infos, to_torch = _op_db()
    checked = set()
    for key, info in sorted(infos.items()):
        if info.random or "float32" not in info.dtypes or key in _EMBER_ONLY:
            continue
        for k, s in enumerate(info.samples("float32", np.random.default_rng(0))[:3]):
            rng = np.random.default_rng(k)
            args = [_complexified(a, rng) for a in s.args]
            kwargs = {n: _complexified(v, rng) for n, v in s.kwargs.items()}
            leaves = [i for i, a in enumerate(args) if isinstance(a, ember.Tensor) and
                      a.is_complex() and a.numel() > 0]
            if not leaves:
                continue
            targs = [to_torch(torch, a) for a in args]
            tkwargs = {n: to_torch(torch, v) for n, v in kwargs.items()}
            grads = not info.inplace
            if grads:
                for i in leaves:
                    args[i] = args[i].detach().requires_grad_(True)
                    targs[i] = targs[i].detach().clone().requires_grad_(True)
            else:
                args = [a.clone() if isinstance(a, ember.Tensor) else a for a in args]
            try:
                out = info.call(*args, **kwargs)
            except Exception:      # noqa: BLE001 - refusing is allowed
                continue
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                try:
                    want = info.call_torch(torch, *targs, **tkwargs)
                except RuntimeError:    # bilinear: no complex derivative; values only
                    if not grads:
                        raise
                    grads = False
                    targs = [a.detach() if isinstance(a, torch.Tensor) else a for a in targs]
                    want = info.call_torch(torch, *targs, **tkwargs)
            what = f"{key} {s}"
            outs = out if isinstance(out, tuple) else (out,)
            wants = want if isinstance(want, tuple) else (want,)
            for o, w in zip(outs, wants):
                if isinstance(o, ember.Tensor):
                    close(o, w, 1e-5)
                else:
                    assert o == w, what
            checked.add(key)
            if not grads:
                continue
            diff = [o for o in outs if isinstance(o, ember.Tensor) and o.requires_grad]
            if not diff:
                continue
            try:       # torch has no complex derivative for a few ops (bilinear's)
                sum(_loss(torch, w) for w in wants
                    if isinstance(w, torch.Tensor) and w.requires_grad).backward()
            except RuntimeError:
                continue
            sum(_loss(ember, o) for o in diff).backward()
            for i in leaves:
                assert (args[i].grad is None) == (targs[i].grad is None), what
                if args[i].grad is not None:
                    close(args[i].grad, targs[i].grad, 1e-8)
    assert {"add", "mul", "div", "matmul", "linear", "sum", "mean", "abs", "angle",
            "gather", "index_put", "where"} <= checked


def test_compile_breaks_before_a_complex_result_and_keeps_gradients():
    """The graph stops at the op whose result is complex (a graph break); the rest of
    the frame, whose values are complex, runs eagerly; gradients flow through both."""
    from ember.capture import counters, reset
    reset()

    def f(x):
        y = (x * 2).sin()
        z = ember.view_as_complex(y)
        return ember.view_as_real(z * z.conj() + z * 2).sum(-1)

    x = ember.from_numpy(RNG.standard_normal((3, 2, 2)))
    x1, x2 = x.clone().requires_grad_(True), x.clone().requires_grad_(True)
    want = f(x1)
    got = ember.compile(f)(x2)
    close(got, want.detach().numpy(), 1e-12)
    _loss(ember, want).backward()
    _loss(ember, got).backward()
    close(x2.grad, x1.grad.numpy(), 1e-12)
    assert sum(counters["graph_break"].values()) >= 1, dict(counters)
    assert any("complex" in str(k) for k in counters["unsupported"]), dict(counters)


def test_compile_module_with_a_complex_attribute():
    """A module holding complex frequencies (Llama's freqs_cis): its forward runs eagerly,
    with the same values as without compile."""
    import importlib.util
    import pathlib
    path = pathlib.Path(__file__).parent / "scripts" / "llama_block.py"
    src = path.read_text().replace("import torch.nn.functional as F", "import ember.nn."
                                   "functional as F").replace("import torch.nn as nn",
                                                              "import ember.nn as nn")
    src = src.replace("import torch\n", "import ember as torch\n")
    spec = importlib.util.spec_from_loader("llama_block_ember", loader=None)
    mod = importlib.util.module_from_spec(spec)
    exec(compile(src, str(path), "exec"), mod.__dict__)
    model = mod.TinyLlama()
    from ember.capture import counters, reset
    reset()
    tokens = ember.from_numpy(RNG.integers(0, 16, size=(2, 8)))
    want = model(tokens)
    got = ember.compile(model)(tokens)     # the real parts compiled: float32 rounding
    close(got, want.detach().numpy(), 1e-5)
    assert any("complex" in str(k) for k in counters["unsupported"]), dict(counters)
