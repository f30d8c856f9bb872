"""examples/quickstart.ipynb runs in a Jupyter kernel (where users work) with the
outputs it promises; re-running a cell that redefines a compiled function compiles the
new code.

The kernel is this interpreter (an ipykernel kernelspec written to a temporary
JUPYTER_PATH), so the test uses the environment it runs in. nbclient and ipykernel come
with the [test] extra (`make test` installs it); without them the test skips, except
under CI, where they are required.
"""
import json
import os
import sys

import pytest

from conftest import IN_CI

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NOTEBOOK = os.path.join(ROOT, "examples", "quickstart.ipynb")


def _require(module):
    try:
        return __import__(module)
    except ImportError:
        if IN_CI:
            pytest.fail(f"{module} is required under CI (pip install -e '.[test]')")
        pytest.skip(f"{module} is not installed (pip install -e '.[test]')")


@pytest.fixture
def client(tmp_path, monkeypatch):
    """A NotebookClient on a copy of the notebook, with a kernel running this Python."""
    _require("ipykernel")
    nbclient = _require("nbclient")
    nbformat = _require("nbformat")
    spec_dir = tmp_path / "jupyter" / "kernels" / "ember-test"
    spec_dir.mkdir(parents=True)
    (spec_dir / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "ember test", "language": "python"}))
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path / "runtime"))
    monkeypatch.setenv("IPYTHONDIR", str(tmp_path / "ipython"))
    monkeypatch.setenv("PYTHONPATH", os.path.join(ROOT, "python") + os.pathsep +
                       os.environ.get("PYTHONPATH", ""))
    nb = nbformat.read(NOTEBOOK, as_version=4)
    return nbclient.NotebookClient(nb, kernel_name="ember-test", timeout=120,
                                   resources={"metadata": {"path": str(tmp_path)}})


def text_of(cell):
    out = []
    for o in cell.get("outputs", []):
        if o["output_type"] == "stream":
            out.append(o["text"])
        elif o["output_type"] == "error":
            out.append("\n".join(o["traceback"]))
        elif "text/plain" in o.get("data", {}):
            out.append(o["data"]["text/plain"])
    return "".join(out)


def cell_defining(nb, text):
    return next(i for i, c in enumerate(nb.cells) if c.cell_type == "code" and text in c.source)


def test_quickstart_notebook_runs_and_recompiles_a_redefined_function(client):
    with client.setup_kernel():
        nb = client.nb
        for index, cell in enumerate(nb.cells):
            client.execute_cell(cell, index)
        outputs = [text_of(c) for c in nb.cells if c.cell_type == "code"]
        assert not any("Traceback" in o or "Error" in o for o in outputs), outputs
        assert "tensor([0., 1., 2., 3.])" in outputs[0]
        fn_cell = cell_defining(nb, "def scale_shift")
        assert "tensor([1., 3., 5., 7.])" in text_of(nb.cells[fn_cell])
        graph = text_of(nb.cells[cell_defining(nb, "def gelu_ish")])
        assert "captured 1 input(s)" in graph
        assert "sigmoid" in graph and "def forward(self, L_x" in graph
        module = text_of(nb.cells[cell_defining(nb, "class TinyNet")])
        assert "(3, 2) matches eager: True" in module
        assert "captured 5 input(s)" in module and "L_self_fc2_bias" in module
        report = text_of(nb.cells[cell_defining(nb, "ember._dynamo.explain")])
        assert "Graph Count: 1" in report and "Graph Break Count: 0" in report
        assert "unsupported: {}" in report

        # edit the function's cell and run it again: the new code is compiled
        cell = nb.cells[fn_cell]
        cell.source = cell.source.replace("x * 2 + 1", "x * 3 - 1")
        client.execute_cell(cell, fn_cell)
        assert "tensor([-1.,  2.,  5.,  8.])" in text_of(cell), text_of(cell)
        check = nbformat_cell("print(len(scale_shift._ember_compile_context.graphs), "
                              "dict(ember._dynamo.counters['stats'])['unique_graphs'])")
        nb.cells.append(check)
        client.execute_cell(check, len(nb.cells) - 1)
        assert text_of(check).split()[0] == "1"      # a new function, one graph
        assert int(text_of(check).split()[1]) >= 4   # scale_shift twice, gelu_ish, net


def nbformat_cell(source):
    from nbformat.v4 import new_code_cell
    return new_code_cell(source)


def test_committed_notebook_has_its_outputs():
    """The notebook is committed executed, so it reads well without a kernel."""
    with open(NOTEBOOK) as f:
        nb = json.load(f)
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    assert code and all(c.get("outputs") for c in code)
    assert all(c.get("execution_count") for c in code)


def test_interrupting_the_kernel_stops_a_long_compiled_call(client):
    """Jupyter's interrupt (SIGINT to the kernel) during a long compiled call: the cell
    ends with KeyboardInterrupt well before the call would have, and the next cell's
    compiled calls run (the thread pool recovered)."""
    import signal
    import threading
    import time
    nb = client.nb
    nb.cells = [nbformat_cell(
        "import os, time, numpy as np, ember\n"
        "def f(x):\n"
        "    for _ in range(48):\n"
        "        x = (x.sin() * 0.9).exp()\n"
        "    return x\n"
        "cf = ember.compile(f, backend='llvm')\n"
        "x = ember.randn(1 << 25)\n"
        "cf(x)\n"                      # compiles: the timed call below is a warm one
        "t0 = time.monotonic(); cf(x); print('took', time.monotonic() - t0, os.getpid())"),
        nbformat_cell("cf(x)\nprint('finished')"),
        nbformat_cell("pass"),
        nbformat_cell("y = ember.randn(1 << 17)\n"
                      "print('recovered', np.allclose(cf(y).numpy(), f(y).numpy(), "
                      "rtol=1e-5))")]
    client.allow_errors = True
    with client.setup_kernel():
        client.execute_cell(nb.cells[0], 0)
        took, pid = text_of(nb.cells[0]).split()[1:3]
        took = float(took)
        # what Jupyter's interrupt does (interrupt_mode "signal")
        timer = threading.Timer(min(0.8, took / 4), os.kill, (int(pid), signal.SIGINT))
        t0 = time.monotonic()
        timer.start()
        client.execute_cell(nb.cells[1], 1)
        elapsed = time.monotonic() - t0
        timer.join()
        out = text_of(nb.cells[1])
        assert "KeyboardInterrupt" in out, (out, took, elapsed)
        assert "finished" not in out.splitlines(), out       # the cell's print did not run
        # the round trip of a cell that does nothing: the kernel's own overhead
        t0 = time.monotonic()
        client.execute_cell(nb.cells[2], 2)
        overhead = time.monotonic() - t0
        assert elapsed < min(0.8, took / 4) + took / 2 + overhead, (elapsed, took, overhead)
        client.execute_cell(nb.cells[3], 3)
        assert "recovered True" in text_of(nb.cells[3]), text_of(nb.cells[3])
