"""ember.finfo and ember.iinfo against torch's."""
import pytest

import ember

FLOATS = ("float16", "float32", "float64")
INTS = ("uint8", "int8", "int16", "int32", "int64")


@pytest.mark.parametrize("name", FLOATS)
def test_finfo_matches_torch(torch, name):
    e, t = ember.finfo(getattr(ember, name)), torch.finfo(getattr(torch, name))
    for attr in ("bits", "eps", "max", "min", "tiny", "smallest_normal", "resolution",
                 "dtype"):
        assert getattr(e, attr) == getattr(t, attr), attr
        assert type(getattr(e, attr)) is type(getattr(t, attr)), attr
    assert repr(e) == repr(t)


def test_finfo_default_is_the_default_dtype(torch):
    assert ember.finfo().dtype == torch.finfo().dtype == "float32"
    old = ember.get_default_dtype()
    ember.set_default_dtype(ember.float64)
    try:
        assert ember.finfo().dtype == "float64"
    finally:
        ember.set_default_dtype(old)


@pytest.mark.parametrize("name", INTS)
def test_iinfo_matches_torch(torch, name):
    e, t = ember.iinfo(getattr(ember, name)), torch.iinfo(getattr(torch, name))
    for attr in ("bits", "max", "min", "dtype"):
        assert getattr(e, attr) == getattr(t, attr), attr
    assert repr(e) == repr(t)


@pytest.mark.parametrize("cls,dtype", [("finfo", "int32"), ("iinfo", "float32"),
                                       ("iinfo", "bool"), ("finfo", "bool")])
def test_wrong_kind_raises_as_torch(torch, cls, dtype):
    with pytest.raises(TypeError) as want:
        getattr(torch, cls)(getattr(torch, dtype))
    with pytest.raises(TypeError) as got:
        getattr(ember, cls)(getattr(ember, dtype))
    assert str(got.value) == str(want.value)
