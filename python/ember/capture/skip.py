"""Which code the frame hook leaves alone: Ember's own modules (the library runs under
compiled code, and is inlined when traced, but is never captured as a frame of its own)
and code the compiler generates."""
from __future__ import annotations

import os

_EMBER_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


def is_ember_internal(filename: str) -> bool:
    if not filename:
        return False
    if filename.startswith("<eval_with_key") or filename.startswith("<ember"):
        return True
    try:
        return os.path.abspath(filename).startswith(_EMBER_DIR)
    except (TypeError, ValueError):
        return False


_NN_DIR = _EMBER_DIR + "nn" + os.sep


def should_skip(code) -> bool:
    """Frames the converter leaves to CPython: Ember's internals, except the forward
    methods of its nn modules (nn.Sequential's forward is model code, and is what
    ember.compile(nn.Sequential(...)) must capture)."""
    filename = code.co_filename
    if not is_ember_internal(filename):
        return False
    if code.co_name == "forward":
        try:
            return not os.path.abspath(filename).startswith(_NN_DIR)
        except (TypeError, ValueError):
            return True
    return True
