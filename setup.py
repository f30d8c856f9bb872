"""Build of ember._C: one extension from csrc/, against CPython, NumPy's C API and LLVM-C.

LLVM is found through $LLVM_CONFIG, else the newest llvm-config-N on PATH (N = 19 .. 14),
else llvm-config. CI=true adds -Werror; EMBER_SANITIZE=1 builds with ASan and UBSan.
"""
import glob
import os
import shutil
import subprocess
import sys

import numpy
from setuptools import Extension, setup

SUPPORTED_LLVM = range(19, 13, -1)


def find_llvm_config():
    env = os.environ.get("LLVM_CONFIG")
    if env:
        return env
    for n in SUPPORTED_LLVM:
        path = shutil.which(f"llvm-config-{n}")
        if path:
            return path
    path = shutil.which("llvm-config")
    if path:
        return path
    sys.exit("ember: no llvm-config found. Install LLVM 14 to 19 development files "
             "(Debian/Ubuntu: apt-get install llvm-dev) or set LLVM_CONFIG.")


def llvm(cfg, *args):
    out = subprocess.check_output([cfg, *args], text=True).strip()
    return out


def truthy(name):
    return os.environ.get(name, "").lower() not in ("", "0", "false", "no")


cfg = find_llvm_config()
version = llvm(cfg, "--version")
major = int(version.split(".")[0])
if major not in SUPPORTED_LLVM:
    sys.exit(f"ember: {cfg} is LLVM {version}; ember builds against LLVM 14 to 19.")
libdir = llvm(cfg, "--libdir")
cflags = [
    "-std=c11", "-O2", "-Wall", "-Wextra", "-Wno-unused-parameter",
    "-Wno-missing-field-initializers", "-Wno-cast-function-type",
    "-fno-strict-aliasing", "-fvisibility=hidden",
]
if truthy("CI"):
    cflags.append("-Werror")
ldflags = [f"-Wl,-rpath,{libdir}"]
if truthy("EMBER_SANITIZE"):
    cflags += ["-fsanitize=address,undefined", "-fno-omit-frame-pointer", "-O1", "-g"]
    ldflags += ["-fsanitize=address,undefined"]

sources = sorted(glob.glob("csrc/**/*.c", recursive=True))
ext = Extension(
    "ember._C",
    sources=sources,
    include_dirs=["csrc", numpy.get_include(), llvm(cfg, "--includedir")],
    define_macros=[("NPY_NO_DEPRECATED_API", "NPY_2_0_API_VERSION"),
                   ("EMBER_LLVM_VERSION", f'"{version}"')],
    library_dirs=[libdir],
    libraries=[llvm(cfg, "--libs", "--link-shared").replace("-l", "", 1).split()[0], "m", "dl"],
    extra_compile_args=cflags,
    extra_link_args=ldflags,
    depends=sorted(glob.glob("csrc/**/*.h", recursive=True)),
)

setup(ext_modules=[ext])
