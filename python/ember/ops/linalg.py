"""Linear algebra: matmul (NumPy's matmul, so BLAS for float32 and float64)."""
import math

from ..compiler.lowerings import lower_matmul
from .registry import MATMUL, op


def _cj(x):
    """conj(x) for complex operands (grad @ other^H), x itself when real."""
    return x.conj() if x.dtype.is_complex else x


def _cj_number(x):
    return x.conjugate() if isinstance(x, complex) else x


def _matmul_backward(g, out, a, b):
    a, b = _cj(a), _cj(b)
    if a.ndim == 1 and b.ndim == 1:
        return g * b, g * a
    a2 = a.unsqueeze(0) if a.ndim == 1 else a
    b2 = b.unsqueeze(-1) if b.ndim == 1 else b
    g2 = g.unsqueeze(-2) if a.ndim == 1 else g
    g2 = g2.unsqueeze(-1) if b.ndim == 1 else g2
    ga = g2 @ b2.transpose(-1, -2)
    gb = a2.transpose(-1, -2) @ g2
    if a.ndim == 1:
        ga = ga.squeeze(-2)
    if b.ndim == 1:
        gb = gb.squeeze(-1)
    return ga.sum_to_size(a.shape), gb.sum_to_size(b.shape)


op("matmul(Tensor self, Tensor other) -> Tensor", MATMUL, "matmul", ufunc="matmul",
   prim=True, lower=lower_matmul, backward=_matmul_backward,
   doc="Matrix product with NumPy's (and PyTorch's) rules for 1-D and batched operands.")


# ------------------------------------------------------------------ mm, bmm, addmm, linear
#
# Each decomposes into the matmul prim (checked first, with PyTorch's messages); their
# eager kernels run that decomposition (csrc/kernels/nn.c), except linear's, which calls
# NumPy's matmul directly.

import string as _string

from .. import _C
from .. import prims as P
from . import api as O
from ._decomp import run_decomposition as _run_decomposition
from .registry import CUSTOM, op

_C_NAMES = {"bool": "bool", "uint8": "unsigned char", "int8": "signed char",
            "int16": "short int", "int32": "int", "int64": "long int",
            "float16": "c10::Half", "float32": "float", "float64": "double",
            "bfloat16": "c10::BFloat16"}


def c_type(dt):
    """PyTorch's C++ name of a dtype, as its dtype-mismatch messages print it."""
    return _C_NAMES[dt._name]


def torch_type(dt):
    """'Float', 'Long', ...: the scalar type names PyTorch's messages use."""
    return dt._torch_name


def _no_bool(name, *ts, work=1):
    """PyTorch has no bool kernel; empty products never reach one."""
    if work and any(t.dtype is _C.bool for t in ts):
        raise NotImplementedError(f"\"{name}\" not implemented for 'Bool'")


def _shapes_error(a, b):
    ra = a.shape[-2] if a.ndim > 1 else 1
    return RuntimeError(f"mat1 and mat2 shapes cannot be multiplied ({ra}x{a.shape[-1]} and "
                        f"{b.shape[0]}x{b.shape[-1] if b.ndim > 1 else 1})")


def _check_mm(self, mat2):
    if self.ndim != 2:
        raise RuntimeError("self must be a matrix")
    if mat2.ndim != 2:
        raise RuntimeError("mat2 must be a matrix")
    if self.dtype is not mat2.dtype:
        raise RuntimeError(f"expected m1 and m2 to have the same dtype, but got: "
                           f"{c_type(self.dtype)} != {c_type(mat2.dtype)}")
    if self.shape[1] != mat2.shape[0]:
        raise _shapes_error(self, mat2)
    _no_bool("addmm_impl_cpu_", self, work=self.shape[0] * self.shape[1] * mat2.shape[1])


def _mm_decompose(self, mat2):
    _check_mm(self, mat2)
    return P.matmul(self, mat2)


op("mm(Tensor self, Tensor mat2) -> Tensor", CUSTOM, "decomposed",
   meta=_run_decomposition,
   backward=lambda g, out, self, mat2: (O.mm(g, _cj(mat2).t()), O.mm(_cj(self).t(), g)),
   decompose=_mm_decompose,
   doc="Matrix product of two 2-D tensors.")


def _bmm_decompose(self, mat2):
    if self.ndim != 3:
        raise RuntimeError("batch1 must be a 3D tensor")
    if mat2.ndim != 3:
        raise RuntimeError("batch2 must be a 3D tensor")
    want = [self.shape[0], self.shape[2]]
    if list(mat2.shape[:2]) != want:
        raise RuntimeError(f"Expected size for first two dimensions of batch2 tensor to be: "
                           f"{want} but got: {list(mat2.shape[:2])}.")
    if self.dtype is not mat2.dtype:
        raise RuntimeError(f"expected scalar type {torch_type(self.dtype)} but found "
                           f"{torch_type(mat2.dtype)}")
    _no_bool("bmm", self, work=self.numel() * mat2.shape[2])
    return P.matmul(self, mat2)


op("bmm(Tensor self, Tensor mat2) -> Tensor", CUSTOM, "decomposed",
   meta=_run_decomposition,
   backward=lambda g, out, self, mat2: (O.bmm(g, _cj(mat2).transpose(1, 2)),
                                        O.bmm(_cj(self).transpose(1, 2), g)),
   decompose=_bmm_decompose,
   doc="Batched matrix product of two 3-D tensors with the same batch size.")


def _expand_error(size, target):
    """PyTorch's expand message (addmm's self, linear's bias)."""
    off = len(target) - len(size)
    for i in range(len(target) - 1, -1, -1):
        j = i - off
        if j >= 0 and size[j] != 1 and size[j] != target[i]:
            return RuntimeError(
                f"The expanded size of the tensor ({target[i]}) must match the existing size "
                f"({size[j]}) at non-singleton dimension {i}.  Target sizes: {list(target)}.  "
                f"Tensor sizes: {list(size)}")
    return None


def _scalar_like(x, dtype):
    """A Python scalar as the op's dtype computes it (beta/alpha of integer addmm)."""
    return x if dtype.is_floating_point or dtype.is_complex else int(x)


def _addmm_decompose(self, mat1, mat2, beta, alpha):
    if mat1.ndim != 2:
        raise RuntimeError(f"mat1 must be a matrix, got {mat1.ndim}-D tensor")
    if mat2.ndim != 2:
        raise RuntimeError(f"mat2 must be a matrix, got {mat2.ndim}-D tensor")
    if mat1.shape[1] != mat2.shape[0]:
        raise _shapes_error(mat1, mat2)
    if self.dtype is not mat2.dtype or mat1.dtype is not mat2.dtype:
        other = self if self.dtype is not mat2.dtype else mat1
        raise RuntimeError(f"self and mat2 must have the same dtype, but got "
                           f"{torch_type(other.dtype)} and {torch_type(mat2.dtype)}")
    target = (mat1.shape[0], mat2.shape[1])
    err = _expand_error(tuple(self.shape), target)
    if err is not None or self.ndim > 2:
        raise err or RuntimeError(f"The expanded size of the tensor must match: target sizes "
                                  f"{list(target)}, tensor sizes {list(self.shape)}")
    _no_bool("addmm_impl_cpu_", mat1, work=mat1.numel() * mat2.shape[1])
    dt = mat2.dtype
    prod = P.matmul(mat1, mat2)
    if alpha != 1:
        prod = P.mul(prod, _scalar_like(alpha, dt))
    if beta == 0:
        return prod
    scaled = self if beta == 1 else P.mul(self, _scalar_like(beta, dt))
    return P.add(prod, scaled)       # the product first: the result keeps its layout


def _addmm_backward(g, out, self, mat1, mat2, beta, alpha):
    gs = None if beta == 0 else (g if beta == 1 else g * _cj_number(beta))
    ga = g if alpha == 1 else g * _cj_number(alpha)
    return gs, O.mm(ga, _cj(mat2).t()), O.mm(_cj(mat1).t(), ga)


op("addmm(Tensor self, Tensor mat1, Tensor mat2, *, Scalar beta=1, Scalar alpha=1) -> Tensor",
   CUSTOM, "decomposed", meta=_run_decomposition,
   backward=_addmm_backward, decompose=_addmm_decompose,
   doc="beta * self + alpha * (mat1 @ mat2); self broadcasts to the product's shape "
       "(beta=0 ignores self's values).")


def _linear_decompose(input, weight, bias):
    if weight.ndim > 2:
        raise RuntimeError(f"t() expects a tensor with <= 2 dimensions, but self is "
                           f"{weight.ndim}D")
    if input.dtype is not weight.dtype:
        raise RuntimeError(f"expected m1 and m2 to have the same dtype, but got: "
                           f"{c_type(input.dtype)} != {c_type(weight.dtype)}")
    if input.ndim == 0 or weight.ndim == 0:
        raise RuntimeError(f"both arguments to linear need to be at least 1D, but they are "
                           f"{input.ndim}D and {weight.ndim}D")
    k = weight.shape[-1]
    if input.shape[-1] != k:
        rows = weight.shape[0] if weight.ndim == 2 else 1
        lead = 1
        for n in input.shape[:-1]:
            lead *= n
        raise RuntimeError(f"mat1 and mat2 shapes cannot be multiplied ({lead}x"
                           f"{input.shape[-1]} and {k}x{rows})")
    out_shape = tuple(input.shape[:-1]) + ((weight.shape[0],) if weight.ndim == 2 else ())
    if bias is not None:
        if bias.dtype is not input.dtype:
            raise RuntimeError(f"self and mat2 must have the same dtype, but got "
                               f"{torch_type(bias.dtype)} and {torch_type(input.dtype)}")
        err = _expand_error(tuple(bias.shape), out_shape)
        if err is not None:
            raise err
    _no_bool("addmm_impl_cpu_", input, work=input.numel() * weight.numel())
    w = P.permute(weight, [1, 0]) if weight.ndim == 2 else weight
    out = P.matmul(input, w)
    if bias is not None:
        out = P.add(out, bias)
    return out


def _linear_backward(g, out, input, weight, bias):
    input, weight = _cj(input), _cj(weight)
    if weight.ndim == 1:
        return g.unsqueeze(-1) * weight if input.ndim > 1 else g * weight, \
            (g.unsqueeze(-1) * input).sum_to_size(weight.shape) if input.ndim > 1 \
            else g * input, g if bias is not None else None
    gx = g.matmul(weight)
    k, n = weight.shape[1], weight.shape[0]
    rows = math.prod(input.shape[:-1])      # not -1: ambiguous when k or n is 0
    gw = O.mm(g.reshape(rows, n).t(), input.reshape(rows, k)) if input.ndim > 1 else \
        g.unsqueeze(1) * input.unsqueeze(0)
    gb = None
    if bias is not None:
        gb = g.sum_to_size(bias.shape) if g.ndim else g
    return gx, gw, gb


op("linear(Tensor input, Tensor weight, Tensor? bias=None) -> Tensor", CUSTOM, "linear",
   ufunc="matmul", method=False,
   meta=_run_decomposition,
   backward=_linear_backward, decompose=_linear_decompose,
   doc="input @ weight.T + bias (nn.functional.linear).")

# ------------------------------------------------------------------ einsum (a composite)


def _parse_einsum(equation, operands):
    eq = equation.replace(" ", "")
    if "->" in eq:
        lhs, rhs = eq.split("->", 1)
    else:
        lhs, rhs = eq, None
    terms = lhs.split(",")
    if len(terms) > len(operands):
        raise RuntimeError("einsum(): fewer operands were provided than specified in the "
                           "equation")
    if len(terms) < len(operands):
        raise RuntimeError("einsum(): more operands were provided than specified in the "
                           "equation")
    # ellipsis dims get letters no equation can use
    ell_letters = [chr(0x100 + i) for i in range(64)]
    ell_ndim = 0
    parsed = []
    for i, (term, t) in enumerate(zip(terms, operands)):
        if "..." in term:
            n_named = len(term.replace("...", ""))
            n_ell = t.ndim - n_named
            if n_ell < 0:
                raise RuntimeError(f"einsum(): the number of subscripts in the equation "
                                   f"({n_named}) is more than the number of dimensions "
                                   f"({t.ndim}) for operand {i}")
            ell_ndim = max(ell_ndim, n_ell)
            parsed.append((term, n_ell))
        else:
            if len(term) != t.ndim:
                raise RuntimeError(f"einsum(): the number of subscripts in the equation "
                                   f"({len(term)}) does not match the number of dimensions "
                                   f"({t.ndim}) for operand {i} and no ellipsis was given")
            parsed.append((term, 0))
    for term, _ in parsed:
        for ch in term.replace("...", ""):
            if ch not in _string.ascii_letters:
                raise RuntimeError(f"einsum(): invalid subscript given at index "
                                   f"{equation.index(ch)} in the equation string, subscripts "
                                   f"must be in [a-zA-Z]")
    ell = ell_letters[:ell_ndim]
    letters = []
    for term, n_ell in parsed:
        pre, _, post = term.partition("...")
        mid = ell[ell_ndim - n_ell:] if "..." in term else []
        letters.append(list(pre) + mid + list(post))
    if rhs is None:
        counts = {}
        for ls in letters:
            for ch in ls:
                counts[ch] = counts.get(ch, 0) + 1
        out = ell + sorted(ch for ch, c in counts.items() if c == 1 and ch not in ell)
    else:
        pre, dots, post = rhs.partition("...")
        out = list(pre) + (ell if dots else []) + list(post)
        seen = set()
        for ch in out:
            if ch in seen:
                raise RuntimeError(f"einsum(): output subscript {ch} appears more than once "
                                   "in the output")
            seen.add(ch)
            if not any(ch in ls for ls in letters):
                raise RuntimeError(f"einsum(): output subscript {ch} does not appear in the "
                                   "equation for any input operand")
        if not dots:
            for ch in ell:
                pass   # ellipsis dims not in the output are summed
    return letters, out


def _diagonal(t, ls):
    """Collapses repeated letters of one operand (its diagonal): keeps the first."""
    while True:
        dup = next((ch for i, ch in enumerate(ls) if ch in ls[:i]), None)
        if dup is None:
            return t, ls
        i, j = ls.index(dup), len(ls) - 1 - ls[::-1].index(dup)
        n = t.shape[i]
        eye = O.arange(n).unsqueeze(1) == O.arange(n).unsqueeze(0)
        shape = [1] * t.ndim
        shape[i], shape[j] = n, n
        t = (t * eye.reshape(shape)).sum(j)
        ls = ls[:j] + ls[j + 1:]


def _einsum(equation, tensors, path=None):
    tensors = list(tensors)
    letters, out = _parse_einsum(equation, tensors)
    sizes = {}
    for i, (t, ls) in enumerate(zip(tensors, letters)):
        for ch, n in zip(ls, t.shape):
            prev = sizes.get(ch)
            if prev is None or prev == 1:
                sizes[ch] = n
            elif n != 1 and n != prev:
                name = ch if ord(ch) < 0x100 else "..."
                raise RuntimeError(f"einsum(): subscript {name} has size {n} for operand {i} "
                                   f"which does not broadcast with previously seen size {prev}")
    ops = []
    for t, ls in zip(tensors, letters):
        t, ls = _diagonal(t, ls)
        ops.append((t, ls))

    def needed_later(k):
        s = set(out)
        for _, ls in ops[k + 1:]:
            s.update(ls)
        return s

    # letters only one operand has and nothing later needs: sum them away first
    t, ls = ops[0]
    t, ls = _sum_away(t, ls, needed_later(0) | set().union(*[set(l) for _, l in ops[1:]]))
    for k in range(1, len(ops)):
        u, lu = ops[k]
        keep = needed_later(k)
        u, lu = _sum_away(u, lu, keep | set(ls))
        t, ls = _contract(t, ls, u, lu, keep, sizes)
    t, ls = _sum_away(t, ls, set(out))
    if not out:
        return t if t.ndim == 0 else t.reshape(())
    perm = [ls.index(ch) for ch in out]
    # broadcast letters that stayed size 1 in every operand
    if perm != list(range(len(perm))):
        t = t.permute(perm)
    want = [sizes[ch] for ch in out]
    if list(t.shape) != want:
        t = t.expand(want)
    return t


def _sum_away(t, ls, keep):
    dims = [i for i, ch in enumerate(ls) if ch not in keep]
    if not dims:
        return t, ls
    t = t.sum(dims)
    return t, [ch for ch in ls if ch in keep]


def _contract(a, la, b, lb, keep, sizes):
    """a (letters la) times b (letters lb), summing the shared letters not in keep:
    one batched matmul over (batch, a-only, shared) x (batch, shared, b-only)."""
    batch = [ch for ch in la if ch in lb and ch in keep]
    shared = [ch for ch in la if ch in lb and ch not in keep]
    a_only = [ch for ch in la if ch not in lb]
    b_only = [ch for ch in lb if ch not in la]
    if a.dtype is not b.dtype:
        if shared:
            raise RuntimeError(f"expected scalar type {torch_type(a.dtype)} but found "
                               f"{torch_type(b.dtype)}")
        dt = _C.promote_types(a.dtype, b.dtype)
        a, b = a.to(dt), b.to(dt)

    def size_in(t, ls, ch):
        return t.shape[ls.index(ch)]

    bsizes = [max(size_in(a, la, ch), size_in(b, lb, ch)) for ch in batch]
    ksizes = [max(size_in(a, la, ch), size_in(b, lb, ch)) for ch in shared]
    m = [size_in(a, la, ch) for ch in a_only]
    n = [size_in(b, lb, ch) for ch in b_only]
    pa = [la.index(ch) for ch in batch + a_only + shared]
    pb = [lb.index(ch) for ch in batch + shared + b_only]
    a2 = a.permute(pa).expand(bsizes + m + ksizes)
    b2 = b.permute(pb).expand(bsizes + ksizes + n)
    nb, nm, nk, nn = math.prod(bsizes), math.prod(m), math.prod(ksizes), math.prod(n)
    if not shared:
        r = a2.reshape(nb, nm, 1) * b2.reshape(nb, 1, nn)
    elif a.dtype is _C.bool:
        raise NotImplementedError("\"bmm\" not implemented for 'Bool'")
    else:
        r = a2.reshape(nb, nm, nk).matmul(b2.reshape(nb, nk, nn))
    return r.reshape(bsizes + m + n), batch + a_only + b_only


op("einsum(str equation, Tensor[] tensors, *, int[]? path=None) -> Tensor", CUSTOM, "python",
   composite=True, method=False, impl=_einsum,
   doc="Einstein summation: diagonals, sums, then one batched matmul per operand pair "
       "(permute/reshape/matmul/sum, so autograd and capture see those ops).")


def einsum(equation, *operands, **kwargs):
    """ember.einsum(equation, *operands) or einsum(equation, [operands]), as torch.einsum."""
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    return O.einsum(equation, operands, **kwargs)


WRAPPERS = {"einsum": einsum}
