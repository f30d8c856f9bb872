"""ember.utils: data loading (ember.utils.data), DLPack interop (ember.utils.dlpack) and
hook handles (ember.utils.hooks)."""
from . import data, dlpack, hooks  # noqa: F401
