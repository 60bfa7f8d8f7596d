"""The opencl all-reduce run ahead (kernels/opencl/collective.py, TFPLUS_ALLREDUCE_RUNAHEAD=1) under `mpiexec -n 2
tfplus train --distributed`, both ranks on PoCL's one device: the host queues each summed bucket's copy back
behind a user event the communication thread completes and goes on to the next step. It trains as one process at
the whole batch whether the host reads the running sums every step or every few, writes checkpoints mid-run, stops
every rank after the same step on SIGINT, and a killed or stalled rank ends the job with an error instead of a
hang."""
import os
import subprocess
import sys

import pytest

pytest.importorskip("mpi4py", reason="the mpi extra is not installed: pip install -e '.[mpi]'")
pytest.importorskip("pyopencl", reason="the opencl device needs pyopencl")

from modelcheck import assert_variables_close, checkpoint_variables
from ranks import MPIEXEC, STOPPER, optimized

import tfplus as tf  # noqa: E402

# One thread per process (two ranks share the CI's two cores); the trace shows which path each step took. PoCL's
# programs optimized: seven processes run eight steps each (ranks.optimized).
ENV = optimized(dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p), TFPLUS_NUM_THREADS="1",
                     TFPLUS_WORKERS="1", TFPLUS_ALLREDUCE_TRACE="1", TFPLUS_ALLREDUCE_RUNAHEAD="1"))
# LeNet made narrow: a PoCL step of seconds on two loaded cores becomes one of milliseconds.
RUN = ["train", "--synthetic", "--model", "lenet", "--widths", "4,8", "--fc-widths", "16", "--batch-size", "16",
       "--steps", "8", "--checkpoint-every", "2", "--no-eval", "--device", "opencl:0"]
# The trace's segment of the bound (a step's first start waits for the step before last), on the run-ahead path only.
RAN_AHEAD = "bucket 1 waits for the step before last -> bucket 1 step before last done"


def _train(*argv, stop=None, ranks=2, env=ENV, timeout=240):
    if not MPIEXEC.exists():
        pytest.fail(f"{MPIEXEC} is missing: the mpich wheel (the mpi extra) brings it")
    env = dict(env, STOP_AT=str(stop[1]), STOP_WITH=stop[0], STOP_RANK="1") if stop else env
    cmd = [sys.executable, "-c", STOPPER] if stop else [sys.executable, "-m", "tfplus"]
    mpi = [str(MPIEXEC), "-n", str(ranks)] if ranks > 1 else []
    return subprocess.run([*mpi, *cmd, *argv, *(["--distributed"] if ranks > 1 else [])], env=env,
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def one_process(tmp_path_factory):
    """The variables of one process that trained at the whole batch (16) on PoCL, after steps 6 and 8."""
    folder = tmp_path_factory.mktemp("one")
    run = _train(*RUN, "--checkpoint-dir", str(folder), ranks=1)
    assert run.returncode == 0, run.stderr
    return {step: checkpoint_variables(folder / f"model.ckpt-{step}") for step in (6, 8)}


# --log-every 1: the host reads the running sums after every step (a blocking read waits for the step's sums first);
# 3: every third step, the host runs ahead in between. Checkpoints every 2 steps read the variables mid-run, while
# the host may be a step ahead: step 6's holds step 6's weights.
@pytest.mark.parametrize("log_every", [1, 3])
def test_two_ranks_running_ahead_train_as_one_process(one_process, tmp_path, log_every):
    ckpt = tmp_path / "ckpt"
    run = _train(*RUN, "--checkpoint-dir", str(ckpt), "--log-every", str(log_every))
    assert run.returncode == 0, run.stderr
    assert run.stderr.count(RAN_AHEAD) == 2, run.stderr  # each rank's trace: the bound was on the host's path
    for step in (6, 8):
        assert_variables_close(checkpoint_variables(ckpt / f"model.ckpt-{step}"), one_process[step])


def test_on_a_cpu_device_the_host_waits_for_each_sum_by_default_and_reaches_the_same_weights(one_process, tmp_path):
    ckpt = tmp_path / "ckpt"
    waiting = {k: v for k, v in ENV.items() if k != "TFPLUS_ALLREDUCE_RUNAHEAD"}
    run = _train(*RUN, "--checkpoint-dir", str(ckpt), env=waiting)
    assert run.returncode == 0, run.stderr
    assert RAN_AHEAD not in run.stderr and "the host between steps" in run.stderr
    assert_variables_close(checkpoint_variables(ckpt / "model.ckpt-8"), one_process[8])


def test_the_host_runs_ahead_by_default_on_a_gpu_alone(monkeypatch):
    from types import SimpleNamespace

    from tfplus.kernels.opencl.collective import runahead
    gpu, cpu = SimpleNamespace(info={"type": "GPU"}), SimpleNamespace(info={"type": "CPU"})
    monkeypatch.delenv("TFPLUS_ALLREDUCE_RUNAHEAD", raising=False)
    assert runahead(gpu) and not runahead(cpu)
    monkeypatch.setenv("TFPLUS_ALLREDUCE_RUNAHEAD", "0")
    assert not runahead(gpu)
    monkeypatch.setenv("TFPLUS_ALLREDUCE_RUNAHEAD", "1")
    assert runahead(cpu)
    monkeypatch.setenv("TFPLUS_ALLREDUCE_RUNAHEAD", "yes")
    with pytest.raises(ValueError, match=r"TFPLUS_ALLREDUCE_RUNAHEAD='yes': give 1"):
        runahead(gpu)


def test_sigint_between_steps_stops_every_rank_after_the_same_step(tmp_path):
    ckpt = str(tmp_path / "ckpt")
    run = _train(*RUN, "--checkpoint-dir", ckpt, stop=("SIGINT", 5))
    assert run.returncode != 0
    assert "SIGINT: stopped at step 5/8" in run.stderr, run.stderr  # rank 0's report: it stopped with rank 1
    # Rank 0 saved step 5 after rank 1 stopped there too: a rank a step ahead would have ended the job instead
    # (tfplus.distributed._watch_finished); tests/cli/test_train_distributed.py resumes such a run.
    assert tf.train.latest_checkpoint(ckpt).endswith("model.ckpt-5")


def test_a_killed_rank_ends_the_job_with_an_error(tmp_path):
    run = _train(*RUN, "--checkpoint-dir", str(tmp_path / "ckpt"), stop=("SIGKILL", 6), timeout=120)
    assert run.returncode != 0
    assert "BAD TERMINATION" in run.stdout + run.stderr


# Rank 1 stalls before its third step (alive, so mpiexec does not end the job): rank 0 runs ahead until the bound,
# whose wait gives up after TFPLUS_ALLREDUCE_TIMEOUT seconds and ends the job, rank 1 too.
STALLS = """
import time, numpy as np, tfplus as tf, tfplus.distributed as dist
dist.init()
x = tf.placeholder(tf.float32, [4, 3])
w = tf.Variable(np.ones((3, 2), np.float32))
loss = tf.reduce_mean(tf.square(tf.matmul(x, w)))
train = dist.DistributedOptimizer(tf.train.GradientDescentOptimizer(0.1)).minimize(loss)
with tf.Session(device="opencl:0") as sess:
    sess.run(tf.global_variables_initializer())
    for step in range(8):
        if step == 2 and dist.rank() == 1:
            time.sleep(300)
        sess.run(train, {x: np.ones((4, 3), np.float32)})
    sess.run(w)
"""


def test_a_stalled_rank_ends_the_job_with_the_timeouts_error_instead_of_a_hang():
    if not MPIEXEC.exists():
        pytest.fail(f"{MPIEXEC} is missing: the mpich wheel (the mpi extra) brings it")
    run = subprocess.run([str(MPIEXEC), "-n", "2", sys.executable, "-c", STALLS], capture_output=True, text=True,
                         env=dict(ENV, TFPLUS_ALLREDUCE_TIMEOUT="3"), timeout=120)
    assert run.returncode != 0
    assert "rank 0: the all-reduce of gradient bucket" in run.stderr, run.stderr
    assert "did not finish within 3 s (TFPLUS_ALLREDUCE_TIMEOUT)" in run.stderr, run.stderr
