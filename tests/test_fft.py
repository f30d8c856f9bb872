"""ember.fft against torch.fft: every function with its n/s, dim and norm keywords (values,
dtypes, shapes, strides), the errors, and the gradients of fft, ifft, rfft, irfft and the
rest through torch.autograd (Wirtinger, as PyTorch: real and complex inputs, a loss
mixing real and imaginary parts). tests/op_db_special.py holds the op_db entries of the
three DFT prims (_fft_c2c, _fft_r2c, _fft_c2r)."""
import numpy as np
import pytest

import ember

torch = pytest.importorskip("torch")

RNG = np.random.default_rng(7)
REAL = RNG.standard_normal((3, 4, 6))
CPLX = REAL + 1j * RNG.standard_normal((3, 4, 6))

COMPLEX_IN = ["fft", "ifft", "fft2", "ifft2", "fftn", "ifftn", "hfft", "irfft", "irfft2",
              "irfftn"]
REAL_ONLY = ["rfft", "rfft2", "rfftn", "ihfft"]
KW = [{}, {"norm": "ortho"}, {"norm": "forward"}, {"norm": "backward"}]
ONE_D = {"fft", "ifft", "hfft", "irfft", "rfft", "ihfft"}


def _sized(name):
    if name in ONE_D:
        return [{"n": 8, "dim": 0}, {"n": 3, "dim": 1}, {"dim": -2}]
    if name.endswith("2"):
        return [{"s": (5, 3)}, {"dim": (0, 2)}]
    return [{"s": (2, 5), "dim": (0, 2)}, {"s": (5, 7)}, {"dim": (1,)}]


def _cases():
    out = []
    for name in COMPLEX_IN + REAL_ONLY:
        for kw in KW + _sized(name):
            out.append((name, kw))
    return out


def _same(e, t, tol):
    assert str(e.dtype) == "ember." + str(t.dtype).split(".")[1]
    assert tuple(e.shape) == tuple(t.shape)
    assert e.stride() == t.stride()
    np.testing.assert_allclose(e.resolve_conj().numpy(), t.resolve_conj().numpy(), rtol=tol,
                               atol=tol)


@pytest.mark.parametrize("name,kw", _cases(), ids=lambda v: str(v))
def test_values_match_torch(name, kw):
    inputs = [REAL, REAL.astype(np.float32), np.arange(24).reshape(2, 3, 4)]
    if name not in REAL_ONLY:
        inputs += [CPLX, CPLX.astype(np.complex64)]
    for arr in inputs:
        e = getattr(ember.fft, name)(ember.tensor(arr), **kw)
        t = getattr(torch.fft, name)(torch.tensor(arr), **kw)
        _same(e, t, 1e-12 if arr.dtype in (np.float64, np.complex128) else 2e-5)


def _loss(out, w1, w2):
    if out.is_complex():
        return (out.real * w1).sum() + (out.imag * w2).sum()
    return (out * w1).sum()


@pytest.mark.parametrize("name,kw", _cases(), ids=lambda v: str(v))
def test_gradients_match_torch(name, kw):
    inputs = [REAL] + ([CPLX] if name not in REAL_ONLY else [])
    for arr in inputs:
        a = ember.tensor(arr, requires_grad=True)
        t = torch.tensor(arr, requires_grad=True)
        e_out = getattr(ember.fft, name)(a, **kw)
        t_out = getattr(torch.fft, name)(t, **kw)
        w1 = RNG.standard_normal(tuple(t_out.shape))
        w2 = RNG.standard_normal(tuple(t_out.shape))
        _loss(e_out, ember.tensor(w1), ember.tensor(w2)).backward()
        _loss(t_out, torch.tensor(w1), torch.tensor(w2)).backward()
        assert a.grad.dtype is a.dtype
        np.testing.assert_allclose(a.grad.resolve_conj().numpy(),
                                   t.grad.resolve_conj().numpy(), rtol=1e-10, atol=1e-10)


def test_gradcheck_of_the_prims():
    x = ember.tensor(CPLX[:2, :3], requires_grad=True)
    r = ember.tensor(REAL[:2, :5], requires_grad=True)
    assert ember.autograd.gradcheck(lambda v: ember.fft.fft(v, norm="ortho"), [x])
    assert ember.autograd.gradcheck(lambda v: ember.fft.rfft(v), [r])
    assert ember.autograd.gradcheck(lambda v: ember.fft.irfft(v, n=5), [x])
    assert ember.autograd.gradcheck(lambda v: ember.fft.ifftn(v, s=(3, 4)), [x])


def test_helpers_match_torch():
    for n, d in [(5, 1.0), (6, 0.5), (1, 2.0)]:
        for f in ("fftfreq", "rfftfreq"):
            np.testing.assert_allclose(getattr(ember.fft, f)(n, d).numpy(),
                                       getattr(torch.fft, f)(n, d).numpy(), rtol=1e-7)
        assert ember.fft.fftfreq(n, dtype=ember.float64).dtype is ember.float64
    x = np.arange(30.0).reshape(5, 6)
    for f in ("fftshift", "ifftshift"):
        for dim in (None, 0, (1,), (0, 1)):
            np.testing.assert_array_equal(getattr(ember.fft, f)(ember.tensor(x), dim=dim).numpy(),
                                          getattr(torch.fft, f)(torch.tensor(x), dim=dim).numpy())


ERRORS = [("fft", (np.ones(4),), {"norm": "bad"}), ("fft", (np.ones(4),), {"n": 0}),
          ("rfft", (np.ones(4) + 0j,), {}), ("fft", (np.ones(4),), {"dim": 3}),
          ("fftn", (np.ones((4, 4)),), {"s": (2,), "dim": (0, 1)}),
          ("irfft", (np.ones(1),), {}), ("fft", (np.ones(4, np.float16),), {}),
          ("rfft", (np.ones(4, np.float16),), {})]


@pytest.mark.parametrize("name,args,kw", ERRORS, ids=[f"{e[0]}{i}" for i, e in
                                                      enumerate(ERRORS)])
def test_errors_match_torch(name, args, kw):
    with pytest.raises(Exception) as mine:
        getattr(ember.fft, name)(*[ember.tensor(a) for a in args], **kw)
    with pytest.raises(Exception) as theirs:
        getattr(torch.fft, name)(*[torch.tensor(a) for a in args], **kw)
    assert type(mine.value) is type(theirs.value), (mine.value, theirs.value)
