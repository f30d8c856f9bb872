"""Why capture stopped, and how often."""
from __future__ import annotations

import collections


class Unsupported(Exception):
    """The interpreter met something it cannot put in a graph; the frame runs in CPython
    instead (or, with fullgraph=True / strict mode, the user gets this error)."""

    def __init__(self, reason: str, location: str | None = None):
        super().__init__(reason)
        self.reason = reason
        self.location = location
        self.break_at = None     # offset of the frame's own instruction to break at
        self.break_op = None

    def __str__(self):
        if self.location:
            return f"{self.reason} (at {self.location})"
        return self.reason


class CaptureError(RuntimeError):
    """Raised instead of falling back when fullgraph=True or strict mode is on."""


# counters["unsupported"][reason] -> count, counters["stats"][...] -> count, as
# torch._dynamo.utils.counters
counters = collections.defaultdict(collections.Counter)


class SelfCheckError(RuntimeError):
    """Self-check mode (options={"check": True}, EMBER_CHECK=1): a compiled call gave a
    different result, exception or side effect than the same call run eagerly."""
