"""Runs one fuzz program eagerly and compiled, and lists where they differ.

Per backend, the compiled function is called twice: on copies of the inputs eager ran
on, then (a cache hit) on fresh inputs of the same specs, each compared with eager on
the same values. A call is compared on:

- the exception it raised (eager raised: the same type; eager did not: none);
- its outputs: structure (tuple/list/dict, keys, lengths), then per tensor dtype
  exactly, shape, requires_grad, values (exact for integers and bool; floats within
  TOLERANCE, NaN where NaN, infinities exactly; a float64 value computed from float32
  arithmetic at float32's tolerance, see exposure()); Python values by ==;
- the inputs afterwards: tensors written in place, and dicts, lists and Box
  attributes the program changed (side effects);
- gradients: backward runs from the float outputs that require grad with random
  weights as their gradients (the gradient of a weighted sum, with no op of its own;
  CHECK["loss"] says which outputs take part); every input tensor
  requiring grad is compared (.grad None where eager's is None, unused inputs included),
  with the exception backward raised; with CHECK["backward_twice"] backward runs again
  without retain_graph (eager raises) and the gradients are compared again.

A failure is a dict: kind (what differs), backend, call (1 or 2), where (a path like
out[1] or grad[x0]), detail (text). Its signature, "backend:kind", is what the
shrinker keeps and the report groups by.
"""
from __future__ import annotations

import ast
import math
import os
import re
import warnings

import numpy as np

import ember
from ember.capture import counters

from .program import Box, Loaded, build_inputs

# (rtol, atol) per float dtype; atol is scaled by max(1, the largest |expected| value),
# so sums of many terms are compared relative to their size
TOLERANCE = {
    "float64": (1e-12, 1e-12),
    "float32": (1e-4, 1e-5),
    "float16": (1e-2, 1e-3),
}
# backends to compare with eager; "name:dynamic" compiles with dynamic=True (every size
# symbolic: [dynamic]'s symbolic capture checked on the same inputs). The campaign's
# workers read EMBER_FUZZ_BACKENDS (a comma list) when it is set.
BACKENDS = tuple(os.environ.get("EMBER_FUZZ_BACKENDS", "llvm,aot_eager").split(","))


# ---------------------------------------------------------------- snapshots


def snapshot(x, seen=None):
    """A comparable copy of a value: nested tuples tagged with their kind."""
    if isinstance(x, ember.Tensor):
        return ("T", str(x.dtype).replace("ember.", ""), tuple(x.shape),
                np.array(x.detach().numpy(), copy=True), bool(x.requires_grad))
    if isinstance(x, (list, tuple)):
        return (type(x).__name__, [snapshot(v) for v in x])
    if isinstance(x, dict):
        return ("dict", [(k, snapshot(v)) for k, v in x.items()])
    if isinstance(x, Box):
        return ("Box", [(k, snapshot(v)) for k, v in x.__dict__.items()])
    if isinstance(x, ember.dtype):
        return ("py", str(x))
    if x is None or isinstance(x, (bool, int, float, str)):
        return ("py", x)
    return ("py", f"<{type(x).__name__}>")


def _differ(w, g, rtol, atol):
    """Where float arrays w (expected) and g differ beyond the tolerance."""
    wn, gn = np.isnan(w), np.isnan(g)
    fin = np.isfinite(w)
    scale = max(1.0, float(np.max(np.abs(w[fin]))) if fin.any() else 1.0)
    with np.errstate(all="ignore"):
        return (wn != gn) | (~wn & ~fin & (w != g)) | \
            (fin & ~(np.abs(w - g) <= atol * scale + rtol * np.abs(w)))


_COMPLEX_PARTS = {"complex64": "float32", "complex128": "float64"}


def _close(want, got, dtype, loose=False):
    if dtype in _COMPLEX_PARTS:      # the real and imaginary parts, each as its float
        return _close(np.stack([want.real, want.imag], -1), np.stack([got.real, got.imag], -1),
                      _COMPLEX_PARTS[dtype], loose)
    if dtype not in TOLERANCE:
        if np.array_equal(want, got):
            return None
        diff = np.argwhere(want != got)
        i = tuple(int(k) for k in diff[0])
        return ("value", f"values differ at {list(i)}: want {want[i].item()!r} got "
                         f"{got[i].item()!r} ({len(diff)} of {want.size} elements)")
    rtol, atol = TOLERANCE["float32" if loose and dtype == "float64" else dtype]
    w = want.astype(np.float64)
    g = got.astype(np.float64)
    fin = np.isfinite(w)
    scale = max(1.0, float(np.max(np.abs(w[fin]))) if fin.any() else 1.0)
    bad = _differ(w, g, rtol, atol)
    if not bad.any():
        return None
    i = tuple(int(k) for k in np.argwhere(bad)[0])
    with np.errstate(all="ignore"):
        rel = np.abs(w - g)[bad] / np.maximum(np.abs(w[bad]), 1e-300)
    small = bool(np.all(fin[bad] & np.isfinite(g[bad])) and np.max(rel) < 1e-3)
    return ("precision" if small else "value",
            f"values differ at {list(i)}: want {float(w[i])!r} got {float(g[i])!r} "
            f"({int(bad.sum())} of {w.size} elements, largest relative error "
            f"{float(np.max(rel)):.2g}; rtol {rtol}, atol {atol}*{scale:.3g})")


def compare(want, got, where, out, loose=lambda where: False):
    """Appends (where, kind, detail) for each difference of two snapshots. loose(where)
    says float64 values there may carry float32 rounding (compared as float32)."""
    if want[0] != got[0]:
        out.append((where, "structure", f"want {want[0]} got {got[0]}"))
        return
    tag = want[0]
    if tag == "T":
        _, wd, ws, wv, wr = want
        _, gd, gs, gv, gr = got
        if wd != gd:
            out.append((where, "dtype", f"want {wd} got {gd}"))
        elif ws != gs:
            out.append((where, "shape", f"want {list(ws)} got {list(gs)}"))
        else:
            d = _close(wv, gv, wd, loose(where))
            if d:
                out.append((where, d[0], d[1]))
        if wr != gr:
            out.append((where, "requires_grad", f"want {wr} got {gr}"))
        return
    if tag in ("list", "tuple"):
        if len(want[1]) != len(got[1]):
            out.append((where, "structure", f"want length {len(want[1])} got {len(got[1])}"))
            return
        for i, (w, g) in enumerate(zip(want[1], got[1])):
            compare(w, g, f"{where}[{i}]", out, loose)
        return
    if tag in ("dict", "Box"):
        wk = [k for k, _ in want[1]]
        gk = [k for k, _ in got[1]]
        if wk != gk:
            kind = "keys" if set(wk) != set(gk) else "key_order"
            out.append((where, kind, f"want keys {wk} got {gk}"))
            if set(wk) != set(gk):
                return
        gmap = dict(got[1])
        for k, w in want[1]:
            sub = f"{where}.{k}" if tag == "Box" else f"{where}[{k!r}]"
            compare(w, gmap[k], sub, out, loose)
        return
    w, g = want[1], got[1]
    same = w == g or (isinstance(w, float) and isinstance(g, float) and
                      math.isnan(w) and math.isnan(g))
    if not same or type(w) is not type(g):
        out.append((where, "pyvalue", f"want {w!r} got {g!r}"))


# ---------------------------------------------------------------- one call


def _float_tensors(x, acc):
    if isinstance(x, ember.Tensor):
        acc.append(x)
    elif isinstance(x, (list, tuple)):
        for v in x:
            _float_tensors(v, acc)
    elif isinstance(x, dict):
        for v in x.values():
            _float_tensors(v, acc)
    return acc


def _exc(e):
    return (type(e).__name__, str(e).splitlines()[0][:300] if str(e) else "")


def call(fn, inputs, seed, check):
    """Calls fn on fresh inputs (INPUTS built with seed) and records everything that is
    compared."""
    rec = {"exc": None, "out": None, "inputs": None, "bwd_exc": None, "grads": None,
           "bwd2_exc": None, "grads2": None}
    leaves = []
    names = list(inputs)
    args = build_inputs(inputs, seed, leaves)
    loss_seed = seed + 7
    try:
        out = fn(*args)
    except Exception as e:   # noqa: BLE001 - the exception is what is compared
        rec["exc"] = _exc(e)
        rec["inputs"] = [(n, snapshot(a)) for n, a in zip(names, args)]
        return rec
    rec["out"] = snapshot(out)
    rec["inputs"] = [(n, snapshot(a)) for n, a in zip(names, args)]
    outs = [t for t in _float_tensors(out, []) if t.dtype.is_floating_point]
    mask = list(check.get("loss", ()))
    rng = np.random.default_rng(loss_seed)
    roots, weights = [], []
    for i, t in enumerate(outs):
        w = np.asarray(rng.uniform(0.5, 1.5, size=tuple(t.shape)))
        if (mask[i] if i < len(mask) else 1) and t.requires_grad:
            roots.append(t)
            weights.append(ember.from_numpy(w).to(t.dtype))
    if not roots:
        return rec

    def backward():
        # the weighted sum of the outputs, with no op of its own in the graph: the
        # engine starts at the program's last nodes (a compiled function's node)
        ember.autograd.backward(roots, grad_tensors=weights)
    try:
        backward()
    except Exception as e:   # noqa: BLE001
        rec["bwd_exc"] = _exc(e)
    rec["grads"] = [(n, snapshot(t.grad)) for n, t in leaves]
    if check.get("backward_twice"):
        try:
            backward()
        except Exception as e:   # noqa: BLE001
            rec["bwd2_exc"] = _exc(e)
        rec["grads2"] = [(n, snapshot(t.grad)) for n, t in leaves]
    return rec


def diff_calls(want, got, exposure=None):
    """[(where, kind, detail)] between an eager record and a compiled one. exposure
    (see exposure()) says which float64 values may carry float32 rounding."""
    exposed, anywhere, in_backward = exposure or (set(), False, False)

    def loose_out(where):
        return any(where == p or where.startswith(p + "[") for p in exposed)

    def loose_all(where):
        return anywhere

    def loose_grads(where):
        return in_backward
    out = []
    we, ge = want["exc"], got["exc"]
    if we and not ge:
        out.append(("call", "missing_exception", f"eager raised {we[0]}: {we[1]}"))
        return out
    if ge and not we:
        out.append(("call", f"raised:{ge[0]}", ge[1]))
        return out
    if we and ge:
        if we[0] != ge[0]:
            out.append(("call", f"exception_type:{ge[0]}",
                        f"eager raised {we[0]}: {we[1]}; compiled {ge[0]}: {ge[1]}"))
    else:
        compare(want["out"], got["out"], "out", out, loose_out)
    for (name, w), (_, g) in zip(want["inputs"], got["inputs"]):
        # a tensor argument written in place vs a Python container or object changed
        side = []
        compare(w, g, name, side, loose_all)
        for where, kind, detail in side:
            if w[0] == "T":
                if kind != "requires_grad":
                    out.append((where, "input_mutation", detail))
            else:
                out.append((where, f"side_effect_{kind}", detail))
    for stage, e_key, g_key in (("backward", "bwd_exc", "grads"),
                                ("backward_twice", "bwd2_exc", "grads2")):
        wb, gb = want[e_key], got[e_key]
        if wb and not gb:
            out.append((stage, f"{stage}_missing_exception", f"eager raised {wb[0]}: {wb[1]}"))
        elif gb and not wb:
            out.append((stage, f"{stage}_raised:{gb[0]}", gb[1]))
        elif wb and gb and wb[0] != gb[0]:
            out.append((stage, f"{stage}_exception_type:{gb[0]}", f"eager {wb[0]}"))
        wg, gg = want[g_key], got[g_key]
        if wg is None or gg is None:
            continue
        for (name, w), (_, g) in zip(wg, gg):
            where = f"{'grad2' if stage == 'backward_twice' else 'grad'}[{name}]"
            wnone, gnone = w == ("py", None), g == ("py", None)
            if wnone != gnone:
                out.append((where, f"{stage}_grad_none",
                            f"eager .grad is {'None' if wnone else 'set'}, compiled "
                            f"{'None' if gnone else 'set'}"))
                continue
            sub = []
            compare(w, g, where, sub, loose_grads)
            for wh, kind, detail in sub:
                if kind != "requires_grad":
                    out.append((wh, f"{stage}_grad_{kind}", detail))
    return out


# ---------------------------------------------------------------- float32 exposure


def _names(node, ctx=None):
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and
            (ctx is None or isinstance(n.ctx, ctx))}


def _written(stmt):
    """Names a statement assigns or writes into (the base of x[...] = v, x.a = v,
    x.op_(...))."""
    out = _names(stmt, ast.Store)
    targets = []
    if isinstance(stmt, (ast.Assign, ast.AugAssign)):
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
    elif isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
        targets = [stmt.value.func]
    elif isinstance(stmt, ast.Delete):
        targets = stmt.targets
    for t in targets:
        while isinstance(t, (ast.Subscript, ast.Attribute, ast.Call)):
            t = t.func if isinstance(t, ast.Call) else t.value
        if isinstance(t, ast.Name):
            out.add(t.id)
    return out


_LOW_PRECISION_TEXT = re.compile(r"\bfloat(16|32)\b|\bhalf\b|\.float\(\)|\.half\(\)")


def _low_precision(v):
    if isinstance(v, ember.Tensor):
        return v.dtype in (ember.float32, ember.float16)
    if isinstance(v, (list, tuple)):
        return any(_low_precision(x) for x in v)
    if isinstance(v, dict):
        return any(_low_precision(x) for x in v.values())
    return False


def exposure(prog):
    """Which float64 results may carry float32 rounding: float32 arithmetic (exp,
    tanh, sums, ...) is exact only to a few ulps, which eager and compiled code may
    spend differently, so a float64 value computed from a float32 intermediate is
    compared at float32's tolerance. Found by running f's statements eagerly one at a
    time: a statement that leaves a float32 (or float16) tensor in a name it writes
    taints that name, and a statement reading a tainted name taints every name it
    mentions. Casts of float32 inputs to float64 are exact and taint nothing, so
    float64 arithmetic on them (x64 / x32) is still compared at float64's tolerance.
    Returns (output paths that are tainted, whether anything is, whether gradients
    may carry float32 rounding)."""
    tree = ast.parse(prog.source)
    fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "f")
    env = {"ember": ember, "Box": Box}
    env.update(zip(prog.inputs, build_inputs(prog.inputs, int(prog.check.get("seed", 0)))))
    tainted = set()
    inner = False
    ret = None
    for stmt in fn.body:
        if isinstance(stmt, ast.Return):
            ret = stmt.value
            break
        reads = _names(stmt, ast.Load)
        try:
            exec(compile(ast.Module([stmt], []), "<exposure>", "exec"), env)
        except Exception:   # noqa: BLE001 - the program raises here; so does the check
            break
        written = _written(stmt)
        # a float32 value inside the statement (x.to(ember.float32), x.float()): its
        # forward rounding is the same in both runs, but the backward computes the
        # gradient through it in float32
        inner = inner or _LOW_PRECISION_TEXT.search(ast.unparse(stmt)) is not None
        # a float32 value the statement reads (x32 ** x64): the forward casts it exactly,
        # but the backward's formula computes with it in float32 (log(x32), a few ulps
        # that eager's libm and the compiled vector log spend differently: seed 0 #673)
        inner = inner or any(_low_precision(env.get(n)) for n in reads)
        if reads & tainted or any(_low_precision(env.get(n)) for n in written):
            tainted |= written | (reads - set(prog.inputs) if reads & tainted else set())
    paths = set()

    def walk(node, path):
        if isinstance(node, (ast.Tuple, ast.List)):
            for i, e in enumerate(node.elts):
                walk(e, f"{path}[{i}]")
        elif isinstance(node, ast.Dict) and all(isinstance(k, ast.Constant) for k in node.keys):
            for k, v in zip(node.keys, node.values):
                walk(v, f"{path}[{k.value!r}]")
        elif _names(node) & tainted:
            paths.add(path)
    if ret is not None:
        walk(ret, "out")
    return paths, bool(tainted), bool(tainted) or inner


# ---------------------------------------------------------------- one program


def run_program(source, backends=BACKENDS, filename="<fuzz>", phase=None):
    """Runs the program eagerly and under each backend. Returns (failures, stats).
    phase(name) is called before each stage (the batch runner records it, so a crash
    names the stage that crashed)."""
    phase = phase or (lambda name: None)
    failures = []
    stats = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        prog = Loaded(source, filename)
        seed = int(prog.check.get("seed", 0))
        seeds = (seed, seed + 1)     # call 1, call 2 (fresh values, same specs)
        phase("eager")
        eager = [call(prog.f, prog.inputs, s, prog.check) for s in seeds]
        exposed = exposure(prog)
        records = {}
        for be in backends:
            phase(be)
            ember.compiler.reset()
            before = _counts()
            fn = Loaded(source, filename).f   # a fresh code object per backend
            name, _, option = be.partition(":")
            cf = ember.compile(fn, backend=name, dynamic=True if option == "dynamic" else None)
            ctx = cf._ember_compile_context
            for k, s in enumerate(seeds):
                got = call(cf, prog.inputs, s, prog.check)
                records[be, k + 1] = got
                for where, kind, detail in diff_calls(eager[k], got, exposed):
                    failures.append({"backend": be, "call": k + 1, "where": where,
                                     "kind": kind, "detail": detail})
            after = _counts()
            stats[be] = {"graphs": len(ctx.graphs),
                         "recompiles": len(ctx.recompile_reasons),
                         "fallback": {k: after[k] - before.get(k, 0)
                                      for k in after if after[k] != before.get(k, 0)}}
        ember.compiler.reset()
        if any(_numeric(f) for f in failures):
            phase("conditioning")
            failures, stats["ill_conditioned"] = _drop_ill_conditioned(
                prog, seeds, eager, records, failures)
    stats["eager_raised"] = eager[0]["exc"][0] if eager[0]["exc"] else None
    return _dedupe(failures), stats


def _numeric(failure):
    return failure["kind"].endswith(("value", "precision"))


def _drop_ill_conditioned(prog, seeds, eager, records, failures, rel=1e-6):
    """Failures of values (outputs, inputs, gradients) that eager itself reproduces:
    run eagerly once more on inputs scaled by 1 + rel (a few float32 ulps), a value
    counts as ill-conditioned when at every element the compiled run differs at, eager
    moved by at least half as much and by over AMPLIFIED times rel (relative to the
    value, or 1): a remainder of a large float32 value, a comparison of near-equal
    ones. Integer inputs cannot be moved: a float made from them (exp of an int64
    tensor, in the default dtype) may differ by the ulps the vector math allows, which
    a later op amplifies (cos of 7e10); so eager also runs once with float64 as the
    default dtype, and a value that run moves by over AMPLIFIED times rel also counts
    (float32 arithmetic does not fix it to the tolerance). Returns (the other
    failures, how many were dropped)."""
    from . import program
    program.PERTURB = rel
    try:
        moved = [call(prog.f, prog.inputs, s, prog.check) for s in seeds]
    finally:
        program.PERTURB = 0.0
    default = ember.get_default_dtype()
    ember.set_default_dtype(ember.float64)
    try:
        wide = [call(prog.f, prog.inputs, s, prog.check) for s in seeds]
    finally:
        ember.set_default_dtype(default)
    kept, dropped = [], 0
    for f in failures:
        k = f["call"] - 1
        got = records[f["backend"], k + 1]
        if _numeric(f) and (_explained(f["where"], eager[k], got, moved[k]) or
                            _explained(f["where"], eager[k], got, wide[k], half=False)):
            dropped += 1
        else:
            kept.append(f)
    return kept, dropped


AMPLIFIED = 100


def _explained(where, want, got, moved, rel=1e-6, half=True):
    """(half=False: eager's own move need not be half the difference: a float64 run
    that differs from float32's by over AMPLIFIED times rel shows the value is not
    determined by float32 arithmetic to the tolerance)"""
    arrays = [_arrays_of(r).get(where) for r in (want, got, moved)]
    if any(a is None for a in arrays) or len({a.shape for a in arrays}) != 1:
        return False
    w, g, m = (a.astype(np.float64) for a in arrays)
    rtol, atol = TOLERANCE.get(str(arrays[0].dtype), TOLERANCE["float32"])
    bad = _differ(w, g, rtol, atol)
    if not bad.any() or not np.all(np.isfinite(w[bad]) & np.isfinite(g[bad])):
        return False
    with np.errstate(all="ignore"):
        moved_by = np.abs(w - m)[bad]
        ok = ((moved_by >= 0.5 * np.abs(w - g)[bad]) | (not half)) & \
            (moved_by > AMPLIFIED * rel * np.maximum(np.abs(w[bad]), 1.0))
    return bool(np.all(ok))


def _arrays_of(rec):
    """path -> the values of every float tensor in a call's record, the paths named as
    diff_calls names them."""
    out = {}

    def walk(snap, where):
        tag = snap[0]
        if tag == "T":
            if snap[3].dtype.kind == "f":
                out[where] = snap[3]
        elif tag in ("list", "tuple"):
            for i, v in enumerate(snap[1]):
                walk(v, f"{where}[{i}]")
        elif tag in ("dict", "Box"):
            for k, v in snap[1]:
                walk(v, f"{where}.{k}" if tag == "Box" else f"{where}[{k!r}]")
    if rec["out"] is not None:
        walk(rec["out"], "out")
    for name, snap in rec["inputs"] or ():
        walk(snap, name)
    for key, stage in (("grads", "grad"), ("grads2", "grad2")):
        for name, snap in rec[key] or ():
            walk(snap, f"{stage}[{name}]")
    return out


def _counts():
    out = {}
    for group in ("unsupported", "backend_fallback", "llvm_fallback", "dynamic_fallback"):
        for reason, n in counters[group].items():
            out[f"{group}: {reason}"] = n
    return out


def _dedupe(failures):
    """One failure per (backend, kind, where): call 2 repeats what call 1 found."""
    seen, out = set(), []
    for f in failures:
        key = (f["backend"], f["kind"], f["where"])
        if key not in seen:
            seen.add(key)
            out.append(f)
    return out


def signature(failure) -> str:
    return f"{failure['backend']}:{failure['kind']}"
