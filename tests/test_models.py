"""The model zoo (ember.models) against its PyTorch twins (tests/torch_models.py): with the
weights copied across by name (dropout off), the forward results, losses and every
parameter's gradient agree (float64); a small MLP and the GPT train on synthetic data with
the first five losses equal to PyTorch's (float32, rtol 1e-4) and falling; GPT.generate;
the Shakespeare corpus shipped for the char-level demo."""
import warnings

import numpy as np
import pytest

import ember
from ember import models


@pytest.fixture(scope="module")
def T(torch):
    import torch_models
    return torch_models


def to_ember(t):
    return ember.from_numpy(np.ascontiguousarray(t.detach().numpy()))


def copy_weights(tmod, emod):
    tsd, esd = tmod.state_dict(), emod.state_dict()
    assert list(tsd) == list(esd), f"keys differ:\n torch {list(tsd)}\n ember {list(esd)}"
    for k in tsd:
        assert tuple(tsd[k].shape) == tuple(esd[k].shape), k
    emod.load_state_dict({k: to_ember(v) for k, v in tsd.items()})


def _np(x):
    return x.detach().numpy()


def compare(torch, tmod, emod, make_inputs, run, rtol=1e-7, atol=1e-9, double=True):
    """Copies weights, runs both models (run(model, *inputs) -> (logits, loss)), compares
    logits, loss and all parameter gradients."""
    if double:
        tmod.double()
        emod.double()
    copy_weights(tmod, emod)
    t_in = make_inputs(torch)
    e_in = [to_ember(x) for x in t_in]
    tl, tloss = run(tmod, *t_in)
    el, eloss = run(emod, *e_in)
    np.testing.assert_allclose(_np(el), _np(tl), rtol=rtol, atol=atol, err_msg="logits")
    np.testing.assert_allclose(eloss.item(), tloss.item(), rtol=rtol, err_msg="loss")
    tloss.backward()
    eloss.backward()
    tparams = dict(tmod.named_parameters())
    names = [n for n, _ in emod.named_parameters()]
    assert names == list(tparams), "parameter order differs"
    for name, p in emod.named_parameters():
        tp = tparams[name]
        assert (p.grad is None) == (tp.grad is None), name
        if tp.grad is not None:
            np.testing.assert_allclose(_np(p.grad), _np(tp.grad), rtol=rtol * 10,
                                       atol=atol * 10, err_msg=f"grad of {name}")
    return eloss


# ================================================================== parity per model


def test_mlp(torch, T):
    def inputs(torch):
        g = torch.Generator().manual_seed(0)
        return [torch.randn(8, 3, 4, generator=g, dtype=torch.float64),
                torch.randint(0, 5, (8,), generator=g)]

    def run(m, x, y):
        logits = m(x)
        F = torch.nn.functional if isinstance(m, torch.nn.Module) else ember.nn.functional
        return logits, F.cross_entropy(logits, y)
    compare(torch, T.MLP(12, (16, 16), 5, "gelu"), models.MLP(12, (16, 16), 5, "gelu"),
            inputs, run)


@pytest.mark.parametrize("image_size", [32, 64])
def test_resnet(torch, T, image_size):
    def inputs(torch):
        g = torch.Generator().manual_seed(1)
        return [torch.randn(2, 3, image_size, image_size, generator=g, dtype=torch.float64),
                torch.randint(0, 10, (2,), generator=g)]

    def run(m, x, y):
        logits = m(x)
        F = torch.nn.functional if isinstance(m, torch.nn.Module) else ember.nn.functional
        return logits, F.cross_entropy(logits, y)
    depths = (2, 2, 2, 2) if image_size == 32 else (1, 1, 1)
    tm, em = T.ResNet(depths, 4, 10, 3, image_size), models.ResNet(depths, 4, 10, 3,
                                                                    image_size)
    compare(torch, tm, em, inputs, run)
    # batch norm's running statistics moved the same way
    for (n, a), (_, b) in zip(tm.named_buffers(), em.named_buffers()):
        np.testing.assert_allclose(_np(b), _np(a), rtol=1e-7, atol=1e-9, err_msg=n)


def test_resnet18_factory():
    m = models.resnet18(num_classes=7, width=8)
    assert len(m.layer1) == len(m.layer4) == 2
    assert m.fc.out_features == 7 and m.fc.in_features == 64
    assert tuple(m(ember.randn(1, 3, 32, 32)).shape) == (1, 7)


def _tokens(torch, vocab, shape, seed, low=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(low, vocab, shape, generator=g)


def test_gpt(torch, T):
    cfg = dict(vocab_size=40, block_size=16, n_layer=2, n_head=2, n_embd=16, dropout=0.0)
    tm, em = T.GPT(T.GPTConfig(**cfg)), models.GPT(models.GPTConfig(**cfg))
    assert em.lm_head.weight is em.transformer.wte.weight

    def inputs(torch):
        x = _tokens(torch, 40, (3, 12), 2)
        y = _tokens(torch, 40, (3, 12), 3)
        y[0, :3] = -1                      # ignored positions
        return [x, y]
    compare(torch, tm, em, inputs, lambda m, x, y: m(x, y))


def test_bert(torch, T):
    cfg = dict(vocab_size=50, hidden_size=16, num_layers=2, num_heads=2, intermediate_size=32,
               max_position=16, dropout=0.0)

    def inputs(torch):
        ids = _tokens(torch, 50, (2, 10), 4, low=1)
        mask = torch.ones(2, 10, dtype=torch.int64)
        mask[1, 7:] = 0
        ids[1, 7:] = 0
        types = torch.zeros(2, 10, dtype=torch.int64)
        types[:, 5:] = 1
        labels = torch.full((2, 10), -100)
        labels[0, 2], labels[1, 4], labels[0, 8] = 7, 9, 3
        return [ids, types, mask, labels]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tm = T.BertForMaskedLM(T.BertConfig(**cfg))
    compare(torch, tm, models.BertForMaskedLM(models.BertConfig(**cfg)), inputs,
            lambda m, ids, types, mask, labels: m(ids, types, mask, labels))

    def inputs_cls(torch):
        ids, types, mask, _ = inputs(torch)
        return [ids, types, mask, torch.tensor([1, 0])]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tm = T.BertForSequenceClassification(T.BertConfig(**cfg))
    compare(torch, tm, models.BertForSequenceClassification(models.BertConfig(**cfg)),
            inputs_cls, lambda m, ids, types, mask, labels: m(ids, types, mask, labels))


def test_seq2seq(torch, T):
    kw = dict(d_model=16, nhead=2, num_encoder_layers=2, num_decoder_layers=2,
              dim_feedforward=32, dropout=0.0, max_len=32)

    def inputs(torch):
        src = _tokens(torch, 30, (2, 9), 5, low=1)
        src[1, 6:] = 0                                  # padding
        tgt = _tokens(torch, 25, (2, 7), 6, low=1)
        tgt[0, 5:] = 0
        out = _tokens(torch, 25, (2, 7), 7, low=1)
        out[0, 5:] = 0
        return [src, tgt, out]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tm = T.Seq2SeqTransformer(30, 25, **kw)
    em = models.Seq2SeqTransformer(30, 25, **kw)
    compare(torch, tm, em, inputs, lambda m, s, t, o: m(s, t, o))
    ys = em.greedy_decode(to_ember(inputs(torch)[0]), bos=1, max_len=4)
    assert tuple(ys.shape) == (2, 5) and np.all(ys.numpy()[:, 0] == 1)


@pytest.mark.parametrize("bidirectional", [True, False])
def test_lstm_classifier(torch, T, bidirectional):
    kw = dict(embed_dim=8, hidden_size=12, num_layers=2, bidirectional=bidirectional,
              dropout=0.0)

    def inputs(torch):
        return [_tokens(torch, 30, (3, 7), 8), torch.tensor([0, 2, 1])]
    compare(torch, T.LSTMClassifier(30, 3, **kw), models.LSTMClassifier(30, 3, **kw), inputs,
            lambda m, x, y: m(x, y))


# ================================================================== training


def _train(torch, tmod, emod, batches, step_fn, make_opt, steps=5, more=0):
    """steps optimizer steps in both (losses returned), then `more` ember-only steps over
    the batches again (their losses appended to ember's)."""
    copy_weights(tmod, emod)
    topt, eopt = make_opt(torch.optim, tmod), make_opt(ember.optim, emod)
    tl, el = [], []
    for b in batches[:steps]:
        topt.zero_grad()
        loss = step_fn(tmod, *b)
        loss.backward()
        topt.step()
        tl.append(loss.item())
        eopt.zero_grad()
        loss = step_fn(emod, *[to_ember(x) for x in b])
        loss.backward()
        eopt.step()
        el.append(loss.item())
    for i in range(more):
        b = batches[i % len(batches)]
        eopt.zero_grad()
        loss = step_fn(emod, *[to_ember(x) for x in b])
        loss.backward()
        eopt.step()
        el.append(loss.item())
    return np.array(tl), np.array(el)


def test_mlp_trains_like_torch(torch, T):
    g = torch.Generator().manual_seed(10)
    w = torch.randn(6, 3, generator=g)
    batches = []
    for _ in range(5):
        x = torch.randn(32, 6, generator=g)
        batches.append((x, (x @ w).argmax(1)))

    def step(m, x, y):
        F = torch.nn.functional if isinstance(m, torch.nn.Module) else ember.nn.functional
        return F.cross_entropy(m(x), y)
    torch.manual_seed(0)
    tl, el = _train(torch, T.MLP(6, (32,), 3), models.MLP(6, (32,), 3), batches, step,
                    lambda optim, m: optim.SGD(m.parameters(), lr=0.3, momentum=0.9),
                    more=25)
    np.testing.assert_allclose(el[:5], tl, rtol=1e-4)
    assert el[-5:].mean() < 0.5 * el[0]


def _synthetic_text(torch, n, T_, vocab, seed):
    """Sequences with structure to learn: each token is the previous plus one (mod vocab),
    from a random start."""
    g = torch.Generator().manual_seed(seed)
    start = torch.randint(0, vocab, (n, 1), generator=g)
    seq = (start + torch.arange(T_ + 1)) % vocab
    return seq[:, :-1].contiguous(), seq[:, 1:].contiguous()


def test_gpt_trains_like_torch(torch, T):
    cfg = dict(vocab_size=16, block_size=12, n_layer=2, n_head=2, n_embd=16, dropout=0.0)
    batches = [_synthetic_text(torch, 8, 12, 16, s) for s in range(5)]
    torch.manual_seed(0)
    tl, el = _train(torch, T.GPT(T.GPTConfig(**cfg)), models.GPT(models.GPTConfig(**cfg)),
                    batches, lambda m, x, y: m(x, y)[1],
                    lambda optim, m: optim.AdamW(m.parameters(), lr=1e-2, weight_decay=0.1),
                    more=25)
    np.testing.assert_allclose(el[:5], tl, rtol=1e-4)
    assert el[-5:].mean() < 0.7 * el[0]      # the +1 rule is learnable: the loss falls


# ================================================================== generation, data


def test_gpt_generate(torch, T):
    cfg = dict(vocab_size=20, block_size=8, n_layer=1, n_head=2, n_embd=16)
    tm, em = T.GPT(T.GPTConfig(**cfg)), models.GPT(models.GPTConfig(**cfg))
    copy_weights(tm, em)
    idx = np.array([[1, 2, 3], [4, 5, 6]])
    out = em.generate(ember.from_numpy(idx), 10, top_k=1).numpy()   # greedy
    t = torch.from_numpy(idx)
    with torch.no_grad():
        for _ in range(10):
            logits, _ = tm(t[:, -8:])
            t = torch.cat([t, logits[:, -1].argmax(-1, keepdim=True)], 1)
    np.testing.assert_array_equal(out, t.numpy())
    g1, g2 = ember.Generator().manual_seed(4), ember.Generator().manual_seed(4)
    a = em.generate(ember.from_numpy(idx), 6, temperature=0.7, top_k=5, generator=g1).numpy()
    b = em.generate(ember.from_numpy(idx), 6, temperature=0.7, top_k=5, generator=g2).numpy()
    np.testing.assert_array_equal(a, b)
    assert a.shape == (2, 9) and a.min() >= 0 and a.max() < 20
    # top_k keeps sampling within the k most likely tokens of each step
    x = ember.from_numpy(idx)
    logits, _ = em(x)
    top = set(logits[:, -1].topk(3)[1].numpy()[0].tolist())
    for seed in range(5):
        nxt = em.generate(x, 1, top_k=3, generator=ember.Generator().manual_seed(seed))
        assert int(nxt.numpy()[0, -1]) in top


def test_shakespeare_data_and_demo():
    from ember.models import shakespeare
    text = shakespeare.load_text()
    assert text.startswith("First Citizen") and 100_000 < len(text) < 400_000
    data = shakespeare.CharData(text)
    assert data.decode(data.encode("To be")) == "To be"
    ember.manual_seed(0)
    losses = shakespeare.train(steps=12, batch_size=8, block_size=16, n_layer=1, n_embd=32,
                               n_head=2, lr=1e-2, data=data, log=None)
    assert losses[-1] < losses[0]


# ================================================================== compiled


def _zoo(name):
    idx = ember.from_numpy(np.random.default_rng(1).integers(0, 20, (2, 8)))
    if name == "mlp":
        return models.MLP(8, (16,), 3), [ember.randn(4, 8)], lambda o: o.sum()
    if name == "resnet":
        return models.ResNet((1, 1), 4), [ember.randn(2, 3, 16, 16)], lambda o: o.sum()
    if name == "gpt":
        return (models.GPT(models.GPTConfig(vocab_size=20, block_size=8, n_layer=1,
                                            n_embd=16)), [idx, idx], lambda o: o[1])
    if name == "bert":
        cfg = models.BertConfig(vocab_size=30, hidden_size=16, num_layers=1, num_heads=2,
                                intermediate_size=32, dropout=0.0)
        return models.BertForMaskedLM(cfg), [idx + 1, None, None, idx], lambda o: o[1]
    if name == "seq2seq":
        return (models.Seq2SeqTransformer(20, 20, 16, 2, 1, 1, 32, dropout=0.0),
                [idx, idx, idx], lambda o: o[1])
    return (models.LSTMClassifier(20, 3, 8, 8, 1, dropout=0.0),
            [idx, ember.tensor([0, 1])], lambda o: o[1])


@pytest.mark.parametrize("name,backend", [(m, "aot_eager") for m in
                                          ("mlp", "resnet", "gpt", "bert", "seq2seq", "lstm")] +
                         [("mlp", "llvm"), ("resnet", "llvm"), ("gpt", "llvm")])
def test_zoo_models_compile(name, backend):
    """ember.compile (capture, AOT autograd over the nn ops' decompositions, and the LLVM
    backend) gives each zoo model's eager loss, gradients and buffers (ResNet trains: its
    batch norms' statistic updates run eagerly, between graphs)."""
    import copy
    ember.compiler.reset()
    ember.manual_seed(0)
    model, inputs, loss_fn = _zoo(name)
    eager = copy.deepcopy(model)
    ref = loss_fn(eager(*inputs))
    ref.backward()
    with warnings.catch_warnings():
        warnings.simplefilter("error")          # no fallback to eager
        out = loss_fn(ember.compile(model, backend=backend)(*inputs))
    out.backward()
    np.testing.assert_allclose(out.item(), ref.item(), rtol=1e-5)
    grads = dict(eager.named_parameters())
    for n, p in model.named_parameters():
        if grads[n].grad is not None:
            # float32, summed in another order (fused reductions, im2col products): each
            # element within 1e-4 of itself or of the gradient's largest element (an
            # element that cancels down to 1e-3 of the largest keeps its absolute error)
            want = grads[n].grad.numpy()
            np.testing.assert_allclose(p.grad.numpy(), want, rtol=1e-4,
                                       atol=max(1e-6, 1e-4 * float(np.abs(want).max())),
                                       err_msg=n)
    # batch norm's running statistics: written exactly as eager writes them
    for (n, b), (_, e) in zip(model.named_buffers(), eager.named_buffers()):
        np.testing.assert_allclose(b.numpy(), e.numpy(), rtol=1e-6, atol=1e-7, err_msg=n)
