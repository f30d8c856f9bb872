"""ember.load of PyTorch's own checkpoints (torch.save, ZIP and legacy formats), read as
torch.load(weights_only=True) reads them: every ember dtype, views sharing a storage with
their offsets and strides, containers, numbers, strings, Sizes, devices, dtypes,
Parameters, meta tensors, state_dicts with their _metadata, whole training checkpoints,
and the zoo's PyTorch twins loaded into ember's models; and never code: what
weights_only refuses is a CorruptFileError here, with no side effect."""
import io
import math
import os
import pickle
import warnings
from collections import Counter, OrderedDict

import numpy as np
import pytest

import ember
from ember import models
from ember.serialization import CorruptFileError

NAMES = ["bool", "uint8", "int8", "int16", "int32", "int64", "float16", "float32", "float64"]
FORMATS = ["zip", "legacy"]


def _save(torch, obj, fmt="zip", **kwargs):
    buf = io.BytesIO()
    torch.save(obj, buf, _use_new_zipfile_serialization=fmt == "zip", **kwargs)
    return buf.getvalue()


def _load(data, **kwargs):
    return ember.load(io.BytesIO(data), **kwargs)


def _same(e, t):
    """An ember tensor equals a torch one: dtype, shape, strides, values, requires_grad."""
    assert str(e.dtype).split(".")[1] == str(t.dtype).split(".")[1]
    assert tuple(e.shape) == tuple(t.shape)
    if t.numel():
        assert e.stride() == t.stride(), (e.stride(), t.stride())
    assert e.requires_grad == t.requires_grad
    np.testing.assert_array_equal(e.detach().numpy(), t.detach().numpy())


def _tensor_of(torch, name):
    if name == "bool":
        return torch.arange(24).reshape(2, 3, 4) % 3 == 0
    base = torch.arange(24).reshape(2, 3, 4) - (0 if name == "uint8" else 7)
    return base.to(getattr(torch, name))


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("name", NAMES)
def test_every_dtype_with_views_sharing_storage(torch, name, fmt):
    base = _tensor_of(torch, name)
    views = {"base": base, "transposed": base.transpose(0, 2), "stepped": base[:, 1:, ::2],
             "offset": base[1], "scalar": base[1, 2, 3], "empty": base[:, :0],
             "size-1": base[:1, 1:2], "flat tail": base.reshape(-1)[5:17]}
    out = _load(_save(torch, views, fmt))
    assert list(out) == list(views)
    for k, t in views.items():
        _same(out[k], t)
    # one storage on disk, one memory here: a write through the base shows in every view
    b = out["base"]
    b.numpy()[...] = b.numpy()[::-1].copy() if name != "bool" else ~b.numpy()
    torch_after = base.flip(0) if name != "bool" else ~base
    for k, t in views.items():
        if k == "base":
            continue
        moved = {"transposed": torch_after.transpose(0, 2), "stepped": torch_after[:, 1:, ::2],
                 "offset": torch_after[1], "scalar": torch_after[1, 2, 3],
                 "empty": torch_after[:, :0], "size-1": torch_after[:1, 1:2],
                 "flat tail": torch_after.reshape(-1)[5:17]}[k]
        np.testing.assert_array_equal(out[k].numpy(), moved.numpy(), err_msg=k)


@pytest.mark.parametrize("fmt", FORMATS)
def test_containers_numbers_and_plain_data(torch, fmt):
    obj = {
        "list": [1, -2, 2 ** 70, -(2 ** 65), 1.5, float("inf"), -0.0, True, None, "s"],
        "tuple": (1, (2, (3,))), "nested": {"a": [{"b": ()}], 3: "int key", (1, 2): "tuple"},
        "bytes": b"\x00\xffab", "bytearray": bytearray(b"xy"), "set": {1, "a", (2, 3)},
        "frozenset": frozenset([4, 5]), "complex": 1.5 - 2j, "str": "ünïcødé",
        "od": OrderedDict([("z", 1), ("a", 2)]), "counter": Counter("abca"),
        "size": torch.Size([2, 3]), "empty size": torch.Size([]), "device": torch.device("cpu"),
        "dtypes": [torch.float32, torch.int64, torch.bool, torch.float16],
    }
    out = _load(_save(torch, obj, fmt))
    assert out["list"][:5] == [1, -2, 2 ** 70, -(2 ** 65), 1.5]
    assert out["list"][5] == math.inf and math.copysign(1, out["list"][6]) == -1
    assert out["list"][7:] == [True, None, "s"]
    assert out["tuple"] == (1, (2, (3,))) and out["nested"] == obj["nested"]
    assert out["bytes"] == b"\x00\xffab" and out["bytearray"] == bytearray(b"xy")
    assert out["set"] == {1, "a", (2, 3)} and out["frozenset"] == frozenset([4, 5])
    assert out["complex"] == 1.5 - 2j and out["str"] == "ünïcødé"
    assert type(out["od"]) is OrderedDict and list(out["od"].items()) == [("z", 1), ("a", 2)]
    assert type(out["counter"]) is Counter and out["counter"] == Counter("abca")
    assert type(out["size"]) is ember.Size and out["size"] == ember.Size([2, 3])
    assert out["empty size"] == ember.Size([])
    assert out["device"] == ember.device("cpu")
    assert out["dtypes"] == [ember.float32, ember.int64, ember.bool, ember.float16]
    for top in (5, "text", [1, 2], None):
        assert _load(_save(torch, top, fmt)) == top


@pytest.mark.parametrize("fmt", FORMATS)
def test_parameters_requires_grad_meta_and_attributes(torch, fmt):
    p = torch.nn.Parameter(torch.randn(3, 2))
    frozen = torch.nn.Parameter(torch.ones(2), requires_grad=False)
    leaf = torch.ones(4, requires_grad=True)
    tagged = torch.zeros(2)
    tagged.note = "kept"
    obj = {"p": p, "frozen": frozen, "leaf": leaf, "meta": torch.empty(2, 5, device="meta"),
           "tagged": tagged, "again": p}
    out = _load(_save(torch, obj, fmt))
    assert type(out["p"]) is ember.nn.Parameter and out["p"].requires_grad
    _same(out["p"], p)
    assert type(out["frozen"]) is ember.nn.Parameter and not out["frozen"].requires_grad
    _same(out["leaf"], leaf)
    assert out["leaf"].is_leaf
    assert out["meta"].is_meta and tuple(out["meta"].shape) == (2, 5)
    assert out["tagged"].note == "kept"
    assert out["again"] is out["p"]             # one object saved twice is one object


def test_pickle_protocols_names_and_sources(torch, tmp_path):
    obj = {"w": torch.arange(6.0).reshape(2, 3).t(), "n": 3}
    for protocol in (2, 3, 4, 5):
        out = _load(_save(torch, obj, pickle_protocol=protocol))
        _same(out["w"], obj["w"])
        assert out["n"] == 3
    path = tmp_path / "my model (final).pth"    # the archive's folder is named after it
    torch.save(obj, path)
    for source in (path, str(path), open(path, "rb"), path.read_bytes()):
        _same(ember.load(source)["w"], obj["w"])
    assert ember.load(path, map_location="cpu", weights_only=True)["n"] == 3
    with pytest.raises(RuntimeError, match="CPU only"):
        ember.load(path, map_location="cuda:0")


def test_big_endian_records_are_swapped(torch):
    """A ZIP checkpoint written on a big-endian machine (its byteorder record says so)."""
    import zipfile
    data = _save(torch, {"a": torch.arange(5, dtype=torch.int32), "f": torch.tensor([1.5])})
    src = zipfile.ZipFile(io.BytesIO(data))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        for info in src.infolist():
            content = src.read(info.filename)
            if info.filename.endswith("/byteorder"):
                content = b"big"
            elif "/data/" in info.filename and not info.filename.endswith("serialization_id"):
                width = 4
                content = b"".join(content[i:i + width][::-1]
                                   for i in range(0, len(content), width))
            z.writestr(info.filename, content)
    got = _load(out.getvalue())
    assert got["a"].tolist() == [0, 1, 2, 3, 4] and got["f"].tolist() == [1.5]


# ------------------------------------------------------------------ real models

@pytest.fixture(scope="module")
def T(torch):
    import torch_models
    return torch_models


def _zoo(torch, T):
    gpt = dict(vocab_size=37, block_size=16, n_layer=2, n_head=2, n_embd=16)
    bert = dict(vocab_size=40, hidden_size=16, num_layers=2, num_heads=2,
                intermediate_size=32, max_position=24, dropout=0.0)
    return [
        ("mlp", T.MLP(12, (16, 16), 5), models.MLP(12, (16, 16), 5),
         lambda lib: lib.randn(4, 12, generator=_gen(lib))),
        ("resnet", T.ResNet((1, 1), width=8, num_classes=5),
         models.ResNet((1, 1), width=8, num_classes=5),
         lambda lib: lib.randn(2, 3, 16, 16, generator=_gen(lib))),
        ("gpt", T.GPT(T.GPTConfig(**gpt)), models.GPT(models.GPTConfig(**gpt)),
         lambda lib: lib.randint(0, 37, (2, 16), generator=_gen(lib))),
        ("bert", T.BertForMaskedLM(T.BertConfig(**bert)),
         models.BertForMaskedLM(models.BertConfig(**bert)),
         lambda lib: lib.randint(0, 40, (2, 12), generator=_gen(lib))),
        ("lstm", T.LSTMClassifier(30, 3, 8, 16, dropout=0.0),
         models.LSTMClassifier(30, 3, 8, 16, dropout=0.0),
         lambda lib: lib.randint(0, 30, (3, 7), generator=_gen(lib))),
    ]


def _gen(lib):
    return lib.Generator().manual_seed(0)


@pytest.mark.parametrize("fmt", FORMATS)
def test_zoo_state_dicts_load_into_the_ember_twins(torch, T, fmt):
    for name, tmod, emod, make_input in _zoo(torch, T):
        tmod.eval()
        emod.eval()
        if name == "resnet":              # running statistics that are not the defaults
            tmod.train()
            with torch.no_grad():
                tmod(torch.randn(4, 3, 16, 16) * 3 + 1)
            tmod.eval()
        sd = _load(_save(torch, tmod.state_dict(), fmt))
        assert type(sd) is OrderedDict and list(sd) == list(tmod.state_dict())
        assert sd._metadata == tmod.state_dict()._metadata
        emod.load_state_dict(sd)
        x = make_input(torch)
        with torch.no_grad():
            want = tmod(x)
        want = want[0] if isinstance(want, tuple) else want
        got = emod(ember.from_dlpack(x))
        got = got[0] if isinstance(got, tuple) else got
        np.testing.assert_allclose(got.detach().numpy(), want.numpy(), rtol=1e-5, atol=1e-5,
                                   err_msg=name)
        if name == "gpt":                 # tied weights: one storage, one memory here
            assert np.shares_memory(sd["transformer.wte.weight"].numpy(),
                                    sd["lm_head.weight"].numpy())


def test_training_checkpoint_with_optimizer_state(torch, T):
    tmod = T.MLP(6, (8,), 3)
    opt = torch.optim.AdamW(tmod.parameters(), lr=1e-3)
    tmod(torch.randn(5, 6)).sum().backward()
    opt.step()
    ckpt = {"model": tmod.state_dict(), "optimizer": opt.state_dict(), "epoch": 7,
            "best": 0.25, "args": {"lr": 1e-3, "name": "run", "dims": [8]}}
    out = _load(_save(torch, ckpt))
    assert out["epoch"] == 7 and out["best"] == 0.25 and out["args"] == ckpt["args"]
    tstate = opt.state_dict()
    assert out["optimizer"]["param_groups"] == tstate["param_groups"]
    for k, state in tstate["state"].items():
        for field, value in state.items():
            _same(out["optimizer"]["state"][k][field], value)
    emod = models.MLP(6, (8,), 3)
    emod.load_state_dict(out["model"])
    x = torch.randn(2, 6)
    np.testing.assert_allclose(emod(ember.from_dlpack(x)).detach().numpy(),
                               tmod(x).detach().numpy(), rtol=1e-5, atol=1e-6)


# ------------------------------------------------------------------ refused, never run

class _Payload:
    """Unpickling this would create a file: it must never happen."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


class _Custom:
    def __init__(self):
        self.x = 1


@pytest.mark.parametrize("fmt", FORMATS)
def test_code_and_unknown_classes_are_refused(torch, tmp_path, fmt):
    marker = tmp_path / "created"
    cases = {
        r"io\.open": {"x": _Payload(str(marker))},
        r"posix\.system": {"x": _reduce_to(os.system, ("true",))},
        r"builtins\.eval": [_reduce_to(eval, ("1",))],
        "_Custom": {"obj": _Custom()},
        "Linear": torch.nn.Linear(2, 2),                  # a whole module, not its weights
        "numpy": {"a": np.arange(3)},
    }
    for match, obj in cases.items():
        data = _save(torch, obj, fmt)
        with pytest.raises(CorruptFileError, match=match):
            _load(data)
        if fmt == "zip":
            with pytest.raises(Exception):                # torch refuses them too
                torch.load(io.BytesIO(data), weights_only=True)
    assert not marker.exists()


def _reduce_to(func, args):
    class R:
        def __reduce__(self):
            return (func, args)
    R.__qualname__ = R.__name__ = "R"
    R.__module__ = __name__
    globals()["R"] = R
    return R()


def test_unsupported_tensors_are_refused_clearly(torch):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")          # quantized tensors are deprecated in torch
        quantized = torch.quantize_per_tensor(torch.ones(2), 0.1, 0, torch.quint8)
    cases = {"torch.uint16": torch.ones(2, dtype=torch.uint16),
             "torch.complex32": torch.ones(2, dtype=torch.complex32),
             "torch.quint8": quantized, "sparse": torch.eye(3).to_sparse()}
    for match, t in cases.items():
        with pytest.raises(CorruptFileError, match=match):
            _load(_save(torch, {"t": t}))


def test_plain_pickles_are_refused(torch):
    for data in (pickle.dumps({"w": 1}), pickle.dumps([1, 2], protocol=2),
                 pickle.dumps(_Custom(), protocol=2)):
        with pytest.raises(CorruptFileError, match="never unpickles"):
            _load(data)
