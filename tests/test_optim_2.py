"""ember.optim, second part: Adadelta, Adamax, NAdam, RAdam, ASGD, Rprop, LBFGS and
SparseAdam against torch.optim step for step (float64 to 1e-12 relative over 20 steps,
float32 to float32 rounding), their keywords (foreach, maximize, capturable,
differentiable) and state_dict round trips; the schedulers ReduceLROnPlateau,
CosineAnnealingWarmRestarts, SequentialLR, ChainedScheduler, CyclicLR, PolynomialLR,
ConstantLR and MultiplicativeLR against torch.optim.lr_scheduler."""
import copy
import warnings

import numpy as np
import pytest

import ember
import ember.nn as nn
import ember.optim as optim
from ember.optim import lr_scheduler

STEPS = 20
SHAPES = [(3, 4), (4,), (2, 1, 3)]

OPTIMIZERS = [
    ("Adadelta", dict()),
    ("Adadelta", dict(lr=0.5, rho=0.8, eps=1e-4, weight_decay=0.1)),
    ("Adadelta", dict(lr=0.3, maximize=True, foreach=True)),
    ("Adamax", dict()),
    ("Adamax", dict(lr=0.01, betas=(0.8, 0.95), weight_decay=0.1, eps=1e-6)),
    ("Adamax", dict(lr=0.02, betas=(0.3, 0.9), maximize=True)),        # lerp's other branch
    ("NAdam", dict()),
    ("NAdam", dict(lr=0.01, weight_decay=0.1, momentum_decay=0.01)),
    ("NAdam", dict(lr=0.01, weight_decay=0.1, decoupled_weight_decay=True,
                   betas=(0.85, 0.99))),
    ("NAdam", dict(lr=0.02, maximize=True, foreach=False)),
    ("RAdam", dict()),
    ("RAdam", dict(lr=0.01, weight_decay=0.1, betas=(0.8, 0.9))),     # rho_t > 5 at step 7
    ("RAdam", dict(lr=0.01, weight_decay=0.1, decoupled_weight_decay=True,
                   betas=(0.5, 0.7))),
    ("RAdam", dict(lr=0.01, maximize=True)),
    ("ASGD", dict()),
    ("ASGD", dict(lr=0.05, lambd=0.01, alpha=0.5, t0=5, weight_decay=0.1)),
    ("ASGD", dict(lr=0.05, t0=0, maximize=True)),
    ("Rprop", dict()),
    ("Rprop", dict(lr=0.05, etas=(0.3, 1.5), step_sizes=(1e-3, 0.2), maximize=True)),
]


def _rng_grads(seed, dtype):
    rng = np.random.default_rng(seed)
    return [[rng.standard_normal(s).astype(dtype) for s in SHAPES] for _ in range(STEPS)]


def _groups(params, kwargs):
    """Two parameter groups, the second with its own learning rate."""
    lr = kwargs.get("lr", 1e-2)
    return [{"params": params[:2]}, {"params": params[2:], "lr": lr / 2}]


def _pair(torch, name, kwargs, dtype, seed=0):
    rng = np.random.default_rng(seed)
    init = [rng.standard_normal(s).astype(dtype) for s in SHAPES]
    eps = [nn.Parameter(ember.from_numpy(a.copy())) for a in init]
    tps = [torch.nn.Parameter(torch.from_numpy(a.copy())) for a in init]
    eo = getattr(optim, name)(_groups(eps, kwargs), **kwargs)
    to = getattr(torch.optim, name)(_groups(tps, kwargs), **kwargs)
    return eps, tps, eo, to


def _close(a, b, rtol, atol, what):
    np.testing.assert_allclose(a, b, rtol=rtol, atol=atol, err_msg=what)


def _compare_state(es, ts, rtol, atol):
    assert es["param_groups"] == ts["param_groups"]
    assert list(es["state"]) == list(ts["state"])
    for k in ts["state"]:
        assert list(es["state"][k]) == list(ts["state"][k]), k
        for key, tv in ts["state"][k].items():
            ev = es["state"][k][key]
            if hasattr(tv, "numpy"):
                assert str(ev.dtype).split(".")[-1] == str(tv.dtype).split(".")[-1], key
                _close(ev.numpy(), tv.numpy(), rtol, atol, key)
            else:
                assert ev == tv, key


@pytest.mark.parametrize("dtype,rtol,atol", [(np.float64, 1e-12, 1e-14),
                                             (np.float32, 2e-5, 2e-6)])
@pytest.mark.parametrize("name,kwargs", OPTIMIZERS,
                         ids=[f"{n}-{i}" for i, (n, _) in enumerate(OPTIMIZERS)])
def test_optimizer_matches_torch_step_for_step(torch, name, kwargs, dtype, rtol, atol):
    eps, tps, eo, to = _pair(torch, name, kwargs, dtype)
    for step, grads in enumerate(_rng_grads(1, dtype)):
        for p, tp, g in zip(eps, tps, grads):
            p.grad = ember.from_numpy(g.copy())
            tp.grad = torch.from_numpy(g.copy())
        eo.step()
        to.step()
        for p, tp in zip(eps, tps):
            _close(p.detach().numpy(), tp.detach().numpy(), rtol, atol, f"step {step}")
    _compare_state(eo.state_dict(), to.state_dict(), rtol, atol)


@pytest.mark.parametrize("name,kwargs", [o for o in OPTIMIZERS if o[1]][::2],
                         ids=lambda v: v if isinstance(v, str) else "")
def test_state_dict_round_trip_continues_as_torch(torch, name, kwargs):
    """Save after 7 steps, load into a new optimizer (built with other hyper-parameters,
    which the loaded groups replace), continue: the same parameters as torch doing the
    same. (Loading casts the state to the parameters' dtype except "step", in both, so
    NAdam's mu_product and ASGD's eta and mu continue in float64.)"""
    grads = _rng_grads(2, np.float64)
    finals = []
    for lib, o in ((ember, optim), (torch, torch.optim)):
        def run(opt, params, gs):
            for g in gs:
                for p, gi in zip(params, g):
                    p.grad = lib.from_numpy(gi.copy())
                opt.step()
        params = [lib.nn.Parameter(lib.ones(*s, dtype=lib.float64)) for s in SHAPES]
        opt = getattr(o, name)(_groups(params, kwargs), **kwargs)
        run(opt, params, grads[:7])
        saved = copy.deepcopy(opt.state_dict())
        params2 = [lib.nn.Parameter(p.detach().clone()) for p in params]
        opt2 = getattr(o, name)(_groups(params2, {}))
        opt2.load_state_dict(saved)
        assert opt2.param_groups[0]["params"][0] is params2[0]
        run(opt2, params2, grads[7:])
        finals.append([p.detach().numpy().copy() for p in params2])
    for e, t in zip(*finals):
        _close(e, t, 1e-12, 1e-14, "after the round trip")


def test_torch_state_dict_loads_into_ember(torch):
    """A torch.optim state_dict (its tensors converted) continues in ember exactly as
    torch continues."""
    eps, tps, eo, to = _pair(torch, "NAdam", dict(lr=0.01, weight_decay=0.1), np.float64)
    grads = _rng_grads(3, np.float64)
    for g in grads[:5]:
        for tp, gi in zip(tps, g):
            tp.grad = torch.from_numpy(gi.copy())
        to.step()
    sd = to.state_dict()
    conv = {"param_groups": sd["param_groups"],
            "state": {k: {kk: ember.from_numpy(v.numpy().copy()) for kk, v in st.items()}
                      for k, st in sd["state"].items()}}
    for p, tp in zip(eps, tps):
        p.data = ember.from_numpy(tp.detach().numpy().copy())
    eo.load_state_dict(conv)
    to.load_state_dict(copy.deepcopy(sd))      # both now hold mu_product in float64
    for g in grads[5:]:
        for p, tp, gi in zip(eps, tps, g):
            p.grad = ember.from_numpy(gi.copy())
            tp.grad = torch.from_numpy(gi.copy())
        eo.step()
        to.step()
    for p, tp in zip(eps, tps):
        _close(p.detach().numpy(), tp.detach().numpy(), 1e-12, 1e-14, "continued")


@pytest.mark.parametrize("name", ["Adadelta", "Adamax", "NAdam", "RAdam", "ASGD", "Rprop",
                                  "Adam", "RMSprop"])
def test_keywords_as_torch(torch, name):
    """foreach/maximize/differentiable are accepted; capturable=True is accepted by the
    constructor and, as in torch.optim, refused at the first step for CPU tensors."""
    for kw in (dict(foreach=True), dict(foreach=False), dict(maximize=True),
               dict(differentiable=False), dict(capturable=False)):
        getattr(optim, name)([nn.Parameter(ember.ones(2))], **kw)
    results = []
    for lib, o in ((ember, optim), (torch, torch.optim)):
        p = lib.nn.Parameter(lib.ones(2))
        opt = getattr(o, name)([p], capturable=True)
        p.grad = lib.ones(2)
        with pytest.raises(AssertionError, match="capturable=True") as e:
            opt.step()
        results.append(str(e.value))
    assert results[0] == results[1]


def test_differentiable_steps_record_autograd():
    """differentiable=True runs the step with grad mode on (torch.optim's rule): updating
    a leaf that requires grad in place is then an error, as in torch."""
    p = nn.Parameter(ember.ones(2))
    opt = optim.RAdam([p], differentiable=True)
    p.grad = ember.ones(2)
    with pytest.raises(RuntimeError, match="leaf"):
        opt.step()


def test_constructor_errors_match_torch(torch):
    cases = [("Adadelta", dict(rho=1.5)), ("Adadelta", dict(lr=-1)), ("Adamax", dict(eps=-1)),
             ("NAdam", dict(momentum_decay=-1)), ("RAdam", dict(betas=(0.9, 1.0))),
             ("ASGD", dict(weight_decay=-1)), ("Rprop", dict(etas=(1.5, 1.2))),
             ("SparseAdam", dict(lr=0)), ("SparseAdam", dict(eps=0)), ("LBFGS", dict(lr=-1))]
    for name, kw in cases:
        with pytest.raises(ValueError) as e:
            getattr(optim, name)([nn.Parameter(ember.ones(2))], **kw)
        with pytest.raises(ValueError) as t:
            getattr(torch.optim, name)([torch.nn.Parameter(torch.ones(2))], **kw)
        assert str(e.value) == str(t.value), (name, kw)
    with pytest.raises(ValueError, match="per-parameter options"):
        optim.LBFGS([{"params": [nn.Parameter(ember.ones(1))]},
                     {"params": [nn.Parameter(ember.ones(1))]}])


def test_sparse_adam_refuses_dense_gradients_as_torch(torch):
    """Ember has no sparse layout, so every gradient is dense: step() raises torch's
    error (torch raises the same for a dense gradient)."""
    for lib, o in ((ember, optim), (torch, torch.optim)):
        p = lib.nn.Parameter(lib.ones(3))
        opt = o.SparseAdam([p], lr=0.1, betas=(0.8, 0.9), maximize=True)
        assert opt.defaults == dict(lr=0.1, betas=(0.8, 0.9), eps=1e-8, maximize=True)
        opt.step()                               # no gradient: nothing to do
        p.grad = lib.ones(3)
        with pytest.raises(RuntimeError, match="does not support dense gradients"):
            opt.step()


# ------------------------------------------------------------------ LBFGS


def _objective(w, v, data):
    """An L2-regularised logistic regression with a quartic term (w: (3, 4) weights, v:
    four biases and a scale pair), and its gradient, in NumPy float64: both libraries'
    closures evaluate exactly the same numbers, so the comparison isolates the
    optimizers' own arithmetic. (Strongly convex, so rounding differences do not grow:
    on an ill-conditioned problem two correct L-BFGS runs drift apart from the last bit
    on, as any two BLAS libraries' dot products do.)"""
    x, y = data
    z = x @ w + v[:4]                                   # (n, 4) logits
    p = 1 / (1 + np.exp(-z))
    n = len(x)
    s = v[4:]
    loss = (np.sum(np.logaddexp(0, z) - y * z) / n +
            0.05 * (w * w).sum() + 0.01 * ((s - 1) ** 4).sum() + 0.1 * (s * s).sum())
    gz = (p - y) / n
    gw = x.T @ gz + 0.1 * w
    gv = np.concatenate([gz.sum(0), 0.04 * (s - 1) ** 3 + 0.2 * s])
    return loss, gw, gv


def _lbfgs_problem(lib, data, w0, v0):
    w = lib.nn.Parameter(lib.from_numpy(w0.copy()))
    v = lib.nn.Parameter(lib.from_numpy(v0.copy()))
    calls = []

    def closure():
        loss, gw, gv = _objective(w.detach().numpy().copy(), v.detach().numpy().copy(), data)
        w.grad, v.grad = lib.from_numpy(gw), lib.from_numpy(gv)
        calls.append(loss)
        return lib.tensor(loss, dtype=lib.float64)
    return [w, v], closure, calls


def _lbfgs_data(seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((30, 3)) * np.array([1.0, 4.0, 0.3])
    y = (rng.uniform(size=(30, 4)) < 0.5).astype(np.float64)
    return (x, y), rng.standard_normal((3, 4)) * 4, np.array([0.5, -0.3, 2.0, 0.1, -2.5, 3.0])


def test_lbfgs_objective_gradient():
    data, w0, v0 = _lbfgs_data(5)
    w = ember.from_numpy(w0.copy()).requires_grad_(True)
    v = ember.from_numpy(v0.copy()).requires_grad_(True)
    X, Y = ember.from_numpy(data[0]), ember.from_numpy(data[1])
    z = X @ w + v[:4]
    s = v[4:]
    loss = (((z.exp() + 1).log() - Y * z).sum() / 30 + 0.05 * (w * w).sum() +
            0.01 * ((s - 1) ** 4).sum() + 0.1 * (s * s).sum())
    loss.backward()
    ref, gw, gv = _objective(w0, v0, data)
    assert loss.item() == pytest.approx(ref, rel=1e-13)
    np.testing.assert_allclose(w.grad.numpy(), gw, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(v.grad.numpy(), gv, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("kw", [dict(), dict(line_search_fn="strong_wolfe"),
                                dict(history_size=3, max_iter=7, lr=0.5),
                                dict(history_size=2, line_search_fn="strong_wolfe",
                                     max_iter=30, max_eval=40),
                                dict(tolerance_change=1e-3, tolerance_grad=1e-3)])
def test_lbfgs_matches_torch(torch, kw):
    data, w0, v0 = _lbfgs_data(5)
    eps, eclosure, ecalls = _lbfgs_problem(ember, data, w0, v0)
    tps, tclosure, tcalls = _lbfgs_problem(torch, data, w0, v0)
    eo, to = optim.LBFGS(eps, **kw), torch.optim.LBFGS(tps, **kw)
    # float64, up to 120 evaluations whose products run in another BLAS than torch's
    # (rounding differs in the last bits, and the iterations carry it): 1e-10
    for outer in range(4):
        el, tl = eo.step(eclosure), to.step(tclosure)
        assert el.item() == pytest.approx(tl.item(), rel=1e-10)
        assert len(ecalls) == len(tcalls), f"step {outer}: evaluations"
        np.testing.assert_allclose(ecalls, tcalls, rtol=1e-10)
        for p, tp in zip(eps, tps):
            np.testing.assert_allclose(p.detach().numpy(), tp.detach().numpy(), rtol=1e-10,
                                       atol=1e-11)
    es, ts = eo.state[eps[0]], to.state[tps[0]]
    assert es["func_evals"] == ts["func_evals"] and es["n_iter"] == ts["n_iter"]
    assert len(es["old_dirs"]) == len(ts["old_dirs"])
    assert float(es["prev_loss"]) == pytest.approx(ts["prev_loss"], rel=1e-12)
    assert ecalls[-1] < ecalls[0]


def test_lbfgs_state_dict_round_trip():
    data, w0, v0 = _lbfgs_data(6)
    ps, closure, _ = _lbfgs_problem(ember, data, w0, v0)
    opt = optim.LBFGS(ps, line_search_fn="strong_wolfe", history_size=4, max_iter=5)
    opt.step(closure)
    saved = copy.deepcopy(opt.state_dict())
    saved_p = [p.detach().clone() for p in ps]
    opt.step(closure)
    want = [p.detach().numpy().copy() for p in ps]
    ps2, closure2, _ = _lbfgs_problem(ember, data, w0, v0)
    for p, s in zip(ps2, saved_p):
        p.data = s.clone()
    opt2 = optim.LBFGS(ps2)
    opt2.load_state_dict(saved)
    opt2.step(closure2)
    for p, w in zip(ps2, want):
        np.testing.assert_array_equal(p.detach().numpy(), w)


# ------------------------------------------------------------------ schedulers

SCHEDULERS = [
    ("ConstantLR", dict(factor=0.5, total_iters=4), "SGD"),
    ("MultiplicativeLR", dict(lr_lambda=lambda e: 0.9 if e % 2 else 0.97), "SGD"),
    ("PolynomialLR", dict(total_iters=12, power=2.0), "SGD"),
    ("PolynomialLR", dict(total_iters=30), "Adam"),
    ("CosineAnnealingWarmRestarts", dict(T_0=3), "SGD"),
    ("CosineAnnealingWarmRestarts", dict(T_0=2, T_mult=2, eta_min=0.001), "Adam"),
    ("CyclicLR", dict(base_lr=0.01, max_lr=0.1, step_size_up=4), "SGD"),
    ("CyclicLR", dict(base_lr=[0.01, 0.02], max_lr=0.2, step_size_up=3, step_size_down=5,
                      mode="triangular2"), "Adam"),
    ("CyclicLR", dict(base_lr=0.01, max_lr=0.1, step_size_up=2, mode="exp_range",
                      gamma=0.9, cycle_momentum=False), "SGD"),
    ("CyclicLR", dict(base_lr=0.01, max_lr=0.1, step_size_up=3,
                      scale_fn=lambda x: 0.5 ** x, scale_mode="iterations"), "SGD"),
]


def _build(lib, o, s, name, kwargs, opt_name):
    ps = [lib.nn.Parameter(lib.zeros(2)), lib.nn.Parameter(lib.zeros(1))]
    extra = {"momentum": 0.9} if opt_name == "SGD" else {}
    opt = getattr(o, opt_name)([{"params": ps[:1]}, {"params": ps[1:], "lr": 0.05}], lr=0.1,
                               **extra)
    return opt, getattr(s, name)(opt, **kwargs)


def _same_groups(eo, to):
    for eg, tg in zip(eo.param_groups, to.param_groups):
        assert eg["lr"] == pytest.approx(tg["lr"], rel=1e-15, abs=0)
        for key in ("momentum", "betas"):
            if key in tg:
                assert eg[key] == pytest.approx(tg[key], rel=1e-15, abs=0)


@pytest.mark.parametrize("name,kwargs,opt_name", SCHEDULERS,
                         ids=[f"{n}-{i}" for i, (n, _, _) in enumerate(SCHEDULERS)])
def test_scheduler_matches_torch(torch, name, kwargs, opt_name):
    eo, es = _build(ember, optim, lr_scheduler, name, kwargs, opt_name)
    to, ts = _build(torch, torch.optim, torch.optim.lr_scheduler, name, kwargs, opt_name)
    assert es.get_last_lr() == ts.get_last_lr()
    for step in range(25):
        eo.step()
        to.step()
        es.step()
        ts.step()
        assert es.get_last_lr() == pytest.approx(ts.get_last_lr(), rel=1e-15, abs=0), step
        _same_groups(eo, to)
    state, tstate = es.state_dict(), ts.state_dict()
    assert set(state) == set(tstate)
    assert state["last_epoch"] == tstate["last_epoch"]


def test_warm_restarts_fractional_epochs(torch):
    eo, es = _build(ember, optim, lr_scheduler, "CosineAnnealingWarmRestarts",
                    dict(T_0=4, T_mult=2), "SGD")
    to, ts = _build(torch, torch.optim, torch.optim.lr_scheduler,
                    "CosineAnnealingWarmRestarts", dict(T_0=4, T_mult=2), "SGD")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for epoch in np.arange(0, 14, 0.35):
            es.step(float(epoch))
            ts.step(float(epoch))
            assert es.get_last_lr() == pytest.approx(ts.get_last_lr(), rel=1e-14)
    with pytest.raises(ValueError, match="non-negative epoch"):
        es.step(-1)


@pytest.mark.parametrize("kw", [dict(), dict(mode="max", factor=0.5, patience=2,
                                             threshold=0.1, threshold_mode="abs"),
                                dict(patience=1, cooldown=2, min_lr=[0.02, 0.0], eps=1e-3),
                                dict(patience=0, factor=0.3, threshold_mode="abs")])
def test_reduce_lr_on_plateau_matches_torch(torch, kw):
    metrics = [1.0, 0.9, 0.95, 0.95, 0.96, 0.8, 0.81, 0.82, 0.83, 0.84, 0.85, 0.7, 0.7, 0.7,
               0.71, 0.72, 0.6, 0.61, 0.62, 0.63, 0.64, 0.65, 0.66, 0.67, 0.68, 0.69] * 2
    eo = optim.SGD([nn.Parameter(ember.zeros(1)), nn.Parameter(ember.zeros(1))], lr=0.1)
    eo.add_param_group({"params": [nn.Parameter(ember.zeros(1))], "lr": 0.05})
    eo = optim.SGD([{"params": [nn.Parameter(ember.zeros(1))]},
                    {"params": [nn.Parameter(ember.zeros(1))], "lr": 0.05}], lr=0.1)
    to = torch.optim.SGD([{"params": [torch.nn.Parameter(torch.zeros(1))]},
                          {"params": [torch.nn.Parameter(torch.zeros(1))], "lr": 0.05}],
                         lr=0.1)
    es = lr_scheduler.ReduceLROnPlateau(eo, **kw)
    ts = torch.optim.lr_scheduler.ReduceLROnPlateau(to, **kw)
    for m in metrics:
        es.step(m)
        ts.step(m)
        assert es.get_last_lr() == ts.get_last_lr()
        assert (es.num_bad_epochs, es.cooldown_counter, es.best) == \
            (ts.num_bad_epochs, ts.cooldown_counter, ts.best)
    state = copy.deepcopy(es.state_dict())
    assert set(state) == set(ts.state_dict())
    es2 = lr_scheduler.ReduceLROnPlateau(eo)
    es2.load_state_dict(state)
    assert es2.best == es.best and es2.mode == es.mode
    es.step(ember.tensor(0.1))                  # a 0-d tensor metric
    with pytest.raises(ValueError, match="Factor should be < 1.0"):
        lr_scheduler.ReduceLROnPlateau(eo, factor=1.0)
    with pytest.raises(ValueError, match="mode avg is unknown"):
        lr_scheduler.ReduceLROnPlateau(eo, mode="avg")


def _seq(lib, o, s):
    opt = o.SGD([lib.nn.Parameter(lib.zeros(2))], lr=0.1, momentum=0.9)
    a = s.ConstantLR(opt, factor=0.1, total_iters=2)
    b = s.ExponentialLR(opt, gamma=0.9)
    c = s.CosineAnnealingLR(opt, T_max=5)
    return opt, s.SequentialLR(opt, schedulers=[a, b, c], milestones=[3, 8])


def _chain(lib, o, s):
    opt = o.SGD([lib.nn.Parameter(lib.zeros(2))], lr=1.0, momentum=0.9)
    a = s.ConstantLR(opt, factor=0.1, total_iters=2)
    b = s.ExponentialLR(opt, gamma=0.9)
    c = s.StepLR(opt, step_size=4, gamma=0.5)
    return opt, s.ChainedScheduler([a, b, c])


@pytest.mark.parametrize("make", [_seq, _chain], ids=["SequentialLR", "ChainedScheduler"])
def test_combinators_match_torch(torch, make):
    eo, es = make(ember, optim, lr_scheduler)
    to, ts = make(torch, torch.optim, torch.optim.lr_scheduler)
    assert es.get_last_lr() == pytest.approx(ts.get_last_lr(), rel=1e-15)
    for step in range(16):
        eo.step()
        to.step()
        es.step()
        ts.step()
        assert es.get_last_lr() == pytest.approx(ts.get_last_lr(), rel=1e-15), step
        assert eo.param_groups[0]["lr"] == pytest.approx(to.param_groups[0]["lr"], rel=1e-15)
    state = copy.deepcopy(es.state_dict())
    assert set(state) == set(ts.state_dict())
    assert len(state["_schedulers"]) == 3
    eo2, es2 = make(ember, optim, lr_scheduler)
    es2.load_state_dict(state)
    assert es2.last_epoch == es.last_epoch if hasattr(es, "last_epoch") else True
    assert [s.last_epoch for s in es2._schedulers] == [s.last_epoch for s in es._schedulers]


def test_combinator_errors():
    opt = optim.SGD([nn.Parameter(ember.zeros(1))], lr=0.1)
    other = optim.SGD([nn.Parameter(ember.zeros(1))], lr=0.1)
    a = lr_scheduler.StepLR(opt, 2)
    with pytest.raises(ValueError, match="at least one scheduler"):
        lr_scheduler.SequentialLR(opt, [], [])
    with pytest.raises(ValueError, match="one more than the number of milestone"):
        lr_scheduler.SequentialLR(opt, [a], [3])
    with pytest.raises(ValueError, match="same optimizer"):
        lr_scheduler.ChainedScheduler([a, lr_scheduler.StepLR(other, 2)])
    with pytest.raises(ValueError, match="ReduceLROnPlateau"):
        lr_scheduler.ChainedScheduler([a, lr_scheduler.ReduceLROnPlateau(opt)])


def test_scheduler_warnings_as_torch():
    opt = optim.SGD([nn.Parameter(ember.zeros(1))], lr=0.1)
    s = lr_scheduler.ExponentialLR(opt, 0.5)
    with pytest.warns(UserWarning, match="before `optimizer.step\\(\\)`"):
        s.step()
    with pytest.warns(UserWarning, match="get_last_lr"):
        s.get_lr()
    opt.step()                                 # the wrapper records the call
    assert opt._opt_called


def test_existing_schedulers_exist():
    for name in ("LinearLR", "ConstantLR", "OneCycleLR", "LambdaLR", "MultiplicativeLR",
                 "ExponentialLR", "StepLR", "MultiStepLR", "CosineAnnealingLR", "LRScheduler"):
        assert hasattr(lr_scheduler, name), name


def _signature(fn):
    import inspect
    return [(p.name, p.kind, repr(p.default)) for p in inspect.signature(fn).parameters.values()]


def test_constructor_signatures_match_torch(torch):
    """Every keyword torch.optim accepts (foreach, fused, maximize, capturable,
    differentiable, ...) at the same position, with the same default."""
    for name in ("SGD", "Adam", "AdamW", "RMSprop", "Adagrad", "Adadelta", "Adamax", "NAdam",
                 "RAdam", "ASGD", "Rprop", "LBFGS", "SparseAdam"):
        assert _signature(getattr(optim, name).__init__) == \
            _signature(getattr(torch.optim, name).__init__), name
    for name in ("LambdaLR", "MultiplicativeLR", "StepLR", "MultiStepLR", "ConstantLR",
                 "LinearLR", "ExponentialLR", "SequentialLR", "PolynomialLR",
                 "CosineAnnealingLR", "ChainedScheduler", "ReduceLROnPlateau", "CyclicLR",
                 "CosineAnnealingWarmRestarts", "OneCycleLR"):
        assert _signature(getattr(lr_scheduler, name).__init__) == \
            _signature(getattr(torch.optim.lr_scheduler, name).__init__), name
