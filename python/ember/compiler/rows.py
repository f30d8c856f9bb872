"""Row kernels: consecutive kernels over one domain merged into one kernel of phases.

A softmax or a layer_norm lowers to kernels that each read the whole input: a reduce
kernel per statistic (max, then the sum of exponentials; mean, then variance) and a
pointwise kernel for the result, each reading the rows again from memory. `merge` joins
a run of consecutive kernel steps over the same domain, with the same reduced dims, into
one kernel whose reduced dims' loops run once per phase at each point of the kept dims
(`phase` in the loop IR): the row is read from memory by the first phase and from cache
by the others, and threads split the rows in the plan's fixed chunks as before (so
results are identical run to run and at any thread count: each row is computed by the
same code whichever thread runs it).

Kernels join a run when the result is the same as running them one after the other:
each reads what an earlier one of the run wrote only where the same point wrote it (a
reduction's result at its own index, a stored element at its own index), writes no
buffer an earlier one reads or writes, and accumulates nothing (an accumulate folds
other rows into an element). Rows of more than ROW_MAX_POINTS points would not stay in
cache between phases, and a kernel reducing every dim has no rows to split: neither
joins.

Then `reuse` saves recomputing an expensive value (one computing a transcendental) that
a reducing phase folds and a later phase computes again, as softmax's exp(x - max)
(summed, then divided by the sum): when the later phase stores into a buffer of that
value's dtype at one index, the reducing phase stores the value there too and the later
phase loads it back from cache, where its own store then overwrites it.
"""
from __future__ import annotations

from dataclasses import replace

from . import fusion
from .loop_ir import Form, Kernel, Op, Param, Stmt, verify
from .plan import KernelStep, StepKind
from .symbolic import any_symbolic, same_sizes

ROW_MAX_POINTS = 1 << 16      # a row of float32 in 256 KB: it stays in L2 between phases
MIN_ROWS = 8
LOOKAHEAD = 16              # kernel steps a run may step over
ENABLED = True                # tests turn it off to compare

# instructions worth storing a value rather than computing it again
_COSTLY = frozenset({Op.EXP, Op.LOG, Op.TANH, Op.SIN, Op.COS, Op.ERF, Op.ERFC, Op.EXPM1,
                     Op.LOG1P, Op.POW, Op.CALL, Op.RAND, Op.RANDN})


def _rows_of(k):
    """The kernel's (kept dims, points per row), or None if it cannot join a run."""
    if any(s.op in (Op.ACCUMULATE, Op.PHASE, Op.GATHER, Op.SCATTER) for s in k.stmts) or \
            0 in k.sizes:
        return None
    return k.nreduce


def _writes(k):
    """ref -> the indices k stores or reduces into it."""
    out = {}
    for s in k.stmts:
        if s.op.form in (Form.STORE, Form.FOLD, Form.SCATTER):
            out.setdefault(k.params[s.param].ref, set()).add(s.index)
    return out


def _joins(run, nreduce, k):
    """Whether kernel k can join the run (a list of kernels) as its next phase."""
    first = run[0]
    if not same_sizes(k.sizes, first.sizes) or _rows_of(k) is None:
        return False
    if k.nreduce and nreduce and k.nreduce != nreduce:
        return False
    written, read = {}, set()
    for j in run:
        for ref, idx in _writes(j).items():
            written.setdefault(ref, set()).update(idx)
        read.update(j.params[s.param].ref for s in j.stmts if s.op is Op.LOAD)
    for s in k.stmts:
        ref = None if s.param is None else k.params[s.param].ref
        if s.op is Op.LOAD and ref in written and s.index not in written[ref]:
            return False
        if s.op.form in (Form.STORE, Form.FOLD) and (ref in read or ref in written):
            return False
    return True


def _worth(run, nreduce):
    if len(run) < 2 or not nreduce:
        return False
    sizes = run[0].sizes
    kept = len(sizes) - nreduce
    row = 1
    for n in sizes[kept:]:
        row *= n
    rows = 1
    for n in sizes[:kept]:
        rows *= n
    if any_symbolic(sizes):
        # symbolic sizes ([dynamic]): one row kernel at every size (the limits are for
        # speed; a row kernel computes what the separate kernels do at any size)
        return kept >= 1
    return kept >= 1 and row <= ROW_MAX_POINTS and rows >= MIN_ROWS


def join(run, nreduce, name):
    """One kernel running the kernels of run as its phases, in order."""
    params, where = [], {}
    stmts, base = [], 0
    for i, k in enumerate(run):
        pmap = {}
        for j, p in enumerate(k.params):
            if p.ref not in where:
                where[p.ref] = len(params)
                params.append(Param(p.ref, p.dtype, p.extent))
            else:
                q = params[where[p.ref]]
                q.extent = max(q.extent, p.extent)
            pmap[j] = where[p.ref]
        if i:
            stmts.append(Stmt(Op.PHASE))
        top = base
        for s in k.stmts:
            dst = None if s.dst is None else s.dst + base
            if dst is not None:
                top = max(top, dst + 1)
            stmts.append(replace(s, dst=dst, args=tuple(a + base for a in s.args),
                                 param=None if s.param is None else pmap[s.param]))
        base = top
    return verify(Kernel(name, tuple(run[0].sizes), nreduce, params, _dense(stmts)))


def _dense(stmts):
    """The statements with registers numbered 0, 1, ... in order of definition (the JIT
    sizes its register table by the instruction count)."""
    new = {}
    out = []
    for s in stmts:
        args = tuple(new[a] for a in s.args)
        dst = None
        if s.dst is not None:
            dst = new[s.dst] = len(new)
        out.append(replace(s, dst=dst, args=args))
    return out


def _phases(k):
    """The kernel's statements as lists, one per phase (without the `phase` lines)."""
    out = [[]]
    for s in k.stmts:
        if s.op is Op.PHASE:
            out.append([])
        else:
            out[-1].append(s)
    return out


def _keys(phase):
    """register -> a structural key of its value (equal keys: equal values at a point)."""
    keys = {}
    for s in phase:
        if s.dst is None:
            continue
        code = None if s.dtype is None else s.dtype._code
        keys[s.dst] = (s.op.value, code, repr(s.value), s.param,
                       None if s.index is None else (s.index.coeffs, s.index.offset),
                       tuple(keys[a] for a in s.args))
    return keys


def _costly(phase):
    """register -> whether computing it involves a costly instruction."""
    out = {}
    for s in phase:
        if s.dst is not None:
            out[s.dst] = s.op in _COSTLY or any(out[a] for a in s.args)
    return out


def reuse(k):
    """k with a later phase loading, instead of computing again, an expensive value an
    earlier reducing phase computed (stored there into the later phase's output)."""
    phases = _phases(k)
    changed = False
    for late in range(1, len(phases)):
        stores = [s for s in phases[late] if s.op is Op.STORE]
        if len(stores) != 1:
            continue
        st = stores[0]
        dtype = k.params[st.param].dtype
        touched = [s for p in phases for s in p if s.param == st.param and s is not st]
        if touched:
            continue
        late_keys = _keys(phases[late])
        by_key = {v: r for r, v in late_keys.items()}
        for early in range(late):
            keys, costly = _keys(phases[early]), _costly(phases[early])
            folded = [s.args[0] for s in phases[early] if s.op is Op.REDUCE]
            hit = next((r for r in folded if costly[r] and keys[r] in by_key), None)
            if hit is None:
                continue
            d = next(s for s in phases[early] if s.dst == hit)
            if d.dtype is not dtype:
                continue
            pos = phases[early].index(d) + 1
            phases[early].insert(pos, Stmt(Op.STORE, param=st.param, index=st.index,
                                           args=(hit,)))
            target = by_key[keys[hit]]
            phases[late] = [Stmt(Op.LOAD, dst=target, param=st.param, index=st.index)
                            if s.dst == target else s for s in phases[late]]
            changed = True
            break
    if not changed:
        return k
    stmts = []
    for i, p in enumerate(phases):
        if i:
            stmts.append(Stmt(Op.PHASE))
        stmts += _live(p)
    return verify(Kernel(k.name, k.sizes, k.nreduce, k.params, _dense(stmts)))


def _live(phase):
    """The phase without instructions whose values nothing uses."""
    used = set()
    keep = []
    for s in reversed(phase):
        if s.dst is None or s.dst in used:
            keep.append(s)
            used.update(s.args)
    return keep[::-1]


def _reads_writes(k):
    reads = {k.params[s.param].ref for s in k.stmts if s.op in (Op.LOAD, Op.GATHER)}
    return reads, set(_writes(k))


def _independent(k, between):
    """Whether kernel k may run before the kernel steps `between` (which ran before it):
    it reads nothing they write and writes nothing they read or write."""
    reads, writes = _reads_writes(k)
    for st in between:
        r, w = _reads_writes(st.ir)
        if reads & w or writes & (r | w):
            return False
    return True


def merge(lowered):
    """Joins runs of kernel steps into row kernels (in place). A run takes the kernel
    steps that follow it and can join it; a kernel step that cannot is stepped over
    (up to LOOKAHEAD of them) when a later one can join and is independent of it (the
    stepped-over kernels then run after the row kernel, in their order: the column sums
    of a layer_norm's backward between its row kernels)."""
    if not ENABLED:
        return lowered
    steps, kernels = [], []
    i, old = 0, lowered.steps
    while i < len(old):
        s = old[i]
        if s.kind != StepKind.KERNEL or _rows_of(s.ir) is None:
            _keep(steps, kernels, s)
            i += 1
            continue
        run, nreduce, skipped, j = [s.ir], s.ir.nreduce, [], i + 1
        while j < len(old) and old[j].kind == StepKind.KERNEL and len(skipped) <= LOOKAHEAD:
            k = old[j].ir
            if _joins(run, nreduce, k) and _independent(k, skipped):
                run.append(k)
                nreduce = nreduce or k.nreduce
            else:
                skipped.append(old[j])
            j += 1
        # stepped-over kernels at the end of the scan run where they were
        while skipped and skipped[-1] is old[j - 1]:
            skipped.pop()
            j -= 1
        if not _worth(run, nreduce):
            _keep(steps, kernels, s)
            i += 1
            continue
        k = reuse(join(run, nreduce, f"{run[0].name}_rows"))
        outer, parallel, chunk = fusion.schedule(k)
        steps.append(KernelStep(StepKind.KERNEL, len(kernels), tuple(p.ref for p in k.params),
                                outer, parallel, k, chunk))
        kernels.append(k)
        for st in skipped:
            _keep(steps, kernels, st)
        i = j
    lowered.steps, lowered.kernels = steps, kernels
    return lowered


def _keep(steps, kernels, s):
    if s.kind == StepKind.KERNEL:
        s = s._replace(kernel=len(kernels))
        kernels.append(s.ir)
    steps.append(s)
