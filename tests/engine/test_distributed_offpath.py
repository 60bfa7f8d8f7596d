"""tfplus.distributed as Horovod's TF1 users write it (tests/scripts/hvd_style.py), off the path the benchmarks
measured (issue 36): every optimizer, compute_gradients and apply_gradients apart, gradients of several dtypes and
None ones, a non-trainable variable, the broadcast op built before initialization, batch norm's per-rank moving
statistics. One `mpiexec -n 2` launch and one single process serve every case."""
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("mpi4py", reason="the mpi extra is not installed: pip install -e '.[mpi]'")

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "hvd_style.py"
MPIEXEC = Path(sys.executable).parent / "mpiexec"  # the mpich wheel installs it beside the interpreter
# One thread and no forked workers per process: two ranks share the CI's two cores.
ENV = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p), TFPLUS_NUM_THREADS="1",
           TFPLUS_WORKERS="1")
OPTIMIZERS = ["sgd", "momentum", "adam", "rmsprop", "adagrad"]
BATCH, STEPS = 8, 3  # hvd_style.py's


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """(one process's folder, the two ranks' folder)."""
    one, two = tmp_path_factory.mktemp("one"), tmp_path_factory.mktemp("two")
    subprocess.run([sys.executable, str(SCRIPT), str(one), "single"], env=ENV, check=True, timeout=120)
    if not MPIEXEC.exists():
        pytest.fail(f"{MPIEXEC} is missing: the mpich wheel (the mpi extra) brings it")
    run = subprocess.run([str(MPIEXEC), "-n", "2", sys.executable, str(SCRIPT), str(two), "distributed"], env=ENV,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    return one, two


def _load(path) -> dict:
    with np.load(path) as f:
        return {k: f[k] for k in f.files}


@pytest.mark.parametrize("case", OPTIMIZERS)
def test_each_optimizer_over_two_ranks_trains_as_one_process(runs, case):
    one, two = runs
    want, got0, got1 = (_load(folder / f"{case}-rank{r}.npz") for folder, r in ((one, 0), (two, 0), (two, 1)))
    assert set(got0) == set(want) and int(got0["global_step"]) == STEPS
    assert got0["temperature"].dtype == np.float64 and got0["temperature"] != 1.25  # its gradient was averaged too
    np.testing.assert_array_equal(got0["unused"], np.ones(2, np.float32))  # a None gradient: left alone
    for name in want:
        np.testing.assert_allclose(got0[name], want[name], rtol=0, atol=1e-5, err_msg=name)
        np.testing.assert_array_equal(got1[name], got0[name], err_msg=name)  # same update on every rank
    import tfplus as tf
    reader = tf.train.load_checkpoint(str(two / case))  # rank 0's Saver
    assert all(np.array_equal(reader.get_tensor(k), got0[k]) for k in reader.get_variable_to_shape_map())


def test_each_rank_keeps_its_own_batch_norm_moving_statistics(runs):
    """As Horovod's: the gradients are averaged, so the trained weights stay equal; the moving statistics are
    each rank's own batches' (rank 0's are what its checkpoints hold)."""
    _, two = runs
    got = [_load(two / f"batchnorm-rank{r}.npz") for r in (0, 1)]
    for name in ("fc/kernel", "fc/bias", "bn/gamma", "bn/beta"):
        np.testing.assert_array_equal(got[1][name], got[0][name], err_msg=name)
    x = np.random.RandomState(0).randn(STEPS * BATCH, 5).astype(np.float32)  # hvd_style.py's X
    for r in (0, 1):
        mean = np.zeros(5, np.float64)
        for i in range(STEPS):
            rows = x[i * BATCH + r * BATCH // 2:i * BATCH + (r + 1) * BATCH // 2]
            mean = 0.9 * mean + 0.1 * rows.mean(axis=0)
        np.testing.assert_allclose(got[r]["bn/moving_mean"], mean, rtol=1e-5, atol=1e-6, err_msg=f"rank {r}")
    assert not np.allclose(got[0]["bn/moving_variance"], got[1]["bn/moving_variance"])


def test_allreduce_takes_horovods_op(runs):
    _, two = runs
    for r in (0, 1):
        got = _load(two / f"allreduce-rank{r}.npz")
        assert got["sum"].tolist() == [3.0] and got["mean"].tolist() == [1.5] and bool(got["initialized"])


@pytest.mark.parametrize("call", ["rank", "size", "local_rank", "local_size", "barrier"])
def test_asking_before_init_names_init(call):
    from tfplus import distributed
    assert not distributed.is_initialized()
    with pytest.raises(RuntimeError, match=r"call tfplus.distributed.init\(\) before"):
        getattr(distributed, call)()


# Rank 1 runs one step fewer (say its shard had a batch fewer): rank 0's last all-reduce has no partner.
ONE_STEP_SHORT = """
import numpy as np, tfplus as tf, tfplus.distributed as dist
dist.init()
x = dist.allreduce(tf.constant(np.ones(3, np.float32)))
with tf.Session() as sess:
    for _ in range(3 if dist.rank() == 0 else 2):
        sess.run(x)
"""


def test_a_rank_that_finishes_a_step_short_ends_the_job_with_an_error_instead_of_a_hang():
    run = subprocess.run([str(MPIEXEC), "-n", "2", sys.executable, "-c", ONE_STEP_SHORT], env=ENV,
                         capture_output=True, text=True, timeout=60)
    assert run.returncode != 0
    assert "rank 0 started collective 3, but rank 1 finished after 2: every rank must run the same steps" in \
        run.stderr, run.stderr


# The broadcast runs under the session's memory budget, as the step does: 512 KB of variables (the weights and
# their momentum), a step that fits 1.5 MB; a broadcast of all of them in one float64 buffer needed 2.7 MB.
BUDGETED = """
import numpy as np, tfplus as tf, tfplus.distributed as dist
dist.init()
tf.set_random_seed(dist.rank())
x = tf.placeholder(tf.float32, [4, 256])
w = tf.Variable(tf.random_normal([256, 256]), name="w")
train = dist.DistributedOptimizer(tf.train.MomentumOptimizer(0.01, 0.9)).minimize(
    tf.reduce_mean(tf.square(tf.matmul(x, w))))
bcast = dist.broadcast_global_variables(0)
with tf.Session(memory_budget="1.5MB") as sess:
    sess.run(tf.global_variables_initializer())
    sess.run(bcast)
    sess.run(train, {x: np.ones((4, 256), np.float32)})
    print(f"rank {dist.rank()}: {sess.run(w).tobytes().hex()[:64]}", flush=True)
"""


def test_the_broadcast_fits_the_memory_budget_the_step_fits():
    run = subprocess.run([str(MPIEXEC), "-n", "2", sys.executable, "-c", BUDGETED], env=ENV, capture_output=True,
                         text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    got = dict(re.findall(r"rank (\d): ([0-9a-f]{64})", run.stdout))  # the ranks share stdout: lines may join
    assert set(got) == {"0", "1"} and got["0"] == got["1"], run.stdout  # equal after the step
