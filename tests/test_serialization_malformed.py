"""ember.load on malformed input: whatever the bytes, it returns what ember.save was given
or raises CorruptFileError; never another exception, an internal object, or an inflation
past the sizes the file declares."""
import base64
import hashlib
import io
import json
import pickle
import random
import struct
import tracemalloc
import warnings
import zipfile
from collections import Counter, OrderedDict

import numpy as np
import pytest

import ember
import ember.nn as nn
import ember.optim as optim
from ember.serialization import CorruptFileError, load_safetensors, save_safetensors

MANIFEST = "ember/manifest.json"
MANIFEST_SUM = "ember/manifest.sha256"


# ------------------------------------------------------------------ helpers

def _saved(obj):
    buf = io.BytesIO()
    ember.save(obj, buf)
    return buf.getvalue()


def _members(data):
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        return {name: z.read(name) for name in z.namelist()}


def _archive(manifest, members=(), compression=zipfile.ZIP_STORED, level=None):
    """An ember archive with a valid manifest checksum; manifest is a dict or raw bytes;
    members is a dict or a list of (name, data) pairs (which may repeat a name)."""
    raw = manifest if isinstance(manifest, bytes) else json.dumps(manifest).encode()
    out = io.BytesIO()
    pairs = list(members.items() if isinstance(members, dict) else members)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")                      # duplicate names on purpose
        with zipfile.ZipFile(out, "w", compression=compression, compresslevel=level) as z:
            for name, content in pairs:
                z.writestr(name, content)
            z.writestr(MANIFEST, raw)
            z.writestr(MANIFEST_SUM, hashlib.sha256(raw).hexdigest())
    return out.getvalue()


def _rewrite(data, fn):
    """data with its manifest replaced by fn(manifest dict), checksum recomputed."""
    members = _members(data)
    manifest = fn(json.loads(members.pop(MANIFEST)))
    members.pop(MANIFEST_SUM)
    return _archive(manifest, members)


def _manifest(root, entries=()):
    return {"format": "ember.save", "version": 1, "root": root, "tensors": list(entries)}


def _entry(i, array):
    data = np.ascontiguousarray(array).astype(array.dtype.newbyteorder("<")).tobytes()
    return ({"file": f"ember/data/{i}", "dtype": array.dtype.name, "shape": list(array.shape),
             "nbytes": len(data), "sha256": hashlib.sha256(data).hexdigest()},
            (f"ember/data/{i}", data))


def _with_tensors(root, *arrays):
    """An archive whose root is `root` and whose tensors are `arrays`."""
    pairs = [_entry(i, a) for i, a in enumerate(arrays)]
    return _archive(_manifest(root, [e for e, _ in pairs]), dict(m for _, m in pairs))


def _load_bytes(data):
    return ember.load(io.BytesIO(data))


def _corrupt(data, match=None):
    with pytest.raises(CorruptFileError, match=match) as info:
        _load_bytes(data)
    return str(info.value)


_ARRAY_DTYPES = ("bool", "uint8", "int8", "int16", "int32", "int64", "float16", "float32",
                 "float64")
_ALLOWED = (type(None), bool, int, float, str, bytes, list, tuple, set, dict, OrderedDict,
            ember.Size, ember.device, ember.dtype, ember.Tensor, nn.Parameter, np.ndarray)


def _describe(obj):
    """A hashable description of a loaded object: equal for equal objects (nan equal to
    nan, -0.0 distinct from 0.0); fails on any type a checkpoint cannot hold."""
    kind = type(obj)
    assert kind in _ALLOWED, f"ember.load returned an object of type {kind}"
    if isinstance(obj, ember.Tensor):
        a = obj.detach().numpy()
        return (kind.__name__, str(obj.dtype), tuple(obj.shape), bool(obj.requires_grad),
                a.tobytes())
    if kind is np.ndarray:
        assert obj.dtype.name in _ARRAY_DTYPES, obj.dtype
        return ("ndarray", obj.dtype.str, obj.shape, obj.tobytes())
    if kind is float:
        return ("float", obj.hex())
    if kind in (dict, OrderedDict):
        return (kind.__name__, tuple((_describe(k), _describe(v)) for k, v in obj.items()))
    if kind is set:
        return ("set", tuple(sorted((_describe(v) for v in obj), key=repr)))
    if kind in (list, tuple, ember.Size):
        return (kind.__name__, tuple(_describe(v) for v in obj))
    if kind is ember.dtype:
        return ("dtype", str(obj))
    if kind is ember.device:
        return ("device", str(obj))
    return (kind.__name__, obj)


def _same(a, b):
    return _describe(a) == _describe(b)


# ------------------------------------------------------------------ dtypes by table

@pytest.mark.parametrize("name", ["from_numpy", "Tensor", "load", "_C", "__class__", "dtype",
                                  "float", "Float32", "float32 ", "torch.float32", "BFloat16",
                                  "complex32", ""])
def test_dtype_names_outside_the_table_are_refused(name):
    data = _archive(_manifest({"type": "dtype", "value": name}))
    _corrupt(data, "unknown dtype")


def test_every_dtype_name_in_the_table_loads_as_that_dtype():
    for dtype in (ember.bool, ember.uint8, ember.int8, ember.int16, ember.int32, ember.int64,
                  ember.float16, ember.float32, ember.float64, ember.bfloat16):
        name = str(dtype).split(".")[-1]
        assert _load_bytes(_archive(_manifest({"type": "dtype", "value": name}))) is dtype


# ------------------------------------------------------------------ type confusion

_T0 = {"type": "tensor", "ref": 0, "requires_grad": False, "parameter": False}
_INT = {"type": "int", "value": 1}
_EMPTY = {"type": "list", "items": []}

# one valid node of every type; each loads (so the refusals below are about the change)
_VALID = {
    "none": {"type": "none"},
    "bool": {"type": "bool", "value": True},
    "int": {"type": "int", "value": -7},
    "float": {"type": "float", "value": (0.1).hex()},
    "str": {"type": "str", "value": "x"},
    "bytes": {"type": "bytes", "value": base64.b64encode(b"\x00\xff").decode()},
    "dtype": {"type": "dtype", "value": "int16"},
    "device": {"type": "device", "value": "cpu"},
    "list": {"type": "list", "items": [_INT]},
    "tuple": {"type": "tuple", "items": [_INT]},
    "set": {"type": "set", "items": [_INT]},
    "size": {"type": "size", "items": [_INT]},
    "dict": {"type": "dict", "items": [[_INT, _INT]]},
    "ordereddict": {"type": "ordereddict", "items": [[_INT, _INT]]},
    "tensor": _T0,
    "ndarray": {"type": "ndarray", "ref": 0},
}

# wrong values for every decoded field of every node type
_CONFUSED = [
    ("bool", {"value": 1}), ("bool", {"value": "true"}), ("bool", {"value": None}),
    ("int", {"value": "12"}), ("int", {"value": 1.0}), ("int", {"value": True}),
    ("int", {"value": [1]}),
    ("float", {"value": 1.5}), ("float", {"value": "1.5"}), ("float", {"value": " 0x1p0"}),
    ("float", {"value": "0X1P0"}), ("float", {"value": "0x1p99999"}), ("float", {"value": 3}),
    ("float", {"value": "inf "}), ("float", {"value": None}),
    ("str", {"value": 1}), ("str", {"value": ["a"]}), ("str", {"value": None}),
    ("bytes", {"value": "a"}), ("bytes", {"value": "AA"}), ("bytes", {"value": "AA==\n"}),
    ("bytes", {"value": "A\u00e9=="}), ("bytes", {"value": 5}), ("bytes", {"value": ["AA=="]}),
    ("dtype", {"value": ["float32"]}), ("dtype", {"value": 1}), ("dtype", {"value": None}),
    ("device", {"value": "gpu"}), ("device", {"value": "cpu:x"}),
    ("device", {"value": "cpu:01"}), ("device", {"value": "cpu:+1"}),
    ("device", {"value": "cpu:"}), ("device", {"value": 0}), ("device", {"value": ["cpu"]}),
    ("device", {"value": "cpu:" + "9" * 5000}),
    ("list", {"items": {"a": 1}}), ("list", {"items": "ab"}), ("list", {"items": 3}),
    ("list", {"items": [1]}), ("list", {"items": [None]}), ("list", {"items": [[_INT]]}),
    ("tuple", {"items": {}}), ("tuple", {"items": [{"type": "none", "value": 1}]}),
    ("set", {"items": [_EMPTY]}), ("set", {"items": [{"type": "set", "items": []}]}),
    ("set", {"items": [{"type": "ndarray", "ref": 0}]}), ("set", {"items": [_INT, _INT]}),
    ("set", {"items": [{"type": "tuple", "items": [_EMPTY]}]}),
    ("size", {"items": [{"type": "float", "value": "0x1p0"}]}), ("size", {"items": [_EMPTY]}),
    ("size", {"items": [{"type": "bool", "value": True}]}),
    ("dict", {"items": [[_INT]]}), ("dict", {"items": [[_INT, _INT, _INT]]}),
    ("dict", {"items": [{"k": _INT}]}), ("dict", {"items": {"k": _INT}}),
    ("dict", {"items": [[_EMPTY, _INT]]}), ("dict", {"items": [[_INT, _INT], [_INT, _INT]]}),
    ("dict", {"items": [[{"type": "dict", "items": []}, _INT]]}),
    ("ordereddict", {"items": [[{"type": "ndarray", "ref": 0}, _INT]]}),
    ("tensor", {"ref": 1}), ("tensor", {"ref": -1}), ("tensor", {"ref": True}),
    ("tensor", {"ref": "0"}), ("tensor", {"ref": 0.0}), ("tensor", {"ref": None}),
    ("tensor", {"requires_grad": 1}), ("tensor", {"requires_grad": "yes"}),
    ("tensor", {"parameter": 0}), ("tensor", {"parameter": None}),
    ("ndarray", {"ref": 1}), ("ndarray", {"ref": [0]}), ("ndarray", {"ref": False}),
]


def _load_node(node, array=None):
    return _load_bytes(_with_tensors(node, np.arange(3, dtype=np.float32) if array is None
                                     else array))


def _load_node_alone(node):
    if node.get("type") in ("tensor", "ndarray") or "ndarray" in json.dumps(node):
        return _load_node(node)
    return _load_bytes(_archive(_manifest(node)))


@pytest.mark.parametrize("kind", sorted(_VALID))
def test_one_valid_node_of_every_type_loads(kind):
    value = _load_node_alone(_VALID[kind])
    assert _describe(value)[0] == {"none": "NoneType", "ordereddict": "OrderedDict",
                                   "size": "Size", "tensor": "Tensor"}.get(kind, kind)


@pytest.mark.parametrize("kind,change", _CONFUSED, ids=lambda x: json.dumps(x)[:40])
def test_type_confusion_in_every_node_type_is_refused(kind, change):
    node = dict(_VALID[kind], **change)
    with pytest.raises(CorruptFileError):
        _load_node_alone(node)


@pytest.mark.parametrize("kind", sorted(_VALID))
def test_node_keys_are_exact(kind):
    node = _VALID[kind]
    with pytest.raises(CorruptFileError, match="keys"):
        _load_node_alone(dict(node, extra=1))
    for key in node:
        if key != "type":
            with pytest.raises(CorruptFileError, match="keys"):
                _load_node_alone({k: v for k, v in node.items() if k != key})


@pytest.mark.parametrize("node", [[], "none", 1, None, {"value": 1}, {"type": "module"},
                                  {"type": "function", "value": "os.system"},
                                  {"type": ["int"], "value": 1}, {"type": None}])
def test_nodes_that_are_not_node_objects_are_refused(node):
    _corrupt(_archive(_manifest(node)))
    _corrupt(_archive(_manifest({"type": "list", "items": [node]})))


def test_tensor_references_are_checked():
    a = np.arange(3, dtype=np.float32)
    i = np.arange(3, dtype=np.int64)
    rg = dict(_T0, requires_grad=True)
    assert _load_node(rg, a).requires_grad
    _corrupt(_with_tensors(rg, i), "cannot require grad")                 # int + grad
    _corrupt(_with_tensors(dict(rg, parameter=True), i), "cannot require grad")
    _corrupt(_with_tensors({"type": "list", "items": [_T0, rg]}, a), "inconsistently")
    _corrupt(_with_tensors({"type": "list", "items": [_T0, {"type": "ndarray", "ref": 0}]},
                           a), "inconsistently")
    _corrupt(_with_tensors(_T0, a, a), "tensor 1 is never referenced")
    _corrupt(_with_tensors({"type": "none"}, a), "never referenced")
    shared = _load_node({"type": "list", "items": [_T0, _T0]}, a)
    assert shared[0] is shared[1]


# ------------------------------------------------------------------ manifest structure

def _valid_file():
    return _saved({"w": ember.arange(6.0).reshape(2, 3), "n": 3})


def _set(path, value):
    def fn(m):
        obj = m
        for key in path[:-1]:
            obj = obj[key]
        obj[path[-1]] = value
        return m
    return fn


@pytest.mark.parametrize("path,value,match", [
    (("format",), "ember.sav", "not an ember.save manifest"),
    (("format",), ["ember.save"], "not an ember.save manifest"),
    (("version",), True, "not an integer"),
    (("version",), 1.0, "not an integer"),
    (("version",), "1", "not an integer"),
    (("version",), 2, "format version 2"),
    (("tensors",), {"0": {}}, "not a list"),
    (("tensors",), None, "not a list"),
    (("tensors", 0), [], "bad entry"),
    (("tensors", 0, "file"), "ember/manifest.json", "stored as"),
    (("tensors", 0, "file"), "ember/data/1", "stored as"),
    (("tensors", 0, "dtype"), "complex32", "bad dtype"),
    (("tensors", 0, "dtype"), ["float32"], "bad dtype"),
    (("tensors", 0, "shape"), [2, -3], "shape"),
    (("tensors", 0, "shape"), [True, 6], "shape"),
    (("tensors", 0, "shape"), [6.0], "shape"),
    (("tensors", 0, "shape"), "6", "shape"),
    (("tensors", 0, "shape"), [1] * 65, "shape"),
    (("tensors", 0, "shape"), [2 ** 40, 2 ** 40, 2 ** 40], "too large"),
    (("tensors", 0, "shape"), [0, 2 ** 62], "too large"),
    (("tensors", 0, "shape"), [3, 3], "does not match its shape"),
    (("tensors", 0, "nbytes"), -24, "does not match its shape"),
    (("tensors", 0, "nbytes"), 24.0, "does not match its shape"),
    (("tensors", 0, "sha256"), "0" * 63, "not a SHA-256"),
    (("tensors", 0, "sha256"), None, "not a SHA-256"),
    (("tensors", 0, "sha256"), "0" * 64, "checksum mismatch in tensor 0"),
    (("root",), None, "not a JSON object"),
])
def test_manifest_fields_are_validated(path, value, match):
    _corrupt(_rewrite(_valid_file(), _set(path, value)), match)


def test_manifest_keys_and_type():
    data = _valid_file()
    _corrupt(_rewrite(data, lambda m: dict(m, extra=1)), "manifest has keys")
    _corrupt(_rewrite(data, lambda m: {k: v for k, v in m.items() if k != "root"}),
             "manifest has keys")
    _corrupt(_rewrite(data, lambda m: {**m, "tensors": [dict(m["tensors"][0], x=1)]}),
             "bad entry")
    for not_an_object in ([1], "ember.save", 3, None):
        _corrupt(_archive(json.dumps(not_an_object).encode()), "not an ember.save manifest")
    # shape [2**40]*3 with the matching (huge) nbytes: refused before any reading
    huge = 2 ** 120 * 4
    _corrupt(_rewrite(data, lambda m: {**m, "tensors": [dict(m["tensors"][0], nbytes=huge,
                                                              shape=[2 ** 40] * 3)]}),
             "too large")


@pytest.mark.parametrize("raw,match", [
    (b"\xff\xfe{}", "not UTF-8"),
    (b'{"format": "ember.save", "format": "ember.save", "version": 1, "root": '
     b'{"type": "none"}, "tensors": []}', "duplicate key"),
    (b'{"format": "ember.save", "version": 1, "root": {"type": "int", "value": 1, '
     b'"value": 2}, "tensors": []}', "duplicate key"),
    (b'{"format": "ember.save", "version": 1, "root": {"type": "list", "items": [NaN]}, '
     b'"tensors": []}', "not valid JSON"),
    (b'{"format": "ember.save", "version": 1, "root": {"type": "int", "value": '
     + b"9" * 5000 + b'}, "tensors": []}', "not valid JSON"),
    (b'{"format": "ember.save", "version": 1, "root": {"type": "none"}', "not valid JSON"),
    (b"", "not valid JSON"),
])
def test_manifest_text_is_strict_json(raw, match):
    _corrupt(_archive(raw), match)


def test_duplicate_equal_keys_and_set_items_are_refused():
    one, one_bool = _INT, {"type": "bool", "value": True}
    _corrupt(_archive(_manifest({"type": "dict", "items": [[one, _INT], [one_bool, _INT]]})),
             "equal keys")
    _corrupt(_archive(_manifest({"type": "set", "items": [one, one_bool]})), "equal items")
    # nan is never equal to itself: two nan keys are two keys, as saved
    nan = {"type": "float", "value": "nan"}
    assert len(_load_bytes(_archive(_manifest({"type": "dict",
                                                "items": [[nan, _INT], [nan, _INT]]})))) == 2


# ------------------------------------------------------------------ nesting depth

def _nested(depth, leaf=_INT):
    node = leaf
    for i in range(depth):
        node = {"type": "list", "items": [node]} if i % 2 else \
            {"type": "dict", "items": [[{"type": "str", "value": "k"}, node]]}
    return node


def test_deep_nesting_is_a_corrupt_file_not_a_recursion_error():
    for depth in (101, 500, 5000):
        raw = json.dumps(_manifest(_nested(101))).encode() if depth == 101 else \
            b'{"format":"ember.save","version":1,"tensors":[],"root":' + \
            b'{"type":"list","items":[' * depth + b"]}" * depth + b"}"
        with pytest.raises(CorruptFileError, match="nested"):
            _load_bytes(_archive(raw))
    raw = b'{"format":"ember.save","version":1,"tensors":[],"root":' + b"[" * 100000 + \
        b"]" * 100000 + b"}"
    _corrupt(_archive(raw), "nested too deeply")


def test_save_and_load_agree_on_the_nesting_limit():
    obj = 1
    for i in range(100):
        obj = [obj] if i % 2 else {"k": obj}
    assert _same(_load_bytes(_saved(obj)), obj)
    assert _same(_load_bytes(_archive(_manifest(_nested(100)))), obj)
    with pytest.raises(ValueError, match="nested deeper than 100"):
        ember.save([obj], io.BytesIO())


# ------------------------------------------------------------------ inflation bounds

BOMB = 32 << 20         # bytes a bomb inflates to; the 8-byte tensor it claims to be


def _peak_bytes(fn):
    tracemalloc.start()
    try:
        with pytest.raises(CorruptFileError) as info:
            fn()
        return tracemalloc.get_traced_memory()[1], str(info.value)
    finally:
        tracemalloc.stop()


def _bomb_archive():
    """data/0 declared (manifest) as 8 bytes, but a deflated member of BOMB bytes."""
    entry, _ = _entry(0, np.zeros(1, dtype=np.float64))
    return _archive(_manifest(_T0, [entry]), {"ember/data/0": bytes(BOMB)},
                    compression=zipfile.ZIP_DEFLATED, level=1)


def test_a_deflate_bomb_in_tensor_data_is_not_inflated():
    data = _bomb_archive()
    assert len(data) < BOMB // 200
    peak, msg = _peak_bytes(lambda: _load_bytes(data))
    assert peak < 4 << 20, f"loading inflated {peak} bytes"
    assert f"holds {BOMB} bytes, expected 8" in msg


def _central_entries(data):
    """(offset of its central directory entry, ZipInfo) for each member."""
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        cd = z.start_dir
        for info in z.infolist():
            assert data[cd:cd + 4] == b"PK\x01\x02"
            yield cd, info
            cd += 46 + sum(struct.unpack_from("<HHH", data, cd + 28))


def _patch_sizes(data, name, size):
    """data with member `name`'s uncompressed size set to `size` in both its local
    header and the central directory (the archive then lies about the member)."""
    out = bytearray(data)
    for cd, info in _central_entries(data):
        if info.filename == name:
            struct.pack_into("<I", out, info.header_offset + 22, size)
            struct.pack_into("<I", out, cd + 24, size)
    return bytes(out)


def test_a_deflate_bomb_that_lies_about_its_size_is_not_inflated():
    data = _patch_sizes(_bomb_archive(), "ember/data/0", 8)
    peak, _ = _peak_bytes(lambda: _load_bytes(data))
    assert peak < 4 << 20, f"loading inflated {peak} bytes"


def test_a_deflated_manifest_inflates_at_most_16_mib():
    raw = json.dumps(_manifest({"type": "none"})).encode() + b" " * BOMB     # valid JSON
    data = _archive(raw, compression=zipfile.ZIP_DEFLATED, level=1)
    peak, msg = _peak_bytes(lambda: _load_bytes(data))
    assert "compressed manifest declares" in msg
    assert peak < 4 << 20, f"loading inflated {peak} bytes"
    lying = _patch_sizes(data, MANIFEST, 1000)
    peak, _ = _peak_bytes(lambda: _load_bytes(lying))
    assert peak < 4 << 20, f"loading inflated {peak} bytes"
    # an honest small deflated manifest (a re-zipped checkpoint) still loads
    obj = {"w": ember.arange(4.0), "n": [1, 2]}
    members = _members(_saved(obj))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as z:
        for name, content in members.items():
            z.writestr(name, content)
    assert _same(_load_bytes(out.getvalue()), obj)


# ------------------------------------------------------------------ the archive itself

def _set_flag(data, name, *, flag=None, method=None):
    out = bytearray(data)
    for cd, info in _central_entries(data):
        if info.filename == name:
            if flag is not None:
                struct.pack_into("<H", out, cd + 8, flag)
                struct.pack_into("<H", out, info.header_offset + 6, flag)
            if method is not None:
                struct.pack_into("<H", out, cd + 10, method)
                struct.pack_into("<H", out, info.header_offset + 8, method)
    return bytes(out)


def test_archive_level_damage_is_a_corrupt_file():
    data = _valid_file()
    members = _members(data)
    manifest = members[MANIFEST]
    dup = list(members.items()) + [("ember/data/0", members["ember/data/0"])]
    cases = {
        "duplicate archive member": _archive(manifest, [p for p in dup if p[0] != MANIFEST
                                                         and p[0] != MANIFEST_SUM]),
        "unexpected archive member": _archive(manifest, {"ember/data/0": members[
            "ember/data/0"], "ember/data/1": b""}),
        "missing 'ember/data/0'": _archive(manifest, {}),
        "missing 'ember/manifest.sha256'": _members_without(data, MANIFEST_SUM),
        "is encrypted": _set_flag(data, "ember/data/0", flag=0x1),
        "compression method 12": _set_flag(data, "ember/data/0", method=12),
        "not a readable ZIP": data[:-30],
        "manifest checksum mismatch": _replace_member(data, MANIFEST_SUM, b"0" * 64),
    }
    for match, bad in cases.items():
        _corrupt(bad, match)
    for cut in (len(data) // 3, len(data) // 2, len(data) - 1, 2, 3, 30, 100):
        _corrupt(data[:cut])
    _corrupt(b"PK\x05\x06" + bytes(18))                       # an empty archive
    _corrupt(b"PK" + bytes(100))
    _corrupt(b"")
    _corrupt(b"\x00" * 64, "unrecognised format")


def _members_without(data, name):
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        for k, v in _members(data).items():
            if k != name:
                z.writestr(k, v)
    return out.getvalue()


def _replace_member(data, name, content):
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        for k, v in _members(data).items():
            z.writestr(k, content if k == name else v)
    return out.getvalue()


def test_overlapping_members_are_refused():
    """Two directory entries naming one stored stream (the overlapping-files zip bomb)."""
    a = np.zeros(4, dtype=np.float32)
    pairs = [_entry(i, a) for i in range(2)]
    data = _archive(_manifest({"type": "list", "items": [dict(_T0, ref=0), dict(_T0, ref=1)]},
                              [e for e, _ in pairs]), dict(m for _, m in pairs))
    assert _load_bytes(data)[1].tolist() == [0.0] * 4
    out = bytearray(data)
    entries = {info.filename: (cd, info) for cd, info in _central_entries(data)}
    struct.pack_into("<I", out, entries["ember/data/1"][0] + 42,
                     entries["ember/data/0"][1].header_offset)
    _corrupt(bytes(out), "overlap")


# ------------------------------------------------------------------ npz and safetensors

def _npz(**arrays):
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


def test_npz_variants_load_as_numpy_reads_them():
    arrays = {"c": np.arange(6.0).reshape(2, 3), "f": np.asfortranarray(np.arange(6).reshape(
        2, 3)), "be": np.arange(4, dtype=">i4"), "s": np.array(2.5, dtype=np.float16),
        "e": np.zeros((0, 3), dtype=np.uint8), "b": np.array([True, False])}
    for data in (_npz(**arrays), _npz_compressed(**arrays)):
        out = _load_bytes(data)
        assert list(out) == list(arrays)
        for k, a in arrays.items():
            t = out[k].numpy()
            assert t.dtype == a.dtype.newbyteorder("=") and t.shape == a.shape
            assert np.array_equal(t, a) and t.flags.c_contiguous


def _npz_compressed(**arrays):
    buf = io.BytesIO()
    np.savez_compressed(buf, **arrays)
    return buf.getvalue()


def _npy_member(header, data=b""):
    head = repr(header).encode("latin1")
    head += b" " * (-(len(head) + 11) % 64) + b"\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(head)) + head + data


def _zip(**members):
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        for k, v in members.items():
            z.writestr(k, v)
    return out.getvalue()


@pytest.mark.parametrize("member,match", [
    (_npy_member({"descr": "<f8", "fortran_order": False, "shape": (2 ** 40,)}), "holds 0"),
    (_npy_member({"descr": "<f8", "fortran_order": False, "shape": (2 ** 62, 4)}),
     "too large"),
    (_npy_member({"descr": "<f8", "fortran_order": False, "shape": (0, 2 ** 62)}),
     "too large"),
    (_npy_member({"descr": "<f8", "fortran_order": False, "shape": (-1,)}, bytes(8)),
     "shape"),
    (_npy_member({"descr": "<f8", "fortran_order": False, "shape": (2,)}, bytes(8)),
     "holds 8"),
    (_npy_member({"descr": "<c32", "fortran_order": False, "shape": (1,)}, bytes(32)),
     "complex256"),
    (_npy_member({"descr": "<U2", "fortran_order": False, "shape": (1,)}, bytes(8)),
     "does not support"),
    (_npy_member({"descr": [("a", "<f4")], "fortran_order": False, "shape": (1,)},
                 bytes(4)), "does not support"),
    (_npy_member({"descr": "|O", "fortran_order": False, "shape": (1,)}, bytes(8)),
     "pickle"),
    (_npy_member({"descr": "<f8", "fortran_order": 0, "shape": (1,)}, bytes(8)),
     "fortran_order"),
    (_npy_member({"descr": "<f8", "shape": (1,)}, bytes(8)), "array 'x'"),
    (b"\x93NUMPY\x01\x00\xff\xff" + b"(" * 200, "array 'x'"),
    (b"\x93NUMPY\x01\x00\x10\x00{'descr': ('<f8'\n", "malformed .npy header"),   # tokenize
    (b"\x93NUMPY\x03\x00" + bytes(8), "version"),
    (b"not npy", "array 'x'"),
])
def test_malformed_npz_members_are_corrupt_files(member, match):
    _corrupt(_zip(**{"x.npy": member}), match)


def test_npz_bombs_and_duplicates():
    big = _npy_member({"descr": "<f8", "fortran_order": False, "shape": (1,)}, bytes(BOMB))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=1) as z:
        z.writestr("x.npy", big)
    peak, msg = _peak_bytes(lambda: _load_bytes(out.getvalue()))
    assert "declares 8" in msg and peak < 4 << 20
    ok = _npy_member({"descr": "<f8", "fortran_order": False, "shape": (1,)}, bytes(8))
    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with zipfile.ZipFile(buf, "w") as z:
            z.writestr("x.npy", ok)
            z.writestr("x.npy", ok)
    _corrupt(buf.getvalue(), "duplicate")


def _st(header, data=b""):
    head = header if isinstance(header, bytes) else json.dumps(header).encode()
    return struct.pack("<Q", len(head)) + head + data


@pytest.mark.parametrize("blob,match", [
    (_st(b'{"a":' + b"[" * 5000 + b"]" * 5000 + b"}"), "nested too deeply"),
    (_st(b'{"x": {"dtype": "F32", "shape": [' + b"9" * 5000 + b'], "data_offsets": [0, 4]}}'),
     "not valid JSON"),
    (_st(b'{"x": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}, "x": {}}',
         bytes(4)), "duplicate key"),
    (_st({"x": {"dtype": ["F32"], "shape": [1], "data_offsets": [0, 4]}}, bytes(4)),
     "bad dtype"),
    (_st({"x": {"dtype": "F32", "shape": [True], "data_offsets": [0, 4]}}, bytes(4)),
     "shape"),
    (_st({"x": {"dtype": "F32", "shape": [1.0], "data_offsets": [0, 4]}}, bytes(4)),
     "shape"),
    (_st({"x": {"dtype": "F32", "shape": "1", "data_offsets": [0, 4]}}, bytes(4)), "shape"),
    (_st({"x": {"dtype": "F32", "shape": [0, 2 ** 62], "data_offsets": [0, 0]}}),
     "too large"),
    (_st({"x": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4, 8]}}, bytes(8)),
     "offsets"),
    (_st({"x": {"dtype": "F32", "shape": [1], "data_offsets": {"0": 4}}}, bytes(4)),
     "offsets"),
    (_st({"x": {"dtype": "F32", "shape": [1], "data_offsets": [True, 5]}}, bytes(5)),
     "offsets"),
    (_st({"x": {"dtype": "F32", "shape": [1], "data_offsets": [-4, 0]}}, bytes(4)),
     "do not fit"),
    (_st({"x": [1, 2]}), "bad safetensors entry"),
    (_st({"x": {"dtype": "F32"}}), "bad safetensors entry"),
    (_st({"__metadata__": {"a": 1}}), "__metadata__"),
    (_st({"__metadata__": ["a"]}), "__metadata__"),
    (_st(b"{\xff}"), "not UTF-8"),
])
def test_malformed_safetensors_are_corrupt_files(blob, match):
    _corrupt(blob, match)
    with pytest.raises(CorruptFileError, match=match):
        load_safetensors(io.BytesIO(blob))


def test_a_safetensors_header_that_is_not_an_object():
    with pytest.raises(CorruptFileError, match="not an object"):
        load_safetensors(io.BytesIO(_st([1, 2, 3])))


# ------------------------------------------------------------------ mutation fuzz

def _fuzz_objects():
    ember.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
    opt = optim.Adam(model.parameters(), lr=0.01)
    model(ember.randn(2, 3)).sum().backward()
    opt.step()
    mixed = {
        "tensors": [ember.arange(6).to(dt).reshape(2, 3) for dt in
                    (ember.bool, ember.uint8, ember.int8, ember.int16, ember.int32,
                     ember.int64, ember.float16, ember.float32, ember.float64)],
        "nested": {"a": [1, (2.5, "x", None), {"b": {3: b"\x01", (1, 2): [True]}}],
                   "size": ember.Size([2, 3]), "dt": ember.float16, "dev": ember.device("cpu"),
                   "set": {1, "s", (4, 5)}, "od": OrderedDict([("z", -1.0e300), ("y", 2 ** 70)])},
        "param": nn.Parameter(ember.ones(2, 2)),
        "arr": np.arange(4, dtype=np.int16),
    }
    mixed["again"] = mixed["param"]
    return [mixed, {"model": model.state_dict(), "optim": opt.state_dict(), "epoch": 1}]


def _paths(obj, prefix=()):
    yield prefix
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _paths(v, prefix + (i,))


_POOL = [None, True, False, 0, 1, -1, 2, 2 ** 63, 2 ** 64 + 1, 1.5, "", "from_numpy", "cpu",
         "float32", "int", "tensor", "ndarray", "dict", "nan", "AA==", [], [0], [[]], {},
         {"type": "none"}, {"type": "int", "value": 1}, {"type": "dtype", "value": "bool"},
         {"type": "list", "items": [{"type": "list", "items": []}]}, _T0, [_T0, _T0]]


def _mutate_manifest(m, rng):
    """One random structural change to a manifest (a dict) that stays JSON."""
    paths = [p for p in _paths(m) if p]
    path = rng.choice(paths)
    parent = m
    for key in path[:-1]:
        parent = parent[key]
    op = rng.randrange(7)
    if op >= 5:                                   # a leaf value changed, its type kept
        leaves = [p for p in paths if p[-1] == "value"]
        path = rng.choice(leaves)
        parent = m
        for key in path[:-1]:
            parent = parent[key]
        old = parent["value"]
        parent["value"] = not old if type(old) is bool else \
            old + rng.randint(1, 9) if type(old) is int else old + "x"
    elif op == 0:
        parent[path[-1]] = json.loads(json.dumps(rng.choice(_POOL)))
    elif op == 1:
        del parent[path[-1]]
    elif op == 2:
        other = rng.choice(paths)
        value = m
        for key in other:
            value = value[key]
        parent[path[-1]] = json.loads(json.dumps(value))
    elif op == 3 and isinstance(parent, list):
        parent.insert(path[-1], json.loads(json.dumps(rng.choice(_POOL))))
    elif isinstance(parent, dict):
        parent[rng.choice(["value", "items", "ref", "type", "extra", "shape"])] = \
            json.loads(json.dumps(rng.choice(_POOL)))
    else:
        parent[path[-1]] = [parent[path[-1]]]
    return m


def _mutate_bytes(data, rng):
    data = bytearray(data or b"\x00")
    op = rng.randrange(4)
    pos = rng.randrange(len(data))
    if op == 0:
        for _ in range(rng.randint(1, 3)):
            data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
    elif op == 1:
        del data[pos:pos + rng.randint(1, 64)]
    elif op == 2:
        data[pos:pos] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 16)))
    else:
        data = data[:pos]
    return bytes(data)


def _outcome(data):
    """The loaded value, or None for CorruptFileError; anything else fails the test."""
    try:
        return _load_bytes(data)
    except CorruptFileError:
        return None


def test_mutation_fuzz():
    rng = random.Random(1234)
    counts = {"equal": 0, "corrupt": 0, "other value": 0}
    for obj in _fuzz_objects():
        data = _saved(obj)
        original = _describe(_load_bytes(data))
        assert original == _describe(obj)
        members = _members(data)
        manifest_text = members[MANIFEST]
        # raw damage to the file: the original back, or CorruptFileError
        for _ in range(250):
            value = _outcome(_mutate_bytes(data, rng))
            if value is not None:
                assert _describe(value) == original
            counts["equal" if value is not None else "corrupt"] += 1
        # manifests rewritten with valid checksums: CorruptFileError, or a value made only of
        # checkpoint types that ember.save can save again and that loads back equal; a
        # manifest only laid out differently (key order, spacing) loads the original
        for i in range(250):
            if i % 10 == 0:
                raw = json.dumps(json.loads(manifest_text), indent=rng.randrange(3),
                                 sort_keys=True).encode()
            elif i % 2:
                m = _mutate_manifest(json.loads(manifest_text), rng)
                if rng.random() < 0.3:
                    m = _mutate_manifest(m, rng)
                raw = json.dumps(m).encode()
            else:
                raw = _mutate_bytes(manifest_text, rng)
            value = _outcome(_archive(raw, {k: v for k, v in members.items()
                                            if k.startswith("ember/data/")}))
            if value is None:
                counts["corrupt"] += 1
                continue
            described = _describe(value)
            assert i % 10 or described == original
            counts["equal" if described == original else "other value"] += 1
            assert _describe(_load_bytes(_saved(value))) == described
    assert counts["corrupt"] > 500 and counts["equal"] > 40 and counts["other value"] > 10, \
        counts


def test_mutation_fuzz_safetensors_and_npz():
    rng = random.Random(99)
    state = {"w": ember.randn(3, 4), "b": ember.arange(5), "m": ember.ones(2, dtype=ember.bool)}
    st = io.BytesIO()
    save_safetensors(state, st, metadata={"format": "pt"})
    npz = _npz(**{k: v.numpy() for k, v in state.items()})
    for data in (st.getvalue(), npz):
        for _ in range(300):
            value = _outcome(_mutate_bytes(data, rng))
            if value is not None:                  # no checksums here: any tensors at all
                assert type(value) is OrderedDict
                assert all(type(k) is str and type(v) is ember.Tensor
                           for k, v in value.items())


# ------------------------------------------------------------------ PyTorch checkpoints
# (ember's own pickle interpreter, _torch_format.py: tests/test_serialization_torch.py has
# the files torch writes; here, what an attacker or a damaged disk could write)

def _g(module, name):
    return b"c" + f"{module}\n{name}\n".encode()


def _u(text):
    raw = text.encode()
    return b"X" + struct.pack("<I", len(raw)) + raw


def _i(n):
    if -2 ** 31 <= n < 2 ** 31:
        return b"J" + struct.pack("<i", n)
    raw = pickle.encode_long(n)
    return b"\x8a" + bytes([len(raw)]) + raw


def _tup(values):
    return b"(" + b"".join(_i(v) for v in values) + b"t"


_OD = _g("collections", "OrderedDict") + b")R"


def _tensor_ops(key="0", storage="FloatStorage", numel=4, offset=0, size=(4,), stride=(1,),
                requires_grad=False, hooks=_OD):
    return (_g("torch._utils", "_rebuild_tensor_v2") + b"((" + _u("storage") +
            _g("torch", storage) + _u(key) + _u("cpu") + _i(numel) + b"tQ" + _i(offset) +
            _tup(size) + _tup(stride) + (b"\x88" if requires_grad else b"\x89") + hooks +
            b"tR")


def _pkl(*ops):
    return b"\x80\x02" + b"".join(ops) + b"."


def _torch_zip(pkl, storages=None, prefix="archive/", extra=()):
    """A torch.save-style archive around a hand-made data.pkl."""
    storages = {"0": np.arange(4, dtype=np.float32).tobytes()} if storages is None \
        else storages
    out = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with zipfile.ZipFile(out, "w") as z:
            z.writestr(prefix + "data.pkl", pkl)
            z.writestr(prefix + "byteorder", b"little")
            for key, raw in storages.items():
                z.writestr(f"{prefix}data/{key}", raw)
            z.writestr(prefix + "version", b"3\n")
            for name, raw in extra:
                z.writestr(name, raw)
    return out.getvalue()


def test_a_hand_made_torch_checkpoint_loads():
    """The builders below make valid files; each refusal is about its one change."""
    out = _load_bytes(_torch_zip(_pkl(b"}", _u("w"), _tensor_ops(), b"s")))
    assert out["w"].tolist() == [0, 1, 2, 3]
    view = _load_bytes(_torch_zip(_pkl(_tensor_ops(offset=1, size=(2,), stride=(2,)))))
    assert view.tolist() == [1, 3]


@pytest.mark.parametrize("pkl,match", [
    (_pkl(_g("os", "system"), _u("true"), b"\x85R"), "os.system"),
    (_pkl(_g("posix", "system"), _u("true"), b"\x85R"), "posix.system"),
    (_pkl(_g("builtins", "eval"), _u("1"), b"\x85R"), "builtins.eval"),
    (_pkl(_g("builtins", "getattr"), b")R"), "builtins.getattr"),
    (_pkl(_g("torch", "load"), b")R"), "torch.load"),
    (_pkl(_g("torch._utils", "_rebuild_tensor_v2 "), b")R"), "_rebuild_tensor_v2 "),
    (_pkl(_u("os"), _u("system"), b"\x93", _u("x"), b"\x85R"), "os.system"),   # STACK_GLOBAL
    (_pkl(b"(", _u("x"), b"ios\nsystem\n"), "INST"),
    (_pkl(b"(", _g("builtins", "set"), b"o"), "OBJ"),
    (_pkl(b"\x82\x01"), "EXT1"),
    (_pkl(_g("builtins", "set"), b")}\x92"), "NEWOBJ_EX"),
    (_pkl(_g("builtins", "set"), b")\x81"), "NEWOBJ of something other"),
    (_pkl(b"I1\n"), "INT"),
    (_pkl(b"Vx\n"), "UNICODE"),
    (_pkl(b"S'x'\n"), "STRING"),
    (_pkl(b"U\x01x"), "SHORT_BINSTRING"),
    (_pkl(b"N2"), "DUP"),
    (_pkl(b"Px\n"), "PERSID"),
    (b"\x80\x01N.", "protocol 1"), (b"\x80\x06N.", "protocol 6"),
    (_pkl(b"NN"), "exactly one object"), (_pkl(b"(N"), "exactly one object"),
    (_pkl(b"h\x05"), "memo entry 5"), (_pkl(b"j\xff\xff\xff\x7f"), "memo entry"),
    (_pkl(b"}N", b"a"), "APPEND on a dict"), (_pkl(b"]NN", b"s"), "SETITEM on a list"),
    (_pkl(b"}(Ne"), "APPENDS on a dict"),
    (_pkl(b"}(N", b"u"), "odd number"), (_pkl(b"N(N\x90"), "ADDITEMS on a NoneType"),
    (_pkl(b"}]N", b"s"), "unhashable"), (_pkl(b"t"), "MARK"), (_pkl(b"\x86"), "TUPLE2"),
    (_pkl(_g("builtins", "set"), b"N", b"R"), "not a tuple"),
    (_pkl(b"N", b"N", b"R"), "not an allowed constructor"),
    (_pkl(_g("torch", "float32"), b")R"), "not an allowed constructor"),
    (_pkl(_g("torch", "Tensor"), b")R"), "not an allowed constructor"),
    (_pkl(b"]}b"), "BUILD of a list"),
    (_pkl(_OD, b"}", _u("__class__"), _g("builtins", "set"), b"sb"), "__class__"),
    (_pkl(_OD, b"N", b"b"), "state is not a dict"),
    (_pkl(_tensor_ops(), b"}", _u("_version"), _i(1), b"sb"), "_version"),
    (_pkl(_tensor_ops(), b"}", _u("__class__"), _i(1), b"sb"), "__class__"),
    (_pkl(_g("builtins", "set"), _g("builtins", "set"), b"\x85R"), "unexpected arguments"),
    (_pkl(_g("builtins", "bytearray"), _u("x"), _u("utf-8"), b"\x86R"),
     "unexpected arguments"),
    (_pkl(_g("_codecs", "encode"), _u("x"), _u("rot13"), b"\x86R"), "only for bytes"),
    (_pkl(_g("torch", "Size"), b"(", _i(-1), b"t\x85R"), "non-negative"),
    (_pkl(_g("torch", "device"), _u("gpu"), b"\x85R"), "device"),
    (_pkl(_g("torch", "uint16")), "torch.uint16"),
    (_pkl(_g("torch", "per_tensor_affine")), "quantization"),
    (_pkl(_g("torch._utils", "_rebuild_tensor_v2")), "holds a function"),
    (_pkl(b"]", _g("collections", "OrderedDict"), b"a"), "holds a function"),
    (_pkl(b"(", _g("torch", "FloatStorage"), b"t"), "holds a _StorageType"),
    (_pkl(_g("torch", "Tensor")), "holds a object"),
    (_pkl(b"(", _u("storage"), _g("torch", "FloatStorage"), _u("0"), _u("cpu"), _i(4),
          b"tQ"), "holds a _Storage"),
    (_pkl(_tensor_ops(), b"}", _u("f"), _g("torch", "Size"), b"sb"), "holds a function"),
    (_pkl(_OD, b"}", _u("meta"), _g("torch", "Size"), b"sb"), "holds a function"),
    (_pkl(_tensor_ops(key="0", storage="QInt8Storage")), "qint8"),
    (_pkl(b"(", _u("file"), b"tQ"), "not a storage"),
    (_pkl(b"(", _u("storage"), _i(1), _u("0"), _u("cpu"), _i(4), b"tQ"), "storage type"),
    (_pkl(_tensor_ops(key="7")), "no record"),
    (_pkl(_tensor_ops(key="../0")), "no record"),
    (_pkl(_tensor_ops(numel=5)), "holds 16 bytes, expected 20"),
    (_pkl(_tensor_ops(numel=2 ** 40)), "expected"),
    (_pkl(_tensor_ops(offset=1)), "reaches past"),
    (_pkl(_tensor_ops(size=(2, 2), stride=(2, 2))), "reaches past"),
    (_pkl(_tensor_ops(size=(5,))), "reaches past"),
    (_pkl(_tensor_ops(offset=-1)), "offset"),
    (_pkl(_tensor_ops(size=(-1,), stride=(1,))), "non-negative"),
    (_pkl(_tensor_ops(size=(2,), stride=(-1,))), "non-negative"),
    (_pkl(_tensor_ops(size=(1,) * 65, stride=(1,) * 65)), "at most 64"),
    (_pkl(_tensor_ops(size=(2, 2), stride=(1,))), "differ in length"),
    (_pkl(_tensor_ops(size=(0,), offset=9)), "past its storage"),
    (_pkl(_tensor_ops(storage="IntStorage", requires_grad=True)), "cannot require grad"),
    (_pkl(_tensor_ops(hooks=b"}" + _i(1) + _i(2) + b"s")), "hooks"),
    (_pkl(_tensor_ops(hooks=b"N")), "hooks"),
    (_pkl(b"}", _u("a"), _tensor_ops(), b"s", _u("b"),
          _tensor_ops(storage="IntStorage"), b"s"), "two dtypes"),
    (_pkl(_g("torch._utils", "_rebuild_parameter"), _i(1), b"\x89", _OD, b"\x87R"),
     "not a tensor"),
    (_pkl(_g("torch._tensor", "_rebuild_from_type_v2"), b"(", _g("builtins", "set"),
          _g("torch", "Tensor"), b")NtR"), "does not rebuild a tensor"),
    (_pkl(_g("torch._tensor", "_rebuild_from_type_v2"), b"(", _g("torch._utils",
          "_rebuild_tensor_v2"), _g("collections", "OrderedDict"), b")NtR"), "subclass"),
    (_pkl(_g("torch._utils", "_rebuild_sparse_tensor"), b")R"), "sparse"),
    (_pkl(_g("torch._utils", "_rebuild_qtensor"), b")R"), "quantized"),
    (_pkl(b"X\xff\xff\xff\x7f"), "truncated"),
    (_pkl(b"\x8b\xff\xff\xff\x7f"), "truncated"),
    (b"\x80\x02}", "truncated"), (b"", "truncated"), (b"\x80", "truncated"),
])
def test_malformed_torch_pickles_are_corrupt_files(pkl, match):
    _corrupt(_torch_zip(pkl), match)


@pytest.mark.parametrize("change,match", [
    (dict(prefix=""), "no ember manifest"),
    (dict(prefix="a/b/"), "exactly one"),
    (dict(extra=[("other/data.pkl", _pkl(b"N"))]), "exactly one"),
    (dict(extra=[("archive/notes.txt", b"x")]), "unexpected archive member"),
    (dict(extra=[("elsewhere", b"x")]), "unexpected archive member"),
    (dict(storages={"0": np.zeros(4, np.float32).tobytes(), "x": b""}),
     "unexpected archive member"),
])
def test_malformed_torch_archives_are_corrupt_files(change, match):
    pkl = _pkl(_tensor_ops())
    _corrupt(_torch_zip(pkl, **change), match)


def test_torch_records_are_checked():
    data = _torch_zip(_pkl(_tensor_ops()))
    _corrupt(_replace_member(data, "archive/version", b"9\n"), "format version")
    _corrupt(_replace_member(data, "archive/version", b"x" * 100), "record version")
    _corrupt(_replace_member(data, "archive/byteorder", b"middle"), "byteorder")
    trailing = _torch_zip(_pkl(_tensor_ops()) + b"N")
    _corrupt(trailing, "after its pickle")


def test_torch_checkpoint_bombs_stay_small():
    big = 2 ** 40                      # a declared storage no file this size holds
    peak, msg = _peak_bytes(lambda: _load_bytes(_torch_zip(_pkl(_tensor_ops(numel=big)))))
    assert "expected" in msg and peak < 4 << 20
    out = io.BytesIO()                 # a deflated storage that inflates past its claim
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=1) as z:
        z.writestr("archive/data.pkl", _pkl(_tensor_ops(numel=2)))
        z.writestr("archive/data/0", bytes(BOMB))
    peak, msg = _peak_bytes(lambda: _load_bytes(out.getvalue()))
    assert "holds" in msg and peak < 4 << 20
    out = io.BytesIO()                 # a compressed data.pkl declaring too much
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=1) as z:
        z.writestr("archive/data.pkl", b"\x80\x02" + b"N0" * (40 << 20) + b"N.")
    peak, msg = _peak_bytes(lambda: _load_bytes(out.getvalue()))
    assert "compressed data.pkl" in msg and peak < 4 << 20
    # a memo index far out (the C unpickler would size an array by it): a dict entry here
    far = _pkl(b"N", b"r\xff\xff\xff\xff", b"0", b"j\xff\xff\xff\xff")
    tracemalloc.start()
    try:
        assert _load_bytes(_torch_zip(far)) is None
        assert tracemalloc.get_traced_memory()[1] < 4 << 20
    finally:
        tracemalloc.stop()


def _legacy(torch, obj):
    buf = io.BytesIO()
    torch.save(obj, buf, _use_new_zipfile_serialization=False)
    return buf.getvalue()


def test_malformed_legacy_torch_files(torch):
    data = _legacy(torch, {"w": torch.arange(4.0), "b": torch.ones(2, dtype=torch.int64)})
    assert _load_bytes(data)["w"].tolist() == [0, 1, 2, 3]
    for cut in (len(data) - 1, len(data) - 9, len(data) // 2, 40, 12, 3):
        _corrupt(data[:cut])
    _corrupt(data + b"\x00", "after the last storage")
    bad_magic = pickle.dumps(12345, protocol=2) + data[len(pickle.dumps(
        0x1950a86a20f9469cfc6c, protocol=2)):]
    _corrupt(bad_magic, "never unpickles")
    bad_protocol = data.replace(pickle.dumps(1001, protocol=2), pickle.dumps(1002,
                                                                              protocol=2), 1)
    _corrupt(bad_protocol, "protocol version")
    big_endian = data.replace(b"little_endianq\x03\x88", b"little_endianq\x03\x89", 1)
    if big_endian != data:
        _corrupt(big_endian, "big-endian")
    # the storage count of the first storage, made larger than its pickle declares
    body = data.rfind(b"\x04\x00\x00\x00\x00\x00\x00\x00")
    assert body > 0
    grown = data[:body] + b"\x05" + data[body + 1:]
    _corrupt(grown, "size is wrong")


def _torch_values_only(obj, depth=0):
    """Every object a torch checkpoint may load as: plain data, ember tensors, Sizes,
    devices and dtypes."""
    assert depth < 200
    kind = type(obj)
    assert kind in (type(None), bool, int, float, complex, str, bytes, bytearray, list,
                    tuple, set, frozenset, dict, OrderedDict, Counter, ember.Size,
                    ember.device, ember.dtype, ember.Tensor, nn.Parameter), kind
    items = obj.items() if isinstance(obj, dict) else obj if kind in (
        list, tuple, set, frozenset) else ()
    for item in items:
        if isinstance(item, tuple) and isinstance(obj, dict):
            _torch_values_only(item[0], depth + 1)
            _torch_values_only(item[1], depth + 1)
        elif item is not obj:
            _torch_values_only(item, depth + 1)


def test_mutation_fuzz_torch_checkpoints(torch):
    rng = random.Random(7)
    tmodel = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4))
    obj = {"sd": tmodel.state_dict(), "view": torch.arange(10.0)[2:8:2], "n": [1, 2.5, "x"],
           "size": torch.Size([3]), "dtype": torch.int16, "p": torch.nn.Parameter(
               torch.ones(2))}
    counts = {"value": 0, "corrupt": 0}
    for fmt in ("zip", "legacy"):
        buf = io.BytesIO()
        torch.save(obj, buf, _use_new_zipfile_serialization=fmt == "zip")
        data = buf.getvalue()
        _torch_values_only(_load_bytes(data))
        pkl = _members(data)["archive/data.pkl"] if fmt == "zip" else None
        for i in range(300):
            if fmt == "zip" and i % 2:      # damage inside data.pkl, archive intact
                bad = _replace_member(data, "archive/data.pkl", _mutate_bytes(pkl, rng))
            else:
                bad = _mutate_bytes(data, rng)
            try:
                value = _load_bytes(bad)
            except CorruptFileError:
                counts["corrupt"] += 1
                continue
            _torch_values_only(value)
            counts["value"] += 1
    assert counts["corrupt"] > 300 and counts["value"] > 10, counts
