"""From a frame the hook missed to a cache entry: interpret its bytecode into an FX graph,
compile the graph with the backend, and return (guard program, compiled frame).

This is the callback of the frame hook (csrc/capture/eval_frame.c); see
ember/capture/_hook.py for the protocol.
"""
from __future__ import annotations

import inspect
import os
import time
import types
import warnings
import weakref

from .. import _C
from .. import fx
from . import _hook, resume, skip
from .bytecode import parse_exception_table
from .config import config
from . import logs
from .exc import BreakReason, CaptureError, Unsupported, counters
from .guards import GuardSet
from . import tensor_data
from .program import build_program
from .self_check import SelfCheckingFrame, call_args, copy_graph_module
from . import dynamic
from .sym_sizes import SymbolicUnsupported, has_symbols, specializing
from ..aot.eager import writes_into_inputs
from .source import AttrSource, CellSource, ClosureSource, LocalSource
from .symbolic import SIMPLE_BREAK_OPS, OutputGraph, StopTrace, Translator
from .variables import BoundMethodVar, CellVar, ConstVar, DictVar, FunctionVar, ListVar, \
    NullVar, ObjectVar, TensorMethodVar, TensorVar, TupleVar, VariableTracker

_CODE_FLAGS_SKIP = (inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR
                    | inspect.CO_ITERABLE_COROUTINE)

# A comprehension's own frame is only reached when the frame around it runs in CPython
# (a captured frame inlines it); its argument is a live iterator, which cannot be
# guarded or fetched again, so converting it could only fail, and be counted again.
_COMPREHENSIONS = frozenset({"<listcomp>", "<dictcomp>", "<setcomp>"})


class CompileContext:
    """The options of one ember.compile() call: what its callback uses."""

    def __init__(self, backend_name, backend, fullgraph, check=False, dynamic=None):
        self.backend_name = backend_name
        self.dynamic = dynamic    # ember.compile(dynamic=...): capture/dynamic.py
        self.backend = backend
        self.fullgraph = fullgraph
        self.check = check        # self-check mode: first calls also run eagerly
        self.graphs = []          # GraphModules compiled under this context, in order
        self.recompile_reasons = []
        self.break_reasons = []   # exc.BreakReason: graph breaks, frames fallen back
        self.callback = None      # the hook callback of this context (make_callback)
        _contexts.add(self)

    def strict(self):
        return self.fullgraph or config.strict or os.environ.get("EMBER_STRICT") == "1"

    def forget(self):
        """ember.compiler.reset(): the graphs go with the cache entries."""
        self.graphs.clear()
        self.recompile_reasons.clear()
        self.break_reasons.clear()


_contexts = weakref.WeakSet()


def forget_graphs():
    for ctx in list(_contexts):
        ctx.forget()


def make_callback(ctx: CompileContext):
    def callback(frame_info, entries):
        return convert_frame(frame_info, entries, ctx)
    ctx.callback = callback
    return callback


def convert_frame(frame_info, entries, ctx: CompileContext):
    code = frame_info.code
    if skip.should_skip(code) or code.co_flags & _CODE_FLAGS_SKIP or \
            code.co_name in _COMPREHENSIONS:
        return _hook.SKIP
    if entries:
        reason = entries[0][0].check_verbose(frame_info)
        ctx.recompile_reasons.append((code.co_name, reason))
        counters["recompiles"][reason or "unknown"] += 1
        logs.log("recompiles", f"recompiling {code.co_name} ({code.co_filename}:"
                 f"{code.co_firstlineno}), entry {len(entries) + 1}: {reason}")
        if len(entries) >= config.cache_size_limit:
            _warn_once(code, "cache_size_limit",
                       f"ember.compile: {code.co_name} ({code.co_filename}:"
                       f"{code.co_firstlineno}) was recompiled {len(entries)} times "
                       f"(config.cache_size_limit); from now on it uses the entries it has "
                       f"and runs eagerly otherwise. Last reason: {reason}")
            if ctx.strict():
                raise CaptureError(f"recompile limit reached for {code.co_name}: {reason}")
            return _hook.RUN_ONLY
    counters["stats"]["calls_captured"] += 1
    t0 = time.perf_counter()
    try:
        try:
            out, ret = trace_frame(frame_info, dynamic=ctx.dynamic)
        except SymbolicUnsupported as e:
            # what symbolic sizes cannot do yet: this code is captured specialised
            counters["dynamic_fallback"][e.reason] += 1
            dynamic.static_codes.add(code)
            out, ret = trace_frame(frame_info, dynamic=ctx.dynamic)
        try:
            gm, getters, program = build_graph_module(out, ret, code)
        except tensor_data.RangeCheckUnsafe:
            # ember.tensor's range check cannot follow the graph here: captured again,
            # the call breaks
            tensor_data.refused_codes.add(code)
            out, ret = trace_frame(frame_info, dynamic=ctx.dynamic)
            gm, getters, program = build_graph_module(out, ret, code)
    except Unsupported as e:
        if ctx.strict():
            where = f" at {e.location}" if e.location else ""
            hint = suggestion(e.reason)
            raise CaptureError(f"ember.compile(fullgraph=True) cannot capture "
                               f"{code.co_name}: {e.reason}{where}"
                               + (f"; {hint}" if hint else "")) from None
        reason = e.reason
        if e.break_at is not None:
            try:
                try:
                    entry = compile_break(frame_info, e, ctx, t0)
                except tensor_data.RangeCheckUnsafe:
                    tensor_data.refused_codes.add(code)     # (as above)
                    entry = compile_break(frame_info, e, ctx, t0)
            except Unsupported as why:
                reason = f"{e.reason} (graph break not resumable: {why.reason})"
            except Exception as bug:   # noqa: BLE001 - a converter bug: run in CPython
                reason = (f"{e.reason} (graph break failed: internal error: "
                          f"{type(bug).__name__}: {bug})")
                _warn_once(code, reason, f"ember.compile: could not build the graph "
                           f"break in {code.co_name} ({code.co_filename}:"
                           f"{code.co_firstlineno}); it runs eagerly. {reason}")
            else:
                counters["graph_break"][e.reason] += 1
                counters["stats"]["graph_breaks"] += 1
                ctx.break_reasons.append(BreakReason(e))
                logs.log("graph_breaks", f"{code.co_name} ({code.co_filename}:"
                         f"{code.co_firstlineno}) breaks its graph: {e.reason}"
                         f"{f' at {e.location}' if e.location else ''}; capture "
                         "resumes after it")
                return entry
        counters["unsupported"][reason] += 1
        ctx.break_reasons.append(BreakReason(e, reason, graph_break=False))
        logs.log("graph_breaks", f"{code.co_name} ({code.co_filename}:"
                 f"{code.co_firstlineno}) runs in CPython: {reason}"
                 f"{f' at {e.location}' if e.location else ''}")
        counters["stats"]["frames_fallback"] += 1
        fallen_back.add(code)
        return _hook.SKIP
    except Exception as e:   # noqa: BLE001 - a converter bug must not break the program
        reason = f"internal error: {type(e).__name__}: {e}"
        counters["unsupported"][reason] += 1
        ctx.break_reasons.append(BreakReason(Unsupported(reason), graph_break=False))
        counters["stats"]["frames_fallback"] += 1
        if ctx.strict():
            raise
        _warn_once(code, reason, f"ember.compile: could not capture {code.co_name} "
                   f"({code.co_filename}:{code.co_firstlineno}) because of an internal "
                   f"error; it runs eagerly. {reason}")
        return _hook.SKIP
    _log_graph(gm, code, out)
    pristine = copy_graph_module(gm) if ctx.check else None   # backends may edit gm
    compiled = _leaving_grad_mode(compile_graph(gm, out, ctx, code), out)
    guards = build_guard_program(out.guards, frame_info, ctx)
    frame = _C.CompiledFrame(compiled, getters, program, frame_info.globals,
                             frame_info.closure,
                             _eager_rerun(code, frame_info.globals, frame_info.closure, ctx),
                             code.co_name, guards)
    if ctx.check:
        frame = SelfCheckingFrame(frame, frame_info, pristine, out, ctx.backend,
                                  ctx.backend_name)
    counters["stats"]["compile_time_us"] += int((time.perf_counter() - t0) * 1e6)
    if not resume.is_resume_code(code) or _has_ops(gm):
        # (the rest of a frame after a break without tensor work is no graph, as
        # torch counts)
        counters["stats"]["unique_graphs"] += 1
        ctx.graphs.append(gm)
    return guards, frame


def _has_ops(gm):
    return any(n.op not in ("placeholder", "output") for n in gm.graph.nodes)


# ------------------------------------------------------------------ graph breaks

_SUGGESTIONS = (
    ("print()", "move print out of the compiled function or use ember.compiler.disable"),
    ("data-dependent control flow", "use ember.where instead of `if` on a tensor value"),
    ("Tensor.item()", "keep the value a tensor (ember.where, tensor ops) or move .item() "
                      "out of the compiled function"),
    ("Tensor.tolist()", "keep the value a tensor or move .tolist() out of the compiled "
                        "function"),
    ("Tensor.numpy()", "use ember ops instead of NumPy inside the compiled function"),
    ("Tensor.backward()", "call .backward() on the compiled function's result, outside it"),
    ("ember.compiler.disable", "call it outside the compiled function, or drop "
                               "ember.compiler.disable"),
)


def suggestion(reason):
    """A fix for a known unsupported construct, or None."""
    for key, hint in _SUGGESTIONS:
        if key in reason:
            return hint
    return None


def compile_break(frame_info, e, ctx, t0):
    """The cache entry for a frame that stops at instruction e.break_at: traces again up
    to it, compiles that graph (the prefix) and returns (guards, entry function) that
    runs the prefix, the instruction in CPython and a resume function (resume.py).

    A break inside calls the frame inlines (e.chain: a function, a method, a module's
    forward, called by a CALL and returning the call's result) stops there: the prefix
    holds the caller's ops before the call and the callee's before the break, and
    after the instruction the callee's rest runs as a resume function whose result
    goes to the caller's resume function. Where that cannot be built, the break moves
    out to the call in the frame around it (at last the frame's own instruction, whose
    call then runs in CPython, its frame converted on its own)."""
    code = frame_info.code
    resume.check_resumable(code)
    if e.chain:
        path = list(reversed(e.chain))
    else:
        path = [(code, e.break_at)]
    path, loop = _cut_at_loop(path)
    error = None
    for n in range(len(path), 0, -1):
        try:
            return _compile_break_at(frame_info, path[:n],
                                     loop if n == len(path) else None, ctx, t0)
        except Unsupported as why:
            error = why
    raise error


def _cut_at_loop(path):
    """The break path cut at the outermost frame whose instruction is inside a loop:
    there the break moves to before the loop, which a loop function runs in CPython,
    capture resuming where the loop exits (resume.py). Returns (path, the loop's
    exits and locals stored or deleted, or None)."""
    for i, (code, offset) in enumerate(path):
        base, shift = resume.original(code)
        try:
            loop = resume.enclosing_loop(base, offset - shift)
        except Unsupported:
            if i == 0:
                raise
            return path[:i], None      # (a comprehension's loop: break at its call)
        if loop is not None:
            return path[:i] + [(code, loop[0] + shift)], loop[1:]
    return path, None


def _compile_break_at(frame_info, path, loop, ctx, t0):
    """compile_break for one break path: [(code, offset)], outermost first."""
    code = frame_info.code
    root = []
    out, _ = trace_frame(frame_info, stop_path=path, keep=root, dynamic=ctx.dynamic)
    tx = root[-1] if len(root) == 2 else None
    if tx is None or tx.depth != len(path) - 1 or tx.stopped.offset != path[-1][1]:
        raise Unsupported("tracing again did not reach the break")
    frames = []
    t = tx
    while t is not None:
        frames.append(t)
        t = t.parent
    frames.reverse()
    last = len(frames) - 1
    if last:
        resume.check_resumable(tx.code)
    ins = tx.stopped
    following = tx.instructions[tx.index_of[ins.offset] + 1].offset
    if loop is not None:
        n_in, outputs, instruction = 0, 0, ("LOOP", None)
        offsets = [ins.offset]
    elif ins.opname == "CALL":
        n_in, outputs, instruction = ins.arg + 2, 1, ("CALL", ins.arg)
        offsets = [following]
    elif ins.opname == "CALL_FUNCTION_EX":
        n_in, outputs, instruction = 3 + (ins.arg & 1), 1, ("CALL_FUNCTION_EX", ins.arg)
        offsets = [following]
    elif ins.opname in SIMPLE_BREAK_OPS:
        (n_in, outputs), instruction = SIMPLE_BREAK_OPS[ins.opname], (ins.opname, ins.arg)
        offsets = [following]
    else:
        n_in, outputs, instruction = 1, 0, (ins.opname, None)
        offsets = [following, ins.argval]
    stack = list(tx.stack)
    if len(stack) < n_in:
        raise Unsupported("the stack at the break is shorter than the instruction needs")
    values, index = [], {}

    def value_index(vt):
        if isinstance(vt, NullVar):
            return None
        if id(vt) not in index:
            index[id(vt)] = len(values)
            values.append(vt)
        return index[id(vt)]

    input_idx = [value_index(v) for v in stack[len(stack) - n_in:]]
    # the grad mode each frame was entered with, and its mode at its instruction
    entered = [_C.is_grad_enabled()] + [f.entry_grad for f in frames[1:]]   # (guarded)
    at = entered[1:] + [out.exit_grad_mode]
    levels = []
    for depth, f in enumerate(frames):
        fcode = f.code
        base, _ = resume.original(fcode)
        offset = path[depth][1]
        if depth < last:
            # inside the CALL at offset: its inputs are popped; the callee's return
            # value is the continuation's output
            lower = list(f.stack)
            n_out = 1
            after = [f.instructions[f.index_of[offset] + 1].offset]
        else:
            lower = stack[:len(stack) - n_in]
            n_out = outputs
            after = offsets
        lower_idx = [value_index(v) for v in lower]

        def locals_at(off, f=f, fcode=fcode, base=base):
            """Value indices of the locals live at off; a cell variable's is its cell."""
            live = resume.live_locals(fcode, off)
            local_values = [value_index(f.locals[n]) if n in live and n in f.locals
                            else None for n in fcode.co_varnames]
            for i, n in enumerate(base.co_varnames):
                if n in base.co_cellvars:
                    local_values[i] = value_index(f.cells[n])
            return local_values

        cell_names = resume.own_cells(base)
        closure, free_params = None, depth == 0 and resume.frees_are_params(fcode)
        if depth and base.co_freevars:
            real = tuple(f.cells[n].real for n in base.co_freevars)
            if all(c is not None for c in real):
                closure = real            # (the function's own: guarded by identity)
            elif "__class__" in base.co_freevars:
                raise Unsupported("zero-argument super() in a closure the frame made")
            else:
                free_params = True
        if free_params:
            cell_names += base.co_freevars
        cells = [value_index(f.cells[n]) for n in cell_names]
        continuations = [resume.Continuation(fcode, off, locals_at(off), lower_idx,
                                             n_out, cells=cells) for off in after]
        if depth == last and loop is not None:
            if any(v is None for v in lower_idx):
                raise Unsupported("a NULL on the stack below a loop")
            continuations[0].loop = loop
        handler = None
        caught = resume.handler_at(fcode, offset) \
            if not (depth == last and loop is not None) else None
        if caught is not None:
            # inside a try or with block: an exception the instruction raises goes to
            # the block's handler, in a resume function with the stack the handler
            # expects
            target, hdepth, lasti = caught
            if hdepth > len(lower):
                raise Unsupported("the handler's stack reaches into the instruction's "
                                  "inputs")
            handler = resume.Continuation(fcode, target, locals_at(target),
                                          lower_idx[:hdepth], 1 + bool(lasti),
                                          lasti=bool(lasti), cells=cells)
        levels.append(resume.Level(fcode, continuations, handler, offset,
                                   entered[depth] if at[depth] != entered[depth]
                                   else None, f.f_globals if depth else None,
                                   closure, free_params))
    _check_no_aliases_cross(values, out)
    if frame_info.closure:
        for i, cell in enumerate(frame_info.closure):
            # the entry function makes resume functions over these very cells
            out.guards.add("ID_MATCH", CellSource(i, code.co_freevars[i]), cell)
    ret = TupleVar([ConstVar(True)] + values)
    gm, getters, program = build_graph_module(out, ret, code)
    _log_graph(gm, code, out)
    compiled = _leaving_grad_mode(compile_graph(gm, out, ctx, code), out)
    guards = build_guard_program(out.guards, frame_info, ctx)
    prefix = _C.CompiledFrame(compiled, getters, program, frame_info.globals,
                              frame_info.closure,
                              _eager_rerun(code, frame_info.globals, frame_info.closure,
                                           ctx, flagged=True),
                              code.co_name, guards)
    entry = resume.entry_function(code, frame_info.func, prefix, len(values), input_idx,
                                  instruction, tx.kw_names, levels, frames[0].lineno)
    if _has_ops(gm):
        counters["stats"]["unique_graphs"] += 1
        ctx.graphs.append(gm)
    counters["stats"]["compile_time_us"] += int((time.perf_counter() - t0) * 1e6)
    return guards, entry


def _leaving_grad_mode(compiled, out):
    """The compiled graph, followed by setting grad mode as the frame leaves it where
    that differs from the mode it was entered with (a graph break inside a grad-mode
    block, a resume function leaving one, set_grad_enabled called as a function): a
    backend's compiled graph need not leave the global mode as its nodes set it."""
    mode = getattr(out, "exit_grad_mode", None)
    if mode is None or mode == _C.is_grad_enabled():   # (the trace restored the mode)
        return compiled

    def run(*args):
        result = compiled(*args)
        _C._set_grad_enabled(mode)
        return result
    _mark_skip(run)
    return run


def _tensors_in(values):
    """The TensorVars the values carry (themselves, in containers, as bound methods)."""
    stack, seen = list(values), set()
    while stack:
        vt = stack.pop()
        if id(vt) in seen:
            continue
        seen.add(id(vt))
        if isinstance(vt, TensorVar):
            yield vt
        elif isinstance(vt, (TupleVar, ListVar)):
            stack.extend(vt.items)
        elif isinstance(vt, DictVar):
            stack.extend(vt.items.values())
        elif isinstance(vt, TensorMethodVar):
            stack.append(vt.tensor)
        elif isinstance(vt, BoundMethodVar):
            stack.append(vt.self_var)
        elif isinstance(vt, CellVar) and vt.content is not None:
            stack.append(vt.content)


def _check_no_aliases_cross(values, out):
    """The graph's outputs are tensors of their own: a view made in the graph (of an
    input, of an intermediate), or two values sharing memory, would reach CPython and
    the resume function as separate tensors, not eager's views of one memory with
    eager's autograd history, so a later write would not reach what eager's reaches.
    Such values crossing the break send the frame to CPython instead. Inputs
    themselves cross as the very objects the caller passed."""
    seen = set()
    for vt in _tensors_in(values):
        fake = vt.fake
        if vt.node.op == "placeholder":
            continue
        storage = id(fake.untyped_storage())
        if storage in out.input_storages:
            why = "a tensor sharing memory with an input (a view of it)"
        elif fake._base is not None:
            why = "a view made in the graph"
        elif storage in seen:
            why = "two tensors sharing memory"
        else:
            seen.add(storage)
            continue
        raise Unsupported(f"{why} would cross the graph break")


# Code that fell back (and is marked SKIP) because of an unsupported construct: a strict
# ember.compile call of it later must not run it eagerly in silence (api.py unmarks it).
fallen_back = weakref.WeakSet()


def retry_if_fallen_back(code):
    """For a strict (fullgraph) call: converts a function again that an earlier,
    non-strict ember.compile let fall back, so that the call raises as it should."""
    if code in fallen_back:
        fallen_back.discard(code)
        _hook.reset_code(code)


def trace_frame(frame_info, stop_path=None, keep=None, dynamic=False):
    """Interprets the frame's code with its argument values; returns (OutputGraph, VT).
    With stop_path ([(code, offset)], outermost first: the frame's instruction, then
    those of the frames each inlines), stops before the last (a graph break):
    `keep` (a list) receives the frame's Translator and the one that stopped, each
    holding its stack and locals."""
    code = frame_info.code
    out = OutputGraph(code)
    out.dynamic_mode = dynamic
    out.stop_path = stop_path
    nargs = code.co_argcount + code.co_kwonlyargcount + \
        bool(code.co_flags & inspect.CO_VARARGS) + bool(code.co_flags & inspect.CO_VARKEYWORDS)
    names = code.co_varnames[:nargs]
    builtins_ = frame_info.builtins
    root = Translator(code, frame_info.globals, builtins_, {}, {}, out)
    locals_, cells = {}, {}
    # a resume function's cell variables are parameters holding the cells (resume.py)
    resuming = resume.is_resume_code(code)
    cell_params = set(code.co_cellvars) if resuming else set()
    for i, (name, value) in enumerate(zip(names, frame_info.args)):
        if name in cell_params:
            cells[name] = _cell_parameter(root, out, value, i, name)
        elif resuming and isinstance(value, types.FunctionType) and \
                value.__code__ in resume.original(code)[0].co_consts:
            # a function the frame made over its cells, made again by the program for
            # each call: guarded by its code, its cells are the cell parameters
            root.guard("ID_MATCH", AttrSource(LocalSource(i, name), "__code__"),
                       value.__code__)
            locals_[name] = FunctionVar(value, LocalSource(i, name))
        else:
            locals_[name] = root.wrap(value, LocalSource(i, name))
    for name in code.co_cellvars:
        if name not in cells:
            cells[name] = CellVar(locals_.get(name))
    closure = frame_info.closure or ()
    for i, name in enumerate(code.co_freevars):
        try:
            contents = closure[i].cell_contents
        except (IndexError, ValueError):
            raise Unsupported(f"closure variable {name!r} is not set") from None
        src = ClosureSource(i, name)
        var = root.wrap(contents, src)
        if isinstance(var, TensorVar) or not var.is_constant():
            # the compiled frame reads the cells it was built with: pin their contents
            out.guards.add("ID_MATCH", src, contents)
        cell = out.side_effects.known(closure[i])
        if cell is None:
            cell = out.side_effects.track(closure[i], CellVar(var, real=closure[i]))
        cell.frame_index = i       # a write is guarded on this cell's identity
        cells[name] = cell
    tx = Translator(code, frame_info.globals, builtins_, locals_, cells, out)
    if stop_path and len(stop_path) == 1:
        tx.stop_at = stop_path[0][1]
    if keep is not None:
        keep.append(tx)
    try:
        ret = tx.run()
    except StopTrace as stop:
        ret = None
        if keep is not None:
            keep.append(stop.frame)
    check_generators_finished(out)
    out.guards.add("GRAD_MODE", None, _C.is_grad_enabled())
    out.guards.add("AUTOCAST", None, _C._get_autocast())
    return out, ret


def check_generators_finished(out):
    """A generator function with try or with blocks (a contextlib.contextmanager's,
    say) that the trace left suspended at a yield inside one of them would, in eager,
    run its finally blocks or __exit__ when collected: the interpreter does not model
    that, so such a frame breaks or falls back (counted). One run to its end, or
    suspended outside its blocks, is exact."""
    for frame in getattr(out, "guarded_generators", ()):
        at = getattr(frame, "suspended_at", None)
        if at is None:
            continue
        if any(2 * start <= at < 2 * end for start, end, *_ in
               parse_exception_table(frame.code.co_exceptiontable)):
            raise Unsupported(f"generator function {frame.code.co_qualname} left "
                              "suspended inside try or with (its finally blocks would "
                              "run when it is collected)")


def _cell_parameter(root, out, cell, i, name):
    """The CellVar of a resume function's parameter holding a cell of the frame it
    resumes: its contents read (and guarded) through the slot, its writes replayed
    into the cell the slot holds."""
    if not isinstance(cell, types.CellType):
        raise Unsupported(f"cell variable {name!r} of a resume function is no cell")
    slot = LocalSource(i, name)
    try:
        contents = cell.cell_contents
    except ValueError:          # assigned after the break
        root.guard("LAMBDA", slot, (_is_empty_cell, "is an empty cell"))
        var = CellVar(None, real=cell)
    else:
        var = CellVar(root.wrap(contents, AttrSource(slot, "cell_contents")), real=cell)
    var.source = slot
    return out.side_effects.track(cell, var)


def _is_empty_cell(cell):
    try:
        cell.cell_contents
    except ValueError:
        return True
    return False


def build_graph_module(out: OutputGraph, ret: VariableTracker, code):
    """Adds the output node; returns (GraphModule, input getters, frame program)."""
    tensor_data.verify(out)
    program, outputs = build_program(ret, out.side_effects, out.sym)
    _guard_mutated_objects(out)
    graph = out.graph
    graph.output(tuple(outputs))
    # no dead-code elimination here: an unused op may still raise as eager raises (an
    # index out of range); AOT drops what is dead by the prims' own facts
    graph.lint()
    gm = fx.GraphModule({}, graph, class_name=f"GraphModule_{code.co_name}")
    gm.meta = {"code": code, "inputs": [src.name() for src, _, _ in out.inputs],
               "program": program, "side_effects": out.side_effects.describe()}
    getters = tuple(src.getter() for src, _, _ in out.inputs)
    return gm, getters, program


def _guard_mutated_objects(out: OutputGraph):
    """Guards what the replay assumes: the cells of the frame's own closure it writes
    are the ones it was traced with, and an object it changed is none of the other
    mutable objects it read (two arguments that are one list at capture share one VT,
    guarded by ALIAS when wrapped; two that were distinct must stay distinct)."""
    effects = out.side_effects
    if not effects:
        return
    for cell in effects.cells:
        if getattr(cell, "frame_index", None) is not None:
            out.guards.add("ID_MATCH", CellSource(cell.frame_index, ""), cell.real)
    changed = [vt for vt in effects.mutated] + \
        [vt for vt, _, _, _ in effects.attrs.values() if not isinstance(vt, TensorVar)]
    sourced = [vt for vt in effects.objects.values()
               if getattr(vt, "source", None) is not None and
               not isinstance(vt, (CellVar, ObjectVar))]
    seen = set()
    for vt in changed:
        if vt.source is None or id(vt) in seen:
            continue
        seen.add(id(vt))
        for other in sourced:
            if other is not vt and type(other.real) is type(vt.real):
                out.guards.add("ALIAS", vt.source, (other.source, False))


def _log_graph(gm, code, out):
    if config.verbose or logs.enabled("graph_code"):
        logs.log("graph_code", f"===== captured graph of {code.co_name} ({code.co_filename}:"
                 f"{code.co_firstlineno}), {len(out.guards)} guards =====\n"
                 f"{gm.print_readable(print_output=False)}", force=True)
    if logs.enabled("guards"):
        logs.log("guards", f"===== guards of {code.co_name} ({code.co_filename}:"
                 f"{code.co_firstlineno}) =====\n" +
                 "\n".join(f"  {g!r}" for g in out.guards))


def compile_graph(gm, out: OutputGraph, ctx: CompileContext, code):
    """Runs the backend; a failing backend falls back to running the graph eagerly, with
    one warning per (code, reason), unless strict. A graph with size inputs goes to
    backends that compile fixed sizes once per size (sym_sizes.specializing), each
    compilation with the same fallback; aot_eager traces it symbolically (one graph
    for every size), and compiles it per size only where it cannot (counted in
    counters["aot_dynamic_fallback"]); so does a backend with a `symbolic` variant
    (llvm: kernels taking sizes as arguments, counted in
    counters["llvm_dynamic_fallback"])."""
    example_inputs = [value for _, _, value in out.inputs]
    from ..nn.parallel.compiled import split_backend   # DDP: one graph per bucket
    backend = split_backend(ctx.backend)

    def compile_one(g, inputs):
        try:
            compiled = backend(g, inputs)
            if not callable(compiled):
                raise TypeError(f"backend returned {type(compiled).__name__}, not a "
                                "callable")
        except Exception as e:   # noqa: BLE001 - any backend failure falls back
            if ctx.strict():
                raise
            reason = f"{type(e).__name__}: {e}"
            counters["backend_fallback"][reason] += 1
            _warn_once(code, reason, f"ember.compile: backend {ctx.backend_name!r} failed "
                       f"on {code.co_name} ({code.co_filename}:{code.co_firstlineno}); "
                       f"running that graph eagerly instead. {reason}")
            from ..aot.eager import restoring_inputs, written_inputs
            # its writes into inputs run in place: a call that raises puts them back,
            # so the frame's eager rerun writes once
            compiled = restoring_inputs(g.forward, written_inputs(g))
        _mark_skip(compiled)
        return compiled

    if has_symbols(gm) and ctx.backend_name == "aot_eager" and backend is ctx.backend:
        # AOT autograd traces the symbolic graph: one forward and one backward for
        # every size; what it cannot trace symbolically is compiled per size, counted
        from ..aot import SymbolicAOTUnsupported
        try:
            compiled = backend(gm, example_inputs)
        except SymbolicAOTUnsupported as e:
            counters["aot_dynamic_fallback"][str(e)] += 1
        else:
            _mark_skip(compiled)
            return compiled
    symbolic_backend = getattr(ctx.backend, "symbolic", None)
    if has_symbols(gm) and symbolic_backend is not None and backend is ctx.backend:
        # the LLVM backend: kernels taking sizes as arguments, one plan for every size;
        # a graph it cannot compile so is compiled per size below, counted
        from ..aot import SymbolicAOTUnsupported
        try:
            compiled = symbolic_backend(gm, example_inputs)
        except SymbolicAOTUnsupported as e:
            counters["llvm_dynamic_fallback"][str(e)] += 1
        else:
            _mark_skip(compiled)
            return compiled
    if has_symbols(gm) and (ctx.backend_name != "eager" or writes_into_inputs(gm)):
        # (the eager backend runs symbolic graphs as they are, unless AOT's
        # functionalization must run them)
        compiled = specializing(gm, compile_one)
        _mark_skip(compiled)
        return compiled
    return compile_one(gm, example_inputs)


def _mark_skip(fn):
    """Frames of generated code must not come back to the hook."""
    for f in (fn, getattr(fn, "__func__", None), getattr(fn, "forward", None),
              getattr(fn, "__wrapped__", None)):
        code = getattr(f, "__code__", None) or getattr(getattr(f, "__func__", None),
                                                       "__code__", None)
        if code is not None:
            _hook.skip_code(code)


def build_guard_program(guards: GuardSet, frame_info, ctx: CompileContext = None):
    """The C guard program. Its last guard ties the entry to the ember.compile call
    that made it (torch's BACKEND_MATCH): the same function compiled again with
    another backend or options compiles its own entry instead of reusing this one.
    Last, so that a miss reported by check_verbose names a changed input first."""
    tuples = []
    sym = getattr(guards, "sym", None)
    for g in guards:
        if g.kind == "GRAD_MODE":
            tuples.append(("GRAD_MODE", bool(g.value)))
            continue
        if g.kind == "AUTOCAST":
            tuples.append(("AUTOCAST", g.value))
            continue
        src = g.source.getter()
        if g.kind == "TENSOR_MATCH":
            sizes, strides = sym.open_dims(g.source) if sym is not None else ((), ())
            tuples.append(_hook.tensor_match(src, g.value, dynamic_dims=sizes,
                                             open_strides=strides))
        elif g.kind == "EQUALS_MATCH":
            tuples.append(_equals_guard(src, g.value))
        elif g.kind == "LAMBDA":
            tuples.append(("LAMBDA", src) + tuple(g.value))
        elif g.kind == "ALIAS":
            other, same = g.value
            tuples.append(("ALIAS", src, other.getter(), same))
        else:
            tuples.append((g.kind, src, g.value))
    if sym is not None:
        tuples.extend(sym.guard_tuples())
    if ctx is not None and ctx.callback is not None:
        tuples.append(("COMPILE_CONTEXT", ctx.callback))
    code = frame_info.code
    nslots = len(frame_info.args)
    return _hook.GuardProgram(tuples, code.co_varnames[:nslots], code.co_freevars)


def _equals_guard(src, value):
    if _equals_ok(value):
        return ("EQUALS_MATCH", src, value)
    if value is Ellipsis or value is NotImplemented:
        return ("ID_MATCH", src, value)
    return ("LAMBDA", src, lambda v, value=value: type(v) is type(value) and v == value,
            f"== {value!r}")


def _equals_ok(value, depth=0):
    if value is None or type(value) in (bool, int, float, str):
        return True
    if type(value) is tuple and depth < 8:
        return all(_equals_ok(v, depth + 1) for v in value)
    return False


# ------------------------------------------------------------------ errors

def _eager_rerun(code, globals_, closure, ctx, flagged=False):
    """on_error for CompiledFrame: the graph raised, before anything the frame does was
    visible, so the frame's code runs eagerly (capture is off here) and the caller
    gets exactly eager's exception, raised from the user's own lines. If eager does
    not raise, the graph was wrong: that is counted, warned once, and eager's result
    returned (strict mode raises the graph's error instead)."""
    def on_error(exc, slots):
        fn = types.FunctionType(code, globals_, code.co_name, None, closure)
        args, kwargs = call_args(code, slots)
        result = fn(*args, **kwargs)        # eager's exception propagates from here
        reason = f"the compiled graph raised {type(exc).__name__}: {exc}; eager did not"
        counters["runtime_fallback"][reason] += 1
        if ctx.strict():
            raise exc
        _warn_once(code, reason, f"ember.compile: {code.co_name} ({code.co_filename}:"
                   f"{code.co_firstlineno}): {reason}; that call ran eagerly.")
        # the prefix of a graph break returns (False, result): the entry function
        # returns the result instead of running the rest of the frame (resume.py)
        return (False, result) if flagged else result
    return on_error


_warned = set()


def _warn_once(code, reason, message):
    key = (code, reason)
    if key in _warned:
        return
    _warned.add(key)
    # attributed to the user's function, not to this module (warning filters and the
    # printed location name the user's file:line)
    warnings.warn_explicit(message, RuntimeWarning, code.co_filename, code.co_firstlineno)


def reset_warnings():
    _warned.clear()
