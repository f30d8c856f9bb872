"""Autograd through in-place updates of views (csrc/autograd/view.c): the base's history
is rebased onto CopySlices, the updated view becomes a view of the new base, and views
made earlier get a new grad_fn when next used. Values and gradients are compared with
PyTorch (when installed) and with finite differences (ember.autograd.gradcheck)."""
import numpy as np
import pytest

import ember

# Each case is written once against a library `lib` (ember or torch) and two leaves a, b
# of shape (3, 4): it returns the output (or a tuple of outputs).


def select_mul_(lib, a, b):
    y = a * 1
    y[0].mul_(b[0])
    return y * y


def slice_with_steps(lib, a, b):
    y = a * 1
    y[1:, ::2].mul_(2)
    y[::2, 1::2].add_(b[::2, 1::2])
    return y.sin()


def chain_of_views(lib, a, b):
    y = a * 1
    y[1:][0][::2].mul_(b[0, :2])
    return y * b


def transpose(lib, a, b):
    y = a * 1
    y.t().mul_(b.t())
    return y.exp()


def transpose_then_select(lib, a, b):
    y = a * 1
    y.transpose(0, 1)[2].sub_(b[:, 1] * 3)
    return y * y


def view_flat(lib, a, b):
    y = a * 1
    y.view(-1)[3:9].mul_(b.reshape(-1)[:6])
    return y.sin()


def reshape_view(lib, a, b):
    y = a * 1
    y.reshape(2, 6)[1].add_(b.reshape(-1)[:6] * 2)
    return y * b


def unsqueeze_squeeze(lib, a, b):
    y = a * 1
    y.unsqueeze(0)[0, 1].mul_(b[1])
    y[2].unsqueeze(1).squeeze(1).div_(b[2].exp())
    return y


def mask_assign_scalar(lib, a, b):
    y = a * 1
    y[b > 0] = 0
    return y * y


def mask_assign_tensor(lib, a, b):
    y = a * b
    y[a > 0] = b[0, 0] * 2
    return y.exp()


def index_assign(lib, a, b):
    y = a * 1
    y[[0, 2]] = b[:2] * 3
    return y * y


def setitem_slices(lib, a, b):
    y = a.sin()
    y[:, 1] = b[:, 2]
    y[1:, 2:] = b[:2, :2] + y[1:, :2]
    return y


def repeated_updates(lib, a, b):
    y = a.sin()
    y[0] *= 2
    y[0] *= b[0]
    y[:, 1] += y[:, 2]
    y[1].add_(y[2])
    return y


def views_made_before(lib, a, b):
    y = a * 1
    v = y[0]
    w = y.t()
    u = y[:, 1:3]
    y.mul_(b)
    return v * 2, w.exp(), u.sin()


def view_made_before_a_sibling_update(lib, a, b):
    y = a * 1
    col = y[:, 1]
    y[1].add_(b[1])
    return col * col, y


def broadcast_operand(lib, a, b):
    y = a * 1
    y[:, 1:3].add_(b[0, 1:3])
    y[1:].mul_(b[2])
    return y * y


def through_expand(lib, a, b):
    r = a.sum(0) * 1
    r.expand(3, 4)[1].mul_(b[0])      # writes r through an expand (no inverse view)
    return r * b


def mixed_dtypes(lib, a, b):
    y = (a * 1).float()
    y[0].add_(b[0])                   # float64 into a float32 view
    return y.double() * b


def base_without_grad(lib, a, b):
    z = lib.zeros(5, 4, dtype=a.dtype)
    z[1:4] = a
    z[0].add_(b[0])
    return z.exp()


CASES = [select_mul_, slice_with_steps, chain_of_views, transpose, transpose_then_select,
         view_flat, reshape_view, unsqueeze_squeeze, mask_assign_scalar, mask_assign_tensor,
         index_assign, setitem_slices, repeated_updates, views_made_before,
         view_made_before_a_sibling_update, broadcast_operand, through_expand,
         mixed_dtypes, base_without_grad]


def _data(seed=0):
    g = np.random.default_rng(seed)
    return g.standard_normal((3, 4)), g.standard_normal((3, 4))


def _outs(r):
    return list(r) if isinstance(r, tuple) else [r]


def _run(lib, case, arrays, tangents):
    leaves = [lib.tensor(x.copy(), requires_grad=True) for x in arrays]
    outs = _outs(case(lib, *leaves))
    lib.autograd.backward(outs, [lib.tensor(t) for t in tangents])
    return ([o.detach().numpy() for o in outs],
            [None if t.grad is None else t.grad.numpy() for t in leaves])


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.__name__)
def test_values_and_gradients_match_pytorch(case, torch):
    arrays = _data()
    with ember.no_grad():
        shapes = [tuple(o.shape) for o in _outs(case(ember, *map(ember.tensor, arrays)))]
    g = np.random.default_rng(1)
    tangents = [g.standard_normal(s) for s in shapes]
    got, got_grads = _run(ember, case, arrays, tangents)
    want, want_grads = _run(torch, case, arrays, tangents)
    for x, w in zip(got, want):
        np.testing.assert_allclose(x, w, rtol=1e-12, atol=1e-12)
    for x, w in zip(got_grads, want_grads):
        assert (x is None) == (w is None)
        if x is not None:
            np.testing.assert_allclose(x, w, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("case", [c for c in CASES if c is not mixed_dtypes],
                         ids=lambda c: c.__name__)   # (finite differences need float64)
def test_gradients_match_finite_differences(case):
    a, b = (ember.tensor(x, requires_grad=True) for x in _data(2))
    assert ember.autograd.gradcheck(lambda a, b: case(ember, a, b), (a, b))


@pytest.mark.parametrize("case", [select_mul_, transpose, mask_assign_tensor],
                         ids=lambda c: c.__name__)
def test_second_derivatives_match_pytorch(case, torch):
    arrays = _data(3)

    def second(lib):
        a, b = (lib.tensor(x.copy(), requires_grad=True) for x in arrays)
        out = sum((o * o).sum() for o in _outs(case(lib, a, b)))
        ga, gb = lib.autograd.grad(out, (a, b), create_graph=True)
        (ga.sin().sum() + (gb * gb).sum()).backward()
        return a.grad.numpy(), b.grad.numpy()

    for x, w in zip(second(ember), second(torch)):
        np.testing.assert_allclose(x, w, rtol=1e-10, atol=1e-10)


# ------------------------------------------------------------------ the graph's shape

def test_the_base_hangs_from_copy_slices_and_the_view_from_it(torch):
    for lib in (ember, torch):
        a = lib.ones(3, 4, dtype=lib.float64, requires_grad=True)
        y = a * 1
        v = y[0]
        v.mul_(2)
        assert y.grad_fn.name().endswith("CopySlices")
        assert v.grad_fn.next_functions[0][0] is y.grad_fn


@pytest.mark.parametrize("shape", [(0,), (3,)])
def test_a_second_backward_through_copy_slices_raises_as_pytorch(shape, torch):
    """Found by the fuzzer: CopySlices frees what its in-place op's node saved, so a
    second backward raises as PyTorch's does (and as a compiled graph's does); with
    retain_graph it runs again."""
    for lib in (ember, torch):
        x = lib.ones(shape, dtype=lib.float64, requires_grad=True)
        y = lib.zeros_like(x)
        y[0:].remainder_(x)
        y.sum().backward()
        with pytest.raises(RuntimeError, match="backward through the graph a second time"):
            y.sum().backward()
        y = lib.zeros_like(x)
        y[0:].mul_(x)
        y.sum().backward(retain_graph=True)
        y.sum().backward()
        np.testing.assert_array_equal(x.grad.numpy(), np.zeros(shape))


def test_a_view_made_earlier_gets_a_new_grad_fn_when_used():
    a = ember.ones(3, 4, dtype=ember.float64, requires_grad=True)
    y = a * 1
    v = y[0]
    before = v.grad_fn
    y.mul_(3)
    assert v.grad_fn is not before
    assert v.grad_fn.next_functions[0][0] is y.grad_fn
    v.sum().backward()
    np.testing.assert_array_equal(a.grad.numpy(), np.r_[np.full((1, 4), 3.0),
                                                        np.zeros((2, 4))])


def test_a_base_without_grad_requires_grad_after_a_view_is_written_with_one():
    x = ember.ones(4, dtype=ember.float64, requires_grad=True)
    z = ember.zeros(2, 4, dtype=ember.float64)
    row = z[1]
    assert not z.requires_grad
    row.copy_(x * 5)
    assert z.requires_grad and z.grad_fn.name() == "CopySlices"
    z.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.full(4, 5.0))


# ------------------------------------------------------------------ PyTorch's refusals

def test_views_of_leaves_are_refused(torch):
    for code in ("leaf[0].add_(1)", "leaf.t().mul_(2)", "leaf.view(-1)[1:].zero_()",
                 "leaf[1] = 3.0"):
        for lib in (ember, torch):
            leaf = lib.ones(3, 2, requires_grad=True)
            with pytest.raises(RuntimeError, match="a view of a leaf Variable that requires "
                                                   "grad is being used in an in-place"):
                exec(code, {"leaf": leaf})
    leaf = ember.ones(3, 2, requires_grad=True)
    with pytest.raises(RuntimeError, match="(^|: )a leaf Variable that requires grad"):
        leaf.add_(1)
    with ember.no_grad():
        leaf[0].add_(1)      # not differentiated: allowed
    assert leaf.tolist() == [[2.0, 2.0], [1.0, 1.0], [1.0, 1.0]]


def test_a_view_made_in_no_grad_mode_cannot_be_updated_with_grad(torch):
    for lib in (ember, torch):
        a = lib.ones(3, requires_grad=True)
        y = a * 1
        with lib.no_grad():
            v = y[:2]
        with pytest.raises(RuntimeError, match="A view was created in no_grad mode and is "
                                               "being modified inplace with grad mode"):
            v.mul_(2)


def test_an_input_the_update_changes_is_found_modified(torch):
    """a.mul_(a) saves a, which the write changes: backward refuses, as PyTorch's does."""
    for lib in (ember, torch):
        leaf = lib.ones(3, requires_grad=True)
        a = leaf * 2
        a[:1].mul_(a[1:2])
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            a.sum().backward()
        b = leaf * 2
        b.mul_(b)
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            b.sum().backward()
