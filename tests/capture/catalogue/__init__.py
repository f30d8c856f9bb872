"""The capture catalogue, one module per class of construct (see case.py)."""
from . import builtins_stdlib, classes, closures, containers, core, tensors
from .case import Case, explain_case, make_namespace, stored_counts, torch_counts

MODULES = (core, containers, builtins_stdlib, classes, tensors, closures)
CASES = [case for m in MODULES for case in m.CASES]

__all__ = ["CASES", "MODULES", "Case", "explain_case", "make_namespace", "stored_counts",
           "torch_counts"]
