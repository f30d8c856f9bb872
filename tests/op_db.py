"""The op database: sample inputs and an independent float64 reference per op-table entry.

Every entry of ember.ops.registry.ENTRIES is keyed here by its qualified name ("max.dim").
test_ops.py fails when an entry has no OpInfo (composites, covered by the ops they call,
and the random factories, which get distribution tests, are exempt), so adding an op
without a test fails CI.

References never make the NumPy call the kernel makes: elementwise ones apply a Python
function (math module) to every element through np.frompyfunc, reductions loop in Python
(math.fsum), matmul is an explicit loop, and views index NumPy arrays (the kernels never
call NumPy for views). A reference receives the sample's arguments with every tensor
turned into a NumPy object array of Python numbers, and returns an array (or a tuple of
arrays) of Python numbers; the test casts it to the result's dtype (integers wrap).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Optional

import numpy as np

import ember
from ember.ops import registry

BOOL = ("bool",)
INTS = ("uint8", "int8", "int16", "int32", "int64")
FLOATS = ("float16", "bfloat16", "float32", "float64")
ALL = BOOL + INTS + FLOATS
NO_BOOL = INTS + FLOATS
NUMBERS = INTS + FLOATS


def dt(name):
    return getattr(ember, name) if name != "bool" else ember.bool


# ---------------------------------------------------------------- samples


@dataclass
class Sample:
    args: tuple
    kwargs: dict = field(default_factory=dict)
    desc: str = ""
    grad: bool = True            # usable for gradcheck (smooth at these values)
    noncontig: bool = True       # may be re-laid out non-contiguously

    def __repr__(self):
        return f"Sample({self.desc or describe(self.args, self.kwargs)})"


@dataclass
class ErrorSample:
    args: tuple
    kwargs: dict
    exc: type
    match: str                   # regex the message must match (names the op)
    desc: str = ""
    data: bool = False           # depends on the values (meta rules cannot see it)


def describe(args, kwargs):
    def d(a):
        if isinstance(a, ember.Tensor):
            return f"T{list(a.shape)}:{a.dtype}"
        return repr(a)
    parts = [d(a) for a in args] + [f"{k}={d(v)}" for k, v in kwargs.items()]
    return ", ".join(parts)


def make(shape, dtype, rng, low=-3.0, high=3.0, nonzero=False):
    """A contiguous ember tensor of shape and dtype (a name) with values in [low, high)."""
    shape = tuple(shape)
    if dtype == "bool":
        a = rng.integers(0, 2, size=shape).astype(bool)
    elif dtype in INTS:
        lo = max(int(math.floor(low)), 0 if dtype == "uint8" else -100)
        hi = max(int(math.ceil(high)), lo + 1)
        a = rng.integers(lo, hi, size=shape).astype(dtype)
        if nonzero:
            a[a == 0] = 1
    else:
        a = rng.uniform(low, high, size=shape)
        if nonzero:
            a[np.abs(a) < 0.25] = 0.5
        a = a.astype(dtype)
    return ember.from_numpy(np.array(a, order="C", copy=True))


def noncontig(t):
    """The same values as t, laid out non-contiguously (transposed or strided); t when it
    has nothing to re-lay out."""
    if not isinstance(t, ember.Tensor) or t.numel() <= 1 or t.ndim == 0:
        return t
    a = t.detach().numpy()
    if t.ndim >= 2 and a.shape[-1] > 1 and a.shape[-2] > 1:
        base = np.ascontiguousarray(np.swapaxes(a, -1, -2))
        return ember.from_numpy(np.swapaxes(base, -1, -2))
    base = np.zeros(a.shape[:-1] + (a.shape[-1] * 2,), dtype=a.dtype)
    base[..., ::2] = a
    return ember.from_numpy(base[..., ::2])


def expanded(shape, target, dtype, rng, **kw):
    """A tensor of shape `target` that is `shape` broadcast (zero strides)."""
    small = make(shape, dtype, rng, **kw).numpy()
    return ember.from_numpy(np.broadcast_to(small, target))


# ---------------------------------------------------------------- reference helpers


def to_ref(x):
    """A sample argument as references see it: tensors become object arrays of Python
    numbers; tuples are converted element by element."""
    if isinstance(x, ember.Tensor):
        return np.array(x.detach().numpy().astype(object), dtype=object)
    if isinstance(x, tuple) and any(isinstance(e, ember.Tensor) for e in x):
        return tuple(to_ref(e) for e in x)
    return x


def elementwise(fn, nin):
    """Applies the Python function fn to every element (broadcasting), as an object array."""
    uf = np.frompyfunc(fn, nin, 1)

    def ref(*args):
        with np.errstate(all="ignore"):
            out = uf(*args[:nin])
        return np.asarray(out, dtype=object)
    return ref


def _nan_or(fn):
    def safe(*a):
        try:
            return fn(*a)
        except ValueError:
            return math.nan
        except ZeroDivisionError:
            return _signed_inf(*a)
        except OverflowError:
            return math.inf
    return safe


def _signed_inf(a, b=None):
    if b is None:      # reciprocal of zero
        return math.copysign(math.inf, 1.0 if not isinstance(a, float) else a or 1.0)
    if a == 0 or (isinstance(a, float) and math.isnan(a)):
        return math.nan
    sb = math.copysign(1.0, b) if isinstance(b, float) else 1.0
    return math.copysign(math.inf, a * sb)


def _fl(x):
    return float(x)


def _ref_exp(x):
    try:
        return math.exp(x)
    except OverflowError:
        return math.inf


def _ref_sigmoid(x):
    x = float(x)
    if x < -700:
        return 0.0
    return 1.0 / (1.0 + math.exp(-x))


def _ref_log(x):
    x = float(x)
    if x == 0:
        return -math.inf
    if x < 0 or math.isnan(x):
        return math.nan
    return math.log(x)


def _ref_reciprocal(x):
    x = float(x)
    if x == 0:
        return math.copysign(math.inf, x)
    return 1.0 / x


def _ref_max2(a, b):
    if isinstance(a, float) and math.isnan(a):
        return a
    if isinstance(b, float) and math.isnan(b):
        return b
    return a if a >= b else b


def _ref_relu(x):
    if isinstance(x, float) and math.isnan(x):
        return x
    return x if x > 0 else type(x)(0)


def _ref_pow(a, b):
    if isinstance(a, bool):
        a = int(a)
    if isinstance(b, bool):
        b = int(b)
    if isinstance(a, int) and isinstance(b, int):
        return a ** b
    try:
        return math.pow(a, b)
    except ValueError:
        return math.nan
    except ZeroDivisionError:
        return math.inf
    except OverflowError:
        return math.inf


def _ref_div(a, b, rounding_mode=None):
    exact_ints = isinstance(a, int) and isinstance(b, int)
    if rounding_mode is None:
        a, b = float(a), float(b)
        if b == 0:
            return _signed_inf(a, b)
        return a / b
    if exact_ints:
        a, b = int(a), int(b)
        if rounding_mode == "floor":
            return a // b
        q = abs(a) // abs(b)
        return q if (a >= 0) == (b >= 0) else -q
    if rounding_mode == "floor":
        return float(a) // float(b)      # Python's floor division, as PyTorch's div_floor
    return float(math.trunc(float(a) / float(b)))


def _ref_and(a, b):
    return a & b


def _ref_or(a, b):
    return a | b


def reduce_ref(fn, empty=None):
    """A reduction over dims (None or () = all) with Python's own arithmetic."""
    def ref(a, dim=None, keepdim=False, *rest, **kw):
        a = np.asarray(a, dtype=object)
        nd = a.ndim
        if dim is None or (isinstance(dim, tuple) and len(dim) == 0):
            dims = list(range(nd))
        else:
            dims = sorted({d % max(nd, 1) for d in ((dim,) if isinstance(dim, int) else dim)})
            if nd == 0:
                dims = []
        keep = [d for d in range(nd) if d not in dims]
        outer_shape = [a.shape[d] for d in keep]
        inner = math.prod(a.shape[d] for d in dims)
        moved = np.transpose(a, keep + dims).reshape(math.prod(outer_shape), inner)
        vals = [fn(list(row)) for row in moved]
        out = np.empty(len(vals), dtype=object)
        out[:] = vals
        out = out.reshape(outer_shape)
        if keepdim:
            out = out.reshape([1 if d in dims else a.shape[d] for d in range(nd)])
        return out
    return ref


def _sum(xs):
    if any(isinstance(x, float) for x in xs):
        return math.fsum(xs)
    return sum(int(x) for x in xs)


def _mean(xs):
    if not xs:
        return math.nan
    return math.fsum(float(x) for x in xs) / len(xs)


def _amax(xs):
    best = xs[0]
    for x in xs:
        if isinstance(x, float) and math.isnan(x):
            return x
        if x > best:
            best = x
    return best


def _argmax(xs):
    best, idx = xs[0], 0
    for i, x in enumerate(xs):
        if isinstance(best, float) and math.isnan(best):
            break
        if isinstance(x, float) and math.isnan(x):
            return i
        if x > best:
            best, idx = x, i
    return idx


def _ref_sum(a, dim=None, keepdim=False, dtype=None):
    return reduce_ref(_sum)(a, dim, keepdim)


def _ref_mean(a, dim=None, keepdim=False, dtype=None):
    return reduce_ref(_mean)(a, dim, keepdim)


def _ref_amax(a, dim=(), keepdim=False):
    return reduce_ref(_amax)(a, dim, keepdim)


def _ref_max_all(a):
    return reduce_ref(_amax)(a, None, False)


def _ref_max_dim(a, dim, keepdim=False):
    return (reduce_ref(_amax)(a, dim, keepdim), reduce_ref(_argmax)(a, dim, keepdim))


def _ref_argmax(a, dim=None, keepdim=False):
    if dim is None:
        flat = np.asarray(a, dtype=object).reshape(-1)
        r = np.empty((), dtype=object)
        r[()] = _argmax(list(flat))
        return r.reshape((1,) * np.ndim(a)) if keepdim else r
    return reduce_ref(_argmax)(a, dim, keepdim)


def _ref_matmul(a, b):
    a = np.asarray(a, dtype=object)
    b = np.asarray(b, dtype=object)
    va, vb = a.ndim == 1, b.ndim == 1
    if va:
        a = a.reshape(1, -1)
    if vb:
        b = b.reshape(-1, 1)
    batch = tuple(np.broadcast_shapes(a.shape[:-2], b.shape[:-2]))
    a = np.broadcast_to(a, batch + a.shape[-2:])
    b = np.broadcast_to(b, batch + b.shape[-2:])
    n, k, m = a.shape[-2], a.shape[-1], b.shape[-1]
    out = np.empty(batch + (n, m), dtype=object)
    floaty = any(isinstance(x, float) for x in a.reshape(-1)) or \
        any(isinstance(x, float) for x in b.reshape(-1))
    for idx in np.ndindex(*batch):
        for i in range(n):
            for j in range(m):
                terms = [a[idx + (i, p)] * b[idx + (p, j)] for p in range(k)]
                out[idx + (i, j)] = math.fsum(terms) if floaty else sum(terms)
    if va:
        out = out[..., 0, :]
    if vb:
        out = out[..., 0]
    return out


def _copy_ref(a, *rest, **kw):
    return np.array(a, dtype=object)


def _ref_view(a, size):
    a = np.asarray(a, dtype=object)
    return a.reshape(tuple(size))


def _ref_expand(a, size, implicit=False):
    a = np.asarray(a, dtype=object)
    size = list(size)
    off = len(size) - a.ndim
    for i in range(a.ndim):
        if size[off + i] == -1:
            size[off + i] = a.shape[i]
    return np.broadcast_to(a, tuple(size))


def _ref_squeeze(a, dim=None):
    a = np.asarray(a, dtype=object)
    if a.ndim == 0:
        return a
    if dim is None:
        dims = range(a.ndim)
    else:
        dims = [d % a.ndim for d in ((dim,) if isinstance(dim, int) else dim)]
    return a.reshape([n for i, n in enumerate(a.shape) if not (i in dims and n == 1)])


def _ref_select(a, dim, index):
    a = np.asarray(a, dtype=object)
    return np.take(a, index, axis=dim)


def _ref_slice(a, dim=0, start=None, end=None, step=1):
    a = np.asarray(a, dtype=object)
    key = [slice(None)] * a.ndim
    key[dim] = slice(start, end, step)
    return a[tuple(key)]


def _ref_select_scatter(a, src, dim, index):
    out = np.array(a, dtype=object)
    key = [slice(None)] * out.ndim
    key[dim] = index
    out[tuple(key)] = src
    return out


def _ref_slice_scatter(a, src, dim=0, start=None, end=None, step=1):
    out = np.array(a, dtype=object)
    key = [slice(None)] * out.ndim
    key[dim] = slice(start, end, step)
    out[tuple(key)] = src
    return out


def _filled(value):
    def ref(size, *rest, **kw):
        out = np.empty(tuple(size), dtype=object)
        out.fill(value)
        return out
    return ref


def _like_filled(value):
    def ref(self, *rest, **kw):
        out = np.empty(np.shape(self), dtype=object)
        out.fill(value)
        return out
    return ref


def _ref_full(size, fill_value, **kw):
    return _filled(fill_value)(size)


def _ref_full_like(self, fill_value, **kw):
    return _like_filled(fill_value)(self)


def _ref_arange(*args, **kw):
    if len(args) == 1:
        start, end, step = 0, args[0], 1
    else:
        start, end = args[0], args[1]
        step = args[2] if len(args) > 2 else kw.get("step", 1)
    n = max(0, math.ceil((end - start) / step))
    out = np.empty(n, dtype=object)
    out[:] = [start + i * step for i in range(n)]
    return out


def _ref_where(cond, a, b):
    return elementwise(lambda c, x, y: x if c else y, 3)(cond, a, b)


def _ref_permute(a, dims):
    return np.transpose(np.asarray(a, dtype=object), [d % max(np.ndim(a), 1) for d in dims])


def _ref_transpose(a, d0, d1):
    a = np.asarray(a, dtype=object)
    if a.ndim == 0:
        return a
    return np.swapaxes(a, d0, d1)


def _ref_t(a):
    a = np.asarray(a, dtype=object)
    return a.T if a.ndim == 2 else a


def _ref_unsqueeze(a, dim):
    a = np.asarray(a, dtype=object)
    return np.expand_dims(a, dim % (a.ndim + 1))


def _ref_sum_to_size(a, size):
    a = np.asarray(a, dtype=object)
    lead = a.ndim - len(size)
    dims = tuple(range(lead)) + tuple(lead + i for i, s in enumerate(size)
                                      if s == 1 and a.shape[lead + i] != 1)
    r = reduce_ref(_sum)(a, dims, True) if dims else a
    return r.reshape(tuple(size))


# ---------------------------------------------------------------- the OpInfo


@dataclass
class OpInfo:
    name: str                                  # qualified name of the table entry
    samples: Callable                          # samples(dtype_name, rng) -> [Sample]
    ref: Optional[Callable]                    # None: values are not checked (empty, random)
    dtypes: tuple = ALL                        # dtypes the op computes (others raise)
    reduction: bool = False                    # tolerance grows with the reduced size
    errors: Callable = None                    # errors() -> [ErrorSample]
    torch_fn: Optional[Callable] = None        # torch_fn(torch, *args, **kw); default by name
    grad_samples: Optional[Callable] = None    # float64 samples for gradcheck (default: samples)
    inplace: bool = False
    random: bool = False
    check: Optional[Callable] = None           # random ops: check(out, *args, **kw) -> bool
    dynamic_shape: bool = False                # result shape depends on values: no meta rule
    no_derivative: bool = False                # PyTorch records the op but backward raises
    composite_grad: bool = False               # a composite: gradcheck it all the same
    grad_elsewhere: str = ""                   # gradcheck cannot apply: why, and which
    #                                            test checks the gradient instead
    canonical: Optional[Callable] = None       # factors unique up to signs: maps the
    #                                            outputs (float64 arrays) to one form

    @property
    def entry(self):
        return ENTRY[self.name]

    @property
    def differentiable(self):
        e = self.entry
        if e.inplace and e.functional is not None:
            return e.functional.differentiable
        return e.differentiable

    def call(self, *args, **kwargs):
        """Calls the op as users do: ember.<name>(...) or a method of the first argument."""
        e = self.entry
        if e.function:
            return getattr(ember, e.name)(*args, **kwargs)
        if e.method:
            return getattr(args[0], e.name)(*args[1:], **kwargs)
        return ember.ops.public()[e.name](*args, **kwargs)

    def reference(self, *args, **kwargs):
        return self.ref(*[to_ref(a) for a in args],
                        **{k: to_ref(v) for k, v in kwargs.items()})

    def call_torch(self, torch, *args, **kwargs):
        if self.torch_fn is not None:
            return self.torch_fn(torch, *args, **kwargs)
        e = self.entry
        if e.function and hasattr(torch, e.name):
            return getattr(torch, e.name)(*args, **kwargs)
        return getattr(args[0], e.name)(*args[1:], **kwargs)


ENTRY = {e.qualified_name: e for e in registry.ENTRIES}
OPS: dict = {}


def add(info: OpInfo):
    if info.name in OPS:
        raise ValueError(f"duplicate OpInfo {info.name}")
    OPS[info.name] = info
    return info


def exempt(entry) -> bool:
    """Entries that need no OpInfo: composites and the random factories."""
    return entry.composite or entry.kernel in ("rand", "randn")


# ---------------------------------------------------------------- elementwise samples

_UNARY_SHAPES = [(2, 3), (5,), (), (0,), (2, 0, 3)]


def unary_samples(low=-3.0, high=3.0, nonzero=False):
    def samples(dtype, rng):
        out = [Sample((make(s, dtype, rng, low, high, nonzero),), desc=f"{s}")
               for s in _UNARY_SHAPES]
        out.append(Sample((expanded((1, 3), (4, 3), dtype, rng, low=low, high=high,
                                    nonzero=nonzero),), desc="expanded", grad=False))
        return out
    return samples


_BINARY_SHAPES = [((2, 3), (2, 3)), ((2, 3), (3,)), ((4, 1), (1, 3)), ((2, 1, 3), (4, 1)),
                  ((), (2, 3)), ((2, 3), ()), ((), ()), ((0, 3), (3,)), ((2, 0), (1,))]


def binary_samples(low=-3.0, high=3.0, other_low=None, other_high=None, nonzero=False,
                   numbers=(2, -1.5, True), kwargs=None, other_dtype=None, mixed=True,
                   wrap=True):
    olow = low if other_low is None else other_low
    ohigh = high if other_high is None else other_high

    def samples(dtype, rng):
        kw = dict(kwargs or {})
        out = []
        for sa, sb in _BINARY_SHAPES:
            out.append(Sample((make(sa, dtype, rng, low, high),
                               make(sb, other_dtype or dtype, rng, olow, ohigh, nonzero)),
                              dict(kw), desc=f"{sa} {sb}"))
        out.append(Sample((expanded((1, 3), (4, 3), dtype, rng, low=low, high=high),
                           make((4, 3), dtype, rng, olow, ohigh, nonzero)), dict(kw),
                          desc="expanded self", grad=False))
        if wrap and dtype in ("uint8", "int8") and 2 in numbers:
            # an int out of the dtype's range wraps, as PyTorch casts scalars
            out.append(Sample((make((2, 3), dtype, rng, low, high), -1 if dtype == "uint8"
                               else 300), dict(kw), desc="number out of range",
                              grad=False))
        for n in numbers:
            if nonzero and not n:
                continue
            out.append(Sample((make((2, 3), dtype, rng, low, high), n), dict(kw),
                              desc=f"number {n!r}"))
        if mixed and dtype != "float64":
            # promotion: a float64 0-d tensor does not raise a dim tensor's category
            out.append(Sample((make((2, 3), dtype, rng, low, high),
                               make((), "float64", rng, olow, ohigh, nonzero)), dict(kw),
                              desc="0-d float64 other", grad=False))
            out.append(Sample((make((2, 3), dtype, rng, low, high),
                               make((3,), "int32", rng, olow, ohigh, nonzero)), dict(kw),
                              desc="int32 other", grad=False))
        return out
    return samples


def binary_errors(name, number_ok=True):
    def errors():
        a, b = ember.ones(2, 3), ember.ones(4)
        out = [ErrorSample((a, b), {}, RuntimeError,
                           rf"{name}\(\).*\(3\).*\(4\).*\[2, 3\].*\[4\]", "shape mismatch"),
               ErrorSample((a, "x"), {}, TypeError, rf"{name}\(\)", "wrong type")]
        return out
    return errors


def unary_errors(name):
    def errors():
        return [ErrorSample(("x",), {}, TypeError, rf"{name}\(\)", "not a tensor")]
    return errors


def _t(name):
    """torch_fn calling torch.ops.aten.<name> (for ops torch only has as aten ops)."""
    def fn(torch, *args, **kwargs):
        return getattr(torch.ops.aten, name)(*args, **kwargs)
    return fn


# ---------------------------------------------------------------- elementwise ops

add(OpInfo("add", binary_samples(), elementwise(lambda a, b: a + b, 2),
           errors=lambda: binary_errors("add")() + [
               ErrorSample((ember.ones(2, dtype=ember.int64), ember.ones(2, dtype=ember.int64)),
                           {"alpha": 0.5}, RuntimeError, r"add\(\).*alpha", "float alpha")]))
add(OpInfo("sub", binary_samples(numbers=(2, -1.5)), elementwise(lambda a, b: a - b, 2),
           dtypes=NO_BOOL,
           errors=lambda: binary_errors("sub")() + [
               ErrorSample((ember.ones(2, dtype=ember.bool), ember.ones(2, dtype=ember.bool)),
                           {}, RuntimeError, r"sub\(\).*bool", "bool"),
               ErrorSample((ember.ones(2), True), {}, RuntimeError, r"sub\(\).*bool",
                           "bool number")]))
add(OpInfo("mul", binary_samples(), elementwise(lambda a, b: a * b, 2),
           errors=binary_errors("mul")))
add(OpInfo("div", binary_samples(nonzero=True, low=-4, high=4), elementwise(_ref_div, 2),
           errors=lambda: binary_errors("div")() + [
               ErrorSample((ember.ones(2), ember.ones(2)), {"rounding_mode": "bad"},
                           RuntimeError, r"div\(\).*rounding_mode", "bad rounding mode"),
               ErrorSample((ember.ones(2, dtype=ember.int64), ember.zeros(2, dtype=ember.int64)),
                           {"rounding_mode": "floor"}, RuntimeError, r"div\(\).*ZeroDivision",
                           "integer division by zero", data=True)]))


def _div_rounding_samples(mode):
    base = binary_samples(nonzero=True, low=-7, high=7, kwargs={"rounding_mode": mode},
                          numbers=(3, -2.5))

    def samples(dtype, rng):
        out = base(dtype, rng)
        for s in out:       # piecewise constant: zero gradient away from the jumps
            s.grad = s.grad and "expanded" not in s.desc
        return out
    return samples


def _div_rounding_ref(a, b, rounding_mode=None):
    return elementwise(lambda x, y: _ref_div(x, y, rounding_mode), 2)(a, b)


# rounding modes are the same entry, with other samples and dtypes (bool has none)
_DIV_FLOOR = OpInfo("div", _div_rounding_samples("floor"), _div_rounding_ref, dtypes=NO_BOOL)
_DIV_TRUNC = OpInfo("div", _div_rounding_samples("trunc"), _div_rounding_ref, dtypes=NO_BOOL)
EXTRA = {"div[floor]": _DIV_FLOOR, "div[trunc]": _DIV_TRUNC}

add(OpInfo("neg", unary_samples(), elementwise(lambda a: -a, 1), dtypes=NO_BOOL,
           errors=lambda: unary_errors("neg")() + [
               ErrorSample((ember.ones(2, dtype=ember.bool),), {}, RuntimeError,
                           r"neg\(\).*bool", "bool")]))
add(OpInfo("reciprocal", unary_samples(nonzero=True), elementwise(_ref_reciprocal, 1),
           errors=unary_errors("reciprocal")))


def _pow_samples(dtype, rng):
    if dtype in FLOATS:
        s = binary_samples(low=0.5, high=2.0, other_low=-2, other_high=2,
                           numbers=(2, 0.5, -1), mixed=False, wrap=False)(dtype, rng)
        s.append(Sample((make((2, 3), dtype, rng, -2, 2), 3), desc="negative base, int exp"))
        # torch's pow.Scalar returns a contiguous result whatever the exponent's layout
        s.append(Sample((2.0, make((2, 3), dtype, rng, -2, 2)), desc="number base",
                        noncontig=False))
        return s
    return binary_samples(low=-3, high=4, other_low=0, other_high=4, numbers=(2, 0, 3),
                          mixed=False, wrap=False)(dtype, rng)


add(OpInfo("pow", _pow_samples, elementwise(_ref_pow, 2), dtypes=NO_BOOL,
           errors=lambda: binary_errors("pow")() + [
               ErrorSample((ember.ones(2, dtype=ember.int64), -1), {}, RuntimeError,
                           r"pow\(\).*negative", "int to a negative number"),
               ErrorSample((ember.ones(2, dtype=ember.bool), ember.ones(2, dtype=ember.bool)),
                           {}, NotImplementedError, r"pow\(\).*Bool", "bool")]))

add(OpInfo("exp", unary_samples(), elementwise(_ref_exp, 1), errors=unary_errors("exp")))
add(OpInfo("log", unary_samples(low=0.1, high=5.0), elementwise(_ref_log, 1),
           errors=unary_errors("log")))
add(OpInfo("tanh", unary_samples(), elementwise(lambda a: math.tanh(a), 1),
           errors=unary_errors("tanh")))
add(OpInfo("sigmoid", unary_samples(), elementwise(_ref_sigmoid, 1),
           errors=unary_errors("sigmoid")))
add(OpInfo("relu", unary_samples(), elementwise(_ref_relu, 1), dtypes=NO_BOOL,
           errors=lambda: unary_errors("relu")() + [
               ErrorSample((ember.ones(2, dtype=ember.bool),), {}, RuntimeError,
                           r"relu\(\).*[Bb]ool", "bool")]))


def _tie_samples(base):
    def samples(dtype, rng):
        out = base(dtype, rng)
        a = make((2, 3), dtype, rng)
        out.append(Sample((a, a.clone()), desc="all tied", grad=False))
        if dtype in FLOATS:
            x = np.array([1.0, math.nan, 2.0, -1.0], dtype=dtype)
            y = np.array([math.nan, 0.5, 3.0, -2.0], dtype=dtype)
            out.append(Sample((ember.from_numpy(x), ember.from_numpy(y)), desc="nan",
                              grad=False))
        return out
    return samples


add(OpInfo("maximum", _tie_samples(binary_samples(numbers=())), elementwise(_ref_max2, 2),
           errors=lambda: [ErrorSample((ember.ones(2, 3), ember.ones(4)), {}, RuntimeError,
                                       r"maximum\(\).*\[2, 3\].*\[4\]", "shape mismatch")]))

for _name, _fn in (("eq", lambda a, b: a == b), ("ne", lambda a, b: a != b),
                   ("lt", lambda a, b: a < b), ("le", lambda a, b: a <= b),
                   ("gt", lambda a, b: a > b), ("ge", lambda a, b: a >= b)):
    # (a number out of an integer dtype's range wraps before comparing: not sampled)
    add(OpInfo(_name, _tie_samples(binary_samples(low=-2, high=2, wrap=False)),
               elementwise(_fn, 2),
               errors=binary_errors(_name)))

for _name, _fn in (("bitwise_and", _ref_and), ("bitwise_or", _ref_or)):
    add(OpInfo(_name, binary_samples(low=0, high=16, numbers=(5, True), mixed=False),
               elementwise(_fn, 2), dtypes=BOOL + INTS,
               errors=(lambda n: lambda: binary_errors(n)() + [
                   ErrorSample((ember.ones(2), ember.ones(2)), {}, NotImplementedError,
                               rf"{n}\(\).*Float", "float")])(_name)))


def _where_samples(dtype, rng):
    out = []
    for sc, sa, sb in (((2, 3), (2, 3), (2, 3)), ((2, 3), (3,), (2, 1)), ((), (2, 3), ()),
                       ((0, 3), (3,), (3,)), ((2, 1), (1, 3), (2, 3))):
        c = make(sc, "bool", rng)
        out.append(Sample((c, make(sa, dtype, rng), make(sb, dtype, rng)),
                          desc=f"{sc} {sa} {sb}"))
    out.append(Sample((make((2, 3), "bool", rng), make((2, 3), dtype, rng), 0),
                      desc="number other"))
    out.append(Sample((make((2, 3), "bool", rng), 1.5, make((2, 3), dtype, rng)),
                      desc="number self"))
    return out


add(OpInfo("where", _where_samples, _ref_where,
           errors=lambda: [
               ErrorSample((ember.ones(2, 3), ember.ones(2, 3), ember.ones(2, 3)), {},
                           RuntimeError, r"where\(\).*bool", "float condition"),
               ErrorSample((ember.ones(2, 3, dtype=ember.bool), ember.ones(2, 3),
                            ember.ones(4)), {}, RuntimeError,
                           r"where\(\).*\[2, 3\].*\[4\]", "shape mismatch")]))

# ---------------------------------------------------------------- elementwise: the rest
# (floor_divide .. nan_to_num, activations; references in Python's own arithmetic and the
# math module, one element at a time)


def _special_sample(dtype, values=(math.nan, math.inf, -math.inf, 0.0, -0.0, 1.5, -2.5)):
    """A float sample of special values (NaN, infinities, signed zeros); none for ints."""
    if dtype not in FLOATS:
        return []
    return [Sample((ember.from_numpy(np.array(values, dtype=dtype)),), desc="specials",
                   grad=False, noncontig=False)]


def _with_specials(base, values=None):
    def samples(dtype, rng):
        extra = _special_sample(dtype) if values is None else _special_sample(dtype, values)
        return base(dtype, rng) + extra
    return samples


def _float_ref(fn):
    """fn on float(x), NaN where math raises (domain), +-inf on overflow."""
    def f(*a):
        a = [float(x) for x in a]
        if any(math.isnan(x) for x in a):
            return math.nan
        try:
            return fn(*a)
        except (ValueError, ZeroDivisionError):
            return math.nan
        except OverflowError:
            return math.inf
    return f


def _ref_floor_divide(a, b):
    if isinstance(a, float) or isinstance(b, float):
        if b == 0:
            return _signed_inf(float(a), float(b))     # a / 0, as IEEE division
        return float(a) // float(b)
    return int(a) // int(b)


def _ref_remainder(a, b):
    if isinstance(a, float) or isinstance(b, float):
        return math.nan if b == 0 else float(a) % float(b)
    return int(a) % int(b)


def _int_div_errors(name):
    def errors():
        return binary_errors(name)() + [
            ErrorSample((ember.ones(2, dtype=ember.int64), ember.zeros(2, dtype=ember.int64)),
                        {}, RuntimeError, rf"{name}\(\)|ZeroDivision", "integer division by "
                        "zero", data=True),
            ErrorSample((ember.ones(2, dtype=ember.int32), 0), {}, RuntimeError,
                        rf"{name}\(\)|ZeroDivision", "by the number 0", data=True),
            ErrorSample((ember.ones(2, dtype=ember.bool), ember.ones(2, dtype=ember.bool)), {},
                        NotImplementedError, rf"{name}\(\).*Bool", "bool")]
    return errors


def _divmod_samples(dtype, rng):
    out = binary_samples(nonzero=True, low=-7, high=7, numbers=(3, -2.5))(dtype, rng)
    if dtype in FLOATS:
        a = np.array([7.0, -7.0, 7.0, -7.0, 0.0, 5.5, -5.5, 1.0], dtype=dtype)
        b = np.array([2.0, 2.0, -2.0, -2.0, 3.0, 0.0, 0.0, 0.1], dtype=dtype)
        out.append(Sample((ember.from_numpy(a), ember.from_numpy(b)), desc="signs, zero",
                          grad=False))
    else:
        out.append(Sample((make((2, 3), dtype, rng, -7, 7), -3 if dtype != "uint8" else 3),
                          desc="negative number", grad=False))
    divisor = ember.ones(2, 3, dtype=dt(dtype)) if dtype == "bool" else \
        make((2, 3), dtype, rng, 1, 7, nonzero=True)
    out.append(Sample((5, divisor), desc="number self", grad=False, noncontig=False))
    return out


add(OpInfo("floor_divide", _divmod_samples, elementwise(_ref_floor_divide, 2),
           dtypes=NO_BOOL, errors=_int_div_errors("floor_divide"), no_derivative=True))
add(OpInfo("remainder", _divmod_samples, elementwise(_ref_remainder, 2), dtypes=NO_BOOL,
           errors=_int_div_errors("remainder"),
           torch_fn=lambda torch, a, b: torch.remainder(a, b)))

add(OpInfo("abs", _with_specials(unary_samples(nonzero=True)), elementwise(abs, 1),
           dtypes=NO_BOOL,
           errors=lambda: unary_errors("abs")() + [
               ErrorSample((ember.ones(2, dtype=ember.bool),), {}, NotImplementedError,
                           r"abs\(\).*Bool", "bool")]))


def _ref_sign(a):
    if isinstance(a, bool):
        return a
    return (a > 0) - (a < 0)


add(OpInfo("sign", _with_specials(unary_samples(nonzero=True)), elementwise(_ref_sign, 1),
           errors=unary_errors("sign")))

def _round_half_even(x):
    return round(x) if isinstance(x, float) else x     # Python's round: halves to even


def _rounding_samples(dtype, rng):
    out = unary_samples(-5.0, 5.0)(dtype, rng) + _special_sample(dtype)
    if dtype in FLOATS:
        ties = np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 0.49999997, -0.49999997, 1e7 + 0.5],
                        dtype=dtype)
        out.append(Sample((ember.from_numpy(ties),), desc="halves", grad=False))
    return out


def _rounding_ref(fn):
    def f(x):
        if isinstance(x, float) and (math.isnan(x) or math.isinf(x)):
            return x
        return float(fn(x)) if isinstance(x, float) else x
    return f


for _name, _fn in (("floor", math.floor), ("ceil", math.ceil), ("trunc", math.trunc),
                   ("round", round)):
    add(OpInfo(_name, _rounding_samples, elementwise(_rounding_ref(_fn), 1), dtypes=NO_BOOL,
               errors=(lambda n: lambda: unary_errors(n)() + [
                   ErrorSample((ember.ones(2, dtype=ember.bool),), {}, NotImplementedError,
                               rf"{n}\(\).*Bool", "bool")])(_name)))


def _ref_round_decimals(a, decimals):
    def f(x):
        x = float(x)
        if math.isnan(x) or math.isinf(x):
            return x
        if decimals >= 0:
            return round(x * 10.0 ** decimals) / 10.0 ** decimals
        return round(x / 10.0 ** -decimals) * 10.0 ** -decimals
    return elementwise(f, 1)(a)


def _round_decimals_samples(dtype, rng):
    out = []
    for d in (1, 2, -1, 0):
        out += [Sample((make((2, 3), dtype, rng, -50, 50),), {"decimals": d}, desc=f"{d}"),
                Sample((make((), dtype, rng, -50, 50),), {"decimals": d}, desc=f"0-d {d}")]
    out.append(Sample((make((0, 3), dtype, rng),), {"decimals": 1}, desc="empty"))
    return out


add(OpInfo("round.decimals", _round_decimals_samples, _ref_round_decimals, dtypes=FLOATS,
           torch_fn=lambda torch, *a, **k: torch.round(*a, **k),
           errors=lambda: [ErrorSample((ember.ones(2, dtype=ember.int32),), {"decimals": 1},
                                       NotImplementedError, r"round\(\).*Int",
                                       "integers")]))
add(OpInfo("frac", _with_specials(unary_samples(-5.0, 5.0)),
           elementwise(_float_ref(lambda x: x - math.trunc(x) if math.isfinite(x) else
                                  math.nan), 1), dtypes=FLOATS,
           errors=lambda: unary_errors("frac")() + [
               ErrorSample((ember.ones(2, dtype=ember.int8),), {}, NotImplementedError,
                           r"frac\(\).*Char", "integers")]))


_UNARY_FLOAT_REFS = [
    # name, reference, sample range, wider range (no gradient), NaN/inf/signed zeros
    ("exp2", lambda x: 2.0 ** x, (-3.0, 3.0), (-14.0, 14.0), True),
    ("expm1", math.expm1, (-3.0, 3.0), (-1e-3, 1e-3), True),
    ("log2", lambda x: -math.inf if x == 0 else math.log2(x), (0.1, 5.0), (1e-3, 1e3), True),
    ("log10", lambda x: -math.inf if x == 0 else math.log10(x), (0.1, 5.0), (1e-3, 1e3),
     True),
    ("log1p", lambda x: -math.inf if x == -1 else math.log1p(x), (-0.9, 5.0), (-1e-4, 1e-4),
     True),
    ("sqrt", math.sqrt, (0.1, 5.0), (-2.0, 100.0), True),
    ("rsqrt", lambda x: math.copysign(math.inf, x) if x == 0 else 1.0 / math.sqrt(x),
     (0.1, 5.0), (-2.0, 100.0), True),
    ("sin", math.sin, (-4.0, 4.0), (-100.0, 100.0), True),
    ("cos", math.cos, (-4.0, 4.0), (-100.0, 100.0), True),
    ("tan", math.tan, (-1.4, 1.4), None, True),
    ("atan", math.atan, (-4.0, 4.0), (-1e4, 1e4), True),
    ("sinh", math.sinh, (-3.0, 3.0), (-10.0, 10.0), True),
    ("cosh", math.cosh, (-3.0, 3.0), (-10.0, 10.0), True),
    ("asin", math.asin, (-0.9, 0.9), (-1.5, 1.5), True),
    ("acos", math.acos, (-0.9, 0.9), (-1.5, 1.5), True),
    ("asinh", math.asinh, (-4.0, 4.0), (-1e4, 1e4), True),
    ("acosh", math.acosh, (1.1, 5.0), (0.0, 1e4), True),
    ("atanh", lambda x: math.copysign(math.inf, x) if abs(x) == 1 else math.atanh(x),
     (-0.9, 0.9), (-1.5, 1.5), True),
    ("erf", math.erf, (-3.0, 3.0), (-6.0, 6.0), True),
    ("erfc", math.erfc, (-3.0, 3.0), (-6.0, 9.0), True),
]


def _unary_float_samples(lo, hi, wide=None, specials=False):
    def samples(dtype, rng):
        out = unary_samples(lo, hi)(dtype, rng)
        if wide is not None and dtype in FLOATS:
            out.append(Sample((make((4, 5), dtype, rng, wide[0], wide[1]),), desc="wide",
                              grad=False))
        if specials:
            out += _special_sample(dtype)
        return out
    return samples


for _name, _fn, (_lo, _hi), _wide, _specials in _UNARY_FLOAT_REFS:
    add(OpInfo(_name, _unary_float_samples(_lo, _hi, _wide, _specials),
               elementwise(_float_ref(_fn), 1), errors=unary_errors(_name)))


def _ref_min2(a, b):
    if isinstance(a, float) and math.isnan(a):
        return a
    if isinstance(b, float) and math.isnan(b):
        return b
    return a if a <= b else b


add(OpInfo("minimum", _tie_samples(binary_samples(numbers=())), elementwise(_ref_min2, 2),
           errors=lambda: [ErrorSample((ember.ones(2, 3), ember.ones(4)), {}, RuntimeError,
                                       r"minimum\(\).*\[2, 3\].*\[4\]", "shape mismatch")]))


def _ref_isnan(a):
    return isinstance(a, float) and math.isnan(a)


def _ref_isinf(a):
    return isinstance(a, float) and math.isinf(a)


def _ref_isfinite(a):
    return not isinstance(a, float) or math.isfinite(a)


for _name, _fn in (("isnan", _ref_isnan), ("isinf", _ref_isinf), ("isfinite", _ref_isfinite)):
    add(OpInfo(_name, _with_specials(unary_samples()), elementwise(_fn, 1),
               errors=unary_errors(_name)))


def _logical_samples(dtype, rng):
    out = binary_samples(low=-1, high=2, numbers=(), wrap=False)(dtype, rng)
    if dtype in FLOATS:
        out.append(Sample((
            ember.from_numpy(np.array([math.nan, 0.0, -0.0, math.inf], dtype=dtype)),
            ember.from_numpy(np.array([1.0, math.nan, 0.0, 0.0], dtype=dtype))),
            desc="specials", grad=False))
    return out


def _logical_errors(name):
    def errors():
        return [ErrorSample((ember.ones(2, 3), ember.ones(4)), {}, RuntimeError,
                            rf"{name}\(\).*\[2, 3\].*\[4\]", "shape mismatch"),
                ErrorSample((ember.ones(2, 3), 1), {}, TypeError, rf"{name}\(\)",
                            "a number")]
    return errors


for _name, _fn in (("logical_and", lambda a, b: bool(a) and bool(b)),
                   ("logical_or", lambda a, b: bool(a) or bool(b)),
                   ("logical_xor", lambda a, b: bool(a) != bool(b))):
    add(OpInfo(_name, _logical_samples, elementwise(_fn, 2), errors=_logical_errors(_name)))
add(OpInfo("logical_not", _with_specials(unary_samples(-1, 2)), elementwise(lambda a: not a, 1),
           errors=unary_errors("logical_not")))


def _bitwise_errors(name, bool_ok=True):
    def errors():
        out = binary_errors(name)() + [
            ErrorSample((ember.ones(2, dtype=ember.int64), ember.ones(2)), {},
                        NotImplementedError, rf"{name}\(\).*Float", "float")]
        if not bool_ok:
            out.append(ErrorSample((ember.ones(2, dtype=ember.bool),
                                    ember.ones(2, dtype=ember.bool)), {},
                                   NotImplementedError, rf"{name}\(\).*Bool", "bool"))
        return out
    return errors


add(OpInfo("bitwise_xor", binary_samples(low=-16, high=16, numbers=(5, -3, True),
                                         mixed=False),
           elementwise(lambda a, b: a ^ b, 2), dtypes=BOOL + INTS,
           errors=_bitwise_errors("bitwise_xor")))
add(OpInfo("bitwise_not", unary_samples(-16, 16), elementwise(
    lambda a: (not a) if isinstance(a, bool) else ~a, 1), dtypes=BOOL + INTS,
    errors=lambda: unary_errors("bitwise_not")() + [
        ErrorSample((ember.ones(2),), {}, NotImplementedError, r"bitwise_not\(\).*Float",
                    "float")]))


def _shift_samples(dtype, rng):
    out = binary_samples(low=-20, high=20, other_low=0, other_high=10, numbers=(1, 3),
                         mixed=False, wrap=False)(dtype, rng)
    if dtype in INTS:
        bits = np.dtype(dtype).itemsize * 8
        counts = ember.from_numpy(np.array([0, 1, bits - 1, bits, bits + 3], dtype=dtype))
        base = ember.from_numpy(np.array([1, 5, -3 if dtype != "uint8" else 200, 7, 9],
                                         dtype=dtype))
        out.append(Sample((base, counts), desc="counts up to the width", grad=False))
        out.append(Sample((3, make((4,), dtype, rng, 0, 5)), desc="number self",
                          grad=False, noncontig=False))
    return out


for _name, _fn in (("bitwise_left_shift", lambda a, b: int(a) << int(b)),
                   ("bitwise_right_shift", lambda a, b: int(a) >> int(b))):
    add(OpInfo(_name, _shift_samples, elementwise(_fn, 2), dtypes=INTS,
               errors=_bitwise_errors(_name, bool_ok=False)))

# ---- clamp


def _ref_clamp_elem(a, lo, hi):
    for v in (a, lo, hi):
        if isinstance(v, float) and math.isnan(v):
            return math.nan
    r = a
    if lo is not None and r < lo:
        r = lo
    if hi is not None and r > hi:
        r = hi
    return r


def _ref_clamp(a, min=None, max=None):
    return elementwise(_ref_clamp_elem, 3)(a, min, max)


def _clamp_samples(dtype, rng):
    lo, hi = (-1.5, 1.0) if dtype in FLOATS else (-1, 2)
    if dtype == "uint8":
        lo = 1
    t = lambda shape, a=-3, b=3: make(shape, dtype, rng, a, b)  # noqa: E731
    out = [Sample((t((2, 3)), lo, hi), desc="numbers"),
           Sample((t((2, 3)),), {"min": lo}, desc="min only"),
           Sample((t((2, 3)),), {"max": hi}, desc="max only"),
           Sample((t((5,)), hi, lo), desc="min > max", grad=False),
           Sample((t(()), lo, hi), desc="0-d"),
           Sample((t((0, 3)), lo, hi), desc="empty"),
           Sample((t((2, 3)), make((3,), dtype, rng, -3, 0), make((2, 1), dtype, rng, 0, 3)),
                  desc="tensor bounds"),
           Sample((t((2, 3)), None, make((2, 3), dtype, rng, -1, 1)), desc="tensor max"),
           Sample((t((2, 3)), make((), dtype, rng, -3, 0)), desc="0-d min"),
           Sample((expanded((1, 3), (4, 3), dtype, rng), lo, hi), desc="expanded",
                  grad=False),
           Sample((t((2, 3)), 0.5, 2.5), desc="float bounds (promote integers)", grad=False)]
    if dtype in FLOATS:
        x = np.array([math.nan, 1.0, -3.0, math.inf, -math.inf], dtype=dtype)
        out.append(Sample((ember.from_numpy(x), -1.0, 1.0), desc="specials", grad=False))
        out.append(Sample((ember.from_numpy(x), math.nan, 1.0), desc="NaN bound", grad=False))
        out.append(Sample((t((2, 3)), make((2, 3), "float64", rng, -1, 0)),
                          desc="float64 bound", grad=False))
    return out


add(OpInfo("clamp", _clamp_samples, _ref_clamp, dtypes=NO_BOOL,
           errors=lambda: [
               ErrorSample((ember.ones(2, 3),), {}, RuntimeError, r"clamp.*min.*max",
                           "no bounds"),
               ErrorSample((ember.ones(2, dtype=ember.bool), True, True), {},
                           NotImplementedError, r"clamp\(\).*Bool", "bool"),
               ErrorSample((ember.ones(2, 3), ember.ones(4)), {}, RuntimeError,
                           r"clamp\(\).*\[2, 3\].*\[4\]", "shape mismatch")]))

# ---- lerp, addcmul, addcdiv, nan_to_num


def _ref_lerp(s, e, w):
    return elementwise(lambda a, b, c: a + c * (b - a), 3)(s, e, w)


def _lerp_samples(scalar):
    def samples(dtype, rng):
        t = lambda shape, lo=-3, hi=3: make(shape, dtype, rng, lo, hi)  # noqa: E731
        if scalar:
            return [Sample((t((2, 3)), t((2, 3)), 0.3)), Sample((t((2, 3)), t((3,)), 0.75)),
                    Sample((t(()), t((2, 3)), -0.5)), Sample((t((0, 3)), t((3,)), 1.0)),
                    Sample((t((4, 1)), t((1, 3)), 1.0), desc="weight 1"),
                    Sample((expanded((1, 3), (4, 3), dtype, rng), t((4, 3)), 0.6),
                           grad=False, desc="expanded")]
        w = lambda shape: make(shape, dtype, rng, -0.5, 1.5)  # noqa: E731
        return [Sample((t((2, 3)), t((2, 3)), w((2, 3)))),
                Sample((t((2, 3)), t((3,)), w((2, 1)))),
                Sample((t((2, 1)), t((1, 3)), w(()))),
                Sample((t(()), t(()), w(()))),
                Sample((t((0, 3)), t((3,)), w((3,)))),
                Sample((expanded((1, 3), (4, 3), dtype, rng), t((4, 3)), w((4, 3))),
                       grad=False, desc="expanded")]
    return samples


def _lerp_errors(scalar):
    def errors():
        f, d = ember.ones(2), ember.ones(2, dtype=ember.float64)
        i = ember.ones(2, dtype=ember.int64)
        w = (lambda t: 0.5) if scalar else (lambda t: t)
        out = [ErrorSample((f, d, w(f)), {}, RuntimeError, r"lerp\(\).*dtype", "end's dtype"),
               ErrorSample((i, i, w(i)), {}, NotImplementedError, r"lerp\(\).*Long",
                           "integers"),
               ErrorSample((f, ember.ones(3), w(f)), {}, RuntimeError,
                           r"lerp\(\).*\[2\].*\[3\]", "shape mismatch")]
        if not scalar:
            out.append(ErrorSample((f, f, d), {}, RuntimeError, r"lerp\(\).*dtype",
                                   "weight's dtype"))
        return out
    return errors


add(OpInfo("lerp.Tensor", _lerp_samples(False), _ref_lerp, dtypes=FLOATS,
           errors=_lerp_errors(False), torch_fn=lambda torch, *a, **k: torch.lerp(*a, **k)))
add(OpInfo("lerp.Scalar", _lerp_samples(True), _ref_lerp, dtypes=FLOATS,
           errors=_lerp_errors(True), torch_fn=lambda torch, *a, **k: torch.lerp(*a, **k)))


def _addc_ref(div):
    def ref(a, b, c, value=1):
        def f(x, y, z):
            ints = not any(isinstance(v, float) for v in (x, y, z))
            v = int(value) if ints and not div else value
            return x + v * (y / z if div else y * z)
        return elementwise(f, 3)(a, b, c)
    return ref


def _addc_samples(div):
    def samples(dtype, rng):
        nz = dict(nonzero=True) if div else {}
        t = lambda shape: make(shape, dtype, rng)  # noqa: E731
        u = lambda shape: make(shape, dtype, rng, **nz)  # noqa: E731
        value = 0.5 if dtype in FLOATS else 2
        out = [Sample((t((2, 3)), t((2, 3)), u((2, 3)))),
               Sample((t((2, 3)), t((3,)), u((2, 1))), {"value": value}),
               Sample((t(()), t((2, 3)), u(())), {"value": -2}),
               Sample((t((0, 3)), t((3,)), u((3,))), {"value": value}),
               Sample((expanded((1, 3), (4, 3), dtype, rng), t((4, 3)), u((4, 3))),
                      grad=False, desc="expanded"),
               Sample((t((2, 3)), make((2, 3), "float32", rng),
                       make((3,), "float64", rng, nonzero=True)), {"value": 2},
                      desc="mixed dtypes", grad=False)]
        if not div and dtype in INTS:
            out.append(Sample((t((2, 3)), t((2, 3)), t((2, 3))), {"value": 2.5},
                              desc="float value, integer tensors"))
        return out
    return samples


add(OpInfo("addcmul", _addc_samples(False), _addc_ref(False), dtypes=NO_BOOL,
           errors=lambda: [
               ErrorSample((ember.ones(2, dtype=ember.bool),) * 3, {}, NotImplementedError,
                           r"addcmul\(\).*Bool", "bool"),
               ErrorSample((ember.ones(2), ember.ones(2), 2), {}, TypeError, r"addcmul\(\)",
                           "a number"),
               ErrorSample((ember.ones(2), ember.ones(3), ember.ones(2)), {}, RuntimeError,
                           r"addcmul\(\).*\[2\].*\[3\]", "shape mismatch")]))
add(OpInfo("addcdiv", _addc_samples(True), _addc_ref(True), dtypes=FLOATS,
           errors=lambda: [
               ErrorSample((ember.ones(2), ember.ones(2, dtype=ember.int64),
                            ember.ones(2, dtype=ember.int32)), {}, RuntimeError,
                           r"addcdiv\(\).*Integer division", "integer division"),
               ErrorSample((ember.ones(2), ember.ones(3), ember.ones(2)), {}, RuntimeError,
                           r"addcdiv\(\).*\[2\].*\[3\]", "shape mismatch")]))


def _nan_to_num_samples(dtype, rng):
    out = unary_samples()(dtype, rng)
    out += [Sample((make((2, 3), dtype, rng),), {"nan": 1.0, "posinf": 2.0, "neginf": -3.0},
                   desc="all given")]
    if dtype in FLOATS:
        x = ember.from_numpy(np.array([math.nan, math.inf, -math.inf, 1.5, -0.0], dtype=dtype))
        out += [Sample((x,), {"nan": 1.0, "posinf": 2.0, "neginf": -3.0}, desc="specials",
                       grad=False),
                Sample((x,), {"nan": -7.5, "posinf": 100.0, "neginf": -100.0},
                       desc="specials 2", grad=False),
                Sample((ember.from_numpy(np.array([math.nan, 2.0], dtype=dtype)),),
                       desc="NaN, default replacement", grad=False)]
    return out


def _ref_nan_to_num(a, nan=None, posinf=None, neginf=None):
    def f(x):
        if isinstance(x, float):
            if math.isnan(x):
                return 0.0 if nan is None else nan
            if x == math.inf:
                return posinf        # the tests give posinf and neginf with infinities
            if x == -math.inf:
                return neginf
        return x
    return elementwise(f, 1)(a)


add(OpInfo("nan_to_num", _nan_to_num_samples, _ref_nan_to_num,
           errors=unary_errors("nan_to_num")))

# ---- activations (torch.nn.functional)


def _F(name):
    def fn(torch, *args, **kwargs):
        return getattr(torch.nn.functional, name)(*args, **kwargs)
    return fn


def _ref_gelu(a, approximate="none"):
    def f(x):
        x = float(x)
        if approximate == "tanh":
            inner = math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)
            return 0.5 * x * (1 + math.tanh(inner))
        return 0.5 * x * math.erfc(-x / math.sqrt(2))
    return elementwise(f, 1)(a)


def _act_samples(lo=-4.0, hi=4.0, kwargs=(), specials=True):
    def samples(dtype, rng):
        out = unary_samples(lo, hi)(dtype, rng)
        for kw in kwargs:
            out.append(Sample((make((2, 3), dtype, rng, lo, hi),), dict(kw), desc=str(kw)))
        if specials and dtype in FLOATS:
            x = np.array([math.nan, 0.0, -0.0, 20.0, -20.0, 1e-3], dtype=dtype)
            out.append(Sample((ember.from_numpy(x),), desc="specials", grad=False))
        return out
    return samples


def _act_errors(name, int_exc=NotImplementedError):
    def errors():
        return unary_errors(name)() + [
            ErrorSample((ember.ones(2, dtype=ember.int64),), {}, int_exc,
                        rf"{name}\(\)", "integer input")]
    return errors


def _ref_softplus(a, beta=1, threshold=20):
    def f(x):
        x = float(x)
        if math.isnan(x):
            return x
        if x * beta > threshold:
            return x
        return math.log1p(math.exp(x * beta)) / beta
    return elementwise(f, 1)(a)


def _ref_elu(a, alpha=1, scale=1, input_scale=1):
    def f(x):
        x = float(x)
        return scale * x if x > 0 else alpha * scale * math.expm1(x * input_scale)
    return elementwise(f, 1)(a)


def _ref_hardtanh(a, min_val=-1, max_val=1):
    def f(x):
        lo, hi = (min_val, max_val) if isinstance(x, float) else (int(min_val), int(max_val))
        if isinstance(x, float) and math.isnan(x):
            return x
        return min(max(x, lo), hi)
    return elementwise(f, 1)(a)


def _ref_mish(a):
    def f(x):
        x = float(x)
        sp = x if x > 30 else math.log1p(math.exp(x))
        return x * math.tanh(sp)
    return elementwise(f, 1)(a)


add(OpInfo("gelu", _act_samples(kwargs=({"approximate": "tanh"}, {"approximate": "none"})),
           _ref_gelu, dtypes=FLOATS, torch_fn=_F("gelu"),
           errors=lambda: _act_errors("gelu")() + [
               ErrorSample((ember.ones(2),), {"approximate": "bad"}, RuntimeError,
                           r"gelu\(\).*approximate", "bad approximate")]))
add(OpInfo("silu", _act_samples(), elementwise(_float_ref(lambda x: x / (1 + math.exp(-x))
                                                          if x > -700 else -0.0), 1),
           dtypes=FLOATS, torch_fn=_F("silu"), errors=_act_errors("silu")))
add(OpInfo("mish", _act_samples(), _ref_mish, dtypes=FLOATS, torch_fn=_F("mish"),
           errors=_act_errors("mish")))
add(OpInfo("softplus", _act_samples(kwargs=({"beta": 2, "threshold": 3},
                                            {"beta": 0.5, "threshold": 1.0})),
           _ref_softplus, dtypes=FLOATS, torch_fn=_F("softplus"),
           errors=_act_errors("softplus")))
add(OpInfo("elu", _act_samples(kwargs=({"alpha": 0.5},
                                       {"alpha": 1.6732632, "scale": 1.0507010},
                                       {"alpha": 2.0, "scale": 1.5, "input_scale": 0.5})),
           _ref_elu, dtypes=FLOATS, errors=_act_errors("elu"),
           torch_fn=lambda torch, x, *a, **k: torch.ops.aten.elu(x, *a, **k)
           if isinstance(x, torch.Tensor) else torch.nn.functional.elu(x, *a, **k)))
add(OpInfo("leaky_relu", _act_samples(kwargs=({"negative_slope": 0.2},
                                              {"negative_slope": -1.5})),
           lambda a, negative_slope=0.01: elementwise(
               lambda x: x if x > 0 else x * negative_slope, 1)(a),
           dtypes=FLOATS, torch_fn=_F("leaky_relu"), errors=_act_errors("leaky_relu")))


def _hardtanh_samples(dtype, rng):
    out = unary_samples(-3, 3)(dtype, rng)
    lo = 0 if dtype == "uint8" else -1.5
    out += [Sample((make((2, 3), dtype, rng, -3, 3),), {"min_val": lo, "max_val": 2.5},
                   desc="bounds"),
            Sample((make((2, 3), dtype, rng, -3, 3), lo, 0.5), desc="positional bounds")]
    if dtype in FLOATS:
        out.append(Sample((ember.from_numpy(np.array([math.nan, math.inf, -math.inf, 0.5],
                                                     dtype=dtype)),), desc="specials",
                          grad=False))
    return out


add(OpInfo("hardtanh", _hardtanh_samples, _ref_hardtanh,
           dtypes=("int8", "int16", "int32", "int64") + FLOATS, torch_fn=_F("hardtanh"),
           errors=lambda: unary_errors("hardtanh")() + [
               ErrorSample((ember.ones(2, dtype=ember.bool),), {}, RuntimeError,
                           r"hardtanh\(\).*Bool", "bool"),
               ErrorSample((ember.ones(2, dtype=ember.uint8),), {}, RuntimeError,
                           r"hardtanh\(\).*unsigned", "uint8 with a negative bound")]))

# ---------------------------------------------------------------- reductions

_RED_SHAPES = [((2, 3, 4), None), ((2, 3, 4), 1), ((2, 3, 4), -1), ((2, 3, 4), (0, 2)),
               ((5,), 0), ((), None), ((), 0), ((0, 3), 0), ((0, 3), 1), ((3, 1), ())]


def _reduce_samples(dims_kw="dim", with_dtype=False, nonempty=False, low=-3, high=3):
    def samples(dtype, rng):
        out = []
        for shape, dim in _RED_SHAPES:
            if nonempty and 0 in shape:
                continue
            for keepdim in (False, True):
                kw = {dims_kw: dim, "keepdim": keepdim}
                out.append(Sample((make(shape, dtype, rng, low, high),), kw,
                                  desc=f"{shape} dim={dim} keepdim={keepdim}"))
        if with_dtype:
            out.append(Sample((make((2, 3), dtype, rng),), {"dtype": ember.float64},
                              desc="dtype=float64"))
        return out
    return samples


add(OpInfo("sum", _reduce_samples(with_dtype=True), _ref_sum, reduction=True,
           errors=lambda: [ErrorSample((ember.ones(2, 3),), {"dim": 2}, IndexError,
                                       r"sum\(\).*range", "bad dim"),
                           ErrorSample((ember.ones(2, 3),), {"dim": (0, 0)}, RuntimeError,
                                       r"sum\(\).*multiple", "repeated dim")]))
add(OpInfo("mean", _reduce_samples(with_dtype=True), _ref_mean, reduction=True,
           dtypes=FLOATS,
           errors=lambda: [ErrorSample((ember.ones(2, 3, dtype=ember.int64),), {},
                                       RuntimeError, r"mean\(\).*dtype", "int input"),
                           ErrorSample((ember.ones(2, 3),), {"dim": -3}, IndexError,
                                       r"mean\(\).*range", "bad dim")]))


def _amax_samples(dtype, rng):
    out = []
    for shape, dim in _RED_SHAPES:
        if 0 in shape:
            continue
        for keepdim in (False, True):
            kw = {"keepdim": keepdim}
            if dim is not None:
                kw["dim"] = dim
            out.append(Sample((make(shape, dtype, rng),), kw, desc=f"{shape} {dim} {keepdim}"))
    out.append(Sample((make((0, 3), dtype, rng),), {"dim": 1}, desc="empty, nonempty dim"))
    return out


add(OpInfo("amax", _amax_samples, _ref_amax, reduction=True,
           errors=lambda: [ErrorSample((ember.ones(0, 3),), {"dim": 0}, IndexError,
                                       r"amax\(\).*non-zero size", "empty dim"),
                           ErrorSample((ember.ones(0, 3),), {}, RuntimeError,
                                       r"amax\(\).*numel\(\) == 0", "empty, all dims"),
                           ErrorSample((ember.ones(2, 3),), {"dim": 5}, IndexError,
                                       r"amax\(\).*range", "bad dim")]))


def _max_all_samples(dtype, rng):
    out = [Sample((make(s, dtype, rng),), desc=str(s)) for s in ((2, 3, 4), (5,), ())]
    if dtype in FLOATS:
        out.append(Sample((ember.from_numpy(np.array([1.0, math.nan, 3.0], dtype=dtype)),),
                          desc="nan", grad=False))
    return out


add(OpInfo("max", _max_all_samples, _ref_max_all, reduction=True,
           errors=lambda: [ErrorSample((ember.ones(0, 3),), {}, RuntimeError,
                                       r"max\(\).*numel\(\) == 0", "empty")]))


def _dim_samples(dtype, rng, allow_none=False):
    out = []
    for shape, dim in (((2, 3, 4), 1), ((2, 3, 4), -1), ((5,), 0), ((), 0), ((), -1),
                       ((0, 3), 1), ((3, 1), 1)):
        for keepdim in (False, True):
            out.append(Sample((make(shape, dtype, rng), dim, keepdim),
                              desc=f"{shape} {dim} {keepdim}"))
    if dtype in FLOATS:
        nan = np.array([[1.0, math.nan, 3.0, math.nan], [2.0, 1.0, 0.0, 5.0]], dtype=dtype)
        out.append(Sample((ember.from_numpy(nan), 1), desc="nan", grad=False))
    tie = np.array([[1, 3, 3, 0], [2, 2, 1, 2]], dtype=dtype)
    out.append(Sample((ember.from_numpy(tie), 1), desc="ties", grad=False))
    if allow_none:
        for shape in ((2, 3, 4), (), (5,)):
            out.append(Sample((make(shape, dtype, rng),), desc=f"{shape} None"))
            out.append(Sample((make(shape, dtype, rng),), {"keepdim": True},
                              desc=f"{shape} None keepdim"))
    return out


add(OpInfo("max.dim", _dim_samples, _ref_max_dim, reduction=True,
           torch_fn=lambda torch, *a, **k: tuple(torch.max(*a, **k)),
           errors=lambda: [ErrorSample((ember.ones(0, 3), 0), {}, IndexError,
                                       r"max\(\).*non-zero size", "empty dim"),
                           ErrorSample((ember.ones(2, 3), 2), {}, IndexError,
                                       r"max\(\).*range", "bad dim")]))
add(OpInfo("max.other", _tie_samples(binary_samples(numbers=(), mixed=False)),
           elementwise(_ref_max2, 2),
           errors=lambda: [ErrorSample((ember.ones(2, 3), ember.ones(4)), {}, RuntimeError,
                                       r"max\(\).*\[2, 3\].*\[4\]", "shape mismatch")]))
add(OpInfo("argmax", lambda dtype, rng: _dim_samples(dtype, rng, allow_none=True),
           _ref_argmax, dtypes=NO_BOOL,
           errors=lambda: [ErrorSample((ember.ones(0, 3),), {}, IndexError,
                                       r"argmax\(\).*numel\(\) == 0", "empty"),
                           ErrorSample((ember.ones(2, 3), 3), {}, IndexError,
                                       r"argmax\(\).*range", "bad dim")]))

add(OpInfo("sum_to_size", lambda dtype, rng: [
    Sample((make((2, 3, 4), dtype, rng), (3, 1)), desc="lead and inner"),
    Sample((make((2, 3), dtype, rng), (2, 3)), desc="same"),
    Sample((make((2, 3), dtype, rng), (1, 3)), desc="keep")],
    _ref_sum_to_size, dtypes=NUMBERS, reduction=True,
    errors=lambda: [ErrorSample((ember.ones(2, 3), (4,)), {}, RuntimeError,
                                r"sum_to_size\(\).*\[4\].*\[2, 3\]", "not expandable")]))

# ---------------------------------------------------------------- views


def _view_samples(dtype, rng):
    a = make((2, 3, 4), dtype, rng)
    return [Sample((a, (6, 4)), noncontig=False, desc="merge"),
            Sample((a, (2, -1)), noncontig=False, desc="infer"),
            Sample((a, (24,)), noncontig=False, desc="flatten"),
            Sample((a, (2, 3, 2, 2)), desc="split last (works strided)"),
            Sample((make((), dtype, rng), (1, 1)), desc="0-d"),
            Sample((make((1,), dtype, rng), ()), desc="to 0-d"),
            Sample((make((0, 3), dtype, rng), (3, 0)), desc="empty"),
            Sample((make((4, 3), dtype, rng).t(), (3, 2, 2)), noncontig=False,
                   desc="transposed, split the outer dim")]


def _shape_errors(name):
    def errors():
        a = ember.ones(2, 3)
        return [ErrorSample((a, (5,)), {}, RuntimeError, rf"{name}\(\).*\[5\].*6",
                            "bad numel"),
                ErrorSample((a, (-1, -1)), {}, RuntimeError, rf"{name}\(\).*one dimension",
                            "two -1")]
    return errors


add(OpInfo("view", _view_samples, _ref_view,
           errors=lambda: _shape_errors("view")() + [
               ErrorSample((ember.ones(4, 3).t(), (12,)), {}, RuntimeError,
                           r"view\(\).*stride.*\[3, 4\].*\[12\]", "incompatible strides")]))
add(OpInfo("reshape", lambda dtype, rng: _view_samples(dtype, rng) + [
    Sample((make((4, 3), dtype, rng).t(), (12,)), noncontig=False, desc="needs a copy")],
    _ref_view, errors=_shape_errors("reshape")))


def _permute_samples(dtype, rng):
    return [Sample((make((2, 3, 4), dtype, rng), (2, 0, 1))),
            Sample((make((2, 3, 4), dtype, rng), (-1, 1, 0))),
            Sample((make((), dtype, rng), ())),
            Sample((make((0, 3), dtype, rng), (1, 0)))]


add(OpInfo("permute", _permute_samples, _ref_permute,
           errors=lambda: [ErrorSample((ember.ones(2, 3), (0,)), {}, RuntimeError,
                                       r"permute\(\)", "wrong length"),
                           ErrorSample((ember.ones(2, 3), (0, 0)), {}, RuntimeError,
                                       r"permute\(\).*duplicate", "repeated"),
                           ErrorSample((ember.ones(2, 3), (0, 2)), {}, IndexError,
                                       r"permute\(\).*range", "bad dim")]))
add(OpInfo("transpose", lambda dtype, rng: [
    Sample((make((2, 3, 4), dtype, rng), 0, 2)), Sample((make((2, 3), dtype, rng), -1, 0)),
    Sample((make((), dtype, rng), 0, -1)), Sample((make((4,), dtype, rng), 0, 0))],
    _ref_transpose,
    errors=lambda: [ErrorSample((ember.ones(2, 3), 0, 2), {}, IndexError,
                                r"transpose\(\).*range", "bad dim")]))
add(OpInfo("t", lambda dtype, rng: [Sample((make(s, dtype, rng),))
                                     for s in ((2, 3), (4,), (), (0, 2))],
           _ref_t, errors=lambda: [ErrorSample((ember.ones(2, 3, 4),), {}, RuntimeError,
                                               r"t\(\).*3D", "3-d")]))


def _expand_samples(dtype, rng):
    return [Sample((make((3, 1), dtype, rng), (3, 4))),
            Sample((make((3, 1), dtype, rng), (2, 3, 4))),
            Sample((make((3, 1), dtype, rng), (-1, 5))),
            Sample((make((), dtype, rng), (2, 2))),
            Sample((make((1,), dtype, rng), (0,))),
            Sample((make((2, 3), dtype, rng), (2, 3)))]


add(OpInfo("expand", _expand_samples, _ref_expand,
           errors=lambda: [ErrorSample((ember.ones(2, 3), (3, 3)), {}, RuntimeError,
                                       r"expand\(\).*\(3\).*\(2\).*\[3, 3\].*\[2, 3\]",
                                       "bad size"),
                           ErrorSample((ember.ones(2, 3), (3,)), {}, RuntimeError,
                                       r"expand\(\).*number of sizes", "too few sizes"),
                           ErrorSample((ember.ones(2, 1), (2, -2)), {}, RuntimeError,
                                       r"expand\(\)", "negative size")]))
add(OpInfo("expand_as", lambda dtype, rng: [
    Sample((make((3, 1), dtype, rng), make((2, 3, 4), dtype, rng)))],
    lambda a, other: _ref_expand(a, np.shape(other))))
add(OpInfo("unsqueeze", lambda dtype, rng: [
    Sample((make((2, 3), dtype, rng), d)) for d in (0, 1, 2, -1, -3)] + [
    Sample((make((), dtype, rng), 0))], _ref_unsqueeze,
    errors=lambda: [ErrorSample((ember.ones(2, 3), 3), {}, IndexError,
                                r"unsqueeze\(\).*range", "bad dim")]))
add(OpInfo("squeeze", lambda dtype, rng: [
    Sample((make((2, 1, 3, 1), dtype, rng),)),
    Sample((make((2, 1, 3, 1), dtype, rng), 1)),
    Sample((make((2, 1, 3, 1), dtype, rng), 0)),
    Sample((make((2, 1, 3, 1), dtype, rng), (1, -1))),
    Sample((make((), dtype, rng),)), Sample((make((1,), dtype, rng),))], _ref_squeeze,
    errors=lambda: [ErrorSample((ember.ones(2, 3), 4), {}, IndexError,
                                r"squeeze\(\).*range", "bad dim")]))
add(OpInfo("select", lambda dtype, rng: [
    Sample((make((2, 3, 4), dtype, rng), 1, 2)), Sample((make((2, 3, 4), dtype, rng), -1, -1)),
    Sample((make((3,), dtype, rng), 0, 1)), Sample((make((2, 0), dtype, rng), 0, 1))],
    _ref_select, torch_fn=lambda torch, *a: torch.select(*a),
    errors=lambda: [ErrorSample((ember.ones(2, 3), 1, 3), {}, IndexError,
                                r"select\(\).*3.*\[2, 3\]", "index out of range"),
                    ErrorSample((ember.ones(()), 0, 0), {}, IndexError, r"select\(\)",
                                "0-d"),
                    ErrorSample((ember.ones(2, 3), 2, 0), {}, IndexError,
                                r"select\(\).*range", "bad dim")]))
add(OpInfo("slice", lambda dtype, rng: [
    Sample((make((5, 4), dtype, rng), 0, 1, 4, 2)), Sample((make((5, 4), dtype, rng), 1, -3)),
    Sample((make((5, 4), dtype, rng), -1, None, None, 3)),
    Sample((make((5,), dtype, rng), 0, 4, 2)), Sample((make((5,), dtype, rng), 0, -100, 100)),
    Sample((make((5,), dtype, rng), 0, 10, 20))],
    _ref_slice, torch_fn=_t("slice"),
    errors=lambda: [ErrorSample((ember.ones(2, 3), 0, 0, 2, 0), {}, RuntimeError,
                                r"slice\(\).*step", "zero step"),
                    ErrorSample((ember.ones(()), 0), {}, IndexError, r"slice\(\)", "0-d")]))
add(OpInfo("alias", lambda dtype, rng: [Sample((make(s, dtype, rng),))
                                         for s in ((2, 3), (), (0,))],
           _copy_ref, torch_fn=_t("alias")))
add(OpInfo("clone", lambda dtype, rng: [Sample((make(s, dtype, rng),)) for s in
                                         ((2, 3), (), (0, 2))] + [
    Sample((make((2, 3), dtype, rng),), {"memory_format": ember.contiguous_format},
           desc="contiguous_format")], _copy_ref,
    torch_fn=lambda torch, a, memory_format=None: a.clone(
        memory_format=torch.contiguous_format if memory_format else torch.preserve_format)))
add(OpInfo("contiguous", lambda dtype, rng: [Sample((make((2, 3), dtype, rng),)),
                                              Sample((make((3, 2), dtype, rng).t(),),
                                                     noncontig=False)],
           _copy_ref))


def _to_copy_samples(dtype, rng):
    out = []
    for target in ALL:
        out.append(Sample((make((2, 3), dtype, rng, -3, 3),), {"dtype": dt(target)},
                          desc=f"to {target}", grad=target == "float64"))
    out.append(Sample((make((), dtype, rng),), {}, desc="0-d, same dtype"))
    return out


def _ref_to_copy(a, dtype=None):
    a = np.array(a, dtype=object)
    if dtype is None:
        return a
    if dtype is ember.bool:
        return elementwise(lambda x: bool(x), 1)(a)
    if not dtype.is_floating_point:
        return elementwise(lambda x: int(math.trunc(x)) if isinstance(x, float) else int(x),
                           1)(a)
    return elementwise(lambda x: float(x), 1)(a)


add(OpInfo("_to_copy", _to_copy_samples, _ref_to_copy, torch_fn=_t("_to_copy")))
add(OpInfo("to", lambda dtype, rng: [
    Sample((make((2, 3), dtype, rng), ember.float64)),
    Sample((make((2, 3), dtype, rng),), {"dtype": ember.int32}),
    Sample((make((2, 3), dtype, rng), "cpu"))],
    lambda a, *r, **k: _ref_to_copy(a, next((x for x in list(r) + list(k.values())
                                             if isinstance(x, ember.dtype)), None))))


def _scatter_samples(kind):
    def samples(dtype, rng):
        if kind == "select":
            return [Sample((make((3, 4), dtype, rng), make((4,), dtype, rng), 0, 1)),
                    Sample((make((3, 4), dtype, rng), make((3,), dtype, rng), -1, -1)),
                    Sample((make((2, 3, 4), dtype, rng), make((2, 4), dtype, rng), 1, 0))]
        return [Sample((make((5, 4), dtype, rng), make((2, 4), dtype, rng), 0, 1, 5, 2)),
                Sample((make((5, 4), dtype, rng), make((5, 2), dtype, rng), 1, 2)),
                Sample((make((5, 4), dtype, rng), make((5, 4), dtype, rng))),
                Sample((make((5,), dtype, rng), make((0,), dtype, rng), 0, 3, 3),
                       noncontig=False)]
    return samples


add(OpInfo("select_scatter", _scatter_samples("select"), _ref_select_scatter,
           errors=lambda: [ErrorSample((ember.ones(3, 4), ember.ones(4), 0, 3), {},
                                       IndexError, r"select_scatter\(\)", "bad index"),
                           ErrorSample((ember.ones(3, 4), ember.ones(5), 0, 1), {},
                                       RuntimeError, r"select_scatter\(\).*\[5\].*\[4\]",
                                       "src of the wrong size")]))
add(OpInfo("slice_scatter", _scatter_samples("slice"), _ref_slice_scatter,
           errors=lambda: [ErrorSample((ember.ones(3, 4), ember.ones(3, 4), 2), {},
                                       IndexError, r"slice_scatter\(\).*range", "bad dim"),
                           ErrorSample((ember.ones(3, 4), ember.ones(2, 5), 0, 0, 2), {},
                                       RuntimeError, r"slice_scatter\(\).*\[2, 5\].*\[2, 4\]",
                                       "src of the wrong size")]))

def _fill_samples(dtype, rng):
    return [Sample((make((2, 3), dtype, rng), 1)),
            Sample((make((), dtype, rng), True)),
            Sample((make((0, 2), dtype, rng), 2), grad=False),
            Sample((make((2, 3), dtype, rng), make((), dtype, rng)), desc="0-d tensor value",
                   grad=False)] + ([Sample((make((2, 3), dtype, rng), -1.5), grad=False)]
                                   if dtype in FLOATS else [])


def _ref_fill(a, value):
    out = np.empty(np.shape(a), dtype=object)
    out.fill(value.item() if isinstance(value, np.ndarray) else value)
    return out


add(OpInfo("fill.Scalar", _fill_samples, _ref_fill,
           torch_fn=lambda torch, a, v: torch.fill(a, v)))


def _copy_samples(dtype, rng):
    return [Sample((make((2, 3), dtype, rng), make((2, 3), dtype, rng))),
            Sample((make((2, 3), dtype, rng), make((3,), dtype, rng)), desc="broadcast src"),
            Sample((make((2, 3), dtype, rng), make((2, 3), "float64", rng)),
                   desc="float64 src", grad=False),
            Sample((make((2, 3), dtype, rng), make((2, 3), "int32", rng)),
                   desc="int32 src", grad=False),
            Sample((make((), dtype, rng), make((), dtype, rng)), desc="0-d"),
            Sample((make((0, 3), dtype, rng), make((3,), dtype, rng)), desc="empty")]


def _ref_copy(a, src):
    out = np.empty(np.shape(a), dtype=object)
    out[...] = np.broadcast_to(src, np.shape(a))
    return out


add(OpInfo("copy", _copy_samples, _ref_copy, torch_fn=_t("copy"),
           errors=lambda: [ErrorSample((ember.ones(2, 3), ember.ones(4)), {}, RuntimeError,
                                       r"copy_?\(\)(?=.*\[4\])(?=.*\[2, 3\])",
                                       "shape mismatch")]))


# ---------------------------------------------------------------- linear algebra


def _matmul_samples(dtype, rng):
    out = []
    for sa, sb in (((2, 3), (3, 4)), ((3,), (3,)), ((3,), (3, 2)), ((2, 3), (3,)),
                   ((2, 2, 3), (3, 4)), ((2, 1, 2, 3), (3, 3, 2)), ((4,), (2, 4, 3)),
                   ((2, 0), (0, 3)), ((0, 3), (3, 2)), ((1, 3), (3, 1))):
        out.append(Sample((make(sa, dtype, rng, -2, 2), make(sb, dtype, rng, -2, 2)),
                          desc=f"{sa}@{sb}"))
    return out


add(OpInfo("matmul", _matmul_samples, _ref_matmul, reduction=True, dtypes=NUMBERS,
           errors=lambda: [
               ErrorSample((ember.ones(2, 3), ember.ones(4, 5)), {}, RuntimeError,
                           r"matmul\(\).*2x3.*4x5", "inner mismatch"),
               ErrorSample((ember.ones(3), ember.ones(4)), {}, RuntimeError,
                           r"matmul\(\).*\[3\].*\[4\]", "vector mismatch"),
               ErrorSample((ember.ones(()), ember.ones(3)), {}, RuntimeError,
                           r"matmul\(\).*1D", "0-d"),
               ErrorSample((ember.ones(2, 3), ember.ones(3, 2, dtype=ember.float64)), {},
                           RuntimeError, r"matmul\(\).*dtype", "dtype mismatch"),
               ErrorSample((ember.ones(2, 2, 3), ember.ones(3, 3, 2)), {}, RuntimeError,
                           r"matmul\(\).*\[2, 2, 3\].*\[3, 3, 2\]", "batch mismatch")]))

# ---------------------------------------------------------------- factories


def _size_samples(extra=()):
    def samples(dtype, rng):
        out = []
        for size in ((2, 3), (), (0, 4), (5,)):
            out.append(Sample((size,) + tuple(extra), {"dtype": dt(dtype)}, desc=f"{size}",
                              noncontig=False, grad=False))
        out.append(Sample(((2, 3),) + tuple(extra), {}, desc="default dtype",
                          noncontig=False, grad=False))
        return out
    return samples


def _like_samples(extra=()):
    def samples(dtype, rng):
        out = [Sample((make((2, 3), dtype, rng),) + tuple(extra), desc="like",
                      grad=False),
               Sample((make((), dtype, rng),) + tuple(extra), {"dtype": ember.float64},
                      desc="like, dtype", grad=False)]
        return out
    return samples


def _factory_errors(name, extra=()):
    def errors():
        return [ErrorSample(((2, -1),) + tuple(extra), {}, RuntimeError,
                            rf"{name}\(\).*negative dimension -1", "negative size")]
    return errors


for _name, _v in (("zeros", 0), ("ones", 1)):
    add(OpInfo(_name, _size_samples(), _filled(_v), errors=_factory_errors(_name)))
add(OpInfo("empty", _size_samples(), None, errors=_factory_errors("empty")))
add(OpInfo("full", lambda dtype, rng: _size_samples((2,))(dtype, rng) + [
    Sample(((2, 2), 1.5), desc="float fill, inferred dtype"),
    Sample(((2, 2), True), desc="bool fill, inferred dtype"),
    Sample(((2, 2), 7), desc="int fill, inferred dtype")],
    lambda size, fill_value, **kw: _filled(fill_value)(size),
    errors=_factory_errors("full", (1.0,))))
for _name, _v in (("zeros_like", 0), ("ones_like", 1)):
    add(OpInfo(_name, _like_samples(), _like_filled(_v)))
add(OpInfo("empty_like", _like_samples(), None))
add(OpInfo("full_like", _like_samples((3,)), _ref_full_like))


def _arange_samples(dtype, rng):
    return [Sample((5,), noncontig=False), Sample((0,), noncontig=False),
            Sample((2.5,), noncontig=False), Sample((7,), {"dtype": ember.float64},
                                                    noncontig=False)]


def _arange_start_samples(dtype, rng):
    return [Sample((1, 7), noncontig=False), Sample((1, 7, 2), noncontig=False),
            Sample((7, 1, -2), noncontig=False), Sample((0.0, 1.0, 0.1), noncontig=False),
            Sample((-3, 3, 0.5), noncontig=False),
            Sample((1, 7, 3), {"dtype": ember.float32}, noncontig=False),
            Sample((5, 5), noncontig=False)]


add(OpInfo("arange", _arange_samples, _ref_arange, dtypes=("int64",),
           errors=lambda: [ErrorSample((-5,), {}, RuntimeError, r"arange\(\).*sign",
                                       "negative end")]))
add(OpInfo("arange.start", _arange_start_samples, _ref_arange, dtypes=("int64",),
           torch_fn=lambda torch, *a, **k: torch.arange(*a, **k),
           errors=lambda: [ErrorSample((0, 5, 0), {}, RuntimeError, r"arange\(\).*step",
                                       "zero step"),
                           ErrorSample((5, 0, 1), {}, RuntimeError, r"arange\(\).*sign",
                                       "wrong sign")]))

def _ref_linspace(start, end, steps, dtype=None, **kw):
    dtype = dtype or ember.get_default_dtype()
    if not dtype.is_floating_point:
        # PyTorch converts the bounds to the integer dtype first
        start, end = math.trunc(start), math.trunc(end)
        if dtype is ember.uint8:
            start, end = start % 256, end % 256
    out = np.empty(steps, dtype=object)
    if steps == 1:
        out[0] = float(start)
    elif steps > 1:
        step = (end - start) / (steps - 1)
        if dtype is ember.float16:       # and computes the step in the dtype
            step = float(np.float16(step))
        out[:] = [start + step * i if i < steps // 2 else end - step * (steps - 1 - i)
                  for i in range(steps)]
    return out


def _linspace_samples(dtype, rng):
    kw = {"dtype": dt(dtype)}
    return [Sample((0, 10, 5), dict(kw), noncontig=False),
            Sample((-3, 10, 7), dict(kw), noncontig=False),
            Sample((10, -10, 6), dict(kw), noncontig=False),
            Sample((0, 1, 0), dict(kw), noncontig=False),
            Sample((2, 5, 1), dict(kw), noncontig=False),
            Sample((0.5, 3.9, 3), dict(kw), noncontig=False, desc="float bounds"),
            Sample((0.0, 1.0, 7), noncontig=False, desc="default dtype"),
            Sample((1.5, -2.5, 4), noncontig=False, desc="default dtype, descending")]


add(OpInfo("linspace", _linspace_samples, _ref_linspace, dtypes=NUMBERS,
           errors=lambda: [
               ErrorSample((0, 1, -1), {}, RuntimeError, r"linspace\(\).*non-negative",
                           "negative steps"),
               ErrorSample((0, 1, 3), {"dtype": ember.bool}, NotImplementedError,
                           r"linspace\(\).*Bool", "bool"),
               ErrorSample((300, 0, 4), {"dtype": ember.int8}, RuntimeError,
                           r"linspace\(\).*overflow", "a bound out of int8's range")]))


def _ref_eye(n, m=None, **kw):
    m = n if m is None else m
    out = np.empty((n, m), dtype=object)
    for i in range(n):
        for j in range(m):
            out[i, j] = int(i == j)
    return out


def _eye_samples(dtype, rng):
    kw = {"dtype": dt(dtype)}
    return [Sample((3,), dict(kw), noncontig=False), Sample((2, 3), dict(kw), noncontig=False),
            Sample((4, 2), dict(kw), noncontig=False), Sample((0,), dict(kw), noncontig=False),
            Sample((2, 0), dict(kw), noncontig=False),
            Sample((3,), noncontig=False, desc="default dtype")]


add(OpInfo("eye", _eye_samples, _ref_eye,
           errors=lambda: [ErrorSample((-1,), {}, RuntimeError, r"eye\(\).*n must be",
                                       "negative n"),
                           ErrorSample((2, -3), {}, RuntimeError, r"eye\(\).*m must be",
                                       "negative m")]))


def _ref_triangle(lower):
    def ref(a, diagonal=0):
        out = np.array(a, dtype=object)
        zero = False if out.size and isinstance(out.reshape(-1)[0], bool) else 0
        n, m = out.shape[-2], out.shape[-1]
        for i in range(n):
            for j in range(m):
                if (j > i + diagonal) if lower else (j < i + diagonal):
                    out[..., i, j] = zero
        return out
    return ref


def _triangle_samples(dtype, rng):
    out = []
    for shape, k in (((3, 4), 0), ((4, 3), 1), ((3, 3), -1), ((2, 3, 4), 2), ((3, 4), -5),
                     ((3, 4), 5), ((0, 3), 0), ((2, 0, 2), 0), ((1, 1), 0)):
        out.append(Sample((make(shape, dtype, rng), k), desc=f"{shape} diagonal {k}"))
    out.append(Sample((make((3, 4), dtype, rng),), desc="default diagonal"))
    out.append(Sample((expanded((1, 4), (3, 4), dtype, rng),), desc="expanded", grad=False))
    return out


for _name, _lower in (("tril", True), ("triu", False)):
    add(OpInfo(_name, _triangle_samples, _ref_triangle(_lower),
               errors=(lambda n: lambda: [
                   ErrorSample((ember.ones(3),), {}, RuntimeError, rf"{n}\(\).*2 dimensions",
                               "1-d input"),
                   ErrorSample(("x",), {}, TypeError, rf"{n}\(\)", "not a tensor")])(_name)))

# random factories: no values to compare; the samples serve the rule and shape tests
for _name in ("rand", "randn"):
    add(OpInfo(_name, lambda dtype, rng: [Sample(((2, 3),), {"dtype": dt(dtype)},
                                                 noncontig=False)
                                          for _ in (0,)] + [
        Sample(((0, 3),), noncontig=False), Sample(((),), noncontig=False)],
        None, dtypes=FLOATS, random=True,
        errors=(lambda n: lambda: [ErrorSample(((2,),), {"dtype": ember.int64},
                                               NotImplementedError, rf"{n}\(\)",
                                               "int dtype")])(
            _name)))
for _name in ("rand_like", "randn_like"):
    add(OpInfo(_name, _like_samples(), None, dtypes=FLOATS, random=True))


# the samplers (random_ops.py): shapes, dtypes and value ranges; no reference values


def _sampler_samples(extra=(), kw=None, self_low=0.0, self_high=1.0):
    def samples(dtype, rng):
        return [Sample((make((2, 3), dtype, rng, self_low, self_high),) + tuple(extra),
                       dict(kw or {}), grad=False, noncontig=False),
                Sample((make((), dtype, rng, self_low, self_high),) + tuple(extra),
                       dict(kw or {}), grad=False, noncontig=False),
                Sample((make((0, 2), dtype, rng, self_low, self_high),) + tuple(extra),
                       dict(kw or {}), grad=False, noncontig=False)]
    return samples


def _within(lo, hi, closed=False):
    def check(out, *args, **kw):
        a = out.numpy().astype(np.float64)
        return bool(np.all(a >= lo) and (np.all(a <= hi) if closed else np.all(a < hi)))
    return check


def _binary_values(out, *args, **kw):
    return bool(np.all(np.isin(out.numpy().astype(np.float64), (0.0, 1.0))))


def _is_permutation(out, n, **kw):
    return sorted(out.numpy().tolist()) == list(range(n))


_SAMPLERS = [
    OpInfo("uniform", _sampler_samples((-2.0, 3.0)), None, dtypes=FLOATS, random=True,
           check=_within(-2.0, 3.0, closed=True), torch_fn=_t("uniform")),
    OpInfo("normal_functional", _sampler_samples((1.0, 0.5)), None, dtypes=FLOATS,
           random=True, torch_fn=_t("normal_functional")),
    OpInfo("exponential", _sampler_samples((2.0,)), None, dtypes=FLOATS, random=True,
           check=_within(0.0, math.inf, closed=True), torch_fn=_t("exponential")),
    OpInfo("bernoulli", _sampler_samples(), None, dtypes=FLOATS, random=True,
           check=_binary_values),
    OpInfo("bernoulli.p", _sampler_samples((0.3,)), None, dtypes=FLOATS, random=True,
           check=_binary_values),
    OpInfo("bernoulli.Tensor", lambda dtype, rng: [
        Sample((make((2, 3), dtype, rng), make((2, 3), "float32", rng, 0, 1)),
               grad=False, noncontig=False)], None, dtypes=FLOATS, random=True,
        check=_binary_values, torch_fn=_t("bernoulli")),
    OpInfo("randint", lambda dtype, rng: [
        Sample((5, (2, 3)), {"dtype": dt(dtype)}, grad=False, noncontig=False),
        Sample((5, (0,)), grad=False, noncontig=False),
        Sample((3, ()), grad=False, noncontig=False)], None, dtypes=NUMBERS, random=True,
        check=lambda out, high, size, **kw: _within(0, high)(out)),
    OpInfo("randint.low", lambda dtype, rng: [
        Sample((-3, 4, (2, 3)), {"dtype": dt(dtype)}, grad=False, noncontig=False),
        Sample((2, 3, (4,)), grad=False, noncontig=False)], None, dtypes=NO_BOOL[1:],
        random=True, check=lambda out, low, high, size, **kw: _within(low, high)(out),
        torch_fn=lambda torch, *a, **k: torch.randint(*a, **k)),
    OpInfo("randperm", lambda dtype, rng: [
        Sample((7,), {"dtype": dt(dtype)}, grad=False, noncontig=False),
        Sample((0,), grad=False, noncontig=False),
        Sample((1,), grad=False, noncontig=False)], None, dtypes=("int32", "int64", "float32",
                                                                  "float64"),
        random=True, check=_is_permutation),
]
for _info in _SAMPLERS:
    if _info.name in ENTRY:      # the samplers are optional while random_ops lands
        add(_info)


# the linear-algebra and nn ops (mm ... convolution, pooling, losses): tests/op_db_nn.py
import op_db_nn  # noqa: E402,F401
import op_db_nn_2  # noqa: E402,F401  (embedding_bag, grid sampling, ctc_loss)

# ---------------------------------------------------------------- reductions, part 2
# (prod, min family, var/std, norm, logsumexp, softmax, cumulative, all/any, sort, topk)


def _isnan(x):
    return isinstance(x, float) and math.isnan(x)


def _prod(xs):
    if any(isinstance(x, float) for x in xs):
        r = 1.0
        for x in xs:
            r *= float(x)
        return r
    r = 1
    for x in xs:
        r *= int(x)
    return r


def _amin(xs):
    best = xs[0]
    for x in xs:
        if _isnan(x):
            return x
        if x < best:
            best = x
    return best


def _argmin(xs):
    best, idx = xs[0], 0
    for i, x in enumerate(xs):
        if _isnan(best):
            break
        if _isnan(x):
            return i
        if x < best:
            best, idx = x, i
    return idx


def _lines(a, dim, fn, out_len=None):
    """fn(list) -> list applied to every line of a along dim (a 0-d tensor is one line)."""
    a = np.asarray(a, dtype=object)
    if a.ndim == 0:
        out = np.empty((), dtype=object)
        out[()] = fn([a[()]])[0]
        return out
    d = dim % a.ndim
    moved = np.moveaxis(a, d, -1)
    m = moved.shape[-1] if out_len is None else out_len
    out = np.empty(moved.shape[:-1] + (m,), dtype=object)
    for idx in np.ndindex(*moved.shape[:-1]):
        vals = fn(list(moved[idx]))
        for j, v in enumerate(vals):
            out[idx + (j,)] = v
    return np.moveaxis(out, -1, d)


def _ref_prod_all(a, dtype=None):
    return reduce_ref(_prod)(a, None, False)


def _ref_prod_dim(a, dim, keepdim=False, dtype=None):
    return reduce_ref(_prod)(a, dim, keepdim)


def _prod_samples(dtype, rng):
    out = []
    for shape, dim in (((2, 3, 4), 1), ((2, 3, 4), -1), ((5,), 0), ((), 0), ((0, 3), 0),
                       ((0, 3), 1), ((3, 1), 1)):
        for keepdim in (False, True):
            out.append(Sample((make(shape, dtype, rng, -2, 2), dim, keepdim),
                              desc=f"{shape} {dim} {keepdim}"))
    z = make((3, 4), dtype, rng, 1, 2)
    zn = z.numpy()
    zn[0, 1] = 0
    zn[1, 0] = zn[1, 2] = 0
    out.append(Sample((z, 1), desc="zeros (one, two in a row)"))
    out.append(Sample((make((2, 3), dtype, rng),), {"dim": 0, "dtype": ember.float64},
                      desc="dtype=float64", grad=False))
    return out


def _prod_all_samples(dtype, rng):
    out = [Sample((make(s, dtype, rng, -2, 2),), desc=str(s)) for s in ((2, 3), (5,), (), (0,))]
    z = make((2, 3), dtype, rng, 1, 2)
    z.numpy()[1, 1] = 0
    out.append(Sample((z,), desc="a zero"))
    out.append(Sample((make((2, 2), dtype, rng),), {"dtype": ember.float64}, grad=False,
                      desc="dtype"))
    return out


add(OpInfo("prod", _prod_all_samples, _ref_prod_all, reduction=True))
add(OpInfo("prod.dim_int", _prod_samples, _ref_prod_dim, reduction=True,
           torch_fn=lambda torch, *a, **k: torch.prod(*a, **k),
           errors=lambda: [ErrorSample((ember.ones(2, 3), 2), {}, IndexError,
                                       r"prod\(\).*range", "bad dim")]))

add(OpInfo("amin", _amax_samples, lambda a, dim=(), keepdim=False: reduce_ref(_amin)(
    a, dim, keepdim), reduction=True,
    errors=lambda: [ErrorSample((ember.ones(0, 3),), {"dim": 0}, IndexError,
                                r"amin\(\).*non-zero size", "empty dim"),
                    ErrorSample((ember.ones(0, 3),), {}, RuntimeError,
                                r"amin\(\).*numel\(\) == 0", "empty, all dims")]))
add(OpInfo("min", _max_all_samples, lambda a: reduce_ref(_amin)(a, None, False),
           reduction=True,
           errors=lambda: [ErrorSample((ember.ones(0, 3),), {}, RuntimeError,
                                       r"min\(\).*numel\(\) == 0", "empty")]))
add(OpInfo("min.dim", _dim_samples, lambda a, dim, keepdim=False: (
    reduce_ref(_amin)(a, dim, keepdim), reduce_ref(_argmin)(a, dim, keepdim)),
    reduction=True, torch_fn=lambda torch, *a, **k: tuple(torch.min(*a, **k)),
    errors=lambda: [ErrorSample((ember.ones(0, 3), 0), {}, IndexError,
                                r"min\(\).*non-zero size", "empty dim")]))


def _ref_min2(a, b):
    if _isnan(a):
        return a
    if _isnan(b):
        return b
    return a if a <= b else b


add(OpInfo("min.other", _tie_samples(binary_samples(numbers=(), mixed=False)),
           elementwise(_ref_min2, 2),
           errors=lambda: [ErrorSample((ember.ones(2, 3), ember.ones(4)), {}, RuntimeError,
                                       r"min\(\).*\[2, 3\].*\[4\]", "shape mismatch")]))


def _ref_argmin(a, dim=None, keepdim=False):
    if dim is None:
        flat = np.asarray(a, dtype=object).reshape(-1)
        r = np.empty((), dtype=object)
        r[()] = _argmin(list(flat))
        return r.reshape((1,) * np.ndim(a)) if keepdim else r
    return reduce_ref(_argmin)(a, dim, keepdim)


add(OpInfo("argmin", lambda dtype, rng: _dim_samples(dtype, rng, allow_none=True),
           _ref_argmin, dtypes=NO_BOOL,
           errors=lambda: [ErrorSample((ember.ones(0, 3),), {}, IndexError,
                                       r"argmin\(\).*numel\(\) == 0", "empty"),
                           ErrorSample((ember.ones(2, dtype=ember.bool),), {}, RuntimeError,
                                       r"argmin\(\).*bool", "bool")]))


def _var_line(correction, std):
    def f(xs):
        n = len(xs)
        if n == 0:
            return math.nan
        xs = [float(x) for x in xs]
        mean = math.fsum(xs) / n
        s = math.fsum((x - mean) ** 2 for x in xs)
        dof = n - correction
        v = s / dof if dof > 0 else (s * math.inf if s != 0 else math.nan)
        return math.sqrt(v) if std and not math.isnan(v) else v
    return f


def _var_ref(std):
    def ref(a, dim=None, unbiased=None, keepdim=False, correction=None):
        c = correction if correction is not None else (0 if unbiased is False else 1)
        return reduce_ref(_var_line(c, std))(a, dim, keepdim)
    return ref


def _var_samples(dtype, rng):
    out = []
    for shape, dim in _RED_SHAPES:
        if 0 in shape:
            continue
        n = math.prod(shape[d] for d in range(len(shape))
                      if dim is None or dim == () or d in ((dim,) if isinstance(dim, int)
                                                           else dim) or d - len(shape) in (
                          (dim,) if isinstance(dim, int) else dim))
        out.append(Sample((make(shape, dtype, rng),), {"dim": dim}, desc=f"{shape} {dim}",
                          grad=n > 1))
    out += [Sample((make((3, 4), dtype, rng), 1, False, True), desc="dim, unbiased, keepdim"),
            Sample((make((3, 4), dtype, rng),), {"dim": 0, "correction": 0}, desc="correction 0"),
            Sample((make((3, 4), dtype, rng),), {"dim": (0, 1), "correction": 2, "keepdim": True},
                   desc="correction 2, two dims"),
            Sample((make((3, 4), dtype, rng),), {"unbiased": False}, desc="unbiased=False"),
            Sample((make((0, 3), dtype, rng),), {"dim": 0}, desc="empty dim", grad=False),
            Sample((make((1, 3), dtype, rng),), {"dim": 0}, desc="one element: nan",
                   grad=False)]
    return out


def _var_errors(name):
    return lambda: [ErrorSample((ember.ones(2, 3, dtype=ember.int64),), {}, RuntimeError,
                                rf"{name}\(\).*floating point", "integer input"),
                    ErrorSample((ember.ones(2, 3),), {"dim": 3}, IndexError,
                                rf"{name}\(\).*range", "bad dim")]


add(OpInfo("var", _var_samples, _var_ref(False), reduction=True, dtypes=FLOATS,
           errors=_var_errors("var")))
add(OpInfo("std", _var_samples, _var_ref(True), reduction=True, dtypes=FLOATS,
           errors=_var_errors("std")))


def _ref_norm(a, p="fro", dim=None, keepdim=False, dtype=None):
    p = 2.0 if p in (None, "fro") else float(p)

    def f(xs):
        xs = [abs(float(x)) for x in xs]
        if any(math.isnan(x) for x in xs):
            return math.nan
        if p == math.inf:
            return max(xs)
        if p == -math.inf:
            return min(xs)
        if p == 0:
            return float(sum(1 for x in xs if x != 0))
        return math.fsum(x ** p for x in xs) ** (1.0 / p)
    return reduce_ref(f)(a, dim, keepdim)


def _norm_samples(dtype, rng):
    out = [Sample((make((3, 4), dtype, rng, 0.2, 2),), desc="default"),
           Sample((make((2, 3, 4), dtype, rng, 0.2, 2), 2, 1), desc="p=2 dim 1"),
           Sample((make((2, 3, 4), dtype, rng, 0.2, 2), "fro", (0, 2), True), desc="fro"),
           Sample((make((3, 4), dtype, rng, 0.2, 2), 1, 0), desc="p=1"),
           Sample((make((3, 4), dtype, rng, 0.2, 2), 3.0, -1), desc="p=3"),
           Sample((make((3, 4), dtype, rng, 0.2, 2), 0.5), desc="p=0.5"),
           Sample((make((3, 4), dtype, rng, -2, 2), math.inf, 1), desc="inf"),
           Sample((make((3, 4), dtype, rng, -2, 2), -math.inf), desc="-inf"),
           Sample((make((3, 4), dtype, rng, -2, 2), 0, 1), desc="p=0", grad=False),
           Sample((make((), dtype, rng, 0.2, 2),), desc="0-d"),
           Sample((make((0, 3), dtype, rng),), {"dim": 1}, desc="empty"),
           Sample((make((2, 3), dtype, rng, 0.2, 2),), {"p": 2, "dtype": ember.float64},
                  desc="dtype", grad=False)]
    return out


add(OpInfo("norm", _norm_samples, _ref_norm, reduction=True, dtypes=FLOATS,
           errors=lambda: [
               ErrorSample((ember.ones(2, 3, dtype=ember.int64),), {}, RuntimeError,
                           r"norm\(\).*floating point", "integer input"),
               ErrorSample((ember.ones(0, 3), math.inf), {}, RuntimeError,
                           r"norm\(\).*empty", "inf norm of an empty tensor"),
               ErrorSample((ember.ones(2, 3), "abc"), {}, RuntimeError, r"norm\(\).*abc",
                           "bad order")]))


def _ref_logsumexp(a, dim, keepdim=False):
    def f(xs):
        xs = [float(x) for x in xs]
        if not xs:
            return -math.inf
        if any(math.isnan(x) for x in xs):
            return math.nan
        m = max(xs)
        m = 0.0 if math.isinf(m) else m
        s = math.fsum(_ref_exp(x - m) for x in xs)
        return m + (math.log(s) if s > 0 else -math.inf)
    return reduce_ref(f)(a, dim, keepdim)


def _logsumexp_samples(dtype, rng):
    out = []
    for shape, dim in (((2, 3, 4), 1), ((2, 3, 4), (0, 2)), ((5,), 0), ((), 0), ((0, 3), 0),
                       ((0, 3), 1), ((3, 4), -1)):
        for keepdim in (False, True):
            out.append(Sample((make(shape, dtype, rng), dim, keepdim),
                              desc=f"{shape} {dim} {keepdim}"))
    if dtype in FLOATS:
        big = np.array([[500.0, 501.0, -2.0], [-math.inf, -math.inf, -math.inf]], dtype=dtype)
        out.append(Sample((ember.from_numpy(big), 1), desc="large values, all -inf",
                          grad=False))
    return out


add(OpInfo("logsumexp", _logsumexp_samples, _ref_logsumexp, reduction=True,
           errors=lambda: [ErrorSample((ember.ones(2, 3), 2), {}, IndexError,
                                       r"logsumexp\(\).*range", "bad dim")]))


def _softmax_line(log):
    def f(xs):
        xs = [float(x) for x in xs]
        m = max(xs)
        e = [_ref_exp(x - m) for x in xs]
        s = math.fsum(e)
        return [x - m - math.log(s) for x in xs] if log else [v / s for v in e]
    return f


def _softmax_ref(log):
    def ref(a, dim, dtype=None):
        return _lines(a, dim, _softmax_line(log))
    return ref


def _softmax_samples(dtype, rng):
    out = [Sample((make((2, 3, 4), dtype, rng), d), desc=f"dim {d}") for d in (0, 1, -1)]
    out += [Sample((make((5,), dtype, rng), 0)), Sample((make((), dtype, rng), 0), desc="0-d"),
            Sample((make((0, 3), dtype, rng), 1), desc="empty"),
            Sample((make((2, 3), "int64", rng), 1), {"dtype": ember.float64},
                   desc="int input, dtype", grad=False)]
    if dtype in FLOATS:
        out.append(Sample((ember.from_numpy(np.array([[1000.0, 999.0], [-5.0, -1000.0]],
                                                     dtype=dtype)), 1),
                          desc="large values (stable)", grad=False))
    return out


for _name, _log in (("softmax", False), ("log_softmax", True)):
    add(OpInfo(_name, _softmax_samples, _softmax_ref(_log), dtypes=FLOATS, reduction=True,
               errors=(lambda n: lambda: [
                   ErrorSample((ember.ones(2, 3, dtype=ember.int64), 1), {},
                               NotImplementedError, rf"{n}\(\).*Long", "integer input"),
                   ErrorSample((ember.ones(2, 3), 2), {}, IndexError, rf"{n}\(\).*range",
                               "bad dim")])(_name)))


def _safe_softmax_ref(a, dim, dtype=None):
    soft = _softmax_line(False)

    def line(xs):
        if xs and all(x == -math.inf for x in xs):
            return [0.0] * len(xs)          # a fully masked row: 0, not NaN
        return soft(xs)
    return _lines(a, dim, line)


def _safe_softmax_samples(dtype, rng):
    out = _softmax_samples(dtype, rng)
    if dtype in FLOATS:
        rows = np.array([[-np.inf, -np.inf, -np.inf], [0.5, -np.inf, 2.0]], dtype=dtype)
        out.append(Sample((ember.from_numpy(rows), 1), desc="a fully masked row",
                          grad=False))
    return out


add(OpInfo("_safe_softmax", _safe_softmax_samples, _safe_softmax_ref, dtypes=FLOATS,
           reduction=True, torch_fn=lambda torch, *a, **k: torch._safe_softmax(*a, **k)))


def _cumulative_ref(mul):
    def line(xs):
        out, acc = [], None
        for x in xs:
            x = int(x) if isinstance(x, bool) else x
            acc = x if acc is None else (acc * x if mul else acc + x)
            out.append(acc)
        return out

    def ref(a, dim, dtype=None):
        return _lines(a, dim, line)
    return ref


def _cumulative_samples(dtype, rng):
    out = [Sample((make((2, 3, 4), dtype, rng, -2, 2), d), desc=f"dim {d}") for d in (0, 1, -1)]
    out += [Sample((make((5,), dtype, rng, -2, 2), 0)),
            Sample((make((), dtype, rng), 0), desc="0-d"),
            Sample((make((0, 3), dtype, rng), 1), desc="empty")]
    if dtype not in FLOATS or dtype == "float64":   # (in place, torch wants self's dtype)
        out.append(Sample((make((2, 3), dtype, rng), 1), {"dtype": ember.float64},
                          desc="dtype", grad=False))
    z = make((3, 4), dtype, rng, 1, 2)
    zn = z.numpy()
    zn[0, 1] = 0
    zn[1, 0] = zn[1, 2] = 0
    zn[2, 3] = 0
    out.append(Sample((z, 1), desc="zeros"))
    return out


add(OpInfo("cumsum", _cumulative_samples, _cumulative_ref(False), reduction=True,
           errors=lambda: [ErrorSample((ember.ones(2, 3), 2), {}, IndexError,
                                       r"cumsum\(\).*range", "bad dim")]))
add(OpInfo("cumprod", _cumulative_samples, _cumulative_ref(True), reduction=True,
           errors=lambda: [ErrorSample((ember.ones(2, 3), -3), {}, IndexError,
                                       r"cumprod\(\).*range", "bad dim")]))


def _logical_samples(dtype, rng):
    out = []
    for shape, dim in _RED_SHAPES:
        for keepdim in (False, True):
            out.append(Sample((make(shape, dtype, rng, -1, 2),), {"dim": dim, "keepdim": keepdim},
                              desc=f"{shape} {dim} {keepdim}", grad=False))
    out.append(Sample((make((2, 3), dtype, rng, -1, 2),), desc="all dims", grad=False))
    if dtype in FLOATS:
        out.append(Sample((ember.from_numpy(np.array([math.nan, 1.0, 0.0], dtype=dtype)),),
                          desc="nan is true", grad=False))
    return out


def _ref_logical(any_):
    def ref(a, dim=None, keepdim=False):
        if dim == ():     # all/any reduce nothing for an empty dim list
            return elementwise(lambda x: x != 0, 1)(np.asarray(a, dtype=object))
        line = (lambda xs: any(x != 0 for x in xs)) if any_ else (
            lambda xs: all(x != 0 for x in xs))
        return reduce_ref(line)(a, dim, keepdim)
    return ref


add(OpInfo("all", _logical_samples, _ref_logical(False),
    errors=lambda: [ErrorSample((ember.ones(2, 3), 2), {}, IndexError, r"all\(\).*range",
                                "bad dim")]))
add(OpInfo("any", _logical_samples, _ref_logical(True),
    errors=lambda: [ErrorSample((ember.ones(2, 3), (0, 0)), {}, RuntimeError,
                                r"any\(\).*multiple", "repeated dim")]))


def _sort_key(x):
    return (True, 0.0) if _isnan(x) else (False, x)


def _sort_order(xs, descending):
    return sorted(range(len(xs)), key=lambda i: _sort_key(xs[i]), reverse=descending)


def _ref_sort(a, dim=-1, descending=False, stable=None):
    return (_lines(a, dim, lambda xs: [xs[i] for i in _sort_order(xs, descending)]),
            _lines(a, dim, lambda xs: _sort_order(xs, descending)))


def _unique_values(shape, dtype, rng):
    """Distinct values (no ties: PyTorch's topk orders ties its own way)."""
    n = math.prod(shape)
    vals = rng.permutation(n) - (0 if dtype == "uint8" else n // 2)
    if dtype in FLOATS:
        vals = vals * 0.5 + 0.25
    return ember.from_numpy(np.array(vals.reshape(shape), dtype=dtype))


def _sort_samples(dtype, rng):
    out = []
    for shape, dim in (((2, 3, 4), -1), ((2, 3, 4), 1), ((2, 3, 4), 0), ((5,), 0), ((), 0),
                       ((0, 3), 1), ((3, 0), 1)):
        for desc in (False, True):
            out.append(Sample((make(shape, dtype, rng, -3, 3),),
                              {"dim": dim, "descending": desc, "stable": True},
                              desc=f"{shape} {dim} {desc}", grad=dtype in FLOATS))
    tie = np.array([[1, 3, 3, 0, 3], [2, 2, 1, 2, 0]], dtype=dtype)
    for desc in (False, True):
        out.append(Sample((ember.from_numpy(tie),), {"stable": True, "descending": desc},
                          desc=f"ties {desc}", grad=False))
    if dtype in FLOATS:
        nan = np.array([1.0, math.nan, -2.0, math.nan, 0.5], dtype=dtype)
        for desc in (False, True):
            out.append(Sample((ember.from_numpy(nan),), {"stable": True, "descending": desc},
                              desc=f"nan {desc}", grad=False))
    return out


add(OpInfo("sort", _sort_samples, _ref_sort,
           torch_fn=lambda torch, *a, **k: tuple(torch.sort(*a, **k)),
           errors=lambda: [ErrorSample((ember.ones(2, 3),), {"dim": 2}, IndexError,
                                       r"sort\(\).*range", "bad dim")]))
add(OpInfo("argsort", lambda dtype, rng: _sort_samples(dtype, rng),
           lambda a, dim=-1, descending=False, stable=False: _ref_sort(a, dim, descending)[1],
           errors=lambda: [ErrorSample((ember.ones(2, 3),), {"dim": -3}, IndexError,
                                       r"argsort\(\).*range", "bad dim")]))


def _ref_topk(a, k, dim=-1, largest=True, sorted=True):
    return (_lines(a, dim, lambda xs: [xs[i] for i in _sort_order(xs, largest)][:k], k),
            _lines(a, dim, lambda xs: _sort_order(xs, largest)[:k], k))


def _topk_samples(dtype, rng):
    out = []
    for shape, k, dim in (((2, 3, 4), 2, -1), ((2, 3, 4), 3, 1), ((2, 3, 4), 1, 0),
                          ((5,), 5, 0), ((5,), 0, 0), ((), 1, 0), ((0, 3), 2, 1)):
        for largest in (True, False):
            out.append(Sample((_unique_values(shape, dtype, rng), k, dim, largest),
                              desc=f"{shape} k={k} dim={dim} largest={largest}"))
    if dtype in FLOATS:
        nan = np.array([1.0, math.nan, -2.0, 0.5], dtype=dtype)
        out.append(Sample((ember.from_numpy(nan), 2), desc="nan is the largest", grad=False))
    return out


add(OpInfo("topk", _topk_samples, _ref_topk, dtypes=NO_BOOL,
           torch_fn=lambda torch, *a, **k: tuple(torch.topk(*a, **k)),
           errors=lambda: [ErrorSample((ember.ones(2, 3), 4), {}, RuntimeError,
                                       r"topk\(\).*out of range", "k too large"),
                           ErrorSample((ember.ones(2, 3), -1), {}, RuntimeError,
                                       r"topk\(\).*out of range", "negative k"),
                           ErrorSample((ember.ones(3, dtype=ember.bool), 1), {}, RuntimeError,
                                       r"topk\(\).*bool", "bool")]))

# ---------------------------------------------------------------- shapes


def _ref_cat(tensors, dim=0):
    arrs = [np.asarray(a, dtype=object) for a in tensors]
    kept = [a for a in arrs if not (a.ndim == 1 and a.shape[0] == 0)]
    if not kept:
        return np.empty((0,), dtype=object)
    d = dim % kept[0].ndim
    pieces = []
    for a in kept:
        pieces += [np.take(a, i, axis=d) for i in range(a.shape[d])]
    shape = list(kept[0].shape)
    shape[d] = len(pieces)
    out = np.empty(shape, dtype=object)
    for i, p in enumerate(pieces):
        key = [slice(None)] * len(shape)
        key[d] = i
        out[tuple(key)] = p
    return out


def _cat_samples(dtype, rng):
    return [Sample(((make((2, 3), dtype, rng), make((4, 3), dtype, rng)),), desc="dim 0"),
            Sample(((make((2, 3), dtype, rng), make((2, 1), dtype, rng),
                     make((2, 2), dtype, rng)),), {"dim": 1}, desc="three, dim 1"),
            Sample(((make((2, 3, 2), dtype, rng), make((2, 3, 2), dtype, rng)),), {"dim": -1},
                   desc="dim -1"),
            Sample(((make((0,), dtype, rng), make((2, 3), dtype, rng),
                     make((0,), dtype, rng)),), desc="legacy empty 1-D skipped"),
            Sample(((make((0, 3), dtype, rng), make((2, 3), dtype, rng)),), desc="empty rows"),
            Sample(((make((2, 3), dtype, rng), make((2, 3), "float64", rng)),), grad=False,
                   desc="promotion"),
            Sample(((make((3,), dtype, rng),),), desc="one tensor")]


add(OpInfo("cat", _cat_samples, _ref_cat,
           errors=lambda: [
               ErrorSample(((ember.ones(2, 3), ember.ones(2, 4)),), {}, RuntimeError,
                           r"cat\(\).*Sizes.*dimension 0.*3.*4", "size mismatch"),
               ErrorSample(((ember.ones(2, 3), ember.ones(3)),), {}, RuntimeError,
                           r"cat\(\).*same number of dimensions", "rank mismatch"),
               ErrorSample(((ember.ones(2, 3), ember.ones(())),), {}, RuntimeError,
                           r"cat\(\).*zero-dimensional", "0-d"),
               ErrorSample(((ember.ones(2, 3), ember.ones(2, 3)),), {"dim": 2},
                           IndexError, r"cat\(\).*range", "bad dim")]))
add(OpInfo("stack", lambda dtype, rng: [
    Sample(((make((2, 3), dtype, rng), make((2, 3), dtype, rng)),), desc="dim 0"),
    Sample(((make((2, 3), dtype, rng), make((2, 3), dtype, rng), make((2, 3), dtype, rng)),),
           {"dim": -1}, desc="dim -1"),
    Sample(((make((), dtype, rng), make((), dtype, rng)),), desc="0-d")],
    lambda tensors, dim=0: np.stack([np.asarray(a, dtype=object) for a in tensors], axis=dim),
    errors=lambda: [ErrorSample(((ember.ones(2, 3), ember.ones(2, 4)),), {}, RuntimeError,
                                r"stack\(\).*\[2, 3\].*\[2, 4\]", "shape mismatch")]))


def _ref_split(a, sizes, dim=0):
    a = np.asarray(a, dtype=object)
    n = a.shape[dim]
    if isinstance(sizes, int):
        sizes = [min(sizes, n - i) for i in range(0, n, sizes)] if sizes else [0]
        if not sizes:
            sizes = [0]
    out, start = [], 0
    for s in sizes:
        key = [slice(None)] * a.ndim
        key[dim] = slice(start, start + s)
        out.append(a[tuple(key)])
        start += s
    return tuple(out)


add(OpInfo("split", lambda dtype, rng: [
    Sample((make((5, 3), dtype, rng), 2)), Sample((make((2, 6), dtype, rng), 3, 1)),
    Sample((make((2, 6), dtype, rng), 10, -1), desc="larger than the dim")],
    _ref_split,
    errors=lambda: [ErrorSample((ember.ones(2, 3), 0, 1), {}, RuntimeError,
                                r"split.*0.*3", "zero split size"),
                    ErrorSample((ember.ones(()), 1), {}, RuntimeError, r"split",
                                "0-d")]))
add(OpInfo("split.sizes", lambda dtype, rng: [
    Sample((make((5, 3), dtype, rng), [2, 3])), Sample((make((2, 6), dtype, rng), [1, 0, 5], 1))],
    _ref_split, torch_fn=lambda torch, *a, **k: torch.split(*a, **k),
    errors=lambda: [ErrorSample((ember.ones(2, 3), [1, 1], 1), {}, RuntimeError,
                                r"split_with_sizes.*sum exactly to 3", "wrong sum")]))
add(OpInfo("chunk", lambda dtype, rng: [
    Sample((make((6, 2), dtype, rng), 4)), Sample((make((2, 5), dtype, rng), 2, 1)),
    Sample((make((2, 5), dtype, rng), 7, 1), desc="more chunks than elements")],
    lambda a, chunks, dim=0: _ref_split(a, -(-np.shape(a)[dim] // chunks), dim),
    errors=lambda: [ErrorSample((ember.ones(2, 3), 0), {}, RuntimeError,
                                r"chunk.*greater than 0", "zero chunks")]))
add(OpInfo("unbind", lambda dtype, rng: [
    Sample((make((3, 2), dtype, rng),)), Sample((make((2, 3, 2), dtype, rng), 1))],
    lambda a, dim=0: tuple(np.take(np.asarray(a, dtype=object), i, axis=dim)
                           for i in range(np.shape(a)[dim])),
    errors=lambda: [ErrorSample((ember.ones(()),), {}, IndexError, r"unbind",
                                "0-d")]))


def _ref_flatten(a, start_dim=0, end_dim=-1):
    a = np.asarray(a, dtype=object)
    if a.ndim == 0:
        return a.reshape(1)
    s, e = start_dim % a.ndim, end_dim % a.ndim
    return a.reshape(a.shape[:s] + (-1,) + a.shape[e + 1:]) if a.size else a.reshape(
        a.shape[:s] + (math.prod(a.shape[s:e + 1]),) + a.shape[e + 1:])


add(OpInfo("flatten", lambda dtype, rng: [
    Sample((make((2, 3, 4), dtype, rng),)), Sample((make((2, 3, 4), dtype, rng), 1)),
    Sample((make((2, 3, 4), dtype, rng), 0, 1)), Sample((make((), dtype, rng),)),
    Sample((make((2, 0, 3), dtype, rng), 1, 2))], _ref_flatten,
    errors=lambda: [ErrorSample((ember.ones(2, 3), 1, 0), {}, RuntimeError,
                                r"flatten.*start_dim", "start after end")]))
add(OpInfo("unflatten", lambda dtype, rng: [
    Sample((make((2, 6), dtype, rng), 1, (2, 3))), Sample((make((6,), dtype, rng), 0, (-1, 2))),
    Sample((make((2, 3), dtype, rng), -1, (3, 1)))],
    lambda a, dim, sizes: np.asarray(a, dtype=object).reshape(
        np.shape(a)[:dim % np.ndim(a)] + tuple(sizes) + np.shape(a)[dim % np.ndim(a) + 1:]),
    errors=lambda: [ErrorSample((ember.ones(2, 3), 1, (2, 2)), {}, RuntimeError,
                                r"unflatten.*\[2, 2\]", "wrong product")]))
add(OpInfo("movedim", lambda dtype, rng: [
    Sample((make((2, 3, 4), dtype, rng), 0, 2)), Sample((make((2, 3, 4), dtype, rng), (0, 1),
                                                         (-1, 0)))],
    lambda a, s, d: np.moveaxis(np.asarray(a, dtype=object), s, d),
    errors=lambda: [ErrorSample((ember.ones(2, 3), (0, 0), (0, 1)), {}, RuntimeError,
                                r"movedim.*repeated", "repeated dim")]))
add(OpInfo("narrow", lambda dtype, rng: [
    Sample((make((5, 3), dtype, rng), 0, 1, 3)), Sample((make((2, 5), dtype, rng), 1, -2, 2)),
    Sample((make((2, 5), dtype, rng), 1, 5, 0), desc="empty at the end")],
    lambda a, dim, start, length: _ref_slice(a, dim, start % np.shape(a)[dim]
                                             if start < 0 else start,
                                             (start % np.shape(a)[dim] if start < 0 else start)
                                             + length),
    errors=lambda: [ErrorSample((ember.ones(2, 3), 1, 2, 2), {}, RuntimeError,
                                r"narrow.*exceeds", "too long"),
                    ErrorSample((ember.ones(2, 3), 1, 4, 0), {}, IndexError,
                                r"narrow.*start out of range", "bad start")]))


def _ref_repeat(a, reps):
    a = np.asarray(a, dtype=object)
    a = a.reshape((1,) * (len(reps) - a.ndim) + a.shape)
    for d, r in enumerate(reps):
        a = np.concatenate([a] * r, axis=d) if r else np.take(a, [], axis=d)
    return a


add(OpInfo("repeat", lambda dtype, rng: [
    Sample((make((2, 3), dtype, rng), (2, 1))), Sample((make((2, 3), dtype, rng), (2, 1, 3))),
    Sample((make((), dtype, rng), (2, 2))), Sample((make((2, 3), dtype, rng), (1, 1)),
                                                   desc="no repeat: still a copy"),
    Sample((make((2, 3), dtype, rng), (0, 2)), desc="zero repeats")],
    _ref_repeat,
    errors=lambda: [ErrorSample((ember.ones(2, 3), (2,)), {}, RuntimeError,
                                r"repeat.*smaller", "too few repeats")]))
add(OpInfo("tile", lambda dtype, rng: [
    Sample((make((2, 3), dtype, rng), (2,))), Sample((make((2, 3), dtype, rng), (2, 1, 3)))],
    lambda a, dims: _ref_repeat(a, (1,) * (np.ndim(a) - len(dims)) + tuple(dims))))


def _ref_flip(a, dims):
    a = np.asarray(a, dtype=object)
    if a.ndim == 0:
        return a
    key = [slice(None)] * a.ndim
    for d in dims:
        key[d % a.ndim] = slice(None, None, -1)
    return a[tuple(key)]


add(OpInfo("flip", lambda dtype, rng: [
    Sample((make((2, 3, 4), dtype, rng), (1,))), Sample((make((2, 3, 4), dtype, rng), (0, -1))),
    Sample((make((2, 3), dtype, rng), ())), Sample((make((), dtype, rng), (0,))),
    Sample((make((0, 3), dtype, rng), (0, 1)))], _ref_flip,
    errors=lambda: [ErrorSample((ember.ones(2, 3), (0, 0)), {}, RuntimeError,
                                r"flip\(\).*multiple times", "repeated dim"),
                    ErrorSample((ember.ones(2, 3), (2,)), {}, IndexError,
                                r"flip\(\).*range", "bad dim")]))


def _ref_roll(a, shifts, dims=()):
    a = np.asarray(a, dtype=object)
    shifts = (shifts,) if isinstance(shifts, int) else tuple(shifts)
    dims = (dims,) if isinstance(dims, int) else tuple(dims)
    if not dims:
        return _ref_roll(a.reshape(-1), shifts, (0,)).reshape(a.shape)
    out = a
    for s, d in zip(shifts, dims):
        d %= a.ndim
        n = a.shape[d]
        nxt = np.empty(a.shape, dtype=object)
        for idx in np.ndindex(*a.shape):
            src = list(idx)
            src[d] = (idx[d] - s) % n
            nxt[idx] = out[tuple(src)]
        out = nxt
    return out


add(OpInfo("roll", lambda dtype, rng: [
    Sample((make((2, 3, 4), dtype, rng), 1, 2)), Sample((make((2, 3, 4), dtype, rng), (1, -5),
                                                        (0, 1))),
    Sample((make((2, 3), dtype, rng), 2), desc="flattened"),
    Sample((make((3,), dtype, rng), 0, 0)), Sample((make((0, 3), dtype, rng), 1, 0))],
    _ref_roll,
    errors=lambda: [ErrorSample((ember.ones(2, 3), (1, 2), (0,)), {}, RuntimeError,
                                r"roll\(\).*align", "shifts and dims"),
                    ErrorSample((ember.ones(2, 3), 1, 2), {}, IndexError,
                                r"roll\(\).*range", "bad dim")]))


def _ref_pad(a, pad, mode="constant", value=None):
    a = np.asarray(a, dtype=object)
    pad = list(pad)
    dims = {a.ndim - 1 - i: (pad[2 * i], pad[2 * i + 1]) for i in range(len(pad) // 2)}
    shape = [n + sum(dims.get(d, (0, 0))) for d, n in enumerate(a.shape)]
    out = np.empty(shape, dtype=object)
    for idx in np.ndindex(*shape):
        src, inside = [], True
        for d, i in enumerate(idx):
            lo = dims.get(d, (0, 0))[0]
            n = a.shape[d]
            s = i - lo
            if mode == "reflect":
                s = abs(s)
                s = (n - 1) - abs((n - 1) - s)
            elif mode == "replicate":
                s = min(max(s, 0), n - 1)
            elif mode == "circular":
                s %= n
            elif not 0 <= s < n:
                inside = False
            src.append(s)
        if inside:
            out[idx] = a[tuple(src)]
        else:
            out[idx] = 0 if value is None else value
    return out


def _pad_samples(dtype, rng):
    out = [Sample((make((2, 3), dtype, rng), (1, 2)), desc="constant, last dim"),
           Sample((make((2, 3, 4), dtype, rng), (1, 0, 2, 1)), desc="constant, two dims"),
           Sample((make((2, 3), dtype, rng), (1, 1), "constant", 2.0), desc="value"),
           Sample((make((2, 5), dtype, rng), (-1, 2)), desc="negative: crops"),
           Sample((make((3,), dtype, rng), ()), desc="no padding"),
           Sample((make((0, 3), dtype, rng), (1, 1)), desc="empty")]
    if dtype != "bool":
        out += [Sample((make((1, 2, 4), dtype, rng), (2, 1), "reflect"), desc="reflect 1-d"),
                Sample((make((1, 3, 4), dtype, rng), (1, 2, 2, 1), "reflect"),
                       desc="reflect 2-d"),
                Sample((make((2, 4), dtype, rng), (3, 0), "replicate"), desc="replicate"),
                Sample((make((1, 2, 3, 3), dtype, rng), (1, 1, 2, 0), "replicate"),
                       desc="replicate 2-d"),
                Sample((make((1, 2, 4), dtype, rng), (-1, 2), "reflect"),
                       desc="reflect, negative")]
    out += [Sample((make((1, 2, 4), dtype, rng), (2, 3), "circular"), desc="circular"),
            Sample((make((1, 2, 3, 3), dtype, rng), (1, 0, 3, 1), "circular"),
                   desc="circular 2-d")]
    return out


add(OpInfo("pad", _pad_samples, _ref_pad,
           torch_fn=lambda torch, *a, **k: torch.nn.functional.pad(*a, **k),
           errors=lambda: [
               ErrorSample((ember.ones(2, 3), (1,)), {}, RuntimeError, r"pad\(\).*divisible",
                           "odd length"),
               ErrorSample((ember.ones(1, 2, 3), (3, 3), "reflect"), {}, RuntimeError,
                           r"pad\(\).*Padding size should be less", "reflect too wide"),
               ErrorSample((ember.ones(3), (1, 1), "reflect"), {}, NotImplementedError,
                           r"pad\(\).*1D", "reflect of 1-D"),
               ErrorSample((ember.ones(1, 2, 3), (1, 1), "foo"), {}, NotImplementedError,
                           r"pad\(\).*foo", "bad mode"),
               ErrorSample((ember.ones(2, 3), (-2, -2)), {}, RuntimeError,
                           r"pad\(\).*negative", "crops too much")]))


# ---------------------------------------------------------------- indexing


def _is_mask(t):
    t = np.asarray(t, dtype=object)
    return t.size > 0 and all(isinstance(x, bool) for x in t.reshape(-1))


def _index_plan(shape, indices):
    """PyTorch's advanced indexing by explicit loops: the result shape and, per result
    position, the position of self it reads."""
    ents, cursor = [], 0
    for t in indices:
        if t is None:
            cursor += 1
            continue
        t = np.asarray(t, dtype=object)
        if _is_mask(t):
            hits = [i for i in np.ndindex(*t.shape) if t[i]]
            for k in range(t.ndim):
                ents.append((cursor + k, np.array([h[k] for h in hits] or [], dtype=object)))
            cursor += t.ndim
        else:
            ents.append((cursor, t))
            cursor += 1
    bshape = tuple(np.broadcast_shapes(*[e.shape for _, e in ents]))
    dims = [d for d, _ in ents]
    rest = [d for d in range(len(shape)) if d not in dims]
    if dims == list(range(dims[0], dims[0] + len(dims))):
        before, after = [d for d in rest if d < dims[0]], [d for d in rest if d > dims[0]]
    else:
        before, after = [], rest
    out_shape = tuple(shape[d] for d in before) + bshape + tuple(shape[d] for d in after)
    bents = [np.broadcast_to(e, bshape) for _, e in ents]
    plan = []
    for oidx in np.ndindex(*out_shape):
        src = [0] * len(shape)
        for k, d in enumerate(before):
            src[d] = oidx[k]
        bi = oidx[len(before):len(before) + len(bshape)]
        for k, d in enumerate(after):
            src[d] = oidx[len(before) + len(bshape) + k]
        for (d, _), e in zip(ents, bents):
            src[d] = int(e[bi]) % shape[d]
        plan.append((oidx, tuple(src)))
    return out_shape, plan


def _ref_index(a, indices):
    a = np.asarray(a, dtype=object)
    out_shape, plan = _index_plan(a.shape, indices)
    out = np.empty(out_shape, dtype=object)
    for oidx, src in plan:
        out[oidx] = a[src]
    return out


def _ref_index_put(a, indices, values, accumulate=False):
    out = np.array(a, dtype=object)
    out_shape, plan = _index_plan(out.shape, indices)
    v = np.broadcast_to(np.asarray(values, dtype=object), out_shape)
    for oidx, src in plan:
        out[src] = out[src] + v[oidx] if accumulate else v[oidx]
    return out


def _idx(*vals, dtype="int64"):
    return ember.from_numpy(np.array(vals, dtype=dtype))


def _index_samples(dtype, rng):
    x = lambda *s: make(s, dtype, rng)   # noqa: E731
    mask = ember.from_numpy(np.array([[True, False, True], [False, False, True]]))
    return [
        Sample((x(3, 4), (_idx(2, 0, 2),)), desc="rows, repeated"),
        Sample((x(3, 4), (None, _idx(-1, 1))), desc="columns, negative"),
        Sample((x(2, 3, 4), (_idx(1, 0), None, _idx(3, 2))), desc="separated: front"),
        Sample((x(2, 3, 4), (None, _idx(2, 0), _idx(3, 3))), desc="adjacent: in place"),
        Sample((x(2, 3, 4), (ember.from_numpy(np.array([[0], [1]])), _idx(1, 2, 0))),
               desc="broadcast index shapes"),
        Sample((x(3, 4), (ember.from_numpy(np.array(1)),)), desc="0-d index"),
        Sample((x(3, 4), (_idx(0, 2, dtype="int32"),)), desc="int32"),
        Sample((x(2, 3, 4), (mask,)), desc="mask"),
        Sample((x(4, 2, 3), (None, mask)), desc="mask after a dim"),
        Sample((x(3, 4), (_idx(dtype="int64"),)), desc="empty index"),
        Sample((x(0, 4), (None, _idx(1))), desc="empty self")]


def _index_errors():
    return [ErrorSample((ember.ones(3, 4), (_idx(3),)), {}, IndexError,
                        r"index 3 is out of bounds for dimension 0 with size 3", "out of bounds",
                        data=True),
            ErrorSample((ember.ones(3, 4), (_idx(0, 1), _idx(0, 1, 2))), {}, IndexError,
                        r"shape mismatch.*\[2\], \[3\]", "index shapes"),
            ErrorSample((ember.ones(3, 4), (_idx(0.5, dtype="float32"),)), {}, IndexError,
                        r"long, int, byte or bool", "float index"),
            ErrorSample((ember.ones(3, 4), (ember.from_numpy(np.array([True, False])),)), {},
                        IndexError, r"mask \[2\].*\[3, 4\]", "mask shape"),
            ErrorSample((ember.ones(3), (None, _idx(0))), {}, IndexError, r"too many indices",
                        "too many")]


add(OpInfo("index.Tensor", _index_samples, _ref_index, dynamic_shape=True,
           torch_fn=lambda torch, a, idx: torch.ops.aten.index.Tensor(a, list(idx)),
           errors=_index_errors))


def _index_put_samples(dtype, rng):
    x = lambda *s: make(s, dtype, rng)   # noqa: E731
    mask = ember.from_numpy(np.array([[True, False, True], [False, False, True]]))
    out = [Sample((x(3, 4), (_idx(2, 0),), x(2, 4)), desc="rows"),
           Sample((x(3, 4), (_idx(2, 0), _idx(1, 3)), x(2)), desc="points"),
           Sample((x(3, 4), (_idx(1, 0),), x(4)), desc="broadcast values"),
           Sample((x(2, 3, 4), (mask,), x(4)), desc="mask", grad=False),
           Sample((x(3, 4), (_idx(1, 1, 0),), x(3, 4), True), desc="accumulate duplicates"),
           Sample((x(3, 4), (_idx(1, 2),), x(), False), desc="0-d values")]
    return out


add(OpInfo("index_put", _index_put_samples, _ref_index_put,
           errors=lambda: [
               ErrorSample((ember.ones(3, 4), (_idx(0, 1),), ember.ones(3)), {}, RuntimeError,
                           r"shape mismatch: value tensor of shape \[3\].*\[2, 4\]",
                           "values shape"),
               ErrorSample((ember.ones(3, 4), (_idx(0),), ember.ones(4, dtype=ember.float64)),
                           {}, RuntimeError, r"dtypes match.*Float.*Double", "values dtype"),
               ErrorSample((ember.ones(3, 4), (_idx(5),), ember.ones(4)), {}, IndexError,
                           r"index 5 is out of bounds", "out of bounds", data=True)]))


def _ref_nonzero(a):
    a = np.asarray(a, dtype=object)
    hits = [i for i in np.ndindex(*a.shape) if a[i] != 0]
    out = np.empty((len(hits), a.ndim), dtype=object)
    for r, h in enumerate(hits):
        out[r, :] = h
    return out


add(OpInfo("nonzero", lambda dtype, rng: [
    Sample((make((3, 4), dtype, rng, -1, 2),)), Sample((make((5,), dtype, rng, -1, 2),)),
    Sample((make((2, 2, 3), dtype, rng, -1, 2),)), Sample((make((), dtype, rng, 1, 2),)),
    Sample((make((0, 3), dtype, rng),))], _ref_nonzero, dynamic_shape=True))


def _ref_gather(a, dim, index, sparse_grad=False):
    a = np.asarray(a, dtype=object)
    index = np.asarray(index, dtype=object)
    if a.ndim == 0:
        return np.array(a, dtype=object).reshape(index.shape)
    out = np.empty(index.shape, dtype=object)
    for idx in np.ndindex(*index.shape):
        src = list(idx)
        src[dim % a.ndim] = index[idx]
        out[idx] = a[tuple(src)]
    return out


def _gather_samples(dtype, rng):
    return [Sample((make((3, 4), dtype, rng), 0, _randidx(rng, (2, 4), 3))),
            Sample((make((3, 4), dtype, rng), 1, _randidx(rng, (3, 6), 4)), desc="repeats"),
            Sample((make((2, 3, 4), dtype, rng), -1, _randidx(rng, (2, 2, 1), 4)),
                   desc="smaller index"),
            Sample((make((), dtype, rng), 0, _idx(0).view(())), desc="0-d"),
            Sample((make((3, 4), dtype, rng), 0, _randidx(rng, (0, 4), 3)), desc="empty")]


def _randidx(rng, shape, high):
    return ember.from_numpy(rng.integers(0, high, size=shape).astype(np.int64))


def _perm_index(rng, shape, d, size):
    """Distinct targets along d (scatter's result is undefined for repeated ones)."""
    a = np.empty(shape, dtype=np.int64)
    moved = np.moveaxis(a, d, -1)
    for idx in np.ndindex(*moved.shape[:-1]):
        moved[idx] = rng.permutation(size)[:shape[d]]
    return ember.from_numpy(a)


add(OpInfo("gather", _gather_samples, _ref_gather,
           errors=lambda: [
               ErrorSample((ember.ones(3, 4), 1, _idx(0, 1).view(1, 2).to(ember.float32)), {},
                           RuntimeError, r"gather\(\).*int64", "float index"),
               ErrorSample((ember.ones(3, 4), 1, _idx(0, 1)), {}, RuntimeError,
                           r"gather\(\).*same number of dimensions", "rank"),
               ErrorSample((ember.ones(3, 4), 1, _idx(0, 5).view(1, 2)), {}, RuntimeError,
                           r"gather\(\).*index 5 is out of bounds", "out of bounds",
                           data=True),
               ErrorSample((ember.ones(3, 4), 0, _idx(*[0] * 10).view(2, 5)), {}, RuntimeError,
                           r"gather\(\).*\[2, 5\].*\[3, 4\]", "index too large")]))


def _ref_scatter(a, dim, index, src, reduce=None):
    out = np.array(a, dtype=object)
    index = np.asarray(index, dtype=object)
    if out.ndim == 0:
        if index.size:
            v = src if not isinstance(src, np.ndarray) else src.reshape(-1)[0]
            out[()] = v if reduce is None else (out[()] + v if reduce == "add" else out[()] * v)
        return out
    for idx in np.ndindex(*index.shape):
        tgt = list(idx)
        tgt[dim % out.ndim] = index[idx]
        tgt = tuple(tgt)
        v = src[idx] if isinstance(src, np.ndarray) else src
        if reduce in ("add", "sum"):
            out[tgt] = out[tgt] + v
        elif reduce in ("multiply", "prod"):
            out[tgt] = out[tgt] * v
        else:
            out[tgt] = v
    return out


def _scatter_samples(kind):
    def samples(dtype, rng):
        x = lambda *s: make(s, dtype, rng, -2, 2)   # noqa: E731
        val = 2 if dtype not in FLOATS else 1.5
        if dtype == "bool":
            val = True
        third = (lambda *s: x(*s)) if kind in ("src", "add", "reduce") else (lambda *s: val)
        out = [Sample((x(3, 4), 0, _perm_index(rng, (2, 4), 0, 3), third(2, 4))),
               Sample((x(3, 4), 1, _perm_index(rng, (3, 2), 1, 4), third(3, 3)),
                      desc="src larger than index"),
               Sample((x(2, 3, 4), -1, _perm_index(rng, (2, 2, 3), 2, 4), third(2, 2, 3))),
               Sample((x(3, 4), 0, _randidx(rng, (0, 4), 3), third(0, 4)), desc="empty")]
        if kind == "add":
            out.append(Sample((x(3, 4), 0, _randidx(rng, (5, 4), 3), x(5, 4)),
                              desc="repeated targets accumulate"))
        return [Sample(s.args, dict(s.kwargs), s.desc,
                       grad=kind != "reduce") for s in out]
    return samples


_SCATTER_ERRORS = lambda name: lambda: [   # noqa: E731
    ErrorSample((ember.ones(3, 4), 0, _idx(0, 1).view(2, 1).to(ember.float32), ember.ones(2, 1)),
                {}, RuntimeError, rf"{name}\(\).*int64", "float index"),
    ErrorSample((ember.ones(3, 4), 0, _idx(0, 1).view(2, 1), ember.ones(2, 1,
                                                                     dtype=ember.float64)),
                {}, RuntimeError, rf"{name}\(\).*dtype", "src dtype"),
    ErrorSample((ember.ones(3, 4), 0, _idx(0, 7).view(2, 1), ember.ones(2, 1)), {},
                RuntimeError, rf"{name}\(\).*index 7 is out of bounds", "out of bounds",
                data=True)]

add(OpInfo("scatter.src", _scatter_samples("src"), _ref_scatter,
           torch_fn=lambda torch, *a, **k: torch.scatter(*a, **k),
           errors=_SCATTER_ERRORS("scatter")))
add(OpInfo("scatter.value", _scatter_samples("value"), _ref_scatter,
           torch_fn=lambda torch, *a, **k: torch.scatter(*a, **k)))
add(OpInfo("scatter.reduce", lambda dtype, rng: [
    Sample(s.args, {"reduce": r}, s.desc + " " + r, grad=False)
    for s in _scatter_samples("reduce")(dtype, rng) for r in ("add", "multiply")],
    lambda a, dim, index, src, reduce: _ref_scatter(a, dim, index, src, reduce),
    dtypes=NO_BOOL, torch_fn=lambda torch, *a, **k: torch.scatter(*a, **k)))
add(OpInfo("scatter.value_reduce", lambda dtype, rng: [
    Sample(s.args, {"reduce": r}, s.desc + " " + r, grad=False)
    for s in _scatter_samples("value")(dtype, rng) for r in ("add", "multiply")],
    lambda a, dim, index, value, reduce: _ref_scatter(a, dim, index, value, reduce),
    dtypes=NO_BOOL, torch_fn=lambda torch, *a, **k: torch.scatter(*a, **k)))
add(OpInfo("scatter_add", _scatter_samples("add"),
           lambda a, dim, index, src: _ref_scatter(a, dim, index, src, "add"),
           dtypes=NO_BOOL, errors=_SCATTER_ERRORS("scatter_add")))


def _ref_scatter_reduce(a, dim, index, src, reduce, include_self=True):
    out = np.array(a, dtype=object)
    index = np.asarray(index, dtype=object)
    groups = {}
    for idx in np.ndindex(*index.shape):
        tgt = list(idx)
        tgt[dim % max(out.ndim, 1)] = index[idx]
        groups.setdefault(tuple(tgt[:out.ndim]), []).append(src[idx])
    for tgt, vals in groups.items():
        if include_self:
            vals = [out[tgt]] + vals
        floaty = any(isinstance(v, float) for v in vals)
        if reduce == "sum":
            r = _sum(vals)
        elif reduce == "prod":
            r = _prod(vals)
        elif reduce == "mean":
            r = _sum(vals) / len(vals) if floaty else _sum(vals) // len(vals)
        elif reduce == "amax":
            r = vals[0]
            for v in vals:
                r = _ref_max2(r, v)
        else:
            r = vals[0]
            for v in vals:
                r = _ref_min2(r, v)
        out[tgt] = r
    return out


def _scatter_reduce_samples(dtype, rng):
    out = []
    x = lambda *s: make(s, dtype, rng, -2, 2)   # noqa: E731
    for reduce in ("sum", "prod", "mean", "amax", "amin"):
        for include_self in (True, False):
            if dtype == "bool" and reduce in ("sum", "prod", "mean"):
                continue
            grad = True
            out.append(Sample((x(3, 4), 0, _randidx(rng, (5, 4), 3), x(5, 4), reduce),
                              {"include_self": include_self},
                              desc=f"{reduce} include_self={include_self}", grad=grad))
            out.append(Sample((x(3, 4), 1, _perm_index(rng, (3, 2), 1, 4), x(3, 3), reduce),
                              {"include_self": include_self},
                              desc=f"{reduce} {include_self} distinct", grad=grad))
        if reduce == "prod" and dtype in FLOATS:
            a, s_ = x(3, 4), x(4, 4)
            a.numpy()[0, 1] = 0           # a zero in self, one in src, two at one target
            s_.numpy()[1, 1] = s_.numpy()[2, 2] = s_.numpy()[3, 2] = 0
            idx = ember.from_numpy(np.array([[0, 0, 1, 2]] * 4, dtype=np.int64))
            for include_self in (True, False):
                out.append(Sample((a, 0, idx, s_, "prod"), {"include_self": include_self},
                                  desc=f"prod with zeros {include_self}"))
    return out


add(OpInfo("scatter_reduce.two", _scatter_reduce_samples, _ref_scatter_reduce,
           torch_fn=lambda torch, *a, **k: torch.scatter_reduce(*a, **k),
           errors=lambda: [ErrorSample((ember.ones(3, 4), 0, _idx(0).view(1, 1),
                                        ember.ones(1, 1), "foo"), {}, RuntimeError,
                                       r"scatter_reduce\(\).*sum, prod, mean, amax or amin",
                                       "bad reduce")]))


def _ref_index_select(a, dim, index):
    a = np.asarray(a, dtype=object)
    idx = [int(i) for i in np.asarray(index, dtype=object).reshape(-1)]
    if a.ndim == 0:
        return a
    d = dim % a.ndim
    shape = list(a.shape)
    shape[d] = len(idx)
    out = np.empty(shape, dtype=object)
    for o in np.ndindex(*shape):
        src = list(o)
        src[d] = idx[o[d]]
        out[o] = a[tuple(src)]
    return out


add(OpInfo("index_select", lambda dtype, rng: [
    Sample((make((3, 4), dtype, rng), 0, _idx(2, 0, 2))),
    Sample((make((2, 3, 4), dtype, rng), -1, _idx(3, 1, dtype="int32"))),
    Sample((make((3, 4), dtype, rng), 1, _idx(2).view(())), desc="0-d index"),
    Sample((make((3, 4), dtype, rng), 1, _idx(dtype="int64")), desc="empty index")],
    _ref_index_select,
    errors=lambda: [ErrorSample((ember.ones(3, 4), 0, _idx(3)), {}, IndexError,
                                r"index_select\(\).*out of range", "out of range", data=True),
                    ErrorSample((ember.ones(3, 4), 0, _idx(0, 1).view(1, 2)), {}, IndexError,
                                r"index_select\(\).*vector", "2-d index"),
                    ErrorSample((ember.ones(3, 4), 0, _idx(0.0, dtype="float32")), {},
                                RuntimeError, r"index_select\(\).*int32 or int64",
                                "float index")]))


def _ref_index_add(a, dim, index, source, alpha=1):
    out = np.array(a, dtype=object)
    src = np.asarray(source, dtype=object)
    idx = [int(i) for i in np.asarray(index, dtype=object).reshape(-1)]
    d = dim % out.ndim
    for o in np.ndindex(*src.shape):
        tgt = list(o)
        tgt[d] = idx[o[d]]
        out[tuple(tgt)] = out[tuple(tgt)] + alpha * src[o]
    return out


add(OpInfo("index_add", lambda dtype, rng: [
    Sample((make((3, 4), dtype, rng), 0, _idx(2, 0, 2), make((3, 4), dtype, rng))),
    Sample((make((2, 3, 4), dtype, rng), -1, _idx(3, 1), make((2, 3, 2), dtype, rng)),
           {"alpha": 2})],
    _ref_index_add, dtypes=NO_BOOL,
    errors=lambda: [ErrorSample((ember.ones(3, 4), 0, _idx(0, 1), ember.ones(3, 4)), {},
                                RuntimeError, r"index_add\(\).*slice shapes",
                                "source shape")]))


def _ref_masked_fill(a, mask, value):
    a = np.asarray(a, dtype=object)
    mask = np.asarray(mask, dtype=object)
    shape = np.broadcast_shapes(a.shape, mask.shape)
    v = value.reshape(-1)[0] if isinstance(value, np.ndarray) else value
    out = np.empty(shape, dtype=object)
    ab, mb = np.broadcast_to(a, shape), np.broadcast_to(mask, shape)
    for i in np.ndindex(*shape):
        out[i] = v if mb[i] else ab[i]
    return out


def _masked_fill_samples(tensor_value):
    def samples(dtype, rng):
        val = make((), dtype, rng) if tensor_value else (
            True if dtype == "bool" else 2 if dtype not in FLOATS else -1.5)
        m = lambda *s: make(s, "bool", rng)   # noqa: E731
        return [Sample((make((2, 3), dtype, rng), m(2, 3), val)),
                Sample((make((2, 3), dtype, rng), m(3), val), desc="broadcast mask"),
                Sample((make((3,), dtype, rng), m(2, 3), val), desc="mask grows the result"),
                Sample((make((), dtype, rng), m(), val), desc="0-d"),
                Sample((make((0, 3), dtype, rng), m(3), val), desc="empty")]
    return samples


_MF_ERRORS = lambda value: [   # noqa: E731
    ErrorSample((ember.ones(2, 3), ember.ones(2, 3), value), {}, RuntimeError,
                r"masked_fill.*boolean", "float mask")]
add(OpInfo("masked_fill.Scalar", _masked_fill_samples(False), _ref_masked_fill,
           errors=lambda: _MF_ERRORS(1.0)))
add(OpInfo("masked_fill.Tensor", _masked_fill_samples(True), _ref_masked_fill,
           errors=lambda: _MF_ERRORS(ember.ones(())) + [
               ErrorSample((ember.ones(2, 3), ember.ones(2, 3, dtype=ember.bool),
                            ember.ones(1)), {}, RuntimeError, r"masked_fill.*0-dimensional",
                           "1-d value")]))


def _ref_masked_select(a, mask):
    a = np.asarray(a, dtype=object)
    mask = np.asarray(mask, dtype=object)
    shape = np.broadcast_shapes(a.shape, mask.shape)
    ab, mb = np.broadcast_to(a, shape), np.broadcast_to(mask, shape)
    vals = [ab[i] for i in np.ndindex(*shape) if mb[i]]
    out = np.empty(len(vals), dtype=object)
    out[:] = vals
    return out


add(OpInfo("masked_select", lambda dtype, rng: [
    Sample((make((2, 3), dtype, rng), make((2, 3), "bool", rng))),
    Sample((make((2, 3), dtype, rng), make((3,), "bool", rng)), desc="broadcast mask"),
    Sample((make((3,), dtype, rng), make((2, 3), "bool", rng)), desc="broadcast self"),
    Sample((make((), dtype, rng), make((), "bool", rng)), desc="0-d")],
    _ref_masked_select, dynamic_shape=True,
    errors=lambda: [ErrorSample((ember.ones(2, 3), ember.ones(2, 3)), {}, RuntimeError,
                                r"masked_select.*Bool", "float mask")]))


# ---------------------------------------------------------------- composite forms (sugar)

add(OpInfo("var.unbiased", lambda dtype, rng: [Sample((make((3, 4), dtype, rng), False)),
                                               Sample((make((5,), dtype, rng), True))],
           lambda a, unbiased: _var_ref(False)(a, None, unbiased), reduction=True,
           dtypes=FLOATS, torch_fn=lambda torch, *a: torch.var(*a)))
add(OpInfo("std.unbiased", lambda dtype, rng: [Sample((make((3, 4), dtype, rng), False)),
                                               Sample((make((5,), dtype, rng), True))],
           lambda a, unbiased: _var_ref(True)(a, None, unbiased), reduction=True,
           dtypes=FLOATS, torch_fn=lambda torch, *a: torch.std(*a)))


def _nonzero_columns(a, as_tuple=True):
    n = _ref_nonzero(a)
    if not as_tuple:
        return n
    if np.ndim(a) == 0:
        return (np.zeros(n.shape[0], dtype=object),)
    return tuple(np.array(n[:, k], dtype=object) for k in range(n.shape[1]))


add(OpInfo("nonzero.as_tuple", lambda dtype, rng: [
    Sample((make((3, 4), dtype, rng, -1, 2),), {"as_tuple": True}),
    Sample((make((3,), dtype, rng, -1, 2),), {"as_tuple": False}),
    Sample((make((), dtype, rng, 1, 2),), {"as_tuple": True})], _nonzero_columns))
add(OpInfo("argwhere", lambda dtype, rng: [Sample((make((3, 4), dtype, rng, -1, 2),))],
           _ref_nonzero))
add(OpInfo("where.cond", lambda dtype, rng: [Sample((make((3, 4), "bool", rng),)),
                                             Sample((make((2, 2, 3), "bool", rng),))],
           lambda c: _nonzero_columns(c)))
add(OpInfo("hstack", lambda dtype, rng: [
    Sample(((make((2, 3), dtype, rng), make((2, 1), dtype, rng)),)),
    Sample(((make((3,), dtype, rng), make((2,), dtype, rng)),), desc="1-D")],
    lambda ts: _ref_cat(ts, 1 if np.ndim(ts[0]) > 1 else 0)))
add(OpInfo("vstack", lambda dtype, rng: [
    Sample(((make((2, 3), dtype, rng), make((1, 3), dtype, rng)),)),
    Sample(((make((3,), dtype, rng), make((3,), dtype, rng)),), desc="1-D rows")],
    lambda ts: _ref_cat([np.asarray(t, dtype=object).reshape(-1, np.shape(t)[-1])
                         for t in ts], 0)))
add(OpInfo("split_with_sizes", lambda dtype, rng: [
    Sample((make((5, 3), dtype, rng), [2, 3])), Sample((make((2, 6), dtype, rng), [1, 0, 5], 1))],
    _ref_split))
add(OpInfo("narrow_copy", lambda dtype, rng: [Sample((make((5, 3), dtype, rng), 0, 1, 3)),
                                              Sample((make((2, 5), dtype, rng), 1, 0, 5))],
           lambda a, dim, start, length: _ref_slice(a, dim, start, start + length)))
add(OpInfo("view_as", lambda dtype, rng: [Sample((make((2, 6), dtype, rng),
                                                  make((3, 4), dtype, rng)), noncontig=False)],
           lambda a, o: np.asarray(a, dtype=object).reshape(np.shape(o))))
add(OpInfo("reshape_as", lambda dtype, rng: [Sample((make((2, 6), dtype, rng),
                                                     make((3, 4), dtype, rng)))],
           lambda a, o: np.asarray(a, dtype=object).reshape(np.shape(o))))


_T_INFO = add(OpInfo("numpy_T", lambda dtype, rng: [Sample((make((2, 3), dtype, rng),)),
                                                     Sample((make((4,), dtype, rng),))],
                     lambda a: np.asarray(a, dtype=object).T,
                     torch_fn=lambda torch, a: a.T))
_T_INFO.call = lambda a: a.T
_MT_INFO = add(OpInfo("mT", lambda dtype, rng: [Sample((make((2, 3, 4), dtype, rng),)),
                                                 Sample((make((3, 2), dtype, rng),))],
                      lambda a: np.swapaxes(np.asarray(a, dtype=object), -1, -2),
                      torch_fn=lambda torch, a: a.mT,
                      errors=lambda: [ErrorSample((ember.ones(3),), {}, RuntimeError,
                                                  r"mT", "1-D")]))
_MT_INFO.call = lambda a: a.mT


# the composites of closeness.py, order_stats.py, combining.py: tests/op_db_surface.py
import op_db_surface  # noqa: E402,F401

# the factorization prims (inverse ... eigh): tests/op_db_linalg.py
import op_db_linalg  # noqa: E402,F401

# diagonal, as_strided and their scatters: tests/op_db_strided.py
import op_db_strided  # noqa: E402,F401

# the composites of pointwise_composites.py, products.py, arranging.py and fmod
import op_db_api  # noqa: E402,F401

# ---------------------------------------------------------------- in-place variants


def _can_cast(frm, to):
    """PyTorch's canCast: no floats into integers, nothing but bool into bool."""
    if frm.is_floating_point and not to.is_floating_point:
        return False
    return not (to is ember.bool and frm is not ember.bool)


def _torch_inplace(torch, method, self, *args, **kwargs):
    """torch's self.method_(...) on a copy of self; aten's for the nn ones (elu_, ...)."""
    self = self.clone()
    if hasattr(torch.Tensor, method):
        return getattr(self, method)(*args, **kwargs)
    return getattr(torch.ops.aten, method)(self, *args, **kwargs)


def _inplace_info(name, functional: OpInfo):
    """name_: the functional op's samples whose result fits self (shape and dtype)."""
    method = ENTRY[name].name
    def samples(dtype, rng):
        out = []
        for s in functional.samples(dtype, rng):
            self = s.args[0]
            if not isinstance(self, ember.Tensor):
                continue
            try:
                r = functional.call(*s.args, **s.kwargs)
            except Exception:  # noqa: BLE001 - the functional op's own tests cover it
                continue
            if tuple(r.shape) != tuple(self.shape) or not _can_cast(r.dtype, self.dtype):
                continue
            out.append(Sample(s.args, s.kwargs, s.desc, s.grad, s.noncontig))
        return out

    def errors():
        params = functional.entry.schema.params
        if len(params) < 2 or not params[1].is_tensor or any(
                not p.has_default for p in params[2:] if not p.kwonly):
            return []
        d = ember.float32 if "float32" in functional.dtypes else dt(functional.dtypes[-1])
        args = [ember.ones(2, 1, dtype=d), ember.ones(2, 3, dtype=d)]
        for p in params[2:]:          # further required operands
            if p.kwonly or p.has_default:
                break
            args.append(ember.ones(2, 3, dtype=d) if p.is_tensor else 1)
        return [ErrorSample(tuple(args), {}, RuntimeError,
                            rf"{method}\(\)(?=.*\[2, 1\])(?=.*\[2, 3\])",
                            "result does not fit self")]

    def call(*args, **kwargs):
        self = args[0].clone()
        r = getattr(self, method)(*args[1:], **kwargs)
        assert r is self, f"{name} must return self"
        return r

    info = OpInfo(name, samples, functional.ref, dtypes=functional.dtypes,
                  reduction=functional.reduction, inplace=True,
                  random=functional.random, check=functional.check, errors=errors,
                  no_derivative=functional.no_derivative,
                  torch_fn=lambda torch, *a, **k: _torch_inplace(torch, method, *a, **k))
    info.call = call
    return info


# ---------------------------------------------------------------- complex numbers
# make() has no complex dtypes: complex samples are pairs of the float32/float64 dtype under
# test viewed as complex (other dtypes give real samples, which these ops refuse or treat
# as real numbers). tests/test_complex.py checks complex values and gradients against
# torch; complex samples here are not gradchecked (grad=False).

REALS = ("float32", "float64")


def _complex_sample(shape, dtype, rng, transpose=False):
    if 0 in shape:      # make() keeps NumPy's zero strides of empty arrays
        return ember.zeros(shape, dtype=ember.complex64 if dtype == "float32" else
                           ember.complex128)
    z = ember.view_as_complex(make(tuple(shape) + (2,), dtype, rng)).clone()
    return z.t() if transpose else z


def _complex_or_real(shape, dtype, rng, **kw):
    if dtype in REALS:
        return _complex_sample(shape, dtype, rng, **kw)
    return make(shape, dtype, rng)


def _to_complex_array(a):
    return np.asarray(np.asarray(a, dtype=object).astype(complex))


def _ref_view_as_real(a):
    z = _to_complex_array(a)
    return np.stack([z.real, z.imag], -1).astype(object)


def _ref_view_as_complex(a):
    r = np.asarray(a, dtype=object).astype(float)
    return (r[..., 0] + 1j * r[..., 1]).astype(object)


add(OpInfo("view_as_real", lambda dtype, rng: [
    Sample((_complex_or_real(s, dtype, rng),), desc=f"{s}", grad=False)
    for s in ((3, 4), (), (0,), (2, 3, 1))] + [
    Sample((_complex_or_real((3, 4), dtype, rng, transpose=True),), desc="transposed",
           grad=False)],
    _ref_view_as_real, dtypes=("float32",),   # gradients: tests/test_complex.py
    errors=lambda: [ErrorSample((ember.ones(2),), {}, RuntimeError,
                                "view_as_real is only supported for complex tensors",
                                "real input")]))

add(OpInfo("view_as_complex", lambda dtype, rng: [] if dtype not in REALS else [
    Sample((make(s, dtype, rng),),
           desc=f"{s}", noncontig=False)
    for s in ((3, 2), (2, 4, 2), (2,))],
    _ref_view_as_complex, dtypes=REALS,
    errors=lambda: [
        ErrorSample((ember.ones(3),), {}, RuntimeError, "last dimension of size 2", "size"),
        ErrorSample((ember.ones(2, 2).t(),), {}, RuntimeError,
                    "last dimension with stride 1", "stride"),
        ErrorSample((ember.ones(3, 3)[:, :2],), {}, RuntimeError, "divisible by 2",
                    "odd stride"),
        ErrorSample((ember.ones(()),), {}, RuntimeError, "one or more dimensions", "0-d"),
        ErrorSample((ember.ones(2, 2, dtype=ember.int64),), {}, RuntimeError,
                    "only supported for float and double", "int64")]))


def _ref_conj(a):
    return a.conjugate()


# bool: torch copies, NumPy's conjugate has no bool loop (ember raises TypeError)
add(OpInfo("_conj_physical", lambda dtype, rng: [] if dtype == "bool" else unary_samples()(
    dtype, rng) + [
    Sample((_complex_or_real((2, 3), dtype, rng),), desc="complex", grad=False),
    Sample((_complex_or_real((3, 2), dtype, rng, transpose=True),), desc="complex^T",
           grad=False)],
    elementwise(_ref_conj, 1), dtypes=NUMBERS, torch_fn=_t("_conj_physical")))


def _complex_parts_samples(dtype, rng):
    if dtype in ("float16", "bfloat16"):
        return []         # torch makes complex32 (float16) or refuses: ember refuses both
    return [Sample((make(a, dtype, rng), make(b, dtype, rng)), desc=f"{a} {b}")
            for a, b in (((2, 3), (2, 3)), ((3, 1), (4,)), ((), (2,)), ((0, 2), (0, 2)))]


add(OpInfo("complex", _complex_parts_samples, elementwise(complex, 2), dtypes=REALS,
           errors=lambda: [
               ErrorSample((ember.ones(2), ember.ones(2, dtype=ember.float64)), {},
                           RuntimeError, "Expected object of scalar type Float",
                           "mixed dtypes"),
               ErrorSample((ember.ones(2, dtype=ember.int64), ember.ones(2, dtype=ember.int64)),
                           {}, RuntimeError, "Expected both inputs", "integers")]))


def _ref_angle(a):
    if isinstance(a, complex):
        return math.atan2(a.imag, a.real)
    a = float(a)
    if math.isnan(a):
        return a
    return math.pi if a < 0 else 0.0


add(OpInfo("angle", lambda dtype, rng: _with_specials(unary_samples())(dtype, rng) + [
    Sample((_complex_or_real((2, 3), dtype, rng),), desc="complex", grad=False)],
    elementwise(_ref_angle, 1), dtypes=NO_BOOL))

add(OpInfo("atan2", binary_samples(numbers=()), elementwise(_float_ref(math.atan2), 2)))


for _e in registry.ENTRIES:
    if _e.inplace and _e.functional is not None and _e.qualified_name not in OPS:
        _f = OPS.get(_e.functional.qualified_name)
        if _f is not None:
            add(_inplace_info(_e.qualified_name, _f))


def missing():
    """Table entries that need an OpInfo and have none."""
    return [e.qualified_name for e in registry.ENTRIES
            if not exempt(e) and e.qualified_name not in OPS]


def all_infos():
    """Every OpInfo plus the extra sample sets (div's rounding modes), by test id."""
    out = dict(OPS)
    out.update(EXTRA)
    return out
