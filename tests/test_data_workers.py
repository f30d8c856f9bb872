"""DataLoader with num_workers > 0: real worker processes under fork, spawn and
forkserver; batches equal to the single-process loader's and in order; tensors through
shared memory (no pickled copy of their data); worker_init_fn, get_worker_info, seeds,
IterableDataset sharding (against torch's DataLoader), persistent workers, prefetch,
timeout, errors with the worker's traceback, dead workers, clean shutdown (no orphans),
and fork safety after compiled kernels and the thread pool ran in the parent.

Every loader here has a timeout, and process waits are bounded, so a hang fails instead
of blocking the suite."""
import gc
import multiprocessing
import os
import random
import signal
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

import ember
from ember.utils.data import DataLoader, Dataset, IterableDataset, get_worker_info
from ember.utils.data import _shared

TIMEOUT = 120            # seconds any loader here may wait for one batch
METHODS = ["fork", "spawn", "forkserver"]


# ------------------------------------------------------------------ datasets (module level,
# so spawn and forkserver workers can import them)

class Rows(Dataset):
    """Sample i: a float32 row of `width` values i, i+1, ... and the label i."""

    def __init__(self, n=40, width=8):
        self.n, self.width = n, width

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return ember.arange(self.width, dtype=ember.float32) + i, i


class Info(Dataset):
    """Sample i: what the worker that loads it knows about itself."""

    def __len__(self):
        return 12

    def __getitem__(self, i):
        info = get_worker_info()
        return {"i": i, "id": info.id, "num_workers": info.num_workers, "seed": info.seed,
                "same_dataset": info.dataset is self, "pid": os.getpid(),
                "random": random.random(), "np": float(np.random.rand()),
                "ember": float(ember.rand(()).item()), "init": _INIT.get("worker")}


_INIT = {}


def record_init(worker_id):
    _INIT["worker"] = (worker_id, get_worker_info().id)


class Failing(Dataset):
    def __init__(self, bad=5, exc=KeyError):
        self.bad, self.exc = bad, exc

    def __len__(self):
        return 10

    def __getitem__(self, i):
        if i == self.bad:
            raise self.exc(f"sample {i} is missing")
        return i


class TwoArguments(Exception):
    """An exception type that cannot be made from one message."""

    def __init__(self, a, b):
        super().__init__(a, b)

    @classmethod
    def make(cls, message):
        return cls(message, 2)


class Sharded(IterableDataset):
    """range(start, end), split between workers by get_worker_info (the PyTorch docs'
    recipe); `lib` is the module whose get_worker_info it asks."""

    def __init__(self, start, end, lib="ember"):
        self.start, self.end, self.lib = start, end, lib

    def __iter__(self):
        if self.lib == "torch":
            from torch.utils.data import get_worker_info as info_of
        else:
            info_of = get_worker_info
        info = info_of()
        if info is None:
            return iter(range(self.start, self.end))
        per = -(-(self.end - self.start) // info.num_workers)
        lo = self.start + info.id * per
        return iter(range(lo, min(lo + per, self.end)))


class Uneven(IterableDataset):
    """Worker w yields w * 3 + 1 items (one worker runs dry long before the other)."""

    def __iter__(self):
        info = get_worker_info()
        wid = 0 if info is None else info.id
        return iter([wid * 100 + k for k in range(wid * 3 + 1)])


class Slow(Dataset):
    def __init__(self, delay=30):
        self.delay = delay

    def __len__(self):
        return 4

    def __getitem__(self, i):
        if i == 2:
            time.sleep(self.delay)
        return i


class Dies(Dataset):
    def __len__(self):
        return 8

    def __getitem__(self, i):
        if i == 3:
            os._exit(7)
        return i


def _compiled_step(x):
    return ((x.sin() * 2.0 + x.cos()) * x).sum(dim=1)


class Compute(Dataset):
    """Each sample runs eager ops and compiled code in the worker; the compiled function
    is the module-level one (compiled in the parent, under fork) or compiled here."""

    def __init__(self, fn=None):
        self.fn = fn

    def __len__(self):
        return 6

    def __getitem__(self, i):
        fn = self.fn
        if fn is None:
            fn = _COMPILED.setdefault("fn", ember.compile(_compiled_step))
        x = ember.linspace(-1.0, 1.0, 256 * 512).reshape(256, 512) * (i + 1)
        eager = _compiled_step(x)
        before = _os_threads()
        compiled = fn(x)
        # the first parallel kernel in this process starts its pool thread (a forked
        # child inherits none); later ones find it running
        started = _os_threads() > before if "pool" not in _COMPILED else None
        _COMPILED["pool"] = True
        return _rel_err(compiled, eager), float(eager.sum().item()), started


def _os_threads():
    return len(os.listdir("/proc/self/task"))


_COMPILED = {}


def _rel_err(got, want):
    return float(((got - want).abs().max() / want.abs().max()).item())


def two_threads(worker_id):
    ember.set_num_threads(2)


# ------------------------------------------------------------------ helpers

def _batches(loader):
    """The loader's batches as plain Python values."""
    def plain(b):
        if isinstance(b, ember.Tensor):
            return b.tolist()
        if isinstance(b, (list, tuple)):
            return [plain(x) for x in b]
        if isinstance(b, dict):
            return {k: plain(v) for k, v in b.items()}
        return b
    return [plain(b) for b in loader]


def _gone(pids, within=20.0):
    """Whether every pid has exited (and been reaped) within `within` seconds."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        alive = []
        for pid in pids:
            try:
                with open(f"/proc/{pid}/stat") as f:
                    if f.read().split(") ")[1][0] != "Z":
                        alive.append(pid)
            except FileNotFoundError:
                pass
        if not alive:
            return True
        time.sleep(0.1)
    return False


# ------------------------------------------------------------------ the three start methods

@pytest.mark.parametrize("method", METHODS)
def test_batches_equal_single_process_and_cross_in_shared_memory(method):
    ds = Rows(n=37, width=50_000)
    g = ember.Generator().manual_seed(5)
    single = _batches(DataLoader(ds, batch_size=4, shuffle=True,
                                 generator=ember.Generator().manual_seed(5)))
    loader = DataLoader(ds, batch_size=4, shuffle=True, generator=g, num_workers=2,
                        multiprocessing_context=method, timeout=TIMEOUT,
                        worker_init_fn=record_init)
    it = iter(loader)
    got, data_bytes = [], 0
    for x, y in it:
        assert x.is_shared() and y.is_shared()          # mapped, not unpickled
        assert x.dtype is ember.float32 and y.dtype is ember.int64
        data_bytes += x.numel() * 4 + y.numel() * 8
        got.append([x.tolist(), y.tolist()])
    assert got == single
    assert data_bytes > 7_000_000
    assert it.bytes_received < 1_000 * len(got)         # ~ metadata only, never the data
    assert _gone(it.worker_pids)                        # exhausted: workers are gone


@pytest.mark.parametrize("method", METHODS)
def test_worker_info_init_fn_and_seeds(method):
    def run(seed):
        loader = DataLoader(Info(), batch_size=None, num_workers=2,
                            multiprocessing_context=method, timeout=TIMEOUT,
                            worker_init_fn=record_init,
                            generator=ember.Generator().manual_seed(seed))
        return list(loader)
    out = run(11)
    assert [s["i"] for s in out] == list(range(12))
    assert [s["id"] for s in out] == [i % 2 for i in range(12)]    # round robin, in order
    assert all(s["num_workers"] == 2 and s["same_dataset"] for s in out)
    assert all(s["init"] == [s["id"], s["id"]] for s in out)    # tuples convert to lists
    seeds = {s["id"]: s["seed"] for s in out}
    base = seeds[0]
    assert seeds == {0: base, 1: base + 1}                        # base_seed + worker id
    assert len({s["pid"] for s in out}) == 2 and os.getpid() not in {s["pid"] for s in out}
    first = [(s["random"], s["np"], s["ember"]) for s in out[:2]]
    assert all(a != b for a, b in zip(*first))                   # workers draw differently
    again = run(11)
    assert [(s["seed"], s["random"], s["np"], s["ember"]) for s in again] == \
        [(s["seed"], s["random"], s["np"], s["ember"]) for s in out]   # the generator fixes it
    if method == "fork":
        assert run(12)[0]["seed"] != base


@pytest.mark.parametrize("method", METHODS)
def test_worker_exception_is_raised_with_its_traceback(method):
    loader = DataLoader(Failing(), batch_size=2, num_workers=2, multiprocessing_context=method,
                        timeout=TIMEOUT)
    it = iter(loader)
    assert next(it).tolist() == [0, 1] and next(it).tolist() == [2, 3]
    with pytest.raises(KeyError) as err:
        next(it)
    text = str(err.value)
    assert "Caught KeyError in DataLoader worker process 0." in text
    assert "Original Traceback" in text and "in __getitem__" in text
    assert "sample 5 is missing" in text and text.startswith("Caught")   # printed as is
    assert next(it).tolist() == [6, 7]             # the loader goes on, as PyTorch's
    pids = it.worker_pids
    del it, err                     # the traceback refers to the iterator too
    gc.collect()
    assert _gone(pids)


# ------------------------------------------------------------------ fork-only details

def test_exception_types_and_pickling_errors():
    for exc, expected in ((ValueError, ValueError), (ZeroDivisionError, ZeroDivisionError),
                          (TwoArguments.make, RuntimeError)):
        with pytest.raises(expected, match="in DataLoader worker process"):
            list(DataLoader(Failing(bad=1, exc=exc), num_workers=1, timeout=TIMEOUT,
                            multiprocessing_context="fork"))

    class Unpicklable(Dataset):       # a batch that cannot be sent is an error, not a hang
        def __len__(self):
            return 2

        def __getitem__(self, i):
            return threading.Lock()
    with pytest.raises(TypeError, match="sending the batch"):
        list(DataLoader(Unpicklable(), batch_size=None, num_workers=1, timeout=TIMEOUT,
                        multiprocessing_context="fork"))
    with pytest.raises(ZeroDivisionError, match="worker process 0"):   # worker_init_fn
        list(DataLoader(Rows(), num_workers=1, timeout=TIMEOUT, multiprocessing_context="fork",
                        worker_init_fn=lambda w: 1 / 0))


def test_iterable_sharding_matches_torch(torch):
    class TorchSharded(torch.utils.data.IterableDataset):
        def __init__(self, start, end):
            self.inner = Sharded(start, end, lib="torch")

        def __iter__(self):
            return iter(self.inner)

    for workers, batch_size, drop_last in ((2, 4, False), (3, 5, True), (3, None, False)):
        got = _batches(DataLoader(Sharded(3, 40), batch_size=batch_size, drop_last=drop_last,
                                  num_workers=workers, timeout=TIMEOUT,
                                  multiprocessing_context="fork"))
        want = torch.utils.data.DataLoader(
            TorchSharded(3, 40), batch_size=batch_size, drop_last=drop_last,
            num_workers=workers, multiprocessing_context="fork", timeout=TIMEOUT)
        want = [b.tolist() if hasattr(b, "tolist") else b for b in want]
        assert got == want, (workers, batch_size)
    uneven = _batches(DataLoader(Uneven(), batch_size=2, num_workers=3, timeout=TIMEOUT,
                                 multiprocessing_context="fork"))
    assert uneven == [[0], [100, 101], [200, 201], [102, 103], [202, 203], [204, 205],
                      [206]]
    single = _batches(DataLoader(Sharded(0, 10), batch_size=3))
    assert single == [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9]]


def test_persistent_workers_prefetch_and_in_order():
    loader = DataLoader(Rows(n=30), batch_size=4, num_workers=2, persistent_workers=True,
                        prefetch_factor=3, timeout=TIMEOUT, multiprocessing_context="fork")
    want = _batches(DataLoader(Rows(n=30), batch_size=4))
    it = iter(loader)
    pids = it.worker_pids
    assert _batches(it) == want
    assert iter(loader) is it and it.worker_pids == pids       # the same processes
    first = next(iter(loader))                                  # an epoch left early ...
    assert first[1].tolist() == [0, 1, 2, 3]
    assert _batches(loader) == want                             # ... the next is whole
    assert all(p in pids for p in iter(loader).worker_pids)
    failing = DataLoader(Slow(delay=3), batch_size=None, num_workers=1, persistent_workers=True,
                         timeout=1.0, multiprocessing_context="fork")
    with pytest.raises(RuntimeError, match="timed out"):
        list(failing)
    assert next(iter(failing)) == 0         # a new set of workers after the failure
    iterable = DataLoader(Uneven(), batch_size=2, num_workers=2, persistent_workers=True,
                          timeout=TIMEOUT, multiprocessing_context="fork")
    assert _batches(iterable) == _batches(iterable) == [[0], [100, 101], [102, 103]]
    out_of_order = DataLoader(Rows(n=30), batch_size=4, num_workers=2, in_order=False,
                              timeout=TIMEOUT, multiprocessing_context="fork")
    assert sorted(_batches(out_of_order), key=lambda b: b[1]) == want
    del loader, it, iterable, failing
    gc.collect()
    assert _gone(pids)


def test_pin_memory_is_accepted():
    loader = DataLoader(Rows(n=8), batch_size=4, num_workers=1, pin_memory=True,
                        timeout=TIMEOUT, multiprocessing_context="fork")
    assert _batches(loader) == _batches(DataLoader(Rows(n=8), batch_size=4, pin_memory=True))


def test_argument_errors_as_torch(torch):
    T = torch.utils.data.DataLoader
    cases = [dict(num_workers=-1), dict(prefetch_factor=2), dict(persistent_workers=True),
             dict(multiprocessing_context="fork"), dict(timeout=-1),
             dict(num_workers=1, prefetch_factor=-1),
             dict(num_workers=1, multiprocessing_context="nope"),
             dict(num_workers=1, multiprocessing_context=3)]
    for kwargs in cases:
        with pytest.raises(Exception) as want:
            T(list(range(4)), **kwargs)
        with pytest.raises(type(want.value)) as got:
            DataLoader(list(range(4)), **kwargs)
        assert str(got.value)[:40] == str(want.value)[:40], kwargs
    ctx = multiprocessing.get_context("fork")
    assert _batches(DataLoader(list(range(6)), batch_size=3, num_workers=1,
                               multiprocessing_context=ctx, timeout=TIMEOUT)) == [[0, 1, 2],
                                                                                 [3, 4, 5]]


def test_timeout_and_dead_workers():
    loader = DataLoader(Slow(), batch_size=None, num_workers=1, timeout=1.0,
                        multiprocessing_context="fork")
    it = iter(loader)
    assert next(it) == 0 and next(it) == 1
    start = time.monotonic()
    with pytest.raises(RuntimeError, match="DataLoader timed out after 1.0 seconds"):
        next(it)
    assert time.monotonic() - start < 10
    assert _gone(it.worker_pids)           # a timeout shuts the workers down
    it = iter(DataLoader(Dies(), batch_size=None, num_workers=2, timeout=TIMEOUT,
                         multiprocessing_context="fork"))
    with pytest.raises(RuntimeError, match=r"DataLoader worker \(pid\(s\) \d+\) exited "
                                           r"unexpectedly"):
        list(it)
    assert _gone(it.worker_pids)


def test_breaking_out_early_stops_the_workers():
    it = iter(DataLoader(Rows(n=200), batch_size=2, num_workers=2, timeout=TIMEOUT,
                         multiprocessing_context="fork"))
    next(it)
    pids = it.worker_pids
    del it
    assert _gone(pids)


_ORPHAN_SCRIPT = textwrap.dedent("""
    import os, sys, time
    sys.path.insert(0, {tests!r})
    from test_data_workers import Rows
    from ember.utils.data import DataLoader
    it = iter(DataLoader(Rows(n=1000), batch_size=2, num_workers=2,
                         multiprocessing_context={method!r}, timeout=60))
    next(it)
    print(" ".join(map(str, it.worker_pids)), flush=True)
    time.sleep(60)
""")


@pytest.mark.parametrize("method", ["fork", "forkserver"])
def test_workers_exit_when_the_parent_is_killed(method):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    proc = subprocess.Popen([sys.executable, "-c", _ORPHAN_SCRIPT.format(
        tests=os.path.dirname(__file__), method=method)], stdout=subprocess.PIPE, env=env,
        text=True)
    try:
        line = proc.stdout.readline()
        pids = [int(p) for p in line.split()]
        assert len(pids) == 2, line
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)

        def alive(pid):
            try:
                with open(f"/proc/{pid}/stat") as f:
                    return f.read().split(") ")[1][0] != "Z"
            except FileNotFoundError:
                return False
        deadline = time.monotonic() + 20
        while any(alive(p) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.1)
        left = [p for p in pids if alive(p)]
        for p in left:
            os.kill(p, signal.SIGKILL)
        assert not left, "worker processes outlived their killed parent"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)


# ------------------------------------------------------------------ fork safety

def test_fork_after_compiled_kernels_and_the_thread_pool():
    """The parent compiles and runs a kernel split over the thread pool, and keeps one
    running in another thread while the workers are forked; each worker runs the
    parent's compiled function, compiles a new one and runs eager ops, with two pool
    threads of its own. Without the pool's fork handler a worker inherits phantom pool
    threads (so its pool never starts) or a held lock (a hang, which the loader's
    timeout turns into a failure)."""
    old_threads = ember.get_num_threads()
    ember.set_num_threads(2)
    fn = ember.compile(_compiled_step)
    x = ember.linspace(-1.0, 1.0, 256 * 512).reshape(256, 512)
    ref = _compiled_step(x)
    assert _rel_err(fn(x), ref) < 1e-5
    stop = threading.Event()

    def busy():
        while not stop.is_set():
            fn(x)
    thread = threading.Thread(target=busy)
    thread.start()
    try:
        for dataset in (Compute(fn), Compute()):
            for _ in range(2):
                out = list(DataLoader(dataset, batch_size=None, num_workers=2,
                                      timeout=TIMEOUT, worker_init_fn=two_threads,
                                      multiprocessing_context="fork"))
                assert len(out) == 6
                for i, (err, total, started) in enumerate(out):
                    want = float(_compiled_step(x * (i + 1)).sum().item())
                    assert err < 1e-5 and total == pytest.approx(want)
                assert [s for _, _, s in out if s is not None] == [True, True]   # per worker
    finally:
        stop.set()
        thread.join()
        ember.set_num_threads(old_threads)


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_compiled_code_in_fresh_workers(method):
    ember.compile(_compiled_step)(ember.ones(256, 512))       # the parent compiled too
    out = list(DataLoader(Compute(), batch_size=None, num_workers=2, timeout=TIMEOUT,
                          worker_init_fn=two_threads, multiprocessing_context=method))
    x = ember.linspace(-1.0, 1.0, 256 * 512).reshape(256, 512)
    assert [s for _, _, s in out if s is not None] == [True, True]
    for i, (err, total, started) in enumerate(out):
        assert err < 1e-5
        assert total == pytest.approx(float(_compiled_step(x * (i + 1)).sum().item()))


def test_raw_fork_while_a_job_runs():
    """os.fork() from the main thread while another thread is inside a pool job (its
    locks held): the child must run parallel compiled kernels, not deadlock."""
    old_threads = ember.get_num_threads()
    ember.set_num_threads(2)
    fn = ember.compile(_compiled_step)
    x = ember.linspace(-1.0, 1.0, 512 * 512).reshape(512, 512)
    want = fn(x)
    stop = threading.Event()

    def busy():
        while not stop.is_set():
            fn(x)
    thread = threading.Thread(target=busy)
    thread.start()
    pids = []
    try:
        for _ in range(6):
            time.sleep(0.02)
            pid = os.fork()
            if pid == 0:                       # the child: no pytest, only os._exit
                code = 1
                try:
                    ok = float((fn(x) - want).abs().max()) == 0.0
                    g = ember.compile(lambda a: (a * 0.5).exp().sum(dim=0))
                    ok = ok and g(x).shape == (512,)
                    code = 0 if ok else 2
                finally:
                    os._exit(code)
            pids.append(pid)
    finally:
        stop.set()
        thread.join()
        ember.set_num_threads(old_threads)
    for pid in pids:
        deadline = time.monotonic() + 60
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                assert os.waitstatus_to_exitcode(status) == 0
                break
            if time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                pytest.fail("a forked child deadlocked")
            time.sleep(0.02)


# ------------------------------------------------------------------ shared memory itself

def _child_writes(conn):
    t = conn.recv()
    t += 1                                     # in place, in the shared memory
    conn.send((t.is_shared(), t.sum().item()))
    conn.close()


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_a_pickled_tensor_is_the_same_memory(method):
    ctx = multiprocessing.get_context(method)
    parent, child = ctx.Pipe()
    p = ctx.Process(target=_child_writes, args=(child,))
    p.start()
    try:
        t = _shared.empty((1000, 100), ember.float32)
        t.zero_()
        view = t[10:20, ::2]                   # a view: offset and strides travel
        parent.send(view)
        shared, total = parent.recv()
        assert shared and total == 500
        assert t.sum().item() == 500 and view.sum().item() == 500   # the child's write
    finally:
        p.join(timeout=TIMEOUT)
        if p.is_alive():
            p.kill()
    assert p.exitcode == 0


def test_reducer_sends_metadata_only():
    from multiprocessing.reduction import ForkingPickler
    t = ember.randn(512, 1024)                  # 2 MiB, not shared yet: copied once
    assert not t.is_shared()
    payload = bytes(ForkingPickler.dumps({"x": t, "again": t, "p": ember.nn.Parameter(t)}))
    assert len(payload) < 2048
    s = _shared.empty((4, 5), ember.int16)
    assert s.is_shared() and len(bytes(ForkingPickler.dumps(s.t()))) < 1024
    empty = ember.empty(0, 3)
    assert len(bytes(ForkingPickler.dumps(empty))) < 1024
    with pytest.raises(RuntimeError, match="non-leaf tensor which requires_grad"):
        ForkingPickler.dumps(ember.ones(2, requires_grad=True) * 2)
    import pickle                               # ordinary pickle still copies the data
    assert len(pickle.dumps(t)) > 2_000_000
