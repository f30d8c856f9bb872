"""PyTorch's own checkpoints (torch.save's .pt/.pth files), read the weights_only way.

A torch.save file is a ZIP archive `<name>/data.pkl` (the object, pickled with protocol
2 by default), `<name>/data/<key>` (the raw bytes of each storage), `<name>/byteorder`,
`<name>/version` and a few records torch ignores on reading. Older files (torch.save with
_use_new_zipfile_serialization=False) are a stream of pickles (magic number, protocol
version, system info, the object, the storage keys) followed by each storage as an int64
element count and its bytes. Both are read here.

Nothing is unpickled by Python's unpickler: `Unpickler` interprets the opcodes itself
(the ones torch.save writes; pickletools reads their arguments) and builds only data: None, bools, ints, floats, complex
numbers, strings, bytes, bytearrays, lists, tuples, dicts, sets, frozensets,
OrderedDicts and Counters, and from the names torch's weights_only loader allows, ember
objects: tensors (`torch._utils._rebuild_tensor*`, with their sizes, strides and
requires_grad; tensors saved on one storage share its memory here too, each over a NumPy
view that starts at its saved offset, so storage_offset() reads 0), Parameters, meta
tensors, ember.Size, ember.device and dtypes. A GLOBAL outside that
list, a call of anything but those constructors with arguments of the expected types, an
unsupported kind of tensor (quantized, sparse, nested, a subclass) or dtype, a malformed
pickle, archive or storage record all raise CorruptFileError, before or instead of any
object reaching the caller. The memo is a dict, the stack a list, no Python recursion:
a hostile pickle costs time and memory in proportion to its size.
"""
from __future__ import annotations

import io
import math
import pickletools
import struct
from collections import Counter, OrderedDict

import numpy as np

from . import _C, _dtypes
from .device import device as _device

MAX_NDIM = 64
PICKLE_LIMIT = 64 * 1024 * 1024   # a compressed data.pkl inflates to at most this


class _Reject(Exception):
    """Raised inside the interpreter; load() turns it into CorruptFileError."""


class NotTorch(_Reject):
    """A pickle that does not start as torch.save's legacy format does."""


# ------------------------------------------------------------------ dtypes

# torch's storage class names -> torch dtype names
_STORAGE_DTYPES = {
    "DoubleStorage": "float64", "FloatStorage": "float32", "HalfStorage": "float16",
    "BFloat16Storage": "bfloat16", "LongStorage": "int64", "IntStorage": "int32",
    "ShortStorage": "int16", "CharStorage": "int8", "ByteStorage": "uint8",
    "BoolStorage": "bool", "ComplexFloatStorage": "complex64",
    "ComplexDoubleStorage": "complex128", "QUInt8Storage": "quint8",
    "QInt8Storage": "qint8", "QInt32Storage": "qint32", "QUInt4x2Storage": "quint4x2",
    "QUInt2x4Storage": "quint2x4",
}
# dtype names torch pickles (GLOBAL torch <name>): ember's own, and the others torch has
_TORCH_DTYPES = frozenset(
    ["float64", "float32", "float16", "bfloat16", "int64", "int32", "int16", "int8",
     "uint8", "bool", "complex32", "complex64", "complex128", "uint16", "uint32", "uint64",
     "quint8", "qint8", "qint32", "quint4x2", "quint2x4", "float8_e4m3fn", "float8_e5m2",
     "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e8m0fnu", "float4_e2m1fn_x2"] +
    [f"int{b}" for b in range(1, 8)] + [f"uint{b}" for b in range(1, 8)] +
    [f"bits{b}" for b in ("1x8", "2x4", "4x2", "8", "16")])


def _ember_dtype(name, what):
    dtype = _dtypes.BY_NAME.get(name)
    if dtype is None:
        raise _Reject(f"{what} has dtype torch.{name}, which ember does not support")
    return dtype


def _dtype_global(name):
    """GLOBAL torch.<dtype>: the ember dtype, or an error naming the one ember lacks."""
    dtype = _dtypes.BY_NAME.get(name)
    if dtype is None:
        return _unsupported(f"dtype torch.{name}", now=True)
    return dtype


class _StorageType:
    """GLOBAL torch.<X>Storage or torch.storage.UntypedStorage."""

    def __init__(self, dtype_name):
        self.dtype_name = dtype_name           # None: untyped (bytes)


class _Storage:
    """A storage record: its bytes (a NumPy uint8 array, writable) and dtype name."""

    def __init__(self, data, dtype_name):
        self.data = data
        self.dtype_name = dtype_name


# ------------------------------------------------------------------ allowed callables

def _check_ints(values, what, allow_negative=False):
    if type(values) not in (tuple, list) or len(values) > MAX_NDIM or \
            not all(type(v) is int and (allow_negative or v >= 0) for v in values):
        raise _Reject(f"{what} is {values!r:.80}, not a tuple of at most {MAX_NDIM} "
                      "non-negative integers")
    return tuple(values)


def _tensor(storage, offset, size, stride, dtype_name, requires_grad):
    """An ember tensor over the storage's memory with torch's geometry."""
    if not isinstance(storage, _Storage):
        raise _Reject("a tensor's storage is not a storage record")
    size = _check_ints(size, "a tensor's size")
    stride = _check_ints(stride, "a tensor's stride")
    if len(size) != len(stride):
        raise _Reject(f"a tensor's size {size} and stride {stride} differ in length")
    if type(offset) is not int or offset < 0:
        raise _Reject(f"a tensor's storage offset is {offset!r:.40}")
    if type(requires_grad) is not bool:
        raise _Reject("a tensor's requires_grad is not a bool")
    dtype = _ember_dtype(dtype_name, "a tensor")
    np_dtype = dtype.numpy_dtype
    if storage.data.nbytes % np_dtype.itemsize:
        raise _Reject(f"a storage of {storage.data.nbytes} bytes holds no whole number of "
                      f"{dtype_name} elements")
    numel = storage.data.nbytes // np_dtype.itemsize
    elements = math.prod(size)
    if elements:
        last = offset + sum((n - 1) * s for n, s in zip(size, stride))
        if last >= numel:
            raise _Reject(f"a tensor of size {list(size)}, stride {list(stride)} and offset "
                          f"{offset} reaches past its storage of {numel} elements")
    elif offset > numel:
        raise _Reject(f"an empty tensor's offset {offset} is past its storage of {numel} "
                      "elements")
    itemsize = np_dtype.itemsize
    flat = storage.data.view(np_dtype)
    array = np.lib.stride_tricks.as_strided(flat[offset:] if elements else flat[:0], size,
                                            tuple(s * itemsize for s in stride))
    t = _C.from_numpy(array)
    if requires_grad:
        if not dtype.is_floating_point:
            raise _Reject(f"a {dtype_name} tensor cannot require grad")
        t.requires_grad_(True)
    return t


def _rebuild_tensor(storage, offset, size, stride):
    return _tensor(storage, offset, size, stride, _storage_dtype(storage), False)


def _rebuild_tensor_v2(storage, offset, size, stride, requires_grad, backward_hooks,
                       metadata=None):
    _check_hooks(backward_hooks)
    return _tensor(storage, offset, size, stride, _storage_dtype(storage), requires_grad)


def _rebuild_tensor_v3(storage, offset, size, stride, requires_grad, backward_hooks, dtype,
                       metadata=None):
    _check_hooks(backward_hooks)
    if not isinstance(dtype, _C.dtype):
        raise _Reject("_rebuild_tensor_v3 was not given a dtype")
    return _tensor(storage, offset, size, stride, _dtypes.name(dtype), requires_grad)


def _storage_dtype(storage):
    if not isinstance(storage, _Storage) or storage.dtype_name is None:
        raise _Reject("a tensor's storage has no dtype")
    return storage.dtype_name


def _check_hooks(hooks):
    if type(hooks) not in (dict, OrderedDict) or hooks:
        raise _Reject("a tensor carries backward hooks (code), which are never loaded")


def _rebuild_parameter(data, requires_grad, backward_hooks, state=None):
    from .nn.parameter import Parameter
    if not isinstance(data, _C.Tensor) or type(requires_grad) is not bool:
        raise _Reject("a Parameter's data is not a tensor")
    _check_hooks(backward_hooks)
    if requires_grad and not data.dtype.is_floating_point:
        raise _Reject(f"a {data.dtype} Parameter cannot require grad")
    p = Parameter(data.detach(), requires_grad=requires_grad)
    _set_state(p, state)
    return p


def _rebuild_parameter_with_state(data, requires_grad, backward_hooks, state):
    return _rebuild_parameter(data, requires_grad, backward_hooks, state)


def _set_state(obj, state):
    """Python attributes saved with a tensor (a dict name -> data), as torch sets them;
    names with a leading underscore would reach ember's internals and are refused."""
    if state is None:
        return
    if type(state) is tuple and len(state) == 2 and state[1] is None:
        state = state[0]
    if type(state) not in (dict, OrderedDict):
        raise _Reject("a tensor's saved state is not a dict")
    for key, value in state.items():
        if type(key) is not str or not key.isidentifier() or key.startswith("_"):
            raise _Reject(f"a tensor's saved attribute {key!r:.40} is not allowed")
        try:
            setattr(obj, key, value)
        except (AttributeError, TypeError) as e:
            raise _Reject(f"a tensor's saved attribute {key!r:.40}: {e}") from None


def _rebuild_from_type_v2(func, new_type, args, state):
    if new_type is not _TENSOR and new_type is not _PARAMETER:
        raise _Reject("a tensor subclass is saved here; only tensors and Parameters load")
    if func not in _TENSOR_REBUILDS or type(args) is not tuple:
        raise _Reject("_rebuild_from_type_v2 does not rebuild a tensor")
    from .nn.parameter import Parameter
    t = func(*args)
    if new_type is _PARAMETER and not isinstance(t, Parameter):
        t = Parameter(t.detach(), requires_grad=t.requires_grad)
    _set_state(t, state)
    return t


def _rebuild_meta_tensor_no_storage(dtype, size, stride, requires_grad):
    from . import empty
    if not isinstance(dtype, _C.dtype) or type(requires_grad) is not bool:
        raise _Reject("a meta tensor's dtype or requires_grad is malformed")
    size = _check_ints(size, "a meta tensor's size")
    _check_ints(stride, "a meta tensor's stride")
    if requires_grad and not dtype.is_floating_point:
        raise _Reject("an integer meta tensor cannot require grad")
    return empty(size, dtype=dtype, device="meta", requires_grad=requires_grad)


def _unsupported(kind, now=False):
    """A GLOBAL ember does not load: refused when it is named (now) or called."""
    if now:
        raise _Reject(f"the checkpoint holds {kind}, which ember does not support")

    def rebuild(*args):
        raise _Reject(f"the checkpoint holds {kind}, which ember does not support")
    return rebuild


def _size(items=()):
    return _C.Size(_check_ints(items, "a torch.Size"))


def _device_of(spec, index=None):
    if type(spec) is not str or (index is not None and type(index) is not int):
        raise _Reject("a torch.device is malformed")
    try:
        return _device(spec) if index is None else _device(spec, index)
    except (ValueError, RuntimeError, TypeError) as e:
        raise _Reject(f"a torch.device is malformed: {e}") from None


def _encode(text, encoding="utf-8"):
    if type(text) is not str or encoding not in ("latin1", "latin-1"):
        raise _Reject("_codecs.encode is used only for bytes (latin1)")
    return text.encode("latin1")


def _bytearray(*args):
    if args == ():
        return bytearray()
    if len(args) == 1 and type(args[0]) is bytes:
        return bytearray(args[0])
    if len(args) == 2 and type(args[0]) is str and args[1] in ("latin1", "latin-1"):
        return bytearray(args[0].encode("latin1"))
    raise _Reject("bytearray is called with unexpected arguments")


def _from_items(make, name):
    """make(items) for a list or tuple of items only (the set, frozenset and OrderedDict
    a checkpoint calls)."""
    def build(items=()):
        if type(items) not in (list, tuple):
            raise _Reject(f"{name} is called with unexpected arguments")
        return make(items)
    return build


_set, _frozenset = _from_items(set, "set"), _from_items(frozenset, "frozenset")
_ordered_dict = _from_items(OrderedDict, "OrderedDict")


def _complex(real=0.0, imag=0.0):
    if type(real) not in (int, float) or type(imag) not in (int, float):
        raise _Reject("complex is called with unexpected arguments")
    return complex(real, imag)


def _counter(items=None):
    if items is not None and type(items) not in (dict, list, tuple):
        raise _Reject("Counter is called with unexpected arguments")
    return Counter(items) if items is not None else Counter()


def _get_layout(name):
    if name != "torch.strided":
        raise _Reject(f"the checkpoint holds sparse tensors ({name!r:.40} layout), which "
                      "ember does not support")
    return name


_TENSOR = object()        # GLOBAL torch.Tensor (only as _rebuild_from_type_v2's type)
_PARAMETER = object()     # GLOBAL torch.nn.parameter.Parameter
_TENSOR_REBUILDS = (_rebuild_tensor, _rebuild_tensor_v2, _rebuild_tensor_v3,
                    _rebuild_parameter, _rebuild_parameter_with_state,
                    _rebuild_meta_tensor_no_storage)

_UNSUPPORTED_REBUILDS = {
    "_rebuild_qtensor": "quantized tensors",
    "_rebuild_sparse_tensor": "sparse tensors",
    "_rebuild_nested_tensor": "nested tensors",
    "_rebuild_device_tensor_from_cpu_tensor": "tensors of another device type",
    "_rebuild_device_tensor_from_numpy": "tensors of another device type",
    "_rebuild_xla_tensor": "XLA tensors",
    "_rebuild_mtia_tensor": "MTIA tensors",
    "_rebuild_wrapper_subclass": "tensor subclasses",
}

# (module, name) -> what the GLOBAL stands for; the names torch.load(weights_only=True)
# allows by default, each mapped to an ember constructor or marker
_GLOBALS = {
    ("collections", "OrderedDict"): _ordered_dict,
    ("collections", "Counter"): _counter,
    ("torch._utils", "_rebuild_tensor"): _rebuild_tensor,
    ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor_v2,
    ("torch._utils", "_rebuild_tensor_v3"): _rebuild_tensor_v3,
    ("torch._utils", "_rebuild_parameter"): _rebuild_parameter,
    ("torch._utils", "_rebuild_parameter_with_state"): _rebuild_parameter_with_state,
    ("torch._utils", "_rebuild_meta_tensor_no_storage"): _rebuild_meta_tensor_no_storage,
    ("torch._tensor", "_rebuild_from_type_v2"): _rebuild_from_type_v2,
    ("torch", "Size"): _size,
    ("torch.serialization", "_get_layout"): _get_layout,
    ("torch", "device"): _device_of,
    ("torch", "Tensor"): _TENSOR,
    ("torch.nn.parameter", "Parameter"): _PARAMETER,
    ("torch.storage", "UntypedStorage"): _StorageType(None),
    ("torch", "UntypedStorage"): _StorageType(None),
    ("_codecs", "encode"): _encode,
    ("builtins", "bytearray"): _bytearray,
    ("builtins", "set"): _set,
    ("builtins", "frozenset"): _frozenset,
    ("builtins", "complex"): _complex,
    **{("torch._utils", name): _unsupported(kind)
       for name, kind in _UNSUPPORTED_REBUILDS.items()},
    **{("torch", name): _StorageType(dtype) for name, dtype in _STORAGE_DTYPES.items()},
    **{("torch", name): (_dtype_global, name) for name in _TORCH_DTYPES},
    **{("torch", name): (_unsupported, "a quantization scheme", True)
       for name in ("per_tensor_affine", "per_tensor_symmetric", "per_channel_affine",
                    "per_channel_symmetric", "per_channel_affine_float_qparams")},
}
_PY2_MODULES = {"__builtin__": "builtins", "copy_reg": "copyreg"}


def _global(module, name):
    module = _PY2_MODULES.get(module, module)
    value = _GLOBALS.get((module, name))
    if value is None:
        raise _Reject(f"it refers to {module}.{name}, which is not among the names "
                      "torch.load(weights_only=True) allows; ember never unpickles code")
    if type(value) is tuple:            # resolved when named: dtypes, refusals
        return value[0](*value[1:])
    return value


def _callable(func, what):
    if not callable(func) or func in (_TENSOR, _PARAMETER) or \
            isinstance(func, (_C.dtype, _StorageType)):
        raise _Reject(f"{what} of something that is not an allowed constructor")
    return func


# ------------------------------------------------------------------ the interpreter

_MUTABLE_MAPS = (dict, OrderedDict, Counter)
# the opcodes torch.save's pickles use (protocols 2 to 5); any other is refused unread
_READ = frozenset([
    "PROTO", "FRAME", "STOP", "NONE", "NEWTRUE", "NEWFALSE", "BININT", "BININT1", "BININT2",
    "LONG1", "LONG4", "BINFLOAT", "BINUNICODE", "SHORT_BINUNICODE", "BINUNICODE8",
    "BINBYTES", "SHORT_BINBYTES", "BINBYTES8", "BYTEARRAY8", "EMPTY_LIST", "EMPTY_DICT",
    "EMPTY_TUPLE", "EMPTY_SET", "MARK", "POP", "POP_MARK", "TUPLE", "TUPLE1", "TUPLE2",
    "TUPLE3", "LIST", "DICT", "FROZENSET", "APPEND", "APPENDS", "SETITEM", "SETITEMS",
    "ADDITEMS", "BINPUT", "LONG_BINPUT", "MEMOIZE", "BINGET", "LONG_BINGET", "GLOBAL",
    "STACK_GLOBAL", "REDUCE", "NEWOBJ", "BUILD", "BINPERSID"])
_OPCODES = {op.code.encode("latin-1"): op for op in pickletools.opcodes}


def _opcodes(stream):
    """(name, argument) of each opcode from stream, its argument parsed by pickletools'
    readers (which raise ValueError for truncated data); an opcode outside _READ is
    refused before its argument is read."""
    while True:
        code = stream.read(1)
        if not code:
            raise _Reject("the pickle is truncated (no STOP)")
        op = _OPCODES.get(code)
        if op is None or op.name not in _READ:
            what = f"opcode {op.name}" if op is not None else f"byte {code!r} (no opcode)"
            raise _Reject(f"pickle {what} is not read (torch.save does not write it)")
        if op.name == "GLOBAL":
            yield op.name, (_name_line(stream), _name_line(stream))
        else:
            yield op.name, (op.arg.reader(stream) if op.arg is not None else None)


def _name_line(stream, limit=256):
    """One line of a GLOBAL opcode: a module or attribute name, as the unpickler reads
    it (UTF-8, no escapes)."""
    line = stream.readline(limit + 1)
    if not line.endswith(b"\n"):
        raise _Reject("a GLOBAL name is truncated or longer than 256 bytes")
    return line[:-1].decode("utf-8")


class _Placeholder:
    """What a call makes in a dry run (nothing is called then)."""


_PLACEHOLDER = _Placeholder()


class Unpickler:
    """Interprets one pickle at `pos` of data; persistent_load(pid) gives storages. A dry
    run only checks the names and collects the persistent ids: calls make placeholders."""

    def __init__(self, data, persistent_load, dry_run=False):
        self.data = data
        self.persistent_load = persistent_load
        self.dry_run = dry_run

    def load(self, pos=0):
        """(object, position after the pickle's STOP)."""
        stream = io.BytesIO(self.data)
        stream.seek(pos)
        stack, marks, memo = [], [], {}

        def pop_mark():
            if not marks:
                raise _Reject("a pickle opcode needs a MARK that is not there")
            items = stack[marks[-1]:]
            del stack[marks.pop():]
            return items

        for name, arg in _opcodes(stream):
            if name in ("PROTO", "FRAME"):
                if name == "PROTO" and not 2 <= arg <= 5:
                    raise _Reject(f"pickle protocol {arg} is not read")
            elif name == "STOP":
                if len(stack) != 1 or marks:
                    raise _Reject("the pickle does not end with exactly one object")
                return stack[0], stream.tell()
            elif name in ("NONE", "NEWTRUE", "NEWFALSE", "BININT", "BININT1", "BININT2",
                          "LONG1", "LONG4", "BINFLOAT", "BINUNICODE", "SHORT_BINUNICODE",
                          "BINUNICODE8", "BINBYTES", "SHORT_BINBYTES", "BINBYTES8"):
                stack.append({"NONE": None, "NEWTRUE": True, "NEWFALSE": False}.get(name, arg)
                             if arg is None else arg)
            elif name == "BYTEARRAY8":
                stack.append(bytearray(arg))
            elif name == "EMPTY_LIST":
                stack.append([])
            elif name == "EMPTY_DICT":
                stack.append({})
            elif name == "EMPTY_TUPLE":
                stack.append(())
            elif name == "EMPTY_SET":
                stack.append(set())
            elif name == "MARK":
                marks.append(len(stack))
            elif name == "POP":
                stack.pop()
            elif name == "POP_MARK":
                pop_mark()
            elif name == "TUPLE":
                stack.append(tuple(pop_mark()))
            elif name in ("TUPLE1", "TUPLE2", "TUPLE3"):
                n = int(name[-1])
                if len(stack) - (marks[-1] if marks else 0) < n:
                    raise _Reject(f"{name} with fewer than {n} items")
                items = tuple(stack[-n:])
                del stack[-n:]
                stack.append(items)
            elif name == "LIST":
                stack.append(list(pop_mark()))
            elif name == "DICT":
                items = pop_mark()
                stack.append(self._pairs({}, items))
            elif name == "FROZENSET":
                stack.append(frozenset(pop_mark()))
            elif name == "APPEND":
                item = stack.pop()
                self._target(stack, (list,), name).append(item)
            elif name == "APPENDS":
                items = pop_mark()
                self._target(stack, (list,), name).extend(items)
            elif name == "SETITEM":
                value, key = stack.pop(), stack.pop()
                self._pairs(self._target(stack, _MUTABLE_MAPS, name), [key, value])
            elif name == "SETITEMS":
                items = pop_mark()
                self._pairs(self._target(stack, _MUTABLE_MAPS, name), items)
            elif name == "ADDITEMS":
                items = pop_mark()
                self._target(stack, (set,), name).update(items)
            elif name in ("BINPUT", "LONG_BINPUT"):
                memo[arg] = stack[-1]
            elif name == "MEMOIZE":
                memo[len(memo)] = stack[-1]
            elif name in ("BINGET", "LONG_BINGET"):
                if arg not in memo:
                    raise _Reject(f"memo entry {arg} is read before it is written")
                stack.append(memo[arg])
            elif name == "GLOBAL":
                stack.append(_global(*arg))
            elif name == "STACK_GLOBAL":
                attr, module = stack.pop(), stack.pop()
                if type(module) is not str or type(attr) is not str:
                    raise _Reject("STACK_GLOBAL of something that is not a name")
                stack.append(_global(module, attr))
            elif name == "REDUCE":
                args = stack.pop()
                func = _callable(stack.pop(), "a call")
                if type(args) is not tuple:
                    raise _Reject("a call's arguments are not a tuple")
                stack.append(_PLACEHOLDER if self.dry_run else func(*args))
            elif name == "NEWOBJ":
                args, cls = stack.pop(), stack.pop()
                if cls is not _PARAMETER or type(args) is not tuple:
                    raise _Reject("NEWOBJ of something other than a Parameter")
                stack.append(_PLACEHOLDER if self.dry_run else
                             _rebuild_parameter(*(args + (True, {}))[:3]))
            elif name == "BUILD":
                state = stack.pop()
                inst = stack[-1]
                if inst is _PLACEHOLDER:
                    pass
                elif type(inst) is OrderedDict:
                    _set_dict_state(inst, state)
                elif isinstance(inst, _C.Tensor):
                    _set_state(inst, state)
                else:
                    raise _Reject(f"BUILD of a {type(inst).__name__}")
            elif name == "BINPERSID":
                stack.append(self.persistent_load(stack.pop()))
        raise _Reject("the pickle has no STOP")

    @staticmethod
    def _target(stack, types, what):
        if stack and stack[-1] is _PLACEHOLDER:
            return _Sink()
        if not stack or type(stack[-1]) not in types:
            raise _Reject(f"{what} on a {type(stack[-1]).__name__ if stack else 'nothing'}")
        return stack[-1]

    @staticmethod
    def _pairs(target, items):
        if len(items) % 2:
            raise _Reject("a dict is given an odd number of items")
        for i in range(0, len(items), 2):
            target[items[i]] = items[i + 1]
        return target


class _Sink:
    """Takes the items a dry run adds to a placeholder."""

    def append(self, item):
        pass

    extend = update = append

    def __setitem__(self, key, value):
        pass


def _set_dict_state(inst, state):
    """BUILD on an OrderedDict: torch's state_dicts keep `_metadata` (versions per
    module) this way."""
    if type(state) is tuple and len(state) == 2 and state[1] is None:
        state = state[0]
    if type(state) is not dict:
        raise _Reject("an OrderedDict's state is not a dict")
    for key, value in state.items():
        if type(key) is not str or not key.isidentifier() or key.startswith("__"):
            raise _Reject(f"an OrderedDict attribute {key!r:.40} is not allowed")
        inst.__dict__[key] = value


_LEAVES = (type(None), bool, int, float, complex, str, bytes, bytearray, _C.dtype, _device)
_CONTAINERS = (list, tuple, set, frozenset, dict, OrderedDict, Counter, _C.Size)


def check_output(obj):
    """obj, once every object reachable from it (items, keys, values, and the
    attributes BUILD or a tensor's state set) is data or an ember tensor: the names a
    pickle refers to (constructors, storage types) and storage records stay inside."""
    seen = set()
    todo = [obj]
    while todo:
        x = todo.pop()
        if id(x) in seen:
            continue
        seen.add(id(x))
        kind = type(x)
        if kind in _LEAVES:
            continue
        if isinstance(x, _C.Tensor):
            todo.extend(getattr(x, "__dict__", {}).values())
            continue
        if kind not in _CONTAINERS:
            raise _Reject(f"its object holds a {kind.__name__}, which is not data")
        if kind in (dict, OrderedDict, Counter):
            todo.extend(x.keys())
            todo.extend(x.values())
            if kind is OrderedDict:
                todo.extend(x.__dict__.values())
        else:
            todo.extend(x)
    return obj


# ------------------------------------------------------------------ storages

def _storage_pid(pid, what):
    """(storage type, key, location, numel) of a persistent id."""
    if type(pid) is not tuple or len(pid) < 5 or pid[0] not in ("storage", b"storage"):
        raise _Reject(f"persistent id {pid!r:.60} is not a storage")
    _, storage_type, key, location, numel = pid[:5]
    if not isinstance(storage_type, _StorageType):
        raise _Reject(f"{what} has no storage type")
    if type(key) is not str or type(location) is not str or type(numel) is not int or \
            numel < 0:
        raise _Reject(f"{what} is malformed")
    return storage_type, key, location, numel


def _itemsize(dtype_name, what):
    if dtype_name is None:
        return 1
    return _ember_dtype(dtype_name, what).numpy_dtype.itemsize


def _native(raw, dtype_name, big_endian):
    """A writable uint8 array of raw's bytes, in native byte order."""
    if big_endian and dtype_name is not None:
        np_dtype = _dtypes.BY_NAME[dtype_name].numpy_dtype
        return np.frombuffer(raw, dtype=np_dtype.newbyteorder(">")).astype(np_dtype).view(
            np.uint8)
    return np.frombuffer(raw, dtype=np.uint8) if isinstance(raw, bytearray) else \
        np.frombuffer(bytearray(raw), dtype=np.uint8)


class ZipCheckpoint:
    """Reads a torch.save ZIP archive (already checked for layout by SafeZip)."""

    _RECORDS = frozenset({"data.pkl", "byteorder", "version", ".format_version",
                          ".storage_alignment", ".data/version", ".data/serialization_id"})

    def __init__(self, zf):
        self.zf = zf
        pkls = [n for n in zf.names if n.endswith("/data.pkl") and n.count("/") == 1]
        if len(pkls) != 1:
            raise _Reject("a torch checkpoint holds exactly one <name>/data.pkl")
        self.prefix = pkls[0][:-len("data.pkl")]
        for n in zf.names:
            rest = n[len(self.prefix):]
            if not n.startswith(self.prefix) or not (
                    rest in self._RECORDS or
                    (rest.startswith("data/") and rest[5:].isdigit()) or
                    rest.startswith(".data/")):
                raise _Reject(f"unexpected archive member {n!r:.80}")
        self.big_endian = self._byteorder()
        self.storages = {}

    def _record(self, name, limit=64):
        size = self.zf.declared_size(self.prefix + name)
        if size > limit:
            raise _Reject(f"record {name} is {size} bytes")
        return bytes(self.zf.read(self.prefix + name, size))

    def _byteorder(self):
        if self.prefix + "version" in self.zf.infos:
            version = self._record("version").strip()
            if not version.isdigit() or not 1 <= int(version) <= 3:
                raise _Reject(f"format version {version[:10]!r} is not read")
        if self.prefix + "byteorder" not in self.zf.infos:
            return False
        order = self._record("byteorder")
        if order not in (b"little", b"big"):
            raise _Reject(f"byteorder record {order[:10]!r}")
        return order == b"big"

    def persistent_load(self, pid):
        storage_type, key, _, numel = _storage_pid(pid, "a storage")
        name = f"data/{key}"
        dtype_name = storage_type.dtype_name
        if key in self.storages:
            storage = self.storages[key]
            if storage.dtype_name != dtype_name:
                raise _Reject(f"storage {key!r:.20} is used with two dtypes")
            return storage
        if not key.isdigit() or self.prefix + name not in self.zf.infos:
            raise _Reject(f"storage {key!r:.20} has no record")
        nbytes = numel * _itemsize(dtype_name, f"storage {key}")
        raw = self.zf.read(self.prefix + name, nbytes, f"storage {key}")
        storage = _Storage(_native(raw, dtype_name, self.big_endian), dtype_name)
        self.storages[key] = storage
        return storage

    def load(self):
        name = self.prefix + "data.pkl"
        size = self.zf.declared_size(name)
        if self.zf.infos[name].compress_type != 0 and size > PICKLE_LIMIT:
            raise _Reject(f"a compressed data.pkl declares {size} bytes (at most "
                          f"{PICKLE_LIMIT} are read)")
        data = bytes(self.zf.read(name, size))
        obj, end = Unpickler(data, self.persistent_load).load()
        if end != len(data):
            raise _Reject("data.pkl has bytes after its pickle")
        return check_output(obj)


_LEGACY_MAGIC = 0x1950a86a20f9469cfc6c
_LEGACY_PROTOCOL = 1001


class LegacyCheckpoint:
    """Reads the pre-ZIP torch.save format (see the module docstring)."""

    def __init__(self, data):
        self.data = data
        self.storages = {}        # key -> (dtype name, numel)

    def _no_storages(self, pid):
        raise _Reject("a header pickle refers to a storage")

    def persistent_load(self, pid):
        if type(pid) is tuple and len(pid) == 6 and pid[5] is not None:
            raise _Reject("legacy storage views are not supported")
        storage_type, key, _, numel = _storage_pid(pid, "a storage")
        if key in self.storages:
            storage = self.storages[key]
            if storage.dtype_name != storage_type.dtype_name:
                raise _Reject(f"storage {key!r:.20} is used with two dtypes")
            return storage
        _itemsize(storage_type.dtype_name, f"storage {key}")
        storage = _Storage(None, storage_type.dtype_name)
        storage.numel = numel
        self.storages[key] = storage
        return storage

    def load(self):
        header = Unpickler(self.data, self._no_storages)
        try:
            magic, pos = header.load(0)
        except _ERRORS:
            magic = None
        if type(magic) is not int or magic != _LEGACY_MAGIC:
            raise NotTorch()
        protocol, pos = header.load(pos)
        if protocol != _LEGACY_PROTOCOL:
            raise _Reject(f"legacy protocol version {protocol!r:.20} is not read")
        sys_info, pos = header.load(pos)
        if type(sys_info) is not dict or sys_info.get("little_endian") not in (True, False):
            raise _Reject("legacy system info is malformed")
        if not sys_info["little_endian"]:
            raise _Reject("legacy checkpoints written on big-endian machines are not read")
        # the storages' dtypes and sizes are in the object's pickle, their bytes after it:
        # a dry run collects them, the object is built once the bytes are read
        body_start = pos
        _, pos = Unpickler(self.data, self.persistent_load, dry_run=True).load(body_start)
        keys, pos = header.load(pos)
        if type(keys) is not list or sorted(keys) != sorted(self.storages) or \
                len(set(keys)) != len(keys):
            raise _Reject("legacy storage keys do not match the object's storages")
        view = memoryview(self.data)
        for key in keys:
            storage = self.storages[key]
            if pos + 8 > len(self.data):
                raise _Reject(f"storage {key!r:.20} is truncated")
            (numel,) = struct.unpack("<q", view[pos:pos + 8])
            itemsize = _itemsize(storage.dtype_name, f"storage {key}")
            if numel != storage.numel or pos + 8 + numel * itemsize > len(self.data):
                raise _Reject(f"storage {key!r:.20} is truncated or its size is wrong")
            raw = view[pos + 8:pos + 8 + numel * itemsize]
            storage.data = _native(bytes(raw), storage.dtype_name, False)
            pos += 8 + numel * itemsize
        if pos != len(self.data):
            raise _Reject("bytes after the last storage")
        obj, _ = Unpickler(self.data, self.persistent_load).load(body_start)
        return check_output(obj)


# ------------------------------------------------------------------ entry points

# what pickletools, the interpreter and the allowed constructors raise for bad input
_ERRORS = (_Reject, ValueError, TypeError, KeyError, IndexError, AttributeError,
           OverflowError, RecursionError, struct.error, EOFError, UnicodeError,
           MemoryError, ZeroDivisionError, RuntimeError)


def load_zip(zf, where):
    """The object of a torch.save ZIP archive (laid out as SafeZip checks)."""
    try:
        return ZipCheckpoint(zf).load()
    except _ERRORS as e:
        raise _as_corrupt(e, where) from None


def load_legacy(data, where):
    """The object of a file in torch.save's pre-ZIP format."""
    try:
        return LegacyCheckpoint(data).load()
    except _ERRORS as e:
        raise _as_corrupt(e, where) from None


def _as_corrupt(e, where):
    from .serialization import CorruptFileError
    if isinstance(e, CorruptFileError):
        return e
    if isinstance(e, NotTorch):
        return CorruptFileError(f"ember.load: {where} is a pickle, not a torch.save "
                                "checkpoint; ember never unpickles. Save it with ember.save, "
                                "torch.save, safetensors or as .npz")
    if isinstance(e, _Reject):
        return CorruptFileError(f"ember.load: {where} is a PyTorch checkpoint ember does not "
                                f"load: {str(e)[:300]}; nothing was loaded")
    return CorruptFileError(f"ember.load: {where} is a truncated or corrupt PyTorch "
                            f"checkpoint ({type(e).__name__}: {str(e)[:300]}); nothing was "
                            "loaded")
