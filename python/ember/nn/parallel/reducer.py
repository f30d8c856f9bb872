"""DDP's gradient reducer: parameters in buckets, each bucket one flat buffer all-reduced
(non-blocking) as soon as all its gradients are ready, from the parameters' gradient
hooks, while the backward goes on.

Ember's engine calls a leaf's hooks once per gradient reaching it (a weight used twice
gets two calls; PyTorch sums them first in AccumulateGrad), then adds the gradient into
.grad. So at each forward the reducer walks the autograd graph from the outputs and
counts, per parameter, the edges reaching it: a parameter is ready when that many
gradients have arrived, a parameter with none is unused (find_unused_parameters). The
hook writes what .grad will hold (the old .grad plus the gradients so far) into the
bucket's slice; the bucket's all-reduce starts when its last parameter is ready and
every earlier bucket has started (all ranks must start them in one order). Each hook
also tests the pending all-reduces, which is what moves them on in Open MPI. The hook of
the last gradient of the step waits for the rest, writes the averages into every .grad
(its own parameter's through the gradient it returns) and ends the step."""
from __future__ import annotations

import time

import numpy as np

from ...autograd.graph import AccumulateGrad

_FIRST_BUCKET_BYTES = 1 << 20        # the first bucket is small, so it starts early


def assign_buckets(params, cap_bytes, first_cap_bytes=_FIRST_BUCKET_BYTES):
    """Lists of parameter indices, last parameter first (gradients come back roughly in
    reverse order of use), split by dtype and by size: the first bucket holds up to
    min(first_cap_bytes, cap_bytes), the others up to cap_bytes."""
    buckets, open_ = [], {}
    for i in reversed(range(len(params))):
        p = params[i]
        dt = p.dtype
        size = p.numel() * p.element_size()
        cur = open_.get(dt)
        limit = min(first_cap_bytes, cap_bytes) if not buckets else cap_bytes
        if cur is None:
            cur = open_[dt] = [[], 0]
        cur[0].append(i)
        cur[1] += size
        if cur[1] >= limit:
            buckets.append(cur[0])
            del open_[dt]
    buckets.extend(c[0] for c in open_.values() if c[0])
    return buckets


class Bucket:
    def __init__(self, index, members, params):
        self.index = index
        self.members = members                      # parameter indices
        dtype = params[members[0]].detach().numpy().dtype
        total = sum(params[i].numel() for i in members)
        self.buffer = np.zeros(total, dtype)
        self.slices = {}
        at = 0
        for i in members:
            n = params[i].numel()
            self.slices[i] = self.buffer[at:at + n].reshape(tuple(params[i].shape))
            at += n
        self.left = 0
        self.work = None


class Reducer:
    def __init__(self, params, comm, world_size, cap_bytes, find_unused):
        from ...distributed.work import progress
        self._progress = progress
        self.params = params
        self.comm = comm
        self.world = world_size
        self.find_unused = find_unused
        self.index = {id(p): i for i, p in enumerate(params)}
        self.buckets = [Bucket(k, m, params) for k, m in
                        enumerate(assign_buckets(params, cap_bytes))]
        self.bucket_of = {i: b for b in self.buckets for i in b.members}
        self.step = None                 # the reduction of the current backward, if any
        self.handles = [p.register_hook(self._hook_for(i)) for i, p in enumerate(params)]
        # timings of the last reduction, for tests and the benchmark
        self.last_ready_times = []       # perf_counter() at each gradient arrival
        self.last_ready_at = {}          # parameter index -> when it became ready
        self.last_works = []             # the buckets' Works, in launch order
        self.last_wait = 0.0             # seconds the last hook waited for all-reduces

    # --- forward side -----------------------------------------------------------------
    def prepare(self, outputs):
        """Called after a forward that will be followed by a synchronised backward."""
        if self.step is not None and self.step.launched:
            raise RuntimeError("DistributedDataParallel: a new forward started while the "
                               "previous backward's gradient reduction was unfinished")
        counts = self._count_edges(outputs)
        used = np.array([counts[i] > 0 for i in range(len(self.params))], np.int32)
        if not self.find_unused and not used.all():
            names = [i for i in range(len(self.params)) if not used[i]]
            raise RuntimeError(
                "DistributedDataParallel: parameters with indices "
                f"{names} were not used in producing the outputs. Enable unused parameter "
                "detection by passing find_unused_parameters=True to "
                "DistributedDataParallel, or make sure all forward outputs take part in "
                "the loss.")
        self.step = _Step(self, counts)
        if self.find_unused:
            from mpi4py import MPI
            self.step.used_local = used
            self.step.used_global = np.zeros_like(used)
            from ...distributed.work import Work
            req = self.comm.Iallreduce(used, self.step.used_global, op=MPI.MAX)
            self.step.used_work = Work([req], None, MPI, keep=(used, self.step.used_global))
            for i in range(len(self.params)):
                if not used[i]:
                    self.step.ready_unused(i)
        if self.step.left == 0:          # nothing requires grad in this graph
            self.step.finish(None)

    def _count_edges(self, outputs):
        counts = [0] * len(self.params)
        seen = set()
        stack = [t.grad_fn for t in outputs if t.grad_fn is not None]
        for t in outputs:
            if t.grad_fn is None and t.requires_grad and id(t) in self.index:
                counts[self.index[id(t)]] += 1
        while stack:
            node = stack.pop()
            if id(node) in seen:
                continue
            seen.add(id(node))
            for fn, _ in node.next_functions:
                if fn is None:
                    continue
                if isinstance(fn, AccumulateGrad):
                    i = self.index.get(id(fn.variable))
                    if i is not None:
                        counts[i] += 1
                elif id(fn) not in seen:
                    stack.append(fn)
        return counts

    # --- backward side ----------------------------------------------------------------
    def _hook_for(self, i):
        def hook(grad):
            step = self.step
            if step is None:
                return None                  # no_sync(), or no forward prepared a step
            return step.gradient(i, grad)
        return hook

    def remove(self):
        for h in self.handles:
            h.remove()


class _Step:
    """One backward's reduction."""

    def __init__(self, reducer, counts):
        self.r = reducer
        self.remaining = list(counts)
        self.started = [False] * len(counts)
        self.left = len(counts)           # parameters not yet ready
        for b in reducer.buckets:
            b.left = len(b.members)
            b.work = None
        self.next_bucket = 0
        self.launched = False
        self.used_work = None            # the all-reduce of the used flags
        reducer.last_ready_times = []
        reducer.last_ready_at = {}
        reducer.last_works = []

    def ready_unused(self, i):
        p = self.r.params[i]
        sl = self.r.bucket_of[i].slices[i]
        if p.grad is not None:
            np.copyto(sl, p.grad.detach().numpy())
        else:
            sl.fill(0)
        self._param_ready(i)

    def gradient(self, i, grad):
        r = self.r
        if self.remaining[i] <= 0:
            raise RuntimeError(
                "DistributedDataParallel: a parameter received more gradients than the "
                "forward's graph gives it (was it used outside the DDP module's forward, "
                "or was backward run twice on one forward?)")
        sl = r.bucket_of[i].slices[i]
        g = grad.detach().numpy()
        if not self.started[i]:
            self.started[i] = True
            p = r.params[i]
            if p.grad is not None:
                np.add(p.grad.detach().numpy(), g, out=sl)
            else:
                np.copyto(sl, g)
        else:
            np.add(sl, g, out=sl)
        self.remaining[i] -= 1
        r.last_ready_times.append(time.perf_counter())
        if self.remaining[i] == 0:
            self._param_ready(i)
        r._progress()
        if self.left == 0:
            return self.finish(i)
        return None

    def _param_ready(self, i):
        self.r.last_ready_at[i] = time.perf_counter()
        b = self.r.bucket_of[i]
        b.left -= 1
        self.left -= 1
        self.launched = True
        buckets = self.r.buckets
        while self.next_bucket < len(buckets) and buckets[self.next_bucket].left == 0:
            self._launch(buckets[self.next_bucket])
            self.next_bucket += 1

    def _launch(self, b):
        from ...distributed.work import Work
        from mpi4py import MPI
        req = self.r.comm.Iallreduce(MPI.IN_PLACE, b.buffer, op=MPI.SUM)
        b.work = Work([req], None, MPI, keep=(b.buffer,))
        self.r.last_works.append(b.work)

    def finish(self, current):
        """All gradients are in: wait for the all-reduces, write the averages into .grad.
        Returns the gradient for parameter `current` (whose hook is running), or None."""
        r = self.r
        t0 = time.perf_counter()
        for b in r.buckets:
            if b.work is not None:
                b.work.wait()
        used = None
        if self.used_work is not None:
            self.used_work.wait()
            used = self.used_global
        r.last_wait = time.perf_counter() - t0
        r.step = None
        out = None
        for i, p in enumerate(r.params):
            sl = r.bucket_of[i].slices[i]
            if i == current:
                p.grad = None                # the engine stores the returned gradient
                out = _tensor(sl / r.world)
                continue
            if used is not None and not used[i] and p.grad is None:
                continue                     # unused on every rank: .grad stays None
            if p.grad is None:
                p.grad = _tensor(sl / r.world)
            else:
                np.divide(sl, r.world, out=p.grad.detach().numpy())
        return out


def _tensor(a):
    from ... import from_numpy
    return from_numpy(np.ascontiguousarray(a))
