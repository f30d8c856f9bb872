"""Philox4x32-10, the counter-based generator compiled graphs draw from (issue aot-2
item 2; csrc/jit/codegen_random.c), written with NumPy: the reference the compiled
kernels' random bits are checked against (tests/test_compiled_random.py).

A counter-based generator computes the random bits of element i of a draw directly from
(seed, offset, i): no state is carried from one element to the next, so a kernel draws
any element in any order, and a backward that computes a mask again gets the forward's
bits. Philox4x32-10 (Salmon, Moraes, Dror, Shaw: "Parallel random numbers: as easy as 1,
2, 3", SC 2011) maps a 128-bit counter and a 64-bit key through ten rounds of two 32x32
-> 64-bit multiplications; its multipliers and key increments (the Weyl constants, the
golden ratio and sqrt(3) - 1 in 32-bit fixed point) are the published ones below.

Ember's use: key = the seed (low and high 32 bits), counter = (element index low, high,
offset low, high), where the seed is drawn from the generator at each call of a
compiled graph and offset numbers the graph's draws (ember/compiler/random_draws.py).
The kernels' float32 normals compute Box-Muller in float32 (a few ulp from normal()).
"""
from __future__ import annotations

import numpy as np

# Salmon et al. 2011, section 5 (Philox4x32): multipliers and Weyl key increments
PHILOX_M0 = 0xD2511F53
PHILOX_M1 = 0xCD9E8D57
PHILOX_W0 = 0x9E3779B9
PHILOX_W1 = 0xBB67AE85
ROUNDS = 10

_MASK32 = np.uint64(0xFFFFFFFF)


def _mulhilo(a, b):
    p = a.astype(np.uint64) * np.uint64(b)
    return (p >> np.uint64(32)).astype(np.uint32), (p & _MASK32).astype(np.uint32)


def philox4x32(counter, key, rounds=ROUNDS):
    """Philox4x32 of counters (4 uint32 arrays, broadcast together) under key (2 uint32
    arrays or ints): 4 uint32 arrays of random bits."""
    c0, c1, c2, c3 = (np.asarray(c, dtype=np.uint32) for c in counter)
    k0, k1 = (np.asarray(k, dtype=np.uint32) for k in key)
    c0, c1, c2, c3 = np.broadcast_arrays(c0, c1, c2, c3)
    with np.errstate(over="ignore"):
        for r in range(rounds):
            hi0, lo0 = _mulhilo(c0, PHILOX_M0)
            hi1, lo1 = _mulhilo(c2, PHILOX_M1)
            c0, c1, c2, c3 = hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0
            if r + 1 < rounds:
                k0 = (k0 + np.uint32(PHILOX_W0)).astype(np.uint32)
                k1 = (k1 + np.uint32(PHILOX_W1)).astype(np.uint32)
    return c0, c1, c2, c3


def _split64(x):
    x = np.asarray(x, dtype=np.uint64)
    return (x & _MASK32).astype(np.uint32), (x >> np.uint64(32)).astype(np.uint32)


def random_bits(seed, offset, n):
    """The 4 uint32 words of random bits of elements 0 .. n-1 of the draw numbered
    offset under seed."""
    idx_lo, idx_hi = _split64(np.arange(n, dtype=np.uint64))
    off_lo, off_hi = _split64(offset)
    seed_lo, seed_hi = _split64(int(seed) & 0xFFFFFFFFFFFFFFFF)
    return philox4x32((idx_lo, idx_hi, off_lo, off_hi), (seed_lo, seed_hi))


def uniform(seed, offset, shape, dtype=np.float32):
    """U[0, 1) of the given shape: float32 from the top 24 bits of word 0, float64 from
    53 bits of words 0 and 1 (every value a multiple of 2**-24 or 2**-53, so never 1)."""
    n = int(np.prod(shape, dtype=np.int64))
    w0, w1, _, _ = random_bits(seed, offset, n)
    if np.dtype(dtype) == np.float64:
        a = (w0 >> np.uint32(5)).astype(np.float64)
        b = (w1 >> np.uint32(6)).astype(np.float64)
        u = (a * 67108864.0 + b) * (1.0 / 9007199254740992.0)
    else:
        u = (w0 >> np.uint32(8)).astype(np.float32) * np.float32(1.0 / 16777216.0)
    return u.reshape(shape).astype(dtype, copy=False)


def normal(seed, offset, shape, dtype=np.float32):
    """N(0, 1) of the given shape: Box-Muller on two uniforms made from words 0 and 2
    (1 - u keeps the logarithm's argument in (0, 1])."""
    n = int(np.prod(shape, dtype=np.int64))
    w0, _, w2, _ = random_bits(seed, offset, n)
    u1 = 1.0 - (w0 >> np.uint32(8)).astype(np.float64) * (1.0 / 16777216.0)
    u2 = (w2 >> np.uint32(8)).astype(np.float64) * (1.0 / 16777216.0)
    z = np.sqrt(-2.0 * np.log(u1)) * np.cos(2.0 * np.pi * u2)
    return z.reshape(shape).astype(dtype)
