"""Data-parallel training of the zoo GPT on 1 and 2 ranks of this machine: step time,
scaling, and the fraction of the gradients' all-reduce time hidden behind the backward.

    python benchmarks/distributed.py [--runs 20] [--quick] [--no-torch]

Each configuration is a job of its own: Ember's DDP (eager and under ember.compile) started
with `python -m ember.distributed.run`, and PyTorch's DDP on gloo started with
torch.distributed.run (when torch is installed), on the same model, initial weights,
inputs, per-rank batch and thread count; warm-up excluded, the median of --runs steps
(each step starts after a barrier; rank 0's time). Configurations: 1 rank x 1 thread,
1 rank x 2 threads, 2 ranks x 1 thread (the machine's 2 cores). Per-rank batch is fixed,
so 2 ranks train on twice the tokens per step: scaling = 2 x t(1 rank, 1 thread) /
t(2 ranks). Hidden fraction = 1 - (time the backward's last hook waited for the
all-reduces) / (time of the same all-reduces run alone, blocking); Ember only.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..")


def sizes(quick):
    # (layers, heads, width), batch per rank, sequence
    return ((2, 2, 32), 4, 16) if quick else ((4, 4, 128), 8, 128)


def batch(rank, quick, step):
    import numpy as np
    _, b, seq = sizes(quick)
    g = np.random.default_rng(1000 * step + rank)
    idx = g.integers(0, 65, (b, seq + 1))
    return idx[:, :-1].copy(), idx[:, 1:].copy()


# ----------------------------------------------------------------------------- workers
def ember_worker(opts):
    import ember
    import ember.distributed as dist
    from ember import models
    from ember.nn.parallel import DistributedDataParallel as DDP
    dist.init_process_group("mpi")
    rank, world = dist.get_rank(), dist.get_world_size()
    (layers, heads, width), _, seq = sizes(opts.quick)
    ember.manual_seed(0)
    gpt = models.GPT(models.GPTConfig(vocab_size=65, block_size=seq, n_layer=layers,
                                      n_head=heads, n_embd=width, dropout=0.0))
    ddp = DDP(gpt)
    model = ember.compile(ddp) if opts.worker == "ember-compiled" else ddp
    opt = ember.optim.SGD(model.parameters(), lr=1e-3)
    steps = [batch(rank, opts.quick, s) for s in range(4)]

    def step(k):
        idx, tgt = steps[k % 4]
        opt.zero_grad()
        _, loss = model(ember.from_numpy(idx), ember.from_numpy(tgt))
        loss.backward()
        opt.step()

    times, waits = timed(step, opts.runs, dist.barrier, lambda: ddp.reducer.last_wait)
    # the same all-reduces alone, blocking, on the buckets' buffers
    from mpi4py import MPI
    comm = []
    for k in range(opts.runs):
        dist.barrier()
        t0 = time.perf_counter()
        for b in ddp.reducer.buckets:
            ddp._comm.Allreduce(MPI.IN_PLACE, b.buffer, op=MPI.SUM)
        comm.append(time.perf_counter() - t0)
    report(opts, rank, dict(step=statistics.median(times), wait=statistics.median(waits),
                            comm=statistics.median(comm), buckets=ddp.bucket_count,
                            params=sum(p.numel() for p in gpt.parameters())))


def torch_worker(opts):
    import torch
    import torch.distributed as dist
    sys.path.insert(0, os.path.join(ROOT, "tests"))
    import torch_models
    torch.set_num_threads(opts.threads)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    (layers, heads, width), _, seq = sizes(opts.quick)
    torch.manual_seed(0)
    gpt = torch_models.GPT(torch_models.GPTConfig(vocab_size=65, block_size=seq,
                                                  n_layer=layers, n_head=heads,
                                                  n_embd=width, dropout=0.0))
    model = torch.nn.parallel.DistributedDataParallel(gpt)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    steps = [batch(rank, opts.quick, s) for s in range(4)]

    def step(k):
        idx, tgt = steps[k % 4]
        opt.zero_grad()
        _, loss = model(torch.from_numpy(idx), torch.from_numpy(tgt))
        loss.backward()
        opt.step()

    times, _ = timed(step, opts.runs, dist.barrier, lambda: 0.0)
    report(opts, rank, dict(step=statistics.median(times)))
    dist.destroy_process_group()


def timed(step, runs, barrier, wait):
    for k in range(5):                       # warm-up (and compiles)
        step(k)
    times, waits = [], []
    for k in range(runs):
        barrier()
        t0 = time.perf_counter()
        step(k)
        times.append(time.perf_counter() - t0)
        waits.append(wait())
    return times, waits


def report(opts, rank, result):
    if rank == 0:
        with open(opts.out, "w") as f:
            json.dump(result, f)


# ----------------------------------------------------------------------------- driver
def job(kind, ranks, threads, opts, out):
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS=str(threads),
               MKL_NUM_THREADS=str(threads))
    env["PYTHONPATH"] = os.pathsep.join(
        [os.path.join(ROOT, "python")] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    me = [os.path.abspath(__file__), "--worker", kind, "--threads", str(threads), "--runs",
          str(opts.runs), "--out", out] + (["--quick"] if opts.quick else [])
    if kind == "torch":
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(ranks),
               "--master-port", str(29600 + ranks * 10 + threads)] + me
    else:
        cmd = [sys.executable, "-m", "ember.distributed.run", "--nproc-per-node",
               str(ranks)] + me
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        print(f"# {kind} {ranks}x{threads} failed:\n{p.stderr[-3000:]}", file=sys.stderr)
        return None
    with open(out) as f:
        return json.load(f)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--runs", type=int, default=20)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--no-torch", action="store_true")
    p.add_argument("--worker", default=None)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out", default=None)
    opts = p.parse_args()
    if opts.worker == "torch":
        return torch_worker(opts)
    if opts.worker:
        return ember_worker(opts)
    if opts.runs < 20 and not opts.quick:
        p.error("--runs must be at least 20")
    try:
        import torch  # noqa: F401
        kinds = ["ember", "ember-compiled"] + ([] if opts.no_torch else ["torch"])
    except ImportError:
        kinds = ["ember", "ember-compiled"]
    (layers, heads, width), b, seq = sizes(opts.quick)
    print(f"# zoo GPT {layers} layers x {width} wide, {b} x {seq} tokens per rank, SGD; "
          f"median of {opts.runs} steps; load average {os.getloadavg()[0]:.2f} at start")
    configs = [(1, 1), (1, 2), (2, 1)]
    res = {}
    with tempfile.TemporaryDirectory() as tmp:
        for ranks, threads in configs:
            for kind in kinds:
                res[kind, ranks, threads] = job(kind, ranks, threads, opts,
                                                os.path.join(tmp, f"{kind}{ranks}{threads}"))
    print(f"# load average {os.getloadavg()[0]:.2f} at end")
    print(f"{'ranks x threads':>16} {'library':>15} {'step ms':>9} {'vs torch':>9} "
          f"{'scaling':>8} {'all-reduce ms':>14} {'exposed ms':>11} {'hidden':>7}")
    for ranks, threads in configs:
        for kind in kinds:
            r = res[kind, ranks, threads]
            if r is None:
                print(f"{ranks:>9} x {threads:<5} {kind:>15} failed")
                continue
            t = res.get(("torch", ranks, threads))
            vs = f"{r['step'] / t['step']:8.2f}x" if t and kind != "torch" else f"{'-':>9}"
            one = res.get((kind, 1, 1))
            scale = f"{2 * one['step'] / r['step']:7.2f}x" if ranks == 2 and one else \
                f"{'-':>8}"
            if "comm" in r and ranks > 1:
                hidden = max(0.0, 1 - r["wait"] / r["comm"]) if r["comm"] > 0 else 0.0
                comm = f"{r['comm'] * 1e3:14.2f} {r['wait'] * 1e3:11.2f} {hidden:7.0%}"
            else:
                comm = f"{'-':>14} {'-':>11} {'-':>7}"
            print(f"{ranks:>9} x {threads:<5} {kind:>15} {r['step'] * 1e3:9.2f} {vs} "
                  f"{scale} {comm}")


if __name__ == "__main__":
    main()
