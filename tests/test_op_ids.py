"""C reaches ops by id: csrc/dispatch/op_ids.h is generated from the op table
(ember.ops.op_ids), install() binds every entry to its id, and no C file looks an op up
by name."""
import re
from pathlib import Path

import pytest

import ember
from ember import _C
from ember.ops import op_ids, registry

ROOT = Path(__file__).resolve().parent.parent


def test_op_ids_header_is_current():
    text = (ROOT / "csrc" / "dispatch" / "op_ids.h").read_text()
    assert text == op_ids.header(registry.BY_NAME), (
        "csrc/dispatch/op_ids.h is stale: run `python -m ember.ops.op_ids`, then rebuild")


def test_every_entry_is_bound_to_its_id():
    ids = [e.op_id for e in registry.ENTRIES]
    assert sorted(ids) == list(range(len(registry.ENTRIES)))
    unbound = [e.qualified_name for e in registry.ENTRIES if e.c_op.id != e.op_id]
    assert unbound == [], "ember._C was built from another op_ids.h: rebuild it"


def test_heads_and_overloads_have_their_constants():
    # every entry has a constant (op_ids.h declares those C uses): in id order
    enum = [c for c, _ in registry.assign_op_ids(registry.BY_NAME, _C.OP_QUALNAMES)]
    text = op_ids.header(registry.BY_NAME, used={"EM_OP_LERP__TENSOR"})
    assert enum[registry.BY_NAME["view"][0].op_id] == "EM_OP_VIEW"
    assert enum[registry.BY_NAME["__getitem__"][0].op_id] == "EM_OP___GETITEM__"
    max_dim = next(e for e in registry.BY_NAME["max"] if e.overload == "dim")
    assert enum[max_dim.op_id] == "EM_OP_MAX__DIM"
    # scatter.reduce and scatter_reduce are different ops
    scatter_reduce = next(e for e in registry.BY_NAME["scatter"] if e.overload == "reduce")
    assert enum[scatter_reduce.op_id] == "EM_OP_SCATTER__REDUCE"
    assert enum[registry.BY_NAME["scatter_reduce"][0].op_id] == "EM_OP_SCATTER_REDUCE"
    # the first overload of a name is also reachable under its overload name
    assert "#define EM_OP_LERP__TENSOR EM_OP_LERP\n" in text


def test_constant_names_that_collide_are_refused():
    class Entry:
        def __init__(self, name, overload):
            self.name, self.overload = name, overload
            self.qualified_name = name + ("." + overload if overload else "")

    table = {"a_b": [Entry("a_b", "")], "A_B": [Entry("A_B", "")]}
    with pytest.raises(ValueError, match="EM_OP_A_B"):
        registry.assign_op_ids(table)


def test_the_header_declares_the_ops_c_uses_and_only_those():
    text = (ROOT / "csrc" / "dispatch" / "op_ids.h").read_text()
    enum = re.findall(r"^    X\((EM_OP_\w+), ", text, re.M)
    assert enum == sorted(enum) and set(enum) <= op_ids.c_uses()
    assert "EM_OP_VIEW" in enum and "EM_OP_ATAN" not in enum   # no C code calls atan
    # C's ops have the ids op_ids.h gives them; every other entry comes after them
    by_id = {e.op_id: e.qualified_name for e in registry.ENTRIES}
    assert tuple(by_id[i] for i in range(len(enum))) == _C.OP_QUALNAMES
    assert registry.BY_NAME["view"][0].op_id == enum.index("EM_OP_VIEW")
    # C naming an op the table lacks is refused
    with pytest.raises(ValueError, match="EM_OP_NO_SUCH_OP"):
        op_ids.header(registry.BY_NAME, used={"EM_OP_VIEW", "EM_OP_NO_SUCH_OP"})


def test_no_c_file_calls_an_op_by_name():
    found = [f"{p.relative_to(ROOT)}:{i}" for p in sorted((ROOT / "csrc").rglob("*.[ch]"))
             for i, line in enumerate(p.read_text().splitlines(), 1)
             if "em_call(\"" in line or "em_call_kw(\"" in line]
    assert found == []


def test_python_operators_reach_their_ops():
    a, b = ember.tensor([6, 3]), ember.tensor([4, 2])
    assert (a + b).tolist() == [10, 5] and (a // b).tolist() == [1, 1]
    assert (~a).tolist() == [-7, -4] and (a << 1).tolist() == [12, 6]
    with pytest.raises(TypeError, match="only implemented on integer"):
        ~ember.tensor([1.0])   # ~ is __invert__, not bitwise_not
    a[0] = 1
    assert a[0].item() == 1 and (a < b).tolist() == [True, False]


def test_backward_reads_are_the_entries_backward_uses():
    for e in registry.ENTRIES:
        uses = e.backward_uses if e.backward is not None else None
        want = (sum(1 << i for i, u in enumerate(uses) if u) if uses is not None
                else 0xFFFFFFFF)
        assert e.c_op.backward_reads == want, e.qualified_name
    assert registry.BY_NAME["mul"][0].c_op.backward_reads == 0b110   # self, other


def test_backward_reads_only_what_the_formula_uses():
    # mul's formula reads both inputs: modifying one after the op is an error
    x = ember.ones(3, requires_grad=True)
    y = x * 2
    z = y * y
    y.add_(1)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        z.sum().backward()
    # add's formula reads neither input nor the result
    x = ember.ones(3, requires_grad=True)
    y = x * 2
    z = y + 1
    y.add_(1)
    z.sum().backward()
    assert x.grad.tolist() == [2.0, 2.0, 2.0]


def test_an_op_c_needs_but_is_not_bound_is_a_runtime_error():
    table = {e.qualified_name: e.c_op for e in registry.ENTRIES}
    x = ember.ones(2, 3).t()   # not viewable as (6,): reshape clones
    try:
        _C._bind_ops({name: op for name, op in table.items() if name != "clone"})
        with pytest.raises(RuntimeError, match="op clone is not bound"):
            x.reshape(6)
    finally:
        _C._bind_ops(table)
    assert x.reshape(6).shape == (6,)
    with pytest.raises(TypeError):
        _C._bind_ops([])
