"""ember.save and ember.load: a safe checkpoint format, plus safetensors and .npz.

Loading never unpickles: a checkpoint can hold only data, so opening one from an
untrusted source cannot run code (PyTorch needs weights_only=True for that; here it is
the only behaviour).

The format (version 1) is a ZIP archive, stored uncompressed:

    ember/manifest.json     the object tree, as JSON (below)
    ember/manifest.sha256   hex SHA-256 of manifest.json
    ember/data/<i>          tensor i: its elements, C order, little-endian

manifest.json is {"format": "ember.save", "version": 1, "root": NODE, "tensors": [{"file",
"dtype", "shape", "nbytes", "sha256"}, ...]} where a NODE is a JSON object with a "type":

    none, bool, int, str                     {"type", "value"}
    float                                    {"type", "value": float.hex(x)}  (exact, inf/nan)
    bytes                                    {"type", "value": base64}
    list, tuple, set, size                   {"type", "items": [NODE, ...]}
    dict, ordereddict                        {"type", "items": [[NODE key, NODE value], ...]}
    dtype, device                            {"type", "value": "float32" / "cpu"}
    tensor                                   {"type", "ref": i, "requires_grad", "parameter"}
    ndarray                                  {"type", "ref": i}

A tensor object that occurs several times is stored once and loads as one object.
Everything is checked (structure, dtypes, sizes, both checksums) before any object is
built, so a truncated or corrupt file raises CorruptFileError and loads nothing.

ember.load also reads .safetensors files (8-byte little-endian header length, JSON
header, raw data; parsed here, no dependency) and NumPy .npz archives (allow_pickle off),
both as a dict name -> tensor ready for Module.load_state_dict. PyTorch's pickle-based .pt
files are refused with an explanation.

This module also gives tensors the copy and pickle protocols (installed on the C type):
copy.copy shares memory, copy.deepcopy copies it (keeping requires_grad and .grad),
pickle stores a NumPy array with the dtype and requires_grad.
"""
from __future__ import annotations

import base64
import copy as _copy
import hashlib
import io
import json
import math
import os
import struct
import zipfile
from collections import OrderedDict

import numpy as np

from . import _C
from .device import device

FORMAT = "ember.save"
VERSION = 1
_MANIFEST = "ember/manifest.json"
_MANIFEST_SUM = "ember/manifest.sha256"
_DTYPES = ("bool", "uint8", "int8", "int16", "int32", "int64", "float16", "float32",
           "float64")


class CorruptFileError(RuntimeError):
    """The file is truncated, damaged, or not in a format ember.load reads."""


# ------------------------------------------------------------------ tensor protocols

def _dtype_name(dtype):
    return str(dtype).split(".")[-1]


def _np_dtype(name):
    return np.dtype(name).newbyteorder("<") if name not in ("bool", "uint8", "int8") \
        else np.dtype(name)


def _rebuild_tensor(array, requires_grad):
    t = _C.from_numpy(array)
    if requires_grad:
        t.requires_grad_(True)
    return t


def _rebuild_meta(shape, dtype_name, requires_grad):
    from . import empty
    return empty(tuple(shape), dtype=getattr(_C, dtype_name), device="meta",
                 requires_grad=requires_grad)


def _tensor_reduce_ex(self, protocol):
    """Pickles as a NumPy array + requires_grad (never the autograd graph or .grad).
    copy.copy reuses the array, so the copy shares memory, as in PyTorch."""
    if self.is_meta:
        return (_rebuild_meta, (tuple(self.shape), _dtype_name(self.dtype),
                                self.requires_grad))
    return (_rebuild_tensor, (self.detach().numpy(), self.requires_grad))


def _tensor_deepcopy(self, memo):
    """A leaf with its own memory, the same requires_grad, and a deep copy of .grad."""
    if not self.is_leaf:
        raise RuntimeError("Only Tensors created explicitly by the user (graph leaves) "
                           "support the deepcopy protocol at the moment.")
    if id(self) in memo:
        return memo[id(self)]
    from .autograd import no_grad
    with no_grad():
        new = self.clone()
    if self.requires_grad:
        new.requires_grad_(True)
    memo[id(self)] = new
    if self.grad is not None:
        new.grad = _copy.deepcopy(self.grad, memo)
    for key, value in getattr(self, "__dict__", {}).items():
        if not key.startswith("_retain"):
            setattr(new, key, _copy.deepcopy(value, memo))
    return new


_C._add_tensor_attrs({"__reduce_ex__": _tensor_reduce_ex, "__deepcopy__": _tensor_deepcopy})


# ------------------------------------------------------------------ save

class _Writer:
    """Turns an object tree into manifest nodes, collecting tensor buffers."""

    def __init__(self):
        self.buffers = []       # (name, bytes)
        self.entries = []       # manifest "tensors"
        self.refs = {}          # id(obj) -> ref index
        self.keep = []          # objects whose id is in refs stay alive while saving

    def _buffer(self, obj, array):
        key = id(obj)
        if key in self.refs:
            return self.refs[key]
        name = _dtype_name_np(array.dtype)
        data = np.ascontiguousarray(array).astype(_np_dtype(name), copy=False).tobytes()
        ref = len(self.entries)
        self.entries.append({"file": f"ember/data/{ref}", "dtype": name,
                             "shape": list(array.shape), "nbytes": len(data),
                             "sha256": hashlib.sha256(data).hexdigest()})
        self.buffers.append((f"ember/data/{ref}", data))
        self.refs[key] = ref
        self.keep.append(obj)
        return ref

    def node(self, obj):
        from .nn.parameter import Parameter
        if obj is None:
            return {"type": "none"}
        if isinstance(obj, bool) or isinstance(obj, np.bool_):
            return {"type": "bool", "value": bool(obj)}
        if isinstance(obj, (int, np.integer)):
            return {"type": "int", "value": int(obj)}
        if isinstance(obj, (float, np.floating)):
            return {"type": "float", "value": float(obj).hex()}
        if isinstance(obj, str):
            return {"type": "str", "value": obj}
        if isinstance(obj, (bytes, bytearray)):
            return {"type": "bytes", "value": base64.b64encode(bytes(obj)).decode("ascii")}
        if isinstance(obj, _C.Tensor):
            if obj.is_meta:
                raise TypeError("ember.save: meta tensors have no data to save")
            array = obj.detach().numpy()
            return {"type": "tensor", "ref": self._buffer(obj, array),
                    "requires_grad": bool(obj.requires_grad),
                    "parameter": isinstance(obj, Parameter)}
        if isinstance(obj, np.ndarray):
            _dtype_name_np(obj.dtype)
            return {"type": "ndarray", "ref": self._buffer(obj, obj)}
        if isinstance(obj, _C.dtype):
            return {"type": "dtype", "value": _dtype_name(obj)}
        if isinstance(obj, device):
            return {"type": "device", "value": str(obj)}
        if isinstance(obj, _C.Size):
            return {"type": "size", "items": [self.node(int(n)) for n in obj]}
        if isinstance(obj, OrderedDict):
            return {"type": "ordereddict",
                    "items": [[self.node(k), self.node(v)] for k, v in obj.items()]}
        if isinstance(obj, dict):
            return {"type": "dict",
                    "items": [[self.node(k), self.node(v)] for k, v in obj.items()]}
        if isinstance(obj, tuple) and not hasattr(obj, "_fields"):
            return {"type": "tuple", "items": [self.node(v) for v in obj]}
        if isinstance(obj, list):
            return {"type": "list", "items": [self.node(v) for v in obj]}
        if isinstance(obj, (set, frozenset)):
            return {"type": "set", "items": [self.node(v) for v in obj]}
        raise TypeError(f"ember.save: cannot save an object of type {type(obj).__qualname__}; "
                        "checkpoints hold tensors, numbers, strings, bytes, None, dtypes and "
                        "lists/tuples/dicts of them (save a module's state_dict(), not the "
                        "module)")


def _dtype_name_np(dtype):
    name = np.dtype(dtype).newbyteorder("=").name
    if name not in _DTYPES:
        raise TypeError(f"ember.save: arrays of dtype {dtype} are not supported")
    return name


def save(obj, f, pickle_module=None, pickle_protocol=None,
         _use_new_zipfile_serialization=True, _disable_byteorder_record=False):
    """Saves obj (tensors, numbers, strings, None, dtypes and containers of them, e.g. a
    state_dict or {"model": ..., "optim": ..., "epoch": 3}) to a path or binary file."""
    w = _Writer()
    root = w.node(obj)
    manifest = json.dumps({"format": FORMAT, "version": VERSION, "root": root,
                           "tensors": w.entries}, separators=(",", ":")).encode("utf-8")
    target = os.fspath(f) if isinstance(f, (str, os.PathLike)) else f
    with zipfile.ZipFile(target, "w", compression=zipfile.ZIP_STORED) as zf:
        for name, data in w.buffers:
            zf.writestr(name, data)
        zf.writestr(_MANIFEST, manifest)
        zf.writestr(_MANIFEST_SUM, hashlib.sha256(manifest).hexdigest())


# ------------------------------------------------------------------ load

def _read_all(f):
    if isinstance(f, (str, os.PathLike)):
        with open(f, "rb") as fh:
            return fh.read(), os.fspath(f)
    if isinstance(f, (bytes, bytearray)):
        return bytes(f), "<bytes>"
    return f.read(), getattr(f, "name", "<file>")


def _corrupt(where, detail):
    return CorruptFileError(f"ember.load: {where} is truncated or corrupt ({detail}); "
                            "nothing was loaded")


class _Reader:
    """Validates a manifest and its buffers, then builds the object tree."""

    def __init__(self, zf, where):
        self.zf = zf
        self.where = where

    def check(self):
        try:
            manifest_bytes = self.zf.read(_MANIFEST)
            digest = self.zf.read(_MANIFEST_SUM).decode("ascii").strip()
        except KeyError as e:
            raise _corrupt(self.where, f"missing {e}") from None
        if hashlib.sha256(manifest_bytes).hexdigest() != digest:
            raise _corrupt(self.where, "manifest checksum mismatch")
        try:
            manifest = json.loads(manifest_bytes.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise _corrupt(self.where, f"manifest is not JSON: {e}") from None
        if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
            raise _corrupt(self.where, "not an ember.save manifest")
        if manifest.get("version") != VERSION:
            raise CorruptFileError(f"ember.load: {self.where} has format version "
                                   f"{manifest.get('version')}; this ember reads version "
                                   f"{VERSION}")
        self.arrays = [self._array(i, e) for i, e in enumerate(manifest.get("tensors", []))]
        self.root = manifest.get("root")
        self._validate(self.root)

    def _array(self, i, entry):
        try:
            dtype, shape, nbytes = entry["dtype"], entry["shape"], entry["nbytes"]
            name, digest = entry["file"], entry["sha256"]
        except (KeyError, TypeError):
            raise _corrupt(self.where, f"bad entry for tensor {i}") from None
        if dtype not in _DTYPES or not isinstance(shape, list) or \
                not all(isinstance(n, int) and n >= 0 for n in shape):
            raise _corrupt(self.where, f"bad dtype or shape for tensor {i}")
        if math.prod(shape) * np.dtype(dtype).itemsize != nbytes:
            raise _corrupt(self.where, f"size of tensor {i} does not match its shape")
        try:
            data = self.zf.read(name)
        except KeyError:
            raise _corrupt(self.where, f"missing data of tensor {i}") from None
        if len(data) != nbytes or hashlib.sha256(data).hexdigest() != digest:
            raise _corrupt(self.where, f"checksum mismatch in tensor {i}")
        return np.frombuffer(data, dtype=_np_dtype(dtype)).astype(np.dtype(dtype)).reshape(
            shape)

    _LEAVES = {"none", "bool", "int", "float", "str", "bytes", "dtype", "device"}

    def _validate(self, node, depth=0):
        if depth > 1000 or not isinstance(node, dict) or "type" not in node:
            raise _corrupt(self.where, "malformed object tree")
        kind = node["type"]
        if kind in ("tensor", "ndarray"):
            ref = node.get("ref")
            if not isinstance(ref, int) or not 0 <= ref < len(self.arrays):
                raise _corrupt(self.where, "reference to a missing tensor")
        elif kind in ("list", "tuple", "set", "size"):
            for item in node.get("items", ()):
                self._validate(item, depth + 1)
        elif kind in ("dict", "ordereddict"):
            for pair in node.get("items", ()):
                if not isinstance(pair, list) or len(pair) != 2:
                    raise _corrupt(self.where, "malformed dict entry")
                self._validate(pair[0], depth + 1)
                self._validate(pair[1], depth + 1)
        elif kind not in self._LEAVES:
            raise _corrupt(self.where, f"unknown node type {kind!r}")

    def build(self):
        self.memo = {}
        return self._build(self.root)

    def _build(self, node):
        kind = node["type"]
        if kind == "none":
            return None
        if kind in ("bool", "int", "str"):
            return {"bool": bool, "int": int, "str": str}[kind](node["value"])
        if kind == "float":
            return float.fromhex(node["value"])
        if kind == "bytes":
            return base64.b64decode(node["value"])
        if kind == "dtype":
            return getattr(_C, node["value"])
        if kind == "device":
            return device(node["value"])
        if kind == "tensor":
            key = ("tensor", node["ref"])
            if key not in self.memo:
                t = _C.from_numpy(self.arrays[node["ref"]])
                if node.get("parameter"):
                    from .nn.parameter import Parameter
                    t = Parameter(t, requires_grad=bool(node.get("requires_grad")))
                elif node.get("requires_grad"):
                    t.requires_grad_(True)
                self.memo[key] = t
            return self.memo[key]
        if kind == "ndarray":
            return self.arrays[node["ref"]]
        items = node.get("items", [])
        if kind in ("list", "tuple", "set"):
            values = [self._build(v) for v in items]
            return {"list": list, "tuple": tuple, "set": set}[kind](values)
        if kind == "size":
            return _C.Size([self._build(v) for v in items])
        pairs = [(self._build(k), self._build(v)) for k, v in items]
        return OrderedDict(pairs) if kind == "ordereddict" else dict(pairs)


def _check_map_location(map_location):
    if map_location is None or callable(map_location) or isinstance(map_location, dict):
        return
    dev = map_location if isinstance(map_location, str) else getattr(map_location, "type",
                                                                      str(map_location))
    if dev.split(":")[0] != "cpu":
        raise RuntimeError(f"ember.load: ember runs on the CPU only; map_location="
                           f"{map_location!r} is not available")


def load(f, map_location=None, pickle_module=None, *, weights_only=True, mmap=None,
         **pickle_load_args):
    """Loads what ember.save wrote, or a .safetensors / .npz file (as a dict of tensors).
    Never unpickles, whatever weights_only says."""
    _check_map_location(map_location)
    data, where = _read_all(f)
    if data[:2] == b"PK":
        return _load_zip(data, where)
    if data[:1] == b"\x80":
        raise CorruptFileError(f"ember.load: {where} is a pickle (legacy torch.save format); "
                               "ember never unpickles. Re-save it as safetensors or .npz.")
    if len(data) >= 10 and data[8:9] == b"{":
        return _parse_safetensors(data, where)
    raise _corrupt(where, "unrecognised format: not an ember file, safetensors or .npz")


def _load_zip(data, where):
    try:
        zf = zipfile.ZipFile(io.BytesIO(data))
        names = zf.namelist()
    except (zipfile.BadZipFile, EOFError, ValueError) as e:
        raise _corrupt(where, str(e)) from None
    with zf:
        if _MANIFEST in names:
            reader = _Reader(zf, where)
            try:
                reader.check()
            except (zipfile.BadZipFile, EOFError, ValueError, OSError) as e:
                raise _corrupt(where, str(e)) from None
            return reader.build()
        if any(n.endswith("data.pkl") for n in names):
            raise CorruptFileError(f"ember.load: {where} is a PyTorch checkpoint (pickle "
                                   "based); ember never unpickles. In PyTorch, save the "
                                   "state_dict with safetensors or as .npz and load that.")
        if names and all(n.endswith(".npy") for n in names):
            return _load_npz(io.BytesIO(data), where)
    raise _corrupt(where, "a ZIP archive with no ember manifest")


# ------------------------------------------------------------------ .npz

def _load_npz(f, where):
    try:
        with np.load(f, allow_pickle=False) as npz:
            arrays = {k: npz[k] for k in npz.files}
    except ValueError as e:
        raise CorruptFileError(f"ember.load: {where}: {e} (object arrays need pickle, which "
                               "ember never uses)") from None
    except (zipfile.BadZipFile, EOFError, OSError) as e:
        raise _corrupt(where, str(e)) from None
    out = OrderedDict()
    for k, a in arrays.items():
        _dtype_name_np(a.dtype)
        out[k] = _C.from_numpy(np.array(a, dtype=a.dtype.newbyteorder("="), order="C"))
    return out


def load_npz(f):
    """A NumPy .npz archive as an OrderedDict name -> tensor (pickle disabled)."""
    data, where = _read_all(f)
    return _load_npz(io.BytesIO(data), where)


# ------------------------------------------------------------------ safetensors

_ST_DTYPES = {"BOOL": "bool", "U8": "uint8", "I8": "int8", "I16": "int16", "I32": "int32",
              "I64": "int64", "F16": "float16", "F32": "float32", "F64": "float64"}
_ST_NAMES = {v: k for k, v in _ST_DTYPES.items()}
_ST_MAX_HEADER = 100 * 1024 * 1024


def _parse_safetensors(data, where):
    if len(data) < 8:
        raise _corrupt(where, "shorter than a safetensors header")
    (n,) = struct.unpack("<Q", data[:8])
    if n > _ST_MAX_HEADER or 8 + n > len(data):
        raise _corrupt(where, "safetensors header length past the end of the file")
    try:
        header = json.loads(data[8:8 + n].decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise _corrupt(where, f"safetensors header is not JSON: {e}") from None
    if not isinstance(header, dict):
        raise _corrupt(where, "safetensors header is not an object")
    body = memoryview(data)[8 + n:]
    entries = []
    for name, info in header.items():
        if name == "__metadata__":
            continue
        try:
            dtype, shape, (begin, end) = info["dtype"], info["shape"], info["data_offsets"]
        except (KeyError, TypeError, ValueError):
            raise _corrupt(where, f"bad safetensors entry {name!r}") from None
        if dtype == "BF16":
            np_dtype, itemsize = None, 2
        elif dtype in _ST_DTYPES:
            np_dtype = np.dtype(_ST_DTYPES[dtype])
            itemsize = np_dtype.itemsize
        else:
            raise CorruptFileError(f"ember.load: {where}: tensor {name!r} has dtype {dtype}, "
                                   "which ember does not support")
        if not isinstance(shape, list) or not all(isinstance(s, int) and s >= 0
                                                  for s in shape):
            raise _corrupt(where, f"bad shape for {name!r}")
        if not (isinstance(begin, int) and isinstance(end, int) and
                0 <= begin <= end <= len(body)) or end - begin != math.prod(shape) * itemsize:
            raise _corrupt(where, f"data offsets of {name!r} do not fit its shape or the file")
        entries.append((begin, end, name, np_dtype, shape))
    spans = sorted((b, e) for b, e, *_ in entries if e > b)
    if any(e0 > b1 for (_, e0), (b1, _) in zip(spans, spans[1:])):
        raise _corrupt(where, "overlapping tensors in safetensors data")
    out = OrderedDict()
    for begin, end, name, np_dtype, shape in entries:
        raw = body[begin:end]
        if np_dtype is None:    # bfloat16: the high half of a float32
            bits = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16
            array = bits.view(np.float32).reshape(shape)
        else:
            array = np.frombuffer(raw, dtype=np_dtype.newbyteorder("<")).astype(
                np_dtype).reshape(shape)
        out[name] = _C.from_numpy(np.array(array, order="C"))
    return out


def load_safetensors(f):
    """A .safetensors file as an OrderedDict name -> tensor (bfloat16 becomes float32)."""
    data, where = _read_all(f)
    return _parse_safetensors(data, where)


def save_safetensors(tensors, f, metadata=None):
    """Writes a dict name -> tensor in the safetensors format (readable by the
    safetensors library and by PyTorch tooling)."""
    header, chunks, offset = {}, [], 0
    if metadata is not None:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    for name, t in tensors.items():
        array = t.detach().numpy() if isinstance(t, _C.Tensor) else np.asarray(t)
        dname = _dtype_name_np(array.dtype)
        raw = np.ascontiguousarray(array).astype(_np_dtype(dname), copy=False).tobytes()
        header[name] = {"dtype": _ST_NAMES[dname], "shape": list(array.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    head = json.dumps(header, separators=(",", ":")).encode("utf-8")
    head += b" " * (-len(head) % 8)
    blob = struct.pack("<Q", len(head)) + head + b"".join(chunks)
    if isinstance(f, (str, os.PathLike)):
        with open(f, "wb") as fh:
            fh.write(blob)
    else:
        f.write(blob)
