"""How much of PyTorch's public vocabulary Ember offers: the names torch 2.13 makes public
in torch, torch.nn, torch.nn.functional and Tensor (tests/data/torch_public_names.txt,
written by tools/torch_public_names.py) that ember has under the same name. The floor
only rises: a change that drops a name fails here."""
import importlib
import pathlib

import ember

NAMES = pathlib.Path(__file__).resolve().parent / "data" / "torch_public_names.txt"
NAMESPACES = {"torch": "ember", "torch.nn": "ember.nn",
              "torch.nn.functional": "ember.nn.functional", "Tensor": None}

# the fraction of the stored names ember has (measured; raise it as names are added)
FLOOR = 0.652   # 0.646 before embedding_bag, ctc_loss, grid sampling (1173 -> 1185 of 1815; 0.636 before special/fft)


def stored_names():
    lines = NAMES.read_text().splitlines()
    return [ln for ln in lines if ln and not ln.startswith("#")]


def _split(qualified):
    for ns in sorted(NAMESPACES, key=len, reverse=True):
        if qualified.startswith(ns + ".") and "." not in qualified[len(ns) + 1:]:
            return ns, qualified[len(ns) + 1:]
    raise AssertionError(f"{qualified}: not in a known namespace")


def _target(ns):
    return ember.Tensor if NAMESPACES[ns] is None else importlib.import_module(NAMESPACES[ns])


def coverage():
    names = stored_names()
    have = [q for q in names if hasattr(_target(_split(q)[0]), _split(q)[1])]
    return len(have) / len(names), have, names


def test_the_stored_list_is_torch_2_13s():
    lines = NAMES.read_text().splitlines()
    assert lines[0].startswith("# torch 2.13")
    names = stored_names()
    assert names == sorted(set(names)) and len(names) > 1500
    for ns in NAMESPACES:
        assert any(_split(q)[0] == ns for q in names), ns


def test_coverage_floor():
    frac, have, names = coverage()
    print(f"ember has {len(have)} of {len(names)} torch public names ({frac:.1%})")
    assert frac >= FLOOR, f"coverage {frac:.4f} fell below {FLOOR}"
