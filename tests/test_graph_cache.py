"""The graph cache (python/ember/compiler/graph_cache.py): a graph another process
compiled comes from disk, skipping AOT autograd and lowering, and gives exactly what a
fresh compilation gives; anything that changes the compilation misses; unsound entries
are rebuilt; unsafe folders are refused.

A process never reads the entries it wrote, so tests here stand for "another process"
by forgetting what this one wrote (`other_process()`); one test runs real processes."""
import collections
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import ember
from ember import nn
from ember.capture.config import config
from ember.compiler import graph_cache, kernel_cache
from ember.compiler.loop_ir import KernelSpec

from cache_folders import refused_cache_folder


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    path = tmp_path / "cache"
    path.mkdir(mode=0o700)
    monkeypatch.setattr(config, "cache_dir", str(path))
    monkeypatch.setattr(config, "kernel_cache", True)
    monkeypatch.setattr(config, "graph_cache", True)
    monkeypatch.setattr(graph_cache, "_written", set())
    ember.compiler.reset()
    graph_cache.stats.clear()
    yield path
    ember.compiler.reset()


def other_process():
    ember.compiler.reset()
    graph_cache._written.clear()
    graph_cache.stats.clear()


def entries(cache_dir):
    return sorted((cache_dir / "graphs").glob("*.json"))


def make_model(seed=0, width=23):
    ember.manual_seed(seed)
    return nn.Sequential(nn.Linear(11, width), nn.GELU(), nn.LayerNorm(width),
                         nn.Linear(width, 5))


def data(shape=(9, 11), dtype=np.float32):
    return ember.from_numpy(np.linspace(-2, 2, int(np.prod(shape)), dtype=dtype)
                            .reshape(shape))


def train(model, x):
    """(loss, grads) of a compiled training step, as numpy."""
    for p in model.parameters():
        p.grad = None
    out = ember.compile(model)(x)
    loss = (out.softmax(-1) * ember.arange(out.shape[-1]).float()).sum()
    loss.backward()
    return loss.detach().numpy(), [p.grad.numpy() for p in model.parameters()]


def same(a, b):
    (la, ga), (lb, gb) = a, b
    np.testing.assert_array_equal(la, lb)
    assert len(ga) == len(gb)
    for u, v in zip(ga, gb):
        np.testing.assert_array_equal(u, v)


def test_a_hit_gives_what_a_fresh_compile_gives(cache_dir):
    fresh = train(make_model(), data())
    assert graph_cache.stats["stored"] == 1 and len(entries(cache_dir)) == 1
    other_process()
    hit = train(make_model(), data())
    assert graph_cache.stats["hits"] == 1 and graph_cache.stats["misses"] == 0
    same(hit, fresh)


def test_a_process_does_not_read_what_it_wrote(cache_dir):
    train(make_model(), data())
    train(make_model(), data())
    assert graph_cache.stats["hits"] == 0 and graph_cache.stats["stored"] == 1


@pytest.mark.parametrize("change", ["shape", "dtype", "graph", "constant", "requires_grad",
                                    "partitioner", "grad_mode"])
def test_what_changes_the_compilation_misses(cache_dir, monkeypatch, change):
    def run(model=None, x=None):
        model = model or make_model()
        x = data() if x is None else x
        if change == "grad_mode" and run.second:
            with ember.no_grad():
                return ember.compile(model)(x).numpy()
        return train(model, x)

    run.second = False
    train(make_model(), data())
    k0 = entries(cache_dir)
    other_process()
    run.second = True
    model, x = None, None
    if change == "shape":
        x = data((7, 11))
    elif change == "dtype":
        model = make_model().double()
        x = data(dtype=np.float64)
    elif change == "graph":
        model = make_model(width=24)
    elif change == "constant":
        model = make_model()
        model[2].eps = 1e-3
    elif change == "requires_grad":
        model = make_model()
        model[0].weight.requires_grad_(False)
    elif change == "partitioner":
        monkeypatch.setattr(config, "partitioner", "save_all")
    if change == "requires_grad":
        out = ember.compile(model)(data())
        out.sum().backward()
    else:
        run(model, x)
    assert graph_cache.stats["hits"] == 0 and graph_cache.stats["misses"] == 1
    assert len(entries(cache_dir)) == len(k0) + 1


def test_an_inference_graph_hits(cache_dir):
    model = make_model()
    with ember.no_grad():
        fresh = ember.compile(model)(data()).numpy()
    other_process()
    with ember.no_grad():
        hit = ember.compile(make_model())(data()).numpy()
    assert graph_cache.stats["hits"] == 1
    np.testing.assert_array_equal(hit, fresh)


def two_outputs(x, w):
    h = (x @ w).tanh()
    return h.sum(0), (h * h).mean(1)


@pytest.mark.parametrize("which", [0, 1, "both"])
def test_backward_of_some_outputs_of_a_graph_from_the_cache(cache_dir, which):
    """Calls whose outputs get only some gradients run a backward variant, traced again
    for a graph from the cache: the same gradients as a fresh compile."""
    def grads():
        x = data((6, 11))
        w = data((11, 4)).mul(0.5).requires_grad_(True)
        a, b = ember.compile(two_outputs)(x, w)
        loss = a.sum() if which == 0 else b.sum() if which == 1 else a.sum() + b.sum()
        loss.backward()
        return loss.detach().numpy(), [w.grad.numpy()]

    fresh = grads()
    other_process()
    hit = grads()
    assert graph_cache.stats["hits"] == 1
    same(hit, fresh)


def test_extern_steps_come_back(cache_dir):
    """A graph with steps that run eager kernels (an index with a tensor, a sort)."""
    def f(x, i):
        return (x[i].sort(dim=-1).values * 2).relu().cumsum(0)

    x = data((8, 5)).requires_grad_(True)
    i = ember.from_numpy(np.array([3, 0, 7, 3]))
    fresh = ember.compile(f)(x, i)
    fresh.sum().backward()
    g = x.grad.numpy()
    other_process()
    x.grad = None
    hit = ember.compile(f)(x, i)
    hit.sum().backward()
    assert graph_cache.stats["hits"] == 1
    np.testing.assert_array_equal(hit.detach().numpy(), fresh.detach().numpy())
    np.testing.assert_array_equal(x.grad.numpy(), g)


def test_batch_norm_statistics_written_back_from_a_graph_from_the_cache(cache_dir):
    """A training graph that writes into its inputs (BatchNorm's running statistics)."""
    def run():
        ember.manual_seed(0)
        model = nn.Sequential(nn.Linear(11, 16), nn.BatchNorm1d(16), nn.ReLU(),
                              nn.Linear(16, 3))
        compiled = ember.compile(model)
        losses = []
        for _ in range(2):
            loss = compiled(data()).pow(2).mean()
            loss.backward()
            losses.append(loss.detach().numpy())
        bn = model[1]
        return (np.array(losses), [p.grad.numpy() for p in model.parameters()] +
                [bn.running_mean.numpy(), bn.running_var.numpy(),
                 bn.num_batches_tracked.numpy()])

    fresh = run()
    assert graph_cache.stats["stored"] == 1
    other_process()
    hit = run()
    assert graph_cache.stats["hits"] == 1
    same(hit, fresh)


def test_an_inference_graph_that_writes_into_an_input(cache_dir):
    def f(x, acc):
        acc.mul_(0.5).add_(x)
        return x * 2

    def run():
        acc = ember.ones(9, 11)
        compiled = ember.compile(f)
        with ember.no_grad():
            outs = [compiled(data(), acc).numpy() for _ in range(2)]
        return np.array(outs), [acc.numpy()]

    fresh = run()
    other_process()
    hit = run()
    assert graph_cache.stats["hits"] == 1
    same(hit, fresh)
    # an input written into that shares memory with another input: eager, as fresh
    other_process()
    acc = ember.ones(9, 11)
    with ember.no_grad():
        out = ember.compile(f)(acc.view(9, 11), acc)
    assert graph_cache.stats["hits"] == 1
    want = ember.ones(9, 11)
    f(want.view(9, 11), want)
    np.testing.assert_array_equal(acc.numpy(), want.numpy())
    np.testing.assert_array_equal(out.numpy(), (want * 2).numpy())


def damage_garbage(path):
    path.write_bytes(b"not an entry")


def damage_flip(path):
    data = bytearray(path.read_bytes())
    data[-3] ^= 0x55
    path.write_bytes(bytes(data))


def damage_sound_but_wrong(path):
    """A sound file (header, checksum) whose content is not an entry."""
    k = path.stem
    kernel_cache.write(str(path.parent), k, json.dumps({"training": True, "graphs": [
        {"specs": [[1]], "keys": []}]}).encode(), graph_cache.SUFFIX, graph_cache.FORMAT,
        collections.Counter())


@pytest.mark.parametrize("damage", [damage_garbage, damage_flip, damage_sound_but_wrong])
def test_an_unsound_entry_is_ignored_and_rebuilt(cache_dir, damage):
    fresh = train(make_model(), data())
    (path,) = entries(cache_dir)
    damage(path)
    other_process()
    again = train(make_model(), data())
    assert graph_cache.stats["hits"] == 0 and graph_cache.stats["rejected"] == 1
    assert graph_cache.stats["stored"] == 1             # rebuilt
    same(again, fresh)
    other_process()
    same(train(make_model(), data()), fresh)
    assert graph_cache.stats["hits"] == 1


def test_a_spec_that_is_not_its_keys_is_never_compiled(cache_dir):
    """A kernel to compile from an entry must be the one its stored key names (else the
    entry is rejected, rather than code compiled under another kernel's key)."""
    train(make_model(), data())
    (path,) = entries(cache_dir)
    entry = json.loads(path.read_bytes()[kernel_cache._HEADER.size:])
    spec, key = entry["graphs"][0]["specs"][0], entry["graphs"][0]["keys"][0]
    assert isinstance(graph_cache._spec(spec, key), KernelSpec)
    spec[0][0] += 1                      # another domain size
    with pytest.raises(ValueError, match="not the one stored"):
        graph_cache._spec(spec, key)


@pytest.mark.parametrize("mode", [0o770, 0o707])
def test_a_folder_others_can_write_is_refused(tmp_path, monkeypatch, mode):
    ember.compiler.reset()
    graph_cache.stats.clear()
    with refused_cache_folder(tmp_path, monkeypatch, mode, "graphs"):
        train(make_model(), data())


def test_the_switch_turns_it_off(cache_dir, monkeypatch):
    monkeypatch.setattr(config, "graph_cache", False)
    train(make_model(), data())
    assert not (cache_dir / "graphs").exists()
    assert graph_cache.stats["stored"] == 0


PROGRAM = textwrap.dedent("""
    import json
    import numpy as np
    import ember
    from ember import _C, nn
    from ember.compiler import graph_cache
    ember.manual_seed(0)
    model = nn.Sequential(nn.Linear(29, 61), nn.GELU(), nn.LayerNorm(61), nn.Linear(61, 7))
    x = ember.from_numpy(np.linspace(-2, 2, 13 * 29, dtype=np.float32).reshape(13, 29))
    loss = ember.compile(model)(x).softmax(-1)[:, 1:].sum()
    loss.backward()
    grads = [p.grad.numpy().tolist() for p in model.parameters()]
    print(json.dumps({"loss": loss.item(), "grads": grads, "jit": _C._jit_stats(),
                      "graphs": dict(graph_cache.stats)}))
""")


def run_program(cache, **env):
    env = dict(os.environ, EMBER_CACHE_DIR=str(cache), **env)
    r = subprocess.run([sys.executable, "-c", PROGRAM], env=env, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_a_new_process_takes_the_graph_from_disk(tmp_path):
    cache = tmp_path / "cache"
    off = run_program(cache, EMBER_GRAPH_CACHE="0", EMBER_KERNEL_CACHE="0")
    cold = run_program(cache)
    assert cold["graphs"] == {"misses": 1, "stored": 1}
    warm = run_program(cache)
    assert warm["graphs"] == {"hits": 1} and warm["jit"]["compiled"] == 0
    for r in (cold, warm):
        assert r["loss"] == off["loss"] and r["grads"] == off["grads"]


def test_the_package_part_of_the_key_follows_file_contents_not_times(tmp_path):
    """Two copies of one tree (new modification times, as in a fresh clone) key alike;
    a change of content that keeps a file's size and modification time keys apart."""
    a, b = tmp_path / "a", tmp_path / "b"
    for root in (a, b):
        (root / "sub").mkdir(parents=True)
        (root / "x.py").write_text("X = 1\n")
        (root / "sub" / "y.py").write_text("Y = 2\n")
        (root / "notes.txt").write_text(str(root))
    os.utime(b / "x.py", ns=(10**18, 10**18))
    assert graph_cache.tree_hash(str(a)) == graph_cache.tree_hash(str(b))
    st = os.stat(b / "x.py")
    (b / "x.py").write_text("X = 3\n")
    os.utime(b / "x.py", ns=(st.st_atime_ns, st.st_mtime_ns))
    assert os.stat(b / "x.py").st_size == st.st_size
    assert graph_cache.tree_hash(str(a)) != graph_cache.tree_hash(str(b))
