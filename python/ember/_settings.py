"""Process-wide switches PyTorch scripts set at the top (ember's answers on the CPU):
float32 matmul precision, deterministic algorithms, warn_always, inter-op threads,
flush-denormal; kept and reported back as PyTorch does. Ember's kernels are
deterministic and compute float32 matmuls in float32 whatever the precision says (the
CPU has no TF32), so these change no result."""
import warnings

_state = {"matmul_precision": "highest", "deterministic": False, "warn_only": False,
          "warn_always": False, "interop_threads": 1, "deterministic_debug": 0}

_PRECISIONS = ("highest", "high", "medium")


def set_float32_matmul_precision(precision):
    """"highest", "high" or "medium"; kept (float32 matmuls are float32 on the CPU)."""
    if precision not in _PRECISIONS:
        raise RuntimeError(f"Invalid precision: {precision!r}; expected one of "
                           f"{', '.join(_PRECISIONS)}")
    _state["matmul_precision"] = precision


def get_float32_matmul_precision():
    return _state["matmul_precision"]


def use_deterministic_algorithms(mode, *, warn_only=False):
    """Kept: ember's kernels give the same result every run already."""
    if not isinstance(mode, bool):
        raise RuntimeError(f"use_deterministic_algorithms expects a bool, but got "
                           f"{type(mode).__name__}")
    _state["deterministic"] = mode
    _state["warn_only"] = bool(warn_only)
    _state["deterministic_debug"] = (1 if warn_only else 2) if mode else 0


def are_deterministic_algorithms_enabled():
    return _state["deterministic"]


def is_deterministic_algorithms_warn_only_enabled():
    return _state["warn_only"]


def set_deterministic_debug_mode(debug_mode):
    modes = {"default": 0, "warn": 1, "error": 2}
    if isinstance(debug_mode, str):
        if debug_mode not in modes:
            raise RuntimeError(f"invalid value of debug_mode, expected one of `default`, "
                               f"`warn`, `error`, but got {debug_mode}")
        debug_mode = modes[debug_mode]
    if debug_mode not in (0, 1, 2):
        raise RuntimeError(f"invalid value of debug_mode, expected 0, 1, or 2, but got "
                           f"{debug_mode}")
    use_deterministic_algorithms(debug_mode != 0, warn_only=debug_mode == 1)


def get_deterministic_debug_mode():
    return _state["deterministic_debug"]


def set_warn_always(b):
    _state["warn_always"] = bool(b)


def is_warn_always_enabled():
    return _state["warn_always"]


def set_num_interop_threads(num):
    """Kept: ember has one pool of intra-op threads (set_num_threads)."""
    if not isinstance(num, int) or num <= 0:
        raise RuntimeError("Expected positive number of threads")
    _state["interop_threads"] = num


def get_num_interop_threads():
    return _state["interop_threads"]


def set_flush_denormal(mode):
    """False: ember does not change the CPU's denormal mode (as PyTorch on CPUs without
    the flag)."""
    if mode:
        warnings.warn("ember does not flush denormals; set_flush_denormal(True) has no "
                      "effect", stacklevel=2)
    return False


NAMES = ["set_float32_matmul_precision", "get_float32_matmul_precision",
         "use_deterministic_algorithms", "are_deterministic_algorithms_enabled",
         "is_deterministic_algorithms_warn_only_enabled", "set_deterministic_debug_mode",
         "get_deterministic_debug_mode", "set_warn_always", "is_warn_always_enabled",
         "set_num_interop_threads", "get_num_interop_threads", "set_flush_denormal"]


def install(namespace):
    g = globals()
    for name in NAMES:
        namespace[name] = g[name]
