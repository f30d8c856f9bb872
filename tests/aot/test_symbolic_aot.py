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
    "indexing": (lambda x, idx: x[idx] * 2 + x.index_select(0, idx) +
                 x.gather(1, idx.unsqueeze(1).remainder(4)),
                 lambda n: (_p(n, 4), ember.randint(0, n, (n,)))),
}


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_one_forward_and_backward_serve_every_size(family):
    fn, make, *sizes = FAMILIES[family]
    _run(fn, make, *sizes)


def test_mlp_training_over_many_batch_sizes_compiles_twice():
    """dynamic=None: a static graph, then one symbolic graph whose forward and backward
    serve every later batch size; gradients equal eager's at every size."""
    ember.manual_seed(0)
    mlp = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 4))
    ref = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 4))
    ref.load_state_dict(mlp.state_dict())
    cm = ember.compile(mlp, backend="aot_eager")
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


def test_gpt_training_step_with_varying_batch_and_length():
    """The zoo GPT trained under dynamic=True with batch and sequence length changing
    every step: one graph, the loss and every parameter's gradient equal to eager's."""
    from ember.models.gpt import GPT, GPTConfig
    ember.manual_seed(0)
    cfg = GPTConfig(block_size=64, vocab_size=65, n_layer=2, n_head=2, n_embd=32,
                    dropout=0.0)
    m, ref = GPT(cfg), GPT(cfg)
    ref.load_state_dict(m.state_dict())
    cm = ember.compile(m, backend="aot_eager", dynamic=True)
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


def test_graphs_print_with_sym_placeholders_and_verify(capsys):
    """The joint, forward and backward graphs take the sizes as Sym placeholders; the
    backward reads the sizes it needs as saved symbols; all pass the graph verifier."""
    from ember import aot
    from ember.fx.graph_module import GraphModule

    captured = {}

    def backend(gm, example_inputs):
        record = {}
        captured["joint_fn"] = aot.aot_compile(
            gm, example_inputs, record=record,
            fw_compiler=lambda g, name: captured.setdefault("fw", g) and
            aot.eager_compiler(g, name),
            bw_compiler=lambda g, name: captured.setdefault("bw", g) and
            aot.eager_compiler(g, name))
        captured["joint"] = record["joint"]
        return captured["joint_fn"]

    def f(x, w):
        return (x.view(-1, 4) @ w).softmax(-1)

    cf = ember.compile(f, backend=backend, dynamic=True)
    x, w = ember.randn(6, 8, requires_grad=True), ember.randn(4, 3, requires_grad=True)
    cf(x, w).sum().backward()
    joint, fw, bw = captured["joint"].graph, captured["fw"], captured["bw"]
    for g in (joint, fw, bw):
        g.lint()
        aot.verify_prims(g)
        GraphModule({}, g)      # generates valid Python
    assert 's0: "Sym(s0)"' in GraphModule({}, fw).code
    bw_code = GraphModule({}, bw).code
    assert 'Sym(s0)' in bw_code, bw_code
    # the backward's view of the gradient uses the symbol, not the captured size
    assert "(6, " not in bw_code and "12" not in bw_code, bw_code


def test_a_backward_that_cannot_run_symbolically_falls_back_per_size():
    """An op whose symbolic form is missing makes aot_eager compile the graph per size
    (sym_sizes.specializing), counted, with results still equal to eager's."""
    def f(x):
        return ember.tile(x, (2, 1)) * 3

    cf = ember.compile(f, backend="aot_eager", dynamic=True)
    for n in (3, 4, 5):
        x = ember.randn(n, 2, requires_grad=True)
        y = cf(x)
        y.sum().backward()
        x2 = x.detach().requires_grad_(True)
        f(x2).sum().backward()
        _close(y, f(x2), n)
        _close(x.grad, x2.grad, n)
    assert counters["aot_dynamic_fallback"]
    assert counters["stats"]["size_specializations"] == 3
