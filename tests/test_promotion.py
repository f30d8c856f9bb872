"""Type promotion: ember.result_type against torch.result_type for every pair of the twelve
dtypes (complex ones included), in the three categories (dim tensor with dim tensor, dim tensor with 0-d tensor,
tensor with a Python number), plus the rules that need no torch to state."""
import itertools

import numpy as np
import pytest

import ember
from ember.ops import meta

NAMES = ["bool", "uint8", "int8", "int16", "int32", "int64", "float16", "float32", "float64",
         "bfloat16", "complex64", "complex128"]
PAIRS = list(itertools.product(NAMES, NAMES))
NUMBERS = [True, 3, -2, 2.5, 1j]


def e(name, shape):
    return ember.zeros(shape, dtype=getattr(ember, name))


def t(torch, name, shape):
    return torch.zeros(shape, dtype=getattr(torch, name))


def name_of(dtype):
    return str(dtype).split(".")[-1]


@pytest.mark.parametrize("a,b", PAIRS)
def test_dim_tensors(torch, a, b):
    want = name_of(torch.result_type(t(torch, a, (2,)), t(torch, b, (2,))))
    assert name_of(ember.result_type(e(a, (2,)), e(b, (2,)))) == want
    assert name_of(ember.promote_types(getattr(ember, a), getattr(ember, b))) == want


@pytest.mark.parametrize("a,b", PAIRS)
def test_dim_tensor_and_zero_dim_tensor(torch, a, b):
    if {a, b} in ({"float16", "complex64"}, {"float16", "complex128"}):
        pytest.skip("a float16 tensor with a 0-d complex one is complex32 in torch, which "
                    "ember does not have (complex64 here)")
    want = name_of(torch.result_type(t(torch, a, (2,)), t(torch, b, ())))
    assert name_of(ember.result_type(e(a, (2,)), e(b, ()))) == want
    want = name_of(torch.result_type(t(torch, a, ()), t(torch, b, (2,))))
    assert name_of(ember.result_type(e(a, ()), e(b, (2,)))) == want
    want = name_of(torch.result_type(t(torch, a, ()), t(torch, b, ())))
    assert name_of(ember.result_type(e(a, ()), e(b, ()))) == want


@pytest.mark.parametrize("a", NAMES)
@pytest.mark.parametrize("number", NUMBERS, ids=repr)
def test_tensor_and_python_number(torch, a, number):
    if a == "float16" and isinstance(number, complex):
        pytest.skip("torch gives complex32, which ember does not have (complex64 here)")
    for shape in ((2,), ()):
        want = name_of(torch.result_type(t(torch, a, shape), number))
        assert name_of(ember.result_type(e(a, shape), number)) == want, (a, shape, number)
        want = name_of(torch.result_type(number, t(torch, a, shape)))
        assert name_of(ember.result_type(number, e(a, shape))) == want, (a, shape, number)


@pytest.mark.parametrize("a,b", PAIRS)
def test_python_meta_rule_agrees(a, b):
    """ember.ops.meta.result_type (tracing) agrees with the C rule in all categories."""
    for sa, sb in (((2,), (2,)), ((2,), ()), ((), (2,)), ((), ())):
        x, y = e(a, sa), e(b, sb)
        assert meta.result_type(x, y) is ember.result_type(x, y)
    for number in NUMBERS:
        assert meta.result_type(e(a, (2,)), number) is ember.result_type(e(a, (2,)), number)


def test_int64_tensor_plus_float_number_is_float32():
    x = ember.tensor([1, 2, 3])
    assert x.dtype is ember.int64
    assert ember.result_type(x, 2.5) is ember.float32
    y = x + 2.5
    assert y.dtype is ember.float32
    assert y.tolist() == [3.5, 4.5, 5.5]


def test_float32_tensor_plus_float64_zero_dim_is_float32():
    x = ember.ones(3)
    s = ember.tensor(2.0, dtype=ember.float64)
    assert ember.result_type(x, s) is ember.float32
    assert (x + s).dtype is ember.float32
    assert (s + x).dtype is ember.float32
    assert (x * s).tolist() == [2.0, 2.0, 2.0]


def test_zero_dim_raises_the_category():
    # a 0-d float tensor raises an integer tensor's category (to its own dtype; a Python
    # float would give the default dtype)
    x = ember.tensor([1, 2])
    assert ember.result_type(x, ember.tensor(1.0, dtype=ember.float64)) is ember.float64
    assert ember.result_type(x, 1.0) is ember.float32
    # but the same category does not promote: int32 dim tensor with int64 0-d stays int32
    y = ember.tensor([1, 2], dtype=ember.int32)
    assert ember.result_type(y, ember.tensor(1)) is ember.int32
    # bool dim tensors take the 0-d tensor's type
    assert ember.result_type(ember.tensor([True]), ember.tensor(1, dtype=ember.int8)) is \
        ember.int8


def test_python_numbers_follow_the_default_dtype():
    x = ember.tensor([1, 2])
    ember.set_default_dtype(ember.float64)
    try:
        assert ember.result_type(x, 2.5) is ember.float64
        assert (x + 0.5).dtype is ember.float64
    finally:
        ember.set_default_dtype(ember.float32)
    assert ember.result_type(x, 2.5) is ember.float32
    assert ember.result_type(ember.tensor([True]), 3) is ember.int64
    assert ember.result_type(ember.tensor([1], dtype=ember.uint8), -3) is ember.uint8
    assert ember.result_type(ember.tensor([1.0], dtype=ember.float16), 1e10) is ember.float16


def test_numpy_scalars_count_as_python_numbers():
    x = ember.tensor([1, 2], dtype=ember.int8)
    assert ember.result_type(x, np.int64(3)) is ember.int8
    assert ember.result_type(ember.tensor([True]), np.bool_(True)) is ember.bool
    assert ember.result_type(x, np.float64(0.5)) is ember.float32
    assert (x + np.int64(3)).dtype is ember.int8


def test_uint8_int8_promote_to_int16():
    assert ember.promote_types(ember.uint8, ember.int8) is ember.int16
    assert ember.promote_types(ember.float16, ember.int64) is ember.float16
    assert ember.promote_types(ember.bool, ember.bool) is ember.bool
