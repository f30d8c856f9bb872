"""A GPT-style decoder-only language model (as nanoGPT): token and position embeddings,
pre-norm blocks of causal self-attention and a GELU MLP, a final LayerNorm and an LM head
tied to the token embedding; generate() samples with temperature and top-k.

With a KV cache (`generate(..., use_cache=True)`, or `setup_cache(batch)` then
`forward(idx, pos=p)`), each attention layer keeps its keys and values in two buffers
preallocated to block_size positions: a call writes its T tokens' keys and values at
positions [pos, pos + T) in place (slice assignment) and attends over the prefix
[0, pos + T), so a decode step computes one token instead of the whole sequence."""
import math
from dataclasses import dataclass

from .. import arange, nn, no_grad, rand, where
from .. import cat as _cat
from ..nn import functional as F


@dataclass
class GPTConfig:
    vocab_size: int = 65
    block_size: int = 64
    n_layer: int = 2
    n_head: int = 2
    n_embd: int = 32
    dropout: float = 0.0
    bias: bool = True


class CausalSelfAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        assert config.n_embd % config.n_head == 0
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd, bias=config.bias)
        self.c_proj = nn.Linear(config.n_embd, config.n_embd, bias=config.bias)
        self.attn_dropout = nn.Dropout(config.dropout)
        self.resid_dropout = nn.Dropout(config.dropout)
        self.n_head = config.n_head
        self.n_embd = config.n_embd
        self.dropout = config.dropout

        self.register_buffer("k_cache", None, persistent=False)
        self.register_buffer("v_cache", None, persistent=False)

    def setup_cache(self, batch, block_size, dtype):
        """Preallocates the key and value caches: (batch, n_head, block_size, head size),
        or clears the ones there are if of that shape and dtype. (Allocated with the
        weights' own new_zeros: benchmarks/generate.py's torch twin runs this too.)"""
        shape = (batch, self.n_head, block_size, self.n_embd // self.n_head)
        for name in ("k_cache", "v_cache"):
            cache = getattr(self, name)
            if cache is not None and tuple(cache.shape) == shape and cache.dtype is dtype:
                cache.zero_()           # (the same buffers: compiled code keeps them)
            else:
                setattr(self, name, self.c_attn.weight.new_zeros(shape, dtype=dtype))

    def forward(self, x, pos=None):
        """pos=None: attention over x's own tokens. pos=p: x holds the tokens at positions
        [p, p + T); their keys and values are written into the cache there and attention
        runs over the cached prefix [0, p + T)."""
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        hs = C // self.n_head
        q = q.view(B, T, self.n_head, hs).transpose(1, 2)
        k = k.view(B, T, self.n_head, hs).transpose(1, 2)
        v = v.view(B, T, self.n_head, hs).transpose(1, 2)
        mask, causal = None, True
        if pos is not None:
            if self.k_cache is None:
                raise RuntimeError("forward(idx, pos=p) runs over the KV cache: call "
                                   "setup_cache(batch) first")
            end = pos + T
            self.k_cache[:, :, pos:end] = k
            self.v_cache[:, :, pos:end] = v
            k = self.k_cache[:, :, :end]
            v = self.v_cache[:, :, :end]
            if T == 1:              # one query sees the whole prefix: no mask
                causal = False
            elif pos != 0:          # query i (at pos + i) sees keys [0, pos + i]
                mask = arange(end).unsqueeze(0) <= arange(pos, end).unsqueeze(1)
                causal = False
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask,
                                           dropout_p=self.dropout if self.training
                                           else 0.0, is_causal=causal)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_dropout(self.c_proj(y))


class MLPBlock(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.c_fc = nn.Linear(config.n_embd, 4 * config.n_embd, bias=config.bias)
        self.gelu = nn.GELU()
        self.c_proj = nn.Linear(4 * config.n_embd, config.n_embd, bias=config.bias)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x):
        return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))


class Block(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embd, bias=config.bias)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = nn.LayerNorm(config.n_embd, bias=config.bias)
        self.mlp = MLPBlock(config)

    def forward(self, x, pos=None):
        x = x + self.attn(self.ln_1(x), pos)
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    """forward(idx, targets=None, pos=None) -> (logits (B, T, vocab), loss or None);
    pos=p (after setup_cache) runs idx as the tokens at positions [p, p + T) over the
    KV cache."""

    def __init__(self, config):
        super().__init__()
        self.config = config
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(config.vocab_size, config.n_embd),
            wpe=nn.Embedding(config.block_size, config.n_embd),
            drop=nn.Dropout(config.dropout),
            h=nn.ModuleList([Block(config) for _ in range(config.n_layer)]),
            ln_f=nn.LayerNorm(config.n_embd, bias=config.bias)))
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.transformer.wte.weight = self.lm_head.weight      # weight tying
        self.apply(self._init_weights)
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * config.n_layer))

    @staticmethod
    def _init_weights(module):
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def num_params(self):
        return sum(p.numel() for p in self.parameters())

    def setup_cache(self, batch, dtype=None):
        """Allocates every layer's KV cache for `batch` sequences of up to block_size
        tokens (in the parameters' dtype unless given)."""
        dtype = dtype if dtype is not None else self.lm_head.weight.dtype
        for block in self.transformer.h:
            block.attn.setup_cache(batch, self.config.block_size, dtype)

    def forward(self, idx, targets=None, pos=None):
        B, T = idx.shape
        start = 0 if pos is None else pos
        if start + T > self.config.block_size:
            raise ValueError(f"Cannot forward sequence of length {start + T}, block size "
                             f"is only {self.config.block_size}")
        positions = arange(T) if pos is None else arange(pos, pos + T)
        x = self.transformer.drop(self.transformer.wte(idx) + self.transformer.wpe(positions))
        for block in self.transformer.h:
            x = block(x, pos)
        logits = self.lm_head(self.transformer.ln_f(x))
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1),
                                   ignore_index=-1)
        return logits, loss

    def generate(self, idx, max_new_tokens, temperature=1.0, top_k=None, generator=None,
                 use_cache=False):
        """Appends max_new_tokens tokens to idx (B, T), each sampled from the softmax of the
        last position's logits / temperature, restricted to the top_k most likely tokens
        (top_k=1 is greedy). Draws from generator (or the default one).

        use_cache=True runs the prompt once and then each new token alone over the KV
        cache (setup_cache), with the same result; past block_size tokens (where the
        uncached loop crops its context) it continues uncached."""
        with no_grad():
            if not use_cache or max_new_tokens <= 0 or idx.shape[1] > self.config.block_size:
                for _ in range(max_new_tokens):
                    idx = _cat([idx, self._next_token(self._last_logits(idx), temperature,
                                                      top_k, generator)], dim=1)
                return idx
            self.setup_cache(idx.shape[0])
            logits, _ = self(idx, pos=0)
            for i in range(max_new_tokens):
                nxt = self._next_token(logits[:, -1, :], temperature, top_k, generator)
                idx = _cat([idx, nxt], dim=1)
                if i == max_new_tokens - 1:
                    break
                T = idx.shape[1]
                if T > self.config.block_size:
                    logits = self._last_logits(idx)[:, None]
                else:
                    logits, _ = self(nxt, pos=T - 1)
        return idx

    def _last_logits(self, idx):
        """The uncached step: the last position's logits over the last block_size tokens."""
        ctx = idx if idx.shape[1] <= self.config.block_size else \
            idx[:, -self.config.block_size:]
        logits, _ = self(ctx)
        return logits[:, -1, :]

    @staticmethod
    def _next_token(logits, temperature, top_k, generator):
        logits = logits / temperature
        if top_k is not None:
            v, _ = logits.topk(min(top_k, logits.shape[-1]))
            logits = where(logits < v[:, -1:], -math.inf, logits)
        probs = F.softmax(logits, dim=-1)
        cdf = probs.cumsum(-1)
        u = rand((probs.shape[0], 1), generator=generator, dtype=cdf.dtype)
        nxt = (cdf < u * cdf[:, -1:]).sum(-1, keepdim=True)
        return where(nxt >= probs.shape[-1], probs.shape[-1] - 1, nxt)
