"""A character-level GPT on Shakespeare: `python -m ember.models.shakespeare`.

The text is a slice (about 200 KB) of "tiny shakespeare" shipped as package data
(ember/data/tinyshakespeare.txt; lines from Shakespeare's plays, public domain, as
collected in karpathy/char-rnn's data/tinyshakespeare/input.txt). train() fits a small
ember.models.GPT with AdamW on random windows of it and returns the losses; main() trains
for a while and prints a sample.
"""
import argparse
import time
from importlib import resources

import numpy as np

from .. import Generator, from_numpy, manual_seed, no_grad, optim, tensor
from .gpt import GPT, GPTConfig


def load_text():
    """The shipped Shakespeare slice, as a string."""
    return resources.files("ember").joinpath("data/tinyshakespeare.txt").read_text("utf-8")


class CharData:
    """Characters <-> integer ids, and random training windows (90/10 train/val split)."""

    def __init__(self, text):
        self.chars = sorted(set(text))
        self.stoi = {c: i for i, c in enumerate(self.chars)}
        self.ids = np.array([self.stoi[c] for c in text], dtype=np.int64)
        n = int(0.9 * len(self.ids))
        self.train_ids, self.val_ids = self.ids[:n], self.ids[n:]

    @property
    def vocab_size(self):
        return len(self.chars)

    def encode(self, s):
        return [self.stoi[c] for c in s]

    def decode(self, ids):
        return "".join(self.chars[int(i)] for i in ids)

    def batch(self, batch_size, block_size, rng, split="train"):
        data = self.train_ids if split == "train" else self.val_ids
        starts = rng.integers(0, len(data) - block_size - 1, batch_size)
        x = np.stack([data[s:s + block_size] for s in starts])
        y = np.stack([data[s + 1:s + 1 + block_size] for s in starts])
        return from_numpy(x), from_numpy(y)


def train(steps=200, batch_size=16, block_size=64, n_layer=2, n_head=4, n_embd=64,
          dropout=0.0, lr=3e-3, data=None, seed=0, log=print, model=None):
    """Trains a GPT on the corpus for `steps` AdamW steps; returns the list of losses (the
    model is left in model.trained if you pass one in)."""
    data = data or CharData(load_text())
    manual_seed(seed)
    rng = np.random.default_rng(seed)
    if model is None:
        model = GPT(GPTConfig(vocab_size=data.vocab_size, block_size=block_size,
                              n_layer=n_layer, n_head=n_head, n_embd=n_embd, dropout=dropout))
    opt = optim.AdamW(model.parameters(), lr=lr, weight_decay=0.1)
    losses = []
    t0 = time.perf_counter()
    for step in range(steps):
        x, y = data.batch(batch_size, block_size, rng)
        _, loss = model(x, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
        if log is not None and (step % 50 == 0 or step == steps - 1):
            log(f"step {step:4d}  loss {losses[-1]:.3f}  ({time.perf_counter() - t0:.1f} s)")
    train.model = model
    return losses


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--block-size", type=int, default=64)
    ap.add_argument("--n-layer", type=int, default=2)
    ap.add_argument("--n-embd", type=int, default=64)
    ap.add_argument("--tokens", type=int, default=300, help="characters to sample")
    ap.add_argument("--temperature", type=float, default=0.8)
    ap.add_argument("--top-k", type=int, default=10)
    args = ap.parse_args(argv)
    data = CharData(load_text())
    print(f"{len(data.ids):,} characters, vocabulary of {data.vocab_size}")
    train(steps=args.steps, block_size=args.block_size, n_layer=args.n_layer,
          n_embd=args.n_embd, data=data)
    model = train.model
    model.eval()
    with no_grad():
        start = tensor([data.encode("\n")])
        out = model.generate(start, args.tokens, temperature=args.temperature,
                             top_k=args.top_k, generator=Generator().manual_seed(0))
    print(data.decode(out[0].numpy().tolist()))


if __name__ == "__main__":
    main()
