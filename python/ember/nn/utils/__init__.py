"""ember.nn.utils: gradient clipping, parameter/vector conversion, weight norm,
parametrizations (parametrize, parametrizations) and variable-length sequences (rnn)."""
from . import parametrizations, parametrize, rnn  # noqa: F401
from .clip_grad import clip_grad_norm_, clip_grad_value_
from .convert_parameters import parameters_to_vector, vector_to_parameters
from .weight_norm import remove_weight_norm, weight_norm

clip_grad_norm = clip_grad_norm_

__all__ = ["clip_grad_norm_", "clip_grad_value_", "parameters_to_vector",
           "vector_to_parameters", "weight_norm", "remove_weight_norm", "parametrize",
           "parametrizations", "rnn"]
