"""ember.cuda: what CPU-only code asks of torch.cuda. Ember computes on the CPU, so no
CUDA device is ever available; the calls scripts make whether or not a GPU is there
(seeding, synchronize, empty_cache, memory statistics) run and do nothing, and the ones
that need a device raise as a CPU-only PyTorch raises."""


def _no_cuda():
    raise AssertionError("Torch not compiled with CUDA enabled (ember runs on the CPU "
                         "only)")


def is_available():
    return False


def device_count():
    return 0


def is_initialized():
    return False


def init():
    _no_cuda()


def is_bf16_supported(including_emulation=True):
    return False


def manual_seed(seed):
    """Seeds the CUDA generators: there are none (as PyTorch's call, it is a no-op
    without a device)."""
    int(seed)


def manual_seed_all(seed):
    int(seed)


def seed():
    pass


def seed_all():
    pass


def synchronize(device=None):
    """Waits for CUDA work: there is none."""


def empty_cache():
    """Frees cached CUDA memory: there is none."""


def memory_allocated(device=None):
    return 0


def max_memory_allocated(device=None):
    return 0


def memory_reserved(device=None):
    return 0


def max_memory_reserved(device=None):
    return 0


def current_device():
    _no_cuda()


def get_device_name(device=None):
    _no_cuda()


def get_device_properties(device=None):
    _no_cuda()


def set_device(device):
    _no_cuda()


def get_rng_state(device="cuda"):
    _no_cuda()


def set_rng_state(new_state, device="cuda"):
    _no_cuda()


from . import amp  # noqa: E402,F401  (torch.cuda.amp's names)
