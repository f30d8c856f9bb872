"""Op signatures in PyTorch's schema language.

    "add(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor"

parses into a Schema: the name, the parameters (type, default, keyword-only) and the
returns. The C binder receives the parameters as plain tuples (see Schema.c_params).
"""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field

from .. import _C

_TYPES = {
    "Tensor": _C.ARG_TENSOR,
    "Scalar": _C.ARG_SCALAR,
    "int": _C.ARG_INT,
    "SymInt": _C.ARG_INT,
    "int[]": _C.ARG_INTLIST,
    "SymInt[]": _C.ARG_INTLIST,
    "bool": _C.ARG_BOOL,
    "float": _C.ARG_FLOAT,
    "ScalarType": _C.ARG_DTYPE,
    "str": _C.ARG_STR,
    "Tensor[]": _C.ARG_TENSORLIST,
    "Any": _C.ARG_ANY,
    "Device": _C.ARG_DEVICE,
    "Generator": _C.ARG_GENERATOR,
    "MemoryFormat": _C.ARG_ANY,
    "Layout": _C.ARG_ANY,
}

_NO_DEFAULT = object()


@dataclass
class Param:
    name: str
    type: str            # base type name, e.g. "int[]"
    optional: bool
    kwonly: bool
    default: object = _NO_DEFAULT
    int1: bool = False   # int[1]: a bare int is accepted
    alias: str = ""      # alias set of Tensor(a) / Tensor(a!): "a"; "" when none
    mutable: bool = False   # Tensor(a!): the op writes into this argument

    @property
    def has_default(self):
        return self.default is not _NO_DEFAULT

    @property
    def is_tensor(self):
        return self.type == "Tensor"

    def __str__(self):
        t = self.type + (f"({self.alias}{'!' if self.mutable else ''})" if self.alias else "") \
            + ("?" if self.optional else "")
        s = f"{t} {self.name}"
        if self.has_default:
            s += "=" + _format_default(self.default)
        return s


@dataclass
class Schema:
    name: str
    overload: str
    params: list
    returns: list = field(default_factory=list)   # names ("" when unnamed) of returned tensors
    text: str = ""
    return_aliases: list = field(default_factory=list)  # alias set of each return ("": none)

    @property
    def mutated_params(self):
        """Indices of the parameters the op writes into (Tensor(a!))."""
        return tuple(i for i, p in enumerate(self.params) if p.mutable)

    @property
    def aliased_params(self):
        """For each return, the index of the parameter it may share memory with (its
        alias set), or None: `view(Tensor(a) self, ...) -> Tensor(a)` gives (0,)."""
        by_set = {p.alias: i for i, p in enumerate(self.params) if p.alias}
        return tuple(by_set.get(a) if a else None for a in self.return_aliases)

    def c_params(self, number_ok):
        """Tuples for the C binder: (name, type, optional, kwonly, has_default, default,
        varargs_list, int1, number_ok)."""
        out = []
        positional = [p for p in self.params if not p.kwonly]
        for p in self.params:
            varargs = p.type in ("int[]", "SymInt[]") and positional and p is positional[-1]
            out.append((p.name, _TYPES[p.type], p.optional, p.kwonly, p.has_default,
                        p.default if p.has_default else None, bool(varargs), p.int1,
                        bool(number_ok and p.is_tensor)))
        return out

    def __str__(self):
        return self.text


def _format_default(v):
    if v is None:
        return "None"
    if isinstance(v, tuple):
        return "[" + ", ".join(map(str, v)) + "]"
    if isinstance(v, str):
        return repr(v)
    return repr(v)


def _parse_default(text):
    text = text.strip()
    if text == "[]":
        return ()
    if text.startswith("[") and text.endswith("]"):
        return tuple(int(x) for x in text[1:-1].split(","))
    if text in ("True", "False", "None"):
        return {"True": True, "False": False, "None": None}[text]
    return ast.literal_eval(text)


_PARAM = re.compile(r"^(?P<type>[A-Za-z]+(?:\[\d*\])?)(?:\((?P<alias>[a-z]+)(?P<mut>!)?\))?"
                    r"(?P<opt>\?)?\s+"
                    r"(?P<name>\w+)(?:\s*=\s*(?P<default>.+))?$")


def parse(text: str) -> Schema:
    m = re.match(r"^\s*([\w.]+)\((.*)\)\s*->\s*(.+?)\s*$", text)
    if not m:
        raise ValueError(f"bad schema: {text!r}")
    full, params_text, ret = m.groups()
    name, _, overload = full.partition(".")
    params, kwonly = [], False
    for part in _split(params_text):
        if part == "*":
            kwonly = True
            continue
        pm = _PARAM.match(part)
        if not pm:
            raise ValueError(f"bad parameter {part!r} in {text!r}")
        ptype = pm["type"]
        int1 = False
        if re.fullmatch(r"(Sym)?int\[\d+\]", ptype):
            int1 = True
            ptype = "int[]"
        if ptype not in _TYPES:
            raise ValueError(f"unknown type {ptype!r} in {text!r}")
        default = _parse_default(pm["default"]) if pm["default"] is not None else _NO_DEFAULT
        params.append(Param(pm["name"], ptype, bool(pm["opt"]), kwonly, default, int1,
                            pm["alias"] or "", bool(pm["mut"])))
    names, aliases = _parse_returns(ret)
    return Schema(name, overload, params, names, text.strip(), aliases)


def _split(s):
    parts, depth, cur = [], 0, ""
    for ch in s:
        if ch in "[(":
            depth += 1
        elif ch in "])":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        parts.append(cur.strip())
    return parts


def _parse_returns(ret):
    ret = ret.strip()
    if ret == "()":
        return [], []
    if ret.startswith("("):
        items = _split(ret[1:-1])
    else:
        items = [ret]
    names, aliases = [], []
    for item in items:
        bits = item.split()
        names.append(bits[1] if len(bits) > 1 else "")
        m = re.match(r"^[A-Za-z]+\((?P<alias>[a-z]+)!?\)", bits[0])
        aliases.append(m["alias"] if m else "")
    return names, aliases
