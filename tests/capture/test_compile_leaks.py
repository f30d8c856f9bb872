"""ember.compile does not leak: memory and the inputs' reference counts stay flat over
many cache hits, and compiled modules die once the caches are reset. Each test runs in
a fresh interpreter, so that nothing else allocates while tracemalloc measures."""
import os
import subprocess
import sys
import textwrap

import pytest

import ember
from ember.capture import _hook

pytestmark = pytest.mark.skipif(not _hook.available, reason="capture needs CPython 3.11")

PYTHONPATH = os.path.dirname(os.path.dirname(ember.__file__))

PRELUDE = """
import gc, sys, tracemalloc, weakref
import numpy as np
import ember
from ember.capture import counters

def T(*shape):
    return ember.from_numpy(np.ones(shape, dtype=np.float32))

def grown_per_10k(call, n=10_000, warmup=20_000, windows=3):
    # Warm up while tracing: blocks allocated before tracemalloc starts are invisible
    # to it, so steady churn that replaces them would look like growth. Eager kernels
    # (reductions, linear) still settle their small-object free lists for some 50k
    # calls, a few KiB in all; a leak grows in every window, so the least growth of a
    # few consecutive windows tells them apart.
    tracemalloc.start()
    for _ in range(warmup):
        call()
    gc.collect()
    grown = []
    for _ in range(windows):
        before = tracemalloc.get_traced_memory()[0]
        for _ in range(n):
            call()
        gc.collect()
        grown.append((tracemalloc.get_traced_memory()[0] - before) * 10_000 / n)
    tracemalloc.stop()
    return min(grown)
"""


def run_py(src, timeout=120):
    env = dict(os.environ, PYTHONPATH=PYTHONPATH + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, "-c", PRELUDE + textwrap.dedent(src)],
                       capture_output=True, text=True, timeout=timeout, env=env)
    assert r.returncode == 0, f"exit {r.returncode}\n{r.stdout}\n{r.stderr}"
    return r.stdout


def test_cache_hits_do_not_grow_memory_or_input_refcounts():
    out = run_py("""
        def f(x, w, k):
            return (x @ w).relu() * k + x.sum(-1, keepdim=True)
        class Net(ember.nn.Module):
            def __init__(self):
                super().__init__()
                self.seq = ember.nn.Sequential(ember.nn.Linear(4, 8), ember.nn.ReLU(),
                                               ember.nn.Linear(8, 4))
            def forward(self, x, extra):
                return self.seq(x) + extra["b"], [x.shape[0]]
        cf = ember.compile(f, backend="eager")
        net = Net()
        cnet = ember.compile(net, backend="eager")
        x, w, extra = T(2, 4), T(4, 4), {"b": T(4)}
        k = 2.5
        with ember.no_grad():
            results = {
                "function": grown_per_10k(lambda: cf(x, w, k)),
                "module": grown_per_10k(lambda: cnet(x, extra)),
            }
        refs = [sys.getrefcount(o) for o in (x, w, extra, extra["b"], net)]
        with ember.no_grad():
            for _ in range(10_000):
                cf(x, w, k)
                cnet(x, extra)
        assert [sys.getrefcount(o) for o in (x, w, extra, extra["b"], net)] == refs
        assert counters["stats"]["unique_graphs"] == 2, dict(counters)
        assert not counters["unsupported"]
        for name, grown in results.items():
            print(name, grown)
            assert grown < 1024, (name, grown)
        print("ok")
    """)
    assert out.endswith("ok\n")


def test_fallback_and_exception_paths_do_not_leak():
    run_py("""
        def falls_back(x):
            print(end="")
            return x + 1
        def raises(x, y):
            return x @ y                     # shapes do not match: raises in the graph
        cb = ember.compile(falls_back, backend="eager")
        cr = ember.compile(raises, backend="eager")
        x, y = T(2, 3), T(2, 3)
        def call_raising():
            try:
                cr(x, y)
            except RuntimeError:
                pass
        call_raising()
        refs = sys.getrefcount(x), sys.getrefcount(y)
        for name, call in (("fallback", lambda: cb(x)), ("exception", call_raising)):
            grown = grown_per_10k(call, n=5_000, warmup=5_000)
            assert grown < 1024, (name, grown)
        assert (sys.getrefcount(x), sys.getrefcount(y)) == refs
        print("ok")
    """)


def test_compiled_module_dies_after_reset():
    run_py("""
        class Net(ember.nn.Module):
            def __init__(self):
                super().__init__()
                self.lin = ember.nn.Linear(4, 4)
                self.layers = ember.nn.ModuleList([ember.nn.Linear(4, 4)])
            def forward(self, x):
                for layer in self.layers:
                    x = layer(x)
                return self.lin(x)
        W = T(4)
        def uses_module(net, x):
            return net(x) * W
        net = Net()
        refs = {name: weakref.ref(obj) for name, obj in
                [("net", net), ("lin", net.lin), ("weight", net.lin.weight),
                 ("layer", net.layers[0])]}
        compiled = ember.compile(net, backend="eager")
        x = T(2, 4)
        compiled(x)
        compiled(x)
        cf = ember.compile(uses_module, backend="eager")
        cf(net, x)
        assert counters["stats"]["unique_graphs"] == 2
        del net, compiled, cf
        ember.compiler.reset()
        gc.collect()
        alive = [name for name, r in refs.items() if r() is not None]
        assert alive == [], alive
        print("ok")
    """)


def test_recompiling_with_resets_does_not_grow_rss():
    """ember.compiler.reset() lets go of every graph: one compiled function called
    3,000 times with a reset after each call (a compile each time) keeps the RSS
    flat."""
    out = run_py("""
        import resource

        def rss_mb():
            with open("/proc/self/statm") as f:
                return int(f.read().split()[1]) * resource.getpagesize() / 2**20

        def f(x):
            return x + 1

        x = T(4)
        g = ember.compile(f, backend="eager")
        rss = {}
        for i in range(1, 3001):
            g(x)
            ember.compiler.reset()
            if i in (1000, 3000):
                gc.collect()
                rss[i] = rss_mb()
        print(rss[3000] - rss[1000])
    """, timeout=300)
    assert float(out.split()[-1]) < 5.0, out
