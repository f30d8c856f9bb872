"""ember.compiler mirrors torch.compiler: reset, disable, allow_in_graph, is_compiling,
config. (The LLVM compiler's passes live in this package's submodules.)"""
from __future__ import annotations

import functools
import weakref

from ..capture import _hook, skip as _skip
from . import backend as _backend  # noqa: F401  (registers backend "llvm")
from ..capture import reset as _reset_capture
from ..capture.config import config

# weak: each autograd.Function subclass registers its apply, and classes made in a
# function must not live for ever
_allowed_in_graph = weakref.WeakSet()


def reset():
    """Forgets every compiled graph and cached entry."""
    _reset_capture()


def disable(fn=None, recursive=True):
    """fn (or the decorated function) always runs in CPython, never captured; with
    recursive=True, neither are the functions it calls. Called inside captured code
    it is a graph break there: the graph before it runs, then the call in CPython, and
    capture resumes after it (ember/capture/resume.py)."""
    if fn is None:
        return functools.partial(disable, recursive=recursive)
    code = getattr(fn, "__code__", None)
    if code is not None:
        _skip.disable_code(code)
        if _hook.available:
            _hook.skip_code(code)
    if not recursive:
        return fn

    @functools.wraps(fn)
    def run_uncaptured(*args, **kwargs):
        if not _hook.available:
            return fn(*args, **kwargs)
        with _hook.disable():
            return fn(*args, **kwargs)
    _skip.disable_code(run_uncaptured.__code__)      # one code object for all wrappers
    return run_uncaptured


def allow_in_graph(fn):
    """Puts calls of fn into graphs as one opaque node instead of tracing into it.
    fn must accept meta tensors (it runs on them during capture)."""
    _allowed_in_graph.add(fn)
    return fn


def is_allowed_in_graph(fn) -> bool:
    try:
        return fn in _allowed_in_graph
    except TypeError:
        return False


def is_compiling() -> bool:
    """True while ember.compile is capturing the calling code (the capture sees a
    constant True); False when running eagerly."""
    return False


def is_dynamo_compiling() -> bool:
    return False


__all__ = ["reset", "disable", "allow_in_graph", "is_compiling", "config"]
