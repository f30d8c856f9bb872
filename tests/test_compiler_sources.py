"""Rules the LLVM backend's sources keep (python/ember/compiler/, csrc/jit/,
csrc/runtime/): ops are lowered through their op table entry, never by name; the JIT
switches on instruction codes, never compares instruction names; functions shared
between C files are declared in headers, never by hand in a .c file."""
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
COMPILER = sorted((ROOT / "python" / "ember" / "compiler").glob("*.py"))
JIT = sorted((ROOT / "csrc" / "jit").glob("*.c"))
C_FILES = JIT + sorted((ROOT / "csrc" / "runtime").glob("*.c"))


def _hits(files, pattern):
    rx = re.compile(pattern)
    return [f"{f.relative_to(ROOT)}:{n}: {line.strip()}" for f in files
            for n, line in enumerate(f.read_text().splitlines(), 1) if rx.search(line)]


def test_the_sources_are_there():
    assert len(COMPILER) >= 8 and len(JIT) >= 4 and len(C_FILES) >= 8


@pytest.mark.parametrize("pattern", [r'getattr\(self,\s*"op_"', r"entry\.name\s*==",
                                     r"\.name\s*==\s*[\"']"])
def test_the_compiler_dispatches_on_no_op_name(pattern):
    assert not _hits(COMPILER, pattern)


def test_the_jit_compares_no_instruction_names():
    """Instructions are decoded to loop_ir.h's codes (through a table built from it)
    and emitted by switching on them."""
    assert not _hits(JIT, r"\bstrn?cmp\s*\(|CompareWithASCIIString|\bstrcasecmp\s*\(")


def test_no_prototypes_declared_by_hand_in_c_files():
    """A function of another file is declared in a header (runtime/runtime.h,
    jit/codegen.h, jit/jit.h, ember.h), not where it is called."""
    proto = re.compile(r"^(?!static\b|typedef\b|return\b)[A-Za-z_][\w\s\*]*?\b(\w+)\s*"
                       r"\([^;{]*\)\s*;\s*$")
    found = []
    for f in C_FILES:
        for n, line in enumerate(f.read_text().splitlines(), 1):
            if proto.match(line):
                found.append(f"{f.relative_to(ROOT)}:{n}: {line.strip()}")
    assert not found, found
