"""ember.backends.cudnn: cuDNN's flags as module attributes scripts set (benchmark,
deterministic, enabled, allow_tf32); kept with PyTorch's defaults, no effect."""
benchmark = False
deterministic = False
enabled = True
allow_tf32 = True


def is_available():
    return False


def version():
    return None
