"""The model zoo under ember.compile with the default backend (LLVM): forward values and
parameter gradients equal eager's, nothing falls back, and training steps follow eager
step for step."""
import numpy as np
import pytest

import ember
from ember import models
from ember.capture import counters


@pytest.fixture(autouse=True)
def strict(monkeypatch):
    ember.compiler.reset()
    monkeypatch.setattr(ember.compiler.config, "strict", True)
    yield
    assert not counters["llvm_fallback"], dict(counters["llvm_fallback"])
    assert not counters["unsupported"], dict(counters["unsupported"])
    ember.compiler.reset()


def _zoo():
    return [
        ("mlp", lambda: models.MLP(16, [32, 32], 4), lambda: [ember.randn(8, 16)]),
        ("resnet", lambda: models.resnet18(num_classes=10, width=8),
         lambda: [ember.randn(2, 3, 32, 32)]),
        ("gpt", lambda: models.GPT(models.GPTConfig(vocab_size=50, block_size=16, n_layer=2,
                                                    n_head=2, n_embd=32)),
         lambda: [ember.randint(0, 50, (2, 16))]),
        ("bert", lambda: models.BertForSequenceClassification(models.BertConfig(
            vocab_size=40, hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64,
            max_position=16)),
         lambda: [ember.randint(0, 40, (2, 12))]),
    ]


def _first(out):
    return out[0] if isinstance(out, (tuple, list)) else out


@pytest.mark.parametrize("name,make,inputs", _zoo(), ids=[z[0] for z in _zoo()])
def test_model_forward_and_gradients_match_eager(name, make, inputs):
    ember.manual_seed(0)
    model = make()
    model.eval()               # dropout off: the two runs must see the same function
    args = inputs()
    want = _first(model(*args))
    want.sum().backward()
    want_grads = {n: p.grad.numpy().copy() for n, p in model.named_parameters()
                  if p.grad is not None}
    model.zero_grad()
    got = _first(ember.compile(model, fullgraph=True)(*args))
    np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), rtol=1e-4,
                               atol=1e-5)
    got.sum().backward()
    got_grads = {n: p.grad.numpy() for n, p in model.named_parameters()
                 if p.grad is not None}
    assert got_grads.keys() == want_grads.keys()
    for n in want_grads:
        np.testing.assert_allclose(got_grads[n], want_grads[n], rtol=1e-3, atol=1e-4,
                                   err_msg=n)


def test_training_steps_follow_eager():
    def run(compiled):
        ember.manual_seed(1)
        model = models.MLP(8, [16], 3)
        opt = ember.optim.Adam(model.parameters(), lr=1e-2)
        step_model = ember.compile(model, fullgraph=True) if compiled else model
        x, y = ember.randn(32, 8), ember.randint(0, 3, (32,))
        losses = []
        for _ in range(6):
            opt.zero_grad()
            loss = ember.nn.functional.cross_entropy(step_model(x), y)
            loss.backward()
            opt.step()
            losses.append(loss.item())
        return losses
    eager, compiled = run(False), run(True)
    np.testing.assert_allclose(compiled, eager, rtol=1e-4)
    assert compiled[-1] < compiled[0]


@pytest.mark.parametrize("backend", ["aot_eager", "llvm"])
def test_resnet_with_batch_norm_trains_as_eager(backend):
    """[aot-2]: BatchNorm's running statistics are updated inside the graph (written
    back after each call), so a ResNet training step is one graph with no break; five
    SGD steps in float64 give eager's losses, gradients, buffers and version counters."""
    def run(compiled):
        ember.manual_seed(1)
        model = models.resnet18(num_classes=10, width=4).double()
        model.train()
        opt = ember.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        step_model = ember.compile(model, backend=backend, fullgraph=True) \
            if compiled else model
        ember.manual_seed(2)
        x = ember.randn(4, 3, 16, 16, dtype=ember.float64)
        y = ember.randint(0, 10, (4,))
        losses, grads = [], []
        for _ in range(5):
            opt.zero_grad()
            loss = ember.nn.functional.cross_entropy(step_model(x), y)
            loss.backward()
            grads.append({n: p.grad.numpy().copy() for n, p in model.named_parameters()})
            opt.step()
            losses.append(loss.item())
        return losses, grads, dict(model.named_buffers())
    want = run(False)
    got = run(True)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-10)
    for g, w in zip(got[1], want[1]):
        for name in w:
            np.testing.assert_allclose(g[name], w[name], rtol=1e-10, atol=1e-13,
                                       err_msg=name)
    assert got[2].keys() == want[2].keys()
    for name, w in want[2].items():
        np.testing.assert_allclose(got[2][name].numpy(), w.numpy(), rtol=1e-10, err_msg=name)
        assert got[2][name]._version == w._version, name
    assert counters["stats"]["unique_graphs"] == 1          # no graph break
    assert counters["stats"].get("frames_fallback", 0) == 0
    assert got[2]["bn1.num_batches_tracked"].item() == 5
