"""A training step of a model with BatchNorm, side by side in one run: Ember eager and
ember.compile under aot_eager and llvm (the running statistics are updated inside the
compiled graph, no graph break), of the model alone and of the whole step (zero_grad,
forward, loss, backward, SGD's step: two graphs, the backward a break between them, the
optimizer's in-place updates in the second), same weights, inputs, float32 and thread
count. Each
figure is the median of >= 20 timed runs after warm-up; the first (compiling) call is
reported apart, with the graphs and fallbacks ember.compile counted.

    python benchmarks/bn_train_step.py [--threads 1] [--runs 20]

Workload: the zoo's ResNet-18 layout (models.resnet18, width 16, 10 classes) on a batch
of 8 32x32 images: forward, cross-entropy, backward, SGD with momentum.
"""
import _harness

args = _harness.setup(__doc__)

import time  # noqa: E402

import numpy as np  # noqa: E402

import ember  # noqa: E402
from ember import models  # noqa: E402
from ember.capture import counters  # noqa: E402


def make_step(backend, whole=False):
    ember.manual_seed(0)
    model = models.resnet18(num_classes=10, width=8 if args.quick else 16)
    model.train()
    opt = ember.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    run = ember.compile(model, backend=backend) if backend and not whole else model
    g = np.random.default_rng(0)
    n = 2 if args.quick else 8
    x = ember.from_numpy(g.standard_normal((n, 3, 32, 32)).astype(np.float32))
    y = ember.from_numpy(g.integers(0, 10, n))

    def step():
        opt.zero_grad()
        loss = ember.nn.functional.cross_entropy(run(x), y)
        loss.backward()
        opt.step()
        return loss
    return ember.compile(step, backend=backend) if whole else step


def main():
    _harness.print_env(args.threads)
    ember.set_num_threads(args.threads)
    runs = 3 if args.quick else args.runs
    rows = []
    for label, backend, whole in (
            ("ember eager", None, False), ("ember.compile aot_eager", "aot_eager", False),
            ("ember.compile llvm", "llvm", False),
            ("whole step aot_eager", "aot_eager", True), ("whole step llvm", "llvm", True)):
        ember.compiler.reset()
        counters.clear()
        step = make_step(backend, whole)
        t0 = time.perf_counter()
        step()
        first = time.perf_counter() - t0
        graphs = counters["stats"].get("unique_graphs", 0)
        fallbacks = counters["stats"].get("frames_fallback", 0)
        t = _harness.median_time(step, runs=runs, warmup=1 if args.quick else 3)
        rows.append((label, t, first, graphs, fallbacks))
    eager = rows[0][1]
    print("\nResNet-18 layout with BatchNorm, training step (forward, loss, backward, SGD)")
    print(f"{'side':26s} {'ms/step':>10s} {'vs eager':>9s} {'first call s':>13s} "
          f"{'graphs':>7s} {'fallbacks':>10s}")
    for label, t, first, graphs, fallbacks in rows:
        print(f"{label:26s} {t * 1e3:10.2f} {_harness.fmt_ratio(t, eager):>9s} "
              f"{first:13.2f} {graphs if label != 'ember eager' else '-':>7} "
              f"{fallbacks if label != 'ember eager' else '-':>10}")


main()
