"""Graph: an ordered list of Nodes that prints as, and generates, Python.

The graph owns the node order (a linked list closed by a sentinel), the names
(unique, readable identifiers such as add, add_1, sum_1), the insertion point used
by create_node, and the verifier, lint(), which every pass's tests run afterwards.
"""
from __future__ import annotations

import copy
import inspect
import keyword
from typing import Any, Callable, Iterator

from ._codegen import Namespace, PythonCode, python_code
from .node import OPS, Node, fetch_attr, map_arg


class LintError(RuntimeError):
    """Graph.lint() found a broken invariant; the message names the node."""


class _NodeList:
    """The live view Graph.nodes returns. Iterating tolerates erasing the node
    just yielded (and moving nodes behind the cursor), as passes routinely do."""

    def __init__(self, graph: Graph, reverse: bool = False):
        self._graph = graph
        self._reverse = reverse

    def __len__(self) -> int:
        return self._graph._len

    def __iter__(self) -> Iterator[Node]:
        root = self._graph._root
        step = "_prev" if self._reverse else "_next"
        cur = getattr(root, step)
        while cur is not root:
            if not cur._erased:
                yield cur
            cur = getattr(cur, step)

    def __reversed__(self) -> _NodeList:
        return _NodeList(self._graph, not self._reverse)


class _InsertPoint:
    """Where create_node puts new nodes until the `with` block ends."""

    def __init__(self, graph: Graph, insert: Callable[[Node], None]):
        self._graph = graph
        self._saved = graph._insert
        graph._insert = insert

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._graph._insert = self._saved


class Graph:
    """Nodes in program order. Build one with placeholder / call_function /
    call_method / call_module / get_attr / output, or edit one with the node
    methods; check it with lint(); turn it into Python with python_code()."""

    def __init__(self, owning_module: Any = None):
        self._root = Node(self, "", "root", "", (), {})
        self._len = 0
        self._namespace = Namespace()
        self._insert: Callable[[Node], None] = self._root.prepend     # append at the end
        self.owning_module = owning_module

    @property
    def nodes(self) -> _NodeList:
        return _NodeList(self)

    def find_nodes(self, *, op: str, target: Any = None) -> list:
        """Nodes with this op (and target, when given), in graph order."""
        return [n for n in self.nodes
                if n.op == op and (target is None or n.target == target)]

    # ------------------------------------------------------------------ building

    def create_node(self, op: str, target: Any, args: tuple | None = None,
                    kwargs: dict | None = None, name: str | None = None,
                    type_expr: Any = None) -> Node:
        """Makes a node at the insertion point. The name is `name`, or derived from
        the target, made unique within the graph."""
        if op not in OPS:
            raise ValueError(f"unknown node op {op!r}; expected one of {OPS}")
        name = self._namespace.create_name(name if name is not None else _target_hint(target))
        node = Node(self, name, op, target, args or (), kwargs or {}, type_expr)
        self._insert(node)
        self._len += 1
        return node

    def placeholder(self, name: str, type_expr: Any = None,
                    default_value: Any = inspect.Signature.empty) -> Node:
        """A function parameter named `name` (with a default if default_value is given)."""
        args = () if default_value is inspect.Signature.empty else (default_value,)
        return self.create_node("placeholder", name, args, type_expr=type_expr)

    def get_attr(self, qualified_name: str, type_expr: Any = None) -> Node:
        return self.create_node("get_attr", qualified_name, type_expr=type_expr)

    def call_function(self, the_function: Callable, args: tuple | None = None,
                      kwargs: dict | None = None, type_expr: Any = None) -> Node:
        return self.create_node("call_function", the_function, args, kwargs,
                                type_expr=type_expr)

    def call_method(self, method_name: str, args: tuple | None = None,
                    kwargs: dict | None = None, type_expr: Any = None) -> Node:
        return self.create_node("call_method", method_name, args, kwargs, type_expr=type_expr)

    def call_module(self, module_name: str, args: tuple | None = None,
                    kwargs: dict | None = None, type_expr: Any = None) -> Node:
        return self.create_node("call_module", module_name, args, kwargs, type_expr=type_expr)

    def output(self, result: Any, type_expr: Any = None) -> Node:
        return self.create_node("output", "output", (result,), type_expr=type_expr)

    def inserting_before(self, n: Node | None = None) -> _InsertPoint:
        """New nodes go just before n (at the start of the graph when n is None)."""
        if n is None:
            return self.inserting_after(self._root)
        return _InsertPoint(self, n.prepend)

    def inserting_after(self, n: Node | None = None) -> _InsertPoint:
        """New nodes go after n, in creation order (at the end when n is None).

        torch.fx puts each new node directly after n, so two nodes created in one
        block come out reversed; Ember keeps them in the order they were created.
        """
        if n is None:
            return self.inserting_before(self._root)
        cursor = n

        def insert(x: Node):
            nonlocal cursor
            cursor.append(x)
            cursor = x
        return _InsertPoint(self, insert)

    def node_copy(self, node: Node, arg_transform: Callable[[Node], Any] = lambda x: x) -> Node:
        """Copies node (from any graph) into this one at the insertion point, mapping
        its input nodes through arg_transform; meta is copied shallowly."""
        args = map_arg(node.args, arg_transform)
        kwargs = map_arg(node.kwargs, arg_transform)
        result = self.create_node(node.op, node.target, args, kwargs, node.name, node.type)
        result.meta = copy.copy(node.meta)
        return result

    def graph_copy(self, g: Graph, val_map: dict, return_output_node: bool = False) -> Any:
        """Copies g's nodes (except those already in val_map, which maps g's nodes to
        this graph's) into this graph, filling val_map. Returns what g's output
        returns, mapped (and the output node itself with return_output_node)."""
        for node in g.nodes:
            if node in val_map:
                continue
            if node.op == "output":
                rv = map_arg(node.args[0], lambda n: val_map[n])
                return (rv, node) if return_output_node else rv
            val_map[node] = self.node_copy(node, lambda n: val_map[n])
        return None

    # ------------------------------------------------------------------ editing

    def erase_node(self, to_erase: Node) -> None:
        """Removes a node nothing uses any more."""
        if to_erase.graph is not self or to_erase._erased:
            raise ValueError(f"node {to_erase.name} is not in this graph")
        if to_erase.users:
            raise RuntimeError(f"Tried to erase node {to_erase.name} but it still has "
                               f"{len(to_erase.users)} user(s): {list(to_erase.users)}")
        to_erase._remove_from_list()
        to_erase._erased = True
        self._len -= 1
        to_erase._update_args_kwargs((), {})

    def eliminate_dead_code(self, is_impure_node: Callable[[Node], bool] | None = None) -> bool:
        """Erases nodes whose values are unused, last first so chains of dead nodes
        go in one sweep; impure nodes (Node.is_impure, or is_impure_node when given)
        stay. Returns whether anything was erased."""
        self.lint()
        impure = is_impure_node or Node.is_impure
        changed = False
        for node in reversed(self.nodes):
            if not node.users and not impure(node):
                self.erase_node(node)
                changed = True
        return changed

    # ------------------------------------------------------------------ output

    def python_code(self, root_module: str = "self", *, verbose: bool = False) -> PythonCode:
        """The Python source of `def forward(<root_module>, ...)` and its globals."""
        return python_code(self, root_module, verbose)

    def __str__(self) -> str:
        return "\n".join(["graph():", *(f"    {n.format_node()}" for n in self.nodes)])

    # ------------------------------------------------------------------ verifier

    def lint(self) -> None:
        """Checks the graph's invariants; raises LintError naming the first bad node.

        Order: inputs defined before use, placeholders first (those with defaults
        last), exactly one output and it is last. Uses: users and inputs agree with
        the arguments both ways, and every argument node is a live node of this
        graph. Targets: call_method a str, call_function a callable, get_attr and
        call_module strings that resolve on owning_module when there is one. Names:
        unique identifiers.
        """
        seen: set = set()
        names: set = set()
        first_op = default_placeholder = output = None
        prev, node = self._root, self._root._next
        count = 0
        while node is not self._root:
            count += 1
            if count > self._len:
                _fail(node, f"the node list is longer than the graph's count ({self._len})")
            if node._prev is not prev:
                _fail(node, "its prev link does not point at the node before it")
            if node.graph is not self or node._erased:
                _fail(node, "it is linked into this graph but erased or owned by another")
            self._lint_order(node, output, first_op)
            if node.op == "placeholder":
                if node.args:
                    default_placeholder = node
                elif default_placeholder is not None:
                    _fail(node, f"placeholder without a default follows placeholder "
                                f"{default_placeholder.name}, which has one")
            elif first_op is None:
                first_op = node
            if node.name in names:
                _fail(node, f"the name {node.name!r} is used by an earlier node too")
            if not node.name.isidentifier() or keyword.iskeyword(node.name):
                _fail(node, f"the name {node.name!r} is not a Python identifier")
            self._lint_target(node)
            self._lint_uses(node, seen)
            if node.op == "output":
                output = node
            seen.add(node)
            names.add(node.name)
            prev, node = node, node._next
        if self._root._prev is not prev:
            raise LintError("Graph.lint: the last node is not linked back to the graph's end")
        if count != self._len:
            raise LintError(f"Graph.lint: {count} nodes are linked but the graph counts "
                            f"{self._len}")
        if output is None:
            raise LintError("Graph.lint: the graph has no output node")

    def _lint_order(self, node: Node, output: Node | None, first_op: Node | None):
        if node.op not in OPS:
            _fail(node, f"unknown op {node.op!r}")
        if output is not None:
            what = "a second output node" if node.op == "output" else "a node"
            _fail(node, f"{what} after the output node {output.name}")
        if node.op == "placeholder" and first_op is not None:
            _fail(node, f"placeholder after the non-placeholder node {first_op.name}")

    def _lint_target(self, node: Node):
        target = node.target
        if node.op in ("placeholder", "call_method", "get_attr", "call_module"):
            if not isinstance(target, str):
                _fail(node, f"{node.op} target must be a str, not {type(target).__name__}")
        if node.op == "call_function" and not callable(target):
            _fail(node, f"call_function target {target!r} is not callable")
        if node.op in ("get_attr", "call_module") and self.owning_module is not None:
            try:
                value = fetch_attr(self.owning_module, target)
            except AttributeError as e:
                _fail(node, f"{node.op} target does not resolve on the owning module: {e}")
            if node.op == "call_module" and not callable(value):
                _fail(node, f"call_module target {target!r} is not callable")

    def _lint_uses(self, node: Node, seen: set):
        inputs: dict = {}
        map_arg((node.args, node.kwargs), lambda n: inputs.setdefault(n))
        if list(inputs) != list(node._input_nodes):
            _fail(node, "its recorded inputs disagree with its args/kwargs (were they "
                        "mutated in place instead of assigned?)")
        for inp in inputs:
            if inp.graph is not self:
                _fail(node, f"argument {inp.name} belongs to another graph")
            if inp._erased:
                _fail(node, f"argument {inp.name} has been erased")
            if inp not in seen:
                _fail(node, f"argument {inp.name} is used before it is defined")
            if node not in inp.users:
                _fail(node, f"argument {inp.name} does not list it among its users")
        for user in node.users:
            if user.graph is not self or user._erased:
                _fail(node, f"its users list {user.name}, which is not in this graph")
            if node not in user._input_nodes:
                _fail(node, f"its users list {user.name}, which does not use it")


def _fail(node: Node, message: str):
    try:
        listing = node.format_node()
    except Exception:               # a node broken enough that it cannot print itself
        listing = f"%{node.name} = {node.op}[target={node.target!r}]"
    raise LintError(f"Graph.lint: node {node.name}: {message}\n    {listing}")


def _target_hint(target: Any) -> str:
    """The name a node gets from its target: add for ember.add, relu for 'relu',
    sub_weight for 'sub.weight'."""
    if isinstance(target, str):
        return target.replace(".", "_")
    name = getattr(target, "__name__", None) or type(target).__name__
    return _snake_case(name)


def _snake_case(name: str) -> str:
    out = []
    for i, ch in enumerate(name):
        if ch.isupper() and i and (name[i - 1].islower() or name[i - 1].isdigit()):
            out.append("_")
        out.append(ch.lower())
    return "".join(out)
