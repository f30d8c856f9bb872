"""The few linear-algebra routines the parametrizations need, written with ember ops so
autograd differentiates them (matrix_exp by Taylor series with scaling and squaring,
householder_product by applying the reflectors, solve by elimination), and QR from
NumPy's LAPACK for the no-grad initialisations (geqrf)."""
from __future__ import annotations

import math

import numpy as np

from ... import _C
from ...autograd import no_grad


def _O():
    from ...ops import api
    return api


def _eye(n, like):
    return _O().eye(n, dtype=like.dtype)


def matrix_exp(A):
    """exp(A) of a square matrix (or a batch): the Taylor series of degree 18 of A / 2^s,
    s chosen from the 1-norm so that the scaled norm is at most 1/2, then squared s
    times. Every step is a matmul or a sum, so the gradient is exact for what is
    computed."""
    n = A.shape[-1]
    with no_grad():
        norm = A.abs().sum(-2).amax().item() if A.numel() else 0.0
    s = max(0, math.ceil(math.log2(norm / 0.5))) if norm > 0.5 else 0
    X = A * (1.0 / (1 << s)) if s else A
    eye = _eye(n, A)
    E = eye + X * (1.0 / 18)
    for k in range(17, 0, -1):            # Horner: I + X/1 (I + X/2 (... (I + X/18)))
        E = eye + X.matmul(E) * (1.0 / k)
    for _ in range(s):
        E = E.matmul(E)
    return E


def householder_product(A, tau):
    """The first k columns of H_1 ... H_k, H_i = I - tau_i v_i v_i^T, v_i the i-th column of
    A below the diagonal with 1 on it (LAPACK's orgqr), for A (*, n, k), tau (*, k)."""
    O = _O()
    n, k = A.shape[-2], A.shape[-1]
    lead = tuple(A.shape[:-2])
    rows = O.arange(n).view(n, 1)
    Q = _eye(n, A).slice(1, 0, k).expand(lead + (n, k))
    for i in range(k - 1, -1, -1):
        col = A.select(-1, i).unsqueeze(-1)                              # (*, n, 1)
        v = O.where(rows > i, col, O.where(rows == i, 1.0, 0.0).to(A.dtype))
        t = tau.select(-1, i).unsqueeze(-1).unsqueeze(-1)
        Q = Q - (v * t).matmul(v.mT.matmul(Q))
    return Q


def solve(M, B):
    """M^-1 B by Gaussian elimination without pivoting (for matrices with a positive
    definite symmetric part, as I - A/2 with A skew-symmetric), batched, with ops."""
    n = M.shape[-1]
    rows_M = [M.select(-2, i) for i in range(n)]
    rows_B = [B.select(-2, i) for i in range(n)]
    for j in range(n):
        piv = rows_M[j].select(-1, j).unsqueeze(-1)
        for i in range(j + 1, n):
            f = rows_M[i].select(-1, j).unsqueeze(-1) / piv
            rows_M[i] = rows_M[i] - f * rows_M[j]
            rows_B[i] = rows_B[i] - f * rows_B[j]
    X = [None] * n
    for i in range(n - 1, -1, -1):
        acc = rows_B[i]
        for j in range(i + 1, n):
            acc = acc - rows_M[i].select(-1, j).unsqueeze(-1) * X[j]
        X[i] = acc / rows_M[i].select(-1, i).unsqueeze(-1)
    return _O().stack(X, -2)


def geqrf(A):
    """LAPACK's QR factors of A (*, n, k): (the matrix holding R above and the reflectors
    below the diagonal, tau), as torch.geqrf; no gradient."""
    a = A.detach().numpy()
    lead = a.shape[:-2]
    out = np.empty(a.shape, dtype=a.dtype)
    taus = np.empty(lead + (min(a.shape[-2:]),), dtype=a.dtype)
    for idx in np.ndindex(*lead):
        h, tau = np.linalg.qr(a[idx].astype(np.float64), mode="raw")
        out[idx] = h.T
        taus[idx] = tau
    return (_C.from_numpy(np.ascontiguousarray(out)),
            _C.from_numpy(np.ascontiguousarray(taus)))


def diagonal(X):
    """The main diagonal of the last two dims, (*, min(n, k))."""
    m = min(X.shape[-2], X.shape[-1])
    sq = X.slice(-2, 0, m).slice(-1, 0, m)
    return (sq * _eye(m, X)).sum(-1)
