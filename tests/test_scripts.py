"""Small training scripts of the kind people bring (tests/scripts/), each run twice in a
fresh interpreter: with `import torch` answered by ember, and with torch itself. Their
losses must agree to 1e-5 (relative) at every one of their steps.

The scripts fix their weights and data from NumPy, so both runs start from the same
numbers (ember's random streams are not torch's), and use no dropout.

char_sampler trains a char-level MLP and samples text with multinomial (top-k filtered,
so every library draws the same characters). llama_block trains a Llama-style block whose rotary embeddings are
complex numbers (polar, view_as_complex, view_as_real)."""
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

SCRIPTS = Path(__file__).resolve().parent / "scripts"
ROOT = Path(__file__).resolve().parent.parent

# runs a script with every `torch` module name mapped to its ember module
AS_TORCH = r"""
import importlib, importlib.abc, importlib.util, runpy, sys
import ember

class _Alias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            return importlib.util.spec_from_loader(name, self)
        return None
    def create_module(self, spec):
        return importlib.import_module("ember" + spec.name[len("torch"):])
    def exec_module(self, module):
        pass

sys.meta_path.insert(0, _Alias())
sys.argv = [sys.argv[1]]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def _run(script, as_ember, torch_available):
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT / "python") + os.pathsep + env.get("PYTHONPATH", "")
    env.setdefault("OMP_NUM_THREADS", "1")
    cmd = [sys.executable, "-c", AS_TORCH, str(script)] if as_ember else \
        [sys.executable, str(script)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, f"{script.name} ({'ember' if as_ember else 'torch'}):\n" \
        f"{proc.stderr[-3000:]}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


NAMES = ["style_transfer", "lstm_cell_sequence", "mnist_adadelta", "packed_gru_classifier",
         "llama_block", "char_sampler"]


@pytest.mark.parametrize("name", NAMES)
def test_script_losses_match_torch(torch, name):
    script = SCRIPTS / f"{name}.py"
    with_ember = _run(script, True, torch)
    with_torch = _run(script, False, torch)
    assert len(with_ember) == len(with_torch) >= 20
    np.testing.assert_allclose(with_ember, with_torch, rtol=1e-5, atol=1e-7)
    assert with_ember[19] < with_ember[0]            # it trains


def test_alias_maps_torch_to_ember():
    """The launcher answers `torch` (and its submodules) with ember's modules."""
    code = AS_TORCH.replace("runpy.run_path(sys.argv[0], run_name=\"__main__\")",
                            "import torch, torch.nn.utils.rnn as r, torch.optim.lr_scheduler "
                            "as s\nprint(torch.__name__, r.__name__, s.__name__)")
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT / "python")
    out = subprocess.run([sys.executable, "-c", code, "x"], capture_output=True, text=True,
                         env=env, timeout=300)
    assert out.stdout.split() == ["ember", "ember.nn.utils.rnn", "ember.optim.lr_scheduler"]
