"""ember.optim: optimizers and lr schedulers, step for step against torch.optim, plus
state_dict round trips and a small MLP that trains."""
import copy
import math

import numpy as np
import pytest

import ember
import ember.nn as nn
import ember.optim as optim
from ember.optim import lr_scheduler

STEPS = 20
SHAPES = [(3, 4), (4,), (2, 1, 3)]

OPTIMIZERS = [
    ("SGD", dict(lr=0.1)),
    ("SGD", dict(lr=0.05, momentum=0.9)),
    ("SGD", dict(lr=0.05, momentum=0.9, nesterov=True, weight_decay=0.1)),
    ("SGD", dict(lr=0.05, momentum=0.5, dampening=0.3, maximize=True)),
    ("Adam", dict(lr=0.01)),
    ("Adam", dict(lr=0.02, betas=(0.8, 0.99), weight_decay=0.1, amsgrad=True)),
    ("Adam", dict(lr=0.01, maximize=True, eps=1e-6)),
    ("Adam", dict(lr=0.01, betas=(0.3, 0.9))),                  # lerp's other branch
    ("AdamW", dict(lr=0.01)),
    ("AdamW", dict(lr=0.01, weight_decay=0.3, amsgrad=True)),
    ("RMSprop", dict(lr=0.01)),
    ("RMSprop", dict(lr=0.01, momentum=0.9, centered=True, weight_decay=0.05)),
    ("RMSprop", dict(lr=0.01, alpha=0.9, maximize=True)),
    ("Adagrad", dict(lr=0.1)),
    ("Adagrad", dict(lr=0.1, lr_decay=0.01, weight_decay=0.1, initial_accumulator_value=0.2)),
]


def _rng_grads(seed, dtype):
    rng = np.random.default_rng(seed)
    return [[rng.standard_normal(s).astype(dtype) for s in SHAPES] for _ in range(STEPS)]


def _groups(params, lib_params, kwargs):
    """Two parameter groups, the second with half the learning rate."""
    return [{"params": lib_params[:2]}, {"params": lib_params[2:], "lr": kwargs["lr"] / 2}]


@pytest.mark.parametrize("dtype,rtol,atol", [(np.float64, 1e-10, 1e-12),
                                             (np.float32, 1e-5, 1e-6)])
@pytest.mark.parametrize("name,kwargs", OPTIMIZERS,
                         ids=[f"{n}-{i}" for i, (n, _) in enumerate(OPTIMIZERS)])
def test_optimizer_matches_torch_step_for_step(torch, name, kwargs, dtype, rtol, atol):
    rng = np.random.default_rng(0)
    init = [rng.standard_normal(s).astype(dtype) for s in SHAPES]
    eps = [nn.Parameter(ember.from_numpy(a.copy())) for a in init]
    tps = [torch.nn.Parameter(torch.from_numpy(a.copy())) for a in init]
    eo = getattr(optim, name)(_groups(init, eps, kwargs), **kwargs)
    to = getattr(torch.optim, name)(_groups(init, tps, kwargs), **kwargs)
    for step, grads in enumerate(_rng_grads(1, dtype)):
        for p, tp, g in zip(eps, tps, grads):
            p.grad = ember.from_numpy(g.copy())
            tp.grad = torch.from_numpy(g.copy())
        eo.step()
        to.step()
        for p, tp in zip(eps, tps):
            np.testing.assert_allclose(p.detach().numpy(), tp.detach().numpy(), rtol=rtol,
                                       atol=atol, err_msg=f"step {step}")
    # the state_dict has torch's layout and values
    es, ts = eo.state_dict(), to.state_dict()
    assert es["param_groups"] == ts["param_groups"]
    assert list(es["state"]) == list(ts["state"])
    for k in ts["state"]:
        assert list(es["state"][k]) == list(ts["state"][k])
        for key, tv in ts["state"][k].items():
            np.testing.assert_allclose(es["state"][k][key].numpy(), tv.numpy(), rtol=rtol,
                                       atol=atol)


def test_state_dict_round_trip_continues_identically():
    def run(opt, params, grads):
        for g in grads:
            for p, gi in zip(params, g):
                p.grad = ember.from_numpy(gi.copy())
            opt.step()

    grads = _rng_grads(2, np.float64)
    params = [nn.Parameter(ember.zeros(*s, dtype=ember.float64)) for s in SHAPES]
    opt = optim.Adam(params, lr=0.01, amsgrad=True)
    run(opt, params, grads[:5])
    saved_params = [p.detach().clone() for p in params]
    saved = copy.deepcopy(opt.state_dict())
    run(opt, params, grads[5:])
    expected = [p.detach().numpy().copy() for p in params]

    params2 = [nn.Parameter(t.clone()) for t in saved_params]
    opt2 = optim.Adam(params2, lr=0.5)
    opt2.load_state_dict(saved)
    assert opt2.param_groups[0]["lr"] == 0.01 and opt2.param_groups[0]["params"][0] is \
        params2[0]
    run(opt2, params2, grads[5:])
    for p, e in zip(params2, expected):
        np.testing.assert_array_equal(p.detach().numpy(), e)
    with pytest.raises(ValueError, match="different number of parameter groups"):
        opt2.load_state_dict({"state": {}, "param_groups": []})


def test_load_state_dict_casts_state_to_param_dtype():
    p = nn.Parameter(ember.zeros(2, dtype=ember.float64))
    opt = optim.SGD([p], lr=0.1, momentum=0.9)
    opt.load_state_dict({"state": {0: {"momentum_buffer": ember.ones(2)}},
                         "param_groups": [dict(opt.state_dict()["param_groups"][0])]})
    assert opt.state[p]["momentum_buffer"].dtype is ember.float64


def test_optimizer_api():
    a, b = nn.Parameter(ember.ones(2)), nn.Parameter(ember.ones(3))
    opt = optim.SGD([a], lr=0.1)
    opt.add_param_group({"params": b, "momentum": 0.5})
    assert opt.param_groups[1]["lr"] == 0.1 and opt.param_groups[1]["momentum"] == 0.5
    with pytest.raises(ValueError, match="more than one parameter group"):
        opt.add_param_group({"params": [a]})
    with pytest.raises(TypeError, match="ordered collections"):
        opt.add_param_group({"params": {nn.Parameter(ember.ones(1))}})
    with pytest.raises(ValueError, match="empty parameter list"):
        optim.Adam([])
    with pytest.raises(TypeError, match="iterable of Tensors"):
        optim.Adam(a)
    with pytest.raises(ValueError, match="non-leaf"):
        optim.SGD([a * 2])
    with pytest.raises(ValueError, match="Invalid learning rate"):
        optim.SGD([a], lr=-1)
    with pytest.raises(ValueError, match="Nesterov"):
        optim.SGD([a], lr=0.1, nesterov=True)
    with pytest.raises(ValueError, match="beta parameter at index 1"):
        optim.Adam([a], betas=(0.9, 1.0))
    a.grad = ember.ones(2)
    opt.zero_grad(set_to_none=False)
    assert a.grad.tolist() == [0.0, 0.0]
    opt.zero_grad()
    assert a.grad is None
    # a closure is re-evaluated with grad enabled and its loss returned
    def closure():
        opt.zero_grad()
        loss = (a * a).sum()
        loss.backward()
        return loss
    loss = opt.step(closure)
    assert loss.item() == 2.0 and a.tolist() == pytest.approx([0.8, 0.8])
    assert repr(opt).startswith("SGD (\nParameter Group 0\n    dampening: 0\n")


def test_named_parameters_groups():
    m = nn.Linear(2, 2)
    opt = optim.SGD(m.named_parameters(), lr=0.1)
    assert opt.param_groups[0]["param_names"] == ["weight", "bias"]
    assert opt.state_dict()["param_groups"][0]["params"] == [0, 1]


# ------------------------------------------------------------------ schedulers

SCHEDULERS = [
    ("StepLR", dict(step_size=3, gamma=0.5), "SGD"),
    ("MultiStepLR", dict(milestones=[2, 5, 5, 9], gamma=0.3), "SGD"),
    ("ExponentialLR", dict(gamma=0.9), "SGD"),
    ("CosineAnnealingLR", dict(T_max=7, eta_min=0.01), "SGD"),
    ("CosineAnnealingLR", dict(T_max=20), "Adam"),
    ("LambdaLR", dict(lr_lambda=lambda epoch: 0.95 ** epoch + 0.01 * epoch), "SGD"),
    ("LinearLR", dict(start_factor=0.25, total_iters=6), "SGD"),
    ("LinearLR", dict(start_factor=1.0, end_factor=0.1, total_iters=30), "Adam"),
    ("OneCycleLR", dict(max_lr=1.0, total_steps=25), "SGD"),
    ("OneCycleLR", dict(max_lr=[0.5, 0.2], total_steps=25, anneal_strategy="linear",
                        three_phase=True), "Adam"),
    ("OneCycleLR", dict(max_lr=0.3, epochs=3, steps_per_epoch=8, pct_start=0.25,
                        cycle_momentum=False), "SGD"),
]


def _sched_pair(torch, name, kwargs, opt_name):
    def build(lib, lib_optim, lib_sched):
        ps = [lib.nn.Parameter(lib.zeros(2)), lib.nn.Parameter(lib.zeros(1))]
        extra = {"momentum": 0.9} if opt_name == "SGD" else {}
        opt = getattr(lib_optim, opt_name)([{"params": ps[:1]},
                                             {"params": ps[1:], "lr": 0.05}], lr=0.1, **extra)
        return opt, getattr(lib_sched, name)(opt, **kwargs)
    return (build(ember, optim, lr_scheduler),
            build(torch, torch.optim, torch.optim.lr_scheduler))


@pytest.mark.parametrize("name,kwargs,opt_name", SCHEDULERS,
                         ids=[f"{n}-{i}" for i, (n, _, _) in enumerate(SCHEDULERS)])
def test_scheduler_matches_torch(torch, name, kwargs, opt_name):
    (eo, es), (to, ts) = _sched_pair(torch, name, kwargs, opt_name)
    assert es.get_last_lr() == ts.get_last_lr()
    for step in range(STEPS):
        eo.step()
        to.step()
        es.step()
        ts.step()
        assert es.get_last_lr() == pytest.approx(ts.get_last_lr(), rel=1e-15, abs=0), step
        for eg, tg in zip(eo.param_groups, to.param_groups):
            assert eg["lr"] == pytest.approx(tg["lr"], rel=1e-15, abs=0)
            for key in ("momentum", "betas"):
                if key in tg:
                    assert eg[key] == pytest.approx(tg[key], rel=1e-15, abs=0)
    state = es.state_dict()
    assert "optimizer" not in state and state["last_epoch"] == ts.state_dict()["last_epoch"]


def test_scheduler_state_dict_and_closed_form(torch):
    (eo, es), (to, ts) = _sched_pair(torch, "StepLR", dict(step_size=2, gamma=0.5), "SGD")
    for _ in range(5):
        es.step()
    state = copy.deepcopy(es.state_dict())
    (eo2, es2), _ = _sched_pair(torch, "StepLR", dict(step_size=2, gamma=0.5), "SGD")
    es2.load_state_dict(state)
    assert es2.last_epoch == 5 and es2.get_last_lr() == es.get_last_lr()
    with pytest.warns(UserWarning, match="epoch parameter"):
        es.step(7)
    assert es.get_last_lr() == pytest.approx([0.1 * 0.5 ** 3, 0.05 * 0.5 ** 3])
    lam = lr_scheduler.LambdaLR(optim.SGD([nn.Parameter(ember.zeros(1))], lr=1.0),
                                lambda e: 1.0)
    assert lam.state_dict()["lr_lambdas"] == [None]
    with pytest.raises(TypeError, match="is not an Optimizer"):
        lr_scheduler.StepLR(object(), 3)
    with pytest.raises(ValueError, match="Tried to step"):
        (o, s), _ = _sched_pair(torch, "OneCycleLR", dict(max_lr=1.0, total_steps=2), "SGD")
        for _ in range(3):
            s.step()


# ------------------------------------------------------------------ training


def _mlp(lib):
    return lib.nn.Sequential(lib.nn.Linear(4, 16), lib.nn.Tanh(), lib.nn.Linear(16, 8),
                             lib.nn.ReLU(), lib.nn.Linear(8, 1))


def _data():
    rng = np.random.default_rng(7)
    x = rng.standard_normal((64, 4)).astype(np.float32)
    y = (np.sin(x[:, :1]) + 0.5 * x[:, 1:2] * x[:, 2:3]).astype(np.float32)
    return x, y


@pytest.mark.parametrize("opt_name,kwargs", [("SGD", dict(lr=0.1, momentum=0.9)),
                                             ("Adam", dict(lr=0.01))])
def test_mlp_trains_and_matches_torch(torch, opt_name, kwargs):
    ember.manual_seed(0)
    model = _mlp(ember)
    tmodel = _mlp(torch)
    tmodel.load_state_dict({k: torch.from_numpy(v.numpy().copy())
                            for k, v in model.state_dict().items()})
    x, y = _data()
    ex, ey, tx, ty = (ember.from_numpy(x), ember.from_numpy(y), torch.from_numpy(x),
                      torch.from_numpy(y))
    opt = getattr(optim, opt_name)(model.parameters(), **kwargs)
    topt = getattr(torch.optim, opt_name)(tmodel.parameters(), **kwargs)
    losses, tlosses = [], []
    for _ in range(60):
        opt.zero_grad()
        loss = nn.functional.mse_loss(model(ex), ey)
        loss.backward()
        opt.step()
        losses.append(loss.item())
        if len(tlosses) < 5:
            topt.zero_grad()
            tloss = torch.nn.functional.mse_loss(tmodel(tx), ty)
            tloss.backward()
            topt.step()
            tlosses.append(tloss.item())
    np.testing.assert_allclose(losses[:5], tlosses, rtol=1e-4)
    assert losses[-1] < 0.5 * losses[0]
    assert all(math.isfinite(v) for v in losses)
