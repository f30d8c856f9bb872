"""[capture-2] "every zoo model's forward and training step compile with breaks only where
Dynamo breaks": for each model of the zoo (ember.models) and its PyTorch twin
(tests/torch_models.py, same constructor arguments), torch 2.13's
torch._dynamo.explain is run here on the same function (never a count taken from
ember), and ember's graph and break counts are no more than torch's, with nothing
falling back (where torch skips the frame, the LSTM's forward, ember captures it
whole). Functions: the forward (eval and train mode) and a training step
(zero_grad, forward, the model's own loss where it computes one (GPT with targets,
BERT's masked-LM labels) else a mean square, backward, then SGD with momentum or AdamW:
torch breaks at the backward)."""
import numpy as np
import pytest

import ember
from ember import models
from ember.capture import _hook, counters

pytestmark = pytest.mark.skipif(not _hook.available, reason="capture needs CPython 3.11")


def zoo():
    """(name, make(zoo module), inputs as NumPy arrays)."""
    g = np.random.default_rng(0)
    return [
        ("MLP", lambda z: z.MLP(16, (32, 32), 4),
         [g.standard_normal((8, 16)).astype(np.float32)]),
        ("ResNet", lambda z: z.ResNet(depths=(1, 1), width=8),
         [g.standard_normal((2, 3, 16, 16)).astype(np.float32)]),
        ("GPT", lambda z: z.GPT(z.GPTConfig(vocab_size=50, block_size=16, n_layer=2,
                                            n_head=2, n_embd=32)),
         [g.integers(0, 50, (2, 16))]),
        ("GPTWithTargets", lambda z: z.GPT(z.GPTConfig(
            vocab_size=50, block_size=16, n_layer=2, n_head=2, n_embd=32, dropout=0.1)),
         [g.integers(0, 50, (2, 16)), g.integers(0, 50, (2, 16))]),
        ("BERT", lambda z: z.BertForSequenceClassification(z.BertConfig(
            vocab_size=40, hidden_size=32, num_layers=1, num_heads=2,
            intermediate_size=64, max_position=16)),
         [g.integers(0, 40, (2, 12))]),
        ("BertForMaskedLM", lambda z: z.BertForMaskedLM(z.BertConfig(
            vocab_size=40, hidden_size=32, num_layers=1, num_heads=2,
            intermediate_size=64, max_position=16)),
         [g.integers(0, 40, (2, 12)), None, None,
          np.where(g.random((2, 12)) < 0.3, g.integers(0, 40, (2, 12)), -100)]),
        ("Seq2SeqTransformer", lambda z: z.Seq2SeqTransformer(50, 50),
         [g.integers(1, 50, (2, 10)), g.integers(1, 50, (2, 9))]),
        ("LSTMClassifier", lambda z: z.LSTMClassifier(50, 3),
         [g.integers(1, 50, (2, 12))]),
    ]


def _loss(out):
    """The model's own loss where it returns (logits, loss), else the mean square of
    its (first) output."""
    if isinstance(out, (tuple, list)) and len(out) == 2 and out[1] is not None and \
            out[1].ndim == 0:
        return out[1]
    first = out[0] if isinstance(out, (tuple, list)) else out
    return (first * first).mean()


def _function(lib, zoo_module, make, kind):
    lib.manual_seed(0)
    model = make(zoo_module)
    if kind == "eval forward":
        model.eval()
        return model
    model.train()
    if kind == "train forward":
        return model
    if kind == "train step adamw":
        opt = lib.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    else:
        opt = lib.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    def step(*inputs):
        opt.zero_grad()
        loss = _loss(model(*inputs))
        loss.backward()
        opt.step()
        return loss
    return step


def _counts(lib, zoo_module, explain, make, data, kind):
    fn = _function(lib, zoo_module, make, kind)
    out = explain(fn)(*[None if d is None else lib.from_numpy(d.copy()) for d in data])
    return out.graph_count, out.graph_break_count, [str(r) for r in out.break_reasons]


KINDS = ["eval forward", "train forward", "train step", "train step adamw"]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name,make,data", zoo(), ids=[c[0] for c in zoo()])
def test_zoo_counts_are_no_more_than_torchs(torch, name, make, data, kind):
    import torch._dynamo
    import torch_models
    ember.compiler.reset()
    counters.clear()
    ours = _counts(ember, models, ember._dynamo.explain, make, data, kind)
    assert not counters["unsupported"], dict(counters["unsupported"])
    assert counters["stats"]["frames_fallback"] == 0
    torch._dynamo.reset()
    try:
        theirs = _counts(torch, torch_models, torch._dynamo.explain, make, data, kind)
    finally:
        torch._dynamo.reset()
        ember.compiler.reset()
    if theirs[0] == 0:
        # torch skips the frame (explain: no graph, break count -1; the LSTM's
        # forward): ember captures it, with no break
        assert theirs[1] <= 0 and ours[1] == 0, (ours, theirs[:2])
    else:
        assert ours[0] <= theirs[0] and ours[1] <= theirs[1], (ours, theirs[:2])
    if not kind.startswith("train step"):
        assert ours[:2] == (1, 0), ours          # a forward is one graph
    else:
        assert ours[1] == 1 and "backward" in ours[2][0], ours
