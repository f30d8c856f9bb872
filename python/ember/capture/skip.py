"""Which code the frame hook leaves alone: Ember's own modules (the library runs under
compiled code, and is inlined when traced, but is never captured as a frame of its own),
code the compiler generates, and the standard library and NumPy (TorchDynamo's skipfiles:
their Python helpers run inside eager kernels, e.g. numpy's argmax wrapper under
Tensor.max, and capturing them would cost a conversion each and make fullgraph=True fail
on code that is not the user's)."""
from __future__ import annotations

import os
import site
import sys
import sysconfig

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


_DIRS = None


def _library_dirs():
    """(stdlib dirs, site-packages dirs, NumPy's dir). Site-packages may live inside the
    stdlib dir, and code installed there (a user's model library) is captured."""
    global _DIRS
    if _DIRS is None:
        def norm(dirs):
            return tuple(sorted({os.path.abspath(d) + os.sep for d in dirs if d}))
        stdlib = [os.path.dirname(os.__file__), sysconfig.get_path("stdlib"),
                  sysconfig.get_path("platstdlib")]
        sites = [sysconfig.get_path("purelib"), sysconfig.get_path("platlib"),
                 getattr(site, "USER_SITE", None)]
        sites += getattr(site, "getsitepackages", lambda: [])()
        numpy_dir = sys.modules.get("numpy")
        numpy_dir = [os.path.dirname(numpy_dir.__file__)] if numpy_dir else []
        _DIRS = norm(stdlib), norm(sites), norm(numpy_dir)
    return _DIRS


def is_library(filename: str) -> bool:
    """Standard library (also frozen modules such as <frozen posixpath>) or NumPy."""
    if not filename or filename.startswith("<"):
        return filename.startswith("<frozen ")
    stdlib, sites, numpy_dir = _library_dirs()
    path = os.path.abspath(filename)
    if numpy_dir and path.startswith(numpy_dir):
        return True
    return path.startswith(stdlib) and not path.startswith(sites)


def should_skip(code) -> bool:
    """Frames the converter leaves to CPython: Ember's internals, except the forward
    methods of its nn modules (nn.Sequential's forward is model code, and is what
    ember.compile(nn.Sequential(...)) must capture), and library code."""
    filename = code.co_filename
    if not is_ember_internal(filename):
        return is_library(filename)
    if code.co_name == "forward":
        try:
            return not os.path.abspath(filename).startswith(_NN_DIR)
        except (TypeError, ValueError):
            return True
    return True
