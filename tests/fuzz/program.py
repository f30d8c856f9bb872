"""A fuzz program: Python source text that defines INPUTS, CHECK and a function f.

    import ember
    from fuzz.program import T, Box

    INPUTS = dict(
        x0=T((3, 4), "float32", layout="t", grad=True),
        cfg={"n": 1, "w": T((4,), "float64")},
    )
    CHECK = dict(seed=7, loss=(1, 1), backward_twice=False)

    def f(x0, cfg):
        v0 = x0 * cfg["w"]
        cfg["n"] = cfg["n"] + 1
        return v0

The text is the whole program: the runner executes it, the shrinker edits it (ast), a
failure prints it. INPUTS describes the arguments of f, in order: T(...) is a tensor
(shape, dtype, memory layout, requires_grad; random values from CHECK["seed"] unless
`values` fixes them), Box(...) an object with attributes, anything else a Python value
(dicts and lists may hold T's). CHECK holds the seed of the values, the loss weights
(one 0/1 per float output: which outputs the backward's weighted sum includes) and
whether the backward runs twice.
"""
from __future__ import annotations

import ast
import math

import numpy as np

import ember

LAYOUTS = ("contig", "t", "step", "offset", "expand")


class T:
    """A tensor argument: shape, dtype name, layout, requires_grad, fixed values or None."""

    def __init__(self, shape, dtype="float32", layout="contig", grad=False, values=None,
                 nonleaf=None):
        self.shape = tuple(shape)
        self.dtype = dtype
        self.layout = layout
        self.grad = grad
        self.values = values
        self.nonleaf = nonleaf      # with grad: f gets NONLEAF[nonleaf](leaf), not the leaf

    def __repr__(self):
        parts = [repr(self.shape), repr(self.dtype)]
        if self.layout != "contig":
            parts.append(f"layout={self.layout!r}")
        if self.grad:
            parts.append("grad=True")
        if self.values is not None:
            parts.append(f"values={_literal(self.values)}")
        if self.nonleaf:
            parts.append(f"nonleaf={self.nonleaf!r}")
        return f"T({', '.join(parts)})"

    def array(self, rng):
        """The values, as a contiguous NumPy array (floats scaled by 1 + PERTURB)."""
        if self.values is not None:
            a = np.array(self.values, dtype=np.dtype(self.dtype)).reshape(self.shape)
            return _perturbed(a)
        if self.dtype == "bool":
            return rng.integers(0, 2, size=self.shape).astype(bool)
        if self.dtype.startswith("int") or self.dtype.startswith("uint"):
            return rng.integers(-3, 6, size=self.shape).astype(self.dtype)
        return _perturbed(rng.uniform(-2.0, 2.0, size=self.shape).astype(self.dtype))

    def build(self, rng, leaves=None, path=""):
        """The tensor f receives; (path, leaf) of a tensor requiring grad goes to leaves
        (the tensor whose .grad is compared)."""
        a = self.array(rng)
        arr = _laid_out(a, self.layout, rng)
        t = ember.from_numpy(arr)
        if self.grad:
            t.requires_grad_(True)
            if leaves is not None:
                leaves.append((path, t))
            if self.nonleaf:
                t = NONLEAF[self.nonleaf](t)
        return t


# Float inputs are scaled by 1 + PERTURB: execute.py sets it to tell an ill-conditioned
# result (one eager itself changes by more than the tolerance when its inputs move by a
# few ulps: a remainder of a large float32 value) from a wrong one
PERTURB = 0.0


def _perturbed(a):
    if PERTURB and a.dtype.kind == "f":
        return (a.astype(np.float64) * (1 + PERTURB)).astype(a.dtype)
    return a


# how a non-leaf argument is made from its leaf (an op between them in the graph)
NONLEAF = {
    "mul": lambda t: t * 1,
    "view": lambda t: t.view(tuple(t.shape)),
    "expand": lambda t: t.expand(tuple(t.shape)),
    "clone": lambda t: t.clone(),
}


def _literal(v):
    """repr, with NaN and infinities written as float("nan") / float("inf")."""
    if isinstance(v, list):
        return "[" + ", ".join(_literal(x) for x in v) + "]"
    if isinstance(v, float) and not math.isfinite(v):
        return f'float("{v}")'
    return repr(v)


def _laid_out(a, layout, rng):
    """The values of a in a non-contiguous layout (a copy in every case)."""
    if layout == "t" and a.ndim >= 2:
        rev = tuple(range(a.ndim))[::-1]
        return np.ascontiguousarray(a.transpose(rev)).transpose(rev)
    if layout == "step" and a.ndim >= 1:
        base = np.zeros(a.shape[:-1] + (a.shape[-1] * 2 + 1,), dtype=a.dtype)
        base[..., 1::2] = a
        return base[..., 1::2]
    if layout == "offset" and a.ndim >= 1:
        base = np.zeros((a.shape[0] + 1,) + a.shape[1:], dtype=a.dtype)
        base[1:] = a
        return base[1:]
    if layout == "expand" and a.ndim >= 1:
        # the first size>1 dim becomes a broadcast (zero stride) of its first row
        for d, n in enumerate(a.shape):
            if n > 1:
                row = np.take(a, [0], axis=d).copy()
                return np.broadcast_to(row, a.shape)
    return np.array(a, copy=True, order="C")


class Box:
    """An object argument: its attributes are what the program reads and writes."""

    def __init__(self, **attrs):
        self.__dict__.update(attrs)

    def __repr__(self):
        return "Box(" + ", ".join(f"{k}={v!r}" for k, v in self.__dict__.items()) + ")"


def build(spec, rng, leaves=None, path=""):
    """The live argument for one INPUTS entry (tensors fresh, containers copied)."""
    if isinstance(spec, T):
        return spec.build(rng, leaves, path)
    if isinstance(spec, Box):
        return Box(**{k: build(v, rng, leaves, f"{path}.{k}")
                      for k, v in spec.__dict__.items()})
    if isinstance(spec, dict):
        return {k: build(v, rng, leaves, f"{path}[{k!r}]") for k, v in spec.items()}
    if isinstance(spec, list):
        return [build(v, rng, leaves, f"{path}[{i}]") for i, v in enumerate(spec)]
    if isinstance(spec, tuple):
        return tuple(build(v, rng, leaves, f"{path}[{i}]") for i, v in enumerate(spec))
    return spec


def build_inputs(inputs: dict, seed: int, leaves=None):
    """The arguments of f: input k draws its values from the stream (seed, k). leaves
    (a list) receives (path, leaf) for every tensor that requires grad."""
    return [build(spec, np.random.default_rng([seed, k]), leaves, name)
            for k, (name, spec) in enumerate(inputs.items())]


# ---------------------------------------------------------------- the text


HEADER = "import ember\nfrom fuzz.program import T, Box\n"


def render(inputs: dict, check: dict, body: list, ret: str, comment: str = "") -> str:
    """The program's source: body is a list of statement lines (no indent)."""
    lines = [f"# {c}" for c in comment.splitlines()] if comment else []
    lines.append(HEADER)
    lines.append("INPUTS = dict(")
    for name, spec in inputs.items():
        lines.append(f"    {name}={spec!r},")
    lines.append(")")
    lines.append(f"CHECK = dict({', '.join(f'{k}={v!r}' for k, v in check.items())})")
    lines.append("")
    lines.append("")
    lines.append(f"def f({', '.join(inputs)}):")
    for s in body:
        for ln in s.splitlines():
            lines.append("    " + ln)
    lines.append(f"    return {ret}")
    return "\n".join(lines) + "\n"


class Loaded:
    """A program's source executed: f, INPUTS, CHECK."""

    def __init__(self, source: str, filename: str = "<fuzz>"):
        ns = {"__name__": "fuzz_program"}
        exec(compile(source, filename, "exec"), ns)
        self.f = ns["f"]
        self.inputs = ns["INPUTS"]
        self.check = ns.get("CHECK", {})
        self.source = source


def function_source(source: str) -> str:
    """Only the def of f (what a report shows next to INPUTS)."""
    tree = ast.parse(source)
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == "f":
            return ast.get_source_segment(source, node)
    return source
