"""Reductions: sum, mean, prod, max/min (and amax/amin, argmax/argmin), var, std, norm,
logsumexp, softmax, log_softmax, cumsum, cumprod, all, any, sort, argsort, topk, and
sum_to_size (used by autograd)."""
import math

from .. import _C
from .. import prims as P
from . import api as O
from . import meta as M
from .elementwise import _max_binary_backward, _min_binary_backward, _p_minimum
from ..compiler.lowerings import extern, reduction
from .registry import (BINARY, COMPLEX, CUSTOM, FLOAT_ONLY, INT_TO_LONG, REDUCE, REDUCE_INDEX,
                       op)

_INF = math.inf


def _as_dims(dim):
    """dim as a reduction's dims: None (all), or a tuple."""
    if dim is None or isinstance(dim, tuple):
        return dim
    if isinstance(dim, list):
        return tuple(dim)
    return (dim,)


def _dims_of(self, dim):
    """Reduced dimensions, normalised, as a sorted tuple."""
    mask = M.reduce_mask(_as_dims(dim), self.ndim)
    return tuple(i for i, m in enumerate(mask) if m)


def _unreduce(g, self, dim, keepdim):
    """Brings a reduction's gradient back to self's rank (size 1 where reduced)."""
    if keepdim or self.ndim == 0:
        return g
    for d in _dims_of(self, dim):
        g = g.unsqueeze(d)
    return g


def _count(self, dim):
    return math.prod(self.shape[d] for d in _dims_of(self, dim))


def _abs(x):
    return O.where(x < 0, -x, x)


def _sign(x):
    return O.where(x > 0, 1, 0) - O.where(x < 0, 1, 0)


_abs_real, _sign_real = _abs, _sign


def _p_abs(x):
    """|x| with prims (NaN stays NaN)."""
    return P.maximum(x, P.neg(x))


def _reduced_meta(self, dims, keepdim, dtype):
    mask = M.reduce_mask(_as_dims(dims), self.ndim)
    return M.meta_tensor(M._reduced_shape(self.shape, mask, keepdim), dtype)


def _sum_backward(g, out, self, dim, keepdim, dtype):
    return (_unreduce(g, self, dim, keepdim).expand(self.shape),)


op("sum(Tensor self, int[1]? dim=None, bool keepdim=False, *, ScalarType? dtype=None) -> Tensor",
   REDUCE, "reduce", ufunc="add", rule=INT_TO_LONG | COMPLEX, prim=True,
   lower=reduction("sum"),
   backward=_sum_backward,
   doc="Sum over dim (all dims when None); integers and bool accumulate in int64.")


def _mean_decompose(self, dim, keepdim, dtype):
    n = _count(self, dim)
    # the sum divided by n, as eager divides it (times 1 / n rounds twice: the mean of
    # 49 ones would be below 1); n = 0 gives 0 / 0, NaN
    # (a symbolic count divides as itself: [dynamic])
    return P.div(P.sum(self, dim, keepdim, dtype=dtype), _count_value(n))


def _count_value(n):
    """A count as a divisor: a float, or a symbolic size as it is (the graph divides by
    the size it is given at run time)."""
    return float(n) if isinstance(n, int) else n


op("mean(Tensor self, int[1]? dim=None, bool keepdim=False, *, ScalarType? dtype=None) -> Tensor",
   REDUCE, "reduce", ufunc="add", rule=FLOAT_ONLY | COMPLEX,
   backward=lambda g, out, self, dim, keepdim, dtype: (
       _unreduce(g, self, dim, keepdim).expand(self.shape) / max(_count(self, dim), 1),),
   decompose=_mean_decompose,
   doc="Mean over dim; floating point inputs only (or give dtype).")

# ------------------------------------------------------------------ prod


def _cj(x):
    """conj(x) for complex tensors (the gradient convention: grad * conj(d out / d x))."""
    return O.conj(x) if x.dtype.is_complex else x


def _prod_grad(g, self, d):
    """Gradient of prod over dim d (g has self's rank): the product of all the other
    elements, as exclusive cumulative products from both ends (exact with zeros)."""
    n = self.shape[d]
    if n == 0:
        return O.zeros(self.shape, dtype=g.dtype)
    x = self.to(g.dtype) if self.dtype is not g.dtype else self
    if n == 1:
        return g.expand(self.shape)
    one = O.ones([1 if i == d else s for i, s in enumerate(self.shape)], dtype=x.dtype)
    left = O.cat([one, x.cumprod(d).narrow(d, 0, n - 1)], d)
    right = O.cat([one, x.flip([d]).cumprod(d).narrow(d, 0, n - 1)], d).flip([d])
    return g * _cj(left * right)


def _prod_dim_backward(g, out, self, dim, keepdim, dtype):
    if self.ndim == 0:
        return (g,)
    d = M.wrap_dim(dim, self.ndim)
    return (_prod_grad(_unreduce(g, self, (d,), keepdim), self, d),)


def _prod_all_backward(g, out, self, dtype):
    if self.ndim == 0:
        return (g,)
    flat = self.reshape(-1)
    return (_prod_grad(g.reshape(1), flat, 0).reshape(self.shape),)


op("prod(Tensor self, *, ScalarType? dtype=None) -> Tensor", CUSTOM, "prod_all",
   ufunc="multiply", rule=INT_TO_LONG | COMPLEX,
   meta=lambda entry, args: M.reduce(entry, (args[0], None, False, args[1])),
   backward=_prod_all_backward,
   decompose=lambda self, dtype: P.prod(O.reshape(self, [-1]), 0, False, dtype=dtype),
   doc="Product of all elements; integers and bool accumulate in int64.")
op("prod.dim_int(Tensor self, int dim, bool keepdim=False, *, ScalarType? dtype=None) -> Tensor",
   REDUCE, "reduce", ufunc="multiply", rule=INT_TO_LONG | COMPLEX, prim=True, lower=extern,
   meta=lambda entry, args: M.reduce(entry, (args[0], (args[1],)) + tuple(args[2:])),
   backward=_prod_dim_backward,
   doc="Product over dim; integers and bool accumulate in int64.")

# ------------------------------------------------------------------ max / min


def _evenly(g, out, self, dims, keepdim):
    """Gradient of a max/min over dims: shared evenly among the tied extremes."""
    dims = _as_dims(dims)
    outk = _unreduce(out, self, dims, keepdim)
    mask = self == outk
    count = mask.sum(dims if dims else None, keepdim=True)
    return _unreduce(g, self, dims, keepdim) * mask / count


op("amax(Tensor self, int[1] dim=[], bool keepdim=False) -> Tensor",
   REDUCE, "reduce", ufunc="maximum", prim=True, lower=reduction("max"),
   backward=lambda g, out, self, dim, keepdim: (_evenly(g, out, self, dim, keepdim),),
   doc="Maximum over dim (all dims when empty); NaN propagates.")

op("amin(Tensor self, int[1] dim=[], bool keepdim=False) -> Tensor",
   REDUCE, "reduce", ufunc="minimum", prim=True, lower=reduction("min"),
   backward=lambda g, out, self, dim, keepdim: (_evenly(g, out, self, dim, keepdim),),
   doc="Minimum over dim (all dims when empty); NaN propagates.")


def _extreme_dim_backward(grads, outs, self, dim, keepdim):
    g = grads[0]
    if g is None:
        return (None,)
    indices = outs[1]
    d = M.wrap_dim(dim, self.ndim)
    if self.ndim == 0:
        return (g,)
    idx = indices if keepdim else indices.unsqueeze(d)
    gk = g if keepdim else g.unsqueeze(d)
    iota = O.arange(self.shape[d]).view([-1 if i == d else 1 for i in range(self.ndim)])
    return (O.where(iota == idx, gk, 0),)



op("max(Tensor self) -> Tensor", CUSTOM, "reduce_all", ufunc="maximum",
   meta=M.reduce_all,
   backward=lambda g, out, self: (_evenly(g, out, self, (), False),),
   decompose=lambda self: P.amax(self))
op("max.dim(Tensor self, int dim, bool keepdim=False) -> (Tensor values, Tensor indices)",
   REDUCE_INDEX, "reduce_index", ufunc="maximum", reduce_ufunc="argmax",
   backward=_extreme_dim_backward,
   decompose=lambda self, dim, keepdim: (P.amax(self, dim, keepdim),
                                         P.argmax(self, dim, keepdim)))
op("max.other(Tensor self, Tensor other) -> Tensor", BINARY, "ufunc", ufunc="maximum",
   backward=_max_binary_backward,
   decompose=lambda self, other: P.maximum(self, other))

op("min(Tensor self) -> Tensor", CUSTOM, "reduce_all", ufunc="minimum",
   meta=M.reduce_all,
   backward=lambda g, out, self: (_evenly(g, out, self, (), False),),
   decompose=lambda self: P.amin(self))
op("min.dim(Tensor self, int dim, bool keepdim=False) -> (Tensor values, Tensor indices)",
   REDUCE_INDEX, "reduce_index", ufunc="minimum", reduce_ufunc="argmin",
   backward=_extreme_dim_backward,
   decompose=lambda self, dim, keepdim: (P.amin(self, dim, keepdim),
                                         O.argmin(self, dim, keepdim)))
op("min.other(Tensor self, Tensor other) -> Tensor", BINARY, "ufunc", ufunc="minimum",
   backward=_min_binary_backward,
   decompose=_p_minimum)

op("argmax(Tensor self, int? dim=None, bool keepdim=False) -> Tensor",
   CUSTOM, "argreduce", reduce_ufunc="argmax", prim=True, lower=extern, meta=M.argreduce,
   doc="Index of the first maximum (of the flattened tensor when dim is None).")


def _argmin_decompose(self, dim, keepdim):
    if dim is None:
        flat = O.reshape(self, [-1])
        r = _argmin_decompose(flat, 0, False)
        return P.view(r, [1] * self.ndim) if keepdim else r
    d = M.wrap_dim(dim, self.ndim)
    m = P.amin(self, [d], True)
    hit = P.bitwise_or(P.eq(self, m), P.ne(self, self))     # the minimum, or the first NaN
    return P.argmax(P._to_copy(hit, dtype=_C.uint8), d, keepdim)


op("argmin(Tensor self, int? dim=None, bool keepdim=False) -> Tensor",
   CUSTOM, "argreduce", reduce_ufunc="argmin", meta=M.argreduce,
   decompose=_argmin_decompose,
   doc="Index of the first minimum (of the flattened tensor when dim is None).")

# ------------------------------------------------------------------ var, std, norm


def _correction(unbiased, correction):
    if correction is not None:
        return correction
    return 0 if unbiased is False else 1


def _var_meta(entry, args):
    self, dim, unbiased, keepdim, correction = args
    if unbiased is not None and correction is not None:
        raise TypeError(f"{entry.name}() received an invalid combination of arguments: "
                        "unbiased and correction cannot both be given")
    if not (self.dtype.is_floating_point or self.dtype.is_complex):
        raise RuntimeError(f"{entry.name}(): std and var only support floating point and "
                           "complex dtypes")
    return _reduced_meta(self, dim, keepdim, M.complex_value_type(self.dtype))


def _var_decompose(self, dim, unbiased, keepdim, correction, std=False):
    if self.dtype.is_complex:     # the mean of |z - mean|^2: the parts' variances summed
        var = P.add(_var_decompose(O.real(self), dim, unbiased, keepdim, correction),
                    _var_decompose(O.imag(self), dim, unbiased, keepdim, correction))
        return P.pow(var, 0.5) if std else var
    n = _count(self, dim)
    dof = n - _correction(unbiased, correction)
    # divisions, as eager divides (not products with 1 / n, which round twice)
    mean = P.div(P.sum(self, dim, True), _count_value(n))
    d = P.add(self, P.neg(mean))
    var = P.div(P.sum(P.mul(d, d), dim, keepdim), _count_value(dof) if dof > 0 else 0.0)
    return P.pow(var, 0.5) if std else var


def _var_grad(g, self, dim, unbiased, keepdim, correction):
    """d var / d self, scaled by g (reduced)."""
    dof = _count(self, dim) - _correction(unbiased, correction)
    mean = self.mean(_as_dims(dim), keepdim=True)
    if not isinstance(dof, int):     # a symbolic count ([dynamic]): divided in the graph
        return _unreduce(g, self, dim, keepdim) * (self - mean) * 2.0 / dof
    return _unreduce(g, self, dim, keepdim) * (self - mean) * (2.0 / dof if dof > 0 else _INF)


def _std_backward(g, out, self, dim, unbiased, keepdim, correction):
    outk = _unreduce(out, self, dim, keepdim)
    gvar = O.where(outk == 0, 0, _unreduce(g, self, dim, keepdim) / (outk * 2))
    return (_var_grad(gvar, self, dim, unbiased, True, correction),)


_VAR = ("(Tensor self, int[1]? dim=None, bool? unbiased=None, bool keepdim=False, *, "
        "Scalar? correction=None) -> Tensor")

op("var" + _VAR, CUSTOM, "var", meta=_var_meta,
   backward=lambda g, out, self, dim, unbiased, keepdim, correction: (
       _var_grad(g, self, dim, unbiased, keepdim, correction),),
   decompose=_var_decompose,
   doc="Variance over dim with Bessel's correction (correction=1, or unbiased=False for "
       "0); floating point inputs only.")
op("var.unbiased(Tensor self, bool unbiased) -> Tensor", CUSTOM, "python", composite=True,
   impl=lambda self, unbiased: O.var(self, None, unbiased),
   doc="var(self, unbiased): the legacy form.")
op("std" + _VAR, CUSTOM, "var", ufunc="sqrt", meta=_var_meta,
   backward=_std_backward,
   decompose=lambda self, dim, unbiased, keepdim, correction: _var_decompose(
       self, dim, unbiased, keepdim, correction, std=True),
   doc="Standard deviation: the square root of var.")
op("std.unbiased(Tensor self, bool unbiased) -> Tensor", CUSTOM, "python", composite=True,
   impl=lambda self, unbiased: O.std(self, None, unbiased),
   doc="std(self, unbiased): the legacy form.")


def _norm_p(p, dim):
    """The vector norm's order for norm's p argument ('fro', None, numbers, inf)."""
    if p is None:
        return 2.0
    if isinstance(p, str):
        if p == "fro":
            if dim is not None and len(_as_dims(dim)) > 2:
                raise RuntimeError("norm(): linalg.matrix_norm: dim must be a 2-tuple. Got "
                                   + " ".join(str(d) for d in _as_dims(dim)))
            return 2.0
        if p == "nuc":
            raise NotImplementedError("norm(): the nuclear norm (p='nuc') is not supported")
        raise RuntimeError(f"norm(): linalg.matrix_norm: Order {p} not supported.")
    if isinstance(p, _C.Tensor):
        p = p.item()
    if not isinstance(p, (int, float)):
        raise TypeError(f"norm(): argument 'p' must be a number or a string, not "
                        f"{type(p).__name__}")
    return float(p)


def _norm_meta(entry, args):
    self, p, dim, keepdim, dtype = args
    p = _norm_p(p, dim)
    if not (self.dtype.is_floating_point or self.dtype.is_complex):
        raise RuntimeError("norm(): linalg.vector_norm: Expected a floating point or complex "
                           f"tensor as input. Got {self.dtype._torch_name}")
    if self.dtype.is_complex and dtype is not None:
        raise NotImplementedError("norm(): a dtype for the norm of a complex tensor is not "
                                  "supported")
    if dtype is not None and not dtype.is_floating_point:
        raise RuntimeError("norm(): linalg.vector_norm: dtype should be floating point or "
                           f"complex, but got {dtype._torch_name}")
    if self.numel() == 0 and (p < 0 or p == _INF):
        mask = M.reduce_mask(_as_dims(dim), self.ndim)
        if any(m and self.shape[i] == 0 for i, m in enumerate(mask)) or self.ndim == 0:
            raise RuntimeError(f"norm(): linalg.vector_norm cannot compute the {p:g} norm on "
                               "an empty tensor because the operation does not have an "
                               "identity")
    return _reduced_meta(self, dim, keepdim, dtype if dtype is not None else
                         M.complex_value_type(self.dtype))


def _norm_decompose(self, p, dim, keepdim, dtype):
    p = _norm_p(p, dim)
    x = P._to_copy(self, dtype=dtype) if dtype is not None and dtype is not self.dtype \
        else self
    dims = _as_dims(dim)
    # complex: the norm of the magnitudes (abs has no prim; capture runs complex eagerly)
    a = O.abs(x) if x.dtype.is_complex else _p_abs(x)
    if p == _INF:
        return P.amax(a, list(dims or ()), keepdim)
    if p == -_INF:
        return P.amin(a, list(dims or ()), keepdim)
    if p == 0:
        return P.sum(P._to_copy(P.ne(x, 0), dtype=a.dtype), dims, keepdim)
    if p == 1:
        return P.sum(a, dims, keepdim)
    if p == 2:
        return P.pow(P.sum(P.mul(a, a), dims, keepdim), 0.5)
    return P.pow(P.sum(P.pow(a, p), dims, keepdim), 1.0 / p)


def _norm_backward(g, out, self, p, dim, keepdim, dtype):
    """Complex inputs: the formulas with |z| and sgn(z) = z / |z| (PyTorch's convention,
    dL/dre + i dL/dim)."""
    p = _norm_p(p, dim)
    dims = _as_dims(dim)
    if self.dtype.is_complex:
        _abs, _sign = O.abs, O.sgn       # noqa: F811 (local complex forms)
    else:
        _abs, _sign = _abs_real, _sign_real
    gk = _unreduce(g, self, dims, keepdim)
    outk = _unreduce(out, self, dims, keepdim)
    if p == 0:
        return (self * 0,)
    if p == 1:
        return (gk * _sign(self),)
    if p in (_INF, -_INF):
        mask = _abs(self) == outk
        count = mask.sum(dims, keepdim=True)
        return (gk * _sign(self) * mask / count,)
    if p == 2:
        return (O.where(outk == 0, 0, gk * self / outk),)
    a = _abs(self)
    return (O.where(outk == 0, 0, gk * self * a ** (p - 2) / outk ** (p - 1)),)


op("norm(Tensor self, Any p='fro', int[1]? dim=None, bool keepdim=False, *, "
   "ScalarType? dtype=None) -> Tensor", CUSTOM, "norm", meta=_norm_meta,
   backward=_norm_backward, decompose=_norm_decompose,
   doc="The vector p-norm over dim (all dims when None): p a number, inf, -inf or 'fro' "
       "(the 2-norm).")

# ------------------------------------------------------------------ logsumexp, softmax


def _float_dtype(dt):
    return dt if dt.is_floating_point else _C.get_default_dtype()


def _logsumexp_meta(entry, args):
    self, dim, keepdim = args
    return _reduced_meta(self, dim, keepdim, _float_dtype(self.dtype))


def _logsumexp_decompose(self, dim, keepdim):
    x = self if self.dtype.is_floating_point else P._to_copy(self, dtype=_float_dtype(
        self.dtype))
    dims = _as_dims(dim)
    mask = M.reduce_mask(dims, x.ndim)
    shape = M._reduced_shape(x.shape, mask, keepdim)
    if any(m and x.shape[i] == 0 for i, m in enumerate(mask)):
        return P.full(shape, -_INF, dtype=x.dtype)
    m = P.amax(x, list(dims or ()), True)
    m = P.where(P.bitwise_or(P.eq(m, _INF), P.eq(m, -_INF)), 0.0, m)
    s = P.log(P.sum(P.exp(P.add(x, P.neg(m))), dims, keepdim))
    return P.add(s, m if keepdim else P.view(m, shape))


op("logsumexp(Tensor self, int[1] dim, bool keepdim=False) -> Tensor", CUSTOM, "logsumexp",
   meta=_logsumexp_meta,
   backward=lambda g, out, self, dim, keepdim: (
       _unreduce(g, self, dim, keepdim) * (self - _unreduce(out, self, dim, keepdim)).exp(),),
   decompose=_logsumexp_decompose,
   doc="log(sum(exp(self), dim)), computed stably (the maximum is subtracted first).")


def _softmax_meta(entry, args):
    self, dim, dtype = args
    M.wrap_dim(dim, self.ndim)
    if dtype is None and not self.dtype.is_floating_point and self.numel():
        raise NotImplementedError(f"{entry.name}(): \"{entry.name}_lastdim_kernel_impl\" not "
                                  f"implemented for '{self.dtype._torch_name}'")
    out = dtype if dtype is not None else self.dtype
    return M.meta_tensor(self.shape, out)


def _softmax_input(self, dim, dtype):
    x = P._to_copy(self, dtype=dtype) if dtype is not None and dtype is not self.dtype \
        else self
    return x, M.wrap_dim(dim, x.ndim)


def _softmax_backward(g, out, dim, log):
    """softmax: out * (g - sum(g * out)); log_softmax: g - exp(out) * sum(g), along dim.
    Over the last dim of contiguous float rows in a backward without create_graph, one
    fused C pass (nn_grad.c) computes the same."""
    if M.wrap_dim(dim, max(out.ndim, 1)) == out.ndim - 1:
        fused = _C._grad_softmax(g, out, log)
        if fused is not None:
            return (fused,)
    if log:
        return (g - out.exp() * g.sum(dim, keepdim=True),)
    return (out * (g - (g * out).sum(dim, keepdim=True)),)


def _softmax_decompose(self, dim, dtype):
    x, d = _softmax_input(self, dim, dtype)
    if x.numel() == 0:
        return P.full(x.shape, 0.0, dtype=x.dtype)
    e = P.exp(P.add(x, P.neg(P.amax(x, [d], True))))
    return P.mul(e, P.reciprocal(P.sum(e, [d], True)))


def _log_softmax_decompose(self, dim, dtype):
    x, d = _softmax_input(self, dim, dtype)
    if x.numel() == 0:
        return P.full(x.shape, 0.0, dtype=x.dtype)
    z = P.add(x, P.neg(P.amax(x, [d], True)))
    return P.add(z, P.neg(P.log(P.sum(P.exp(z), [d], True))))


op("softmax(Tensor self, int dim, ScalarType? dtype=None) -> Tensor", CUSTOM, "softmax",
   meta=_softmax_meta,
   backward=lambda g, out, self, dim, dtype: _softmax_backward(g, out, dim, False),
   decompose=_softmax_decompose,
   doc="exp(self - max) / sum(exp(self - max)) along dim (dtype: convert first).")
op("log_softmax(Tensor self, int dim, ScalarType? dtype=None) -> Tensor", CUSTOM, "softmax",
   ufunc="log", meta=_softmax_meta,
   backward=lambda g, out, self, dim, dtype: _softmax_backward(g, out, dim, True),
   decompose=_log_softmax_decompose,
   doc="self - max - log(sum(exp(self - max))) along dim.")

# ------------------------------------------------------------------ cumulative


def _cumulative_meta(entry, args):
    self, dim, dtype = args
    M.wrap_dim(dim, self.ndim)
    out = dtype if dtype is not None else (
        self.dtype if self.dtype.is_floating_point or self.dtype.is_complex else _C.int64)
    return M.meta_tensor(self.shape, out)


def _reverse_cumsum(g, d):
    return g.flip([d]).cumsum(d).flip([d])


def _cumsum_backward(g, out, self, dim, dtype):
    if self.ndim == 0:
        return (g,)
    return (_reverse_cumsum(g, M.wrap_dim(dim, self.ndim)),)


def _cumprod_backward(g, out, self, dim, dtype):
    """Exact with zeros: before the first zero of a line, sum_{j>=i} g_j out_j / x_i; at
    the first zero, the same sum of products that skip it; after it, zero."""
    if self.ndim == 0:
        return (g,)
    d = M.wrap_dim(dim, self.ndim)
    x = self.to(g.dtype) if self.dtype is not g.dtype else self
    zero = x == 0
    seen = zero.cumsum(d)
    before = seen == 0
    first = zero & (seen == 1)
    g1 = _reverse_cumsum(g * _cj(out), d) / _cj(O.where(before, x, 1))
    g2 = _reverse_cumsum(g * _cj(O.where(first, 1, x).cumprod(d)), d)
    return (O.where(before, g1, O.where(first, g2, 0)),)


op("cumsum(Tensor self, int dim, *, ScalarType? dtype=None) -> Tensor", CUSTOM, "cumulative",
   ufunc="add", rule=COMPLEX, prim=True, lower=extern, inplace_variant=True, meta=_cumulative_meta,
   backward=_cumsum_backward,
   doc="Cumulative sum along dim; integers and bool accumulate in int64.")
op("cumprod(Tensor self, int dim, *, ScalarType? dtype=None) -> Tensor", CUSTOM, "cumulative",
   ufunc="multiply", rule=COMPLEX, prim=True, lower=extern, inplace_variant=True, meta=_cumulative_meta,
   backward=_cumprod_backward,
   doc="Cumulative product along dim; integers and bool accumulate in int64.")

# ------------------------------------------------------------------ all, any


def _logical_meta(entry, args):
    self, dim, keepdim = args
    dt = _C.uint8 if self.dtype is _C.uint8 else _C.bool
    if dim == ():
        return M.meta_tensor(self.shape, dt)
    return _reduced_meta(self, dim, keepdim, dt)


def _logical_decompose(self, dim, keepdim, any_):
    dims = _as_dims(dim)
    if dims == ():
        r = P.ne(self, 0)
        return P._to_copy(r, dtype=_C.uint8) if self.dtype is _C.uint8 else r
    if any_:
        r = P.ne(P.sum(P.ne(self, 0), dims, keepdim), 0)
    else:
        r = P.eq(P.sum(P.eq(self, 0), dims, keepdim), 0)
    return P._to_copy(r, dtype=_C.uint8) if self.dtype is _C.uint8 else r


op("all(Tensor self, int[1]? dim=None, bool keepdim=False) -> Tensor", CUSTOM, "logical",
   ufunc="logical_and", meta=_logical_meta,
   decompose=lambda self, dim, keepdim: _logical_decompose(self, dim, keepdim, False),
   doc="Whether every element is non-zero (over dim); bool, or uint8 for uint8 inputs.")
op("any(Tensor self, int[1]? dim=None, bool keepdim=False) -> Tensor", CUSTOM, "logical",
   ufunc="logical_or", meta=_logical_meta,
   decompose=lambda self, dim, keepdim: _logical_decompose(self, dim, keepdim, True),
   doc="Whether any element is non-zero (over dim); bool, or uint8 for uint8 inputs.")

# ------------------------------------------------------------------ sort, topk


def _sort_meta(entry, args):
    self = args[0]
    M.wrap_dim(args[1], self.ndim)
    values = M._dense_like(self, self.dtype)
    indices = M._dense_like(self, _C.int64)
    return values, indices


def _scatter_grad(g, self, d, indices):
    """Gradient of a selection of self along d by indices: g put back at indices."""
    if self.ndim == 0:
        return g
    return O.zeros(self.shape, dtype=g.dtype).scatter(d, indices, g)


def _sort_backward(grads, outs, self, dim, descending, stable):
    g = grads[0]
    if g is None:
        return (None,)
    return (_scatter_grad(g, self, M.wrap_dim(dim, self.ndim), outs[1]),)


op("sort(Tensor self, int dim=-1, bool descending=False, *, bool? stable=None) -> "
   "(Tensor values, Tensor indices)", CUSTOM, "sort", prim=True, lower=extern, meta=_sort_meta,
   backward=_sort_backward,
   doc="Values sorted along dim and their indices; always stable (ties keep their order); "
       "NaN sorts as the largest value.")


def _argsort_meta(entry, args):
    self = args[0]
    M.wrap_dim(args[1], self.ndim)
    return M._dense_like(self, _C.int64)


op("argsort(Tensor self, int dim=-1, bool descending=False, *, bool stable=False) -> Tensor",
   CUSTOM, "argsort", meta=_argsort_meta,
   decompose=lambda self, dim, descending, stable: P.sort(self, dim, descending,
                                                          stable=True)[1],
   doc="The indices that sort self along dim (sort's indices).")


def _topk_meta(entry, args):
    self, k, dim, largest, sorted_ = args
    d = M.wrap_dim(dim, self.ndim)
    size = self.shape[d] if self.ndim else 1
    if not 0 <= k <= size:
        raise RuntimeError("topk(): selected index k out of range")
    if self.dtype is _C.bool:
        raise RuntimeError("topk(): topk does not support bool dtypes on CPU")
    shape = list(self.shape)
    if self.ndim:
        shape[d] = k
    return M.meta_tensor(shape, self.dtype), M.meta_tensor(shape, _C.int64)


def _topk_decompose(self, k, dim, largest, sorted_):
    values, indices = P.sort(self, dim, largest, stable=True)
    if self.ndim == 0:
        return values, indices
    d = M.wrap_dim(dim, self.ndim)
    return P.slice(values, d, 0, k), P.slice(indices, d, 0, k)


def _topk_backward(grads, outs, self, k, dim, largest, sorted_):
    g = grads[0]
    if g is None:
        return (None,)
    return (_scatter_grad(g, self, M.wrap_dim(dim, self.ndim), outs[1]),)


op("topk(Tensor self, SymInt k, int dim=-1, bool largest=True, bool sorted=True) -> "
   "(Tensor values, Tensor indices)", CUSTOM, "topk", meta=_topk_meta,
   backward=_topk_backward, decompose=_topk_decompose,
   doc="The k largest (or smallest) elements along dim and their indices, in order.")

# ------------------------------------------------------------------ autograd helper

from ..fx.sym_fake import same_size as _same_size, \
    symbolic_target as _symbolic_target   # noqa: E402


def _sum_to_size(self, size):
    # the engine's targets are C ints: a SymFake's hints become its sizes ([dynamic])
    size = tuple(_symbolic_target(self, size))
    shape = tuple(self.shape)
    if len(shape) == len(size) and all(map(_same_size, shape, size)):
        return self
    lead = len(shape) - len(size)
    if lead < 0 or any(s != 1 and not _same_size(s, shape[lead + i])
                       for i, s in enumerate(size)):
        raise RuntimeError(f"sum_to_size(): size {list(size)} is not expandable to size "
                           f"{list(shape)}")
    dims = tuple(range(lead)) + tuple(lead + i for i, s in enumerate(size)
                                      if s == 1 and shape[lead + i] != 1)
    r = self.sum(dims, keepdim=True) if dims else self
    return r.view(size) if lead else r


op("sum_to_size(Tensor(a) self, int[] size) -> Tensor(a)", CUSTOM, "python", composite=True,
   impl=_sum_to_size,
   doc="Sums self down to size (the inverse of broadcasting self from size).")
