"""ember.utils: data loading (ember.utils.data), DLPack interop (ember.utils.dlpack), hook
handles (ember.utils.hooks) and activation checkpointing (ember.utils.checkpoint)."""
from . import checkpoint, data, dlpack, hooks  # noqa: F401
