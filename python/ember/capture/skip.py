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
