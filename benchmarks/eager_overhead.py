"""Ember eager per-op cost vs NumPy and PyTorch eager: [foundation]'s name for
benchmarks/eager_ops.py, which prints the same side-by-side table (16-element tensors
for overhead, 4M-element ones for throughput; same thread count, dtype and inputs on
every side; the median of >= 20 runs after warm-up).

    python benchmarks/eager_overhead.py [--threads 1] [--runs 25]
"""
import os
import runpy
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.argv[0] = os.path.join(os.path.dirname(os.path.abspath(__file__)), "eager_ops.py")
runpy.run_path(sys.argv[0], run_name="__main__")
