"""Writes the table of measured maximum errors in docs/vecmath.md (between its
`<!-- table -->` markers): ember.compiler.vecmath_accuracy run at each vector width
this machine can run (the host's features, AVX2 on an AVX-512 host and SSE4.2, forced
by EMBER_LLVM_FEATURES).

    PYTHONPATH=python python tools/vecmath_table.py [--stride N]
"""
import argparse
import os
import pathlib
import re
import subprocess
import sys

NARROW = "+sse2,+sse3,+ssse3,+sse4.1,+sse4.2,+popcnt"
AVX2 = NARROW + ",+avx,+avx2,+fma,+f16c,+bmi,+bmi2"
DOC = pathlib.Path(__file__).resolve().parent.parent / "docs" / "vecmath.md"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--stride", type=int, default=421)
    args = ap.parse_args()
    rows = []
    sys.path.insert(0, str(DOC.parent.parent / "python"))
    import ember
    widths = [None, NARROW]
    if "+avx512f" in ember._C._jit_target()["features"]:
        widths.insert(1, AVX2)          # an AVX-512 host runs the AVX2 code too
    for features in widths:
        env = dict(os.environ)
        if features:
            env["EMBER_LLVM_FEATURES"] = features
        out = subprocess.run([sys.executable, "-m", "ember.compiler.vecmath_accuracy",
                              "--markdown", "--stride", str(args.stride)],
                             env=env, capture_output=True, text=True)
        rows += [line for line in out.stdout.splitlines() if line.startswith("|")]
    table = ("| function | vector unit | max ulp | bound | special values | points |\n"
             "|---|---|---|---|---|---|\n" + "\n".join(rows) + "\n")
    text = DOC.read_text()
    text = re.sub(r"(<!-- table -->\n).*?(<!-- /table -->)", lambda m: m[1] + table + m[2],
                  text, flags=re.S)
    DOC.write_text(text)
    print(table)


if __name__ == "__main__":
    main()
