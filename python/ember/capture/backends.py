"""Backends by name, as torch.compile's: a backend is `backend(gm, example_inputs) ->
callable`. "eager" runs the captured graph with eager ops; "aot_eager" and "llvm"
("inductor" is an alias) arrive with the aot-1 and llvm-1 work."""
from __future__ import annotations

_REGISTRY = {}
_PLANNED = {"aot_eager": "AOT autograd", "llvm": "the LLVM backend",
            "inductor": "the LLVM backend"}


def register_backend(name, fn=None):
    """Registers fn under name (also usable as a decorator)."""
    def add(f):
        _REGISTRY[name] = f
        return f
    return add(fn) if fn is not None else add


@register_backend("eager")
def eager(gm, example_inputs):
    return gm.forward


def list_backends():
    return sorted(_REGISTRY)


def lookup(backend):
    """The backend callable for a name or a callable; a clear error otherwise."""
    if callable(backend):
        return getattr(backend, "__name__", "custom"), backend
    if not isinstance(backend, str):
        raise TypeError(f"backend must be a name or a callable, got {backend!r}")
    name = "llvm" if backend == "inductor" and "llvm" in _REGISTRY else backend
    if name in _REGISTRY:
        return name, _REGISTRY[name]
    if name in _PLANNED:
        raise NotImplementedError(f"ember.compile: backend {backend!r} needs "
                                  f"{_PLANNED[name]}, which is not built yet; available "
                                  f"backends: {', '.join(list_backends())}")
    raise ValueError(f"ember.compile: unknown backend {backend!r}; available backends: "
                     f"{', '.join(list_backends())}")


def default_backend():
    for name in ("llvm", "aot_eager", "eager"):
        if name in _REGISTRY:
            return name
    return "eager"
