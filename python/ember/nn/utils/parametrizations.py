"""nn.utils.parametrizations: weight_norm, spectral_norm and orthogonal as
parametrizations (nn.utils.parametrize), with PyTorch's state_dict layout
("parametrizations.weight.original0/original1", "parametrizations.weight.0._u", ...)."""
from __future__ import annotations

from enum import Enum, auto

import numpy as np

from ... import _C
from ...autograd import no_grad
from .. import functional as F
from ..modules.module import Module
from . import _linalg, parametrize
from .weight_norm import _norm_except_dim, _weight_norm

Tensor = _C.Tensor

__all__ = ["orthogonal", "spectral_norm", "weight_norm"]


def _O():
    from ...ops import api
    return api


# ------------------------------------------------------------------ orthogonal


def _is_orthogonal(Q):
    n, k = Q.shape[-2], Q.shape[-1]
    eps = 10.0 * n * float(np.finfo(Q.dtype.numpy_dtype).eps)
    d = (Q.mT.matmul(Q) - _O().eye(k, dtype=Q.dtype)).abs()
    return bool((d <= eps).all().item())


def _make_orthogonal(A):
    """The Q of A's QR factorisation with R's diagonal made positive."""
    X, tau = _linalg.geqrf(A)
    Q = _linalg.householder_product(X, tau)
    return Q * _linalg.diagonal(X).sign().unsqueeze(-2)


class _OrthMaps(Enum):
    matrix_exp = auto()
    cayley = auto()
    householder = auto()


class _Orthogonal(Module):
    def __init__(self, weight, orthogonal_map, *, use_trivialization=True):
        super().__init__()
        self.shape = weight.shape
        self.orthogonal_map = orthogonal_map
        if use_trivialization:
            self.register_buffer("base", None)

    def forward(self, X):
        n, k = X.shape[-2], X.shape[-1]
        transposed = n < k
        if transposed:
            X = X.mT
            n, k = k, n
        if self.orthogonal_map in (_OrthMaps.matrix_exp, _OrthMaps.cayley):
            X = X.tril()
            if n != k:
                X = _O().cat([X, X.new_zeros((n, n - k)).expand(tuple(X.shape[:-2]) +
                                                                 (n, n - k))], -1)
            A = X - X.mT
            if self.orthogonal_map == _OrthMaps.matrix_exp:
                Q = _linalg.matrix_exp(A)
            else:
                eye = _O().eye(n, dtype=A.dtype)
                Q = _linalg.solve(eye.add(A, alpha=-0.5), eye.add(A, alpha=0.5))
            if n != k:
                Q = Q.slice(-1, 0, k)
        else:
            A = X.tril(-1)
            tau = 2.0 / (1.0 + (A * A).sum(-2))
            Q = _linalg.householder_product(A, tau)
            Q = Q * _linalg.diagonal(X).to(_C.int32).unsqueeze(-2)
        if "base" in self._buffers and self.base is not None:
            Q = self.base.matmul(Q)
        if transposed:
            Q = Q.mT
        return Q

    def right_inverse(self, Q):
        with no_grad():
            if tuple(Q.shape) != tuple(self.shape):
                raise ValueError(f"Expected a matrix or batch of matrices of shape "
                                 f"{self.shape}. Got a tensor of shape {Q.shape}.")
            Q_init = Q
            n, k = Q.shape[-2], Q.shape[-1]
            transpose = n < k
            if transpose:
                Q = Q.mT
                n, k = k, n
            if "base" not in self._buffers:
                if self.orthogonal_map in (_OrthMaps.cayley, _OrthMaps.matrix_exp):
                    raise NotImplementedError("It is not possible to assign to the matrix "
                                              "exponential or the Cayley parametrizations "
                                              "when use_trivialization=False.")
                A, tau = _linalg.geqrf(Q)
                a = A.numpy().copy()
                m = min(a.shape[-2:])
                t = tau.numpy()
                diag = np.sign(a[..., range(m), range(m)])
                diag = np.where(t == 0.0, -diag, diag)
                a[..., range(m), range(m)] = diag
                A = _C.from_numpy(np.ascontiguousarray(a))
                return A.mT if transpose else A
            if n == k:
                Q = _make_orthogonal(Q) if not _is_orthogonal(Q) else Q.clone()
            else:
                from ... import randn
                N = randn(tuple(Q.shape[:-2]) + (n, n - k), dtype=Q.dtype)
                Q = _make_orthogonal(_O().cat([Q, N], -1))
            self.base = Q
            neg_id = _O().zeros_like(Q_init)
            m = min(neg_id.shape[-2:])
            eye = _O().eye(neg_id.shape[-2], neg_id.shape[-1], dtype=neg_id.dtype)
            return neg_id - eye if m else neg_id


def orthogonal(module, name="weight", orthogonal_map=None, *, use_trivialization=True):
    """Constrains module.<name> (a matrix or batch of matrices) to be orthogonal: the
    parametrization maps the learned tensor through matrix_exp (square, the default),
    the Cayley map, or Householder reflectors (non-square default); with
    use_trivialization the map is applied relative to a base (a buffer)."""
    weight = getattr(module, name, None)
    if not isinstance(weight, Tensor):
        raise ValueError(f"Module '{module}' has no parameter or buffer with name '{name}'")
    if weight.ndim < 2:
        raise ValueError(f"Expected a matrix or batch of matrices. Got a tensor of "
                         f"{weight.ndim} dimensions.")
    if orthogonal_map is None:
        orthogonal_map = "matrix_exp" if weight.shape[-2] == weight.shape[-1] else \
            "householder"
    orth_enum = getattr(_OrthMaps, orthogonal_map, None)
    if orth_enum is None:
        raise ValueError('orthogonal_map has to be one of "matrix_exp", "cayley", '
                         f'"householder". Got: {orthogonal_map}')
    orth = _Orthogonal(weight, orth_enum, use_trivialization=use_trivialization)
    parametrize.register_parametrization(module, name, orth, unsafe=True)
    return module


# ------------------------------------------------------------------ weight norm


class _WeightNorm(Module):
    def __init__(self, dim=0):
        super().__init__()
        self.dim = -1 if dim is None else dim

    def forward(self, weight_g, weight_v):
        return _weight_norm(weight_v, weight_g, self.dim)

    def right_inverse(self, weight):
        return _norm_except_dim(weight, 2, self.dim), weight


def weight_norm(module, name="weight", dim=0):
    """Reparametrizes module.<name> as g * v / ||v|| (the norm over every dim but dim;
    dim=None: the whole tensor): original0 is g, original1 is v. Loads state_dicts
    saved with the older nn.utils.weight_norm (<name>_g, <name>_v)."""
    parametrize.register_parametrization(module, name, _WeightNorm(dim), unsafe=True)

    def compat_hook(state_dict, prefix, local_metadata, strict, missing_keys,
                    unexpected_keys, error_msgs):
        g_key, v_key = f"{prefix}{name}_g", f"{prefix}{name}_v"
        if g_key in state_dict and v_key in state_dict:
            state_dict[f"{prefix}parametrizations.{name}.original0"] = state_dict.pop(g_key)
            state_dict[f"{prefix}parametrizations.{name}.original1"] = state_dict.pop(v_key)
    module._register_load_state_dict_pre_hook(compat_hook)
    return module


# ------------------------------------------------------------------ spectral norm


class _SpectralNorm(Module):
    def __init__(self, weight, n_power_iterations=1, dim=0, eps=1e-12):
        super().__init__()
        ndim = weight.ndim
        if dim >= ndim or dim < -ndim:
            raise IndexError(f"Dimension out of range (expected to be in range of [-{ndim}, "
                             f"{ndim - 1}] but got {dim})")
        if n_power_iterations <= 0:
            raise ValueError(f"Expected n_power_iterations to be positive, but got "
                             f"n_power_iterations={n_power_iterations}")
        self.dim = dim if dim >= 0 else dim + ndim
        self.eps = eps
        if ndim > 1:
            self.n_power_iterations = n_power_iterations
            weight_mat = self._reshape_weight_to_matrix(weight)
            h, w = weight_mat.shape
            u = weight_mat.new_empty((h,)).normal_(0, 1)
            v = weight_mat.new_empty((w,)).normal_(0, 1)
            self.register_buffer("_u", F.normalize(u, dim=0, eps=self.eps))
            self.register_buffer("_v", F.normalize(v, dim=0, eps=self.eps))
            self._power_method(weight_mat, 15)

    def _reshape_weight_to_matrix(self, weight):
        if self.dim != 0:
            weight = weight.permute([self.dim] + [d for d in range(weight.ndim)
                                                  if d != self.dim])
        return weight.flatten(1)

    def _power_method(self, weight_mat, n_power_iterations):
        """Power iteration for the largest singular vectors, in place in _u and _v."""
        with no_grad():
            weight_mat = weight_mat.detach()
            for _ in range(n_power_iterations):
                self._u.copy_(F.normalize(weight_mat.matmul(self._v), dim=0, eps=self.eps))
                self._v.copy_(F.normalize(weight_mat.mT.matmul(self._u), dim=0,
                                          eps=self.eps))

    def forward(self, weight):
        if weight.ndim == 1:
            return F.normalize(weight, dim=0, eps=self.eps)
        weight_mat = self._reshape_weight_to_matrix(weight)
        if self.training:
            self._power_method(weight_mat, self.n_power_iterations)
        u = self._u.clone()
        v = self._v.clone()
        sigma = (u * weight_mat.matmul(v)).sum()
        return weight / sigma

    def right_inverse(self, value):
        return value


def spectral_norm(module, name="weight", n_power_iterations=1, eps=1e-12, dim=None):
    """Divides module.<name> by its largest singular value, estimated by power iteration
    (one step per training forward; _u and _v are buffers). dim: the output dim (1 for
    transposed convolutions)."""
    from ..modules.conv import ConvTranspose1d, ConvTranspose2d, ConvTranspose3d
    weight = getattr(module, name, None)
    if not isinstance(weight, Tensor):
        raise ValueError(f"Module '{module}' has no parameter or buffer with name '{name}'")
    if dim is None:
        dim = 1 if isinstance(module, (ConvTranspose1d, ConvTranspose2d,
                                       ConvTranspose3d)) else 0
    parametrize.register_parametrization(module, name,
                                         _SpectralNorm(weight, n_power_iterations, dim, eps))
    return module
