"""RemovableHandle: what register_*_hook returns; remove() unregisters the hook.

Hooks live in ordered dicts keyed by the handle's id, so removing one is O(1) and the
remaining hooks keep their order. The handle holds the dicts weakly: a handle that
outlives its module does not keep the module's hooks alive.
"""
import itertools
import weakref
from collections import OrderedDict

_ids = itertools.count()


class RemovableHandle:
    """A registration that can be undone with remove() or by leaving a with block."""

    def __init__(self, hooks_dict, *, extra_dict=None):
        self.hooks_dict_ref = weakref.ref(hooks_dict)
        self.id = next(_ids)
        extras = extra_dict if isinstance(extra_dict, (list, tuple)) else (
            [extra_dict] if extra_dict is not None else [])
        self.extra_dict_ref = tuple(weakref.ref(d) for d in extras)

    def remove(self):
        for ref in (self.hooks_dict_ref, *self.extra_dict_ref):
            d = ref()
            if d is not None and self.id in d:
                del d[self.id]

    def __getstate__(self):
        return (self.hooks_dict_ref(), self.id,
                tuple(ref() for ref in self.extra_dict_ref))

    def __setstate__(self, state):
        hooks, self.id, extras = state
        self.hooks_dict_ref = weakref.ref(hooks if hooks is not None else OrderedDict())
        self.extra_dict_ref = tuple(weakref.ref(d) for d in extras if d is not None)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.remove()
