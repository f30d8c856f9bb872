"""Compiled graphs, cached on disk: a new process that compiles a graph an earlier one
compiled skips AOT autograd and lowering (as TorchInductor's FX graph cache does).

The LLVM backend's result for a captured graph is fixed by the graph, its inputs'
metadata and the compiler itself, so those make the key:

- the captured graph as canonical text: each node's kind, name, target (an op by its
  qualified name, a function of the `operator` module, a method by its name) and
  arguments (constants by their exact repr). A graph holding anything else
  (attributes, modules, other callables, constants of other types) is not cached;
- per input: a tensor's type, sizes, strides, storage offset, dtype and requires_grad
  (an input with a history is not cached); a number's exact value (other inputs: not
  cached);
- the state compiling reads: grad mode, the default dtype, config.partitioner;
- the graph's name, this file's FORMAT, kernel_cache.context() (LLVM, the target CPU
  and features, the built extension's hash) and a hash of the package's Python files
  (their paths, sizes and modification times).

An entry (in `config.cache_dir`/graphs/, when `config.graph_cache` and the kernel
cache are on) holds what the runtime objects are made from, as JSON decoded into
plain values only (no pickle: nothing in it is executed or imported): the joint
graph's facts AOTFunction takes, and
per compiled graph its plan and its kernels' specs, whose machine code comes from the
kernel cache (kernel_cache.py: in memory, on disk, else compiled). The files follow the
kernel cache's rules: written to a temporary name then renamed, read only from a folder
of this user that nobody else can write, ignored and rebuilt when their header, length,
checksum or content is not sound (a spec whose kernel key differs from the stored one
included).

Only graphs compiled whole are stored: one whose LLVM compilation fell back to eager
ops, or that returns views of inputs it writes into, is compiled every time (writes
into inputs are stored: BatchNorm's running statistics). A
call whose outputs get only some gradients needs backward variants (aot/variants.py),
made from the joint trace: on a graph from the cache that trace is taken again, the
first time such a call comes, over fakes shaped like the inputs.

A process never reads an entry it wrote itself: its own graphs are compiled again
(their kernels come from memory), so backend.recent describes them. Graphs from the
cache are not added to backend.recent (ember.demo and ember.verify, which describe the
graphs they compile, turn the graph cache off).

`stats` counts hits, misses, stored, rejected and uncacheable graphs.
"""
from __future__ import annotations

import collections
import hashlib
import json
import operator
import os

from .. import _C
from .. import fx
from ..capture import logs
from ..capture.config import config
from ..ops import meta as M
from . import jit, kernel_cache
from .jit import JitModule
from .loop_ir import KernelSpec
from .lowering import ExternCall, _Slot
from .plan import (BufferSpec, ExternStep, InputSpec, KernelStep, MatmulStep, Ref,
                   StepKind, View)

FORMAT = b"EMBERFX1"
SUFFIX = ".json"

stats = collections.Counter()
_written = set()            # keys this process stored (never read back here)
_source_hash = None
_ops = None
_DEFAULT_OPTIONS = jit.options


class Uncacheable(Exception):
    """The graph, an input or a plan holds something the cache cannot write down."""


# ---------------------------------------------------------------- plain values

def _plain(x):
    """x as JSON-ready data that says its type: nodes, tuples, lists, dicts, slices,
    sizes, dtypes and extern slots are tagged; anything else raises Uncacheable."""
    if x is None or isinstance(x, (bool, int, float, str)):
        if type(x) not in (type(None), bool, int, float, str):
            raise Uncacheable(f"a constant of type {type(x).__name__}")
        return x
    t = type(x)
    if t is tuple:
        return {"t": [_plain(v) for v in x]}
    if t is list:
        return {"l": [_plain(v) for v in x]}
    if t is _C.Size:
        return {"size": [_plain(v) for v in x]}
    if t is dict:
        if not all(type(k) is str for k in x):
            raise Uncacheable("a dict with keys that are not strings")
        return {"d": [[k, _plain(v)] for k, v in x.items()]}
    if t is slice:
        return {"s": [_plain(x.start), _plain(x.stop), _plain(x.step)]}
    if t is _C.dtype:
        return {"dtype": x._name}
    if t is fx.Node:
        return {"n": x.name}
    if t is _Slot:
        return {"slot": x.i}
    raise Uncacheable(f"a constant of type {t.__name__}")


def _value(x):
    """The value _plain(value) wrote down (no nodes)."""
    if not isinstance(x, dict):
        if isinstance(x, list):
            raise ValueError("an untagged list")
        return x
    (tag, v), = x.items()
    if tag == "t":
        return tuple(_value(a) for a in v)
    if tag == "l":
        return [_value(a) for a in v]
    if tag == "size":
        return _C.Size(tuple(_value(a) for a in v))
    if tag == "d":
        return {str(k): _value(a) for k, a in v}
    if tag == "s":
        return slice(*(_value(a) for a in v))
    if tag == "dtype":
        return M.DTYPES[v]
    if tag == "slot":
        return _Slot(int(v))
    raise ValueError(f"unknown tag {tag!r}")


def _tuples(x):
    """Lists back into tuples, all the way down (kernel specs are tuples only)."""
    if isinstance(x, list):
        return tuple(_tuples(v) for v in x)
    return x


def _op(name):
    global _ops
    if _ops is None:
        from ..ops import registry
        _ops = {e.qualified_name: e.c_op for e in registry.ENTRIES}
    return _ops[name]


def _target(t):
    if isinstance(t, _C.Op):
        return "op:" + t.entry.qualified_name
    name = getattr(t, "__name__", None)
    if name is not None and getattr(operator, name, None) is t:
        return "operator:" + name
    raise Uncacheable(f"a call of {t!r}")


# ---------------------------------------------------------------- the key

def _package_hash():
    """A hash of the package's Python files (the compiler's passes are among them)."""
    global _source_hash
    if _source_hash is None:
        _source_hash = tree_hash(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    return _source_hash


def tree_hash(root):
    """A hash of the paths and contents of the .py files below root: the same for two
    copies of one tree (a fresh clone has new modification times) and different when any
    file's content changes (even keeping its size and modification time)."""
    h = hashlib.blake2b(digest_size=20)
    for d, dirs, files in os.walk(root):
        dirs.sort()
        for f in sorted(files):
            if f.endswith(".py"):
                p = os.path.join(d, f)
                with open(p, "rb") as fh:
                    data = fh.read()
                h.update(f"{os.path.relpath(p, root)}\0{len(data)}\0".encode())
                h.update(data)
    return h.hexdigest()


def _graph_text(gm):
    rows = []
    for n in gm.graph.nodes:
        if n.op == "placeholder":
            rows.append(["p", n.name])
        elif n.op == "call_function":
            rows.append(["f", n.name, _target(n.target), _plain(tuple(n.args)),
                         _plain(dict(n.kwargs))])
        elif n.op == "call_method" and type(n.target) is str:
            rows.append(["m", n.name, n.target, _plain(tuple(n.args)),
                         _plain(dict(n.kwargs))])
        elif n.op == "output":
            rows.append(["o", _plain(n.args[0])])
        else:
            raise Uncacheable(f"a {n.op} node")
    return rows


def _input(x):
    if isinstance(x, _C.Tensor):
        if x.requires_grad and x.grad_fn is not None:
            raise Uncacheable("an input with a history")
        return ["T", type(x).__name__, list(x.shape), list(x.stride()), x.storage_offset(),
                x.dtype._name, bool(x.requires_grad)]
    if x is None or type(x) in (bool, int, float):
        return ["V", x]
    raise Uncacheable(f"an input of type {type(x).__name__}")


def enabled():
    return bool(config.graph_cache and config.kernel_cache and config.cache_dir) and \
        jit.options is _DEFAULT_OPTIONS and not logs.enabled("output_code")


def key(gm, example_inputs, name):
    """The hex digest naming gm compiled for example_inputs, or None when it is not to
    be cached."""
    if not enabled():
        return None
    context = kernel_cache.context()
    if context is None:
        return None
    try:
        text = json.dumps([FORMAT.decode(), name, _graph_text(gm),
                           [_input(x) for x in example_inputs],
                           bool(_C.is_grad_enabled()), _C.get_default_dtype()._name,
                           config.partitioner], separators=(",", ":"))
    except Uncacheable as e:
        stats["uncacheable"] += 1
        logs.log("recompiles", f"graph cache: {name} is not cached ({e})")
        return None
    h = hashlib.blake2b(context, digest_size=20)
    h.update(_package_hash().encode())
    h.update(text.encode())
    return h.hexdigest()


def folder():
    return kernel_cache.folder("graphs", enabled=enabled())


# ---------------------------------------------------------------- writing an entry

def _ref(r):
    return [r.kind, r.index]


def _view(v):
    return None if v is None else [_ref(v.ref), list(v.sizes), list(v.strides), v.offset]


def _step(s):
    if isinstance(s, KernelStep):
        return ["kernel", s.kernel, [_ref(r) for r in s.refs], s.outer, bool(s.parallel),
                s.chunk]
    if isinstance(s, MatmulStep):
        return ["matmul", _view(s.a), _view(s.b), s.out, [_step(e) for e in s.epilogues]]
    if isinstance(s, ExternStep):
        fn = s.fn
        if type(fn) is not ExternCall or not isinstance(fn.op, _C.Op):
            raise Uncacheable(f"extern step {s.name}")
        return ["extern", fn.op.entry.qualified_name, _plain(fn.args), _plain(fn.kwargs),
                bool(fn.multi), [_view(v) for v in s.views], list(s.slots), s.name]
    raise Uncacheable(f"a step {s!r}")


def _graph(compiled):
    lowered = compiled.lowered
    inputs, buffers, steps, outputs = lowered.plan()
    specs = [k.spec() for k in lowered.kernels]
    module = compiled.module
    return {"name": compiled.name,
            "specs": specs,
            "keys": [kernel_cache.key(s, o) for s, o in zip(module.specs, module.options)]
            if module is not None else [],
            "inputs": [[list(i.sizes), list(i.strides)] for i in inputs],
            "buffers": [[b.dtype._name, list(b.sizes), bool(b.extern)] for b in buffers],
            "steps": [_step(s) for s in steps],
            "outputs": [_view(o) for o in outputs]}


def store(k, record, compiled):
    """Writes the entry for key k: record is what aot_compile(record=) filled in,
    compiled the CompiledLLVMGraph (or None: fell back) per compiler call it made."""
    if k in _written:
        return False
    joint = record.get("joint")
    if joint is None or joint.output_aliases or \
            any(c is None for c in compiled):
        stats["uncacheable"] += 1
        return False
    training = joint.num_tangents > 0
    if len(compiled) != (2 if training else 1):
        stats["uncacheable"] += 1
        return False
    try:
        entry = {"training": training,
                 "without_grad": bool(record.get("without_grad", False)),
                 "num_forward_outputs": joint.num_forward_outputs,
                 "num_tangents": joint.num_tangents,
                 "differentiable_outputs": list(joint.differentiable_outputs),
                 "primals_requiring_grad": list(joint.primals_requiring_grad),
                 "tangent_meta": [[list(joint.forward_output_meta[i][0]),
                                   joint.forward_output_meta[i][1]._name]
                                  for i in joint.differentiable_outputs],
                 "num_saved": record.get("num_saved", 0),
                 "mutations": [[int(a) for a in m.spec()] for m in joint.mutations],
                 "graphs": [_graph(c) for c in compiled]}
        data = json.dumps(entry, separators=(",", ":")).encode()
    except Uncacheable as e:
        stats["uncacheable"] += 1
        logs.log("recompiles", f"graph cache: not stored ({e})")
        return False
    path = folder()
    if path is None:
        return False
    _written.add(k)
    kernel_cache.write(path, k, data, SUFFIX, FORMAT, stats)
    return True


# ---------------------------------------------------------------- reading one back

def _dims(v):
    return tuple(int(a) for a in v)


def _ref_of(v):
    kind, i = v
    if kind not in ("in", "buf"):
        raise ValueError(f"a ref of kind {kind!r}")
    return Ref(kind, int(i))


def _view_of(v):
    if v is None:
        return None
    ref, sizes, strides, offset = v
    return View(_ref_of(ref), _dims(sizes), _dims(strides), int(offset))


def _step_of(v):
    kind = v[0]
    if kind == "kernel":
        _, k, refs, outer, parallel, chunk = v
        return KernelStep(StepKind.KERNEL, int(k), tuple(_ref_of(r) for r in refs),
                          int(outer), bool(parallel), None, int(chunk))
    if kind == "matmul":
        _, a, b, out, epilogues = v
        epilogues = tuple(_step_of(e) for e in epilogues)
        if any(not isinstance(e, KernelStep) for e in epilogues):
            raise ValueError("an epilogue that is not a kernel step")
        return MatmulStep(StepKind.MATMUL, _view_of(a), _view_of(b), int(out), epilogues)
    if kind == "extern":
        _, op, args, kwargs, multi, views, slots, name = v
        fn = ExternCall(_op(op), _value(args), _value(kwargs), bool(multi))
        return ExternStep(StepKind.EXTERN, fn, tuple(_view_of(x) for x in views),
                          tuple(int(j) for j in slots), str(name))
    raise ValueError(f"a step of kind {kind!r}")


def _compiled_graph(g, tune=False):
    """(the runtime graph, its JitModule) from an entry's graph record; tune: install
    max-autotune's tuner (autotune.py) on it."""
    specs = g["specs"]
    keys = tuple(str(k) for k in g["keys"])
    if len(keys) != len(specs):
        raise ValueError("a kernel without its key")
    plan = (tuple(InputSpec(_dims(s), _dims(t)) for s, t in g["inputs"]),
            tuple(BufferSpec(M.DTYPES[d], _dims(s), bool(e)) for d, s, e in g["buffers"]),
            tuple(_step_of(s) for s in g["steps"]),
            tuple(_view_of(o) for o in g["outputs"]))
    module = JitModule(specs, str(g["name"]), keys=keys, spec_of=_spec) if specs else None
    addresses = module.addresses if module is not None else ()
    run = _C.CompiledGraph(module, addresses, plan)
    if tune:
        from . import autotune
        autotune.install(run, module, plan, str(g["name"]))
    return run, module


def _spec(s, key):
    """The KernelSpec of a spec as the entry holds it (lists for tuples), for a kernel
    to compile: it must be the one the stored key names."""
    spec = KernelSpec(*_tuples(s))
    if kernel_cache.key(spec, jit.options(spec)) != key:
        raise ValueError("graph cache: a kernel spec that is not the one stored")
    return spec


def _read(k):
    if k in _written:
        return None
    path = folder()
    if path is None:
        return None
    data = kernel_cache.read(path, k, SUFFIX, FORMAT, stats)
    if data is None:
        return None
    try:
        return json.loads(data)
    except ValueError:
        stats["rejected"] += 1
        return None


def load(k, gm, example_inputs, name, bw_compiler, tune=False):
    """The compiled function for key k from the disk cache, or None (no sound entry);
    tune: its graphs tune their schedules on their first calls (max-autotune)."""
    entry = _read(k)
    if entry is None:
        stats["misses"] += 1
        return None
    try:
        fn = _build(entry, gm, example_inputs, name, bw_compiler, tune)
    except Exception as e:    # noqa: BLE001 - any entry that does not rebuild: compile
        stats["rejected"] += 1
        logs.log("recompiles", f"graph cache: entry {k} rejected ({type(e).__name__}: {e})")
        return None
    stats["hits"] += 1
    return fn


def _build(entry, gm, example_inputs, name, bw_compiler, tune=False):
    graphs = entry["graphs"]
    training = entry["training"] is True
    if len(graphs) != (2 if training else 1):
        raise ValueError("an entry with the wrong number of graphs")
    mutations = tuple((int(i), int(w), bool(d)) for i, w, d in entry["mutations"])
    fw, _ = _compiled_graph(graphs[0], tune)
    if not training and not mutations:
        if entry["without_grad"]:
            from ..aot import _without_grad
            return _without_grad(fw)
        return fw
    bw = _compiled_graph(graphs[1], tune)[0] if training else None
    nout = int(entry["num_forward_outputs"])
    tangent_meta = tuple((_dims(s), M.DTYPES[d]) for s, d in entry["tangent_meta"])
    variants = None
    if training and int(entry["num_tangents"]) > 1:
        variants = _LazyVariants(gm, example_inputs, bw_compiler, name,
                                 int(entry["num_saved"]))
    fallback = None
    if mutations:
        from ..aot import _aliased_inputs_fallback
        fallback = _aliased_inputs_fallback(gm, name)
    return _C.AOTFunction(fw, bw, nout, _dims(entry["differentiable_outputs"]),
                          _dims(entry["primals_requiring_grad"]), tangent_meta,
                          "CompiledFunctionBackward", variants, mutations=mutations,
                          aliases=(), fallback=fallback, forward_grad=False)


class _LazyVariants:
    """BackwardVariants for a compiled function from the cache: the joint trace is
    taken again on first use, over fakes shaped like the inputs."""

    def __init__(self, gm, example_inputs, compiler, name, num_saved):
        self.gm = gm
        self.fakes = [_fake(x) for x in example_inputs]
        self.compiler = compiler
        self.name = name
        self.num_saved = num_saved
        self.variants = None

    def __call__(self, present):
        if self.variants is None:
            from ..aot import backward_variants
            variants, n = backward_variants(self.gm, self.fakes, self.compiler, self.name)
            if n != self.num_saved:
                raise RuntimeError(f"graph cache: {self.name}'s forward saves {self.num_saved} "
                                   f"values but its joint trace now saves {n}")
            self.variants = variants
            self.gm = self.fakes = None
        return self.variants(present)


def _fake(x):
    if not isinstance(x, _C.Tensor):
        return x
    fake = _C._meta_tensor(tuple(x.shape), x.dtype, x.stride())
    if x.requires_grad:
        fake.requires_grad_(True)
    return fake
