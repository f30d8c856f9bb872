"""Which code the frame hook leaves alone: Ember's library internals (they run under
compiled code, and are inlined when traced, but are never captured as frames of their
own) and code the compiler generates. Model code that happens to live in the package
stays capturable: ember.models, the forward methods of ember.nn's modules, and the
demo and verify scripts."""
from __future__ import annotations

import os

_EMBER_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_NN_DIR = _EMBER_DIR + "nn" + os.sep
_MODEL_CODE = (_EMBER_DIR + "models" + os.sep, _EMBER_DIR + "demo.py",
               _EMBER_DIR + "verify.py")


def _abs(filename):
    try:
        return os.path.abspath(filename)
    except (TypeError, ValueError):
        return ""


def is_ember_internal(filename: str) -> bool:
    """Generated code, or a file of Ember's library (model code excluded)."""
    if not filename:
        return False
    if filename.startswith("<eval_with_key") or filename.startswith("<ember"):
        return True
    path = _abs(filename)
    return path.startswith(_EMBER_DIR) and not path.startswith(_MODEL_CODE)


def should_skip(code) -> bool:
    """Frames the converter leaves to CPython: Ember's internals, except the forward
    methods of its nn modules (nn.Sequential's forward is model code, and is what
    ember.compile(nn.Sequential(...)) must capture)."""
    if not is_ember_internal(code.co_filename):
        return False
    if code.co_name == "forward":
        return not _abs(code.co_filename).startswith(_NN_DIR)
    return True
