"""Why capture stopped, and how often."""
from __future__ import annotations

import collections
import linecache
import traceback


class Unsupported(Exception):
    """The interpreter met something it cannot put in a graph; the frame runs in CPython
    instead (or, with fullgraph=True / strict mode, the user gets this error)."""

    def __init__(self, reason: str, location: str | None = None):
        super().__init__(reason)
        self.reason = reason
        self.location = location
        self.break_at = None     # offset of the frame's own instruction to break at
        self.break_op = None
        # [(code, offset)], innermost first: the frames a break can stop in (a break
        # inside inlined calls resumes there: convert.compile_break), and the id of
        # the Translator whose CALL inlined the innermost as its whole body
        self.chain = None
        self.chain_caller = None
        self.no_nest = False     # break at the outermost call instead
        # (filename, lineno, function) of the interpreted frames, innermost first
        self.user_stack = None

    def __str__(self):
        if self.location:
            return f"{self.reason} (at {self.location})"
        return self.reason


class BreakReason(str):
    """Why capture stopped in one frame, as explain() lists it: the text "reason at
    file:line in fn", with the reason, the user's frames (traceback.FrameSummary,
    outermost first, as torch's GraphCompileReason.user_stack) and whether a graph
    break was taken (False: the frame ran whole in CPython)."""

    reason: str
    user_stack: list
    graph_break: bool

    def __new__(cls, e: Unsupported, reason: str = None, graph_break: bool = True):
        reason = reason or e.reason
        self = super().__new__(cls, f"{reason} at {e.location}" if e.location else reason)
        self.reason = reason
        self.graph_break = graph_break
        self.user_stack = []
        for filename, lineno, name in reversed(e.user_stack or ()):
            line = linecache.getline(filename, lineno).strip() if lineno else ""
            self.user_stack.append(traceback.FrameSummary(filename, lineno, name,
                                                          line=line or None))
        return self


class CaptureError(RuntimeError):
    """Raised instead of falling back when fullgraph=True or strict mode is on."""


# counters["unsupported"][reason] -> count, counters["stats"][...] -> count, as
# torch._dynamo.utils.counters
counters = collections.defaultdict(collections.Counter)


class SelfCheckError(RuntimeError):
    """Self-check mode (options={"check": True}, EMBER_CHECK=1): a compiled call gave a
    different result, exception or side effect than the same call run eagerly."""
