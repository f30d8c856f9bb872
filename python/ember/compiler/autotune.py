"""mode="max-autotune": each compiled graph's schedule chosen by timing it.

On a graph's first call (before the call itself runs) the tuner times candidate
schedules of its steps on that call's inputs (copies of them: nothing the caller sees
changes, and the random generator's state is put back), picks per step the fastest,
and sets it on the runtime graph (_C.CompiledGraph.set_step). Candidates:

- a parallel kernel step: its chunk size (the plan's, one chunk per thread, four per
  thread, four times coarser, four times finer) and running on one thread; the code
  of its kernel built with another pipeline (no interleaving: one vector per
  iteration; none: scalar code), which changes the effective vector width;
- a kernel step on one thread: the pipelines only;
- a matrix product, with more than one thread: as the runtime decides, split across
  Ember's pool (one single-threaded BLAS call per block of rows or batch matrix), or
  one single-threaded BLAS call (never BLAS's own threads: beside the pool's spinning
  workers they oversubscribe the cores, which a loaded machine punishes by 10-50x).

No candidate changes a result's values beyond the reassociation of a vectorised
reduction: steps split dim 0 only, never a reduction (a step accumulating along dim 0
is never parallel and stays so).

Rounds: round r runs every step with its r-th candidate (or its first when it has
fewer), `reps` calls after a warm-up, each step timed by the runtime's profile; a
step's pick is its candidate of least median time, the plan's own unless another is
faster by more than MARGIN (ties: the earlier). Steps whose plan schedule takes under
MIN_SECONDS are not tuned. The picks are then timed again, alternating with the
plan's schedule (CONFIRM times each, in ABBA order): a pick that no longer wins by
MARGIN is dropped, and the picks kept are dropped too if the whole graph is not at
least as fast with them (a noisy machine makes no graph slower than the default). The
timer is injectable (tests): timer(graph, args,
schedule) -> one call's per-step seconds.

The picks are cached on disk (`config.cache_dir`/autotune/, the kernel cache's rules:
written atomically, read only from a folder of this user nobody else can write, an
unsound entry ignored and tuned again), keyed by the kernel cache's context, the
graph's plan (its kernels' keys, steps, inputs) and the thread count: a new process
applies them with no timing (the variant kernels come from the kernel cache).
`stats` counts tuned graphs, disk hits, timed calls and steps changed.
"""
from __future__ import annotations

import collections
import hashlib
import json
import statistics
from typing import NamedTuple

from .. import _C
from ..capture.config import config
from . import jit, kernel_cache
from .plan import KernelStep, MatmulStep

FORMAT = b"EMBERAT1"
SUFFIX = ".json"
MARGIN = 0.03
MIN_SECONDS = 20e-6
REPS = 5
CONFIRM = 4

# the pipeline variants a kernel may be built with (name -> new pass manager pipeline)
PIPELINES = {
    "lean": jit.LEAN,
    "no-interleave": jit.LEAN.replace("loop-vectorize", "loop-vectorize<interleave-forced-only>"),
    "scalar": jit.LEAN.replace("loop-vectorize", "loop-vectorize<vectorize-forced-only>"),
}
HOWS = (0, 1, 2)        # matmul: as the runtime decides, over the pool, one call on one thread

stats = collections.Counter()


class Choice(NamedTuple):
    """A step's schedule: kernel steps (parallel, chunk, pipeline name); matmul how."""
    parallel: bool = False
    chunk: int = 0
    pipeline: str = "lean"
    how: int = 0


def _threads():
    return _C.get_num_threads()


def candidates(step, threads):
    """The choices to time for a step, the plan's own first."""
    if isinstance(step, KernelStep):
        chunk0 = step.chunk if step.chunk > 0 else max(step.outer, 1)
        base = Choice(bool(step.parallel), chunk0)
        out = [base]
        if step.parallel and threads > 1 and step.outer > 1:
            n = step.outer
            for c in (-(-n // threads), -(-n // (4 * threads)), chunk0 * 4, chunk0 // 4):
                c = max(1, min(n, c))
                out.append(Choice(True, c))
            out.append(Choice(False, chunk0))
        out += [base._replace(pipeline=p) for p in PIPELINES if p != "lean"]
        return list(dict.fromkeys(out))
    if isinstance(step, MatmulStep):
        if threads < 2:
            return [Choice()]
        return [Choice(how=h) for h in HOWS]
    return []


def profile_timer(graph, args, schedule):
    """One call's per-step seconds, from the runtime's profile."""
    graph.profile = True
    graph(*args)
    secs = graph.step_seconds
    graph.profile = False
    return secs


class Tuner:
    """The tune hook of one runtime graph (CompiledGraph.tune): called once, with the
    graph and the first call's arguments."""

    def __init__(self, module, plan, name, timer=None, reps=REPS):
        self.module = module
        self.plan = plan
        self.name = name
        self.timer = timer or profile_timer
        self.reps = reps
        self.picks = None          # {step index: Choice} once tuned or loaded
        self._variants = {}        # (kernel index, pipeline) -> JitKernel

    # ------------------------------------------------------------ keys and cache

    def key(self):
        context = kernel_cache.context()
        if context is None:
            return None
        inputs, buffers, steps, outputs = self.plan
        kkeys = [kernel_cache.key(s, o) for s, o in zip(self.module.specs, self.module.options)] \
            if self.module is not None else []
        rows = []
        for s in steps:
            if isinstance(s, KernelStep):
                rows.append(["k", kkeys[s.kernel], s.outer, bool(s.parallel), s.chunk])
            elif isinstance(s, MatmulStep):
                # epilogues by their kernels' keys (a plan from the graph cache has
                # no loop IR to print)
                rows.append(["m", str(s._replace(epilogues=())), buffers[s.out].dtype._name,
                             [kkeys[e.kernel] for e in s.epilogues]])
            else:
                rows.append(["e", s.kind, s.name])
        text = json.dumps([FORMAT.decode(), _threads(), [[list(i.sizes), list(i.strides)]
                                                         for i in inputs], rows])
        h = hashlib.blake2b(context, digest_size=20)
        h.update(text.encode())
        return h.hexdigest()

    def _load(self, k):
        path = kernel_cache.folder("autotune")
        if path is None or k is None:
            return None
        data = kernel_cache.read(path, k, SUFFIX, FORMAT, stats)
        if data is None:
            return None
        try:
            picks = {}
            steps = self.plan[2]
            for i, parallel, chunk, pipeline, how in json.loads(data):
                i, chunk, how = int(i), int(chunk), int(how)
                if not 0 <= i < len(steps) or pipeline not in PIPELINES or how not in HOWS \
                        or chunk < 0 or (parallel and not getattr(steps[i], "parallel", False)):
                    raise ValueError("an unsound pick")
                picks[i] = Choice(bool(parallel), chunk, str(pipeline), how)
            return picks
        except (ValueError, TypeError):
            stats["rejected"] += 1
            return None

    def _store(self, k, picks):
        path = kernel_cache.folder("autotune")
        if path is None or k is None:
            return
        data = json.dumps([[i, c.parallel, c.chunk, c.pipeline, c.how]
                           for i, c in sorted(picks.items())]).encode()
        kernel_cache.write(path, k, data, SUFFIX, FORMAT, stats)

    # ------------------------------------------------------------ applying choices

    def _build_variants(self, wanted):
        """Compiles (or finds) the kernels of (kernel index, pipeline) pairs."""
        todo = [w for w in dict.fromkeys(wanted) if w[1] != "lean" and w not in self._variants]
        if not todo:
            return
        specs = [self.module.specs[k] for k, _ in todo]
        options = [(PIPELINES[p], jit.options(s)[1]) for (_, p), s in zip(todo, specs)]
        for w, kern in zip(todo, kernel_cache.kernels(specs, options)):
            self._variants[w] = kern

    def apply(self, graph, i, choice):
        step = self.plan[2][i]
        if isinstance(step, KernelStep):
            if choice.pipeline == "lean":
                kern = None
                address = self.module.addresses[step.kernel]
            else:
                kern = self._variants[(step.kernel, choice.pipeline)]
                address = kern.address
            graph.set_step(i, choice.parallel, max(choice.chunk, 1), address, 0, kern)
        elif isinstance(step, MatmulStep):
            graph.set_step(i, False, 1, None, choice.how, None)

    # ------------------------------------------------------------ tuning

    def __call__(self, graph, *args):
        # the first call runs while the frame hook is on: the tuner's own code is not
        # to be captured
        from ..capture import _hook
        if _hook.available:
            with _hook.disable():
                return self._tune_or_load(graph, args)
        return self._tune_or_load(graph, args)

    def _tune_or_load(self, graph, args):
        k = self.key()
        picks = self._load(k)
        if picks is not None:
            stats["disk"] += 1
        else:
            picks = self.tune(graph, args)
            self._store(k, picks)
        self._build_variants([(self.plan[2][i].kernel, c.pipeline) for i, c in picks.items()
                              if isinstance(self.plan[2][i], KernelStep)])
        for i, c in picks.items():
            self.apply(graph, i, c)
        self.picks = picks
        stats["steps_changed"] += len(picks)

    def tune(self, graph, args):
        """{step index: Choice} for the steps whose pick is not the plan's own."""
        stats["tuned"] += 1
        threads = _threads()
        steps = self.plan[2]
        cands = {i: candidates(s, threads) for i, s in enumerate(steps)}
        cands = {i: c for i, c in cands.items() if len(c) > 1}
        if not cands:
            return {}
        targs = tuple(_copy(a) for a in args)
        from .. import random as _random
        rng = _random.get_rng_state()
        try:
            base = self._measure(graph, targs, {})
            cands = {i: c for i, c in cands.items() if base[i] >= MIN_SECONDS}
            times = {i: [base[i]] for i in cands}
            rounds = max((len(c) for c in cands.values()), default=1)
            self._build_variants([(steps[i].kernel, c.pipeline) for i, cs in cands.items()
                                  for c in cs if isinstance(steps[i], KernelStep)])
            for r in range(1, rounds):
                schedule = {i: cs[r] for i, cs in cands.items() if r < len(cs)}
                for i, c in schedule.items():
                    self.apply(graph, i, c)
                secs = self._measure(graph, targs, schedule)
                for i in schedule:
                    times[i].append(secs[i])
                for i in schedule:                 # back to the plan's own
                    self.apply(graph, i, cands[i][0])
            picks = pick(cands, times)
            if picks:
                picks = self._confirm(graph, targs, cands, picks)
        finally:
            _random.set_rng_state(rng)
        return picks

    def _confirm(self, graph, args, cands, picks):
        """The picks measured again against the plan's own schedule, in alternation
        (own, picked, picked, own, ...: CONFIRM of each): a step keeps its pick only if
        it still wins by MARGIN, and the kept picks together only if the whole graph
        (every step: a step on one thread lets the pool's workers fall asleep before
        the next step, say) is then no slower than with the plan's schedule."""
        def alternate(chosen):
            own, new = collections.defaultdict(list), collections.defaultdict(list)
            for rep in range(CONFIRM):
                for picked in ((False, True) if rep % 2 == 0 else (True, False)):
                    for i in chosen:
                        self.apply(graph, i, chosen[i] if picked else cands[i][0])
                    secs = self._measure(graph, args, chosen if picked else {})
                    side = new if picked else own
                    for i in chosen:
                        side[i].append(secs[i])
                    side["total"].append(sum(secs))
            for i in chosen:
                self.apply(graph, i, cands[i][0])
            return own, new

        own, new = alternate(picks)
        kept = {i: c for i, c in picks.items()
                if statistics.median(new[i]) < statistics.median(own[i]) * (1 - MARGIN)}
        if not kept:
            return kept
        if kept != picks:
            own, new = alternate(kept)
        if statistics.median(new["total"]) > statistics.median(own["total"]):
            stats["whole_graph_rejected"] += 1
            return {}
        return kept

    def _measure(self, graph, args, schedule):
        """Per step, the median of reps calls' seconds (after a warm-up call)."""
        self.timer(graph, args, schedule)
        calls = [self.timer(graph, args, schedule) for _ in range(self.reps)]
        stats["timed_calls"] += self.reps + 1
        return [statistics.median(c[i] for c in calls) for i in range(len(calls[0]))]


def pick(cands, times):
    """{step: Choice} where a candidate beats the plan's own (index 0) by more than
    MARGIN; the fastest, the earliest of equals."""
    picks = {}
    for i, cs in cands.items():
        ts = times[i]
        best = min(range(len(ts)), key=lambda r: (ts[r], r))
        if best != 0 and ts[best] < ts[0] * (1 - MARGIN):
            picks[i] = cs[best]
    return picks


def _copy(a):
    if isinstance(a, _C.Tensor):
        with _no_grad():
            return a.detach().clone()
    return a


def _no_grad():
    from ..autograd import no_grad
    return no_grad()


def install(run, module, plan, name, timer=None):
    """Makes the runtime graph run tune its schedule on its first call."""
    if any(isinstance(s, (KernelStep, MatmulStep)) for s in plan[2]):
        run.tune = Tuner(module, plan, name, timer)
    return run
