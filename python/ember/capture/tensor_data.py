"""ember.tensor(data) / ember.as_tensor(data) called inside a captured frame, of Python
numbers, sizes (x.shape[0], symbolic ones included) and nested lists or tuples of them:
a graph op, as TorchDynamo makes one, so the frame does not break there.

The result is built in the graph from its elements: one full((), v, dtype) per element
and a stack, reshaped to the data's shape (an empty data is one full of its shape), so
each call makes a new tensor, as eager does. The dtype, the shape and the values are
eager's: the data, its sizes at their captured values, goes through eager's own
ember.tensor once at capture time (so a ragged list or a value out of the dtype's range
raises there and the call breaks, eager then raising it), and each element of the graph
is the value eager stored (already converted to the dtype), except a symbolic size,
which the graph computes when the dtype is int64, float32 or float64 (which store any
size exactly; in other dtypes the size is specialised, guarded).

One-element tensors inside the data (`ember.tensor([a.sum(), b.sum()])`, as TorchDynamo
makes a graph op of it) are elements of the graph too: eager reads each by .item(),
puts the Python values in one NumPy array (bool, int64 or float64) and casts that to
the result's dtype; the graph detaches the tensor and casts it the same two ways
(`_element_of_tensor`), into floating dtypes, or integers into an integer dtype that
holds every element tensor's dtype (other conversions check or wrap values: they
break). The dtype and shape come from eager's
ember.tensor on zero tensors of the elements' dtypes and shapes.

ember.tensor(a tensor) is its detached copy (clone, or to(dtype, copy=True)) in the
graph, eager's UserWarning issued by the frame program on each call
(side_effects.SideEffects.warn).

What it does not do (the call breaks, counted): data holding tensors into other dtypes, requires_grad=True (a leaf made per call), pin_memory, data of more than
MAX_ELEMENTS elements (a node per element), a device other than the CPU.
"""
from __future__ import annotations

from .. import _C
from .exc import Unsupported
from .variables import ConstVar, ListVar, SymVar, TensorVar, TupleVar

MAX_ELEMENTS = 256

_NUMBER = (bool, int, float)


_FUNCTIONS = ()


def functions():
    """The functions this module captures: ember.tensor and ember.as_tensor."""
    global _FUNCTIONS
    if not _FUNCTIONS:
        from .. import _tensor_new
        _FUNCTIONS = (_tensor_new.tensor, _tensor_new.as_tensor)
    return _FUNCTIONS


def _plain(v, leaves):
    """v's data as Python values (a symbolic size at its hint, unguarded; a tensor
    inside a list as a zero tensor of its dtype and shape), appending the leaf VTs in
    row-major order."""
    if isinstance(v, SymVar):
        leaves.append(v)
        return v.sym.hint
    if isinstance(v, ConstVar):
        value = v.value
        if type(value) in _NUMBER:
            leaves.append(v)
            return value
        if isinstance(value, (tuple, list)):
            return type(value)(_plain(ConstVar(i), leaves) for i in value)
        raise Unsupported(f"ember.tensor of a {type(value).__name__} constant")
    if isinstance(v, (TupleVar, ListVar)):
        return [_plain(i, leaves) for i in v.items]
    if isinstance(v, TensorVar):
        f = v.fake
        if f.dtype.is_complex:
            raise Unsupported("ember.tensor of data holding complex tensors")
        leaves.append(v)
        # a stand-in of its dtype and shape: eager's ember.tensor on it gives the
        # result's dtype and shape, and raises where eager's would (more than one
        # element)
        from .. import _tensor_new
        return _tensor_new.tensor(0, dtype=f.dtype).expand(tuple(f.shape)).clone()
    raise Unsupported(f"ember.tensor of {type(v).__name__}")


def _raw_dtype(tx, plain, dtype, name, tensors):
    """(the dtype eager's values pass through, whether their range is checked): a
    tensor inside the data is read by .item() (a bool, int or float), the Python values
    become one NumPy array (bool, int64 or float64) and that is cast to the result's
    dtype. Into a floating dtype, or from integers into an integer dtype holding every
    tensor's dtype, the graph's casts give the same values. Integers into a narrower
    integer dtype are checked by eager (RuntimeError out of range, else the cast
    wraps as the graph's does): the frame program checks the graph's int64 values
    (`check_int_range`) where that is exact (`verify`). Others (a float into an integer
    dtype: NumPy's cast of an out-of-range value is the platform's) are unsupported."""
    from .. import _tensor_new
    raw = _tensor_new.dtype_from_numpy(_tensor_new._to_numpy(plain).dtype)
    if dtype.is_floating_point or dtype is raw:
        return raw, False
    if raw in (_C.bool, _C.int64) and dtype is not _C.bool and not dtype.is_complex:
        if all(_C.promote_types(t.fake.dtype, dtype) is dtype for t in tensors):
            # integers into an integer dtype holding every tensor's dtype: in range
            # (eager's check passes), the casts exact
            return raw, False
        if raw is _C.int64 and tx.output.code not in refused_codes and \
                all(_C.promote_types(t.fake.dtype, _C.int64) is _C.int64 for t in tensors):
            return raw, True
    raise Unsupported(f"{name}() of data holding tensors into {dtype} (eager checks "
                      "or converts their values)")


# codes whose frames made a range check the frame program cannot do exactly (verify):
# captured again, where the call breaks
refused_codes = set()


class RangeCheckUnsafe(Exception):
    """A range check after the graph would not be eager's (see verify)."""


def check_int_range(args):
    """The frame program's check of ember.tensor's integers (eager's _check_int_range
    on the values read by .item()): args is (dtype, int64 0-d tensors...)."""
    from .. import _tensor_new
    dtype, values = args[0], args[1:]
    raw = [int(v) for v in values]
    if raw:
        import numpy as np
        _tensor_new._check_int_range(np.array(raw, dtype=np.int64), raw, dtype)


_PURE_OPERATORS = {}


def _pure_operators():
    import operator
    if not _PURE_OPERATORS:
        _PURE_OPERATORS.update({
            operator.add: "add", operator.sub: "sub", operator.mul: "mul",
            operator.truediv: "div", operator.neg: "neg", operator.lt: "lt",
            operator.le: "le", operator.gt: "gt", operator.ge: "ge", operator.eq: "eq",
            operator.ne: "ne", operator.and_: "bitwise_and", operator.or_: "bitwise_or",
            operator.xor: "bitwise_xor", operator.invert: "bitwise_not",
            operator.matmul: "matmul"})
    return _PURE_OPERATORS


def _safe_after(node):
    """Whether a graph node may run before eager's error is raised in its place: it
    writes into nothing, draws no random numbers and cannot raise on values."""
    import operator
    from .symbolic import _entry_of
    if node.op in ("placeholder", "output", "get_attr"):
        return True
    method = node.op == "call_method"
    if method and node.target in ("detach", "to", "reshape", "clone"):
        return True
    if not method and node.target is operator.setitem:
        return False
    if not method and node.target is operator.getitem:
        # a constant index of a guarded shape cannot raise; a tensor (or size) can
        from .. import fx
        found = []
        fx.node.map_arg(node.args[1:], found.append)
        return not found
    name = _pure_operators().get(node.target) if not method else None
    if name is not None:
        from ..ops import api
        op = getattr(api, name, None)
        entry = getattr(op, "entry", None)
    else:
        entry = _entry_of(node.target, method)
    if entry is None:
        return False
    return not (entry.mutates or entry.checks_values or
                any(p.name == "generator" for p in entry.schema.params))


def verify(out):
    """Raises RangeCheckUnsafe where a range check of the frame program would not be
    eager's raise: it runs after the graph and before the frame's writes (so the frame
    may write nothing outside it), and what the graph does after the call must be
    unobservable when eager raised instead (no writes, random draws or ops that raise
    on values)."""
    kinds = [c[0] for c in out.side_effects.calls]
    if "range_check" not in kinds:
        return
    at = kinds.index("range_check")
    if out.side_effects.writes() or "warn" in kinds[at:]:
        raise RangeCheckUnsafe("the frame writes outside it or warns after the check")
    after = False
    first = out.side_effects.calls[at][3]
    for node in out.graph.nodes:
        if after and not _safe_after(node):
            raise RangeCheckUnsafe(f"{node.target} after the check")
        if node is first:
            after = True


def _element_of_tensor(tx, leaf, raw, dtype):
    """A one-element tensor of the data as a 0-d element of the result: its value
    (detached: eager reads it by .item()) through eager's casts. Returns (the value in
    the raw dtype, the element)."""
    v = tx.call_op("detach", [leaf], {}, method=True)
    if leaf.fake.ndim:
        v = tx.call_op("reshape", [v, ConstVar(())], {}, method=True)
    if v.fake.dtype is not raw:
        v = tx.call_op("to", [v, ConstVar(raw)], {}, method=True)
    return v, v if v.fake.dtype is dtype else tx.call_op("to", [v, ConstVar(dtype)], {},
                                                          method=True)


def _copy_of_tensor(tx, data, dtype):
    """ember.tensor(t): eager warns (UserWarning, at the caller's line) and returns
    t.detach().clone(), or .to(dtype, copy=True): the same ops in the graph, and the
    warning issued again by the frame program on each call (SideEffects.warn), as
    TorchDynamo keeps the call in its graph."""
    from .. import _tensor_new
    tx.output.side_effects.warn(_tensor_new.COPY_WARNING, UserWarning, tx)
    v = tx.call_op("detach", [data], {}, method=True)
    if dtype is None or dtype is data.fake.dtype:
        return tx.call_op("clone", [v], {}, method=True)
    return tx.call_op("to", [v, ConstVar(dtype)], {"copy": ConstVar(True)}, method=True)


def call(tx, fn, args, kwargs):
    from .. import _tensor_new
    from ..ops import api as O  # noqa: F401 - (the ops module loads the op table)
    import ember
    names = ("data", "dtype", "device", "requires_grad", "pin_memory") \
        if fn is _tensor_new.tensor else ("data", "dtype", "device")
    if len(args) > len(names) or set(kwargs) - set(names):
        raise Unsupported(f"{fn.__name__}() with these arguments")
    bound = dict(zip(names, args))
    for k, v in kwargs.items():
        if k in bound:
            raise Unsupported(f"{fn.__name__}() given {k} twice")
        bound[k] = v
    if "data" not in bound:
        raise Unsupported(f"{fn.__name__}() without data")
    options = {}
    for k in names[1:]:
        if k in bound:
            if not bound[k].is_constant():
                raise Unsupported(f"{fn.__name__}({k}=...) not a constant")
            options[k] = bound[k].as_constant()
    if options.get("requires_grad") or options.get("pin_memory"):
        raise Unsupported(f"{fn.__name__}(requires_grad=True or pin_memory=True) inside "
                          "a compiled function")
    data = bound["data"]
    dtype = options.get("dtype")
    if isinstance(data, TensorVar) and fn is _tensor_new.as_tensor:
        _tensor_new._check_device(options.get("device"))
        if dtype is None or dtype is data.fake.dtype:
            return data
        return tx.call_op("to", [data, ConstVar(dtype)], {}, method=True)
    if isinstance(data, TensorVar):
        try:
            _tensor_new._check_device(options.get("device"))
        except RuntimeError as e:      # eager raises it: break, eager runs it
            raise Unsupported(f"{fn.__name__}() raised RuntimeError: {e}") from None
        return _copy_of_tensor(tx, data, dtype)
    leaves = []
    plain = _plain(data, leaves)
    if len(leaves) > MAX_ELEMENTS:
        raise Unsupported(f"{fn.__name__}() of more than {MAX_ELEMENTS} elements")
    try:
        real = fn(plain, **options)
    except Exception as e:   # noqa: BLE001 - eager raises it too: break, eager runs it
        raise Unsupported(f"{fn.__name__}() raised {type(e).__name__}: {e}") from None
    dtype = real.dtype
    shape = tuple(real.shape)
    if not leaves:
        fill = False if dtype is _C.bool else 0
        return tx.call_op(ember.full, [ConstVar(shape), ConstVar(fill)],
                          {"dtype": ConstVar(dtype)})
    values = real.reshape(-1).tolist() if shape else [real.item()]
    raw, check, checked = None, False, []
    if any(isinstance(leaf, TensorVar) for leaf in leaves):
        raw, check = _raw_dtype(tx, plain, dtype, fn.__name__,
                                [leaf for leaf in leaves if isinstance(leaf, TensorVar)])
    elements = []
    for leaf, value in zip(leaves, values):
        if isinstance(leaf, TensorVar):
            raw_value, element = _element_of_tensor(tx, leaf, raw, dtype)
            checked.append(raw_value)
            elements.append(element)
            continue
        if isinstance(leaf, SymVar) and dtype in (_C.int64, _C.float32, _C.float64):
            v = leaf            # (any size fits these exactly)
        else:
            if isinstance(leaf, SymVar):
                leaf.as_constant()          # specialised: guarded equal to its hint
            v = ConstVar(value)
        elements.append(tx.call_op(ember.full, [ConstVar(()), v], {"dtype": ConstVar(dtype)}))
    if not shape:
        out = elements[0]
    else:
        out = tx.call_op(ember.stack, [ListVar(elements)], {})
        if len(shape) > 1:
            out = tx.call_op("reshape", [out, ConstVar(shape)], {}, method=True)
    if check:
        # eager's range check, by the frame program after the graph (verify)
        tx.output.side_effects.calls.append(("range_check", checked, dtype, out.node))
    return out
