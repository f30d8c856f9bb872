"""ember.cuda, ember.backends and the default device: CPU-only PyTorch scripts run
unchanged (they ask whether CUDA is there, seed it, synchronize, set backend flags)."""
import pytest

import ember


def test_cuda_is_never_available(torch):
    assert ember.cuda.is_available() is torch.cuda.is_available() is False
    assert ember.cuda.device_count() == torch.cuda.device_count() == 0
    assert ember.cuda.is_initialized() is False


def test_seeding_and_housekeeping_calls_run():
    ember.cuda.manual_seed(0)
    ember.cuda.manual_seed_all(1234)
    ember.cuda.seed()
    ember.cuda.seed_all()
    assert ember.cuda.synchronize() is None
    assert ember.cuda.empty_cache() is None
    assert ember.cuda.memory_allocated() == ember.cuda.max_memory_allocated() == 0


def test_calls_that_need_a_device_raise_as_cpu_only_torch(torch):
    for name in ("current_device", "get_device_name", "get_rng_state"):
        with pytest.raises(AssertionError):
            getattr(torch.cuda, name)()
        with pytest.raises(AssertionError, match="CUDA"):
            getattr(ember.cuda, name)()


def test_a_typical_seeding_helper_runs():
    """What training scripts call before anything else."""
    import random

    import numpy as np

    def seed_everything(seed):
        random.seed(seed)
        np.random.seed(seed)
        ember.manual_seed(seed)
        ember.cuda.manual_seed_all(seed)
        ember.backends.cudnn.deterministic = True
        ember.backends.cudnn.benchmark = False

    cudnn = ember.backends.cudnn
    old = cudnn.deterministic, cudnn.benchmark
    try:
        seed_everything(3)
        a = ember.rand(3)
        seed_everything(3)
        assert a.tolist() == ember.rand(3).tolist()
    finally:
        cudnn.deterministic, cudnn.benchmark = old
    device = ember.device("cuda" if ember.cuda.is_available() else "cpu")
    assert ember.ones(2, device=device).device == ember.device("cpu")


def test_backend_flags_have_torchs_defaults_and_keep_what_is_set(torch):
    b = ember.backends
    for path in ("cudnn.benchmark", "cudnn.deterministic", "cudnn.enabled",
                 "cudnn.allow_tf32", "cuda.matmul.allow_tf32",
                 "cuda.matmul.allow_fp16_reduced_precision_reduction"):
        mod_e, mod_t = b, torch.backends
        *parents, leaf = path.split(".")
        for p in parents:
            mod_e, mod_t = getattr(mod_e, p), getattr(mod_t, p)
        assert getattr(mod_e, leaf) == getattr(mod_t, leaf), path
    old = b.cudnn.benchmark, b.cuda.matmul.allow_tf32
    try:
        b.cudnn.benchmark = True
        b.cuda.matmul.allow_tf32 = True
        assert b.cudnn.benchmark is True and b.cuda.matmul.allow_tf32 is True
    finally:
        b.cudnn.benchmark, b.cuda.matmul.allow_tf32 = old
    with pytest.raises(AttributeError, match="Unknown attribute"):
        b.cuda.matmul.allow_tf33 = True
    assert b.mps.is_available() is torch.backends.mps.is_available() is False
    assert b.cudnn.is_available() is False and b.cuda.is_built() is False
    assert b.cpu.get_cpu_capability() in ("AVX512", "AVX2", "DEFAULT")


def test_device_as_a_context_manager_and_default_device(torch):
    assert ember.get_default_device() == ember.device("cpu")
    with ember.device("cpu") as d:
        assert d == ember.device("cpu")
        assert ember.zeros(2).device == ember.device("cpu")
    ember.set_default_device("cpu")
    ember.set_default_device(None)
    assert str(ember.get_default_device()) == str(torch.get_default_device()) == "cpu"
    with pytest.raises(RuntimeError, match="CPU only"):
        with ember.device("cuda"):
            pass
    assert ember.get_default_device() == ember.device("cpu")
