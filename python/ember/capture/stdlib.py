"""Python's builtins and standard library on symbolic values: what the interpreter runs
itself rather than folding on constants (TorchDynamo's builtin and itertools variables).

- Lazy iterators (LazyIteratorVar): map, filter, itertools.chain/islice/product/
  accumulate/zip_longest/repeat run the real itertools machinery over VTs, so items are
  produced when the frame asks for them, as CPython does (a map's function runs at the
  loop's step, not at map()); iter() and next().
- functools.reduce and functools.partial (PartialVar); operator.itemgetter/attrgetter
  (GetterVar); min/max with a key; callable(); dict(...) and dict.fromkeys; list.sort's
  key.
- Sets of constants (SetVar): built (BUILD_SET, set(...)), mutated (add, discard, update,
  ...), combined (& | - ^), compared, tested with `in`. A set holding a tensor, or one the
  frame returns, falls back.
- Methods of immutable constants (str.split, tuple.index, ...) run on the constants.
- Structural comparison of containers whose leaves are constants.

Anything else raises Unsupported, so the frame runs eagerly.
"""
from __future__ import annotations

import abc
import functools
import itertools
import operator
import types

from .. import _C, fx
from . import tensor_data
from .exc import Unsupported
from .source import AttrSource
from .sym_floats import FloatVar
from .variables import (BoundMethodVar, BuiltinVar, ConstVar, DictVar, FunctionVar,
                        IteratorVar, ListVar, ModuleVar, ObjectVar, OpVar, PythonModuleVar,
                        SequenceVar, TensorVar, TupleVar, VariableTracker, _MISSING,
                        is_constant)

NOT_HANDLED = object()


# ------------------------------------------------------------------ iterators

class LazyIteratorVar(IteratorVar):
    """An iterator whose items a real Python iterator over VTs produces on demand."""

    def __init__(self, it, frame=None):
        self.it = it
        self.frame = frame       # a generator function's Translator (its return value)
        self.over = None
        self.items = []
        self.size = None
        self.pos = 0

    def next(self):
        try:
            return next(self.it)
        except StopIteration:
            return None

    def unpack(self, tx):
        out = []
        while (v := self.next()) is not None:
            out.append(v)
        return out

    def getattr(self, tx, name):
        if name == "throw" and self.frame is not None:
            return GeneratorThrowVar(self)
        return super().getattr(tx, name)


class GeneratorThrowVar(VariableTracker):
    """gen.throw(...) of a generator function's frame (contextlib's __exit__ for an
    exception leaving the block): the exception is raised in the frame at the yield it
    is suspended at, and goes to the frame's handler there (its `except`/`finally`), as
    CPython's throw() does; the next value the frame yields is throw()'s result, its
    return is StopIteration, an exception it lets out comes out of throw(). A frame not
    started or finished raises it at once, as a real generator."""

    def __init__(self, gen):
        self.gen = gen

    def call(self, tx, args, kwargs):
        from .symbolic import PyException
        exc = args[1] if len(args) >= 2 and not kwargs else \
            args[0] if len(args) == 1 and not kwargs else None
        if not isinstance(exc, ObjectVar) or not isinstance(exc.value, BaseException) \
                or len(args) >= 2 and not (args[0].is_constant() and
                                           args[0].as_constant() is type(exc.value)):
            raise Unsupported("generator.throw() with these arguments")
        try:
            return self.gen.it.throw(PyException(exc))
        except StopIteration as stop:
            # the frame returned: StopIteration with its return value
            value = stop.value.as_constant() if stop.value is not None else None
            raise PyException.of(StopIteration(value)) from None


def make_iter(tx, v):
    """iter(v): lists iterate live (items appended meanwhile are reached), as CPython's."""
    if isinstance(v, IteratorVar):
        return v
    return IteratorVar(v.unpack(tx), over=v if isinstance(v, (ListVar, DictVar)) else None)


def _items(it):
    """A real iterator over an IteratorVar's items."""
    while (v := it.next()) is not None:
        yield v


def _late(tx, v):
    """Items of v, iter(v) taken at the first request (itertools.chain's order)."""
    yield from _items(make_iter(tx, v))


def _consts(args, what):
    if not all(a.is_constant() for a in args):
        raise Unsupported(f"{what} with non-constant arguments")
    return [a.as_constant() for a in args]


class PartialVar(VariableTracker):
    """functools.partial(func, *args, **kwargs) made by the frame."""

    def __init__(self, func, args, kwargs):
        self.func = func
        self.args = list(args)
        self.kwargs = dict(kwargs)

    def python_type(self):
        return functools.partial

    def call(self, tx, args, kwargs):
        return self.func.call(tx, self.args + list(args), {**self.kwargs, **kwargs})

    def getattr(self, tx, name):
        if name == "func":
            return self.func
        if name == "args":
            return TupleVar(list(self.args))
        if name == "keywords":
            return DictVar(dict(self.kwargs))
        raise Unsupported(f"attribute {name!r} of a functools.partial")


class GetterVar(VariableTracker):
    """operator.itemgetter / attrgetter over constant keys."""

    def __init__(self, kind, keys):
        self.kind = kind
        self.keys = keys

    def python_type(self):
        return self.kind

    def _one(self, tx, obj, key):
        if self.kind is operator.itemgetter:
            return tx.subscript(obj, ConstVar(key))
        for part in key.split("."):
            obj = obj.getattr(tx, part)
        return obj

    def call(self, tx, args, kwargs):
        if len(args) != 1 or kwargs:
            raise Unsupported(f"{self.kind.__name__} called with {len(args)} arguments")
        vals = [self._one(tx, args[0], k) for k in self.keys]
        return vals[0] if len(vals) == 1 else TupleVar(vals)


# ------------------------------------------------------------------ sets

class SetVar(VariableTracker):
    """A set of constants made by the frame: a real set, changed by the same operations
    in the same order as eager's, so its iteration order is eager's too."""

    def __init__(self, values):
        self.values = values

    def python_type(self):
        return set

    def truth(self, tx):
        return bool(self.values)

    def unpack(self, tx):
        return [ConstVar(v) for v in self.values]

    def getattr(self, tx, name):
        if name in _SET_METHODS:
            return _SetMethodVar(self, name)
        raise Unsupported(f"attribute {name!r} of a set")

    def __repr__(self):
        return f"SetVar({self.values!r})"


_SET_MUTATORS = {"add", "discard", "remove", "update", "clear", "intersection_update",
                 "difference_update", "symmetric_difference_update"}
_SET_METHODS = _SET_MUTATORS | {"union", "intersection", "difference",
                                "symmetric_difference", "issubset", "issuperset",
                                "isdisjoint", "copy"}


def set_values(tx, v, what="a set"):
    """The Python values of v's items (all constants), for set operations."""
    if isinstance(v, SetVar):
        return v.values
    if v.is_constant() and isinstance(v.as_constant(), (frozenset, tuple, str, range)):
        return v.as_constant()
    items = v.unpack(tx)
    if not all(i.is_constant() for i in items):
        raise Unsupported(f"{what} of items that are not constants")
    try:
        return [i.as_constant() for i in items if hash(i.as_constant()) is not None]
    except TypeError as e:
        raise Unsupported(f"{what}: {e}") from None


class _SetMethodVar(VariableTracker):
    def __init__(self, sv, name):
        self.sv = sv
        self.name = name

    def call(self, tx, args, kwargs):
        if kwargs:
            raise Unsupported(f"set.{self.name} with keyword arguments")
        name = self.name
        if name in ("add", "discard", "remove"):
            if len(args) != 1:
                raise Unsupported(f"set.{name} with {len(args)} arguments")
            vals = [_consts(args, f"set.{name}")[0]]
        else:
            vals = [set_values(tx, a, f"set.{name}") for a in args]
        try:
            result = getattr(self.sv.values, name)(*vals)
        except Exception as e:   # noqa: BLE001 - eager raises it: run eager
            raise Unsupported(f"set.{name} raised {e!r}") from None
        if isinstance(result, set):
            return SetVar(result)
        return ConstVar(result)


_SET_BINARY = {operator.and_, operator.or_, operator.sub, operator.xor, operator.iand,
               operator.ior, operator.isub, operator.ixor}
_SET_COMPARE = {operator.eq, operator.ne, operator.lt, operator.le, operator.gt, operator.ge}


def set_binary(tx, fn, a, b):
    if fn not in _SET_BINARY and fn not in _SET_COMPARE:
        raise Unsupported(f"{fn.__name__} of {a} and {b}")
    if not (isinstance(a, SetVar) or a.is_constant()) or \
            not (isinstance(b, SetVar) or b.is_constant()):
        raise Unsupported(f"{fn.__name__} of {a} and {b}")
    av = a.values if isinstance(a, SetVar) else a.as_constant()
    bv = b.values if isinstance(b, SetVar) else b.as_constant()
    try:
        result = fn(av, bv)     # in-place operators change a.values, as eager's set
    except Exception as e:   # noqa: BLE001
        raise Unsupported(f"{fn.__name__} raised {e!r}") from None
    if isinstance(result, set):
        return a if result is av else SetVar(result)
    if is_constant(result):
        return ConstVar(result)
    raise Unsupported(f"{fn.__name__} of sets gave a {type(result).__name__}")


# ------------------------------------------------------------------ plain values

def plain_value(v):
    """The Python value of a container whose leaves are constants (for ==, <)."""
    if v.is_constant():
        return v.as_constant()
    if isinstance(v, SetVar):
        return set(v.values)
    if isinstance(v, TupleVar) and v.tuple_type is tuple:
        return tuple(plain_value(i) for i in v.items)
    if isinstance(v, ListVar):
        return [plain_value(i) for i in v.items]
    if isinstance(v, DictVar):
        return {k: plain_value(i) for k, i in v.items.items()}
    raise Unsupported(f"comparing {v}, which holds more than constants")


# ------------------------------------------------------------------ methods of constants

_IMMUTABLE = (str, bytes, tuple, int, float, complex, bool, frozenset, range)


class ConstMethodVar(VariableTracker):
    """A method of an immutable constant (str.split, tuple.index): run on constants."""

    def __init__(self, method):
        self.method = method

    def call(self, tx, args, kwargs):
        if self.method.__name__ == "join" and len(args) == 1 and \
                not args[0].is_constant():
            args = [ConstVar(tuple(_consts(args[0].unpack(tx), "str.join")))]
        cargs = _consts(list(args) + list(kwargs.values()), self.method.__name__)
        try:
            value = self.method(*cargs[:len(args)], **dict(zip(kwargs, cargs[len(args):])))
        except Exception as e:   # noqa: BLE001
            raise Unsupported(f"{self.method.__name__} raised {e!r}") from None
        return tx.wrap_constant_result(value)


def const_method(value, name):
    """ConstMethodVar for a builtin method of an immutable constant, else None."""
    if not isinstance(value, _IMMUTABLE) or name.startswith("_"):
        return None
    attr = getattr(value, name, None)
    if isinstance(attr, types.BuiltinMethodType) and attr.__self__ is value:
        return ConstMethodVar(attr)
    return None


# ------------------------------------------------------------------ calls

def _is_callable(v):
    if isinstance(v, (FunctionVar, BoundMethodVar, BuiltinVar, OpVar, ModuleVar, PartialVar,
                      GetterVar, ConstMethodVar, SequentialSliceVar)):
        return True
    if isinstance(v, (TensorVar, SequenceVar, DictVar, SetVar, IteratorVar)):
        return False
    if isinstance(v, (ConstVar, ObjectVar)):
        return callable(v.value)
    raise Unsupported(f"callable() of {v}")


def _keyed(tx, fn, args, kwargs):
    """min/max(iterable, key=..., default=...) with a key function run by the frame."""
    items = args[0].unpack(tx)
    key = kwargs.get("key")
    keyvals = []
    for i in items:
        k = key.call(tx, [i], {}) if key is not None and not \
            (key.is_constant() and key.as_constant() is None) else i
        if not k.is_constant():
            raise Unsupported(f"{fn.__name__}() with keys that are not constants")
        keyvals.append(k.as_constant())
    if not items:
        if "default" in kwargs:
            return kwargs["default"]
        raise Unsupported(f"{fn.__name__}() of an empty sequence")
    try:
        best = fn(range(len(items)), key=keyvals.__getitem__)
    except TypeError as e:
        raise Unsupported(f"{fn.__name__}() raised {e!r}") from None
    return items[best]


def _dict_of(tx, args, kwargs):
    from .variables import _dict_pairs
    if len(args) > 1:
        raise Unsupported("dict() with more than one positional argument")
    pairs = _dict_pairs(tx, args[0]) if args else []
    d = {}
    for k, v in pairs + list(kwargs.items()):
        d[k] = v
    return DictVar(d)


def _binary_fn(tx, f):
    if f is None:
        return lambda a, b: tx.binary(operator.add, a, b)
    if isinstance(f, BuiltinVar) and f.value in _OPERATOR_BINARY:
        op = f.value
        return lambda a, b: tx.binary(op, a, b)
    return lambda a, b: f.call(tx, [a, b], {})


_OPERATOR_BINARY = {operator.add, operator.mul, operator.sub, operator.truediv,
                    operator.floordiv, operator.mod, operator.pow, operator.and_,
                    operator.or_, operator.xor, operator.matmul}


def call(tx, fn, args, kwargs):
    """The result VT of builtin `fn`, or NOT_HANDLED (the caller's rules apply)."""
    if any(fn is f for f in tensor_data.functions()):
        return tensor_data.call(tx, fn, args, kwargs)
    if fn is iter and len(args) == 1 and not kwargs:
        return make_iter(tx, args[0])
    if fn is next and 1 <= len(args) <= 2 and not kwargs:
        it = args[0]
        if not isinstance(it, IteratorVar):
            raise Unsupported(f"next() of {it}")
        v = it.next()
        if v is None:
            if len(args) == 2:
                return args[1]
            from .symbolic import PyException
            raise PyException.of(StopIteration())
        return v
    if fn is map and len(args) >= 2 and not kwargs:
        f = args[0]
        its = [make_iter(tx, a) for a in args[1:]]

        def gen():
            while True:
                vals = []
                for it in its:
                    v = it.next()
                    if v is None:
                        return
                    vals.append(v)
                yield f.call(tx, vals, {})
        return LazyIteratorVar(gen())
    if fn is filter and len(args) == 2 and not kwargs:
        f, it = args[0], make_iter(tx, args[1])
        plain = f.is_constant() and f.as_constant() is None

        def gen():
            for v in _items(it):
                if (v if plain else f.call(tx, [v], {})).truth(tx):
                    yield v
        return LazyIteratorVar(gen())
    if fn is enumerate and set(kwargs) == {"start"} and len(args) == 1:
        start = _consts([kwargs["start"]], "enumerate")[0]
        return ListVar([TupleVar([ConstVar(i + start), v])
                        for i, v in enumerate(args[0].unpack(tx))])
    if fn in (min, max) and len(args) == 1 and kwargs and set(kwargs) <= {"key", "default"}:
        return _keyed(tx, fn, args, kwargs)
    if fn is sorted and len(args) == 1 and set(kwargs) <= {"key", "reverse"} and \
            isinstance(kwargs.get("key"), (FunctionVar, BoundMethodVar, PartialVar)):
        # the key runs inlined, once per item in order (never for real at capture time)
        items = args[0].unpack(tx)
        keyvals = _consts([kwargs["key"].call(tx, [i], {}) for i in items], "sorted() keys")
        rev = _consts([kwargs["reverse"]], "sorted()")[0] if "reverse" in kwargs else False
        try:
            order = sorted(range(len(items)), key=keyvals.__getitem__, reverse=bool(rev))
        except TypeError as e:
            raise Unsupported(f"sorted() raised {e!r}") from None
        return ListVar([items[k] for k in order])
    if fn is operator.getitem and len(args) == 2 and not kwargs:
        return tx.subscript(args[0], args[1])
    if fn is object.__setattr__ and len(args) == 3 and not kwargs:
        return object_setattr(tx, args)
    if fn is callable and len(args) == 1 and not kwargs:
        return ConstVar(_is_callable(args[0]))
    if fn is len and len(args) == 1 and isinstance(args[0], SetVar):
        return ConstVar(len(args[0].values))
    if fn is len and len(args) == 1 and isinstance(args[0], SequentialSliceVar):
        return ConstVar(len(args[0].items))
    if fn is _C.is_grad_enabled and not args and not kwargs:
        return ConstVar(_C.is_grad_enabled())    # the mode where the frame is now
    if fn is super and not kwargs:
        return make_super(tx, args)
    if fn is set and not kwargs and len(args) <= 1:
        return SetVar(set(set_values(tx, args[0], "set()")) if args else set())
    if fn is frozenset and not kwargs and len(args) == 1 and not args[0].is_constant():
        return ConstVar(frozenset(set_values(tx, args[0], "frozenset()")))
    if fn is dict and args:
        return _dict_of(tx, args, kwargs)
    if getattr(fn, "__self__", None) is dict and getattr(fn, "__name__", "") == "fromkeys":
        if kwargs or not 1 <= len(args) <= 2:
            raise Unsupported("dict.fromkeys with these arguments")
        value = args[1] if len(args) == 2 else ConstVar(None)
        keys = _consts(args[0].unpack(tx), "dict.fromkeys")
        return DictVar({k: value for k in keys})
    if fn is functools.reduce and 2 <= len(args) <= 3 and not kwargs:
        f = _binary_fn(tx, args[0])
        it = make_iter(tx, args[1])
        acc = args[2] if len(args) == 3 else it.next()
        if acc is None:
            raise Unsupported("reduce() of an empty iterable with no initial value")
        for v in _items(it):
            acc = f(acc, v)
        return acc
    if fn is functools.partial and args:
        return PartialVar(args[0], args[1:], kwargs)
    if fn in (operator.itemgetter, operator.attrgetter) and args and not kwargs:
        keys = _consts(args, fn.__name__)
        if fn is operator.attrgetter and not all(isinstance(k, str) for k in keys):
            raise Unsupported("attrgetter with names that are not strings")
        return GetterVar(fn, keys)
    return _itertools(tx, fn, args, kwargs)


def _itertools(tx, fn, args, kwargs):
    if fn is itertools.chain and not kwargs:
        return LazyIteratorVar(itertools.chain(*[_late(tx, a) for a in args]))
    if getattr(fn, "__self__", None) is itertools.chain and \
            getattr(fn, "__name__", "") == "from_iterable" and len(args) == 1 and not kwargs:
        outer = make_iter(tx, args[0])
        return LazyIteratorVar(v for a in _items(outer) for v in _late(tx, a))
    if fn is itertools.islice and 2 <= len(args) <= 4 and not kwargs:
        bounds = _consts(args[1:], "islice")
        return LazyIteratorVar(itertools.islice(_items(make_iter(tx, args[0])), *bounds))
    if fn is itertools.product and set(kwargs) <= {"repeat"}:
        repeat = _consts([kwargs["repeat"]], "product")[0] if kwargs else 1
        pools = [a.unpack(tx) for a in args]
        return LazyIteratorVar(TupleVar(list(t))
                               for t in itertools.product(*pools, repeat=repeat))
    if fn is itertools.accumulate and 1 <= len(args) <= 2 and set(kwargs) <= {"initial",
                                                                             "func"}:
        f = args[1] if len(args) == 2 else kwargs.get("func")
        initial = kwargs.get("initial")
        if initial is not None and initial.is_constant() and initial.as_constant() is None:
            initial = None
        return LazyIteratorVar(itertools.accumulate(
            _items(make_iter(tx, args[0])), _binary_fn(tx, f), initial=initial))
    if fn is itertools.zip_longest and set(kwargs) <= {"fillvalue"}:
        fill = kwargs.get("fillvalue", ConstVar(None))
        its = [_items(make_iter(tx, a)) for a in args]
        return LazyIteratorVar(TupleVar(list(t))
                               for t in itertools.zip_longest(*its, fillvalue=fill))
    if fn is itertools.repeat and len(args) + len(kwargs) == 2 and set(kwargs) <= {"times"}:
        times = _consts([args[1] if len(args) == 2 else kwargs["times"]], "repeat")[0]
        return LazyIteratorVar(itertools.repeat(args[0], times))
    return NOT_HANDLED


_HANDLED_TYPES = (functools.partial, itertools.chain, itertools.islice, itertools.product,
                  itertools.accumulate, itertools.zip_longest, itertools.repeat,
                  operator.itemgetter, operator.attrgetter, map, filter, set, frozenset,
                  object.__setattr__)


def handled(value) -> bool:
    """Whether wrap() should give `value` a BuiltinVar (its calls come here)."""
    return any(value is t for t in _HANDLED_TYPES) or value is functools.reduce or \
        any(value is f for f in tensor_data.functions())


# ------------------------------------------------------------------ classes

class SuperVar(VariableTracker):
    """super(cls, obj) / zero-argument super() over a module or plain object: attribute
    lookup starts after cls in type(obj).__mro__."""

    def __init__(self, cls, obj):
        self.cls = cls
        self.obj = obj

    def getattr(self, tx, name):
        real = getattr(self.obj, "value", None)
        if not isinstance(self.obj, (ModuleVar, ObjectVar)) or isinstance(real, type) or \
                isinstance(self.obj, PythonModuleVar):
            raise Unsupported(f"super() over {self.obj}")
        mro = type(real).__mro__
        if self.cls not in mro:
            raise Unsupported("super(type, obj): obj is not an instance of type")
        for klass in mro[mro.index(self.cls) + 1:]:
            if name not in klass.__dict__:
                continue
            attr = klass.__dict__[name]
            if isinstance(attr, types.FunctionType):
                return BoundMethodVar(attr, self.obj)
            if isinstance(attr, staticmethod) and isinstance(attr.__func__,
                                                             types.FunctionType):
                return FunctionVar(attr.__func__)
            if isinstance(attr, classmethod) and isinstance(attr.__func__,
                                                            types.FunctionType):
                return BoundMethodVar(attr.__func__, tx.wrap(type(real), None))
            if is_constant(attr):
                return ConstVar(attr)
            raise Unsupported(f"super().{name}, a {type(attr).__name__}")
        raise Unsupported(f"super() has no attribute {name!r}")


def make_super(tx, args):
    if len(args) == 2:
        cls = args[0].as_constant()
        if not isinstance(cls, type):
            raise Unsupported("super() with a first argument that is not a class")
        return SuperVar(cls, args[1])
    if args:
        raise Unsupported("super() with one argument")
    cell = tx.cells.get("__class__")
    code = tx.code
    if cell is None or code.co_argcount + code.co_kwonlyargcount == 0 or \
            cell.content is None:
        raise Unsupported("zero-argument super() outside a method")
    first = code.co_varnames[0]
    obj = tx.locals.get(first)
    if obj is None and first in tx.cells:
        obj = tx.cells[first].content
    if obj is None:
        raise Unsupported("zero-argument super() without its first argument")
    return SuperVar(cell.content.as_constant(), obj)


_BUILDABLE_MODULE_FILES = ("activation", "flatten", "pooling", "padding", "pixelshuffle",
                           "dropout")


def construct_module(tx, cls, args, kwargs):
    """An ember.nn module without parameters or buffers (nn.Softmax(dim=-1)) built by the
    frame: built here once, its forward inlined. It may not leave the frame."""
    from .symbolic import _module_type
    modname = getattr(cls, "__module__", "") or ""
    if not (issubclass(cls, _module_type()) and modname.startswith("ember.nn.modules.") and
            modname.rpartition(".")[2] in _BUILDABLE_MODULE_FILES):
        return NOT_HANDLED
    cargs = _consts(list(args) + list(kwargs.values()), f"constructing {cls.__name__}")
    try:
        m = cls(*cargs[:len(args)], **dict(zip(kwargs, cargs[len(args):])))
    except Exception as e:   # noqa: BLE001 - eager raises it: run eager
        raise Unsupported(f"constructing {cls.__name__} raised {e!r}") from None
    if any(True for _ in m.parameters()) or any(True for _ in m.buffers()):
        raise Unsupported(f"constructing {cls.__name__}, which holds tensors")
    mv = tx.output.side_effects.track(m, ModuleVar(m, None))
    mv.made_by_frame = True
    return mv


def construct_namedtuple(tx, cls, args, kwargs):
    """A namedtuple (collections.namedtuple, typing.NamedTuple, ember.return_types) made
    by the frame: a TupleVar of that type, its fields bound as the generated __new__ binds
    them. Classes that define their own __new__ or __init__ are not handled."""
    fields = getattr(cls, "_fields", None)
    if not (issubclass(cls, tuple) and isinstance(fields, tuple) and hasattr(cls, "_make")):
        return NOT_HANDLED
    for k in cls.__mro__:
        if "_make" in vars(k):          # the class collections.namedtuple made
            break
        if "__new__" in vars(k) or "__init__" in vars(k):
            return NOT_HANDLED
    if len(args) > len(fields) or any(k not in fields for k in kwargs):
        raise Unsupported(f"constructing {cls.__name__} with arguments it does not take")
    values = dict(zip(fields, args))
    for k, v in kwargs.items():
        if k in values:
            raise Unsupported(f"constructing {cls.__name__}: {k} given twice")
        values[k] = v
    defaults = getattr(cls, "_field_defaults", {})
    items = []
    for f in fields:
        if f in values:
            items.append(values[f])
        elif f in defaults:
            items.append(tx.wrap_constant_result(defaults[f]))
        else:
            raise Unsupported(f"constructing {cls.__name__} without {f}")
    return TupleVar(items, fields=list(fields), tuple_type=cls)


_MODULE_ITERS = {"parameters": "named_parameters", "named_parameters": "named_parameters",
                 "buffers": "named_buffers", "named_buffers": "named_buffers",
                 "children": "named_children", "named_children": "named_children",
                 "modules": "named_modules", "named_modules": "named_modules"}


class ModuleIterVar(VariableTracker):
    """module.parameters() / named_parameters() / buffers() / children() / modules() and
    their named forms: the real module tree names the items; each is then reached
    through attribute lookups (so through the same sources and guards as self.x.y), and
    the parameter, buffer and submodule tables of every module on the way are guarded
    by their keys."""

    def __init__(self, mvar, name):
        self.mvar = mvar
        self.name = name

    def call(self, tx, args, kwargs):
        mvar = self.mvar
        if mvar.source is None:
            raise Unsupported(f"{self.name}() of a module the frame cannot reach again")
        cargs = _consts(list(args) + list(kwargs.values()), f"Module.{self.name}")
        m = mvar.value
        named = _MODULE_ITERS[self.name]
        try:
            names = [n for n, _ in getattr(m, named)(*cargs[:len(args)],
                                                       **dict(zip(kwargs, cargs[len(args):])))]
        except Exception as e:   # noqa: BLE001
            raise Unsupported(f"Module.{self.name} raised {e!r}") from None
        for mod_name, _sub in m.named_modules(remove_duplicate=False):
            sub_vt = self._resolve(tx, mod_name)
            d = object.__getattribute__(sub_vt.value, "__dict__")
            for table in ("_parameters", "_buffers", "_modules"):
                if isinstance(d.get(table), dict):
                    tx.guard("DICT_KEYS", AttrSource(sub_vt.source, table),
                             tuple(d[table].keys()))
        values = [self._resolve(tx, n) for n in names]
        if self.name.startswith("named_"):
            return LazyIteratorVar(iter([TupleVar([ConstVar(n), v])
                                         for n, v in zip(names, values)]))
        return LazyIteratorVar(iter(values))

    def _resolve(self, tx, dotted):
        from .variables import _MISSING, _class_attr
        v = self.mvar
        for part in dotted.split(".") if dotted else []:
            cur = v.value
            if _class_attr(type(cur), part) is not _MISSING or \
                    part in object.__getattribute__(cur, "__dict__"):
                # self.<part> is not the table entry Module.__getattr__ would give
                raise Unsupported(f"{part} of {type(cur).__name__} is shadowed")
            v = v.getattr(tx, part)
            if isinstance(v, ModuleVar) and v.source is None:
                raise Unsupported(f"module {dotted} the frame cannot reach again")
        return v


def module_iter(mvar, name, cls_attr):
    """ModuleIterVar when `name` is nn.Module's own iteration method, else None."""
    if name not in _MODULE_ITERS:
        return None
    from .symbolic import _module_type
    if cls_attr is not _module_type().__dict__.get(name):
        return None
    return ModuleIterVar(mvar, name)


class SequentialSliceVar(VariableTracker):
    """seq[a:b] of an nn.Sequential: a new Sequential of the same submodules, without
    hooks; calling it runs them in order. It may not leave the frame."""

    def __init__(self, items):
        self.items = items

    def python_type(self):
        from ..nn.modules.container import Sequential
        return Sequential

    def unpack(self, tx):
        return list(self.items)

    def call(self, tx, args, kwargs):
        if len(args) != 1 or kwargs:
            raise Unsupported("calling a Sequential with other than one argument")
        x = args[0]
        for m in self.items:
            x = m.call(tx, [x], {})
        return x


# ------------------------------------------------------------------ max() / min()

def min_max_of_tensors(tx, fn, args):
    """Builtin max(a, b, ...) / min(...) or max(iterable) whose items are one-element
    tensors (a tensor's rows included): CPython keeps the first item and takes each
    later one that compares greater (less), so the result is a chain of
    where(b > current, b, current): the value, the dtype and the shape are those of the
    item eager returns, in the graph (TorchDynamo makes a graph op too). Items of other
    sizes (eager's comparison raises) break, counted, and CPython runs its own max.
    Mixed with Python numbers (the result's type would depend on the data), of other
    dtypes or shapes, or requiring grad under grad mode (eager's gradient reaches the
    item taken alone: which inputs get a .grad would depend on the data) it is a
    MinMaxVar, decided where it is used."""
    items = list(args) if len(args) > 1 else args[0].unpack(tx)
    if not any(isinstance(i, TensorVar) for i in items):
        if len(args) == 1 and all(i.is_constant() for i in items):
            return tx.call_builtin(fn, [ListVar(items)], {})
        raise Unsupported(f"{fn.__name__}() over items that are not constants")
    name = f"{fn.__name__}() of a tensor"
    if items and not all(isinstance(i, TensorVar) for i in items):
        return _min_max_with_numbers(tx, fn, items, name)
    first = items[0].fake
    for i in items:
        f = i.fake
        if f.numel() != 1:
            raise Unsupported(f"{name} of {f.numel()} elements (needs its data)")
    if any(i.fake.dtype != first.dtype or tuple(i.fake.shape) != tuple(first.shape) or
           i.fake.requires_grad != first.requires_grad for i in items) or \
            first.requires_grad and _C.is_grad_enabled():
        # the item taken shows: its dtype or shape, or (requiring grad) which inputs
        # eager's backward reaches (the others' .grad stays None, where a graph op
        # would give them zeros): the call itself, run by the frame program where it
        # leaves the frame, unsupported where a graph op would need it
        return MinMaxVar(fn, items)
    from ..ops import api as O
    compare = operator.gt if fn is max else operator.lt
    current = items[0]
    for item in items[1:]:
        taken = tx.call_op(compare, [item, current], {})
        current = tx.call_op(O.where, [taken, item, current], {})
    return current


# BINARY_OP args whose result is the same for a number and a 0-d tensor of its value
# (a dimensioned floating tensor on the other side): + - * / and their in-place forms
_NUMBER_BLIND_FNS = {operator.add, operator.sub, operator.mul, operator.truediv,
                     operator.iadd, operator.isub, operator.imul, operator.itruediv}
_IN_PLACE = {operator.iadd, operator.isub, operator.imul, operator.itruediv}


def _number_blind(partner, items):
    """Whether `partner OP result` / `result OP partner` (+ - * /) gives the same tensor
    whichever of `items` (one-element floating tensors and Python numbers) max()/min()
    takes: the partner is a dimensioned floating tensor, a 0-d tensor or a Python
    number of the same category does not change its dtype, a one-element tensor of the
    partner's dtype and no more dimensions does not change it nor its shape."""
    if not isinstance(partner, TensorVar):
        return False
    p = partner.fake
    if p.ndim == 0 or not p.dtype.is_floating_point:
        return False
    for i in items:
        if isinstance(i, TensorVar):
            f = i.fake
            if not f.dtype.is_floating_point or f.ndim > p.ndim or \
                    f.ndim and f.dtype is not p.dtype:
                return False
        elif not (i.is_constant() and type(i.as_constant()) in (int, float)):
            return False
    return True


def _apply_max(items):
    return max(*items)


def _apply_min(items):
    return min(*items)


class MinMaxVar(VariableTracker):
    """Builtin max()/min() of one-element tensors and Python numbers (or of tensors of
    other dtypes or shapes, or requiring grad). CPython's result is the item taken, a
    tensor or a number depending on the data, so it is kept as the call itself: where it leaves the frame (returned, stored, passed across a graph
    break) the frame program calls max()/min() on the real values after the graph
    (`deferred_call`: eager's result, type, identity and autograd included); where it
    goes into + - * / with a tensor on which the type cannot show (`_number_blind`),
    it is the graph's chain of where(b > current, b, current) (CPython's order: the
    first maximal item), as TorchDynamo makes a graph op; any other use (a branch,
    `.item()`, an op) is unsupported there and breaks at that instruction, CPython
    running it on the rebuilt value."""

    def __init__(self, fn, items):
        self.fn = fn
        self.items = items
        self._versions = [i.fake._version for i in items if isinstance(i, TensorVar)]

    def _unchanged(self):
        """No item tensor was written in place since the call (eager compared the
        values at the call)."""
        now = [i.fake._version for i in self.items if isinstance(i, TensorVar)]
        return now == self._versions

    @property
    def deferred_call(self):
        """(function of a tuple, item VTs): the program's run-time call."""
        if not self._unchanged():
            raise Unsupported(f"{self.fn.__name__}() of a tensor written in place "
                              "after the call")
        return (_apply_max if self.fn is max else _apply_min), self.items

    def graph_value(self, tx, partner, fn, left):
        """The where chain for `self fn partner` (left) or `partner fn self`, or raise
        Unsupported where the item taken would show."""
        name = f"{self.fn.__name__}() of a tensor and Python values"
        if fn not in _NUMBER_BLIND_FNS or left and fn in _IN_PLACE or \
                not _number_blind(partner, self.items) or not self._unchanged():
            raise Unsupported(f"{name} (its result's type depends on the data)")
        tensors = [i for i in self.items if isinstance(i, TensorVar)]
        if any(t.fake.requires_grad for t in tensors) and _C.is_grad_enabled():
            raise Unsupported(f"{name} that requires grad (which item gets the "
                              "gradient depends on the data)")
        from ..ops import api as O
        compare = operator.gt if self.fn is max else operator.lt
        current = self.items[0]
        for item in self.items[1:]:
            if not isinstance(item, TensorVar) and not isinstance(current, TensorVar):
                if compare(item.as_constant(), current.as_constant()):
                    current = item
                continue
            taken = tx.call_op(compare, [item, current], {})
            current = tx.call_op(O.where, [taken, item, current], {})
        return current

    def __repr__(self):
        return f"MinMaxVar({self.fn.__name__}, {self.items})"


_PURE_ARITH = {operator.add: "add", operator.sub: "sub", operator.mul: "mul",
               operator.truediv: "truediv"}


def _apply_binary(fn):
    def apply(pair):
        return fn(*pair)
    apply.__name__ = apply.__qualname__ = f"apply_{fn.__name__}"
    return apply


_COMPARISONS = (operator.lt, operator.le, operator.eq, operator.ne, operator.gt,
                operator.ge)
_APPLY_BINARY = {fn: _apply_binary(fn) for fn in (*_PURE_ARITH, *_COMPARISONS)}


class DeferredArithVar(VariableTracker):
    """`max(t, 0.5) * 2`, `max(t, 0.5) > 1`: + - * / or a comparison of a MinMaxVar (or
    of another such value) and a Python number, whose type, like the MinMaxVar's, depends on the data: run by the
    frame program after the graph (eager's result); any other use is unsupported there
    (breaks at that instruction)."""

    def __init__(self, fn, a, b):
        self.fn, self.a, self.b = fn, a, b

    @property
    def deferred_call(self):
        for v in (self.a, self.b):
            if isinstance(v, (MinMaxVar, DeferredArithVar)):
                v.deferred_call          # (raises where that one cannot be rebuilt)
        return _APPLY_BINARY[self.fn], (self.a, self.b)

    def __repr__(self):
        return f"DeferredArithVar({self.fn.__name__}, {self.a}, {self.b})"


def min_max_binary(tx, fn, a, b):
    """fn(a, b) where a or b is a MinMaxVar or DeferredArithVar: with a tensor, the
    MinMaxVar's where chain (MinMaxVar.graph_value, else unsupported); with a Python
    number (+ - * / and comparisons), a DeferredArithVar; else unsupported."""
    left = isinstance(a, (MinMaxVar, DeferredArithVar))
    mm, other = (a, b) if left else (b, a)
    if isinstance(other, TensorVar):
        if not isinstance(mm, MinMaxVar):
            raise Unsupported(f"{mm} with a tensor (its type depends on the data)")
        v = mm.graph_value(tx, other, fn, left)
        return tx.binary(fn, v, other) if left else tx.binary(fn, other, v)
    if (fn in _PURE_ARITH or fn in _COMPARISONS) and not isinstance(other, FloatVar) and other.is_constant() \
            and type(other.as_constant()) in (int, float) and \
            not (fn is operator.truediv and not left) and \
            not (fn is operator.truediv and other.as_constant() == 0):
        return DeferredArithVar(fn, a, b)
    raise Unsupported(f"{mm} with {other} (its type depends on the data)")


def _min_max_with_numbers(tx, fn, items, name):
    """max()/min() of one-element tensors and Python numbers: a MinMaxVar (the call,
    made a graph op or run by the frame program where it is used). Items of more
    elements break here (eager's comparison raises)."""
    for i in items:
        if isinstance(i, TensorVar) and i.fake.numel() != 1:
            raise Unsupported(f"{name} of {i.fake.numel()} elements (needs its data)")
        if not isinstance(i, (TensorVar, FloatVar)) and not (
                i.is_constant() and type(i.as_constant()) in (int, float, bool)):
            raise Unsupported(f"{name} and {i}")
    return MinMaxVar(fn, items)


# ------------------------------------------------------------------ grad mode, `with`

fx.node.has_side_effect(_C._set_grad_enabled)


def _record_grad_mode(tx, mode):
    """A node setting grad mode (kept by dead-code elimination), and the same change on
    the capture's own mode, so the fake results of the region's ops are eager's. AOT
    autograd traces through these nodes (aot/grad_mode.py), so a region turning grad on
    in a graph entered with it off stays in the graph."""
    prev = _C._set_grad_enabled(mode)
    node = tx.output.graph.call_function(_C._set_grad_enabled, (mode,), {})
    node.meta["stack"] = tx.user_stack()
    node.meta["example_value"] = prev
    return prev


class GradModeVar(VariableTracker):
    """no_grad() / enable_grad() / set_grad_enabled(mode) made by the frame. Entering
    (or, for set_grad_enabled, making it) records the mode change in the graph; leaving
    records the way back, so one graph holds grad-mode regions. While a region is open
    the graph may not hold an op that can raise at run time (it would leave the mode
    changed for the frame's eager rerun): such an op falls back."""

    def __init__(self, cls, mode, immediate):
        self.cls = cls
        self.mode = mode
        self.prev = None
        if immediate is not None:
            self.prev = _record_grad_mode(immediate, mode)
            immediate.output.grad_regions = getattr(immediate.output, "grad_regions", 0) + 1

    def python_type(self):
        return self.cls

    def enter(self, tx):
        if self.prev is None:
            self.prev = _record_grad_mode(tx, self.mode)
            tx.output.grad_regions = getattr(tx.output, "grad_regions", 0) + 1
        return ConstVar(None)

    def exit(self, tx):
        if self.prev is None:
            raise Unsupported("leaving a grad-mode block never entered")
        _record_grad_mode(tx, self.prev)
        tx.output.grad_regions -= 1
        return ConstVar(False)


class _ExitVar(VariableTracker):
    def __init__(self, cm):
        self.cm = cm

    def call(self, tx, args, kwargs):
        if len(args) != 3 or kwargs or not all(a.is_constant() and a.as_constant() is None
                                               for a in args):
            raise Unsupported("leaving a `with` block by an exception")
        return self.cm.exit(tx)

    def rebuild(self):
        """The real object standing for this __exit__ when a graph break inside the
        block passes it to the resume function (program.py)."""
        if self.cm.prev is None:
            raise Unsupported("a grad-mode block never entered crosses a graph break")
        return GradModeExit.of(self.cm.prev)


class GradModeExit:
    """The __exit__ of a grad-mode block cut by a graph break: the prefix graph entered
    the block, the resume function calls this where the block ends (or CPython does, on
    an exception), and it sets grad mode back to `prev`. One object per mode."""
    __slots__ = ("prev",)
    _of = {}

    def __init__(self, prev):
        self.prev = prev

    @classmethod
    def of(cls, prev):
        prev = bool(prev)
        if prev not in cls._of:
            cls._of[prev] = cls(prev)
        return cls._of[prev]

    def __call__(self, exc_type, exc, tb):
        _C._set_grad_enabled(self.prev)
        return False

    def __repr__(self):
        return f"GradModeExit(prev={self.prev})"


class _CutBlock:
    """The grad-mode block a resume frame is inside of (entered before the break)."""

    def __init__(self, prev):
        self.prev = prev

    def exit(self, tx):
        _record_grad_mode(tx, self.prev)
        # the graph now leaves the mode other than it found it: an op that may raise
        # after this would leave it changed for the frame's eager rerun
        tx.output.grad_regions = getattr(tx.output, "grad_regions", 0) + 1
        return ConstVar(False)


def exit_of_cut_block(exit_obj):
    """The VT of a GradModeExit read by a resume frame."""
    return _ExitVar(_CutBlock(exit_obj.prev))


_HEAPTYPE = 1 << 9     # Py_TPFLAGS_HEAPTYPE: a class made by a class statement


def own_setattr(obj, value):
    """The class's own Python __setattr__ (a BoundMethodVar) for a write into an object
    the frame made (a frozen dataclass's, a user's), or None."""
    if not getattr(obj, "made_by_frame_object", False) or value is _DELETED():
        return None
    from .variables import _class_attr
    f = _class_attr(type(obj.value), "__setattr__")
    return BoundMethodVar(f, obj) if isinstance(f, types.FunctionType) else None


def _DELETED():
    from .side_effects import DELETED
    return DELETED


def object_setattr(tx, args):
    """object.__setattr__(obj, name, value) on an object the frame made: the write
    itself, past the class's own __setattr__ (a frozen dataclass's __init__ does this)."""
    obj, name, value = args
    if not getattr(obj, "made_by_frame_object", False) or not name.is_constant() or \
            type(name.as_constant()) is not str:
        raise Unsupported("object.__setattr__ on an object the compiled code did not make")
    tx.output.side_effects.write_attr(obj, name.as_constant(), value, raw=True)
    return ConstVar(None)


def construct_object(tx, cls_var, args, kwargs):
    """An instance of a plain Python class made by the frame: a class statement's class
    (dataclasses, frozen ones included) over object alone, with object's __new__ and
    __getattribute__ and no __del__ or __getattr__; __slots__ and a Python __setattr__
    are allowed (a write runs that __setattr__ inlined; object.__setattr__ and a slot's
    descriptor store the value). Its __init__ (a Python function, or none) is inlined on
    a NewObjectVar. Anything else is not handled here."""
    from .variables import NewObjectVar, _class_attr
    cls = cls_var.value
    mro = cls.__mro__
    if type(cls) not in (type, abc.ABCMeta) or getattr(cls, "__abstractmethods__", None) \
            or mro[-1] is not object or \
            not all(k.__flags__ & _HEAPTYPE for k in mro[:-1]):
        return NOT_HANDLED
    setattr_ = _class_attr(cls, "__setattr__")
    if _class_attr(cls, "__new__") is not object.__dict__["__new__"] or \
            setattr_ is not object.__dict__["__setattr__"] and \
            not isinstance(setattr_, types.FunctionType) or \
            _class_attr(cls, "__getattribute__") is not object.__dict__["__getattribute__"] \
            or _class_attr(cls, "__del__") is not _MISSING or \
            _class_attr(cls, "__getattr__") is not _MISSING:
        return NOT_HANDLED
    init = _class_attr(cls, "__init__")
    if init is object.__dict__["__init__"]:
        if args or kwargs:
            raise Unsupported(f"constructing {cls.__name__} with arguments it does not "
                              "take")
    elif not isinstance(init, types.FunctionType):
        return NOT_HANDLED
    obj = object.__new__(cls)
    vt = tx.output.side_effects.track(obj, NewObjectVar(obj, cls_var))
    if init is not object.__dict__["__init__"]:
        ret = BoundMethodVar(init, vt).call(tx, list(args), dict(kwargs))
        if not (ret.is_constant() and ret.as_constant() is None):
            raise Unsupported(f"{cls.__name__}.__init__ returned a value")
    return vt


def construct_value_object(tx, cls, args, kwargs):
    """ember.finfo(dtype), ember.iinfo(dtype), ember.device(...) made by the frame from
    constants: made here, a constant of the graph (its attributes are constants; a
    device passes to factories and .to() as the tensor's own device does). One that
    eager would refuse falls back, so eager raises its error."""
    from .._type_info import finfo, iinfo
    from ..device import device
    if cls not in (finfo, iinfo, device):
        return NOT_HANDLED
    cargs = _consts(list(args) + list(kwargs.values()), f"constructing {cls.__name__}")
    try:
        value = cls(*cargs[:len(args)], **dict(zip(kwargs, cargs[len(args):])))
    except Exception as e:   # noqa: BLE001 - eager raises it: run eager
        raise Unsupported(f"constructing {cls.__name__} raised {e!r}") from None
    return ConstVar(value)


def construct_grad_mode(tx, cls, args, kwargs):
    from ..autograd import grad_mode
    if cls is grad_mode.no_grad or cls is grad_mode.enable_grad:
        if args or kwargs:
            raise Unsupported(f"{cls.__name__} with arguments")
        return GradModeVar(cls, cls is grad_mode.enable_grad, None)
    if cls is grad_mode.set_grad_enabled:
        mode = _consts(list(args) + list(kwargs.values()), "set_grad_enabled")
        if len(mode) != 1:
            raise Unsupported("set_grad_enabled with other than one argument")
        return GradModeVar(cls, bool(mode[0]), tx)
    return NOT_HANDLED


class TracebackVar(VariableTracker):
    """The traceback of an exception raised inside the captured frame, which the
    interpreter does not make: `tb is None` is False, as in eager; any other use of it
    is unsupported (a break or a fallback, counted)."""

    def __repr__(self):
        return "TracebackVar()"


def exit_interpreted(exit_):
    """Whether a `with` block's __exit__ runs interpreted when the block raises (a
    user class's Python __exit__, contextlib.contextmanager's included)."""
    return isinstance(exit_, BoundMethodVar)


def exit_with_exception(tx, exit_, exc):
    """WITH_EXCEPT_START: __exit__(type, value, traceback) of the block a Python
    exception leaves; a true result swallows it, as in eager."""
    if not exit_interpreted(exit_) or not isinstance(exc, ObjectVar) or \
            not isinstance(exc.value, BaseException):
        raise Unsupported("leaving a `with` block by an exception")
    return exit_.call(tx, [ObjectVar(type(exc.value)), exc, TracebackVar()], {})


def before_with(tx, cm):
    """(exit VT, entered value) for BEFORE_WITH."""
    if isinstance(cm, GradModeVar):
        return _ExitVar(cm), cm.enter(tx)
    if isinstance(cm, ObjectVar) and not isinstance(cm.value, type):
        from .variables import _class_attr
        enter = _class_attr(type(cm.value), "__enter__")
        exit_ = _class_attr(type(cm.value), "__exit__")
        if isinstance(enter, types.FunctionType) and isinstance(exit_, types.FunctionType):
            return BoundMethodVar(exit_, cm), BoundMethodVar(enter, cm).call(tx, [], {})
    raise Unsupported(f"`with` over {cm}")


DEFERRED = (MinMaxVar, DeferredArithVar)
