"""Compiled kernels, cached: once per process in memory, and across processes on disk.

A kernel is known by its key, a hash of everything its machine code depends on: the
kernel spec (structure, dtypes, sizes; `Kernel.spec()`), the optimisation pipeline, and
the context (LLVM's version, the target triple, CPU and features, and a hash of the
built extension file itself, as the package version does not change between builds).

    kernels(specs, options) -> one _C.JitKernel per spec (options: (pipeline, codegen
                               level) per spec)

- in memory: a table from key to the live JitKernel, so identical kernels (the layers
  of a model, forward and backward graphs) are compiled and linked once per process;
- on disk (`config.kernel_cache`, in `config.cache_dir`/kernels/): one file per key
  holding the object code, so a new process links it instead of compiling. A file is
  written to a temporary name in the same folder then renamed (two processes filling
  one entry both succeed); a file whose header, length or checksum is wrong, or that
  LLVM refuses, is ignored and rebuilt. Object code is executed: a folder not owned by
  the user or writable by group or others is refused (one warning, no disk cache);
- the rest are compiled together by `_C._jit_compile`, on several threads.

`stats` counts what happened (memory, disk, compiled, stored, rejected);
`_C._jit_stats()["compiled"]` counts LLVM compilations since the process started.
"""
from __future__ import annotations

import collections
import hashlib
import os
import stat
import struct
import tempfile
import warnings
import weakref

from .. import _C
from ..capture.config import config

FORMAT = b"EMBERKO1"          # entry files: magic, then the header below, then the object
_HEADER = struct.Struct("<8s40sQ32s")      # magic, key, object length, blake2b(object)

stats = collections.Counter()
_table: "weakref.WeakValueDictionary[str, _C.JitKernel]" = weakref.WeakValueDictionary()
_warned = set()
_context = None

# the extension as loaded: if its file changes later (a rebuild while this process
# runs), this process's code no longer matches the file's hash and must not fill the cache
_EXT_PATH = _C.__file__
_EXT_STAT = os.stat(_EXT_PATH)


def _stat_id(st):
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def _extension_hash():
    if _stat_id(os.stat(_EXT_PATH)) != _stat_id(_EXT_STAT):
        return None
    with open(_EXT_PATH, "rb") as f:
        return hashlib.blake2b(f.read(), digest_size=20).hexdigest()


def context():
    """What every key includes besides the spec (bytes), or None when the extension
    file changed since it was loaded (then nothing is read from or written to disk)."""
    global _context
    if _context is None:
        t = _C._jit_target()
        ext = _extension_hash()
        _context = (b"" if ext is None else
                    "|".join((FORMAT.decode(), t["llvm"], t["triple"], t["cpu"],
                              t["features"], ext)).encode())
    return _context or None


def key(spec, options):
    """The hex digest naming spec compiled with options (pipeline, codegen level) in
    this context."""
    h = hashlib.blake2b(context() or b"no extension hash", digest_size=20)
    h.update(repr((options, spec)).encode())
    return h.hexdigest()


def symbol(k):
    return f"em_k_{k}"


# ---------------------------------------------------------------- the disk cache

def _warn_once(folder, why):
    if folder not in _warned:
        _warned.add(folder)
        warnings.warn(f"ember: not using the kernel cache {folder}: {why}; kernels are "
                      "compiled without it", RuntimeWarning, stacklevel=4)


def _safe_folder(path):
    """None if path is a directory of this user that nobody else can write, else why not."""
    st = os.stat(path)
    if not stat.S_ISDIR(st.st_mode):
        return "not a directory"
    if st.st_uid != os.getuid():
        return "not owned by this user"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return "writable by group or others"
    return None


def folder(name="kernels", enabled=None):
    """The folder of the object files (or of another cache in cache_dir: name), made if
    needed; None when that disk cache is off (enabled, else config.kernel_cache) or
    refused (warned once per folder)."""
    if enabled is None:
        enabled = config.kernel_cache
    if not enabled or not config.cache_dir or context() is None:
        return None
    root = os.path.abspath(config.cache_dir)
    path = os.path.join(root, name)
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
        why = _safe_folder(root) or _safe_folder(path)
    except OSError as e:
        why = f"{type(e).__name__}: {e}"
    if why is not None:
        _warn_once(root, why)
        return None
    return path


def _entry(path, k, suffix=".o"):
    return os.path.join(path, k + suffix)


def read(path, k, suffix=".o", magic=FORMAT, counts=stats):
    """The object code (or other bytes: an entry of the cache whose files end in suffix
    and start with magic) stored for key k in folder path, or None (absent, or not a
    sound entry: counted in counts["rejected"])."""
    try:
        fd = os.open(_entry(path, k, suffix), os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid():
            counts["rejected"] += 1
            return None
        with os.fdopen(fd, "rb", closefd=False) as f:
            data = f.read()
    except OSError:
        return None
    finally:
        os.close(fd)
    if len(data) < _HEADER.size:
        counts["rejected"] += 1
        return None
    emagic, ekey, length, digest = _HEADER.unpack_from(data)
    obj = data[_HEADER.size:]
    if (emagic != magic or ekey != k.encode() or length != len(obj)
            or digest != hashlib.blake2b(obj, digest_size=32).digest()):
        counts["rejected"] += 1
        return None
    return obj


def write(path, k, obj, suffix=".o", magic=FORMAT, counts=stats):
    """Stores obj for key k: a temporary file in the same folder, renamed into place
    (atomic; a concurrent writer of the same entry wins or loses whole). Failures are
    ignored: the cache is only a cache."""
    header = _HEADER.pack(magic, k.encode(), len(obj),
                          hashlib.blake2b(obj, digest_size=32).digest())
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{k}.", suffix=".tmp", dir=path)
        with os.fdopen(fd, "wb") as f:
            f.write(header)
            f.write(obj)
        os.replace(tmp, _entry(path, k, suffix))
        tmp = None
        counts["stored"] += 1
    except OSError:
        pass
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass


# ---------------------------------------------------------------- kernels

def compile_threads(n):
    t = config.compile_threads
    if t is None:
        t = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, min(int(t or 1), n))


def kernels(specs, options, keys=None, spec_of=None):
    """One linked _C.JitKernel per spec (specs[i] compiled with options[i], a pipeline
    and a code generation level):
    from the in-memory table, else the disk cache, else compiled (all of a call's
    misses at once, in parallel) and stored. keys: the specs' keys when known; then
    spec_of(spec, key), if given, makes the spec to compile (and checks it)."""
    if keys is None:
        keys = [key(s, o) for s, o in zip(specs, options)]
    found = {}
    todo = {}                    # key -> (spec, options), in first-seen order
    path = None
    looked_on_disk = False
    for k, s, o in zip(keys, specs, options):
        if k in found or k in todo:
            continue
        kern = _table.get(k)
        if kern is not None:
            stats["memory"] += 1
            found[k] = kern
            continue
        if not looked_on_disk:
            path, looked_on_disk = folder(), True
        obj = read(path, k) if path is not None else None
        if obj is not None:
            try:
                kern = _C.JitKernel(obj, symbol(k))
            except RuntimeError:          # LLVM refused it: rebuild the entry
                stats["rejected"] += 1
            else:
                stats["disk"] += 1
                found[k] = _table[k] = kern
                continue
        todo[k] = (s if spec_of is None else spec_of(s, k), o)
    if todo:
        ks = tuple(todo)
        objs = _C._jit_compile(tuple(todo[k][0] for k in ks), tuple(symbol(k) for k in ks),
                               tuple(todo[k][1][0] for k in ks),
                               tuple(todo[k][1][1] for k in ks), compile_threads(len(ks)))
        stats["compiled"] += len(ks)
        for k, obj in zip(ks, objs):
            # another thread may have linked it while this one compiled (the GIL is
            # released during compilation): a symbol is defined once
            kern = _table.get(k)
            if kern is None:
                kern = _table[k] = _C.JitKernel(obj, symbol(k))
                if path is not None:
                    write(path, k, obj)          # only code that linked
            found[k] = kern
    return [found[k] for k in keys]
