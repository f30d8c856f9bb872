"""Exception types as PyTorch raises them, for failures outside one op's own checks:
allocations that cannot be made, Python integers that do not fit, dtypes a kernel has
no implementation for, and the ops PyTorch declares no derivative for."""
import pytest

import ember


def _raised(fn):
    try:
        fn()
    except Exception as e:  # noqa: BLE001 - compared with torch's
        return e
    return None


def _same_error(torch, call):
    got, want = _raised(lambda: call(ember)), _raised(lambda: call(torch))
    assert want is not None and got is not None, (got, want)
    assert type(got) is type(want), f"ember {type(got).__name__}: {got}; torch " \
        f"{type(want).__name__}: {want}"
    return got, want


@pytest.mark.parametrize("call", [
    lambda t: t.empty(2 ** 40),
    lambda t: t.zeros(2 ** 40, 2 ** 30),
    lambda t: t.empty(2 ** 62),
    lambda t: t.ones(2).new_zeros(2 ** 40),
    lambda t: t.full((2 ** 40,), 1.0),
], ids=["too-much-memory", "size-overflow", "bytes-overflow", "new_zeros", "full"])
def test_allocations_too_large_raise_runtime_error(torch, call):
    got, want = _same_error(torch, call)
    assert isinstance(got, RuntimeError)
    for words in ("can't allocate memory", "Storage size calculation overflowed"):
        if words in str(want):
            assert words in str(got)


@pytest.mark.parametrize("value,dtype", [
    (2 ** 70, None), (2 ** 63, None), (-2 ** 63 - 1, None), ([1, 2 ** 63], None),
    (2 ** 64, "uint8"), (2 ** 70, "int32"), ([300], "uint8"), (2 ** 40, "int32"),
])
def test_python_ints_that_do_not_fit(torch, value, dtype):
    got, want = _same_error(torch, lambda t: t.tensor(
        value, dtype=None if dtype is None else getattr(t, dtype)))
    assert str(want).split("\n")[0] in str(got)


@pytest.mark.parametrize("value,dtype", [
    (2 ** 63 - 1, None), (-2 ** 63, None), (-1, "uint8"), (-255, "uint8"), (2 ** 63, "bool"),
    (2 ** 70, "float64"), (2 ** 64, "float16"), ([1.0, 2 ** 70], None),
])
def test_python_ints_that_fit_as_torch_converts_them(torch, value, dtype):
    got = ember.tensor(value, dtype=None if dtype is None else getattr(ember, dtype))
    want = torch.tensor(value, dtype=None if dtype is None else getattr(torch, dtype))
    assert str(got.dtype).split(".")[-1] == str(want.dtype).split(".")[-1]
    assert got.tolist() == want.tolist()


@pytest.mark.parametrize("call", [
    lambda t: t.ones(3, dtype=t.bool).abs(),
    lambda t: t.ones(3) & t.ones(3),
    lambda t: t.ones(3, dtype=t.bool).pow(t.ones(3, dtype=t.bool)),
    lambda t: t.nn.functional.gelu(t.ones(3, dtype=t.int64)),
    lambda t: t.remainder(t.ones(3, dtype=t.bool), t.ones(3, dtype=t.bool)),
    lambda t: t.ones(1, 3, dtype=t.bool) @ t.ones(3, 1, dtype=t.bool),
    lambda t: t.softmax(t.ones(3, dtype=t.int64), 0),
    lambda t: -t.ones(3, dtype=t.bool),
    lambda t: t.ones(3, dtype=t.bool).topk(1),
    lambda t: t.ones(3, dtype=t.int64).var(),
])
def test_unsupported_dtypes_raise_torchs_type_and_wording(torch, call):
    """torch 2.13 raises NotImplementedError for a kernel with no implementation for a
    dtype ("... not implemented for 'Bool'") and RuntimeError for its explicit dtype
    checks; ember raises the same type with the same dtype wording."""
    got, want = _same_error(torch, call)
    if "not implemented for" in str(want):
        assert str(want).split("not implemented for")[1] in str(got)


def test_floor_divide_has_no_derivative(torch):
    for lib in (ember, torch):
        x = lib.ones(3, requires_grad=True)
        y = lib.floor_divide(x, 2)
        assert y.requires_grad
        with pytest.raises(RuntimeError, match="derivative for aten::floor_divide is not "
                                               "implemented"):
            y.sum().backward()
    x = ember.ones(3, requires_grad=True)
    with pytest.raises(RuntimeError, match="floor_divide"):
        (x // 2).sum().backward()


def test_remainder_double_backward_does_not_reach_floor_divide(torch):
    """remainder's gradient uses div(rounding_mode='floor') (a zero derivative), as
    PyTorch's formula does, so create_graph=True still works."""
    got = []
    for lib in (ember, torch):
        a = lib.tensor([5.5, -3.2], requires_grad=True)
        b = lib.tensor([2.0, 1.5], requires_grad=True)
        _, gb = lib.autograd.grad(lib.remainder(a, b).sum(), [a, b], create_graph=True)
        gga, ggb = lib.autograd.grad(gb.sum(), [a, b])
        got.append((gb.tolist(), [abs(v) for v in gga.tolist() + ggb.tolist()]))
    assert got[0] == got[1]
