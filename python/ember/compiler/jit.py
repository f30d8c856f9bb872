"""A graph's kernels as machine code (JitModule), through the kernel cache.

Each kernel is its own LLVM module, compiled with options chosen by its size
(`options`), once per process, and kept on disk across processes by kernel_cache.py.
The LLVM IR of a module is built again only when someone reads it (`ir`,
`optimized_ir`: logs and tests); a kernel loaded from the disk cache never had it.
"""
from __future__ import annotations

import functools
import math
import time

from .. import _C
from . import kernel_cache

# LLVMCodeGenOptLevel
CODEGEN_NONE, CODEGEN_LESS, CODEGEN_DEFAULT, CODEGEN_AGGRESSIVE = range(4)

# The pipeline every kernel gets: inline the body into the entry point, promote the
# accumulators to registers, clean up, hoist invariant loads, vectorise (interleaving
# reductions), clean up. Measured on the zoo GPT training step's 46 distinct kernels
# (benchmarks/compile_time.py's workload): a third of default<O2>'s compile time for the
# same kernel run time (O2's extra passes, full and runtime unrolling, GVN, SLP, buy
# these loop nests nothing); default<O1> compiles hardly faster than O2 and runs 20%
# slower (it does not vectorise).
# The last always-inline inlines the vector variants of calls the vectoriser widened
# (bfloat16 narrowing on AVX512_BF16 hosts: csrc/jit/codegen_half.c).
LEAN = ("always-inline,function(sroa,early-cse,instcombine,simplifycfg,loop-mssa(licm),"
        "loop-vectorize,instcombine,simplifycfg),always-inline")

# Kernels over at most this many points run for microseconds whatever their code: they
# get LLVM's fast instruction selector (half the code generation time).
SMALL = 4096


def options(spec):
    """(new pass manager pipeline, code generation level) for a kernel spec."""
    if any(isinstance(n, tuple) for n in spec[0]):       # sizes known per call
        return LEAN, CODEGEN_DEFAULT
    points = math.prod(spec[0])
    return LEAN, CODEGEN_NONE if points <= SMALL else CODEGEN_DEFAULT


class JitModule:
    """The kernels of one graph: `names` and `addresses` in spec order (the code lives as
    long as this object), `compile_ms` the time it took to get them. keys: the kernels'
    kernel_cache keys when known (a graph from the graph cache), with spec_of(spec, key)
    making a spec as given into the KernelSpec to compile."""

    def __init__(self, specs, name, keys=None, spec_of=None):
        t0 = time.perf_counter()
        self.name = name
        self._given = (tuple(specs), keys, spec_of)
        self.options = tuple(options(s) for s in specs)
        self.kernels = tuple(kernel_cache.kernels(specs, self.options, keys, spec_of))
        self.names = tuple(k.name for k in self.kernels)
        self.addresses = tuple(k.address for k in self.kernels)
        self.compile_ms = (time.perf_counter() - t0) * 1e3

    @functools.cached_property
    def specs(self):
        specs, keys, spec_of = self._given
        return specs if spec_of is None else tuple(map(spec_of, specs, keys))

    @functools.cached_property
    def _ir(self):
        return [_C._jit_ir(s, n, o[0]) for s, n, o in zip(self.specs, self.names, self.options)]

    @property
    def ir(self):
        """The LLVM IR of every kernel as built (built again now, for reading)."""
        return "\n".join(before for before, _ in self._ir)

    @property
    def optimized_ir(self):
        """The LLVM IR of every kernel after its optimisation pipeline."""
        return "\n".join(after for _, after in self._ir)
