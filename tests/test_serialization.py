"""ember.save / ember.load (the safe format, safetensors, .npz), and the copy and
pickle protocols of tensors, modules and optimizers."""
import copy
import io
import json
import math
import pickle
import struct
import zipfile
from collections import OrderedDict

import numpy as np
import pytest

import ember
import ember.nn as nn
import ember.optim as optim
from ember.serialization import (CorruptFileError, load_safetensors, save_safetensors)

ALL_DTYPES = [ember.bool, ember.uint8, ember.int8, ember.int16, ember.int32, ember.int64,
              ember.float16, ember.float32, ember.float64]


def _roundtrip(obj):
    buf = io.BytesIO()
    ember.save(obj, buf)
    return ember.load(io.BytesIO(buf.getvalue())), buf.getvalue()


def _eq(a, b):
    return a.dtype is b.dtype and tuple(a.shape) == tuple(b.shape) and \
        np.array_equal(a.numpy(), b.numpy(), equal_nan=True)


def test_nested_containers_round_trip():
    t = ember.randn(3, 4)
    obj = {
        "model": OrderedDict([("w", t), ("b", ember.zeros(4, dtype=ember.float64))]),
        "epoch": 3, "big": 2 ** 80, "lr": 0.1, "nan": float("nan"), "inf": -math.inf,
        "flags": [True, False, None], "name": "run", "raw": b"\x00\xff",
        "shape": ember.Size([2, 3]), "dtype": ember.int64, "pair": (1, "a"), 7: {1, 2},
        "dev": ember.device("cpu"), "view": t[1:, ::2], "empty": ember.zeros(0, 3),
        "scalar": ember.tensor(5), "arr": np.arange(6).reshape(2, 3),
    }
    r, _ = _roundtrip(obj)
    assert list(r) == list(obj)
    assert isinstance(r["model"], OrderedDict) and _eq(r["model"]["w"], t)
    assert r["epoch"] == 3 and r["big"] == 2 ** 80 and r["lr"] == 0.1
    assert math.isnan(r["nan"]) and r["inf"] == -math.inf
    assert r["flags"] == [True, False, None] and r["name"] == "run" and r["raw"] == b"\x00\xff"
    assert r["shape"] == (2, 3) and type(r["shape"]) is ember.Size
    assert r["dtype"] is ember.int64 and r["pair"] == (1, "a") and r[7] == {1, 2}
    assert r["dev"] == ember.device("cpu")
    assert _eq(r["view"], t[1:, ::2]) and _eq(r["empty"], obj["empty"])
    assert _eq(r["scalar"], obj["scalar"]) and r["scalar"].ndim == 0
    assert np.array_equal(r["arr"], obj["arr"])
    r["model"]["w"].add_(1)                # loaded tensors are writable and independent
    assert not _eq(r["model"]["w"], t)


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_every_dtype_round_trips(dtype):
    src = ember.from_numpy(np.arange(-3, 9).reshape(3, 4) % 7).to(dtype)
    r, _ = _roundtrip(src)
    assert _eq(r, src)


def test_parameters_requires_grad_and_sharing():
    p = nn.Parameter(ember.randn(2, 2))
    frozen = nn.Parameter(ember.ones(1), requires_grad=False)
    leaf = ember.ones(3, requires_grad=True)
    r, _ = _roundtrip({"p": p, "again": p, "frozen": frozen, "leaf": leaf,
                       "plain": ember.ones(1)})
    assert type(r["p"]) is nn.Parameter and r["p"].requires_grad and r["p"] is r["again"]
    assert type(r["frozen"]) is nn.Parameter and not r["frozen"].requires_grad
    assert type(r["leaf"]) is ember.Tensor and r["leaf"].requires_grad
    assert not r["plain"].requires_grad


def test_model_and_optimizer_checkpoint(tmp_path):
    ember.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 1))
    opt = optim.Adam(model.parameters(), lr=0.01)
    model(ember.randn(5, 3)).sum().backward()
    opt.step()
    path = tmp_path / "ckpt.ember"
    ember.save({"model": model.state_dict(), "optim": opt.state_dict(), "epoch": 1}, path)
    ck = ember.load(path)
    model2 = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 1))
    assert repr(model2.load_state_dict(ck["model"])) == "<All keys matched successfully>"
    for a, b in zip(model.parameters(), model2.parameters()):
        assert _eq(a.detach(), b.detach())
    opt2 = optim.Adam(model2.parameters(), lr=0.5)
    opt2.load_state_dict(ck["optim"])
    assert opt2.param_groups[0]["lr"] == 0.01 and list(opt2.state_dict()["state"]) == [0, 1,
                                                                                      2, 3]
    assert opt2.state_dict()["state"][0]["step"].item() == 1.0


def test_unsupported_objects_are_refused():
    with pytest.raises(TypeError, match="cannot save an object of type Linear"):
        ember.save(nn.Linear(2, 2), io.BytesIO())
    with pytest.raises(TypeError, match="cannot save"):
        ember.save({"f": lambda: 0}, io.BytesIO())


def _tamper(data, member, fn):
    """Rewrites one member of an ember archive (keeping the ZIP itself valid)."""
    src = zipfile.ZipFile(io.BytesIO(data))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as dst:
        for name in src.namelist():
            content = src.read(name)
            dst.writestr(name, fn(content) if name == member else content)
    return out.getvalue()


def test_corrupt_and_truncated_files_are_rejected():
    _, data = _roundtrip({"w": ember.arange(100.0), "n": 1})
    bad_inputs = [
        data[: len(data) // 2],                                   # truncated
        data[:-30],                                               # lost central directory
        b"",
        b"not a checkpoint at all",
        _tamper(data, "ember/data/0", lambda c: c[:-1] + bytes([c[-1] ^ 1])),
        _tamper(data, "ember/data/0", lambda c: c[:-8]),
        _tamper(data, "ember/manifest.json", lambda c: c.replace(b'"n"', b'"m"')),
        _tamper(data, "ember/manifest.sha256", lambda c: b"0" * 64),
    ]
    # a raw byte flip inside the archive is caught by the ZIP CRC or our checksums
    flipped = bytearray(data)
    flipped[60] ^= 0xFF
    bad_inputs.append(bytes(flipped))
    for bad in bad_inputs:
        with pytest.raises(CorruptFileError):
            ember.load(io.BytesIO(bad))
    # a consistent manifest that lies about a shape is still caught
    def lie(c):
        m = json.loads(c)
        m["tensors"][0]["shape"] = [99]
        return json.dumps(m).encode()
    lied = _tamper(data, "ember/manifest.json", lie)
    import hashlib
    manifest = zipfile.ZipFile(io.BytesIO(lied)).read("ember/manifest.json")
    lied = _tamper(lied, "ember/manifest.sha256",
                   lambda c: hashlib.sha256(manifest).hexdigest().encode())
    with pytest.raises(CorruptFileError, match="does not match its shape"):
        ember.load(io.BytesIO(lied))


def test_pickles_are_never_loaded(torch):
    buf = io.BytesIO()
    torch.save({"w": torch.ones(2)}, buf)    # read by ember's own pickle interpreter
    assert ember.load(io.BytesIO(buf.getvalue()))["w"].tolist() == [1, 1]
    with pytest.raises(CorruptFileError, match="never unpickles"):
        ember.load(io.BytesIO(pickle.dumps({"w": 1})))


# ------------------------------------------------------------------ safetensors and npz


def test_safetensors_round_trip_and_state_dict(tmp_path):
    ember.manual_seed(1)
    model = nn.Linear(3, 2)
    path = tmp_path / "model.safetensors"
    save_safetensors(model.state_dict(), path, metadata={"format": "pt"})
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    assert header["__metadata__"] == {"format": "pt"} and header["weight"]["dtype"] == "F32"
    assert (8 + n) % 8 == 0
    sd = ember.load(path)
    assert list(sd) == ["weight", "bias"] and _eq(sd["weight"], model.weight.detach())
    model2 = nn.Linear(3, 2)
    model2.load_state_dict(sd)
    assert _eq(model2.bias.detach(), model.bias.detach())
    assert list(load_safetensors(path)) == ["weight", "bias"]


def _safetensors_blob(entries, data):
    head = json.dumps(entries).encode()
    return struct.pack("<Q", len(head)) + head + data


def test_safetensors_bf16_and_validation():
    bf16 = np.array([0x3F80, 0xC000, 0x4049], dtype="<u2").tobytes()   # 1, -2, 3.140625
    blob = _safetensors_blob({"x": {"dtype": "BF16", "shape": [3], "data_offsets": [0, 6]},
                              "i": {"dtype": "I64", "shape": [1], "data_offsets": [6, 14]}},
                             bf16 + struct.pack("<q", -5))
    out = ember.load(io.BytesIO(blob))
    assert out["x"].dtype is ember.bfloat16 and out["x"].tolist() == [1.0, -2.0, 3.140625]
    again = io.BytesIO()
    ember.serialization.save_safetensors(out, again)
    assert again.getvalue()[8:].startswith(blob[8:8 + 10]) or b'"BF16"' in again.getvalue()
    back = ember.load(io.BytesIO(again.getvalue()))
    assert back["x"].dtype is ember.bfloat16 and back["x"].tolist() == [1.0, -2.0, 3.140625]
    assert out["i"].tolist() == [-5]
    bad = [
        _safetensors_blob({"x": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}},
                          b"\x00" * 8),                             # past the end
        _safetensors_blob({"x": {"dtype": "F32", "shape": [3], "data_offsets": [0, 16]}},
                          b"\x00" * 16),                            # shape/size mismatch
        _safetensors_blob({"x": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                           "y": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}},
                          b"\x00" * 12),                            # overlap
        struct.pack("<Q", 10 ** 6) + b"{}",                         # header too long
        struct.pack("<Q", 4) + b"{bad",                             # not JSON
    ]
    for blob in bad:
        with pytest.raises(CorruptFileError):
            ember.load(io.BytesIO(blob))
    with pytest.raises(CorruptFileError, match="dtype U32"):
        ember.load(io.BytesIO(_safetensors_blob(
            {"x": {"dtype": "U32", "shape": [1], "data_offsets": [0, 4]}}, b"\x00" * 4)))


def test_npz_state_dict(tmp_path):
    model = nn.Linear(2, 3)
    path = tmp_path / "weights.npz"
    np.savez(path, **{k: v.numpy() for k, v in model.state_dict().items()})
    sd = ember.load(path)
    assert list(sd) == ["weight", "bias"]
    nn.Linear(2, 3).load_state_dict(sd)
    assert _eq(sd["weight"], model.weight.detach())
    np.savez(tmp_path / "obj.npz", a=np.array([{"x": 1}], dtype=object))
    with pytest.raises(CorruptFileError, match="pickle"):
        ember.load(tmp_path / "obj.npz")


# ------------------------------------------------------------------ copy and pickle


def test_tensor_copy_deepcopy_pickle():
    t = ember.randn(2, 3, requires_grad=True)
    t.grad = ember.ones(2, 3)
    d = copy.deepcopy(t)
    assert d.requires_grad and d.is_leaf and _eq(d.detach(), t.detach())
    assert d.data_ptr() != t.data_ptr() and _eq(d.grad, t.grad) and d.grad is not t.grad
    c = copy.copy(t)
    assert c.data_ptr() == t.data_ptr() and c.requires_grad       # shares memory
    p = pickle.loads(pickle.dumps(t))
    assert p.requires_grad and _eq(p.detach(), t.detach()) and p.grad is None
    v = ember.arange(12.0).reshape(3, 4).t()
    assert _eq(pickle.loads(pickle.dumps(v)), v)
    m = ember.empty(2, 5, device="meta")
    assert pickle.loads(pickle.dumps(m)).is_meta
    with pytest.raises(RuntimeError, match="graph leaves"):
        copy.deepcopy(t * 2)
    pair = copy.deepcopy([t, t])
    assert pair[0] is pair[1]


def test_parameter_and_module_copies():
    p = nn.Parameter(ember.ones(2))
    for q in (copy.deepcopy(p), pickle.loads(pickle.dumps(p)), copy.copy(p)):
        assert type(q) is nn.Parameter and q.requires_grad and _eq(q.detach(), p.detach())
    model = nn.Sequential(nn.Linear(2, 3), nn.ReLU())
    model.register_buffer("count", ember.zeros(1, dtype=ember.int64))
    for clone in (copy.deepcopy(model), pickle.loads(pickle.dumps(model))):
        assert repr(clone) == repr(model)
        assert clone[0].weight is not model[0].weight
        assert type(clone[0].weight) is nn.Parameter
        assert list(clone.state_dict()) == list(model.state_dict())
        x = ember.randn(4, 2)
        assert _eq(clone(x).detach(), model(x).detach())
    c = copy.deepcopy(model)
    with ember.no_grad():
        c[0].weight.fill_(0)
    assert not (model[0].weight.detach().numpy() == 0).all()


def test_optimizer_deepcopy_keeps_state_consistent():
    model = nn.Linear(2, 2)
    opt = optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model(ember.ones(1, 2)).sum().backward()
    opt.step()
    twin_model, twin_opt = copy.deepcopy((model, opt))
    assert twin_opt.param_groups[0]["params"][0] is twin_model.weight
    assert twin_model.weight in twin_opt.state
    assert _eq(twin_opt.state[twin_model.weight]["momentum_buffer"],
               opt.state[model.weight]["momentum_buffer"])
    twin_model(ember.ones(1, 2)).sum().backward()
    twin_opt.step()
    assert not _eq(twin_model.weight.detach(), model.weight.detach())
