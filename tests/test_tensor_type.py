"""Tensor.new, Tensor.type and Tensor.type_as in their forms, against torch."""
import pytest

import ember


def _same(e, t):
    assert str(e.dtype).split(".")[-1] == str(t.dtype).split(".")[-1]
    assert tuple(e.shape) == tuple(t.shape)


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "uint8", "bool"])
def test_new(torch, dtype):
    e = ember.ones(2, dtype=getattr(ember, dtype))
    t = torch.ones(2, dtype=getattr(torch, dtype))
    _same(e.new(), t.new())
    _same(e.new(2, 3), t.new(2, 3))
    _same(e.new(ember.Size([4])), t.new(torch.Size([4])))
    _same(e.new([1, 0]), t.new([1, 0]))
    assert e.new([1, 0]).tolist() == t.new([1, 0]).tolist()
    _same(e.new((2, 3)), t.new((2, 3)))      # a tuple is data
    with pytest.raises(TypeError):
        t.new([[1, 2]], dtype=torch.float64)
    with pytest.raises(TypeError):
        e.new([[1, 2]], dtype=ember.float64)


def test_type_names_and_conversions(torch):
    for name in ("float32", "float64", "float16", "int64", "int32", "int16", "int8",
                 "uint8", "bool"):
        e = ember.zeros(2, dtype=getattr(ember, name))
        t = torch.zeros(2, dtype=getattr(torch, name))
        assert e.type() == t.type()
        target = t.type()
        _same(ember.ones(2).type(target), torch.ones(2).type(target))
    x = ember.ones(2)
    assert x.type(ember.float32) is x and x.type("torch.FloatTensor") is x
    _same(x.type(ember.int8), torch.ones(2).type(torch.int8))
    with pytest.raises(ValueError):
        torch.ones(2).type("torch.NoSuchTensor")
    with pytest.raises(ValueError):
        x.type("torch.NoSuchTensor")


@pytest.mark.parametrize("other", ["float64", "int8", "bool", "float32"])
def test_type_as_every_form(torch, other):
    e, t = ember.ones(2, 3), torch.ones(2, 3)
    eo = ember.zeros(1, dtype=getattr(ember, other))
    to = torch.zeros(1, dtype=getattr(torch, other))
    _same(e.type_as(eo), t.type_as(to))
    _same(e.t().type_as(eo), t.t().type_as(to))
    assert e.type_as(eo).stride() == t.type_as(to).stride()
    if other == "float32":
        assert e.type_as(eo) is e and t.type_as(to) is t
    x = ember.ones(2, requires_grad=True)
    y = x.type_as(ember.zeros(1, dtype=ember.float64))
    y.sum().backward()
    assert x.grad.dtype is ember.float32 and x.grad.tolist() == [1.0, 1.0]
