"""The bytecode interpreter: runs a frame's CPython 3.11 bytecode on symbolic values and
records its tensor operations into an FX graph.

Python values that are not tensors are evaluated for real (constant folding, loops over
known sequences, calls of plain Python functions, which are inlined); tensor operations
run on fake (meta) tensors, so shapes, dtypes and errors are the eager ones, and each
becomes a graph node. Every value read from outside the frame (arguments, globals,
closures, module attributes) is guarded, so a cached graph is reused only when those
values are what they were. Anything else raises Unsupported; raised by one of the
frame's own instructions in BREAK_OPS, it is a graph break there (convert.compile_break,
resume.py), also inside a function the frame's CALL inlines (a nested break: e.chain,
Translator._note_break), otherwise the caller runs the frame in CPython.
"""
from __future__ import annotations

import dis
import inspect
import operator
import os
import sys
import types
from collections import defaultdict

from .. import _C
from .. import fx
from . import resume, skip, stdlib, sym_floats
from .sym_floats import FloatVar
from .exc import Unsupported
from ..fx.shape_env import SymBool, SymInt, sym_max, sym_min
from .guards import GuardSet
from .side_effects import DELETED, SideEffects
from .source import AttrSource, DictSource, GlobalSource, ItemSource, LocalSource, \
    ClosureSource, ObjectSource, TensorKey, TensorKeyDictSource
from .variables import (PURE_BUILTINS, SliceVar, SymVar, BoundMethodVar, BuiltinMethodVar, BuiltinVar,
                        CellVar, ConstVar, DictVar, FunctionVar, IteratorVar, ListVar,
                        ModuleVar, NullVar, ObjectVar, OpVar, PythonModuleVar, SequenceVar,
                        TensorMethodVar, TensorVar, TupleVar, ValueVar, VariableTracker,
                        constant_args, is_constant)

# Instructions a frame can break at: CPython runs them on the live values. Besides
# calls and conditional jumps, simple ones: name -> (values popped, values pushed)
SIMPLE_BREAK_OPS = {
    "LOAD_ATTR": (1, 1), "STORE_ATTR": (2, 0), "BINARY_OP": (2, 1),
    "BINARY_SUBSCR": (2, 1), "STORE_SUBSCR": (3, 0), "COMPARE_OP": (2, 1),
    "CONTAINS_OP": (2, 1), "UNARY_NEGATIVE": (1, 1), "UNARY_POSITIVE": (1, 1),
    "UNARY_INVERT": (1, 1), "UNARY_NOT": (1, 1),
}
BREAK_OPS = frozenset({"CALL", "CALL_FUNCTION_EX", "POP_JUMP_FORWARD_IF_TRUE",
                       "POP_JUMP_FORWARD_IF_FALSE", "POP_JUMP_BACKWARD_IF_TRUE",
                       "POP_JUMP_BACKWARD_IF_FALSE"}) | frozenset(SIMPLE_BREAK_OPS)
# tensor methods whose call is a graph break (bound methods until then, so the break
# is at the CALL, with the bound method on the stack)
# instructions that call: a break inside the frame they inline can resume there
CALL_OPS = frozenset({"CALL", "CALL_FUNCTION_EX"})
_BREAK_METHODS = ("item", "tolist", "numpy", "backward", "data_ptr", "register_hook",
                  "retain_grad", "requires_grad_")

MAX_INLINE_DEPTH = 32
MAX_INSTRUCTIONS = 200_000

_BINARY = {
    0: operator.add, 1: operator.and_, 2: operator.floordiv, 3: operator.lshift,
    4: operator.matmul, 5: operator.mul, 6: operator.mod, 7: operator.or_, 8: operator.pow,
    9: operator.rshift, 10: operator.sub, 11: operator.truediv, 12: operator.xor,
    13: operator.iadd, 14: operator.iand, 15: operator.ifloordiv, 16: operator.ilshift,
    17: operator.imatmul, 18: operator.imul, 19: operator.imod, 20: operator.ior,
    21: operator.ipow, 22: operator.irshift, 23: operator.isub, 24: operator.itruediv,
    25: operator.ixor,
}
_INPLACE_TO_PURE = {
    operator.iadd: operator.add, operator.iand: operator.and_,
    operator.ifloordiv: operator.floordiv, operator.ilshift: operator.lshift,
    operator.imatmul: operator.matmul, operator.imul: operator.mul,
    operator.imod: operator.mod, operator.ior: operator.or_, operator.ipow: operator.pow,
    operator.irshift: operator.rshift, operator.isub: operator.sub,
    operator.itruediv: operator.truediv, operator.ixor: operator.xor,
}
_SYM_BINARY = {operator.add, operator.sub, operator.mul, operator.floordiv, operator.mod}
_COMPARE = {"<": operator.lt, "<=": operator.le, "==": operator.eq, "!=": operator.ne,
            ">": operator.gt, ">=": operator.ge}

# Tensor attributes that are metadata: answered from the fake tensor as constants.
_META_ATTRS = {"shape", "dtype", "ndim", "requires_grad", "is_leaf", "is_cuda",
               "is_sparse", "is_quantized", "layout"}
_META_METHODS = {"size", "dim", "ndimension", "numel", "nelement", "stride",
                 "is_contiguous", "element_size", "is_floating_point", "is_complex",
                 "storage_offset", "get_device"}
_UNSUPPORTED_METHODS = {
    "item": "Tensor.item() (a Python number from tensor data)",
    "tolist": "Tensor.tolist() (Python data from tensor data)",
    "numpy": "Tensor.numpy()", "__array__": "conversion to a NumPy array",
    "backward": "Tensor.backward() inside a compiled function",
    "data_ptr": "Tensor.data_ptr()", "register_hook": "Tensor.register_hook()",
    "retain_grad": "Tensor.retain_grad()", "requires_grad_": "Tensor.requires_grad_()",
}


def _symbolic_mode():
    from ..fx.sym_meta import symbolic_meta_mode
    return symbolic_meta_mode()


def _entry_of(target, method):
    """The op-table entry a recorded call dispatches (None: not an op, e.g. detach or
    an allow_in_graph function)."""
    if isinstance(target, _C.Op):
        return target.entry
    if method:
        attr = inspect.getattr_static(_C.Tensor, target, None)
        return attr.entry if isinstance(attr, _C.Op) else None
    op = _operator_ops().get(target)
    return op.entry if op is not None else None


_OPERATOR_OPS = None


def _operator_ops():
    """Python operators whose Tensor slot is an in-place op (csrc/tensor/tensor.c's
    in-place number slots and __setitem__)."""
    global _OPERATOR_OPS
    if _OPERATOR_OPS is None:
        from ..ops import api
        _OPERATOR_OPS = {operator.iadd: api.add_, operator.isub: api.sub_,
                         operator.imul: api.mul_, operator.itruediv: api.div_,
                         operator.setitem: getattr(api, "__setitem__")}
    return _OPERATOR_OPS


def _is_ember_file(filename: str) -> bool:
    from . import skip
    return skip.is_ember_internal(filename)


# constants whose subscript is a plain lookup (raising KeyError/IndexError/TypeError
# as eager does, with nothing else run): builtin containers and os.environ
_PLAIN_SUBSCRIPTED = (dict, list, tuple, str, bytes, range, type(os.environ))

class OutputGraph:
    """What a capture produces: the FX graph, its inputs (with sources) and the guards."""

    def __init__(self, code):
        self.code = code
        self.graph = fx.Graph()
        self.inputs = []              # [(source, placeholder node, real value)]
        self.tensor_vars = {}         # id(real tensor) -> TensorVar (one input per object)
        self.guards = GuardSet()
        self.side_effects = SideEffects()
        self.input_storages = {}      # id(storage of an input's fake) -> the storage
        self.keepalive = []           # real input objects, so ids stay unique
        self.nodes_by_line = {}
        self._first_op = None
        self.dynamic_mode = False     # ember.compile(dynamic=...) (capture/dynamic.py)
        self.sym = None               # sym_sizes.SymbolicInputs once a size is symbolic
        self.stop_path = None         # [(code, offset)], outermost first: stop there

    def add_input(self, value, source) -> TensorVar:
        known = self.tensor_vars.get(id(value))
        if known is not None:
            if source is not None and known.source is not None and source != known.source:
                # one input for both paths: guarded to stay one tensor (another call
                # passing two tensors must not read the first twice)
                self.guards.add("ALIAS", source, (known.source, True))
            return known
        if value.dtype.is_complex:
            raise Unsupported(_complex_reason(f"an input ({source.name() if source else '?'})",
                                              value.dtype))
        name = _placeholder_name(source)
        first = next((n for n in self.graph.nodes if n.op != "placeholder"), None)
        if first is not None:
            with self.graph.inserting_before(first):
                node = self.graph.placeholder(name)
        else:
            node = self.graph.placeholder(name)
        self.inputs.append((source, node, value))
        fake = self._sym_fake(value, source, node)     # (size inputs follow the tensor)
        if fake is None:
            fake = _fake_of(value)
        node.meta["example_value"] = fake
        node.meta["source"] = source.name()
        tv = TensorVar(node, fake, source, from_input=True)
        tv.real_type = type(value)
        tv.input_value = value
        storage = fake.untyped_storage()
        self.input_storages[id(storage)] = storage
        self.tensor_vars[id(value)] = tv
        self.keepalive.append(value)
        return tv

    def _sym_fake(self, value, source, node):
        """A SymFake for an argument of the frame whose dims are symbolic, else None
        (parameters, buffers and other inputs read through attributes stay static)."""
        if not isinstance(source, LocalSource) or isinstance(value, _parameter_type()):
            return None
        if self.dynamic_mode is False and not _marked(value):
            return None
        from . import dynamic
        dims = dynamic.dynamic_dims(self.dynamic_mode, self.code, source.name(), value)
        if not dims:
            return None
        if self.sym is None:
            from .sym_sizes import SymbolicInputs
            self.sym = SymbolicInputs(self)
            self.guards.sym = self.sym
        return self.sym.fake(value, source, dims, node)

    def sym_int(self, value, source):
        """A SymVar for an int argument of the frame that automatic dynamic (or
        dynamic=True) makes symbolic (a size passed in, or to a resume function), else
        None."""
        if self.dynamic_mode is False:
            return None
        from . import dynamic
        # (0 and 1 stay constants, but are recorded: a position 0, then 5, then 6
        # makes the second capture symbolic, as a tensor dim going 1 -> 5 would)
        if not dynamic.dynamic_int(self.dynamic_mode, self.code, source.name(), value) \
                or value in (0, 1):
            return None
        if self.sym is None:
            from .sym_sizes import SymbolicInputs
            self.sym = SymbolicInputs(self)
            self.guards.sym = self.sym
        return self.sym.int_input(value, source)

    def symbolic(self):
        """True when ops must run on symbolic sizes."""
        return self.sym is not None and bool(self.sym.placeholders)


def _marked(t):
    return bool(getattr(t, "_dynamo_dynamic_indices", None) or
                getattr(t, "_dynamo_weak_dynamic_indices", None))


def _parameter_type():
    from ..nn.parameter import Parameter
    return Parameter


def _complex_reason(what, dtype) -> str:
    """Why a frame with complex tensors runs eagerly: no backend compiles complex dtypes
    (counted in counters["unsupported"] under this reason)."""
    return (f"complex tensors: {what} is {dtype}, a dtype the backends cannot compile "
            "(the frame runs eagerly)")


def _complex_result(value):
    if isinstance(value, _C.Tensor):
        return value.dtype if value.dtype.is_complex else None
    if isinstance(value, (tuple, list)):
        return next((d for d in map(_complex_result, value) if d is not None), None)
    return None


def _dict_source(base, key):
    if base is None:
        return None
    if isinstance(key, _C.Tensor):
        return TensorKeyDictSource(base, TensorKey(key, f"<tensor {id(key):#x}>"))
    return DictSource(base, key)


def _dict_key(key):
    """The key of DictVar.items for a key VT: a constant, or the real tensor of a graph
    input (dicts keyed by parameters); None when it has none."""
    if key.is_constant():
        return key.as_constant()
    if isinstance(key, TensorVar):
        return getattr(key, "input_value", None)
    return None


def _placeholder_name(source) -> str:
    raw = source.name() if source is not None else "input"
    out = "".join(c if c.isalnum() else "_" for c in raw).strip("_") or "input"
    while "__" in out:
        out = out.replace("__", "_")
    if out[0].isdigit():
        out = "_" + out
    root = source
    while hasattr(root, "base"):
        root = root.base
    return ("L_" if isinstance(root, LocalSource) else "G_") + out


def _fake_of(t):
    fake = _C._meta_tensor(tuple(t.shape), t.dtype, t.stride())
    if t.requires_grad:
        fake.requires_grad_(True)
    return fake


class _MetaMode:
    """Runs ops on fake tensors: meta mode, grad mode as the caller's."""

    def __enter__(self):
        self._prev = _C._get_mode()
        try:
            _C._set_mode(_C.MODE_META)
        except BaseException:     # (a KeyboardInterrupt right after the set)
            _C._set_mode(*self._prev)
            raise

    def __exit__(self, *exc):
        _C._set_mode(*self._prev)
        return False


# decoded code objects: a plain dict, bounded (cleared whole when full) and cleared by
# ember.compiler.reset(); not weak, as a weak table's callbacks would be Python frames
# the hook sees whenever a code object dies with capture on
_DECODED = {}
_DECODED_MAX = 4096
_COMPILED_CALLS = tuple(t for t in (getattr(_C._capture, "FastCall", None),
                                     getattr(_C._capture, "FunctionCall", None)) if t)


def _decoded(code):
    """(instructions, index by offset, exception table) of a code object, decoded once
    per process (dis is slow, and a model inlines the same functions many times)."""
    d = _DECODED.get(code)
    if d is None:
        if len(_DECODED) >= _DECODED_MAX:
            _DECODED.clear()
        instructions = tuple(dis.get_instructions(code))
        d = _DECODED[code] = (instructions,
                              {ins.offset: i for i, ins in enumerate(instructions)},
                              tuple(dis.Bytecode(code).exception_entries))
    return d


def _always_there(source):
    """Whether a value read from source can be fetched again on any call the entry's
    guards admit: a local (a resume function's argument too), or an item of a list or
    tuple read from one (wrap guards their type and length)."""
    while isinstance(source, ItemSource) and isinstance(source.key, int):
        source = source.base
    return isinstance(source, LocalSource)


class Translator:
    """Interprets one code object (the frame's, or an inlined function's)."""

    def __init__(self, code, f_globals, f_builtins, locals_, cells, output: OutputGraph,
                 parent=None, globals_source_root=None):
        self.code = code
        self.f_globals = f_globals
        self.f_builtins = f_builtins
        self.locals = locals_
        self.cells = cells             # name -> CellVar (cellvars and freevars)
        self.output = output
        self.parent = parent
        self.depth = 0 if parent is None else parent.depth + 1
        self.globals_root = globals_source_root   # None: the frame's own globals
        self.stack = []
        self.kw_names = None
        self.instructions, self.index_of, self.exception_entries = _decoded(code)
        self.lineno = code.co_firstlineno
        self.result = None
        self.yields = None      # values a generator expression yielded
        self.lazy = False       # a generator function's frame, run by its consumer
        self.stop_at = None     # offset to stop before (a graph break; see StopTrace)
        self.stopped = None     # the instruction it stopped before
        self.offset = None      # the instruction being run (a stop path's check)
        # nested graph breaks: the code whose frame the CALL being run inlines as its
        # whole body (its return value is the call's result), that frame's flag, and
        # the grad mode the frame was entered with
        self.direct_code = None
        self.direct = False
        self.entry_grad = None

    # ------------------------------------------------------------ running

    def location(self) -> str:
        return f"{self.code.co_filename}:{self.lineno} in {self.code.co_name}"

    def user_stack(self):
        frames, tx = [], self
        while tx is not None:
            frames.append((tx.code.co_filename, tx.lineno, tx.code.co_name))
            tx = tx.parent
        return frames

    def run(self):
        for _ in self.execute():
            raise Unsupported("yield outside a generator")
        return self.result

    def execute(self):
        """Runs the frame; a generator function's frame (self.lazy) yields each value
        it yields, so it runs as far as its consumer asks, as CPython's generators do.
        A Python exception the frame raises (PyException) goes to the handler of the
        exception table entry covering the instruction, or out to the caller."""
        ip, steps = 0, 0
        grad_mode = _C.is_grad_enabled()   # grad-mode blocks change it while capturing
        try:
            while True:
                ins = self.instructions[ip]
                if ins.positions is not None and ins.positions.lineno is not None:
                    self.lineno = ins.positions.lineno
                steps += 1
                if steps > MAX_INSTRUCTIONS:
                    raise Unsupported("the frame runs too many instructions to capture")
                self.offset = ins.offset
                if ins.offset == self.stop_at and self._on_stop_path():
                    self.stopped = ins
                    self.output.exit_grad_mode = _C.is_grad_enabled()  # at the break
                    raise StopTrace(self)
                handler = getattr(self, ins.opname, None)
                if handler is None:
                    raise Unsupported(f"bytecode {ins.opname}")
                if self.lazy and ins.opname == "YIELD_VALUE":
                    self.suspended_at = ins.offset
                    try:
                        yield self.pop()
                    except PyException as e:
                        # thrown in (stdlib.GeneratorThrowVar): raised at the yield
                        self.suspended_at = None
                        ip = self.index_of[self._handle(ins, e)]
                        continue
                    self.suspended_at = None
                    self.push(ConstVar(None))       # what send() sent: next() sends None
                    ip += 1
                    continue
                try:
                    jump = handler(ins)
                except PyException as e:
                    if ins.opname in BREAK_OPS and self._leaves_with_block(ins):
                        # __exit__ with an exception is not interpreted: the frame
                        # breaks here and CPython runs the instruction and the handler
                        why = Unsupported(f"{e.reason}, leaving a `with` block",
                                          self.location())
                        why.user_stack = self.user_stack()
                        self._note_break(why, ins)
                        raise why from None
                    jump = self._handle(ins, e)
                except Unsupported as e:
                    self._note_break(e, ins)
                    raise
                if ins.opname == "RETURN_VALUE":
                    if self.parent is None:
                        self.output.exit_grad_mode = _C.is_grad_enabled()
                    return
                ip = self.index_of[jump] if jump is not None else ip + 1
        except PyException as e:
            if e.location is None:
                e.location = self.location()
                e.user_stack = self.user_stack()
            if self.lazy and isinstance(e.exc, StopIteration):
                raise _unsupported("StopIteration inside a generator (a RuntimeError)",
                                   e) from None
            if self.parent is None:
                raise _unsupported(e.reason, e) from None
            raise
        except Unsupported as e:
            if e.location is None:
                e.location = self.location()
                e.user_stack = self.user_stack()
            raise
        finally:
            if self.parent is None:
                _C._set_grad_enabled(grad_mode)

    def _note_break(self, e, ins):
        """Where the frame chain can break for e, raised by ins (e.chain: [(code,
        offset)], innermost first; at the root, e.break_at). A break inside a frame
        this CALL inlines as its whole body (self.direct_code) stays there, this call
        added to the chain (a nested break: convert.compile_break); else the frame
        breaks at ins itself, if it can; else the chain is dropped."""
        if e.break_at is not None or getattr(e, "noted_in", None) == id(self):
            return
        chain = e.chain
        if chain and ins.opname in CALL_OPS and e.chain_caller == id(self):
            chain.append((self.code, ins.offset))
        elif ins.opname in BREAK_OPS and not (self.parent is not None and e.no_nest):
            e.chain = [(self.code, ins.offset)]
        else:
            e.chain = None
        # (by id: the exception must not keep the frames' values alive)
        e.chain_caller = id(self.parent) if self.direct else None
        if self.parent is None and e.chain:
            # the frame can stop before this instruction, run it in CPython and
            # resume after it (convert.py, resume.py)
            e.break_at = ins.offset
            e.break_op = ins.opname

    def _on_stop_path(self):
        """Whether this frame and the frames it runs inside are at the stop path's
        offsets (out.stop_path: [(code, offset)], outermost first)."""
        path = self.output.stop_path
        tx, depth = self.parent, self.depth - 1
        while tx is not None:
            code, offset = path[depth]
            if tx.code is not code or tx.offset != offset:
                return False
            tx, depth = tx.parent, depth - 1
        return True

    def _leaves_with_block(self, ins):
        """Whether an exception raised at ins goes to a `with` block's cleanup."""
        for entry in self.exception_entries:
            if entry.start <= ins.offset < entry.end:
                i = self.index_of[entry.target]
                return [x.opname for x in self.instructions[i:i + 2]] == \
                    ["PUSH_EXC_INFO", "WITH_EXCEPT_START"] and \
                    not stdlib.exit_interpreted(self.stack[entry.depth - 1])
        return False

    def _handle(self, ins, e):
        """The jump target of the handler for PyException e raised at ins (its stack
        cut to the entry's depth, then lasti and the exception pushed), or e goes on."""
        for entry in self.exception_entries:
            if entry.start <= ins.offset < entry.end:
                del self.stack[entry.depth:]
                if entry.lasti:
                    self.push(ConstVar(ins.offset))
                self.push(e.vt)
                return entry.target
        raise e

    def push(self, v):
        self.stack.append(v)

    def pop(self):
        return self.stack.pop()

    def popn(self, n):
        if n == 0:
            return []
        items = self.stack[-n:]
        del self.stack[-n:]
        return items

    # ------------------------------------------------------------ wrapping real values

    def guard(self, kind, source, value=None):
        if source is not None and not self._trusted(source):
            self.output.guards.add(kind, source, value)

    def _trusted(self, source):
        """Values ember's own modules read from their globals are not guarded."""
        root = source
        while hasattr(root, "base"):
            root = root.base
        if isinstance(root, ObjectSource) and isinstance(root.obj, dict):
            return _is_ember_file(root.obj.get("__file__", "") or "")
        return False

    def wrap(self, value, source) -> VariableTracker:
        """A VT for a real value read from `source` (None: no way to fetch it again)."""
        if isinstance(value, _C.Tensor):
            if source is None:
                raise Unsupported("a tensor the compiled code could not fetch again "
                                  "(no source)")
            self.guard("TENSOR_MATCH", source, value)
            return self.output.add_input(value, source)
        if type(value) is int and isinstance(source, LocalSource):
            sym = self.output.sym_int(value, source)
            if sym is not None:
                self.guard("TYPE_MATCH", source, int)
                return sym
        if type(value) is float and isinstance(source, LocalSource):
            from .sym_floats import wrap_float
            fv = wrap_float(self, value, source)     # (a dynamic float: sym_floats.py)
            if fv is not None:
                return fv
        if is_constant(value):
            kind = "EQUALS_MATCH" if not isinstance(value, _C.dtype) else "ID_MATCH"
            if _always_there(source):
                # guarded when read (ValueVar): a value only moved needs no guard
                return ConstVar(value, source, (self.output.guards, (kind, source, value)))
            self.guard(kind, source, value)
            return ConstVar(value, source)
        effects = self.output.side_effects
        known = effects.known(value)
        if known is not None:
            # one VT per mutable object: a second path to it sees the same state, and
            # the guard checks that both paths still reach one object
            if source is not None and known.source is not None and \
                    source != known.source:
                if isinstance(known, ObjectVar):
                    known.value       # (its identity guard, from now on)
                self.guard("ALIAS", source, (known.source, True))
            return known
        if isinstance(value, _module_type()):
            self.guard("TYPE_MATCH", source, type(value))
            return effects.track(value, ModuleVar(value, source))
        if isinstance(value, _C.Op):
            self.guard("ID_MATCH", source, value)
            return OpVar(value, source)
        if isinstance(value, stdlib.GradModeExit):
            self.guard("ID_MATCH", source, value)
            return stdlib.exit_of_cut_block(value)
        role = _compiler_role(value)
        if role is not None:
            self.guard("ID_MATCH", source, value)
            return _CompilerFnVar(value, role, source)
        if isinstance(value, (tuple, list)):
            self.guard("TYPE_MATCH", source, type(value))
            self.guard("LEN_MATCH", source, len(value))
            if isinstance(value, list):
                lv = effects.track(value, ListVar([], source))
                lv.real = value
                lv.items = [self.wrap(v, ItemSource(source, i) if source is not None
                                      else None) for i, v in enumerate(value)]
                return lv
            items = [self.wrap(v, ItemSource(source, i) if source is not None else None)
                     for i, v in enumerate(value)]
            fields = getattr(type(value), "_fields", None) or \
                getattr(type(value), "__match_args__", None)
            return TupleVar(items, source, fields=list(fields) if fields else None,
                            tuple_type=type(value))
        if type(value) is dict or (type(value) is defaultdict and
                                   value.default_factory in (dict, list)):
            # constant keys, or tensors (an optimizer's state, keyed by parameters)
            if not all(is_constant(k) or isinstance(k, _C.Tensor) for k in value):
                raise Unsupported("a dict with non-constant keys")
            self.guard("TYPE_MATCH", source, type(value))
            self.guard("DICT_KEYS", source, tuple(value.keys()))
            dv = effects.track(value, DictVar({}, source))
            dv.real = value
            dv.default_factory = getattr(value, "default_factory", None)
            dv.items = {k: self.wrap(v, _dict_source(source, k)) for k, v in value.items()}
            return dv
        if type(value) in _COMPILED_CALLS:
            # ember.compile(f) (C: FunctionCall, or FastCall for mode="reduce-overhead")
            # called inside a compiled region: inline f itself
            self.guard("ID_MATCH", source, value)
            return FunctionVar(value._orig_fn, AttrSource(source, "_orig_fn")
                               if source is not None else None)
        if isinstance(value, types.FunctionType):
            self.guard("ID_MATCH", source, value)
            if stdlib.handled(value):       # ember.tensor, ember.as_tensor
                return BuiltinVar(value, source)
            orig = getattr(value, "_orig_fn", None)
            if isinstance(orig, types.FunctionType) and \
                    hasattr(value, "_ember_compile_context"):
                # ember.compile(f) called inside a compiled region: inline f itself
                return FunctionVar(orig, AttrSource(source, "_orig_fn")
                                   if source is not None else None)
            return FunctionVar(value, source)
        if isinstance(value, types.ModuleType):
            self.guard("ID_MATCH", source, value)
            return PythonModuleVar(value, source)
        if isinstance(value, types.MethodType) and source is not None and \
                isinstance(value.__self__, _C.Tensor) and \
                isinstance(value.__func__, _C.Op) and \
                inspect.getattr_static(_C.Tensor, value.__func__.__name__, None) \
                is value.__func__:
            # a tensor's op method (a resume function's argument after a graph break)
            self.guard("ID_MATCH", AttrSource(source, "__func__"), value.__func__)
            tv = self.wrap(value.__self__, AttrSource(source, "__self__"))
            return TensorMethodVar(tv, value.__func__.__name__)
        if isinstance(value, types.MethodType) and isinstance(value.__func__,
                                                              types.FunctionType):
            # the function (a bound method is a new object at each attribute read)
            self.guard("ID_MATCH", AttrSource(source, "__func__") if source is not None
                       else None, value.__func__)
            self_var = self.wrap(value.__self__, AttrSource(source, "__self__")
                                 if source is not None else None)
            return BoundMethodVar(value.__func__, self_var)
        if isinstance(value, (types.BuiltinFunctionType, types.BuiltinMethodType)) or \
                value in _pure_builtin_ids() or stdlib.handled(value):
            self.guard("ID_MATCH", source, value)
            return BuiltinVar(value, source)
        if _always_there(source):
            # guarded when read (ValueVar): an object only moved needs no guard
            return effects.track(value, ObjectVar(value, source, (self.output.guards,
                                                                  ("ID_MATCH", source,
                                                                   value))))
        self.guard("ID_MATCH", source, value)
        return effects.track(value, ObjectVar(value, source))

    def wrap_constant_result(self, value):
        if is_constant(value):
            return ConstVar(value)
        if isinstance(value, SymInt):
            return SymVar(value)
        if isinstance(value, SymBool):
            return ConstVar(bool(value))         # guarded
        if isinstance(value, tuple) and any(isinstance(v, SymInt) for v in value):
            return TupleVar([self.wrap_constant_result(v) for v in value],
                            tuple_type=type(value))
        if type(value) is list and all(is_constant(v) for v in value):
            return ListVar([ConstVar(v) for v in value])    # sorted(), str.split()
        raise Unsupported(f"a {type(value).__name__} computed from constants")

    # ------------------------------------------------------------ tensor operations

    def fake_of(self, v):
        return self._operand(v, "fake", (OpVar, ObjectVar))

    def node_arg(self, v):
        return self._operand(v, "node", OpVar)

    def _operand(self, v, tensor_attr, objects):
        """v as an operand of a tensor operation: a tensor's tensor_attr, constants as
        themselves, containers of those; constant `objects` VTs as their values."""
        if isinstance(v, TensorVar):
            return getattr(v, tensor_attr)
        if isinstance(v, SymVar):
            return v.sym if tensor_attr == "fake" else self.output.sym.node(v.sym)
        if isinstance(v, SliceVar):
            return slice(*[self._operand(p, tensor_attr, objects) for p in v.parts])
        if isinstance(v, ConstVar):
            return v.value
        if isinstance(v, TupleVar):
            return tuple(self._operand(i, tensor_attr, objects) for i in v.items)
        if isinstance(v, ListVar):
            return [self._operand(i, tensor_attr, objects) for i in v.items]
        if isinstance(v, DictVar):
            return {k: self._operand(i, tensor_attr, objects) for k, i in v.items.items()}
        if isinstance(v, objects) and v.is_constant():
            return v.as_constant()
        raise Unsupported(f"passing {v} to a tensor operation")

    def call_op(self, target, args, kwargs, method=False):
        """Records target(*args, **kwargs) (or args[0].<target>(...)) as a node, with its
        result computed on fake tensors."""
        name = target if method else getattr(target, "__name__", str(target))
        if args and any(isinstance(a, FloatVar) for a in args):
            r = sym_floats.call(self, target, args, kwargs, method)   # x.mul(s)
            if r is not None:
                return r
        if self.output.symbolic():
            # a symbolic position in x[p], x[p] = v, narrow: as slices (sym_indexing.py)
            from . import sym_indexing
            done = sym_indexing.call(self, name, target, args, kwargs)
            if done is not sym_indexing.NOT_HANDLED:
                return done
        entry = _entry_of(target, method)
        if entry is not None and not entry.traceable:
            raise Unsupported(f"{name} (its value depends on the storage layout, which "
                              "compiled code does not keep)")
        for i in (entry.mutates if entry is not None else ()):
            t = args[i] if i < len(args) else None
            if isinstance(t, TensorVar) and t.from_input and t.fake.requires_grad and \
                    _C.is_grad_enabled():
                # writes into inputs are graph outputs written back after each call
                # (ember/aot/mutation.py); one autograd follows into an input that
                # requires grad runs in CPython (eager refuses it for a leaf)
                raise Unsupported(f"in-place {name} on an input that requires grad (or a "
                                  "view of one) with grad mode on")
        if getattr(self.output, "grad_regions", 0) and (
                entry is not None and entry.checks_values or
                target in (operator.getitem, operator.setitem) and
                _holds_tensor(args[1:])):
            raise Unsupported(f"{name}, which may raise at run time, inside a grad-mode "
                              "block (the block would not be left)")
        fake_args = [self.fake_of(a) for a in args]
        fake_kwargs = {k: self.fake_of(v) for k, v in kwargs.items()}
        if name == "to":
            # fakes live on the meta device: to(device) of the one real device (cpu)
            # is computed on them without the device; the node keeps it
            fake_args = [a for a in fake_args if not _is_cpu(a)]
            if _is_cpu(fake_kwargs.get("device")):
                del fake_kwargs["device"]
        symbolic = self.output.symbolic()
        try:
            with (_symbolic_mode() if symbolic else _MetaMode()):
                if method:
                    result = getattr(fake_args[0], target)(*fake_args[1:], **fake_kwargs)
                else:
                    result = target(*fake_args, **fake_kwargs)
        except Unsupported:
            raise
        except Exception as e:   # noqa: BLE001 - eager raises this too; let eager run
            if symbolic and isinstance(e, TypeError):
                # a rule, a decomposition or a kernel that needs plain ints (NotSymbolic
                # is a TypeError too): capture again with the sizes specialised
                from .sym_sizes import SymbolicUnsupported
                raise SymbolicUnsupported(f"{name} on symbolic sizes raised "
                                          f"{type(e).__name__}: {e}") from None
            raise Unsupported(f"{name} raised {type(e).__name__} on its inputs: {e}") \
                from None
        complex_dtype = _complex_result(result)
        if complex_dtype is not None:
            raise Unsupported(_complex_reason(f"the result of {name}", complex_dtype))
        if isinstance(result, _C.Tensor) and entry is not None and not entry.mutates:
            for a, fake in zip(list(args) + list(kwargs.values()),
                               fake_args + list(fake_kwargs.values())):
                if fake is result and isinstance(a, TensorVar):
                    # the op returns its argument itself (flatten of 1-d, contiguous of
                    # a contiguous tensor, to() of its own dtype): the same object, as
                    # in eager, not a new tensor
                    return a
        node_args = tuple(self.node_arg(a) for a in args)
        node_kwargs = {k: self.node_arg(v) for k, v in kwargs.items()}
        graph = self.output.graph
        if method:
            node = graph.call_method(target, node_args, node_kwargs)
        else:
            node = graph.call_function(target, node_args, node_kwargs)
        node.meta["stack"] = self.user_stack()
        node.stack_trace = "".join(f'File "{f}", line {ln}, in {fn}\n'
                                   for f, ln, fn in reversed(node.meta["stack"]))
        return self.wrap_result(node, result)

    def wrap_result(self, node, value):
        """A VT for an op's fake result. A tensor sharing an input's storage is a view
        of that input (decided per call, so reshape and contiguous count only when they
        return views): writing into it would change the input."""
        node.meta.setdefault("example_value", value)
        if isinstance(value, _C.Tensor):
            storage = value.untyped_storage()
            from_input = self.output.input_storages.get(id(storage)) is storage
            tv = TensorVar(node, value, from_input=from_input)
            tv.real_type = _C.Tensor
            return tv
        if isinstance(value, tuple):
            items = []
            for i, v in enumerate(value):
                item = self.output.graph.call_function(operator.getitem, (node, i), {})
                item.meta["stack"] = node.meta.get("stack")
                items.append(self.wrap_result(item, v))
            fields = getattr(type(value), "_fields", None) or \
                getattr(type(value), "__match_args__", None)
            return TupleVar(items, fields=list(fields) if fields else None,
                            tuple_type=type(value))
        if value is None or is_constant(value):
            return ConstVar(value)
        if isinstance(value, SymInt):
            return SymVar(value)
        raise Unsupported(f"an operation returned a {type(value).__name__}")

    def tensor_getattr(self, tv, name):
        if name in _BREAK_METHODS:
            return UnsupportedMethodVar(tv, name, _UNSUPPORTED_METHODS[name])
        if name in _UNSUPPORTED_METHODS:
            raise Unsupported(_UNSUPPORTED_METHODS[name])
        if name in _META_ATTRS:
            return self.wrap_constant_result(getattr(tv.fake, name))
        if name == "device":
            from ..device import device
            return ConstVar(device("cpu"))
        if name == "grad" and getattr(tv, "input_value", None) is not None:
            return self.read_grad(tv)
        if name in ("grad", "grad_fn", "data", "_version", "_base"):
            raise Unsupported(f"Tensor.{name} inside a compiled function")
        attr = inspect.getattr_static(_C.Tensor, name, None)
        if isinstance(attr, _C.Op):
            return TensorMethodVar(tv, name)
        if name in _META_METHODS:
            return _MetaMethodVar(tv, name)
        if name in ("detach",):
            return TensorMethodVar(tv, name)
        if isinstance(attr, property) and isinstance(attr.fget, types.FunctionType):
            return BoundMethodVar(attr.fget, tv).call(self, [], {})
        if isinstance(attr, types.FunctionType):
            return BoundMethodVar(attr, tv)
        raise Unsupported(f"Tensor.{name}")

    def read_grad(self, tv):
        """An input's .grad: the frame's own last write of it, else the gradient the
        tensor holds (None, guarded, or a graph input fetched afresh each call: the
        gradients a backward before this graph wrote)."""
        written = self.output.side_effects.read_attr(tv, "grad")
        if written is not None:
            return written
        return self.wrap(tv.input_value.grad, AttrSource(tv.source, "grad"))

    def store_grad(self, tv, value):
        """input.grad = None, replayed after the graph (zero_grad's set_to_none)."""
        if getattr(tv, "input_value", None) is None or tv.source is None:
            raise Unsupported("assigning .grad of a tensor the compiled code made")
        if not (isinstance(value, ConstVar) and value.value is None):
            raise Unsupported("assigning .grad other than None")
        self.output.side_effects.write_grad(tv, value)

    # ------------------------------------------------------------ calls

    def call_function(self, fn, args, kwargs):
        return fn.call(self, args, kwargs)

    def inline_call(self, fvar: FunctionVar, args, kwargs):
        fn = fvar.value
        code = fn.__code__
        genexpr = code.co_name == "<genexpr>" and code.co_flags & inspect.CO_GENERATOR
        generator = not genexpr and code.co_flags & inspect.CO_GENERATOR and \
            not code.co_flags & (inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR |
                                 inspect.CO_ITERABLE_COROUTINE)
        # try/with in a generator: one left suspended inside them runs its finally
        # blocks when collected, which the interpreter does not model (checked where
        # the trace ends: convert.check_generators_finished)
        guarded = generator and bool(code.co_exceptiontable)
        if not genexpr and not generator and \
                code.co_flags & (inspect.CO_GENERATOR | inspect.CO_COROUTINE |
                                 inspect.CO_ASYNC_GENERATOR | inspect.CO_ITERABLE_COROUTINE):
            raise Unsupported(f"calling generator or coroutine function {fn.__qualname__}")
        if self.depth >= MAX_INLINE_DEPTH:
            e = Unsupported("inlining too deep (recursion?)")
            e.no_nest = True        # (a nested break there would resume 32 frames)
            raise e
        try:
            # the code's own parameters, not those of a functools.wraps'd function
            sig = inspect.signature(fn, follow_wrapped=False)
            bound = sig.bind(*args, **kwargs)
        except TypeError as e:
            raise Unsupported(f"calling {fn.__qualname__}: {e}") from None
        locals_ = {}
        for pname, param in sig.parameters.items():
            local = _local_name(code, pname)
            if pname in bound.arguments:
                v = bound.arguments[pname]
                if param.kind == param.VAR_POSITIONAL:
                    v = TupleVar(list(v))
                elif param.kind == param.VAR_KEYWORD:
                    v = DictVar(dict(v))
                locals_[local] = v
            elif param.kind == param.VAR_POSITIONAL:
                locals_[local] = TupleVar([])
            elif param.kind == param.VAR_KEYWORD:
                locals_[local] = DictVar({})
            else:
                default = param.default
                if isinstance(default, VariableTracker):
                    locals_[local] = default
                elif is_constant(default):
                    locals_[local] = ConstVar(default)
                else:
                    locals_[local] = self.wrap(default, None)
        cells = {}
        for name in code.co_cellvars:
            cells[name] = CellVar(locals_.get(name))
        if code.co_freevars:
            if fvar.closure is not None:
                for name, cell in zip(code.co_freevars, fvar.closure):
                    cells[name] = cell
            else:
                for i, (name, cell) in enumerate(zip(code.co_freevars, fn.__closure__)):
                    src = None
                    if fvar.source is not None:
                        src = AttrSource(ItemSource(AttrSource(fvar.source, "__closure__"), i),
                                         "cell_contents")
                    known = self.output.side_effects.known(cell)
                    if known is not None:
                        cells[name] = known
                        continue
                    try:
                        contents = cell.cell_contents
                    except ValueError:
                        raise Unsupported(f"closure variable {name} is not set") from None
                    cells[name] = self.output.side_effects.track(
                        cell, CellVar(self.wrap(contents, src), real=cell))
        groot = ObjectSource(fn.__globals__, f"{fn.__module__}.__dict__") \
            if fn.__globals__ is not self.output_frame_globals() else None
        child = Translator(code, fn.__globals__, self.f_builtins, locals_, cells, self.output,
                           parent=self, globals_source_root=groot)
        if self.direct_code is code and not generator:
            child.direct = True         # this frame's return is the CALL's result
            self.direct_code = None
        child.entry_grad = _C.is_grad_enabled()
        path = self.output.stop_path
        if path and child.depth == len(path) - 1 and path[-1][0] is code:
            child.stop_at = path[-1][1]
        if generator:
            child.lazy = True
            if guarded:
                self.output.__dict__.setdefault("guarded_generators", []).append(child)
            return stdlib.LazyIteratorVar(child.execute(), frame=child)
        return child.run()

    def output_frame_globals(self):
        tx = self
        while tx.parent is not None:
            tx = tx.parent
        return tx.f_globals

    def call_module(self, mvar: ModuleVar, args, kwargs):
        orig = mvar.compiled_original(self)
        if orig is not None:
            return orig.call(self, args, kwargs)
        m = mvar.value
        d = object.__getattribute__(m, "__dict__")
        for table in ("_backward_hooks", "_backward_pre_hooks"):
            if d.get(table):
                raise Unsupported(f"module {type(m).__name__} has backward hooks")
            self._module_hooks(mvar, table)        # guarded: none registered since
        if "forward" in d:
            raise Unsupported("a module whose forward was replaced on the instance")
        forward = inspect.getattr_static(type(m), "forward", None)
        if not isinstance(forward, types.FunctionType):
            raise Unsupported(f"module {type(m).__name__} has no Python forward")
        pre = self._module_hooks(mvar, "_forward_pre_hooks")
        post = self._module_hooks(mvar, "_forward_hooks")
        args = TupleVar(list(args))
        kwargs = DictVar(dict(kwargs))
        for hook, with_kwargs in pre:      # as Module._call_impl runs them
            if with_kwargs:
                res = hook.call(self, [mvar, args, kwargs], {})
                if not _is_none(res):
                    pair = res.unpack(self) if isinstance(res, TupleVar) else None
                    if pair is None or len(pair) != 2:
                        raise Unsupported("a forward pre-hook returned neither None nor "
                                          "(args, kwargs)")
                    args, kwargs = TupleVar(pair[0].unpack(self)), pair[1]
            else:
                res = hook.call(self, [mvar, args], {})
                if not _is_none(res):
                    args = res if isinstance(res, TupleVar) else TupleVar([res])
        if not isinstance(kwargs, DictVar):
            raise Unsupported("forward keyword arguments that are not a dict")
        result = FunctionVar(forward).call(self, [mvar] + args.unpack(self),
                                           dict(kwargs.items))
        for hook, with_kwargs in post:
            res = hook.call(self, [mvar, args, kwargs, result] if with_kwargs
                            else [mvar, args, result], {})
            if not _is_none(res):
                result = res
        return result

    def _module_hooks(self, mvar, table_name):
        """[(hook VT, with_kwargs)] of a module's hook table, guarded by its keys."""
        d = object.__getattribute__(mvar.value, "__dict__")
        table = d.get(table_name)
        kw_table = d.get(table_name + "_with_kwargs") or {}
        if mvar.source is not None:
            for name in (table_name, table_name + "_with_kwargs"):
                if isinstance(d.get(name), dict):
                    self.guard("DICT_KEYS", AttrSource(mvar.source, name),
                               tuple(d[name].keys()))
        if not table:
            return []
        if mvar.source is None:
            raise Unsupported(f"hooks of module {type(mvar.value).__name__}, which the "
                              "compiled code cannot reach again")
        src = AttrSource(mvar.source, table_name)
        return [(self.wrap(hook, DictSource(src, key)), key in kw_table)
                for key, hook in table.items()]

    def call_builtin(self, fn, args, kwargs):
        if any(isinstance(a, SymVar) for a in args) and not kwargs and len(args) == 2:
            # min/max and operator functions of sizes stay symbolic
            sized = all(isinstance(a, SymVar) or isinstance(a, ConstVar) and
                        type(a.value) is int for a in args)
            if fn in (min, max) and sized:
                a, b = (v.sym if isinstance(v, SymVar) else v.value for v in args)
                return self.wrap_constant_result((sym_min if fn is min else sym_max)(a, b))
            r = self.sym_binary(fn, *args)
            if r is not None:
                return r
        if fn in (min, max) and not kwargs and len(args) >= 2 and \
                any(isinstance(a, FloatVar) for a in args):
            r = sym_floats.min_max(fn, args)       # max(s, 0.5) of a dynamic float
            if r is not None:
                return r
        result = stdlib.call(self, fn, args, kwargs)
        if result is not stdlib.NOT_HANDLED:
            return result
        if fn is _C.get_default_dtype and not args and not kwargs:
            # a constant of the capture, as the default dtype the ops' fake runs use
            return ConstVar(fn())
        if fn is len:
            (a,) = args
            if isinstance(a, TensorVar):
                if a.fake.ndim == 0:
                    raise Unsupported("len() of a 0-d tensor")
                return self.wrap_constant_result(a.fake.shape[0])
            if isinstance(a, (SequenceVar, DictVar)):
                return ConstVar(len(a.items))
            if isinstance(a, ModuleVar):
                return ConstVar(a.length(self))
        if fn is isinstance or fn is issubclass:
            obj, cls = args
            cls = cls.as_constant()
            if fn is isinstance:
                t = getattr(obj, "real_type", None) or obj.python_type()
                return ConstVar(issubclass(t, cls))
        if fn is type and len(args) == 1 and not kwargs:
            a = args[0]
            t = getattr(a, "real_type", None) or a.python_type()
            return ObjectVar(t)
        if fn in (getattr, hasattr) and 2 <= len(args) <= 3:
            obj, name = args[0], args[1].as_constant()
            try:
                v = obj.getattr(self, name)
                return ConstVar(True) if fn is hasattr else v
            except Unsupported:
                if fn is hasattr or len(args) == 3:
                    # only constants and tensors (their class and fake tensor say
                    # what exists) can answer 'no such attribute' safely
                    if isinstance(obj, TensorVar) and not hasattr(obj.fake, name):
                        return ConstVar(False) if fn is hasattr else args[2]
                    if obj.is_constant():
                        value = obj.as_constant()
                        has = hasattr(value, name)
                        if fn is hasattr:
                            return ConstVar(has)
                        return args[2] if not has else self.wrap_constant_result(
                            getattr(value, name))
                raise
        if fn is setattr and len(args) == 3 and not kwargs:
            self.store_attr(args[0], _const_name(args[1]), args[2])
            return ConstVar(None)
        if fn is delattr and len(args) == 2 and not kwargs:
            self.store_attr(args[0], _const_name(args[1]), DELETED)
            return ConstVar(None)
        if fn in (tuple, list) and len(args) == 1 and not kwargs:
            items = args[0].unpack(self)
            return TupleVar(items) if fn is tuple else ListVar(items)
        if fn is enumerate and not kwargs:
            start = args[1].as_constant() if len(args) > 1 else 0
            return ListVar([TupleVar([ConstVar(i + start), v])
                            for i, v in enumerate(args[0].unpack(self))])
        if fn is zip and not kwargs:
            seqs = [a.unpack(self) for a in args]
            return ListVar([TupleVar(list(t)) for t in zip(*seqs)])
        if fn is reversed and not kwargs:
            return ListVar(list(reversed(args[0].unpack(self))))
        if fn is dict and not args:
            return DictVar(kwargs)
        if fn is print:
            raise Unsupported("print() inside a compiled function")
        # the Python values of the arguments, read only here: reading a size as a
        # constant specialises it, which len(), isinstance() and the rest above never need
        consts = constant_args(args, kwargs)
        if isinstance(fn, type) and issubclass(fn, BaseException) and consts is not None:
            # an exception about to be raised: made for real, so the reason names it
            return ObjectVar(fn(*consts[0], **consts[1]))
        if consts is not None and fn in _pure_builtin_ids():
            cargs, ckwargs = consts
            try:
                value = fn(*cargs, **ckwargs)
            except Exception as e:   # noqa: BLE001 - eager raises it too (a pure builtin)
                if type(e) in (ValueError, TypeError, KeyError, IndexError,
                               ZeroDivisionError, OverflowError):
                    raise PyException.of(e) from None
                raise Unsupported(f"{getattr(fn, '__name__', fn)} raised {e!r}") from None
            return self.wrap_constant_result(value)
        if fn in (sorted, min, max, any, all) and consts is None and len(args) == 1 and \
                not isinstance(args[0], TensorVar) and \
                all(v.is_constant() for v in kwargs.values()):
            # over a container whose items are constants (a dict of tensors' keys)
            items = args[0].unpack(self)
            if all(i.is_constant() for i in items):
                return self.call_builtin(fn, [ListVar(items)], kwargs)
        if fn is sum and consts is None and not kwargs and 1 <= len(args) <= 2 and \
                not isinstance(args[0], TensorVar):
            # sum(xs, start) over a container adds the items one by one, as CPython
            # does (not over a tensor's rows: a node per row)
            total = args[1] if len(args) == 2 else ConstVar(0)
            for item in args[0].unpack(self):
                total = self.binary(operator.add, total, item)
            return total
        if fn in (min, max) and not kwargs and args and (
                any(isinstance(a, TensorVar) for a in args) or len(args) == 1):
            return stdlib.min_max_of_tensors(self, fn, args)
        if any(isinstance(a, TensorVar) for a in args):
            if fn in (abs,) or getattr(fn, "__module__", None) in ("_operator", "operator"):
                return self.call_op(fn, args, kwargs)
            if fn in (min, max, sum, int, float, bool):
                raise Unsupported(f"{fn.__name__}() of a tensor (needs its data)")
        raise Unsupported(f"calling builtin {getattr(fn, '__qualname__', fn)}")

    # ------------------------------------------------------------ opcodes

    def NOP(self, ins):
        pass

    RESUME = NOP
    PRECALL = NOP
    CACHE = NOP
    EXTENDED_ARG = NOP
    MAKE_CELL = NOP          # cells are made before the run starts
    COPY_FREE_VARS = NOP

    def POP_TOP(self, ins):
        self.pop()

    def PUSH_NULL(self, ins):
        self.push(NullVar())

    def COPY(self, ins):
        self.push(self.stack[-ins.arg])

    def SWAP(self, ins):
        i = ins.arg
        self.stack[-1], self.stack[-i] = self.stack[-i], self.stack[-1]

    def LOAD_CONST(self, ins):
        value = ins.argval
        if isinstance(value, types.CodeType):
            self.push(ObjectVar(value))
        else:
            self.push(ConstVar(value))

    def LOAD_FAST(self, ins):
        name = ins.argval
        if name in self.cells and name not in self.locals:
            self.push(self.cells[name].content)
            return
        if name not in self.locals:
            raise Unsupported(f"local variable {name!r} read before assignment")
        self.push(self.locals[name])

    def STORE_FAST(self, ins):
        self.locals[ins.argval] = self.pop()

    def DELETE_FAST(self, ins):
        self.locals.pop(ins.argval, None)

    def LOAD_DEREF(self, ins):
        cell = self.cells.get(ins.argval)
        if cell is None or cell.content is None:
            raise Unsupported(f"free variable {ins.argval!r} read before assignment")
        self.push(cell.content)

    def STORE_DEREF(self, ins):
        cell = self.cells.get(ins.argval)
        if cell is None:
            raise Unsupported(f"STORE_DEREF {ins.argval}")
        self.output.side_effects.write_cell(cell, self.pop())

    def DELETE_DEREF(self, ins):
        raise Unsupported(f"del of closure variable {ins.argval!r}")

    def LOAD_CLOSURE(self, ins):
        self.push(self.cells[ins.argval])

    def LOAD_GLOBAL(self, ins):
        if ins.arg & 1:
            self.push(NullVar())
        name = ins.argval
        self.push(self.load_global(name))

    def load_global(self, name):
        pending = self.output.side_effects.read_global(self.f_globals, name)
        if pending is not None:
            return pending
        if name in self.f_globals:
            if self.globals_root is None:
                src = GlobalSource(name)
            else:
                src = DictSource(self.globals_root, name)
            return self.wrap(self.f_globals[name], src)
        builtins_ = self.f_builtins if isinstance(self.f_builtins, dict) else \
            vars(self.f_builtins)
        if name in builtins_:
            value = builtins_[name]
            return self.wrap(value, None) if not callable(value) or is_constant(value) \
                else BuiltinVar(value)
        raise Unsupported(f"name {name!r} is not defined")

    def STORE_GLOBAL(self, ins):
        self.output.side_effects.write_global(self.f_globals, ins.argval, self.pop())

    def DELETE_GLOBAL(self, ins):
        name = ins.argval
        effects = self.output.side_effects
        if effects.read_global(self.f_globals, name) is None:
            if name not in self.f_globals:
                raise Unsupported(f"del of global {name!r}, which is not defined")
            self.load_global(name)      # guards that it exists
        effects.write_global(self.f_globals, name, DELETED)

    def LOAD_ATTR(self, ins):
        obj = self.pop()
        self.push(obj.getattr(self, ins.argval))

    def LOAD_METHOD(self, ins):
        obj = self.pop()
        self.push(NullVar())
        self.push(obj.getattr(self, ins.argval))

    def STORE_ATTR(self, ins):
        obj = self.pop()
        value = self.pop()
        self.store_attr(obj, ins.argval, value)

    def DELETE_ATTR(self, ins):
        self.store_attr(self.pop(), ins.argval, DELETED)

    def store_attr(self, obj, name, value):
        """obj.name = value (DELETED: del obj.name), recorded for replay."""
        effects = self.output.side_effects
        if name == "__traceback__" and isinstance(value, stdlib.TracebackVar) and \
                isinstance(obj, ObjectVar) and isinstance(obj.value, BaseException):
            # contextlib's __exit__ puts back the traceback the block's exception had
            # (the one WITH_EXCEPT_START passed): the interpreter makes no tracebacks
            return
        if stdlib.own_setattr(obj, value) is not None:
            # an object the frame made whose class has a Python __setattr__: inlined
            stdlib.own_setattr(obj, value).call(self, [ConstVar(name), value], {})
            return
        if isinstance(obj, PythonModuleVar):
            d = obj.value.__dict__
            if value is DELETED and effects.read_global(d, name) is None:
                obj.getattr(self, name)     # guards that it exists
            effects.write_global(d, name, value)
            return
        if isinstance(obj, TensorVar) and name == "grad" and value is not DELETED:
            self.store_grad(obj, value)
            return
        if not isinstance(obj, (ObjectVar, ModuleVar)) or \
                isinstance(obj, (OpVar, BuiltinVar)):
            raise Unsupported(f"assigning attribute {name!r} of {obj}")
        if effects.known(obj.value) is not obj:
            raise Unsupported(f"assigning attribute {name!r} of an object the compiled "
                              "code cannot reach again")
        if value is DELETED and effects.read_attr(obj, name) is None:
            obj.getattr(self, name)         # guards that it exists
        effects.write_attr(obj, name, value)

    def KW_NAMES(self, ins):
        self.kw_names = self.code.co_consts[ins.arg]

    def CALL(self, ins):
        argc = ins.arg
        args = self.popn(argc)
        fn = self.pop()
        below = self.pop()
        if not isinstance(below, NullVar):
            args = [fn] + args
            fn = below
        kwargs = {}
        if self.kw_names:
            n = len(self.kw_names)
            kwargs = dict(zip(self.kw_names, args[-n:]))
            args = args[:-n]
            self.kw_names = None
        if isinstance(fn, ConstVar) and fn.value is _C._set_grad_enabled and \
                len(args) == 1 and args[0].is_constant() and not kwargs:
            # a resume function's prologue setting the mode of the frame that broke
            # (resume.resume_code's grad)
            self.push(ConstVar(stdlib._record_grad_mode(self, bool(args[0].as_constant()))))
            return
        self.push(self._call(fn, args, kwargs))

    def _call(self, fn, args, kwargs):
        """fn(*args, **kwargs) for CALL and CALL_FUNCTION_EX, noting the code of the
        frame it inlines as its whole body (a break there can resume there)."""
        self.direct_code = _direct_code(fn)
        try:
            return fn.call(self, args, kwargs)
        finally:
            self.direct_code = None

    def CALL_FUNCTION_EX(self, ins):
        kwargs = self.pop() if ins.arg & 1 else DictVar({})
        args = self.pop()
        fn = self.pop()
        below = self.pop()
        if not isinstance(below, NullVar):
            raise Unsupported("CALL_FUNCTION_EX on a method")
        if not isinstance(kwargs, DictVar):
            raise Unsupported("**kwargs that are not a dict")
        self.push(self._call(fn, args.unpack(self), dict(kwargs.items)))

    def MAKE_FUNCTION(self, ins):
        code = self.pop().as_constant()
        flags = ins.arg
        closure = self.pop() if flags & 0x08 else None
        if flags & 0x04:
            self.pop()   # annotations
        kwdefaults = self.pop() if flags & 0x02 else None
        defaults = self.pop() if flags & 0x01 else None
        # placeholder cells: the function is only a template for inline_call, which
        # uses the symbolic cells kept in the VT (FunctionType insists on a closure of
        # the right length when the code has free variables)
        dummy = tuple(types.CellType() for _ in code.co_freevars) or None
        fn = types.FunctionType(code, self.f_globals, code.co_name, None, dummy)
        if defaults is not None:
            fn.__defaults__ = tuple(_SymbolicDefault(v) for v in defaults.unpack(self))
        if kwdefaults is not None:
            fn.__kwdefaults__ = {k: _SymbolicDefault(v) for k, v in kwdefaults.items.items()}
        cells = closure.unpack(self) if closure is not None else None
        self.push(_LocalFunctionVar(fn, closure=cells, globals_root=self.globals_root))

    def RETURN_VALUE(self, ins):
        self.result = self.pop()
        if self.yields is not None:
            # a generator expression, run to the end: what it yielded, as an iterator
            self.result = IteratorVar(self.yields)

    def RETURN_GENERATOR(self, ins):
        """Generator expressions (over sequences the interpreter knows) run eagerly;
        generator functions lazily (self.lazy, see execute)."""
        if not self.lazy:
            self.yields = []
        self.push(ConstVar(None))

    def GET_YIELD_FROM_ITER(self, ins):
        self.push(stdlib.make_iter(self, self.pop()))

    def SEND(self, ins):
        self.pop()                    # the value sent: None (next() of this generator)
        it = self.stack[-1]
        if not isinstance(it, IteratorVar):
            raise Unsupported(f"yield from {it}")
        v = it.next()
        if v is None:
            frame = getattr(it, "frame", None)     # a generator's return value
            self.stack[-1] = frame.result if frame is not None and frame.result is not None \
                else ConstVar(None)
            return ins.argval
        self.push(v)

    # exceptions raised and caught by the frame (exception table handlers)

    def PUSH_EXC_INFO(self, ins):
        v = self.pop()
        self.push(ConstVar(None))     # the exception being handled before (unread)
        self.push(v)

    def WITH_EXCEPT_START(self, ins):
        # [exit, lasti, previous exception, exception]: exit(type, value, traceback)
        lasti = self.stack[-3]
        raised_at = self.instructions[self.index_of[lasti.value]] \
            if isinstance(lasti, ConstVar) and lasti.value in self.index_of else ins
        try:
            res = stdlib.exit_with_exception(self, self.stack[-4], self.stack[-1])
        except Unsupported as e:
            if raised_at.opname not in BREAK_OPS:
                raise
            res, why = None, f" (__exit__: {e.reason})"
        else:
            why = ""
        if (res is None or res.is_constant() and not res.as_constant()) and \
                raised_at.opname in BREAK_OPS:
            # the exception goes on (or __exit__ cannot be interpreted): CPython raises
            # it at its instruction (a graph break there), running __exit__ and the
            # handlers itself
            why = Unsupported(f"{self.stack[-1].value!r} leaving a `with` block{why}",
                              self.location())
            why.user_stack = self.user_stack()
            self._note_break(why, raised_at)
            why.noted_in = id(self)
            raise why
        self.push(res)

    def POP_EXCEPT(self, ins):
        self.pop()

    def CHECK_EXC_MATCH(self, ins):
        types_ = self.pop().as_constant()
        exc = self.stack[-1]
        if not isinstance(exc, ObjectVar) or not isinstance(exc.value, BaseException):
            raise Unsupported(f"matching {exc} against an except clause")
        self.push(ConstVar(isinstance(exc.value, types_)))

    def RERAISE(self, ins):
        exc = self.pop()     # (with oparg, lasti stays below: the handler's depth cuts it)
        raise PyException(exc)

    def YIELD_VALUE(self, ins):
        if self.yields is None:
            raise Unsupported("yield outside a generator expression")
        self.yields.append(self.pop())
        self.push(ConstVar(None))

    # binary, unary, compare

    def BINARY_OP(self, ins):
        b = self.pop()
        a = self.pop()
        fn = _BINARY[ins.arg]
        self.push(self.binary(fn, a, b))

    def binary(self, fn, a, b):
        if isinstance(a, stdlib.DEFERRED) or isinstance(b, stdlib.DEFERRED):
            return stdlib.min_max_binary(self, fn, a, b)     # max(t, 0.5) * w
        if isinstance(a, (TensorVar, FloatVar)) or isinstance(b, (TensorVar, FloatVar)):
            r = sym_floats.binary(self, fn, a, b)
            if r is not None:
                return r
        if isinstance(a, SymVar) or isinstance(b, SymVar):
            r = self.sym_binary(fn, a, b)
            if r is not None:
                return r
        if isinstance(a, stdlib.SetVar) or isinstance(b, stdlib.SetVar):
            return stdlib.set_binary(self, fn, a, b)
        if fn in (operator.add, operator.iadd) and (
                isinstance(a, TupleVar) and isinstance(b, ConstVar) or
                isinstance(b, TupleVar) and isinstance(a, ConstVar)):
            # () + (x,): a constant tuple joins a tuple of VTs
            c = a if isinstance(a, ConstVar) else b
            if type(c.value) is tuple:
                consts = [ConstVar(v) for v in c.value]
                return TupleVar(consts + b.items if c is a else a.items + consts)
        if isinstance(a, ListVar) and fn is operator.iadd:
            items = b.unpack(self)           # list += any iterable, in place
            self.output.side_effects.mutate(a)
            a.items.extend(items)
            return a
        if isinstance(a, ListVar) and fn is operator.imul and b.is_constant():
            self.output.side_effects.mutate(a)
            a.items[:] = a.items * b.as_constant()
            return a
        if isinstance(a, DictVar) and fn is operator.ior and isinstance(b, DictVar):
            self.output.side_effects.mutate(a)
            a.items.update(b.items)
            return a
        if a.is_constant() and b.is_constant() and not isinstance(a, (ModuleVar,)):
            pure = _INPLACE_TO_PURE.get(fn, fn)
            try:
                return self.wrap_constant_result(pure(a.as_constant(), b.as_constant()))
            except Unsupported:
                raise
            except Exception as e:   # noqa: BLE001
                if isinstance(e, (ZeroDivisionError, OverflowError)) and \
                        all(type(v.as_constant()) in (int, float, bool) for v in (a, b)):
                    raise PyException.of(e) from None    # (1 / 0: eager's error)
                raise Unsupported(f"{pure.__name__} raised {e!r}") from None
        if isinstance(a, TensorVar) or isinstance(b, TensorVar):
            return self.call_op(fn, [a, b], {})
        if isinstance(a, DictVar) and fn is operator.or_ and isinstance(b, DictVar):
            return DictVar({**a.items, **b.items})
        if isinstance(a, SequenceVar) and isinstance(b, SequenceVar) and \
                type(a) is type(b) and fn in (operator.add, operator.iadd):
            return type(a)(a.items + b.items)
        if isinstance(a, SequenceVar) and b.is_constant() and \
                fn in (operator.mul, operator.imul):
            return type(a)(a.items * b.as_constant())
        raise Unsupported(f"{fn.__name__} of {a} and {b}")

    def sym_binary(self, fn, a, b):
        """Integer arithmetic with a symbolic size: a symbolic result (None: not an
        integer operation; the caller specialises)."""
        fn = _INPLACE_TO_PURE.get(fn, fn)
        if fn not in _SYM_BINARY or isinstance(a, TensorVar) or isinstance(b, TensorVar):
            return None
        ops = []
        for v in (a, b):
            if isinstance(v, SymVar):
                ops.append(v.sym)
            elif isinstance(v, ConstVar) and type(v.value) is int:
                ops.append(v.value)
            else:
                return None
        return self.wrap_constant_result(fn(*ops))

    def BINARY_SUBSCR(self, ins):
        key = self.pop()
        obj = self.pop()
        self.push(self.subscript(obj, key))

    def subscript(self, obj, key):
        if isinstance(obj, TensorVar):
            return self.call_op(operator.getitem, [obj, key], {})
        if isinstance(obj, SequenceVar) and key.is_constant():
            k = key.as_constant()
            if isinstance(k, slice):
                return type(obj)(obj.items[k])
            if isinstance(k, int) and not -len(obj.items) <= k < len(obj.items):
                raise PyException.of(IndexError(
                    f"{'tuple' if isinstance(obj, TupleVar) else 'list'} index out of range"))
            return obj.items[k]
        if isinstance(obj, DictVar) and _dict_key(key) is not None:
            k = _dict_key(key)
            if k not in obj.items:
                factory = getattr(obj, "default_factory", None)
                if factory is None:
                    raise PyException.of(KeyError(k))
                # defaultdict.__missing__: a new empty container, stored
                self.output.side_effects.mutate(obj)
                obj.items[k] = DictVar({}) if factory is dict else ListVar([])
            return obj.items[k]
        if isinstance(obj, ModuleVar) and key.is_constant():
            return obj.item(self, key.as_constant())
        if obj.is_constant() and key.is_constant():
            c = obj.as_constant()
            try:
                value = c[key.as_constant()]
            except Exception as e:   # noqa: BLE001 - eager raises it too
                if type(c) in _PLAIN_SUBSCRIPTED and \
                        type(e) in (KeyError, IndexError, TypeError):
                    # (a missing key of a plain dict: os.environ.get's lookup, which
                    # its caller catches)
                    raise PyException.of(e) from None
                raise Unsupported(f"subscript of a {type(c).__name__} raised {e!r}") \
                    from None
            return self.wrap_constant_result(value)
        raise Unsupported(f"subscript of {obj} with {key}")

    def STORE_SUBSCR(self, ins):
        key = self.pop()
        obj = self.pop()
        value = self.pop()
        if isinstance(obj, ListVar) and key.is_constant():
            k = key.as_constant()
            items = list(obj.items)
            try:
                items[k] = value.unpack(self) if isinstance(k, slice) else value
            except (IndexError, TypeError, ValueError) as e:
                raise Unsupported(f"list item assignment raised {e!r}") from None
            self.output.side_effects.mutate(obj)
            obj.items[:] = items
        elif isinstance(obj, DictVar) and _dict_key(key) is not None:
            self.output.side_effects.mutate(obj)
            obj.items[_dict_key(key)] = value
        elif isinstance(obj, TensorVar):
            self.call_op(operator.setitem, [obj, key, value], {})
        else:
            raise Unsupported(f"item assignment into {obj}")

    def DELETE_SUBSCR(self, ins):
        key = self.pop()
        obj = self.pop()
        if not key.is_constant() or not isinstance(obj, (ListVar, DictVar)):
            raise Unsupported(f"del of an item of {obj}")
        k = key.as_constant()
        items = list(obj.items) if isinstance(obj, ListVar) else dict(obj.items)
        try:
            del items[k]
        except (IndexError, KeyError, TypeError) as e:
            raise Unsupported(f"del raised {e!r}") from None
        self.output.side_effects.mutate(obj)
        if isinstance(obj, ListVar):
            obj.items[:] = items
        else:
            obj.items = items

    def BUILD_SLICE(self, ins):
        parts = self.popn(ins.arg)
        if any(isinstance(p, SymVar) for p in parts):
            self.push(SliceVar(parts))
            return
        if not all(p.is_constant() for p in parts):
            raise Unsupported("a slice with non-constant bounds")
        self.push(ConstVar(slice(*[p.as_constant() for p in parts])))

    def UNARY_NEGATIVE(self, ins):
        self.push(self.unary(operator.neg, self.pop()))

    def UNARY_POSITIVE(self, ins):
        self.push(self.unary(operator.pos, self.pop()))

    def UNARY_INVERT(self, ins):
        self.push(self.unary(operator.invert, self.pop()))

    def unary(self, fn, a):
        if isinstance(a, FloatVar) and fn in (operator.neg, operator.pos):
            if fn is operator.pos:
                return a                   # +s is s (a float's __pos__)
            r = sym_floats.negative(a)
            if r is not None:
                return r
        if isinstance(a, SymVar) and fn in (operator.neg, operator.pos):
            return self.wrap_constant_result(fn(a.sym))
        if a.is_constant():
            return self.wrap_constant_result(fn(a.as_constant()))
        if isinstance(a, TensorVar):
            return self.call_op(fn, [a], {})
        raise Unsupported(f"{fn.__name__} of {a}")

    def UNARY_NOT(self, ins):
        self.push(ConstVar(not self.pop().truth(self)))

    def COMPARE_OP(self, ins):
        b = self.pop()
        a = self.pop()
        fn = _COMPARE[ins.argval]
        if isinstance(a, stdlib.DEFERRED) or isinstance(b, stdlib.DEFERRED):
            self.push(stdlib.min_max_binary(self, fn, a, b))    # max(t, 0.5) > 1
        elif (isinstance(a, SymVar) or isinstance(b, SymVar)) and \
                all(isinstance(v, SymVar) or isinstance(v, ConstVar) and
                    type(v.value) is int for v in (a, b)):
            # a relation between sizes: its truth at the captured sizes, guarded
            pa = a.sym if isinstance(a, SymVar) else a.value
            pb = b.sym if isinstance(b, SymVar) else b.value
            self.push(ConstVar(bool(fn(pa, pb))))
        elif a.is_constant() and b.is_constant():
            self.push(self.wrap_constant_result(fn(a.as_constant(), b.as_constant())))
        elif isinstance(a, TensorVar) or isinstance(b, TensorVar):
            self.push(self.call_op(fn, [a, b], {}))
        elif isinstance(a, stdlib.SetVar) or isinstance(b, stdlib.SetVar):
            self.push(stdlib.set_binary(self, fn, a, b))
        elif isinstance(a, (SequenceVar, DictVar)) or isinstance(b, (SequenceVar, DictVar)):
            # containers whose leaves are constants compare as their Python values
            pa, pb = stdlib.plain_value(a), stdlib.plain_value(b)
            try:
                r = fn(pa, pb)
            except TypeError as e:
                raise Unsupported(f"comparison raised {e!r}") from None
            self.push(self.wrap_constant_result(r))
        else:
            raise Unsupported(f"comparing {a} and {b}")

    def IS_OP(self, ins):
        b = self.pop()
        a = self.pop()
        if a.is_constant() and b.is_constant():
            r = a.as_constant() is b.as_constant()
        elif isinstance(b, ConstVar) and b.value is resume.UNBOUND:
            # a resume function's prologue: was the local unbound? (a wrapped value
            # is guarded, by identity when it is UNBOUND)
            r = isinstance(a, ObjectVar) and a.value is resume.UNBOUND
        elif isinstance(b, ConstVar) and b.value is None:
            r = False     # a tensor, container or object is not None
        elif a is b:
            r = True
        else:
            raise Unsupported(f"'is' between {a} and {b}")
        self.push(ConstVar(r != bool(ins.arg)))

    def CONTAINS_OP(self, ins):
        container = self.pop()
        item = self.pop()
        if isinstance(container, DictVar) and item.is_constant():
            r = item.as_constant() in container.items
        elif isinstance(container, stdlib.SetVar) and item.is_constant():
            try:
                r = item.as_constant() in container.values
            except TypeError as e:
                raise Unsupported(f"'in' raised {e!r}") from None
        elif isinstance(container, ModuleVar) and item.is_constant():
            r = item.as_constant() in [k.as_constant() for k in container.unpack(self)
                                       if k.is_constant()]
        elif container.is_constant() and item.is_constant():
            r = item.as_constant() in container.as_constant()
        elif isinstance(container, SequenceVar) and item.is_constant() and \
                container.is_constant():
            r = item.as_constant() in [i.as_constant() for i in container.items]
        else:
            raise Unsupported(f"'in' with {container}")
        self.push(ConstVar(r != bool(ins.arg)))

    # containers

    def BUILD_TUPLE(self, ins):
        self.push(TupleVar(self.popn(ins.arg)))

    def BUILD_LIST(self, ins):
        self.push(ListVar(self.popn(ins.arg)))

    def BUILD_MAP(self, ins):
        items = self.popn(2 * ins.arg)
        d = {}
        for k, v in zip(items[::2], items[1::2]):
            d[k.as_constant()] = v
        self.push(DictVar(d))

    def BUILD_SET(self, ins):
        s = stdlib.SetVar(set())
        s.getattr(self, "update").call(self, [TupleVar(self.popn(ins.arg))], {})
        self.push(s)

    def SET_ADD(self, ins):
        item = self.pop()
        self.stack[-ins.arg].getattr(self, "add").call(self, [item], {})

    def SET_UPDATE(self, ins):
        items = self.pop()
        self.stack[-ins.arg].getattr(self, "update").call(self, [items], {})

    def BUILD_CONST_KEY_MAP(self, ins):
        keys = self.pop().as_constant()
        values = self.popn(ins.arg)
        self.push(DictVar(dict(zip(keys, values))))

    def LIST_APPEND(self, ins):
        v = self.pop()
        self.stack[-ins.arg].items.append(v)

    def LIST_EXTEND(self, ins):
        v = self.pop()
        self.stack[-ins.arg].items.extend(v.unpack(self))

    def LIST_TO_TUPLE(self, ins):
        self.push(TupleVar(self.pop().items))

    def DICT_MERGE(self, ins):
        v = self.pop()
        if not isinstance(v, DictVar):
            raise Unsupported("** of a non-dict")
        self.stack[-ins.arg].items.update(v.items)

    DICT_UPDATE = DICT_MERGE

    def MAP_ADD(self, ins):
        v = self.pop()
        k = self.pop()
        self.stack[-ins.arg].items[k.as_constant()] = v

    def UNPACK_SEQUENCE(self, ins):
        items = self.pop().unpack(self)
        if len(items) != ins.arg:
            raise Unsupported(f"unpacking {len(items)} values into {ins.arg}")
        for v in reversed(items):
            self.push(v)

    def UNPACK_EX(self, ins):
        items = self.pop().unpack(self)
        before, after = ins.arg & 0xFF, ins.arg >> 8
        if len(items) < before + after:
            raise Unsupported("not enough values to unpack")
        middle = items[before:len(items) - after]
        out = items[:before] + [ListVar(middle)] + items[len(items) - after:]
        for v in reversed(out):
            self.push(v)

    def FORMAT_VALUE(self, ins):
        fmt_spec = self.pop().as_constant() if (ins.arg & 0x04) else ""
        v = self.pop()
        if not v.is_constant():
            raise Unsupported(f"formatting {v} into a string")
        conv = {0x01: str, 0x02: repr, 0x03: ascii}.get(ins.arg & 0x03)
        value = v.as_constant()
        if conv is not None:
            value = conv(value)
        self.push(ConstVar(format(value, fmt_spec)))

    def BUILD_STRING(self, ins):
        parts = self.popn(ins.arg)
        self.push(ConstVar("".join(p.as_constant() for p in parts)))

    # control flow

    def GET_ITER(self, ins):
        v = self.pop()
        if isinstance(v, IteratorVar):
            self.push(v)
            return
        self.push(IteratorVar(v.unpack(self), over=v if isinstance(v, (ListVar, DictVar))
                              else None))

    def FOR_ITER(self, ins):
        it = self.stack[-1]
        if not isinstance(it, IteratorVar):
            # a real iterator object (a comprehension frame's `.0` argument)
            raise Unsupported(f"iterating over {it}")
        nxt = it.next()
        if nxt is None:
            self.pop()
            return ins.argval
        self.push(nxt)

    def JUMP_FORWARD(self, ins):
        return ins.argval

    JUMP_BACKWARD = JUMP_FORWARD
    JUMP_BACKWARD_NO_INTERRUPT = JUMP_FORWARD

    def _pop_jump(self, ins, when):
        v = self.pop()
        if v.truth(self) == when:
            return ins.argval

    def POP_JUMP_FORWARD_IF_TRUE(self, ins):
        return self._pop_jump(ins, True)

    def POP_JUMP_FORWARD_IF_FALSE(self, ins):
        return self._pop_jump(ins, False)

    POP_JUMP_BACKWARD_IF_TRUE = POP_JUMP_FORWARD_IF_TRUE
    POP_JUMP_BACKWARD_IF_FALSE = POP_JUMP_FORWARD_IF_FALSE

    def _none_jump(self, ins, when_none):
        v = self.pop()
        is_none = isinstance(v, ConstVar) and v.value is None
        if is_none == when_none:
            return ins.argval

    def POP_JUMP_FORWARD_IF_NONE(self, ins):
        return self._none_jump(ins, True)

    def POP_JUMP_FORWARD_IF_NOT_NONE(self, ins):
        return self._none_jump(ins, False)

    POP_JUMP_BACKWARD_IF_NONE = POP_JUMP_FORWARD_IF_NONE
    POP_JUMP_BACKWARD_IF_NOT_NONE = POP_JUMP_FORWARD_IF_NOT_NONE

    def JUMP_IF_TRUE_OR_POP(self, ins):
        if self.stack[-1].truth(self):
            return ins.argval
        self.pop()

    def JUMP_IF_FALSE_OR_POP(self, ins):
        if not self.stack[-1].truth(self):
            return ins.argval
        self.pop()

    def IMPORT_NAME(self, ins):
        fromlist = self.pop().as_constant()
        level = self.pop().as_constant()
        name = ins.argval
        if level != 0:
            raise Unsupported("a relative import inside a compiled function")
        # only modules already imported: the statement is then a lookup in sys.modules,
        # which the compiled frame need not repeat
        target = name if fromlist else name.partition(".")[0]
        module = sys.modules.get(name)
        top = sys.modules.get(target)
        if module is None or top is None:
            raise Unsupported(f"importing {name}, which is not imported yet")
        self.push(self.wrap(top, ObjectSource(top, f"sys.modules[{target!r}]")))

    def IMPORT_FROM(self, ins):
        module = self.stack[-1]
        try:
            self.push(module.getattr(self, ins.argval))
        except Unsupported:
            real = getattr(module, "value", None)
            sub = sys.modules.get(f"{getattr(real, '__name__', '')}.{ins.argval}")
            if not isinstance(module, PythonModuleVar) or sub is None:
                raise
            self.push(self.wrap(sub, ObjectSource(sub, sub.__name__)))

    def BEFORE_WITH(self, ins):
        exit_, entered = stdlib.before_with(self, self.pop())
        self.push(exit_)
        self.push(entered)

    def LOAD_ASSERTION_ERROR(self, ins):
        raise Unsupported("a failing assert")

    def RAISE_VARARGS(self, ins):
        exc = self.stack[-ins.arg] if ins.arg else None
        if ins.arg == 1 and isinstance(exc, ObjectVar):
            value = exc.value
            if isinstance(value, type) and issubclass(value, BaseException):
                try:
                    exc = ObjectVar(value())
                except Exception:   # noqa: BLE001
                    exc = None
            if exc is not None and isinstance(exc.value, Exception):
                self.pop()
                raise PyException(exc, f"raise statement reached: raise {exc.value!r}")
        value = exc.as_constant() if isinstance(exc, ObjectVar) else None
        what = repr(value) if isinstance(value, BaseException) else \
            getattr(value, "__name__", None) if isinstance(value, type) else None
        raise Unsupported("raise statement reached" + (f": raise {what}" if what else ""))


class StopTrace(BaseException):
    """Raised where a trace stops before a graph break (out.stop_path), through every
    frame it runs inside (which keep their stacks and locals): not an Exception, so no
    handler of the interpreter's own catches it. frame: the Translator that stopped."""

    def __init__(self, frame):
        super().__init__()
        self.frame = frame


def _direct_code(fn):
    """The code of the frame a call of fn inlines as its whole body (a function, a
    method, a module's forward without hooks), or None."""
    if type(fn) in (FunctionVar, _LocalFunctionVar, BoundMethodVar) and \
            isinstance(fn.value, types.FunctionType):
        return fn.value.__code__
    if type(fn) is ModuleVar:
        m = fn.value
        from . import api
        if api._OPTIMIZED is not None and type(m) is api._OPTIMIZED:
            return None
        d = object.__getattribute__(m, "__dict__")
        if d.get("_forward_pre_hooks") or d.get("_forward_hooks") or "forward" in d:
            return None
        forward = inspect.getattr_static(type(m), "forward", None)
        return forward.__code__ if isinstance(forward, types.FunctionType) else None
    return None


def _unsupported(reason, e):
    u = Unsupported(reason, e.location)
    u.user_stack = e.user_stack
    return u


class PyException(Exception):
    """A Python exception the interpreted code raises (vt: an ObjectVar holding the real
    exception object, made exactly as eager makes it); the frame's exception table may
    catch it. Never an Unsupported: the interpreter's own limits are not catchable."""

    def __init__(self, vt, reason=None):
        super().__init__(vt)
        self.vt = vt
        self.exc = vt.value
        self.reason = reason or f"{type(self.exc).__name__} {self.exc}"
        self.location = None
        self.user_stack = None

    @classmethod
    def of(cls, exc):
        return cls(ObjectVar(exc))


def _holds_tensor(args):
    """Whether an index holds a tensor (an index out of range raises at run time)."""
    for a in args:
        if isinstance(a, TensorVar) or isinstance(a, SequenceVar) and \
                _holds_tensor(a.items):
            return True
    return False


def _is_cpu(v):
    from ..device import device
    return (isinstance(v, device) and v.type == "cpu" and v.index in (None, 0)) or \
        (isinstance(v, str) and v == "cpu")


def _is_none(v):
    return isinstance(v, ConstVar) and v.value is None


def _const_name(v):
    if not (v.is_constant() and isinstance(v.as_constant(), str)):
        raise Unsupported("setattr/delattr with a non-constant attribute name")
    return v.as_constant()


def _local_name(code, pname):
    """The code's own name of a parameter: inspect.signature calls a comprehension's
    implicit argument `.0` "implicit0"."""
    if pname.startswith("implicit") and pname[8:].isdigit():
        dotted = "." + pname[8:]
        if dotted in code.co_varnames[:code.co_argcount]:
            return dotted
    return pname


def _compiler_role(value):
    """How ember.compiler asks for a function to be traced: "compiling" (is_compiling:
    a constant True), "graph" (allow_in_graph: one opaque node), "disabled"
    (ember.compiler.disable: unsupported), or None."""
    if not callable(value) or isinstance(value, type):
        return None
    compiler = sys.modules.get("ember.compiler")
    if compiler is None:
        return None
    if value is compiler.is_compiling or value is compiler.is_dynamo_compiling:
        return "compiling"
    if compiler.is_allowed_in_graph(value):
        return "graph"
    code = getattr(value, "__code__", None)
    if code is not None and skip.is_disabled(code):
        return "disabled"
    return None


class _CompilerFnVar(ValueVar):
    def __init__(self, fn, role, source=None):
        super().__init__(fn, source)
        self.role = role

    def call(self, tx, args, kwargs):
        if self.role == "compiling":
            return ConstVar(True)
        if self.role == "graph":
            return tx.call_op(self.value, args, kwargs)
        name = getattr(self.value, "__qualname__", repr(self.value))
        raise Unsupported(f"calling {name}, which is marked ember.compiler.disable")


class UnsupportedMethodVar(VariableTracker):
    """tensor.item and the like: a bound method whose call cannot be captured."""

    def __init__(self, tensor, name, reason):
        self.tensor = tensor
        self.name = name
        self.reason = reason

    def call(self, tx, args, kwargs):
        raise Unsupported(self.reason)


class _MetaMethodVar(VariableTracker):
    """tensor.size(), .dim(), ...: answered from the fake tensor."""

    def __init__(self, tv, name):
        self.tv = tv
        self.name = name

    def call(self, tx, args, kwargs):
        consts = constant_args(args, kwargs)
        if consts is None:
            raise Unsupported(f"Tensor.{self.name} with non-constant arguments")
        value = getattr(self.tv.fake, self.name)(*consts[0], **consts[1])
        return tx.wrap_constant_result(value)


class _SymbolicDefault:
    """A default value of a function made by the interpreted code."""

    def __init__(self, var):
        self.var = var


class _LocalFunctionVar(FunctionVar):
    """A function the interpreted code made (lambda, nested def, comprehension)."""

    def __init__(self, fn, closure, globals_root):
        super().__init__(fn, None, closure=closure)
        self.globals_root = globals_root

    def call(self, tx, args, kwargs):
        fn = self.value
        if fn.__defaults__ or fn.__kwdefaults__:
            # defaults made symbolically: bind them as the VTs they are
            defaults = tuple(d.var for d in (fn.__defaults__ or ()))
            kwdefaults = {k: d.var for k, d in (fn.__kwdefaults__ or {}).items()}
            fn = types.FunctionType(fn.__code__, fn.__globals__, fn.__name__, defaults,
                                    fn.__closure__)
            fn.__kwdefaults__ = kwdefaults
            clone = _LocalFunctionVar(fn, self.closure, self.globals_root)
            return tx.inline_call(clone, args, kwargs)
        return tx.inline_call(self, args, kwargs)


_PURE_IDS = None


class _NoModule:
    pass


def _module_type():
    """ember.nn.Module (the nn package may be absent or importing)."""
    try:
        from ..nn import Module
        return Module
    except ImportError:
        return _NoModule


def _pure_builtin_ids():
    global _PURE_IDS
    if _PURE_IDS is None:
        _PURE_IDS = _IdSet(PURE_BUILTINS)
    return _PURE_IDS


class _IdSet:
    def __init__(self, items):
        self._ids = {id(i) for i in items}
        self._keep = list(items)

    def __contains__(self, item):
        return id(item) in self._ids


__all__ = ["Translator", "OutputGraph", "Unsupported", "BuiltinMethodVar",
           "ClosureSource", "LocalSource"]
