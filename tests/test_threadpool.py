"""The runtime's thread pool (csrc/runtime/threadpool.c): kernels run in chunks of their
outer dim, signal handlers run between chunks (Ctrl-C stops a long compiled call with
KeyboardInterrupt and the pool serves the next call), chunk bounds do not depend on the
thread count (results are identical run to run), and indices are 64-bit."""
import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

import ember
from ember.compiler import fusion
from ember.compiler.plan import KernelStep

HERE = os.path.dirname(os.path.abspath(__file__))


def _child(source):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [os.path.dirname(os.path.dirname(ember.__file__)), env.get("PYTHONPATH", "")])
    return subprocess.Popen([sys.executable, "-u", "-c", textwrap.dedent(source)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_for(proc, word, timeout=300):
    deadline = time.monotonic() + timeout
    lines = []
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line)
        if line.startswith(word):
            return line.split()[1:]
    proc.kill()
    raise AssertionError(f"no {word!r} from the child: {''.join(lines)}"
                         f"{proc.stderr.read()[-3000:]}")


LONG_CALL = """
    import time, numpy as np, ember
    ember.set_num_threads({threads})

    def f(x):
        for _ in range(48):
            x = (x.sin() * 0.9).exp()
        return x

    cf = ember.compile(f, backend="llvm")
    x = ember.randn({n})
    cf(x)                                # compiles (and runs once)
    t0 = time.monotonic()
    cf(x)                                # a warm call: what the interrupted one takes
    took = time.monotonic() - t0
    print("ready", took, flush=True)
    t0 = time.monotonic()
    try:
        cf(x)
        print("finished", time.monotonic() - t0, flush=True)
    except KeyboardInterrupt:
        print("interrupted", time.monotonic() - t0, flush=True)
    got = cf(x).numpy()                  # the pool serves the next call
    np.testing.assert_allclose(got[:4096], f(x[:4096]).numpy(), rtol=1e-5)
    print("recovered 0", flush=True)
"""


@pytest.mark.parametrize("threads", [1, 2])
def test_ctrl_c_stops_a_long_compiled_call_and_the_pool_recovers(threads):
    proc = _child(LONG_CALL.format(threads=threads, n=1 << 23))
    try:
        (took,) = _wait_for(proc, "ready")
        took = float(took)
        time.sleep(min(0.3, took / 4))
        proc.send_signal(signal.SIGINT)
        line = proc.stdout.readline().split()
        assert line and line[0] == "interrupted", (line, proc.stderr.read()[-3000:])
        # stopped within a few chunks, well before the call would have ended
        assert float(line[1]) < 0.3 + took / 2, (line, took)
        _wait_for(proc, "recovered")
        assert proc.wait(timeout=300) == 0, proc.stderr.read()[-3000:]
    finally:
        proc.kill()


LONG_COMPILE = """
    import numpy as np, ember
    from ember.capture import counters

    def f(x):          # long enough to compile that the interrupt comes during it
        for k in range(1500):
            x = x * 1.0001 + (x.sin() if k % 2 else x.cos()) * 0.001
        return x

    cf = ember.compile(f, backend="llvm")
    x = ember.randn(64)
    print("ready 0", flush=True)
    try:
        cf(x)
        print("finished 0", flush=True)
    except KeyboardInterrupt:
        print("interrupted 0", flush=True)
    np.testing.assert_allclose(cf(x).numpy(), f(x).numpy(), rtol=1e-5)
    assert not counters["llvm_fallback"], dict(counters["llvm_fallback"])
    print("recovered 0", flush=True)
"""


def test_ctrl_c_during_a_long_compile_reaches_the_caller():
    proc = _child(LONG_COMPILE)
    try:
        _wait_for(proc, "ready")
        time.sleep(0.5)
        proc.send_signal(signal.SIGINT)
        line = proc.stdout.readline().split()
        assert line and line[0] == "interrupted", (line, proc.stderr.read()[-3000:])
        _wait_for(proc, "recovered")
        assert proc.wait(timeout=300) == 0, proc.stderr.read()[-3000:]
    finally:
        proc.kill()


def test_kernels_run_in_chunks_of_bounded_size():
    x = ember.randn(1 << 20)
    cf = ember.compile(lambda t: t.exp() * 2, backend="llvm")
    cf(x)
    from ember.compiler import backend
    (step,) = [s for s in backend.recent[-1].lowered.steps if isinstance(s, KernelStep)]
    assert step.parallel and step.chunk == fusion.CHUNK_POINTS, step.chunk
    assert step.outer // step.chunk == 16


@pytest.mark.parametrize("n", [1 << 16, 3 << 15, 1 << 17])
def test_small_parallel_kernels_have_chunks_for_every_thread(n):
    """A parallel kernel of one to a few CHUNK_POINTS gets MIN_CHUNKS chunks, so two
    threads share it evenly (with whole CHUNK_POINTS chunks 1.5 of them split 2:1, one
    not at all); results stay equal across thread counts."""
    x = ember.randn(n)
    f = lambda t: t.exp() * t.tanh()          # noqa: E731
    cf = ember.compile(f, backend="llvm", dynamic=False)   # the chunks of one size
    before = ember.get_num_threads()
    try:
        got = []
        for threads in (1, 2):
            ember.set_num_threads(threads)
            got.append(cf(x).numpy().copy())
    finally:
        ember.set_num_threads(before)
    from ember.compiler import backend
    (step,) = [s for s in backend.recent[-1].lowered.steps if isinstance(s, KernelStep)]
    assert step.parallel and -(-step.outer // step.chunk) >= fusion.MIN_CHUNKS, step.chunk
    assert step.chunk >= fusion.CHUNK_MIN_POINTS
    assert np.array_equal(got[0].view(np.uint8), got[1].view(np.uint8))


def test_results_are_identical_run_to_run_and_across_thread_counts():
    """Chunk bounds are fixed multiples: each element takes the same (vector or scalar)
    path whatever the thread count and timing, so results agree bit for bit."""
    before = ember.get_num_threads()
    x = ember.randn(3 << 17, dtype=ember.float32) * 3
    m = ember.randn(700, 900, dtype=ember.float64)

    def f(a, b):
        return (a.exp() * a.tanh()).sin() + a.sigmoid(), (b.exp() - b.sin()).sum(dim=1)
    outs = []
    try:
        for threads in (2, 2, 1, 2):
            ember.set_num_threads(threads)
            cf = ember.compile(f, backend="llvm")
            for _ in range(2):
                outs.append([o.numpy().copy() for o in cf(x, m)])
    finally:
        ember.set_num_threads(before)
    for got in outs[1:]:
        for a, b in zip(outs[0], got):
            assert np.array_equal(a.view(np.uint8), b.view(np.uint8))


def _available_gb():
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) / (1 << 20)
    except OSError:
        pass
    return 0.0


BIG_GB = 7.0      # two 2 GiB tensors, an eager check in slices, and room to spare


@pytest.mark.bigmem
@pytest.mark.skipif(_available_gb() < BIG_GB,
                    reason=f"needs {BIG_GB} GB of available memory (has "
                           f"{_available_gb():.1f})")
def test_elementwise_kernel_over_more_than_2_to_the_31_elements():
    """Indices are 64-bit: an elementwise kernel over 2**31 + 16 uint8 elements writes
    every element, the last ones included (a 32-bit index would wrap to negative)."""
    n = (1 << 31) + 16
    a = np.empty(n, dtype=np.uint8)
    a[:] = 7
    a[-16:] = np.arange(16, dtype=np.uint8)
    a[(1 << 31) - 3:(1 << 31) + 3] = 200
    x = ember.from_numpy(a)
    cf = ember.compile(lambda t: t * 3 + 1, backend="llvm")
    out = cf(x).numpy()
    del x
    assert out.shape == (n,)
    step = 1 << 26
    for lo in range(0, n, step):
        want = a[lo:lo + step] * np.uint8(3) + np.uint8(1)
        assert np.array_equal(out[lo:lo + step], want), lo


def test_calls_from_several_threads_at_once():
    """Two Python threads run compiled calls at once (one gets the pool, the other runs
    its chunks alone; only the main thread takes the GIL back between chunks): both
    results equal eager's."""
    import threading
    cf = ember.compile(lambda t: (t.sin() * 2).exp().sum(dim=1), backend="llvm")
    xs = [ember.randn(512, 1024) for _ in range(2)]
    want = [(x.sin() * 2).exp().sum(dim=1).numpy() for x in xs]
    cf(xs[0])
    got = [None, None]

    def work(k):
        for _ in range(20):
            got[k] = cf(xs[k]).numpy()
    t = threading.Thread(target=work, args=(1,))
    t.start()
    work(0)
    t.join()
    for w, g in zip(want, got):
        np.testing.assert_allclose(g, w, rtol=1e-5)


@pytest.mark.parametrize("case", ["folded", "batch x heads", "transposed", "broadcast",
                                  "small"])
def test_compiled_matmuls_on_the_pool_agree_with_numpy(case):
    """On two threads a large product of a compiled graph runs in blocks of rows (or of
    matrices) on Ember's pool, one single-threaded BLAS call each, BLAS's own threads
    set back afterwards: the results agree with NumPy, are identical run to run, and a
    product too small to split is one call."""
    from ember import _C, _sysinfo
    g = np.random.default_rng(7)
    shapes = {"folded": ((8, 128, 128), (128, 512)),
              "batch x heads": ((8, 4, 128, 32), (8, 4, 32, 128)),
              "transposed": ((128, 1000), (128, 96)),
              "broadcast": ((3, 333, 64), (64, 200)),
              "small": ((16, 16), (16, 16))}[case]
    a, b = (g.standard_normal(s).astype(np.float32) for s in shapes)
    fn = (lambda x, y: x.t() @ y) if case == "transposed" else (lambda x, y: x @ y)
    want = (a.T if case == "transposed" else a).astype(np.float64) @ b
    before = ember.get_num_threads()
    try:
        ember.set_num_threads(2)
        cf = ember.compile(fn, backend="llvm")
        calls = _C._blas_pool_calls()
        outs = [cf(ember.from_numpy(a), ember.from_numpy(b)).numpy() for _ in range(3)]
        split = _C._blas_pool_calls() - calls
        assert _sysinfo.blas()["threads"] in (2, None)
    finally:
        ember.set_num_threads(before)
    if _C._blas_info() is not None:
        assert split == (0 if case == "small" else 3)
    np.testing.assert_allclose(outs[0], want, rtol=1e-4, atol=1e-4)
    assert all(np.array_equal(outs[0], o) for o in outs[1:])
