"""Every capture test starts and ends with empty caches and counters."""
import pytest

import ember


@pytest.fixture(autouse=True)
def fresh_compiler():
    ember.compiler.reset()
    yield
    ember.compiler.reset()
