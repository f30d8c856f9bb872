"""Indexing against PyTorch: x[key] and x[key] = value for ints, slices, None, Ellipsis,
Python bools, integer lists and tensors, bool masks and their combinations (where the
advanced dims go), index_put_ with accumulate, autograd through both, and the errors."""
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import ember

SETTINGS = settings(max_examples=int(__import__("os").environ.get("EMBER_HYP", 250)), deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


def to_torch(torch, k):
    if isinstance(k, ember.Tensor):
        return torch.from_numpy(k.numpy().copy())
    if isinstance(k, tuple):
        return tuple(to_torch(torch, e) for e in k)
    if isinstance(k, list):
        return [to_torch(torch, e) for e in k]
    return k


def run(fn):
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return fn(), None
    except Exception as e:  # noqa: BLE001 - compared with torch's
        return None, e


def same_result(got, want, what):
    assert tuple(got.shape) == tuple(want.shape), f"{what}: {tuple(got.shape)} != " \
                                                  f"{tuple(want.shape)}"
    assert str(got.dtype).split(".")[-1] == str(want.dtype).split(".")[-1], what
    if got.numel():
        so = [s for s, n in zip(got.stride(), got.shape) if n > 1]
        sw = [s for s, n in zip(want.stride(), want.shape) if n > 1]
        assert so == sw, f"{what}: strides {got.stride()} != torch {want.stride()}"
    np.testing.assert_array_equal(got.numpy(), want.numpy(), err_msg=what)


def same_error(err, terr, what):
    assert (err is None) == (terr is None), f"{what}: ember {err!r}, torch {terr!r}"
    if err is not None:
        assert type(err) is type(terr), f"{what}: ember {err!r}, torch {terr!r}"


# ------------------------------------------------------------------ strategies


@st.composite
def keys(draw, shape, allow_oob=True):
    """A key for a tensor of shape: basic items, then tensor indices, in any order."""
    items, dim = [], 0
    n = draw(st.integers(1, len(shape) + 2))
    for _ in range(n):
        kinds = ["none", "bool"]
        if dim < len(shape):
            kinds += ["int", "slice", "slice", "list", "tensor", "tensor", "mask"]
        kind = draw(st.sampled_from(kinds))
        size = shape[dim] if dim < len(shape) else 0
        hi = size + (1 if allow_oob else 0)
        if kind == "none":
            items.append(None)
        elif kind == "bool":
            items.append(draw(st.booleans()))
        elif kind == "int":
            if size == 0:
                continue
            items.append(draw(st.integers(-size, hi - 1)))
            dim += 1
        elif kind == "slice":
            a = draw(st.one_of(st.none(), st.integers(-size - 1, size + 1)))
            b = draw(st.one_of(st.none(), st.integers(-size - 1, size + 1)))
            c = draw(st.one_of(st.none(), st.integers(1, 3)))
            items.append(slice(a, b, c))
            dim += 1
        elif kind == "list":
            k = draw(st.integers(0, 3))
            items.append([draw(st.integers(-size, max(hi - 1, -size))) for _ in range(k)]
                         if size else [])
            dim += 1
        elif kind == "tensor":
            ishape = draw(st.sampled_from([(), (2,), (3,), (2, 1), (1, 3), (0,)]))
            vals = draw(st.lists(st.integers(-size, max(hi - 1, -size)) if size else
                                 st.just(0), min_size=int(np.prod(ishape)),
                                 max_size=int(np.prod(ishape))))
            dt = draw(st.sampled_from(["int64", "int64", "int32"]))
            items.append(ember.from_numpy(np.array(vals, dtype=dt).reshape(ishape)))
            dim += 1
        elif kind == "mask":
            k = draw(st.integers(1, len(shape) - dim))
            mshape = shape[dim:dim + k]
            if draw(st.integers(0, 9)) == 0:    # now and then the wrong shape
                mshape = tuple(s + 1 for s in mshape)
            bits = draw(st.lists(st.booleans(), min_size=int(np.prod(mshape)),
                                 max_size=int(np.prod(mshape))))
            items.append(ember.from_numpy(np.array(bits, dtype=bool).reshape(mshape)))
            dim += k
    if draw(st.integers(0, 3)) == 0:   # an Ellipsis somewhere: the items after it move
        items.insert(draw(st.integers(0, len(items))), Ellipsis)
    return tuple(items)


shapes = st.lists(st.integers(0, 4), min_size=0, max_size=4).map(tuple)


def base(shape, dtype="float32"):
    n = int(np.prod(shape))
    return np.arange(n, dtype=dtype).reshape(shape) if n else np.zeros(shape, dtype=dtype)


# ------------------------------------------------------------------ reads


@SETTINGS
@given(data=st.data(), shape=shapes, transposed=st.booleans())
def test_getitem_matches_torch(torch, data, shape, transposed):
    a = base(shape)
    if transposed and len(shape) >= 2:
        a = np.ascontiguousarray(np.swapaxes(a, -1, -2)).swapaxes(-1, -2)
    key = data.draw(keys(shape))
    x, tx = ember.from_numpy(a), torch.from_numpy(a)
    got, err = run(lambda: x[key])
    want, terr = run(lambda: tx[to_torch(torch, key)])
    what = f"x{list(shape)}[{key!r}]"
    same_error(err, terr, what)
    if err is None:
        same_result(got, want, what)


@pytest.mark.parametrize("key", [
    0, -1, (1, 1), (slice(None), [0, 2]), ([0, 1], slice(None), [2, 3]),
    (0, slice(None), [0, 1]), (slice(None), [0, 1], [1, 2]), ([[0], [1]], [1, 2]),
    (None, [0, 1], None), ([0, 1], None, [0, 1]), (Ellipsis, [3, 0]), (True,), (False,),
    (True, [0, 1]), [0, 1], [[0, 1]], [True, False], [], [0, [1]], [0, slice(None)],
    (slice(1, None), [[0], [1]], 2),
])
def test_getitem_cases(torch, key):
    a = base((2, 3, 4))
    x, tx = ember.from_numpy(a), torch.from_numpy(a)
    got, err = run(lambda: x[key])
    want, terr = run(lambda: tx[to_torch(torch, key)])
    same_error(err, terr, repr(key))
    if err is None:
        same_result(got, want, repr(key))


def test_masks_and_tensors(torch):
    a = base((2, 3, 4))
    x, tx = ember.from_numpy(a), torch.from_numpy(a)
    for k in [x > 5, (x > 5)[0], (x[0] > 2).to(ember.uint8), ember.tensor([True, False]),
              (slice(None), ember.tensor([[True, False, True, True]] * 3)),
              (ember.tensor(True), ember.tensor([0, 1])), ember.tensor(1),
              (ember.tensor(0), slice(None), ember.tensor(1)), np.array([1, 0]),
              (ember.tensor([0, 1]), x[0, 0, :2].long())]:
        got, err = run(lambda: x[k])
        want, terr = run(lambda: tx[to_torch(torch, k)])
        same_error(err, terr, repr(k))
        if err is None:
            same_result(got, want, repr(k))


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64",
                                   "float16", "bool"])
def test_trailing_index_gather(torch, dtype):
    """Index tensors over the last dims (im2col's decomposition reads its receptive
    fields so; a C gather over precomputed offsets): values, negative indices, strided
    inputs and int32 indices as torch's, for the dtypes that take it and those that do
    not."""
    a = base((2, 3, 6, 5)).astype(dtype) if dtype != "bool" else base((2, 3, 6, 5)) % 3 > 0
    h = ember.tensor([[0, 1, 2], [2, 3, -1]]).view(2, 1, 3, 1)
    w = ember.tensor([[0, -2, 4], [1, 2, 3]]).view(1, 2, 1, 3)
    for x, tx in [(ember.from_numpy(a), torch.from_numpy(a)),
                  (ember.from_numpy(a).transpose(0, 1),
                   torch.from_numpy(a).transpose(0, 1)),
                  (ember.from_numpy(a)[:, 1:, ::2], torch.from_numpy(a)[:, 1:, ::2])]:
        for k in [(slice(None), slice(None), h, w), (Ellipsis, w[0, :, 0]),
                  (slice(None), slice(None), h.int(), w.int()),
                  (slice(None), slice(None), h[..., :1, :]),
                  (slice(None), ember.tensor([0, -1]), slice(None), ember.tensor([1, 0]))]:
            got, err = run(lambda: x[k])
            want, terr = run(lambda: tx[to_torch(torch, k)])
            same_error(err, terr, repr(k))
            if err is None:
                same_result(got, want, repr(k))


def test_basic_reads_are_views_and_advanced_reads_copies():
    x = ember.zeros(3, 4)
    v = x[1, 1:]
    v.fill_(1.0)
    assert x.sum().item() == 3
    c = x[[0, 1]]
    c.fill_(5.0)
    assert x.sum().item() == 3
    assert x[ember.tensor(1)].data_ptr() == x[1].data_ptr()     # a 0-d int tensor selects


@pytest.mark.parametrize("key,exc", [
    ((5,), IndexError), ((0, 0, 0), IndexError),
    (([0, 3],), IndexError), (([0, 1], [0, 1, 2]), IndexError), ((1.5,), IndexError),
    ((slice(None, None, -1),), ValueError), ((ember.tensor([True, False, True]),), IndexError),
    ((ember.tensor([0.0]),), IndexError), (("a",), TypeError),
])
def test_getitem_errors(torch, key, exc):
    x = ember.zeros(2, 3)
    with pytest.raises(exc):
        x[key]
    if exc is not ValueError:
        with pytest.raises(exc):
            torch.zeros(2, 3)[to_torch(torch, key)]


# ------------------------------------------------------------------ writes


@st.composite
def values_for(draw, shape):
    kind = draw(st.sampled_from(["number", "same", "broadcast", "scalar_tensor", "bad"]))
    if kind == "number":
        return draw(st.one_of(st.integers(-5, 5), st.floats(-5, 5, width=32)))
    if kind == "scalar_tensor":
        return ember.tensor(draw(st.floats(-5, 5, width=32)))
    if kind == "same":
        return ember.from_numpy(np.full(shape, -7.0, dtype=np.float32))
    if kind == "broadcast" and shape:
        return ember.from_numpy(np.arange(shape[-1], dtype=np.float32) - 50)
    return ember.ones(7)


@SETTINGS
@given(data=st.data(), shape=shapes)
def test_setitem_matches_torch(torch, data, shape):
    a = base(shape)
    key = data.draw(keys(shape))
    x, tx = ember.from_numpy(a.copy()), torch.from_numpy(a.copy())
    view, verr = run(lambda: tx[to_torch(torch, key)])
    assume(verr is None)
    value = data.draw(values_for(tuple(view.shape)))
    _, err = run(lambda: x.__setitem__(key, value))
    _, terr = run(lambda: tx.__setitem__(to_torch(torch, key), to_torch(torch, value)))
    what = f"x{list(shape)}[{key!r}] = {value!r}"
    same_error(err, terr, what)
    if err is None and not _has_duplicates(tx, to_torch(torch, key)):
        np.testing.assert_array_equal(x.numpy(), tx.numpy(), err_msg=what)


def _has_duplicates(tx, tkey):
    """Writes to one element twice have no defined winner."""
    import torch
    iota = torch.arange(tx.numel()).view(tx.shape)
    pos = iota[tkey].reshape(-1)
    return pos.numel() != pos.unique().numel()


def test_setitem_cases(torch):
    a = base((3, 4))
    cases = [((slice(None), [0, 2]), 9.0), ((np.array([1, 0]),), ember.tensor([1.0, 2, 3, 4])),
             ((ember.tensor([[0], [2]]), ember.tensor([1, 3])), ember.tensor([[5.0], [6.0]])),
             ((ember.from_numpy(a > 4),), ember.tensor(-1.0)), ((Ellipsis, 1), 3),
             ((ember.tensor([1, 2]),), ember.tensor([[1, 2, 3, 4]], dtype=ember.float32)),
             ((Ellipsis, 0, Ellipsis), -2.0)]
    for key, value in cases:
        x, tx = ember.from_numpy(a.copy()), torch.from_numpy(a.copy())
        x[key] = value
        tx[to_torch(torch, key)] = to_torch(torch, value)
        np.testing.assert_array_equal(x.numpy(), tx.numpy(), err_msg=repr(key))


def test_setitem_errors(torch):
    for key, value, exc in [(([0, 1],), ember.ones(3), RuntimeError),
                            ((ember.zeros(3, 4) > 0,), ember.ones(2), RuntimeError),
                            (([5],), 1.0, IndexError), ((0,), "x", TypeError),
                            ((0,), [1.0], TypeError)]:
        x, tx = ember.zeros(3, 4), torch.zeros(3, 4)
        with pytest.raises(exc):
            x[key] = value
        with pytest.raises(exc):
            tx[to_torch(torch, key)] = to_torch(torch, value)


def test_setitem_bumps_version_and_keeps_dtype():
    x = ember.zeros(3, dtype=ember.int64)
    v = x._version
    x[[0, 2]] = 2.7
    assert x.tolist() == [2, 0, 2] and x._version > v
    x[x > 1] = ember.tensor(5.9)          # a mask and a 0-d value: masked_fill_, cast
    assert x.tolist() == [5, 0, 5]
    with pytest.raises(RuntimeError, match="dtypes match"):
        x[[0]] = ember.tensor([1.5])      # index_put_ wants self's dtype


# ------------------------------------------------------------------ index_put, autograd


@pytest.mark.parametrize("accumulate", [False, True])
def test_index_put_(torch, accumulate):
    a = base((4, 3))
    x, tx = ember.from_numpy(a.copy()), torch.from_numpy(a.copy())
    idx = ([1, 1, 3], [0, 0, 2]) if accumulate else ([1, 3], [0, 2])
    vals = np.arange(len(idx[0]), dtype=np.float32) + 10
    r = x.index_put_(tuple(ember.tensor(i) for i in idx), ember.from_numpy(vals), accumulate)
    tx.index_put_(tuple(torch.tensor(i) for i in idx), torch.from_numpy(vals), accumulate)
    assert r is x
    np.testing.assert_array_equal(x.numpy(), tx.numpy())
    out = ember.index_put(ember.from_numpy(a), (ember.tensor([0, 0]),), ember.ones(3),
                          accumulate=True)
    np.testing.assert_array_equal(out.numpy()[0], a[0] + 2)


def test_gradients_through_indexing(torch):
    a = np.random.default_rng(0).standard_normal((3, 4))
    keys_ = [(slice(None), [0, 2, 2]), ([2, 0],), (ember.from_numpy(a > 0),),
             ([[0], [1]], [1, 3]), (1, [0, 1])]
    for key in keys_:
        x = ember.from_numpy(a.copy()).requires_grad_()
        tx = torch.from_numpy(a.copy()).requires_grad_()
        (x[key] * 2).sum().backward()
        (tx[to_torch(torch, key)] * 2).sum().backward()
        np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), err_msg=repr(key))


def test_gradients_through_setitem(torch):
    a = np.random.default_rng(1).standard_normal((3, 4))
    for key in [(0,), (slice(None), [1, 3]), (ember.from_numpy(a > 0),), (Ellipsis, 2)]:
        w, tw = (ember.from_numpy(a.copy()).requires_grad_(),
                 torch.from_numpy(a.copy()).requires_grad_())
        v, tv = ember.tensor(3.0, dtype=ember.float64, requires_grad=True), \
            torch.tensor(3.0, dtype=torch.float64, requires_grad=True)
        z, tz = w * 2, tw * 2
        z[key] = v * v
        tz[to_torch(torch, key)] = tv * tv
        (z * z).sum().backward()
        (tz * tz).sum().backward()
        np.testing.assert_allclose(w.grad.numpy(), tw.grad.numpy(), err_msg=repr(key))
        np.testing.assert_allclose(v.grad.numpy(), tv.grad.numpy(), err_msg=repr(key))


def test_setitem_into_a_leaf_that_requires_grad():
    w = ember.zeros(3, requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf Variable"):
        w[[0]] = 1.0
    with ember.no_grad():
        w[[0]] = 1.0
    assert w.tolist() == [1.0, 0.0, 0.0]


def test_meta_tensors_index_by_shape():
    x = ember.empty(2, 3, 4, device="meta")
    assert tuple(x[[0, 1], :, [1, 2]].shape) == (2, 3)
    assert tuple(x[0, ember.tensor([1, 2])].shape) == (2, 4)
    with pytest.raises(NotImplementedError):
        x[ember.ones(2, 3, dtype=ember.bool)]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("d", [0, 1, 2])
def test_index_add_rows_match_ufunc_at_bit_for_bit(dtype, d):
    """index_add's C row loop (contiguous float operands) adds in ufunc.at's order:
    repeated and negative indices give NumPy's bits."""
    rng = np.random.default_rng(d)
    x = rng.standard_normal((4, 5, 6)).astype(dtype)
    shape = list(x.shape)
    shape[d] = 9
    src = rng.standard_normal(shape).astype(dtype)
    for idx in (rng.integers(-x.shape[d], x.shape[d], 9),
                rng.integers(0, 2, 9).astype(np.int32)):
        got = ember.from_numpy(x).index_add(d, ember.from_numpy(idx), ember.from_numpy(src))
        want = x.copy()
        key = [slice(None)] * 3
        key[d] = idx
        np.add.at(want, tuple(key), src)
        np.testing.assert_array_equal(got.numpy(), want)
