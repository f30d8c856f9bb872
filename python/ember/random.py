"""Random numbers: ember.Generator (NumPy's PCG64 underneath) and the default generator.

Ember's streams are reproducible under manual_seed but are not PyTorch's streams: the same
seed gives different numbers than torch does.
"""
from __future__ import annotations

import time

import numpy as np

from . import _C


STATE_SIZE = 64        # bytes of Generator.get_state()


class Generator:
    """A random number generator; pass it to rand/randn/dropout with generator=."""

    def __init__(self, device="cpu"):
        self.device = device
        self._seed = int(time.time_ns() % (2 ** 63))
        self._np = np.random.Generator(np.random.PCG64(self._seed))

    def manual_seed(self, seed):
        self._seed = int(seed)
        self._np = np.random.Generator(np.random.PCG64(self._seed & (2 ** 64 - 1)))
        return self

    def seed(self):
        self.manual_seed(int(time.time_ns() % (2 ** 63)))
        return self._seed

    def initial_seed(self):
        return self._seed

    def _philox_seed(self):
        """One 64-bit draw of the stream, as a signed int64: the Philox key of one call
        of a compiled graph's random draws (ember/compiler/random_draws.py). Being a
        draw, it moves on at every call, and manual_seed and set_state set it."""
        raw = self._np.bit_generator.random_raw()
        return raw - (1 << 64) if raw >= 1 << 63 else raw

    def get_state(self):
        """The generator's state as a uint8 tensor of STATE_SIZE bytes: PCG64's 128-bit
        state and increment, and the buffered 32-bit half (a flag and the value), 16
        little-endian bytes each."""
        from ._tensor_new import tensor
        state = self._np.bit_generator.state
        words = [state["state"]["state"], state["state"]["inc"], state["has_uint32"],
                 state["uinteger"]]
        data = b"".join(int(w).to_bytes(16, "little") for w in words)
        return tensor(list(data), dtype=_C.uint8)

    def set_state(self, new_state):
        """Restores a state from get_state(). As PyTorch, anything else is refused: a
        TypeError unless it is a uint8 tensor, a RuntimeError unless it has STATE_SIZE
        bytes holding a valid PCG64 state (an odd increment; a buffered half that is a
        flag and a 32-bit value), so a truncated or made-up state never runs."""
        if not isinstance(new_state, _C.Tensor):
            raise TypeError(f"expected an ember.ByteTensor (a uint8 tensor), but got "
                            f"{type(new_state).__name__}")
        if new_state.dtype is not _C.uint8 or new_state.is_meta:
            raise TypeError("RNG state must be an ember.ByteTensor (a uint8 CPU tensor), not "
                            f"{'a meta tensor' if new_state.is_meta else new_state.dtype}")
        n = new_state.numel()
        if n != STATE_SIZE:
            raise RuntimeError(f"Expected an ember.Generator state of size {STATE_SIZE} but "
                               f"found the input RNG state size to be {n}")
        data = bytes(new_state.reshape(-1).tolist())
        state, inc, has_uint32, uinteger = (int.from_bytes(data[i:i + 16], "little")
                                            for i in range(0, STATE_SIZE, 16))
        if inc % 2 == 0:
            raise RuntimeError("Invalid ember.Generator state: the PCG64 increment must be "
                               "odd")
        if has_uint32 not in (0, 1) or uinteger >= 2 ** 32:
            raise RuntimeError("Invalid ember.Generator state: the buffered 32-bit value "
                               "is not a flag and a 32-bit integer")
        self._np.bit_generator.state = {
            "bit_generator": "PCG64", "state": {"state": state, "inc": inc},
            "has_uint32": has_uint32, "uinteger": uinteger}
        return self


default_generator = Generator()
default_generator.manual_seed(67280421310721)   # PyTorch's default seed
_C._set_default_generator(default_generator)


def manual_seed(seed):
    """Seeds the default generator; returns it."""
    return default_generator.manual_seed(seed)


def seed():
    return default_generator.seed()


def initial_seed():
    return default_generator.initial_seed()


def get_rng_state():
    return default_generator.get_state()


def set_rng_state(new_state):
    default_generator.set_state(new_state)
