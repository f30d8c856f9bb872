"""Whole models, side by side in one run: Ember eager, Ember compiled (LLVM), PyTorch
eager and torch.compile (Inductor), with the same weights (copied across by name), inputs,
dtype (float32) and thread count on every side. Each figure is the median of >= 20
timed runs after warm-up, the sides' runs taking turns (so a change in machine load
affects every side alike); compile times are reported apart.

    python benchmarks/models.py [--threads 1] [--runs 25] [--quick] [--only gpt,mlp]

Workloads ([llvm-2]), each an inference forward (no_grad, eval mode) and a training step
(parameters' grads cleared, forward, cross-entropy, backward), the module compiled
(with the loss inside where the zoo's model computes it):

  mlp       MLP 256 -> 512 -> 512 -> 10, batch 128
  gpt       GPT, 4 layers, 4 heads, 128 wide, vocabulary 65, 8 x 128 tokens
  gpt6      GPT, 6 layers, 8 heads, 256 wide, vocabulary 65, 8 x 128 tokens
  resnet    ResNet-style CNN (one BasicBlock per stage, width 16, BatchNorm),
            16 x 3 x 32 x 32
  bert      BERT-style encoder (2 layers, 4 heads, 128 wide, FFN 512) with a padding
            mask (a quarter of the rows padded), sequence classification, 8 x 128 tokens
  lstm      LSTM classifier (2 layers, bidirectional, 64-wide embeddings, hidden 128),
            16 x 64 tokens

Compile times: "cold" is the first call (Ember's kernel cache and Inductor's cache point
at a new empty folder for the run); "warm" the first call of a twin model (same
config and weights) compiled after it in the same process (torch._dynamo.reset() first,
so that Dynamo traces it again), the model the timed compiled rows then run.
benchmarks/compile_time.py measures new processes.

Target, at the given --threads: every model workload at least as fast as torch.compile
(printed as met or MISSED per workload, then all of them together).
"""
import os  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402

import _harness

args = _harness.setup(__doc__)

if "EMBER_CACHE_DIR" not in os.environ:      # cold compiles: empty caches for this run
    import atexit
    import shutil
    _cache = tempfile.mkdtemp(prefix="ember-bench-models-")
    atexit.register(shutil.rmtree, _cache, ignore_errors=True)
    os.environ["EMBER_CACHE_DIR"] = _cache
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = _cache

import warnings  # noqa: E402

import numpy as np  # noqa: E402

import ember  # noqa: E402
from ember import models  # noqa: E402

torch = None if args.no_torch else _harness.try_torch()
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
if torch is not None:
    import torch_models  # noqa: E402

MODELS = ("mlp", "gpt", "gpt6", "resnet", "bert", "lstm")


def sizes(quick):
    if quick:
        return dict(batch=4, mlp_in=32, mlp_hidden=(64, 64), seq=16, gpt=(2, 2, 32),
                    gpt6=(2, 4, 64), image=16, bert=(1, 2, 32, 64), lstm_seq=8,
                    lstm=(16, 32))
    return dict(batch=None, mlp_in=256, mlp_hidden=(512, 512), seq=128, gpt=(4, 4, 128),
                gpt6=(6, 8, 256), image=32, bert=(2, 4, 128, 512), lstm_seq=64,
                lstm=(64, 128))


def build(lib, name, s, g):
    """(model, inputs, train(model, *inputs) -> loss, infer(model, *inputs) -> output,
    title) for lib ember or torch; g makes the same inputs on both sides."""
    zoo = models if lib is ember else torch_models
    lib.manual_seed(0)                  # the same initial weights run to run
    t = lib.from_numpy
    F = lib.nn.functional
    if name == "mlp":
        b = s["batch"] or 128
        m = zoo.MLP(s["mlp_in"], list(s["mlp_hidden"]) if lib is ember else s["mlp_hidden"], 10)
        x = t(g.standard_normal((b, s["mlp_in"])).astype(np.float32))
        y = t(g.integers(0, 10, b))
        return (m, [x, y], lambda m, x, y: F.cross_entropy(m(x), y), lambda m, x, y: m(x),
                f"MLP {s['mlp_in']} -> {' -> '.join(map(str, s['mlp_hidden']))} -> 10, "
                f"batch {b}")
    if name in ("gpt", "gpt6"):
        layers, heads, width = s[name]
        b = s["batch"] or 8
        cfg = dict(vocab_size=65, block_size=s["seq"], n_layer=layers, n_head=heads,
                   n_embd=width, dropout=0.0)
        m = zoo.GPT(zoo.GPTConfig(**cfg))
        idx = g.integers(0, 65, (b, s["seq"] + 1))
        return (m, [t(idx[:, :-1].copy()), t(idx[:, 1:].copy())],
                lambda m, i, y: m(i, y)[1], lambda m, i, y: m(i)[0],
                f"GPT {layers} layers x {width} wide, {b} x {s['seq']} tokens")
    if name == "resnet":
        b = s["batch"] or 16
        m = zoo.ResNet((1, 1, 1, 1), 16, 10, 3, s["image"])
        x = t(g.standard_normal((b, 3, s["image"], s["image"])).astype(np.float32))
        y = t(g.integers(0, 10, b))
        return (m, [x, y], lambda m, x, y: F.cross_entropy(m(x), y), lambda m, x, y: m(x),
                f"ResNet-style CNN {b} x 3 x {s['image']} x {s['image']}")
    if name == "bert":
        layers, heads, width, ffn = s["bert"]
        b, T = s["batch"] or 8, s["seq"]
        cfg = dict(vocab_size=1000, hidden_size=width, num_layers=layers, num_heads=heads,
                   intermediate_size=ffn, max_position=T, dropout=0.0)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            m = zoo.BertForSequenceClassification(zoo.BertConfig(**cfg))
        ids = g.integers(1, 1000, (b, T))
        mask = np.ones((b, T), dtype=np.int64)
        for r in range(0, b, 4):                     # a quarter of the rows padded
            cut = T - T // 4 - r % 7
            mask[r, cut:] = 0
            ids[r, cut:] = 0
        types = np.zeros((b, T), dtype=np.int64)
        labels = g.integers(0, 2, b)
        return (m, [t(ids), t(types), t(mask), t(labels)],
                lambda m, i, ty, ma, y: m(i, ty, ma, y)[1],
                lambda m, i, ty, ma, y: m(i, ty, ma)[0],
                f"BERT-style encoder {layers} layers x {width} wide, padding mask, "
                f"{b} x {T} tokens")
    embed, hidden = s["lstm"]
    b = s["batch"] or 16
    m = zoo.LSTMClassifier(1000, 4, embed, hidden, 2, bidirectional=True, dropout=0.0)
    tok = t(g.integers(1, 1000, (b, s["lstm_seq"])))
    y = t(g.integers(0, 4, b))
    return (m, [tok, y], lambda m, x, y: m(x, y)[1], lambda m, x, y: m(x)[0],
            f"LSTM classifier 2 x {hidden} bidirectional, {b} x {s['lstm_seq']} tokens")


def copy_weights(tmod, emod):
    emod.load_state_dict({k: ember.from_numpy(v.detach().numpy().copy())
                          for k, v in tmod.state_dict().items()})


def sides(name, s):
    """{lib name: (model, twin, inputs, lib, train, infer)}: the same weights and inputs on
    every side; and the title."""
    out = {}
    em, e_in, e_train, e_infer, title = build(ember, name, s, np.random.default_rng(0))
    etwin = build(ember, name, s, np.random.default_rng(0))[0]
    if torch is not None:
        tm, t_in, t_train, t_infer, _ = build(torch, name, s, np.random.default_rng(0))
        ttwin = build(torch, name, s, np.random.default_rng(0))[0]
        ttwin.load_state_dict(tm.state_dict())
        copy_weights(tm, em)
        out["torch"] = (tm, ttwin, t_in, torch, t_train, t_infer)
    etwin.load_state_dict(em.state_dict())
    out["ember"] = (em, etwin, e_in, ember, e_train, e_infer)
    return out, title


def make_step(kind, fn):
    if kind == "training step":
        def step(m, inputs, lib):
            for p in m.parameters():
                p.grad = None
            loss = fn(m, *inputs)
            loss.backward()
            return loss
    else:
        def step(m, inputs, lib):
            with lib.no_grad():
                return fn(m, *inputs)
    return step


def value(x):
    return np.asarray(x.detach().numpy() if hasattr(x, "detach") else x.numpy(),
                      dtype=np.float64)


MODE_LINES = []          # --mode: each workload's mode vs default line


def run_workload(name, kind, s, runs):
    sd, title = sides(name, s)
    rows, compile_s, values = [], {}, {}
    for lib_name in ("ember", "torch"):
        if lib_name not in sd:
            continue
        m, twin, inputs, lib, train, infer = sd[lib_name]
        step = make_step(kind, train if kind == "training step" else infer)
        for mod in (m, twin):
            mod.train(kind == "training step")
        compiled_name = f"{lib_name}.compile"
        cold = _harness.first_call(lambda: step(lib.compile(m), inputs, lib))
        if lib is torch:
            torch._dynamo.reset()        # the twin is traced again (else a cache hit)
        ctwin = lib.compile(twin)
        warm = _harness.first_call(lambda: step(ctwin, inputs, lib))
        compile_s[compiled_name] = (cold, warm)
        rows += [(f"{lib_name} eager", lambda m=m, i=inputs, st=step, lib=lib: st(m, i, lib)),
                 (compiled_name, lambda c=ctwin, i=inputs, st=step, lib=lib: st(c, i, lib))]
        values[f"{lib_name} eager"] = value(step(m, inputs, lib))
        values[compiled_name] = value(step(ctwin, inputs, lib))
        if lib_name == "ember" and args.mode != "default":
            # the twin again, compiled in the other mode: same weights, same inputs
            moded = f"mode={args.mode}"
            cmode = lib.compile(twin, mode=args.mode)
            compile_s[moded] = (_harness.first_call(lambda: step(cmode, inputs, lib)),
                                float("nan"))
            rows.append((moded, lambda c=cmode, i=inputs, st=step, lib=lib: st(c, i, lib)))
            values[moded] = value(step(cmode, inputs, lib))
    load = _harness.load_average()
    times = _harness.interleaved_medians(rows, runs)
    ref = values.get("torch eager", values["ember eager"])
    print(f"{title}, {kind}  (load {load})")
    base = times["ember.compile"]
    for side in ("ember eager", "ember.compile", f"mode={args.mode}", "torch eager",
                 "torch.compile"):
        if side not in times:
            continue
        ok = np.allclose(values[side], ref, rtol=2e-3, atol=2e-4)
        shown = (f"  loss {float(values[side]):.5f}" if values[side].ndim == 0 else
                 f"  |out| {np.abs(values[side]).mean():.5f}")
        print(f"  {side:<16}{times[side] * 1e3:10.3f} ms  {times[side] / base:6.2f}x"
              f"{shown}{'' if ok else '  MISMATCH vs torch eager'}")
    print("  compile (first call), cold / warm: " + ", ".join(
        f"{k} {c * 1e3:.0f} / {w * 1e3:.0f} ms" for k, (c, w) in compile_s.items()))
    if "torch.compile" in times:
        speed = times["torch.compile"] / base
        line = (f"{title}, {kind}: {speed:.2f}x torch.compile's speed (target: 1.00x or "
                f"more): {_harness.verdict(speed >= 1.0)}")
    else:
        line = f"{title}, {kind}: no torch.compile to compare with: MISSED"
    if f"mode={args.mode}" in times:
        ratio = base / times[f"mode={args.mode}"]
        ok = ratio >= 0.95 if args.mode == "max-autotune" else True
        mline = (f"{title}, {kind}: mode={args.mode} at {ratio:.2f}x the default mode's "
                 f"speed" + (" (target: not slower)" if args.mode == "max-autotune" else "")
                 + f": {_harness.verdict(ok)}")
        print("  " + mline)
        MODE_LINES.append(mline)
    print("  " + line + "\n")
    return line, times


def main():
    _harness.print_env(args.threads, torch is not None)
    ember.set_num_threads(args.threads)
    runs = args.runs if not args.quick else 3
    only = args.only.split(",") if args.only else MODELS
    unknown = set(only) - set(MODELS)
    if unknown:
        raise SystemExit(f"--only: unknown workloads {sorted(unknown)}; known: {MODELS}")
    print(f"# median of {runs} interleaved runs, milliseconds per call; load average at "
          f"start {_harness.load_average()}\n")
    s = sizes(args.quick)
    lines = []
    for name in MODELS:
        if name not in only:
            continue
        for kind in ("inference", "training step"):
            lines.append(run_workload(name, kind, s, runs)[0])
    print(f"# targets at {args.threads} thread(s):")
    for line in lines:
        print("  " + line)
    met = sum(line.endswith(": met") for line in lines)
    print(f"# {met} of {len(lines)} model workloads at least as fast as torch.compile")
    if MODE_LINES:
        print(f"# mode={args.mode} vs the default mode at {args.threads} thread(s):")
        for line in MODE_LINES:
            print("  " + line)


if __name__ == "__main__":
    main()
