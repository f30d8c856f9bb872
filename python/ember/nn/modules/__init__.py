"""The layers of ember.nn, one file per family (later families slot in beside these:
conv.py, normalization.py, sparse.py, dropout.py, rnn.py, transformer.py ...)."""
from .activation import LeakyReLU, ReLU, Sigmoid, Tanh
from .container import ModuleDict, ModuleList, ParameterDict, ParameterList, Sequential
from .flatten import Flatten, Unflatten
from .linear import Identity, Linear
from .loss import L1Loss, MSELoss, _Loss
from .module import Module

__all__ = ["Module", "Sequential", "ModuleList", "ModuleDict", "ParameterList",
           "ParameterDict", "Linear", "Identity", "Flatten", "Unflatten", "ReLU",
           "LeakyReLU", "Tanh", "Sigmoid", "MSELoss", "L1Loss", "_Loss"]
