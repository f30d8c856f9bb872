"""A fixture for capture tests that start and end with empty caches and counters:
`from fresh_compiler import fresh_compiler  # noqa: F401` makes it apply to a module
(a conftest.py here would shadow tests/conftest.py for `from conftest import ...`)."""
import pytest

import ember
from ember.capture import counters


@pytest.fixture(autouse=True)
def fresh_compiler():
    ember.compiler.reset()
    counters.clear()
    yield
    ember.compiler.reset()
