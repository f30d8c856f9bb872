"""The kernel cache (python/ember/compiler/kernel_cache.py, csrc/jit/jit.c): identical
kernels compiled once per process, object code on disk so that another process compiles
nothing, unsound entries rebuilt, unsafe folders refused, concurrent writers."""
import gc
import json
import os
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest

import ember
from ember import _C, nn
from ember.capture.config import config, default_cache_dir
from ember.compiler import jit, kernel_cache
from ember.compiler.backend import CompiledLLVMGraph

from cache_folders import assert_nothing_stored, refused_cache_folder

F32 = ember.float32._code


def compiled():
    return _C._jit_stats()["compiled"]


def triad_spec(n, scale=3.0):
    """A kernel spec made by hand: out = a + scale * b over n points (n makes it unique
    to the test that uses it, so no other test has it in memory or on disk)."""
    return ((n,), 0, (F32, F32, F32),
            (("load", 0, 0, (1,), 0), ("load", 1, 1, (1,), 0), ("const", 2, F32, scale),
             ("mul", 3, F32, 1, 2), ("add", 4, F32, 0, 3), ("store", 2, (1,), 0, 4)))


def run_triad(kern, n):
    """kern (a JitKernel of triad_spec(n)) run on a = 0..n-1, b = 1."""
    geometry = ((n,), (1,))
    plan = ((geometry,) * 3, (), (("kernel", 0, (("in", 0), ("in", 1), ("in", 2)), n,
                                   False),), ())
    a = ember.from_numpy(np.arange(n, dtype=np.float32))
    b = ember.from_numpy(np.ones(n, dtype=np.float32))
    out = ember.zeros(n)
    _C.CompiledGraph(kern, (kern.address,), plan)(a, b, out)
    return out.numpy()


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    """A fresh, private cache folder for this test (config.cache_dir points at it)."""
    path = tmp_path / "cache"
    path.mkdir(mode=0o700)
    monkeypatch.setattr(config, "cache_dir", str(path))
    monkeypatch.setattr(config, "kernel_cache", True)
    return path


def load(spec):
    (kern,) = kernel_cache.kernels([spec], [jit.options(spec)])
    return kern


def entry(cache_dir, spec):
    return cache_dir / "kernels" / (kernel_cache.key(spec, jit.options(spec)) + ".o")


# ------------------------------------------------------------------ in memory


def test_the_suite_never_writes_to_the_users_cache():
    user = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"),
                        "ember")
    assert os.environ["EMBER_CACHE_DIR"] == config.cache_dir
    assert not os.path.abspath(config.cache_dir).startswith(os.path.abspath(user))


def test_identical_kernels_are_compiled_once_per_process(cache_dir):
    """Three identical blocks: the kernels of the second and third are the first's (one
    LLVM compilation per distinct spec), and a second identical model compiles none."""
    def block():
        return nn.Sequential(nn.Linear(37, 37), nn.Tanh())

    ember.manual_seed(0)
    model = nn.Sequential(block(), block(), block())
    x = ember.randn(11, 37)
    before = compiled()
    with ember.no_grad():
        out = ember.compile(model)(x)
    graph = ember.compiler.backend.recent[-1]
    specs = [repr(k.spec()) for k in graph.lowered.kernels]
    assert len(specs) > len(set(specs)) >= 1        # the blocks share kernels
    assert compiled() - before == len(set(specs))
    by_spec = {}
    for s, address in zip(specs, graph.module.addresses):
        assert by_spec.setdefault(s, address) == address     # one function per spec
    with ember.no_grad():
        np.testing.assert_allclose(out.numpy(), model(x).numpy(), rtol=1e-5, atol=1e-6)
    ember.manual_seed(1)
    twin = nn.Sequential(block(), block(), block())
    before = compiled()
    with ember.no_grad():
        out2 = ember.compile(twin)(x)
        np.testing.assert_allclose(out2.numpy(), twin(x).numpy(), rtol=1e-5, atol=1e-6)
    assert compiled() == before


def test_parallel_compilation_gives_the_same_code():
    """Worker threads (separate contexts and target machines) build byte-identical
    objects to one thread."""
    specs = tuple(triad_spec(1000 + i, float(i)) for i in range(6))
    names = tuple(f"em_test_parallel_{i}" for i in range(6))
    opts = [jit.options(s) for s in specs]
    args = (specs, names, tuple(o[0] for o in opts), tuple(o[1] for o in opts))
    before = compiled()
    one = _C._jit_compile(*args, 1)
    two = _C._jit_compile(*args, 2)
    assert one == two and all(one)
    assert compiled() - before == 12


def test_two_threads_compiling_the_same_kernels_at_once(cache_dir):
    """Both compile (the GIL is released meanwhile) and both get the one linked kernel."""
    import threading
    specs = [triad_spec(8000 + i) for i in range(4)]
    barrier, results, errors = threading.Barrier(2), [None, None], []

    def work(i):
        barrier.wait()
        try:
            results[i] = kernel_cache.kernels(specs, [jit.options(s) for s in specs])
        except Exception as e:              # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert [k.address for k in results[0]] == [k.address for k in results[1]]
    assert all(k.address for k in results[0])


def test_options_by_kernel_size():
    """Small kernels get the fast instruction selector; both run correctly."""
    small, large = triad_spec(jit.SMALL), triad_spec(jit.SMALL + 1)
    assert jit.options(small) == (jit.LEAN, jit.CODEGEN_NONE)
    assert jit.options(large) == (jit.LEAN, jit.CODEGEN_DEFAULT)
    for spec in (small, large):
        n = spec[0][0]
        passes, level = jit.options(spec)
        name = f"em_test_size_{n}"
        (obj,) = _C._jit_compile((spec,), (name,), (passes,), (level,), 1)
        np.testing.assert_array_equal(run_triad(_C.JitKernel(obj, name), n),
                                      np.arange(n) + 3.0)


def test_ir_of_a_kernel_read_from_disk(cache_dir):
    spec = triad_spec(5003)
    load(spec)
    gc.collect()
    module = jit.JitModule((spec,), "from_disk")
    assert kernel_cache.stats["disk"] >= 1
    assert "fmul" in module.ir and module.names[0] in module.optimized_ir


# ------------------------------------------------------------------ on disk


def test_an_entry_is_written_and_read_back(cache_dir):
    spec = triad_spec(5001)
    kern = load(spec)
    path = entry(cache_dir, spec)
    assert path.is_file() and path.stat().st_mode & 0o077 == 0
    want = run_triad(kern, 5001)
    del kern
    gc.collect()                          # the in-memory table lets it go
    before, disk = compiled(), kernel_cache.stats["disk"]
    kern = load(spec)
    assert compiled() == before and kernel_cache.stats["disk"] == disk + 1
    np.testing.assert_array_equal(run_triad(kern, 5001), want)
    assert not [p for p in (cache_dir / "kernels").iterdir() if p.name.endswith(".tmp")]


def _truncate(data):
    return data[:len(data) // 2]


def _flip_payload(data):
    b = bytearray(data)
    b[-10] ^= 0x40
    return bytes(b)


def _other_key(data):
    b = bytearray(data)
    b[8:48] = b"0" * 40
    return bytes(b)


def _old_format(data):
    return b"EMBERKO0" + data[8:]


def _garbage_with_a_sound_header(data):
    """A header that checks out around bytes LLVM cannot link."""
    import hashlib
    import struct
    header = struct.unpack_from("<8s40sQ32s", data)
    junk = b"\x7fELF" + bytes(200)
    return struct.pack("<8s40sQ32s", header[0], header[1], len(junk),
                       hashlib.blake2b(junk, digest_size=32).digest()) + junk


def _empty(data):
    return b""


@pytest.mark.parametrize("n, damage", list(enumerate(
    [_truncate, _flip_payload, _other_key, _old_format, _garbage_with_a_sound_header, _empty],
    start=6000)))
def test_an_unsound_entry_is_ignored_and_rebuilt(cache_dir, n, damage):
    spec = triad_spec(n)
    del_me = load(spec)
    del del_me
    gc.collect()
    path = entry(cache_dir, spec)
    path.write_bytes(damage(path.read_bytes()))
    before, rejected = compiled(), kernel_cache.stats["rejected"]
    kern = load(spec)
    assert compiled() == before + 1                      # compiled again
    assert kernel_cache.stats["rejected"] == rejected + 1
    np.testing.assert_array_equal(run_triad(kern, n), np.arange(n) + 3.0)
    del kern
    gc.collect()
    before = compiled()
    load(spec)                                           # the entry was rewritten
    assert compiled() == before


@pytest.mark.parametrize("mode", [0o777, 0o770, 0o722])
def test_a_folder_others_can_write_is_refused_with_one_warning(tmp_path, monkeypatch, mode):
    with refused_cache_folder(tmp_path, monkeypatch, mode, "kernels") as path:
        kern = load(triad_spec(7001 + mode))
    np.testing.assert_array_equal(run_triad(kern, 7001 + mode), np.arange(7001 + mode) + 3.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        load(triad_spec(7002 + mode))                    # warned once
    assert_nothing_stored(path, "kernels")


@pytest.mark.skipif(os.getuid() != 0, reason="needs root to give a folder away")
def test_a_folder_of_another_user_is_refused(tmp_path, monkeypatch):
    path = tmp_path / "theirs"
    path.mkdir(mode=0o700)
    os.chown(path, 4321, 4321)
    monkeypatch.setattr(config, "cache_dir", str(path))
    with pytest.warns(RuntimeWarning, match="not owned by this user"):
        load(triad_spec(7101))


def test_the_switch_turns_the_disk_cache_off(cache_dir, monkeypatch):
    monkeypatch.setattr(config, "kernel_cache", False)
    load(triad_spec(7201))
    assert not os.path.exists(cache_dir / "kernels")


def test_default_cache_dir(monkeypatch):
    monkeypatch.delenv("EMBER_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", "/somewhere/cache")
    assert default_cache_dir() == "/somewhere/cache/ember"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert default_cache_dir() == os.path.join(os.path.expanduser("~"), ".cache", "ember")
    monkeypatch.setenv("EMBER_CACHE_DIR", "/elsewhere")
    assert default_cache_dir() == "/elsewhere"


def test_the_key_covers_the_context(monkeypatch):
    spec = triad_spec(100)
    k = kernel_cache.key(spec, jit.options(spec))
    assert k != kernel_cache.key(triad_spec(101), jit.options(spec))
    assert k != kernel_cache.key(spec, (jit.LEAN, jit.CODEGEN_LESS))
    ctx = kernel_cache.context()
    for part in (_C._jit_target()["features"], _C._jit_target()["llvm"]):
        assert part.encode() in ctx
    monkeypatch.setattr(kernel_cache, "_context", ctx.replace(b"+", b"-"))
    assert kernel_cache.key(spec, jit.options(spec)) != k


# ------------------------------------------------------------------ across processes

PROGRAM = textwrap.dedent("""
    import json, os, sys, time
    import numpy as np
    import ember
    from ember import _C, nn
    from ember.compiler import kernel_cache
    go = os.environ.get("GO_FILE")
    if go:
        open(go + "." + str(os.getpid()), "w").close()
        while not os.path.exists(go):
            time.sleep(0.001)
    ember.manual_seed(0)
    model = nn.Sequential(nn.Linear(29, 61), nn.GELU(), nn.LayerNorm(61), nn.Linear(61, 7))
    x = ember.from_numpy(np.linspace(-2, 2, 13 * 29, dtype=np.float32).reshape(13, 29))
    loss = ember.compile(model)(x).softmax(-1).sum()
    loss.backward()
    grads = [p.grad.numpy().tolist() for p in model.parameters()]
    print(json.dumps({"loss": loss.item(), "grads": grads, "jit": _C._jit_stats(),
                      "cache": dict(kernel_cache.stats)}))
""")


def run_program(cache, **env):
    env = dict(os.environ, EMBER_CACHE_DIR=str(cache), **env)
    r = subprocess.run([sys.executable, "-c", PROGRAM], env=env, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_a_warm_cache_process_compiles_nothing_and_agrees(tmp_path):
    cache = tmp_path / "cache"
    off = run_program(cache, EMBER_KERNEL_CACHE="0")
    assert off["jit"]["compiled"] > 0 and not cache.exists()
    cold = run_program(cache)
    assert cold["jit"]["compiled"] == cold["cache"]["stored"] > 0
    warm = run_program(cache)
    assert warm["jit"]["compiled"] == 0                 # no LLVM compilation at all
    assert warm["cache"]["disk"] == cold["cache"]["stored"]
    assert warm["jit"]["loaded"] == cold["jit"]["loaded"]
    for r in (cold, warm):                              # the same bits, cache or not
        assert r["loss"] == off["loss"] and r["grads"] == off["grads"]


def test_two_processes_filling_one_cache_at_once(tmp_path):
    cache, go = tmp_path / "cache", tmp_path / "go"
    env = dict(os.environ, EMBER_CACHE_DIR=str(cache), GO_FILE=str(go))
    procs = [subprocess.Popen([sys.executable, "-c", PROGRAM], env=env, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
             for _ in range(2)]
    import time
    deadline = time.time() + 120
    while len(list(tmp_path.glob("go.*"))) < 2 and time.time() < deadline:
        time.sleep(0.01)
    go.touch()                                          # both start compiling now
    results = []
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err[-3000:]
        results.append(json.loads(out.strip().splitlines()[-1]))
    a, b = results
    assert a["jit"]["compiled"] > 0 and b["jit"]["compiled"] > 0
    assert a["loss"] == b["loss"] and a["grads"] == b["grads"]
    assert not list((cache / "kernels").glob("*.tmp"))
    warm = run_program(cache)
    assert warm["jit"]["compiled"] == 0 and warm["loss"] == a["loss"]


def test_a_rebuilt_extension_stops_this_process_using_the_disk_cache(cache_dir, monkeypatch,
                                                                    tmp_path):
    """The extension file changed after it was loaded: its hash no longer describes the
    running code, so nothing is read from or written to disk."""
    other = tmp_path / "other"
    other.write_bytes(b"x")
    monkeypatch.setattr(kernel_cache, "_EXT_STAT", os.stat(other))
    monkeypatch.setattr(kernel_cache, "_context", None)
    assert kernel_cache.context() is None and kernel_cache.folder() is None
    kern = load(triad_spec(7301))
    np.testing.assert_array_equal(run_triad(kern, 7301), np.arange(7301) + 3.0)
    assert not os.path.exists(cache_dir / "kernels")
