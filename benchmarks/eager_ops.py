"""Ember eager per-op cost vs NumPy and PyTorch eager, side by side in one run.

Small tensors (16 elements) measure per-call overhead; large ones (4M elements) measure
throughput. Same thread count, dtype (float32) and inputs on every side; warm-up
excluded; each figure is the median of >= 20 timed runs.

    python benchmarks/eager_ops.py [--threads 1] [--runs 25]

Aims ([foundation], [eager]): per-op overhead on 16 elements within 1.5x of PyTorch
eager's; large elementwise ops and matmul within 1.2x of NumPy.
"""
import _harness

args = _harness.setup(__doc__)

import numpy as np  # noqa: E402

import ember  # noqa: E402

torch = _harness.try_torch()


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


def main():
    _harness.print_env(args.threads)
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
    main()
