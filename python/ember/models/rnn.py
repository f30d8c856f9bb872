"""A recurrent sequence classifier: embeddings, a (bidirectional, multi-layer) LSTM and a
linear layer on the last layer's final hidden states."""
from .. import cat as _cat
from .. import nn
from ..nn import functional as F


class LSTMClassifier(nn.Module):
    """forward(tokens (B, T), targets=None) -> (logits (B, num_classes), loss or None)."""

    def __init__(self, vocab_size, num_classes, embed_dim=32, hidden_size=64, num_layers=2,
                 bidirectional=True, dropout=0.1, pad_idx=0):
        super().__init__()
        self.bidirectional = bidirectional
        self.embedding = nn.Embedding(vocab_size, embed_dim, padding_idx=pad_idx)
        self.lstm = nn.LSTM(embed_dim, hidden_size, num_layers, batch_first=True,
                            bidirectional=bidirectional,
                            dropout=dropout if num_layers > 1 else 0.0)
        self.dropout = nn.Dropout(dropout)
        self.fc = nn.Linear(hidden_size * (2 if bidirectional else 1), num_classes)

    def forward(self, tokens, targets=None):
        _, (h, _) = self.lstm(self.embedding(tokens))
        feat = _cat([h[-2], h[-1]], dim=1) if self.bidirectional else h[-1]
        logits = self.fc(self.dropout(feat))
        loss = F.cross_entropy(logits, targets) if targets is not None else None
        return logits, loss
