"""A small symbolic tracer: run a function on Proxies and record what it does.

This is a convenience for tests and hand-written graphs; Ember's real capture path
is the bytecode interpreter in ember.capture, which also sees control flow, guards
and graph breaks. symbolic_trace records:

- Python operators on proxies (x + y, x @ w, -x, x[0], x < 0) as call_function
  nodes targeting operator.* functions;
- attribute reads (x.shape) as getattr calls and method calls (x.relu()) as
  call_method nodes;
- calls of Ember ops (ember.add(x, y), ember.prims.mul(...)) as call_function
  nodes targeting the op. Ember ops are C functions that reject non-tensors, so
  during tracing the ops in the `ember` and `ember.prims` modules are replaced by
  recording wrappers (restored afterwards). An op imported by name before tracing
  (`from ember import add`) is not replaced: decorate such functions with wrap().

Tracing is not thread-safe while it patches those modules. Proxies cannot decide
control flow: bool(), len() and iteration raise TraceError. Tensors the function
closes over become constants of the graph (globals of the generated code).
"""
from __future__ import annotations

import contextlib
import functools
import inspect
import operator
from typing import Any, Callable

import ember
from .. import _C
from .graph import Graph
from .graph_module import GraphModule
from .node import Node, map_aggregate


class TraceError(ValueError):
    """Symbolic tracing met something a Proxy cannot stand for."""


class Tracer:
    """Turns proxy operations into nodes of `graph`."""

    def __init__(self, graph: Graph | None = None):
        self.graph = graph if graph is not None else Graph()

    def create_arg(self, a: Any) -> Any:
        """a with every Proxy replaced by its node."""
        return map_aggregate(a, lambda x: x.node if isinstance(x, Proxy) else x)

    def create_proxy(self, kind: str, target: Any, args: tuple, kwargs: dict,
                     name: str | None = None, type_expr: Any = None) -> Proxy:
        node = self.graph.create_node(kind, target, self.create_arg(tuple(args)),
                                      self.create_arg(dict(kwargs)), name, type_expr)
        return Proxy(node, self)

    def trace(self, fn: Callable) -> Graph:
        """Records fn, called with one placeholder per parameter, into self.graph."""
        args, kwargs = [], {}
        for p in inspect.signature(fn).parameters.values():
            if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                raise TraceError(f"symbolic_trace: variadic parameter {p.name!r} of "
                                 f"{fn.__name__} is not supported")
            proxy = Proxy(self.graph.placeholder(p.name, default_value=p.default), self)
            if p.kind == p.KEYWORD_ONLY:
                kwargs[p.name] = proxy
            else:
                args.append(proxy)
        with _recording_ember_ops():
            result = fn(*args, **kwargs)
        self.graph.output(self.create_arg(result))
        return self.graph


def symbolic_trace(fn: Callable):
    """Traces fn into a GraphModule (see the module docstring for what is recorded)."""
    return GraphModule({}, Tracer().trace(fn), class_name=fn.__name__)


def wrap(fn: Callable) -> Callable:
    """fn, wrapped so that a call with Proxy arguments records one call_function
    node targeting fn (a leaf: not traced into) instead of running it."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        tracer = _tracer_of((args, kwargs))
        if tracer is None:
            return fn(*args, **kwargs)
        return tracer.create_proxy("call_function", fn, args, kwargs)
    return wrapper


def _tracer_of(a: Any) -> Tracer | None:
    found: list = []
    map_aggregate(a, lambda x: found.append(x.tracer) if isinstance(x, Proxy) else None)
    return found[0] if found else None


@contextlib.contextmanager
def _recording_ember_ops():
    patched = [(module, name, value)
               for module in (ember, ember.prims)
               for name, value in list(vars(module).items()) if isinstance(value, _C.Op)]
    try:
        for module, name, value in patched:
            setattr(module, name, wrap(value))
        yield
    finally:
        for module, name, value in patched:
            setattr(module, name, value)


class Proxy:
    """Stands for the value of `node` while tracing; operations on it add nodes."""

    def __init__(self, node: Node, tracer: Tracer):
        self.node = node
        self.tracer = tracer

    def __repr__(self):
        return f"Proxy({self.node.name})"

    def __getattr__(self, name: str) -> Attribute:
        if name.startswith("__") and name.endswith("__"):   # protocols (copy, pickle)
            raise AttributeError(name)
        return Attribute(self, name)

    def __setitem__(self, key, value):
        self.tracer.create_proxy("call_function", operator.setitem, (self, key, value), {})

    def __bool__(self):
        raise TraceError(f"symbolically traced value {self.node.name} cannot decide "
                         f"control flow (bool() of a Proxy)")

    def __iter__(self):
        raise TraceError(f"symbolically traced value {self.node.name} cannot be iterated "
                         f"or unpacked; index it instead")

    def __len__(self):
        raise TraceError(f"len() of symbolically traced value {self.node.name} is not "
                         f"symbolic; use .shape[0]")

    __hash__ = object.__hash__            # __eq__ below records a node


class Attribute(Proxy):
    """`proxy.name`: becomes a call_method node if called, else a getattr node
    (created on first use, so x.relu() records no getattr)."""

    def __init__(self, root: Proxy, attr: str):
        self.root = root
        self.attr = attr
        self.tracer = root.tracer
        self._node = None

    @property
    def node(self) -> Node:
        if self._node is None:
            self._node = self.tracer.create_proxy(
                "call_function", getattr, (self.root, self.attr), {}).node
        return self._node

    def __call__(self, *args, **kwargs) -> Proxy:
        return self.tracer.create_proxy("call_method", self.attr, (self.root, *args), kwargs)


def _install_operators():
    reflectable = ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "matmul",
                   "and_", "or_", "xor", "lshift", "rshift")
    for name in (*reflectable, "lt", "le", "gt", "ge", "eq", "ne", "getitem"):
        fn = getattr(operator, name)
        dunder = name.rstrip("_")

        def method(self, other, fn=fn):
            return self.tracer.create_proxy("call_function", fn, (self, other), {})
        setattr(Proxy, f"__{dunder}__", method)
        if name in reflectable:
            def reflected(self, other, fn=fn):
                return self.tracer.create_proxy("call_function", fn, (other, self), {})
            setattr(Proxy, f"__r{dunder}__", reflected)
    for name in ("neg", "pos", "invert", "abs"):
        def unary(self, fn=getattr(operator, name)):
            return self.tracer.create_proxy("call_function", fn, (self,), {})
        setattr(Proxy, f"__{name}__", unary)


_install_operators()
