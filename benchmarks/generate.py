"""Greedy text generation with the zoo GPT, compiled: the sequence grows by one token per
call, so every call has a new length ([dynamic]).

For each side (Ember eager, ember.compile with each backend, PyTorch eager and
torch.compile, both with their default `dynamic=None`: automatic dynamic), prints the
first pass (a cold generation of --tokens tokens from a prompt, compiles included), the
captures and graphs it made, and the warm pass (the same generation again, every
length seen: the median of --runs runs), with ratios against torch.compile. Same
threads, config, prompt and token count on every side; the weights are each library's
own seeded ones (greedy decoding's cost does not depend on them).

    python benchmarks/generate.py --threads 1 [--tokens 40] [--quick]
"""
from __future__ import annotations

import os
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
import _harness as H  # noqa: E402  (pins threads before numpy/torch load)

args = H.setup(__doc__.splitlines()[0])

import numpy as np  # noqa: E402

import ember  # noqa: E402
from ember import models  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
torch = None if args.no_torch else H.try_torch()
if torch is not None:
    import torch_models  # noqa: E402

TOKENS = 8 if args.quick else 40
PROMPT = 4
LAYERS, HEADS, WIDTH = (2, 2, 32) if args.quick else (4, 4, 128)
RUNS = 3 if args.quick else max(args.runs, 20)


def build(lib):
    zoo = models if lib is ember else torch_models
    lib.manual_seed(0)
    m = zoo.GPT(zoo.GPTConfig(vocab_size=65, block_size=PROMPT + TOKENS + 1, n_layer=LAYERS,
                              n_head=HEADS, n_embd=WIDTH, dropout=0.0)).eval()
    prompt = lib.from_numpy(np.random.default_rng(0).integers(0, 65, (1, PROMPT)))
    return m, prompt


def generate(lib, model, prompt):
    with lib.no_grad():
        idx = prompt
        for _ in range(TOKENS):
            logits = model(idx)[0]
            idx = lib.cat([idx, logits[:, -1:].argmax(-1)], 1)
    return idx


def side(lib, name, wrap):
    model, prompt = build(lib)
    run = wrap(model)
    t0 = time.perf_counter()
    out = generate(lib, run, prompt)
    first = time.perf_counter() - t0
    warm = H.median_time(lambda: generate(lib, run, prompt), RUNS, warmup=0)
    return name, first, warm, out


def ember_compiled(backend):
    def wrap(model):
        ember.compiler.reset()
        return ember.compile(model, backend=backend)
    return wrap


def main():
    H.print_env(args.threads, torch is not None)
    print(f"# GPT {LAYERS} layers x {WIDTH} wide, greedy, prompt {PROMPT} tokens, "
          f"{TOKENS} new tokens; load {H.load_average()}")
    from ember.capture import counters
    rows = [side(ember, "Ember eager", lambda m: m)]
    counts = {}
    for backend in ("eager", "aot_eager", "llvm"):
        rows.append(side(ember, f"ember.compile ({backend})", ember_compiled(backend)))
        st = counters["stats"]
        counts[rows[-1][0]] = (f"{st['calls_captured']} captures, {st['unique_graphs']} "
                               f"graphs, {st['size_specializations']} backend "
                               f"compilations by size, {len(counters['recompiles'])} "
                               "recompile reasons")
        same = bool(ember.equal(rows[-1][3], rows[0][3]))
        counts[rows[-1][0]] += "" if same else "; TOKENS DIFFER FROM EAGER"
    if torch is not None:
        torch.set_num_threads(args.threads)
        rows.append(side(torch, "PyTorch eager", lambda m: m))

        def tc(model):
            torch._dynamo.reset()
            return torch.compile(model)
        rows.append(side(torch, "torch.compile", tc))
        frames = torch._dynamo.utils.counters["stats"]
        counts["torch.compile"] = (f"{frames.get('unique_graphs', '?')} graphs")
    ref = next((r for r in rows if r[0] == "torch.compile"), None)
    print(f"{'side':28s} {'first pass s':>12s} {'warm pass ms':>12s} "
          f"{'warm vs torch.compile':>22s}  what was compiled")
    for name, first, warm, _ in rows:
        ratio = H.fmt_ratio(ref[2], warm) if ref else "-"
        print(f"{name:28s} {first:12.2f} {warm * 1e3:12.1f} {ratio:>22s}  "
              f"{counts.get(name, '')}")
    print("# ratio > 1: faster than torch.compile. ember.compile's llvm and aot_eager "
          "backends still compile the symbolic graph once per length (see docs/design.md, "
          "Symbolic capture)")


main()
