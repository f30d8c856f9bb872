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


def test_eager_ops_separate_processes_at_two_threads():
    """At 2 threads the nn and zoo tables come from one worker process per library (the
    default there); every row has both libraries' figures and a verdict."""
    pytest.importorskip("torch")
    out = _run("eager_ops.py", "--quick", "--threads", "2", "--only", "nn")
    assert "one worker process per library" in out
    assert "interleaved" not in out
    for row in ("softmax", "gelu", "cross_entropy", "max_pool2d 2x2", "GPT", "ResNet"):
        lines = [ln for ln in out.splitlines() if ln.startswith(row)]
        assert lines and all(ln.rstrip().endswith(("met", "MISSED")) for ln in lines), row
    assert "# nn ops at 2 thread(s):" in out


def test_eager_ops_only_names_nn_rows():
    """--only with op names times those nn rows alone (no other op, no zoo or
    small-tensor table)."""
    pytest.importorskip("torch")
    out = _run("eager_ops.py", "--quick", "--only", "embedding,transpose")
    rows = [ln.split()[0] for ln in out.splitlines()
            if ln.rstrip().endswith(("met", "MISSED")) and not ln.startswith("#")]
    # ("embedding" names the rows starting so: embedding_bag's too)
    assert rows and set(rows) == {"embedding", "embedding_bag", "transpose+contiguous"}
    assert "GPT" not in out and "large elementwise" not in out


def test_eager_ops_interleaved_flag_keeps_one_process():
    pytest.importorskip("torch")
    out = _run("eager_ops.py", "--quick", "--threads", "2", "--only", "nn",
               "--interleaved")
    assert "interleaved runs (both libraries in this process)" in out
    assert "one worker process" not in out


def test_overhead_benchmark_runs():
    out = _run("overhead.py", "--quick")
    assert "triad" in out.lower() and "ember" in out


@pytest.mark.skipif(not os.environ.get("CI"), reason="torch.compile's first calls take "
                    "tens of seconds; run under CI")
def test_models_benchmark_runs():
    out = _run("models.py", "--quick", "--only", "mlp,gpt")
    for kind in ("inference", "training step"):
        assert f"batch 4, {kind}:" in out and f"4 x 16 tokens, {kind}:" in out
    assert "cold / warm" in out and "torch.compile" in out
    assert "# targets at 1 thread(s):" in out and "of 4 model workloads" in out


@pytest.mark.skipif(not os.environ.get("CI"), reason="torch.compile's first calls take "
                    "tens of seconds; run under CI")
def test_models_benchmark_zoo_runs_at_two_threads():
    out = _run("models.py", "--quick", "--threads", "2", "--only", "resnet,bert,lstm")
    assert "2 thread(s) for every library" in out
    for model in ("ResNet-style CNN", "BERT-style encoder", "LSTM classifier"):
        assert f"{model}" in out
    assert "of 6 model workloads" in out


def test_models_benchmark_times_cpu_and_names_the_blas_kernel():
    """--cpu-time times the runs in process CPU time (said in the header), and the header
    names the BLAS and the kernel (OpenBLAS core type) it runs."""
    out = _run("models.py", "--quick", "--no-torch", "--cpu-time", "--only", "mlp")
    assert "; process CPU time;" in out
    assert "# BLAS: " in out and ", kernel " in out and "kernel unknown" not in out
    assert "batch 4, training step" in out


def test_models_benchmark_refuses_unknown_workloads():
    """--only picks workloads; an unknown one is refused by name."""
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"))
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "models.py"),
                           "--quick", "--only", "nosuch"], capture_output=True, text=True,
                          timeout=600, env=env)
    assert proc.returncode != 0 and "unknown workloads ['nosuch']" in proc.stderr


@pytest.mark.skipif(not os.environ.get("CI"), reason="torch.compile's first calls take "
                    "tens of seconds; run under CI")
def test_kernels_benchmark_runs():
    out = _run("kernels.py", "--quick")
    for row in ("layer_norm + gelu + residual", "scaled softmax", "a.sigmoid()).relu()",
                "GEMM", "triad", "numpy", "torch.compile"):
        assert row in out
    assert "# targets at 1 thread(s):" in out and "of the triad" in out
    assert "the best BLAS" in out and "kernel " in out


def test_kernels_benchmark_runs_ember_side():
    """Without torch.compile's compile times: the Ember, NumPy and triad rows, checked
    against NumPy in float64 inside the script."""
    out = _run("kernels.py", "--quick", "--threads", "2", "--no-torch")
    assert "2 thread(s) for every library" in out and "triad" in out
    assert "torch eager" not in out and "ember.compile" in out and "numpy" in out


def test_kernels_benchmark_runs_only_the_listed_kernels():
    out = _run("kernels.py", "--quick", "--no-torch", "--only", "softmax,chain")
    assert "scaled softmax" in out and "tanh()" in out
    assert "layer_norm + gelu" not in out and "GEMM" not in out


def test_kernels_benchmark_times_max_autotune_beside_the_default():
    """--mode max-autotune: a line per kernel with the wall-time verdict and the CPU-time
    ratio (what a loaded machine disturbs less)."""
    out = _run("kernels.py", "--quick", "--no-torch", "--only", "softmax", "--mode",
               "max-autotune")
    line = [ln for ln in out.splitlines() if "mode=max-autotune at" in ln][0]
    assert "(target: not slower)" in line and "[CPU time: " in line
    assert line.rstrip().endswith("x]") and ("met" in line or "MISSED" in line)


_AVX2 = "+sse2,+sse3,+ssse3,+sse4.1,+sse4.2,+popcnt,+avx,+avx2,+fma,+f16c,+bmi,+bmi2"


def test_kernels_benchmark_holds_torch_to_avx2_with_ember(monkeypatch):
    """With Ember forced to AVX2 (EMBER_LLVM_FEATURES), PyTorch is held to AVX2 too (as
    on an AVX2 host), with Inductor's cache apart; EMBER_BENCH_TORCH_ISA=native opts out.
    Inside the script torch is checked against NumPy in float64, so a cache entry of the
    other ISA (which gave wrong results) would fail it."""
    pytest.importorskip("torch")
    monkeypatch.setenv("EMBER_LLVM_FEATURES", _AVX2)
    monkeypatch.delenv("ATEN_CPU_CAPABILITY", raising=False)
    out = _run("kernels.py", "--quick", "--only", "softmax")
    assert "8 float32 lanes (EMBER_LLVM_FEATURES forced)" in out
    assert "# PyTorch held to ATEN_CPU_CAPABILITY=avx2 like Ember" in out
    assert "_avx2)" in out and "torch.compile" in out
    monkeypatch.setenv("EMBER_BENCH_TORCH_ISA", "native")
    out = _run("kernels.py", "--quick", "--only", "softmax")
    assert "# PyTorch at the host's ISA" in out


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
