"""Node: one operation of a Graph, and the helpers that walk the values it holds.

A node is a single statement of the program the graph stands for. Its `args` and
`kwargs` may nest tuples, lists, dicts and slices, with Nodes anywhere inside; a
Node there means "the value that node computed". Every node keeps two indexes in
step with those arguments, so passes never have to search the graph:

- `_input_nodes`: the nodes its arguments mention (in order of first appearance);
- `users`: the nodes whose arguments mention it.

Both are rebuilt whenever `args`/`kwargs` are assigned through the properties.
Mutating a list or dict inside the arguments in place bypasses them; `Graph.lint()`
recomputes the inputs from the arguments and reports such a node.

Nodes of one graph form a doubly linked list through `_prev`/`_next`, closed by the
graph's sentinel (op "root"). An erased node keeps its own links so that a loop
which is walking the graph when the node is erased can still step past it.
"""
from __future__ import annotations

import builtins
import inspect
import operator
from typing import Any, Callable

import ember
from .. import _C

OPS = ("placeholder", "get_attr", "call_function", "call_method", "call_module", "output")

_side_effectful_functions = {operator.setitem}


def _op_is_impure(target) -> bool:
    if not isinstance(target, _C.Op):
        return False
    entry = target.entry
    return bool(entry.mutates) or entry.checks_values


def has_side_effect(fn: Callable) -> Callable:
    """Marks fn as impure: call_function nodes targeting it survive dead-code
    elimination even when nothing uses their value. Usable as a decorator."""
    _side_effectful_functions.add(fn)
    return fn


def map_aggregate(a: Any, fn: Callable[[Any], Any]) -> Any:
    """Applies fn to every leaf of a nested tuple/list/dict/slice structure and
    rebuilds the structure around the results (tuple subclasses such as ember.Size
    and named tuples keep their type)."""
    if isinstance(a, tuple):
        items = [map_aggregate(x, fn) for x in a]
        if type(a) is tuple:
            return tuple(items)
        return type(a)(*items) if hasattr(a, "_fields") else type(a)(items)
    if isinstance(a, list):
        return [map_aggregate(x, fn) for x in a]
    if isinstance(a, dict):
        return {k: map_aggregate(v, fn) for k, v in a.items()}
    if isinstance(a, slice):
        return slice(map_aggregate(a.start, fn), map_aggregate(a.stop, fn),
                     map_aggregate(a.step, fn))
    return fn(a)


def map_arg(a: Any, fn: Callable[["Node"], Any]) -> Any:
    """Like map_aggregate, but calls fn on the Nodes only; other leaves stay."""
    return map_aggregate(a, lambda x: fn(x) if isinstance(x, Node) else x)


def resolvable_name(obj: Any) -> str | None:
    """The expression that names obj from the globals every generated program has
    (`ember`, `operator` and the builtins), or None when there is none.

    Identity decides, not names: an object is `ember.add` only if `ember.add is obj`.
    """
    name = getattr(obj, "__name__", None)
    if not isinstance(name, str):
        return None
    if getattr(ember, name, None) is obj:
        return f"ember.{name}"
    if isinstance(obj, _C.Op):
        if getattr(ember.prims, name, None) is obj:
            return f"ember.prims.{name}"
        if vars(ember.Tensor).get(name) is obj:      # in-place methods such as add_
            return f"ember.Tensor.{name}"
    if getattr(operator, name, None) is obj:
        return f"operator.{name}"
    if getattr(builtins, name, None) is obj:
        return name
    return None


def qualified_name(obj: Any) -> str:
    """A readable name for a call target, used when printing graphs."""
    resolved = resolvable_name(obj)
    if resolved is not None:
        return resolved
    if isinstance(obj, _C.Op):               # a later overload of an op
        return f"ember.{obj.__name__}.{obj.overload}" if obj.overload else f"ember.{obj.__name__}"
    module = getattr(obj, "__module__", None)
    qualname = getattr(obj, "__qualname__", None) or getattr(obj, "__name__", None)
    if qualname is None:
        return repr(obj)
    return f"{module}.{qualname}" if module else qualname


def format_arg(a: Any) -> str:
    """Argument text for the graph listing: nodes print as %name."""
    if isinstance(a, Node):
        return f"%{a.name}"
    if type(a) is tuple:
        inner = ", ".join(format_arg(x) for x in a)
        return f"({inner},)" if len(a) == 1 else f"({inner})"
    if isinstance(a, list):
        return "[" + ", ".join(format_arg(x) for x in a) + "]"
    if isinstance(a, dict):
        return "{" + ", ".join(f"{k!r}: {format_arg(v)}" for k, v in a.items()) + "}"
    if isinstance(a, slice):
        return f"slice({format_arg(a.start)}, {format_arg(a.stop)}, {format_arg(a.step)})"
    return repr(a)


class Node:
    """One operation. `op` says what kind of statement it is:

    placeholder    a function input; target is the parameter name, args holds the
                   default value if there is one
    get_attr       reads target (a dotted path) from the owning module
    call_function  target(*args, **kwargs); target is a callable
    call_method    args[0].<target>(*args[1:], **kwargs); target is a method name
    call_module    calls the owning module's attribute named by target (dotted path)
    output         returns args[0]
    """

    def __init__(self, graph, name: str, op: str, target: Any, args: tuple, kwargs: dict,
                 return_type: Any = None):
        self.graph = graph
        self.name = name
        self.op = op
        self.target = target
        self.type = return_type
        self.meta: dict = {}
        self.users: dict[Node, None] = {}
        self._input_nodes: dict[Node, None] = {}
        self._args: tuple = ()
        self._kwargs: dict = {}
        self._prev = self
        self._next = self
        self._erased = False
        self._update_args_kwargs(args, kwargs)

    # ------------------------------------------------------------------ arguments

    @property
    def args(self) -> tuple:
        return self._args

    @args.setter
    def args(self, value):
        self._update_args_kwargs(value, self._kwargs)

    @property
    def kwargs(self) -> dict:
        return self._kwargs

    @kwargs.setter
    def kwargs(self, value):
        self._update_args_kwargs(self._args, value)

    @property
    def all_input_nodes(self) -> list:
        """The nodes this node's arguments mention, each once, in order of appearance."""
        return list(self._input_nodes)

    def update_arg(self, idx: int, arg: Any) -> None:
        args = list(self._args)
        args[idx] = arg
        self.args = tuple(args)

    def update_kwarg(self, key: str, arg: Any) -> None:
        self.kwargs = {**self._kwargs, key: arg}

    def _update_args_kwargs(self, args, kwargs):
        """The one place arguments change, so the use indexes can never drift."""
        for old in self._input_nodes:
            old.users.pop(self, None)
        inputs: dict[Node, None] = {}

        def record(n):
            inputs.setdefault(n)
            return n

        self._args = map_arg(tuple(args), record)
        self._kwargs = map_arg(dict(kwargs), record)
        self._input_nodes = inputs
        for n in inputs:
            n.users.setdefault(self)

    def replace_input_with(self, old_input: Node, new_input: Any) -> None:
        """Makes this node read new_input wherever it read old_input."""
        def swap(n):
            return new_input if n is old_input else n
        self._update_args_kwargs(map_arg(self._args, swap), map_arg(self._kwargs, swap))

    def replace_all_uses_with(self, replace_with: Any,
                              delete_user_cb: Callable[[Node], bool] = lambda user: True,
                              *, propagate_meta: bool = False) -> list:
        """Points every user (for which delete_user_cb says True) at replace_with
        instead of this node; returns the users changed. With propagate_meta,
        replace_with (which must have no meta yet) receives a copy of this meta."""
        if propagate_meta:
            if replace_with.meta:
                raise RuntimeError(f"replace_all_uses_with(propagate_meta=True): "
                                   f"{replace_with.name} already has meta")
            replace_with.meta.update(self.meta)
        changed = [user for user in list(self.users) if delete_user_cb(user)]
        for user in changed:
            user.replace_input_with(self, replace_with)
        return changed

    # ------------------------------------------------------------------ position

    @property
    def next(self) -> Node:
        return self._next

    @property
    def prev(self) -> Node:
        return self._prev

    def prepend(self, x: Node) -> None:
        """Moves (or inserts) x to just before this node."""
        if x is self:
            return
        if x.graph is not self.graph:
            raise ValueError(f"cannot move node {x.name} into another graph")
        x._remove_from_list()
        p = self._prev
        p._next, x._prev = x, p
        x._next, self._prev = self, x

    def append(self, x: Node) -> None:
        """Moves (or inserts) x to just after this node."""
        if x is self or x is self._next:
            return
        self._next.prepend(x)

    def _remove_from_list(self):
        p, n = self._prev, self._next
        p._next, n._prev = n, p

    # ------------------------------------------------------------------ properties

    @property
    def stack_trace(self) -> str | None:
        """Where in user code this node came from (set by capture), for messages."""
        return self.meta.get("stack_trace")

    @stack_trace.setter
    def stack_trace(self, value: str | None):
        self.meta["stack_trace"] = value

    def is_impure(self) -> bool:
        """True when running the node matters even if its value is unused: inputs,
        the output, functions registered with has_side_effect, and ops whose table
        entry writes into an argument (Tensor(a!)) or raises on some input values
        (entry.checks_values: an index out of range, an integer division by zero)."""
        if self.op in ("placeholder", "output"):
            return True
        if self.op == "call_function":
            return self.target in _side_effectful_functions or _op_is_impure(self.target)
        if self.op == "call_method":      # Tensor.add_, Tensor.copy_, ...
            return _op_is_impure(inspect.getattr_static(_C.Tensor, self.target, None))
        if self.op == "call_module":
            try:
                module = fetch_attr(self.graph.owning_module, self.target)
            except AttributeError:
                return False
            return bool(getattr(module, "_is_impure", False))
        return False

    # ------------------------------------------------------------------ printing

    def format_node(self, placeholder_names: list | None = None,
                    maybe_return_typename: list | None = None) -> str | None:
        """One line of the graph listing, e.g.
        `%add : [num_users=1] = call_function[target=ember.add](args = (%x, %y), kwargs = {})`.

        Given a list, placeholder_names receives placeholders' "name: type" text and
        the placeholder line itself is left out (None); maybe_return_typename, a
        one-element list, receives " -> type" from the output node.
        """
        typename = f"{_type_repr(self.type)} " if self.type is not None else ""
        if self.op == "placeholder":
            if placeholder_names is not None:
                annotation = f": {_type_repr(self.type)}" if self.type is not None else ""
                placeholder_names.append(f"{self.target}{annotation}")
                return None
            default = f"(default={self.args[0]!r})" if self.args else ""
            return (f"%{self.name} : {typename}[num_users={len(self.users)}] = "
                    f"placeholder[target={self.target}]{default}")
        if self.op == "output":
            if self.type is not None and maybe_return_typename is not None:
                maybe_return_typename[0] = f" -> {_type_repr(self.type)}"
            return f"return {format_arg(self.args[0]) if self.args else None}"
        head = f"%{self.name} : {typename}[num_users={len(self.users)}] = {self.op}"
        if self.op == "get_attr":
            return f"{head}[target={self.target}]"
        target = self.target if isinstance(self.target, str) else qualified_name(self.target)
        return (f"{head}[target={target}](args = {format_arg(self.args)}, "
                f"kwargs = {format_arg(self.kwargs)})")

    def __repr__(self):
        return self.name


def _type_repr(t: Any) -> str:
    return t.__name__ if isinstance(t, type) else repr(t)


def fetch_attr(obj: Any, qualified_name: str) -> Any:
    """obj.<a>.<b>... for the dotted path "a.b"; AttributeError names the missing step."""
    for i, part in enumerate(qualified_name.split(".")):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            done = ".".join(qualified_name.split(".")[:i])
            raise AttributeError(f"{done or 'the module'} has no attribute {part!r} "
                                 f"(looking up {qualified_name!r})") from None
    return obj
