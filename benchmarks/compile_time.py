"""Compile times, Ember (ember.compile, LLVM backend) beside torch.compile (Inductor), on
the zoo's GPT, MLP and ResNet training steps.

    python benchmarks/compile_time.py [--threads 1] [--quick] [--only gpt,mlp,resnet]
                                      [--ember-only]
    python benchmarks/compile_time.py --pipelines [--threads 1] [--runs 20]

A compile time is the first call's duration minus one eager-speed call (the median of
the eager step after warm-up), in three situations:

  cold          a new process, empty caches (Ember's EMBER_CACHE_DIR and Inductor's
                TORCHINDUCTOR_CACHE_DIR both point at a new empty folder)
  warm, same process   a second identical model (same config and weights) compiled in
                the process that compiled the first
  warm, new process    a new process with the cache the cold run filled (kernels'
                object code and, in the graph cache, the compiled graphs: no AOT
                autograd, lowering or LLVM work)

Each situation runs in its own child process (this script with --child), so imports
and one-time initialisation are paid where a user pays them: in the first call.
Ember's LLVM work runs on every core the process has (config.compile_threads); kernels
run on --threads threads on both sides.

With --pipelines it measures instead the choice of LLVM pipeline (compiler/jit.py): for
the GPT step's distinct kernels, the compile time (one thread, best of 3) and the
kernels' run time within the training step (median of >= 20 interleaved steps, one
graph per pipeline in one process) under default<O2> (the ratios' base), default<O1> and Ember's own.

Workloads: GPT (4 layers, 4 heads, 128 wide, vocabulary 65, 8 x 128 tokens, no dropout),
MLP (256 -> 512 -> 512 -> 10, batch 128) and a ResNet-style CNN (one BasicBlock per
stage, width 16, BatchNorm, 16 x 3 x 32 x 32), each a training step (forward,
cross-entropy, backward) with the module compiled.
"""
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import _harness

ONLY = None
PIPELINES = EMBER_ONLY = False
args = None
if __name__ == "__main__" and not any(a.endswith("child") for a in sys.argv):
    if "--only" in sys.argv:     # ours (kept through _harness.setup's re-execution)
        i = sys.argv.index("--only")
        os.environ["COMPILE_TIME_ONLY"] = sys.argv[i + 1]
        del sys.argv[i:i + 2]
    for flag in ("--pipelines", "--ember-only"):
        if flag in sys.argv:
            sys.argv.remove(flag)
            os.environ["COMPILE_TIME" + flag.upper().replace("-", "_")] = "1"
    args = _harness.setup(__doc__)
    PIPELINES = os.environ.get("COMPILE_TIME__PIPELINES") == "1"
    EMBER_ONLY = os.environ.get("COMPILE_TIME__EMBER_ONLY") == "1"
    ONLY = os.environ.get("COMPILE_TIME_ONLY", "").split(",") if os.environ.get(
        "COMPILE_TIME_ONLY") else None

HERE = os.path.dirname(os.path.abspath(__file__))
WORKLOADS = {"gpt": "GPT training step (4 x 128 wide, 8 x 128 tokens)",
             "mlp": "MLP training step (batch 128)",
             "resnet": "ResNet-style CNN training step (16 x 3 x 32 x 32)"}
AIMS = {"gpt": (2.0, 0.2)}     # Ember's aims: cold, warm in a new process (seconds)


# ------------------------------------------------------------------ child: one process

def build(lib_name, workload, seed):
    """(model, step(model)) for lib "ember" or "torch", weights from seed (same on both)."""
    import numpy as np
    import ember
    from ember import models
    if lib_name == "torch":
        import torch
        sys.path.insert(0, os.path.join(HERE, "..", "tests"))
        import torch_models
        lib, zoo = torch, torch_models
        tensor = torch.from_numpy
    else:
        lib, zoo, tensor = ember, models, ember.from_numpy
    g = np.random.default_rng(0)
    ember.manual_seed(seed)
    if workload == "gpt":
        cfg = dict(vocab_size=65, block_size=128, n_layer=4, n_head=4, n_embd=128, dropout=0.0)
        ref = models.GPT(models.GPTConfig(**cfg))
        model = ref if lib is ember else zoo.GPT(zoo.GPTConfig(**cfg))
        idx = tensor(g.integers(0, 65, (8, 128)))

        def step(m):
            logits = m(idx)
            logits = logits[0] if isinstance(logits, tuple) else logits
            return lib.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, 65),
                                                   idx[:, 1:].reshape(-1))
    elif workload == "mlp":
        ref = models.MLP(256, [512, 512], 10)
        model = ref if lib is ember else zoo.MLP(256, (512, 512), 10)
        x = tensor(g.standard_normal((128, 256)).astype(np.float32))
        y = tensor(g.integers(0, 10, 128))

        def step(m):
            return lib.nn.functional.cross_entropy(m(x), y)
    else:
        ref = models.ResNet((1, 1, 1, 1), width=16)
        model = ref if lib is ember else zoo.ResNet((1, 1, 1, 1), width=16)
        x = tensor(g.standard_normal((16, 3, 32, 32)).astype(np.float32))
        y = tensor(g.integers(0, 10, 16))

        def step(m):
            return lib.nn.functional.cross_entropy(m(x), y)
    if model is not ref:
        model.load_state_dict({k: lib.from_numpy(v.numpy().copy())
                               for k, v in ref.state_dict().items()})

    def train_step(m):
        for p in m.parameters():
            p.grad = None
        loss = step(m)
        loss.backward()
        return loss
    return model, train_step


def timed(fn):
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def child(lib_name, workload, threads, second):
    if lib_name == "torch":
        import torch
        torch.set_num_threads(threads)
        lib = torch
    else:
        import ember
        ember.set_num_threads(threads)
        lib = ember
    model, step = build(lib_name, workload, seed=0)
    for _ in range(2):
        step(model)
    eager = statistics.median(timed(lambda: step(model)) for _ in range(5))
    out = {"eager": eager, "first": timed(lambda: step(lib.compile(model)))}
    if second:
        twin, _ = build(lib_name, workload, seed=0)
        out["second"] = timed(lambda: step(lib.compile(twin)))
    if lib_name == "ember":
        from ember import _C
        from ember.compiler import graph_cache, kernel_cache
        out["llvm_compiled"] = _C._jit_stats()["compiled"]
        out["cache"] = dict(kernel_cache.stats)
        out["graphs"] = dict(graph_cache.stats)
    print(json.dumps(out))


def pipelines(threads, runs):
    """Compile time and kernel run time of the GPT step's kernels by pipeline."""
    import ember
    from ember import _C
    from ember.compiler import backend, jit
    ember.set_num_threads(threads)
    ember.compiler.config.kernel_cache = False
    choices = {"default<O2>": lambda spec: ("default<O2>", jit.CODEGEN_DEFAULT),
               "default<O1>": lambda spec: ("default<O1>", jit.CODEGEN_DEFAULT),
               "ember (jit.options)": jit.options}
    graphs, steps, specs = {}, {}, {}
    for label, choose in choices.items():
        jit.options = choose
        model, step = build("ember", "gpt", seed=0)
        compiled = ember.compile(model)
        n0 = len(backend.recent)
        step(compiled)
        graphs[label] = list(backend.recent)[n0:]
        steps[label] = (lambda s=step, c=compiled: s(c))
        for g in graphs[label]:
            g.start_profile()
            for k in g.lowered.kernels:
                specs.setdefault(repr(k.spec()), k.spec())

    def kernel_seconds(label):
        return sum(sec for g in graphs[label] for s, sec in zip(g.lowered.steps,
                                                                g.run.step_seconds)
                   if s[0] == "kernel")

    per_round = {label: [] for label in choices}
    for _ in range(runs):
        for label in choices:
            before = kernel_seconds(label)
            steps[label]()
            per_round[label].append(kernel_seconds(label) - before)
    print(f"# GPT training step: {len(specs)} distinct kernels; compile time on one "
          f"thread (best of 3), kernel time per step (median of {runs}, {threads} "
          f"thread(s))")
    base = None
    for label, choose in choices.items():
        total = 0.0
        for i, spec in enumerate(specs.values()):
            passes, level = choose(spec)
            best = float("inf")
            for r in range(3):
                t0 = time.thread_time()
                _C._jit_compile((spec,), (f"pipe_{abs(hash(label))}_{i}_{r}",), (passes,),
                                (level,), 1)
                best = min(best, time.thread_time() - t0)
            total += best
        k = statistics.median(per_round[label])
        base = base or (total, k)
        print(f"  {label:<22} compile {total * 1e3:7.0f} ms ({total / base[0]:5.2f}x)   "
              f"kernels {k * 1e3:7.1f} ms per step ({k / base[1]:5.2f}x)")


# ------------------------------------------------------------------ parent

def run_child(lib_name, workload, cache, second):
    env = dict(os.environ, EMBER_CACHE_DIR=cache, TORCHINDUCTOR_CACHE_DIR=cache)
    r = subprocess.run([sys.executable, __file__, "--child", lib_name, workload,
                        str(args.threads), "1" if second else "0"],
                       env=env, capture_output=True, text=True, timeout=3600)
    if r.returncode != 0:
        return {"error": r.stderr.strip().splitlines()[-1] if r.stderr.strip() else "failed"}
    return json.loads(r.stdout.strip().splitlines()[-1])


def main():
    _harness.print_env(args.threads)
    if PIPELINES:
        r = subprocess.run([sys.executable, __file__, "--pipelines-child", str(args.threads),
                            str(args.runs if not args.quick else 5)], timeout=3600)
        sys.exit(r.returncode)
    torch = _harness.try_torch()
    only = ONLY or list(WORKLOADS)
    libs = ["ember"] + (["torch"] if torch is not None and not EMBER_ONLY else [])
    print("# compile time = first call - one eager-speed call, seconds; "
          "Ember compiles on every core")
    print("# load average at the start: %.1f %.1f %.1f (figures are wall times: a loaded "
          "machine inflates them)" % os.getloadavg())
    print(f"{'workload':<52}{'':16}{'cold':>8}{'warm, same':>12}{'warm, new':>11}"
          f"{'eager step':>12}")
    for workload in only:
        for lib_name in libs:
            with tempfile.TemporaryDirectory(prefix="compile-time-") as cache:
                cold = run_child(lib_name, workload, cache, second=True)
                warm = run_child(lib_name, workload, cache, second=False)
            name = "ember.compile" if lib_name == "ember" else "torch.compile"
            title = WORKLOADS[workload] if lib_name == "ember" else ""
            if "error" in cold or "error" in warm:
                print(f"{title:<52}{name:<16} failed: {cold.get('error') or warm.get('error')}")
                continue
            e = cold["eager"]
            c, s, w = cold["first"] - e, cold["second"] - e, warm["first"] - warm["eager"]
            print(f"{title:<52}{name:<16}{c:8.2f}{s:12.2f}{w:11.2f}{e:12.3f}")
            if lib_name == "ember":
                print(f"{'':52}  LLVM compilations: cold {cold['llvm_compiled']}, "
                      f"new process {warm['llvm_compiled']} (disk hits "
                      f"{warm['cache'].get('disk', 0)}); graphs from the graph cache in "
                      f"the new process: {warm['graphs'].get('hits', 0)}")
                if workload in AIMS:
                    aim_cold, aim_warm = AIMS[workload]
                    print(f"{'':52}  aim cold < {aim_cold} s: "
                          f"{'met' if c < aim_cold else 'MISSED'}; aim new process < "
                          f"{aim_warm} s: {'met' if w < aim_warm else 'MISSED'}")
    print("# load average at the end: %.1f %.1f %.1f" % os.getloadavg())


if __name__ == "__main__":
    if "--pipelines-child" in sys.argv:
        i = sys.argv.index("--pipelines-child")
        pipelines(int(sys.argv[i + 1]), int(sys.argv[i + 2]))
    elif "--child" in sys.argv:
        i = sys.argv.index("--child")
        lib_name, workload, threads, second = sys.argv[i + 1:i + 5]
        child(lib_name, workload, int(threads), second == "1")
    else:
        main()
