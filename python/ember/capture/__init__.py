"""Capture (TorchDynamo's role): a PEP 523 frame hook that turns the tensor code of
Python functions and module forwards into FX graphs, guarded so later calls reuse them.
ember._dynamo is this package."""
from . import _hook
from .api import compile
from .backends import list_backends, lookup as lookup_backend, register_backend
from .config import config
from .dynamic import mark_dynamic, mark_static, maybe_mark_dynamic
from .exc import CaptureError, SelfCheckError, Unsupported, counters
from .explain import explain


def reset():
    """Forgets every compiled entry (torch._dynamo.reset)."""
    from .convert import forget_graphs, reset_warnings
    from .symbolic import _DECODED
    from . import dynamic
    _hook.reset_all()
    dynamic.forget()
    _DECODED.clear()
    forget_graphs()
    _hook.reset_counters()
    counters.clear()
    reset_warnings()
    from .tensor_data import refused_codes
    refused_codes.clear()


__all__ = ["compile", "reset", "explain", "counters", "config", "list_backends",
           "register_backend", "lookup_backend", "CaptureError", "SelfCheckError",
           "Unsupported", "mark_dynamic", "maybe_mark_dynamic", "mark_static"]
