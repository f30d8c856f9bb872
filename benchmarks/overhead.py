"""Cache-hit cost of ember.compile vs torch.compile, side by side in one run.

The function is `t * 2 + 1` on a 16-element float32 tensor. Each row is the median
time per call over >= 20 timed runs (warm-up excluded; the rows' runs take turns), with
the same thread count for every library:

    ember eager        f(t)
    ember.compile      ember.compile(f, backend="eager")(t): wrapper, frame hook,
                       guards, input fetch, the graph's generated forward, output
    torch eager        f(t) on a torch tensor
    torch.compile      torch.compile(f, backend="eager")(t)

"added" is compiled minus eager of the same library. Compile time (the first call)
is printed apart.

Then the LLVM backend (the default), on every side with the same thread count:

  - a cache-hit call of the compiled example (x @ w + b).relu().sum() on small inputs,
    Ember compiled vs Ember eager, PyTorch eager and torch.compile (Inductor);
  - a 4M-element elementwise chain ((a * b + 1).exp() * 0.5 - a).relu(), for Ember
    compiled, Ember eager, NumPy, PyTorch eager and torch.compile, in GB/s counting
    12 bytes per element (two reads, one write: STREAM's convention);
  - a STREAM triad a = b + 3 * c compiled by Ember's JIT and run in place, at the
    chain's size and at 32M elements (far beyond the L2), as the bandwidth ceiling;
  - modes: a cache-hit call of a 10-op function (64 float32 elements, a scalar result),
    with inputs that need no gradient and with one that does, compiled with the default
    mode and with mode="reduce-overhead".

    python benchmarks/overhead.py [--threads 1] [--runs 25]

Aims: ember.compile (backend "eager") adds under 2 microseconds per call over ember
eager ([capture-1]); the compiled example's cache hit is under 3 microseconds, and the
chain runs at 70% or more of the measured triad bandwidth ([llvm-1]); reduce-overhead
cuts the 10-op graph's cache-hit time by at least 30% ([llvm-2] item 7).
"""
import _harness

args = _harness.setup(__doc__)

import statistics  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

import ember  # noqa: E402

torch = _harness.try_torch()


def f(t):
    return t * 2 + 1


def first_call_seconds(fn, x):
    t0 = time.perf_counter()
    fn(x)
    return time.perf_counter() - t0


def interleaved_medians(rows, runs, inner):
    """Median seconds per call of each row. Runs take turns (row 1, row 2, ..., row 1,
    ...), so that a change in machine load affects every row alike: the figures are
    differences of a few percent of the call."""
    for _, fn in rows:                               # warm-up
        _harness.median_time(fn, 3, inner, warmup=0)
    samples = {name: [] for name, _ in rows}
    for _ in range(runs):
        for name, fn in rows:
            samples[name].append(_harness.median_time(fn, 1, inner, warmup=0))
    return {name: statistics.median(s) for name, s in samples.items()}


def main():
    _harness.print_env(args.threads)
    ember.set_num_threads(args.threads)
    runs = args.runs if not args.quick else 5
    data = np.random.default_rng(0).standard_normal(16).astype(np.float32)

    ex = ember.from_numpy(data.copy())
    ember_compiled = ember.compile(f, backend="eager")
    compile_times = {"ember.compile": first_call_seconds(ember_compiled, ex)}
    rows = [("ember eager", lambda: f(ex)),
            ("ember.compile", lambda: ember_compiled(ex))]
    if torch is not None:
        tx = torch.from_numpy(data.copy())
        torch_compiled = torch.compile(f, backend="eager")
        compile_times["torch.compile"] = first_call_seconds(torch_compiled, tx)
        rows += [("torch eager", lambda: f(tx)),
                 ("torch.compile", lambda: torch_compiled(tx))]
        assert np.allclose(torch_compiled(tx).numpy(), ember_compiled(ex).numpy())
    assert np.allclose(ember_compiled(ex).numpy(), f(ex).numpy())

    inner = _harness.inner_for(rows[0][1], 0.002)
    times = interleaved_medians(rows, runs, inner)

    print(f"# t * 2 + 1 on 16 float32 elements, backend='eager'; median of {runs} runs "
          f"of {inner} calls, microseconds per call\n")
    print(f"{'':<16}{'per call':>10}{'added':>10}")
    for name, _ in rows:
        eager = times[name.split(".")[0].split()[0] + " eager"]
        added = "" if name.endswith("eager") else f"{(times[name] - eager) * 1e6:10.2f}"
        print(f"{name:<16}{_harness.fmt_us(times[name])}{added:>10}")
    print()
    for name, seconds in compile_times.items():
        print(f"compile time (first call), {name}: {seconds * 1e3:.1f} ms")
    added = (times["ember.compile"] - times["ember eager"]) * 1e6
    verdict = "met" if added < 2.0 else "NOT met"
    print(f"\nember.compile adds {added:.2f} us per call over ember eager "
          f"(aim: under 2 us): {verdict}")
    example_section(runs)
    bandwidth_section(runs)
    modes_section(runs)


# ------------------------------------------------------------------ the LLVM backend


def example(x, w, b):
    return (x @ w + b).relu().sum()


def chain(a, b):
    return ((a * b + 1.0).exp() * 0.5 - a).relu()


def chain_numpy(a, b):
    return np.maximum(np.exp(a * b + np.float32(1.0)) * np.float32(0.5) - a, np.float32(0))


def example_section(runs):
    g = np.random.default_rng(1)
    data = [g.standard_normal(s).astype(np.float32) for s in ((8, 5), (5, 3), (3,))]
    e = [ember.from_numpy(d.copy()) for d in data]
    compiled = ember.compile(example)
    compile_times = {"ember.compile": first_call_seconds(lambda _: compiled(*e), None)}
    rows = [("ember eager", lambda: example(*e)), ("ember.compile", lambda: compiled(*e))]
    if torch is not None:
        t = [torch.from_numpy(d.copy()) for d in data]
        tc = torch.compile(example)
        compile_times["torch.compile"] = first_call_seconds(lambda _: tc(*t), None)
        rows += [("torch eager", lambda: example(*t)), ("torch.compile", lambda: tc(*t))]
        assert np.allclose(tc(*t).item(), compiled(*e).item(), rtol=1e-5)
    assert np.allclose(compiled(*e).item(), example(*e).item(), rtol=1e-5)
    inner = _harness.inner_for(rows[1][1], 0.002)
    times = interleaved_medians(rows, runs, inner)
    print(f"\n# the compiled example (x @ w + b).relu().sum(), x 8x5, w 5x3, b 3, float32, "
          f"default backends (Ember: llvm, torch: inductor); median of {runs} runs, "
          f"microseconds per call\n")
    for name, _ in rows:
        print(f"{name:<16}{_harness.fmt_us(times[name])}")
    for name, seconds in compile_times.items():
        print(f"compile time (first call), {name}: {seconds * 1e3:.1f} ms")
    hit = times["ember.compile"] * 1e6
    print(f"\ncompiled example cache hit: {hit:.2f} us (aim: under 3 us): "
          f"{'met' if hit < 3.0 else 'NOT met'}")


def _triad(n):
    """A STREAM triad kernel from Ember's JIT, run in place on preallocated arrays."""
    from ember import _C
    from ember.compiler.jit import JitModule
    f32 = ember.float32._code
    spec = ((n,), 0, (f32, f32, f32),
            (("load", 0, 1, (1,), 0), ("load", 1, 2, (1,), 0), ("const", 2, f32, 3.0),
             ("mul", 3, f32, 1, 2), ("add", 4, f32, 0, 3), ("store", 0, (1,), 0, 4)))
    module = JitModule((spec,), "triad")
    geo = ((n,), (1,))
    plan = ((geo, geo, geo), (), (("kernel", 0, (("in", 0), ("in", 1), ("in", 2)), n,
                                   n >= (1 << 16)),), ())
    graph = _C.CompiledGraph(module, module.addresses, plan)
    a, b, c = ember.zeros(n), ember.ones(n), ember.ones(n)
    return lambda: graph(a, b, c)


def bandwidth_section(runs):
    n = 2048 * 2048
    g = np.random.default_rng(2)
    a = g.standard_normal((2048, 2048)).astype(np.float32)
    b = (g.standard_normal((2048, 2048)) * 0.1).astype(np.float32)
    ea, eb = ember.from_numpy(a.copy()), ember.from_numpy(b.copy())
    compiled = ember.compile(chain)
    compile_times = {"ember.compile": first_call_seconds(lambda _: compiled(ea, eb), None)}
    rows = [("ember.compile", lambda: compiled(ea, eb)), ("ember eager", lambda: chain(ea, eb)),
            ("numpy", lambda: chain_numpy(a, b))]
    if torch is not None:
        ta, tb = torch.from_numpy(a.copy()), torch.from_numpy(b.copy())
        tc = torch.compile(chain)
        compile_times["torch.compile"] = first_call_seconds(lambda _: tc(ta, tb), None)
        rows += [("torch eager", lambda: chain(ta, tb)), ("torch.compile", lambda: tc(ta, tb))]
        assert np.allclose(tc(ta, tb).numpy(), compiled(ea, eb).numpy(), rtol=1e-4, atol=1e-5)
    assert np.allclose(compiled(ea, eb).numpy(), chain_numpy(a, b), rtol=1e-4, atol=1e-5)
    triad_small, triad_big = _triad(n), _triad(32 * 1024 * 1024)
    rows += [("triad 4M", triad_small), ("triad 32M", triad_big)]
    times = interleaved_medians(rows, runs, 1)
    print(f"\n# 4M-element chain ((a * b + 1).exp() * 0.5 - a).relu(), float32; median of "
          f"{runs} runs; GB/s at 12 bytes per element\n")
    print(f"{'':<16}{'ms':>10}{'GB/s':>10}{'vs ember':>10}")
    for name, _ in rows:
        elems = 32 * 1024 * 1024 if name == "triad 32M" else n
        gbs = 12 * elems / times[name] / 1e9
        rel = "" if name.startswith("triad") else f"{times[name] / times['ember.compile']:9.2f}x"
        print(f"{name:<16}{times[name] * 1e3:10.3f}{gbs:10.1f}{rel:>10}")
    for name, seconds in compile_times.items():
        print(f"compile time (first call), {name}: {seconds * 1e3:.1f} ms")
    chain_gbs = 12 * n / times["ember.compile"] / 1e9
    for label in ("triad 4M", "triad 32M"):
        elems = 32 * 1024 * 1024 if label == "triad 32M" else n
        frac = chain_gbs / (12 * elems / times[label] / 1e9)
        print(f"chain at {frac * 100:.0f}% of the {label} bandwidth (aim: 70% or more): "
              f"{'met' if frac >= 0.7 else 'NOT met'}")



# ------------------------------------------------------------------ modes


def ten_ops(x, y):
    a = x + y
    b = a * x
    c = b - y
    d = c.relu()
    e = d * 2.0
    g = e + x
    h = g.tanh()
    i = h * y
    j = i.exp()
    return j.sum()


def modes_section(runs):
    g = np.random.default_rng(3)
    data = [g.standard_normal(64).astype(np.float32) for _ in range(2)]
    print(f"\n# cache hit of a 10-op function (64 float32 elements -> a scalar), by mode; "
          f"median of {runs} runs, microseconds per call\n")
    print(f"{'':<28}{'default':>10}{'reduce-overhead':>17}{'cut':>8}")
    cuts = []
    for grad in (False, True):
        x, y = (ember.from_numpy(d.copy()) for d in data)
        x.requires_grad_(grad)
        default = ember.compile(ten_ops)
        lean = ember.compile(ten_ops, mode="reduce-overhead")
        assert default(x, y).item() == lean(x, y).item()
        rows = [("default", lambda: default(x, y)), ("reduce-overhead", lambda: lean(x, y))]
        inner = _harness.inner_for(rows[0][1], 0.002)
        times = interleaved_medians(rows, runs, inner)
        cut = 1 - times["reduce-overhead"] / times["default"]
        cuts.append(cut)
        label = "an input needs grad" if grad else "no input needs grad"
        print(f"{label:<28}{_harness.fmt_us(times['default'])}"
              f"{_harness.fmt_us(times['reduce-overhead']):>17}{cut * 100:7.0f}%")
    verdict = "met" if min(cuts) >= 0.3 else "NOT met"
    print(f"\nreduce-overhead cuts the cache hit by {min(cuts) * 100:.0f}% to "
          f"{max(cuts) * 100:.0f}% (aim: at least 30%): {verdict}")


if __name__ == "__main__":
    main()
