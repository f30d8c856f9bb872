"""ember.fx: the graph IR every stage of Ember speaks (Ember's torch.fx).

A Graph is a list of Nodes in program order; it prints as a readable listing and
generates the Python it stands for. A GraphModule runs that Python. Interpreter and
Transformer walk a graph node by node; symbolic_trace records a function into a
graph by running it on Proxies. See graph.py for the verifier, lint().
"""
from .graph import Graph, LintError
from .graph_module import GraphModule
from .interpreter import Interpreter, Transformer
from .node import Node, has_side_effect, map_aggregate, map_arg
from .proxy import Attribute, Proxy, TraceError, Tracer, symbolic_trace, wrap
from ._codegen import PythonCode
from . import passes  # noqa: F401

__all__ = ["Attribute", "Graph", "GraphModule", "Interpreter", "LintError", "Node", "Proxy",
           "PythonCode", "TraceError", "Tracer", "Transformer", "has_side_effect",
           "map_aggregate", "map_arg", "symbolic_trace", "wrap"]
