"""Ember eager per-op cost vs NumPy and PyTorch eager, side by side in one run.

Small tensors (16 elements) measure per-call overhead; large ones (4M elements) measure
throughput. Same thread count, dtype (float32) and inputs on every side; warm-up
excluded; each figure is the median of >= 20 timed runs.

    python benchmarks/eager_ops.py [--threads 1] [--runs 25] [--only nn]
    python benchmarks/eager_ops.py --only embedding,transpose   (those nn rows alone)

Aims ([foundation], [eager]): per-op overhead on 16 elements within 1.5x of PyTorch
eager's; large elementwise ops and matmul within 1.2x of NumPy.

Aim ([eager-2]): every nn op of the nn table (linear, softmax, log_softmax, layer_norm,
gelu, silu, cross_entropy, conv2d, max_pool2d, embedding, transpose+contiguous,
attention; batch_norm, grid_sample and embedding_bag too) within 1.5x of PyTorch eager at throughput sizes, forward
and forward + backward (the gradient of every floating input), and the zoo's GPT and
ResNet eager training steps (benchmarks/models.py's sizes) within 1.5x, printed as met
or MISSED per row at the run's thread count (run with --threads 1 and --threads 2).
Ember and torch take turns run by run, so a change in machine load affects both alike.
These tables time both the process's CPU time per call (time.process_time: every
thread's, spinning included) and wall time. The verdicts follow CPU time when the
machine is loaded (1-minute load average at least 3/4 of the cores: wall times then vary
with what else runs), wall time otherwise: at 2 threads one process's CPU time also
counts the other library's idle pool threads spinning after its own turn (torch's
OpenMP workers, Ember's pool), which says little about either. --only nn runs these
tables alone.

Separate processes (--separate; the default at 2 threads, --interleaved to turn it off):
in one process, after each torch call torch's OpenMP workers keep spinning for a while
and take the second core from Ember's pool during Ember's next call (and Ember's pool
threads spin after Ember's calls likewise), so at 2 threads interleaved figures measure
each library with one core contested by the other (gelu forward, unloaded: Ember alone
1.48 ms, interleaved 2.53). With --separate the script starts one worker process per
library, one after the other; each builds the same inputs (same seeds, dtype, thread
count), times the same rows (warm-up excluded, median of >= 20 runs) with no other
library's threads around, and the parent prints both libraries' figures and their
ratios side by side. The workers run in turn, not together, so a change in machine load
between them shows in the ratios: say the load (printed) with the figures. On a loaded
machine (another process holding a core) torch's 2-thread figures come out in multiples
of about 8 ms (its OpenMP split waits for its second thread's time slice) while Ember's
pool lets the caller take a late thread's chunks: such ratios flatter Ember; compare
2-thread figures from an unloaded machine.
"""
import json  # noqa: E402
import os  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402

# --separate / --interleaved / --worker LIB are this script's own flags: they travel in
# the environment (so they survive _harness.setup's re-execution to pin the threads).
for _flag, _value in (("--separate", "separate"), ("--interleaved", "interleaved")):
    if _flag in sys.argv:
        sys.argv.remove(_flag)
        os.environ["EAGER_OPS_MODE"] = _value
if "--worker" in sys.argv:
    _i = sys.argv.index("--worker")
    os.environ["EAGER_OPS_WORKER"] = sys.argv[_i + 1]
    del sys.argv[_i:_i + 2]

import _harness  # noqa: E402

args = _harness.setup(__doc__)
WORKER = os.environ.get("EAGER_OPS_WORKER", "")
SEPARATE = not WORKER and os.environ.get(
    "EAGER_OPS_MODE", "separate" if args.threads > 1 else "interleaved") == "separate"

import numpy as np  # noqa: E402

import ember  # noqa: E402

# Ember's worker imports torch too (the zoo's ember models take torch's weights) but
# runs none of its kernels while timing.
torch = _harness.try_torch()

# --only with names other than "nn": the nn rows whose names start with one of them,
# alone (no zoo or small-tensor tables).
NN_ONLY = [w for w in args.only.split(",") if w and w != "nn"]


def cases(n_small=16, big=(2048, 2048)):
    return [(label, rows_for(label, shape)) for label, shape in
            (("16", (n_small,)), ("4M", big))]


def rows_for(label, shape):
    """The benchmarked calls for one input size (a function, so closures bind here)."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal(shape).astype(np.float32)
    b = rng.standard_normal(shape).astype(np.float32) + 3.0
    ea, eb = ember.from_numpy(a.copy()), ember.from_numpy(b.copy())
    ta = tb = None
    if torch is not None:
        ta, tb = torch.from_numpy(a.copy()), torch.from_numpy(b.copy())
    m = (4, 4) if label == "16" else (1024, 1024)
    am = rng.standard_normal(m).astype(np.float32)
    bm = rng.standard_normal(m).astype(np.float32)
    em_a, em_b = ember.from_numpy(am.copy()), ember.from_numpy(bm.copy())
    tm_a = torch.from_numpy(am.copy()) if torch else None
    tm_b = torch.from_numpy(bm.copy()) if torch else None
    two = a.reshape(-1, 4) if label == "16" else a
    e2 = ember.from_numpy(two.copy())
    t2 = torch.from_numpy(two.copy()) if torch else None
    rows = [
        ("add", lambda: ea + eb, lambda: a + b, lambda: ta + tb),
        ("mul scalar", lambda: ea * 2.0, lambda: a * np.float32(2.0), lambda: ta * 2.0),
        ("div", lambda: ea / eb, lambda: a / b, lambda: ta / tb),
        ("exp", lambda: ea.exp(), lambda: np.exp(a), lambda: ta.exp()),
        ("tanh", lambda: ea.tanh(), lambda: np.tanh(a), lambda: ta.tanh()),
        ("sigmoid", lambda: ea.sigmoid(), lambda: 1 / (1 + np.exp(-a)),
         lambda: ta.sigmoid()),
        ("relu", lambda: ea.relu(), lambda: np.maximum(a, np.float32(0)),
         lambda: ta.relu()),
        ("sum", lambda: ea.sum(), lambda: a.sum(), lambda: ta.sum()),
        ("mean", lambda: ea.mean(), lambda: a.mean(), lambda: ta.mean()),
        ("max(dim=-1)", lambda: e2.max(-1), lambda: (two.max(-1), two.argmax(-1)),
         lambda: t2.max(-1)),
        (f"matmul {m[0]}x{m[1]}", lambda: em_a @ em_b, lambda: am @ bm,
         lambda: tm_a @ tm_b),
        ("transpose+contiguous", lambda: e2.t().contiguous(),
         lambda: np.ascontiguousarray(two.T), lambda: t2.t().contiguous()),
        ("view", lambda: ea.view(-1), lambda: a.reshape(-1), lambda: ta.view(-1)),
        ("index [1]", lambda: e2[1], lambda: two[1], lambda: t2[1]),
    ]
    # nn ops on a (rows, 64) batch: 4 rows (overhead) or 64K rows (throughput)
    rows_n = 4 if label == "16" else 65536
    x = rng.standard_normal((rows_n, 64)).astype(np.float32)
    w = rng.standard_normal((64, 64)).astype(np.float32)
    bias = rng.standard_normal(64).astype(np.float32)
    tgt = rng.integers(0, 64, rows_n)
    ex, ew, eb_, et = (ember.from_numpy(v.copy()) for v in (x, w, bias, tgt))
    F = ember.nn.functional
    tx = tw = tb_ = tt_ = TF = None
    if torch is not None:
        tx, tw, tb_, tt_ = (torch.from_numpy(v.copy()) for v in (x, w, bias, tgt))
        TF = torch.nn.functional

    def np_softmax(v):
        e = np.exp(v - v.max(-1, keepdims=True))
        return e / e.sum(-1, keepdims=True)

    def np_layer_norm(v):
        mu = v.mean(-1, keepdims=True)
        return (v - mu) / np.sqrt(v.var(-1, keepdims=True) + np.float32(1e-5))

    def np_cross_entropy(v):
        ls = v - v.max(-1, keepdims=True)
        ls = ls - np.log(np.exp(ls).sum(-1, keepdims=True))
        return -ls[np.arange(len(tgt)), tgt].mean()
    rows += [
        ("linear", lambda: F.linear(ex, ew, eb_), lambda: x @ w.T + bias,
         lambda: TF.linear(tx, tw, tb_)),
        ("softmax(-1)", lambda: ex.softmax(-1), lambda: np_softmax(x),
         lambda: tx.softmax(-1)),
        ("layer_norm", lambda: F.layer_norm(ex, (64,)), lambda: np_layer_norm(x),
         lambda: TF.layer_norm(tx, (64,))),
        ("gelu", lambda: F.gelu(ex), None, lambda: TF.gelu(tx)),
        ("cross_entropy", lambda: F.cross_entropy(ex, et), lambda: np_cross_entropy(x),
         lambda: TF.cross_entropy(tx, tt_)),
    ]
    if label == "16":
        img = rng.standard_normal((1, 3, 8, 8)).astype(np.float32)
    else:
        img = rng.standard_normal((16, 32, 32, 32)).astype(np.float32)
    kw = rng.standard_normal((32, img.shape[1], 3, 3)).astype(np.float32)
    ei, ek = ember.from_numpy(img.copy()), ember.from_numpy(kw.copy())
    ti = tk = None
    if torch is not None:
        ti, tk = torch.from_numpy(img.copy()), torch.from_numpy(kw.copy())
    rows.append((f"conv2d 3x3 {img.shape[1]}->32", lambda: F.conv2d(ei, ek, padding=1), None,
                 lambda: TF.conv2d(ti, tk, padding=1)))
    return rows


def nn_cases(libs=None):
    """(name, {library name: (forward, forward + backward or None)}) per nn op at
    throughput sizes, for the libraries `libs` (default ember and torch); each side's
    inputs are built once, from the same seeded arrays whichever libraries are asked."""
    rng = np.random.default_rng(1)

    def f32(*shape):
        return rng.standard_normal(shape).astype(np.float32)

    x, w, bias = f32(65536, 64), f32(64, 64), f32(64)
    tgt = rng.integers(0, 64, 65536)
    img, kw = f32(16, 32, 32, 32), f32(32, 32, 3, 3)
    table, tokens = f32(4096, 64), rng.integers(0, 4096, (64, 1024))
    big = f32(2048, 2048)
    q, k, v = f32(8, 4, 128, 32), f32(8, 4, 128, 32), f32(8, 4, 128, 32)
    gimg, grid = f32(8, 16, 64, 64), rng.uniform(-1.1, 1.1, (8, 64, 64, 2)).astype(np.float32)
    bag_table, bags = f32(10000, 64), rng.integers(0, 10000, (512, 20))
    running = {}

    def bn_running(L, a, g, b):       # BatchNorm2d's training call: updates the buffers
        rm, rv = running.setdefault(L.__name__, (L.zeros(32), L.ones(32)))
        return L.nn.functional.batch_norm(a, rm, rv, g, b, training=True)
    specs = [
        ("linear", (x, w, bias), lambda L, a, b, c: L.nn.functional.linear(a, b, c)),
        ("softmax", (x,), lambda L, a: a.softmax(-1)),
        ("log_softmax", (x,), lambda L, a: L.nn.functional.log_softmax(a, -1)),
        ("layer_norm", (x, bias, bias[::-1].copy()),
         lambda L, a, g, b: L.nn.functional.layer_norm(a, (64,), g, b)),
        ("gelu", (x,), lambda L, a: L.nn.functional.gelu(a)),
        ("silu", (x,), lambda L, a: L.nn.functional.silu(a)),
        ("cross_entropy", (x, tgt), lambda L, a, t: L.nn.functional.cross_entropy(a, t)),
        ("conv2d 3x3 32->32", (img, kw),
         lambda L, a, b: L.nn.functional.conv2d(a, b, padding=1)),
        ("max_pool2d 2x2", (img,), lambda L, a: L.nn.functional.max_pool2d(a, 2)),
        ("embedding", (tokens, table), lambda L, i, t: L.nn.functional.embedding(i, t)),
        ("transpose+contiguous", (big,), lambda L, a: a.t().contiguous()),
        ("attention (causal)", (q, k, v),
         lambda L, a, b, c: L.nn.functional.scaled_dot_product_attention(
             a, b, c, is_causal=True)),
        ("batch_norm (train)", (img, kw[:, 0, 0, 0].copy(), kw[:, 1, 0, 0].copy()),
         lambda L, a, g, b: L.nn.functional.batch_norm(
             a, None, None, g, b, training=True)),
        ("batch_norm (train, running stats)",
         (img, kw[:, 0, 0, 0].copy(), kw[:, 1, 0, 0].copy()), bn_running),
        ("grid_sample bilinear 8x16x64x64", (gimg, grid),
         lambda L, a, g: L.nn.functional.grid_sample(a, g, align_corners=False)),
        ("embedding_bag mean 512x20 of 10000x64", (bags, bag_table),
         lambda L, i, t: L.nn.functional.embedding_bag(i, t, mode="mean")),
    ]
    out = []
    for name, arrays, fn in specs:
        sides = {}
        for lib in libs or (ember, torch):
            ins = [lib.from_numpy(a.copy()) for a in arrays]
            leaves = [t for t in ins if t.dtype == lib.float32]
            with_grad = [t.requires_grad_() for t in leaves] if name != \
                "transpose+contiguous" else []
            seed = fn(lib, *ins)
            grad = lib.from_numpy(
                np.random.default_rng(2).standard_normal(tuple(seed.shape))
                .astype(np.float32))

            def fwd(lib=lib, ins=ins, fn=fn):
                with lib.no_grad():
                    return fn(lib, *ins)

            def fwd_bwd(lib=lib, ins=ins, fn=fn, leaves=with_grad, grad=grad):
                for t in leaves:
                    t.grad = None
                fn(lib, *ins).backward(grad)
            sides[lib.__name__] = (fwd, fwd_bwd if with_grad else None)
        out.append((name, sides))
    return out


def cpu_and_wall_medians(rows, runs, warmup=2):
    """{name: (median CPU seconds, median wall seconds)} per call of each (name, fn) row,
    the rows taking turns run by run."""
    import statistics
    import time
    for _, fn in rows:
        for _ in range(warmup):
            fn()
    cpu = {name: [] for name, _ in rows}
    wall = {name: [] for name, _ in rows}
    for _ in range(runs):
        for name, fn in rows:
            c0, w0 = time.process_time(), time.perf_counter()
            fn()
            cpu[name].append(time.process_time() - c0)
            wall[name].append(time.perf_counter() - w0)
    return {name: (statistics.median(cpu[name]), statistics.median(wall[name]))
            for name, _ in rows}


def print_table(title, times, how):
    """Prints ember vs torch per (name, pass, (ember cpu, wall), (torch cpu, wall)) row
    of times with the verdicts; returns the missed."""
    print(f"# {title} at {args.threads} thread(s), ember vs torch eager, median of "
          f"{runs_wanted()} {how}, milliseconds per call (load "
          f"{_harness.load_average()})")
    try:
        loaded = os.getloadavg()[0] >= 0.75 * (os.cpu_count() or 1)
    except OSError:
        loaded = False
    clock = "cpu" if loaded else "wall"
    print(f"{'case':<24}{'pass':<9}{'ember cpu':>10}{'torch cpu':>10}{'ratio':>8}"
          f"{'ember wall':>11}{'torch wall':>11}{'ratio':>8}  aim 1.5x ({clock})")
    missed = []
    for name, pass_, (ce, we), (ct, wt) in times:
        r = ce / max(ct, 1e-9) if loaded else we / max(wt, 1e-9)
        ok = r <= 1.5
        if not ok:
            missed.append(f"{name} {pass_} {r:.2f}x")
        print(f"{name:<24}{pass_:<9}{ce * 1e3:10.3f}{ct * 1e3:10.3f}{ce / max(ct, 1e-9):7.2f}x"
              f"{we * 1e3:11.3f}{wt * 1e3:11.3f}{we / max(wt, 1e-9):7.2f}x  "
              f"{_harness.verdict(ok)}")
    return missed


def runs_wanted():
    return args.runs if not args.quick else 5


def aim_table(title, cases):
    """Times ember and torch per (name, pass, ember fn, torch fn) case, taking turns run
    by run in this process, and prints them; returns the missed."""
    times = []
    for name, pass_, fe, ft in cases:
        t = cpu_and_wall_medians([("e", fe), ("t", ft)], runs_wanted())
        times.append((name, pass_, t["e"], t["t"]))
    return print_table(title, times, "interleaved runs (both libraries in this "
                       "process)")


def nn_case_list(libs=None):
    """(name, pass, ember fn, torch fn) per nn op and pass (None for a library not
    built)."""
    cases = []
    for name, sides in nn_cases(libs):
        for pass_, i in (("fwd", 0), ("fwd+bwd", 1)):
            fe = sides["ember"][i] if "ember" in sides else None
            ft = sides["torch"][i] if "torch" in sides else None
            if (fe or ft) is not None and (
                    not NN_ONLY or any(name.startswith(w) for w in NN_ONLY)):
                cases.append((name, pass_, fe, ft))
    return cases


def worker_main():
    """--worker ember|torch: times one library's side of the tables alone in this
    process and prints {table: [[name, pass, cpu, wall], ...]} as JSON."""
    lib = ember if WORKER == "ember" else torch
    lib.set_num_threads(args.threads)
    result = {}
    for table in tables():
        cases = nn_case_list((lib,)) if table == "nn" else zoo_cases()
        rows = []
        for name, pass_, fe, ft in cases:
            fn = fe if lib is ember else ft
            t = cpu_and_wall_medians([("x", fn)], runs_wanted())["x"]
            rows.append([name, pass_, t[0], t[1]])
        result[table] = rows
    print(json.dumps(result))


def tables():
    return ("nn",) if NN_ONLY else ("nn", "zoo")


def separate_tables():
    """Runs one worker process per library, one after the other, and prints their
    figures side by side; returns {table: missed}."""
    got = {}
    for lib in ("ember", "torch"):
        cmd = [sys.executable, os.path.abspath(__file__), "--threads", str(args.threads),
               "--runs", str(args.runs), "--worker", lib]
        if args.quick:
            cmd.append("--quick")
        if args.only:
            cmd += ["--only", args.only]
        env = {k: v for k, v in os.environ.items() if k != "EAGER_OPS_MODE"}
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
        got[lib] = json.loads(done.stdout.strip().splitlines()[-1])
    missed = {}
    for table in tables():
        times = [(name, pass_, (ce, we), (ct, wt)) for (name, pass_, ce, we), (_, _, ct, wt)
                 in zip(got["ember"][table], got["torch"][table])]
        title = "nn ops" if table == "nn" else "zoo training steps"
        missed[table] = print_table(title, times, "runs (one worker process per "
                                    "library, in turn)")
    return missed


def nn_table(missed=None):
    """The [eager-2] table: nn ops forward and forward + backward, ember vs torch."""
    if missed is None:
        missed = aim_table("nn ops", nn_case_list())
    print(f"# nn ops at {args.threads} thread(s): "
          + ("all within 1.5x of torch eager: met" if not missed else
             f"{len(missed)} MISSED: " + ", ".join(missed)))
    print()


def zoo_cases():
    """(name, 'train', ember step, torch step): the zoo's GPT (4 layers, 4 heads, 128
    wide, vocabulary 65, 8 x 128 tokens) and ResNet (one BasicBlock per stage, width 16,
    16 x 3 x 32 x 32) eager training steps (grads cleared, forward, cross-entropy,
    backward), torch's weights copied into ember's."""
    import os
    import sys
    from ember import models
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                                    "tests"))
    import torch_models
    g = np.random.default_rng(0)
    idx = g.integers(0, 65, (8, 129))
    img = g.standard_normal((16, 3, 32, 32)).astype(np.float32)
    lab = g.integers(0, 10, 16)
    out = []
    for name in ("GPT", "ResNet"):
        steps = {}
        state = None
        for lib, zoo in ((torch, torch_models), (ember, models)):
            lib.manual_seed(0)
            F = lib.nn.functional
            if name == "GPT":
                m = zoo.GPT(zoo.GPTConfig(vocab_size=65, block_size=128, n_layer=4,
                                          n_head=4, n_embd=128, dropout=0.0))
                ins = [lib.from_numpy(idx[:, :-1].copy()), lib.from_numpy(idx[:, 1:].copy())]

                def loss(m, i, y):
                    return m(i, y)[1]
            else:
                m = zoo.ResNet((1, 1, 1, 1), 16, 10, 3, 32)
                ins = [lib.from_numpy(img.copy()), lib.from_numpy(lab.copy())]

                def loss(m, x, y, F=F):
                    return F.cross_entropy(m(x), y)
            if lib is torch:
                state = {k: v.detach().numpy().copy() for k, v in m.state_dict().items()}
            else:
                m.load_state_dict({k: ember.from_numpy(v) for k, v in state.items()})
            m.train()

            def step(m=m, ins=ins, loss=loss):
                for p in m.parameters():
                    p.grad = None
                loss(m, *ins).backward()
            steps[lib.__name__] = step
        out.append((name, "train", steps["ember"], steps["torch"]))
    return out


def zoo_table(missed=None):
    if missed is None:
        missed = aim_table("zoo training steps", zoo_cases())
    print(f"# zoo eager training steps at {args.threads} thread(s): "
          + ("within 1.5x of torch eager: met" if not missed else
             f"{len(missed)} MISSED: " + ", ".join(missed)))
    print()


def main():
    _harness.print_env(args.threads)
    import ember as _e
    _e.set_num_threads(args.threads)
    if torch is not None and SEPARATE:
        missed = separate_tables()
        nn_table(missed["nn"])
        if not NN_ONLY:
            zoo_table(missed["zoo"])
    elif torch is not None:
        nn_table()
        if not NN_ONLY:
            zoo_table()
    if args.only == "nn" or NN_ONLY:
        return
    print(f"# median of {args.runs} runs, microseconds per call\n")
    head = (f"{'op':<22}{'size':>5} {'ember':>10} {'numpy':>10} {'torch':>10} "
            f"{'ember/torch':>12} {'ember/numpy':>12}")
    ratios_small, ratios_big = [], []
    big_numpy_aim = {"add", "mul scalar", "div", "exp", "tanh", "relu", "matmul 1024x1024"}
    for label, rows in cases():
        print(head)
        for name, fe, fn, ft in rows:
            target = 0.002 if label == "16" else 0.0
            inner = _harness.inner_for(fe, target) if target else 1
            runs = args.runs if not args.quick else 5
            te = _harness.median_time(fe, runs, inner)
            tn = _harness.median_time(fn, runs, inner) if fn is not None else None
            tt = _harness.median_time(ft, runs, inner) if torch is not None else None
            if label == "16" and tt:
                ratios_small.append(te / tt)
            if label != "16" and tn and name in big_numpy_aim:
                ratios_big.append((te / tn, name))
            print(f"{name:<22}{label:>5} {_harness.fmt_us(te)} {_harness.fmt_us(tn)} "
                  f"{_harness.fmt_us(tt)} {_harness.fmt_ratio(te, tt):>12} "
                  f"{_harness.fmt_ratio(te, tn):>12}")
        print()
    if ratios_small:
        import statistics
        gm = statistics.geometric_mean(ratios_small)
        print(f"16-element overhead, ember/torch: geometric mean {gm:.2f}x, worst "
              f"{max(ratios_small):.2f}x (aim: within 1.5x)")
    if ratios_big:
        worst = max(ratios_big)
        print(f"large elementwise and matmul, ember/numpy: worst {worst[0]:.2f}x "
              f"({worst[1]}) (aim: within 1.2x)")


if __name__ == "__main__":
    if WORKER:
        worker_main()
    else:
        main()
