"""The prims: the small set of ops every other op decomposes into (docs/prims.md).

Filled by ember.ops.install with the ops whose table entry says prim=True. A
decomposition written with `prims.<name>` can only call prims.
"""


def names():
    from ..ops import registry
    return sorted({e.name for e in registry.ENTRIES if e.prim})
