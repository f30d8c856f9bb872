"""Reshaping, flipping and NaN-skipping reductions PyTorch names apart, written over
existing ops (composites: gradients from the ops they call): broadcast_to, ravel, rot90,
fliplr, flipud, diagflat, take_along_dim, unfold (windows as a strided view), nansum,
nanmean, count_nonzero."""
from .. import _C
from . import api as O
from . import meta as M
from .registry import CUSTOM, op

op("broadcast_to(Tensor(a) self, SymInt[] size) -> Tensor(a)", CUSTOM, "python",
   composite=True, impl=lambda self, size: O.expand(self, size),
   doc="expand: self broadcast to size, a view.")

op("ravel(Tensor(a) self) -> Tensor(a)", CUSTOM, "python", composite=True,
   impl=lambda self: O.reshape(self, [-1]),
   doc="The elements in one dim: a view where reshape gives one.")


def _rot90(self, k=1, dims=(0, 1)):
    dims = list(dims)
    if len(dims) != 2:
        raise RuntimeError(f"expected total rotation dims == 2, but got dims = {len(dims)}")
    if self.ndim < 2:
        raise RuntimeError(f"expected total dims >= 2, but got total dims = {self.ndim}")
    d0, d1 = (M.wrap_dim(d, self.ndim) for d in dims)
    if d0 == d1:
        raise RuntimeError(f"expected rotation dims to be different, but got dim0 = {d0} and "
                           f"dim1 = {d1}")
    k %= 4
    if k == 1:
        return O.transpose(O.flip(self, [d1]), d0, d1)
    if k == 2:
        return O.flip(self, [d0, d1])
    if k == 3:
        return O.flip(O.transpose(self, d0, d1), [d1])
    return O.clone(self)


op("rot90(Tensor self, int k=1, int[] dims=[0,1]) -> Tensor", CUSTOM, "python",
   composite=True, impl=_rot90,
   doc="Rotated by 90 degrees k times in the plane of dims (from the first towards the "
       "second).")


def _flip_dim(name, self, dim, need):
    if self.ndim < need:
        raise RuntimeError(f"Input must be >= {need}-d.")
    return O.flip(self, [dim])


op("fliplr(Tensor self) -> Tensor", CUSTOM, "python", composite=True,
   impl=lambda self: _flip_dim("fliplr", self, 1, 2), doc="flip(self, [1]).")
op("flipud(Tensor self) -> Tensor", CUSTOM, "python", composite=True,
   impl=lambda self: _flip_dim("flipud", self, 0, 1), doc="flip(self, [0]).")


def _diagflat(self, offset=0):
    from ..linalg import diag
    return diag(O.reshape(self, [-1]), offset)


op("diagflat(Tensor self, int offset=0) -> Tensor", CUSTOM, "python", composite=True,
   impl=_diagflat, doc="A 2-D matrix with self's elements (flattened) on a diagonal.")


def _take_along_dim(self, indices, dim=None):
    if dim is None:
        return O.gather(O.view(self, [-1]), 0, O.view(indices, [-1]))   # view, as PyTorch
    d = M.wrap_dim(dim, self.ndim)
    if self.ndim != indices.ndim:
        raise RuntimeError("torch.take_along_dim(): input and indices should have the same "
                           f"number of dimensions, but got {self.ndim} dimensions for input, "
                           f"and {indices.ndim} dimensions for indices")
    shape_s, shape_i = list(self.shape), list(indices.shape)
    shape_s[d] = shape_i[d] = 1
    common = M.broadcast_shapes("take_along_dim", tuple(shape_s), tuple(shape_i))
    s_shape, i_shape = list(common), list(common)
    s_shape[d], i_shape[d] = self.shape[d], indices.shape[d]
    return O.gather(O.expand(self, s_shape), d, O.expand(indices, i_shape))


op("take_along_dim(Tensor self, Tensor indices, int? dim=None) -> Tensor", CUSTOM, "python",
   composite=True, impl=_take_along_dim,
   doc="gather along dim with self and indices broadcast elsewhere; over the flattened "
       "self when dim is None.")


def _unfold(self, dimension, size, step):
    d = M.wrap_dim(dimension, max(self.ndim, 1))
    n = self.shape[d] if self.ndim else 1
    if size > n:
        raise RuntimeError(f"maximum size for tensor at dimension {d} is {n} but size is "
                           f"{size}")
    if step <= 0:
        raise RuntimeError(f"step is {step} but must be > 0")
    if self.ndim == 0:
        return O.reshape(self, [size])
    stride = list(self.stride())
    shape = list(self.shape)
    shape[d] = (n - size) // step + 1
    new_stride = stride[:d] + [stride[d] * step] + stride[d + 1:] + [stride[d]]
    return O.as_strided(self, shape + [size], new_stride, self.storage_offset())


op("unfold(Tensor(a) self, int dimension, int size, int step) -> Tensor(a)", CUSTOM,
   "python", composite=True, function=False, impl=_unfold,
   doc="Every window of size elements along dimension, step apart, in a new last dim "
       "(a view).")


def _nan_zeroed(self):
    if not (self.dtype.is_floating_point or self.dtype.is_complex):
        return self
    return O.where(O.isnan(self), O.zeros_like(self), self)


def _nansum(self, dim=None, keepdim=False, dtype=None):
    if self.dtype.is_complex:
        raise RuntimeError("nansum on CPU does not support complex inputs")
    return O.sum(_nan_zeroed(self), dim, keepdim, dtype=dtype)


def _nanmean(self, dim=None, keepdim=False, dtype=None):
    if not (self.dtype.is_floating_point or self.dtype.is_complex) and dtype is None:
        raise RuntimeError(f"nanmean(): expected input to have floating point or complex "
                           f"dtype but got {self.dtype._torch_name}")
    count = O.sum(~O.isnan(self), dim, keepdim)
    return O.div(_nansum(self, dim, keepdim, dtype), count)


op("nansum(Tensor self, int[1]? dim=None, bool keepdim=False, *, ScalarType? dtype=None) -> "
   "Tensor", CUSTOM, "python", composite=True, impl=_nansum,
   doc="sum with NaNs counted as zero.")
op("nanmean(Tensor self, int[1]? dim=None, bool keepdim=False, *, ScalarType? dtype=None) -> "
   "Tensor", CUSTOM, "python", composite=True, impl=_nanmean,
   doc="The mean of the non-NaN elements (NaN where there are none).")


def _count_nonzero(self, dim=None):
    return O.sum(O.ne(self, 0), dim)


op("count_nonzero(Tensor self, int[]? dim=None) -> Tensor", CUSTOM, "python",
   composite=True, impl=_count_nonzero, doc="The number of non-zero elements (int64).")


def _msort(self):
    return O.sort(self, 0)[0] if self.ndim else O.clone(self)


op("msort(Tensor self) -> Tensor", CUSTOM, "python", composite=True, impl=_msort,
   doc="self sorted along dim 0 (values only).")


def _dist(self, other, p=2):
    from .. import linalg
    return linalg.vector_norm(O.sub(self, other), p)


op("dist(Tensor self, Tensor other, Scalar p=2) -> Tensor", CUSTOM, "python",
   composite=True, impl=_dist, doc="The p-norm of self - other (broadcast).")


def _logcumsumexp(self, dim):
    if self.dtype.is_complex:
        raise NotImplementedError("logcumsumexp(): complex tensors are not supported")
    if not self.dtype.is_floating_point:
        raise NotImplementedError(f'"logcumsumexp_out_cpu" not implemented for '
                                  f"'{self.dtype._torch_name}'")
    if self.ndim == 0:
        return O.clone(self)
    d = M.wrap_dim(dim, self.ndim)
    m = O.amax(self, [d], True).detach()
    m = O.where(O.isfinite(m), m, O.zeros_like(m))
    return O.add(O.log(O.cumsum(O.exp(O.sub(self, m)), d)), m)


op("logcumsumexp(Tensor self, int dim) -> Tensor", CUSTOM, "python", composite=True,
   impl=_logcumsumexp,
   doc="log(cumsum(exp(self))) along dim, shifted by the line's maximum against overflow.")


def _isin(elements, test_elements, assume_unique=False, invert=False):
    e = elements if isinstance(elements, _C.Tensor) else O.full((), elements,
                                                                dtype=test_elements.dtype)
    t = test_elements if isinstance(test_elements, _C.Tensor) else O.full(
        (), test_elements, dtype=e.dtype)
    for x in (e, t):
        if x.dtype is _C.bool or x.dtype.is_complex:
            raise RuntimeError(f"Unsupported input type encountered for isin(): "
                               f"{x.dtype._torch_name}")
    hit = O.any(O.eq(O.unsqueeze(e, -1), O.reshape(t, [-1])), -1) if t.numel() else \
        O.zeros_like(e, dtype=_C.bool)
    return O.logical_not(hit) if invert else hit


op("isin(Tensor elements, Tensor test_elements, *, bool assume_unique=False, "
   "bool invert=False) -> Tensor", CUSTOM, "python", composite=True, impl=_isin,
   numbers=True, method=False,
   doc="True where an element of elements is in test_elements (False with invert).")
