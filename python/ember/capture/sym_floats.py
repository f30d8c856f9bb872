"""Dynamic floats ([capture-2]): a Python float argument that changes between calls
becomes a graph input instead of a guarded constant.

Automatic dynamic as for int arguments (dynamic.py): the first capture of a code
specialises a float local (an argument, or a resume function's argument: the value of
`.item()` at a break); once a capture of that code sees another value at that local
(dynamic=None), or from the start under dynamic=True, the local is a `FloatVar`: its
type is guarded (TYPE_MATCH float), not its value. In a binary operator (+ - * / **,
reflected and in-place forms) with a floating or integer tensor it is the graph input
`ScalarSource(local)` (a 0-d float64 tensor the compiled frame makes from the float on
each call, `compiled_frame.c`'s "scalar" step) cast to the dtype eager computes in:
eager converts a Python float to the op's result dtype (the tensor's floating dtype, or
the default dtype for an integer tensor), and the op on that 0-d tensor gives eager's
bits (tests/capture/test_dynamic_floats.py checks every dtype). Every other use (a
branch, a comparison, int(), an op's non-tensor argument, arithmetic on Python values,
a return) reads `.value`, which adds the value's EQUALS guard: specialised, as before.
A value the frame only moves is fetched again and needs no guard at all (ValueVar).
Unary minus of one is a derived FloatVar; tensor methods and ops that are those
operators (`x.mul(s)`, `x.add_(s)`, `ember.div(x, s)`, no keyword arguments) take the
same path as the operator (`call`).
"""
from __future__ import annotations

import operator

from .. import _C
from .source import LocalSource, ScalarSource
from .variables import ConstVar, TensorVar

_PURE = {operator.iadd: operator.add, operator.isub: operator.sub,
         operator.imul: operator.mul, operator.itruediv: operator.truediv,
         operator.ipow: operator.pow}
_ARITH = {operator.add, operator.sub, operator.mul, operator.truediv, operator.pow}


class FloatVar(ConstVar):
    """A float local made dynamic: a constant whose value is guarded when read, and a
    graph input where a tensor operator uses it. A derived one (`parts`: fn and its
    operands, FloatVars or Python numbers) is arithmetic on such floats: a 0-d float64
    graph value (IEEE double, as Python computes it); reading its value specialises
    every dynamic float it was made from."""

    def __init__(self, value, source, pending, parts=None, maybe_int=False):
        super().__init__(value, source, pending)
        self._input = None
        self._parts = parts
        self._read = False
        # max(s, 1) and the like: the number is an int or a float by the data (the
        # graph value is its float64 value either way)
        self.maybe_int = maybe_int

    @property
    def value(self):
        if self._parts is not None and not self._read:
            self._read = True
            for p in self._parts[1]:
                if isinstance(p, FloatVar):
                    p.value
        return ConstVar.value.fget(self)

    @value.setter
    def value(self, value):
        self._parts = None
        ConstVar.value.fset(self, value)

    def unread(self):
        if self._parts is not None:
            return not self._read
        return super().unread()

    def graph_input(self, tx):
        """The 0-d float64 TensorVar: fetched from the float on each call, or computed
        from the floats a derived one was made from."""
        if self._input is None:
            from .._tensor_new import tensor
            if self._parts is None:
                real = tensor(self._value, dtype=_C.float64)
                self._input = tx.output.add_input(real, ScalarSource(self.source))
            else:
                fn, operands = self._parts
                args = [p.graph_input(tx) if isinstance(p, FloatVar) else ConstVar(p)
                        for p in operands]
                if fn in (max, min):
                    self._input = _where_chain(tx, fn, args)
                else:
                    self._input = tx.call_op(fn, args, {})
        return self._input

    def __repr__(self):
        return f"FloatVar({self._value!r} from {self.source.name()})"


def wrap_float(tx, value, source):
    """A FloatVar for float `value` read from local `source` when automatic dynamic
    (or dynamic=True) makes it dynamic, else None (a constant, as before). Records the
    value for later captures."""
    from . import dynamic
    out = tx.output
    if not isinstance(source, LocalSource):
        return None
    if not dynamic.dynamic_float(out.dynamic_mode, out.code, source.name(), value):
        return None
    tx.guard("TYPE_MATCH", source, float)
    return FloatVar(value, source, (out.guards, ("EQUALS_MATCH", source, value)))


_EXACT = 2 ** 53


def _python_number(v):
    """The value of a plain float or int operand (an exact double), else None."""
    if isinstance(v, FloatVar) or not isinstance(v, ConstVar):
        return None
    x = v.value
    if type(x) is float or type(x) is int and -_EXACT <= x <= _EXACT:
        return x
    return None


def _float_arith(fn, a, b):
    """a fn b for a dynamic float and a float, int or another dynamic one: a derived
    FloatVar (+ - *: a 0-d float64 op gives Python's double; / only by a constant
    nonzero divisor, as Python raises ZeroDivisionError where the tensor gives inf),
    or None (specialised)."""
    if fn not in (operator.add, operator.sub, operator.mul, operator.truediv):
        return None
    operands = []
    for v in (a, b):
        if isinstance(v, FloatVar):
            if not v.unread() or v.maybe_int:
                return None
            operands.append(v)
        else:
            x = _python_number(v)
            if x is None:
                return None
            operands.append(x)
    if fn is operator.truediv and (isinstance(operands[1], FloatVar) or operands[1] == 0):
        return None
    values = [p._value if isinstance(p, FloatVar) else p for p in operands]
    return FloatVar(fn(*values), None, None, (fn, operands))


def _where_chain(tx, fn, args):
    """CPython's max()/min() over 0-d float64 values: the first item, each later one
    taken when it compares greater (less), as where(b > current, b, current) (NaN and
    signed zeros as CPython's: a NaN is taken only first, ties keep the earlier)."""
    from ..ops import api as O
    compare = operator.gt if fn is max else operator.lt
    current = args[0]
    for item in args[1:]:
        taken = tx.call_op(compare, [item, current], {})
        current = tx.call_op(O.where, [taken, item, current], {})
    return current


def min_max(fn, args):
    """max(s, 0.5, ...) / min(...) of dynamic floats and float or int constants: a
    derived FloatVar (the graph's where chain over float64), or None (another value
    among the items; specialised). With an int among the items (|i| <= 2**53, exact in
    float64) the result is that int or a float by the data (`maybe_int`): its type
    shows wherever it is used except in + - * / with a floating tensor, where eager
    converts either to the tensor's dtype (the same bits), so every other use reads its
    value (specialised, guarded)."""
    items = []
    maybe_int = False
    for v in args:
        if isinstance(v, FloatVar):
            if not v.unread():
                return None
            maybe_int |= v.maybe_int
            items.append(v)
        elif isinstance(v, ConstVar) and type(v.value) is float:
            items.append(v.value)
        elif isinstance(v, ConstVar) and type(v.value) is int and \
                -_EXACT <= v.value <= _EXACT:
            maybe_int = True
            items.append(v.value)
        else:
            return None
    if not any(isinstance(p, FloatVar) for p in items):
        return None
    values = [p._value if isinstance(p, FloatVar) else p for p in items]
    return FloatVar(fn(*values), None, None, (fn, items), maybe_int)


def negative(a):
    """-s of a dynamic float: a derived FloatVar (the sign flipped exactly), or None."""
    if isinstance(a, FloatVar) and a.unread() and not a.maybe_int:
        return FloatVar(-a._value, None, None, (operator.neg, [a]))
    return None


# tensor methods that are a binary operator (the same op, the same bits as eager's
# `x * s`): x.mul(s), x.add(s), x.div(s), x.pow(s), ... and their in-place forms
_METHODS = {"add": operator.add, "sub": operator.sub, "subtract": operator.sub,
            "mul": operator.mul, "multiply": operator.mul, "div": operator.truediv,
            "divide": operator.truediv, "true_divide": operator.truediv,
            "pow": operator.pow, "add_": operator.iadd, "sub_": operator.isub,
            "mul_": operator.imul, "div_": operator.itruediv,
            "true_divide_": operator.itruediv, "pow_": operator.ipow}


def _op_functions():
    """ember.mul(x, s) and the like, by the op's handle (the op table's registry)."""
    from ..ops import api as O
    return {O.add: operator.add, O.sub: operator.sub, O.mul: operator.mul,
            O.div: operator.truediv, O.pow: operator.pow}


def call(tx, target, args, kwargs, method):
    """x.mul(s) (method: target is the name) or ember.mul(x, s) (an op) with a dynamic
    float and a tensor and no keyword arguments: the binary operator's graph op
    (`binary`), or None (specialised)."""
    if kwargs or len(args) != 2 or not any(isinstance(a, FloatVar) for a in args):
        return None
    if method:
        fn = _METHODS.get(target)
    else:
        try:
            fn = _op_functions().get(target)
        except TypeError:           # (an unhashable target)
            return None
    if fn is None:
        return None
    a, b = args
    if not isinstance(a, TensorVar) and not isinstance(b, TensorVar):
        return None
    return binary(tx, fn, a, b)


def binary(tx, fn, a, b):
    """fn(a, b) with a dynamic float and a tensor as a graph op, or None (the caller
    treats the float as a constant: specialised)."""
    pure = _PURE.get(fn, fn)
    if pure not in _ARITH:
        return None
    if not isinstance(a, TensorVar) and not isinstance(b, TensorVar):
        return _float_arith(pure, a, b)
    f, t = (a, b) if isinstance(a, FloatVar) else (b, a)
    if not isinstance(f, FloatVar) or not isinstance(t, TensorVar) or not f.unread():
        return None
    dtype = t.fake.dtype
    if f.maybe_int and (not dtype.is_floating_point or pure is operator.pow):
        # (an int times an integer tensor stays integer; x ** 2 and x ** 2.0 are
        # computed differently)
        return None
    if dtype.is_floating_point:
        compute = dtype
    elif dtype.is_complex or dtype == _C.bool or fn is not pure:
        return None                     # (in-place on an integer tensor: eager raises)
    else:
        compute = _C.get_default_dtype()
    if f is a:
        fn = pure                       # float += tensor: float.__iadd__ is add
    scalar = f.graph_input(tx)
    if compute != _C.float64:
        scalar = tx.call_op("to", [scalar, ConstVar(compute)], {}, method=True)
    args = [scalar, t] if f is a else [t, scalar]
    return tx.call_op(fn, args, {})
