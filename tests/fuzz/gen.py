"""The program generator: random fuzz programs as Python source (see program.py).

A program is built a statement at a time, each statement checked by running it eagerly
on the program's own inputs as it is added (a generation environment that holds every
variable's live value), so shapes, dtypes and argument validity come from Ember itself
and a statement that raises is dropped (or, rarely, kept as the program's last, to
compare exceptions). Statements come from templates:

- table: an op of the op table (ember.ops.registry.ENTRIES, through tests/op_db.py's
  OpInfos) called with the arguments of one of its op_db samples, the sample's tensors
  replaced by program variables of the same shape (elementwise kinds: of any dtype and
  any broadcastable shape, which mixes dtypes) or by new inputs; reductions and other
  ops with a `dim` are also called on any variable with dims and keepdim drawn from the
  schema;
- view: view/reshape/transpose/t/permute/slicing with steps/select/unsqueeze/squeeze/
  expand/flatten/unflatten/narrow/movedim/split/unbind of a variable;
- in place: an in-place op of the table (add_, mul_, clamp_, fill_, zero_, copy_, ...)
  through a view of an intermediate (`v[0].add_(1)`, `v.t().mul_(2)`) or of an input
  (`x.reshape(-1).add_(1)`), and index assignment (`v[:, 1:] = w`, masks, index
  tensors, `+=`), often on a fresh copy (`v = x * 1; v[:, 0] = 5`);
- Python: dict/list/object arguments and local containers read and written
  (`cfg["n"] = cfg["n"] + 1`, `acts.append(h)`, `d.update(...)`, `del d[k]`,
  `obj.attr = v`);
- join: cat/stack of variables that fit, cat sometimes with an empty input;
- promote: binary ops between variables of different dtypes (casts where needed);
- rank: tensors of many dims (up to 65), where index arrays of fixed size end.

gen(seed, index) is deterministic: the same pair gives the same program.
"""
from __future__ import annotations

import math
import random
import re

import numpy as np

import ember
from ember.ops import registry

import op_db

from .program import NONLEAF, Box, T, build, render

ELEMENTWISE = {registry.UNARY, registry.UNARY_FLOAT, registry.BINARY,
               registry.BINARY_FLOAT, registry.COMPARE}
DTYPES = ("float32", "float64", "int64", "bool")
DTYPE_WEIGHTS = (0.45, 0.25, 0.2, 0.1)
SHAPES = [(), (1,), (3,), (5,), (2, 3), (4, 3), (3, 4), (2, 2), (3, 3), (1, 3), (4, 1),
          (2, 3, 4), (2, 1, 3), (0,), (2, 0), (0, 3), (2, 0, 3), (1, 1)]
MAX_INPUTS = 5
MAX_NUMEL = 4096
# Python operators the table's ops are also reached by (rendering only)
BINARY_OPERATORS = {"add": "+", "sub": "-", "mul": "*", "div": "/", "floor_divide": "//",
                    "remainder": "%", "pow": "**", "matmul": "@", "bitwise_and": "&",
                    "bitwise_or": "|", "bitwise_xor": "^", "eq": "==", "ne": "!=",
                    "lt": "<", "le": "<=", "gt": ">", "ge": ">="}
# ops the task singles out: drawn more often than the rest of their category
FEATURED = {"softmax", "log_softmax", "layer_norm", "gelu", "where", "cat", "matmul",
            "sum", "mean", "amax", "max.dim", "div", "mul", "add", "sub", "exp", "tanh"}


class Reject(Exception):
    """This template cannot make a statement here."""


# ---------------------------------------------------------------- the op table


class _Table:
    """The OpInfos the generator draws from, by category, and their samples."""

    def __init__(self):
        self.by_cat = {}
        self.inplace = []
        self.dim_ops = []
        infos = list(op_db.OPS.items()) + list(getattr(op_db, "EXTRA", {}).items())
        for key, info in infos:
            e = info.entry
            if info.random or info.ref is None or info.dynamic_shape:
                continue
            if e.name.startswith("_") or not (e.function or e.method):
                continue
            if any(p.type == "Generator" for p in e.schema.params):
                continue
            if e.inplace:
                if e.method:
                    self.inplace.append((key, info))
                continue
            cat = _category(e)
            self.by_cat.setdefault(cat, []).append((key, info))
            if _dim_op(e):
                self.dim_ops.append((key, info))
        self.samples = {}

    def sample_list(self, key, info, dtype, nrng):
        k = (key, dtype)
        if k not in self.samples:
            try:
                self.samples[k] = list(info.samples(dtype, nrng))
            except Exception:   # noqa: BLE001 - a sample generator that needs more
                self.samples[k] = []
        return self.samples[k]


def _category(e):
    if e.kind in ELEMENTWISE:
        return "elementwise"
    if e.kind in (registry.REDUCE, registry.REDUCE_INDEX):
        return "reduce"
    if e.kind == registry.MATMUL:
        return "matmul"
    if e.kind == registry.VIEW:
        return "view"
    if e.kind == registry.FACTORY:
        return "factory"
    return "custom"


def _dim_op(e):
    """Ops taking (self, ..., dim, ...) whose other required parameters are all dims."""
    ps = e.schema.params
    if not ps or not ps[0].is_tensor:
        return False
    if not any(p.name == "dim" and p.type in ("int", "int[]") for p in ps):
        return False
    return all(p.has_default or p.optional or p.name == "dim" for p in ps[1:])


_TABLE = None


def table():
    global _TABLE
    if _TABLE is None:
        _TABLE = _Table()
    return _TABLE


CATEGORY_WEIGHTS = {"elementwise": 40, "reduce": 14, "custom": 30, "matmul": 8,
                    "view": 5, "factory": 3}


# ---------------------------------------------------------------- literals


class _Unrenderable(Exception):
    pass


def lit(v):
    """Python source for a sample's non-tensor argument."""
    if v is None or isinstance(v, (bool, str)):
        return repr(v)
    if isinstance(v, int):
        return repr(v)
    if isinstance(v, float):
        if math.isnan(v):
            return 'float("nan")'
        if math.isinf(v):
            return 'float("inf")' if v > 0 else 'float("-inf")'
        return repr(v)
    if isinstance(v, ember.dtype):
        return "ember." + str(v).replace("ember.", "")
    if isinstance(v, tuple):
        inner = ", ".join(lit(x) for x in v)
        return f"({inner},)" if len(v) == 1 else f"({inner})"
    if isinstance(v, list):
        return "[" + ", ".join(lit(x) for x in v) + "]"
    raise _Unrenderable(type(v).__name__)


def _dtype_name(t):
    return str(t.dtype).replace("ember.", "")


def _broadcast_shape(a, b):
    a, b = tuple(a), tuple(b)
    n = max(len(a), len(b))
    a, b = (1,) * (n - len(a)) + a, (1,) * (n - len(b)) + b
    out = []
    for x, y in zip(a, b):
        if x != y and x != 1 and y != 1:
            return None
        out.append(y if x == 1 else x)
    return tuple(out)


def _broadcasts(a, b):
    return _broadcast_shape(a, b) is not None


def _broadcasts_to(src, dst):
    return _broadcast_shape(src, dst) == tuple(dst)


# ---------------------------------------------------------------- the generator


class Generator:
    def __init__(self, seed, index, progress=None):
        self.seed, self.index = seed, index
        self.rng = random.Random(f"ember-fuzz:{seed}:{index}")
        self.nrng = np.random.default_rng([seed, index])
        self.value_seed = self.rng.randrange(1 << 30)
        self.progress = progress
        self.inputs = {}
        self.env = {"ember": ember, "Box": Box, "T": T}
        self.body = []
        self.tags = []
        self.next_var = 0
        self.written = set()      # variables written in place (worth returning)
        self.raising = False
        self.loss = ()
        self.backward_twice = self.rng.random() < 0.25
        self.mode = "mixed"
        self.grad_p, self.nonleaf_p = 0.5, 0.2
        self.dtype_weights = DTYPE_WEIGHTS

    # ------------------------------------------------------------ inputs

    def rand_shape(self):
        r = self.rng.random()
        if r < 0.55:
            return self.rng.choice(SHAPES)
        nd = self.rng.choice([0, 1, 1, 2, 2, 2, 3, 3, 4])
        return tuple(self.rng.choice([0, 1, 1, 2, 3, 3, 4, 5]) if self.rng.random() < 0.15
                     else self.rng.choice([1, 2, 3, 4, 5]) for _ in range(nd))

    def rand_layout(self, shape):
        opts = ["contig"] * 10 + ["step"] * 3 + ["offset"] * 2
        if len(shape) >= 2:
            opts += ["t"] * 4
        if any(n > 1 for n in shape):
            opts += ["expand"]
        return self.rng.choice(opts) if len(shape) else "contig"

    def add_input(self, spec, prefix="x"):
        k = sum(1 for n in self.inputs if n.startswith(prefix))
        name = f"{prefix}{k}" if prefix == "x" else (prefix if k == 0 else f"{prefix}{k}")
        position = len(self.inputs)
        self.inputs[name] = spec
        self.env[name] = build(spec, np.random.default_rng([self.value_seed, position]))
        return name

    def new_tensor_input(self, shape=None, dtype=None, values=None):
        shape = self.rand_shape() if shape is None else tuple(shape)
        dtype = dtype or self.rng.choices(DTYPES, self.dtype_weights)[0]
        grad = dtype.startswith("float") and values is None and \
            self.rng.random() < self.grad_p
        layout = self.rand_layout(shape)
        nonleaf = self.rng.choice(sorted(NONLEAF)) if grad and \
            self.rng.random() < self.nonleaf_p else None
        return self.add_input(T(shape, dtype, layout=layout, grad=grad, values=values,
                                nonleaf=nonleaf))

    def add_containers(self):
        r = self.rng.random
        if r() < 0.3:
            d = {"n": self.rng.randint(0, 3), "scale": self.rng.choice([0.5, 2.0, -1.5])}
            if r() < 0.5:
                d["tmp"] = 7
            if r() < 0.4:
                d["w"] = T(self.rng.choice([(3,), (2, 3), ()]), "float32", grad=r() < 0.4)
            self.add_input(d, "cfg")
        if r() < 0.2:
            items = [] if r() < 0.5 else [T((3,), self.rng.choice(["float32", "float64"]),
                                            grad=r() < 0.3)]
            self.add_input(items, "acts")
        if r() < 0.2:
            self.add_input(Box(n=1, scale=self.rng.choice([2.0, 0.25]), log=[],
                               **({"tmp": 0} if r() < 0.5 else {})), "obj")

    # ------------------------------------------------------------ variables

    def fresh(self):
        name = f"v{self.next_var}"
        self.next_var += 1
        return name

    def tensor_vars(self, pred=None):
        out = []
        for n, v in self.env.items():
            if isinstance(v, ember.Tensor) and (pred is None or pred(v)):
                out.append(n)
        return out

    def intermediates(self, pred=None):
        return [n for n in self.tensor_vars(pred) if n not in self.inputs]

    def pick(self, names, recent=True):
        if not names:
            raise Reject("no variable")
        if recent and self.rng.random() < 0.6:
            # favour the latest variables: chains rather than independent statements
            return names[-1 - min(int(self.rng.expovariate(0.7)), len(names) - 1)]
        return self.rng.choice(names)

    def pick_tensor(self, pred=None, inputs_p=0.3):
        inter = self.intermediates(pred)
        if inter and self.rng.random() > inputs_p:
            return self.pick(inter)
        return self.pick(self.tensor_vars(pred))

    def containers(self, kind):
        return [n for n, v in self.env.items() if isinstance(v, kind) and n != "__builtins__"
                and not n.startswith("_")]

    # ------------------------------------------------------------ running statements

    def try_stmt(self, stmt, tag, allow_raise=False, mutates=False):
        """Runs stmt in the generation environment; keeps it if it works."""
        if self.progress:
            self.progress(self.render(extra=[stmt]))
        env = self.env if mutates else dict(self.env)
        try:
            exec(compile(stmt, "<gen>", "exec"), env)
        except Exception:   # noqa: BLE001 - an invalid statement
            if mutates:
                self.replay()
            if allow_raise:
                self.body.append(stmt)
                self.tags.append(tag + "(raises)")
                self.raising = True
                return True
            return False
        for n, v in env.items():
            if isinstance(v, ember.Tensor) and (v.numel() > MAX_NUMEL):
                if mutates:
                    self.replay()
                return False
        self.env = env
        self.body.append(stmt)
        self.tags.append(tag)
        return True

    def replay(self):
        """Rebuilds the environment from the inputs and the kept statements."""
        self.env = {"ember": ember, "Box": Box, "T": T}
        for position, (name, spec) in enumerate(self.inputs.items()):
            self.env[name] = build(spec, np.random.default_rng([self.value_seed, position]))
        for stmt in self.body:
            exec(compile(stmt, "<gen>", "exec"), self.env)

    def evaluate(self, expr):
        if self.progress:
            self.progress(self.render(extra=[f"_ = {expr}"]))
        try:
            return eval(compile(expr, "<gen>", "eval"), dict(self.env))
        except Exception as e:   # noqa: BLE001 - not a valid expression here
            raise Reject(f"{expr}: {type(e).__name__}") from None

    # ------------------------------------------------------------ templates

    def t_table(self, allow_raise=False):
        """An op of the table with the arguments of one of its op_db samples."""
        tab = table()
        cats = [c for c in CATEGORY_WEIGHTS if tab.by_cat.get(c)]
        cat = self.rng.choices(cats, [CATEGORY_WEIGHTS[c] for c in cats])[0]
        entries = tab.by_cat[cat]
        weights = [5 if key in FEATURED else 1 for key, _ in entries]
        key, info = self.rng.choices(entries, weights)[0]
        dtypes = [d for d in DTYPES if d in info.dtypes]
        if not dtypes:
            raise Reject("no dtype")
        dtype = self.rng.choice(dtypes)
        samples = tab.sample_list(key, info, dtype, self.nrng)
        if not samples:
            raise Reject("no samples")
        elementwise = info.entry.kind in ELEMENTWISE
        for _ in range(4):
            s = self.rng.choice(samples)
            try:
                call = self.render_call(info.entry, s, elementwise)
            except (Reject, _Unrenderable):
                continue
            if call is None:
                continue
            return self.assign(call, f"table:{key}", allow_raise)
        raise Reject("no sample fits")

    def render_call(self, entry, sample, elementwise):
        """Source for entry called with sample's arguments, tensors substituted."""
        state = {"first": None, "matched": 0}
        new_inputs = []

        def sub(v):
            if isinstance(v, ember.Tensor):
                return self.substitute(v, elementwise, state, new_inputs)
            if isinstance(v, (tuple, list)) and any(isinstance(x, ember.Tensor) for x in v):
                items = [sub(x) for x in v]
                inner = ", ".join(items)
                return f"[{inner}]" if isinstance(v, list) else (
                    f"({inner},)" if len(items) == 1 else f"({inner})")
            return lit(v)
        args = [sub(a) for a in sample.args]
        kwargs = [f"{k}={sub(v)}" for k, v in sample.kwargs.items()]
        if len(self.inputs) + len(new_inputs) > MAX_INPUTS or \
                (state["matched"] == 0 and self.rng.random() < 0.7):
            raise Reject("nothing of the program is used, or too many inputs")
        for spec in new_inputs:
            spec[0] = self.add_input(spec[1])
        args = [a.format(*[n for n, _ in new_inputs]) if "{" in a else a for a in args]
        kwargs = [a.format(*[n for n, _ in new_inputs]) if "{" in a else a for a in kwargs]
        name = entry.name
        self_tensor = sample.args and isinstance(sample.args[0], ember.Tensor)
        op = BINARY_OPERATORS.get(name)
        if op and len(args) == 2 and not kwargs and self_tensor and self.rng.random() < 0.4:
            return f"{args[0]} {op} {args[1]}"
        if entry.method and self_tensor and (not entry.function or self.rng.random() < 0.5):
            return f"{args[0]}.{name}({', '.join(args[1:] + kwargs)})"
        if entry.function:
            return f"ember.{name}({', '.join(args + kwargs)})"
        return None

    def substitute(self, t, elementwise, state, new_inputs):
        shape, dtype = tuple(t.shape), _dtype_name(t)
        if state["first"] is None:
            state["first"] = shape
            if elementwise:
                cands = self.tensor_vars()
            else:
                cands = self.tensor_vars(lambda v: tuple(v.shape) == shape and (
                    _dtype_name(v) == dtype or self.rng.random() < 0.15))
        elif elementwise:
            first = state["first"]
            cands = self.tensor_vars(lambda v: _broadcasts(v.shape, first))
        else:
            cands = self.tensor_vars(lambda v: tuple(v.shape) == shape and (
                _dtype_name(v) == dtype or self.rng.random() < 0.15))
        if cands and self.rng.random() < 0.8:
            name = self.pick(cands)
            if state["first"] == shape and elementwise and len(new_inputs) == 0 and \
                    state["matched"] == 0:
                state["first"] = tuple(self.env[name].shape)
            state["matched"] += 1
            return name
        if dtype.startswith("complex"):
            # compiled frames with complex tensors run eagerly: nothing to compare
            raise Reject("a complex input")
        values = None
        if dtype in ("bool", "int64", "int32", "uint8", "int8", "int16") or \
                self.rng.random() < 0.3:
            if t.numel() > 24:
                raise Reject("a large fixed-value tensor")
            a = t.detach().numpy()
            values = a.round(4).tolist() if a.dtype.kind == "f" else a.tolist()
        if dtype not in DTYPES:
            dtype = "int64" if dtype.startswith(("int", "uint")) else "float32"
        grad = dtype.startswith("float") and self.rng.random() < 0.5
        spec = T(shape, dtype, layout=self.rand_layout(shape), grad=grad, values=values)
        new_inputs.append([None, spec])
        return "{%d}" % (len(new_inputs) - 1)

    def assign(self, expr, tag, allow_raise=False):
        name = self.fresh()
        env = dict(self.env)
        if self.progress:
            self.progress(self.render(extra=[f"{name} = {expr}"]))
        try:
            value = eval(compile(expr, "<gen>", "eval"), env)
        except Exception:   # noqa: BLE001
            if allow_raise:
                return self.try_stmt(f"{name} = {expr}", tag, allow_raise=True)
            raise Reject("raises")
        if isinstance(value, (tuple, list)) and value and \
                all(isinstance(x, ember.Tensor) for x in value):
            if len(value) <= 3 and isinstance(value, tuple):
                names = [name] + [self.fresh() for _ in value[1:]]
                return self.try_stmt(f"{', '.join(names)} = {expr}", tag)
            return self.try_stmt(f"{name} = {expr}[{self.rng.randrange(len(value))}]", tag)
        if not isinstance(value, ember.Tensor):
            raise Reject("not a tensor")
        return self.try_stmt(f"{name} = {expr}", tag)

    def t_dim_op(self):
        """A reduction (or other op with a dim) on any variable, dims from the schema."""
        key, info = self.rng.choice(table().dim_ops)
        e = info.entry
        v = self.pick_tensor()
        t = self.env[v]
        nd = t.ndim
        args = []
        for p in e.schema.params[1:]:
            if p.name == "dim":
                if p.type == "int[]":
                    if p.has_default and self.rng.random() < 0.2:
                        continue
                    k = self.rng.randint(1, max(1, nd))
                    dims = self.rng.sample(range(max(nd, 1)), min(k, max(nd, 1)))
                    dims = [d - nd if nd and self.rng.random() < 0.3 else d for d in dims]
                    args.append(f"dim={lit(tuple(dims)) if self.rng.random() < 0.5 else lit(dims)}"
                                if len(dims) > 1 or self.rng.random() < 0.5 else
                                f"dim={dims[0]}")
                else:
                    d = self.rng.randrange(-max(nd, 1), max(nd, 1))
                    args.append(f"dim={d}" if self.rng.random() < 0.6 else str(d))
            elif p.type == "bool" and self.rng.random() < 0.5:
                args.append(f"{p.name}={self.rng.random() < 0.5}")
        # positional dims only before any keyword
        pos = [a for a in args if "=" not in a]
        kw = [a for a in args if "=" in a]
        call_args = ", ".join(pos + kw)
        if e.method:
            expr = f"{v}.{e.name}({call_args})"
        else:
            expr = f"ember.{e.name}({v}{', ' if call_args else ''}{call_args})"
        return self.assign(expr, f"dim:{key}")

    def t_elementwise(self):
        """Two variables (or a variable and a number) through a binary op, broadcasting."""
        tab = table()
        entries = tab.by_cat["elementwise"]
        key, info = self.rng.choices(entries, [5 if k in FEATURED else 1 for k, _ in entries])[0]
        e = info.entry
        tensors = [p for p in e.schema.params if p.is_tensor and not p.kwonly]
        a = self.pick_tensor()
        args = [a]
        for _ in tensors[1:]:
            r = self.rng.random()
            if r < 0.25:
                args.append(lit(self.rng.choice([2, -1, 0.5, 1.5, True, 3])))
            else:
                shape, dtype = self.env[a].shape, self.env[a].dtype
                cands = self.tensor_vars(lambda v: _broadcasts(v.shape, shape))
                other = [c for c in cands if self.env[c].dtype != dtype]
                if other and self.rng.random() < 0.5:
                    cands = other       # mixed dtypes: promotion
                args.append(self.pick(cands) if cands else a)
        op = BINARY_OPERATORS.get(e.name)
        if op and len(args) == 2 and self.rng.random() < 0.5:
            expr = f"{args[0]} {op} {args[1]}"
        elif e.function and self.rng.random() < 0.5:
            expr = f"ember.{e.name}({', '.join(args)})"
        else:
            expr = f"{args[0]}.{e.name}({', '.join(args[1:])})"
        return self.assign(expr, f"elementwise:{key}")

    def t_promote(self):
        """A binary op between a float variable and one of another dtype (promotion),
        cast in the expression when no variable of another dtype fits."""
        entries = [(k, i) for k, i in table().by_cat["elementwise"]
                   if i.entry.kind in (registry.BINARY, registry.BINARY_FLOAT) and
                   sum(p.is_tensor and not p.kwonly for p in i.entry.schema.params) == 2]
        key, info = self.rng.choices(entries, [8 if k in FEATURED else 1
                                               for k, _ in entries])[0]
        a = self.pick_tensor()
        ta = self.env[a]
        cands = self.tensor_vars(lambda v: _broadcasts(v.shape, ta.shape) and
                                 v.dtype != ta.dtype)
        if cands and self.rng.random() < 0.6:
            b = self.pick(cands)
        else:
            same = self.tensor_vars(lambda v: _broadcasts(v.shape, ta.shape))
            b = self.pick(same)
            casts = [d for d in ("float64", "float32", "int64") if
                     "ember." + d != str(self.env[b].dtype)]
            b = f"{b}.to(ember.{self.rng.choice(casts)})"
        if self.rng.random() < 0.5:
            a, b = b, a
        op = BINARY_OPERATORS.get(info.entry.name)
        expr = f"{a} {op} {b}" if op and self.rng.random() < 0.6 else \
            f"ember.{info.entry.name}({a}, {b})"
        return self.assign(expr, f"promote:{key}")

    def t_join(self):
        """cat or stack of variables that fit together along a dim; cat sometimes takes
        an empty 1-D tensor, which it skips (PyTorch's legacy rule), or one empty along
        the dim."""
        a = self.pick_tensor(lambda v: v.ndim >= 1)
        t = self.env[a]
        shape = tuple(t.shape)
        d = self.rng.randrange(len(shape))
        stack = self.rng.random() < 0.3
        fits = self.tensor_vars(lambda v: v.ndim == len(shape) and all(
            x == y for i, (x, y) in enumerate(zip(v.shape, shape))
            if stack or i != d) and v.dtype == t.dtype)
        parts = [a] + [self.pick(fits) for _ in range(self.rng.randint(0, 2)) if fits]
        if not stack and self.rng.random() < 0.35 and len(self.inputs) < MAX_INPUTS:
            empty = (0,) if self.rng.random() < 0.5 else shape[:d] + (0,) + shape[d + 1:]
            dtype = _dtype_name(t)
            grad = dtype.startswith("float") and self.rng.random() < self.grad_p + 0.2
            parts.insert(self.rng.randrange(len(parts) + 1),
                         self.add_input(T(empty, dtype, grad=grad)))
        fn = "stack" if stack else "cat"
        return self.assign(f"ember.{fn}([{', '.join(parts)}], {d})", f"join:{fn}")

    # views

    def view_expr(self, v):
        t = self.env[v] if v in self.env else self.evaluate(v)
        shape = list(t.shape)
        nd = len(shape)
        n = t.numel()
        r = self.rng
        kinds = ["reshape", "view", "flatten", "slice", "unsqueeze", "expand"]
        if nd >= 1:
            kinds += ["select", "index", "squeeze", "narrow", "split", "unbind", "slice",
                      "slice"]
        if nd >= 2:
            kinds += ["transpose", "permute", "t", "movedim", "mT", "transpose", "permute"]
        if nd <= 2:
            kinds += ["t"]
        if any(s > 1 and s % 2 == 0 for s in shape):
            kinds += ["unflatten"]
        k = r.choice(kinds)
        if k in ("reshape", "view"):
            new = self.factor(n)
            if n > 0 and r.random() < 0.3 and new:
                new[r.randrange(len(new))] = -1
            return f"{v}.{k}({', '.join(map(str, new))})" if new and r.random() < 0.7 \
                else f"{v}.{k}({lit(tuple(new))})"
        if k == "flatten":
            if nd >= 2 and r.random() < 0.5:
                s = r.randrange(nd - 1)
                return f"{v}.flatten({s}, {r.randrange(s + 1, nd)})"
            return f"{v}.flatten()"
        if k == "slice":
            return f"{v}[{self.basic_key(shape)}]"
        if k == "unsqueeze":
            return f"{v}.unsqueeze({r.randrange(-nd - 1, nd + 1)})"
        if k == "expand":
            sizes = [r.choice([2, 3]) if s == 1 and r.random() < 0.7 else
                     (-1 if r.random() < 0.5 else s) for s in shape]
            if r.random() < 0.3:
                sizes = [r.choice([1, 2])] + sizes
            return f"{v}.expand({', '.join(map(str, sizes))})" if sizes else f"{v}.expand(())"
        if k == "select":
            d = r.randrange(nd)
            if shape[d] == 0:
                raise Reject("empty dim")
            return f"{v}.select({d - nd if r.random() < 0.3 else d}, " \
                   f"{r.randrange(-shape[d], shape[d])})"
        if k == "index":
            if shape[0] == 0:
                raise Reject("empty dim")
            return f"{v}[{r.randrange(-shape[0], shape[0])}]"
        if k == "squeeze":
            ones = [d for d, s in enumerate(shape) if s == 1]
            if ones and r.random() < 0.6:
                return f"{v}.squeeze({r.choice(ones)})"
            return f"{v}.squeeze()"
        if k == "narrow":
            d = r.randrange(nd)
            start = r.randint(0, shape[d])
            return f"{v}.narrow({d}, {start}, {r.randint(0, shape[d] - start)})"
        if k == "split":
            d = r.randrange(nd)
            size = r.randint(1, max(1, shape[d]))
            parts = max(1, math.ceil(shape[d] / size))
            return f"{v}.split({size}, {d})[{r.randrange(parts)}]"
        if k == "unbind":
            d = r.randrange(nd)
            if shape[d] == 0:
                raise Reject("empty dim")
            return f"{v}.unbind({d})[{r.randrange(shape[d])}]"
        if k == "transpose":
            a, b = r.randrange(nd), r.randrange(nd)
            return f"{v}.transpose({a}, {b - nd if r.random() < 0.3 else b})"
        if k == "permute":
            p = list(range(nd))
            r.shuffle(p)
            return f"{v}.permute({', '.join(map(str, p))})"
        if k == "t":
            return f"{v}.t()"
        if k == "mT":
            return f"{v}.mT"
        if k == "movedim":
            return f"{v}.movedim({r.randrange(nd)}, {r.randrange(nd)})"
        if k == "unflatten":
            d = r.choice([d for d, s in enumerate(shape) if s > 1 and s % 2 == 0])
            return f"{v}.unflatten({d}, (2, {shape[d] // 2}))"
        raise Reject(k)

    def factor(self, n):
        """A random shape with n elements (1 to 4 dims)."""
        r = self.rng
        if n == 0:
            dims = [r.choice([1, 2, 3]) for _ in range(r.randint(0, 2))]
            dims.insert(r.randint(0, len(dims)), 0)
            return dims
        dims = []
        rest = n
        for _ in range(r.randint(0, 3)):
            divs = [d for d in range(1, rest + 1) if rest % d == 0]
            d = r.choice(divs)
            dims.append(d)
            rest //= d
        dims.append(rest)
        if r.random() < 0.3:
            dims.insert(r.randint(0, len(dims)), 1)
        return dims

    def basic_key(self, shape):
        r = self.rng
        parts = []
        nd = len(shape)
        used = r.randint(1, max(1, nd)) if nd else 0
        for d in range(used):
            s = shape[d]
            x = r.random()
            if x < 0.3:
                parts.append(":")
            elif x < 0.5 and s > 0:
                parts.append(str(r.randrange(-s, s)))
            else:
                a = r.choice(["", str(r.randint(0, s)), str(-r.randint(1, max(1, s)))])
                b = r.choice(["", str(r.randint(0, s + 1))])
                step = r.choice(["", "", ":2", ":3"])
                parts.append(f"{a}:{b}{step}")
            if r.random() < 0.1:
                parts.append("None")
        if not parts:
            parts = [r.choice(["None", "...", ":"])] if nd == 0 else [":"]
        if nd and r.random() < 0.1:
            parts = ["..."] + parts[1:] if len(parts) > 1 else ["...", parts[0]]
        return ", ".join(parts)

    def t_view(self):
        v = self.pick_tensor(inputs_p=0.35)
        expr = self.view_expr(v)
        return self.assign(expr, "view")

    # in place

    def target(self, base):
        """An expression writing through base: base itself or one or two views of it."""
        if self.rng.random() < 0.25:
            return base
        expr = self.view_expr(base)
        if self.rng.random() < 0.2:
            expr = self.view_expr(expr)
        return expr

    def inplace_call(self, target):
        """target.<in-place op>(...), or an index assignment into target."""
        t = self.evaluate(target)
        shape = tuple(t.shape)
        r = self.rng.random()
        if r < 0.2:
            return self.setitem(target, t)
        if r < 0.3:
            fill = lit(self.rng.choice([1, 2.5, -1, True]))
            choice = self.rng.choice(["zero_()", f"fill_({fill})", "copy_({})",
                                      "clamp_(min=0)", "clamp_(-1, 1)"])
            if "{}" in choice:
                cands = self.tensor_vars(lambda v: _broadcasts_to(v.shape, shape))
                if not cands:
                    raise Reject("no source")
                choice = choice.format(self.pick(cands))
            return f"{target}.{choice}"
        key, info = self.rng.choice(table().inplace)
        e = info.entry
        fk = e.functional.kind if e.functional is not None else e.kind
        if fk in ELEMENTWISE:
            args = []
            for p in [p for p in e.schema.params if not p.kwonly][1:]:
                if not p.is_tensor:
                    break
                if self.rng.random() < 0.4:
                    args.append(lit(self.rng.choice([2, -1, 0.5, 1.5, 3])))
                else:
                    cands = self.tensor_vars(lambda v: _broadcasts_to(v.shape, shape))
                    args.append(self.pick(cands) if cands else "1")
            return f"{target}.{e.name}({', '.join(args)})"
        dtypes = [d for d in DTYPES if d in info.dtypes]
        if not dtypes:
            raise Reject("no dtype")
        samples = table().sample_list(key, info, self.rng.choice(dtypes), self.nrng)
        fits = [s for s in samples if s.args and isinstance(s.args[0], ember.Tensor)
                and tuple(s.args[0].shape) == shape]
        if not fits:
            raise Reject("no sample of this shape")
        s = self.rng.choice(fits)
        state = {"first": shape, "matched": 1}
        new_inputs = []

        def sub(v):
            if isinstance(v, ember.Tensor):
                return self.substitute(v, False, state, new_inputs)
            try:
                return lit(v)
            except _Unrenderable:      # a list of tensors: not as a method's argument
                raise Reject("unrenderable argument") from None
        rest = [sub(a) for a in s.args[1:]] + [f"{k}={sub(v)}" for k, v in s.kwargs.items()]
        if new_inputs and len(self.inputs) + len(new_inputs) > MAX_INPUTS:
            raise Reject("too many inputs")
        for spec in new_inputs:
            spec[0] = self.add_input(spec[1])
        rest = [a.format(*[n for n, _ in new_inputs]) if "{" in a else a for a in rest]
        return f"{target}.{e.name}({', '.join(rest)})"

    def setitem(self, target, t):
        shape = tuple(t.shape)
        r = self.rng.random()
        base = target
        if r < 0.55 or not shape:
            key = self.basic_key(shape)
        elif r < 0.8:
            # a mask: of the target's own values, or of another variable of its shape
            masks = self.tensor_vars(lambda v: tuple(v.shape) == shape and
                                     str(v.dtype) == "ember.bool")
            key = self.pick(masks) if masks and self.rng.random() < 0.5 else \
                f"{base} > 0" if str(t.dtype) != "ember.bool" else base
        else:
            n = shape[0]
            if n == 0:
                raise Reject("empty")
            idx = [self.rng.randrange(-n, n) for _ in range(self.rng.randint(1, 3))]
            key = f"ember.tensor({idx})"
            if len(shape) > 1 and self.rng.random() < 0.4:
                key += ", 1:"
        region = self.evaluate(f"{base}[{key}]")
        rshape = tuple(region.shape)
        x = self.rng.random()
        if x < 0.45:
            value = lit(self.rng.choice([5, 0, -1.5, 2.0, True]))
        else:
            cands = self.tensor_vars(lambda v: _broadcasts_to(v.shape, rshape) and
                                     v.dtype == t.dtype)
            if not cands:
                cands = self.tensor_vars(lambda v: _broadcasts_to(v.shape, rshape))
            if not cands:
                value = lit(self.rng.choice([5, 0, -1.5]))
            else:
                value = self.pick(cands)
        op = "+=" if self.rng.random() < 0.15 else "="
        return f"{base}[{key}] {op} {value}"

    def t_inplace(self):
        base = self.pick_tensor(inputs_p=0.15)
        stmt = self.inplace_call(self.target(base))
        self.written.add(base)
        return self.try_stmt(stmt, "inplace_input" if base in self.inputs else "inplace",
                             mutates=True)

    def t_copy_then_write(self):
        """y = x * 1 (a fresh intermediate), then a write into it or through a view of it."""
        src = self.pick_tensor(inputs_p=0.6)
        form = self.rng.choice(["{} * 1", "{}.clone()", "{} + 0", "{}.exp()", "{} * 2",
                                "ember.zeros_like({})", "{}.to(ember.float64)"])
        name = self.fresh()
        if not self.try_stmt(f"{name} = {form.format(src)}", "copy"):
            return False
        try:
            if self.rng.random() < 0.35:
                vname = self.fresh()
                if not self.try_stmt(f"{vname} = {self.view_expr(name)}", "view"):
                    raise Reject("view")
                stmt = self.inplace_call(vname if self.rng.random() < 0.5
                                         else self.target(vname))
            else:
                stmt = self.inplace_call(self.target(name))
        except Reject:
            return True
        self.written.add(name)
        return self.try_stmt(stmt, "copy_write", mutates=True)

    def t_input_view_write(self):
        """An in-place op on a view of an input: x.reshape(-1).add_(1), x.t().mul_(2)."""
        xs = [n for n in self.inputs if isinstance(self.env.get(n), ember.Tensor)
              and not self.env[n].requires_grad]
        if not xs:
            raise Reject("no input")
        x = self.rng.choice(xs)
        t = self.env[x]
        forms = ["{x}.reshape(-1).{op}", "{x}.view(-1).{op}", "{x}.flatten().{op}",
                 "{x}[0].{op}", "{x}.t().{op}", "{x}.unsqueeze(0).{op}",
                 "{x}.transpose(0, -1).{op}", "{x}[..., :1].{op}", "{x}.reshape(-1).{op}",
                 "{x}.mT.{op}", "{x}.narrow(0, 0, 1).{op}", "{x}.unbind(0)[0].{op}",
                 "{x}.split(1)[0].{op}", "{x}.movedim(0, -1).{op}", "{x}.flatten(0).{op}"]
        ops = ["add_(1)", "mul_(2)", "zero_()", "fill_(3)", "neg_()", "clamp_(max=0)"]
        if t.dtype == ember.bool:
            ops = ["zero_()", "fill_(True)", "logical_not_()"]
        stmt = self.rng.choice(forms).format(x=x, op=self.rng.choice(ops))
        self.written.add(x)
        return self.try_stmt(stmt, "input_view_write", mutates=True)

    # Python containers and objects

    def t_python(self):
        r = self.rng
        opts = []
        dicts = [n for n in self.containers(dict) if n in self.inputs]
        lists = [n for n in self.containers(list) if n in self.inputs]
        objs = [n for n in self.containers(Box)]
        ldicts = [n for n in self.containers(dict) if n not in self.inputs]
        llists = [n for n in self.containers(list) if n not in self.inputs]
        v = self.pick_tensor()
        for d in dicts:
            val = self.env[d]
            if isinstance(val.get("n"), int):
                opts += [f'{d}["n"] = {d}["n"] + 1'] * 3
                opts += [f'{self.fresh_name()} = {v} * {d}["n"]']
            if "scale" in val:
                opts += [f'{self.fresh_name()} = {v} * {d}["scale"]']
            if isinstance(val.get("w"), ember.Tensor):
                opts += [f'{self.fresh_name()} = {v} + {d}["w"]']
            if "tmp" in val:
                opts += [f'del {d}["tmp"]', f'{d}.pop("tmp")']
            opts += [f'{d}["h{self.next_var}"] = {v}', f"{d}.update(u{self.next_var}={v})",
                     f'{d}.update({{"m": {r.randint(0, 9)}}})', f'{d}.setdefault("s", 2)']
        for a in lists:
            val = self.env[a]
            opts += [f"{a}.append({v})"] * 3 + [f"{a}.extend([{v}, {v} * 2])",
                                                f"{a}.insert(0, {v})"]
            if val:
                opts += [f"{a}.pop()", f"{a}[0] = {v}"]
                if isinstance(val[-1], ember.Tensor):
                    opts += [f"{self.fresh_name()} = {a}[-1] * 2"]
        for o in objs:
            val = self.env[o]
            opts += [f"{o}.n = {o}.n + 1", f"{o}.h = {v}", f"{o}.log.append({v})",
                     f"{self.fresh_name()} = {v} * {o}.scale", f'setattr({o}, "k", {v})']
            if hasattr(val, "tmp"):
                opts += [f"del {o}.tmp"]
        for d in ldicts:
            opts += [f'{d}["b{self.next_var}"] = {v}', f"{d}.update(c{self.next_var}={v})"]
            if self.env[d]:
                opts += [f"del {d}[{next(iter(self.env[d]))!r}]"]
        for a in llists:
            opts += [f"{a}.append({v})", f"{a}.append({v}.sum())"]
        opts += [f"lst{self.next_var} = [{v}]", f'd{self.next_var} = {{"a": {v}}}']
        stmt = r.choice(opts)
        if stmt.startswith(("lst", "d")) and " = " in stmt:
            self.next_var += 1
        if stmt.startswith("v") and " = " in stmt:
            self.next_var += 1
        return self.try_stmt(stmt, "python", mutates=True)

    def fresh_name(self):
        return f"v{self.next_var}"

    def t_rank(self):
        """Tensors of many dims (the fixed-size index arrays of the C side end at 64)."""
        k = self.rng.choice([8, 33, 63, 64, 64, 65])
        if self.rng.random() < 0.5:
            expr = f"ember.ones([1] * {k}).unsqueeze(0)"
        else:
            v = self.pick_tensor()
            expr = f"{v}.reshape([1] * {k} + list({v}.shape)).unsqueeze(0)"
        return self.assign(expr, f"rank{k}")

    # ------------------------------------------------------------ the whole program

    # template weights per program mode: "mixed" draws from everything; the focused
    # modes make short programs around one concern, which are captured whole more often
    # (any unsupported statement makes a whole frame run eagerly)
    MODES = {
        "mixed": (0.5, dict(table=30, dim=10, elementwise=12, promote=5, view=12, inplace=9,
                            copy_write=8, input_view_write=4, python=10, join=3, rank=1.2)),
        "inplace": (0.15, dict(table=5, elementwise=5, view=10, inplace=10, copy_write=12,
                               input_view_write=10, rank=0.5)),
        "arith": (0.12, dict(table=10, dim=5, elementwise=12, promote=18, rank=0.5)),
        "python": (0.1, dict(table=5, elementwise=8, view=3, python=30, rank=0.5)),
        "grad": (0.13, dict(table=20, dim=10, elementwise=10, promote=4, view=5,
                            copy_write=2, join=6, rank=0.5)),
    }

    def run_template(self, t, allow_raise=False):
        if t == "table":
            self.t_table(allow_raise=allow_raise)
        elif t == "dim":
            self.t_dim_op()
        elif t == "elementwise":
            self.t_elementwise()
        elif t == "promote":
            self.t_promote()
        elif t == "view":
            self.t_view()
        elif t == "inplace":
            self.t_inplace()
        elif t == "copy_write":
            self.t_copy_then_write()
        elif t == "input_view_write":
            self.t_input_view_write()
        elif t == "python":
            self.t_python()
        elif t == "join":
            self.t_join()
        elif t == "rank":
            self.t_rank()

    def generate(self):
        r = self.rng
        modes = list(self.MODES)
        self.mode = r.choices(modes, [self.MODES[m][0] for m in modes])[0]
        weights = dict(self.MODES[self.mode][1])
        focused = self.mode != "mixed"
        if self.mode == "grad":
            self.grad_p, self.nonleaf_p = 0.85, 0.35
        if self.mode == "arith":
            self.dtype_weights = (0.4, 0.4, 0.15, 0.05)
        for _ in range(r.randint(1, 3)):
            self.new_tensor_input()
        if self.mode == "python":
            while not any(not isinstance(s, T) for s in self.inputs.values()):
                self.add_containers()
        elif self.mode == "mixed":
            self.add_containers()
        n_stmts = r.randint(1, 5) if focused else r.randint(2, 12)
        allow_raise_at = r.randrange(n_stmts) if r.random() < 0.04 else -1
        if any(not isinstance(s, T) for s in self.inputs.values()):
            weights["python"] = max(weights.get("python", 0), 25)
        names = list(weights)
        attempts = 0
        while len(self.body) < n_stmts and attempts < n_stmts * 6 and not self.raising:
            attempts += 1
            t = r.choices(names, [weights[n] for n in names])[0]
            try:
                self.run_template(t, allow_raise=len(self.body) == allow_raise_at)
            except Reject:
                pass
        ret = self.return_expr()
        return self.render(ret=ret)

    def return_expr(self):
        r = self.rng
        tensors = self.intermediates() or self.tensor_vars()
        used = set()
        for s in self.body:
            used.update(re.findall(r"\b[a-z]+\d+\b", s.split("=", 1)[-1]))
        prefer = [n for n in tensors if n in self.written or n not in used]
        pool = list(dict.fromkeys(prefer[-3:] + tensors[-2:]))
        if r.random() < 0.3 and len(tensors) > len(pool):
            pool.append(r.choice(tensors))
        extra = [n for n in self.containers((list, dict)) if n not in self.inputs]
        if extra and r.random() < 0.7:
            pool.append(r.choice(extra))
        pys = [f'{d}["n"]' for d in self.containers(dict)
               if d in self.inputs and isinstance(self.env[d].get("n"), int)]
        if pys and r.random() < 0.3:
            pool.append(pys[0])
        if not pool:
            return "None"
        r.shuffle(pool)
        k = r.randint(1, len(pool))
        items = pool[:k]
        style = r.random()
        if len(items) == 1 and style < 0.5:
            ret = items[0]
        elif style < 0.6:
            ret = "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"
        elif style < 0.75:
            ret = "[" + ", ".join(items) + "]"
        elif style < 0.92:
            ret = "{" + ", ".join(f'"{n.split("[")[0]}{i}": {n}' for i, n in
                                  enumerate(items)) + "}"
        else:
            ret = f"({items[0]}, [{', '.join(items[1:])}])"
        try:
            value = self.evaluate(ret)
        except Exception:   # noqa: BLE001 - the program raises before returning
            value = None
        nfloat = _count_float(value)
        if nfloat and r.random() < 0.3:
            self.loss = tuple(r.randint(0, 1) for _ in range(nfloat))
        else:
            self.loss = (1,) * nfloat
        return ret

    def render(self, ret="None", extra=()):
        check = {"seed": self.value_seed, "loss": self.loss,
                 "backward_twice": self.backward_twice}
        comment = f"ember fuzz program: seed {self.seed}, #{self.index} ({self.mode})"
        return render(self.inputs, check, list(self.body) + list(extra), ret, comment)


def _count_float(x):
    if isinstance(x, ember.Tensor):
        return 1 if x.dtype.is_floating_point else 0
    if isinstance(x, (list, tuple)):
        return sum(_count_float(v) for v in x)
    if isinstance(x, dict):
        return sum(_count_float(v) for v in x.values())
    return 0


def gen(seed, index, progress=None) -> str:
    """The source of program `index` of the stream `seed`."""
    return Generator(seed, index, progress).generate()
