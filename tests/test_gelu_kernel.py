"""cloops.c's float32 gelu (x Phi(x) through one erfc fit and one expf) against float64:
relative accuracy across the range, the deep negative tail included, and the special
values it has always given."""
import math

import numpy as np
import pytest

import ember

torch = pytest.importorskip("torch", reason="torch is the float64 reference")


def test_relative_error_over_the_range():
    x = np.concatenate([np.linspace(-12, 12, 400_001), -np.logspace(-30, 1, 20_000),
                        np.logspace(-30, 1, 20_000)]).astype(np.float32)
    x64 = torch.from_numpy(x.astype(np.float64))
    ref = (x64 * 0.5 * torch.special.erfc(-x64 / math.sqrt(2))).numpy()
    got = ember.nn.functional.gelu(ember.from_numpy(x)).numpy().astype(np.float64)
    keep = np.abs(ref) > 1e-30
    rel = np.abs(got - ref)[keep] / np.abs(ref[keep])
    assert rel.max() < 1e-6, (rel.max(), x[keep][rel.argmax()])


def test_special_values():
    sp = np.array([np.nan, np.inf, 0.0, -0.0, -200.0, 200.0], np.float32)
    got = ember.nn.functional.gelu(ember.from_numpy(sp)).numpy()
    assert np.isnan(got[0]) and got[1] == np.inf and got[5] == 200.0
    assert got[2] == 0 and got[3] == 0 and np.signbit(got[3]) and got[4] == 0


def test_large_c_loops_run_on_the_pool_identically_at_one_and_two_threads():
    """cloops.c's loops over at least 131072 elements go to the pool in fixed chunks of
    32768: the results are the same at 1 and 2 threads, and equal one call's."""
    import ember
    x = ember.from_numpy(np.random.default_rng(9).standard_normal(300001).astype(np.float32))
    before = ember.get_num_threads()
    outs = []
    try:
        for threads in (1, 2):
            ember.set_num_threads(threads)
            outs.append([f(x).numpy() for f in (ember.nn.functional.gelu,
                                                ember.nn.functional.silu, ember.sigmoid)])
    finally:
        ember.set_num_threads(before)
    for u, v in zip(*outs):
        np.testing.assert_array_equal(u, v)
    small = ember.nn.functional.gelu(x[:1000]).numpy()      # one call, no pool
    np.testing.assert_array_equal(outs[1][0][:1000], small)
