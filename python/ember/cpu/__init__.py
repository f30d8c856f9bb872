"""ember.cpu: PyTorch's torch.cpu (the device every ember tensor lives on)."""
from . import amp  # noqa: F401


def is_available():
    return True


def device_count():
    return 1


def current_device():
    return "cpu"


def synchronize(device=None):
    """CPU work is synchronous: nothing to wait for."""
