"""The frame hook, its per-code cache and guard programs: the thin Python face of the C
layer in csrc/capture/ (eval_frame.c, cache.c, guards.c).

Enabling capture
----------------
Capture is per thread. ``with enable(callback):`` turns it on for the current thread
(``set_callback(cb)`` sets the callback ``enable()`` uses when given none),
``with disable():`` turns it off, ``with run_only():`` uses cached entries but never
converts. They nest, and the hook is installed on the interpreter only while at least
one thread has capture on. New threads start with capture off.

What the hook does with a frame (CPython 3.11)
----------------------------------------------
Frames of generators, coroutines, module code, class bodies and ``exec``, frames started
by ``gen.throw()``, frames of trace/profile functions, and code marked ``SKIP`` run
normally. For any other function call, the guard programs of the code object's cache
entries are checked in C over the argument slots, globals, builtins and closure. The
first entry whose guards pass is moved to the front and its compiled callable is called
*instead of* the frame, with the argument slots as positional arguments:

    positional parameters, keyword-only parameters, the *args tuple, the **kwargs dict

(defaults already applied, in that order). Its result is the call's result.

The callback protocol
---------------------
On a miss (no entry passes) the hook calls, with capture off for this thread::

    callback(frame_info, entries)

``frame_info`` is a ``FrameInfo`` (code, func, globals, builtins, args, closure): args is
the tuple of argument slot values above, closure the function's cells or None. ``entries``
is the code's cache, most recently used first, as a tuple of (GuardProgram, compiled)
pairs; ``entries[0][0].check_verbose(frame_info)`` says why it missed. The callback
returns:

* ``None``: run this frame normally (ask again next time);
* ``SKIP``: run it normally, and never ask about this code object again;
* ``RUN_ONLY``: run it normally; from now on use this code's entries but never ask;
* ``(guard_program, compiled)``: add the entry at the front and call ``compiled``
  instead of the frame. If ``compiled`` is a Python function, its own code is marked
  ``SKIP`` so calling it does not come back to the callback (the frames it calls are
  captured as usual); other code the converter generates and calls itself must be
  marked with ``skip_code()``.

An exception from the callback propagates out of the call (the frame is not run).
After an internal error the callback can call ``stay_disabled()`` before raising (or
returning) to leave capture off on this thread instead of having it switched back on.

Guard tuples
------------
``GuardProgram(guards, argnames=None, freenames=None)`` takes a list of
``(kind, source, *params)`` tuples; the full format is in csrc/capture/guards.c. Sources
are ``("arg", i)``, ``("global", name)``, ``("builtin", name)``, ``("closure", i)``,
``("object", obj)``, nested ``("attr", src, name)``, ``("item", src, key)``,
``("dict", src, key)``, or the chain ``(root_kind, root, ((step, key), ...))`` that
``ember.capture.source.Source.getter()`` produces. Kinds: ``TENSOR_MATCH`` (see
``tensor_match()``), ``TYPE_MATCH``, ``ID_MATCH``, ``EQUALS_MATCH``, ``LEN_MATCH``,
``DICT_KEYS``, ``GRAD_MODE`` and ``COMPILE_CONTEXT`` (no source: this thread's state is
the given callback, or RUN_ONLY) and ``LAMBDA`` (a Python predicate; slow path).

Availability
------------
The hook needs CPython 3.11; elsewhere ``available`` is False, ``GuardProgram`` still
works, the reset and disable functions are no-ops and enabling raises
``CaptureUnavailable``. On 3.11.0-3.11.3 a warning says that some ``__getitem__`` calls
bypass the hook (CPython gh-104405).
"""
import contextlib
import platform
import sys
import warnings

from ember._C import _capture as _c

available = bool(_c.available)
SKIP = _c.SKIP
RUN_ONLY = _c.RUN_ONLY
GuardProgram = _c.GuardProgram
FrameInfo = _c.FrameInfo
FastCall = getattr(_c, "FastCall", None)     # the hook's build only
ModuleCall = getattr(_c, "ModuleCall", None)   # the hook's build only
FunctionCall = getattr(_c, "FunctionCall", None)   # the hook's build only

__all__ = [
    "available", "SKIP", "RUN_ONLY", "GuardProgram", "FrameInfo", "FastCall", "ModuleCall",
    "FunctionCall",
    "CaptureUnavailable",
    "set_callback", "get_callback", "enable", "disable", "run_only", "set_state",
    "get_state", "is_enabled", "stay_disabled", "reset_code", "reset_all", "skip_code",
    "run_only_code", "code_mark", "cache_entries", "cached_codes", "counters",
    "reset_counters", "hook_info", "tensor_match",
]


class CaptureUnavailable(RuntimeError):
    """The frame hook cannot run on this interpreter."""


_WHY_UNAVAILABLE = (
    f"ember.capture needs CPython 3.11 for its frame hook (PEP 523 internals are "
    f"version specific); this is {platform.python_implementation()} "
    f"{platform.python_version()}. Eager ember works; ember.compile does not capture here."
)

if available and sys.version_info < (3, 11, 4):
    warnings.warn(
        f"ember.capture: CPython {platform.python_version()} lets some __getitem__ calls "
        "bypass the frame hook (gh-104405, fixed in 3.11.4); those frames run eagerly.",
        RuntimeWarning, stacklevel=2)


def _require():
    if not available:
        raise CaptureUnavailable(_WHY_UNAVAILABLE)


_default_callback = None


def set_callback(callback):
    """Sets the callback ``enable()`` uses when called without one; returns the old one."""
    global _default_callback
    if callback is not None and not callable(callback):
        raise TypeError(f"capture callback must be callable, got {callback!r}")
    old, _default_callback = _default_callback, callback
    return old


def get_callback():
    return _default_callback


def enable(callback=None):
    """Context manager: capture on for this thread, converting misses with ``callback``
    (default: the one given to ``set_callback``)."""
    _require()
    callback = callback if callback is not None else _default_callback
    if callback is None:
        raise RuntimeError("ember.capture.enable(): no callback given and none set with "
                           "set_callback()")
    return _c.CaptureState(callback)


def disable():
    """Context manager: capture off for this thread (running frames finish as they are)."""
    if not available:
        return contextlib.nullcontext()
    return _c.CaptureState(None)


def run_only():
    """Context manager: use cached entries, never convert, for this thread."""
    _require()
    return _c.CaptureState(RUN_ONLY)


def _set_state(state):
    """Sets this thread's state (None, RUN_ONLY or a callback) and returns the previous
    one. Prefer the context managers."""
    _require()


def _get_state():
    """This thread's state: None (off), RUN_ONLY or the callback."""
    return None


def _stay_disabled():
    """From inside the callback: keep capture off on this thread once it returns."""
    _require()


def _reset_code(code):
    """Drops the cache entries and marks of one code object (or function)."""


def _reset_all():
    """Drops every cache entry and mark, releasing compiled callables and guards."""


def _code_mark(code):
    """SKIP, RUN_ONLY or None."""
    return None


def _cache_entries(code):
    """The (GuardProgram, compiled) entries of a code object, most recently used first."""
    return ()


def _cached_codes():
    """The code objects that have cache entries or a mark."""
    return []


def _counters():
    """{hits, misses, callbacks, frees, active_threads}, process-wide."""
    return {"hits": 0, "misses": 0, "callbacks": 0, "frees": 0, "active_threads": 0}


def _reset_counters():
    pass


# With the hook available these are the C functions themselves: no Python frame runs
# (so none is offered to the callback) when they are called with capture on.
if available:
    set_state, get_state, stay_disabled = _c.set_state, _c.get_state, _c.stay_disabled
    reset_code, reset_all, code_mark = _c.reset_code, _c.reset_all, _c.code_mark
    cache_entries, cached_codes = _c.cache_entries, _c.cached_codes
    counters, reset_counters = _c.counters, _c.reset_counters
else:
    set_state, get_state, stay_disabled = _set_state, _get_state, _stay_disabled
    reset_code, reset_all, code_mark = _reset_code, _reset_all, _code_mark
    cache_entries, cached_codes = _cache_entries, _cached_codes
    counters, reset_counters = _counters, _reset_counters


def is_enabled():
    return get_state() is not None


def skip_code(code):
    """Marks a code object (or function) so its frames always run normally."""
    _require()
    _c.mark_code(code, SKIP)


def run_only_code(code):
    """Marks a code object (or function): use its entries, never convert it again."""
    _require()
    _c.mark_code(code, RUN_ONLY)


def hook_info():
    """Which evaluation function is installed: {current, linked, previous, active_threads}."""
    _require()
    return _c.hook_info()


def tensor_match(source, tensor, *, dynamic_dims=(), check_strides=True, open_strides=None):
    """A TENSOR_MATCH guard tuple for ``tensor`` read from ``source``: exact type, dtype,
    ndim, sizes (dims in ``dynamic_dims`` match any size), strides (unless
    ``check_strides`` is False or the dim is in ``open_strides``, by default
    ``dynamic_dims``), storage offset, requires_grad and device (cpu or meta)."""
    dynamic = {d % tensor.ndim for d in dynamic_dims} if tensor.ndim else set()
    open_ = dynamic if open_strides is None else \
        ({d % tensor.ndim for d in open_strides} if tensor.ndim else set())
    sizes = tuple(None if d in dynamic else s for d, s in enumerate(tensor.shape))
    strides = None
    if check_strides:
        strides = tuple(None if d in open_ else s for d, s in enumerate(tensor.stride()))
    return ("TENSOR_MATCH", source, type(tensor), tensor.dtype, sizes, strides,
            tensor.storage_offset(), tensor.requires_grad, tensor.is_meta)
