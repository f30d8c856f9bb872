"""[dynamic] item 4: the LLVM backend compiles ONE graph serving every size its guards
admit (compiler/symbolic.py). Kernels take sizes as arguments (loop bounds, index
coefficients, a mean's count), and the runtime (csrc/runtime/compiled_graph.c)
binds the symbols from the call's inputs, evaluates buffer sizes, strides and offsets
and decides threads and chunks by the actual sizes.

Each family runs the same function compiled once with backend="llvm", dynamic=True at
sizes 2..64, 127 and 1000 against eager, forward and backward: one forward and one
backward graph, no per-size specialization, no extern step, and no LLVM compilation
after the first size (the kernel count is the same at every size)."""
import os
import subprocess
import sys

import pytest

import ember
import ember.nn.functional as F
from ember import _C
from ember.capture import counters
from ember.compiler import backend as B
from ember.compiler import symbolic
from ember.compiler.plan import ExternStep, KernelStep, MatmulStep

SIZES = list(range(2, 65)) + [127, 1000]
_AVX2 = ("+sse2,+sse3,+ssse3,+sse4.1,+sse4.2,+popcnt,+avx,+avx2,+fma,+f16c,+bmi,+bmi2")


@pytest.fixture(autouse=True)
def fresh():
    ember.compiler.reset()
    B.recent.clear()
    yield
    ember.compiler.reset()


def _close(a, b, what):
    assert a.dtype == b.dtype and tuple(a.shape) == tuple(b.shape), what
    scale = 1.0 + float(b.abs().max()) if b.numel() else 1.0
    assert ember.allclose(a, b, rtol=1e-4, atol=1e-5 * scale, equal_nan=True), what


def _p(*shape):
    return ember.randn(*shape).requires_grad_(True)


def _run(fn, make, sizes=SIZES, backward=True, externs=False):
    """fn compiled with llvm and dynamic=True against eager at every size (externs:
    extern steps allowed, and counted)."""
    cf = ember.compile(fn, backend="llvm", dynamic=True)
    compiled_after_first = None
    for n in sizes:
        ember.manual_seed(n)
        args = make(n)
        outs = []
        for f in (cf, fn):
            leaves = [a.detach().requires_grad_(a.requires_grad)
                      if isinstance(a, _C.Tensor) and a.is_floating_point() else a
                      for a in args]
            out = f(*leaves)
            grads = []
            if backward:
                ember.manual_seed(1000 + n)
                out.backward(ember.randn(tuple(out.shape)))
                grads = [x.grad for x in leaves
                         if isinstance(x, _C.Tensor) and x.requires_grad]
            outs.append((out.detach(), grads))
        (y, gs), (y_ref, gs_ref) = outs
        _close(y, y_ref, f"output at size {n}")
        for i, (a, b) in enumerate(zip(gs, gs_ref)):
            _close(a, b, f"gradient {i} at size {n}")
        if compiled_after_first is None:
            compiled_after_first = (_C._jit_stats()["compiled"], len(B.recent))
    # one capture, one plan per graph, no kernel compiled after the first size
    assert len(cf._ember_compile_context.graphs) == 1
    assert (_C._jit_stats()["compiled"], len(B.recent)) == compiled_after_first
    assert counters["stats"]["size_specializations"] == 0
    assert not counters["llvm_dynamic_fallback"], dict(counters["llvm_dynamic_fallback"])
    assert not counters["llvm_fallback"], dict(counters["llvm_fallback"])
    graphs = list(B.recent)
    assert len(graphs) == (2 if backward else 1)
    for g in graphs:
        assert g.symbolic
        if not externs:
            assert not [s for s in g.lowered.steps if isinstance(s, ExternStep)]
            assert not counters["llvm_dynamic_extern"]
        assert len(g.plan) == 5 and g.plan[4][0]        # the symbolic record, binds
        assert any((isinstance(s, KernelStep) and s.syms) or isinstance(s, MatmulStep)
                   for s in g.plan[2])
    return graphs


def _causal_arange(x):
    i = ember.arange(x.shape[-1])
    return x.masked_fill(~(i[:, None] >= i[None, :]), float("-inf")).softmax(-1)


FAMILIES = {
    "elementwise": (lambda x, y: (x * 2 + y).relu() - x.exp() * y.sigmoid(),
                    lambda n: (_p(n, 7), _p(n, 7))),
    "broadcasting": (lambda x, y, b: x * y + b - y.exp(),
                     lambda n: (_p(n, 8), _p(n, 1), _p(8))),
    "outer_broadcast": (lambda a, b: (a + b) * a, lambda n: (_p(n, 1), _p(1, 7))),
    "views": (lambda x: x.view(x.shape[0], 2, 4).transpose(1, 2).reshape(x.shape[0], 8) *
              2 + x.t().contiguous().t() + x.flatten().view(-1, 8) +
              x.unsqueeze(0).expand(3, x.shape[0], 8).sum(0),
              lambda n: (_p(n, 8),)),
    # a transposed (non-contiguous) view of the input, read with symbolic strides
    "noncontiguous": (lambda x: x.t() * 3 + x.t().sin(), lambda n: (_p(n, 5),)),
    # a non-contiguous argument (capture keeps its sizes) beside a symbolic one
    "noncontiguous_arg": (lambda x, w: x @ w + x.sum(1, keepdim=True) * w.sum(0),
                          lambda n: (_p(n, 6), _p(5, 6).detach().t())),
    "both_dims": (lambda x: (x * x).tanh() + 1, lambda n: (_p(n, n + 1),)),
    # reductions over a symbolic dim (a mean divides by the size argument)
    "reductions": (lambda x: x.sum(0) + x.mean(0) * 3 + x.amax(0) - x.var(0) +
                   x.std(0).unsqueeze(0).sum(0),
                   lambda n: (_p(n, 6),)),
    "reduce_symbolic_dim_keep": (lambda x: x.mean(1, keepdim=True) * x + x.logsumexp(0),
                                 lambda n: (_p(5, n),)),
    # row kernels: softmax over a growing row, layer_norm over symbolic rows
    "softmax": (lambda x: x.softmax(-1) + x.log_softmax(0) * 0.5, lambda n: (_p(4, n),)),
    "layer_norm": (lambda x, w, b: F.layer_norm(x, (x.shape[-1],), w, b) * x.shape[-1],
                   lambda n: (_p(n, 3, 8), _p(8), _p(8))),
    # matrix products: BLAS with the call's dimensions
    "matmul": (lambda x, w, y: (x @ w) @ (y.t() @ y),
               lambda n: (_p(n, 8), _p(8, 5), _p(n, 5))),
    "bmm": (lambda a, b: a @ b.transpose(-1, -2), lambda n: (_p(3, n, 4), _p(3, n, 4))),
    "mlp": (lambda x, w1, b1, w2: F.gelu(x @ w1 + b1) @ w2,
            lambda n: (_p(n, 16), _p(16, 32), _p(32), _p(32, 4))),
    "attention": (lambda q, k, v: ((q @ k.transpose(-1, -2)) * 0.25).softmax(-1) @ v,
                  lambda n: (_p(3, n, 8), _p(3, n, 8), _p(3, n, 8))),
    # causal masks from arange / tril of a symbolic length (iota against a size
    # argument), and slicing with a symbolic bound (the capture's guard x.size(0) >=
    # y.size(0) is a fact the lowering's bounds use)
    "causal_arange": (_causal_arange, lambda n: (_p(3, n, n),)),
    "causal_tril": (lambda x: x.masked_fill(
        ember.tril(ember.ones(x.shape[-1], x.shape[-1])) == 0, float("-inf")).softmax(-1),
        lambda n: (_p(3, n, n),)),
    "symbolic_bound": (lambda x, y: x[:y.shape[0]] * y + x[y.shape[0]:2 * y.shape[0]],
                       lambda n: (_p(2 * n + 1, 4), _p(n, 4))),
    # cat: one kernel per tensor into its slice (offsets of symbolic sizes)
    "cat": (lambda x, y: (ember.cat([x, y], 0) * ember.cat([y, x], 0)).sum(0) +
            ember.cat([x, y * 2], 1).sum(0)[:4],
            lambda n: (_p(n, 4), _p(n, 4))),
    # indexing by tensors: gathered loads (loop IR bound + gather, wrapped and checked
    # at run time), their gradients scattered (index_put with accumulate: scatter)
    "embedding": (lambda idx, w: F.embedding(idx, w) * 2,
                  lambda n: (ember.randint(0, 20, (n, 3)), _p(20, 6))),
    "embedding_symbolic_rows": (lambda idx, w: F.embedding(idx, w).sum(1) + 1,
                                lambda n: (ember.randint(0, n, (n, 3)), _p(n, 6))),
    "indexing": (lambda x, idx: x[idx] * 2 + x.index_select(0, idx.clamp(min=0)),
                 lambda n: (_p(n, 4), ember.randint(-n, n, (n,)))),
    "index_select_dim1": (lambda x, idx: x.index_select(1, idx).exp(),
                          lambda n: (_p(3, n), ember.randint(0, n, (2 * n,)))),
    "gather": (lambda x, idx: x.gather(1, idx) * x.sum(1, keepdim=True),
               lambda n: (_p(n, 5), ember.randint(0, 5, (n, 3)))),
    "index_two_tensors": (lambda x, i, j: x[i, :, j] + x[:, 1, j].sum(),
                          lambda n: (_p(n, 3, 7), ember.randint(0, n, (n,)),
                                     ember.randint(-7, 7, (n,)))),
    # (layer_norm over a symbolic last dim recompiles in capture on a stride guard,
    # with aot_eager too: x.stride(0) == s1 fails; not a backend matter)
}


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_one_llvm_graph_serves_every_size(family):
    fn, make, *sizes = FAMILIES[family]
    _run(fn, make, *sizes)


EXTERN_FAMILIES = {
    # index_put without accumulate: which duplicate wins is eager's order
    "index_put": (lambda x, idx, v: x.index_put((idx,), v * 2),
                  lambda n: (_p(n, 4), ember.randint(0, n, (n,)), _p(n, 4))),
}


@pytest.mark.parametrize("family", sorted(EXTERN_FAMILIES))
def test_extern_steps_run_inside_one_symbolic_graph(family):
    """Not kernels: index_put without accumulate runs its eager kernel as an extern
    step of the one symbolic plan (on the call's tensors, results checked against the
    evaluated shapes), counted in counters["llvm_dynamic_extern"]; still one graph
    for every size."""
    fn, make = EXTERN_FAMILIES[family]
    _run(fn, make, SIZES[::7] + [127, 1000], externs=True)
    assert counters["llvm_dynamic_extern"]


def test_gathered_loads_print_verify_and_check_their_indices():
    """x[idx] is one kernel: `bound` wraps and checks each index value against the
    dim's size (a size argument), `gather` loads at it; the verifier refuses a gather
    by a register no bound checked. An index out of range raises eager's IndexError
    from the kernel's error record (the graph itself, called directly), never reading
    outside the buffer."""
    from ember.compiler.loop_ir import LoopIRError, Stmt, verify
    fn = lambda w, idx: w[idx] * 2      # noqa: E731
    graphs = _run(fn, lambda n: (_p(n + 3, 5), ember.randint(-n, n, (n,))), [4, 9, 30])
    k = graphs[0].lowered.kernels[0]
    text = str(k)
    assert "bound int64 %" in text and "gather p" in text, text
    assert any(i[0] == "bound" and isinstance(i[3], tuple) for i in k.spec().instrs)
    bad = [s for s in k.stmts if s.op == "gather"][0]
    k.stmts = [s for s in k.stmts if s.op != "bound"]
    with pytest.raises(LoopIRError):
        verify(k)
    assert isinstance(bad, Stmt)
    # the error, as eager words it, from the compiled function and from the graph
    def fixed(w, idx):
        return w[idx] * 2
    cf = ember.compile(fixed, backend="llvm", dynamic=False)
    w = ember.randn(6, 5)
    cf(w, ember.tensor([0, 1]))
    g = list(B.recent)[-1]
    assert not [s for s in g.lowered.steps if isinstance(s, ExternStep)]
    for idx in ([0, 6], [-7, 1]):
        with pytest.raises(IndexError) as eager:
            fn(w, ember.tensor(idx))
        with pytest.raises(IndexError) as compiled:
            cf(w, ember.tensor(idx))
        with pytest.raises(IndexError) as graph:
            g(w, ember.tensor(idx))
        assert str(eager.value) == str(compiled.value) == str(graph.value)
    assert ember.equal(g(w, ember.tensor([-6, 5]))[0], fn(w, ember.tensor([0, 5])))


def test_scattered_gradients_are_one_threaded_kernels():
    """embedding's gradient is index_put with accumulate: a kernel copying the zeros,
    then `scatter sum` into the rows in eager's order, on one thread (two points may
    add into one row); the same at 1 and 2 threads, and equal to eager's bits."""
    fn = lambda idx, w: F.embedding(idx, w) * 3      # noqa: E731
    graphs = _run(fn, lambda n: (ember.randint(0, 7, (n, 4)), _p(7, 16)), [5, 300])
    bw = graphs[1]
    scatters = [s for s in bw.lowered.steps if isinstance(s, KernelStep) and
                any(x.op == "scatter" for x in s.ir.stmts)]
    assert scatters and all(not s.parallel for s in scatters)
    assert "scatter sum p" in str(scatters[0])


def test_kernels_print_their_size_arguments_and_verify():
    """The loop IR prints symbolic bounds and coefficients; the spec refers to size
    arguments; the verifier decides bounds for every size (s1*i0 + i1 < s0*s1)."""
    graphs = _run(lambda x: x.t() * 2 + 1, lambda n: (ember.randn(n, n + 3),), [4, 9],
                  backward=False)
    k = graphs[0].lowered.kernels[0]
    text = str(k)
    assert text.startswith(f"kernel {k.name} [s1, s0] ("), text
    assert "load p0[i0 + s1*i1]" in text, text
    spec = k.spec()
    assert spec.nsyms == 2 and spec.sizes == ((0,), (1,))
    assert ("load", 0, 0, (1, (0,)), 0) in spec.instrs


def test_size_comparisons_the_ranges_do_not_decide_fall_back_counted():
    """A lowering decision that depends on the sizes is never taken at the captured
    ones: x[1:] broadcast is 1 wide at size 2 only, so the graph is compiled per size,
    counted with the comparison, and still equals eager."""
    fn = lambda x: x[1:] * x[:-1].sum(0)     # noqa: E731
    cf = ember.compile(fn, backend="llvm", dynamic=True)
    for n in (3, 4, 5):
        x = ember.randn(n, 4)
        _close(cf(x), fn(x), f"size {n}")
    reasons = " ".join(counters["llvm_dynamic_fallback"])
    assert counters["llvm_dynamic_fallback"] and "SymbolicLoweringUnsupported" in reasons


def test_a_graph_writing_into_its_inputs_compiles_once():
    """A graph writing into an input is one symbolic plan too, the write a kernel into
    the input's memory (tests/test_llvm_dynamic_writes.py has the families); it used to
    compile per size, counted in counters["llvm_dynamic_fallback"]."""
    def fn(buf, x):
        buf[: x.shape[0]] = x * 2
        return buf.sum(0)
    cf = ember.compile(fn, backend="llvm", dynamic=True)
    for n in (3, 4, 5):
        b1, b2, x = ember.zeros(8, 4), ember.zeros(8, 4), ember.randn(n, 4)
        _close(cf(b1, x), fn(b2, x), f"size {n}")
        assert ember.equal(b1, b2)
    assert not counters["llvm_dynamic_fallback"], dict(counters["llvm_dynamic_fallback"])
    assert counters["stats"]["size_specializations"] == 0
    assert len(cf._ember_compile_context.graphs) == 1


def test_size_int_answers_only_what_holds_at_every_size():
    from ember.fx import sym_expr as se
    from ember.fx.shape_env import ShapeEnv
    env = ShapeEnv()
    s0 = env.create_symbol(5, "x.size(0)")
    s1 = env.create_symbol(7, "x.size(1)")
    sizes = symbolic.Sizes(env)
    a, b = sizes.size(s0), sizes.size(s1)
    assert int(a) == 5 and str(a) == "s0"
    assert a != 1 and a > 1 and a * b != a and a * b - 1 < a * b
    with pytest.raises(symbolic.SymbolicLoweringUnsupported):
        bool(a == b)
    with pytest.raises(symbolic.SymbolicLoweringUnsupported):
        bool(a * 8 < 65536)
    with pytest.raises(symbolic.SymbolicLoweringUnsupported):
        float(a)
    assert (a - a) == 0 and type(a - a) is int
    # a relation the capture guards is a fact: s0 <= s1 decides s0*s0 - 1 < s0*s1
    assert env.evaluate(se.relation("<=", s0.expr, s1.expr))
    sizes = symbolic.Sizes(env)
    a, b = sizes.size(s0), sizes.size(s1)
    assert a <= b and not (a > b) and a * a - 1 < a * b


def test_same_results_with_avx2_vectors():
    """The families again, JIT-compiled for AVX2 (8 lanes): remainders by the size."""
    if os.environ.get("EMBER_LLVM_FEATURES"):
        pytest.skip("already running with forced features")
    env = dict(os.environ, EMBER_LLVM_FEATURES=_AVX2)
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                        f"{__file__}::test_one_llvm_graph_serves_every_size"],
                       env=env, capture_output=True, text=True, timeout=1800)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]


def test_threads_calling_one_symbolic_graph_at_different_sizes():
    """A symbolic graph writes the call's sizes into its decoded plan: calls from two
    threads at different sizes run one at a time (a lock per graph), each right."""
    import threading
    fn = lambda x: (x * 2).exp().sum(1) + x.softmax(1).amax(1)     # noqa: E731
    cf = ember.compile(fn, backend="llvm", dynamic=True)
    with ember.no_grad():
        cf(ember.randn(3, 5))
        cf(ember.randn(4, 6))
    errors = []

    def work(rows, cols):
        try:
            for _ in range(20):
                x = ember.randn(rows, cols)
                with ember.no_grad():
                    y = cf(x)
                if not ember.allclose(y, fn(x), rtol=1e-4, atol=1e-5):
                    errors.append((rows, cols))
        except Exception as e:   # noqa: BLE001
            errors.append(e)
    threads = [threading.Thread(target=work, args=s) for s in ((300, 700), (900, 130))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert counters["stats"]["size_specializations"] == 0
    assert not counters["llvm_dynamic_fallback"]


def test_outer_reductions_over_a_symbolic_dim_split_into_partials():
    """A column sum over a symbolic number of rows is cut into SYM_PARTIALS blocks of
    s0 // 8 rows (a kernel whose blocks threads may split: it folds each block into a
    partial of its own), the s0 % 8 rows left into the last partial, then the partials
    into the output: right at every size, those below 8 (no whole block) included. The
    verifier decides its bounds by writing s0 = 8*q + r (symbolic._decide_quotients)."""
    from ember.compiler.lowerings import SYM_PARTIALS
    graphs = _run(lambda x: x.sum(0) * 2 + x.amax(0), lambda n: (_p(n, 6),),
                  list(range(2, 20)) + [127, 1000])
    fw = graphs[0].lowered
    blocks = [s for s in fw.steps if isinstance(s, KernelStep) and
              not symbolic.is_symbolic(s.ir.sizes[0]) and s.ir.sizes[0] == SYM_PARTIALS
              and len(s.ir.sizes) == 3]
    assert len(blocks) == 2 and all(s.parallel for s in blocks), str(fw)
    assert "(s0//8)" in str(blocks[0])
    rest = [s for s in fw.steps if isinstance(s, KernelStep) and
            str(s.ir.sizes[0]) == "(s0 - 8*(s0//8))"]
    assert len(rest) == 2 and not any(s.parallel for s in rest)
    from ember.fx import sym_expr as se
    s0 = se.Symbol("s0")
    q = se.floordiv(se.Expr.atom(s0) * 2, 8)
    rel = se.relation("<=", q * 8, se.Expr.atom(s0) * 2)
    assert symbolic.decide(rel, {s0: (2, se.INF)}) is True


@pytest.mark.parametrize("dynamic", [False, True])
def test_negative_indices_raise_where_eager_raises(dynamic):
    """x[idx] wraps a negative index; index_select, embedding, gather and scatter_add
    refuse one in eager, and their decompositions (the index prim, which wraps) make it
    out of range (indexing.no_negative), so the compiled graph raises too and the
    caller gets eager's exception, not a wrapped row."""
    w = ember.randn(5, 3)
    fns = {"index_select": lambda w, i: w.index_select(0, i),
           "embedding": lambda w, i: F.embedding(i, w),
           "gather": lambda w, i: w.gather(0, i.view(-1, 1).expand(-1, 3)),
           "scatter_add": lambda w, i: w.scatter_add(0, i.view(-1, 1).expand(-1, 3),
                                                     ember.ones(i.shape[0], 3)),
           "getitem": lambda w, i: w[i]}
    for name, fn in fns.items():
        cf = ember.compile(fn, backend="llvm", dynamic=dynamic)
        for good in ([1, 2], [4, 0, 3]):
            _close(cf(w, ember.tensor(good)), fn(w, ember.tensor(good)), name)
        bad = ember.tensor([1, -1])
        if name == "getitem":
            _close(cf(w, bad), fn(w, bad), name)
            continue
        with pytest.raises((IndexError, RuntimeError)) as eager:
            fn(w, bad)
        with pytest.raises(type(eager.value)) as compiled:
            cf(w, bad)
        assert str(compiled.value) == str(eager.value), name
    assert not counters["runtime_fallback"], dict(counters["runtime_fallback"])
