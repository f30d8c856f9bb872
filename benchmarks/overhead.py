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

    python benchmarks/overhead.py [--threads 1] [--runs 25]

Aim ([capture-1]): ember.compile adds under 2 microseconds per call over ember eager.
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


if __name__ == "__main__":
    main()
