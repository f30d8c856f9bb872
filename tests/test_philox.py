"""The Philox4x32-10 reference (python/ember/philox.py), issue aot-2 item 2: the
published known-answer vectors, the counter-based properties compiled graphs rely on
(an element's bits depend on (seed, offset, index) alone), and the statistics of the
uniforms and normals made from them."""
import numpy as np
import pytest

from ember import philox


@pytest.mark.parametrize("counter, key, want", [
    # known-answer vectors of the Random123 distribution (Salmon et al. 2011)
    ((0, 0, 0, 0), (0, 0), (0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8)),
    ((0xffffffff,) * 4, (0xffffffff,) * 2, (0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd)),
    ((0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344), (0xa4093822, 0x299f31d0),
     (0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1)),
])
def test_known_answers(counter, key, want):
    assert tuple(int(w) for w in philox.philox4x32(counter, key)) == want


def test_an_elements_bits_depend_on_seed_offset_and_index_alone():
    a = philox.random_bits(5, 3, 1000)
    b = philox.random_bits(5, 3, 10)
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x[:10], y)          # any length, same prefix
    for x, y in zip(a, philox.random_bits(5, 3, 1000)):
        np.testing.assert_array_equal(x, y)               # reproducible
    assert (philox.random_bits(5, 4, 1000)[0] != a[0]).mean() > 0.99   # next offset
    assert (philox.random_bits(6, 3, 1000)[0] != a[0]).mean() > 0.99   # other seed
    # large offsets and seeds use their high words
    assert (philox.random_bits(5, 3 + 2 ** 32, 1000)[0] != a[0]).mean() > 0.99
    assert (philox.random_bits(5 + 2 ** 32, 3, 1000)[0] != a[0]).mean() > 0.99


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_uniform_statistics(dtype):
    u = philox.uniform(1, 0, (200, 500), dtype)
    assert u.dtype == dtype and u.shape == (200, 500)
    assert u.min() >= 0.0 and u.max() < 1.0
    n = u.size
    # mean 1/2 and variance 1/12, within 5 standard errors
    assert abs(u.mean() - 0.5) < 5 * np.sqrt(1 / 12 / n)
    assert abs(u.var() - 1 / 12) < 5 * np.sqrt(1 / 180 / n)
    # ten equal bins, chi-square with 9 degrees of freedom well below its 0.1% point 27.9
    counts = np.histogram(u, bins=10, range=(0, 1))[0]
    assert ((counts - n / 10) ** 2 / (n / 10)).sum() < 27.9
    # neighbouring elements uncorrelated
    flat = u.reshape(-1).astype(np.float64)
    assert abs(np.corrcoef(flat[:-1], flat[1:])[0, 1]) < 5 / np.sqrt(n)


def test_normal_statistics():
    z = philox.normal(2, 7, (100000,))
    assert z.dtype == np.float32 and np.isfinite(z).all()
    assert abs(z.mean()) < 5 / np.sqrt(z.size)
    assert abs(z.var() - 1) < 5 * np.sqrt(2 / z.size)
    assert abs((np.abs(z) < 1).mean() - 0.6827) < 0.01


def test_bernoulli_mask_statistics():
    """A dropout mask (u >= p) keeps a fraction 1 - p."""
    keep = philox.uniform(3, 0, (100000,)) >= 0.3
    assert abs(keep.mean() - 0.7) < 5 * np.sqrt(0.21 / keep.size)
