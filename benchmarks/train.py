"""Training-step memory, side by side in one run: the bytes a compiled forward saves for
its backward and the peak resident memory of a training step, for Ember eager,
ember.compile (aot_eager and llvm; AOT autograd's min-cut partitioner, and aot_eager
with every read value saved; and llvm over the whole step, zero_grad to SGD's step), PyTorch eager and torch.compile (Inductor, its min-cut
partitioner), on the zoo's ResNet, GPT and BERT (same layouts, float32).

    python benchmarks/train.py [--threads 1] [--quick]

Each configuration runs in its own subprocess: a first training step (forward, loss,
backward, SGD; it compiles), then a few more. Peak RSS is the process's high-water mark
(ru_maxrss); step peak is the high-water mark of the later steps (reset through
/proc/self/clear_refs) over the RSS before them, the training step's own memory. Saved bytes: what
the compiled forwards return for their backward (every saved tensor, parameters
included); Ember from counters["aot_saved_bytes"], torch.compile by wrapping the
partitioner Inductor calls. Eager columns have no saved bytes to report ("-").
"torch aot min-cut" is AOT autograd with torch's min_cut_rematerialization_partition and
eager graphs, the reference for saved bytes (Inductor crashed on the ResNet on the
machine this was written on; its row then says "failed").
"""
import _harness

args = _harness.setup(__doc__)

import json  # noqa: E402
import os  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
CONFIGS = [("ember eager", "ember", None), ("ember aot_eager", "ember", "aot_eager"),
           ("ember aot_eager save_all", "ember", "aot_eager:save_all"),
           ("ember llvm", "ember", "llvm"), ("ember llvm whole step", "ember", "llvm:whole"),
           ("torch eager", "torch", None),
           ("torch aot min-cut", "torch", "aot_min_cut"),
           ("torch.compile", "torch", "inductor")]
MODELS = ("resnet", "gpt", "bert")


def _sizes(quick):
    if quick:
        return dict(batch=2, image=16, width=4, seq=16, embd=16, layers=1)
    return dict(batch=8, image=32, width=16, seq=64, embd=64, layers=2)


def _build(lib, name, s):
    """(model, inputs, loss(model, *inputs)) for ember or torch."""
    import numpy as np
    g = np.random.default_rng(0)
    if lib == "torch":
        import torch
        sys.path.insert(0, os.path.join(HERE, "..", "tests"))
        import torch_models as M
        t = torch.from_numpy
        F = torch.nn.functional
    else:
        import ember
        from ember import models as M
        t = ember.from_numpy
        F = ember.nn.functional
    if name == "resnet":
        model = M.ResNet((1, 1, 1, 1), s["width"], 10, 3, s["image"])
        x = g.standard_normal((s["batch"], 3, s["image"], s["image"])).astype(np.float32)
        y = g.integers(0, 10, s["batch"])
        return model, [t(x), t(y)], lambda m, a, b: F.cross_entropy(m(a), b)
    ids = g.integers(1, 100, (s["batch"], s["seq"]))
    labels = g.integers(0, 100, (s["batch"], s["seq"]))
    if name == "gpt":
        model = M.GPT(M.GPTConfig(vocab_size=100, block_size=s["seq"], n_layer=s["layers"],
                                  n_head=2, n_embd=s["embd"], dropout=0.0))
        return model, [t(ids), t(labels)], lambda m, a, b: m(a, b)[1]
    model = M.BertForMaskedLM(M.BertConfig(vocab_size=100, hidden_size=s["embd"],
                                           num_layers=s["layers"], num_heads=2,
                                           intermediate_size=4 * s["embd"],
                                           max_position=s["seq"], dropout=0.0))
    return model, [t(ids), t(labels)], lambda m, a, b: m(a, None, None, b)[1]


def _counting(torch, inner, total):
    """A partitioner calling inner, adding up the bytes its forwards save."""
    def partition(joint, joint_inputs, **kw):
        fw, bw = inner(joint, joint_inputs, **kw)
        out = next(n for n in fw.graph.nodes if n.op == "output")
        for n in out.args[0][kw["num_fwd_outputs"]:]:
            v = n.meta.get("val")
            if isinstance(v, torch.Tensor):
                total[0] += v.numel() * v.element_size()
        return fw, bw
    return partition


def _torch_backend(torch, backend, total):
    """inductor with its partitioner counted, or "aot_min_cut": AOT autograd with
    torch's min-cut partitioner and eager graphs (no Inductor)."""
    import torch._functorch.config
    import torch._inductor.config
    from torch._functorch import partitioners
    # no cache: a cached graph is not partitioned again, so nothing would be counted
    torch._inductor.config.fx_graph_cache = False
    torch._functorch.config.enable_autograd_cache = False
    if backend == "inductor":
        from torch._inductor import compile_fx
        compile_fx.min_cut_rematerialization_partition = _counting(
            torch, compile_fx.min_cut_rematerialization_partition, total)
        return "inductor"
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd
    return aot_autograd(fw_compiler=lambda gm, ex: make_boxed_func(gm),
                        partition_fn=_counting(
                            torch, partitioners.min_cut_rematerialization_partition, total))


def child(lib, name, backend, quick):
    import resource
    s = _sizes(quick)
    model, inputs, loss_fn = _build(lib, name, s)
    saved = [None]
    whole = False
    if lib == "torch":
        import torch
        torch.set_num_threads(args.threads)
        run = model
        if backend:
            saved[0] = 0
            step_fn = torch.compile(lambda *a: loss_fn(model, *a),
                                    backend=_torch_backend(torch, backend, saved))
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
    else:
        import ember
        from ember.capture import counters
        ember.set_num_threads(args.threads)
        if backend and backend.endswith(":save_all"):
            ember.compiler.config.partitioner = "save_all"
            backend = backend.split(":")[0]
        whole = bool(backend) and backend.endswith(":whole")
        if whole:
            backend = backend.split(":")[0]
        if backend and not whole:
            step_fn = ember.compile(lambda *a: loss_fn(model, *a), backend=backend)
        opt = ember.optim.SGD(model.parameters(), lr=0.01)
    model.train()
    if not backend or whole:
        def step_fn(*a):
            return loss_fn(run if lib == "torch" else model, *a)

    def step():
        opt.zero_grad()
        loss = step_fn(*inputs)
        loss.backward()
        opt.step()
        return loss
    if whole:                      # zero_grad, forward, loss, backward and SGD compiled
        step = ember.compile(step, backend=backend)
    step()                         # compiles
    if lib == "ember" and backend:
        saved[0] = sum(counters["aot_saved_bytes"].values())
    # the steady state: RSS before the next steps, then their high-water mark (the
    # kernel's peak is reset first: clear_refs 5)
    base = _status_kb("VmRSS")
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    for _ in range(2 if quick else 5):
        loss = step()
    step_peak = _status_kb("VmHWM") - base
    peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"saved": saved[0], "peak_mb": peak_kb / 1024,
                      "step_mb": step_peak / 1024, "loss": float(loss.item())}))


def _status_kb(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")


def main():
    _harness.print_env(args.threads)
    torch = _harness.try_torch()
    print("# saved: bytes the compiled forward(s) save for the backward (vs aot: over torch "
          "aot min-cut's);\n# peak RSS: the process's high-water mark (MB), imports and "
          "compiling included;\n# step peak: after a first (compiling) step, the "
          "high-water mark of the next steps over the RSS before them (MB)")
    width = max(len(c[0]) for c in CONFIGS)
    for name in MODELS:
        print(f"\n{name} training step")
        print(f"  {'configuration':<{width}}  {'saved bytes':>12}  {'vs aot':>8}  "
              f"{'peak RSS MB':>11}  {'step peak MB':>12}")
        rows = []
        for label, lib, backend in CONFIGS:
            if lib == "torch" and torch is None:
                rows.append((label, None, None, None))
                continue
            cmd = [sys.executable, os.path.abspath(__file__), "--threads", str(args.threads),
                   *(["--quick"] if args.quick else [])]
            env = dict(os.environ, EMBER_TRAIN_CHILD=json.dumps([lib, name, backend]))
            proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1800)
            if proc.returncode != 0:
                print(f"  {label}: failed\n{proc.stderr[-2000:]}", file=sys.stderr)
                rows.append((label, None, None, None))
                continue
            r = json.loads(proc.stdout.strip().splitlines()[-1])
            rows.append((label, r["saved"], r["peak_mb"], r["step_mb"]))
        theirs = next((r[1] for r in rows if r[0] == "torch aot min-cut"), None)
        for label, saved, peak, step in rows:
            ratio = f"{saved / theirs:7.2f}x" if saved and theirs else "-"
            peak = "-" if peak is None else f"{peak:.1f}"
            step = "-" if step is None else f"{step:.1f}"
            print(f"  {label:<{width}}  {saved if saved is not None else '-':>12}  "
                  f"{ratio:>8}  {peak:>11}  {step:>12}")


if __name__ == "__main__":
    spec = os.environ.pop("EMBER_TRAIN_CHILD", None)
    if spec:
        child(*json.loads(spec), args.quick)
    else:
        main()
