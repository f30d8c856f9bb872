"""Recompute the catalogue's graph counts with PyTorch and print or store them.

    python tests/capture/write_catalogue_counts.py            # print, compare with counts.json
    python tests/capture/write_catalogue_counts.py --write    # rewrite counts.json
    python tests/capture/write_catalogue_counts.py NAME ...   # only these cases

Each case's source text runs with `torch` bound to PyTorch, and
torch._dynamo.explain(fn)(*args, **kwargs).graph_count is its count (catalogue.torch_counts,
the helper the break-case tests use too); the counts come from
PyTorch only, never from Ember. A case whose explain reports graph breaks (or raises) is
listed and makes the script exit 1, unless the case is marked torch_breaks (a construct
torch breaks on too): its entry is then [graph_count, graph_break_count].
"""
from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from catalogue import CASES, torch_counts  # noqa: E402
from catalogue.case import COUNTS_FILE  # noqa: E402


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("names", nargs="*", help="only these cases")
    p.add_argument("--write", action="store_true", help="rewrite counts.json")
    opts = p.parse_args(argv)
    import torch

    stored = {}
    if os.path.exists(COUNTS_FILE):
        with open(COUNTS_FILE) as f:
            stored = json.load(f)
    cases = [c for c in CASES if not opts.names or c.name in opts.names]
    errors = {}
    explained = torch_counts(torch, cases, errors)
    counts, bad = {}, {}
    for case in cases:
        if case.name in errors:
            e = errors[case.name]
            bad[case.name] = f"raised {type(e).__name__}: {e}"[:300]
            continue
        n, _, reasons = explained[case.name]
        if reasons and not case.torch_breaks:
            bad[case.name] = f"{n} graphs, breaks: {reasons}"[:300]
            continue
        if case.torch_breaks and not reasons:
            bad[case.name] = "marked torch_breaks, but torch captures it whole"
            continue
        counts[case.name] = [n, len(reasons)] if case.torch_breaks else n
        mark = "" if stored.get(case.name) == counts[case.name] else \
            f"   (stored {stored.get(case.name)})"
        print(f"{case.name}: {counts[case.name]}{mark}")
    for name, why in bad.items():
        print(f"NOT WHOLE {name}: {why}")
    if opts.write:
        merged = dict(stored) if opts.names else {}
        merged.update(counts)
        known = {c.name for c in CASES}
        merged = {k: merged[k] for k in sorted(merged) if k in known}
        with open(COUNTS_FILE, "w") as f:
            json.dump(merged, f, indent=1, sort_keys=True)
            f.write("\n")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
