"""Random numbers: ember.Generator (NumPy's PCG64 underneath) and the default generator.

Ember's streams are reproducible under manual_seed but are not PyTorch's streams: the same
seed gives different numbers than torch does.
"""
from __future__ import annotations

import time

import numpy as np

from . import _C


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

    def get_state(self):
        from ._tensor_new import tensor
        state = self._np.bit_generator.state
        words = [state["state"]["state"], state["state"]["inc"], state["has_uint32"],
                 state["uinteger"]]
        data = b"".join(int(w).to_bytes(16, "little") for w in words)
        return tensor(list(data), dtype=_C.uint8)

    def set_state(self, new_state):
        data = bytes(new_state.tolist())
        words = [int.from_bytes(data[i:i + 16], "little") for i in range(0, 64, 16)]
        self._np.bit_generator.state = {
            "bit_generator": "PCG64", "state": {"state": words[0], "inc": words[1]},
            "has_uint32": words[2], "uinteger": words[3]}
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
