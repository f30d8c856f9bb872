"""The op table: one entry per operator overload, declared with `op(...)`.

An entry holds everything every stage needs to know about an operator:

- schema: PyTorch's signature (names, argument order, defaults);
- kind: the family whose shape and dtype rule it follows (ember._C.KIND_*), and
  `rule`, a variant of that rule (int to int64 accumulation, float only, no bool);
- kernel: the name of the C kernel that computes it eagerly (csrc/kernels/), with
  the NumPy ufunc it drives where the kind is ufunc-backed;
- meta: the Python shape/dtype/stride rule (ops/meta.py, by kind unless given);
- backward: the gradient formula, written with ember ops:
      backward(grad, result, *args) -> one gradient per parameter (None where none);
- decompose: the same computation written with prims, or prim=True;
- lower: how the LLVM backend compiles a prim (python/ember/compiler/lowerings.py:
  pointwise(...), reduction(...), extern, or a lowering function);
- view ops: view_scatter(self, src, *args), the functional inverse that writes src, a
  new value of self.<op>(*args), into self; none where there is no inverse (expand),
  and view_replay(self, *args) where the view's value for any layout of self is not
  the op itself (view -> reshape); see ops/view_replay.py;
- where it appears: as ember.<name>, as a Tensor method (Python operators are Tensor
  slots in csrc/tensor/tensor.c, which name their ops by id).

`install()` turns every entry into a C Op (csrc/dispatch/op.c), puts it in place and
binds the C table of ops by id (ops/op_ids.py). Adding an operator is one `op(...)` call
plus its kernel; C code that starts calling an op by id needs `python -m ember.ops.op_ids`.
"""
from __future__ import annotations

import dis
import inspect
import re
from dataclasses import dataclass, field
from typing import Callable, Optional

import numpy as np

from .. import _C
from . import schema as _schema

UNARY = _C.KIND_UNARY
UNARY_FLOAT = _C.KIND_UNARY_FLOAT
BINARY = _C.KIND_BINARY
BINARY_FLOAT = _C.KIND_BINARY_FLOAT
COMPARE = _C.KIND_COMPARE
REDUCE = _C.KIND_REDUCE
REDUCE_INDEX = _C.KIND_REDUCE_INDEX
MATMUL = _C.KIND_MATMUL
VIEW = _C.KIND_VIEW
FACTORY = _C.KIND_FACTORY
CUSTOM = _C.KIND_CUSTOM

# variants of a kind's dtype rule (csrc/ember.h EM_RULE_*)
INT_TO_LONG = 1
FLOAT_ONLY = 2
NO_BOOL = 4
INTEGRAL = 8       # bitwise ops: no floating point kernel (NotImplementedError)
NOT_BOOL = 16      # pow: no bool kernel (NotImplementedError)
FLOATING = 32      # gelu, lerp: no integer or bool kernel (NotImplementedError)
COMPLEX = 64       # add, mul, exp: takes complex operands (the others refuse them)
COMPLEX_TO_REAL = 128   # abs: a complex operand gives a real result (its parts' dtype)
NO_HALF = 256      # ndtri, zeta: no float16/bfloat16 kernel (NotImplementedError)

_NUMBER_KINDS = (BINARY, BINARY_FLOAT, COMPARE)

# whether the min-cut partitioner (aot/partition.py) may compute a prim's value again in
# the backward instead of saving it (OpEntry.recompute; by kind unless given)
RECOMPUTE_CHEAP = "cheap"          # elementwise, views, copies, constant factories
RECOMPUTE_REDUCTION = "reduction"  # cheap unless it reads much more than it returns
RECOMPUTE_NEVER = "never"          # matmuls, convolutions, random draws, index work


@dataclass
class OpEntry:
    schema: _schema.Schema
    kind: int
    kernel: str
    rule: int = 0
    ufunc: Optional[str] = None
    reduce_ufunc: Optional[str] = None
    backward: Optional[Callable] = None
    decompose: Optional[Callable] = None
    prim: bool = False
    lower: Optional[Callable] = None   # prims: compiler/lowerings.py
    method: bool = True
    function: bool = True
    composite: bool = False
    impl: Optional[Callable] = None
    meta: Optional[Callable] = None
    view_scatter: Optional[Callable] = None   # view ops: (self, src, *args) -> new self
    view_replay: Optional[Callable] = None    # view ops: (self, *args) -> the view's value
    inplace: bool = False
    inplace_variant: bool = False   # also declare name_ (in place, e.g. add_)
    checks_values: bool = False     # the eager kernel raises on some input values (an
    #                                 index out of range, a mask count that does not fit,
    #                                 an integer division by zero): graphs keep such a
    #                                 node even when its result is unused
    recompute: Optional[str] = None   # RECOMPUTE_*: None means as the kind says
    numbers: Optional[bool] = None   # tensor parameters also take Python numbers
    #                                  (None: as the kind says; elementwise kinds do)
    aliases: tuple = ()
    traceable: bool = True          # False: compiled code runs it in CPython (a graph
    #                                 break): its value depends on what capture does not
    #                                 keep (as_strided reads the storage layout)
    autocast: int = 0               # how ember.autocast casts the arguments (ops/
    #                                 autocast_lists.py sets it: EM_AUTOCAST_*)
    doc: str = ""
    c_op: object = field(default=None, repr=False)
    functional: object = field(default=None, repr=False)   # in-place ops: their twin
    op_id: int = field(default=-1, repr=False)   # its id (ops/op_ids.py), by install()

    @property
    def name(self):
        return self.schema.name

    @property
    def overload(self):
        return self.schema.overload

    @property
    def qualified_name(self):
        return self.name + ("." + self.overload if self.overload else "")

    @property
    def nouts(self):
        return max(1, len(self.schema.returns)) if self.schema.returns else 0

    @property
    def mutates(self):
        """Indices of the parameters the op writes into, from the schema's Tensor(a!)."""
        return self.schema.mutated_params

    @property
    def aliased_params(self):
        """For each return, the parameter it may share memory with (Tensor(a)), or
        None. View ops always do; reshape, contiguous, to and the like may: whether
        one call's result is a view is told by its storage (Tensor.untyped_storage)."""
        return self.schema.aliased_params

    @property
    def recompute_policy(self):
        """RECOMPUTE_CHEAP, _REDUCTION or _NEVER: whether the min-cut partitioner may
        compute this prim again in the backward (aot/partition.py). Elementwise kinds and
        views are cheap, reductions cheap over small inputs; anything else is never
        recomputed unless its entry says so."""
        if self.recompute is not None:
            return self.recompute
        if self.checks_values:
            return RECOMPUTE_NEVER
        if self.kind in _ELEMENTWISE_KINDS or self.kind == VIEW:
            return RECOMPUTE_CHEAP
        if self.kind == REDUCE:
            return RECOMPUTE_REDUCTION
        return RECOMPUTE_NEVER

    @property
    def differentiable(self):
        return self.backward is not None

    @property
    def backward_uses(self):
        """Which of (result, *args) the backward formula reads, as a tuple of bools (None
        when that can't be told): the autograd engine checks only those for in-place
        changes, as PyTorch checks only saved tensors."""
        if "_uses" not in self.__dict__:
            self.__dict__["_uses"] = _formula_reads(self.backward, len(self.schema.params))
        return self.__dict__["_uses"]

    def __repr__(self):
        return f"<op {self.schema.text}>"


ENTRIES: list = []        # every overload, in declaration order
BY_NAME: dict = {}        # name -> [entries], overloads in declaration order


def op(schema: str, kind: int, kernel: str, **kw) -> OpEntry:
    """Declares one operator overload of the table."""
    entry = OpEntry(_schema.parse(schema), kind, kernel, **kw)
    if entry.prim and entry.decompose is not None:
        raise ValueError(f"{entry.qualified_name}: a prim has no decomposition")
    if entry.decompose is not None and entry.kind in _ELEMENTWISE_KINDS:
        entry.decompose = _in_computation_dtype(entry, entry.decompose)
    if entry.composite and entry.backward is not None:
        raise ValueError(f"{entry.qualified_name}: a composite's autograd comes from the ops "
                         "it calls")
    ENTRIES.append(entry)
    BY_NAME.setdefault(entry.name, []).append(entry)
    if entry.inplace_variant:
        _declare_inplace(entry)
    return entry


_ELEMENTWISE_KINDS = (UNARY, UNARY_FLOAT, BINARY, BINARY_FLOAT, COMPARE)


def _in_computation_dtype(entry: OpEntry, fn):
    """An elementwise op's decomposition, called with its tensor operands converted to the
    dtype the op computes in (meta.computation_dtype), as TensorIterator converts them:
    so every prim it calls computes in that dtype, not in a narrower one an operand
    happens to have (uint8 - int32 negating the uint8, float64 / float32 taking the
    float32's reciprocal). Python numbers stay numbers: beside operands of that dtype,
    they promote to it."""
    positions = [i for i, p in enumerate(entry.schema.params) if p.is_tensor]

    def decompose(*args):
        from . import meta
        from .. import prims
        dtype = meta.computation_dtype(entry, args)
        args = list(args)
        for i in positions:
            a = args[i]
            if isinstance(a, _C.Tensor) and a.dtype is not dtype:
                args[i] = prims._to_copy(a, dtype=dtype)
        return fn(*args)

    decompose.__wrapped__ = fn
    decompose.__doc__ = fn.__doc__
    return decompose


def _declare_inplace(functional: OpEntry):
    """name_: the same signature, updating self with the functional op's result."""
    s = functional.schema
    text = re.sub(r"^(\w+)", r"\1_", s.text)
    # self is written and returned: Tensor(a!) self -> Tensor(a!)
    text = re.sub(r"\(Tensor(\(\w+\))? self", "(Tensor(a!) self", text, count=1)
    text = re.sub(r"->\s*Tensor(\(\w+!?\))?\s*$", "-> Tensor(a!)", text)
    sch = _schema.parse(text)
    entry = OpEntry(sch, functional.kind, functional.kernel, rule=functional.rule,
                    ufunc=functional.ufunc, reduce_ufunc=functional.reduce_ufunc,
                    inplace=True, function=False, numbers=functional.numbers,
                    aliases=tuple(a + "_" for a in functional.aliases),
                    doc=f"In-place {s.name}: self = {s.name}(self, ...), returns self.")
    entry.functional = functional
    ENTRIES.append(entry)
    BY_NAME.setdefault(entry.name, []).append(entry)


def _formula_reads(fn, nparams):
    code = getattr(fn, "__code__", None)
    if code is None or code.co_flags & (inspect.CO_VARARGS | inspect.CO_VARKEYWORDS):
        return None
    names = code.co_varnames[:code.co_argcount]
    if len(names) != nparams + 2:
        return None
    read = set(code.co_cellvars)      # captured by a nested function
    for ins in dis.get_instructions(code):
        if "FAST" in ins.opname or "DEREF" in ins.opname:
            read.update(ins.argval if isinstance(ins.argval, tuple) else (ins.argval,))
    return tuple(n in read for n in names[1:])


def backward_name(name: str) -> str:
    camel = "".join(part.capitalize() for part in re.split(r"_+", name) if part)
    return f"{camel}Backward0"


def _make_c_op(entry: OpEntry):
    s = entry.schema
    ufunc = getattr(np, entry.ufunc) if entry.ufunc else None
    reduce_ufunc = getattr(np, entry.reduce_ufunc) if entry.reduce_ufunc else None
    number_ok = entry.kind in _NUMBER_KINDS if entry.numbers is None else entry.numbers
    params = s.c_params(number_ok=number_ok)
    return _C.Op(s.name, s.overload, s.text, params, entry.kind, entry.rule, entry.kernel,
                 entry.backward, ufunc, reduce_ufunc, entry.nouts, int(entry.inplace),
                 entry.composite, entry, backward_name(s.name))


def id_name(name: str, overload: str = "") -> str:
    """The C constant of an op id (csrc/dispatch/op_ids.h): EM_OP_MAX, EM_OP_MAX__DIM."""
    return "EM_OP_" + (f"{name}__{overload}" if overload else name).upper()


def op_constants(by_name: dict) -> dict:
    """C constant -> entry (ops/op_ids.py) for the table's name -> [entries] (overloads
    in declaration order): EM_OP_<NAME> for a name's first overload,
    EM_OP_<NAME>__<OVERLOAD> for the others."""
    named = {}
    for name, entries in by_name.items():
        for i, e in enumerate(entries):
            c = id_name(name) if i == 0 else id_name(name, e.overload or "default")
            if c in named:
                raise ValueError(f"{e.qualified_name} and {named[c].qualified_name} both "
                                 f"map to {c}")
            named[c] = e
    return named


def assign_op_ids(by_name: dict, c_names=()) -> list:
    """[(C constant, entry)] in id order, with entry.op_id the index: the entries C calls
    (qualified names c_names, numbered as op_ids.h numbers them) first, the others after
    them, each part in the constants' alphabetical order."""
    c_names = set(c_names)
    ids = sorted(op_constants(by_name).items(),
                 key=lambda ce: (ce[1].qualified_name not in c_names, ce[0]))
    for i, (_, e) in enumerate(ids):
        e.op_id = i
    return ids


def install(namespace: dict) -> dict:
    """Makes the C ops; puts functions in namespace and methods on Tensor.
    Returns name -> public op (the first overload, which tries the others)."""
    public = {}
    for name, entries in BY_NAME.items():
        head = None
        for e in entries:
            e.c_op = _make_c_op(e)
            if head is None:
                head = e.c_op
            else:
                head._add_overload(e.c_op)
        public[name] = head
        first = entries[0]
        if first.function:
            namespace[name] = head
            for alias in first.aliases:
                namespace[alias] = head
        if first.method:
            methods = {name: head}
            methods.update({alias: head for alias in first.aliases})
            _C._add_tensor_attrs(methods)
    for e in ENTRIES:
        if e.functional is not None:
            e.c_op._set_functional(e.functional.c_op)
        e.c_op.autocast = e.autocast
    ids = assign_op_ids(BY_NAME, _C.OP_QUALNAMES)
    _C._bind_ops({e.qualified_name: e.c_op for _, e in ids})
    return public


def prims() -> list:
    return [e for e in ENTRIES if e.prim]
