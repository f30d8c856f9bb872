"""The op database's entries for the factorization prims (python/ember/ops/
factorizations.py), loaded by op_db.py.

References work on Python floats: Gaussian elimination with partial pivoting (inverse,
solve, determinants), Cholesky-Banachiewicz, modified Gram-Schmidt (QR), and Jacobi
rotations (one-sided for the SVD, two-sided for the symmetric eigenproblem); none calls
NumPy's linear algebra. Factors are unique only up to signs, so QR, SVD and eigh compare
a canonical form (`canonical`): R's diagonal non-negative, each singular/eigen vector's
largest component positive."""
from __future__ import annotations

import math

import numpy as np

import ember
from op_db import ErrorSample, OpInfo, Sample, add, make

FLOAT = ("float32", "float64")


def _matrices(a):
    """(batch index, list-of-lists matrix) for every matrix of an object array."""
    a = np.asarray(a, dtype=object)
    for idx in np.ndindex(*a.shape[:-2]):
        yield idx, [[float(x) for x in row] for row in a[idx]]


def _stack(batch, per, shape):
    out = np.empty(tuple(batch) + tuple(shape), dtype=object)
    for idx, m in per:
        out[idx] = np.array(m, dtype=object).reshape(shape)
    return out


def _eliminate(m, rhs):
    """Solves m x = rhs (rhs: list of columns) by Gaussian elimination with partial
    pivoting; returns (columns of x, determinant)."""
    n = len(m)
    a = [row[:] + [c[i] for c in rhs] for i, row in enumerate(m)]
    det = 1.0
    for j in range(n):
        p = max(range(j, n), key=lambda i: abs(a[i][j]))
        if a[p][j] == 0:
            return None, 0.0
        if p != j:
            a[j], a[p] = a[p], a[j]
            det = -det
        det *= a[j][j]
        for i in range(j + 1, n):
            f = a[i][j] / a[j][j]
            a[i] = [x - f * y for x, y in zip(a[i], a[j])]
    cols = []
    for c in range(len(rhs)):
        x = [0.0] * n
        for i in reversed(range(n)):
            s = a[i][n + c] - sum(a[i][k] * x[k] for k in range(i + 1, n))
            x[i] = s / a[i][i]
        cols.append(x)
    return cols, det


def _ref_inv(A):
    A = np.asarray(A, dtype=object)
    n = A.shape[-1]
    eye = [[1.0 if i == j else 0.0 for i in range(n)] for j in range(n)]
    per = [(idx, np.array(_eliminate(m, eye)[0], dtype=object).T)
           for idx, m in _matrices(A)]
    return _stack(A.shape[:-2], per, (n, n))


def _ref_det(A):
    A = np.asarray(A, dtype=object)
    return _stack(A.shape[:-2], [(i, _eliminate(m, [])[1]) for i, m in _matrices(A)], ())


def _ref_slogdet(A):
    d = _ref_det(A)
    sign = np.vectorize(lambda x: 1.0 if x > 0 else (-1.0 if x < 0 else 0.0), otypes=[object])(d)
    lad = np.vectorize(lambda x: math.log(abs(x)) if x else -math.inf, otypes=[object])(d)
    return sign, lad


def _ref_solve(A, B, left=True):
    A, B = np.asarray(A, dtype=object), np.asarray(B, dtype=object)
    vector = B.ndim == 1 or (left and B.ndim == A.ndim - 1 and B.shape == A.shape[:-1])
    if not left:
        A, B = np.swapaxes(A, -1, -2), np.swapaxes(B, -1, -2)
    Bm = B[..., None] if vector else B
    batch = np.broadcast_shapes(A.shape[:-2], Bm.shape[:-2])
    A = np.broadcast_to(A, batch + A.shape[-2:])
    Bm = np.broadcast_to(Bm, batch + Bm.shape[-2:])
    out = np.empty(A.shape[:-2] + Bm.shape[-2:], dtype=object)
    for idx, m in _matrices(A):
        cols = [[float(x) for x in Bm[idx][:, c]] for c in range(Bm.shape[-1])]
        out[idx] = np.array(_eliminate(m, cols)[0], dtype=object).T
    if vector:
        return out[..., 0]
    return np.swapaxes(out, -1, -2) if not left else out


def _ref_cholesky(A, upper=False):
    A = np.asarray(A, dtype=object)
    n = A.shape[-1]
    per = []
    for idx, m in _matrices(A):
        L = [[0.0] * n for _ in range(n)]
        for i in range(n):
            for j in range(i + 1):
                s = m[i][j] - sum(L[i][k] * L[j][k] for k in range(j))
                L[i][j] = math.sqrt(s) if i == j else s / L[j][j]
        per.append((idx, np.array(L, dtype=object).T if upper else L))
    return _stack(A.shape[:-2], per, (n, n))


def _ref_qr(A, mode="reduced"):
    """Modified Gram-Schmidt (m >= n): Q with orthonormal columns, R upper triangular
    with a positive diagonal (the canonical form)."""
    A = np.asarray(A, dtype=object)
    m, n = A.shape[-2:]
    Qs, Rs = [], []
    for idx, a in _matrices(A):
        cols = [[a[i][j] for i in range(m)] for j in range(n)]
        R = [[0.0] * n for _ in range(n)]
        Q = []
        for j in range(n):
            v = cols[j][:]
            for i, q in enumerate(Q):
                R[i][j] = sum(x * y for x, y in zip(q, v))
                v = [x - R[i][j] * y for x, y in zip(v, q)]
            R[j][j] = math.sqrt(sum(x * x for x in v))
            Q.append([x / R[j][j] for x in v])
        Qs.append((idx, np.array(Q, dtype=object).T))
        Rs.append((idx, R))
    R = _stack(A.shape[:-2], Rs, (n, n))
    if mode == "r":
        return np.zeros((0,), dtype=object), R
    return _stack(A.shape[:-2], Qs, (m, n)), R


def _canonical_qr(outs):
    Q, R = (np.asarray(o, dtype=np.float64) for o in outs)
    s = np.sign(np.diagonal(R, axis1=-2, axis2=-1))
    s[s == 0] = 1
    if Q.size:
        Q = Q * s[..., None, :]
    return Q, R * s[..., :, None]


def _jacobi_eigh(m):
    """Eigenvalues (ascending) and eigenvectors (columns) of symmetric m by cyclic
    Jacobi rotations."""
    n = len(m)
    a = [row[:] for row in m]
    v = [[1.0 if i == j else 0.0 for j in range(n)] for i in range(n)]
    for _ in range(100):
        off = sum(a[i][j] ** 2 for i in range(n) for j in range(n) if i != j)
        if off < 1e-60:
            break
        for p in range(n):
            for q in range(p + 1, n):
                if a[p][q] == 0:
                    continue
                theta = (a[q][q] - a[p][p]) / (2 * a[p][q])
                t = math.copysign(1.0, theta) / (abs(theta) + math.sqrt(theta * theta + 1))
                c = 1 / math.sqrt(t * t + 1)
                s = t * c
                for k in range(n):       # a = J^T a J
                    akp, akq = a[k][p], a[k][q]
                    a[k][p], a[k][q] = c * akp - s * akq, s * akp + c * akq
                for k in range(n):
                    apk, aqk = a[p][k], a[q][k]
                    a[p][k], a[q][k] = c * apk - s * aqk, s * apk + c * aqk
                for k in range(n):
                    vkp, vkq = v[k][p], v[k][q]
                    v[k][p], v[k][q] = c * vkp - s * vkq, s * vkp + c * vkq
    order = sorted(range(n), key=lambda i: a[i][i])
    return [a[i][i] for i in order], [[v[k][i] for i in order] for k in range(n)]


def _ref_eigh(A, UPLO="L"):
    A = np.asarray(A, dtype=object)
    n = A.shape[-1]
    Ls, Vs = [], []
    for idx, m in _matrices(A):
        s = [[(m[max(i, j)][min(i, j)] if UPLO == "L" else m[min(i, j)][max(i, j)])
              for j in range(n)] for i in range(n)]
        w, v = _jacobi_eigh(s)
        Ls.append((idx, w))
        Vs.append((idx, v))
    return _stack(A.shape[:-2], Ls, (n,)), _stack(A.shape[:-2], Vs, (n, n))


def _sign_of_largest(cols):
    """+-1 per column (last axis): the sign of its largest-magnitude component."""
    pick = np.take_along_axis(cols, np.argmax(np.abs(cols), axis=-2)[..., None, :], -2)
    s = np.sign(pick[..., 0, :])
    s[s == 0] = 1
    return s


def _canonical_eigh(outs):
    L, V = (np.asarray(o, dtype=np.float64) for o in outs)
    return L, V * _sign_of_largest(V)[..., None, :]


def _ref_svd(A, full_matrices=False, compute_uv=True):
    """One-sided Jacobi (Hestenes) on the columns of A (or of A^T when wide)."""
    A = np.asarray(A, dtype=object)
    m, n = A.shape[-2:]
    k = min(m, n)
    Us, Ss, Vhs = [], [], []
    for idx, a in _matrices(A):
        wide = m < n
        if wide:
            a = [list(r) for r in zip(*a)]
        rows, cols = len(a), len(a[0])
        u = [[a[i][j] for i in range(rows)] for j in range(cols)]      # columns
        v = [[1.0 if i == j else 0.0 for i in range(cols)] for j in range(cols)]
        for _ in range(100):
            rotated = False
            for p in range(cols):
                for q in range(p + 1, cols):
                    alpha = sum(x * x for x in u[p])
                    beta = sum(x * x for x in u[q])
                    gamma = sum(x * y for x, y in zip(u[p], u[q]))
                    if abs(gamma) <= 1e-17 * math.sqrt(alpha * beta):
                        continue
                    rotated = True
                    zeta = (beta - alpha) / (2 * gamma)
                    t = math.copysign(1.0, zeta) / (abs(zeta) + math.sqrt(1 + zeta * zeta))
                    c = 1 / math.sqrt(1 + t * t)
                    s = c * t
                    for w in (u, v):
                        wp, wq = w[p], w[q]
                        w[p] = [c * x - s * y for x, y in zip(wp, wq)]
                        w[q] = [s * x + c * y for x, y in zip(wp, wq)]
            if not rotated:
                break
        sv = [math.sqrt(sum(x * x for x in col)) for col in u]
        order = sorted(range(cols), key=lambda i: -sv[i])
        S = [sv[i] for i in order]
        U = [[u[i][r] / sv[i] for i in order] for r in range(rows)]    # rows x k
        V = [[v[i][r] for i in order] for r in range(cols)]            # cols x k
        if wide:
            U, V = V, U
        Us.append((idx, U))
        Ss.append((idx, S))
        Vhs.append((idx, [list(r) for r in zip(*V)]))
    S = _stack(A.shape[:-2], Ss, (k,))
    if not compute_uv:
        return np.zeros((0,), dtype=object), S, np.zeros((0,), dtype=object)
    return _stack(A.shape[:-2], Us, (m, k)), S, _stack(A.shape[:-2], Vhs, (k, n))


def _canonical_svd(outs):
    U, S, Vh = (np.asarray(o, dtype=np.float64) for o in outs)
    if U.size == 0:
        return U, S, Vh
    s = _sign_of_largest(U)
    return U * s[..., None, :], S, Vh * s[..., :, None]


# ---------------------------------------------------------------- samples


def _square(dtype, rng, shapes=((3, 3), (2, 4, 4), (1, 1), (0, 2, 2)), spd=False,
            sym=False):
    out = []
    for shape in shapes:
        t = make(shape, dtype, rng, low=-1.0, high=1.0)
        a = t.numpy().astype(np.float64)
        n = shape[-1]
        if spd:
            a = a @ np.swapaxes(a, -1, -2) + n * np.eye(n)
        elif sym:
            a = a + np.swapaxes(a, -1, -2)
        else:
            a = a + 2 * n * np.eye(n) * (1 if n % 2 else -1) / max(n, 1)
        out.append(ember.from_numpy(a.astype(t.numpy().dtype)))
    return out


def _inv_samples(dtype, rng):
    return [Sample((a,)) for a in _square(dtype, rng)]


def _solve_samples(dtype, rng):
    A = _square(dtype, rng, shapes=((3, 3), (2, 4, 4)))
    return [Sample((A[0], make((3, 2), dtype, rng))),
            Sample((A[0], make((3,), dtype, rng))),
            Sample((A[1], make((2, 4), dtype, rng))),
            Sample((A[1], make((4, 3), dtype, rng))),
            Sample((A[1], make((2, 3, 4), dtype, rng)), {"left": False})]


def _chol_samples(dtype, rng):
    return [Sample((a,), grad=False) for a in _square(dtype, rng, spd=True)] + \
        [Sample((_square(dtype, rng, shapes=((3, 3),), spd=True)[0],), {"upper": True},
                grad=False)]


def _qr_samples(dtype, rng):
    return [Sample((make((4, 3), dtype, rng),)), Sample((make((3, 3), dtype, rng),)),
            Sample((make((2, 5, 2), dtype, rng),)),
            Sample((make((4, 3), dtype, rng), "r"), grad=False)]


def _svd_samples(dtype, rng):
    return [Sample((make((4, 3), dtype, rng),)), Sample((make((3, 5), dtype, rng),)),
            Sample((make((2, 3, 3), dtype, rng),)),
            Sample((make((3, 3), dtype, rng), True)),
            Sample((make((4, 3), dtype, rng), False, False), grad=False)]


def _eigh_samples(dtype, rng):
    return [Sample((a,), grad=False) for a in _square(dtype, rng, sym=True,
                                                      shapes=((3, 3), (2, 4, 4)))] + \
        [Sample((_square(dtype, rng, shapes=((3, 3),), sym=True)[0], "U"), grad=False)]


def _square_errors(fn):
    def errors():
        return [ErrorSample((ember.ones(3, 4),), {}, RuntimeError,
                            fn + r": A must be batches of square matrices", "not square"),
                ErrorSample((ember.ones(3),), {}, RuntimeError,
                            fn + r": The input tensor A must have at least 2 dimensions",
                            "1-d"),
                ErrorSample((ember.ones(3, 3, dtype=ember.int64),), {}, RuntimeError,
                            fn + r": Expected a floating point", "integer")]
    return errors


add(OpInfo("linalg_inv", _inv_samples, _ref_inv, dtypes=FLOAT,
           torch_fn=lambda torch, A: torch.linalg.inv(A), errors=_square_errors(r"linalg\.inv")))
add(OpInfo("linalg_det", _inv_samples, _ref_det, dtypes=FLOAT, reduction=True,
           torch_fn=lambda torch, A: torch.linalg.det(A), errors=_square_errors(r"linalg\.det")))
add(OpInfo("_linalg_slogdet", _inv_samples, _ref_slogdet, dtypes=FLOAT,
           torch_fn=lambda torch, A: tuple(torch.linalg.slogdet(A)),
           errors=_square_errors(r"linalg\.slogdet")))
add(OpInfo("linalg_solve", _solve_samples, _ref_solve, dtypes=FLOAT,
           torch_fn=lambda torch, A, B, left=True: torch.linalg.solve(A, B, left=left),
           errors=lambda: [ErrorSample((ember.eye(3), ember.ones(4)), {}, RuntimeError,
                                       r"linalg\.solve: Incompatible shapes", "shapes")]))
_SYMMETRIC = ("reads one triangle, and its gradient is PyTorch's symmetric one, not the "
              "one-sided derivative finite differences see: tests/test_linalg.py compares "
              "it with torch's on symmetric inputs")
add(OpInfo("linalg_cholesky", _chol_samples, _ref_cholesky, dtypes=FLOAT,
           grad_elsewhere=_SYMMETRIC,
           torch_fn=lambda torch, A, upper=False: torch.linalg.cholesky(A, upper=upper),
           errors=_square_errors(r"linalg\.cholesky")))
add(OpInfo("linalg_qr", _qr_samples, _ref_qr, dtypes=FLOAT, canonical=_canonical_qr,
           torch_fn=lambda torch, A, mode="reduced": tuple(torch.linalg.qr(A, mode))))
add(OpInfo("_linalg_svd", _svd_samples, _ref_svd, dtypes=FLOAT, canonical=_canonical_svd,
           torch_fn=lambda torch, A, full_matrices=False, compute_uv=True: tuple(
               torch.linalg.svd(A, full_matrices=full_matrices)) if compute_uv else
           (torch.empty(0, dtype=A.dtype), torch.linalg.svdvals(A),
            torch.empty(0, dtype=A.dtype))))
add(OpInfo("_linalg_eigh", _eigh_samples, _ref_eigh, dtypes=FLOAT, canonical=_canonical_eigh,
           grad_elsewhere=_SYMMETRIC,
           torch_fn=lambda torch, A, UPLO="L": tuple(torch.linalg.eigh(A, UPLO))))
