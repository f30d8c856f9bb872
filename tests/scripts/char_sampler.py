"""A char-level language model in the style of makemore / nanoGPT's sampler: an MLP over
the embeddings of the previous four characters, trained 20 AdamW steps on minibatches
of a small text, then sampling text the usual way (top-k filtered logits, softmax,
torch.multinomial). top_k=1 makes the draws the same in every library (one non-zero
probability), and the top-3 candidates drawn without replacement are compared as a
sorted set; the log-likelihoods of what was sampled follow the training losses."""
import json

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

TEXT = ("the quick brown fox jumps over the lazy dog. a stitch in time saves nine. "
        "all that glitters is not gold. the early bird catches the worm. ") * 3
BLOCK = 4


class CharMLP(nn.Module):
    def __init__(self, vocab, emb=10, hidden=64):
        super().__init__()
        self.emb = nn.Embedding(vocab, emb)
        self.fc1 = nn.Linear(BLOCK * emb, hidden)
        self.fc2 = nn.Linear(hidden, vocab)

    def forward(self, idx):
        x = self.emb(idx).view(idx.shape[0], -1)
        return self.fc2(torch.tanh(self.fc1(x)))


@torch.no_grad()
def generate(model, context, steps, top_k):
    out = []
    for _ in range(steps):
        logits = model(context[:, -BLOCK:])
        v, _ = torch.topk(logits, min(top_k, logits.size(-1)))
        logits[logits < v[:, [-1]]] = -float("inf")
        probs = F.softmax(logits, dim=-1)
        idx_next = torch.multinomial(probs, num_samples=1)
        context = torch.cat((context, idx_next), dim=1)
        out.append(idx_next.item())
    return context, out


def main():
    chars = sorted(set(TEXT))
    stoi = {c: i for i, c in enumerate(chars)}
    data = np.array([stoi[c] for c in TEXT], dtype=np.int64)
    rng = np.random.default_rng(0)
    model = CharMLP(len(chars))
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.from_numpy(rng.normal(0, 0.3, tuple(p.shape)).astype(np.float32)))
    opt = torch.optim.AdamW(model.parameters(), lr=3e-2, weight_decay=0.01)
    losses = []
    for _ in range(20):
        ix = rng.integers(0, len(data) - BLOCK - 1, size=32)
        x = torch.from_numpy(np.stack([data[i:i + BLOCK] for i in ix]))
        y = torch.from_numpy(data[ix + BLOCK])
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    model.eval()
    start = torch.tensor([[stoi[c] for c in "the "]])
    context, sampled = generate(model, start, 12, top_k=1)
    with torch.no_grad():
        nll = 0.0
        for t in range(BLOCK, context.size(1)):
            logp = F.log_softmax(model(context[:, t - BLOCK:t]), dim=-1)
            nll -= logp[0, context[0, t]].item()
        losses.append(nll)
        # three candidates without replacement: the same set in any order
        logits = model(start)
        v, _ = torch.topk(logits, 3)
        probs = F.softmax(logits.masked_fill(logits < v[:, [-1]], -float("inf")), dim=-1)
        cand = torch.multinomial(probs, 3, replacement=False).sort(dim=-1).values
        losses.append(float(F.log_softmax(logits, -1)[0, cand[0]].sum().item()))
        losses.append(float(sum(sampled)))
    print(json.dumps(losses))


if __name__ == "__main__":
    main()
