"""One vocabulary: code outside the op table never picks an op by its name. The C
side's rules are in tests/test_op_ids.py (no em_call("...")) and
tests/test_compiler_sources.py (no getattr(self, "op_"...), no strcmp of instruction
names); this file checks the Python packages that read the table."""
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[1] / "python" / "ember"
OUTSIDE_OPS = sorted(p for p in ROOT.rglob("*.py") if "ops" not in p.relative_to(ROOT).parts)


def _hits(pattern):
    rx = re.compile(pattern)
    return [f"{p.relative_to(ROOT)}:{n}: {line.strip()}" for p in OUTSIDE_OPS
            for n, line in enumerate(p.read_text().splitlines(), 1) if rx.search(line)]


def test_the_packages_are_there():
    names = {p.relative_to(ROOT).parts[0] for p in OUTSIDE_OPS}
    assert {"capture", "aot", "compiler", "fx", "nn"} <= names


def test_no_op_is_picked_by_its_entry_name():
    assert _hits(r"entry\.(name|qualified_name)\s*(==|!=|in\s*[\(\[\{])") == []


def test_no_op_is_picked_by_a_method_name_heuristic():
    """In-place ops and views are told by the schema (entry.mutates, Tensor(a)) and
    by storage, not by a trailing underscore or a list of view method names."""
    assert _hits(r"""endswith\(\s*["']_["']\s*\)""") == []
    assert _hits(r"_VIEW_METHODS") == []
