"""python -m ember.demo: the example every stage of Ember is built around.

    @ember.compile
    def f(x, w, b):
        return (x @ w + b).relu().sum()

The demo compiles it and shows each stage: the FX graph the frame hook captured, the
forward and backward graphs AOT autograd derived over prims, the fused kernels the
LLVM backend generated, the time of a compiled call against eager, and the gradients.
"""
from __future__ import annotations

import statistics
import time

import numpy as np

import ember
from ember.compiler import backend


def f(x, w, b):
    return (x @ w + b).relu().sum()


def section(title):
    print(f"\n== {title} " + "=" * max(0, 74 - len(title)))


def median_us(fn, *args, runs=25, inner=200):
    for _ in range(inner):
        fn(*args)
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        for _ in range(inner):
            fn(*args)
        times.append((time.perf_counter() - t0) / inner)
    return statistics.median(times) * 1e6


def main():
    ember.manual_seed(0)
    x = ember.randn(64, 32, requires_grad=True)
    w = ember.randn(32, 16, requires_grad=True)
    b = ember.randn(16, requires_grad=True)

    section("eager")
    y = f(x, w, b)
    y.backward()
    print("f(x, w, b) =", y)
    eager_grads = [t.grad.numpy().copy() for t in (x, w, b)]
    for t in (x, w, b):
        t.grad = None

    section("ember.compile(f): the graph the frame hook captured")
    backend.recent.clear()
    ember.compiler.config.graph_cache = False     # compiled here, to show its kernels
    cf = ember.compile(f)
    t0 = time.perf_counter()
    out = cf(x, w, b)
    compile_ms = (time.perf_counter() - t0) * 1e3
    ctx = cf._ember_compile_context
    print(ctx.graphs[0].code)

    section("the kernels (loop IR) of the forward and backward graphs")
    for compiled in backend.recent:
        print(compiled.describe())

    section("gradients")
    out.backward()
    print("compiled f =", out)
    for name, t, want in zip("xwb", (x, w, b), eager_grads):
        same = np.allclose(t.grad.numpy(), want, rtol=1e-5, atol=1e-6)
        print(f"d f/d{name}: shape {tuple(t.grad.shape)}, equal to eager's: {same}")

    section("time per call")
    xs = [t.detach() for t in (x, w, b)]
    e = median_us(f, *xs)
    c = median_us(cf, *xs)
    print(f"first call (capture + AOT + LLVM compile): {compile_ms:.1f} ms")
    print(f"eager    {e:8.2f} us")
    print(f"compiled {c:8.2f} us   ({e / c:.2f}x faster; inference, no grad needed)")
    xg = [t.detach().requires_grad_() for t in (x, w, b)]
    eg = median_us(lambda *a: f(*a).backward(), *xg, inner=50)
    cg = median_us(lambda *a: cf(*a).backward(), *xg, inner=50)
    print(f"forward + backward: eager {eg:.2f} us, compiled {cg:.2f} us ({eg / cg:.2f}x)")
    print("benchmarks/ compares with NumPy, PyTorch eager and torch.compile side by side.")

    section("the op table behind every call")
    from ember.ops import registry
    entries = registry.ENTRIES
    prims = sorted({en.name for en in entries if en.prim})
    print(f"{len({en.name for en in entries})} operators ({len(entries)} overloads), "
          f"{len(prims)} prims: " + ", ".join(prims))


if __name__ == "__main__":
    main()
