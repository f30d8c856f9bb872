"""Backends by name, as torch.compile's: a backend is `backend(gm, example_inputs) ->
callable`. "eager" runs the captured graph with eager ops; "aot_eager" (python/ember/aot/) and
"llvm" ("inductor" too: python/ember/compiler/backend.py) register themselves."""
from __future__ import annotations

_REGISTRY = {}


def register_backend(name, fn=None):
    """Registers fn under name (also usable as a decorator)."""
    def add(f):
        _REGISTRY[name] = f
        return f
    return add(fn) if fn is not None else add


@register_backend("eager")
def eager(gm, example_inputs):
    from ..aot.eager import eager_graph      # a graph that writes into its inputs
    return eager_graph(gm, example_inputs)


def list_backends():
    return sorted(_REGISTRY)


def lookup(backend):
    """The backend callable for a name or a callable; a clear error otherwise."""
    if callable(backend):
        return getattr(backend, "__name__", "custom"), backend
    if not isinstance(backend, str):
        raise TypeError(f"backend must be a name or a callable, got {backend!r}")
    if backend in _REGISTRY:
        return backend, _REGISTRY[backend]
    raise ValueError(f"ember.compile: unknown backend {backend!r}; available backends: "
                     f"{', '.join(list_backends())}")


def default_backend():
    for name in ("llvm", "aot_eager", "eager"):
        if name in _REGISTRY:
            return name
    return "eager"
