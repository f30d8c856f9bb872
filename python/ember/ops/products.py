"""Vector and matrix products PyTorch names apart from matmul, written over matmul, mul
and sum (composites: their gradients, complex ones included, come from the ops they
call): dot, vdot, inner, mv, addmv, addr, baddbmm, addbmm
(chain_matmul, which takes varargs, is in ember/functional.py)."""
from .. import _C
from . import api as O
from .registry import CUSTOM, op


def _not_for_bool(kernel, *tensors):
    for t in tensors:
        if t.dtype is _C.bool:
            raise NotImplementedError(f'"{kernel}" not implemented for \'Bool\'')


def _in(rt, out):
    """out in the dtype PyTorch's kernel computes (integers accumulate in int64 here and
    wrap to the dtype as PyTorch's own accumulation does)."""
    return out if out.dtype is rt else O._to_copy(out, dtype=rt)


def _scalar_in(rt, v):
    """alpha/beta as PyTorch casts them to the result dtype."""
    if rt is _C.bool:
        return bool(v)
    if not (rt.is_floating_point or rt.is_complex):
        return int(v)
    return v


def _vectors(name, self, other):
    if self.ndim != 1 or other.ndim != 1:
        raise RuntimeError(f"1D tensors expected, but got {self.ndim}D and {other.ndim}D "
                           "tensors")
    if self.shape[0] != other.shape[0]:
        raise RuntimeError(f"inconsistent tensor size, expected tensor [{self.shape[0]}] "
                           f"and src [{other.shape[0]}] to have the same number of elements, "
                           "but got " f"{self.shape[0]} and {other.shape[0]} elements "
                           "respectively")
    if self.dtype is not other.dtype:
        raise RuntimeError(f"{name} : expected both vectors to have same dtype, but found "
                           f"{self.dtype._torch_name} and {other.dtype._torch_name}")


def _dot(self, tensor):
    _vectors("dot", self, tensor)
    _not_for_bool("dot", self)
    return _in(self.dtype, O.sum(O.mul(self, tensor)))


def _vdot(self, other):
    _vectors("vdot", self, other)
    _not_for_bool("dot", self)
    return _in(self.dtype, O.sum(O.mul(O.conj(self), other)))


op("dot(Tensor self, Tensor tensor) -> Tensor", CUSTOM, "python", composite=True,
   impl=_dot, doc="The inner product of two 1-D tensors of one dtype (no conjugation).")
op("vdot(Tensor self, Tensor other) -> Tensor", CUSTOM, "python", composite=True,
   impl=_vdot, doc="sum(conj(self) * other) of two 1-D tensors of one dtype.")


def _inner(self, other):
    if self.ndim == 0 or other.ndim == 0:
        return O.mul(self, other)
    _not_for_bool("dot" if self.ndim == other.ndim == 1 else "addmm_impl_cpu_", self, other)
    if self.shape[-1] != other.shape[-1]:
        raise RuntimeError(f"inner() the last dimension must match on both input tensors but "
                           f"got shapes {list(self.shape)} and {list(other.shape)}")
    k = self.shape[-1]
    out = O.mm(O.reshape(self, [-1, k]), O.t(O.reshape(other, [-1, k])))
    return O.reshape(out, list(self.shape[:-1]) + list(other.shape[:-1]))


op("inner(Tensor self, Tensor other) -> Tensor", CUSTOM, "python", composite=True,
   impl=_inner, doc="The sum over the last dims of self and other, every other dim kept "
                    "(self's first, then other's); a product when either is 0-d.")


def _mv(self, vec):
    if self.ndim != 2 or vec.ndim != 1:
        raise RuntimeError(f"vector + matrix @ vector expected, got 1, {self.ndim}, "
                           f"{vec.ndim}")
    _not_for_bool("addmv_impl_cpu", self, vec)
    if self.shape[1] != vec.shape[0]:
        raise RuntimeError(f"size mismatch, got input ({self.shape[0]}), mat "
                           f"({self.shape[0]}x{self.shape[1]}), vec ({vec.shape[0]})")
    return O.matmul(self, vec)


op("mv(Tensor self, Tensor vec) -> Tensor", CUSTOM, "python", composite=True, impl=_mv,
   doc="A matrix times a vector.")


def _scaled_sum(self, prod, beta, alpha, *tensors):
    """beta * self + alpha * prod, where beta == 0 ignores self (NaN too), as PyTorch;
    in the dtype self and tensors promote to, alpha and beta cast to it; contiguous."""
    rt = self.dtype
    for t in tensors:
        rt = _C.promote_types(rt, t.dtype)
    beta, alpha = _scalar_in(rt, beta), _scalar_in(rt, alpha)
    if rt is _C.bool:         # PyTorch's bool addr: (beta and self) or (alpha and prod)
        out = prod if alpha else O.zeros_like(prod)
        return O.logical_or(out, self if beta else O.zeros_like(self))
    if alpha != 1:
        prod = O.mul(prod, alpha)
    if beta == 0:
        # self ignored (its NaNs too), its gradient zero as PyTorch's
        ignored = O.where(O.ones_like(self, dtype=_C.bool), O.zeros_like(self), self)
        return O.contiguous(_in(rt, O.add(ignored, prod)))
    return O.contiguous(_in(rt, O.add(O.mul(self, beta) if beta != 1 else self, prod)))


def _addmv(self, mat, vec, beta=1, alpha=1):
    return _scaled_sum(self, _mv(mat, vec), beta, alpha, mat, vec)


def _addr(self, vec1, vec2, beta=1, alpha=1):
    if vec1.ndim != 1 or vec2.ndim != 1:
        raise RuntimeError(f"addr: Expected 1-D argument vec1, but got {vec1.ndim}-D"
                           if vec1.ndim != 1 else
                           f"addr: Expected 1-D argument vec2, but got {vec2.ndim}-D")
    res = _scaled_sum(self, O.outer(vec1, vec2), beta, alpha, vec1, vec2)
    if tuple(self.shape) == tuple(res.shape) and not self.is_contiguous():
        res = O.empty_like(self, dtype=res.dtype).copy_(res)    # self's layout, as PyTorch
    return res


def _check_batches(name, b1, b2):
    if b1.ndim != 3 or b2.ndim != 3:
        raise RuntimeError(f"batch1 must be a 3D tensor" if b1.ndim != 3 else
                           "batch2 must be a 3D tensor")


def _baddbmm(self, batch1, batch2, beta=1, alpha=1):
    _check_batches("baddbmm", batch1, batch2)
    _not_for_bool("baddbmm", self, batch1, batch2)
    return _scaled_sum(self, O.bmm(batch1, batch2), beta, alpha, batch1, batch2)


def _addbmm(self, batch1, batch2, beta=1, alpha=1):
    _check_batches("addbmm", batch1, batch2)
    _not_for_bool("addmm_impl_cpu_", self, batch1, batch2)
    return _scaled_sum(self, O.sum(O.bmm(batch1, batch2), [0]), beta, alpha, batch1, batch2)


op("addmv(Tensor self, Tensor mat, Tensor vec, *, Scalar beta=1, Scalar alpha=1) -> Tensor",
   CUSTOM, "python", composite=True, impl=_addmv,
   doc="beta * self + alpha * (mat @ vec).")
op("addr(Tensor self, Tensor vec1, Tensor vec2, *, Scalar beta=1, Scalar alpha=1) -> Tensor",
   CUSTOM, "python", composite=True, impl=_addr,
   doc="beta * self + alpha * outer(vec1, vec2).")
op("baddbmm(Tensor self, Tensor batch1, Tensor batch2, *, Scalar beta=1, Scalar alpha=1) -> "
   "Tensor", CUSTOM, "python", composite=True, impl=_baddbmm,
   doc="beta * self + alpha * bmm(batch1, batch2).")
op("addbmm(Tensor self, Tensor batch1, Tensor batch2, *, Scalar beta=1, Scalar alpha=1) -> "
   "Tensor", CUSTOM, "python", composite=True, impl=_addbmm,
   doc="beta * self + alpha * the sum over the batch of bmm(batch1, batch2).")
