"""Fused attention: Ember's fused kernel vs Ember's decomposition vs PyTorch eager SDPA vs
torch.compile, side by side in one run.

Every side gets the same float32 inputs and thread count; warm-up (and torch.compile's
compilation) excluded; each figure is the median of >= 20 timed runs, in milliseconds.
"fwd+bwd" is the output and the gradients of query, key and value.

    python benchmarks/attention.py [--threads 1] [--runs 20] [--quick]
"""
import _harness

args = _harness.setup(__doc__)

import numpy as np  # noqa: E402

import ember  # noqa: E402
import ember.nn.functional as F  # noqa: E402
from ember.ops import nn_ops  # noqa: E402

torch = _harness.try_torch()

CASES = [  # label, B, H, L, S, E, causal
    ("GPT block 4x8x512, causal", 4, 8, 512, 512, 64, True),
    ("4x8x512, full", 4, 8, 512, 512, 64, False),
    ("1x4x2048, causal", 1, 4, 2048, 2048, 64, True),
    ("1x1 1024 queries x 8192 keys", 1, 1, 1024, 8192, 64, False),
]
QUICK = [("1x2x128, causal", 1, 2, 128, 128, 32, True)]


def sides(B, H, L, S, E, causal, backward):
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal(s).astype(np.float32)
               for s in ((B, H, L, E), (B, H, S, E), (B, H, S, E)))
    g = rng.standard_normal((B, H, L, E)).astype(np.float32)
    eg = ember.from_numpy(g)

    def ember_side(fn):
        ts = [ember.from_numpy(a.copy()).requires_grad_(backward) for a in (q, k, v)]

        def run():
            out = fn(*ts, is_causal=causal)
            if backward:
                for t in ts:
                    t.grad = None
                out.backward(eg)
            return out
        return run

    out = {"ember fused": ember_side(F.scaled_dot_product_attention),
           "ember decomposed": ember_side(lambda *a, **k: nn_ops._sdpa_math(*a, **k))}
    if torch is not None:
        tg = torch.from_numpy(g)

        def torch_side(fn):
            ts = [torch.from_numpy(a.copy()).requires_grad_(backward) for a in (q, k, v)]

            def run():
                o = fn(*ts)
                if backward:
                    for t in ts:
                        t.grad = None
                    o.backward(tg)
                return o
            return run

        def sdpa(q, k, v):
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
        out["torch eager"] = torch_side(sdpa)
        out["torch.compile"] = torch_side(torch.compile(sdpa))
    return out


def main():
    _harness.print_env(args.threads)
    ember.set_num_threads(args.threads)
    runs = 3 if args.quick else args.runs
    names = ["ember fused", "ember decomposed", "torch eager", "torch.compile"]
    print(f"# median of {runs} runs, ms; ratio = ember fused / other")
    print(f"{'case':40s} {'pass':8s}" + "".join(f"{n:>18s}" for n in names) +
          "   fused/decomp  fused/torch  fused/compile")
    for label, B, H, L, S, E, causal in (QUICK if args.quick else CASES):
        for backward in (False, True):
            fns = sides(B, H, L, S, E, causal, backward)
            times = {n: _harness.median_time(f, runs=runs, warmup=2) for n, f in fns.items()}
            row = f"{label:40s} {'fwd+bwd' if backward else 'fwd':8s}"
            row += "".join(f"{times[n] * 1e3:18.2f}" if n in times else f"{'-':>18s}"
                           for n in names)
            f = times["ember fused"]
            row += "".join(f"{_harness.fmt_ratio(f, times.get(n)):>13s}"
                           for n in names[1:])
            print(row, flush=True)


main()
