"""A namespace of settable flags: known names only (PyTorch's AttributeError
otherwise)."""


class Flags:
    def __init__(self, **defaults):
        object.__setattr__(self, "_values", dict(defaults))

    def __getattr__(self, name):
        values = object.__getattribute__(self, "_values")
        if name in values:
            return values[name]
        raise AttributeError(f"Unknown attribute {name}")

    def __setattr__(self, name, value):
        if name not in self._values:
            raise AttributeError(f"Unknown attribute {name}")
        self._values[name] = value

    def __repr__(self):
        return f"Flags({', '.join(f'{k}={v!r}' for k, v in self._values.items())})"
