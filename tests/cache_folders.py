"""Shared by the disk-cache tests (test_kernel_cache.py, test_graph_cache.py): a cache
folder that others can write, which the caches must refuse (one RuntimeWarning, nothing
stored in it)."""
import contextlib
import os

import pytest

from ember.capture.config import config
from ember.compiler import kernel_cache


@contextlib.contextmanager
def refused_cache_folder(tmp_path, monkeypatch, mode, sub):
    """Sets a new folder of permission bits `mode` as the cache folder; the block must
    warn that it is writable by group or others and store nothing in its `sub` folder.
    Yields the folder."""
    path = tmp_path / "shared"
    path.mkdir()
    os.chmod(path, mode)
    monkeypatch.setattr(config, "cache_dir", str(path))
    monkeypatch.setattr(kernel_cache, "_warned", set())
    with pytest.warns(RuntimeWarning, match="writable by group or others"):
        yield path
    assert_nothing_stored(path, sub)


def assert_nothing_stored(path, sub):
    assert not (path / sub).exists() or not list((path / sub).iterdir())
