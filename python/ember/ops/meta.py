"""Meta rules: the shape, dtype and strides of an op's result from its inputs' metadata.

These are the Python twins of the C rules in csrc/dispatch/rules.c and the kernels'
geometry code; tracers use them to propagate fake tensors, and tests/test_op_rules.py
checks that both agree on every op of the table. A rule receives the op entry and
its bound arguments (tensors may be meta) and returns meta tensors.
"""
from __future__ import annotations

import math

from .. import _C
from .. import _dtypes
from . import registry as R

DTYPES = _dtypes.BY_NAME


def is_float(dt):
    return dt.is_floating_point


def is_complex(dt):
    return dt.is_complex


def is_inexact(dt):
    """floating or complex (the dtypes that can require gradients)."""
    return dt.is_floating_point or dt.is_complex


def complex_value_type(dt):
    """float32 for complex64, float64 for complex128; other dtypes unchanged."""
    return {_C.complex64: _C.float32, _C.complex128: _C.float64}.get(dt, dt)


def _category(dt):
    return 0 if dt is _C.bool else (2 if dt.is_floating_point else 1)


def _bits(dt):
    return dt.itemsize * 8


def promote_types(a, b):
    """PyTorch's promotion lattice for two dtypes."""
    if a is None:
        return b
    if b is None or a is b:
        return a
    if a is _C.bool:
        return b
    if b is _C.bool:
        return a
    if is_complex(a) or is_complex(b):
        wide = (_C.complex128, _C.float64)
        return _C.complex128 if a in wide or b in wide else _C.complex64
    if is_float(a) or is_float(b):
        if not is_float(a):
            return b
        if not is_float(b):
            return a
        if _bits(a) == _bits(b):
            return _C.float32         # float16 and bfloat16: neither holds the other
        return a if _bits(a) > _bits(b) else b
    if _C.uint8 in (a, b):
        other = b if a is _C.uint8 else a
        return _C.int16 if other is _C.int8 else other
    return a if _bits(a) >= _bits(b) else b


def _number_dtype(x):
    if isinstance(x, bool):
        return _C.bool
    if isinstance(x, int):
        return _C.int64
    if isinstance(x, complex):
        return _C.complex128 if _C.get_default_dtype() is _C.float64 else _C.complex64
    return _C.get_default_dtype()


def result_type(*operands):
    """PyTorch's result_type: tensors with dimensions decide, then 0-d tensors, then
    Python numbers, each group only able to raise the category of the one before."""
    dim_r = zero_r = wrap_r = None
    for o in operands:
        if o is None:
            continue
        if isinstance(o, _C.Tensor):
            if o.ndim > 0:
                dim_r = promote_types(dim_r, o.dtype)
            else:
                zero_r = promote_types(zero_r, o.dtype)
        else:
            wrap_r = promote_types(wrap_r, _number_dtype(o))

    def combine(higher, lower):
        if higher is not None and is_complex(higher):
            return higher
        if lower is not None and is_complex(lower):
            if higher is not None and is_float(higher):
                return _C.complex128 if higher is _C.float64 else _C.complex64
            return lower
        if higher is not None and is_float(higher):
            return higher
        if higher is _C.bool or (lower is not None and is_float(lower)):
            return promote_types(higher, lower)
        return higher if higher is not None else lower

    return combine(dim_r, combine(zero_r, wrap_r))


def broadcast_shapes(opname, *shapes):
    nd = max((len(s) for s in shapes), default=0)
    out = [1] * nd
    for s in shapes:
        off = nd - len(s)
        for i, n in enumerate(s):
            o = out[off + i]
            if n == o or n == 1:
                continue
            if o == 1:
                out[off + i] = n
            else:
                raise RuntimeError(
                    f"{opname}(): The size of tensor a ({o}) must match the size of tensor b "
                    f"({n}) at non-singleton dimension {off + i}")
    return tuple(out)


def contiguous_strides(shape):
    strides, s = [], 1
    for n in reversed(shape):
        strides.append(s)
        s *= max(n, 1)
    return tuple(reversed(strides))


def is_contiguous(t):
    expected = 1
    if t.numel() == 0:
        return True
    for n, s in zip(reversed(t.shape), reversed(t.stride())):
        if n == 1:
            continue
        if s != expected:
            return False
        expected *= n
    return True


def _known_contiguous(t):
    """is_contiguous(t), False where only a guard on symbolic sizes could tell (a slice
    of a buffer, x[:, :n], is contiguous only when n is the buffer's length): the
    caller's general path gives the same layout without that guard."""
    expected = 1
    if _decided(t.numel() == 0):
        return True
    for n, s in zip(reversed(t.shape), reversed(t.stride())):
        if _decided(n == 1):
            continue
        if not _decided(s == expected):
            return False
        expected *= n
    return True


def _decided(b):
    """A size comparison's truth if no guard is needed to tell (else False)."""
    if isinstance(b, bool):
        return b
    from ..fx.sym_expr import Rel
    return bool(b.env.evaluate(b.rel)) if Rel(b.rel.op, b.env.simplify(b.rel.expr)) \
        .static_value(b.env.ranges()) is not None else False


def elementwise_strides(operands, shape):
    """TensorIterator's output layout: contiguous if all inputs are contiguous and of the
    output's shape; else dimensions ordered by the inputs' strides."""
    tensors = [o for o in operands if isinstance(o, _C.Tensor)]
    nd = len(shape)
    # (ranks first: tuples of different lengths would still compare their leading
    # sizes, a guard on symbolic sizes for nothing)
    if nd <= 1 or 0 in shape or all(t.ndim == nd and tuple(t.shape) == tuple(shape) and
                                     _known_contiguous(t) for t in tensors):
        return contiguous_strides(shape)
    strides = []
    for t in tensors:
        off = nd - t.ndim
        st = []
        for d in range(nd):
            if d < off or (t.shape[d - off] == 1 and shape[d] != 1):
                st.append(0)
            else:
                st.append(t.stride()[d - off])
        strides.append(st)
    return tensoriter_strides(strides, shape)


def tensoriter_strides(strides, shape, skip_unit=False):
    """TensorIterator's output strides for operands whose strides (one list per operand,
    broadcast to shape's rank, 0 where broadcast) are given: dims ordered innermost-first
    by those strides, a broadcast dim not voting, ties broken by size; with skip_unit,
    dims of size 1 do not vote either (advanced indexing's layout). The C twin is
    em_tensoriter_strides in csrc/dispatch/rules.c."""
    nd = len(shape)
    if nd <= 1:
        return contiguous_strides(shape)
    perm = list(range(nd - 1, -1, -1))    # perm[0] is the innermost dimension

    def should_swap(a, b):
        for st in strides:
            s0, s1 = st[a], st[b]
            if s0 == 0 or s1 == 0 or (skip_unit and (shape[a] == 1 or shape[b] == 1)):
                continue
            if s0 != s1:
                return -1 if s0 < s1 else 1
            if shape[a] > shape[b]:
                return 1
        return 0

    for i in range(1, nd):
        dim1 = i
        for dim0 in range(i - 1, -1, -1):
            c = should_swap(perm[dim0], perm[dim1])
            if c > 0:
                perm[dim0], perm[dim1] = perm[dim1], perm[dim0]
                dim1 = dim0
            elif c < 0:
                break
    out, nxt = [0] * nd, 1
    for d in perm:
        out[d] = nxt
        nxt *= shape[d]
    return tuple(out)


MAX_DIMS = _C.MAX_DIMS      # tensors have at most this many dims (EM_MAX_DIMS)


def check_ndim(name, ndim):
    """RuntimeError unless a result of ndim dims fits the limit (as the C kernels say)."""
    if ndim > MAX_DIMS:
        raise RuntimeError(f"{name}(): at most {MAX_DIMS} dimensions are supported, but the "
                           f"result would have {ndim}")


def meta_tensor(shape, dtype, strides=None):
    """A meta tensor; a SymFake (fx/sym_fake.py) when a size or stride is symbolic."""
    shape = tuple(shape)
    check_ndim("meta_tensor", len(shape))
    strides = tuple(strides) if strides is not None else contiguous_strides(shape)
    if any(type(v) is not int for v in shape + strides):
        from ..fx import sym_fake
        if sym_fake.is_symbolic(shape + strides):
            return sym_fake.SymFake.make(shape, strides, dtype)
    return _C._meta_tensor(shape, dtype, strides)


def shape_str(shape):
    """A shape as PyTorch prints it in messages: [2, 3]."""
    return "[" + ", ".join(str(n) for n in shape) + "]"


def wrap_dim(d, ndim):
    n = max(ndim, 1)
    if d < -n or d >= n:
        raise IndexError(f"Dimension out of range (expected to be in range of [{-n}, {n - 1}], "
                         f"but got {d})")
    return (d + n) % n if ndim > 0 else 0


def reduce_mask(dims, ndim):
    if dims is None or (isinstance(dims, tuple) and len(dims) == 0):
        return [True] * ndim
    mask = [False] * ndim
    for d in dims:
        w = wrap_dim(d, ndim)
        if ndim == 0:
            continue
        if mask[w]:
            raise RuntimeError(f"dim {w} appears multiple times in the list of dims")
        mask[w] = True
    return mask


# ---------------------------------------------------------------- rules by kind

def _operands(entry, args):
    return [a for p, a in zip(entry.schema.params, args) if p.is_tensor][:3]


def computation_dtype(entry, args, result=None):
    """The dtype an elementwise op computes in, TensorIterator's common dtype: every
    operand is converted to it first. For comparisons it is the operands' result_type
    (the result is bool); for every other op it is the result's dtype (`result`, or the
    meta rule's), which already says how the kind promotes (true division and the
    UNARY_FLOAT ops lift integers to the default float; rounding division keeps them)."""
    if entry.kind == R.COMPARE or entry.rule & R.COMPLEX_TO_REAL:
        return result_type(*_operands(entry, args))
    if result is None:
        result = rule_for(entry)(entry, args)
    return result.dtype


def elementwise(entry, args):
    ops = _operands(entry, args)
    shape = broadcast_shapes(entry.name, *[tuple(o.shape) for o in ops
                                            if isinstance(o, _C.Tensor)])
    rt = result_type(*ops)
    if entry.rule & R.NO_BOOL and any(isinstance(o, bool) or (
            isinstance(o, _C.Tensor) and o.dtype is _C.bool) for o in ops):
        raise RuntimeError(f"{entry.name}(): not supported on bool tensors")
    if (entry.rule & R.INTEGRAL and is_float(rt)) or (entry.rule & R.NOT_BOOL and
                                                       rt is _C.bool) or \
            (entry.rule & R.FLOATING and not is_float(rt)) or \
            (is_complex(rt) and not entry.rule & R.COMPLEX):
        raise NotImplementedError(f"{entry.name}(): \"{entry.name}\" not implemented for "
                                  f"{rt}")
    names = [p.name for p in entry.schema.params]
    if "alpha" in names:
        alpha = args[names.index("alpha")]
        if isinstance(alpha, float) and not is_float(rt):
            raise RuntimeError(f"{entry.name}(): For integral input tensors, argument alpha "
                               "must not be a floating point number.")
    kind = entry.kind
    if kind in (R.UNARY_FLOAT, R.BINARY_FLOAT) and not is_inexact(rt):
        rt = _C.get_default_dtype()
    if kind == R.COMPARE:
        rt = _C.bool
    if entry.rule & R.COMPLEX_TO_REAL:
        rt = complex_value_type(rt)
    if entry.rule & R.NO_HALF and rt in (_C.float16, _C.bfloat16):
        raise NotImplementedError(f"{entry.name}(): \"{entry.name}\" not implemented for {rt}")
    return meta_tensor(shape, rt, elementwise_strides(ops, shape))


def div(entry, args):
    """div's rule: true division lifts integers to the default float; a rounding mode
    keeps the operands' common dtype."""
    mode = args[2] if len(args) > 2 else None
    out = elementwise(entry, args)
    if mode not in (None, "trunc", "floor"):
        raise RuntimeError(f"div(): div expected rounding_mode to be one of None, 'trunc', or "
                           f"'floor' but found '{mode}'")
    if mode is None:
        return out
    rt = result_type(*_operands(entry, args))
    if rt is _C.bool:
        raise NotImplementedError(f"div(): \"div_{mode}_cpu\" not implemented for 'Bool'")
    return meta_tensor(tuple(out.shape), rt, tuple(out.stride()))


def pow_(entry, args):
    """pow's rule: integers to negative integer powers are refused."""
    out = elementwise(entry, args)
    if not is_inexact(out.dtype) and isinstance(args[1], int) and args[1] < 0:
        raise RuntimeError("pow(): Integers to negative integer powers are not allowed.")
    return out


def _reduced_shape(shape, mask, keepdim):
    return tuple(1 if m else n for n, m in zip(shape, mask) if keepdim or not m)


def reduce(entry, args):
    self, dims, keepdim = args[0], args[1], args[2]
    dtype = args[3] if len(args) > 3 else None
    mask = reduce_mask(dims, self.ndim)
    if is_complex(self.dtype) and not entry.rule & R.COMPLEX:
        raise NotImplementedError(f"{entry.name}(): \"{entry.name}\" not implemented for "
                                  f"'{self.dtype._torch_name}'")
    out = dtype if dtype is not None else self.dtype
    if dtype is None and entry.rule & R.INT_TO_LONG and not is_inexact(out):
        out = _C.int64
    if entry.rule & R.FLOAT_ONLY and not is_inexact(out):
        raise RuntimeError(f"{entry.name}(): could not infer output dtype")
    if entry.ufunc in ("maximum", "minimum"):
        if self.numel() == 0 and (dims is None or dims == ()):
            raise RuntimeError(f"{entry.name}(): Expected reduction dim to be specified for "
                               "input.numel() == 0.")
        for d, m in enumerate(mask):
            if m and self.shape[d] == 0:
                raise IndexError(f"{entry.name}(): Expected reduction dim {d} to have "
                                 "non-zero size.")
    return meta_tensor(_reduced_shape(self.shape, mask, keepdim), out)


def reduce_index(entry, args):
    self, dim, keepdim = args
    d = wrap_dim(dim, self.ndim)
    mask = [i == d for i in range(self.ndim)]
    if self.ndim and self.shape[d] == 0:
        raise IndexError(f"{entry.name}(): Expected reduction dim {d} to have non-zero size.")
    shape = _reduced_shape(self.shape, mask, keepdim)
    return meta_tensor(shape, self.dtype), meta_tensor(shape, _C.int64)


def reduce_all(entry, args):
    self = args[0]
    if self.numel() == 0:
        raise RuntimeError(f"{entry.name}(): Expected reduction dim to be specified for "
                           "input.numel() == 0.")
    return meta_tensor((), self.dtype)


def argreduce(entry, args):
    self, dim, keepdim = args
    if self.dtype is _C.bool:
        raise RuntimeError(f"{entry.name}(): does not support bool input")
    if dim is None:
        if self.numel() == 0:
            raise IndexError(f"{entry.name}(): Expected reduction dim to be specified for "
                             "input.numel() == 0.")
        return meta_tensor((1,) * self.ndim if keepdim else (), _C.int64)
    d = wrap_dim(dim, self.ndim)
    mask = [i == d for i in range(self.ndim)]
    if self.ndim and self.shape[d] == 0:
        raise IndexError(f"{entry.name}(): Expected reduction dim {d} to have non-zero size.")
    return meta_tensor(_reduced_shape(self.shape, mask, keepdim), _C.int64)


def matmul(entry, args):
    a, b = args[0], args[1]
    if a.ndim == 0 or b.ndim == 0:
        raise RuntimeError("matmul(): both arguments to matmul need to be at least 1D")
    if a.dtype is not b.dtype:
        raise RuntimeError("matmul(): expected m1 and m2 to have the same dtype")
    ka = a.shape[-1]
    kb = b.shape[0] if b.ndim == 1 else b.shape[-2]
    if ka != kb:
        raise RuntimeError("matmul(): mat1 and mat2 shapes cannot be multiplied")
    batch = broadcast_shapes("matmul", tuple(a.shape[:-2]), tuple(b.shape[:-2]))
    shape = batch + ((a.shape[-2],) if a.ndim > 1 else ()) + ((b.shape[-1],) if b.ndim > 1
                                                               else ())
    if a.dtype is _C.bool and ka > 0 and math.prod(shape) > 0:
        raise NotImplementedError("matmul(): \"addmm_impl_cpu_\" not implemented for 'Bool'")
    return meta_tensor(shape, a.dtype)


# ---------------------------------------------------------------- views

def infer_size(shape, numel):
    shape = list(shape)
    if shape.count(-1) > 1:
        raise RuntimeError("only one dimension can be inferred")
    known = math.prod(n for n in shape if n != -1)
    for n in shape:
        if n < -1:
            raise RuntimeError(f"invalid shape dimension {n}")
    if -1 in shape:
        if known == 0 or numel % known:
            raise RuntimeError(f"shape '{list(shape)}' is invalid for input of size {numel}")
        shape[shape.index(-1)] = numel // known
    elif known != numel:
        raise RuntimeError(f"shape '{list(shape)}' is invalid for input of size {numel}")
    return tuple(shape)


def compute_stride(oshape, ostride, numel, nshape):
    """PyTorch's computeStride: strides viewing (oshape, ostride) as nshape, or None."""
    if numel == 0 or len(oshape) == 0:
        if tuple(oshape) == tuple(nshape):
            return tuple(ostride)
        return contiguous_strides(nshape)
    nstride = [0] * len(nshape)
    view_d = len(nshape) - 1
    chunk_base = ostride[-1]
    tensor_numel = view_numel = 1
    for tensor_d in range(len(oshape) - 1, -1, -1):
        tensor_numel *= oshape[tensor_d]
        if tensor_d == 0 or (oshape[tensor_d - 1] != 1 and
                             ostride[tensor_d - 1] != tensor_numel * chunk_base):
            while view_d >= 0 and (view_numel < tensor_numel or nshape[view_d] == 1):
                nstride[view_d] = view_numel * chunk_base
                view_numel *= nshape[view_d]
                view_d -= 1
            if view_numel != tensor_numel:
                return None
            if tensor_d > 0:
                chunk_base = ostride[tensor_d - 1]
                tensor_numel = view_numel = 1
    return tuple(nstride) if view_d == -1 else None


def _view(self, shape, strides):
    return meta_tensor(shape, self.dtype, strides)


def view(entry, args):
    self, size = args
    check_ndim(entry.name, len(size))
    shape = infer_size(size, self.numel())
    st = compute_stride(tuple(self.shape), self.stride(), self.numel(), shape)
    if st is None:
        raise RuntimeError("view size is not compatible with input tensor's size and stride")
    return _view(self, shape, st)


def permute(entry, args):
    self, dims = args
    if len(dims) != self.ndim:
        raise RuntimeError("permute(): number of dims don't match")
    dims = [wrap_dim(d, self.ndim) for d in dims]
    if len(set(dims)) != len(dims):
        raise RuntimeError("permute(): duplicate dims are not allowed.")
    return _view(self, [self.shape[d] for d in dims], [self.stride()[d] for d in dims])


def _swap(self, d0, d1):
    d0, d1 = wrap_dim(d0, self.ndim), wrap_dim(d1, self.ndim)
    shape, st = list(self.shape), list(self.stride())
    if self.ndim:
        shape[d0], shape[d1] = shape[d1], shape[d0]
        st[d0], st[d1] = st[d1], st[d0]
    return _view(self, shape, st)


def transpose(entry, args):
    return _swap(args[0], args[1], args[2])


def t(entry, args):
    self = args[0]
    if self.ndim > 2:
        raise RuntimeError(f"t() expects a tensor with <= 2 dimensions, but self is "
                           f"{self.ndim}D")
    return _swap(self, 0, 1 if self.ndim == 2 else 0)


def expand(entry, args):
    self, size = args[0], list(args[1])
    check_ndim(entry.name, len(size))
    if len(size) < self.ndim:
        raise RuntimeError("expand(): the number of sizes provided must be greater or equal "
                           "to the number of dimensions in the tensor")
    off = len(size) - self.ndim
    strides = [0] * len(size)
    for i in range(len(size) - 1, -1, -1):
        j = i - off
        if j < 0:
            if size[i] < 0:
                raise RuntimeError("expand(): -1 is not allowed in a leading, non-existing "
                                   "dimension")
            continue
        if size[i] == -1:
            size[i] = self.shape[j]
        if size[i] < 0:
            raise RuntimeError(f"expand(): the expanded size of the tensor ({size[i]}) isn't "
                               f"allowed at dimension {i}")
        if self.shape[j] == size[i]:
            strides[i] = self.stride()[j]
        elif self.shape[j] != 1:
            raise RuntimeError(f"The expanded size of the tensor ({size[i]}) must match the "
                               f"existing size ({self.shape[j]}) at non-singleton dimension {i}")
    return _view(self, size, strides)


def unsqueeze(entry, args):
    self, dim = args
    check_ndim("unsqueeze", self.ndim + 1)      # (decompositions call it without an entry)
    d = wrap_dim(dim, self.ndim + 1)
    shape, st = list(self.shape), list(self.stride())
    new_stride = 1 if d >= self.ndim else shape[d] * st[d]
    shape.insert(d, 1)
    st.insert(d, new_stride)
    return _view(self, shape, st)


def squeeze(entry, args):
    self, dims = args
    mask = reduce_mask(dims, self.ndim)
    keep = [i for i in range(self.ndim) if not (mask[i] and self.shape[i] == 1)]
    return _view(self, [self.shape[i] for i in keep], [self.stride()[i] for i in keep])


def select(entry, args):
    self, dim, index = args
    if self.ndim == 0:
        raise IndexError("select() cannot be applied to a 0-dim tensor.")
    d = wrap_dim(dim, self.ndim)
    if not -self.shape[d] <= index < self.shape[d]:
        raise IndexError(f"select(): index {index} out of range")
    keep = [i for i in range(self.ndim) if i != d]
    return _view(self, [self.shape[i] for i in keep], [self.stride()[i] for i in keep])


def _slice_len(size, start, end, step):
    if step <= 0:
        raise RuntimeError("slice(): slice step must be positive")
    start = 0 if start is None else start
    end = size if end is None else end
    if start < 0:
        start += size
    if end < 0:
        end += size
    start = min(max(start, 0), size)
    end = min(max(end, start), size)
    return (end - start + step - 1) // step


def slice_(entry, args):
    self, dim, start, end, step = args
    if self.ndim == 0:
        raise IndexError("slice() cannot be applied to a 0-dim tensor.")
    d = wrap_dim(dim, self.ndim)
    shape, st = list(self.shape), list(self.stride())
    shape[d] = _slice_len(shape[d], start, end, step)
    st[d] *= step
    return _view(self, shape, st)


def alias(entry, args):
    self = args[0]
    return _view(self, self.shape, self.stride())


def _dense_like(self, dtype, contiguous=False):
    shape = tuple(self.shape)
    st = contiguous_strides(shape) if contiguous else elementwise_strides([self], shape)
    return meta_tensor(shape, dtype, st)


def clone(entry, args):
    fmt = args[1]
    return _dense_like(args[0], args[0].dtype,
                       contiguous=fmt is not None and str(fmt) != "preserve_format")


def to_copy(entry, args):
    return _dense_like(args[0], args[1] if args[1] is not None else args[0].dtype)


def select_scatter(entry, args):
    """self's layout; the view written must exist."""
    return _scatter_like(entry, args, select(entry, (args[0], args[2], args[3])))


def slice_scatter(entry, args):
    return _scatter_like(entry, args, slice_(entry, (args[0],) + tuple(args[2:6])))


def _scatter_like(entry, args, view):
    if tuple(args[1].shape) != tuple(view.shape):
        raise RuntimeError(f"{entry.name}(): expected src to have a size equal to the slice "
                           f"of self. src size = {list(args[1].shape)}, slice size = "
                           f"{list(view.shape)}")
    return _dense_like(args[0], args[0].dtype)


# ---------------------------------------------------------------- factories

def _factory_dtype(args, names, default):
    dt = args[names.index("dtype")] if "dtype" in names else None
    return dt if dt is not None else default


def factory(entry, args):
    names = [p.name for p in entry.schema.params]
    first = args[0]
    if isinstance(first, _C.Tensor):
        shape, default = tuple(first.shape), first.dtype
        dtype = _factory_dtype(args, names, default)
        _check_random_dtype(entry, dtype)
        return _dense_like(first, dtype)      # preserve_format, as PyTorch's *_like
    else:
        shape, default = tuple(first), _C.get_default_dtype()
        check_sizes(entry, shape)
    dtype = _factory_dtype(args, names, default)
    _check_random_dtype(entry, dtype)
    return meta_tensor(shape, dtype)


def full(entry, args):
    """full's rule: without dtype=, the fill value's kind says it (bool, int64, or the
    default float)."""
    size, fv = args[0], args[1]
    check_sizes(entry, tuple(size))
    default = (_C.bool if isinstance(fv, bool) else _C.int64 if isinstance(fv, int)
               else _C.complex128 if isinstance(fv, complex) and
               _C.get_default_dtype() is _C.float64
               else _C.complex64 if isinstance(fv, complex) else _C.get_default_dtype())
    names = [p.name for p in entry.schema.params]
    return meta_tensor(tuple(size), _factory_dtype(args, names, default))


def check_sizes(entry, shape):
    check_ndim(entry.name, len(shape))
    if any(n < 0 for n in shape):
        raise RuntimeError(f"{entry.name}(): Trying to create tensor with negative dimension "
                           f"{min(shape)}: {list(shape)}")


def _check_random_dtype(entry, dtype):
    if entry.rule & R.FLOATING and not is_float(dtype):
        raise NotImplementedError(f"{entry.name}(): not implemented for {dtype}")


def arange(entry, args):
    names = [p.name for p in entry.schema.params]
    if "start" in names and names[1] == "end":
        start, end, step = args[0], args[1], args[2]
    else:
        start, end, step = 0, args[0], 1
    floaty = any(isinstance(v, float) for v in (start, end, step))
    if step == 0:
        raise RuntimeError("arange(): step must be nonzero")
    if (step > 0 and end < start) or (step < 0 and end > start):
        raise RuntimeError("arange(): upper bound and larger bound inconsistent with step sign")
    if floaty:
        n = max(0, math.ceil((end - start) / step))
    else:
        # integers (sizes, symbolic ones too): exact ceiling division; the bounds
        # were checked consistent with the step, so n >= 0
        n = (end - start + step - 1) // step if step > 0 else (start - end - step - 1) // -step
    dt = _factory_dtype(args, names, _C.get_default_dtype() if floaty else _C.int64)
    return meta_tensor((n,), dt)


_BY_KIND = {
    R.UNARY: elementwise, R.UNARY_FLOAT: elementwise, R.BINARY: elementwise,
    R.BINARY_FLOAT: elementwise, R.COMPARE: elementwise, R.REDUCE: reduce,
    R.REDUCE_INDEX: reduce_index, R.MATMUL: matmul, R.FACTORY: factory,
}


def rule_for(entry):
    """The Python meta rule of an entry: its own, or its kind's."""
    if entry.meta is not None:
        return entry.meta
    if entry.inplace and entry.functional is not None:
        return inplace
    return _BY_KIND.get(entry.kind)


def _can_cast(frm, to):
    """PyTorch's canCast: no floats into integers, nothing but bool into bool."""
    if is_float(frm) and not is_float(to):
        return False
    return not (to is _C.bool and frm is not _C.bool)


def inplace(entry, args):
    """An in-place op (add_): its functional twin's result must fit self; the result is
    self."""
    self = args[0]
    return meta_tensor(tuple(self.shape), self.dtype, tuple(self.stride()))


def _check_inplace(entry, args):
    res = infer(entry.functional, args)
    res = res[0] if isinstance(res, tuple) else res
    self = args[0]
    if self.numel() and any(st == 0 and n > 1 for st, n in zip(self.stride(), self.shape)):
        raise RuntimeError(f"{entry.name}(): unsupported operation: more than one element of "
                           "the written-to tensor refers to a single memory location.")
    if tuple(res.shape) != tuple(self.shape):
        raise RuntimeError(f"{entry.name}(): output with shape {list(self.shape)} doesn't "
                           f"match the broadcast shape {list(res.shape)}")
    if not _can_cast(res.dtype, self.dtype):
        raise RuntimeError(f"{entry.name}(): result type {res.dtype} can't be cast to the "
                           f"desired output type {self.dtype}")


def infer(entry, args):
    if entry.inplace and entry.functional is not None:
        _check_inplace(entry, args)
    rule = rule_for(entry)
    if rule is None:
        raise NotImplementedError(f"{entry.qualified_name} has no meta rule")
    return rule(entry, args)
