"""One catalogue case and the namespace its source text runs in.

Each case is written once, as source text that says `torch`; the text is executed with
`torch` bound to ember or to PyTorch. Names every case can use: torch, nn, F
(torch.nn.functional), math, and T(*shape) (a float32 tensor of seeded normal values, the
same numbers for both libraries). A case defines `fn`; `args` and `kwargs` are source text
evaluated after it.

The graph and break counts expected of each case are PyTorch's:
torch._dynamo.explain(fn)(...).graph_count (and .graph_break_count, for the few cases
marked torch_breaks, where torch breaks too) under torch 2.13, stored in counts.json by
write_catalogue_counts.py (never from Ember's output). A case may keep a module-level
`LOG` list (side effects): the tests compare it with eager's.
"""
from __future__ import annotations

import dataclasses
import json
import linecache
import math
import os
import sys
import types

import numpy as np

COUNTS_FILE = os.path.join(os.path.dirname(__file__), "counts.json")


def _graphs_breaks(stored):
    """counts.json holds the graph count of a whole capture, or [graphs, breaks]."""
    return (stored, 0) if isinstance(stored, int) else tuple(stored)


def stored_counts() -> dict:
    with open(COUNTS_FILE) as f:
        return json.load(f)


@dataclasses.dataclass
class Case:
    name: str
    src: str
    args: str = "()"
    kwargs: str = "{}"
    torch_breaks: bool = False     # torch 2.13 breaks the graph here too (counted)

    @property
    def graphs(self) -> int:
        """torch._dynamo.explain(fn)(...).graph_count, torch 2.13 (counts.json)."""
        return _graphs_breaks(stored_counts()[self.name])[0]

    @property
    def breaks(self) -> int:
        """torch._dynamo.explain(fn)(...).graph_break_count, torch 2.13 (counts.json)."""
        return _graphs_breaks(stored_counts()[self.name])[1]

    def __str__(self):
        return self.name


def make_namespace(lib, case):
    rng = np.random.default_rng(0)
    lib.manual_seed(0)       # modules made by the case: the same parameters every time

    def T(*shape):
        return lib.from_numpy(rng.standard_normal(shape).astype(np.float32))

    filename = f"<catalogue {case.name}>"
    linecache.cache[filename] = (len(case.src), None, case.src.splitlines(True), filename)
    # the namespace is a module's, registered, so dataclasses can find it
    module = types.ModuleType(f"catalogue_{case.name}")
    sys.modules[module.__name__] = module
    ns = module.__dict__
    ns.update({"torch": lib, "nn": lib.nn, "F": lib.nn.functional, "math": math, "T": T})
    exec(compile(case.src, filename, "exec"), ns)
    args = eval(f"({case.args},)" if case.args != "()" else "()", ns)
    kwargs = eval(case.kwargs, ns)
    return ns, args, kwargs


def explain_case(lib, explain, case):
    """explain(fn)(*args, **kwargs) on case's fn in a new namespace of `lib` (ember with
    ember.capture.explain, or PyTorch with torch._dynamo.explain), the grad mode put
    back afterwards (a case may leave it changed)."""
    ns, args, kwargs = make_namespace(lib, case)
    mode = lib.is_grad_enabled()
    try:
        return explain(ns["fn"])(*args, **kwargs)
    finally:
        lib.set_grad_enabled(mode)


def torch_counts(torch, cases, errors=None):
    """{case name: (graph_count, graph_break_count, [break reasons])} of torch 2.13's
    torch._dynamo.explain on each case's source run with `torch` bound to PyTorch (the
    one place expected counts come from: never from ember). With `errors` (a dict), a
    case whose explain raises is stored there (name: exception) and left out; without,
    the exception propagates."""
    import torch._dynamo
    counts = {}
    try:
        for case in cases:
            torch._dynamo.reset()
            try:
                out = explain_case(torch, torch._dynamo.explain, case)
            except Exception as e:   # noqa: BLE001 - handed to the caller
                if errors is None:
                    raise
                errors[case.name] = e
                continue
            counts[case.name] = (out.graph_count, out.graph_break_count,
                                 [str(r.reason) for r in out.break_reasons])
    finally:
        torch._dynamo.reset()
    return counts
