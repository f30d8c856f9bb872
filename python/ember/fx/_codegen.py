"""Graph -> Python source: the text every graph prints as, and the code GraphModule runs.

The generated function is plain Python that reads like the program the graph stands
for:

    def forward(self, x, w, b):
        matmul = ember.matmul(x, w);  x = w = None
        add = ember.add(matmul, b);  matmul = b = None
        relu = add.relu();  add = None
        return relu

Each statement is one node. A value is dropped (`name = None`) right after its last
use, so running the code holds no more tensors alive than the graph needs. Call
targets are written so a reader can look them up: Ember ops as `ember.<op>`,
operator-module functions as `operator.<fn>`, builtins by name; anything else (a
user function, a constant that has no literal form) is passed in through the code's
globals under a readable name that no node or parameter uses.
"""
from __future__ import annotations

import builtins
import keyword
import math
import operator
import re
from typing import Any, NamedTuple

import ember
from .node import Node, resolvable_name

# names the generated code always has in scope; node names must never shadow them
RESERVED = frozenset({"self", "ember", "operator"})


def _is_illegal_name(name: str) -> bool:
    return keyword.iskeyword(name) or hasattr(builtins, name) or name in RESERVED


class Namespace:
    """Hands out unique, legal Python identifiers derived from a hint.

    "add" then "add" gives add, add_1; a hint that is a builtin or keyword ("sum",
    "getattr") is suffixed too (sum_1), so generated code never shadows a name it
    may itself need.
    """
    _illegal_chars = re.compile(r"[^0-9a-zA-Z_]+")
    _numbered = re.compile(r"(.*)_(\d+)$")

    def __init__(self):
        self._used: set[str] = set()
        self._base_count: dict[str, int] = {}

    def reserve(self, name: str) -> None:
        self._used.add(name)

    def create_name(self, hint: str) -> str:
        candidate = self._illegal_chars.sub("_", hint) or "_unnamed"
        if candidate[0].isdigit():
            candidate = "_" + candidate
        match = self._numbered.match(candidate)
        if match:
            base, num = match.group(1), int(match.group(2))
        else:
            base, num = candidate, self._base_count.get(candidate, 0)
        while candidate in self._used or _is_illegal_name(candidate):
            num += 1
            candidate = f"{base}_{num}"
        self._used.add(candidate)
        self._base_count[base] = num
        return candidate


class PythonCode(NamedTuple):
    """Source of a `forward(<root_module>, ...)` function and the globals it needs."""
    src: str
    globals: dict


def python_code(graph, root_module: str = "self", verbose: bool = False) -> PythonCode:
    """Generates the source of `def forward(<root_module>, <placeholders>)`.

    verbose adds, where nodes carry them, `: "float32[2, 3]"` annotations from
    meta["tensor_meta"] and the last lines of meta["stack_trace"] as comments.
    """
    return _Emitter(graph, root_module, verbose).emit()


class _Emitter:
    def __init__(self, graph, root_module, verbose):
        self.graph = graph
        self.root = root_module
        self.verbose = verbose
        self.globals: dict[str, Any] = {"ember": ember, "operator": operator}
        self.builtins_used: set[str] = set()
        self.node_names = {n.name for n in graph.nodes}
        self.names = Namespace()
        for name in (root_module, *self.node_names,
                     *(n.target for n in graph.nodes if n.op == "placeholder")):
            self.names.reserve(name)

    # ------------------------------------------------------------------ values

    def ref(self, obj: Any) -> str:
        """An expression for obj: a resolvable name, or a new global holding it."""
        resolved = resolvable_name(obj)
        if resolved is not None:
            return resolved if "." in resolved else self.builtin(resolved)
        for name, value in self.globals.items():
            if value is obj:
                return name
        hint = getattr(obj, "__name__", None)
        if not isinstance(hint, str):
            hint = f"_{type(obj).__name__}_constant"
        name = self.names.create_name(hint)
        self.globals[name] = obj
        return name

    def builtin(self, name: str) -> str:
        """Names a builtin, noting that no parameter may shadow it."""
        self.builtins_used.add(name)
        return name

    def value(self, a: Any) -> str:
        """Python expression text for an argument value."""
        if isinstance(a, Node):
            return a.name
        if type(a) is tuple:
            inner = ", ".join(self.value(x) for x in a)
            return f"({inner},)" if len(a) == 1 else f"({inner})"
        if isinstance(a, ember.Size):
            return f"ember.Size([{', '.join(self.value(x) for x in a)}])"
        if isinstance(a, tuple) and hasattr(a, "_fields"):
            return f"{self.ref(type(a))}({', '.join(self.value(x) for x in a)})"
        if type(a) is list:
            return "[" + ", ".join(self.value(x) for x in a) + "]"
        if type(a) is dict:
            return "{" + ", ".join(f"{self.value(k)}: {self.value(v)}"
                                   for k, v in a.items()) + "}"
        if isinstance(a, slice):
            return (f"{self.builtin('slice')}({self.value(a.start)}, {self.value(a.stop)}, "
                    f"{self.value(a.step)})")
        if a is Ellipsis:
            return self.builtin("Ellipsis")
        if a is None or type(a) in (bool, int, str, bytes):
            return repr(a)
        if type(a) is float:
            if math.isnan(a):
                return f"{self.builtin('float')}('nan')"
            if math.isinf(a):
                return f"{'-' if a < 0 else ''}{self.builtin('float')}('inf')"
            return repr(a)
        if isinstance(a, ember.dtype):
            return repr(a)                      # ember.float32
        if isinstance(a, ember.device):
            return f"ember.device({str(a)!r})"
        return self.ref(a)

    def call_args(self, args, kwargs) -> str:
        parts = [self.value(a) for a in args]
        parts += [f"{k}={self.value(v)}" for k, v in kwargs.items()]
        return ", ".join(parts)

    def attr(self, expr: str, qualified_name: str) -> str:
        """expr.<a>.<b>, with getattr(...) for parts that are not identifiers."""
        for part in qualified_name.split("."):
            if part.isidentifier() and not keyword.iskeyword(part):
                expr = f"{expr}.{part}"
            else:
                expr = f"{self.builtin('getattr')}({expr}, {part!r})"
        return expr

    def annotation(self, node: Node) -> str:
        sym = getattr(node.type, "sym_annotation", None)
        if sym is not None:                 # a size input ([dynamic]): s0: "Sym(s0)"
            return f': "{sym}"'
        meta = node.meta.get("tensor_meta")
        if not self.verbose or meta is None:
            return ""
        return f': "{_describe(meta)}"'

    # ------------------------------------------------------------------ statements

    def emit(self) -> PythonCode:
        nodes = list(self.graph.nodes)
        last_uses = _last_uses(nodes)
        placeholders = [n for n in nodes if n.op == "placeholder"]
        body: list[str] = []
        for node in nodes:
            if node.op == "placeholder":
                continue
            body += self.comments(node)
            if node.op == "output":
                body.append(f"return {self.value(node.args[0])}")
                continue
            stmt = f"{node.name}{self.annotation(node)} = {self.expression(node)}"
            dead = [n.name for n in last_uses.get(node, ())]
            if not node.users:
                dead.append(node.name)
            if dead:
                stmt += f";  {' = '.join(dead)} = None"
            body.append(stmt)
        # parameters last: whether a placeholder may keep its own name as the
        # parameter depends on which builtins the code above turned out to use
        defaults = {n: f"={self.value(n.args[0])}" for n in placeholders if n.args}
        params, prelude = [], []
        for node in placeholders:
            prelude += self.comments(node)
            param = self.parameter_name(node)
            params.append(f"{param}{self.annotation(node)}{defaults.get(node, '')}")
            if param != node.name:
                prelude.append(f"{node.name} = {param}")
        body = prelude + body
        if all(line.startswith("#") for line in body):
            body.append("pass")
        signature = ", ".join([self.root, *params])
        src = f"def forward({signature}):\n" + "".join(f"    {line}\n" for line in body)
        return PythonCode(src, self.globals)

    def comments(self, node: Node) -> list:
        if not (self.verbose and node.stack_trace):
            return []
        lines = [ln.strip() for ln in node.stack_trace.strip().splitlines()]
        return [f"# {ln}" for ln in lines[-2:]]

    def expression(self, node: Node) -> str:
        if node.op == "get_attr":
            return self.attr(self.root, node.target)
        if node.op == "call_function":
            return f"{self.ref(node.target)}({self.call_args(node.args, node.kwargs)})"
        if node.op == "call_method":
            obj, *rest = node.args
            method = self.attr(self.value(obj), node.target)
            return f"{method}({self.call_args(rest, node.kwargs)})"
        if node.op == "call_module":
            module = self.attr(self.root, node.target)
            return f"{module}({self.call_args(node.args, node.kwargs)})"
        raise ValueError(f"cannot generate code for node {node.name} with op {node.op!r}")

    def parameter_name(self, node: Node) -> str:
        """The placeholder's target, so callers can pass it by keyword, unless that
        would shadow a name the code uses; then the node's own (unique) name."""
        target = node.target
        if (target.isidentifier() and not keyword.iskeyword(target)
                and target not in RESERVED and target not in self.builtins_used
                and (target == node.name or target not in self.node_names)):
            return target
        return node.name


def _last_uses(nodes: list) -> dict:
    """node -> the input nodes whose last use is that node (outputs excluded: the
    return statement ends the function anyway)."""
    seen: set = set()
    result: dict = {}
    for node in reversed(nodes):
        for inp in node.all_input_nodes:
            if inp not in seen:
                seen.add(inp)
                if node.op != "output":
                    result.setdefault(node, []).append(inp)
    return result


def _describe(meta: Any) -> str:
    if isinstance(meta, (tuple, list)) and not hasattr(meta, "_fields"):
        return "(" + ", ".join(_describe(m) for m in meta) + ")"
    if isinstance(meta, dict):
        return "{" + ", ".join(f"{k!r}: {_describe(v)}" for k, v in meta.items()) + "}"
    return str(meta)
