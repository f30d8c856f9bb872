"""A BERT-style encoder (Devlin et al., 2019): word, position and token-type embeddings
with LayerNorm, a stack of post-norm Transformer encoder layers (GELU), a tanh pooler on the
first token, and heads for masked-language modelling (tied to the word embeddings) and
sequence classification."""
from dataclasses import dataclass

from .. import arange, nn, zeros_like
from ..nn import functional as F


@dataclass
class BertConfig:
    vocab_size: int = 1000
    hidden_size: int = 64
    num_layers: int = 2
    num_heads: int = 4
    intermediate_size: int = 128
    max_position: int = 128
    type_vocab_size: int = 2
    dropout: float = 0.1
    layer_norm_eps: float = 1e-12
    num_labels: int = 2


def init_bert_weights(module):
    """BERT's initialisation: N(0, 0.02) weights, zero biases (padding rows zero)."""
    if isinstance(module, nn.Linear):
        nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if module.bias is not None:
            nn.init.zeros_(module.bias)
    elif isinstance(module, nn.Embedding):
        nn.init.normal_(module.weight, mean=0.0, std=0.02)
        module._fill_padding_idx_with_zero()


class BertEmbeddings(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size,
                                            padding_idx=0)
        self.position_embeddings = nn.Embedding(config.max_position, config.hidden_size)
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, input_ids, token_type_ids=None):
        T = input_ids.shape[1]
        if token_type_ids is None:
            token_type_ids = zeros_like(input_ids)
        x = (self.word_embeddings(input_ids) + self.position_embeddings(arange(T)) +
             self.token_type_embeddings(token_type_ids))
        return self.dropout(self.LayerNorm(x))


class BertModel(nn.Module):
    """forward(input_ids, token_type_ids=None, attention_mask=None) ->
    (sequence_output (B, T, H), pooled_output (B, H)); attention_mask is 1 for real
    tokens, 0 for padding."""

    def __init__(self, config):
        super().__init__()
        self.config = config
        self.embeddings = BertEmbeddings(config)
        layer = nn.TransformerEncoderLayer(config.hidden_size, config.num_heads,
                                           config.intermediate_size, config.dropout,
                                           activation="gelu",
                                           layer_norm_eps=config.layer_norm_eps,
                                           batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, config.num_layers,
                                             enable_nested_tensor=False)
        self.pooler = nn.Linear(config.hidden_size, config.hidden_size)
        self.apply(init_bert_weights)

    def forward(self, input_ids, token_type_ids=None, attention_mask=None):
        x = self.embeddings(input_ids, token_type_ids)
        padding = attention_mask == 0 if attention_mask is not None else None
        x = self.encoder(x, src_key_padding_mask=padding)
        pooled = self.pooler(x[:, 0]).tanh()
        return x, pooled


class BertForMaskedLM(nn.Module):
    """forward(input_ids, token_type_ids=None, attention_mask=None, labels=None) ->
    (logits (B, T, vocab), loss or None); labels are -100 where no token is predicted."""

    def __init__(self, config):
        super().__init__()
        self.bert = BertModel(config)
        self.transform = nn.Linear(config.hidden_size, config.hidden_size)
        self.transform_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.decoder = nn.Linear(config.hidden_size, config.vocab_size)
        self.decoder.weight = self.bert.embeddings.word_embeddings.weight   # tied
        for m in (self.transform, self.decoder):
            nn.init.zeros_(m.bias)
        nn.init.normal_(self.transform.weight, mean=0.0, std=0.02)

    def forward(self, input_ids, token_type_ids=None, attention_mask=None, labels=None):
        x, _ = self.bert(input_ids, token_type_ids, attention_mask)
        logits = self.decoder(self.transform_norm(F.gelu(self.transform(x))))
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1),
                                   ignore_index=-100)
        return logits, loss


class BertForSequenceClassification(nn.Module):
    """forward(input_ids, token_type_ids=None, attention_mask=None, labels=None) ->
    (logits (B, num_labels), loss or None)."""

    def __init__(self, config):
        super().__init__()
        self.bert = BertModel(config)
        self.dropout = nn.Dropout(config.dropout)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)
        init_bert_weights(self.classifier)

    def forward(self, input_ids, token_type_ids=None, attention_mask=None, labels=None):
        _, pooled = self.bert(input_ids, token_type_ids, attention_mask)
        logits = self.classifier(self.dropout(pooled))
        loss = F.cross_entropy(logits, labels) if labels is not None else None
        return logits, loss
