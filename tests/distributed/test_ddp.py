"""DistributedDataParallel in real 2- and 3-rank jobs: five training steps on 1/N of the
batch per rank give the parameters one process gets on the whole batch (float64, SGD
with momentum and AdamW); no_sync accumulation; the first bucket's all-reduce starts
before the backward's last gradient."""
import numpy as np
import pytest

import ember
from ddp_common import BATCH_PER_RANK, Net, data, optimizer, params_of, train
from launch import launch, require_mpi, run_job
from worker_ddp import branch_input


def reference(world, name, init):
    model = Net().double()
    with ember.no_grad():
        for k, p in model.named_parameters():
            p.copy_(ember.from_numpy(init[k]))
    opt = optimizer(name, model.parameters())
    train(model, opt, world, lambda step: np.arange(world * BATCH_PER_RANK))
    return params_of(model)


@pytest.fixture(scope="module", params=[2, 3])
def eager(request, tmp_path_factory):
    n = request.param
    return n, launch("worker_ddp.py", n, tmp_path_factory.mktemp(f"ddp{n}"), "eager")


def _init(res, prefix):
    return {k[len(prefix):]: v for k, v in res.items() if k.startswith(prefix)}


@pytest.mark.parametrize("name", ["sgd", "adamw"])
def test_ddp_training_equals_one_process_on_the_whole_batch(eager, name):
    n, results = eager
    init = _init(results[0], f"init_{name}_")
    for r in range(1, n):             # rank 0's parameters were broadcast at construction
        for k, v in _init(results[r], f"init_{name}_").items():
            np.testing.assert_array_equal(v, init[k])
    want = reference(n, name, init)
    for res in results:
        for k, v in want.items():
            np.testing.assert_allclose(res[f"{name}_{k}"], v, rtol=1e-6, atol=1e-6)


def test_no_sync_accumulates_then_averages(eager):
    n, results = eager
    init = _init(results[0], "init_nosync_")
    model = Net().double()
    with ember.no_grad():
        for k, p in model.named_parameters():
            p.copy_(ember.from_numpy(init[k]))
    rows = np.arange(n * BATCH_PER_RANK)
    for step in (0, 1):
        x, y = data(n, step)
        ((model(ember.from_numpy(x[rows])) - ember.from_numpy(y[rows])) ** 2).mean().backward()
    locals_ = [res["nosync_local_grad"] for res in results]
    assert not np.allclose(locals_[0], locals_[1])      # inside no_sync: not reduced
    for res in results:
        for k, p in model.named_parameters():
            np.testing.assert_allclose(res[f"nosync_grad_{k}"], p.grad.numpy(), rtol=1e-6,
                                       atol=1e-8)


def _overlap(res):
    assert int(res["deep_buckets"]) == 4 and int(res["works"]) == 4
    # launched while the backward still had the first layer's gradients to compute
    assert float(res["first_start"]) < float(res["last_bucket_first_ready"])


def test_all_reduce_overlaps_the_backward(eager):
    n, results = eager
    for res in results:
        _overlap(res)


def test_find_unused_parameters(eager):
    n, results = eager
    local = [np.tile(branch_input(r).sum(0), (2, 1)) for r in range(n)]
    for res in results:
        np.testing.assert_allclose(res["unused_a_grad"], sum(local) / n, rtol=1e-12)
        np.testing.assert_allclose(res["unused_only0_grad"], local[0] / n, rtol=1e-12)
        assert bool(res["unused_unused_grad_is_none"])
        assert "find_unused_parameters=True" in str(res["unused_error"])


def test_broadcast_buffers_and_state_dict(eager):
    n, results = eager
    for r, res in enumerate(results):
        np.testing.assert_array_equal(res["buffer_after_forward_True"], [5.0, 5.0])
        np.testing.assert_array_equal(res["buffer_after_forward_False"], [r + 5.0] * 2)
        inner = eval(str(res["inner_state_dict_keys"]))
        assert eval(str(res["state_dict_keys"])) == ["module." + k for k in inner]
        assert bool(res["module_is_inner"])


def test_a_failing_rank_ends_the_job_naming_it(tmp_path):
    require_mpi()
    import time
    p = run_job("worker_fail.py", 3, tmp_path, timeout=90)
    ended = time.time()
    assert p.returncode != 0
    assert "rank 1 failed" in p.stderr and "ValueError: boom on rank 1" in p.stderr
    assert "unreachable" not in p.stderr
    raised = float((tmp_path / "raised_at").read_text())
    assert ended - raised < 30, ended - raised


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    return launch("worker_ddp.py", 2, tmp_path_factory.mktemp("cddp"), "compiled")


@pytest.mark.parametrize("name", ["sgd", "adamw"])
def test_compiled_ddp_equals_eager_ddp(compiled, name):
    for res in compiled:
        keys = [k for k in res if k.startswith(f"{name}_")]
        assert len(keys) == 6
        for k in keys:
            np.testing.assert_allclose(res[k], res["eager_" + k], rtol=1e-12, atol=1e-12)
            assert not np.array_equal(res[k], res[f"init_{k}"])     # it trained


def test_compiled_ddp_one_graph_per_bucket_and_overlap(compiled):
    for res in compiled:
        assert abs(int(res["pieces"]) - int(res["bucket_count"])) <= 1
        assert int(res["deep_pieces"]) == int(res["deep_buckets"]) == 4
        _overlap(res)
