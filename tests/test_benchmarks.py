"""The benchmark scripts run (--quick: few runs, the same code paths) and print their
side-by-side tables; the figures themselves are for the closing note, not asserted."""
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _run(script, *args):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [os.path.join(ROOT, "python")] + [p for p in [env.get("PYTHONPATH")] if p])
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", script), *args],
                          capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def test_eager_ops_benchmark_runs():
    out = _run("eager_ops.py", "--quick")
    assert "BLAS:" in out and "1 thread(s) for every library" in out
    for op in ("add", "softmax(-1)", "layer_norm", "matmul 1024x1024", "conv2d"):
        assert op in out
    assert "large elementwise and matmul, ember/numpy" in out


def test_overhead_benchmark_runs():
    out = _run("overhead.py", "--quick")
    assert "triad" in out.lower() and "ember" in out


@pytest.mark.skipif(not os.environ.get("CI"), reason="torch.compile's first calls take "
                    "tens of seconds; run under CI")
def test_models_benchmark_runs():
    out = _run("models.py", "--quick")
    assert "MLP training step" in out and "GPT training step" in out


def test_compile_time_benchmark_runs():
    out = _run("compile_time.py", "--quick", "--only", "mlp", "--ember-only")
    assert "MLP training step" in out and "ember.compile" in out
    assert "new process 0 (disk hits" in out          # the warm process compiled nothing


@pytest.mark.skipif(not os.environ.get("CI"), reason="torch.compile's first calls take "
                    "tens of seconds; run under CI")
def test_compile_time_benchmark_runs_beside_torch():
    out = _run("compile_time.py", "--quick", "--only", "mlp")
    assert "torch.compile" in out


def test_bn_train_step_benchmark_runs():
    out = _run("bn_train_step.py", "--quick")
    assert "ember.compile llvm" in out and "BatchNorm" in out
    assert "whole step llvm" in out


@pytest.mark.skipif(not os.environ.get("CI"), reason="torch.compile's first calls take "
                    "tens of seconds; run under CI")
def test_vecmath_benchmark_runs():
    out = _run("vecmath.py", "--quick")
    assert "tanh chain" in out and "pow" in out and "t.compile" in out


@pytest.mark.skipif(not os.environ.get("CI"), reason="torch.compile's first calls take "
                    "tens of seconds; run under CI")
def test_train_benchmark_runs():
    out = _run("train.py", "--quick")
    for model in ("resnet", "gpt", "bert"):
        assert f"{model} training step" in out
    for config in ("ember eager", "ember aot_eager", "ember llvm", "torch aot min-cut",
                   "torch.compile"):
        assert config in out


@pytest.mark.skipif(not os.environ.get("CI"), reason="torch.compile's first calls take "
                    "tens of seconds; run under CI")
def test_attention_benchmark_runs():
    out = _run("attention.py", "--quick")
    assert "ember fused" in out and "torch.compile" in out and "fwd+bwd" in out


def test_capture_benchmark_runs():
    out = _run("capture.py", "--quick", "--ember-only")
    for part in ("function, 100 inputs", "module, 100 params", "12-layer GPT",
                 "ember.compile", "Seq2SeqTransformer"):
        assert part in out, out
    assert "no graph break in the zoo forwards (6 models): met" in out, out
    assert "one print in the middle: 2 graphs, 1 break (ember 2, 1): met" in out, out


@pytest.mark.skipif(not os.environ.get("CI"), reason="torch.compile's first calls take "
                    "tens of seconds; run under CI")
def test_capture_benchmark_runs_beside_torch():
    out = _run("capture.py", "--quick")
    assert "torch.compile" in out and "1/10 of torch.compile's" in out
    assert "one print in the middle: 2 graphs, 1 break (ember 2, 1; torch 2, 1): met" in out
