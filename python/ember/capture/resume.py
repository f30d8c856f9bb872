"""Graph breaks: the code a frame with a break runs instead, and resume functions.

When the interpreter stops at an instruction it cannot trace (symbolic.py marks the
offset; convert.py traces again up to it), the frame's cache entry is a generated
Python function (`entry_function`) with the frame's argument slots as parameters:

    values = prefix(*slots)       # CompiledFrame: graph so far, side effects replayed,
                                  # returns (True, live values...) or (False, eager result)
    <the stopped instruction, run by CPython on the live values it consumes>
    return resume_at_N(<live locals>, <live stack values>)

For a conditional jump on a tensor the instruction is the jump itself, with one resume
call on each edge. A resume function (`resume_code`) is a new code object made from the
code that stopped: the same body (free-variable opargs shifted), preceded by a prologue
that deletes the locals that are not live or were unbound, pushes the stack back (NULLs
where the original stack had them) and jumps to offset N. Its parameters are all the
code's locals, then the live stack values; exception-table entries are shifted by the
prologue and its line entries say "no location", so tracebacks and handlers after N
are the original ones. Resume functions are ordinary functions: the frame hook
converts them on their call, and they break again where needed. They are cached per
(code, offset, stack shape, deleted locals).

Inside blocks: a `with` block's __exit__ is a stack value (stdlib.GradModeExit for a
grad-mode block); inside a try or with block, the entry function's exception table
sends an exception of the stopped instruction to a handler resume function (skipped by
the hook: the handler runs in CPython) with the stack the frame's handler expects. A
frame's cell variables become parameters holding the cells. A break inside a loop moves
before the loop: a loop function (a resume code the hook skips) runs the loop in CPython
and calls the resume function at each of the loop's exits (`_loop_exits`).
"""
from __future__ import annotations

import dis
import inspect
import types
import weakref

from .bytecode import Asm, Label, encode_exception_table, no_location, one_line, \
    parse_exception_table
from .. import _C
from .exc import Unsupported

_JUMPS = set(dis.hasjrel)
_NO_FALLTHROUGH = {dis.opmap[n] for n in (
    "RETURN_VALUE", "RAISE_VARARGS", "RERAISE", "JUMP_FORWARD", "JUMP_BACKWARD",
    "JUMP_BACKWARD_NO_INTERRUPT")}
_READS = {"LOAD_FAST", "DELETE_FAST", "LOAD_CLOSURE", "LOAD_DEREF"}
_INTROSPECTION = {"locals", "vars", "eval", "exec", "dir"}
_FLATTEN = inspect.CO_VARARGS | inspect.CO_VARKEYWORDS
_GENERATORS = (inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR |
               inspect.CO_ITERABLE_COROUTINE)

_resume_cache = weakref.WeakKeyDictionary()   # code -> {key: resume code}


def _skip_code(code):
    from . import _hook
    _hook.skip_code(code)


def clear_cache():
    _resume_cache.clear()


def handler_at(code, offset):
    """(target offset, stack depth, lasti) of the exception-table entry covering the
    instruction at `offset` (it is inside a try or with block), or None."""
    unit = offset // 2
    for s, e, target, depth, lasti in parse_exception_table(code.co_exceptiontable):
        if s <= unit < e:
            return 2 * target, depth, lasti
    return None


def enclosing_loop(code, offset):
    """The outermost loop around `offset`, as (head, exits, stored, deleted), or None.
    head: the offset
    a graph break moves to, before the loop (a for loop's GET_ITER, a while loop's
    first body instruction); exits: the offsets control reaches leaving the loop (the
    loop's jumps past its last instruction, and the instruction after a conditional
    last jump), each with its stack depth; stored, deleted: the locals the loop (and
    the handlers it reaches) may store or delete before an exit."""
    instructions = list(dis.get_instructions(code))
    last = {}                     # backward jump target -> its last backward jump
    for ins in instructions:
        if ins.opcode in _JUMPS and "BACKWARD" in ins.opname:
            last[ins.argval] = max(last.get(ins.argval, -1), ins.offset)
    spans = [(t, b) for t, b in last.items() if t <= offset <= b]
    if not spans:
        return None
    top, bottom = min(t for t, _ in spans), max(b for _, b in spans)
    # loops overlapping the chosen one (a continue's jump, a nested loop) widen it
    changed = True
    while changed:
        changed = False
        for t, b in last.items():
            if t <= bottom and b >= top and (t < top or b > bottom):
                top, bottom = min(top, t), max(bottom, b)
                changed = True
    index = {ins.offset: i for i, ins in enumerate(instructions)}
    head = top
    i = index[top]
    if instructions[i].opname == "FOR_ITER":
        if i == 0 or instructions[i - 1].opname != "GET_ITER":
            raise Unsupported("a for loop without GET_ITER before it")
        head = instructions[i - 1].offset
    depths = stack_depths(code)
    exits = {}
    for ins in instructions[index[head]:index[bottom] + 1]:
        if ins.opcode in _JUMPS and ins.argval > bottom:
            exits[ins.argval] = None
    b = instructions[index[bottom]]
    if b.opname.startswith("POP_JUMP"):
        exits[instructions[index[bottom] + 1].offset] = None
    # what the loop function runs before an exit (handlers included): the locals it
    # may store
    handlers = parse_exception_table(code.co_exceptiontable)
    stored, deleted, seen, todo = set(), set(), set(exits), [head]
    while todo:
        off = todo.pop()
        if off in seen:
            continue
        seen.add(off)
        i = index[off]
        ins = instructions[i]
        if ins.opname == "DELETE_FAST":
            deleted.add(ins.argval)
        if ins.opname == "STORE_FAST":
            stored.add(ins.argval)
        if ins.opcode in _JUMPS:
            todo.append(ins.argval)
        if ins.opcode not in _NO_FALLTHROUGH and i + 1 < len(instructions):
            todo.append(instructions[i + 1].offset)
        for s, e, t, _, _ in handlers:
            if s <= off // 2 < e:
                todo.append(2 * t)
    return head, tuple(sorted((t, depths[t]) for t in exits if t in depths)), \
        frozenset(stored), frozenset(deleted)


def stack_depths(code):
    """{offset: stack depth} of the instructions reachable in `code` (the depths the
    compiler gave them: each instruction has one)."""
    instructions = list(dis.get_instructions(code))
    index = {ins.offset: i for i, ins in enumerate(instructions)}
    handlers = parse_exception_table(code.co_exceptiontable)
    depths = {0: 0}
    todo = [0]
    while todo:
        i = todo.pop()
        ins = instructions[i]
        depth = depths[ins.offset]

        def reach(offset, d):
            if offset not in depths:
                depths[offset] = d
                todo.append(index[offset])
        unit = ins.offset // 2
        for s, e, target, hdepth, lasti in handlers:
            if s <= unit < e:
                reach(2 * target, hdepth + lasti + 1)
        if ins.opcode in _JUMPS:
            reach(ins.argval, depth + dis.stack_effect(ins.opcode, ins.arg, jump=True))
        if ins.opcode not in _NO_FALLTHROUGH and i + 1 < len(instructions):
            reach(instructions[i + 1].offset,
                  depth + dis.stack_effect(ins.opcode, ins.arg, jump=False))
    return depths


def live_locals(code, offset):
    """Local names that may be read at or after `offset` before being stored (each
    path from it; a handler counts from every instruction it covers, before that
    instruction's store); all of them if the code can introspect."""
    if _INTROSPECTION & set(code.co_names):
        return set(code.co_varnames)
    return _liveness(code)[offset] & set(code.co_varnames)


_live_cache = weakref.WeakKeyDictionary()


def _liveness(code):
    """{offset: names live before the instruction}, by backward fixpoint."""
    hit = _live_cache.get(code)
    if hit is not None:
        return hit
    instructions = list(dis.get_instructions(code))
    index = {ins.offset: i for i, ins in enumerate(instructions)}
    handlers = parse_exception_table(code.co_exceptiontable)
    succs, caught = [], []
    for i, ins in enumerate(instructions):
        nxt = []
        if ins.opcode in _JUMPS:
            nxt.append(index[ins.argval])
        if ins.opcode not in _NO_FALLTHROUGH and i + 1 < len(instructions):
            nxt.append(i + 1)
        succs.append(nxt)
        unit = ins.offset // 2
        caught.append([index[2 * t] for s, e, t, _, _ in handlers if s <= unit < e])
    live = [frozenset()] * len(instructions)
    changed = True
    while changed:
        changed = False
        for i in range(len(instructions) - 1, -1, -1):
            ins = instructions[i]
            after = set()
            for j in succs[i]:
                after |= live[j]
            if ins.opname == "STORE_FAST":
                after.discard(ins.argval)
            if ins.opname in _READS:
                after.add(ins.argval)
            for j in caught[i]:
                after |= live[j]
            if after != live[i]:
                live[i] = frozenset(after)
                changed = True
    out = {ins.offset: live[i] for i, ins in enumerate(instructions)}
    _live_cache[code] = out
    return out


def check_resumable(code):
    """Raises Unsupported for code whose frames resume functions cannot continue."""
    if code.co_flags & _GENERATORS:
        raise Unsupported("graph break in a generator")


def resume_code(code, offset, stack_nulls, delete, handler=False, loop=None, grad=False,
                free_params=False):
    """The resume function's code for `code` at `offset`.

    stack_nulls: for each stack slot at the offset, bottom first, True where it holds
    NULL (pushed again by the prologue) and False where it holds a value (a parameter).
    delete: names of locals the prologue deletes (unbound in the frame, or dead).
    handler: it continues at an exception handler (the frame hook skips it).
    loop: the exits ((offset, stack depth), ...) of the loop starting at `offset`: the
    code (a loop function, which the frame hook skips) runs the loop in CPython, and
    each exit becomes a call of the resume function there, whose result it returns.
    grad: it takes the grad mode to run in as a parameter (after the stack values) and
    its prologue sets it, keeping the caller's in a local: the caller enters it with
    its own mode, so the graph starts in the mode of the frame that broke (AOT traces
    autograd by the mode a graph starts in) and changes it inside, as that frame did.
    free_params: the code's free variables are parameters holding the cells too (after
    its own cells), not a closure: for a function the frame inlined (a break inside
    it), whose cells may be new at each call (a closure the frame made)."""
    key = (offset, tuple(stack_nulls), tuple(sorted(delete)), handler, loop, grad,
           free_params)
    per_code = _resume_cache.setdefault(code, {})
    hit = per_code.get(key)
    if hit is not None:
        return hit
    check_resumable(code)
    nlocals = len(code.co_varnames)
    nvalues = sum(1 for n in stack_nulls if not n)
    stack_names = tuple(f"___stack{nlocals + j}" for j in range(nvalues))
    # cell variables are parameters holding the cells themselves (the frame's MAKE_CELL
    # instructions are jumped over): those of arguments in their slots, the others
    # after the stack values, so every cell and free variable moves by nvalues
    g = int(bool(grad))
    cells = own_cells(code)
    frees = code.co_freevars if free_params else ()
    varnames = code.co_varnames + stack_names + ("___grad",) * g + cells + frees + \
        ("___entry_grad",) * g
    nparams = len(varnames) - g
    body = _shift_free_opargs(code.co_code, nlocals, len(cells), nvalues + g,
                              0 if free_params else g)
    consts = list(code.co_consts)
    if grad:
        consts.append(_C._set_grad_enabled)

    def prologue():
        asm = Asm()
        if code.co_freevars and not free_params:
            asm("COPY_FREE_VARS", len(code.co_freevars))
        asm("RESUME", 0)
        if grad:
            asm("PUSH_NULL")
            asm("LOAD_CONST", len(code.co_consts))
            asm("LOAD_FAST", nlocals + nvalues)
            asm("PRECALL", 1)
            asm("CALL", 1)
            asm("STORE_FAST", len(varnames) - 1)
        for name in sorted(delete, key=code.co_varnames.index):
            asm("DELETE_FAST", code.co_varnames.index(name))
        j = 0
        for is_null in stack_nulls:
            if is_null:
                asm("PUSH_NULL")
            else:
                asm("LOAD_FAST", nlocals + j)
                j += 1
        return asm

    # the prologue's size decides the jump's, which may change the size: iterate
    units = len(prologue().assemble()) // 2 + 1
    for _ in range(4):
        asm = prologue()
        target = Label(units + offset // 2)
        asm("JUMP_FORWARD", target)
        head = asm.assemble()
        if len(head) // 2 == units:
            break
        units = len(head) // 2
    else:
        raise Unsupported("resume prologue did not converge")
    handlers = [(s + units, e + units, t + units, d, lasti) for s, e, t, d, lasti in
                parse_exception_table(code.co_exceptiontable)]
    qualname = f"{code.co_qualname}.<resume at {offset}>"
    tail, stacksize = b"", 0
    if loop is not None:
        body, tail, stacksize = _loop_exits(code, body, units, loop, delete, nvalues,
                                            consts, g, free_params)
        qualname = f"{code.co_qualname}.<loop at {offset}>"
    frees_as_cells = dict(co_cellvars=code.co_cellvars + frees, co_freevars=()) \
        if free_params else {}
    new = code.replace(
        **frees_as_cells,
        co_code=head + body + tail, co_consts=tuple(consts),
        co_argcount=nparams, co_posonlyargcount=0, co_kwonlyargcount=0,
        co_nlocals=len(varnames), co_varnames=varnames,
        co_flags=code.co_flags & ~_FLATTEN,
        co_stacksize=max(code.co_stacksize, len(stack_nulls) + 3, stacksize),
        co_linetable=no_location(units) + code.co_linetable +
        no_location(len(tail) // 2),
        co_exceptiontable=encode_exception_table(handlers),
        co_qualname=qualname)
    per_code[key] = new
    _origin[new] = (code, 2 * units)
    return new


def _loop_exits(code, body, units, loop, delete, nvalues, consts, g, free_params=False):
    """A loop function's body with a jump at each exit to a stub after the code that
    calls the resume function there with the live locals (bound before the loop:
    those the prologue does not delete), the stack values and the cells, and returns
    its result (with g, under the mode the loop function was called in, passing the
    mode at the exit). Returns (body, stubs, stack size); consts grows."""
    exits, stored, deleted = loop
    instructions = list(dis.get_instructions(code))
    targets = {ins.argval for ins in instructions if ins.opcode in _JUMPS}
    targets |= {2 * t for _, _, t, _, _ in parse_exception_table(code.co_exceptiontable)}
    starts = [ins.offset for ins in instructions]
    nlocals = len(code.co_varnames)
    cells = own_cells(code) + (code.co_freevars if free_params else ())
    closure = code.co_freevars and not free_params

    def const(obj):
        for i, c in enumerate(consts):
            if c is obj and type(c) is type(obj):
                return i
        consts.append(obj)
        return len(consts) - 1
    none = const(None)
    body = bytearray(body)
    tail = bytearray()
    stacksize = 0
    end_unit = units + len(body) // 2
    for target, depth in exits:
        live = live_locals(code, target)
        unbound = live & set(delete) - set(code.co_cellvars)   # unbound before the loop
        if unbound & stored or live & deleted:
            raise Unsupported("a local read after the loop may be unbound there")
        dead = {n for n in code.co_varnames if n not in code.co_cellvars and
                (n not in live or n in unbound)}
        rcode = resume_code(code, target, [False] * depth, dead, grad=bool(g),
                            free_params=free_params)
        asm = Asm()
        asm("PUSH_NULL")
        if closure:
            base = nlocals + nvalues + 2 * g + len(cells)
            for j in range(len(code.co_freevars)):
                asm("LOAD_CLOSURE", base + j)
            asm("BUILD_TUPLE", len(code.co_freevars))
        asm("LOAD_CONST", const(rcode))
        asm("MAKE_FUNCTION", 8 if closure else 0)
        for i, name in enumerate(code.co_varnames):
            if name in dead:
                asm("LOAD_CONST", none)
            else:
                asm("LOAD_FAST", i)       # (a cell variable's slot: the cell)
        for _ in range(depth):
            asm("COPY", depth + 2 + nlocals)
        if g:
            asm("PUSH_NULL")
            asm("LOAD_CONST", const(_C.is_grad_enabled))
            asm("PRECALL", 0)
            asm("CALL", 0)
        for k in range(len(cells)):
            asm("LOAD_FAST", nlocals + nvalues + g + k)
        if g:
            asm("PUSH_NULL")
            asm("LOAD_CONST", const(_C._set_grad_enabled))
            asm("LOAD_FAST", nlocals + nvalues + g + len(cells))
            asm("PRECALL", 1)
            asm("CALL", 1)
            asm("POP_TOP")
        n = nlocals + depth + g + len(cells)
        asm("PRECALL", n)
        asm("CALL", n)
        for _ in range(depth):
            asm("SWAP", 2)
            asm("POP_TOP")
        asm("RETURN_VALUE")
        stacksize = max(stacksize, depth + 2 + n + 3)
        stub_unit = end_unit + len(tail) // 2
        tail += asm.assemble()
        # the jump at the exit: one unit, or two with EXTENDED_ARG
        delta = stub_unit - (units + target // 2 + 1)
        size = 1 if delta <= 255 else 2
        delta = stub_unit - (units + target // 2 + size)
        if delta > 0xFFFF:
            raise Unsupported("a loop exit too far from the end of the code")
        if any(target < o < target + 2 * size and o in targets for o in starts) or \
                target + 2 * size > len(body):
            raise Unsupported("a loop exit next to another jump target")
        at = target
        if size == 2:
            body[at:at + 2] = bytes((dis.opmap["EXTENDED_ARG"], delta >> 8))
            at += 2
        body[at:at + 2] = bytes((dis.opmap["JUMP_FORWARD"], delta & 0xFF))
    return bytes(body), bytes(tail), stacksize


_origin = weakref.WeakKeyDictionary()     # resume code -> (code it resumes, prologue bytes)


def is_resume_code(code) -> bool:
    return code in _origin


def original(code):
    """(the code a resume code was made from, its prologue's size in bytes), or
    (code, 0): a break in a resume function resumes from the original code, so breaks
    that follow each other (or come round again) share resume functions."""
    return _origin.get(code, (code, 0))


def own_cells(code):
    """The code's cell variables that are not also arguments (or other locals)."""
    return tuple(n for n in code.co_cellvars if n not in code.co_varnames)


def _shift_free_opargs(co_code, nlocals, ncells, shift, more):
    """Moves the cell and free variable opargs (3.11: indices into the locals, cells
    and free variables): the cells after the locals by shift, the free variables after
    them by shift + more."""
    if shift == 0 and more == 0:
        return co_code
    out = bytearray(co_code)
    free = set(dis.hasfree)
    for i in range(0, len(out), 2):
        if out[i] in free and out[i + 1] >= nlocals:
            by = shift + (more if out[i + 1] >= nlocals + ncells else 0)
            if i and out[i - 2] == dis.opmap["EXTENDED_ARG"] or out[i + 1] + by > 255:
                raise Unsupported("graph break in a function with too many variables")
            out[i + 1] += by
    return bytes(out)


# ------------------------------------------------------------------ the entry function

class Continuation:
    """One way out of the stopped instruction: a resume function for `offset`, called
    with the live locals (value indices, None: passed as None and deleted) and the stack
    values below the instruction's inputs (value indices) followed by its `outputs`
    results. A handler continuation (`lasti`: None for a normal one, else the entry's
    flag) is where an exception the instruction raises goes: its outputs are the
    instruction's offset (when lasti) and the exception."""

    def __init__(self, code, offset, local_values, lower, outputs, lasti=None,
                 cells=()):
        self.code = code
        self.offset = offset
        self.local_values = local_values     # per co_varnames: value index or None
        self.lower = lower                   # [value index | None (NULL)], bottom first
        self.outputs = outputs
        self.lasti = lasti
        self.cells = cells                   # per own_cells(): value index of the cell
        self.loop = None                     # a loop's exits: resume with a loop function


class Level:
    """One frame of a graph break's chain, outermost first: the frame the hook
    converts, then each frame the CALL of the one before it inlines (a function, a
    method, a module's forward), the last stopped before the instruction that breaks.
    continuations: the last frame's (one, or two for a conditional jump); the others'
    one, at the instruction after their CALL, whose output is the callee's return.
    handler: the Continuation an exception raised at the frame's instruction (for
    the others: by the frames inside) goes to, or None. offset: the instruction's.
    entry_mode: the grad mode the frame was entered with, where its mode at the
    instruction differs (its resume function takes the mode as a parameter and is
    called in this one). globals_: an inlined frame's function's globals.

    An inlined frame's resume functions take its free variables' cells as parameters
    (resume_code's free_params; its continuations' cells: its own cells, then those),
    as do those of a frame running such a resume function."""

    def __init__(self, code, continuations, handler=None, offset=None, entry_mode=None,
                 globals_=None):
        self.code = code
        self.continuations = continuations
        self.handler = handler
        self.offset = offset
        self.entry_mode = entry_mode
        self.globals = globals_


def frees_are_params(code, inlined):
    """Whether the resume functions of a frame running `code` take its free variables'
    cells as parameters (Level): an inlined frame's, or a resume function's that
    does."""
    base, _ = original(code)
    return bool(base.co_freevars) and (inlined or not code.co_freevars)


def entry_function(code, func, prefix, nvalues, inputs, instruction, kw_names, levels,
                   line):
    """The function a frame with a break runs instead of its code (see module doc).

    inputs: the stopped instruction's operands, [value index | None (NULL)], bottom
    first; instruction: (opname, arg) for CALL, CALL_FUNCTION_EX and the simple
    instructions of symbolic.SIMPLE_BREAK_OPS (attribute and item access, operators),
    a conditional jump (the last level's continuations[0] falls through, [1] is the
    jump's), or ("LOOP", None) (a loop function runs the last frame's loop).

    levels (Level, outermost first): with one, the frame breaks at its own
    instruction. With more (a break inside inlined calls), the instruction is the
    last frame's, and the call nests as the frames did: the last frame's resume
    function gets the instruction's result, and each resume function's return value
    goes to the resume function of the frame before, the outermost's returned:

        return resume_0(<frame 0's live values>, resume_1(..., resume_k(..., INSTR)))

    An exception the instruction raises goes to the handler of the innermost frame
    around it whose instruction is inside a try or with block (one raised by a
    resume function, to the frames before it): a handler resume function (skipped by
    the hook) continues that frame in CPython, its return value going on outwards."""
    nslots = code.co_argcount + code.co_kwonlyargcount + \
        bool(code.co_flags & inspect.CO_VARARGS) + \
        bool(code.co_flags & inspect.CO_VARKEYWORDS)
    params = code.co_varnames[:nslots]
    temps = tuple(f"___value{j}" for j in range(nvalues))
    handled = any(lv.handler is not None for lv in levels)
    varnames = params + temps + (("___exception",) if handled else ())
    consts = [None, prefix, 0, 1]
    names = list(code.co_names)

    def const(obj):
        for i, c in enumerate(consts):
            if c is obj and type(c) is type(obj):
                return i
        consts.append(obj)
        return len(consts) - 1

    freevars = ()
    for depth, lv in enumerate(levels):
        base, shift = original(lv.code)
        nbase = len(base.co_varnames)       # a resume code's extra locals come last
        everyone = lv.continuations + ([lv.handler] if lv.handler is not None else [])
        lv.resumes = []
        for c in everyone:
            if any(v is not None for v in c.local_values[nbase:]):
                raise Unsupported("a value of the resume prologue is live after it")
            c.local_values = c.local_values[:nbase]
            delete = {n for n, v in zip(base.co_varnames, c.local_values) if v is None}
            nulls = [v is None for v in c.lower] + [False] * c.outputs
            rcode = resume_code(base, c.offset - shift, nulls, delete,
                                handler=c.lasti is not None, loop=c.loop,
                                grad=lv.entry_mode is not None and c.lasti is None,
                                free_params=frees_are_params(lv.code, depth > 0))
            if c.loop is not None:
                _skip_code(rcode)         # the loop runs in CPython
            lv.resumes.append(rcode)
        if lv.handler is not None:
            # the handler and what follows it run in CPython: an exception is rare,
            # and the exception object would be guarded by identity
            _skip_code(lv.resumes[-1])
            # the offset RERAISE restores, in units: the instruction's, in the
            # handler's code
            lv.lasti_value = (lv.offset - shift + _origin[lv.resumes[-1]][1]) // 2
        lv.funcs = None
        if depth == 0:
            if any(r.co_freevars for r in lv.resumes):
                freevars = code.co_freevars
            else:
                lv.funcs = [types.FunctionType(r, func.__globals__, r.co_name)
                            for r in lv.resumes]
        else:
            lv.funcs = [types.FunctionType(r, lv.globals, r.co_name) for r in lv.resumes]
    if instruction[0] in ("LOAD_ATTR", "STORE_ATTR"):
        # (the name is the last frame's: the entry function's co_names has it too)
        name = levels[-1].code.co_names[instruction[1]]
        if name not in names:
            names.append(name)
        instruction = (instruction[0], names.index(name))

    asm = Asm()
    regions = []          # (Label, level): instructions from it on are that level's

    def region(level):
        label = Label()
        asm.mark(label)
        regions.append((label, level))

    if freevars:
        asm("COPY_FREE_VARS", len(freevars))
    asm("RESUME", 0)
    region(-1)
    asm("PUSH_NULL")
    asm("LOAD_CONST", 1)
    for i in range(nslots):
        asm("LOAD_FAST", i)
    asm("PRECALL", nslots)
    asm("CALL", nslots)
    eager = Label()
    asm("COPY", 1)              # the flag is item 0, the eager result item 1
    asm("LOAD_CONST", 2)
    asm("BINARY_SUBSCR")
    asm("POP_JUMP_FORWARD_IF_FALSE", eager)
    asm("UNPACK_SEQUENCE", nvalues + 1)
    asm("POP_TOP")
    for j in range(nvalues):
        asm("STORE_FAST", nslots + j)

    def push(v):
        if v is None:
            asm("PUSH_NULL")
        else:
            asm("LOAD_FAST", nslots + v)

    def push_resume(depth, k):
        lv = levels[depth]
        asm("PUSH_NULL")
        if lv.funcs is not None:
            asm("LOAD_CONST", const(lv.funcs[k]))
        else:
            for i in range(len(freevars)):
                asm("LOAD_CLOSURE", len(varnames) + i)
            asm("BUILD_TUPLE", len(freevars))
            asm("LOAD_CONST", const(lv.resumes[k]))
            asm("MAKE_FUNCTION", 8)

    def open_(depth, c, k):
        """Pushes the resume function of continuation c (k: its index) and its
        arguments before its outputs; returns their count."""
        push_resume(depth, k)
        for v in c.local_values:
            if v is None:
                asm("LOAD_CONST", 0)
            else:
                push(v)
        for v in c.lower:
            if v is not None:
                push(v)
        return len(c.local_values) + sum(1 for v in c.lower if v is not None)

    def close(depth, c, n):
        """The rest of continuation c's call, its outputs on the stack."""
        entry_mode = levels[depth].entry_mode
        n += c.outputs
        if entry_mode is not None:        # the mode to run in, then the frame's own
            asm("PUSH_NULL")
            asm("LOAD_CONST", const(_C.is_grad_enabled))
            asm("PRECALL", 0)
            asm("CALL", 0)
            n += 1
        for v in c.cells:
            push(v)
        n += len(c.cells)
        if entry_mode is not None:
            asm("PUSH_NULL")
            asm("LOAD_CONST", const(_C._set_grad_enabled))
            asm("LOAD_CONST", const(bool(entry_mode)))
            asm("PRECALL", 1)
            asm("CALL", 1)
            asm("POP_TOP")
        asm("PRECALL", n)
        asm("CALL", n)

    def open_outer(upto):
        counts = []
        for depth in range(upto):
            counts.append(open_(depth, levels[depth].continuations[0], 0))
            region(depth)
        return counts

    def close_outer(counts):
        for depth in range(len(counts) - 1, -1, -1):
            region(depth - 1)         # (the resume function's exceptions: the frame
            close(depth, levels[depth].continuations[0], counts[depth])   # before's)
        asm("RETURN_VALUE")

    last = len(levels) - 1
    inner = levels[last]
    counts = open_outer(last)
    if instruction[0] == "LOOP":
        c = inner.continuations[0]
        close(last, c, open_(last, c, 0))
        close_outer(counts)
    elif not instruction[0].startswith("POP_JUMP"):
        c = inner.continuations[0]
        n = open_(last, c, 0)
        region(last)
        for v in inputs:
            push(v)
        if instruction[0] == "CALL":
            if kw_names:
                asm("KW_NAMES", const(kw_names))
            asm("PRECALL", instruction[1])
            asm("CALL", instruction[1])
        else:        # CALL_FUNCTION_EX, or a simple instruction (names: co_names)
            asm(instruction[0], instruction[1] or 0)
        region(last - 1)
        close(last, c, n)
        close_outer(counts)
    else:
        jumped = Label()
        (v,) = inputs
        region(last)
        push(v)
        asm(instruction[0].replace("BACKWARD", "FORWARD"), jumped)
        region(last - 1)
        for k, c in enumerate(inner.continuations):
            if k:
                asm.mark(jumped)
                region(last - 1)
            close(last, c, open_(last, c, k))
            close_outer(counts)
    stubs = {}
    for depth, lv in enumerate(levels):
        if lv.handler is None:
            continue
        # an exception reached the frame's handler: the stack is cut to nothing and
        # the exception pushed; the handler's resume function gets the stack the
        # frame's handler expects (the values below its depth, the offset, the
        # exception), its result going on outwards
        h = lv.handler
        stubs[depth] = Label()
        asm.mark(stubs[depth])
        region(-1)
        asm("STORE_FAST", len(varnames) - 1)
        counts = open_outer(depth)
        n = open_(depth, h, len(lv.resumes) - 1)
        if h.lasti:
            asm("LOAD_CONST", const(lv.lasti_value))
            n += 1
        asm("LOAD_FAST", len(varnames) - 1)
        n += 1
        for v in h.cells:
            push(v)
        n += len(h.cells)
        region(depth - 1)
        asm("PRECALL", n)
        asm("CALL", n)
        close_outer(counts)
    asm.mark(eager)
    region(-1)
    asm("LOAD_CONST", 3)
    asm("BINARY_SUBSCR")
    asm("RETURN_VALUE")
    co_code = asm.assemble()
    units = len(co_code) // 2
    table = []
    for i, (label, level) in enumerate(regions):
        end = regions[i + 1][0].unit if i + 1 < len(regions) else units
        while level >= 0 and levels[level].handler is None:
            level -= 1
        if level < 0 or end <= label.unit:
            continue
        target = stubs[level].unit
        if table and table[-1][1] == label.unit and table[-1][2] == target:
            table[-1] = (table[-1][0], end, target, 0, False)
        else:
            table.append((label.unit, end, target, 0, False))
    stacksize = nslots + 2 * nvalues + len(inputs) + 12 + sum(
        len(lv.code.co_varnames) + len(lv.code.co_cellvars) + 12 +
        max(len(c.lower) for c in lv.continuations) for lv in levels)
    new = code.replace(
        co_code=co_code, co_consts=tuple(consts), co_names=tuple(names),
        co_argcount=nslots, co_posonlyargcount=0, co_kwonlyargcount=0,
        co_nlocals=len(varnames), co_varnames=varnames, co_cellvars=(),
        co_freevars=freevars,
        co_flags=(code.co_flags & ~_FLATTEN) | (0 if freevars else inspect.CO_NOFREE),
        co_stacksize=stacksize,
        co_linetable=one_line(units, line - code.co_firstlineno),
        co_exceptiontable=encode_exception_table(table),
        co_qualname=f"{code.co_qualname}.<graph break at line {line}>")
    closure = func.__closure__ if freevars else None
    return types.FunctionType(new, func.__globals__, code.co_name, None, closure)
