"""Random draws in compiled graphs: rand, randn and randint (and so dropout, bernoulli,
uniform_, normal_, multinomial's draws, which decompose into them) as Philox4x32-10
computed in the kernels.

A graph that draws gets a `seed` step before its kernels (plan.StepKind.SEED): at
every call it takes one 64-bit draw of the generator's stream (the node's generator=,
else the default one; Generator._philox_seed) into a one-element int64 buffer. Each
draw of the graph is numbered (its offset: 0, 1, ... in graph order), and element i
(row-major) of draw k is Philox4x32-10 under key seed at counter (i, k), computed where
it is used by the loop-IR instructions `rand` / `randn` (csrc/jit/codegen_random.c;
python/ember/philox.py is the reference). So:

- a call draws from the generator's stream: consecutive calls differ, manual_seed and
  set_state reset or restore them, and a seeded run is reproducible run to run;
- any kernel that needs element i of a draw computes it again from (seed, k, i), so a
  draw is a pointwise value like any other, fused into its users (dropout is one
  kernel, no extern step); kernels that recompute it agree bit for bit;
- the backward never draws: a draw's recompute policy is "never", so the min-cut
  partitioner saves what the backward reads of it (dropout's mask), computed from the
  forward's seed.

The numbers are not eager's (eager draws from NumPy's PCG64). With
`ember.compiler.config.fallback_random = True` (read when a graph is compiled) the draws
run eager's kernels as extern steps, on eager's generator, so compiled results equal
eager's.
"""
from __future__ import annotations

from .. import _C
from ..capture.config import config
from ..ops import api as O
from ..ops import meta as M
from .loop_ir import Affine, Op
from .lowerings import _iota, lowering
from .plan import ExternStep, StepKind
from .values import PointwiseValue

# what inlining a draw into one more consumer costs (ten Philox rounds): enough that
# several consumers store it once (fusion.INLINE_LIMIT) instead of each drawing again
COST = 40
_FLOATS = (_C.float32, _C.float64)


def _seed_call(generator):
    def seed():
        from .. import random
        gen = generator if generator is not None else random.default_generator
        return (O.full((1,), gen._philox_seed(), dtype=_C.int64),)
    return seed


def seed_buffer(ctx, generator):
    """The buffer holding this call's seed for generator (None: the default one): made
    by a seed step the first time a draw of the graph asks for it."""
    key = id(generator)
    if key not in ctx.seeds:
        buf = ctx.new_buffer(_C.int64, (1,), extern=True)
        name = "philox_seed" if generator is None else "philox_seed(generator)"
        ctx.add_step(ExternStep(StepKind.SEED, _seed_call(generator), (),
                                (buf.ref.index,), name))
        ctx.seeds[key] = (generator, buf)       # the generator kept alive with its id
    return ctx.seeds[key][1]


def _linear(index, shape):
    """The row-major element number of a value of shape at index (affine)."""
    strides = M.contiguous_strides(tuple(shape))
    nd = len(index[0].coeffs) if index else 0
    coeffs = [0] * nd
    off = 0
    for a, st in zip(index, strides):
        off += a.offset * st
        for d, c in enumerate(a.coeffs):
            coeffs[d] += c * st
    return Affine(tuple(coeffs), off)


def draw(ctx, node, val, op, dtype, generator):
    """A pointwise value of val's shape: instruction op (rand, randn) in float dtype of
    this graph's next draw."""
    seed = seed_buffer(ctx, generator)
    offset = ctx.draws
    ctx.draws += 1
    shape = tuple(val.shape)

    def fn(kb, index):
        nd = len(kb.sizes)
        s = kb.load(seed, Affine((0,) * nd, 0))
        i = _iota(kb, _linear(index, shape), _C.int64)
        return kb.emit(op, dtype, (s, kb.const(offset, _C.int64), i))
    return PointwiseValue(shape, dtype, fn, COST, node)


def _in_kernels(val):
    return not config.fallback_random and val.dtype in _FLOATS


@lowering
def lower_rand(ctx, node, val, size, generator=None, **_):
    if not _in_kernels(val):
        return ctx.extern(node, val)
    return draw(ctx, node, val, Op.RAND, val.dtype, generator)


@lowering
def lower_randn(ctx, node, val, size, generator=None, **_):
    if not _in_kernels(val):
        return ctx.extern(node, val)
    return draw(ctx, node, val, Op.RANDN, val.dtype, generator)


@lowering
def lower_randint(ctx, node, val, *args, generator=None, **_):
    """low + floor(u * (high - low)) of a float64 uniform u (53 bits: exact for ranges
    up to 2^53, beyond which eager's kernel runs)."""
    low, high = (0, args[0]) if len(args) == 2 else args[:2]
    if config.fallback_random or not (-2 ** 53 <= low < high <= 2 ** 53):
        return ctx.extern(node, val)
    u = draw(ctx, node, val, Op.RAND, _C.float64, generator)
    f64, out = _C.float64, val.dtype

    def fn(kb, index):
        r = kb.emit(Op.MUL, f64, (u.fn(kb, index), kb.const(high - low, f64)))
        # (the product of a u just below 1 may round up to the range itself)
        r = kb.emit(Op.MIN, f64, (kb.emit(Op.FLOOR, f64, (r,)),
                                  kb.const(high - low - 1, f64)))
        r = kb.emit(Op.ADD, f64, (r, kb.const(low, f64)))
        return kb.cast(r, out)
    return PointwiseValue(tuple(val.shape), out, fn, COST + 4, node)
