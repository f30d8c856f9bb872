"""Side effects: the Python mutations a captured frame makes, kept while it is interpreted
and replayed after its graph runs (TorchDynamo's side-effect tracking).

The interpreter never touches real Python objects. Each mutable object the frame reads
from outside (a list, a dict, a plain object, an nn.Module, a closure cell) gets exactly
one VT, so every path to it sees the same state; its writes change the VT:

- a list's or dict's items (ListVar.items, DictVar.items), the VT marked `mutated`;
- an object's or module's attributes, recorded here (`attrs`) and read back by later
  attribute reads of the frame;
- a globals dict's names (STORE_GLOBAL, a Python module's attributes), in `globals_`;
- a closure cell's contents (CellVar.content), the cell marked `mutated`.

After the graph, the compiled frame replays them (see program.py): each mutated
container gets its final items (`lst[:] = ...`, `d.clear(); d.update(...)`), then the
attribute, global and cell writes run in program order (the last write to a name wins),
with the graph's tensor results in place. Targets and values are resolved before the
first write, so a write never changes what a later one reaches.

What cannot be replayed exactly makes the frame fall back (Unsupported): objects with a
custom __setattr__, a data descriptor (property, slot) for the written name, classes,
tensors' attributes, and an attribute created and deleted again by the frame.
"""
from __future__ import annotations

import types
import warnings
from collections import defaultdict

from .exc import Unsupported
from .variables import _MISSING, _class_attr, _is_data_descriptor

DELETED = object()     # a name the frame deleted


class SideEffects:
    def __init__(self):
        self.objects = {}        # id(real mutable object) -> its one VT
        self.keepalive = []      # the real objects, so that ids stay unique
        self.mutated = []        # containers whose items changed, first change first
        self.attrs = {}          # (id(vt), name) -> (vt, name, value VT | DELETED)
        self.globals_ = {}       # (id(globals dict), name) -> (dict, name, VT | DELETED)
        self.cells = []          # real cells whose contents changed (CellVar)
        # what the frame program calls first, in the frame's order: ("warn",
        # warnings.warn_explicit's arguments) and ("range_check", ...) (tensor_data.py)
        self.calls = []

    def __bool__(self):
        return bool(self.mutated or self.attrs or self.globals_ or self.cells or
                    self.calls)

    def writes(self):
        """Whether the frame writes anything outside it (containers, attributes,
        globals, cells)."""
        return bool(self.mutated or self.attrs or self.globals_ or self.cells)

    def warn(self, message, category, tx):
        """`warnings.warn(message, category, stacklevel=2)` called by a function that
        tx's frame calls (eager attributes it to that frame's line): issued again by
        the frame program on every call, after the graph, as eager's through the
        frame's module's registry (so the filters' "default" and "once" actions
        behave as eager's). A filter making it an error (an exception at the call)
        is unsupported."""
        g = tx.f_globals
        module = g.get("__name__", "<string>")
        if _warning_action(message, category, module, tx.lineno) == "error":
            raise Unsupported(f"a {category.__name__} the warning filters make an error")
        self.calls.append(("warn", (message, category, tx.code.co_filename, tx.lineno,
                                    module, g.setdefault("__warningregistry__", {}), g)))

    # ------------------------------------------------------------ one VT per object

    def known(self, value):
        return self.objects.get(id(value))

    def track(self, value, vt):
        self.objects[id(value)] = vt
        self.keepalive.append(value)
        return vt

    # ------------------------------------------------------------ containers and cells

    def mutate(self, vt):
        real = getattr(vt, "real", None)
        if real is not None and type(real) not in (list, dict, defaultdict):
            raise Unsupported(f"changing the items of a {type(real).__name__} (only plain "
                              "lists and dicts are replayed)")
        if not vt.mutated:
            vt.mutated = True
            if getattr(vt, "real", None) is not None:
                self.mutated.append(vt)

    def write_cell(self, cell, value):
        cell.content = value
        if cell.real is not None and not cell.mutated:
            cell.mutated = True
            self.cells.append(cell)

    # ------------------------------------------------------------ attributes

    def read_attr(self, vt, name):
        """The frame's own last write of vt.name (a VT), or None when it wrote none."""
        return _read(self.attrs, (id(vt), name), "attribute")

    def write_attr(self, vt, name, value, raw=False):
        """vt.name = value (value DELETED: del vt.name), for a plain object or a module.
        raw: object.__setattr__ on an object the frame made (its class's own __setattr__
        ran interpreted, or is bypassed as the code asked); replayed the same way
        (program.py), as is a write into a slot of such an object."""
        obj = vt.value
        cls = type(obj)
        made = getattr(vt, "made_by_frame_object", False)
        if getattr(vt, "made_by_frame_object", False) and value is DELETED:
            # an object the frame made: deleting what it set leaves nothing to replay
            old = self.attrs.get((id(vt), name))
            if old is None or old[2] is DELETED:
                raise Unsupported(f"deleting attribute {name!r} the object does not have")
            del self.attrs[(id(vt), name)]
            return
        if isinstance(obj, type):
            raise Unsupported(f"assigning attribute {name!r} of class {obj.__name__}")
        if isinstance(obj, types.ModuleType):
            raise Unsupported("module attributes are written through their globals")
        descr = _class_attr(cls, name)
        slot = made and type(descr) is types.MemberDescriptorType and \
            vars(descr.__objclass__).get(name) is descr
        if descr is not _MISSING and _is_data_descriptor(descr) and not slot:
            raise Unsupported(f"assigning {cls.__name__}.{name}, a "
                              f"{type(descr).__name__} (data descriptor)")
        from ..nn import Module
        if isinstance(obj, Module):
            _check_module_write(obj, name, value)
        else:
            if not raw and cls.__setattr__ is not object.__setattr__ or \
                    (value is DELETED and cls.__delattr__ is not object.__delattr__):
                raise Unsupported(f"assigning attribute {name!r} of a {cls.__name__}, "
                                  "which defines __setattr__")
            if not slot and not hasattr(obj, "__dict__"):
                raise Unsupported(f"assigning attribute {name!r} of a {cls.__name__} "
                                  "without a __dict__")
        _record_write(self.attrs, (id(vt), name), vt, name, value, _has_attr(obj, name),
                      "attribute")
        vt.written = True

    def write_grad(self, tv, value):
        """tensor.grad = value for a graph input (zero_grad setting it to None)."""
        _record_write(self.attrs, (id(tv), "grad"), tv, "grad", value, True, "attribute")

    # ------------------------------------------------------------ globals

    def read_global(self, globals_dict, name):
        return _read(self.globals_, (id(globals_dict), name), "global")

    def write_global(self, globals_dict, name, value):
        _record_write(self.globals_, (id(globals_dict), name), globals_dict, name, value,
                      name in globals_dict, "global")

    # ------------------------------------------------------------ reporting

    def describe(self):
        lines = [f"{type(vt).__name__} {_src(vt)}: items changed" for vt in self.mutated]
        lines += [f"{_src(vt)}.{name} {'deleted' if v is DELETED else '= ' + repr(v)}"
                  for vt, name, v, _ in self.attrs.values()]
        lines += [f"global {name} {'deleted' if v is DELETED else '= ' + repr(v)}"
                  for _, name, v, _ in self.globals_.values()]
        lines += [f"cell {_src(c)} = {c.content!r}" for c in self.cells]
        lines += [f"warning {c[1][1].__name__} at {c[1][2]}:{c[1][3]}" if c[0] == "warn"
                  else f"{c[0]} into {c[2]}" for c in self.calls]
        return lines


def _warning_action(text, category, module, lineno):
    """The action of the first of warnings.filters matching the warning (as
    warnings.warn_explicit chooses it), else the default action."""
    import warnings
    for action, msg, cat, mod, ln in warnings.filters:
        if (msg is None or msg.match(text)) and issubclass(category, cat) and \
                (mod is None or mod.match(module)) and (ln == 0 or ln == lineno):
            return action
    return warnings.defaultaction


def issue_warning(args):
    """The frame program's replay of one recorded warning (SideEffects.warn)."""
    warnings.warn_explicit(*args)


def _src(vt):
    return vt.source.name() if getattr(vt, "source", None) is not None else \
        f"<{type(getattr(vt, 'real', None)).__name__}>"


def _has_attr(obj, name):
    try:
        return name in object.__getattribute__(obj, "__dict__")
    except AttributeError:
        return False


def _check_module_write(m, name, value):
    """Module.__setattr__'s rules, checked at capture: a write eager would refuse (a
    plain tensor over a parameter, a non-module over a submodule) falls back, so eager
    raises its own error."""
    from .variables import ModuleVar, TensorVar
    from ..nn import Parameter
    d = object.__getattribute__(m, "__dict__")
    if value is DELETED:
        return
    is_none = getattr(value, "value", 0) is None and not isinstance(value, TensorVar)
    is_param = isinstance(value, TensorVar) and \
        issubclass(getattr(value, "real_type", object), Parameter)
    if name in (d.get("_parameters") or {}) and not (is_param or is_none):
        raise Unsupported(f"assigning a non-Parameter to parameter {name!r}")
    if name in (d.get("_modules") or {}) and not (isinstance(value, ModuleVar) or is_none):
        raise Unsupported(f"assigning a non-Module to submodule {name!r}")
    if name in (d.get("_buffers") or {}) and not (isinstance(value, TensorVar) or is_none):
        raise Unsupported(f"assigning a non-tensor to buffer {name!r}")


def _read(table, key, what):
    """The value VT of the frame's last write of the name in table, or None."""
    entry = table.get(key)
    if entry is None:
        return None
    if entry[2] is DELETED:
        raise Unsupported(f"reading {what} {key[1]!r} the compiled code deleted")
    return entry[2]


def _record_write(table, key, target, name, value, existed, what):
    """Records target.name = value (value DELETED: deleted) in table (attrs or globals_)
    so that replay leaves the names in the order eager leaves them in the object's dict:
    a write of a name that exists keeps its place, one that creates it (again) moves to
    the end, as inserting into a dict does. An entry is (target, name, value, recreate):
    recreate when the name existed before the frame, which deleted it and created it
    anew (replay deletes it first, so that it moves to the end). Deleting a name the
    frame created (that did not exist before it) is not replayable: Unsupported."""
    old = table.get(key)
    if value is DELETED and old is not None and old[2] is not DELETED and not existed:
        raise Unsupported(f"deleting {what} {name!r} that the compiled code created")
    exists = old[2] is not DELETED if old is not None else existed
    if value is DELETED or exists:
        table[key] = (target, name, value, old[3] if old is not None else False)
    else:
        table.pop(key, None)
        table[key] = (target, name, value, existed)
