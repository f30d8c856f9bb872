"""ember.functional: the functions of torch's namespace that take their tensors as
varargs or return lists (torch.functional's and a few kin), written in Python over ops:
broadcast_tensors, broadcast_shapes, meshgrid, atleast_1d/2d/3d, chain_matmul,
tensor_split / hsplit / vsplit / dsplit (also Tensor methods), column_stack, dstack,
logspace; and the module's number constants (pi, e, inf, nan, newaxis)."""
import math
import operator

from . import _C
from .ops import api as O
from .ops import meta as M

pi = math.pi
e = math.e
inf = math.inf
nan = math.nan
newaxis = None


def _tensors(args, name):
    if len(args) == 1 and isinstance(args[0], (list, tuple)):
        args = tuple(args[0])
    for t in args:
        if not isinstance(t, _C.Tensor):
            raise TypeError(f"{name}(): expected Tensors, got {type(t).__name__}")
    return args


def broadcast_shapes(*shapes):
    """The shape the given shapes broadcast to (ints count as 1-D shapes)."""
    out = ()
    for s in shapes:
        s = (s,) if isinstance(s, int) else tuple(s)
        if any(n < 0 for n in s):
            raise RuntimeError(f"Trying to create tensor with negative dimension {min(s)}: "
                               f"{list(s)}")
        out = M.broadcast_shapes("broadcast_shapes", out, s)
    return _C.Size(out)


def broadcast_tensors(*tensors):
    """The tensors expanded to their common shape (views)."""
    tensors = _tensors(tensors, "broadcast_tensors")
    shape = broadcast_shapes(*(t.shape for t in tensors))
    return tuple(O.expand(t, list(shape)) for t in tensors)


def meshgrid(*tensors, indexing=None):
    """Coordinate grids of 1-D (or 0-d) tensors; indexing "ij" (the default, with
    PyTorch's warning when not given) or "xy" (the first two dims swapped)."""
    tensors = _tensors(tensors, "meshgrid")
    if indexing is None:
        import warnings
        warnings.warn("torch.meshgrid: in an upcoming release, it will be required to pass "
                      "the indexing argument.", UserWarning, stacklevel=2)
        indexing = "ij"
    if indexing not in ("ij", "xy"):
        raise RuntimeError(f'torch.meshgrid: indexing must be one of "xy" or "ij", but '
                           f"received: {indexing}")
    if not tensors:
        raise RuntimeError("torch.meshgrid: Expected at least one tensor")
    for t in tensors:
        if t.ndim > 1:
            raise RuntimeError(f"torch.meshgrid: Expected 0D or 1D tensor in the tensor list "
                               f"but got: {t}")
        if t.dtype is not tensors[0].dtype:
            raise RuntimeError("torch.meshgrid: Expected all tensors in the tensor list to "
                               "have the same dtype.")
    vecs = [O.reshape(t, [-1]) for t in tensors]
    swap = indexing == "xy" and len(vecs) >= 2
    if swap:
        vecs[0], vecs[1] = vecs[1], vecs[0]
    sizes = [v.shape[0] for v in vecs]
    out = []
    for k, v in enumerate(vecs):
        shape = [1] * len(vecs)
        shape[k] = sizes[k]
        out.append(O.expand(O.reshape(v, shape), sizes))
    if swap:
        out[0], out[1] = out[1], out[0]
    return tuple(out)


def _atleast(tensors, n, name):
    single = len(tensors) == 1 and isinstance(tensors[0], _C.Tensor)
    tensors = _tensors(tensors, name)
    out = []
    for t in tensors:
        if t.ndim < n:
            if n == 3 and t.ndim == 2:
                t = O.unsqueeze(t, -1)
            elif n == 3 and t.ndim == 1:
                t = O.reshape(t, [1, -1, 1])
            else:
                t = O.reshape(t, [1] * (n - t.ndim) + list(t.shape))
        out.append(t)
    return out[0] if single else tuple(out)


def atleast_1d(*tensors):
    """Each tensor with at least one dim (0-d ones become [1])."""
    return _atleast(tensors, 1, "atleast_1d")


def atleast_2d(*tensors):
    """Each tensor with at least two dims (new leading dims)."""
    return _atleast(tensors, 2, "atleast_2d")


def atleast_3d(*tensors):
    """Each tensor with at least three dims (1-D: [1, n, 1]; 2-D: [m, n, 1])."""
    return _atleast(tensors, 3, "atleast_3d")


def chain_matmul(*matrices, out=None):
    """The product of the matrices, left to right (deprecated in PyTorch for
    linalg.multi_dot)."""
    matrices = _tensors(matrices, "chain_matmul")
    if not matrices:
        raise RuntimeError("chain_matmul(): Expected one or more matrices")
    for m in matrices:
        if m.ndim != 2:
            raise RuntimeError(f"Tensor dimension is {m.ndim}, expected 2 instead.")
    res = O.clone(matrices[0]) if len(matrices) == 1 else matrices[0]
    for m in matrices[1:]:
        res = O.mm(res, m)
    return res if out is None else out.copy_(res)


def tensor_split(input, indices_or_sections=None, dim=0, *, sections=None, indices=None):
    """Views of input split along dim: into `sections` nearly equal pieces (the first
    size % sections one longer), or at the given indices."""
    if indices_or_sections is None:
        indices_or_sections = sections if sections is not None else indices
    ios = indices_or_sections
    if isinstance(ios, _C.Tensor):
        if ios.ndim > 1 or ios.dtype.is_floating_point or ios.dtype.is_complex or \
                ios.dtype is _C.bool:
            raise RuntimeError("tensor_split expected tensor_indices_or_sections to be a "
                               "zero-dimensional or one-dimensional tensor, but got a tensor "
                               f"with {ios.ndim} dims")
        ios = ios.item() if ios.ndim == 0 else ios.tolist()
    if input.ndim == 0:
        raise RuntimeError("tensor_split expected at least a 1-dimensional tensor, but got a "
                           "tensor with 0 dims")
    d = M.wrap_dim(dim, input.ndim)
    n = input.shape[d]
    if isinstance(ios, int) or hasattr(ios, "__index__") and not isinstance(ios, (list,
                                                                                  tuple)):
        k = operator.index(ios)
        if k <= 0:
            raise RuntimeError(f"number of sections must be larger than 0, got {k}")
        q, r = divmod(n, k)
        bounds, at = [], 0
        for i in range(k - 1):
            at += q + (1 if i < r else 0)
            bounds.append(at)
    else:
        bounds = [operator.index(i) for i in ios]
    out, start = [], 0
    for b in bounds + [n]:
        lo = max(0, min(n, start if start >= 0 else start + n))
        hi = max(lo, min(n, b if b >= 0 else b + n))
        out.append(O.narrow(input, d, lo, hi - lo))
        start = b
    return tuple(out)


def _split_dir(name, input, ios, dim, need):
    if input.ndim < need:
        raise RuntimeError(f"torch.{name} requires a tensor with at least {need} dimension, "
                           f"but got a tensor with {input.ndim} dimensions!")
    if isinstance(ios, int) and input.shape[dim] % ios:
        raise RuntimeError(f"torch.{name} attempted to split along dimension {dim}, but the "
                           f"size of the dimension {input.shape[dim]} is not divisible by the "
                           f"split_size {ios}!")
    return tensor_split(input, ios, dim)


def hsplit(input, indices_or_sections):
    """tensor_split along dim 1 (dim 0 for 1-D), sections dividing it exactly."""
    return _split_dir("hsplit", input, indices_or_sections, 1 if input.ndim > 1 else 0, 1)


def vsplit(input, indices_or_sections):
    """tensor_split along dim 0 of a tensor of at least 2 dims."""
    return _split_dir("vsplit", input, indices_or_sections, 0, 2)


def dsplit(input, indices_or_sections):
    """tensor_split along dim 2 of a tensor of at least 3 dims."""
    return _split_dir("dsplit", input, indices_or_sections, 2, 3)


def column_stack(tensors, *, out=None):
    """The tensors as columns: 0-d and 1-D ones become [n, 1], then hstack."""
    cols = [O.reshape(t, [-1, 1]) if t.ndim <= 1 else t for t in _tensors(tensors,
                                                                          "column_stack")]
    res = O.hstack(cols)
    return res if out is None else out.copy_(res)


def dstack(tensors, *, out=None):
    """cat along dim 2 of the tensors made at least 3-D."""
    res = O.cat(list(atleast_3d(*_tensors(tensors, "dstack"))), 2)
    return res if out is None else out.copy_(res)


def logspace(start, end, steps, base=10.0, *, out=None, dtype=None, layout=None,
             device=None, requires_grad=False, pin_memory=False):
    """base ** linspace(start, end, steps), computed in float64 and rounded once."""
    dt = dtype if dtype is not None else _C.get_default_dtype()
    exps = O.linspace(start, end, steps, dtype=_C.float64)
    res = O._to_copy(O.pow(O.full((), float(base), dtype=_C.float64), exps), dtype=dt)
    if out is not None:
        return out.copy_(res)
    return res.requires_grad_(True) if requires_grad else res


# ------------------------------------------------------------------ predicates, random


def is_complex(input):
    return input.is_complex()


def is_floating_point(input):
    return input.is_floating_point()


def is_nonzero(input):
    """The truth of a one-element tensor (RuntimeError otherwise, as PyTorch)."""
    if input.numel() == 0:
        raise RuntimeError("Boolean value of Tensor with no values is ambiguous")
    if input.numel() > 1:
        raise RuntimeError("Boolean value of Tensor with more than one value is ambiguous")
    return bool(input.item())


def is_same_size(input, other):
    return tuple(input.shape) == tuple(other.shape)


def is_signed(input):
    return input.dtype.is_signed


def _itemsize(self):
    return self.dtype.itemsize


def _nbytes(self):
    return self.numel() * self.dtype.itemsize


def _get_device(self):
    """-1: a CPU tensor."""
    return -1


def can_cast(from_, to):
    """Whether PyTorch's casting rules allow from_ to to in place (no category drop:
    complex to real, float to integer, anything but bool to bool)."""
    def cat(d):
        return 0 if d is _C.bool else 3 if d.is_complex else 2 if d.is_floating_point else 1
    return cat(from_) <= cat(to)


def normal(mean, std=1.0, size=None, *, generator=None, out=None, dtype=None, layout=None,
           device=None, pin_memory=False, requires_grad=False):
    """Normal draws of mean and std (tensors broadcast, or numbers with size): mean +
    std * randn, so a tensor mean or std gets its gradient (PyTorch's)."""
    tm, ts = isinstance(mean, _C.Tensor), isinstance(std, _C.Tensor)
    if not (tm or ts):
        if size is None:
            raise TypeError("normal() missing required argument 'size' (when mean and std "
                            "are numbers)")
        if std < 0:
            raise RuntimeError(f"normal expects std >= 0.0, but found std {std}")
        res = O.add(O.mul(O.randn(list(size), dtype=dtype, generator=generator), std), mean)
        res = res.requires_grad_(True) if requires_grad else res
        return res if out is None else out.copy_(res)
    if ts and (std.numel() and bool((std < 0).any())):
        raise RuntimeError("normal expects all elements of std >= 0.0")
    if not ts and std < 0:
        raise RuntimeError(f"normal expects std >= 0.0, but found std {std}")
    shape = broadcast_shapes(*(t.shape for t in (mean, std) if isinstance(t, _C.Tensor)))
    ref = mean if tm else std
    if not (ref.dtype.is_floating_point or ref.dtype.is_complex):
        raise NotImplementedError(f'"normal_kernel_cpu" not implemented for '
                                  f"'{ref.dtype._torch_name}'")
    noise = O.randn(list(shape), dtype=ref.dtype, generator=generator)
    res = O.add(O.mul(noise, std), mean)
    return res if out is None else out.copy_(res)


def randint_like(input, low=0, high=None, *, dtype=None, layout=None, device=None,
                 pin_memory=False, requires_grad=False, memory_format=None, generator=None):
    """randint over input's shape (and dtype unless given); randint_like(x, high) too."""
    if high is None:
        low, high = 0, low
    return O.randint(low, high, list(input.shape),
                     dtype=dtype if dtype is not None else input.dtype)


def empty_strided(size, stride, *, dtype=None, layout=None, device=None,
                  requires_grad=False, pin_memory=False):
    """An uninitialised tensor with the given strides (a view of storage big enough)."""
    size, stride = list(size), list(stride)
    if len(size) != len(stride):
        raise RuntimeError(f"mismatch in length of strides and shape")
    n = 1 + sum((s - 1) * st for s, st in zip(size, stride)) if all(size) else 0
    base = O.empty([n], dtype=dtype)
    res = O.as_strided(base, size, stride)
    return res.requires_grad_(True) if requires_grad else res


def scalar_tensor(s, *, dtype=None, layout=None, device=None, pin_memory=False,
                  requires_grad=False):
    """A 0-d tensor of s in dtype (the default float dtype unless given)."""
    res = O.full((), s, dtype=dtype if dtype is not None else _C.get_default_dtype())
    return res.requires_grad_(True) if requires_grad else res


# ------------------------------------------------------------------ windows


def _window(name, window_length, periodic, dtype, requires_grad, fn):
    """fn(n, N - 1) over n = 0 .. window_length - 1 in float64, cast once to dtype; N is
    window_length + 1 when periodic (the window of a DFT), as PyTorch's."""
    dt = dtype if dtype is not None else _C.get_default_dtype()
    if not dt.is_floating_point:
        raise RuntimeError(f"{name} expects floating point dtypes, got: {dt}")
    if window_length < 0:
        raise RuntimeError(f"{name} requires non-negative window_length, got "
                           f"window_length={window_length}")
    if window_length <= 1:
        res = O.ones([window_length], dtype=dt)
    else:
        m = float(window_length if periodic else window_length - 1)
        n = O.arange(0, window_length, 1, dtype=_C.float64)
        res = O._to_copy(fn(n, m), dtype=dt)
    return res.requires_grad_(True) if requires_grad else res


def hann_window(window_length, periodic=True, *, dtype=None, layout=None, device=None,
                pin_memory=False, requires_grad=False):
    return _window("hann_window", window_length, periodic, dtype, requires_grad,
                   lambda n, m: O.sub(0.5, O.mul(O.cos(O.mul(n, 2 * math.pi / m)), 0.5)))


def hamming_window(window_length, periodic=True, alpha=0.54, beta=0.46, *, dtype=None,
                   layout=None, device=None, pin_memory=False, requires_grad=False):
    return _window("hamming_window", window_length, periodic, dtype, requires_grad,
                   lambda n, m: O.sub(alpha, O.mul(O.cos(O.mul(n, 2 * math.pi / m)), beta)))


def blackman_window(window_length, periodic=True, *, dtype=None, layout=None, device=None,
                    pin_memory=False, requires_grad=False):
    def fn(n, m):
        return O.add(O.sub(0.42, O.mul(O.cos(O.mul(n, 2 * math.pi / m)), 0.5)),
                     O.mul(O.cos(O.mul(n, 4 * math.pi / m)), 0.08))
    return _window("blackman_window", window_length, periodic, dtype, requires_grad, fn)


def bartlett_window(window_length, periodic=True, *, dtype=None, layout=None, device=None,
                    pin_memory=False, requires_grad=False):
    return _window("bartlett_window", window_length, periodic, dtype, requires_grad,
                   lambda n, m: O.sub(1.0, O.abs(O.sub(O.mul(n, 2.0 / m), 1.0))))


def detach(input):
    return input.detach()


def adjoint(input):
    return input.adjoint()


def get_device(input):
    return input.get_device()


# ------------------------------------------------------------------ in-place forms

# torch.<name>_(t, ...) is t.<name>_(...) for these in-place methods
INPLACE_FUNCTIONS = [
    "abs_", "acos_", "acosh_", "arccos_", "arccosh_", "arcsin_", "arcsinh_", "arctan_",
    "arctanh_", "asin_", "asinh_", "atan_", "atanh_", "ceil_", "clamp_", "clamp_max_",
    "clamp_min_", "clip_", "cos_", "cosh_", "erf_", "erfc_", "exp2_", "exp_", "expm1_",
    "fill_", "fix_", "floor_", "frac_", "log10_", "log1p_", "log2_", "log_", "nan_to_num_",
    "neg_", "negative_", "reciprocal_", "relu_", "round_", "rsqrt_", "sigmoid_", "sin_",
    "sinh_", "sqrt_", "square_", "tan_", "tanh_", "trunc_", "zero_", "index_put_",
    "deg2rad_", "rad2deg_", "logit_", "sinc_", "xlogy_"]


def _inplace_function(name):
    def fn(input, *args, **kwargs):
        return getattr(input, name)(*args, **kwargs)
    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = f"input.{name}(...): in place."
    return fn


def _inplace_method(name):
    """Tensor.<name>_ for an op without an in-place kernel: the op's result written back
    into self, refused (as PyTorch) when its dtype cannot be cast to self's."""
    def method(self, *args, **kwargs):
        out = getattr(O, name)(self, *args, **kwargs)
        if not can_cast(out.dtype, self.dtype):
            raise RuntimeError(f"result type {out.dtype._torch_name} can't be cast to the "
                               f"desired output type {self.dtype._torch_name}")
        if tuple(out.shape) != tuple(self.shape):
            raise RuntimeError(f"output with shape {list(self.shape)} doesn't match the "
                               f"broadcast shape {list(out.shape)}")
        return self.copy_(out)
    method.__name__ = method.__qualname__ = name + "_"
    return method


# composites whose in-place method is their result copied back
INPLACE_METHODS = ["xlogy", "sinc", "deg2rad", "rad2deg", "logit", "sgn", "copysign",
                   "hypot", "heaviside"]


NAMES = ["pi", "e", "inf", "nan", "newaxis", "is_complex", "is_floating_point",
         "is_nonzero", "is_same_size", "is_signed", "can_cast", "normal", "randint_like",
         "empty_strided", "scalar_tensor", "hann_window", "hamming_window",
         "blackman_window", "bartlett_window", "detach", "adjoint", "get_device", "broadcast_shapes", "broadcast_tensors",
         "meshgrid", "atleast_1d", "atleast_2d", "atleast_3d", "chain_matmul",
         "tensor_split", "hsplit", "vsplit", "dsplit", "column_stack", "dstack", "logspace"]
TENSOR_METHODS = ["tensor_split", "hsplit", "vsplit", "dsplit"]


def install(namespace):
    """Puts the names into ember's namespace and the splits on Tensor."""
    g = globals()
    for name in NAMES:
        namespace[name] = g[name]
    for name in INPLACE_FUNCTIONS:
        namespace.setdefault(name, _inplace_function(name))
    attrs = {name: g[name] for name in TENSOR_METHODS}
    attrs.update({name + "_": _inplace_method(name) for name in INPLACE_METHODS})
    attrs.update(is_nonzero=is_nonzero, is_same_size=is_same_size, is_signed=is_signed,
                 get_device=_get_device, itemsize=property(_itemsize),
                 nbytes=property(_nbytes), is_cpu=property(lambda self: not self.is_meta),
                 is_inference=lambda self: False)
    _C._add_tensor_attrs(attrs)
