"""A graph's kernels as machine code (JitModule), through the kernel cache.

Each kernel is its own LLVM module, optimised with a pipeline chosen by its size
(`pipeline`), compiled once per process and kept on disk across processes by
kernel_cache.py. The LLVM IR of a module is built again only when someone reads it
(`ir`, `optimized_ir`: logs and tests); a kernel loaded from the disk cache never had it.
"""
from __future__ import annotations

import functools
import time

from .. import _C
from . import kernel_cache

O2 = "default<O2>"
O1 = "default<O1>"


def pipeline(spec):
    """The new pass manager pipeline for a kernel spec. Every kernel gets O2 (which
    vectorises; O1 does not)."""
    return O2


class JitModule:
    """The kernels of one graph: `names` and `addresses` in spec order (the code lives as
    long as this object), `compile_ms` the time it took to get them."""

    def __init__(self, specs, name):
        t0 = time.perf_counter()
        self.name = name
        self.specs = tuple(specs)
        self.passes = tuple(pipeline(s) for s in self.specs)
        self.kernels = tuple(kernel_cache.kernels(self.specs, self.passes))
        self.names = tuple(k.name for k in self.kernels)
        self.addresses = tuple(k.address for k in self.kernels)
        self.compile_ms = (time.perf_counter() - t0) * 1e3

    @functools.cached_property
    def _ir(self):
        return [_C._jit_ir(s, n, p) for s, n, p in zip(self.specs, self.names, self.passes)]

    @property
    def ir(self):
        """The LLVM IR of every kernel as built (built again now, for reading)."""
        return "\n".join(before for before, _ in self._ir)

    @property
    def optimized_ir(self):
        """The LLVM IR of every kernel after its optimisation pipeline."""
        return "\n".join(after for _, after in self._ir)
