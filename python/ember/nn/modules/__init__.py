"""The layers of ember.nn, one file per family (later families slot in beside these:
conv.py, normalization.py, sparse.py, dropout.py, rnn.py, transformer.py ...)."""
from .activation import (ELU, GELU, GLU, Hardtanh, LeakyReLU, LogSigmoid, LogSoftmax, Mish,
                         ReLU, ReLU6, Sigmoid, SiLU, Softmax, Softmin, Softplus, Tanh)
from .conv import Conv1d, Conv2d, Conv3d, ConvTranspose1d, ConvTranspose2d, ConvTranspose3d
from .dropout import Dropout, Dropout1d, Dropout2d
from .container import ModuleDict, ModuleList, ParameterDict, ParameterList, Sequential
from .flatten import Flatten, Unflatten
from .fold import Fold, Unfold
from .linear import Bilinear, Identity, Linear
from .loss import (BCELoss, BCEWithLogitsLoss, CrossEntropyLoss, HuberLoss, KLDivLoss, L1Loss,
                   MSELoss, NLLLoss, SmoothL1Loss, _Loss, _WeightedLoss)
from .module import Module
from .instancenorm import InstanceNorm1d, InstanceNorm2d, InstanceNorm3d
from .normalization import (BatchNorm1d, BatchNorm2d, BatchNorm3d, GroupNorm, LayerNorm,
                            LocalResponseNorm, RMSNorm)
from .padding import (CircularPad1d, CircularPad2d, CircularPad3d, ConstantPad1d,
                      ConstantPad2d, ConstantPad3d, ReflectionPad1d, ReflectionPad2d,
                      ReflectionPad3d, ReplicationPad1d, ReplicationPad2d, ReplicationPad3d,
                      ZeroPad1d, ZeroPad2d, ZeroPad3d)
from .pixelshuffle import ChannelShuffle, PixelShuffle, PixelUnshuffle
from .pooling import (AdaptiveAvgPool1d, AdaptiveAvgPool2d, AdaptiveAvgPool3d,
                      AdaptiveMaxPool1d, AdaptiveMaxPool2d, AdaptiveMaxPool3d, AvgPool1d,
                      AvgPool2d, AvgPool3d, MaxPool1d, MaxPool2d, MaxPool3d, Upsample,
                      UpsamplingBilinear2d, UpsamplingNearest2d)
from .rnn import GRU, LSTM, RNN, GRUCell, LSTMCell, RNNBase, RNNCell, RNNCellBase
from .sparse import Embedding, EmbeddingBag
from .activation import (CELU, SELU, Hardshrink, Hardsigmoid, Hardswish, PReLU, Softshrink,
                         Softsign, Tanhshrink, Threshold)
from .distance import CosineSimilarity, PairwiseDistance
from .activation import Softmax2d
from .dropout import Dropout3d
from .loss import CTCLoss
from .loss import (CosineEmbeddingLoss, GaussianNLLLoss, HingeEmbeddingLoss, MarginRankingLoss,
                   MultiLabelSoftMarginLoss, PoissonNLLLoss, SoftMarginLoss, TripletMarginLoss)
from .transformer import (MultiheadAttention, Transformer, TransformerDecoder,
                          TransformerDecoderLayer, TransformerEncoder, TransformerEncoderLayer)

__all__ = ["Module", "Sequential", "ModuleList", "ModuleDict", "ParameterList",
           "ParameterDict", "Linear", "Identity", "Flatten", "Unflatten", "ReLU",
           "LeakyReLU", "Tanh", "Sigmoid", "MSELoss", "L1Loss", "_Loss",
           # convolution, pooling, normalisation, embedding, dropout, attention, recurrence
           "Bilinear", "Conv1d", "Conv2d", "ConvTranspose1d", "ConvTranspose2d", "MaxPool1d",
           "MaxPool2d", "AvgPool1d", "AvgPool2d", "AdaptiveAvgPool1d", "AdaptiveAvgPool2d",
           "Upsample", "BatchNorm1d", "BatchNorm2d", "LayerNorm", "GroupNorm", "RMSNorm",
           "Embedding", "Dropout", "Dropout1d", "Dropout2d", "GELU", "SiLU", "Mish",
           "Softplus", "ELU", "Hardtanh", "ReLU6", "LogSigmoid", "GLU", "Softmax",
           "LogSoftmax", "Softmin", "MultiheadAttention", "TransformerEncoderLayer",
           "TransformerDecoderLayer", "TransformerEncoder", "TransformerDecoder",
           "Transformer", "RNNBase", "RNN", "LSTM", "GRU", "Fold", "Unfold",
           # [eager-2]: 3-d layers, padding, instance norm, shuffles, cells
           "Conv3d", "ConvTranspose3d", "MaxPool3d", "AvgPool3d", "AdaptiveAvgPool3d",
           "AdaptiveMaxPool1d", "AdaptiveMaxPool2d", "AdaptiveMaxPool3d",
           "UpsamplingNearest2d", "UpsamplingBilinear2d", "BatchNorm3d", "InstanceNorm1d",
           "InstanceNorm2d", "InstanceNorm3d", "LocalResponseNorm", "PixelShuffle",
           "PixelUnshuffle", "ChannelShuffle", "RNNCellBase", "RNNCell", "LSTMCell", "GRUCell",
           "CircularPad1d", "CircularPad2d", "CircularPad3d", "ConstantPad1d", "ConstantPad2d",
           "ConstantPad3d", "ReflectionPad1d", "ReflectionPad2d", "ReflectionPad3d",
           "ReplicationPad1d", "ReplicationPad2d", "ReplicationPad3d", "ZeroPad1d",
           "ZeroPad2d", "ZeroPad3d", "EmbeddingBag", "CTCLoss",
           "SELU", "CELU", "Hardsigmoid", "Hardswish", "Softsign", "Tanhshrink", "Softshrink",
           "Hardshrink", "Threshold", "PReLU", "CosineSimilarity", "PairwiseDistance",
           "Softmax2d", "Dropout3d", "MarginRankingLoss", "HingeEmbeddingLoss", "SoftMarginLoss", "CosineEmbeddingLoss",
           "TripletMarginLoss", "PoissonNLLLoss", "GaussianNLLLoss", "MultiLabelSoftMarginLoss",
           # losses
           "_WeightedLoss", "CrossEntropyLoss", "NLLLoss", "BCELoss", "BCEWithLogitsLoss",
           "SmoothL1Loss", "HuberLoss", "KLDivLoss"]
