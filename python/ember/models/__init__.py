"""ember.models: a small model zoo written with ember.nn, the way PyTorch code is written
(each model has a PyTorch twin in tests/torch_models.py with the same parameter names, so
state_dicts move across and the parity tests compare them).

- MLP: a multi-layer perceptron;
- ResNet / resnet18: a ResNet-18-style CNN (depths and width configurable; 32x32 or
  64x64 inputs);
- GPT / GPTConfig: a GPT-style decoder (token and position embeddings, causal
  self-attention blocks, tied LM head, generate() with temperature and top-k);
- BertModel, BertForMaskedLM, BertForSequenceClassification / BertConfig: a BERT-style
  encoder;
- Seq2SeqTransformer: an encoder-decoder Transformer with cross-attention;
- LSTMClassifier: an embedding + (bi)LSTM sequence classifier.

ember.models.data holds the character-level Shakespeare corpus used by the GPT demo
(`python -m ember.models.shakespeare`).
"""
from .bert import BertConfig, BertForMaskedLM, BertForSequenceClassification, BertModel
from .gpt import GPT, GPTConfig
from .mlp import MLP
from .resnet import BasicBlock, ResNet, resnet18
from .rnn import LSTMClassifier
from .seq2seq import Seq2SeqTransformer

__all__ = ["MLP", "ResNet", "BasicBlock", "resnet18", "GPT", "GPTConfig", "BertConfig",
           "BertModel", "BertForMaskedLM", "BertForSequenceClassification",
           "Seq2SeqTransformer", "LSTMClassifier"]
