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
