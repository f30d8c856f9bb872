"""python -m ember.demo: a tour of what Ember does today.

The example every stage of Ember is built around:

    @ember.compile
    def f(x, w, b):
        return (x @ w + b).relu().sum()

Until the compile path exists the demo runs it eagerly: tensors, autograd against
hand-derived gradients, and the op table behind every call.
"""
from __future__ import annotations

import time

import numpy as np

import ember


def f(x, w, b):
    return (x @ w + b).relu().sum()


def section(title):
    print(f"\n== {title} " + "=" * max(0, 70 - len(title)))


def main():
    ember.manual_seed(0)
    section("eager tensors")
    x = ember.randn(4, 3)
    w = ember.randn(3, 2, requires_grad=True)
    b = ember.zeros(2, requires_grad=True)
    print("x =", x)
    print("x.t().stride() =", x.t().stride(), " (a view: no copy)")
    print("int64 tensor + 2.5 ->", (ember.tensor([1, 2]) + 2.5).dtype,
          " (PyTorch's promotion, not NumPy's)")

    section("autograd: f(x, w, b) = (x @ w + b).relu().sum()")
    y = f(x, w, b)
    y.backward()
    print("f =", y)
    xn, wn, bn = x.numpy(), w.detach().numpy(), b.detach().numpy()
    mask = (xn @ wn + bn) > 0
    print("df/dw =", w.grad)
    print("df/dw matches x.T @ mask:", np.allclose(w.grad.numpy(), xn.T @ mask))
    print("df/db matches mask.sum(0):", np.allclose(b.grad.numpy(), mask.sum(0)))
    print("grad_fn chain:", y.grad_fn.name(), "<-",
          y.grad_fn.next_functions[0][0].name())

    section("the op table")
    from ember.ops import registry
    entries = registry.ENTRIES
    prims = sorted({e.name for e in entries if e.prim})
    print(f"{len({e.name for e in entries})} operators ({len(entries)} overloads), "
          f"{len(prims)} prims:")
    print("  " + ", ".join(prims))
    relu = ember.relu.entry
    print(f"relu: schema {relu.schema.text!r}, kernel {relu.kernel!r}, "
          f"decomposes into prims: {relu.decompose is not None}")

    section("speed of one eager call (16 elements)")
    t = ember.ones(16)
    n = 20000
    t0 = time.perf_counter()
    for _ in range(n):
        t * 2 + 1
    dt = (time.perf_counter() - t0) / n
    print(f"t * 2 + 1: {dt * 1e6:.2f} us per call (benchmarks/eager_overhead.py compares "
          "with NumPy and PyTorch)")


if __name__ == "__main__":
    main()
