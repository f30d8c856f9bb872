"""nn.utils.parametrize (register_parametrization, cached, remove_parametrizations,
right_inverse through assignment), nn.utils.parametrizations (weight_norm, spectral_norm,
orthogonal with every map) and the hook-based nn.utils.weight_norm, against PyTorch:
state_dict keys, outputs and gradients after the learned tensors are moved away from
their initial values."""
import copy
import warnings

import numpy as np
import pytest

import ember
import ember.nn as nn
from ember.nn.utils import parametrize


def _sync(tm, em):
    tsd = tm.state_dict()
    assert list(tsd) == list(em.state_dict())
    em.load_state_dict({k: ember.from_numpy(v.detach().numpy().copy()) for k, v in tsd.items()})


def _perturb(torch, tm, em, seed, scale=0.3):
    """Moves every parameter (the originals) the same way in both modules."""
    rng = np.random.default_rng(seed)
    tp = dict(tm.named_parameters())
    with torch.no_grad():
        for name, p in em.named_parameters():
            d = np.asarray(rng.standard_normal(tuple(p.shape)) * scale)
            tp[name].add_(torch.from_numpy(d))
            with ember.no_grad():
                p.add_(ember.from_numpy(d))


def _compare(torch, tm, em, x, rtol=1e-10, atol=1e-12):
    tx, ex = torch.from_numpy(x), ember.from_numpy(x.copy())
    to, eo = tm(tx), em(ex)
    np.testing.assert_allclose(eo.detach().numpy(), to.detach().numpy(), rtol=rtol, atol=atol)
    g = np.random.default_rng(1).standard_normal(tuple(to.shape))
    (to * torch.from_numpy(g)).sum().backward()
    (eo * ember.from_numpy(g)).sum().backward()
    tp = dict(tm.named_parameters())
    names = [n for n, _ in em.named_parameters()]
    assert names == list(tp)
    for n, p in em.named_parameters():
        np.testing.assert_allclose(p.grad.numpy(), tp[n].grad.numpy(), rtol=rtol,
                                   atol=atol, err_msg=n)
    for name, b in em.named_buffers():
        np.testing.assert_allclose(b.numpy(), dict(tm.named_buffers())[name].numpy(),
                                   rtol=rtol, atol=atol, err_msg=name)


PARAMS = [
    ("weight_norm", lambda L, m: L.nn.utils.parametrizations.weight_norm(m), (4, 3)),
    ("weight_norm dim=1", lambda L, m: L.nn.utils.parametrizations.weight_norm(m, dim=1),
     (4, 3)),
    ("weight_norm dim=None", lambda L, m: L.nn.utils.parametrizations.weight_norm(m, dim=None),
     (4, 3)),
    ("spectral_norm", lambda L, m: L.nn.utils.parametrizations.spectral_norm(m), (4, 3)),
    ("spectral_norm 3 iterations", lambda L, m: L.nn.utils.parametrizations.spectral_norm(
        m, n_power_iterations=3, eps=1e-6), (5, 2)),
    ("orthogonal square (matrix_exp)", lambda L, m: L.nn.utils.parametrizations.orthogonal(m),
     (4, 4)),
    ("orthogonal cayley", lambda L, m: L.nn.utils.parametrizations.orthogonal(
        m, orthogonal_map="cayley"), (4, 4)),
    ("orthogonal householder square", lambda L, m: L.nn.utils.parametrizations.orthogonal(
        m, orthogonal_map="householder"), (4, 4)),
    ("orthogonal wide (householder)", lambda L, m: L.nn.utils.parametrizations.orthogonal(m),
     (4, 6)),
    ("orthogonal tall (householder)", lambda L, m: L.nn.utils.parametrizations.orthogonal(m),
     (5, 3)),
    ("orthogonal tall matrix_exp", lambda L, m: L.nn.utils.parametrizations.orthogonal(
        m, orthogonal_map="matrix_exp"), (5, 3)),
    ("orthogonal wide cayley", lambda L, m: L.nn.utils.parametrizations.orthogonal(
        m, orthogonal_map="cayley"), (3, 5)),
    ("orthogonal no trivialization", lambda L, m: L.nn.utils.parametrizations.orthogonal(
        m, use_trivialization=False), (4, 6)),
    ("orthogonal householder no trivialization",
     lambda L, m: L.nn.utils.parametrizations.orthogonal(m, orthogonal_map="householder",
                                                         use_trivialization=False), (4, 4)),
]


@pytest.mark.parametrize("desc,make,dims", PARAMS, ids=[p[0] for p in PARAMS])
def test_parametrizations_match_torch(torch, desc, make, dims):
    torch.manual_seed(0)
    tm = make(torch, torch.nn.Linear(*dims).double())
    em = make(ember, nn.Linear(*dims).double())
    assert type(em).__name__ == type(tm).__name__ == "ParametrizedLinear"
    _sync(tm, em)
    _perturb(torch, tm, em, 3)
    x = np.random.default_rng(2).standard_normal((5, dims[0]))
    for _ in range(2):                  # twice: spectral norm's power iteration moves on
        _compare(torch, tm, em, x)
        tm.zero_grad()
        em.zero_grad()
    tm.eval()
    em.eval()
    _compare(torch, tm, em, x)


def test_orthogonal_results_are_orthogonal():
    for dims, kw in (((4, 4), {}), ((6, 3), {}), ((3, 5), dict(orthogonal_map="cayley")),
                     ((4, 4), dict(orthogonal_map="householder"))):
        m = nn.utils.parametrizations.orthogonal(nn.Linear(*dims).double(), **kw)
        with ember.no_grad():     # below the diagonal (Householder reads its sign there)
            orig = m.parametrizations.weight.original
            orig.add_((ember.randn(*orig.shape, dtype=ember.float64) * 0.5).tril(-1))
        w = m.weight.detach().numpy()
        q = w if w.shape[0] >= w.shape[1] else w.T
        np.testing.assert_allclose(q.T @ q, np.eye(q.shape[1]), atol=1e-12)
        # assigning an orthogonal matrix stores it (right_inverse through the trivialization)
        r, c = w.shape
        full = np.linalg.qr(np.random.default_rng(0).standard_normal((max(r, c),) * 2))[0]
        target = full[:r, :c] if r >= c else full[:c, :r].T
        m.weight = ember.from_numpy(np.ascontiguousarray(target))
        np.testing.assert_allclose(m.weight.detach().numpy(), target, atol=1e-12)


def test_conv_weight_norm_and_spectral_norm(torch):
    for make in (lambda L, m: L.nn.utils.parametrizations.weight_norm(m),
                 lambda L, m: L.nn.utils.parametrizations.spectral_norm(m)):
        for conv in ("Conv2d", "ConvTranspose2d"):
            torch.manual_seed(0)
            tm = make(torch, getattr(torch.nn, conv)(3, 4, 3).double())
            em = make(ember, getattr(nn, conv)(3, 4, 3).double())
            _sync(tm, em)
            _perturb(torch, tm, em, 4, 0.1)
            x = np.random.default_rng(5).standard_normal((2, 3, 5, 5))
            _compare(torch, tm, em, x, rtol=1e-9, atol=1e-11)


def test_old_weight_norm(torch):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for dim in (0, 1, None):
            tm = torch.nn.utils.weight_norm(torch.nn.Linear(4, 3).double(), dim=dim)
            em = nn.utils.weight_norm(nn.Linear(4, 3).double(), dim=dim)
            _sync(tm, em)
            assert list(em.state_dict()) == ["bias", "weight_g", "weight_v"]
            _perturb(torch, tm, em, 6)
            _compare(torch, tm, em, np.random.default_rng(7).standard_normal((3, 4)))
            torch.nn.utils.remove_weight_norm(tm)
            nn.utils.remove_weight_norm(em)
            assert list(em.state_dict()) == list(tm.state_dict()) == ["bias", "weight"]
            np.testing.assert_allclose(em.weight.detach().numpy(),
                                       tm.weight.detach().numpy(), rtol=1e-12)
    with pytest.warns(FutureWarning, match="deprecated"):
        m = nn.utils.weight_norm(nn.Linear(2, 2))
    with pytest.raises(RuntimeError, match="Cannot register two weight_norm hooks"):
        nn.utils.weight_norm(m)
    with pytest.raises(ValueError, match="not found"):
        nn.utils.remove_weight_norm(nn.Linear(2, 2))


def test_weight_norm_loads_old_state_dicts():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        old = nn.utils.weight_norm(nn.Linear(4, 3))
    new = nn.utils.parametrizations.weight_norm(nn.Linear(4, 3))
    new.load_state_dict(old.state_dict())
    x = ember.randn(2, 4)
    np.testing.assert_allclose(new(x).detach().numpy(), old(x).detach().numpy(), rtol=1e-6)


class _Symmetric(nn.Module):
    def forward(self, X):
        return X.triu() + X.triu(1).mT


class _Scale(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("factor", ember.tensor(2.0))

    def forward(self, X):
        return X * self.factor

    def right_inverse(self, Y):
        return Y / self.factor


class _Split(nn.Module):
    """Two tensors for one: right_inverse returns a sequence."""

    def forward(self, A, B):
        return A + B

    def right_inverse(self, W):
        return W * 0.25, W * 0.75


def test_register_parametrization_api(torch):
    m = nn.Linear(3, 3)
    w0 = m.weight.detach().clone()
    parametrize.register_parametrization(m, "weight", _Symmetric())
    assert parametrize.is_parametrized(m) and parametrize.is_parametrized(m, "weight")
    assert not parametrize.is_parametrized(m, "bias")
    assert parametrize.type_before_parametrizations(m) is nn.Linear
    assert type(m).__name__ == "ParametrizedLinear" and isinstance(m, nn.Linear)
    assert type(nn.Linear(2, 2)) is nn.Linear                  # other instances untouched
    w = m.weight.detach().numpy()
    np.testing.assert_array_equal(w, w.T)
    assert list(m.state_dict()) == ["bias", "parametrizations.weight.original"]
    # a chain: the second parametrization's buffer joins the state_dict
    parametrize.register_parametrization(m, "weight", _Scale())
    assert list(m.state_dict()) == ["bias", "parametrizations.weight.original",
                                    "parametrizations.weight.1.factor"]
    np.testing.assert_allclose(m.weight.detach().numpy(), 2 * w, rtol=1e-6)
    # gradients reach the original
    m(ember.randn(2, 3)).sum().backward()
    assert m.parametrizations.weight.original.grad is not None
    # cached(): one computation per block
    calls = []
    m.parametrizations.weight[0].register_forward_hook(lambda *a: calls.append(1))
    with parametrize.cached():
        a, b = m.weight, m.weight
    assert a is b and len(calls) == 1
    m.weight
    assert len(calls) == 2
    # removing leaves the parametrized value, and the class goes back
    parametrize.remove_parametrizations(m, "weight")
    assert type(m) is nn.Linear and isinstance(m.weight, nn.Parameter)
    np.testing.assert_allclose(m.weight.detach().numpy(), 2 * w, rtol=1e-6)
    assert not hasattr(m, "parametrizations")
    # leave_parametrized=False restores the original
    m2 = nn.Linear(3, 3)
    orig = m2.weight.detach().clone()
    parametrize.register_parametrization(m2, "weight", _Symmetric())
    parametrize.remove_parametrizations(m2, "weight", leave_parametrized=False)
    np.testing.assert_array_equal(m2.weight.detach().numpy(), orig.numpy())
    del w0


def test_parametrization_right_inverse_and_sequences():
    m = nn.Linear(2, 2)
    parametrize.register_parametrization(m, "weight", _Scale())
    target = ember.tensor([[1.0, 2.0], [3.0, 4.0]])
    m.weight = target                       # stored as right_inverse(target)
    np.testing.assert_allclose(m.parametrizations.weight.original.detach().numpy(),
                               target.numpy() / 2)
    np.testing.assert_allclose(m.weight.detach().numpy(), target.numpy())
    with pytest.raises(KeyError):
        m.weight = nn.Parameter(target)     # a Parameter would shadow the property
    s = nn.Linear(2, 2)
    w = s.weight.detach().clone()
    parametrize.register_parametrization(s, "weight", _Split())
    assert list(s.state_dict()) == ["bias", "parametrizations.weight.original0",
                                    "parametrizations.weight.original1"]
    np.testing.assert_allclose(s.weight.detach().numpy(), w.numpy(), rtol=1e-6)
    with pytest.raises(ValueError, match="sequence of tensors"):
        parametrize.remove_parametrizations(s, "weight", leave_parametrized=False)
    parametrize.remove_parametrizations(s, "weight")
    assert isinstance(s.weight, nn.Parameter)


def test_parametrization_errors_match_torch(torch):
    class Shrink(torch.nn.Module):
        def forward(self, X):
            return X[:1]

    class EShrink(nn.Module):
        def forward(self, X):
            return X[:1]
    with pytest.raises(ValueError, match="may not change the shape") as t:
        torch.nn.utils.parametrize.register_parametrization(torch.nn.Linear(2, 2), "weight",
                                                            Shrink())
    with pytest.raises(ValueError, match="may not change the shape") as e:
        parametrize.register_parametrization(nn.Linear(2, 2), "weight", EShrink())
    with pytest.raises(ValueError, match="does not have a parameter"):
        parametrize.register_parametrization(nn.Linear(2, 2), "nope", EShrink())
    with pytest.raises(ValueError, match="does not have a parametrization"):
        parametrize.remove_parametrizations(nn.Linear(2, 2), "weight")
    with pytest.raises(ValueError, match="Expected a matrix or batch of matrices"):
        nn.utils.parametrizations.orthogonal(nn.Linear(2, 2), "bias")
    with pytest.raises(ValueError, match="orthogonal_map has to be one of"):
        nn.utils.parametrizations.orthogonal(nn.Linear(2, 2), orthogonal_map="qr")
    with pytest.raises(ValueError, match="n_power_iterations to be positive"):
        nn.utils.parametrizations.spectral_norm(nn.Linear(2, 2), n_power_iterations=0)


def test_parametrized_module_deepcopy_and_training_mode():
    m = nn.utils.parametrizations.spectral_norm(nn.Linear(3, 2))
    c = copy.deepcopy(m)
    assert type(c).__name__ == "ParametrizedLinear"
    np.testing.assert_array_equal(c.parametrizations.weight[0]._u.numpy(),
                                  m.parametrizations.weight[0]._u.numpy())
    m.eval()                 # evaluation runs no power iteration: _u stays
    u = m.parametrizations.weight[0]._u.clone()
    m(ember.randn(2, 3))
    np.testing.assert_array_equal(m.parametrizations.weight[0]._u.numpy(), u.numpy())
