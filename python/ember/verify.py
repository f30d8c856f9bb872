"""python -m ember.verify: what Ember runs on, and whether its parts work here.

Prints versions (Python, NumPy, LLVM), the CPU and the vector features LLVM targets, the
BLAS NumPy uses and the kernel it runs, then runs each check and says plainly what
fails. Exit status 1 when a check fails.
"""
from __future__ import annotations

import sys
import traceback

import numpy as np


def _checks():
    import ember

    def eager():
        x = ember.tensor([[1.0, -2.0, 3.0]], requires_grad=True)
        w = ember.tensor([[0.5], [0.25], [-1.0]], requires_grad=True)
        y = (x @ w).relu().sum() + (x * x).sum()
        y.backward()
        xn, wn = np.array([[1.0, -2.0, 3.0]]), np.array([[0.5], [0.25], [-1.0]])
        z = (xn @ wn).item()
        want = max(z, 0.0) + float((xn * xn).sum())
        assert abs(y.item() - want) < 1e-5, f"forward {y.item()} != {want}"
        gx = 2 * xn + (wn.T if z > 0 else 0)
        assert np.allclose(x.grad.numpy(), gx), f"grad {x.grad.numpy()} != {gx}"
        return "forward and backward of (x @ w).relu().sum() + (x * x).sum() match NumPy"

    def op_table():
        from ember.ops import registry
        n = len(registry.ENTRIES)
        prims = len({e.name for e in registry.ENTRIES if e.prim})
        return f"{n} op overloads, {prims} prims"

    def llvm_target():
        from ember import _sysinfo
        info = _sysinfo.llvm()
        assert info["vector_bits"] >= 128
        return f"host CPU '{info['cpu']}', {info['vector_bits']}-bit vectors"

    def compiled():
        from ember.capture import counters
        from ember.compiler import backend
        ember.compiler.reset()
        prev = ember.compiler.config.strict, ember.compiler.config.graph_cache
        # strict: a fallback fails the check; no graph cache: the graphs are compiled
        # here (and described in backend.recent)
        ember.compiler.config.strict, ember.compiler.config.graph_cache = True, False
        try:
            g = np.random.default_rng(0)
            xs = [ember.tensor(g.standard_normal(s), requires_grad=True)
                  for s in ((16, 8), (8, 4), (4,))]
            ys = [t.detach().requires_grad_() for t in xs]

            def f(x, w, b):
                return (x @ w + b).relu().sum()

            backend.recent.clear()
            out = ember.compile(f, fullgraph=True)(*xs)
            out.backward()
            want = f(*ys)
            want.backward()
            assert abs(out.item() - want.item()) <= 1e-5 * max(1.0, abs(want.item())), \
                f"compiled forward {out.item()} != eager {want.item()}"
            for a, b in zip(xs, ys):
                assert np.allclose(a.grad.numpy(), b.grad.numpy(), rtol=1e-5, atol=1e-6), \
                    "compiled gradients differ from eager"
            assert not counters["llvm_fallback"], dict(counters["llvm_fallback"])
            kernels = sum(len(c.lowered.kernels) for c in backend.recent)
        finally:
            ember.compiler.config.strict, ember.compiler.config.graph_cache = prev
            ember.compiler.reset()
        return (f"ember.compile (PEP 523 capture, AOT autograd, LLVM) ran forward and "
                f"backward of (x @ w + b).relu().sum() with {kernels} fused kernels; both "
                f"match eager")

    return [("eager tensors and autograd", eager), ("op table", op_table),
            ("LLVM target", llvm_target), ("compiled forward and backward", compiled)]


def main() -> int:
    from ember import _sysinfo
    import ember
    llvm = _sysinfo.llvm()
    blas = _sysinfo.blas()
    print(f"Ember {ember.__version__}")
    print(f"Python  {_sysinfo.python()}")
    print(f"NumPy   {np.__version__}")
    print(f"LLVM    {llvm['version']} (built against {llvm['built_against']}), "
          f"target {llvm['triple']}")
    print(f"CPU     {_sysinfo.cpu_name()}")
    print(f"        LLVM host CPU '{llvm['cpu']}', vector features: "
          f"{' '.join(llvm['vector_features']) or 'none'} ({llvm['vector_bits']}-bit)")
    print(f"BLAS    {blas['name']} {blas['version']}, kernel {blas['kernel']}, "
          f"threads {blas['threads']}")
    for var in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"):
        if blas.get(var):
            print(f"        {var}={blas[var]}")
    print()
    failed = 0
    for name, check in _checks():
        try:
            detail = check()
            print(f"  ok      {name}: {detail}")
        except Exception as e:   # noqa: BLE001 - report every failure plainly
            failed += 1
            print(f"  FAILED  {name}: {type(e).__name__}: {e}")
            if "-v" in sys.argv:
                traceback.print_exc()
    print()
    print("all checks passed" if not failed else f"{failed} check(s) failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
