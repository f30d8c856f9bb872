"""ember.nn: the Module API, containers, layers, init, functional losses and gradient
clipping, checked against PyTorch where it is installed."""
import math
import warnings
from collections import OrderedDict

import numpy as np
import pytest

import ember
import ember.nn as nn
import ember.nn.functional as F
from ember.nn import init


def to_np(t):
    return t.detach().numpy()


def _block_init(self, lib):
    """A module with a parameter, a None parameter, buffers and children."""
    lib.nn.Module.__init__(self)
    self.fc = lib.nn.Linear(3, 4)
    self.act = lib.nn.ReLU()
    self.scale = lib.nn.Parameter(lib.ones(4))
    self.register_parameter("unused", None)
    self.register_buffer("running", lib.zeros(4))
    self.register_buffer("scratch", lib.zeros(2), persistent=False)
    self.head = lib.nn.Sequential(lib.nn.Linear(4, 2), lib.nn.Tanh())


def _block_forward(self, x):
    return self.head(self.act(self.fc(x)) * self.scale)


def make_block(lib):
    """The same Block class, built on either library's nn.Module."""
    cls = type("Block", (lib.nn.Module,), {"__init__": _block_init, "forward": _block_forward})
    return cls(lib)


# ------------------------------------------------------------------ registration


def test_setattr_routes_to_tables():
    m = nn.Module()
    m.w = nn.Parameter(ember.ones(2))
    m.child = nn.Linear(2, 2)
    m.register_buffer("buf", ember.zeros(1))
    m.plain = 3
    assert list(m._parameters) == ["w"] and list(m._modules) == ["child"]
    assert list(m._buffers) == ["buf"] and m.__dict__["plain"] == 3
    assert m.w is m._parameters["w"] and m.child is m._modules["child"]
    with pytest.raises(TypeError, match="cannot assign 'ember.FloatTensor' as parameter 'w'"):
        m.w = ember.ones(2)
    m.w = None
    assert m.w is None and "w" in m._parameters
    with pytest.raises(TypeError, match="as child module 'child'"):
        m.child = 3
    with pytest.raises(TypeError, match="as buffer 'buf'"):
        m.buf = 3
    m.buf = ember.ones(1)
    assert m._buffers["buf"].tolist() == [1.0]
    # a Parameter replaces a same-named buffer or module
    m.child = nn.Parameter(ember.ones(1))
    assert "child" not in m._modules and "child" in m._parameters
    del m.child, m.buf, m.plain
    assert "child" not in m._parameters and "buf" not in m._buffers
    assert not hasattr(m, "plain")
    with pytest.raises(AttributeError, match="'Module' object has no attribute 'nope'"):
        m.nope


def test_registration_errors():
    m = nn.Module()
    m.x = 1
    with pytest.raises(KeyError, match="attribute 'x' already exists"):
        m.register_buffer("x", ember.ones(1))
    with pytest.raises(KeyError, match='contain "'):
        m.register_parameter("a.b", None)
    with pytest.raises(KeyError, match="empty string"):
        m.add_module("", nn.ReLU())
    with pytest.raises(TypeError, match="should be a string"):
        m.register_buffer(3, None)
    with pytest.raises(TypeError, match="object to buffer"):
        m.register_buffer("b", [1])
    with pytest.raises(TypeError, match="object to parameter"):
        m.register_parameter("p", ember.ones(1))
    with pytest.raises(TypeError, match="is not a Module subclass"):
        m.add_module("m", 3)

    class Early(nn.Module):
        def __init__(self):
            self.w = nn.Parameter(ember.ones(1))
    with pytest.raises(AttributeError, match="before Module.__init__"):
        Early()


def test_parameter_basics():
    p = nn.Parameter(ember.ones(2, 3))
    assert isinstance(p, ember.Tensor) and p.requires_grad and p.is_leaf
    assert repr(p).startswith("Parameter containing:\ntensor(")
    q = nn.Parameter(ember.ones(2), requires_grad=False)
    assert not q.requires_grad
    assert type(p * 2) is ember.Tensor
    assert nn.Parameter().shape == (0,)
    with pytest.raises(RuntimeError, match="floating point"):
        nn.Parameter(ember.ones(2, dtype=ember.int64))


# ------------------------------------------------------------------ traversal


def test_traversal_shared_parameters_and_duplicates():
    shared = nn.Linear(2, 2)
    m = nn.Sequential(shared, nn.ReLU(), shared)
    assert [n for n, _ in m.named_parameters()] == ["0.weight", "0.bias"]
    assert [n for n, _ in m.named_parameters(remove_duplicate=False)] == [
        "0.weight", "0.bias", "2.weight", "2.bias"]
    assert [n for n, _ in m.named_modules()] == ["", "0", "1"]
    assert len(list(m.named_modules(remove_duplicate=False))) == 4
    assert [n for n, _ in m.named_children()] == ["0", "1"]
    assert [n for n, _ in m.named_parameters(prefix="model")] == ["model.0.weight",
                                                                  "model.0.bias"]
    assert list(m.parameters(recurse=False)) == []
    assert m.get_submodule("0") is shared and m.get_parameter("0.bias") is shared.bias


def test_module_api_matches_torch(torch):
    ember.manual_seed(0)
    em, tm = make_block(ember), make_block(torch)
    assert list(em.state_dict()) == list(tm.state_dict())
    assert [n for n, _ in em.named_modules()] == [n for n, _ in tm.named_modules()]
    assert [n for n, _ in em.named_parameters()] == [n for n, _ in tm.named_parameters()]
    assert [n for n, _ in em.named_buffers()] == [n for n, _ in tm.named_buffers()]
    assert [n for n, _ in em.named_children()] == [n for n, _ in tm.named_children()]
    assert repr(em) == repr(tm)
    # copy torch's weights in, then both compute the same thing
    em.load_state_dict({k: ember.from_numpy(v.numpy().copy())
                        for k, v in tm.state_dict().items()})
    x = np.random.default_rng(0).standard_normal((5, 3)).astype(np.float32)
    np.testing.assert_allclose(to_np(em(ember.from_numpy(x))),
                               tm(torch.from_numpy(x)).detach().numpy(), rtol=1e-5, atol=1e-6)


def test_repr_matches_torch(torch):
    def build(lib):
        n = lib.nn
        return n.Sequential(
            n.Linear(2, 3), n.ReLU(),
            n.Sequential(n.Linear(3, 3, bias=False), n.Tanh()),
            n.ModuleList([n.Linear(1, 1), n.Linear(1, 1), n.Sigmoid(), n.Sigmoid()]),
            n.ModuleDict({"a": n.Identity()}), n.Flatten(), n.Unflatten(1, (2, 2)),
            n.MSELoss(), n.L1Loss(reduction="sum"), n.ReLU(inplace=True),
            n.LeakyReLU(0.2))
    assert repr(build(ember)) == repr(build(torch))
    pl = [nn.Parameter(ember.ones(2, 3)), nn.Parameter(ember.ones(1))]
    tpl = [torch.nn.Parameter(torch.ones(2, 3)), torch.nn.Parameter(torch.ones(1))]
    assert repr(nn.ParameterList(pl)) == repr(torch.nn.ParameterList(tpl)).replace(
        "torch.", "ember.")
    assert repr(nn.ModuleList()) == repr(torch.nn.ModuleList())


def test_state_dict_semantics():
    m = make_block(ember)
    sd = m.state_dict()
    assert isinstance(sd, OrderedDict)
    assert list(sd) == ["scale", "running", "fc.weight", "fc.bias", "head.0.weight",
                        "head.0.bias"]
    assert not sd["scale"].requires_grad and type(sd["scale"]) is ember.Tensor
    assert sd["scale"].data_ptr() == m.scale.data_ptr()     # shares memory
    kv = m.state_dict(keep_vars=True)
    assert kv["scale"] is m.scale
    assert list(m.state_dict(prefix="net.")) == ["net." + k for k in sd]


def test_load_state_dict_reports_and_errors(torch):
    def check(lib):
        m = make_block(lib)
        sd = dict(m.state_dict())
        del sd["fc.bias"]
        sd["extra"] = lib.ones(1)
        sd["head.9.weight"] = lib.ones(1)
        res = m.load_state_dict(sd, strict=False)
        bad = dict(m.state_dict())
        bad["scale"] = lib.ones(5)
        with pytest.raises(RuntimeError) as err:
            m.load_state_dict(bad)
        with pytest.raises(RuntimeError) as err2:
            m.load_state_dict(sd)
        return (res.missing_keys, res.unexpected_keys,
                str(err.value).replace("torch.", "ember."),
                str(err2.value))
    assert check(ember) == check(torch)
    m = nn.Linear(2, 2)
    assert repr(m.load_state_dict(m.state_dict())) == "<All keys matched successfully>"


def test_load_state_dict_copies_converts_and_assigns():
    m = nn.Linear(2, 2)
    w = m.weight
    sd = {"weight": ember.ones(2, 2, dtype=ember.float64), "bias": ember.zeros(2)}
    m.load_state_dict(sd)
    assert m.weight is w and m.weight.dtype is ember.float32
    assert to_np(m.weight).tolist() == [[1, 1], [1, 1]]
    m.load_state_dict({"weight": ember.full((2, 2), 3.0), "bias": ember.zeros(2)},
                      assign=True)
    assert m.weight is not w and isinstance(m.weight, nn.Parameter)
    assert m.weight.requires_grad and to_np(m.weight)[0, 0] == 3


# ------------------------------------------------------------------ modes and conversion


def test_train_eval_requires_grad_zero_grad_apply():
    m = make_block(ember)
    assert m.training and m.head[1].training
    assert m.eval() is m and not m.head[1].training and not m.fc.training
    m.train()
    assert m.fc.training
    with pytest.raises(ValueError, match="boolean"):
        m.train(1)
    m.requires_grad_(False)
    assert not any(p.requires_grad for p in m.parameters())
    m.requires_grad_(True)
    m(ember.ones(2, 3)).sum().backward()
    assert all(p.grad is not None for p in m.parameters())
    m.zero_grad(set_to_none=False)
    assert all((to_np(p.grad) == 0).all() for p in m.parameters())
    m.zero_grad()
    assert all(p.grad is None for p in m.parameters())
    seen = []
    assert m.apply(lambda mod: seen.append(type(mod).__name__)) is m
    assert seen == ["Linear", "ReLU", "Linear", "Tanh", "Sequential", "Block"]


def test_to_double_float_keeps_parameter_objects():
    m = nn.Sequential(nn.Linear(2, 2))
    m.register_buffer("steps", ember.zeros(1, dtype=ember.int64))
    w = m[0].weight
    m(ember.ones(1, 2)).sum().backward()
    assert m.double() is m
    assert m[0].weight is w and w.dtype is ember.float64 and w.grad.dtype is ember.float64
    assert m.steps.dtype is ember.int64          # integers are left alone
    assert m(ember.ones(1, 2, dtype=ember.float64)).dtype is ember.float64
    m.to(ember.float32)
    assert w.dtype is ember.float32 and m.to("cpu") is m
    m.half()
    assert w.dtype is ember.float16
    with pytest.raises(TypeError, match="floating point"):
        m.to(ember.int32)


def test_forward_hooks():
    m = nn.Linear(2, 2)
    calls = []
    h1 = m.register_forward_pre_hook(lambda mod, args: (args[0] * 0,))
    h2 = m.register_forward_hook(lambda mod, args, out: calls.append(out.shape) or out + 1)
    out = m(ember.ones(3, 2))
    np.testing.assert_allclose(to_np(out), to_np(m.bias.expand(3, 2) + 1), rtol=1e-6)
    assert calls == [(3, 2)]
    h1.remove()
    h2.remove()
    np.testing.assert_allclose(to_np(m(ember.zeros(1, 2))), to_np(m.bias)[None], rtol=1e-6)
    with m.register_forward_pre_hook(lambda mod, args, kwargs: ((args[0] + 1,), kwargs),
                                     with_kwargs=True):
        np.testing.assert_allclose(to_np(m(ember.zeros(1, 2))),
                                   to_np(m(ember.ones(1, 2))) * 0 + to_np(
                                       m.weight.sum(1) + m.bias)[None], rtol=1e-6)
    assert not m._forward_pre_hooks and not m._forward_pre_hooks_with_kwargs


def test_missing_forward():
    with pytest.raises(NotImplementedError, match='missing the required "forward"'):
        nn.Module()(1)


# ------------------------------------------------------------------ containers


def test_sequential_indexing_slicing_and_editing():
    layers = [nn.Linear(2, 2), nn.ReLU(), nn.Tanh()]
    s = nn.Sequential(*layers)
    assert len(s) == 3 and s[0] is layers[0] and s[-1] is layers[2]
    sub = s[1:]
    assert isinstance(sub, nn.Sequential) and list(sub._modules) == ["1", "2"]
    s.append(nn.Sigmoid())
    assert list(s._modules) == ["0", "1", "2", "3"]
    del s[1]
    assert list(s._modules) == ["0", "1", "2"] and isinstance(s[1], nn.Tanh)
    s[1] = nn.ReLU()
    assert isinstance(s[1], nn.ReLU)
    s.insert(0, nn.Identity())
    assert isinstance(s[0], nn.Identity) and len(s) == 4
    with pytest.raises(IndexError):
        s[10]
    named = nn.Sequential(OrderedDict(first=nn.ReLU(), second=nn.Tanh()))
    assert list(named._modules) == ["first", "second"] and named.second is named[1]
    x = ember.tensor([[-1.0, 2.0]])
    assert to_np(named(x)).tolist() == [[0.0, math.tanh(2.0)]] or np.allclose(
        to_np(named(x)), [[0.0, math.tanh(2.0)]])


def test_module_list_dict_parameter_containers():
    ml = nn.ModuleList([nn.ReLU(), nn.Tanh()])
    ml.append(nn.Sigmoid())
    ml += [nn.Identity()]
    assert len(ml) == 4 and isinstance(ml[-1], nn.Identity)
    assert isinstance(ml[1:3], nn.ModuleList) and len(ml[1:3]) == 2
    del ml[0]
    assert list(ml._modules) == ["0", "1", "2"]
    md = nn.ModuleDict({"a": nn.ReLU()})
    md["b"] = nn.Linear(1, 1)
    assert list(md.keys()) == ["a", "b"] and "b" in md and len(md) == 2
    assert [n for n, _ in md.named_parameters()] == ["b.weight", "b.bias"]
    md.pop("a")
    assert list(md) == ["b"]
    pl = nn.ParameterList([ember.ones(2), nn.Parameter(ember.zeros(1))])
    pl.append(ember.ones(3))
    assert len(pl) == 3 and all(isinstance(p, nn.Parameter) for p in pl)
    assert [n for n, _ in pl.named_parameters()] == ["0", "1", "2"]
    pd = nn.ParameterDict({"w": ember.ones(2)})
    pd["b"] = nn.Parameter(ember.zeros(2))
    assert list(pd.keys()) == ["w", "b"] and isinstance(pd["w"], nn.Parameter)
    assert [n for n, _ in pd.named_parameters()] == ["w", "b"]


# ------------------------------------------------------------------ layers and functional


def test_linear_default_init_bounds_and_forward(torch):
    ember.manual_seed(0)
    lin = nn.Linear(50, 40)
    bound = 1 / math.sqrt(50)
    w, b = to_np(lin.weight), to_np(lin.bias)
    assert w.shape == (40, 50) and b.shape == (40,)
    assert np.abs(w).max() <= bound and np.abs(b).max() <= bound
    assert np.abs(w).max() > 0.9 * bound            # uniform over the whole range
    assert abs(w.std() - bound / math.sqrt(3)) < 0.01
    assert nn.Linear(3, 2, bias=False).bias is None
    t = torch.nn.Linear(50, 40)
    with torch.no_grad():
        t.weight.copy_(torch.from_numpy(w))
        t.bias.copy_(torch.from_numpy(b))
    x = np.random.default_rng(1).standard_normal((7, 50)).astype(np.float32)
    np.testing.assert_allclose(to_np(lin(ember.from_numpy(x))),
                               t(torch.from_numpy(x)).detach().numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(to_np(lin(ember.from_numpy(x[0]))),
                               t(torch.from_numpy(x[0])).detach().numpy(), rtol=1e-5,
                               atol=1e-5)


def test_flatten_unflatten_activations(torch):
    x = np.random.default_rng(2).standard_normal((2, 3, 4, 5)).astype(np.float32)
    ex, tx = ember.from_numpy(x), torch.from_numpy(x)
    for args in ((), (0,), (1, 2), (2, -1), (-2, -1)):
        assert tuple(nn.Flatten(*args)(ex).shape) == tuple(torch.nn.Flatten(*args)(tx).shape)
    u = nn.Unflatten(1, (3, 1))(ex)
    assert tuple(u.shape) == (2, 3, 1, 4, 5)
    assert tuple(nn.Unflatten(-1, (5, -1))(ex).shape) == (2, 3, 4, 5, 1)
    for em, tm in ((nn.ReLU(), torch.nn.ReLU()), (nn.Tanh(), torch.nn.Tanh()),
                   (nn.Sigmoid(), torch.nn.Sigmoid()), (nn.LeakyReLU(0.1),
                                                        torch.nn.LeakyReLU(0.1)),
                   (nn.Identity(3, k=1), torch.nn.Identity(3, k=1))):
        np.testing.assert_allclose(to_np(em(ex)), tm(tx).numpy(), rtol=1e-6, atol=1e-7)
    y = ember.tensor([-1.0, 2.0])
    assert nn.ReLU(inplace=True)(y) is y and y.tolist() == [0.0, 2.0]


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_losses_and_gradients_match_torch(torch, reduction):
    rng = np.random.default_rng(3)
    a = rng.standard_normal((4, 3))
    b = rng.standard_normal((4, 3))
    a[0, 0] = b[0, 0]                        # |d| at 0: the gradient there is 0
    for em_cls, t_cls in ((nn.MSELoss, torch.nn.MSELoss), (nn.L1Loss, torch.nn.L1Loss)):
        ea = ember.from_numpy(a.copy()).requires_grad_()
        ta = torch.from_numpy(a.copy()).requires_grad_()
        el = em_cls(reduction=reduction)(ea, ember.from_numpy(b))
        tl = t_cls(reduction=reduction)(ta, torch.from_numpy(b))
        np.testing.assert_allclose(to_np(el), tl.detach().numpy(), rtol=1e-12)
        el.sum().backward()
        tl.sum().backward()
        np.testing.assert_allclose(to_np(ea.grad), ta.grad.numpy(), rtol=1e-12)
    with pytest.raises(ValueError, match="not a valid value for reduction"):
        F.mse_loss(ember.ones(2), ember.ones(2), reduction="avg")
    with pytest.warns(UserWarning, match="target size"):
        F.l1_loss(ember.ones(2, 1), ember.ones(2))
    with pytest.warns(UserWarning, match="reduction='sum'"):
        assert nn.MSELoss(size_average=False).reduction == "sum"


# ------------------------------------------------------------------ init


def test_calculate_gain_and_fans_match_torch(torch):
    for name, param in (("linear", None), ("conv2d", None), ("sigmoid", None),
                        ("tanh", None), ("relu", None), ("leaky_relu", None),
                        ("leaky_relu", 0.2), ("selu", None)):
        assert init.calculate_gain(name, param) == torch.nn.init.calculate_gain(name, param)
    with pytest.raises(ValueError, match="Unsupported nonlinearity"):
        init.calculate_gain("gelu")
    for shape in ((3, 4), (5, 2, 3, 3), (1, 7, 2)):
        assert init._calculate_fan_in_and_fan_out(ember.empty(*shape)) == \
            torch.nn.init._calculate_fan_in_and_fan_out(torch.empty(*shape))
    with pytest.raises(ValueError, match="fewer than 2 dimensions"):
        init._calculate_fan_in_and_fan_out(ember.empty(3))


def test_initialisers_statistics_and_no_grad():
    ember.manual_seed(0)
    w = nn.Parameter(ember.empty(200, 300))
    fan_in, fan_out = 300, 200
    cases = [
        (lambda: init.uniform_(w, -2, 3), 0.5, 5 / math.sqrt(12)),
        (lambda: init.normal_(w, 1.0, 0.5), 1.0, 0.5),
        (lambda: init.xavier_uniform_(w), 0.0, math.sqrt(2 / (fan_in + fan_out))),
        (lambda: init.xavier_normal_(w, gain=2.0), 0.0, 2 * math.sqrt(2 / (fan_in + fan_out))),
        (lambda: init.kaiming_uniform_(w, nonlinearity="relu"), 0.0,
         math.sqrt(2) / math.sqrt(fan_in)),
        (lambda: init.kaiming_normal_(w, mode="fan_out"), 0.0,
         init.calculate_gain("leaky_relu", 0) / math.sqrt(fan_out)),
    ]
    for fill, mean, std in cases:
        assert fill() is w and w.requires_grad
        a = to_np(w)
        assert abs(a.mean() - mean) < 0.02 + 0.05 * std and abs(a.std() - std) < 0.03 * std
    init.trunc_normal_(w, mean=0.5, std=1.0, a=-0.5, b=1.0)
    a = to_np(w)
    assert a.min() >= -0.5 and a.max() <= 1.0 and len(np.unique(a)) > 1000
    assert (to_np(init.constant_(w, 0.25)) == 0.25).all()
    assert (to_np(init.ones_(w)) == 1).all() and (to_np(init.zeros_(w)) == 0).all()
    e = init.eye_(ember.empty(3, 4))
    assert to_np(e).tolist() == np.eye(3, 4).tolist()
    q = to_np(init.orthogonal_(ember.empty(4, 6)))
    np.testing.assert_allclose(q @ q.T, np.eye(4), atol=1e-5)
    with pytest.warns(UserWarning, match="zero-element"):
        init.kaiming_uniform_(ember.empty(0, 3))


def test_init_reproducible_with_seed_and_generator():
    g = ember.Generator().manual_seed(5)
    a = to_np(init.xavier_uniform_(ember.empty(4, 4), generator=g)).copy()
    g.manual_seed(5)
    b = to_np(init.xavier_uniform_(ember.empty(4, 4), generator=g))
    assert (a == b).all()
    ember.manual_seed(11)
    w1 = to_np(nn.Linear(5, 5).weight).copy()
    ember.manual_seed(11)
    assert (to_np(nn.Linear(5, 5).weight) == w1).all()


# ------------------------------------------------------------------ utils


@pytest.mark.parametrize("norm_type", [2.0, 1.0, 3.0, math.inf])
def test_clip_grad_norm_matches_torch(torch, norm_type):
    rng = np.random.default_rng(4)
    grads = [rng.standard_normal(s) for s in ((3, 4), (5,), (2, 2))]
    eps = [nn.Parameter(ember.zeros(*g.shape, dtype=ember.float64)) for g in grads]
    tps = [torch.nn.Parameter(torch.zeros(*g.shape, dtype=torch.float64)) for g in grads]
    for p, tp, g in zip(eps, tps, grads):
        p.grad = ember.from_numpy(g.copy())
        tp.grad = torch.from_numpy(g.copy())
    en = nn.utils.clip_grad_norm_(eps, 0.5, norm_type)
    tn = torch.nn.utils.clip_grad_norm_(tps, 0.5, norm_type)
    np.testing.assert_allclose(en.item(), tn.item(), rtol=1e-12)
    for p, tp in zip(eps, tps):
        np.testing.assert_allclose(to_np(p.grad), tp.grad.numpy(), rtol=1e-12)
    nn.utils.clip_grad_value_(eps, 0.01)
    torch.nn.utils.clip_grad_value_(tps, 0.01)
    for p, tp in zip(eps, tps):
        np.testing.assert_allclose(to_np(p.grad), tp.grad.numpy(), rtol=1e-12)


def test_clip_grad_norm_edge_cases():
    p = nn.Parameter(ember.ones(2))
    assert nn.utils.clip_grad_norm_([p], 1.0).item() == 0.0      # no gradients
    p.grad = ember.tensor([3.0, 4.0])
    assert nn.utils.clip_grad_norm_(p, 10.0).item() == 5.0
    assert to_np(p.grad).tolist() == [3.0, 4.0]                    # under the limit
    p.grad = ember.tensor([float("inf"), 1.0])
    with pytest.raises(RuntimeError, match="non-finite"):
        nn.utils.clip_grad_norm_([p], 1.0, error_if_nonfinite=True)


def test_parameters_to_vector_round_trip():
    m = nn.Linear(3, 2)
    v = nn.utils.parameters_to_vector(m.parameters())
    assert v.shape == (8,)
    np.testing.assert_array_equal(to_np(v)[:6], to_np(m.weight).ravel())
    v.sum().backward()
    assert (to_np(m.weight.grad) == 1).all()
    nn.utils.vector_to_parameters(ember.arange(8.0), m.parameters())
    assert to_np(m.bias).tolist() == [6.0, 7.0]
    assert to_np(m.weight).tolist() == [[0, 1, 2], [3, 4, 5]]


def test_no_warnings_on_plain_use():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        m = nn.Sequential(nn.Linear(2, 2), nn.ReLU())
        F.mse_loss(m(ember.ones(1, 2)), ember.zeros(1, 2)).backward()
