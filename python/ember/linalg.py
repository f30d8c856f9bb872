"""ember.linalg: PyTorch's torch.linalg over the op table's factorization prims
(ops/factorizations.py) and ember ops; gradients come from the prims' formulas.

Also the legacy top-level forms (ember.inverse, det, svd, qr, cholesky, trace, kron,
tensordot, cross, pinverse, matrix_power, diag, norm with p='nuc') and their Tensor
methods, installed by install() below."""
from __future__ import annotations

import math

from . import _C, return_types
from .ops import api as O
from .ops.factorizations import LinAlgError, check_matrices

__all__ = ["LinAlgError", "inv", "inv_ex", "solve", "det", "slogdet", "cholesky",
           "cholesky_ex", "qr", "svd", "svdvals", "eigh", "eigvalsh", "vector_norm",
           "matrix_norm", "norm", "pinv", "matrix_rank", "matrix_power", "cross",
           "multi_dot", "matmul", "vecdot"]

_T = return_types.result_type
_INV_EX = _T("linalg_inv_ex", ("inverse", "info"))
_SLOGDET = _T("linalg_slogdet", ("sign", "logabsdet"))
_CHOLESKY_EX = _T("linalg_cholesky_ex", ("L", "info"))
_QR = _T("linalg_qr", ("Q", "R"))
_SVD = _T("linalg_svd", ("U", "S", "Vh"))
_EIGH = _T("linalg_eigh", ("eigenvalues", "eigenvectors"))
_LEGACY_SVD = _T("svd", ("U", "S", "V"))
_LEGACY_QR = _T("qr", ("Q", "R"))
_LEGACY_SLOGDET = _T("slogdet", ("sign", "logabsdet"))


def inv(A, *, out=None):
    return _out(O.linalg_inv(A), out)


def inv_ex(A, *, check_errors=False, out=None):
    try:
        r = O.linalg_inv(A)
        info = O.zeros(list(A.shape[:-2]), dtype=_C.int32)
    except LinAlgError:
        if check_errors:
            raise
        r = O.full(list(A.shape), math.nan, dtype=A.dtype)
        info = O.ones(list(A.shape[:-2]), dtype=_C.int32)
    return _INV_EX(r, info)


def solve(A, B, *, left=True, out=None):
    return _out(O.linalg_solve(A, B, left=left), out)


def det(A, *, out=None):
    return _out(O.linalg_det(A), out)


def slogdet(A, *, out=None):
    sign, lad = O._linalg_slogdet(A)
    return _SLOGDET(sign, lad)


def cholesky(A, *, upper=False, out=None):
    return _out(O.linalg_cholesky(A, upper=upper), out)


def cholesky_ex(A, *, upper=False, check_errors=False, out=None):
    try:
        L = O.linalg_cholesky(A, upper=upper)
        info = O.zeros(list(A.shape[:-2]), dtype=_C.int32)
    except LinAlgError:
        if check_errors:
            raise
        L = O.zeros(list(A.shape), dtype=A.dtype)
        info = O.ones(list(A.shape[:-2]), dtype=_C.int32)
    return _CHOLESKY_EX(L, info)


def qr(A, mode="reduced", *, out=None):
    Q, R = O.linalg_qr(A, mode)
    return _QR(Q, R)


def svd(A, full_matrices=True, *, driver=None, out=None):
    U, S, Vh = O._linalg_svd(A, full_matrices, True)
    return _SVD(U, S, Vh)


def svdvals(A, *, driver=None, out=None):
    return _out(O._linalg_svd(A, False, True)[1], out)


def eigh(A, UPLO="L", *, out=None):
    L, V = O._linalg_eigh(A, UPLO)
    return _EIGH(L, V)


def eigvalsh(A, UPLO="L", *, out=None):
    return _out(O._linalg_eigh(A, UPLO)[0], out)


# ------------------------------------------------------------------ norms


def vector_norm(x, ord=2, dim=None, keepdim=False, *, dtype=None, out=None):
    if isinstance(ord, str):
        raise RuntimeError(f"linalg.vector_norm: ord must be a number, got {ord!r}")
    return _out(O.norm(x, float(ord), dim, keepdim, dtype=dtype), out)


def _two_dims(name, A, dim):
    dim = tuple(dim)
    if len(dim) != 2:
        raise RuntimeError(f"{name}: dim must be a 2-tuple. Got "
                           + " ".join(str(d) for d in dim))
    if A.ndim < 2:
        raise RuntimeError(f"{name}: The input tensor A must have at least 2 dimensions.")
    d0, d1 = (d % A.ndim if -A.ndim <= d < A.ndim else d for d in dim)
    if not (0 <= d0 < A.ndim and 0 <= d1 < A.ndim):
        bad = dim[0] if not 0 <= d0 < A.ndim else dim[1]
        raise IndexError(f"Dimension out of range (expected to be in range of "
                         f"[{-A.ndim}, {A.ndim - 1}], but got {bad})")
    if d0 == d1:
        raise RuntimeError(f"{name}: dims must be different. Got ({dim[0]}, {dim[1]})")
    return d0, d1


def matrix_norm(A, ord="fro", dim=(-2, -1), keepdim=False, *, dtype=None, out=None):
    name = "linalg.matrix_norm"
    d0, d1 = _two_dims(name, A, dim)
    if A.is_complex() and ord not in ("fro", 1, -1, 1.0, -1.0, math.inf, -math.inf):
        raise NotImplementedError(f"{name}: ord={ord!r} of a complex matrix (singular "
                                  "values of complex matrices) is not supported")
    if not (A.is_floating_point() or A.is_complex()):
        raise RuntimeError(f"{name}: Expected a floating point or complex tensor as input. "
                           f"Got {A.dtype._torch_name}")
    if dtype is not None:
        A = A.to(dtype)
    if ord == "fro":
        return _out(O.norm(A, 2.0, [d0, d1], keepdim), out)
    if ord == "nuc" or ord in (2, -2, 2.0, -2.0):
        # singular values of the matrices (d0, d1) moved last
        m = O.movedim(A, [d0, d1], [-2, -1])
        s = O._linalg_svd(m, False, True)[1]
        r = O.sum(s, -1) if ord == "nuc" else (O.amax(s, -1) if ord > 0 else O.amin(s, -1))
    elif ord in (1, -1, 1.0, -1.0, math.inf, -math.inf):
        # 1: the largest column sum (over d0 first), inf: the largest row sum
        first, second = (d0, d1) if abs(ord) == 1 else (d1, d0)
        sums = O.sum(O.abs(A), [first], True)
        r = O.amax(sums, [second], True) if ord > 0 else O.amin(sums, [second], True)
        r = O.squeeze(O.squeeze(r, max(d0, d1)), min(d0, d1))
    else:
        raise RuntimeError(f"{name}: Order {ord} not supported.")
    if keepdim:
        for d in sorted((d0, d1)):
            r = O.unsqueeze(r, d)
    return _out(r, out)


def norm(A, ord=None, dim=None, keepdim=False, *, dtype=None, out=None):
    if dim is not None and not isinstance(dim, (tuple, list)):
        dim = (dim,)
    if isinstance(ord, str) or (dim is not None and len(dim) == 2) or \
            (dim is None and ord is not None and A.ndim == 2):
        if ord is None:
            ord = "fro"
        if dim is None:
            if A.ndim != 2:
                raise RuntimeError(f"linalg.norm: If dim is not specified but ord is, the "
                                   f"input must be 1D or 2D. Got {A.ndim}D.")
            dim = (-2, -1)
        return matrix_norm(A, ord, dim, keepdim, dtype=dtype, out=out)
    if dim is None and ord is not None and A.ndim != 1:
        raise RuntimeError(f"linalg.norm: If dim is not specified but ord is, the input must "
                           f"be 1D or 2D. Got {A.ndim}D.")
    return vector_norm(A, 2 if ord is None else ord, dim, keepdim, dtype=dtype, out=out)


# ------------------------------------------------------------------ built on the above


def _cutoff(s, atol, rtol, shape):
    """max(atol, rtol * the largest singular value) per matrix (keepdim), with
    PyTorch's defaults: rtol = eps * max(m, n) when neither is given, 0 when only a
    positive atol is."""
    if s.shape[-1]:
        smax = O.amax(s, [-1], True)
    else:
        smax = O.zeros(list(s.shape[:-1]) + [1], dtype=s.dtype)
    if rtol is None:
        given = atol is not None and (isinstance(atol, _C.Tensor) or atol > 0)
        rtol = 0.0 if given else _eps(s.dtype) * max(shape[-2:])
    tol = O.mul(smax, rtol)
    if atol is not None:
        if not isinstance(atol, _C.Tensor):
            atol = O.full([], float(atol), dtype=s.dtype)
        tol = O.maximum(tol, O.unsqueeze(atol, -1) if atol.ndim else atol)
    return tol


def _eps(dtype):
    return 2.220446049250313e-16 if dtype is _C.float64 else 1.1920928955078125e-07


def pinv(A, *, atol=None, rtol=None, hermitian=False, out=None):
    check_matrices("linalg.pinv", A, square=False)
    if hermitian:
        L, V = O._linalg_eigh(A, "L")
        tol = _cutoff(O.abs(L), atol, rtol, A.shape)
        keep = O.gt(O.abs(L), tol)
        w = O.where(keep, O.reciprocal(O.where(keep, L, 1.0)), 0.0)
        return _out(O.matmul(V * O.unsqueeze(w, -2), O.transpose(V, -2, -1)), out)
    U, S, Vh = O._linalg_svd(A, False, True)
    tol = _cutoff(S, atol, rtol, A.shape)
    keep = O.gt(S, tol)
    w = O.where(keep, O.reciprocal(O.where(keep, S, 1.0)), 0.0)
    return _out(O.matmul(O.transpose(Vh, -2, -1) * O.unsqueeze(w, -2),
                         O.transpose(U, -2, -1)), out)


def matrix_rank(A, *, atol=None, rtol=None, hermitian=False, out=None):
    check_matrices("linalg.matrix_rank", A, square=False)
    s = O.abs(O._linalg_eigh(A, "L")[0]) if hermitian else O._linalg_svd(A, False, True)[1]
    tol = _cutoff(s, atol, rtol, A.shape)
    return _out(O.sum(O.gt(s, tol), -1), out)


def matrix_power(A, n, *, out=None):
    if A.ndim < 2 or A.shape[-1] != A.shape[-2]:
        raise RuntimeError("linalg.matrix_power: A must be batches of square matrices, but "
                           f"they are {A.shape[-2] if A.ndim > 1 else 1} by "
                           f"{A.shape[-1]} matrices")
    if n == 0:
        eye = O.eye(A.shape[-1], dtype=A.dtype)
        return _out(O.expand(eye, list(A.shape)).clone(), out)
    if n < 0:
        A, n = O.linalg_inv(A), -n
    result, base = None, A
    while n:                           # by squaring, as PyTorch's
        if n & 1:
            result = base if result is None else O.matmul(result, base)
        n >>= 1
        if n:
            base = O.matmul(base, base)
    return _out(result, out)


def cross(input, other, *, dim=-1, out=None):
    if input.ndim != other.ndim:
        raise RuntimeError(f"linalg.cross: inputs must have the same number of dimensions.")
    shape = _broadcast(input, other)
    d = dim % len(shape) if -len(shape) <= dim < len(shape) else dim
    if not 0 <= d < len(shape):
        raise IndexError(f"Dimension out of range (expected to be in range of "
                         f"[{-len(shape)}, {len(shape) - 1}], but got {dim})")
    if input.shape[d] != 3 or other.shape[d] != 3:
        raise RuntimeError(f"linalg.cross: inputs dimension {dim} must have length 3. Got "
                           f"{input.shape[d]} and {other.shape[d]}")
    a = O.expand(input, list(shape))
    b = O.expand(other, list(shape))
    a0, a1, a2 = (O.narrow(a, d, i, 1) for i in range(3))
    b0, b1, b2 = (O.narrow(b, d, i, 1) for i in range(3))
    return _out(O.cat([a1 * b2 - a2 * b1, a2 * b0 - a0 * b2, a0 * b1 - a1 * b0], d), out)


def _broadcast(a, b):
    from .ops import meta
    return meta.broadcast_shapes("linalg.cross", tuple(a.shape), tuple(b.shape))


def multi_dot(tensors, *, out=None):
    if len(tensors) < 2:
        raise RuntimeError(f"multi_dot(): expected at least 2 tensors but got {len(tensors)}")
    r = tensors[0]
    for t in tensors[1:]:
        r = O.matmul(r, t)
    return _out(r, out)


def matmul(input, other, *, out=None):
    return _out(O.matmul(input, other), out)


def vecdot(x, y, *, dim=-1, out=None):
    return _out(O.sum(x * y, dim), out)


def _out(r, out):
    if out is None:
        return r
    out.resize_(list(r.shape)) if tuple(out.shape) != tuple(r.shape) else None
    out.copy_(r)
    return out


# ------------------------------------------------------------------ legacy forms


def inverse(input, *, out=None):
    return _out(O.linalg_inv(input), out)


def logdet(input):
    sign, lad = O._linalg_slogdet(input)
    return O.where(O.lt(sign, 0), math.nan, lad)


def legacy_svd(input, some=True, compute_uv=True, *, out=None):
    check_matrices("svd", input, square=False)
    U, S, Vh = O._linalg_svd(input, not some, True)
    V = O.transpose(Vh, -2, -1)
    if not compute_uv:
        U, V = O.zeros_like(U), O.zeros_like(V)
    return _LEGACY_SVD(U, S, V)


def legacy_qr(input, some=True, *, out=None):
    Q, R = O.linalg_qr(input, "reduced" if some else "complete")
    return _LEGACY_QR(Q, R)


def legacy_cholesky(input, upper=False, *, out=None):
    return _out(O.linalg_cholesky(input, upper=upper), out)


def legacy_slogdet(input):
    sign, lad = O._linalg_slogdet(input)
    return _LEGACY_SLOGDET(sign, lad)


def trace(input):
    if input.ndim != 2:
        raise RuntimeError(f"trace: expected a matrix, but got tensor with dim {input.ndim}")
    n = min(input.shape)
    if n == 0:
        return O.sum(input.reshape([-1]))
    idx = O.arange(n)
    return O.sum(input[idx, idx])


def diag(input, diagonal=0, *, out=None):
    if input.ndim == 1:
        n = input.shape[0] + abs(diagonal)
        r = O.zeros([n, n], dtype=input.dtype)
        idx = O.arange(input.shape[0])
        rows, cols = (idx, idx + diagonal) if diagonal >= 0 else (idx - diagonal, idx)
        return _out(O.index_put(r, (rows, cols), input), out)
    if input.ndim != 2:
        raise RuntimeError("diag(): Supports 1D or 2D tensors. Got " + f"{input.ndim}D")
    m, n = input.shape
    k = max(0, min(m, n - diagonal) if diagonal >= 0 else min(m + diagonal, n))
    idx = O.arange(k)
    rows, cols = (idx, idx + diagonal) if diagonal >= 0 else (idx - diagonal, idx)
    return _out(input[rows, cols], out)


def kron(input, other, *, out=None):
    nd = max(input.ndim, other.ndim)
    a = input.reshape([1] * (nd - input.ndim) + list(input.shape))
    b = other.reshape([1] * (nd - other.ndim) + list(other.shape))
    inter_a, inter_b = [], []
    for s in a.shape:
        inter_a += [s, 1]
    for s in b.shape:
        inter_b += [1, s]
    prod = O.mul(a.reshape(inter_a), b.reshape(inter_b))
    return _out(prod.reshape([x * y for x, y in zip(a.shape, b.shape)]), out)


def tensordot(a, b, dims=2, out=None):
    if isinstance(dims, _C.Tensor):
        dims = dims.tolist()
    if isinstance(dims, int):
        if dims < 0:
            raise RuntimeError(f"tensordot expects dims >= 0, but got dims={dims}")
        da, db = list(range(a.ndim - dims, a.ndim)), list(range(dims))
    else:
        da, db = dims
        da = [da] if isinstance(da, int) else list(da)
        db = [db] if isinstance(db, int) else list(db)
    if len(da) != len(db):
        raise RuntimeError("both dimension lists should have same length")
    da = [d % a.ndim for d in da]
    db = [d % b.ndim for d in db]
    for x, y in zip(da, db):
        if a.shape[x] != b.shape[y]:
            raise RuntimeError(f"contracted dimensions need to match, but first has size "
                               f"{a.shape[x]} in dim {x} and second has size {b.shape[y]} in "
                               f"dim {y}")
    fa = [d for d in range(a.ndim) if d not in da]
    fb = [d for d in range(b.ndim) if d not in db]
    k = 1
    for d in da:
        k *= a.shape[d]
    am = O.permute(a, fa + da).reshape([-1, k])
    bm = O.permute(b, db + fb).reshape([k, -1])
    r = O.matmul(am, bm).reshape([a.shape[d] for d in fa] + [b.shape[d] for d in fb])
    return _out(r, out)


def legacy_cross(input, other, dim=None, *, out=None):
    if dim is None:        # PyTorch's default: the first dimension of size 3
        shape = _broadcast(input, other)
        dim = next((i for i, s in enumerate(shape) if s == 3), None)
        if dim is None:
            raise RuntimeError("no dimension of size 3 in input")
    return cross(input, other, dim=dim, out=out)


def pinverse(input, rcond=1e-15):
    return pinv(input, rtol=rcond)


def _norm(input, p="fro", dim=None, keepdim=False, dtype=None, out=None):
    if isinstance(p, str) and p == "nuc":
        if dim is None:
            if input.ndim != 2:
                raise RuntimeError(f"linalg.matrix_norm: The input tensor A must have at "
                                   f"least 2 dimensions.")
            dim = (-2, -1)
        return matrix_norm(input, "nuc", dim, keepdim, dtype=dtype, out=out)
    return _out(_OP_NORM(input, p, dim, keepdim, dtype=dtype), out)


_OP_NORM = None

LEGACY = {"inverse": inverse, "det": det, "logdet": logdet, "slogdet": legacy_slogdet,
          "svd": legacy_svd, "qr": legacy_qr, "cholesky": legacy_cholesky, "trace": trace,
          "diag": diag, "kron": kron, "cross": legacy_cross, "pinverse": pinverse,
          "matrix_power": matrix_power}
FUNCTIONS_ONLY = {"tensordot": tensordot}


def install(namespace):
    """The legacy forms into ember's namespace (and as Tensor methods), norm's 'nuc'."""
    global _OP_NORM
    _OP_NORM = namespace["norm"]
    namespace.update(LEGACY)
    namespace.update(FUNCTIONS_ONLY)
    namespace["norm"] = _norm
    methods = dict(LEGACY)
    methods["norm"] = _norm
    _C._add_tensor_attrs(methods)
