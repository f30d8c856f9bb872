"""Worker: DDP training (SGD and AdamW, five steps, each rank on its share of the batch
picked by DistributedSampler), no_sync accumulation, overlap timings, unused
parameters, buffer broadcast, state_dict keys. Argument: "eager" or "compiled"."""
import sys

import numpy as np

import ember
import ember.distributed as dist
import ember.nn as nn
from ember.nn.parallel import DistributedDataParallel as DDP
from ember.utils.data.distributed import DistributedSampler

from ddp_common import BATCH_PER_RANK, Deep, Net, data, optimizer, params_of, train
from launch import save


def ddp_model(seed, mode, **kw):
    ember.manual_seed(seed)                 # different on every rank: DDP broadcasts rank 0's
    model = DDP(Net().double(), **kw)
    return ember.compile(model, backend="aot_eager") if mode == "compiled" else model


def main(out_dir, mode):
    dist.init_process_group("mpi")
    r, n = dist.get_rank(), dist.get_world_size()
    res = {}
    sampler = DistributedSampler(range(n * BATCH_PER_RANK), shuffle=False)
    rows = np.array(list(sampler))
    for name in ("sgd", "adamw"):
        model = ddp_model(10 + r, mode, bucket_cap_mb=0.001)
        inner = model.module if mode == "eager" else model._orig_mod.module
        for k, v in params_of(inner).items():
            res[f"init_{name}_{k}"] = v
        opt = optimizer(name, model.parameters())
        train(model, opt, n, lambda step: rows)
        for k, v in params_of(inner).items():
            res[f"{name}_{k}"] = v
        if mode == "compiled":               # the same training, uncompiled, to compare
            same = ddp_model(10 + r, "eager", bucket_cap_mb=0.001)
            train(same, optimizer(name, same.parameters()), n, lambda step: rows)
            for k, v in params_of(same.module).items():
                res[f"eager_{name}_{k}"] = v
    ddp = model if mode == "eager" else model._orig_mod
    res["bucket_count"] = ddp.bucket_count

    if mode == "compiled":
        from ember.nn.parallel import compiled
        res["pieces"] = len(compiled.last_split)

    # the first bucket's all-reduce starts before the last bucket's gradients exist
    ember.manual_seed(r)
    deep = DDP(Deep().double(), bucket_cap_mb=0.004)
    run = ember.compile(deep, backend="aot_eager") if mode == "compiled" else deep
    x = ember.from_numpy(np.random.default_rng(r).standard_normal((8, 24)))
    for _ in range(2):
        run(x).sum().backward()
    red = deep.reducer
    res["deep_buckets"] = deep.bucket_count
    res["works"] = len(red.last_works)
    res["first_start"] = red.last_works[0].start_time
    res["first_end"] = red.last_works[0].end_time
    res["last_bucket_first_ready"] = min(red.last_ready_at[i] for i in red.buckets[-1].members)
    res["last_ready"] = max(red.last_ready_at.values())
    if mode == "compiled":
        res["deep_pieces"] = len(compiled.last_split)

    # no_sync: two micro-batches accumulate locally, the second backward averages the sum
    model = ddp_model(20 + r, mode)
    inner = model.module if mode == "eager" else model._orig_mod.module
    ddp = model if mode == "eager" else model._orig_mod
    for k, v in params_of(inner).items():
        res[f"init_nosync_{k}"] = v
    with ddp.no_sync():
        x, y = data(n, 0)
        ((model(ember.from_numpy(x[rows])) - ember.from_numpy(y[rows])) ** 2).mean().backward()
    res["nosync_local_grad"] = inner.l1.weight.grad.numpy().copy()
    x, y = data(n, 1)
    ((model(ember.from_numpy(x[rows])) - ember.from_numpy(y[rows])) ** 2).mean().backward()
    for k, p in inner.named_parameters():
        res[f"nosync_grad_{k}"] = p.grad.numpy().copy()

    if mode == "eager":
        extras(r, n, res)
    save(out_dir, r, res)


class Branchy(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(3, 2)
        self.unused = nn.Linear(3, 2)
        self.only0 = nn.Linear(3, 2)
        self.register_buffer("count", ember.zeros(2, dtype=ember.float64))

    def forward(self, x, use):
        h = self.a(x)
        return h + self.only0(x) if use else h


def branch_input(rank):
    return np.random.default_rng(50 + rank).standard_normal((4, 3))


def extras(r, n, res):
    # find_unused_parameters: 'unused' is unused everywhere, 'only0' used on rank 0 only
    ember.manual_seed(r)
    m = DDP(Branchy().double(), find_unused_parameters=True)
    m(ember.from_numpy(branch_input(r)), use=(r == 0)).sum().backward()
    res["unused_a_grad"] = m.module.a.weight.grad.numpy()
    res["unused_only0_grad"] = m.module.only0.weight.grad.numpy()
    res["unused_unused_grad_is_none"] = m.module.unused.weight.grad is None
    try:
        m2 = DDP(Branchy().double())
        m2(ember.from_numpy(branch_input(r)), use=True)
        res["unused_error"] = ""
    except RuntimeError as e:
        res["unused_error"] = str(e)

    # broadcast_buffers: rank 0's buffers at every forward (or not)
    for flag in (True, False):
        m = DDP(Branchy().double(), broadcast_buffers=flag, find_unused_parameters=True)
        with ember.no_grad():
            m.module.count.fill_(r + 5.0)
        m(ember.from_numpy(branch_input(r)), use=False)
        res[f"buffer_after_forward_{flag}"] = m.module.count.numpy().copy()

    res["state_dict_keys"] = repr(list(m.state_dict().keys()))
    res["inner_state_dict_keys"] = repr(list(m.module.state_dict().keys()))
    res["module_is_inner"] = isinstance(m.module, Branchy)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
