"""A small CPython 3.11 assembler for the code objects graph breaks generate
(resume.py): instructions with their inline CACHE units, relative jumps to labels
(EXTENDED_ARG sizes iterated to a fixed point), and the 3.11 exception and line tables.
"""
from __future__ import annotations

import dis
import opcode

_CACHES = dis._inline_cache_entries
_EXTENDED_ARG = dis.opmap["EXTENDED_ARG"]
_BACKWARD = {dis.opmap[n] for n in ("JUMP_BACKWARD", "JUMP_BACKWARD_NO_INTERRUPT",
                                    "POP_JUMP_BACKWARD_IF_TRUE",
                                    "POP_JUMP_BACKWARD_IF_FALSE",
                                    "POP_JUMP_BACKWARD_IF_NONE",
                                    "POP_JUMP_BACKWARD_IF_NOT_NONE")}


class Label:
    """A position in the code being assembled (in code units), set by Asm.mark()."""

    def __init__(self, unit=None):
        self.unit = unit


class Asm:
    """Instructions appended in order; jump arguments are Labels."""

    def __init__(self):
        self.items = []           # (opcode, arg | Label) or a Label marking a position

    def __call__(self, name, arg=0):
        self.items.append((dis.opmap[name], arg))

    def mark(self, label):
        self.items.append(label)

    def assemble(self, base_unit=0) -> bytes:
        """The code units; labels get their unit numbers counted from base_unit."""
        sizes = {}
        while True:
            unit = base_unit
            for k, item in enumerate(self.items):
                if isinstance(item, Label):
                    item.unit = unit
                    continue
                unit += sizes.get(k, 1) + _CACHES[item[0]]
            changed = False
            for k, op, size, value in self._placed(base_unit, sizes):
                need = _units_for(value)
                if need > size:
                    sizes[k] = need
                    changed = True
            if not changed:
                break
        out = bytearray()
        for k, op, size, value in self._placed(base_unit, sizes):
            for shift in range((size - 1) * 8, 0, -8):
                out += bytes((_EXTENDED_ARG, (value >> shift) & 0xFF))
            out += bytes((op, value & 0xFF))
            out += b"\x00\x00" * _CACHES[op]
        return bytes(out)

    def _placed(self, base_unit, sizes):
        """(index, opcode, size, argument) of each instruction, laid out from base_unit
        with sizes[index] code units (1 unless given); a jump's argument is relative to
        the unit after its caches."""
        unit = base_unit
        for k, item in enumerate(self.items):
            if isinstance(item, Label):
                continue
            op, arg = item
            size = sizes.get(k, 1)
            unit += size + _CACHES[op]
            yield k, op, size, _jump_arg(op, arg, unit) if isinstance(arg, Label) else arg


def _jump_arg(op, label, end):
    if label.unit is None:
        raise ValueError("jump to a label that was never marked")
    delta = end - label.unit if op in _BACKWARD else label.unit - end
    if delta < 0:
        raise ValueError(f"{opcode.opname[op]} cannot jump {delta} units")
    return delta


def _units_for(value):
    if value < 0:
        raise ValueError("negative oparg")
    n = 1
    while value > 0xFF:
        value >>= 8
        n += 1
    return n


# ------------------------------------------------------------------ exception table

def parse_exception_table(table: bytes):
    """[(start, end, target, depth, lasti)] in code units (end exclusive)."""
    out = []
    it = iter(table)

    def varint(first=None):
        b = next(it) if first is None else first
        value = b & 63
        while b & 64:
            b = next(it)
            value = (value << 6) | (b & 63)
        return value

    for b in it:
        start = varint(b)
        length = varint()
        target = varint()
        dl = varint()
        out.append((start, start + length, target, dl >> 1, bool(dl & 1)))
    return out


def encode_exception_table(entries) -> bytes:
    out = bytearray()

    def varint(value, first):
        chunks = [value & 63]
        value >>= 6
        while value:
            chunks.append(value & 63)
            value >>= 6
        chunks.reverse()
        for i, c in enumerate(chunks):
            b = c | (64 if i < len(chunks) - 1 else 0)
            if first and i == 0:
                b |= 128
            out.append(b)

    for start, end, target, depth, lasti in entries:
        varint(start, True)
        varint(end - start, False)
        varint(target, False)
        varint((depth << 1) | int(lasti), False)
    return bytes(out)


# ------------------------------------------------------------------ line table

def no_location(units: int) -> bytes:
    """Line-table entries saying 'no location' for `units` code units."""
    out = bytearray()
    while units > 0:
        n = min(units, 8)
        out.append(0x80 | (15 << 3) | (n - 1))
        units -= n
    return bytes(out)


def one_line(units: int, line_delta: int) -> bytes:
    """Entries placing `units` code units on one line, line_delta from the previous."""
    out = bytearray()
    first = True
    while units > 0:
        n = min(units, 8)
        out.append(0x80 | (13 << 3) | (n - 1))
        d = line_delta if first else 0
        v = (-d << 1) | 1 if d < 0 else d << 1
        while v >= 64:
            out.append(64 | (v & 63))
            v >>= 6
        out.append(v)
        units -= n
        first = False
    return bytes(out)
