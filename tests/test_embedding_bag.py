"""nn.functional.embedding_bag and nn.EmbeddingBag against torch: the functional's input
forms (1-d with offsets, 2-d bags), its exception types, the module's constructor, state
and forward, and gradients (weight and per_sample_weights) in every mode."""
import numpy as np
import pytest

import ember

torch = pytest.importorskip("torch", reason="torch is the reference")


def _both(fn):
    return [fn(lib) for lib in (ember, torch)]


def _np(t):
    return t.detach().numpy()


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
@pytest.mark.parametrize("form", ["offsets", "2-d", "padding", "last offset"])
def test_functional_values_and_gradients_match_torch(mode, form):
    rng = np.random.default_rng(3)
    w = rng.standard_normal((12, 5))
    g = rng.standard_normal((4, 5))
    idx = rng.integers(0, 12, 10)
    kw = {"mode": mode}

    def run(lib):
        W = lib.from_numpy(w.copy()).requires_grad_()
        if form == "2-d":
            inp, off = lib.from_numpy(idx[:8].reshape(4, 2).copy()), None
        else:
            inp, off = lib.from_numpy(idx.copy()), lib.from_numpy(np.array([0, 3, 3, 7]))
        if form == "padding":
            kw["padding_idx"] = int(idx[0])
        if form == "last offset":
            off = lib.from_numpy(np.array([0, 3, 3, 7, 10]))
            kw["include_last_offset"] = True
        y = lib.nn.functional.embedding_bag(inp, W, off, **kw)
        y.backward(lib.from_numpy(g[:y.shape[0]].copy()))
        return _np(y), _np(W.grad)
    got, want = _both(run)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)


def test_per_sample_weights_gradients_match_torch():
    rng = np.random.default_rng(4)
    w, p = rng.standard_normal((6, 3)), rng.standard_normal((3, 4))

    def run(lib):
        W = lib.from_numpy(w.copy()).requires_grad_()
        P = lib.from_numpy(p.copy()).requires_grad_()
        y = lib.nn.functional.embedding_bag(lib.from_numpy(np.array([[0, 1, 5, 1], [2, 2, 3, 4],
                                                                      [5, 0, 0, 1]])),
                                            W, mode="sum", per_sample_weights=P)
        (y * y).sum().backward()
        return _np(y), _np(W.grad), _np(P.grad)
    for a, b in zip(*_both(run)):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)


def test_scale_grad_by_freq_divides_by_each_index_count():
    """Each row's gradient divided by how often its index occurs (as F.embedding's, and
    torch's documented meaning; torch 2.13's CPU embedding_bag divides some rows by another
    index's count, pytorch/pytorch#190063, so torch's own embedding is the reference)."""
    rng = np.random.default_rng(5)
    w = rng.standard_normal((10, 3))
    idx = np.array([1, 2, 4, 5, 4, 3, 2, 9, 4])
    W = ember.from_numpy(w.copy()).requires_grad_()
    y = ember.nn.functional.embedding_bag(ember.from_numpy(idx), W, ember.tensor([0]),
                                          mode="sum", scale_grad_by_freq=True)
    y.sum().backward()
    TW = torch.from_numpy(w.copy()).requires_grad_()
    torch.nn.functional.embedding(torch.from_numpy(idx), TW, scale_grad_by_freq=True).sum() \
        .backward()
    np.testing.assert_allclose(_np(W.grad), _np(TW.grad), rtol=1e-12)
    np.testing.assert_array_equal(_np(y), w[idx].sum(0, keepdims=True))


@pytest.mark.parametrize("call", [
    lambda L, i, w: L.nn.functional.embedding_bag(i.reshape(2, 2), w, L.tensor([0, 1])),
    lambda L, i, w: L.nn.functional.embedding_bag(i, w),
    lambda L, i, w: L.nn.functional.embedding_bag(i.reshape(1, 2, 2), w),
    lambda L, i, w: L.nn.functional.embedding_bag(i, w, L.tensor([[0]])),
    lambda L, i, w: L.nn.functional.embedding_bag(i, w, L.tensor([0]), mode="prod"),
    lambda L, i, w: L.nn.functional.embedding_bag(i, w, L.tensor([0]), mode="max",
                                                  scale_grad_by_freq=True),
    lambda L, i, w: L.nn.functional.embedding_bag(i, w, L.tensor([0]), mode="max",
                                                  sparse=True),
    lambda L, i, w: L.nn.functional.embedding_bag(i, w, L.tensor([0]), mode="mean",
                                                  per_sample_weights=L.ones(4)),
    lambda L, i, w: L.nn.functional.embedding_bag(i, w, L.tensor([0]),
                                                  per_sample_weights=L.ones(3)),
    lambda L, i, w: L.nn.functional.embedding_bag(i, w[0], L.tensor([0])),
    lambda L, i, w: L.nn.functional.embedding_bag(i, w, L.tensor([1])),
])
def test_functional_exceptions_are_torchs(call):
    errs = []
    for lib in (ember, torch):
        with pytest.raises(Exception) as e:
            call(lib, lib.tensor([1, 2, 3, 4]), lib.ones(6, 3))
        errs.append(e.value)
    assert type(errs[0]) is type(errs[1]), errs
    if type(errs[0]) is not RuntimeError:       # the functional's own messages
        assert str(errs[0]).replace("ember", "torch") == str(errs[1]), errs


def test_module_matches_torch():
    rng = np.random.default_rng(6)
    for kw in ({"mode": "sum"}, {"mode": "max", "padding_idx": 2},
               {"mode": "mean", "include_last_offset": True, "max_norm": 1.0}):
        mods = [lib.nn.EmbeddingBag(8, 3, **kw) for lib in (ember, torch)]
        w = rng.standard_normal((8, 3)).astype(np.float32)
        if "padding_idx" in kw:
            w[2] = 0
        for m, lib in zip(mods, (ember, torch)):
            m.load_state_dict({"weight": lib.from_numpy(w.copy())})
        assert repr(mods[0]) == repr(mods[1])
        assert mods[0].weight.requires_grad and list(mods[0].state_dict()) == ["weight"]
        idx, off = rng.integers(0, 8, 7), np.array([0, 2, 2, 5])
        if kw.get("include_last_offset"):
            off = np.array([0, 2, 2, 5, 7])
        outs = [m(lib.from_numpy(idx.copy()), lib.from_numpy(off.copy()))
                for m, lib in zip(mods, (ember, torch))]
        for o in outs:
            o.sum().backward()
        np.testing.assert_allclose(_np(outs[0]), _np(outs[1]), rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(_np(mods[0].weight.grad), _np(mods[1].weight.grad),
                                   rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(_np(mods[0].weight), _np(mods[1].weight), rtol=1e-6)
    e = ember.nn.EmbeddingBag(5, 2, padding_idx=-1)
    assert e.padding_idx == 4 and np.all(_np(e.weight)[4] == 0)
    pre = ember.nn.EmbeddingBag.from_pretrained(ember.ones(3, 2), mode="sum")
    assert not pre.weight.requires_grad
    np.testing.assert_array_equal(_np(pre(ember.tensor([[0, 1]]))), [[2.0, 2.0]])


@pytest.mark.parametrize("backend", ["aot_eager", "llvm"])
@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_compiled_bags_equal_eager(backend, mode):
    from ember.capture import counters
    rng = np.random.default_rng(7)
    w = rng.standard_normal((10, 4)).astype(np.float32)

    def f(W, i, o):
        return ember.nn.functional.embedding_bag(i, W, o, mode=mode, padding_idx=3)
    ember.compiler.reset()
    before = sum(counters["backend_fallback"].values())
    outs = []
    for fn in (ember.compile(f, backend=backend), f):
        W = ember.from_numpy(w.copy()).requires_grad_()
        y = fn(W, ember.tensor([1, 2, 4, 3, 4, 3, 2, 9]), ember.tensor([0, 3, 3]))
        (y * y).sum().backward()
        outs.append((_np(y), _np(W.grad)))
    assert sum(counters["backend_fallback"].values()) == before
    for a, b in zip(*outs):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_one_and_two_threads_give_the_same_bits(mode):
    """Bags, weight-gradient column blocks and per-sample-weight gradients on the pool in
    fixed chunks: the same bits at 1 and 2 threads."""
    rng = np.random.default_rng(21)
    w = rng.standard_normal((3000, 72)).astype(np.float32)
    idx = rng.integers(0, 3000, 6000)
    off = np.sort(rng.choice(6000, 600, replace=False))
    off[0] = 0
    psw = rng.standard_normal(6000).astype(np.float32) if mode == "sum" else None
    res = []
    prev = ember.get_num_threads()
    try:
        for n in (1, 2):
            ember.set_num_threads(n)
            W = ember.from_numpy(w.copy()).requires_grad_()
            P = None if psw is None else ember.from_numpy(psw.copy()).requires_grad_()
            y = ember.nn.functional.embedding_bag(
                ember.from_numpy(idx), W, ember.from_numpy(off), mode=mode,
                per_sample_weights=P, scale_grad_by_freq=mode == "mean")
            (y * y).sum().backward()
            res.append([y.detach().numpy(), W.grad.numpy()] +
                       ([] if P is None else [P.grad.numpy()]))
    finally:
        ember.set_num_threads(prev)
    for u, v in zip(*res):
        assert u.tobytes() == v.tobytes()


@pytest.mark.parametrize("cls", ["Embedding", "EmbeddingBag"])
def test_embedding_tables_construct_as_torchs(cls):
    """Embedding and EmbeddingBag share their table's construction (nn/modules/sparse.py):
    padding_idx checks and messages, a negative padding_idx made non-negative and its row
    zeroed, _weight's shape check, from_pretrained's freeze and 2-d check."""
    for lib in (ember, torch):
        C = getattr(lib.nn, cls)
        for bad in (5, -6):
            with pytest.raises(AssertionError, match="adding_idx must be within num_embeddings"):
                C(5, 3, padding_idx=bad)
        m = C(5, 3, padding_idx=-2)
        assert m.padding_idx == 3 and float(m.weight.detach()[3].abs().sum()) == 0.0
        with pytest.raises(AssertionError, match="Shape of weight does not match"):
            C(5, 3, _weight=lib.zeros(4, 3))
        with pytest.raises(AssertionError, match="expected to be 2-dimensional"):
            C.from_pretrained(lib.zeros(4))
        w = lib.from_numpy(np.arange(6.0).reshape(3, 2))
        assert not C.from_pretrained(w).weight.requires_grad
        assert C.from_pretrained(w, freeze=False).weight.requires_grad
    msgs = []
    for lib in (ember, torch):
        with pytest.raises(AssertionError) as e:
            getattr(lib.nn, cls)(5, 3, padding_idx=7)
        msgs.append(str(e.value))
    assert msgs[0] == msgs[1]
