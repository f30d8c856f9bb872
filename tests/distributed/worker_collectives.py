"""Worker: every collective on this rank's inputs (inputs(rank) below, which the test
also uses for its NumPy references)."""
import os
import sys

import numpy as np

import ember
import ember.distributed as dist
from launch import save


def inputs(rank, shape=(5, 3), dtype=np.float64):
    rng = np.random.default_rng(100 + rank)
    if np.dtype(dtype).kind == "i":
        return rng.integers(-4, 5, shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


def main(out_dir):
    dist.init_process_group(backend="mpi")
    r, n = dist.get_rank(), dist.get_world_size()
    res = {"rank": r, "world": n, "local_rank": dist.get_local_rank(),
           "env": repr([os.environ.get(k) for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK",
                                                     "LOCAL_WORLD_SIZE", "MASTER_ADDR",
                                                     "MASTER_PORT")])}
    staged0 = dist.collectives.counters["staged"]

    # all_reduce, every op, in place in the tensor's own memory
    for op in ("SUM", "AVG", "MAX", "MIN", "PRODUCT"):
        for dt in (np.float32, np.float64, np.int64):
            t = ember.from_numpy(inputs(r, dtype=dt))
            ptr = t.data_ptr()
            dist.all_reduce(t, op=getattr(dist.ReduceOp, op))
            res[f"all_reduce_{op}_{np.dtype(dt).name}"] = t.numpy()
            res[f"same_memory_{op}_{np.dtype(dt).name}"] = t.data_ptr() == ptr
    res["staged_contiguous"] = dist.collectives.counters["staged"] - staged0

    # a transposed view goes through a staging copy and lands in the view
    base = ember.from_numpy(inputs(r, (3, 5)))
    view = base.t()
    dist.all_reduce(view)
    res["all_reduce_view"] = base.numpy()
    res["staged_view"] = dist.collectives.counters["staged"] - staged0
    bf = ember.from_numpy(inputs(r, dtype=np.float32)).to(ember.bfloat16)
    dist.all_reduce(bf)
    res["all_reduce_bf16"] = bf.float().numpy()

    # async
    t = ember.from_numpy(inputs(r))
    w = dist.all_reduce(t, op=dist.ReduceOp.AVG, async_op=True)
    res["work_type"] = type(w).__name__ == "Work"
    w.wait()
    res["work_done"] = w.is_completed() and w.end_time >= w.start_time
    res["async_avg"] = t.numpy()

    t = ember.from_numpy(inputs(r))
    dist.broadcast(t, src=1)
    res["broadcast"] = t.numpy()
    t = ember.from_numpy(inputs(r))
    dist.broadcast(t, src=n - 1, async_op=True).wait()
    res["broadcast_async"] = t.numpy()

    t = ember.from_numpy(inputs(r))
    dist.reduce(t, dst=n - 1, op=dist.ReduceOp.SUM)
    res["reduce"] = t.numpy()

    parts = [ember.zeros(5, 3, dtype=ember.float64) for _ in range(n)]
    dist.all_gather(parts, ember.from_numpy(inputs(r)))
    res["all_gather"] = np.stack([p.numpy() for p in parts])
    out = ember.zeros(n * 5, 3, dtype=ember.float64)
    ptr = out.data_ptr()
    dist.all_gather_into_tensor(out, ember.from_numpy(inputs(r)))
    res["all_gather_into_tensor"] = out.numpy()
    res["all_gather_into_tensor_same_memory"] = out.data_ptr() == ptr

    for op in ("SUM", "AVG"):
        o = ember.zeros(2, 3, dtype=ember.float64)
        dist.reduce_scatter_tensor(o, ember.from_numpy(inputs(r, (2 * n, 3))),
                                   op=getattr(dist.ReduceOp, op))
        res[f"reduce_scatter_tensor_{op}"] = o.numpy()

    gl = [ember.zeros(5, 3, dtype=ember.float64) for _ in range(n)] if r == 0 else None
    dist.gather(ember.from_numpy(inputs(r)), gl, dst=0)
    if r == 0:
        res["gather"] = np.stack([g.numpy() for g in gl])
    o = ember.zeros(5, 3, dtype=ember.float64)
    sl = [ember.from_numpy(inputs(10 + i)) for i in range(n)] if r == 1 else None
    dist.scatter(o, sl, src=1)
    res["scatter"] = o.numpy()

    # a ring of send/recv, then isend/irecv the other way
    t = ember.from_numpy(inputs(r))
    got = ember.zeros(5, 3, dtype=ember.float64)
    if r % 2 == 0:
        dist.send(t, (r + 1) % n)
        src = dist.recv(got, (r - 1) % n)
    else:
        src = dist.recv(got)
        dist.send(t, (r + 1) % n)
    res["recv"], res["recv_src"] = got.numpy(), src
    got2 = ember.zeros(5, 3, dtype=ember.float64)
    wr = dist.irecv(got2, (r + 1) % n)
    ws = dist.isend(t, (r - 1) % n)
    ws.wait()
    wr.wait()
    res["irecv"] = got2.numpy()

    dist.barrier()
    dist.barrier(async_op=True).wait()

    g = dist.new_group([0, 1])
    t = ember.from_numpy(inputs(r))
    if r in (0, 1):
        dist.all_reduce(t, group=g)
        res["group_rank"] = dist.get_rank(g)
        res["group_size"] = dist.get_world_size(g)
    else:
        res["group_rank"] = dist.get_rank(g)
    res["group_all_reduce"] = t.numpy()

    objs = [None, None] if r else [{"lr": 0.1, "name": "x"}, [1, 2, 3]]
    dist.broadcast_object_list(objs, src=0)
    res["broadcast_object"] = repr(objs)
    gathered = [None] * n
    dist.all_gather_object(gathered, {"rank": r})
    res["all_gather_object"] = repr(gathered)

    save(out_dir, r, res)
    dist.destroy_process_group()
    assert not dist.is_initialized()


if __name__ == "__main__":
    main(sys.argv[1])
