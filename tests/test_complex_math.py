"""Complex math beyond arithmetic: the transcendental functions, powers, sigmoid, the
inverse and hyperbolic functions and the NaN/inf tests on complex64/complex128, their
values against PyTorch and their gradients as PyTorch defines them (the gradient of a
real loss with respect to z = x + iy is dL/dx + i dL/dy: grad * conj(f'(z)) for a
holomorphic f), checked against torch.autograd; and a Llama-style rotary embedding
written with polar, view_as_complex and complex powers."""
import numpy as np
import pytest

import ember

from test_complex import CDTYPES, TOL, _loss, both, close, crandn

# points away from the branch cuts (the real axis beyond +-1, the imaginary axis
# beyond +-i, the negative real axis), where gradients are smooth
UNARY = {
    "log": lambda L, x: L.log(x),
    "log2": lambda L, x: L.log2(x),
    "log10": lambda L, x: L.log10(x),
    "log1p": lambda L, x: L.log1p(x),
    "expm1": lambda L, x: L.expm1(x),
    "sqrt": lambda L, x: L.sqrt(x),
    "rsqrt": lambda L, x: L.rsqrt(x),
    "sin": lambda L, x: L.sin(x),
    "cos": lambda L, x: L.cos(x),
    "tan": lambda L, x: L.tan(x),
    "sinh": lambda L, x: L.sinh(x),
    "cosh": lambda L, x: L.cosh(x),
    "tanh": lambda L, x: L.tanh(x),
    "sigmoid": lambda L, x: L.sigmoid(x),
    "asin": lambda L, x: L.asin(x),
    "acos": lambda L, x: L.acos(x),
    "atan": lambda L, x: L.atan(x),
    "asinh": lambda L, x: L.asinh(x),
    "acosh": lambda L, x: L.acosh(x),
    "atanh": lambda L, x: L.atanh(x),
    "square": lambda L, x: L.square(x),
    "pow_int": lambda L, x: x ** 3,
    "pow_neg_int": lambda L, x: x ** -2,
    "pow_half": lambda L, x: x ** 0.5,
    "pow_complex_number": lambda L, x: L.pow(x, 0.5 - 1.5j),
    "rpow": lambda L, x: 2.0 ** x,
    "rpow_complex": lambda L, x: (1 + 1j) ** x,
    "sigmoid_method": lambda L, x: x.sigmoid() * x.tanh(),
}

BINARY = {
    "pow": lambda L, x, y: L.pow(x, y),
    "pow_real_exponent": lambda L, x, y: L.pow(x, L.real(y)),
    "pow_real_base": lambda L, x, y: L.pow(L.real(x).abs() + 0.5, y),
}


def _sample(dtype, rng=None):
    rng = rng or np.random.default_rng(1)
    a = crandn((3, 4), dtype, rng) * 0.6
    a = a + np.where(a.real >= 0, 0.3, -0.3).astype(a.dtype)   # off the imaginary axis
    return a + (0.2j * np.where(a.imag >= 0, 1, -1)).astype(a.dtype)   # and the real one


@pytest.mark.parametrize("dtype", CDTYPES)
@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_values_and_gradients(torch, name, dtype):
    e, t = both(torch, _sample(dtype), requires_grad=True)
    oe, ot = UNARY[name](ember, e), UNARY[name](torch, t)
    assert oe.dtype is getattr(ember, dtype)
    close(oe, ot, TOL[dtype] * 4)
    _loss(ember, oe).backward()
    _loss(torch, ot).backward()
    close(e.grad, t.grad, TOL[dtype] * 40)


@pytest.mark.parametrize("dtype", CDTYPES)
@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_values_and_gradients(torch, name, dtype):
    e1, t1 = both(torch, _sample(dtype), requires_grad=True)
    e2, t2 = both(torch, _sample(dtype, np.random.default_rng(2)) * 0.5, requires_grad=True)
    oe, ot = BINARY[name](ember, e1, e2), BINARY[name](torch, t1, t2)
    close(oe, ot, TOL[dtype] * 4)
    _loss(ember, oe).backward()
    _loss(torch, ot).backward()
    close(e1.grad, t1.grad, TOL[dtype] * 40)
    close(e2.grad, t2.grad, TOL[dtype] * 40)


def test_real_inputs_of_complex_powers_get_real_gradients(torch):
    """A real base raised to a complex power: its gradient is the real part."""
    (e, t), (ee, te) = both(torch, np.array([0.5, 1.5, 2.0]), True), \
        both(torch, np.array([1 + 1j, -0.5j, 2]), True)
    _loss(ember, ember.pow(e, ee)).backward()
    _loss(torch, torch.pow(t, te)).backward()
    assert e.grad.dtype is ember.float64
    close(e.grad, t.grad, 1e-12)
    close(ee.grad, te.grad, 1e-12)


def test_special_values_match_torch(torch):
    vals = np.array([0j, -0.0 + 0j, 1 + 0j, -1 + 0j, complex("inf"), complex("-inf"),
                     complex("nan"), complex(0, float("inf")), 1j, -1j], dtype=np.complex128)
    e, t = both(torch, vals)
    for name in ("isnan", "isinf", "isfinite"):
        close(getattr(ember, name)(e), getattr(torch, name)(t), 0)
    finite = vals[np.isfinite(vals)]
    e, t = both(torch, finite)
    for name in ("log", "sqrt", "exp", "sin", "cos", "tanh", "sigmoid", "asin", "atanh"):
        with np.errstate(all="ignore"):
            close(getattr(ember, name)(e), getattr(torch, name)(t), 1e-12)
    close(e ** 2, t ** 2, 1e-12)
    close(e ** 0, t ** 0, 0)


def test_real_inverse_and_hyperbolic_functions(torch):
    x = np.array([-0.9, -0.3, 0.0, 0.4, 0.95], dtype=np.float32)
    for name in ("sinh", "cosh", "asin", "acos", "asinh", "atanh", "arcsin", "arccos",
                 "arcsinh", "arctanh", "arctan"):
        e, t = both(torch, x, requires_grad=True)
        close(getattr(ember, name)(e), getattr(torch, name)(t), 1e-6)
        getattr(ember, name)(e).sum().backward()
        getattr(torch, name)(t).sum().backward()
        close(e.grad, t.grad, 1e-5)
    e, t = both(torch, np.array([1.0, 1.5, 3.0, 0.5], dtype=np.float32))
    close(ember.acosh(e), torch.acosh(t), 1e-6)
    ei, ti = both(torch, np.array([1, 2, 3]))
    close(ember.sinh(ei), torch.sinh(ti), 1e-6)          # integers compute in float32
    y = ember.tensor([0.5, 0.25])
    y.asin_()
    close(y, torch.tensor([0.5, 0.25]).asin_(), 1e-7)
    assert ember.Tensor.arcsin is not None and hasattr(ember.tensor(1.0), "arccosh_")


def _freqs_cis(L, dim, end, theta=10000.0):
    freqs = 1.0 / (theta ** (L.arange(0, dim, 2)[: dim // 2].float() / dim))
    t = L.arange(end).float()
    return L.polar(L.ones(end, dim // 2), L.outer(t, freqs))


def test_rotary_embedding_through_complex_exp_and_powers(torch):
    """RoPE as some implementations write it: the rotation exp(i theta) and a complex
    power of a unit rotation, equal to polar's; values and gradients as torch's."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 5, 4, 8)).astype(np.float32)
    outs = []
    for L in (ember, torch):
        xt = L.from_numpy(x.copy()).requires_grad_(True)
        f = _freqs_cis(L, 8, 5)
        angle = L.angle(f)
        rot = L.exp(L.complex(L.zeros_like(angle), angle))
        step = L.polar(L.ones(4), angle[1]) ** L.arange(5).reshape(5, 1).to(L.complex64)
        xc = L.view_as_complex(xt.reshape(2, 5, 4, 4, 2))
        y = L.view_as_real(xc * rot.reshape(1, 5, 1, 4) * L.sigmoid(xc.abs()).to(xc.dtype))
        z = L.view_as_real(xc * step.reshape(1, 5, 1, 4))
        loss = (y.flatten(3) ** 2).sum() * 0.1 + L.log(L.tanh(y).abs() + 1).sum() + \
            (z.flatten(3) * L.arange(8.0)).sum() * 0.01
        loss.backward()
        outs.append((loss.detach().numpy(), xt.grad.numpy(), step.detach().numpy()))
    for a, b in zip(*outs):
        np.testing.assert_allclose(a, b, rtol=2e-5, atol=2e-5)
