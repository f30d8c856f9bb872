"""Which code the frame hook leaves alone: Ember's library internals (they run under
compiled code, and are inlined when traced, but are never captured as frames of their
own) and code the compiler generates. Model code that happens to live in the package
stays capturable: ember.models, the forward methods of ember.nn's modules, and the
demo and verify scripts.

The standard library and NumPy are skipped too (TorchDynamo's skipfiles): their Python
helpers run inside eager kernels (numpy's argmax wrapper under Tensor.max), and
capturing them would cost a conversion each and make fullgraph=True fail on code that
is not the user's."""
from __future__ import annotations

import os
import site
import sys
import sysconfig
import weakref

_EMBER_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_NN_DIR = _EMBER_DIR + "nn" + os.sep
# DistributedDataParallel's forward communicates: CPython runs it, and the capture of
# the module it wraps (nn/parallel/compiled.py splits that graph at its buckets)
_PARALLEL_DIR = _NN_DIR + "parallel" + os.sep
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
    path = _abs(filename)
    if numpy_dir and path.startswith(numpy_dir):
        return True
    return path.startswith(stdlib) and not path.startswith(sites)


# Code of functions given to ember.compiler.disable: never converted, and a call of one
# inside captured code is a graph break (capture/resume.py). Kept apart from the
# hook's SKIP marks, which ember.compiler.reset() clears.
_disabled = weakref.WeakSet()


def disable_code(code):
    _disabled.add(code)


def is_disabled(code) -> bool:
    return code in _disabled


def should_skip(code) -> bool:
    """Frames the converter leaves to CPython: Ember's internals, except the forward
    methods of its nn modules (nn.Sequential's forward is model code, and is what
    ember.compile(nn.Sequential(...)) must capture), library code, and disabled
    functions."""
    if code in _disabled:
        return True
    if not is_ember_internal(code.co_filename):
        return is_library(code.co_filename)
    if code.co_name == "forward":
        path = _abs(code.co_filename)
        return not path.startswith(_NN_DIR) or path.startswith(_PARALLEL_DIR)
    return True
