"""float16 and bfloat16 under the LLVM backend: kernels load and store them at their
width and compute in float32, rounding to nearest even where a value is stored.

A fused kernel rounds each value it stores once, where eager (like PyTorch eager)
rounds every op's result: like TorchInductor, whose tests compare low-precision graphs
with the same graph computed in float32 ("reference in float"), the compiled result is
compared

- with eager Ember's float32 computation rounded to the dtype at the relative
  tolerance torch.testing.assert_close uses by default for the dtype (bfloat16:
  rtol 1.6e-2, float16: rtol 1e-3), with an absolute tolerance of the same size
  (where a rounded intermediate such as a matmul's product cancels, the error is
  relative to the operands, not to the result);
- with eager Ember in the dtype itself and with PyTorch eager in the dtype at `LOOSE`
  (a few units in the last place), as those round every op and their error grows
  with the number of ops;
- with torch.compile (TorchInductor, rounding once per kernel too) for one chain, at
  the dtype's default tolerance, and exactly where eager's per-op rounding shows.

No graph here may fall back to aot_eager (the counter is asserted). The conversion
itself is checked bit for bit against NumPy's float16 and ml_dtypes' bfloat16 casts
(ties, NaN, infinities, the largest finite values and overflow, subnormals), on the
host's path and, in subprocesses, on the integer-operation paths forced with
EMBER_LLVM_FEATURES (the host's features without AVX512_BF16; SSE4.2 only, without
F16C or AVX-512: float16 converts with integer operations too). On a host with
AVX512_BF16, bfloat16 narrows with its instruction, which treats float32 subnormals as
zeros: there they are checked to become zeros of their sign.
"""
import os
import subprocess
import sys
import warnings

import numpy as np
import pytest

import ember
from ember import _C
from ember.capture import _hook, counters
from ember.compiler.jit import JitModule
from ember.compiler.loop_ir import Kernel, LoopIRError, Param, Stmt, verify

pytestmark = pytest.mark.skipif(not _hook.available, reason="capture needs CPython 3.11")

LOWP = [ember.bfloat16, ember.float16]
IDS = ["bfloat16", "float16"]
# torch.testing.assert_close's default rtol for the dtype, as atol too
TORCH_TOL = {ember.bfloat16: dict(rtol=1.6e-2, atol=1.6e-2),
             ember.float16: dict(rtol=1e-3, atol=1e-3)}
# against computations rounding every op: a few units in the last place, absolute ones
# for results near zero (cancellation)
LOOSE = {ember.bfloat16: dict(rtol=4e-2, atol=4e-2),
         ember.float16: dict(rtol=4e-3, atol=4e-3)}
_NARROW = "+sse2,+sse3,+ssse3,+sse4.1,+sse4.2,+popcnt"
_FEATURES = _C._jit_target()["features"].split(",")
# bfloat16 narrows with the AVX512_BF16 instruction (float32 subnormals become zeros)
NATIVE_BF16 = "+avx512bf16" in _FEATURES and "+avx512vl" in _FEATURES
# float16 converts with F16C's instructions at AVX-512 width
NATIVE_F16 = "+f16c" in _FEATURES and "+avx512f" in _FEATURES


@pytest.fixture(autouse=True)
def no_fallback():
    """Every graph of a test (backward graphs too, compiled at the first backward)
    compiles under the LLVM backend."""
    before = sum(counters["llvm_fallback"].values())
    yield
    assert sum(counters["llvm_fallback"].values()) == before, \
        dict(counters["llvm_fallback"])


def _torch_dtype(torch, dtype):
    return getattr(torch, dtype._name)


def compiled(fn):
    """fn compiled by the LLVM backend; calling it asserts no graph fell back."""
    cfn = ember.compile(fn, backend="llvm")

    def call(*args):
        before = sum(counters["llvm_fallback"].values())
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)
            out = cfn(*args)
        assert sum(counters["llvm_fallback"].values()) == before, \
            dict(counters["llvm_fallback"])
        return out
    return call


def f32(t):
    return t.float().detach().numpy()


def randn(dtype, *shape, seed=0, scale=1.0):
    g = np.random.default_rng(seed)
    return ember.from_numpy((g.standard_normal(shape) * scale).astype(np.float32)).to(dtype)


def check(fn, dtype, *args, torch=None, ref_tol=TORCH_TOL):
    """fn compiled vs eager in float32 rounded once (at ref_tol: LOOSE where the graph
    rounds intermediates it must store, as a matmul's operands), vs eager in dtype, vs
    torch."""
    got = compiled(fn)(*args)
    got = got if isinstance(got, tuple) else (got,)
    ref32 = fn(*[a.float() for a in args])
    ref32 = ref32 if isinstance(ref32, tuple) else (ref32,)
    eager = fn(*args)
    eager = eager if isinstance(eager, tuple) else (eager,)
    for g, r, e in zip(got, ref32, eager):
        assert g.dtype is e.dtype, (g.dtype, e.dtype)
        np.testing.assert_allclose(f32(g), f32(r.to(g.dtype)), **ref_tol[dtype])
        np.testing.assert_allclose(f32(g), f32(e), **LOOSE[dtype])
    if torch is not None:
        targs = [torch.from_numpy(f32(a)).to(_torch_dtype(torch, dtype)) for a in args]
        want = fn(*targs)
        want = want if isinstance(want, tuple) else (want,)
        for g, w in zip(got, want):
            np.testing.assert_allclose(f32(g), w.float().numpy(), **LOOSE[dtype])
    return got


# ------------------------------------------------------------------ conversions


def _edge_bits():
    """float32 bit patterns around every rounding decision of both dtypes."""
    g = np.random.default_rng(1)
    special = [
        0x00000000, 0x80000000, 0x7f800000, 0xff800000,        # +-0, +-inf
        0x7fc00000, 0xffc00000, 0x7f800001, 0xffbfffff,        # NaN: quiet, signalling
        0x3f808000, 0x3f818000, 0x3f808001, 0x3f817fff,        # bfloat16 ties, near ties
        0x7f7fffff, 0xff7fffff, 0x7f7f7fff, 0x7f7f8000,        # largest float32, bf16 overflow
        0x00000001, 0x80000001, 0x007fffff, 0x00008000, 0x00018000,   # float32 subnormals
        0x477fe000, 0x477fefff, 0x477ff000, 0x47800000,        # float16 max, overflow
        0x3f801000, 0x3f803000, 0x3f801001,                    # float16 ties
        0x33000000, 0x33000001, 0x33800000, 0x387fc000, 0x38800000, 0x337fffff,  # f16 subn.
    ]
    return np.concatenate([np.array(special, dtype=np.uint32),
                           g.integers(0, 2 ** 32, 200_000, dtype=np.uint64).astype(np.uint32),
                           np.arange(0, 2 ** 32, 65537, dtype=np.uint64).astype(np.uint32)])


def _reference_cast(x, dtype):
    import ml_dtypes
    with np.errstate(all="ignore"):
        return x.astype(ml_dtypes.bfloat16 if dtype is ember.bfloat16 else np.float16)


@pytest.mark.parametrize("dtype", LOWP, ids=IDS)
def test_narrowing_rounds_to_nearest_even_as_numpy(dtype):
    x = _edge_bits().view(np.float32)
    got = compiled(lambda a: a.to(dtype))(ember.from_numpy(x.copy()))
    assert got.dtype is dtype
    got_bits = got.numpy().view(np.uint16)
    want = _reference_cast(x, dtype)
    nan = np.isnan(x)
    if dtype is ember.bfloat16 and NATIVE_BF16:
        # the instruction treats subnormal inputs as zeros of their sign
        sub = (x.view(np.uint32) & 0x7f800000 == 0) & (x.view(np.uint32) & 0x7fffff != 0)
        assert (got_bits[sub] == (x.view(np.uint32)[sub] >> 16) & 0x8000).all()
        assert 1000 < sub.sum() < x.size / 2
        want = np.where(sub, np.copysign(np.float32(0), x), x)
        want = _reference_cast(want, dtype)
        x = np.where(sub, np.copysign(np.float32(0), x), x)
    bad = np.flatnonzero((got_bits != want.view(np.uint16)) & ~nan)
    assert bad.size == 0, [(hex(b), hex(got_bits[i]), hex(want.view(np.uint16)[i]))
                           for i, b in zip(bad[:5], x.view(np.uint32)[bad[:5]])]
    # NaN stays NaN with its sign; bfloat16's is ml_dtypes' quiet NaN bit for bit
    assert np.isnan(got.float().numpy()[nan]).all()
    assert (got_bits[nan] >> 15 == x.view(np.uint32)[nan] >> 31).all()
    if dtype is ember.bfloat16 and not NATIVE_BF16:
        assert (got_bits[nan] == want.view(np.uint16)[nan]).all()
    # the eager cast agrees (eager converts with NumPy / ml_dtypes)
    eager_bits = ember.from_numpy(x.copy()).to(dtype).numpy().view(np.uint16)
    assert (got_bits[~nan] == eager_bits[~nan]).all()


@pytest.mark.parametrize("dtype", LOWP, ids=IDS)
def test_widening_is_exact_for_every_bit_pattern(dtype):
    h = np.arange(2 ** 16, dtype=np.uint32).astype(np.uint16)
    t = ember.from_numpy(h.view(_reference_cast(np.zeros(1, np.float32), dtype).dtype).copy())
    assert t.dtype is dtype
    got = compiled(lambda a: a.float())(t).numpy()
    want = t.float().numpy()
    same = (got.view(np.uint32) == want.view(np.uint32)) | (np.isnan(got) & np.isnan(want))
    assert same.all(), np.flatnonzero(~same)[:5]


@pytest.mark.parametrize("dtype", LOWP, ids=IDS)
def test_conversions_between_dtypes(dtype):
    other = ember.float16 if dtype is ember.bfloat16 else ember.bfloat16
    x = ember.tensor([1.5, -2.25, 1e5, 3.0e-5, 0.1, 300.7, -0.0, float("inf")],
                     dtype=ember.float32).to(dtype)

    def fn(a):
        return a.to(other), a.double(), a.to(ember.int32), a > 1, a.to(other).to(dtype)
    with np.errstate(all="ignore"):
        got = compiled(fn)(x)
        want = fn(x)
    for g, w in zip(got, want):
        assert g.dtype is w.dtype
        np.testing.assert_array_equal(g.float().numpy() if g.dtype.is_floating_point
                                      else g.numpy(), w.float().numpy()
                                      if w.dtype.is_floating_point else w.numpy())


def test_float32_to_bfloat16_rounds_at_an_explicit_conversion_only():
    """x.to(bfloat16) rounds; values computed in float32 between two bfloat16 ops are
    rounded only where stored (one rounding per kernel, as TorchInductor)."""
    x = ember.tensor([1 + 2 ** -9, 1 + 3 * 2 ** -9], dtype=ember.float32)
    got = compiled(lambda a: a.bfloat16().float() - 1)(x)
    assert got.tolist() == [0.0, 2 ** -7]
    b = ember.tensor([1.0, 1.0], dtype=ember.bfloat16)
    # (b + 2**-9) - 1 in float32: 2**-9, where eager rounds b + 2**-9 to 1 first
    assert compiled(lambda a: (a + 2 ** -9) - 1)(b).tolist() == [2 ** -9, 2 ** -9]


def _torch_compile(torch, fn):
    compiled_fn = torch.compile(fn)

    def call(*args):
        try:
            return compiled_fn(*args)
        except Exception as e:   # noqa: BLE001 - no C++ compiler for TorchInductor here
            pytest.skip(f"torch.compile does not run here: {type(e).__name__}")
    return call


@pytest.mark.parametrize("dtype", LOWP, ids=IDS)
def test_rounds_once_per_kernel_like_torch_compile(dtype, torch):
    """(x + eps/2) - 1 of ones: eager (Ember's, PyTorch's) rounds x + eps/2 to 1 first
    and gives 0; TorchInductor and this backend compute the kernel in float32 and round
    once, giving eps/2. A fused chain of transcendentals agrees with TorchInductor's
    within the dtype's default tolerance."""
    tdt = _torch_dtype(torch, dtype)
    half_eps = 2.0 ** (-9 if dtype is ember.bfloat16 else -12)
    fn = lambda a: (a + half_eps) - 1  # noqa: E731
    ones = ember.ones(4, dtype=dtype)
    want = _torch_compile(torch, fn)(torch.ones(4, dtype=tdt))
    assert want.tolist() == [half_eps] * 4
    assert compiled(fn)(ones).tolist() == [half_eps] * 4
    assert fn(ones).tolist() == [0.0] * 4

    def chain(a, b):
        return ((a * b + 1).tanh() * a.sigmoid()).relu() - b / 3
    x, y = randn(dtype, 37, 45), randn(dtype, 37, 45, seed=1)
    want = _torch_compile(torch, chain)(*(torch.from_numpy(f32(t)).to(tdt) for t in (x, y)))
    np.testing.assert_allclose(f32(compiled(chain)(x, y)), want.float().numpy(),
                               **TORCH_TOL[dtype])


# ------------------------------------------------------------------ graphs


@pytest.mark.parametrize("dtype", LOWP, ids=IDS)
def test_elementwise_chain(dtype, torch):
    def fn(a, b):
        lib = ember if isinstance(a, ember.Tensor) else torch
        y = ((a * b + 1).tanh() * a.sigmoid()).relu() - b / 3
        return y, lib.where(a > b, a.exp(), b * 2), (a - b).abs().sqrt()
    check(fn, dtype, randn(dtype, 37, 45), randn(dtype, 37, 45, seed=1), torch=torch)


@pytest.mark.parametrize("dtype", LOWP, ids=IDS)
def test_reductions(dtype, torch):
    def fn(a):
        return a.sum(1), a.mean(0), a.amax(1), a.amin(0), a.sum(), a.softmax(-1)
    check(fn, dtype, randn(dtype, 64, 96), torch=torch)


@pytest.mark.parametrize("dtype", LOWP, ids=IDS)
def test_column_sum_accumulates_in_float32(dtype):
    """A reduction over the outer dim (accumulated in memory) and one over the inner dim
    of 4096 ones: accumulated in the dtype they would stop at 256 (bfloat16) or 2048."""
    x = ember.ones(4096, 16, dtype=dtype)
    got = compiled(lambda a: (a.sum(0), a.t().sum(1), (a * 1).sum(0)))(x)
    for g in got:
        assert g.dtype is dtype and g.tolist() == [4096.0] * 16


@pytest.mark.parametrize("dtype", LOWP, ids=IDS)
def test_layer_norm(dtype, torch):
    w = randn(dtype, 96, seed=3)
    b = randn(dtype, 96, seed=4)

    def fn(x):
        mod = ember.nn.functional if isinstance(x, ember.Tensor) else torch.nn.functional
        ww = w if isinstance(x, ember.Tensor) else torch.from_numpy(f32(w)).to(x.dtype)
        bb = b if isinstance(x, ember.Tensor) else torch.from_numpy(f32(b)).to(x.dtype)
        return mod.layer_norm(x, (96,), ww.to(x.dtype), bb.to(x.dtype), 1e-5)
    check(fn, dtype, randn(dtype, 32, 96, scale=3.0), torch=torch)


@pytest.mark.parametrize("dtype", LOWP, ids=IDS)
def test_matmul_graph(dtype, torch):
    def fn(x, w, b):
        h = (x @ w + b).relu()
        return h, (h @ w.t()).sum(-1)
    check(fn, dtype, randn(dtype, 16, 64), randn(dtype, 64, 64, seed=1, scale=0.2),
          randn(dtype, 64, seed=2), torch=torch, ref_tol=LOOSE)


def _mlp(lib, dtype, seed=0):
    g = np.random.default_rng(seed)
    model = lib.nn.Sequential(lib.nn.Linear(32, 64), lib.nn.GELU(), lib.nn.LayerNorm(64),
                              lib.nn.Linear(64, 10))
    with lib.no_grad():
        for p in model.parameters():
            p.copy_(lib.from_numpy((g.standard_normal(tuple(p.shape)) * 0.2)
                                   .astype(np.float32)))
    return model.to(dtype)


@pytest.mark.parametrize("dtype", LOWP, ids=IDS)
def test_mlp_forward_and_training_step(dtype, torch):
    """A small MLP's forward, loss, backward and an SGD step under ember.compile in the
    dtype, against the same model eagerly in Ember and in PyTorch."""
    x = randn(dtype, 16, 32, seed=5)
    target = randn(dtype, 16, 10, seed=6)

    def step(model, x, target):
        loss = ((model(x) - target) ** 2).mean()
        loss.backward()
        return loss

    results = {}
    for name in ("compiled", "eager"):
        model = _mlp(ember, dtype)
        fn = compiled(lambda x, t: step(model, x, t)) if name == "compiled" else \
            (lambda x, t: step(model, x, t))
        loss = fn(x, target)
        grads = [p.grad for p in model.parameters()]
        assert loss.dtype is dtype and all(g.dtype is dtype for g in grads)
        with ember.no_grad():
            for p in model.parameters():
                p -= 0.1 * p.grad
        results[name] = (loss.float().item(), [f32(g) for g in grads],
                         f32(model(x)))
    tmodel = _mlp(torch, _torch_dtype(torch, dtype))
    tx = torch.from_numpy(f32(x)).to(_torch_dtype(torch, dtype))
    tt = torch.from_numpy(f32(target)).to(_torch_dtype(torch, dtype))
    tloss = step(tmodel, tx, tt)
    tgrads = [p.grad.float().numpy() for p in tmodel.parameters()]
    with torch.no_grad():
        for p in tmodel.parameters():
            p -= 0.1 * p.grad
    results["torch"] = (tloss.float().item(), tgrads, tmodel(tx).detach().float().numpy())

    loss, grads, after = results["compiled"]
    for ref in ("eager", "torch"):
        rloss, rgrads, rafter = results[ref]
        tol = LOOSE[dtype]
        assert abs(loss - rloss) <= tol["rtol"] * abs(rloss), (ref, loss, rloss)
        for g, r in zip(grads, rgrads):
            scale = max(np.abs(r).max(), 1e-3)
            np.testing.assert_allclose(g, r, rtol=tol["rtol"], atol=tol["atol"] * scale,
                                       err_msg=ref)
        np.testing.assert_allclose(after, rafter, **tol, err_msg=ref)


@pytest.mark.parametrize("dtype", LOWP, ids=IDS)
def test_gpt_forward_and_backward(dtype):
    """The zoo's GPT (attention, layer norms, GELU MLPs, tied head, cross entropy) in
    the dtype: compiled forward and backward against eager."""
    import copy
    from ember.models import GPT, GPTConfig
    ember.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=64, block_size=32, n_layer=2, n_head=2,
                          n_embd=64)).to(dtype)
    twin = copy.deepcopy(model)
    idx = ember.randint(0, 64, (4, 32))
    targets = ember.randint(0, 64, (4, 32))
    logits, loss = compiled(model)(idx, targets)
    loss.backward()
    want_logits, want_loss = twin(idx, targets)
    want_loss.backward()
    tol = LOOSE[dtype]
    assert loss.dtype is dtype and logits.dtype is dtype
    assert abs(loss.item() - want_loss.item()) <= tol["rtol"] * abs(want_loss.item())
    np.testing.assert_allclose(f32(logits), f32(want_logits), **tol)
    for (name, p), q in zip(model.named_parameters(), twin.parameters()):
        assert p.grad.dtype is dtype
        want = f32(q.grad)
        np.testing.assert_allclose(f32(p.grad), want, rtol=tol["rtol"],
                                   atol=tol["atol"] * max(np.abs(want).max(), 1e-3),
                                   err_msg=name)


# ------------------------------------------------------------------ the loop IR


def _kernel(dtype, stmts):
    return Kernel("k", (4,), 0, [Param(("in", 0), dtype, 4), Param(("buf", 0), dtype, 4)],
                  stmts)


@pytest.mark.parametrize("dtype", LOWP, ids=IDS)
def test_loop_ir_computes_in_float32_only(dtype):
    from ember.compiler.loop_ir import Affine
    i = Affine((1,))
    ok = [Stmt("load", 0, None, (), 0, i), Stmt("cast", 1, _C.float32, (0,)),
          Stmt("mul", 2, _C.float32, (1, 1)), Stmt("cast", 3, dtype, (2,)),
          Stmt("store", None, None, (3,), 1, i)]
    k = verify(_kernel(dtype, ok))
    JitModule((k.spec(),), "lowp_ok")
    bad = [Stmt("load", 0, None, (), 0, i), Stmt("mul", 1, dtype, (0, 0)),
           Stmt("store", None, None, (1,), 1, i)]
    with pytest.raises(LoopIRError, match="storage dtype"):
        verify(_kernel(dtype, bad))
    with pytest.raises(NotImplementedError, match="computed in float32"):
        JitModule((_kernel(dtype, bad).spec(),), "lowp_bad")
    # a store takes a register of the buffer's dtype (a cast rounds first)
    unrounded = ok[:3] + [Stmt("store", None, None, (2,), 1, i)]
    with pytest.raises(LoopIRError, match="insert a cast"):
        verify(_kernel(dtype, unrounded))


def test_kernels_load_and_store_16_bits():
    """No LLVM `bfloat` anywhere (LLVM 14 aborts on its arithmetic); bfloat16 moves as
    i16 vectors, and the loop is vectorised."""
    from ember.aot import decompose, trace_joint
    from ember.compiler.backend import CompiledLLVMGraph
    x = randn(ember.bfloat16, 64, 64)
    g = CompiledLLVMGraph(decompose(trace_joint(lambda a: (a * 2).exp(), [x]).graph), "bf")
    ir = g.module.optimized_ir
    assert "bfloat" not in ir
    assert "x i16>" in ir, ir[:3000]


def test_native_conversions_are_vectorised():
    """On a host with AVX512_BF16 the vectorised loop narrows bfloat16 16 lanes at a
    time with its instruction, on one with F16C and AVX-512 float16 both ways with
    F16C's; without them, no trace of them. LLVM's vector `half` type is never used
    (LLVM 14 scalarises it)."""
    from ember.aot import decompose, trace_joint
    from ember.compiler.backend import CompiledLLVMGraph
    x = randn(ember.float32, 64, 64)

    def ir_of(fn, *args):
        return CompiledLLVMGraph(decompose(trace_joint(fn, list(args)).graph),
                                 "native").module.optimized_ir
    ir = ir_of(lambda a: (a * 2).bfloat16(), x)
    vector = "call <16 x i16> @llvm.x86.avx512bf16.cvtneps2bf16.512(<16 x float>"
    assert (vector in ir) == NATIVE_BF16
    assert ("avx512bf16" in ir) == NATIVE_BF16
    h = x.half()
    ir = ir_of(lambda a, b: ((a * b + 1).tanh() * a.sigmoid()).relu() - b / 3, h, h)
    assert "x half>" not in ir
    assert ("call <16 x float> @llvm.x86.avx512.mask.vcvtph2ps.512(<16 x i16>" in ir) \
        == NATIVE_F16
    assert ("call <16 x i16> @llvm.x86.avx512.mask.vcvtps2ph.512(<16 x float>" in ir) \
        == NATIVE_F16


# ------------------------------------------------------------------ the other paths


def _without_native():
    """The host's features without AVX512_BF16 (the integer path at the host's width)."""
    return ",".join("-avx512bf16" if f == "+avx512bf16" else f for f in _FEATURES)


@pytest.mark.skipif(os.environ.get("EMBER_LLVM_FEATURES") is not None,
                    reason="already running with forced features")
@pytest.mark.parametrize("features", ["host_without_avx512bf16", "sse4.2"])
def test_integer_conversion_paths(features):
    """The tests above, JIT-compiled without AVX512_BF16 (bfloat16 narrows with integer
    operations), and for SSE4.2 (float16 converts with integer operations too)."""
    forced = _without_native() if features == "host_without_avx512bf16" else _NARROW
    if "+avx512bf16" not in _FEATURES and features == "host_without_avx512bf16":
        pytest.skip("the host has no AVX512_BF16: the main run is this one")
    env = dict(os.environ, EMBER_LLVM_FEATURES=forced)
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                        "-k", "narrowing or widening or conversions or chain or reductions "
                        "or column_sum or matmul_graph or native_conversions", __file__],
                       env=env, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    assert " passed" in r.stdout and "skipped" not in r.stdout.split("\n")[-2], r.stdout
