"""Writes tests/data/torch_public_names.txt: PyTorch's public names in torch, torch.nn,
torch.nn.functional and Tensor, one `namespace.name` a line, sorted. Run with the
PyTorch the list should describe (the stored list is torch 2.13's):

    python tools/torch_public_names.py [out_path]

torch's names are its `__all__`; the other namespaces have none, so their names are
those dir() lists that do not start with an underscore, leaving out modules and what
the namespace only imports for its own annotations (typing's names, `warnings`-like
helpers from outside torch)."""
import pathlib
import sys
import types
import typing

import torch
import torch.nn.functional

OUT = pathlib.Path(__file__).resolve().parents[1] / "tests" / "data" / "torch_public_names.txt"


def _own(namespace, name):
    obj = getattr(namespace, name, None)
    if isinstance(obj, types.ModuleType):
        return False
    if name.isupper():                       # TYPE_CHECKING and similar flags
        return False
    mod = getattr(obj, "__module__", None)
    if mod is None:
        return True                          # attributes, slots, descriptors
    if mod in (typing.__name__, "typing_extensions", "collections.abc", "builtins") and \
            not isinstance(obj, types.BuiltinFunctionType):
        return False
    return mod.startswith("torch") or isinstance(obj, (types.BuiltinFunctionType,
                                                        types.MethodDescriptorType))


def names():
    out = {f"torch.{n}" for n in torch.__all__}
    for label, ns in (("torch.nn", torch.nn), ("torch.nn.functional", torch.nn.functional),
                      ("Tensor", torch.Tensor)):
        out.update(f"{label}.{n}" for n in dir(ns) if not n.startswith("_") and _own(ns, n))
    return sorted(out)


def main(argv):
    out = pathlib.Path(argv[1]) if len(argv) > 1 else OUT
    lines = names()
    out.write_text(f"# torch {torch.__version__.split('+')[0]} public names "
                   f"(tools/torch_public_names.py)\n" + "\n".join(lines) + "\n")
    print(f"{len(lines)} names -> {out}")


if __name__ == "__main__":
    main(sys.argv)
