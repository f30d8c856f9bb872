"""ember.linalg and the legacy top-level forms against torch.linalg: values (up to the
sign freedom of factors), layouts, errors and gradients (compared with torch's autograd
on gauge-invariant losses), and a compiled use."""
import math

import numpy as np
import pytest

import ember

torch = pytest.importorskip("torch", reason="torch is the reference for linalg parity")


def _pair(shape, seed, dtype="float64", spd=False, sym=False):
    a = np.random.default_rng(seed).standard_normal(shape).astype(dtype)
    if spd:
        a = a @ np.swapaxes(a, -1, -2) + shape[-1] * np.eye(shape[-1], dtype=dtype)
    if sym:
        a = a + np.swapaxes(a, -1, -2)
    return ember.from_numpy(a.copy()), torch.from_numpy(a.copy())


def _close(e, t, tol=1e-10):
    np.testing.assert_allclose(e.detach().numpy(), t.detach().numpy(), rtol=tol, atol=tol)


def _grads(e_fn, t_fn, *pairs):
    eins = [ember.from_numpy(p[0].numpy().copy()).requires_grad_(True) for p in pairs]
    tins = [torch.from_numpy(p[1].numpy().copy()).requires_grad_(True) for p in pairs]
    e_fn(*eins).backward()
    t_fn(*tins).backward()
    for e, t in zip(eins, tins):
        _close(e.grad, t.grad, 1e-8)


SHAPES = [(3, 3), (2, 4, 4), (0, 3, 3), (1, 1)]


@pytest.mark.parametrize("shape", SHAPES)
def test_inv_det_slogdet_values_and_layout(shape):
    e, t = _pair(shape, 1)
    for ef, tf in ((ember.linalg.inv, torch.linalg.inv), (ember.linalg.det, torch.linalg.det),
                   (ember.inverse, torch.inverse), (ember.det, torch.det),
                   (ember.logdet, torch.logdet)):
        eo, to = ef(e), tf(t)
        assert tuple(eo.shape) == tuple(to.shape) and eo.stride() == to.stride(), ef
        _close(eo, to)
    es, ts = ember.linalg.slogdet(e), torch.linalg.slogdet(t)
    _close(es.sign, ts.sign)
    _close(es.logabsdet, ts.logabsdet)


def test_float32_and_errors_as_torch():
    e, t = _pair((3, 3), 2, "float32")
    _close(ember.linalg.inv(e), torch.linalg.inv(t), 1e-4)
    cases = [((3, 4), "float64", ember.linalg.inv, RuntimeError,
              "square matrices, but they are 3 by 4"),
             ((3,), "float64", ember.linalg.inv, RuntimeError, "at least 2 dimensions"),
             ((3, 3), "int64", ember.linalg.det, RuntimeError, "Expected a floating point"),
             ((3, 3), "float16", ember.linalg.inv, RuntimeError, "Low precision dtypes")]
    for shape, dt, fn, exc, msg in cases:
        x = ember.ones(shape, dtype=getattr(ember, dt))
        with pytest.raises(exc, match=msg):
            fn(x)


def test_singular_and_not_positive_definite_raise_linalg_error_naming_the_pivot():
    with pytest.raises(ember.linalg.LinAlgError, match=r"linalg.inv: The diagonal element 1 "
                       "is zero"):
        ember.linalg.inv(ember.zeros(3, 3))
    m = ember.tensor([[1.0, 2.0, 3.0], [2.0, 4.0, 6.0], [1.0, 0.0, 1.0]])
    try:
        torch.linalg.inv(torch.tensor(m.numpy()))
    except RuntimeError as te:
        with pytest.raises(ember.linalg.LinAlgError) as ee:
            ember.linalg.inv(m)
        assert str(ee.value) == str(te)
    with pytest.raises(ember.linalg.LinAlgError, match=r"\(Batch element 1\): The "
                       r"factorization could not be completed .* minor of order 2"):
        ember.linalg.cholesky(ember.tensor([[[1.0, 0.0], [0.0, 1.0]], [[1.0, 2.0], [2.0, 1.0]]]))
    assert issubclass(ember.linalg.LinAlgError, RuntimeError)
    with pytest.raises(ember.linalg.LinAlgError, match="singular"):
        ember.linalg.solve(ember.zeros(3, 3), ember.ones(3))


@pytest.mark.parametrize("left", [True, False])
def test_solve_values_layouts_and_broadcasting(left):
    A, tA = _pair((2, 3, 3), 3)
    for bshape in ((2, 3, 4), (3, 4)) if left else ((2, 4, 3),):
        B, tB = _pair(bshape, 4)
        eo, to = ember.linalg.solve(A, B, left=left), torch.linalg.solve(tA, tB, left=left)
        assert tuple(eo.shape) == tuple(to.shape)
        _close(eo, to)
    if left:
        b, tb = _pair((2, 3), 5)
        eo, to = ember.linalg.solve(A, b), torch.linalg.solve(tA, tb)
        assert tuple(eo.shape) == tuple(to.shape) and eo.stride() == to.stride()
        _close(eo, to)
        _grads(lambda a, b: (ember.linalg.solve(a, b) ** 2).sum(),
               lambda a, b: (torch.linalg.solve(a, b) ** 2).sum(), (A, tA), (b, tb))
    B, tB = _pair((2, 3, 4) if left else (2, 4, 3), 6)
    _grads(lambda a, b: (ember.linalg.solve(a, b, left=left) ** 3).sum(),
           lambda a, b: (torch.linalg.solve(a, b, left=left) ** 3).sum(), (A, tA), (B, tB))


def test_inv_det_slogdet_gradients():
    A, tA = _pair((2, 3, 3), 7)
    _grads(lambda a: (ember.linalg.inv(a) ** 2).sum(), lambda a: (torch.linalg.inv(a) ** 2).sum(),
           (A, tA))
    _grads(lambda a: ember.linalg.det(a).sum(), lambda a: torch.linalg.det(a).sum(), (A, tA))
    _grads(lambda a: ember.linalg.slogdet(a).logabsdet.sum(),
           lambda a: torch.linalg.slogdet(a).logabsdet.sum(), (A, tA))


def test_det_gradient_of_a_singular_matrix_is_the_adjugate():
    # torch 2.13 gives zeros here; the derivative of det is the adjugate's transpose,
    # which finite differences confirm (det is a polynomial: central differences are
    # exact up to rounding)
    a = np.array([[1.0, 2.0, 3.0], [2.0, 4.0, 6.0], [1.0, 0.0, 1.0]])
    e = ember.from_numpy(a.copy()).requires_grad_(True)
    ember.linalg.det(e).backward()
    fd = np.zeros_like(a)
    for i in range(3):
        for j in range(3):
            d = np.zeros_like(a)
            d[i, j] = 1e-4
            fd[i, j] = (np.linalg.det(a + d) - np.linalg.det(a - d)) / 2e-4
    np.testing.assert_allclose(e.grad.numpy(), fd, atol=1e-8)
    np.testing.assert_allclose(fd, [[4, 4, -4], [-2, -2, 2], [0, 0, 0]], atol=1e-8)


@pytest.mark.parametrize("upper", [False, True])
def test_cholesky(upper):
    A, tA = _pair((2, 4, 4), 8, spd=True)
    eo, to = ember.linalg.cholesky(A, upper=upper), torch.linalg.cholesky(tA, upper=upper)
    assert eo.stride() == to.stride()
    _close(eo, to)
    _close(ember.cholesky(A[0], upper), torch.cholesky(tA[0], upper))
    W, tW = _pair((2, 4, 4), 9)
    # the loss reads the factor through a symmetric input, as users build one
    _grads(lambda a, w: (ember.linalg.cholesky(a @ a.mT + 4 * ember.eye(4, dtype=ember.float64),
                                               upper=upper) * w).sum(),
           lambda a, w: (torch.linalg.cholesky(a @ a.mT + 4 * torch.eye(4, dtype=torch.float64),
                                               upper=upper) * w).sum(), (W, tW), (W, tW))


@pytest.mark.parametrize("shape,mode", [((5, 3), "reduced"), ((3, 3), "reduced"),
                                        ((3, 5), "reduced"), ((2, 5, 3), "complete"),
                                        ((3, 5), "complete"), ((4, 3), "r")])
def test_qr(shape, mode):
    A, tA = _pair(shape, 10)
    (Q, R), (tQ, tR) = ember.linalg.qr(A, mode), torch.linalg.qr(tA, mode)
    for e, t in ((Q, tQ), (R, tR)):
        assert tuple(e.shape) == tuple(t.shape) and e.stride() == t.stride()
    # LAPACK's Householder QR: the same factors up to the signs of R's rows
    signs = np.sign(np.diagonal(R.numpy(), axis1=-2, axis2=-1)) * \
        np.sign(np.diagonal(tR.numpy(), axis1=-2, axis2=-1))
    k = signs.shape[-1]
    np.testing.assert_allclose(R.numpy()[..., :k, :] * signs[..., :, None], tR.numpy()[..., :k, :],
                               atol=1e-10)
    if mode == "r":
        return
    np.testing.assert_allclose(Q.numpy()[..., :k] * signs[..., None, :], tQ.numpy()[..., :k],
                               atol=1e-10)
    if mode == "complete" and shape[-2] > shape[-1]:
        return
    W, tW = _pair(tuple(R.shape), 11)
    # sign-invariant loss: Q R = A's reconstruction and R^T R
    _grads(lambda a, w: ((ember.linalg.qr(a, mode).R.mT @ ember.linalg.qr(a, mode).R) ** 2).sum()
           + (ember.linalg.qr(a, mode).Q @ (ember.linalg.qr(a, mode).R * w)).sum(),
           lambda a, w: ((torch.linalg.qr(a, mode).R.mT @ torch.linalg.qr(a, mode).R) ** 2).sum()
           + (torch.linalg.qr(a, mode).Q @ (torch.linalg.qr(a, mode).R * w)).sum(),
           (A, tA), (W, tW))


@pytest.mark.parametrize("shape", [(5, 3), (3, 5), (2, 4, 4)])
def test_svd_values_and_gradients(shape):
    A, tA = _pair(shape, 12)
    e, t = ember.linalg.svd(A, full_matrices=False), torch.linalg.svd(tA, full_matrices=False)
    _close(e.S, t.S)
    _close(e.U @ (e.S.unsqueeze(-1) * e.Vh), tA)
    for x, y in ((e.U, t.U), (e.Vh, t.Vh)):
        assert tuple(x.shape) == tuple(y.shape) and x.stride() == y.stride()
    _close(ember.linalg.svdvals(A), torch.linalg.svdvals(tA))
    k = min(shape[-2:])
    w = np.random.default_rng(13).standard_normal(k)

    def loss(lib, linalg, a):
        U, S, Vh = linalg.svd(a, full_matrices=False)
        wt = lib.from_numpy(w.copy())
        # gauge-invariant in U and Vh: U diag(w) Vh, and the singular values
        return ((U * wt) @ Vh).pow(2).sum() + (U * wt @ Vh).sum() + (S ** 3).sum()
    _grads(lambda a: loss(ember, ember.linalg, a), lambda a: loss(torch, torch.linalg, a),
           (A, tA))
    _grads(lambda a: ember.linalg.svdvals(a).sum(), lambda a: torch.linalg.svdvals(a).sum(),
           (A, tA))


def test_legacy_svd_returns_v():
    A, tA = _pair((4, 3), 14)
    U, S, V = ember.svd(A)
    tU, tS, tV = torch.svd(tA)
    assert tuple(V.shape) == tuple(tV.shape)
    _close(S, tS)
    _close(U @ (S.unsqueeze(-1) * V.mT), tA)


def test_eigh_values_and_gradients():
    A, tA = _pair((2, 4, 4), 15, sym=True)
    e, t = ember.linalg.eigh(A), torch.linalg.eigh(tA)
    _close(e.eigenvalues, t.eigenvalues)
    _close(ember.linalg.eigvalsh(A, "U"), torch.linalg.eigvalsh(tA, "U"))
    assert e.eigenvectors.stride() == t.eigenvectors.stride()
    w = np.random.default_rng(16).standard_normal(4)

    def loss(lib, linalg, a):
        L, V = linalg.eigh(a)
        wt = lib.from_numpy(w.copy())
        return ((V * wt) @ V.mT).pow(2).sum() + (L ** 2 * wt).sum()
    _grads(lambda a: loss(ember, ember.linalg, a), lambda a: loss(torch, torch.linalg, a),
           (A, tA))


@pytest.mark.parametrize("ord", [None, "fro", "nuc", 2, -2, 1, -1, math.inf, -math.inf])
def test_matrix_norms(ord):
    A, tA = _pair((2, 3, 4), 17)
    _close(ember.linalg.matrix_norm(A, "fro" if ord is None else ord),
           torch.linalg.matrix_norm(tA, "fro" if ord is None else ord))
    _close(ember.linalg.norm(A[0], ord), torch.linalg.norm(tA[0], ord))
    _close(ember.linalg.matrix_norm(A, "fro" if ord is None else ord, dim=(0, 2), keepdim=True),
           torch.linalg.matrix_norm(tA, "fro" if ord is None else ord, dim=(0, 2), keepdim=True))
    if ord is not None:
        _grads(lambda a: ember.linalg.matrix_norm(a, ord).sum(),
               lambda a: torch.linalg.matrix_norm(a, ord).sum(), (A, tA))


def test_vector_norm_and_legacy_norm_nuc():
    A, tA = _pair((3, 4), 18)
    for o in (2, 1, 3.5, math.inf, 0):
        _close(ember.linalg.vector_norm(A, o), torch.linalg.vector_norm(tA, o))
        _close(ember.linalg.vector_norm(A, o, dim=1, keepdim=True),
               torch.linalg.vector_norm(tA, o, dim=1, keepdim=True))
    _close(ember.norm(A, p="nuc"), torch.norm(tA, p="nuc"))
    _close(A.norm(p="nuc"), tA.norm(p="nuc"))
    _close(A.norm(), tA.norm())


def test_pinv_matrix_rank_matrix_power():
    A, tA = _pair((5, 3), 19)
    _close(ember.linalg.pinv(A), torch.linalg.pinv(tA))
    _close(ember.pinverse(A), torch.pinverse(tA))
    low = ember.from_numpy(A.numpy() @ np.ones((3, 3)))
    assert int(ember.linalg.matrix_rank(low)) == int(torch.linalg.matrix_rank(
        torch.from_numpy(low.numpy())))
    S, tS = _pair((4, 4), 20, sym=True)
    _close(ember.linalg.pinv(S, hermitian=True), torch.linalg.pinv(tS, hermitian=True))
    B, tB = _pair((2, 3, 3), 21)
    for n in (0, 1, 2, 5, -3):
        _close(ember.linalg.matrix_power(B, n), torch.linalg.matrix_power(tB, n), 1e-8)
        _close(B.matrix_power(n), tB.matrix_power(n), 1e-8)
    _grads(lambda a: ember.linalg.pinv(a).sum(), lambda a: torch.linalg.pinv(a).sum(), (A, tA))


def test_trace_diag_kron_tensordot_cross():
    A, tA = _pair((3, 4), 22)
    _close(ember.trace(A), torch.trace(tA))
    _close(A.trace(), tA.trace())
    for k in (0, 1, -2):
        _close(ember.diag(A, k), torch.diag(tA, k))
    v, tv = _pair((3,), 23)
    for k in (0, 2, -1):
        _close(ember.diag(v, k), torch.diag(tv, k))
    B, tB = _pair((2, 2), 24)
    _close(ember.kron(A, B), torch.kron(tA, tB))
    C, tC = _pair((4, 5, 2), 25)
    for dims in (1, ([1], [0]), ([0, 1], [1, 0]) if False else 1):
        _close(ember.tensordot(A, C, dims), torch.tensordot(tA, tC, dims))
    D, tD = _pair((3, 4, 5), 26)
    E, tE = _pair((4, 5, 6), 27)
    _close(ember.tensordot(D, E, 2), torch.tensordot(tD, tE, 2))
    _close(ember.tensordot(D, E, ([1, 2], [0, 1])), torch.tensordot(tD, tE, ([1, 2], [0, 1])))
    x, tx = _pair((4, 3), 28)
    y, ty = _pair((4, 3), 29)
    _close(ember.linalg.cross(x, y), torch.linalg.cross(tx, ty))
    _close(ember.cross(x, y), torch.cross(tx, ty, dim=1))
    _grads(lambda a, b: ember.linalg.cross(a, b).pow(2).sum(),
           lambda a, b: torch.linalg.cross(a, b).pow(2).sum(), (x, tx), (y, ty))
    _grads(lambda a, b: ember.kron(a, b).pow(2).sum(), lambda a, b: torch.kron(a, b).pow(2).sum(),
           (A, tA), (B, tB))
    _grads(lambda a: ember.trace(a) * 3, lambda a: torch.trace(a) * 3, (A, tA))


@pytest.mark.parametrize("backend", ["eager", "aot_eager", "llvm"])
def test_compiled_linalg_matches_eager(backend):
    A, _ = _pair((3, 3), 30, spd=True)
    B, _ = _pair((3, 2), 31)

    def f(a, b):
        x = ember.linalg.solve(a, b)
        L = ember.linalg.cholesky(a)
        Q, R = ember.linalg.qr(a)
        w = ember.linalg.eigvalsh(a)
        return (x.sum() + ember.linalg.det(a) + L.sum() + ember.linalg.svdvals(a).sum() +
                ember.linalg.inv(a).sum() + (Q @ R).sum() + w.sum() +
                ember.linalg.slogdet(a).logabsdet + ember.trace(a) +
                ember.linalg.norm(a, "nuc") + ember.linalg.pinv(b).sum())

    a1 = ember.from_numpy(A.numpy().copy()).requires_grad_(True)
    a2 = ember.from_numpy(A.numpy().copy()).requires_grad_(True)
    want = f(a1, B)
    want.backward()
    explained = ember._dynamo.explain(f)(a2, B)
    assert (explained.graph_count, explained.graph_break_count) == (1, 0)
    got = ember.compile(f, backend=backend, fullgraph=True)(a2, B)
    got.backward()
    _close(got, want, 1e-10)
    _close(a2.grad, a1.grad, 1e-9)
