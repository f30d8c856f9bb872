"""ember.utils: data loading (ember.utils.data) and hook handles (ember.utils.hooks)."""
from . import data, hooks  # noqa: F401
