"""Flattening parameters to one vector and back (for second-order methods, averaging)."""
from ... import _C


def parameters_to_vector(parameters):
    """All parameters flattened and joined into one 1-D tensor (differentiable)."""
    from ...ops import api
    params = list(parameters)
    if not params:
        raise RuntimeError("parameters_to_vector(): expected at least one parameter")
    total = sum(p.numel() for p in params)
    out = api.zeros((total,), dtype=params[0].dtype)
    start = 0
    for p in params:
        n = p.numel()
        out = api.slice_scatter(out, p.reshape(-1), 0, start, start + n)
        start += n
    return out


def vector_to_parameters(vec, parameters):
    """Points each parameter's data at its slice of vec (the inverse of
    parameters_to_vector)."""
    if not isinstance(vec, _C.Tensor):
        raise TypeError(f"expected ember.Tensor, but got: {type(vec).__name__}")
    start = 0
    for p in parameters:
        n = p.numel()
        p.data = vec[start:start + n].view(tuple(p.shape)).data
        start += n
