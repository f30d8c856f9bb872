"""A sentence classifier over variable-length sequences, in the style of public text
classification examples: an embedding, a bidirectional GRU over packed sequences
(pack_padded_sequence with enforce_sorted=False), the final hidden states of both
directions to a linear layer, cross entropy; SGD with momentum and gradient clipping."""
import json

import numpy as np
import torch
import torch.nn as nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence, pad_sequence


class Classifier(nn.Module):
    def __init__(self, vocab, dim, hidden, classes):
        super().__init__()
        self.embedding = nn.Embedding(vocab, dim, padding_idx=0)
        self.gru = nn.GRU(dim, hidden, batch_first=True, bidirectional=True)
        self.fc = nn.Linear(2 * hidden, classes)

    def forward(self, tokens, lengths):
        emb = self.embedding(tokens)
        packed = pack_padded_sequence(emb, lengths, batch_first=True, enforce_sorted=False)
        out, h_n = self.gru(packed)
        padded, _ = pad_packed_sequence(out, batch_first=True)
        mean = padded.sum(1) / lengths.unsqueeze(1).to(padded.dtype)
        return self.fc(torch.cat([h_n[0], h_n[1]], dim=1) + mean)


def main():
    rng = np.random.default_rng(5)
    lengths = rng.integers(2, 9, 12)
    seqs = [torch.from_numpy(rng.integers(1, 20, n)) for n in lengths]
    labels = torch.from_numpy(np.array([int(s.sum().item()) % 3 for s in seqs]))
    tokens = pad_sequence(seqs, batch_first=True, padding_value=0)
    lengths = torch.from_numpy(lengths)
    model = Classifier(20, 6, 8, 3)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.from_numpy(rng.uniform(-0.4, 0.4, tuple(p.shape))).float())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    criterion = nn.CrossEntropyLoss()
    losses = []
    for _ in range(20):
        optimizer.zero_grad()
        loss = criterion(model(tokens, lengths), labels)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        losses.append(loss.item())
    print(json.dumps(losses))


if __name__ == "__main__":
    main()
