"""ember.nn: modules, parameters, initialisers and functional layers, as torch.nn."""
from . import functional, init, parallel, utils  # noqa: F401
from .modules import *  # noqa: F401,F403
from .modules import __all__ as _modules_all
from .parameter import Parameter

__all__ = ["Parameter", "functional", "init", "utils", *_modules_all]
