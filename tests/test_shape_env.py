"""ember.fx.shape_env: SymInt arithmetic, guards taken on branches and specialisation,
0/1 specialisation, duck sizing, refinement, and checking guards on new sizes."""
import pytest

from ember.fx.shape_env import ShapeEnv, SymBool, SymInt, sym_max, sym_min


def test_arithmetic_makes_symints_and_constants_fold():
    env = ShapeEnv()
    s0 = env.create_symbol(8, "x.size(0)")
    s1 = env.create_symbol(5, "x.size(1)")
    assert isinstance(s0, SymInt) and s0.hint == 8
    e = (s0 * s1 + 3) // 1 - s1
    assert repr(e) == "s0*s1 - s1 + 3" and e.hint == 38
    assert s0 - s0 == 0 and isinstance(s0 - s0, int)
    assert repr(2 * s0 // 2) == "s0"
    assert repr((s0 + 1) % s0) == "((s0 + 1) % s0)"
    assert env.guards == []


def test_sizes_zero_and_one_stay_constants_and_equal_sizes_share_a_symbol():
    env = ShapeEnv()
    assert env.create_symbol(1, "x.size(0)") == 1
    assert env.create_symbol(0, "x.size(1)") == 0
    a = env.create_symbol(7, "x.size(2)")
    b = env.create_symbol(7, "y.size(0)")
    assert repr(a) == repr(b) == "s0"
    assert env.check({"x.size(2)": 9, "y.size(0)": 9}) is None
    assert env.check({"x.size(2)": 9, "y.size(0)": 10}) == "x.size(2) == y.size(0)"
    assert "was a symbol" in env.check({"x.size(2)": 1, "y.size(0)": 1})
    with pytest.raises(ValueError):
        env.create_symbol(-1, "z.size(0)")


def test_branches_are_guarded_unless_ranges_decide():
    env = ShapeEnv()
    s0 = env.create_symbol(8, "x.size(0)")
    s1 = env.create_symbol(5, "x.size(1)")
    assert (s0 != 1) and not (s0 == 0) and (s0 >= 2)     # sizes are >= 2: no guard
    assert env.guards == []
    assert s0 > s1
    assert env.guard_texts() == ["s1 < s0"]
    assert not (s0 * 2 < 10)
    assert env.guard_texts()[-1] == "10 <= 2*s0"
    assert isinstance(s0 > 3, SymBool) and bool(~(s0 > 3)) is False
    assert env.check({"x.size(0)": 8, "x.size(1)": 5}) is None
    assert env.check({"x.size(0)": 6, "x.size(1)": 5}) is None
    assert env.check({"x.size(0)": 4, "x.size(1)": 5}) == "s1 < s0"
    assert env.check({"x.size(0)": 4, "x.size(1)": 3}) == "10 <= 2*s0"


def test_range_guards_narrow_later_decisions():
    env = ShapeEnv()
    s0 = env.create_symbol(64, "x.size(0)")
    assert s0 > 16
    n = len(env.guards)
    assert s0 > 10 and s0 >= 17     # implied by s0 > 16: no new guard
    assert len(env.guards) == n
    assert env.symbols[next(iter(env.symbols))].range == (17, float("inf"))


def test_equality_guards_replace_symbols():
    env = ShapeEnv(duck_shape=False)
    s0 = env.create_symbol(6, "x.size(0)")
    s1 = env.create_symbol(6, "y.size(0)")
    assert repr(s1) == "s1"
    assert s0 == s1
    assert env.guard_texts() == ["s0 == s1"]
    assert repr(s0 + s1) == "2*s0" or repr(s0 + s1) == "2*s1"
    assert s0 - s1 == 0 and isinstance(s0 - s1, int)
    assert env.check({"x.size(0)": 7, "y.size(0)": 7}) is None
    assert env.check({"x.size(0)": 7, "y.size(0)": 8}) is not None


def test_int_specialises():
    env = ShapeEnv()
    s0 = env.create_symbol(12, "x.size(0)")
    assert [0, 1, 2][: s0 // 5] == [0, 1]     # __index__ guards (s0//5) == 2
    assert env.guard_texts() == ["(s0//5) == 2"]
    assert env.check({"x.size(0)": 14}) is None
    assert env.check({"x.size(0)": 15}) == "(s0//5) == 2"
    assert int(s0) == 12 and env.check({"x.size(0)": 14}) is not None
    assert s0 / 4 == 3.0


def test_min_max_without_guards_and_unhashable():
    env = ShapeEnv()
    s0 = env.create_symbol(12, "x.size(0)")
    s1 = env.create_symbol(7, "x.size(1)")
    assert repr(sym_min(s0, s1)) == "min(s0, s1)" and sym_min(s0, s1).hint == 7
    assert sym_max(s0, 1) is s0 or repr(sym_max(s0, 1)) == "s0"
    assert sym_min(3, 4) == 3 and env.guards == []
    with pytest.raises(TypeError):
        hash(s0)
    with pytest.raises(TypeError):
        {s0: 1}
