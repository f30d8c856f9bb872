"""ember.compile: capture a function's or module's tensor code into graphs and run them
through a backend, as torch.compile does.

    @ember.compile
    def f(x, w, b):
        return (x @ w + b).relu().sum()

Calling f turns the frame hook on for this thread for the duration of the call; the hook
converts f's frame on a miss (ember/capture/convert.py) and runs the cached entry on a
hit. What cannot be captured is a graph break (the graph so far, the instruction in
CPython, capture resumed after it: resume.py) or the frame runs whole in CPython, both
counted in ember.capture.counters; fullgraph=True or strict mode
(ember.compiler.config.strict, EMBER_STRICT=1) raise instead.
"""
from __future__ import annotations

import functools
import platform
import types
import warnings

from . import _hook, backends
from .config import config
from . import self_check
from .convert import CompileContext, make_callback, retry_if_fallen_back

_SUPPORTED = "CPython 3.11 (3.11.4 or later)"
_warned_modes = set()

# torch.compile's mode names; "reduce-overhead" gives a function the leanest call path
# (_hook.FastCall); "max-autotune" (and its -no-cudagraphs twin: there are no CUDA
# graphs here) times each graph's schedules on its first call (compiler/autotune.py);
# "lite" behaves as "default"
MODES = ("default", "lite", "reduce-overhead", "max-autotune-no-cudagraphs", "max-autotune")
AUTOTUNE_MODES = ("max-autotune", "max-autotune-no-cudagraphs")
_EFFECTIVE = {"default": ("function", "module"), "reduce-overhead": ("function",),
              "max-autotune": ("function", "module"),
              "max-autotune-no-cudagraphs": ("function", "module")}
# options= keys: Ember's own, and TorchInductor's that model code commonly passes
# (accepted so that code runs unchanged; they change nothing here, said once)
OPTIONS = {"check": "self-check mode: the first calls also run eagerly and compare"}
INDUCTOR_OPTIONS = frozenset((
    "max_autotune", "max_autotune_pointwise", "max_autotune_gemm", "epilogue_fusion",
    "shape_padding", "freezing", "coordinate_descent_tuning", "triton.cudagraphs",
    "trace.enabled", "trace.graph_diagram", "cpp_wrapper", "fallback_random",
    "force_same_precision", "aggressive_fusion", "layout_optimization"))


def _check_mode_and_options(mode, options, what="function"):
    if mode is not None and options is not None:
        raise RuntimeError("Either mode or options can be specified, but both can't be "
                           "specified at the same time.")
    if mode is not None and mode not in MODES:
        raise RuntimeError(f"Unrecognized mode={mode}, should be one of: "
                           f"{', '.join(MODES)}")
    if mode is not None and what not in _EFFECTIVE.get(mode, ()) and \
            (mode, what) not in _warned_modes:
        _warned_modes.add((mode, what))
        warnings.warn(f"ember.compile: mode={mode!r} is accepted but behaves as "
                      f"'default'" + (" for a module" if mode in _EFFECTIVE else ""),
                      UserWarning, stacklevel=3)
    if options is None:
        return
    if not isinstance(options, dict):
        raise TypeError(f"ember.compile: options must be a dict, got "
                        f"{type(options).__name__}")
    for key in options:
        if key in OPTIONS:
            continue
        if key not in INDUCTOR_OPTIONS:
            raise RuntimeError(f"Unexpected optimization option {key}, known options are "
                               f"{sorted(OPTIONS) + sorted(INDUCTOR_OPTIONS)}")
        if key not in _warned_modes:
            _warned_modes.add(key)
            warnings.warn(f"ember.compile: option {key!r} is accepted and has no effect "
                          "here", UserWarning, stacklevel=3)


def _check_python():
    if not _hook.available:
        raise RuntimeError(f"ember.compile needs {_SUPPORTED}: its PEP 523 frame hook "
                           f"depends on that interpreter's frame layout; this is "
                           f"{platform.python_implementation()} {platform.python_version()}. "
                           "Eager ember works on this interpreter.")


def compile(model=None, *, fullgraph=False, dynamic=None, backend=None, mode=None,
            options=None, disable=False):
    """Compiles a function or an nn.Module; usable as @ember.compile or
    @ember.compile(backend=...)."""
    if model is None:
        return functools.partial(compile, fullgraph=fullgraph, dynamic=dynamic,
                                 backend=backend, mode=mode, options=options,
                                 disable=disable)
    from ..nn import Module
    _check_mode_and_options(mode, options, "module" if isinstance(model, Module) else
                            "function")
    if dynamic not in (None, True, False):
        raise TypeError(f"ember.compile: dynamic must be None, True or False, got "
                        f"{dynamic!r}")
    if disable:
        return model
    _check_python()
    name, fn = backends.lookup(backend if backend is not None else
                               backends.default_backend())
    if mode in AUTOTUNE_MODES:
        # the backend's autotuning form ("llvm": autotune.py); others have none
        if hasattr(fn, "autotuned"):
            fn = fn.autotuned
        elif (mode, name) not in _warned_modes:
            _warned_modes.add((mode, name))
            warnings.warn(f"ember.compile: mode={mode!r} is accepted but behaves as "
                          f"'default' with backend {name!r}", UserWarning, stacklevel=2)
    ctx = CompileContext(name, fn, fullgraph, check=self_check.enabled(options),
                         dynamic=dynamic)
    callback = make_callback(ctx)
    if isinstance(model, Module):
        return optimized_module_class()(model, callback, ctx)
    if not callable(model):
        raise TypeError(f"ember.compile expects a function or an nn.Module, got "
                        f"{type(model).__name__}")
    compiled = _wrap(model, callback, ctx)
    if mode == "reduce-overhead" and isinstance(model, types.FunctionType) and \
            not fullgraph and not config.strict:
        return _fast(model, callback, compiled)
    return compiled


def _wrap(fn, callback, ctx):
    set_state = _hook.set_state
    code = getattr(fn, "__code__", None)

    @functools.wraps(fn)
    def compiled(*args, **kwargs):
        if code is not None and (ctx.fullgraph or config.strict):
            retry_if_fallen_back(code)
        prev = set_state(callback)
        try:
            return fn(*args, **kwargs)
        finally:
            set_state(prev)

    compiled._ember_compile_context = ctx
    compiled._orig_fn = fn
    if _hook.FunctionCall is None or ctx.fullgraph:
        return compiled
    # the same in C (no argument tuple, no wrapper frame); strict mode takes compiled
    fast = _hook.FunctionCall(fn, callback, compiled)
    functools.update_wrapper(fast, fn)
    fast._ember_compile_context = ctx
    fast._orig_fn = fn
    return fast


def _fast(fn, callback, slow):
    """mode="reduce-overhead": a cache hit called straight from C (_hook.FastCall: no
    wrapper frame, no frame for fn); other calls go through slow, the wrapper _wrap
    makes. Strict mode and fullgraph keep the wrapper (it re-checks fallen-back code)."""
    fast = _hook.FastCall(fn, callback, slow)
    functools.update_wrapper(fast, fn)
    fast._ember_compile_context = slow._ember_compile_context
    fast._orig_fn = fn
    return fast


_OPTIMIZED = None


def optimized_module_class():
    """OptimizedModule, made on first use (ember.nn imports after ember.capture)."""
    global _OPTIMIZED
    if _OPTIMIZED is not None:
        return _OPTIMIZED
    from ..nn import Module

    class OptimizedModule(Module):
        """What ember.compile(module) returns: calls the module with capture on.
        Attributes read through to the original module (`_orig_mod`)."""

        def __init__(self, mod, callback, ctx):
            super().__init__()
            self._orig_mod = mod
            # read by every call: kept in the instance dict too, so that the lookup
            # does not miss into __getattr__ (an AttributeError made and dropped)
            object.__setattr__(self, "_ember_mod", mod)
            object.__setattr__(self, "_ember_callback", callback)
            object.__setattr__(self, "_ember_compile_context", ctx)
            # Module.__call__ and _call_impl as Module defines them: a call of a
            # module without hooks may go straight to forward (the frame capture
            # starts at either way), two Python frames fewer on every cache hit
            object.__setattr__(self, "_ember_plain_call",
                               type(mod).__call__ is Module.__call__ and
                               type(mod)._call_impl is Module._call_impl)
            # what the C call (_hook.ModuleCall) reads: (module, callback, plain,
            # fullgraph)
            object.__setattr__(self, "_ember_call",
                               (mod, callback, self._ember_plain_call, bool(ctx.fullgraph)))

        def __call__(self, *args, **kwargs):
            mod = self._ember_mod
            if self._ember_compile_context.fullgraph or config.strict:
                forward = getattr(type(mod), "forward", None)
                if hasattr(forward, "__code__"):
                    retry_if_fallen_back(forward.__code__)
            d = mod.__dict__
            if self._ember_plain_call and not (
                    d.get("_compiled_call_impl") or d.get("_forward_hooks") or
                    d.get("_forward_pre_hooks") or d.get("_backward_hooks") or
                    d.get("_backward_pre_hooks")):
                call = mod.forward           # what _call_impl calls when it has no hooks
            else:
                call = mod
            prev = _hook.set_state(self._ember_callback)
            try:
                return call(*args, **kwargs)
            finally:
                _hook.set_state(prev)

        if _hook.ModuleCall is not None:     # the same in C, with this as its slow path
            __call__ = _hook.ModuleCall(__call__)
        forward = __call__

        def __getattr__(self, name):
            if name == "_orig_mod":
                return self._modules["_orig_mod"]
            return getattr(self._modules["_orig_mod"], name)

    _OPTIMIZED = OptimizedModule
    return OptimizedModule
