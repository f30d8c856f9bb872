"""Interpreter: runs a graph node by node; Transformer: rebuilds it node by node.

Running node by node is slower than a GraphModule's generated code, but every step
is a method a subclass can override: ShapeProp records metadata after each node, a
debugging interpreter can compare each value with a reference, a Transformer
returns new nodes instead of values and so produces an edited copy of the graph.
"""
from __future__ import annotations

import inspect
from typing import Any

from .graph import Graph
from .graph_module import GraphModule
from .node import Node, fetch_attr, map_arg
from .proxy import Proxy, Tracer


class Interpreter:
    """Runs module.graph (or `graph`) on actual arguments.

    run_node(n) fetches n's argument values and dispatches to the method named by
    n.op: placeholder, get_attr, call_function, call_method, call_module, output,
    each taking (target, args, kwargs). With garbage_collect_values, a value is
    dropped from the environment after its last use, as the generated code does.
    """

    def __init__(self, module: Any, garbage_collect_values: bool = True,
                 graph: Graph | None = None):
        self.module = module
        self.graph = graph if graph is not None else module.graph
        self.garbage_collect_values = garbage_collect_values
        self.env: dict[Node, Any] = {}
        self.user_to_last_uses: dict[Node, list] = {}
        if garbage_collect_values:
            seen: set = set()
            for node in reversed(self.graph.nodes):
                for inp in node.all_input_nodes:
                    if inp not in seen:
                        seen.add(inp)
                        self.user_to_last_uses.setdefault(node, []).append(inp)

    def run(self, *args, initial_env: dict | None = None) -> Any:
        """Runs the graph on args; initial_env pre-seeds node values (those nodes are
        not run). Errors get a note naming the node that raised them."""
        self.env = dict(initial_env) if initial_env else {}
        self.args_iter = iter(args)
        for node in self.graph.nodes:
            if node in self.env:
                continue
            try:
                self.env[node] = self.run_node(node)
            except Exception as e:
                e.add_note(f"While executing {node.format_node()}")
                raise
            for dead in self.user_to_last_uses.get(node, ()):
                self.env.pop(dead, None)
            if node.op == "output":
                return self.env[node]
        return None

    def run_node(self, n: Node) -> Any:
        args, kwargs = self.fetch_args_kwargs_from_env(n)
        return getattr(self, n.op)(n.target, args, kwargs)

    # ------------------------------------------------------------------ one per op

    def placeholder(self, target: str, args: tuple, kwargs: dict) -> Any:
        try:
            return next(self.args_iter)
        except StopIteration:
            if args:
                return args[0]
            raise RuntimeError(f"Expected an argument for parameter {target!r}, "
                               f"but none was passed") from None

    def get_attr(self, target: str, args: tuple, kwargs: dict) -> Any:
        return self.fetch_attr(target)

    def call_function(self, target: Any, args: tuple, kwargs: dict) -> Any:
        return target(*args, **kwargs)

    def call_method(self, target: str, args: tuple, kwargs: dict) -> Any:
        obj, *rest = args
        return getattr(obj, target)(*rest, **kwargs)

    def call_module(self, target: str, args: tuple, kwargs: dict) -> Any:
        return self.fetch_attr(target)(*args, **kwargs)

    def output(self, target: str, args: tuple, kwargs: dict) -> Any:
        return args[0]

    # ------------------------------------------------------------------ helpers

    def fetch_attr(self, target: str) -> Any:
        try:
            return fetch_attr(self.module, target)
        except AttributeError as e:
            raise RuntimeError(f"node target {target!r} does not resolve: {e}") from None

    def fetch_args_kwargs_from_env(self, n: Node) -> tuple[tuple, dict]:
        return self.map_nodes_to_values(n.args, n), self.map_nodes_to_values(n.kwargs, n)

    def map_nodes_to_values(self, args: Any, n: Node) -> Any:
        def load(a: Node):
            if a not in self.env:
                raise RuntimeError(f"node {n.name} reads {a.name}, which has no value "
                                   f"(run Graph.lint() to diagnose)")
            return self.env[a]
        return map_arg(args, load)


class Transformer(Interpreter):
    """Runs the graph on Proxies, so each node's method returns a new node in
    new_graph; transform() returns the resulting GraphModule. Override a method to
    change what a node becomes, e.g. call_function returning
    `super().call_function(ember.mul, args, kwargs)` for every ember.add.

    New nodes inherit the meta keys in preserved_meta (where they came from in
    user code) but not value metadata, which a transformation may invalidate.
    """

    preserved_meta = ("stack_trace",)

    def __init__(self, module: Any):
        super().__init__(module)
        self.new_graph = Graph()
        self.tracer = Tracer(self.new_graph)

    def run_node(self, n: Node) -> Any:
        result = super().run_node(n)
        if isinstance(result, Proxy) and n.op != "output":
            for key in self.preserved_meta:
                if key in n.meta:
                    result.node.meta.setdefault(key, n.meta[key])
        return result

    def placeholder(self, target: str, args: tuple, kwargs: dict) -> Proxy:
        default = args[0] if args else inspect.Signature.empty
        return Proxy(self.new_graph.placeholder(target, default_value=default), self.tracer)

    def get_attr(self, target: str, args: tuple, kwargs: dict) -> Proxy:
        return self.tracer.create_proxy("get_attr", target, args, kwargs)

    def call_function(self, target: Any, args: tuple, kwargs: dict) -> Proxy:
        return self.tracer.create_proxy("call_function", target, args, kwargs)

    def call_module(self, target: str, args: tuple, kwargs: dict) -> Proxy:
        return self.tracer.create_proxy("call_module", target, args, kwargs)

    def transform(self) -> GraphModule:
        result = self.run()
        self.new_graph.output(self.tracer.create_arg(result))
        return GraphModule(self.module, self.new_graph)
