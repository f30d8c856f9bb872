"""Facts about this machine that verify, benchmarks and bug reports print."""
from __future__ import annotations

import ctypes
import glob
import os
import platform
import sys

import numpy as np

from . import _C


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def llvm() -> dict:
    info = _C._llvm_info()
    feats = [f[1:] for f in info["features"].split(",") if f.startswith("+")]
    vector = [f for f in ("sse4.2", "avx", "avx2", "fma", "avx512f", "avx512bw", "avx512vl",
                          "avx512dq", "avx512vnni", "avx512bf16", "neon") if f in feats]
    width = 512 if "avx512f" in feats else 256 if "avx" in feats else 128
    return {"version": ".".join(map(str, info["version"])), "built_against":
            info["built_against"], "cpu": info["cpu"], "triple": info["triple"],
            "vector_features": vector, "vector_bits": width}


def openblas_path():
    """The OpenBLAS library NumPy loaded (its wheels bundle one), or None."""
    libdir = os.path.join(os.path.dirname(np.__file__) + ".libs")
    for path in sorted(glob.glob(os.path.join(libdir, "*openblas*"))):
        return path
    return None


def _openblas_lib():
    libdir = os.path.join(os.path.dirname(np.__file__) + ".libs")
    for path in glob.glob(os.path.join(libdir, "*openblas*")):
        try:
            return ctypes.CDLL(path)
        except OSError:
            continue
    return None


def blas() -> dict:
    """Which BLAS NumPy uses and which kernel (core type) it runs on this CPU."""
    out = {"name": "unknown", "version": "", "kernel": "unknown", "threads": None}
    try:
        cfg = np.show_config(mode="dicts")
        b = cfg.get("Build Dependencies", {}).get("blas", {})
        out["name"], out["version"] = b.get("name", "unknown"), b.get("version", "")
    except Exception:   # noqa: BLE001 - older NumPy layouts; the kernel probe still runs
        pass
    lib = _openblas_lib()
    if lib is not None:
        for prefix in ("scipy_openblas_", "openblas_"):
            for suffix in ("64_", ""):
                fn = getattr(lib, f"{prefix}get_corename{suffix}", None)
                if fn is None:
                    continue
                fn.restype = ctypes.c_char_p
                out["kernel"] = fn().decode()
                nt = getattr(lib, f"{prefix}get_num_threads{suffix}", None)
                if nt is not None:
                    out["threads"] = nt()
                break
            if out["kernel"] != "unknown":
                break
    out["OPENBLAS_CORETYPE"] = os.environ.get("OPENBLAS_CORETYPE")
    out["OPENBLAS_L2_SIZE"] = os.environ.get("OPENBLAS_L2_SIZE")
    return out


def python() -> str:
    return f"{platform.python_implementation()} {sys.version.split()[0]}"
