"""csrc/jit/loop_ir.h, generated from the loop IR's instruction set (loop_ir.Op): the C
side's enums and tables of instructions and reductions, in the same order.

    python -m ember.compiler.loop_ir_header      # rewrites csrc/jit/loop_ir.h

tests/test_loop_ir_header.py fails when the checked-in header is stale.
"""
from __future__ import annotations

import pathlib
import sys

from .loop_ir import OPERANDS, Domain, Form, Op, Reduction

PATH = pathlib.Path("csrc") / "jit" / "loop_ir.h"


def _enum(prefix, names, count):
    lines = [f"    {prefix}{n.upper()} = {i}," for i, n in enumerate(names)]
    return "typedef enum {\n" + "\n".join(lines) + f"\n    {count}\n"


def text() -> str:
    forms = [f.name for f in Form]
    domains = [d.name for d in Domain]
    out = [
        "/* loop_ir.h: the loop IR's instruction set, for csrc/jit.",
        " *",
        " * GENERATED from python/ember/compiler/loop_ir.py by",
        " * `python -m ember.compiler.loop_ir_header`: do not edit. */",
        "#ifndef EMBER_LOOP_IR_H",
        "#define EMBER_LOOP_IR_H",
        "",
        _enum("EM_FORM_", forms, "EM_NFORMS") + "} em_form_t;",
        "",
        _enum("EM_DOMAIN_", domains, "EM_NDOMAINS") + "} em_domain_t;",
        "",
        _enum("EM_IR_", [op.name for op in Op], "EM_IR_NOPS") + "} em_ir_t;",
        "",
        _enum("EM_REDUCE_", [r.name for r in Reduction], "EM_NREDUCTIONS") +
        "} em_reduction_t;",
        "",
        "typedef struct {",
        "    const char *name;",
        "    em_form_t form;",
        "    em_domain_t domain;",
        "} em_ir_info_t;",
        "",
        "/* the registers an instruction of each form reads */",
        "static const int em_form_operands[EM_NFORMS] = {",
        "    " + ", ".join(str(OPERANDS[f]) for f in Form) + ",",
        "};",
        "",
        "static const em_ir_info_t em_ir_info[EM_IR_NOPS] = {",
    ]
    out += [f'    {{"{op.value}", EM_FORM_{op.form.name}, EM_DOMAIN_{op.domain.name}}},'
            for op in Op]
    out += ["};", "",
            "static const char *const em_reduction_names[EM_NREDUCTIONS] = {",
            "    " + ", ".join(f'"{r.value}"' for r in Reduction) + ",",
            "};", "",
            "#endif /* EMBER_LOOP_IR_H */", ""]
    return "\n".join(out)


def check_codes():
    """Op.code and Reduction.code are the C enums' values: their declaration order."""
    for seq in (list(Op), list(Reduction)):
        for i, member in enumerate(seq):
            if member.code != i:
                raise AssertionError(f"{member!r} has code {member.code}, not {i}")


if __name__ == "__main__":
    check_codes()
    root = pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else pathlib.Path(".")
    (root / PATH).write_text(text())
    print(f"wrote {root / PATH}")
