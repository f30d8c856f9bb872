"""docs/prims.md is generated from the op table and must match it."""
from pathlib import Path

from ember.ops import docs


def test_prims_md_is_current():
    path = Path(__file__).resolve().parent.parent / "docs" / "prims.md"
    assert path.read_text() == docs.render(), \
        "docs/prims.md is stale: run `python -m ember.ops.docs > docs/prims.md`"
