"""Shared test fixtures.

`torch` is for parity checks only. Without it those tests skip with a reason; under CI
(CI=true) a missing torch is a failure, because CI installs it.
"""
import atexit
import os
import shutil
import sys
import tempfile

import pytest

# The suite never touches the user's kernel cache: compiled kernels go to a temporary
# folder of this run (subprocesses inherit it through the environment).
_KERNEL_CACHE = tempfile.mkdtemp(prefix="ember-test-cache-")
os.environ["EMBER_CACHE_DIR"] = _KERNEL_CACHE
atexit.register(shutil.rmtree, _KERNEL_CACHE, ignore_errors=True)
if "ember.capture.config" in sys.modules:          # imported before this file
    sys.modules["ember.capture.config"].config.cache_dir = _KERNEL_CACHE

IN_CI = os.environ.get("CI", "").lower() == "true"


def import_torch():
    try:
        import torch
    except ImportError:
        if IN_CI:
            pytest.fail("torch is required under CI (make test installs torch==2.13.0)")
        pytest.skip("torch is not installed: PyTorch parity not checked")
    return torch


@pytest.fixture(scope="session")
def torch():
    return import_torch()
