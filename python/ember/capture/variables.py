"""Symbolic values of the bytecode interpreter.

Each value the interpreter pushes is a VariableTracker (VT). Tensors are TensorVar: an
FX node plus a fake (meta) tensor that carries shape, dtype, strides and requires_grad.
Everything else is either a Python constant (ConstVar), a container of VTs, or a
reference to a real Python object (a module, a function, an op) that the interpreter
knows how to use. A VT built from something the frame reads keeps its Source, so that
guards can re-check it and the compiled frame can fetch it again.
"""
from __future__ import annotations

import builtins
import inspect
import math
import operator
import types

from .. import _C
from .exc import Unsupported
from .source import AttrSource, DictSource, ItemSource

_CONST_TYPES = (bool, int, float, str, type(None), type(Ellipsis), type(NotImplemented),
                complex, bytes)


def is_constant(value) -> bool:
    if isinstance(value, _CONST_TYPES) or isinstance(value, (_C.dtype, slice, range)):
        return True
    if isinstance(value, (tuple, frozenset)):
        return all(is_constant(v) for v in value)
    return False


class VariableTracker:
    source = None

    def python_type(self):
        raise Unsupported(f"type() of {self}")

    def is_constant(self):
        return False

    def as_constant(self):
        raise Unsupported(f"{self} is not a Python constant")

    def getattr(self, tx, name):
        raise Unsupported(f"attribute {name!r} of {self}")

    def call(self, tx, args, kwargs):
        raise Unsupported(f"calling {self}")

    def unpack(self, tx):
        raise Unsupported(f"iterating over {self}")

    def truth(self, tx):
        raise Unsupported(f"truth value of {self}")

    def __repr__(self):
        return f"{type(self).__name__}({getattr(self, 'value', '')!r})"


class NullVar(VariableTracker):
    """The NULL CPython pushes below a callable."""

    def __repr__(self):
        return "NULL"


class ConstVar(VariableTracker):
    def __init__(self, value, source=None):
        self.value = value
        self.source = source

    def python_type(self):
        return type(self.value)

    def is_constant(self):
        return True

    def as_constant(self):
        return self.value

    def getattr(self, tx, name):
        return tx.wrap_constant_result(getattr(self.value, name))

    def unpack(self, tx):
        try:
            items = list(self.value)
        except TypeError:
            raise Unsupported(f"iterating over {type(self.value).__name__}") from None
        return [ConstVar(v) for v in items]

    def truth(self, tx):
        return bool(self.value)


class TensorVar(VariableTracker):
    """A tensor value: an FX node (graph input or op result) and its fake tensor."""

    def __init__(self, node, fake, source=None, from_input=False):
        self.node = node
        self.fake = fake
        self.source = source
        self.from_input = from_input     # an input, or a view of one (no in-place writes)

    def python_type(self):
        return type(self.fake)

    def __repr__(self):
        return f"TensorVar({self.node}, {tuple(self.fake.shape)}, {self.fake.dtype})"

    def truth(self, tx):
        raise Unsupported("data-dependent control flow (the truth value of a tensor)")

    def unpack(self, tx):
        n = self.fake.shape[0] if self.fake.ndim else None
        if n is None:
            raise Unsupported("iteration over a 0-d tensor")
        return [tx.call_op(operator.getitem, [self, ConstVar(i)], {}) for i in range(n)]

    def getattr(self, tx, name):
        return tx.tensor_getattr(self, name)


class SequenceVar(VariableTracker):
    def __init__(self, items, source=None):
        self.items = list(items)
        self.source = source

    def unpack(self, tx):
        return list(self.items)

    def truth(self, tx):
        return len(self.items) > 0

    def is_constant(self):
        return all(i.is_constant() for i in self.items)

    def __repr__(self):
        return f"{type(self).__name__}({self.items!r})"


class TupleVar(SequenceVar):
    def __init__(self, items, source=None, fields=None):
        super().__init__(items, source)
        self.fields = fields      # names of a named tuple's fields (max.dim's result)

    def python_type(self):
        return tuple

    def as_constant(self):
        return tuple(i.as_constant() for i in self.items)

    def getattr(self, tx, name):
        if self.fields and name in self.fields:
            return self.items[self.fields.index(name)]
        if name in ("count", "index"):
            return BuiltinMethodVar(self, name)
        raise Unsupported(f"attribute {name!r} of a tuple")


class ListVar(SequenceVar):
    def python_type(self):
        return list

    def as_constant(self):
        return [i.as_constant() for i in self.items]

    def getattr(self, tx, name):
        if name in ("append", "extend", "pop", "insert", "index", "count", "reverse"):
            return BuiltinMethodVar(self, name)
        raise Unsupported(f"attribute {name!r} of a list")


class DictVar(VariableTracker):
    def __init__(self, items, source=None):
        self.items = dict(items)     # constant key -> VT
        self.source = source

    def python_type(self):
        return dict

    def truth(self, tx):
        return len(self.items) > 0

    def unpack(self, tx):
        return [ConstVar(k) for k in self.items]

    def getattr(self, tx, name):
        if name in ("items", "keys", "values", "get", "update", "pop", "setdefault"):
            return BuiltinMethodVar(self, name)
        raise Unsupported(f"attribute {name!r} of a dict")


class IteratorVar(VariableTracker):
    def __init__(self, items):
        self.items = list(items)
        self.pos = 0

    def next(self):
        if self.pos >= len(self.items):
            return None
        v = self.items[self.pos]
        self.pos += 1
        return v

    def unpack(self, tx):
        rest = self.items[self.pos:]
        self.pos = len(self.items)
        return rest


class CellVar(VariableTracker):
    """A closure cell created by the interpreted code (MAKE_CELL) or captured from one."""

    def __init__(self, content=None):
        self.content = content


class ObjectVar(VariableTracker):
    """A real Python object used as is (guarded by identity): classes, plain objects."""

    def __init__(self, value, source=None):
        self.value = value
        self.source = source

    def python_type(self):
        return type(self.value)

    def is_constant(self):
        return True

    def as_constant(self):
        return self.value

    def getattr(self, tx, name):
        try:
            attr = getattr(self.value, name)
        except AttributeError as e:
            raise Unsupported(f"attribute error: {e}") from None
        src = AttrSource(self.source, name) if self.source is not None else None
        return tx.wrap(attr, src)

    def call(self, tx, args, kwargs):
        if isinstance(self.value, type) and issubclass(self.value, BaseException):
            return tx.call_builtin(self.value, args, kwargs)
        if isinstance(self.value, type):
            raise Unsupported(f"constructing {self.value.__name__} objects")
        raise Unsupported(f"calling {self.value!r}")

    def truth(self, tx):
        return bool(self.value)


class PythonModuleVar(ObjectVar):
    """A Python module (ember, math, ember.nn.functional)."""


class OpVar(VariableTracker):
    """An ember op (a C Op object): calling it records a call_function node."""

    def __init__(self, op, source=None):
        self.value = op
        self.source = source

    def is_constant(self):
        return True

    def as_constant(self):
        return self.value

    def call(self, tx, args, kwargs):
        return tx.call_op(self.value, args, kwargs)


class FunctionVar(VariableTracker):
    """A Python function, inlined when called. closure: CellVars, or None for the
    function's own real cells."""

    def __init__(self, fn, source=None, closure=None, defaults=None, kwdefaults=None):
        self.value = fn
        self.source = source
        self.closure = closure
        self.defaults = defaults
        self.kwdefaults = kwdefaults

    def is_constant(self):
        return True

    def as_constant(self):
        return self.value

    def call(self, tx, args, kwargs):
        return tx.inline_call(self, args, kwargs)

    def getattr(self, tx, name):
        if name in ("__name__", "__qualname__", "__module__", "__doc__"):
            return ConstVar(getattr(self.value, name))
        raise Unsupported(f"attribute {name!r} of function {self.value.__qualname__}")


class BoundMethodVar(VariableTracker):
    """fn bound to a symbolic self (a module's method, a tensor's Python method)."""

    def __init__(self, fn, self_var):
        self.value = fn
        self.self_var = self_var

    def call(self, tx, args, kwargs):
        fn = FunctionVar(self.value)
        return fn.call(tx, [self.self_var] + list(args), kwargs)


class TensorMethodVar(VariableTracker):
    """tensor.<op>: calling it records call_method(<op>)."""

    def __init__(self, tensor, name):
        self.tensor = tensor
        self.name = name

    def call(self, tx, args, kwargs):
        return tx.call_op(self.name, [self.tensor] + list(args), kwargs, method=True)


class BuiltinMethodVar(VariableTracker):
    """A method of a symbolic list/dict/tuple (append, items, ...)."""

    def __init__(self, obj, name):
        self.obj = obj
        self.name = name

    def call(self, tx, args, kwargs):
        obj, name = self.obj, self.name
        if isinstance(obj, ListVar):
            if name == "append":
                obj.items.append(args[0])
                return ConstVar(None)
            if name == "extend":
                obj.items.extend(args[0].unpack(tx))
                return ConstVar(None)
            if name == "pop":
                i = args[0].as_constant() if args else -1
                return obj.items.pop(i)
            if name == "insert":
                obj.items.insert(args[0].as_constant(), args[1])
                return ConstVar(None)
            if name == "reverse":
                obj.items.reverse()
                return ConstVar(None)
        if isinstance(obj, DictVar):
            if name == "items":
                return ListVar([TupleVar([ConstVar(k), v]) for k, v in obj.items.items()])
            if name == "keys":
                return ListVar([ConstVar(k) for k in obj.items])
            if name == "values":
                return ListVar(list(obj.items.values()))
            if name == "get":
                key = args[0].as_constant()
                return obj.items.get(key, args[1] if len(args) > 1 else ConstVar(None))
            if name == "update":
                obj.items.update(args[0].items if isinstance(args[0], DictVar) else {})
                return ConstVar(None)
        if name in ("count", "index") and isinstance(obj, SequenceVar):
            consts = [i.as_constant() for i in obj.items]
            return ConstVar(getattr(consts, name)(*[a.as_constant() for a in args]))
        raise Unsupported(f"{type(obj).__name__}.{name}")


class ModuleVar(VariableTracker):
    """An ember.nn.Module instance: attributes resolve to its parameters, buffers and
    submodules (with sources that read their dicts directly); calling it inlines the
    class's forward."""

    def __init__(self, module, source=None):
        self.value = module
        self.source = source

    def python_type(self):
        return type(self.value)

    def is_constant(self):
        return True

    def as_constant(self):
        return self.value

    def compiled_original(self, tx):
        """For what ember.compile(module) returned (an OptimizedModule): the module it
        wraps, which the interpreter uses in its place (compiling inside a compiled
        region inlines, as torch.compile does); else None."""
        from . import api
        if api._OPTIMIZED is None or type(self.value) is not api._OPTIMIZED:
            return None
        return ModuleVar.getattr(self, tx, "_orig_mod", delegate=False)

    def getattr(self, tx, name, delegate=True):
        m = self.value
        src = self.source
        d = object.__getattribute__(m, "__dict__")
        if delegate and name != "_orig_mod":
            orig = self.compiled_original(tx)
            if orig is not None:
                return orig.getattr(tx, name)
        for store in ("_parameters", "_buffers", "_modules"):
            table = d.get(store)
            if table is not None and name in table:
                value = table[name]
                return tx.wrap(value, DictSource(AttrSource(src, store), name)
                               if src is not None else None)
        if name in d:
            return tx.wrap(d[name], AttrSource(src, name) if src is not None else None)
        if name in ("keys", "values", "items") and self._container() == "dict":
            return _ModuleDictMethod(self, name)
        cls_attr = inspect.getattr_static(type(m), name, None)
        if isinstance(cls_attr, types.FunctionType):
            return BoundMethodVar(cls_attr, self)
        if isinstance(cls_attr, property) and isinstance(cls_attr.fget, types.FunctionType):
            return BoundMethodVar(cls_attr.fget, self).call(tx, [], {})
        if cls_attr is not None and is_constant(cls_attr):
            return ConstVar(cls_attr)
        try:
            value = getattr(m, name)
        except AttributeError as e:
            raise Unsupported(f"attribute error: {e}") from None
        if isinstance(value, types.MethodType):
            return BoundMethodVar(value.__func__, self)
        return tx.wrap(value, AttrSource(src, name) if src is not None else None)

    def call(self, tx, args, kwargs):
        return tx.call_module(self, args, kwargs)

    def _container(self):
        """"dict" for ModuleDict/ParameterDict (iterating gives keys), "plist" for
        ParameterList, "list" for other modules (iterating gives submodules)."""
        from ..nn.modules import container
        if isinstance(self.value, (container.ModuleDict, container.ParameterDict)):
            return "dict"
        if isinstance(self.value, container.ParameterList):
            return "plist"
        return "list"

    def keys(self, tx):
        """The container's keys (submodule names; ParameterDict's keys), guarded: a
        module added or removed later must not reuse a graph unrolled over the old
        ones."""
        d = object.__getattribute__(self.value, "__dict__")
        store = "_keys" if "_keys" in d else "_modules"
        table = d.get(store)
        if not isinstance(table, dict):
            raise Unsupported(f"iterating over {type(self.value).__name__}")
        if self.source is not None:
            tx.guard("DICT_KEYS", AttrSource(self.source, store), tuple(table))
        return list(table)

    def length(self, tx):
        if self._container() == "plist":
            return len(self.unpack(tx))
        return len(self.keys(tx))

    def unpack(self, tx):
        m = self.value
        kind = self._container()
        if kind == "dict":
            return [ConstVar(k) for k in self.keys(tx)]
        if kind == "plist":
            n = object.__getattribute__(m, "__dict__").get("_size")
            if self.source is not None:
                tx.guard("EQUALS_MATCH", AttrSource(self.source, "_size"), n)
            return [self.getattr(tx, str(i)) for i in range(n)]
        self.keys(tx)
        modules = object.__getattribute__(m, "__dict__").get("_modules")
        src = AttrSource(self.source, "_modules") if self.source is not None else None
        return [tx.wrap(sub, DictSource(src, k) if src is not None else None)
                for k, sub in modules.items() if sub is not None]

    def item(self, tx, k):
        """self[k] for ember.nn's containers, through the same dict sources as
        attributes (so guards and the compiled frame read the live entries)."""
        kind = self._container()
        if kind == "dict" and isinstance(k, str):
            return self.getattr(tx, k)
        if kind != "dict" and isinstance(k, int) and not isinstance(k, bool):
            items = self.unpack(tx)
            if -len(items) <= k < len(items):
                return items[k]
        if kind == "list" and isinstance(k, slice):
            return ListVar(self.unpack(tx)[k])
        raise Unsupported(f"indexing {type(self.value).__name__} with {k!r}")

    def dict_method(self, tx, name):
        """ModuleDict/ParameterDict .keys(), .values(), .items() as lists."""
        keys = self.keys(tx)
        if name == "keys":
            return ListVar([ConstVar(k) for k in keys])
        values = [self.getattr(tx, k) for k in keys]
        if name == "values":
            return ListVar(values)
        return ListVar([TupleVar([ConstVar(k), v]) for k, v in zip(keys, values)])


class _ModuleDictMethod(VariableTracker):
    def __init__(self, mvar, name):
        self.mvar = mvar
        self.name = name

    def call(self, tx, args, kwargs):
        if args or kwargs:
            raise Unsupported(f"{type(self.mvar.value).__name__}.{self.name} with arguments")
        return self.mvar.dict_method(tx, self.name)


class BuiltinVar(VariableTracker):
    """A builtin or operator-module function: folded on constants, recorded on tensors."""

    def __init__(self, fn, source=None):
        self.value = fn
        self.source = source

    def is_constant(self):
        return True

    def as_constant(self):
        return self.value

    def call(self, tx, args, kwargs):
        return tx.call_builtin(self.value, args, kwargs)


def constant_args(args, kwargs):
    """Python values of args/kwargs if all are constants, else None."""
    if all(a.is_constant() for a in args) and all(v.is_constant() for v in kwargs.values()):
        return [a.as_constant() for a in args], {k: v.as_constant() for k, v in kwargs.items()}
    return None


PURE_BUILTINS = {
    len, abs, min, max, int, float, bool, str, round, divmod, pow, sum, isinstance,
    issubclass, hasattr, getattr, tuple, list, dict, range, enumerate, zip, reversed,
    sorted, any, all, type, id, callable, hash, repr, slice,
    *[getattr(operator, n) for n in dir(operator) if not n.startswith("_")],
    *[getattr(math, n) for n in dir(math) if callable(getattr(math, n))],
}

SAFE_MODULES = {math, operator, builtins}
