"""Random ops: the in-place samplers that initialise weights (uniform_, normal_,
bernoulli_, exponential_), bernoulli, randint and randperm.

Each in-place sampler has a functional twin (uniform, normal_functional, bernoulli,
exponential, as in ATen) that returns fresh samples shaped like self; the dispatcher
writes them into self (csrc/dispatch/inplace.c), so the version counter, the leaf check
("a leaf Variable that requires grad is being used in an in-place operation") and
autograd come for free, and graphs can be functionalised. Samples carry no gradient to
the tensor they overwrite (the backward is zeros).

Every draw comes from an ember.Generator (the default one unless generator= is given;
kernels in csrc/kernels/random.c). uniform and normal take exactly the draws rand and
randn take, so their decompositions reproduce the eager numbers (float16 results may
differ in the last bit: the kernel scales in float32). In graphs the LLVM backend
compiles, rand, randn and randint are Philox draws computed in the kernels
(compiler/random_draws.py) unless ember.compiler.config.fallback_random is set.
"""
from .. import _C
from .. import prims as P
from . import api as O
from . import meta as M
from ..compiler.lowerings import extern
from ..compiler.random_draws import lower_randint
from .registry import CUSTOM, FACTORY, op

_GEN = "Generator? generator=None"
_OPTS = "ScalarType? dtype=None, Device? device=None, bool requires_grad=False"


def _like_self(entry, args):
    """Fresh samples: self's shape and dtype, contiguous; the kernels' argument checks."""
    self, name = args[0], entry.name
    if name in ("uniform", "normal_functional", "exponential") and \
            not self.dtype.is_floating_point:
        raise RuntimeError(f"{name}(): expected a floating point tensor, got {self.dtype}")
    if name == "uniform" and not args[1] <= args[2]:
        raise RuntimeError(f"uniform_(): expects to return a [from, to) range, but found "
                           f"from={args[1]} > to={args[2]}")
    if name == "normal_functional" and not args[2] >= 0.0:
        raise RuntimeError(f"normal_(): expects std >= 0.0, but found std={args[2]}")
    if name == "exponential" and not args[1] > 0.0:
        raise RuntimeError(f"exponential_(): expects lambda > 0.0, but found "
                           f"lambda={args[1]}")
    if name == "bernoulli":
        p = args[1] if entry.overload else self
        if isinstance(p, _C.Tensor):
            if not p.dtype.is_floating_point:
                raise RuntimeError(f"bernoulli(): expected p to be a floating point tensor, "
                                   f"got {p.dtype}")
            if p is not self:
                shape = M.broadcast_shapes("bernoulli_", tuple(self.shape), tuple(p.shape))
                if shape != tuple(self.shape):
                    raise RuntimeError(f"bernoulli_(): p of shape {list(p.shape)} cannot be "
                                       f"broadcast to self's shape {list(self.shape)}")
        elif not 0.0 <= p <= 1.0:
            raise RuntimeError(f"bernoulli_(): expects p to be in [0, 1], but got p={p}")
    return M.meta_tensor(tuple(self.shape), self.dtype)


def _as_self(entry, args):
    """In place: the result is self."""
    self = args[0]
    return M.meta_tensor(tuple(self.shape), self.dtype, tuple(self.stride()))


def _zeros(g, out, *args):
    """New samples do not depend on the values they replace."""
    return (O.zeros_like(g),)


def _sampler(schema, inplace_schema, kernel, decompose, doc):
    """Declares a functional sampler and its in-place form; returns the functional entry."""
    functional = op(schema, CUSTOM, kernel, method=False, function=False, meta=_like_self,
                    backward=_zeros, decompose=decompose, doc=doc)
    op(inplace_schema, CUSTOM, kernel, inplace=True, function=False, functional=functional,
       meta=_as_self, doc=f"In place: fills self with {doc[0].lower()}{doc[1:]}")
    return functional


# ------------------------------------------------------------------ in-place samplers

_sampler(f"uniform(Tensor self, float from=0., float to=1., *, {_GEN}) -> Tensor",
         f"uniform_(Tensor(a!) self, float from=0., float to=1., *, {_GEN}) -> Tensor(a!)",
         "uniform",
         decompose=lambda self, low, high, generator: P.add(P.mul(
             P.rand(self.shape, dtype=self.dtype, generator=generator), high - low), low),
         doc="Samples from U[from, to).")

_sampler(f"normal_functional(Tensor self, float mean=0., float std=1., *, {_GEN}) -> Tensor",
         f"normal_(Tensor(a!) self, float mean=0., float std=1., *, {_GEN}) -> Tensor(a!)",
         "normal",
         decompose=lambda self, mean, std, generator: P.add(P.mul(
             P.randn(self.shape, dtype=self.dtype, generator=generator), std), mean),
         doc="Samples from N(mean, std**2).")


def _exponential_decompose(self, lambd, generator):
    u = P.rand(self.shape, dtype=_C.float64, generator=generator)
    return P._to_copy(P.mul(P.log(P.add(P.neg(u), 1)), -1.0 / lambd), dtype=self.dtype)


_sampler(f"exponential(Tensor self, float lambd=1., *, {_GEN}) -> Tensor",
         f"exponential_(Tensor(a!) self, float lambd=1., *, {_GEN}) -> Tensor(a!)",
         "exponential", decompose=_exponential_decompose,
         doc="Samples from the exponential distribution of rate lambd.")

# ------------------------------------------------------------------ bernoulli


def _bernoulli_decompose(self, p, generator):
    u = P.rand(self.shape, dtype=_C.float64, generator=generator)
    return P._to_copy(P.lt(u, p), dtype=self.dtype)


_bernoulli_doc = "1 with probability p, else 0 (in self's dtype)."
op(f"bernoulli(Tensor self, *, {_GEN}) -> Tensor", CUSTOM, "bernoulli", meta=_like_self,
   backward=_zeros,
   decompose=lambda self, generator: _bernoulli_decompose(self, self, generator),
   doc="Draws 1 with probability self (elementwise), else 0.")
_bern_p = op(f"bernoulli.p(Tensor self, float p, *, {_GEN}) -> Tensor", CUSTOM, "bernoulli",
             meta=_like_self, backward=_zeros, decompose=_bernoulli_decompose,
             doc=_bernoulli_doc)
_bern_t = op(f"bernoulli.Tensor(Tensor self, Tensor p, *, {_GEN}) -> Tensor", CUSTOM,
             "bernoulli", meta=_like_self, backward=_zeros, decompose=_bernoulli_decompose,
             doc=_bernoulli_doc)
op(f"bernoulli_.float(Tensor(a!) self, float p=0.5, *, {_GEN}) -> Tensor(a!)", CUSTOM,
   "bernoulli", inplace=True, function=False, functional=_bern_p, meta=_as_self,
   doc="In place: " + _bernoulli_doc)
op(f"bernoulli_.Tensor(Tensor(a!) self, Tensor p, *, {_GEN}) -> Tensor(a!)", CUSTOM,
   "bernoulli", inplace=True, function=False, functional=_bern_t, meta=_as_self,
   doc="In place: " + _bernoulli_doc + " p broadcasts to self's shape.")

# ------------------------------------------------------------------ factories


def _int_factory_meta(shape_of):
    def rule(entry, args):
        names = [p.name for p in entry.schema.params]
        if "high" in names:
            low = args[names.index("low")] if "low" in names else 0
            high = args[names.index("high")]
            if low >= high:
                raise RuntimeError(f"random_(): expects 'from' to be less than 'to', but got "
                                   f"from={low} >= to={high}")
        M.check_sizes(entry, shape_of(names, args))
        dtype = args[names.index("dtype")]
        return M.meta_tensor(shape_of(names, args),
                             dtype if dtype is not None else _C.int64)
    return rule


_randint_meta = _int_factory_meta(lambda names, args: tuple(args[names.index("size")]))

op(f"randint(SymInt high, SymInt[] size, *, {_GEN}, {_OPTS}) -> Tensor", FACTORY, "randint",
   prim=True, lower=lower_randint, method=False, meta=_randint_meta,
   doc="Integers drawn uniformly from [0, high); int64 unless dtype is given.")
op(f"randint.low(SymInt low, SymInt high, SymInt[] size, *, {_GEN}, {_OPTS}) -> Tensor",
   FACTORY, "randint", prim=True, lower=lower_randint, method=False, meta=_randint_meta,
   doc="Integers drawn uniformly from [low, high).")
op(f"randperm(SymInt n, *, {_GEN}, {_OPTS}) -> Tensor", FACTORY, "randperm", prim=True,
   lower=extern,
   method=False, meta=_int_factory_meta(lambda names, args: (args[0],)),
   doc="A random permutation of 0 .. n-1; int64 unless dtype is given.")
