"""Shared test fixtures.

`torch` is for parity checks only. Without it those tests skip with a reason; under CI
(CI=true) a missing torch is a failure, because CI installs it.
"""
import os

import pytest

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
