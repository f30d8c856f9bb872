"""Grad mode: whether ops record autograd history, per thread (the flag lives in C)."""
import functools

from .. import _C


class _DecoratorContextManager:
    """A grad-mode context (also a decorator): __enter__ sets the mode and keeps the
    previous one in self._prev, which __exit__ restores."""

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with self.__class__(*self._args()):
                return fn(*args, **kwargs)
        return wrapper

    def _args(self):
        return ()

    def __exit__(self, *exc):
        _C._set_grad_enabled(self._prev)
        return False


class no_grad(_DecoratorContextManager):
    """Ops inside record no autograd history. Also a decorator."""

    def __enter__(self):
        self._prev = _C._set_grad_enabled(False)


class enable_grad(_DecoratorContextManager):
    """Ops inside record autograd history even under no_grad. Also a decorator."""

    def __enter__(self):
        self._prev = _C._set_grad_enabled(True)


class set_grad_enabled(_DecoratorContextManager):
    """set_grad_enabled(mode): takes effect at once; also a context manager or decorator."""

    def __init__(self, mode: bool):
        self.mode = bool(mode)
        self._prev = _C._set_grad_enabled(self.mode)

    def _args(self):
        return (self.mode,)

    def __enter__(self):
        pass


class inference_mode(_DecoratorContextManager):
    """Like no_grad (Ember has no separate inference tensors)."""

    def __init__(self, mode=True):
        self.mode = mode

    def _args(self):
        return (self.mode,)

    def __enter__(self):
        self._prev = _C._set_grad_enabled(not self.mode)


is_grad_enabled = _C.is_grad_enabled
