"""Symbolic values of the bytecode interpreter.

Each value the interpreter pushes is a VariableTracker (VT). Tensors are TensorVar: an
FX node plus a fake (meta) tensor that carries shape, dtype, strides and requires_grad.
Everything else is either a Python constant (ConstVar), a container of VTs, or a
reference to a real Python object (a module, a function, an op) that the interpreter
knows how to use. A VT built from something the frame reads keeps its Source, so that
guards can re-check it and the compiled frame can fetch it again.
"""
from __future__ import annotations

import math
import operator
import types

from .. import _C
from .exc import Unsupported
from .source import AttrSource, DictSource

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


class ValueVar(VariableTracker):
    """A Python value known while tracing (self.value): a constant of the graph.

    A value read from a source may carry its guard unadded (`pending`: the guard set
    and the guard): the first read of .value adds it. A value the frame only moves
    (stores, passes to what runs in CPython at a break, returns) is never read and is
    fetched again from its source (program.py), so it needs no guard: the value
    returned by .item() or .numpy() at a break does not make the resume function
    compile again for each value. Every use of the value reads .value, so none goes
    unguarded."""

    def __init__(self, value, source=None, pending=None):
        self._value = value
        self.source = source
        self._pending = pending

    @property
    def value(self):
        if self._pending is not None:
            guards, guard = self._pending
            self._pending = None
            guards.add(*guard)
        return self._value

    @value.setter
    def value(self, value):
        self._pending = None
        self._value = value

    def unread(self):
        """Whether the value was only moved so far (its guard still pending)."""
        return self._pending is not None

    def is_constant(self):
        return True

    def as_constant(self):
        return self.value


class ConstVar(ValueVar):
    def python_type(self):
        return type(self.value)

    def getattr(self, tx, name):
        from .stdlib import const_method
        method = const_method(self.value, name)
        if method is not None:
            return method
        return tx.wrap_constant_result(getattr(self.value, name))

    def unpack(self, tx):
        try:
            items = list(self.value)
        except TypeError:
            raise Unsupported(f"iterating over {type(self.value).__name__}") from None
        return [ConstVar(v) for v in items]

    def truth(self, tx):
        return bool(self.value)


class SymVar(VariableTracker):
    """A symbolic size ([dynamic]): a SymInt (fx/shape_env.py) that the graph computes
    from its size inputs (capture/sym_sizes.py). Arithmetic and comparisons keep it
    symbolic (a comparison's truth is guarded); wherever a plain constant is needed it
    is specialised: its value is its hint, guarded equal from then on."""

    def __init__(self, sym):
        self.sym = sym

    def python_type(self):
        return int

    def is_constant(self):
        return True

    def as_constant(self):
        return int(self.sym)

    def truth(self, tx):
        return bool(self.sym)

    def __repr__(self):
        return f"SymVar({self.sym})"


class SliceVar(VariableTracker):
    """A slice with a symbolic bound; as a constant, specialised."""

    def __init__(self, parts):
        self.parts = parts

    def python_type(self):
        return slice

    def is_constant(self):
        return True

    def as_constant(self):
        return slice(*[p.as_constant() for p in self.parts])

    def __repr__(self):
        return f"SliceVar({self.parts})"


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
    mutated = False      # the interpreted code changed it (lists only)
    real = None          # the real object it stands for, when read from outside

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
    def __init__(self, items, source=None, fields=None, tuple_type=tuple):
        super().__init__(items, source)
        self.fields = fields      # names of a named tuple's fields (max.dim's result)
        self.tuple_type = tuple_type   # tuple, a namedtuple or a structseq type

    def python_type(self):
        return self.tuple_type

    def as_constant(self):
        return tuple(i.as_constant() for i in self.items)

    def getattr(self, tx, name):
        if self.fields and name in self.fields:
            return self.items[self.fields.index(name)]
        if name == "_fields" and self.fields and hasattr(self.tuple_type, "_make"):
            return ConstVar(tuple(self.fields))
        if name in ("count", "index"):
            return BuiltinMethodVar(self, name)
        raise Unsupported(f"attribute {name!r} of a tuple")


_LIST_METHODS = frozenset({"append", "extend", "pop", "insert", "index", "count", "reverse",
                           "remove", "clear", "sort", "copy"})
_DICT_METHODS = frozenset({"items", "keys", "values", "get", "update", "pop", "setdefault",
                           "clear", "popitem", "copy"})


class ListVar(SequenceVar):
    def python_type(self):
        return list

    def as_constant(self):
        return [i.as_constant() for i in self.items]

    def getattr(self, tx, name):
        if name in _LIST_METHODS:
            return BuiltinMethodVar(self, name)
        raise Unsupported(f"attribute {name!r} of a list")


class DictVar(VariableTracker):
    mutated = False
    real = None
    default_factory = None       # a defaultdict's (dict or list)

    def __init__(self, items, source=None):
        self.items = dict(items)     # constant key -> VT
        self.source = source

    def python_type(self):
        return dict

    def truth(self, tx):
        return len(self.items) > 0

    def unpack(self, tx):
        return [ConstVar(k) for k in self.constant_keys()]

    def constant_keys(self):
        if any(isinstance(k, _C.Tensor) for k in self.items):
            raise Unsupported("the keys of a dict keyed by tensors")
        return list(self.items)

    def getattr(self, tx, name):
        if name in _DICT_METHODS:
            return BuiltinMethodVar(self, name)
        raise Unsupported(f"attribute {name!r} of a dict")


class IteratorVar(VariableTracker):
    """An iterator over known items. Over a list it is live, as Python's list iterator:
    items the loop appends are reached too; over a dict, a change of its size while
    iterating is Python's RuntimeError (the frame falls back)."""

    def __init__(self, items, over=None):
        self.over = over
        self.items = over.items if isinstance(over, ListVar) else list(items)
        self.size = len(over.items) if isinstance(over, DictVar) else None
        self.pos = 0

    def next(self):
        if self.size is not None and len(self.over.items) != self.size:
            raise Unsupported("dictionary changed size during iteration")
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
    """A closure cell created by the interpreted code (MAKE_CELL) or captured from one
    (real: the cell object, whose writes are replayed after the graph)."""

    def __init__(self, content=None, real=None):
        self.content = content
        self.real = real
        self.mutated = False


class ObjectVar(ValueVar):
    """A real Python object used as is (guarded by identity): classes, plain objects.
    Attribute writes of the interpreted code are kept in tx.output.side_effects (read
    back by later reads) and replayed after the graph; once written, the object is no
    longer a constant."""

    @property
    def real(self):
        return self.value

    def python_type(self):
        return type(self.value)

    def is_constant(self):
        return not getattr(self, "written", False)

    def as_constant(self):
        if getattr(self, "written", False):
            raise Unsupported(f"{type(self.value).__name__} object whose attributes the "
                              "compiled code wrote, used as a value")
        return self.value

    def getattr(self, tx, name):
        pending = tx.output.side_effects.read_attr(self, name)
        if pending is not None:
            return pending
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
            from .stdlib import (NOT_HANDLED, construct_grad_mode, construct_module,
                                 construct_namedtuple, construct_object,
                                 construct_value_object)
            made = construct_grad_mode(tx, self.value, args, kwargs)
            if made is not NOT_HANDLED:
                return made
            made = construct_value_object(tx, self.value, args, kwargs)
            if made is not NOT_HANDLED:
                return made
            made = construct_namedtuple(tx, self.value, args, kwargs)
            if made is not NOT_HANDLED:
                return made
            made = construct_module(tx, self.value, args, kwargs)
            if made is not NOT_HANDLED:
                return made
            made = construct_object(tx, self, args, kwargs)
            if made is not NOT_HANDLED:
                return made
            raise Unsupported(f"constructing {self.value.__name__} objects")
        call = _class_attr(type(self.value), "__call__")
        if isinstance(call, types.FunctionType):     # an instance with a Python __call__
            return BoundMethodVar(call, self).call(tx, args, kwargs)
        raise Unsupported(f"calling {self.value!r}")

    def truth(self, tx):
        return bool(self.value)


class NewObjectVar(ObjectVar):
    """An instance of a plain Python class made by the frame (a dataclass, a context
    manager, a small record; stdlib.construct_object). `value` is a bare instance made
    at capture (object.__new__, never initialised) that stands for its identity and
    class; its attributes are the frame's writes (side_effects.attrs), and class
    attributes resolve statically (methods and property getters inlined with this
    object as self). The frame program makes a new instance per call and sets those
    attributes on it, when the object leaves the frame (returned, stored, passed to a
    resume function: program.py)."""

    def __init__(self, value, cls_var):
        super().__init__(value, None)
        self.cls_var = cls_var
        self.written = True           # never a constant

    made_by_frame_object = True       # (side_effects: its attributes are all the frame's)

    def getattr(self, tx, name):
        pending = tx.output.side_effects.read_attr(self, name)
        if pending is not None:
            return pending
        if name == "__class__":
            return self.cls_var
        if name == "__dict__":
            raise Unsupported("the __dict__ of an object the compiled code made")
        attr = _class_attr(type(self.value), name)
        if attr is _MISSING:
            raise Unsupported(f"attribute error: {type(self.value).__name__!r} object "
                              f"has no attribute {name!r}")
        if isinstance(attr, types.FunctionType):
            return BoundMethodVar(attr, self)
        if isinstance(attr, property) and isinstance(attr.fget, types.FunctionType):
            return BoundMethodVar(attr.fget, self).call(tx, [], {})
        if isinstance(attr, staticmethod) and isinstance(attr.__func__, types.FunctionType):
            return FunctionVar(attr.__func__)
        if isinstance(attr, classmethod) and isinstance(attr.__func__, types.FunctionType):
            return BoundMethodVar(attr.__func__, self.cls_var)
        if _is_data_descriptor(attr) or hasattr(type(attr), "__get__"):
            raise Unsupported(f"attribute {name!r} of {type(self.value).__name__}, a "
                              f"{type(attr).__name__}")
        return self.cls_var.getattr(tx, name)     # a class attribute, through the class


class PythonModuleVar(ObjectVar):
    """A Python module (ember, math, ember.nn.functional). Its attributes are its
    globals: writes go to tx.output.side_effects as writes of that globals dict, so the
    module's own functions, inlined, read them back."""

    def is_constant(self):
        return True

    def as_constant(self):
        return self.value

    def getattr(self, tx, name):
        pending = tx.output.side_effects.read_global(self.value.__dict__, name)
        if pending is not None:
            return pending
        return ObjectVar.getattr(self, tx, name)


class OpVar(ValueVar):
    """An ember op (a C Op object): calling it records a call_function node."""

    def call(self, tx, args, kwargs):
        return tx.call_op(self.value, args, kwargs)


class FunctionVar(ValueVar):
    """A Python function, inlined when called. closure: CellVars, or None for the
    function's own real cells."""

    def __init__(self, fn, source=None, closure=None, defaults=None, kwdefaults=None):
        super().__init__(fn, source)
        self.closure = closure
        self.defaults = defaults
        self.kwdefaults = kwdefaults

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
            return _list_method(tx, obj, name, args, kwargs)
        if isinstance(obj, DictVar):
            return _dict_method(tx, obj, name, args, kwargs)
        if name in ("count", "index") and isinstance(obj, SequenceVar) and not kwargs:
            return _seq_query(obj, name, args)
        raise Unsupported(f"{type(obj).__name__}.{name}")


def _const(v, what):
    if not v.is_constant():
        raise Unsupported(f"{what} with a non-constant argument")
    return v.as_constant()


def _seq_query(obj, name, args):
    consts = [_const(i, f"{name}() over items") for i in obj.items]
    return ConstVar(getattr(consts, name)(*[_const(a, name) for a in args]))


def _same(a, b):
    """Python's == of two list items as list.remove/index see it (identity first)."""
    if a is b:
        return True
    if a.is_constant() and b.is_constant():
        return bool(a.as_constant() == b.as_constant())
    raise Unsupported("comparing list items that are not constants")


def _list_method(tx, obj, name, args, kwargs):
    items = obj.items
    if name in ("index", "count") and not kwargs:
        return _seq_query(obj, name, args)
    if name == "copy" and not args and not kwargs:
        return ListVar(list(items))
    mutate = tx.output.side_effects.mutate
    if kwargs and name != "sort":
        raise Unsupported(f"list.{name} with keyword arguments")
    if name == "append" and len(args) == 1:
        mutate(obj)
        items.append(args[0])
    elif name == "extend" and len(args) == 1:
        new = args[0].unpack(tx)
        mutate(obj)
        items.extend(new)
    elif name == "insert" and len(args) == 2:
        i = _const(args[0], "list.insert")
        mutate(obj)
        items.insert(i, args[1])
    elif name == "pop" and len(args) <= 1:
        i = _const(args[0], "list.pop") if args else -1
        if not isinstance(i, int) or not -len(items) <= i < len(items):
            raise Unsupported("list.pop raised IndexError")
        mutate(obj)
        return items.pop(i)
    elif name == "remove" and len(args) == 1:
        for k, item in enumerate(items):
            if _same(item, args[0]):
                mutate(obj)
                del items[k]
                return ConstVar(None)
        raise Unsupported("list.remove raised ValueError")
    elif name == "clear" and not args:
        mutate(obj)
        items.clear()
    elif name == "reverse" and not args:
        mutate(obj)
        items.reverse()
    elif name == "sort" and not args and set(kwargs) <= {"key", "reverse"}:
        key = kwargs.get("key")
        if key is not None and isinstance(key, ConstVar) and key.value is None:
            key = None
        rev = _const(kwargs["reverse"], "list.sort") if "reverse" in kwargs else False
        # the key function runs once per item, in order, as list.sort calls it
        values = [_const(key.call(tx, [i], {}) if key is not None else i,
                         "list.sort over items") for i in items]
        try:
            order = sorted(range(len(values)), key=values.__getitem__, reverse=bool(rev))
        except TypeError as e:
            raise Unsupported(f"list.sort raised {e!r}") from None
        mutate(obj)
        items[:] = [items[k] for k in order]
    else:
        raise Unsupported(f"list.{name} with {len(args)} arguments")
    return ConstVar(None)


def _dict_pairs(tx, other):
    if isinstance(other, DictVar):
        return list(other.items.items())
    pairs = []
    for p in other.unpack(tx):
        kv = p.unpack(tx)
        if len(kv) != 2:
            raise Unsupported("dict.update with a sequence of non-pairs")
        pairs.append((_const(kv[0], "a dict key"), kv[1]))
    return pairs


def _dict_method(tx, obj, name, args, kwargs):
    items = obj.items
    if name in ("items", "keys"):
        obj.constant_keys()
    if name in ("items", "keys", "values") and not args and not kwargs:
        if name == "items":
            return ListVar([TupleVar([ConstVar(k), v]) for k, v in items.items()])
        if name == "keys":
            return ListVar([ConstVar(k) for k in items])
        return ListVar(list(items.values()))
    if name == "get" and 1 <= len(args) <= 2 and not kwargs:
        key = _const(args[0], "dict.get")
        return items.get(key, args[1] if len(args) > 1 else ConstVar(None))
    if name == "copy" and not args and not kwargs:
        return DictVar(dict(items))
    mutate = tx.output.side_effects.mutate
    if name == "update" and len(args) <= 1:
        pairs = _dict_pairs(tx, args[0]) if args else []
        mutate(obj)
        for k, v in pairs + list(kwargs.items()):
            items[k] = v
        return ConstVar(None)
    if kwargs:
        raise Unsupported(f"dict.{name} with keyword arguments")
    if name == "pop" and 1 <= len(args) <= 2:
        key = _const(args[0], "dict.pop")
        if key not in items:
            if len(args) == 1:
                raise Unsupported(f"dict.pop raised KeyError({key!r})")
            return args[1]
        mutate(obj)
        return items.pop(key)
    if name == "setdefault" and 1 <= len(args) <= 2:
        key = _const(args[0], "dict.setdefault")
        if key in items:
            return items[key]
        mutate(obj)
        items[key] = args[1] if len(args) > 1 else ConstVar(None)
        return items[key]
    if name == "clear" and not args:
        mutate(obj)
        items.clear()
        return ConstVar(None)
    if name == "popitem" and not args:
        if not items:
            raise Unsupported("dict.popitem raised KeyError")
        mutate(obj)
        k, v = items.popitem()
        return TupleVar([ConstVar(k), v])
    raise Unsupported(f"dict.{name} with {len(args)} arguments")


_MISSING = object()


def _class_attr(cls, name):
    """What type lookup finds for name (the MRO's dicts, not the metaclass)."""
    for klass in cls.__mro__:
        if name in klass.__dict__:
            return klass.__dict__[name]
    return _MISSING


def _is_data_descriptor(attr):
    t = type(attr)
    return hasattr(t, "__set__") or hasattr(t, "__delete__")


class ModuleVar(ValueVar):
    """An ember.nn.Module instance: attributes resolve to its parameters, buffers and
    submodules (with sources that read their dicts directly); calling it inlines the
    class's forward."""

    def __init__(self, module, source=None):
        super().__init__(module, source)
        self.written = False     # the frame assigned one of its attributes

    @property
    def real(self):
        return self.value

    def python_type(self):
        return type(self.value)

    def compiled_original(self, tx):
        """For what ember.compile(module) returned (an OptimizedModule): the module it
        wraps, which the interpreter uses in its place (compiling inside a compiled
        region inlines, as torch.compile does); else None."""
        from . import api
        if api._OPTIMIZED is None or type(self.value) is not api._OPTIMIZED:
            return None
        return ModuleVar.getattr(self, tx, "_orig_mod", delegate=False)

    def getattr(self, tx, name, delegate=True):
        """Python's attribute lookup on an nn.Module: data descriptors of the class, the
        instance dict, class attributes (methods, constants), then Module.__getattr__
        (parameters, buffers, submodules); the frame's own writes first."""
        m = self.value
        src = self.source
        d = object.__getattribute__(m, "__dict__")
        if delegate and name != "_orig_mod":
            orig = self.compiled_original(tx)
            if orig is not None:
                return orig.getattr(tx, name)
        pending = tx.output.side_effects.read_attr(self, name)
        if pending is not None:
            return pending
        attr_src = AttrSource(src, name) if src is not None else None
        cls_attr = _class_attr(type(m), name)
        if cls_attr is not _MISSING and _is_data_descriptor(cls_attr):
            if isinstance(cls_attr, property):
                if isinstance(cls_attr.fget, types.FunctionType):
                    return BoundMethodVar(cls_attr.fget, self).call(tx, [], {})
                raise Unsupported(f"property {name!r} of {type(m).__name__} without a "
                                  "Python getter")
            return self._real_attr(tx, name, attr_src)
        if name in d:
            return tx.wrap(d[name], attr_src)
        if name in ("keys", "values", "items") and self._container() == "dict":
            return _ModuleDictMethod(self, name)
        if cls_attr is not _MISSING:
            from .stdlib import module_iter
            it = module_iter(self, name, cls_attr)
            if it is not None:
                return it
            if isinstance(cls_attr, types.FunctionType):
                return BoundMethodVar(cls_attr, self)
            if isinstance(cls_attr, staticmethod) and \
                    isinstance(cls_attr.__func__, types.FunctionType):
                return FunctionVar(cls_attr.__func__)
            if isinstance(cls_attr, classmethod) and \
                    isinstance(cls_attr.__func__, types.FunctionType):
                return BoundMethodVar(cls_attr.__func__, tx.wrap(type(m), None))
            if is_constant(cls_attr):
                return ConstVar(cls_attr)
            return self._real_attr(tx, name, attr_src)
        for store in ("_parameters", "_buffers", "_modules"):
            table = d.get(store)
            if table is not None and name in table:
                value = table[name]
                return tx.wrap(value, DictSource(AttrSource(src, store), name)
                               if src is not None else None)
        return self._real_attr(tx, name, attr_src)

    def _real_attr(self, tx, name, attr_src):
        try:
            value = getattr(self.value, name)
        except AttributeError as e:
            raise Unsupported(f"attribute error: {e}") from None
        if isinstance(value, types.MethodType) and value.__self__ is self.value and \
                isinstance(value.__func__, types.FunctionType):
            return BoundMethodVar(value.__func__, self)
        return tx.wrap(value, attr_src)

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
            from ..nn.modules.container import Sequential
            if type(self.value) is Sequential:     # a subclass may have its own forward
                from .stdlib import SequentialSliceVar
                return SequentialSliceVar(self.unpack(tx)[k])
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


class BuiltinVar(ValueVar):
    """A builtin or operator-module function: folded on constants, recorded on tensors."""

    def call(self, tx, args, kwargs):
        return tx.call_builtin(self.value, args, kwargs)

    def getattr(self, tx, name):
        import itertools
        if (self.value, name) in ((dict, "fromkeys"), (itertools.chain, "from_iterable"),
                                  (object, "__setattr__")):
            return BuiltinVar(getattr(self.value, name))
        raise Unsupported(f"attribute {name!r} of {self.value!r}")


def constant_args(args, kwargs):
    """Python values of args/kwargs if all are constants, else None."""
    if all(a.is_constant() for a in args) and all(v.is_constant() for v in kwargs.values()):
        return [a.as_constant() for a in args], {k: v.as_constant() for k, v in kwargs.items()}
    return None


PURE_BUILTINS = {
    len, abs, min, max, int, float, bool, str, round, divmod, pow, sum, isinstance,
    issubclass, hasattr, getattr, tuple, list, dict, range, enumerate, zip, reversed,
    sorted, any, all, type, id, callable, hash, repr, slice, ord, chr, hex, bin, oct, ascii,
    format, frozenset,
    *[getattr(operator, n) for n in dir(operator) if not n.startswith("_")],
    *[getattr(math, n) for n in dir(math) if callable(getattr(math, n))],
}
