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

    none                                     {"type"}
    bool, int, str                           {"type", "value"}
    float                                    {"type", "value": float.hex(x)}  (exact, inf/nan)
    bytes                                    {"type", "value": base64}
    list, tuple, set, size                   {"type", "items": [NODE, ...]}
    dict, ordereddict                        {"type", "items": [[NODE key, NODE value], ...]}
    dtype, device                            {"type", "value": "float32" / "cpu"}
    tensor                                   {"type", "ref": i, "requires_grad", "parameter"}
    ndarray                                  {"type", "ref": i}

A tensor object that occurs several times is stored once and loads as one object.
Containers nest at most 100 levels (ember.save refuses deeper ones).

ember.load reads untrusted bytes: whatever they are, it returns only objects of the types
above (what ember.save was given, for an intact file) or raises CorruptFileError saying
what is wrong, never another exception. Before any object is built it checks the
archive (no duplicate, overlapping, encrypted or oddly compressed members, no member
beyond those the manifest names), the manifest checksum, the manifest against the schema
above (exact keys, value types, known node types, dtypes by name from a fixed table,
nesting depth, hashable dict keys and set items, every tensor referenced), and each
tensor's dtype, shape and byte count against each other and the archive directory; then
it reads each tensor's data, inflating no more than its declared size (a compressed
manifest at most 16 MiB), and checks its SHA-256. Dict keys or set items that turn out
equal when built are refused too.

ember.load also reads .safetensors files (8-byte little-endian header length, JSON
header, raw data; parsed here, no dependency) and NumPy .npz archives (each .npy header
parsed by NumPy's literal-only header reader, never pickle; object arrays are refused),
both as a dict name -> tensor ready for Module.load_state_dict, with the same guarantee:
declared dtypes, shapes, offsets and sizes are checked against each other and the file
before any data is read. PyTorch's own checkpoints (torch.save's ZIP archives and its
older pickle stream) are read as torch.load(weights_only=True) reads them, by ember's
own pickle interpreter, never by Python's unpickler (_torch_format.py): only data and
tensors come out, anything else is a CorruptFileError.

This module also gives tensors the copy and pickle protocols (installed on the C type):
copy.copy shares memory, copy.deepcopy copies it (keeping requires_grad and .grad),
pickle stores a NumPy array with the dtype and requires_grad.
"""
from __future__ import annotations

import base64
import copy as _copy
import hashlib
import json
import math
import os
import re
import struct
import tokenize
import zipfile
from collections import OrderedDict

import numpy as np

from . import _C, _dtypes, _torch_format
from ._safe_zip import ZIP_ERRORS, SafeZip
from .device import device

FORMAT = "ember.save"
VERSION = 1
_MANIFEST = "ember/manifest.json"
_MANIFEST_SUM = "ember/manifest.sha256"
# every ember dtype by the name the format stores (loading looks names up here only)
_DTYPE_BY_NAME = dict(_dtypes.BY_NAME)     # a copy: the allow-list of stored names
_DTYPES = tuple(_DTYPE_BY_NAME)
_MAX_DEPTH = 100                        # container nesting levels
_MAX_NDIM = 64                          # EM_MAX_DIMS
_MAX_BYTES = 2 ** 63 - 1                # a tensor's extent in bytes must fit an int64
_MANIFEST_LIMIT = 16 * 1024 * 1024      # a compressed manifest inflates to at most this


class CorruptFileError(RuntimeError):
    """The file is truncated, damaged, or not in a format ember.load reads."""


# ------------------------------------------------------------------ tensor protocols

def _dtype_name(dtype):
    return dtype._name


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
    return empty(tuple(shape), dtype=_DTYPE_BY_NAME[dtype_name], device="meta",
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

    def node(self, obj, depth=0):
        from .nn.parameter import Parameter
        if depth > _MAX_DEPTH:
            raise ValueError(f"ember.save: objects nested deeper than {_MAX_DEPTH} levels "
                             "cannot be saved")
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
        d = depth + 1
        if isinstance(obj, _C.Size):
            return {"type": "size", "items": [self.node(int(n), d) for n in obj]}
        if isinstance(obj, dict):
            return {"type": "ordereddict" if isinstance(obj, OrderedDict) else "dict",
                    "items": [[self.node(k, d), self.node(v, d)] for k, v in obj.items()]}
        if isinstance(obj, tuple) and not hasattr(obj, "_fields"):
            return {"type": "tuple", "items": [self.node(v, d) for v in obj]}
        if isinstance(obj, list):
            return {"type": "list", "items": [self.node(v, d) for v in obj]}
        if isinstance(obj, (set, frozenset)):
            return {"type": "set", "items": [self.node(v, d) for v in obj]}
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


def _short(value, limit=60):
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def _is_int(value):
    return type(value) is int


class _DuplicateKey(ValueError):
    pass


def _unique_keys(pairs):
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen = set()
        for key, _ in pairs:
            if key in seen:
                raise _DuplicateKey(f"duplicate key {_short(key)} in a JSON object")
            seen.add(key)
    return obj


def _no_constant(name):
    raise ValueError(f"{name} is not JSON")


def _parse_json(raw, what, fail):
    """Strict JSON: UTF-8, no duplicate keys, no NaN/Infinity; any failure is fail()."""
    try:
        text = bytes(raw).decode("utf-8")
    except UnicodeDecodeError as e:
        raise fail(f"{what} is not UTF-8: {e}") from None
    try:
        return json.loads(text, object_pairs_hook=_unique_keys, parse_constant=_no_constant)
    except RecursionError:
        raise fail(f"{what} is nested too deeply to parse") from None
    except ValueError as e:
        raise fail(f"{what} is not valid JSON: {e}") from None


def _check_shape(shape, itemsize, what, fail):
    """A declared shape: a list of at most _MAX_NDIM non-negative ints whose size in bytes
    (counting empty dimensions as 1, as NumPy does) fits in an int64. Returns the number
    of bytes of the data."""
    if type(shape) is not list or len(shape) > _MAX_NDIM or \
            not all(_is_int(n) and n >= 0 for n in shape):
        raise fail(f"{what} has shape {_short(shape)}; a shape is a list of at most "
                   f"{_MAX_NDIM} non-negative integers")
    extent = itemsize
    for n in shape:
        extent *= max(n, 1)
        if extent > _MAX_BYTES:
            raise fail(f"{what} has shape {_short(shape)}, too large to address")
    return math.prod(shape) * itemsize


# node type -> the keys its JSON object has
_NODE_KEYS = {
    "none": frozenset({"type"}),
    **{kind: frozenset({"type", "value"})
       for kind in ("bool", "int", "float", "str", "bytes", "dtype", "device")},
    **{kind: frozenset({"type", "items"})
       for kind in ("list", "tuple", "set", "size", "dict", "ordereddict")},
    "tensor": frozenset({"type", "ref", "requires_grad", "parameter"}),
    "ndarray": frozenset({"type", "ref"}),
}
_MANIFEST_KEYS = frozenset({"format", "version", "root", "tensors"})
_ENTRY_KEYS = frozenset({"file", "dtype", "shape", "nbytes", "sha256"})
_FLOATING = frozenset({"float16", "float32", "float64"})
_SHA256 = re.compile(r"[0-9a-f]{64}")
_DEVICE = re.compile(r"(cpu|meta|cuda|mps)(:-?[0-9]{1,18})?")


def _float_value(text):
    """The float a float node holds, or None unless text is exactly float.hex() of it."""
    if type(text) is not str or len(text) > 40:
        return None
    try:
        value = float.fromhex(text)
    except (ValueError, OverflowError):
        return None
    return value if value.hex() == text else None


def _bytes_value(text):
    """The bytes a bytes node holds, or None unless text is their canonical base64."""
    if type(text) is not str:
        return None
    try:
        value = base64.b64decode(text, validate=True)
    except ValueError:
        return None
    return value if base64.b64encode(value).decode("ascii") == text else None


class _Reader:
    """Validates a manifest against the schema above and the archive, reads the tensor
    data (no more than declared), then builds the object tree."""

    def __init__(self, zf, where):
        self.zf = zf
        self.where = where

    def fail(self, detail):
        return _corrupt(self.where, detail)

    def check(self):
        zf, names = self.zf, set(self.zf.names)
        if _MANIFEST_SUM not in names:
            raise self.fail(f"missing {_MANIFEST_SUM!r}")
        if zf.declared_size(_MANIFEST_SUM) > 256:
            raise self.fail("manifest checksum is not a SHA-256 digest")
        digest = bytes(zf.read(_MANIFEST_SUM, zf.declared_size(_MANIFEST_SUM))).strip()
        size = zf.declared_size(_MANIFEST)
        if zf.infos[_MANIFEST].compress_type != zipfile.ZIP_STORED and size > _MANIFEST_LIMIT:
            raise self.fail(f"compressed manifest declares {size} bytes (at most "
                            f"{_MANIFEST_LIMIT} are read)")
        manifest_bytes = zf.read(_MANIFEST, size)
        if hashlib.sha256(manifest_bytes).hexdigest().encode("ascii") != digest:
            raise self.fail("manifest checksum mismatch")
        manifest = _parse_json(manifest_bytes, "manifest", self.fail)
        if type(manifest) is not dict or manifest.get("format") != FORMAT:
            raise self.fail("not an ember.save manifest")
        version = manifest.get("version")
        if not _is_int(version):
            raise self.fail(f"format version {_short(version)} is not an integer")
        if version != VERSION:
            raise CorruptFileError(f"ember.load: {self.where} has format version "
                                   f"{version}; this ember reads version {VERSION}")
        if manifest.keys() != _MANIFEST_KEYS:
            raise self.fail(f"manifest has keys {_short(sorted(manifest))}, expected "
                            f"{sorted(_MANIFEST_KEYS)}")
        entries = manifest["tensors"]
        if type(entries) is not list:
            raise self.fail("manifest 'tensors' is not a list")
        self.entries = [self._entry(i, e) for i, e in enumerate(entries)]
        self.uses = {}                  # ref -> (kind, requires_grad, parameter)
        self.root = manifest["root"]
        self._validate(self.root, 0)
        for i in range(len(self.entries)):
            if i not in self.uses:
                raise self.fail(f"tensor {i} is never referenced")
        expected = {_MANIFEST, _MANIFEST_SUM} | {e[0] for e in self.entries}
        if names != expected:
            extra = sorted(names - expected)
            raise self.fail(f"unexpected archive member {extra[0]!r}" if extra else
                            f"missing {sorted(expected - names)[0]!r}")
        self.arrays = [self._array(i, *e) for i, e in enumerate(self.entries)]

    def _entry(self, i, entry):
        what = f"tensor {i}"
        if type(entry) is not dict or entry.keys() != _ENTRY_KEYS:
            raise self.fail(f"bad entry for {what}: expected an object with keys "
                            f"{sorted(_ENTRY_KEYS)}")
        name, dtype, nbytes, digest = (entry[k] for k in ("file", "dtype", "nbytes", "sha256"))
        if name != f"ember/data/{i}":
            raise self.fail(f"{what} is stored as {_short(name)}, expected 'ember/data/{i}'")
        if type(dtype) is not str or dtype not in _DTYPE_BY_NAME:
            raise self.fail(f"bad dtype {_short(dtype)} for {what}")
        size = _check_shape(entry["shape"], np.dtype(dtype).itemsize, what, self.fail)
        if not _is_int(nbytes) or nbytes != size:
            raise self.fail(f"size of {what} does not match its shape ({_short(nbytes)} "
                            f"bytes declared, {size} expected)")
        if type(digest) is not str or not _SHA256.fullmatch(digest):
            raise self.fail(f"checksum of {what} is not a SHA-256 digest")
        return name, dtype, entry["shape"], nbytes, digest

    def _array(self, i, name, dtype, shape, nbytes, digest):
        data = self.zf.read(name, nbytes, f"data of tensor {i}")
        if hashlib.sha256(data).hexdigest() != digest:
            raise self.fail(f"checksum mismatch in tensor {i}")
        return np.frombuffer(data, dtype=_np_dtype(dtype)).astype(np.dtype(dtype)).reshape(
            shape)

    def _validate(self, node, depth):
        """Checks one node and its children; returns whether the object it builds is
        hashable (dict keys and set items must be)."""
        if depth > _MAX_DEPTH:
            raise self.fail(f"object tree nested deeper than {_MAX_DEPTH} levels")
        if type(node) is not dict:
            raise self.fail(f"object tree node {_short(node)} is not a JSON object")
        kind = node.get("type")
        if type(kind) is not str or kind not in _NODE_KEYS:
            raise self.fail(f"unknown node type {_short(kind)}")
        if node.keys() != _NODE_KEYS[kind]:
            raise self.fail(f"{kind} node has keys {_short(sorted(node))}, expected "
                            f"{sorted(_NODE_KEYS[kind])}")
        value = node.get("value")
        if kind == "none":
            return True
        if kind == "bool" or kind == "int" or kind == "str":
            if type(value) is not {"bool": bool, "int": int, "str": str}[kind]:
                raise self.fail(f"{kind} node holds {_short(value)}")
            return True
        if kind == "float":
            if _float_value(value) is None:
                raise self.fail(f"float node holds {_short(value)}, not float.hex() text")
            return True
        if kind == "bytes":
            if _bytes_value(value) is None:
                raise self.fail("bytes node does not hold canonical base64")
            return True
        if kind == "dtype":
            if type(value) is not str or value not in _DTYPE_BY_NAME:
                raise self.fail(f"unknown dtype {_short(value)}")
            return True
        if kind == "device":
            if type(value) is not str or not _DEVICE.fullmatch(value) or \
                    str(device(value)) != value:
                raise self.fail(f"unknown device {_short(value)}")
            return True
        if kind == "tensor" or kind == "ndarray":
            return self._validate_ref(node, kind)
        items = node["items"]
        if type(items) is not list:
            raise self.fail(f"{kind} node items are not a list")
        if kind == "dict" or kind == "ordereddict":
            for pair in items:
                if type(pair) is not list or len(pair) != 2:
                    raise self.fail("malformed dict entry")
                if not self._validate(pair[0], depth + 1):
                    raise self.fail("unhashable dict key")
                self._validate(pair[1], depth + 1)
            return False
        hashable = [self._validate(item, depth + 1) for item in items]
        if kind == "size" and not all(item["type"] == "int" for item in items):
            raise self.fail("size node holds a non-integer")
        if kind == "set" and not all(hashable):
            raise self.fail("unhashable set item")
        return kind != "list" and kind != "set" and all(hashable)

    def _validate_ref(self, node, kind):
        ref = node["ref"]
        if not _is_int(ref) or not 0 <= ref < len(self.entries):
            raise self.fail(f"reference to a missing tensor {_short(ref)}")
        use = (kind,)
        if kind == "tensor":
            requires_grad, parameter = node["requires_grad"], node["parameter"]
            if type(requires_grad) is not bool or type(parameter) is not bool:
                raise self.fail("tensor node flags are not booleans")
            if requires_grad and self.entries[ref][1] not in _FLOATING:
                raise self.fail(f"tensor {ref} of dtype {self.entries[ref][1]} cannot "
                                "require grad")
            use = (kind, requires_grad, parameter)
        if self.uses.setdefault(ref, use) != use:
            raise self.fail(f"tensor {ref} is referenced inconsistently")
        return kind == "tensor"

    def build(self):
        self.memo = {}
        return self._build(self.root)

    def _build(self, node):
        kind = node["type"]
        if kind == "none":
            return None
        if kind in ("bool", "int", "str"):
            return node["value"]
        if kind == "float":
            return _float_value(node["value"])
        if kind == "bytes":
            return _bytes_value(node["value"])
        if kind == "dtype":
            return _DTYPE_BY_NAME[node["value"]]
        if kind == "device":
            return device(node["value"])
        if kind == "tensor":
            ref = node["ref"]
            if ref not in self.memo:
                t = _C.from_numpy(self.arrays[ref])
                if node["parameter"]:
                    from .nn.parameter import Parameter
                    t = Parameter(t, requires_grad=node["requires_grad"])
                elif node["requires_grad"]:
                    t.requires_grad_(True)
                self.memo[ref] = t
            return self.memo[ref]
        if kind == "ndarray":
            return self.arrays[node["ref"]]
        items = node["items"]
        if kind in ("list", "tuple", "set"):
            values = [self._build(v) for v in items]
            out = {"list": list, "tuple": tuple, "set": set}[kind](values)
        elif kind == "size":
            return _C.Size([self._build(v) for v in items])
        else:
            pairs = [(self._build(k), self._build(v)) for k, v in items]
            out = OrderedDict(pairs) if kind == "ordereddict" else dict(pairs)
        if kind in ("set", "dict", "ordereddict") and len(out) != len(items):
            raise self.fail(f"{kind} node holds equal {'items' if kind == 'set' else 'keys'}")
        return out


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
    """Loads what ember.save wrote, a PyTorch checkpoint (torch.save's .pt/.pth, read the
    weights_only way), or a .safetensors / .npz file (as a dict of tensors). Never
    unpickles code, whatever weights_only says. Any malformed input raises
    CorruptFileError."""
    _check_map_location(map_location)
    data, where = _read_all(f)
    if data[:2] == b"PK":
        return _load_zip(data, where)
    if data[:1] == b"\x80":         # torch.save's format before ZIP archives
        return _torch_format.load_legacy(data, where)
    if len(data) >= 10 and data[8:9] == b"{":
        return _parse_safetensors(data, where)
    raise _corrupt(where, "unrecognised format: not an ember file, safetensors or .npz")


def _load_zip(data, where):
    zf = SafeZip(data, lambda detail: _corrupt(where, detail))
    try:
        names = zf.names
        if _MANIFEST in names:
            reader = _Reader(zf, where)
            reader.check()
            return reader.build()
        if any(n.endswith("/data.pkl") for n in names):
            return _torch_format.load_zip(zf, where)
        if names and all(n.endswith(".npy") for n in names):
            return _read_npz(zf, where)
    finally:
        zf.close()
    raise _corrupt(where, "a ZIP archive with no ember manifest")


# ------------------------------------------------------------------ .npz

_NPY_MAX_HEADER = 10000         # NumPy's own limit for headers it parses by default


def _npy_dtype(dtype, what, where):
    if dtype.hasobject:
        raise CorruptFileError(f"ember.load: {where}: {what} holds Python objects, which "
                               "need pickle; ember never unpickles")
    name = dtype.newbyteorder("=").name
    if dtype.fields is not None or dtype.subdtype is not None or name not in _DTYPES:
        raise CorruptFileError(f"ember.load: {where}: {what} has dtype {dtype}, which "
                               "ember does not support")


def _read_npy(zf, name, where):
    """One .npy member: its header (parsed by NumPy's literal-only reader) declares dtype
    and shape, which must account for the member's size exactly; the data is then read
    without inflating more."""
    what = f"array {name[:-4]!r}"
    info = zf.infos[name]
    with zf.open(name, what=what) as fh:
        try:
            version = np.lib.format.read_magic(fh)
            if version == (1, 0):
                header = np.lib.format.read_array_header_1_0(fh, _NPY_MAX_HEADER)
            elif version == (2, 0):
                header = np.lib.format.read_array_header_2_0(fh, _NPY_MAX_HEADER)
            else:
                raise ValueError(f".npy format version {version} is not read")
            header_size = fh.tell()
        except (*ZIP_ERRORS, SyntaxError, tokenize.TokenError, RecursionError) as e:
            raise _corrupt(where, f"{what}: malformed .npy header ({e})") from None
        shape, fortran_order, dtype = header
        _npy_dtype(dtype, what, where)
        if type(fortran_order) is not bool:
            raise _corrupt(where, f"{what} has a malformed header")
        nbytes = _check_shape(list(shape), dtype.itemsize, what,
                              lambda detail: _corrupt(where, detail))
        if info.file_size != header_size + nbytes:
            raise _corrupt(where, f"{what} holds {info.file_size - header_size} bytes of "
                           f"data, its header declares {nbytes}")
        data = zf.read_from(fh, nbytes, what)
    array = np.frombuffer(data, dtype=dtype).reshape(shape, order="F" if fortran_order
                                                      else "C")
    return np.array(array, dtype=array.dtype.newbyteorder("="), order="C")


def _read_npz(zf, where):
    out = OrderedDict()
    for name in zf.names:
        out[name[:-4]] = _read_npy(zf, name, where)
    if len(out) != len(zf.names):
        raise _corrupt(where, "two arrays with one name")
    return OrderedDict((k, _C.from_numpy(a)) for k, a in out.items())


def load_npz(f):
    """A NumPy .npz archive as an OrderedDict name -> tensor (pickle disabled)."""
    data, where = _read_all(f)
    zf = SafeZip(data, lambda detail: _corrupt(where, detail))
    try:
        if not zf.names or not all(n.endswith(".npy") for n in zf.names):
            raise _corrupt(where, "not a .npz archive (members other than .npy files)")
        return _read_npz(zf, where)
    finally:
        zf.close()


# ------------------------------------------------------------------ safetensors

_ST_DTYPES = {"BOOL": "bool", "U8": "uint8", "I8": "int8", "I16": "int16", "I32": "int32",
              "I64": "int64", "F16": "float16", "BF16": "bfloat16", "F32": "float32",
              "F64": "float64"}
_ST_NAMES = {v: k for k, v in _ST_DTYPES.items()}
_ST_MAX_HEADER = 100 * 1024 * 1024


def _parse_safetensors(data, where):
    def fail(detail):
        return _corrupt(where, detail)

    if len(data) < 8:
        raise fail("shorter than a safetensors header")
    (n,) = struct.unpack("<Q", data[:8])
    if n > _ST_MAX_HEADER or 8 + n > len(data):
        raise fail("safetensors header length past the end of the file")
    header = _parse_json(data[8:8 + n], "safetensors header", fail)
    if type(header) is not dict:
        raise fail("safetensors header is not an object")
    body = memoryview(data)[8 + n:]
    entries = []
    for name, info in header.items():
        if name == "__metadata__":
            if type(info) is not dict or not all(type(v) is str for v in info.values()):
                raise fail("safetensors __metadata__ is not a map of strings to strings")
            continue
        if type(info) is not dict or not {"dtype", "shape", "data_offsets"} <= info.keys():
            raise fail(f"bad safetensors entry {_short(name)}")
        dtype, shape, offsets = info["dtype"], info["shape"], info["data_offsets"]
        if type(dtype) is not str:
            raise fail(f"bad dtype for {_short(name)}")
        if dtype in _ST_DTYPES:
            np_dtype = np.dtype(_ST_DTYPES[dtype])
            itemsize = np_dtype.itemsize
        else:
            raise CorruptFileError(f"ember.load: {where}: tensor {_short(name)} has dtype "
                                   f"{dtype[:20]}, which ember does not support")
        nbytes = _check_shape(shape, itemsize, f"tensor {_short(name)}", fail)
        if type(offsets) is not list or len(offsets) != 2 or \
                not all(_is_int(x) for x in offsets):
            raise fail(f"bad data offsets for {_short(name)}")
        begin, end = offsets
        if not 0 <= begin <= end <= len(body) or end - begin != nbytes:
            raise fail(f"data offsets of {_short(name)} do not fit its shape or the file")
        entries.append((begin, end, name, np_dtype, shape))
    spans = sorted((b, e) for b, e, *_ in entries if e > b)
    if any(e0 > b1 for (_, e0), (b1, _) in zip(spans, spans[1:])):
        raise fail("overlapping tensors in safetensors data")
    out = OrderedDict()
    for begin, end, name, np_dtype, shape in entries:
        raw = body[begin:end]
        array = np.frombuffer(raw, dtype=np_dtype.newbyteorder("<")).astype(
            np_dtype).reshape(shape)
        out[name] = _C.from_numpy(np.array(array, order="C"))
    return out


def load_safetensors(f):
    """A .safetensors file as an OrderedDict name -> tensor."""
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
        if dname not in _ST_NAMES:
            raise TypeError(f"save_safetensors: tensor {name!r} is {dname}, which the "
                            "safetensors format does not store")
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
