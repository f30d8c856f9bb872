"""Minimises a failing program while it still fails the same way.

"The same way" is one failure signature ("backend:kind", e.g. "llvm:value" or
"eager:crash:SIGSEGV"); a candidate is kept when a run of it (in the evaluator's
subprocess, so candidates may crash) still shows that signature. Passes, repeated until
none removes anything or the time is up:

1. statements of f, in chunks then one by one (delta debugging), each removed with the
   statements that read the names it assigns (so candidates stay well-formed); items of
   the return value that read a removed name go with it;
2. items of a returned tuple/list/dict, and a one-item tuple unwrapped;
3. CHECK: the loss weights (all outputs) and backward_twice;
4. inputs: unused parameters dropped; tensors made contiguous, without requires_grad,
   with random values; keys of dict inputs, items of list inputs, attributes of Box
   inputs dropped.
"""
from __future__ import annotations

import ast
import time


class _Prog:
    def __init__(self, source):
        self.tree = ast.parse(source)
        self.comments = [ln for ln in source.splitlines() if ln.startswith("#")]

    @property
    def fn(self):
        return next(n for n in self.tree.body if isinstance(n, ast.FunctionDef) and
                    n.name == "f")

    def assign(self, name):
        return next(n for n in self.tree.body if isinstance(n, ast.Assign) and
                    isinstance(n.targets[0], ast.Name) and n.targets[0].id == name)

    @property
    def inputs(self):
        return self.assign("INPUTS").value       # dict(...) call

    @property
    def check(self):
        return self.assign("CHECK").value

    def source(self):
        """The program again, laid out as program.render lays it out."""
        lines = list(self.comments)
        for node in self.tree.body:
            if node is self.fn:
                lines += ["", "", ast.unparse(node)]
            elif isinstance(node, ast.Assign) and node.value is self.inputs:
                lines.append("INPUTS = dict(")
                lines += [f"    {k.arg}={ast.unparse(k.value)}," for k in self.inputs.keywords]
                lines.append(")")
            else:
                lines.append(ast.unparse(node))
        return "\n".join(lines) + "\n"


def _defs(stmt):
    out = set()
    for node in ast.walk(stmt):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            out.add(node.id)
    return out


def _uses(node):
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and
            isinstance(n.ctx, ast.Load)}


def _without(source, drop):
    """source with the statements at indices drop (and everything reading their names)
    removed; None when nothing would change."""
    p = _Prog(source)
    body = p.fn.body
    stmts, ret = body[:-1], body[-1]
    if not isinstance(ret, ast.Return):
        stmts, ret = body, None
    gone = set()
    keep = []
    for i, s in enumerate(stmts):
        if i in drop or (_uses(s) & gone):
            gone |= _defs(s)
            continue
        keep.append(s)
    if len(keep) == len(stmts):
        return None
    if ret is not None and ret.value is not None and (_uses(ret.value) & gone):
        ret.value = _drop_items(ret.value, gone)
    p.fn.body = keep + ([ret] if ret is not None else [])
    if not p.fn.body:
        p.fn.body = [ast.Return(ast.Constant(None))]
    return p.source()


def _drop_items(value, gone):
    if isinstance(value, (ast.Tuple, ast.List)):
        value.elts = [e for e in value.elts if not (_uses(e) & gone)]
        return value
    if isinstance(value, ast.Dict):
        pairs = [(k, v) for k, v in zip(value.keys, value.values) if not (_uses(v) & gone)]
        value.keys = [k for k, _ in pairs]
        value.values = [v for _, v in pairs]
        return value
    return ast.Constant(None)


class _Rename(ast.NodeTransformer):
    def __init__(self, old, new):
        self.old, self.new = old, new

    def visit_Name(self, node):
        if node.id == self.old and isinstance(node.ctx, ast.Load):
            return ast.copy_location(ast.Name(self.new, ast.Load()), node)
        return node


def _bypass_variants(source):
    """`v = op(u, ...)` removed and later reads of v made reads of u: a statement
    between two that matter is skipped."""
    p = _Prog(source)
    params = {a.arg for a in p.fn.args.args}
    body = p.fn.body
    for i, s in enumerate(body):
        if not (isinstance(s, ast.Assign) and len(s.targets) == 1 and
                isinstance(s.targets[0], ast.Name)):
            continue
        name = s.targets[0].id
        tensors = [n for n in dict.fromkeys(
            x.id for x in ast.walk(s.value) if isinstance(x, ast.Name) and
            isinstance(x.ctx, ast.Load)) if n != "ember" and n != name]
        for u in tensors:
            if u not in params and not any(name != u and u in _defs(b) for b in body[:i]):
                continue
            q = _Prog(source)
            qb = q.fn.body
            rest = [_Rename(name, u).visit(b) for b in qb[i + 1:]]
            q.fn.body = qb[:i] + rest
            yield q.source()


def _return_variants(source):
    p = _Prog(source)
    ret = p.fn.body[-1]
    if not isinstance(ret, ast.Return) or ret.value is None:
        return
    v = ret.value
    if isinstance(v, (ast.Tuple, ast.List)):
        for i in range(len(v.elts)):
            q = _Prog(source)
            r = q.fn.body[-1].value
            del r.elts[i]
            yield q.source()
        if len(v.elts) == 1 and isinstance(v, ast.Tuple):
            q = _Prog(source)
            q.fn.body[-1].value = q.fn.body[-1].value.elts[0]
            yield q.source()
    elif isinstance(v, ast.Dict):
        for i in range(len(v.keys)):
            q = _Prog(source)
            r = q.fn.body[-1].value
            del r.keys[i]
            del r.values[i]
            yield q.source()


def _check_variants(source):
    p = _Prog(source)
    for kw in p.check.keywords:
        if kw.arg == "loss" and isinstance(kw.value, ast.Tuple) and kw.value.elts:
            q = _Prog(source)
            next(k for k in q.check.keywords if k.arg == "loss").value = ast.Tuple([], ast.Load())
            yield q.source()
        if kw.arg == "backward_twice" and getattr(kw.value, "value", False) is True:
            q = _Prog(source)
            next(k for k in q.check.keywords if k.arg == "backward_twice").value = \
                ast.Constant(False)
            yield q.source()


def _input_variants(source):
    p = _Prog(source)
    params = [a.arg for a in p.fn.args.args]
    used = set()
    for s in p.fn.body:
        used |= _uses(s)
    for name in params:
        if name not in used:
            q = _Prog(source)
            q.fn.args.args = [a for a in q.fn.args.args if a.arg != name]
            q.inputs.keywords = [k for k in q.inputs.keywords if k.arg != name]
            yield q.source()
    for ki, kw in enumerate(p.inputs.keywords):
        v = kw.value
        if isinstance(v, ast.Call) and getattr(v.func, "id", "") == "T":
            for j, k in enumerate(v.keywords):
                if k.arg in ("layout", "grad", "values"):
                    q = _Prog(source)
                    del q.inputs.keywords[ki].value.keywords[j]
                    yield q.source()
        elif isinstance(v, ast.Call) and getattr(v.func, "id", "") == "Box":
            for j in range(len(v.keywords)):
                q = _Prog(source)
                del q.inputs.keywords[ki].value.keywords[j]
                yield q.source()
        elif isinstance(v, ast.Dict):
            for j in range(len(v.keys)):
                q = _Prog(source)
                d = q.inputs.keywords[ki].value
                del d.keys[j]
                del d.values[j]
                yield q.source()
        elif isinstance(v, ast.List):
            for j in range(len(v.elts)):
                q = _Prog(source)
                del q.inputs.keywords[ki].value.elts[j]
                yield q.source()


def shrink(source, target, evaluator, deadline):
    """(the smallest program found that still fails with signature target, whether the
    program failed that way when run alone at all)."""
    backend, _, kind = target.partition(":")
    backends = [] if backend == "eager" else [backend]

    def fails(src):
        if src is None or time.monotonic() > deadline:
            return False
        try:
            compile(src, "<shrink>", "exec")
        except SyntaxError:
            return False
        return target in evaluator.signatures(src, backends)

    best = source
    if not fails(best):
        # not reproducible alone (flaky, or it needed the process's history)
        return best, False
    changed = True
    while changed and time.monotonic() < deadline:
        changed = False
        n = len(_Prog(best).fn.body) - 1
        chunk = max(1, n // 2)
        while chunk >= 1 and time.monotonic() < deadline:
            i = n - chunk
            while i > -chunk and time.monotonic() < deadline:
                cand = _without(best, set(range(max(0, i), i + chunk)))
                if cand is not None and fails(cand):
                    best = cand
                    changed = True
                    n = len(_Prog(best).fn.body) - 1
                i -= chunk
            chunk //= 2
        for variants in (_bypass_variants, _return_variants, _check_variants,
                         _input_variants):
            progress = True
            while progress and time.monotonic() < deadline:
                progress = False
                for cand in variants(best):
                    if len(cand) < len(best) and fails(cand):
                        best = cand
                        changed = progress = True
                        break
    return best, True


def features(source):
    """What a program does, coarsely: the names it calls, the statement forms it uses
    and traits of its inputs (dtype, empty, requires grad, non-leaf, unused). A failing
    program holding all the features of an earlier minimal reproducer of its class is
    likely to fail for the same reason: the campaign does not shrink it again."""
    try:
        p = _Prog(source)
        fn = p.fn
    except (SyntaxError, StopIteration):
        return frozenset()
    out = set()
    used = set()
    for s in fn.body:
        used |= _uses(s)
    for kw in p.inputs.keywords:
        v = kw.value
        if isinstance(v, ast.Call) and getattr(v.func, "id", "") == "T":
            try:
                shape = ast.literal_eval(v.args[0])
                dtype = ast.literal_eval(v.args[1]) if len(v.args) > 1 else "float32"
            except (ValueError, IndexError):
                continue
            out.add(f"input:{dtype}")
            if 0 in shape:
                out.add("input:empty")
            for k in v.keywords:
                if k.arg in ("grad", "nonleaf", "layout"):
                    out.add(f"input:{k.arg}={ast.unparse(k.value)}")
                if k.arg == "grad" and kw.arg not in used:
                    out.add("input:unused_grad")
        else:
            out.add(f"input:{type(v).__name__}")
    for node in ast.walk(fn):
        if isinstance(node, ast.Call):
            f = node.func
            out.add(f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "?"))
        elif isinstance(node, ast.BinOp):
            out.add(type(node.op).__name__)
        elif isinstance(node, ast.Compare):
            out.add(type(node.ops[0]).__name__)
        elif isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Subscript):
            out.add("setitem")
        elif isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Attribute):
            out.add("setattr")
        elif isinstance(node, ast.AugAssign):
            out.add("augassign")
        elif isinstance(node, ast.Delete):
            out.add("del")
    return frozenset(out)

