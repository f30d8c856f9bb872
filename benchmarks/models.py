"""Whole models, side by side in one run: Ember eager, Ember compiled (LLVM), PyTorch
eager and torch.compile (Inductor), with the same weights, inputs, dtype (float32) and
thread count on every side. Each figure is the median of >= 20 timed runs after warm-up;
the first (compiling) call is reported apart.

    python benchmarks/models.py [--threads 1] [--runs 20]

Workloads: an MLP (256 -> 512 -> 512 -> 10, batch 128) inference forward, its training
step (forward, cross-entropy, backward), and a small GPT (2 layers, 64-wide, 64 tokens,
batch 8) training step.
"""
import _harness

args = _harness.setup(__doc__)

import os  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

import ember  # noqa: E402
from ember import models  # noqa: E402

torch = _harness.try_torch()
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
if torch is not None:
    import torch_models  # noqa: E402


def copy_weights(tmod, emod):
    emod.load_state_dict({k: ember.from_numpy(v.detach().numpy().copy())
                          for k, v in tmod.state_dict().items()})


def first_call(fn):
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def workloads():
    g = np.random.default_rng(0)
    x = g.standard_normal((128, 256)).astype(np.float32)
    y = g.integers(0, 10, 128)
    idx = g.integers(0, 65, (8, 64))
    out = []

    # MLP
    em = models.MLP(256, [512, 512], 10)
    ex, ey = ember.from_numpy(x.copy()), ember.from_numpy(y.copy())
    sides = {"ember eager": (em, ex, ey, ember)}
    if torch is not None:
        tm = torch_models.MLP(256, (512, 512), 10)
        copy_weights(tm, em)
        sides["torch eager"] = (tm, torch.from_numpy(x.copy()), torch.from_numpy(y.copy()),
                                torch)

    def mlp_forward(m, xx, yy, lib):
        with lib.no_grad():
            return m(xx)

    def mlp_train(m, xx, yy, lib):
        for p in m.parameters():
            p.grad = None
        loss = lib.nn.functional.cross_entropy(m(xx), yy)
        loss.backward()
        return loss

    out.append(("MLP forward (batch 128)", sides, mlp_forward))
    out.append(("MLP training step", sides, mlp_train))

    # GPT
    cfg = models.GPTConfig(vocab_size=65, block_size=64, n_layer=2, n_head=4, n_embd=64,
                           dropout=0.0)
    eg = models.GPT(cfg)
    eg.eval()
    eidx = ember.from_numpy(idx.copy())
    gsides = {"ember eager": (eg, eidx, None, ember)}
    if torch is not None:
        tg = torch_models.GPT(torch_models.GPTConfig(vocab_size=65, block_size=64, n_layer=2,
                                                     n_head=4, n_embd=64, dropout=0.0))
        tg.eval()
        copy_weights(tg, eg)
        gsides["torch eager"] = (tg, torch.from_numpy(idx.copy()), None, torch)

    def gpt_train(m, ii, _, lib):
        for p in m.parameters():
            p.grad = None
        logits = m(ii)
        logits = logits[0] if isinstance(logits, tuple) else logits
        loss = lib.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, 65),
                                               ii[:, 1:].reshape(-1))
        loss.backward()
        return loss

    out.append(("GPT training step (8 x 64 tokens)", gsides, gpt_train))
    return out


def main():
    _harness.print_env(args.threads)
    ember.set_num_threads(args.threads)
    runs = args.runs if not args.quick else 3
    print(f"# median of {runs} runs, milliseconds per call\n")
    for title, sides, step in workloads():
        rows, compile_ms = {}, {}
        for name, (m, a, b, lib) in sides.items():
            rows[name] = (lambda m=m, a=a, b=b, lib=lib: step(m, a, b, lib))
            compiled_name = "ember.compile" if lib is ember else "torch.compile"
            cm = lib.compile(m)
            compile_ms[compiled_name] = first_call(lambda cm=cm: step(cm, a, b, lib)) * 1e3
            rows[compiled_name] = (lambda cm=cm, a=a, b=b, lib=lib: step(cm, a, b, lib))
        values = {name: float(fn().item() if hasattr(fn(), "item") else 0) for name, fn in
                  rows.items()} if "forward" not in title else {}
        times = {name: _harness.median_time(fn, runs, 1, warmup=3) for name, fn in rows.items()}
        print(f"{title}")
        base = times["ember.compile"]
        for name in ("ember eager", "ember.compile", "torch eager", "torch.compile"):
            if name in times:
                loss = f"  loss {values[name]:.5f}" if name in values else ""
                print(f"  {name:<16}{times[name] * 1e3:10.3f} ms  {times[name] / base:6.2f}x"
                      f"{loss}")
        print("  first call: " + ", ".join(f"{k} {v:.0f} ms" for k, v in compile_ms.items()))
        print()


if __name__ == "__main__":
    main()
