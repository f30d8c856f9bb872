"""nn.functional.ctc_loss and nn.CTCLoss against torch (values and gradients for every
reduction, tensor and list lengths, unbatched input, zero_infinity), the gradient through
log_softmax against finite differences, strided targets, and the C kernels' results
identical at 1 and 2 threads."""
import numpy as np
import pytest

import ember
from ember.autograd import gradcheck

torch = pytest.importorskip("torch", reason="torch is the reference")


def _np(t):
    return t.detach().numpy()


def _case(seed, T=12, N=4, C=6, S=5):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((T, N, C))
    tl = rng.integers(1, S + 1, N)
    il = rng.integers(2 * S + 1, T + 1, N)
    tg = rng.integers(1, C, (N, S))
    return x, tg, il, tl


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("form", ["padded, tensor lengths", "concatenated, lists",
                                  "unbatched", "blank last"])
def test_values_and_gradients_match_torch(reduction, form):
    x, tg, il, tl = _case(1)
    blank = 0
    if form == "blank last":
        blank, tg = 5, tg - 1

    def run(lib):
        X = lib.from_numpy(x.copy()).requires_grad_()
        lp = X.log_softmax(-1)
        if form == "padded, tensor lengths":
            args = (lib.from_numpy(tg.copy()), lib.from_numpy(il.copy()),
                    lib.from_numpy(tl.copy()))
        elif form == "unbatched":
            lp = lp[:, 0]
            args = (lib.from_numpy(tg[0, :tl[0]].copy()), lib.tensor(int(il[0])),
                    lib.tensor(int(tl[0])))
        else:
            cat = np.concatenate([tg[b, :tl[b]] for b in range(len(tl))])
            args = (lib.from_numpy(cat), tuple(int(v) for v in il), [int(v) for v in tl])
        loss = lib.nn.functional.ctc_loss(lp, *args, blank=blank, reduction=reduction)
        (loss * loss).sum().backward()
        return _np(loss), _np(X.grad)
    got, want = run(ember), run(torch)
    for a, b in zip(got, want):
        assert a.shape == b.shape
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)


def test_gradient_through_log_softmax_is_the_derivative():
    x, tg, il, tl = _case(2, T=7, N=2, C=4, S=2)
    X = ember.from_numpy(x).requires_grad_()

    def f(X):
        return ember.nn.functional.ctc_loss(X.log_softmax(2), ember.from_numpy(tg),
                                            [int(v) for v in il], [int(v) for v in tl],
                                            reduction="sum")
    assert gradcheck(f, [X], eps=1e-6, atol=1e-6, rtol=1e-5)


def test_zero_infinity_matches_torch():
    x, tg, il, tl = _case(3, T=7, N=3, C=4, S=3)
    x = x[:5]
    il = np.array([5, 2, 5])          # sample 1 cannot emit 3 labels in 2 frames
    tl = np.array([3, 3, 2])
    for zi in (False, True):
        outs = []
        for lib in (ember, torch):
            X = lib.from_numpy(x.copy()).requires_grad_()
            loss = lib.nn.CTCLoss(zero_infinity=zi, reduction="none")(
                X.log_softmax(2), lib.from_numpy(tg), lib.from_numpy(il), lib.from_numpy(tl))
            loss.sum().backward()
            outs.append((_np(loss), _np(X.grad)))
        assert np.isinf(outs[0][0][1]) != zi
        for a, b in zip(*outs):
            np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12, equal_nan=True)


def test_strided_concatenated_targets_read_as_contiguous():
    x, tg, il, tl = _case(4)
    cat = np.concatenate([tg[b, :tl[b]] for b in range(len(tl))])
    lp = ember.from_numpy(x).log_softmax(2)
    strided = ember.stack([ember.from_numpy(cat), ember.from_numpy(cat * 0)], 1)[:, 0]
    assert not strided.is_contiguous()
    a = ember.nn.functional.ctc_loss(lp, strided, list(il), list(tl), reduction="none")
    b = ember.nn.functional.ctc_loss(lp, ember.from_numpy(cat), list(il), list(tl),
                                     reduction="none")
    np.testing.assert_array_equal(_np(a), _np(b))


def test_module_and_errors_are_torchs():
    m = ember.nn.CTCLoss(blank=2, reduction="sum", zero_infinity=True)
    assert (m.blank, m.reduction, m.zero_infinity) == (2, "sum", True)
    lp = ember.randn(4, 1, 3).log_softmax(2)
    for lib, L in ((ember, lp), (torch, torch.from_numpy(_np(lp)))):
        with pytest.raises(ValueError, match="bad is not a valid value for reduction"):
            lib.nn.functional.ctc_loss(L, lib.tensor([[1]]), [4], [1], reduction="bad")
        with pytest.raises(TypeError):     # lengths as one list and one tensor
            lib.nn.functional.ctc_loss(L, lib.tensor([[1]]), [4], lib.tensor([1]))
        with pytest.raises(RuntimeError, match="blank must be in label range"):
            lib.nn.functional.ctc_loss(L, lib.tensor([[1]]), [4], [1], blank=3)


def test_identical_at_one_and_two_threads():
    x, tg, il, tl = _case(5, T=40, N=16, C=20, S=10)
    before = ember.get_num_threads()
    outs = []
    try:
        for threads in (1, 2):
            ember.set_num_threads(threads)
            X = ember.from_numpy(x.astype(np.float32)).requires_grad_()
            loss = ember.nn.functional.ctc_loss(X.log_softmax(2), ember.from_numpy(tg),
                                                list(il), list(tl))
            loss.backward()
            outs.append((_np(loss), _np(X.grad)))
    finally:
        ember.set_num_threads(before)
    for a, b in zip(*outs):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("backend", ["aot_eager", "llvm"])
def test_compiled_loss_and_gradient_equal_eager(backend):
    """The prims trace (extern steps under llvm) and the mean's target lengths are graph
    values: no fallback, eager's loss and gradient."""
    from ember.capture import counters
    x, tg, il, tl = _case(6, T=9, N=3, C=5, S=3)

    def h(x, tg):
        return ember.nn.functional.ctc_loss(x.log_softmax(2), tg, list(il), list(tl))
    ember.compiler.reset()
    before = sum(counters["backend_fallback"].values())
    grads = []
    for fn in (ember.compile(h, backend=backend), h):
        X = ember.from_numpy(x.astype(np.float32)).requires_grad_()
        loss = fn(X, ember.from_numpy(tg))
        loss.backward()
        grads.append((_np(loss), _np(X.grad)))
    assert sum(counters["backend_fallback"].values()) == before
    for a, b in zip(*grads):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("form", ["int64 tensors", "int32 tensors", "tuples", "lists",
                                  "2-d tensors"])
def test_lengths_as_tensors_or_ints_in_both_entry_points(form):
    """ctc_loss and _ctc_loss take the lengths as integer tensors (the .Tensor overloads)
    or as ints in tuples or lists, with torch's values."""
    x, tg, il, tl = _case(4)

    def lengths(lib):
        if form == "tuples":
            return tuple(int(v) for v in il), tuple(int(v) for v in tl)
        if form == "lists":
            return [int(v) for v in il], [int(v) for v in tl]
        dt = lib.int32 if form == "int32 tensors" else lib.int64
        a, b = lib.tensor(il.tolist(), dtype=dt), lib.tensor(tl.tolist(), dtype=dt)
        return (a.reshape(1, -1), b.reshape(1, -1)) if form == "2-d tensors" else (a, b)
    got, want = ([_np(v) for v in (lib.nn.functional.ctc_loss(
        lib.from_numpy(x).log_softmax(-1), lib.from_numpy(tg), *lengths(lib),
        reduction="none"), lib._ctc_loss(lib.from_numpy(x).log_softmax(-1),
                                         lib.from_numpy(tg), *lengths(lib))[0])]
        for lib in (ember, torch))
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("bad", ["float input_lengths", "bool input_lengths",
                                 "float target_lengths", "too many", "negative", "too long",
                                 "negative target", "tensor and list", "float list"])
def test_bad_lengths_raise_torchs_errors(bad):
    x, tg, il, tl = _case(5, N=2)

    def args(lib):
        I, T = lib.tensor(il.tolist()), lib.tensor(tl.tolist())
        return {"float input_lengths": (I.double(), T), "bool input_lengths": (I > 0, T),
                "float target_lengths": (I, T.double()),
                "too many": (lib.tensor(il.tolist() + [3]), T),
                "negative": (lib.tensor([int(il[0]), -1]), T),
                "too long": (lib.tensor([int(il[0]), 13]), T),
                "negative target": ([int(v) for v in il], [int(tl[0]), -2]),
                "tensor and list": (I, [int(v) for v in tl]),
                "float list": ([float(v) for v in il], [int(v) for v in tl])}[bad]
    errs = []
    for lib in (ember, torch):
        for call in (lambda: lib.nn.functional.ctc_loss(
                         lib.from_numpy(x).log_softmax(-1), lib.from_numpy(tg), *args(lib)),
                     lambda: lib._ctc_loss(lib.from_numpy(x).log_softmax(-1),
                                           lib.from_numpy(tg), *args(lib))):
            with pytest.raises(Exception) as e:
                call()
            errs.append(e.value)
    for mine, theirs in zip(errs[:2], errs[2:]):
        assert type(mine) is type(theirs), (mine, theirs)
        if isinstance(theirs, RuntimeError):
            assert str(theirs) in str(mine)
