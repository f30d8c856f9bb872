"""mode="max-autotune" (python/ember/compiler/autotune.py): each graph's first call times
candidate schedules of its steps and keeps the fastest; the picks follow the timings
(a fake timer here), results equal default mode's, and a new process takes the picks
from disk without timing anything."""
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import ember
from ember import _C, nn
from ember.capture.config import config
from ember.compiler import autotune, backend, graph_cache
from ember.compiler.autotune import Choice
from ember.compiler.plan import KernelStep, MatmulStep


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    path = tmp_path / "cache"
    path.mkdir(mode=0o700)
    monkeypatch.setattr(config, "cache_dir", str(path))
    monkeypatch.setattr(config, "kernel_cache", True)
    monkeypatch.setattr(config, "graph_cache", False)     # backend.recent gets the graphs
    ember.compiler.reset()
    autotune.stats.clear()
    yield path
    ember.compiler.reset()


@pytest.fixture
def two_threads():
    prev = ember.get_num_threads()
    ember.set_num_threads(2)
    yield
    ember.set_num_threads(prev)


def rows_and_product(x, w, b):
    y = (x @ w + b).relu()
    return (y * y.sigmoid()).sum(1) + y.mean(1), (x * 2).tanh()


def args(n=2048, k=96, seed=0):
    rng = np.random.default_rng(seed)
    return (ember.from_numpy(rng.standard_normal((n, k), dtype=np.float32)),
            ember.from_numpy(rng.standard_normal((k, 64), dtype=np.float32)),
            ember.from_numpy(rng.standard_normal(64, dtype=np.float32)))


def compiled_graph(fn, *a):
    """The CompiledLLVMGraph default mode makes for fn(*a)."""
    backend.recent.clear()
    ember.compile(fn)(*a)
    return backend.recent[-1]


class FakeTimer:
    """Per-step seconds from a table: cost(step, choice), no graph run."""

    def __init__(self, cost):
        self.cost = cost
        self.schedules = []

    def __call__(self, graph, args, schedule):
        self.schedules.append(dict(schedule))
        steps = graph.plan[2]
        return tuple(self.cost(i, schedule.get(i)) for i in range(len(steps)))


def tune_with(g, timer, a):
    tuner = autotune.Tuner(g.module, g.lowered.plan(), g.name, timer)
    g.run.tune = tuner
    g.run(*a)
    assert g.run.tune is None            # called once, then gone
    return tuner


def test_picks_are_the_fastest_candidates_of_the_fake_timings(cache_dir, two_threads):
    a = args()
    g = compiled_graph(rows_and_product, *a)
    steps = g.lowered.plan()[2]
    tunable = [i for i, s in enumerate(steps) if len(autotune.candidates(s, 2)) > 1]
    assert any(isinstance(steps[i], KernelStep) and steps[i].parallel for i in tunable)
    assert any(isinstance(steps[i], MatmulStep) for i in tunable)

    def cost(i, choice):          # the last candidate of every step is the fastest
        if choice is None:
            return 1.0
        cands = autotune.candidates(steps[i], 2)
        return 1.0 - 0.1 * cands.index(choice)

    t1 = tune_with(g, FakeTimer(cost), a)
    expect = {i: autotune.candidates(steps[i], 2)[-1] for i in tunable}
    assert t1.picks == expect
    # the same timings give the same picks (a fresh graph, no disk entry read: off)
    config.kernel_cache = False
    g2 = compiled_graph(rows_and_product, *a)
    assert tune_with(g2, FakeTimer(cost), a).picks == expect


def test_a_candidate_within_the_margin_keeps_the_plans_own(cache_dir, two_threads):
    cands = {0: [Choice(True, 8), Choice(True, 2)], 1: [Choice(), Choice(how=1), Choice(how=2)]}
    times = {0: [1.0, 0.99], 1: [1.0, 0.5, 0.5]}
    assert autotune.pick(cands, times) == {1: Choice(how=1)}    # the earliest of equals
    times = {0: [1.0, 0.9], 1: [0.4, 0.5, 0.6]}
    assert autotune.pick(cands, times) == {0: Choice(True, 2)}


def test_the_plans_schedule_is_measured_first_and_restored_between_rounds(cache_dir,
                                                                          two_threads):
    a = args()
    g = compiled_graph(rows_and_product, *a)
    timer = FakeTimer(lambda i, c: 2.0)      # nothing beats the plan
    tuner = tune_with(g, timer, a)
    assert tuner.picks == {}
    assert timer.schedules[0] == {} and len(timer.schedules) > autotune.REPS + 1
    assert all(len(s) > 0 for s in timer.schedules[autotune.REPS + 1:])


def test_set_step_refuses_to_make_a_serial_step_parallel(cache_dir):
    a = args()
    g = compiled_graph(rows_and_product, *a)
    steps = g.lowered.plan()[2]
    serial = [i for i, s in enumerate(steps) if isinstance(s, KernelStep) and not s.parallel]
    if not serial:
        pytest.skip("no serial kernel step in this plan")
    with pytest.raises(ValueError, match="parallel"):
        g.run.set_step(serial[0], True, 1, None, 0, None)
    with pytest.raises(IndexError):
        g.run.set_step(len(steps), False, 1, None, 0, None)


def model_step(model, x):
    loss = model(x).softmax(-1)[:, 1:].sum()
    loss.backward()
    return loss


@pytest.mark.parametrize("threads", [1, 2])
def test_results_equal_default_modes(cache_dir, threads):
    prev = ember.get_num_threads()
    ember.set_num_threads(threads)
    try:
        a = args(seed=1)
        want = ember.compile(rows_and_product)(*a)
        got = ember.compile(rows_and_product, mode="max-autotune")(*a)
        assert autotune.stats["tuned"] >= 1
        for w, g in zip(want, got):
            np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=2e-6, atol=1e-5)
        # a training step (forward and backward graphs), and batched products
        grads = []
        for mode in ("default", "max-autotune"):
            ember.manual_seed(0)
            model = nn.Sequential(nn.Linear(64, 128), nn.GELU(), nn.LayerNorm(128),
                                  nn.Linear(128, 10))
            x = ember.randn(512, 64)
            for _ in range(2):
                loss = ember.compile(model_step, mode=mode)(model, x)
            grads.append([loss.item()] + [p.grad.numpy() for p in model.parameters()])
        for w, g in zip(*grads):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
        q, k = ember.randn(8, 4, 128, 32), ember.randn(8, 4, 32, 128)
        bmm = ember.compile(lambda q, k: (q @ k).softmax(-1))
        bmm_t = ember.compile(lambda q, k: (q @ k).softmax(-1), mode="max-autotune")
        np.testing.assert_allclose(bmm_t(q, k).numpy(), bmm(q, k).numpy(), rtol=1e-5,
                                   atol=1e-6)
    finally:
        ember.set_num_threads(prev)


def test_tuning_leaves_inputs_and_the_random_generator_as_they_were(cache_dir, two_threads):
    def f(x, y):
        y.add_(1)
        return ember.nn.functional.dropout(x * 3, 0.5, training=True).sum(1)

    x = ember.randn(4096, 64)
    out = []
    for mode in ("default", "max-autotune"):
        y = ember.zeros(4096, 64)
        ember.manual_seed(5)
        r = ember.compile(f, mode=mode)(x, y)
        out.append((r.numpy(), y.numpy().copy(), ember.rand(3).numpy()))
    assert autotune.stats["tuned"] >= 1
    np.testing.assert_allclose(out[1][0], out[0][0], rtol=1e-5, atol=1e-5)
    assert (out[1][1] == 1).all() and (out[0][1] == 1).all()
    assert (out[1][2] == out[0][2]).all()


def test_an_unsound_entry_is_tuned_again(cache_dir, two_threads):
    a = args()
    g = compiled_graph(rows_and_product, *a)
    cost = lambda i, c: 1.0 if c is None else 0.5          # noqa: E731
    tune_with(g, FakeTimer(cost), a)
    files = list((cache_dir / "autotune").glob("*.json"))
    assert len(files) == 1 and autotune.stats["stored"] == 1
    data = files[0].read_bytes()
    files[0].write_bytes(data[:-3] + b"xx]")
    timer = FakeTimer(cost)
    g2 = compiled_graph(rows_and_product, *a)
    tune_with(g2, timer, a)
    assert autotune.stats["rejected"] == 1 and timer.schedules
    timer = FakeTimer(cost)
    g3 = compiled_graph(rows_and_product, *a)
    tune_with(g3, timer, a)                 # now sound again: read, nothing timed
    assert autotune.stats["disk"] == 1 and not timer.schedules


PROGRAM = textwrap.dedent("""
    import json
    import numpy as np
    import ember
    from ember import _C, nn
    from ember.compiler import autotune
    ember.set_num_threads(2)
    ember.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 256), nn.GELU(), nn.LayerNorm(256), nn.Linear(256, 7))
    x = ember.randn(1024, 64)
    loss = ember.compile(model, mode="max-autotune")(x).softmax(-1)[:, 1:].sum()
    loss.backward()
    grads = [p.grad.numpy().tolist() for p in model.parameters()]
    print(json.dumps({"loss": loss.item(), "grads": grads, "jit": _C._jit_stats(),
                      "tune": dict(autotune.stats)}))
""")


def run_program(cache, **env):
    env = dict(os.environ, EMBER_CACHE_DIR=str(cache), **env)
    r = subprocess.run([sys.executable, "-c", PROGRAM], env=env, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("graphs", ["1", "0"])
def test_a_new_process_takes_the_picks_from_disk_without_timing(tmp_path, graphs):
    cache = tmp_path / "cache"
    cold = run_program(cache, EMBER_GRAPH_CACHE=graphs)
    assert cold["tune"]["tuned"] == 2 and cold["tune"]["timed_calls"] > 0
    assert cold["tune"]["stored"] == 2
    warm = run_program(cache, EMBER_GRAPH_CACHE=graphs)
    assert warm["tune"].get("tuned", 0) == 0 and warm["tune"].get("timed_calls", 0) == 0
    assert warm["tune"]["disk"] == 2 and warm["jit"]["compiled"] == 0
    assert warm["tune"].get("steps_changed", 0) == cold["tune"].get("steps_changed", 0)
    np.testing.assert_allclose(warm["loss"], cold["loss"], rtol=1e-6)
    for a, b in zip(warm["grads"], cold["grads"]):
        np.testing.assert_allclose(np.array(a), np.array(b), rtol=1e-5, atol=1e-6)
