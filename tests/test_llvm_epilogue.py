"""GEMM epilogues (python/ember/compiler/epilogue.py, csrc/runtime/blas.c): the kernels
consuming a matrix product run on each block of its rows right after BLAS made it.
Compiled results equal eager's for every kind of consumer, the plan prints and verifies
them, and the runtime really runs them by blocks (_C._blas_epilogue_calls)."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import ember
from ember import _C
from ember.aot import decompose, trace_joint
from ember.compiler import backend, epilogue, graph_cache
from ember.compiler.backend import CompiledLLVMGraph
from ember.compiler.loop_ir import Affine, Kernel, Op, Param, Reduction, Stmt
from ember.compiler.plan import (KernelStep, MatmulStep, PlanError, Ref, block_rows,
                                 verify)

F = ember.nn.functional
TOL = {ember.float32: dict(rtol=2e-5, atol=2e-5), ember.float64: dict(rtol=1e-12, atol=1e-12)}


def _graph(fn, *args):
    return CompiledLLVMGraph(decompose(trace_joint(fn, list(args)).graph), "epilogue")


def _epilogues(g):
    return [e for s in g.lowered.steps if isinstance(s, MatmulStep) for e in s.epilogues]


def _check(fn, *args, dtype=ember.float32, fused=1, blocks=True):
    """fn compiled (as a graph of prims) equals fn eager; `fused` epilogues at least, run
    by blocks when `blocks`."""
    g = _graph(fn, *args)
    assert len(_epilogues(g)) >= fused, str(g.lowered)
    threads = ember.get_num_threads()
    try:
        # one thread: every product with epilogues runs them by panels of rows (on more
        # threads, one the pool runs runs them after it, across the pool)
        ember.set_num_threads(1)
        before = _C._blas_epilogue_calls()
        got = g(*args)
        by_blocks = _C._blas_epilogue_calls() > before
        ember.set_num_threads(2)
        again = g(*args)
    finally:
        ember.set_num_threads(threads)
    for a, b in zip(got, again):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    want = fn(*args)
    want = want if isinstance(want, tuple) else (want,)
    assert len(got) == len(want)
    for a, b in zip(got, want):
        assert a.dtype == b.dtype and tuple(a.shape) == tuple(b.shape)
        np.testing.assert_allclose(a.numpy(), b.numpy(),
                                   **TOL[dtype if b.dtype == ember.float64 else b.dtype])
    if fused and blocks:
        assert by_blocks
    return g


def _data(dtype, *shapes, seed=0):
    g = np.random.default_rng(seed)
    return [ember.from_numpy(g.standard_normal(s).astype(dtype.numpy_dtype)) for s in shapes]


KINDS = {
    "bias": lambda x, w, b, r: F.linear(x, w, b),
    "relu": lambda x, w, b, r: F.linear(x, w, b).relu(),
    "gelu": lambda x, w, b, r: F.gelu(F.linear(x, w, b)),
    "gelu_tanh": lambda x, w, b, r: F.gelu(F.linear(x, w, b), approximate="tanh"),
    "silu": lambda x, w, b, r: F.silu(F.linear(x, w, b)),
    "tanh": lambda x, w, b, r: F.linear(x, w, b).tanh(),
    "sigmoid": lambda x, w, b, r: F.linear(x, w, b).sigmoid(),
    "residual": lambda x, w, b, r: r + F.linear(x, w, b),
    "scale": lambda x, w, b, r: (x @ w.t()) * 0.125,
    "cast": lambda x, w, b, r: (x @ w.t()).to(
        ember.float64 if x.dtype == ember.float32 else ember.float32),
    "all": lambda x, w, b, r: r + 0.5 * F.gelu(F.linear(x, w, b)),
}


@pytest.mark.parametrize("dtype", [ember.float32, ember.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_each_epilogue_equals_eager(kind, dtype):
    x, w, b, r = _data(dtype, (200, 96), (160, 96), (160,), (200, 160))
    g = _check(KINDS[kind], x, w, b, r, dtype=dtype)
    text = str(g.lowered)
    assert "then on each block of rows:" in text
    assert epilogue.stats["fused"] > 0


def test_large_product_on_the_pool_is_identical_at_one_and_two_threads():
    x, w, b, r = _data(ember.float32, (1024, 256), (512, 256), (512,), (1024, 512))
    fn = KINDS["all"]
    g = _graph(fn, x, w, b, r)
    assert _epilogues(g)
    before = ember.get_num_threads()
    try:
        outs = []
        for t in (1, 2):
            ember.set_num_threads(t)
            calls = _C._blas_epilogue_calls()
            outs.append(g(x, w, b, r)[0].numpy())
            # by panels on 1 thread; on 2 (the product on the pool) after it
            assert _C._blas_epilogue_calls() == calls + (t == 1)
    finally:
        ember.set_num_threads(before)
    np.testing.assert_array_equal(outs[0], outs[1])
    np.testing.assert_allclose(outs[0], fn(x, w, b, r).numpy(), rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("dtype", [ember.float32, ember.float64], ids=["f32", "f64"])
def test_batched_matmul(dtype):
    # (B, m, k) @ (B, k, n): one product per matrix, the epilogue on each one's blocks
    a, b, bias = _data(dtype, (6, 40, 24), (6, 24, 72), (72,))
    _check(lambda a, b, bias: F.gelu(a @ b + bias), a, b, bias, dtype=dtype)
    # a weight shared by the batch: one folded product
    a, w, bias = _data(dtype, (4, 50, 32), (32, 48), (48,))
    _check(lambda a, w, bias: (a @ w + bias).relu(), a, w, bias, dtype=dtype)
    # attention-like scores scaled, batch x heads
    q, k = _data(dtype, (2, 3, 20, 8), (2, 3, 20, 8))
    _check(lambda q, k: (q @ k.transpose(-1, -2)) * 0.25, q, k, dtype=dtype)


def test_batched_epilogue_whose_band_crosses_matrices_runs_after_the_product():
    """A consumer whose outer index spans several matrices of a batched product (a
    reduction over all but dim 0 here) cannot run by blocks of one matrix: the runtime
    runs it after the whole product, with the same result."""
    a, b = _data(ember.float32, (2, 3, 16, 8), (2, 3, 8, 16))
    fn = lambda a, b: (a @ b).exp().sum((1, 2, 3))       # noqa: E731
    g = _graph(fn, a, b)
    assert _epilogues(g), str(g.lowered)
    threads = ember.get_num_threads()
    try:
        ember.set_num_threads(1)
        before = _C._blas_epilogue_calls()
        np.testing.assert_allclose(g(a, b)[0].numpy(), fn(a, b).numpy(), rtol=1e-5)
        assert _C._blas_epilogue_calls() == before
    finally:
        ember.set_num_threads(threads)


def test_non_contiguous_inputs():
    x, w, b, r = _data(ember.float32, (96, 200), (160, 96), (160,), (160, 200))
    # transposed operands and residual (read by BLAS and the kernel in place)
    _check(lambda x, w, b, r: F.gelu(x.t() @ w.t() + b) + r.t(), x, w, b, r)
    # every other column: a layout BLAS cannot read (numpy.matmul), epilogue after
    x2, w2 = _data(ember.float32, (64, 80), (80, 48))
    fn = lambda x, w: (x[:, ::2] @ w[::2]).relu()        # noqa: E731
    g = _graph(fn, x2, w2)
    np.testing.assert_allclose(g(x2, w2)[0].numpy(), fn(x2, w2).numpy(), rtol=1e-5,
                               atol=1e-5)


def test_consumers_broadcasting_per_row_and_per_column():
    x, w, col, row = _data(ember.float32, (128, 64), (64, 96), (96,), (128, 1))
    _check(lambda x, w, c, r: ((x @ w) * r + c).sigmoid(), x, w, col, row)
    # a per-row statistic: softmax over each row of the product
    _check(lambda x, w, c, r: (x @ w + c).softmax(-1), x, w, col, row)
    # layer norm after a residual add of a product (its statistics are epilogues too:
    # the row kernels (compiler/rows.py) make the add, the statistics and the
    # normalisation the phases of one kernel, which runs as one epilogue)
    ln_w, ln_b, res = _data(ember.float32, (96,), (96,), (128, 96))
    g = _check(lambda x, w, g_, b_, r: F.layer_norm(r + x @ w, (96,), g_, b_),
               x, w, ln_w, ln_b, res, fused=1)
    assert any(e.ir.nreduce for e in _epilogues(g))


def test_product_used_twice_or_returned():
    x, w = _data(ember.float32, (100, 64), (64, 80))
    g = _check(lambda x, w: ((x @ w).relu(), (x @ w).sigmoid()), x, w, fused=2)
    g = _check(lambda x, w: (x @ w, (x @ w).tanh()), x, w)
    # the product itself is an output: still written whole
    y = g(x, w)[0].numpy()
    np.testing.assert_allclose(y, (x @ w).numpy(), rtol=1e-5, atol=1e-5)


def test_training_step_gradients_equal_eager():
    """Forward and backward of an MLP: the backward's products feed relu's backward
    (and the next product), which run as their epilogues."""
    ember.manual_seed(0)
    model = ember.nn.Sequential(ember.nn.Linear(64, 128), ember.nn.GELU(),
                                ember.nn.Linear(128, 128), ember.nn.ReLU(),
                                ember.nn.Linear(128, 10))
    x = ember.randn(96, 64)
    y = ember.randint(0, 10, (96,))

    def step(m):
        for p in m.parameters():
            p.grad = None
        loss = F.cross_entropy(m(x), y)
        loss.backward()
        return loss.item(), [p.grad.numpy().copy() for p in m.parameters()]

    want = step(model)
    backend.recent.clear()
    compiled = ember.compile(model)
    got = step(compiled)
    got = step(compiled)
    assert abs(got[0] - want[0]) < 1e-5
    for a, b in zip(got[1], want[1]):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
    graphs = list(backend.recent)
    assert len(graphs) == 2
    fw, bw = graphs
    assert _epilogues(fw) and _epilogues(bw), str(bw.lowered)


# ------------------------------------------------------------------ plan and verifier


def _kernel(sizes, loads, stores=(), nreduce=0, fold=None):
    """A kernel loading buf0 at each index in loads, storing into buf1."""
    k = Kernel("k", tuple(sizes), nreduce, [Param(("buf", 0), ember.float32, 10 ** 6),
                                            Param(("buf", 1), ember.float32, 10 ** 6)])
    for i, idx in enumerate(loads):
        k.stmts.append(Stmt(Op.LOAD, i, ember.float32, (), 0, Affine(tuple(idx[0]),
                                                                       idx[1])))
    for idx in stores:
        k.stmts.append(Stmt(fold or Op.STORE, None, None, (0,), 1,
                            Affine(tuple(idx[0]), idx[1]),
                            Reduction.SUM if fold else None))
    return k


def test_block_rows():
    prod = Ref("buf", 0)
    # identity over (32, 8): one row per outer index
    assert block_rows(_kernel((32, 8), [((8, 1), 0)], [((8, 1), 0)]), prod, 8, 32) == 1
    # (4, 8, 8) over a (32, 8) product: 8 rows per outer index
    assert block_rows(_kernel((4, 8, 8), [((64, 8, 1), 0)]), prod, 8, 32) == 8
    # a slice of columns (a QKV split): still inside the band
    assert block_rows(_kernel((32, 4), [((8, 1), 4)]), prod, 8, 32) == 1
    # transposed: index 0 reads a column
    assert block_rows(_kernel((8, 32), [((1, 8), 0)]), prod, 8, 32) is None
    # past its band (the next row)
    assert block_rows(_kernel((32, 8), [((8, 1), 8)]), prod, 8, 32) is None
    # not all the rows
    assert block_rows(_kernel((16, 8), [((8, 1), 0)]), prod, 8, 32) is None
    # writes the product
    k = _kernel((32, 8), [((8, 1), 0)])
    k.stmts.append(Stmt(Op.STORE, None, None, (0,), 0, Affine((8, 1), 0)))
    assert block_rows(k, prod, 8, 32) is None
    # accumulates along dim 0 (its outer indices are not independent)
    k = _kernel((32, 8), [((8, 1), 0)], [((0, 1), 0)], fold=Op.ACCUMULATE)
    assert block_rows(k, prod, 8, 32) is None
    # reduces everything
    assert block_rows(_kernel((32, 8), [((8, 1), 0)], nreduce=2), prod, 8, 32) is None
    # reads what an earlier epilogue wrote, where it wrote it; not elsewhere
    first = _kernel((32, 8), [((8, 1), 0)], [((8, 1), 0)])
    later = Kernel("l", (32, 8), 0, [Param(("buf", 1), ember.float32, 10 ** 6)],
                   [Stmt(Op.LOAD, 0, ember.float32, (), 0, Affine((8, 1), 0))])
    assert block_rows(later, prod, 8, 32, [first]) == 1
    later.stmts[0] = Stmt(Op.LOAD, 0, ember.float32, (), 0, Affine((1, 8), 0))
    assert block_rows(later, prod, 8, 32, [first]) is None


def test_plan_prints_and_verifies_epilogues():
    x, w, b = _data(ember.float32, (64, 32), (32, 48), (48,))
    g = _graph(lambda x, w, b: (x @ w + b).relu(), x, w, b)
    mm = next(s for s in g.lowered.steps if isinstance(s, MatmulStep))
    assert len(mm.epilogues) == 1
    e = mm.epilogues[0]
    assert str(mm).splitlines()[1:] == ["  " + line for line in str(e.ir).splitlines()]
    assert str(mm) in str(g.lowered)
    assert g.lowered.kernels[e.kernel] is e.ir
    verify(g.lowered)
    # the runtime's plan holds it, and decodes it
    assert g.run.plan[2][g.lowered.steps.index(mm)].epilogues == mm.epilogues
    # a kernel reading the product transposed is not fused, and the verifier refuses it
    # as an epilogue
    g2 = _graph(lambda x, w: (x @ w).t() * 2, x, w)
    mm2 = next(s for s in g2.lowered.steps if isinstance(s, MatmulStep))
    assert not mm2.epilogues
    k = next(s for s in g2.lowered.steps if isinstance(s, KernelStep))
    i = g2.lowered.steps.index(mm2)
    g2.lowered.steps[i] = mm2._replace(epilogues=(k,))
    g2.lowered.steps.remove(k)
    with pytest.raises(PlanError, match="outside the rows"):
        verify(g2.lowered)


def test_runtime_refuses_a_malformed_epilogue():
    x, w, b = _data(ember.float32, (64, 32), (32, 48), (48,))
    g = _graph(lambda x, w, b: (x @ w + b).relu(), x, w, b)
    inputs, buffers, steps, outputs = g.lowered.plan()
    i = next(i for i, s in enumerate(steps) if isinstance(s, MatmulStep))
    e = steps[i].epilogues[0]

    def build(ep):
        bad = steps[:i] + (steps[i]._replace(epilogues=(ep,)),) + steps[i + 1:]
        return _C.CompiledGraph(g.module, g.module.addresses, (inputs, buffers, bad, outputs))

    build(e)
    with pytest.raises(ValueError, match="bad plan: an epilogue"):
        build(e._replace(outer=7))           # 7 does not divide the 64 rows
    with pytest.raises(ValueError, match="bad plan"):
        build(steps[i])                      # not a kernel step


def test_graph_cache_keeps_epilogues():
    x, w, b = _data(ember.float32, (64, 32), (32, 48), (48,))
    g = _graph(lambda x, w, b: F.gelu(x @ w + b), x, w, b)
    mm = next(s for s in g.lowered.steps if isinstance(s, MatmulStep))
    back = graph_cache._step_of(json.loads(json.dumps(graph_cache._step(mm))))
    assert back.epilogues == tuple(e._replace(ir=None) for e in mm.epilogues)
    assert back[:4] == mm[:4]


# ------------------------------------------------------------------ narrower vectors


AVX2 = "+sse4.2,+avx,+avx2,+fma,+f16c"


@pytest.mark.skipif(os.environ.get("EMBER_LLVM_FEATURES") == AVX2,
                    reason="already running with AVX2 features")
def test_avx2_vectors():
    """This module's value tests again with the JIT's vectors narrowed to AVX2."""
    env = dict(os.environ, EMBER_LLVM_FEATURES=AVX2)
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider",
                        __file__, "-k", "equal or batched or contiguous or broadcasting or "
                        "twice or threads"],
                       env=env, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    assert " passed" in r.stdout
