"""Memory-bound kernels and a GEMM, side by side in one run: Ember compiled (LLVM), Ember
eager, NumPy, PyTorch eager and torch.compile (Inductor), with the same inputs, dtype
(float32) and thread count on every side. Each figure is the median of >= 20 timed runs
after warm-up, the rows' runs taking turns (so a change in machine load affects every
side alike); the first (compiling) call is reported apart.

    python benchmarks/kernels.py [--threads 1] [--runs 25] [--quick] [--mode max-autotune]
                                 [--only gelu,softmax,chain,gemm,epilogue]

--mode M also times ember.compile(mode=M) beside the default mode, with a line per
kernel (max-autotune's target: not slower than the default).

Kernels ([llvm-2]):
  - layer_norm + gelu + residual, 4096 x 768: gelu(layer_norm(x)) + r
  - scaled softmax, 4096 x 1024: softmax(x * 0.125, -1)
  - ((a * b + 1).tanh() * a.sigmoid()).relu() over 4M floats
  - GEMM 1024 x 256 @ 256 x 1024 (the 6-layer, 256-wide GPT's MLP product)
  - linear + bias + gelu, 1024 x 256 by a 1024 x 256 weight: gelu(F.linear(x, w, b)), a
    GEMM with an epilogue (compiled, the bias and gelu run on each block of the
    product's rows right after its BLAS call)

GB/s counts the bytes a kernel must move (each input read once, the output written
once); the fraction is of a STREAM triad a = b + 3 * c of the same footprint (12 bytes
per element), compiled by Ember's JIT and measured in the same run, in the same turns.

The JIT's vector width is printed (16 float32 lanes with AVX-512, 8 with AVX2); set
EMBER_LLVM_FEATURES to the AVX2 features (python -m ember.verify lists them) to time the
narrower path on an AVX-512 host. PyTorch is then held to AVX2 too, as on an AVX2 host
(ATEN_CPU_CAPABILITY=avx2, for ATen and Inductor's C++ alike, with Inductor's cache in a
folder of its own: its entries do not record the ISA, and an AVX-512 process loading an
AVX2 entry, or the reverse, gave wrong results); EMBER_BENCH_TORCH_ISA=native leaves
PyTorch at the host's ISA instead. The header says which.

Targets, at the given --threads: a memory-bound kernel at least 1.3x torch.compile's
speed or at 85% or more of the triad's bandwidth; the GEMM at least 0.9x the best BLAS
on the machine (NumPy's OpenBLAS, PyTorch's); the GEMM with an epilogue at least as fast
as torch.compile. Each is printed as met or MISSED. The BLAS
line names the kernel OpenBLAS runs (OPENBLAS_CORETYPE forces one; `make bench` unsets
it and OPENBLAS_L2_SIZE for its own commands).
"""
import _harness

args = _harness.setup(__doc__)

import math  # noqa: E402
import os  # noqa: E402


def narrow_torch_isa():
    """With Ember forced below AVX-512 (EMBER_LLVM_FEATURES), PyTorch held to AVX2 as
    on an AVX2 host: set before torch is imported. Returns the header's line."""
    forced = os.environ.get("EMBER_LLVM_FEATURES")
    if forced is None or "+avx512f" in forced:
        return None
    if os.environ.get("EMBER_BENCH_TORCH_ISA") == "native":
        return "# PyTorch at the host's ISA (EMBER_BENCH_TORCH_ISA=native)"
    if "ATEN_CPU_CAPABILITY" not in os.environ:
        os.environ["ATEN_CPU_CAPABILITY"] = "avx2"
        import getpass
        import tempfile
        cache = os.environ.get("TORCHINDUCTOR_CACHE_DIR") or os.path.join(
            tempfile.gettempdir(), f"torchinductor_{getpass.getuser()}")
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = cache.rstrip(os.sep) + "_avx2"
    return (f"# PyTorch held to ATEN_CPU_CAPABILITY={os.environ['ATEN_CPU_CAPABILITY']} "
            f"like Ember (Inductor cache {os.environ.get('TORCHINDUCTOR_CACHE_DIR', '-')})")


TORCH_ISA = narrow_torch_isa()

import numpy as np  # noqa: E402

import ember  # noqa: E402

torch = None if args.no_torch else _harness.try_torch()

SQRT1_2 = np.float32(1 / math.sqrt(2))


# ------------------------------------------------------------------ the kernels, per library


def ln_gelu_residual(lib):
    F = lib.nn.functional

    def f(x, r, w, b):
        return F.gelu(F.layer_norm(x, (x.shape[-1],), w, b)) + r
    return f


def ln_gelu_residual_np(x, r, w, b):
    mean = x.mean(-1, keepdims=True)
    xc = x - mean
    var = (xc * xc).mean(-1, keepdims=True)
    y = xc / np.sqrt(var + np.float32(1e-5)) * w + b
    return np.float32(0.5) * y * (1 + _erf_np(y * SQRT1_2)) + r


def _erf_np(x):
    # Abramowitz-Stegun 7.1.26 (|error| < 1.5e-7): NumPy has no erf of its own
    s = np.sign(x)
    a = np.abs(x)
    t = 1 / (1 + np.float32(0.3275911) * a)
    p = t * (np.float32(0.254829592) + t * (np.float32(-0.284496736) + t * (
        np.float32(1.421413741) + t * (np.float32(-1.453152027) + t * np.float32(1.061405429)))))
    return s * (1 - p * np.exp(-a * a))


def scaled_softmax(lib):
    def f(x):
        return (x * 0.125).softmax(-1)
    return f


def scaled_softmax_np(x):
    y = x * np.float32(0.125)
    e = np.exp(y - y.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def chain(lib):
    def f(a, b):
        return ((a * b + 1).tanh() * a.sigmoid()).relu()
    return f


def chain_np(a, b):
    return np.maximum(np.tanh(a * b + np.float32(1)) / (1 + np.exp(-a)), np.float32(0))


def gemm(lib):
    def f(a, b):
        return a @ b
    return f


def gemm_np(a, b):
    return a @ b


def linear_gelu(lib):
    F = lib.nn.functional

    def f(x, w, b):
        return F.gelu(F.linear(x, w, b))
    return f


def linear_gelu_np(x, w, b):
    y = x @ w.T + b
    return 0.5 * y * (1 + _erf_np(y * SQRT1_2))


def cases(quick):
    g = np.random.default_rng(0)

    def randn(*shape, scale=1.0):
        return (g.standard_normal(shape) * scale).astype(np.float32)
    rows, d = (256, 768) if quick else (4096, 768)
    srows, sd = (256, 1024) if quick else (4096, 1024)
    n = (1 << 16) if quick else (1 << 22)
    m, k, nn = (128, 256, 256) if quick else (1024, 256, 1024)
    all_cases = [
        (f"layer_norm + gelu + residual {rows}x{d}", ln_gelu_residual, ln_gelu_residual_np,
         [randn(rows, d), randn(rows, d), randn(d, scale=0.1) + 1, randn(d, scale=0.1)],
         3 * rows * d * 4, "memory"),
        (f"scaled softmax {srows}x{sd}", scaled_softmax, scaled_softmax_np,
         [randn(srows, sd)], 2 * srows * sd * 4, "memory"),
        (f"((a*b+1).tanh() * a.sigmoid()).relu() {n >> 20 or n}"
         f"{'M' if n >= 1 << 20 else ''} floats", chain, chain_np,
         [randn(n), randn(n, scale=0.5)], 3 * n * 4, "memory"),
        (f"GEMM {m}x{k} @ {k}x{nn}", gemm, gemm_np, [randn(m, k), randn(k, nn)],
         2 * m * k * nn, "gemm"),
        (f"linear + bias + gelu {m}x{k} @ ({nn}x{k})^T", linear_gelu, linear_gelu_np,
         [randn(m, k), randn(nn, k, scale=k ** -0.5), randn(nn, scale=0.1)],
         2 * m * k * nn, "epilogue"),
    ]
    # --only: the cases whose key (gelu, softmax, chain, gemm, epilogue) is listed
    keys = ["gelu", "softmax", "chain", "gemm", "epilogue"]
    only = [w.strip() for w in args.only.split(",") if w.strip()]
    return [c for key, c in zip(keys, all_cases) if not only or key in only]


def cpu_medians(rows, runs):
    """Median CPU seconds (all threads of the process) per call of each (name, fn) row,
    in turns as interleaved_medians: on a loaded machine, where wall-clock time measures
    the other processes too, CPU time is what a kernel costs (a side waiting for a core
    spends none)."""
    import statistics
    import time
    samples = {name: [] for name, _ in rows}
    for _ in range(runs):
        for name, fn in rows:
            t0 = time.process_time()
            fn()
            samples[name].append(time.process_time() - t0)
    return {name: statistics.median(v) for name, v in samples.items()}


def mode_line(title, moded, base, cpu=None):
    """max-autotune's target: never slower than the default mode (5% for noise). cpu:
    the CPU-time ratio too (default's CPU time / the mode's), which a loaded machine
    disturbs less than wall time (the verdict stays the wall time's)."""
    ratio = base / moded
    ok = ratio >= 0.95 if args.mode == "max-autotune" else True
    return (f"{title}: mode={args.mode} at {ratio:.2f}x the default mode's speed"
            + (" (target: not slower)" if args.mode == "max-autotune" else "")
            + f": {_harness.verdict(ok)}"
            + ("" if cpu is None else f" [CPU time: {cpu:.2f}x]"))


def vector_width():
    """The float32 lanes of the JIT's target (EMBER_LLVM_FEATURES overrides the host's)."""
    feats = ember._C._jit_target()["features"]
    lanes = 16 if "+avx512f" in feats else 8 if "+avx2" in feats else 4
    forced = os.environ.get("EMBER_LLVM_FEATURES")
    return f"{lanes} float32 lanes" + (" (EMBER_LLVM_FEATURES forced)" if forced else "")


def main():
    _harness.print_env(args.threads, torch is not None)
    print(f"# Ember JIT: {vector_width()}")
    if TORCH_ISA is not None and torch is not None:
        print(TORCH_ISA)
    ember.set_num_threads(args.threads)
    runs = args.runs if not args.quick else 3
    print(f"# median of {runs} interleaved runs; load average at start "
          f"{_harness.load_average()}\n")
    targets = []
    for title, make, ref_np, data, work, kind in cases(args.quick):
        e_in = [ember.from_numpy(a.copy()) for a in data]
        ef = make(ember)
        ec = ember.compile(ef)
        compile_s = {"ember.compile": _harness.first_call(lambda: ec(*e_in))}
        rows = [("ember.compile", lambda: ec(*e_in)), ("ember eager", lambda: ef(*e_in)),
                ("numpy", lambda: ref_np(*data))]
        moded = f"mode={args.mode}"
        if args.mode != "default":
            em = ember.compile(ef, mode=args.mode)
            compile_s[moded] = _harness.first_call(lambda: em(*e_in))
            rows.insert(1, (moded, lambda: em(*e_in)))
        expect = ref_np(*[a.astype(np.float64) for a in data])
        tol = dict(rtol=1e-3, atol=1e-3) if kind != "memory" else dict(rtol=1e-4, atol=2e-5)
        assert np.allclose(ec(*e_in).numpy(), expect, **tol), title
        assert np.allclose(ef(*e_in).numpy(), expect, **tol), title
        if args.mode != "default":
            assert np.allclose(em(*e_in).numpy(), expect, **tol), title
        if torch is not None:
            t_in = [torch.from_numpy(a.copy()) for a in data]
            tf = make(torch)
            tc = torch.compile(tf)
            compile_s["torch.compile"] = _harness.first_call(lambda: tc(*t_in))
            assert np.allclose(tc(*t_in).numpy(), expect, **tol), title
            rows += [("torch eager", lambda: tf(*t_in)), ("torch.compile", lambda: tc(*t_in))]
        if kind == "memory":
            tri = _harness.triad(max(1, work // 12))
            rows.append(("triad", tri))
        load = _harness.load_average()
        times = _harness.interleaved_medians(rows, runs)
        base = times["ember.compile"]
        unit = "GB/s" if kind == "memory" else "GFLOP/s"
        print(f"{title}  (load {load})")
        print(f"  {'':<16}{'ms':>10}{unit:>10}{'vs ember':>10}")
        for name, _ in rows:
            amount = 12 * max(1, work // 12) if name == "triad" else work
            print(f"  {name:<16}{times[name] * 1e3:10.3f}{amount / times[name] / 1e9:10.1f}"
                  f"{times[name] / base:9.2f}x")
        print("  first call: " + ", ".join(f"{k} {v * 1e3:.0f} ms"
                                            for k, v in compile_s.items()))
        if args.mode != "default":
            mcpu = cpu_medians([r for r in rows if r[0] in ("ember.compile", moded)], runs)
            line = mode_line(title, times[moded], base, mcpu["ember.compile"] / mcpu[moded])
            print("  " + line)
            targets.append(line)
        cpu = None
        if kind == "memory" and "torch.compile" in times:
            cpu = cpu_medians([r for r in rows if r[0] in ("ember.compile", "torch.compile")],
                              runs)
            print(f"  CPU time per call: ember.compile {cpu['ember.compile'] * 1e3:.3f} ms, "
                  f"torch.compile {cpu['torch.compile'] * 1e3:.3f} ms "
                  f"({cpu['torch.compile'] / cpu['ember.compile']:.2f}x)")
        if kind == "memory":
            frac = (work / base) / (12 * max(1, work // 12) / times["triad"])
            speedup = times["torch.compile"] / base if "torch.compile" in times else None
            ok = frac >= 0.85 or (speedup is not None and speedup >= 1.3)
            sp = "-" if speedup is None else f"{speedup:.2f}x"
            line = (f"{title}: {work / base / 1e9:.1f} GB/s, {sp} torch.compile's speed, "
                    f"{frac * 100:.0f}% of the triad's {12 * max(1, work // 12) / times['triad'] / 1e9:.1f} GB/s "
                    f"(target: 1.3x or 85%): {_harness.verdict(ok)}"
                    + ("" if cpu is None else
                       f" [CPU time: {cpu['torch.compile'] / cpu['ember.compile']:.2f}x]"))
        elif kind == "epilogue":
            speedup = times["torch.compile"] / base if "torch.compile" in times else None
            sp = "-" if speedup is None else f"{speedup:.2f}x"
            line = (f"{title}: {sp} torch.compile's speed (target: 1.0x or more): "
                    f"{_harness.verdict(speedup is not None and speedup >= 1.0)}")
        else:
            blas = {k: times[k] for k in ("numpy", "torch eager") if k in times}
            best = min(blas, key=blas.get)
            ratio = blas[best] / base
            line = (f"{title}: {ratio:.2f}x the best BLAS ({best}) "
                    f"(target: 0.9x or more): {_harness.verdict(ratio >= 0.9)}")
        print("  " + line + "\n")
        targets.append(line)
    print(f"# targets at {args.threads} thread(s):")
    for line in targets:
        print("  " + line)


if __name__ == "__main__":
    main()
