"""Named results of the ops written in Python (kthvalue, median, aminmax, ...), as
torch.return_types: tuples whose items are also attributes. The C kernels make their
own (max, sort, topk) the same way."""
import collections

_TYPES = {}


def result_type(name, fields):
    """The named-result type `name`(fields...), made once (callers that compiled code
    inlines make theirs at import: capture cannot follow collections.namedtuple)."""
    tp = _TYPES.get(name)
    if tp is None:
        base = collections.namedtuple(name, fields)
        tp = type(name, (base,), {"__slots__": (), "__module__": __name__,
                                  "__repr__": _repr})
        _TYPES[name] = tp
        globals()[name] = tp
    return tp


def make(name, fields, *values):
    """A `name`(fields...) result holding values."""
    return result_type(name, fields)(*values)


def _repr(self):
    items = ",\n".join(f"{f}={v!r}" for f, v in zip(self._fields, self))
    return f"ember.return_types.{type(self).__name__}(\n{items})"
