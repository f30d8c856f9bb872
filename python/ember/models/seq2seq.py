"""An encoder-decoder Transformer for sequence-to-sequence tasks: token embeddings scaled by
sqrt(d_model) plus sinusoidal positions, nn.Transformer (the decoder cross-attends to the
encoder's output), and a linear generator over the target vocabulary."""
import math

import numpy as np

from .. import from_numpy, nn, no_grad, ones, triu
from .. import cat as _cat
from ..nn import functional as F


def sinusoidal_positions(max_len, d_model):
    """(max_len, d_model) float32: sin on even dims, cos on odd dims (Vaswani et al.)."""
    pos = np.arange(max_len, dtype=np.float64)[:, None]
    div = np.exp(np.arange(0, d_model, 2, dtype=np.float64) * (-math.log(10000.0) / d_model))
    pe = np.zeros((max_len, d_model))
    pe[:, 0::2] = np.sin(pos * div)
    pe[:, 1::2] = np.cos(pos * div)[:, :d_model // 2]
    return pe.astype(np.float32)


class Seq2SeqTransformer(nn.Module):
    """forward(src (B, S), tgt (B, T), targets=None) -> (logits (B, T, tgt_vocab), loss or
    None); pad_idx tokens are masked out of attention and of the loss."""

    def __init__(self, src_vocab, tgt_vocab, d_model=64, nhead=4, num_encoder_layers=2,
                 num_decoder_layers=2, dim_feedforward=128, dropout=0.1, max_len=128,
                 pad_idx=0):
        super().__init__()
        self.d_model = d_model
        self.pad_idx = pad_idx
        self.src_embed = nn.Embedding(src_vocab, d_model, padding_idx=pad_idx)
        self.tgt_embed = nn.Embedding(tgt_vocab, d_model, padding_idx=pad_idx)
        self.register_buffer("positions", from_numpy(sinusoidal_positions(max_len, d_model)),
                             persistent=False)
        self.transformer = nn.Transformer(d_model, nhead, num_encoder_layers,
                                          num_decoder_layers, dim_feedforward, dropout,
                                          batch_first=True)
        self.generator = nn.Linear(d_model, tgt_vocab)

    def _embed(self, emb, tokens):
        T = tokens.shape[1]
        return emb(tokens) * math.sqrt(self.d_model) + self.positions[:T]

    def forward(self, src, tgt, targets=None):
        T = tgt.shape[1]
        causal = triu(ones((T, T)), diagonal=1) == 1          # True: may not attend
        src_pad, tgt_pad = src == self.pad_idx, tgt == self.pad_idx
        out = self.transformer(self._embed(self.src_embed, src),
                               self._embed(self.tgt_embed, tgt), tgt_mask=causal,
                               src_key_padding_mask=src_pad, tgt_key_padding_mask=tgt_pad,
                               memory_key_padding_mask=src_pad)
        logits = self.generator(out)
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1),
                                   ignore_index=self.pad_idx)
        return logits, loss

    def greedy_decode(self, src, bos, max_len):
        """Target tokens (B, max_len + 1) starting with bos, each the argmax of the next."""
        ys = ones((src.shape[0], 1), dtype=src.dtype) * bos
        with no_grad():
            for _ in range(max_len):
                logits, _ = self(src, ys)
                nxt = logits[:, -1].argmax(-1, keepdim=True)
                ys = _cat([ys, nxt], dim=1)
        return ys
