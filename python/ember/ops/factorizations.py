"""Matrix factorizations (ember.linalg's prims): inverse, solve, determinant, Cholesky,
QR, SVD and the symmetric eigendecomposition.

Each is a prim whose eager kernel calls NumPy's LAPACK in float64 or float32 over the
batch, laying results out as PyTorch's kernels do (each matrix column-major), and whose
gradient is written with ember ops (so AOT autograd traces it; compiled graphs run the
factorizations as extern steps). Checks and messages are PyTorch's; a matrix LAPACK
cannot factor raises LinAlgError (a RuntimeError) naming the pivot or minor, as
PyTorch's do. The functions users call (ember.linalg.*) are in ember/linalg.py.
"""
import numpy as np

from .. import _C
from ..compiler.lowerings import extern
from . import api as O
from . import meta as M
from .registry import CUSTOM, op


class LinAlgError(RuntimeError):
    """A matrix the factorization cannot handle (singular, not positive-definite)."""


# ------------------------------------------------------------------ checks and layout


def check_matrices(name, A, square=True, what="A", kernel=None, any_dtype=False):
    """PyTorch's checks of a linalg function's matrices. kernel: the LAPACK kernel whose
    missing float16/bfloat16 (any_dtype: every non-float dtype) version raises
    NotImplementedError in PyTorch, before (or instead of) the dtype check."""
    if A.ndim < 2:
        raise RuntimeError(f"{name}: The input tensor {what} must have at least 2 dimensions.")
    low = A.dtype in (_C.float16, _C.bfloat16)
    if kernel is not None and (low or (any_dtype and not A.is_floating_point())):
        if A.numel() == 0:         # PyTorch calls no kernel
            return
        raise NotImplementedError(f"\"{kernel}\" not implemented for "
                                  f"'{A.dtype._torch_name}'")
    if not A.is_floating_point():
        raise RuntimeError(f"{name}: Expected a floating point or complex tensor as input. "
                           f"Got {A.dtype._torch_name}")
    if low:
        raise RuntimeError(f"{name}: Low precision dtypes not supported. "
                           f"Got {A.dtype._torch_name}")
    if square and A.shape[-1] != A.shape[-2]:
        raise RuntimeError(f"{name}: {what} must be batches of square matrices, but they "
                           f"are {A.shape[-2]} by {A.shape[-1]} matrices")


def _np(t):
    return t.detach().numpy()


def _colmajor(a):
    """a with each matrix laid out column-major (batches C-ordered), as LAPACK leaves
    PyTorch's results."""
    a = np.asarray(a)
    if a.ndim < 2:
        return np.array(a, order="C")
    return np.ascontiguousarray(np.swapaxes(a, -1, -2)).swapaxes(-1, -2)


def _out(a, dtype):
    """A result of matrices (column-major each); NumPy gives empty arrays zero strides,
    so those are made here."""
    a = np.asarray(a, dtype=dtype.numpy_dtype)
    if a.size == 0:
        if a.ndim < 2:
            return O.empty(list(a.shape), dtype=dtype)
        shape = list(a.shape[:-2]) + [a.shape[-1], a.shape[-2]]
        return O.transpose(O.empty(shape, dtype=dtype), -1, -2)
    return _C.from_numpy(_colmajor(a))


def _vec(a, dtype):
    a = np.asarray(a, dtype=dtype.numpy_dtype)
    if a.size == 0:
        return O.empty(list(a.shape), dtype=dtype)
    return _C.from_numpy(np.array(a, order="C"))


def _per_matrix(name, a, fn):
    """fn over every matrix of a (..., m, n); on a LAPACK failure LinAlgError with
    PyTorch's '(Batch element k): ' prefix for batches, the message from fn's
    ValueError."""
    batch = a.shape[:-2]
    outs = None
    for k, idx in enumerate(np.ndindex(*batch)):
        try:
            r = fn(a[idx])
        except _Failed as e:
            prefix = f"(Batch element {k}): " if batch else ""
            raise LinAlgError(f"{name}: {prefix}{e}") from None
        r = r if isinstance(r, tuple) else (r,)
        if outs is None:
            outs = [np.empty(batch + np.shape(x), dtype=np.result_type(x)) for x in r]
        for o, x in zip(outs, r):
            o[idx] = x
    return outs


class _Failed(Exception):
    pass


def _impl(meta):
    """An eager kernel that, given meta tensors (capture, AOT tracing), returns its
    meta rule's results instead: kernels produce meta outputs from meta inputs."""
    def wrap(fn):
        def impl(*args):
            if any(isinstance(a, _C.Tensor) and a.is_meta for a in args):
                return meta(None, args)
            return fn(*args)
        impl.__name__ = impl.__qualname__ = fn.__name__
        impl.__doc__ = fn.__doc__
        return impl
    return wrap


def _first_zero_pivot(m):
    """The 1-based index of the first zero pivot of m's LU factorization with partial
    pivoting (LAPACK getrf's info), or 0."""
    u = np.array(m, dtype=np.float64)
    n = u.shape[0]
    for j in range(n):
        p = j + int(np.argmax(np.abs(u[j:, j])))
        if u[p, j] == 0:
            return j + 1
        u[[j, p]] = u[[p, j]]
        u[j + 1:, j:] -= np.outer(u[j + 1:, j] / u[j, j], u[j, j:])
    return 0


def _diag_embed(v):
    """The matrices with v's last dim on the diagonal."""
    return O.unsqueeze(v, -1) * O.eye(v.shape[-1], dtype=v.dtype)


def _diag(X):
    """The diagonals of square matrices X."""
    return O.sum(X * O.eye(X.shape[-1], dtype=X.dtype), -1)


def _mT(t):
    return O.transpose(t, -2, -1)


def _square_meta(name, A, kernel=None):
    check_matrices(name, A, kernel=kernel)
    return M.meta_tensor(tuple(A.shape), A.dtype, _colmajor_strides(A.shape))


def _inv_meta(entry, args):
    return _square_meta("linalg.inv", args[0])


def _cholesky_meta(entry, args):
    return _square_meta("linalg.cholesky", args[0], "cholesky_cpu")


def _colmajor_strides(shape):
    shape = tuple(shape)
    if len(shape) < 2:
        return M.contiguous_strides(shape)
    s = list(M.contiguous_strides(shape[:-2] + (shape[-1], shape[-2])))
    s[-1], s[-2] = s[-2], s[-1]
    return tuple(s)


# ------------------------------------------------------------------ inverse


def _inv_one(m):
    try:
        return np.linalg.inv(m)
    except np.linalg.LinAlgError:
        raise _Failed(f"The diagonal element {_first_zero_pivot(m)} is zero, the inversion "
                      "could not be completed because the input matrix is singular.")


def _inv(A):
    check_matrices("linalg.inv", A)
    a = _np(A)
    if a.size == 0:
        return _out(a, A.dtype)
    return _out(_per_matrix("linalg.inv", a, _inv_one)[0], A.dtype)


def _inv_backward(g, out, A):
    # d(A^-1) = -A^-1 dA A^-1
    inv_t = _mT(out)
    return (O.neg(O.matmul(O.matmul(inv_t, g), inv_t)),)


op("linalg_inv(Tensor A) -> Tensor", CUSTOM, "python", prim=True, lower=extern,
   impl=_impl(_inv_meta)(_inv), meta=_inv_meta, backward=_inv_backward, method=False,
   doc="The inverse of each square matrix (LAPACK getrf/getri through NumPy).")


# ------------------------------------------------------------------ solve


def _solve_shapes(A, B, left):
    check_matrices("linalg.solve", A, kernel="lu_cpu")
    if B.dtype is not A.dtype:
        raise RuntimeError(f"linalg.solve: Expected A and B to have the same dtype, but found "
                           f"A of type {A.dtype._torch_name} and B of type "
                           f"{B.dtype._torch_name} instead")
    vector = B.ndim == 1 or (left and B.ndim == A.ndim - 1 and
                             tuple(B.shape) == tuple(A.shape[:-1]))
    n = A.shape[-1]
    rows = B.shape[-1] if vector else (B.shape[-2] if left else B.shape[-1])
    if rows != n:
        bshape = f"{B.shape[-1]}x1" if vector else f"{B.shape[-2]}x{B.shape[-1]}"
        raise RuntimeError(f"linalg.solve: Incompatible shapes of A and B for the equation "
                           f"{'AX = B' if left else 'XA = B'} ({n}x{n} and {bshape})")
    return vector


def _solve(A, B, left):
    vector = _solve_shapes(A, B, left)
    a, b = _np(A), _np(B)
    if not left:                       # X A = B  <=>  A^T X^T = B^T
        a, b = np.swapaxes(a, -1, -2), np.swapaxes(b, -1, -2)
    bm = b[..., None] if vector else b
    batch = np.broadcast_shapes(a.shape[:-2], bm.shape[:-2])
    a = np.broadcast_to(a, batch + a.shape[-2:])
    bm = np.broadcast_to(bm, batch + bm.shape[-2:])
    x = np.empty(batch + bm.shape[-2:], dtype=a.dtype)
    for idx in np.ndindex(*batch):
        try:
            x[idx] = np.linalg.solve(a[idx], bm[idx]) if a[idx].size else 0
        except np.linalg.LinAlgError:
            raise LinAlgError("torch.linalg.solve: The solver failed because the input "
                              "matrix is singular.") from None
    if vector:
        x = x[..., 0]
        # PyTorch's layout: the batch fastest
        return _C.from_numpy(np.moveaxis(np.ascontiguousarray(np.moveaxis(x, -1, 0)), 0, -1))
    if not left:
        x = np.swapaxes(x, -1, -2)
        return _C.from_numpy(np.ascontiguousarray(x))
    return _out(x, A.dtype)


def _solve_meta(entry, args):
    A, B, left = args
    vector = _solve_shapes(A, B, left)
    if vector:
        batch = tuple(np.broadcast_shapes(tuple(A.shape[:-2]), tuple(B.shape[:-1])))
        shape = batch + (A.shape[-1],)
        strides = tuple(reversed(M.contiguous_strides(tuple(reversed(shape)))))
        return M.meta_tensor(shape, A.dtype, strides)
    batch = tuple(np.broadcast_shapes(tuple(A.shape[:-2]), tuple(B.shape[:-2])))
    shape = batch + tuple(B.shape[-2:])
    return M.meta_tensor(shape, A.dtype, _colmajor_strides(shape) if left else None)


def _solve_backward(g, X, A, B, left):
    vector = B.ndim == 1 or (left and B.ndim == A.ndim - 1 and
                             tuple(B.shape) == tuple(A.shape[:-1]))
    if left:
        gB = O.linalg_solve(_mT(A), g, left=True)
        gBm = O.unsqueeze(gB, -1) if vector else gB
        Xm = O.unsqueeze(X, -1) if vector else X
        gA = O.neg(O.matmul(gBm, _mT(Xm)))
    else:
        gB = O.linalg_solve(_mT(A), g, left=False)
        gA = O.neg(O.matmul(_mT(X), gB))
    return gA.sum_to_size(A.shape), gB.sum_to_size(B.shape)


op("linalg_solve(Tensor A, Tensor B, *, bool left=True) -> Tensor", CUSTOM, "python",
   prim=True, lower=extern, impl=_impl(_solve_meta)(_solve), meta=_solve_meta,
   backward=_solve_backward, method=False,
   doc="X with A X = B (left) or X A = B, by LU (LAPACK gesv through NumPy).")


# ------------------------------------------------------------------ slogdet, det


def _slogdet(A):
    check_matrices("linalg.slogdet", A)
    sign, lad = np.linalg.slogdet(_np(A))
    return _vec(sign, A.dtype), _vec(lad, A.dtype)


def _batch_meta(A, name, kernel=None):
    check_matrices(name, A, kernel=kernel)
    shape = tuple(A.shape[:-2])
    return M.meta_tensor(shape, A.dtype)


def _svd_inverse_t(A):
    """A^-T through the SVD (inf where A is singular, never an error)."""
    U, S, Vh = O._linalg_svd(A, False, True)
    return O.matmul(U * O.unsqueeze(O.reciprocal(S), -2), Vh)


def _slogdet_backward(grads, outs, A):
    g = grads[1]
    if g is None:
        return (None,)
    return (O.unsqueeze(O.unsqueeze(g, -1), -1) * _svd_inverse_t(A),)


def _slogdet_meta(entry, args):
    # two distinct results (one meta object twice would say they share memory)
    return _batch_meta(args[0], "linalg.slogdet"), _batch_meta(args[0], "linalg.slogdet")


op("_linalg_slogdet(Tensor A) -> (Tensor sign, Tensor logabsdet)", CUSTOM, "python",
   prim=True, lower=extern, impl=_impl(_slogdet_meta)(_slogdet), backward=_slogdet_backward,
   method=False, meta=_slogdet_meta,
   doc="The sign and the log of the absolute value of each matrix's determinant.")


def _det(A):
    check_matrices("linalg.det", A, kernel="lu_cpu")
    a = _np(A)
    if a.size == 0:                    # det of a 0 x 0 matrix is 1
        return _vec(np.ones(a.shape[:-2]), A.dtype)
    return _vec(np.linalg.det(a), A.dtype)


def _det_backward(g, out, A):
    # d det(A) = tr(adj(A) dA): adj(A)^T = det(U) det(Vh) U diag(prod_{j != i} s_j) Vh,
    # finite for singular A too
    U, S, Vh = O._linalg_svd(A, False, True)
    n = A.shape[-1]
    eye = O.eye(n, dtype=_C.bool)
    others = O.prod(O.where(eye, 1.0, O.unsqueeze(S, -2).expand(*S.shape[:-1], n, n)), -1)
    sign = O._linalg_slogdet(U)[0] * O._linalg_slogdet(Vh)[0]
    adj_t = O.matmul(U * O.unsqueeze(others, -2), Vh)
    scale = O.unsqueeze(O.unsqueeze(g * sign, -1), -1)
    return (scale * adj_t,)


def _det_meta(entry, args):
    return _batch_meta(args[0], "linalg.det", "lu_cpu")


op("linalg_det(Tensor A) -> Tensor", CUSTOM, "python", prim=True, lower=extern,
   impl=_impl(_det_meta)(_det), backward=_det_backward, method=False, meta=_det_meta,
   doc="The determinant of each square matrix.")


# ------------------------------------------------------------------ Cholesky


def _chol_one(m):
    try:
        return np.linalg.cholesky(m)
    except np.linalg.LinAlgError:
        order = next(k for k in range(1, m.shape[0] + 1) if not _is_pd(m[:k, :k]))
        raise _Failed("The factorization could not be completed because the input is not "
                      f"positive-definite (the leading minor of order {order} is not "
                      "positive-definite).")


def _is_pd(m):
    try:
        np.linalg.cholesky(m)
        return True
    except np.linalg.LinAlgError:
        return False


def _cholesky(A, upper):
    check_matrices("linalg.cholesky", A, kernel="cholesky_cpu")
    a = _np(A)
    if a.size == 0:
        return _out(a, A.dtype)
    L = _per_matrix("linalg.cholesky", a, _chol_one)[0]
    return _out(np.swapaxes(L, -1, -2) if upper else L, A.dtype)


def _cholesky_backward(g, out, A, upper):
    L = _mT(out) if upper else out
    gL = O.tril(_mT(g) if upper else g)
    # A = L L^T: gA = L^-T Phi(L^T gL) L^-1, symmetrised (Phi: lower part, diagonal halved)
    P = O.matmul(_mT(L), gL)
    P = O.tril(P) - 0.5 * _diag_embed(_diag(P))
    Linv = O.linalg_inv(L)
    S = O.matmul(O.matmul(_mT(Linv), P), Linv)
    return (0.5 * (S + _mT(S)),)


op("linalg_cholesky(Tensor A, *, bool upper=False) -> Tensor", CUSTOM, "python", prim=True,
   lower=extern, impl=_impl(_cholesky_meta)(_cholesky), meta=_cholesky_meta,
   backward=_cholesky_backward, method=False,
   doc="The Cholesky factor of each symmetric positive-definite matrix (lower, or upper "
       "when upper=True).")


# ------------------------------------------------------------------ QR


def _qr_meta(entry, args):
    A, mode = args
    check_matrices("linalg.qr", A, square=False, kernel="geqrf_cpu")
    if mode not in ("reduced", "complete", "r"):
        raise RuntimeError(f"qr received unrecognized mode '{mode}' but expected one of "
                           "'reduced' (default), 'r', or 'complete'")
    m, n = A.shape[-2:]
    batch = tuple(A.shape[:-2])
    k = m if mode == "complete" else min(m, n)
    q = (0,) if mode == "r" else batch + (m, k)
    r = batch + (k, n)
    return (M.meta_tensor(q, A.dtype, _colmajor_strides(q)),
            M.meta_tensor(r, A.dtype, _colmajor_strides(r)))


def _qr(A, mode):
    _qr_meta(None, (A, mode))
    a = _np(A)
    m, n = a.shape[-2:]
    k = m if mode == "complete" else min(m, n)
    if a.size == 0:
        q = np.zeros(a.shape[:-2] + (m, k), a.dtype)
        q[..., range(min(m, k)), range(min(m, k))] = 1
        r = np.zeros(a.shape[:-2] + (k, n), a.dtype)
    else:
        q, r = np.linalg.qr(a, mode="complete" if mode == "complete" else "reduced")
    if mode == "r":
        q = np.zeros((0,), a.dtype)
    return _out(q, A.dtype), _out(r, A.dtype)


def _copyltu(X):
    low = O.tril(X, -1)
    return low + _mT(low) + _diag_embed(_diag(X))


def _qr_square_backward(gQ, gR, Q, R):
    # A = QR, m >= n, reduced: gA = (gQ + Q copyltu(M)) R^-T, M = R gR^T - gQ^T Q
    Mx = O.matmul(R, _mT(gR)) - O.matmul(_mT(gQ), Q)
    rhs = gQ + O.matmul(Q, _copyltu(Mx))
    return _mT(O.linalg_solve(R, _mT(rhs), left=True))


def _qr_backward(grads, outs, A, mode):
    gQ, gR = grads
    Q, R = outs
    if mode == "r":
        raise RuntimeError("The derivative of linalg.qr depends on Q, which is not computed "
                           "when mode='r'. Please use linalg.qr(A, mode='reduced') if you are "
                           "going to differentiate through linalg.qr.")
    m, n = A.shape[-2:]
    if mode == "complete" and m > n:
        raise RuntimeError("The QR decomposition is not differentiable when mode='complete' "
                           "and nrows > ncols.")
    gQ = O.zeros_like(Q) if gQ is None else gQ
    gR = O.zeros_like(R) if gR is None else gR
    if m >= n:
        return (_qr_square_backward(gQ, gR, Q, R),)
    # m < n: A = [X | Y], R = [U | V] with X = Q U; Y = Q V
    U, V = R.narrow(-1, 0, m), R.narrow(-1, m, n - m)
    gU, gV = gR.narrow(-1, 0, m), gR.narrow(-1, m, n - m)
    Y = A.narrow(-1, m, n - m)
    gX = _qr_square_backward(gQ + O.matmul(Y, _mT(gV)), gU, Q, U)
    gY = O.matmul(Q, gV)
    return (O.cat([gX, gY], -1),)


op("linalg_qr(Tensor A, str mode=\"reduced\") -> (Tensor Q, Tensor R)", CUSTOM, "python",
   prim=True, lower=extern, impl=_impl(_qr_meta)(_qr), meta=_qr_meta, backward=_qr_backward,
   method=False,
   doc="The QR decomposition of each matrix (Householder, LAPACK geqrf through NumPy).")


# ------------------------------------------------------------------ SVD


def _svd_meta(entry, args):
    A, full_matrices, compute_uv = args
    check_matrices("linalg.svd", A, square=False, kernel="linalg_svd_cpu")
    m, n = A.shape[-2:]
    k = min(m, n)
    batch = tuple(A.shape[:-2])
    if compute_uv:
        u = batch + ((m, m) if full_matrices else (m, k))
        vh = batch + ((n, n) if full_matrices else (k, n))
    else:
        u = vh = (0,)
    return (M.meta_tensor(u, A.dtype, _colmajor_strides(u)),
            M.meta_tensor(batch + (k,), A.dtype),
            M.meta_tensor(vh, A.dtype, _colmajor_strides(vh)))


def _svd(A, full_matrices, compute_uv):
    _svd_meta(None, (A, full_matrices, compute_uv))
    a = _np(A)
    m, n = a.shape[-2:]
    k = min(m, n)
    if a.size == 0:
        u = np.zeros(a.shape[:-2] + ((m, m) if full_matrices else (m, k)), a.dtype)
        s = np.zeros(a.shape[:-2] + (k,), a.dtype)
        vh = np.zeros(a.shape[:-2] + ((n, n) if full_matrices else (k, n)), a.dtype)
        for t in (u, vh):
            d = min(t.shape[-2:])
            t[..., range(d), range(d)] = 1
    elif compute_uv:
        u, s, vh = np.linalg.svd(a, full_matrices=full_matrices)
    else:
        s = np.linalg.svd(a, compute_uv=False)
    if not compute_uv:
        u = vh = np.zeros((0,), a.dtype)
    return _out(u, A.dtype), _vec(s, A.dtype), _out(vh, A.dtype)


def _svd_backward(grads, outs, A, full_matrices, compute_uv):
    gU, gS, gVh = grads
    U, S, Vh = outs
    if not compute_uv:
        raise RuntimeError("linalg.svd: the derivative needs U and Vh, which are not "
                           "computed with compute_uv=False; use linalg.svdvals")
    m, n = A.shape[-2:]
    k = min(m, n)
    if full_matrices and (gU is not None or gVh is not None) and m != n:
        raise RuntimeError("linalg.svd: The derivative of linalg.svd is not implemented when "
                           "full_matrices=True and U or Vh are differentiated; use "
                           "full_matrices=False")
    if full_matrices and m != n:
        U, Vh = U.narrow(-1, 0, k), Vh.narrow(-2, 0, k)
    V = _mT(Vh)
    Sd = _diag_embed(S)
    out = O.zeros(list(A.shape), dtype=A.dtype)
    if gS is not None:
        out = out + O.matmul(U * O.unsqueeze(gS, -2), Vh)
    if gU is None and gVh is None:
        return (out,)
    # F_ij = 1 / (s_j^2 - s_i^2) off the diagonal, 0 on it
    s2 = S * S
    diff = O.unsqueeze(s2, -2) - O.unsqueeze(s2, -1)
    eye = O.eye(k, dtype=_C.bool)
    F = O.where(eye, 0.0, O.reciprocal(O.where(eye, 1.0, diff)))
    inner = O.zeros([*S.shape[:-1], k, k], dtype=A.dtype)
    sinv = O.reciprocal(S)
    if gU is not None:
        J = O.matmul(_mT(U), gU)
        inner = inner + O.matmul(F * (J - _mT(J)), Sd)
        if m > k:
            proj = gU - O.matmul(U, J)
            out = out + O.matmul(proj * O.unsqueeze(sinv, -2), Vh)
    if gVh is not None:
        gV = _mT(gVh)
        K = O.matmul(_mT(V), gV)
        inner = inner + O.matmul(Sd, F * (K - _mT(K)))
        if n > k:
            proj = gV - O.matmul(V, K)
            out = out + O.matmul(U * O.unsqueeze(sinv, -2), _mT(proj))
    return (out + O.matmul(O.matmul(U, inner), Vh),)


op("_linalg_svd(Tensor A, bool full_matrices=False, bool compute_uv=True) -> "
   "(Tensor U, Tensor S, Tensor Vh)", CUSTOM, "python", prim=True, lower=extern,
   impl=_impl(_svd_meta)(_svd), meta=_svd_meta, backward=_svd_backward, method=False,
   doc="The singular value decomposition of each matrix (LAPACK gesdd through NumPy).")


# ------------------------------------------------------------------ symmetric eigen


def _eigh_meta(entry, args):
    A, UPLO = args
    check_matrices("linalg.eigh", A, kernel="linalg_eigh_cpu", any_dtype=True)
    if UPLO not in ("L", "U"):
        raise RuntimeError(f"Expected UPLO argument to be 'L' or 'U', but got {UPLO}")
    n = A.shape[-1]
    return (M.meta_tensor(tuple(A.shape[:-1]), A.dtype),
            M.meta_tensor(tuple(A.shape), A.dtype, _colmajor_strides(A.shape)))


def _eigh(A, UPLO):
    _eigh_meta(None, (A, UPLO))
    a = _np(A)
    if a.size == 0:
        return _vec(np.zeros(a.shape[:-1], a.dtype), A.dtype), _out(a, A.dtype)
    w, v = np.linalg.eigh(a, UPLO=UPLO)
    return _vec(w, A.dtype), _out(v, A.dtype)


def _eigh_backward(grads, outs, A, UPLO):
    gL, gV = grads
    L, V = outs
    n = A.shape[-1]
    inner = O.zeros(list(A.shape), dtype=A.dtype)
    if gL is not None:
        inner = inner + _diag_embed(gL)
    if gV is not None:
        eye = O.eye(n, dtype=_C.bool)
        diff = O.unsqueeze(L, -2) - O.unsqueeze(L, -1)       # l_j - l_i
        F = O.where(eye, 0.0, O.reciprocal(O.where(eye, 1.0, diff)))
        J = O.matmul(_mT(V), gV)
        inner = inner + F * 0.5 * (J - _mT(J))
    return (O.matmul(O.matmul(V, inner), _mT(V)),)


op("_linalg_eigh(Tensor A, str UPLO=\"L\") -> (Tensor eigenvalues, Tensor eigenvectors)",
   CUSTOM, "python", prim=True, lower=extern, impl=_impl(_eigh_meta)(_eigh),
   meta=_eigh_meta,
   backward=_eigh_backward, method=False,
   doc="Eigenvalues (ascending) and eigenvectors of each symmetric matrix, reading the "
       "lower (UPLO='L') or upper triangle (LAPACK syevd through NumPy).")
