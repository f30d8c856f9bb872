"""ember.device: where a tensor lives. Ember computes on the CPU; 'meta' tensors carry
shapes and dtypes only.

The default device (set_default_device, get_default_device, `with ember.device(...)`)
is the CPU: setting it to the CPU (or None) is accepted, so code written for PyTorch
runs unchanged; any other device is refused when set, since factories would have to
create tensors there."""
import threading

_state = threading.local()


class device:
    __slots__ = ("type", "index")

    def __init__(self, type, index=None):
        if isinstance(type, device):
            type, index = type.type, type.index
        name, _, idx = str(type).partition(":")
        if idx:
            index = int(idx)
        if name not in ("cpu", "meta", "cuda", "mps"):
            raise RuntimeError(f"Expected one of cpu, meta device type at start of device "
                               f"string: {type}")
        self.type = name
        self.index = index

    def __repr__(self):
        if self.index is None:
            return f"device(type='{self.type}')"
        return f"device(type='{self.type}', index={self.index})"

    def __str__(self):
        return self.type if self.index is None else f"{self.type}:{self.index}"

    def __eq__(self, other):
        if isinstance(other, str):
            other = device(other)
        if not isinstance(other, device):
            return NotImplemented
        return self.type == other.type and self.index == other.index

    def __hash__(self):
        return hash((self.type, self.index))

    def __reduce__(self):
        return device, (self.type, self.index)

    def __enter__(self):
        stack = _stack()
        stack.append(get_default_device())
        try:
            set_default_device(self)
        except BaseException:
            stack.pop()
            raise
        return self

    def __exit__(self, *exc):
        set_default_device(_stack().pop())
        return False


def _stack():
    if not hasattr(_state, "stack"):
        _state.stack = []
    return _state.stack


def get_default_device():
    """The device factories create tensors on: always the CPU."""
    return device("cpu")


def set_default_device(dev):
    """Sets the device factories create tensors on. Ember computes on the CPU only, so
    the CPU (or None, PyTorch's way of resetting it) is the only device it takes."""
    if dev is None:
        return
    d = device(dev) if not isinstance(dev, int) else device("cuda", dev)
    if d.type != "cpu":
        raise RuntimeError(f"set_default_device(): ember runs on the CPU only: device "
                           f"'{d}' is not available")
