"""[dynamic] AOT autograd on symbolic graphs (ember/aot/, fx/sym_meta.py): a graph
captured with size inputs is traced once into one joint graph over SymFakes, so
aot_eager compiles ONE forward and ONE backward serving every size its guards admit
(no per-size specialization: counters["stats"]["size_specializations"] stays 0).

Every case runs the compiled function and eager side by side at sizes 2..64, 127 and
1000, forward and backward (a random gradient of the output's shape), and compares the
outputs and every input's gradient."""
import pytest

import ember
import ember.nn as nn
import ember.nn.functional as F
from ember import _C
from ember.capture import counters

SIZES = list(range(2, 65)) + [127, 1000]


@pytest.fixture(autouse=True)
def fresh():
    ember.compiler.reset()
    yield
    ember.compiler.reset()


def _close(a, b, what):
    """Equal within float32 summation order: relative to the largest element (a sum of
    1000 rows differs in its last bits from eager's when added in another order)."""
    assert a.dtype == b.dtype and tuple(a.shape) == tuple(b.shape), what
    scale = 1.0 + float(b.abs().max()) if b.numel() else 1.0
    assert ember.allclose(a, b, rtol=1e-4, atol=1e-5 * scale, equal_nan=True), what


def _graphs(fn):
    return len(fn._ember_compile_context.graphs)


def _reasons(fn):
    return [r for _, r in fn._ember_compile_context.recompile_reasons]


def _run(fn, make, sizes=SIZES):
    """fn compiled with aot_eager and dynamic=True against eager at every size: outputs
    and the gradients of every input that requires grad."""
    cf = ember.compile(fn, backend="aot_eager", dynamic=True)
    for n in sizes:
        ember.manual_seed(n)
        args = make(n)
        outs = []
        for f in (cf, fn):
            leaves = [a.detach().requires_grad_(a.requires_grad)
                      if isinstance(a, _C.Tensor) else a for a in args]
            out = f(*leaves)
            ember.manual_seed(1000 + n)
            g = ember.randn(tuple(out.shape))
            out.backward(g)
            outs.append((out, [x.grad for x in leaves
                               if isinstance(x, _C.Tensor) and x.requires_grad]))
        (y, gs), (y_ref, gs_ref) = outs
        _close(y, y_ref, f"output at size {n}")
        for i, (a, b) in enumerate(zip(gs, gs_ref)):
            _close(a, b, f"gradient {i} at size {n}")
    assert _graphs(cf) == 1, _reasons(cf)
    assert counters["stats"]["size_specializations"] == 0
    assert not counters["aot_dynamic_fallback"], dict(counters["aot_dynamic_fallback"])
    assert not counters["backend_fallback"], dict(counters["backend_fallback"])
    return cf


def _p(*shape):
    return ember.randn(*shape).requires_grad_(True)


FAMILIES = {
    # a [n, 1] input broadcast against [n, 8] and a [8] one: the engine sums gradients
    # back to their shapes (sum_to_size with the symbols)
    "broadcasting": (lambda x, y, b: x * y + b - y.exp(),
                     lambda n: (_p(n, 8), _p(n, 1), _p(8))),
    "outer_broadcast": (lambda a, b: (a + b) * a,
                        lambda n: (_p(n, 1), _p(1, 7))),
    "reductions": (lambda x: x.sum(0) + x.mean(0) * 3 + x.amax(0) - x.var(0) +
                   x.std(0).unsqueeze(0).sum(0),
                   lambda n: (_p(n, 6),)),
    "reduce_symbolic_dim_keep": (lambda x: x.mean(1, keepdim=True) * x + x.logsumexp(0),
                                 lambda n: (_p(5, n),)),
    "views": (lambda x: x.view(x.shape[0], 2, 4).transpose(1, 2).reshape(x.shape[0], 8) *
              2 + x.t().contiguous().t() + x.flatten().view(-1, 8) +
              x.unsqueeze(0).expand(3, x.shape[0], 8).sum(0),
              lambda n: (_p(n, 8),)),
    "slicing": (lambda x: ember.cat([x[1:] * 2, x[:1]], 0) + x[:, None, ::2].sum(1).sum(1,
                                                                                   True),
                lambda n: (_p(n, 6),),
                # (from size 3: at 2, x[1:] has one row, a size that is specialised)
                SIZES[1:]),
    "matmul": (lambda x, w, y: (x @ w) @ (y.t() @ y),
               lambda n: (_p(n, 8), _p(8, 5), _p(n, 5))),
    "bmm": (lambda a, b: a @ b.transpose(-1, -2),
            lambda n: (_p(3, n, 4), _p(3, n, 4))),
    "softmax": (lambda x: x.softmax(-1) + x.log_softmax(0) * 0.5,
                lambda n: (_p(4, n),)),
    "layer_norm": (lambda x, w, b: F.layer_norm(x, (x.shape[-1],), w, b) * x.shape[-1],
                   lambda n: (_p(n, 3, 8), _p(8), _p(8))),
    "embedding": (lambda idx, w: F.embedding(idx, w) * 2,
                  lambda n: (ember.randint(0, 20, (n, 3)), _p(20, 6))),
    "cross_entropy": (lambda logits, t: F.cross_entropy(logits, t) +
                      F.cross_entropy(logits, t, reduction="none").sum() * 0.5,
                      lambda n: (_p(n, 10), ember.randint(0, 10, (n,)))),
    "cat": (lambda x, y: (ember.cat([x, y], 0) * ember.cat([y, x], 0)).sum(0) +
            ember.cat([x, y], 1).sum(0)[:4],
            lambda n: (_p(n, 4), _p(n, 4))),
    # flip's decomposition and cumsum's backward index with arange over a symbolic
    # length (its length in integers: no specialization)
    "scan_flip_prod": (lambda x: x.flip(0).cumsum(0) * x + x.prod(1, keepdim=True) +
                       ember.arange(x.shape[0]).unsqueeze(1) * x,
                       lambda n: (_p(n, 3),)),
    "indexing": (lambda x, idx: x[idx] * 2 + x.index_select(0, idx) +
                 x.gather(1, idx.unsqueeze(1).remainder(4)),
                 lambda n: (_p(n, 4), ember.randint(0, n, (n,)))),
}


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_one_forward_and_backward_serve_every_size(family):
    fn, make, *sizes = FAMILIES[family]
    _run(fn, make, *sizes)


@pytest.mark.parametrize("backend", ["aot_eager", "llvm"])
def test_mlp_training_over_many_batch_sizes_compiles_twice(backend):
    """dynamic=None: a static graph, then one symbolic graph whose forward and backward
    serve every later batch size; gradients equal eager's at every size."""
    ember.manual_seed(0)
    mlp = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 4))
    ref = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 4))
    ref.load_state_dict(mlp.state_dict())
    cm = ember.compile(mlp, backend=backend)
    specialized = None
    for n in SIZES:
        x = ember.randn(n, 16)
        t = ember.randint(0, 4, (n,))
        for m in (cm, ref):
            (m if m is ref else mlp).zero_grad()
            F.cross_entropy(m(x), t).backward()
        for p, q in zip(mlp.parameters(), ref.parameters()):
            _close(p.grad, q.grad, f"gradient at batch {n}")
        if n == 3:
            specialized = counters["stats"]["size_specializations"]
    assert _graphs(cm) == 2
    assert counters["stats"]["calls_captured"] == 2
    assert specialized == 0 and counters["stats"]["size_specializations"] == 0
    assert not counters["aot_dynamic_fallback"] and not counters["dynamic_fallback"]
    # llvm: one plan serving every batch size (compiler/symbolic.py)
    assert not counters["llvm_dynamic_fallback"], dict(counters["llvm_dynamic_fallback"])


@pytest.mark.parametrize("backend", ["aot_eager", "llvm"])
def test_gpt_training_step_with_varying_batch_and_length(backend):
    """The zoo GPT trained under dynamic=True with batch and sequence length changing
    every step: one graph, the loss and every parameter's gradient equal to eager's."""
    from ember.models.gpt import GPT, GPTConfig
    ember.manual_seed(0)
    cfg = GPTConfig(block_size=64, vocab_size=65, n_layer=2, n_head=2, n_embd=32,
                    dropout=0.0)
    m, ref = GPT(cfg), GPT(cfg)
    ref.load_state_dict(m.state_dict())
    cm = ember.compile(m, backend=backend, dynamic=True)
    for b, t in ((2, 5), (3, 7), (4, 16), (2, 33), (5, 9), (3, 64)):
        idx = ember.randint(0, 65, (b, t))
        tgt = ember.randint(0, 65, (b, t))
        m.zero_grad()
        ref.zero_grad()
        loss = cm(idx, tgt)[1]
        loss_ref = ref(idx, tgt)[1]
        loss.backward()
        loss_ref.backward()
        _close(loss, loss_ref, f"loss at {b}x{t}")
        for (name, p), q in zip(m.named_parameters(), ref.parameters()):
            assert ember.allclose(p.grad, q.grad, rtol=1e-3, atol=1e-5), (name, b, t)
    assert _graphs(cm) == 1, _reasons(cm)
    assert counters["stats"]["size_specializations"] == 0
    assert not counters["aot_dynamic_fallback"], dict(counters["aot_dynamic_fallback"])
    assert not counters["llvm_dynamic_fallback"], dict(counters["llvm_dynamic_fallback"])


def _recording_aot(monkeypatch):
    """aot_eager's graphs kept: {"joint", "fw", "bw"} of its last compilation."""
    from ember import aot
    captured = {}
    real = aot.aot_compile

    def fw(g, name):
        captured["fw"] = g
        return aot.eager_compiler(g, name)

    def bw(g, name):
        captured["bw"] = g
        return aot.eager_compiler(g, name)

    def recording(gm, example_inputs, name="graph", **kw):
        record = {}
        fn = real(gm, example_inputs, fw_compiler=fw, bw_compiler=bw, name=name,
                  record=record)
        captured["joint"] = record["joint"]
        return fn
    monkeypatch.setattr(aot, "aot_compile", recording)
    return captured


def test_graphs_print_with_sym_placeholders_and_verify(monkeypatch):
    """The joint, forward and backward graphs take the sizes as Sym placeholders; the
    backward reads the sizes it needs as saved symbols; all pass the graph verifier."""
    from ember import aot
    from ember.fx.graph_module import GraphModule

    captured = _recording_aot(monkeypatch)

    def f(x, w):
        return (x.view(-1, 4) @ w).softmax(-1)

    cf = ember.compile(f, backend="aot_eager", dynamic=True)
    x, w = ember.randn(6, 8, requires_grad=True), ember.randn(4, 3, requires_grad=True)
    cf(x, w).sum().backward()
    joint, fw, bw = captured["joint"].graph, captured["fw"], captured["bw"]
    for g in (joint, fw, bw):
        g.lint()
        GraphModule({}, g)      # generates valid Python
    aot.verify_prims(fw)
    aot.verify_prims(bw)
    for g in (joint, fw):
        assert 's0: "Sym(s0)"' in GraphModule({}, g).code
    bw_code = GraphModule({}, bw).code
    assert 'Sym(s0)' in bw_code, bw_code
    # the backward's view of the gradient uses the symbols, not the captured sizes
    assert "(6, 8)" not in bw_code and "(12, 4)" not in bw_code, bw_code
    assert counters["stats"]["size_specializations"] == 0


def test_a_backward_that_cannot_run_symbolically_falls_back_per_size(monkeypatch):
    """A backward formula calling a composite without a symbolic form (here reshape,
    whose form is taken away; Linear's backward reshapes) makes aot_eager compile that
    graph per size (sym_sizes.specializing), counted, with results equal to eager's."""
    from ember.fx import sym_meta
    monkeypatch.delitem(sym_meta._COMPOSITES, "reshape")
    ember.manual_seed(0)
    lin = nn.Linear(4, 3)
    cf = ember.compile(lin, backend="aot_eager", dynamic=True)
    for n in (3, 4, 5, 4):
        x = ember.randn(n, 4)
        lin.zero_grad()
        cf(x).sum().backward()
        got = [p.grad.clone() for p in lin.parameters()]
        lin.zero_grad()
        lin(x).sum().backward()
        for a, b in zip(got, [p.grad for p in lin.parameters()]):
            _close(a, b, n)
    assert _graphs(cf) == 1
    assert any("reshape" in r for r in counters["aot_dynamic_fallback"]), \
        dict(counters["aot_dynamic_fallback"])
    assert counters["stats"]["size_specializations"] == 3
    assert not counters["backend_fallback"]


def test_a_size_read_at_the_captured_value_is_refused(monkeypatch):
    """The joint graph runs again at other sizes the guards admit (aot/sym_check.py): a
    size that is a constant where the graph should compute it from the symbols (a
    formula that read a C int at the hints) is caught, and the graph refused."""
    from ember.aot.sym_check import SymbolicSizeMismatch, check_other_sizes
    from ember.fx.shape_env import SymInt

    captured = _recording_aot(monkeypatch)

    def f(x):
        return (x.view(-1, 4) * 2).softmax(0)

    cf = ember.compile(f, backend="aot_eager", dynamic=True)
    cf(ember.randn(6, 8, requires_grad=True)).sum().backward()
    graph = captured["joint"].graph
    env = next(n.meta["val"].env for n in graph.nodes
               if isinstance(n.meta.get("val"), SymInt))
    check_other_sizes(graph, env)            # as traced: right at other sizes
    # the view's size at the captured value instead of its expression
    view = next(n for n in graph.nodes if n.op == "call_function" and
                getattr(n.target, "__name__", "") == "view" and
                any(isinstance(a, type(n)) for a in n.args[1]))
    view.args = (view.args[0], tuple(a.meta["val"].hint if isinstance(a, type(view)) else a
                                     for a in view.args[1]))
    with pytest.raises(SymbolicSizeMismatch, match="at sizes"):
        check_other_sizes(graph, env)


def test_writes_through_symbolic_views_are_functionalized():
    """In-place writes through views made on symbolic sizes (unsqueeze, flatten, basic
    indexing, item assignment) are written back into their base, and the base and its
    views are regenerated from it, at every size (fuzz seed 5 #33: the views had lost
    their base, so the write replaced the base)."""
    def f(x):
        v0 = x * 1
        v1 = v0.unsqueeze(-2)
        v1.flatten()[1::2].mul_(3)
        v0[0] = 5.0
        v0[1:, :2] = v0[1:, 2:] + 2
        return v0 + 1, v1.sum(1)

    cf = ember.compile(f, backend="aot_eager", dynamic=True)
    for n in (3, 4, 7, 12):
        x = ember.randn(n, 4, requires_grad=True)
        x2 = x.detach().requires_grad_(True)
        a, b = cf(x), f(x2)
        for y, y2 in zip(a, b):
            _close(y, y2, n)
        (a[0].sum() + (a[1] * a[1]).sum()).backward()
        (b[0].sum() + (b[1] * b[1]).sum()).backward()
        _close(x.grad, x2.grad, n)
    assert _graphs(cf) == 1, _reasons(cf)
    assert counters["stats"]["size_specializations"] == 0
    assert not counters["aot_dynamic_fallback"], dict(counters["aot_dynamic_fallback"])


def test_a_backward_variant_checks_the_size_relations_it_assumed():
    """A backward variant (for calls where only some outputs get a gradient) is traced
    after the frame's guards were built, so a relation its formulas branch on cannot
    join them: it is taken out of the ShapeEnv and checked on every call of the variant
    from the sizes it is given, which raises rather than compute at sizes it does not
    hold for (aot/variants.py _sized)."""
    from ember import fx
    from ember.aot.variants import _sized
    from ember.fx.shape_env import ShapeEnv

    env = ShapeEnv()
    s0 = env.create_symbol(5, "x.size(0)")
    known = (len(env.guards), len(env.replacements))
    assert s0 > 3                  # a branch a formula took: a guard
    assert len(env.guards) == 1
    g = fx.Graph()
    ph = g.placeholder("s0")
    ph.meta["val"] = s0
    g.output((ph,))
    run = _sized(lambda *args: args, g, env, known, "f")
    assert env.guards == []        # out of the frame's ShapeEnv
    assert run(7) == (7,)
    with pytest.raises(RuntimeError, match="s0"):
        run(3)
    assert counters["aot_dynamic_guards"]


def test_a_backward_variant_reads_sizes_only_a_decomposition_needs():
    """The gradient of only the second output, an unsqueeze: its backward's squeeze
    decomposes to a view of the input's symbolic shape, which no op-level node of the
    variant reads; the variant gets the size as a placeholder (aot/variants.py
    _size_placeholders) instead of raising TraceError (fuzz seed 13 #85)."""
    def f(x):
        v = x.flipud().to(ember.float64)
        return v, [v.unsqueeze(-2)]
    compiled = ember.compile(f, backend="aot_eager", dynamic=True)
    for n in (3, 5, 8):
        xe = ember.randn(n, 4, requires_grad=True)
        xc = xe.detach().clone().requires_grad_()
        (_, [we]), (_, [wc]) = f(xe), compiled(xc)
        g = ember.randn(*we.shape, dtype=ember.float64)
        we.backward(g)
        wc.backward(g)
        _close(xc.grad, xe.grad, n)
    assert _graphs(compiled) == 1


def test_the_check_at_other_sizes_respects_the_guards():
    """The sizes the joint graph runs again at satisfy every guard (a length at its
    bound moves down) and differ from the captured ones; none when the guards pin
    them."""
    from ember.aot.sym_check import other_sizes
    from ember.fx.shape_env import ShapeEnv

    env = ShapeEnv()
    t, b = env.create_symbol(64, "t"), env.create_symbol(5, "b")
    assert t <= 64
    values = other_sizes(env)
    assert values["s0"] != 64 and values["s0"] <= 64 and values["s1"] != 5
    pinned = ShapeEnv()
    n = pinned.create_symbol(7, "n")
    assert int(n) == 7           # specialised: s0 == 7
    assert other_sizes(pinned) is None


@pytest.mark.parametrize("name", ["resnet", "lstm"])
def test_zoo_models_train_over_varying_batch_sizes(name):
    """Zoo models trained under dynamic=True with the batch size changing: one graph
    (batch norm's mean, its unbiased variance and their gradients divide by a symbolic
    count), outputs and every parameter's gradient equal to eager's."""
    from ember import models
    make, data = {
        "resnet": (lambda: models.resnet18(num_classes=10, width=8),
                   lambda b: [ember.randn(b, 3, 16, 16)]),
        "lstm": (lambda: models.LSTMClassifier(20, 3, embed_dim=8, hidden_size=8,
                                               num_layers=1),
                 lambda b: [ember.randint(0, 20, (b, 5))]),
    }[name]
    ember.manual_seed(0)
    m, ref = make(), make()
    ref.load_state_dict(m.state_dict())
    if name == "lstm":      # (its dropout draws differ between the two)
        m.eval()
        ref.eval()
    cm = ember.compile(m, backend="aot_eager", dynamic=True)
    for b in (2, 3, 5, 4, 9):
        ember.manual_seed(b)
        x = data(b)
        m.zero_grad()
        ref.zero_grad()
        out, out_ref = cm(*x), ref(*x)
        if isinstance(out, tuple):
            out, out_ref = out[0], out_ref[0]
        (out ** 2).sum().backward()
        (out_ref ** 2).sum().backward()
        _close(out, out_ref, f"output at batch {b}")
        for p, q in zip(m.parameters(), ref.parameters()):
            _close(p.grad, q.grad, f"gradient at batch {b}")
    assert _graphs(cm) == 1, _reasons(cm)
    assert counters["stats"]["size_specializations"] == 0
    assert not counters["aot_dynamic_fallback"], dict(counters["aot_dynamic_fallback"])
