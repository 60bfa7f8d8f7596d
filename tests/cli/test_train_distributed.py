"""`mpiexec -n 2 tfplus train --distributed` (the mpich wheel's mpiexec, beside this Python): two ranks at half the
batch end where one process at the whole batch does; rank 0 alone logs and writes checkpoints; a signal to one rank
stops every rank after the same step; a killed rank ends the job with an error, and --resume continues it."""
import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("mpi4py", reason="the mpi extra is not installed: pip install -e '.[mpi]'")

from modelcheck import assert_variables_close, checkpoint_variables
from ranks import MPIEXEC, STOPPER

import tfplus as tf  # noqa: E402

# One thread and no forked workers per process (two ranks share the CI's two cores), in both runs compared.
ENV = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p), TFPLUS_NUM_THREADS="1",
           TFPLUS_WORKERS="1")
RUN = ["train", "--synthetic", "--model", "lenet", "--batch-size", "16", "--steps", "8", "--checkpoint-every", "2",
       "--no-eval"]


def _mpiexec(*argv, stop=None, timeout=120, env=ENV):
    if not MPIEXEC.exists():
        pytest.fail(f"{MPIEXEC} is missing: the mpich wheel (the mpi extra) brings it")
    env = dict(env, STOP_AT=str(stop[1]), STOP_WITH=stop[0], STOP_RANK="1") if stop else env
    cmd = [sys.executable, "-c", STOPPER] if stop else [sys.executable, "-m", "tfplus"]
    return subprocess.run([str(MPIEXEC), "-n", "2", *cmd, *argv, "--distributed"], env=env, capture_output=True,
                          text=True, timeout=timeout)


@pytest.fixture(scope="module")
def one_process(tmp_path_factory):
    """The variables of one process that trained at the whole batch (16) for 8 steps."""
    folder = tmp_path_factory.mktemp("one")
    subprocess.run([sys.executable, "-m", "tfplus", *RUN, "--checkpoint-dir", str(folder)], env=ENV, check=True,
                   capture_output=True, timeout=120)
    return checkpoint_variables(folder / "model.ckpt-8")


def test_two_ranks_train_as_one_process_and_rank_0_alone_logs(one_process, tmp_path):
    run = _mpiexec(*RUN, "--checkpoint-dir", str(tmp_path / "ckpt"), "--log", str(tmp_path / "log.jsonl"),
                   env=dict(ENV, TFPLUS_ALLREDUCE_TRACE="1"))
    assert run.returncode == 0, run.stderr
    # Each rank times the host's path between steps through the trainer's hooks and session.run's parts.
    between = [line for line in run.stderr.splitlines() if "the host between steps" in line]
    assert len(between) == 2 and all("session.run returned -> after_run hooks done" in line and
                                     "before_run hooks done -> session.run begins" in line and
                                     "session.run begins -> feeds uploaded" in line and
                                     "-> bucket 1 started" in line for line in between), run.stderr
    assert_variables_close(checkpoint_variables(tmp_path / "ckpt" / "model.ckpt-8"), one_process)
    rows = [json.loads(line) for line in (tmp_path / "log.jsonl").read_text().splitlines()]
    assert [r["kind"] for r in rows].count("start") == 1  # rank 1 wrote nothing there
    assert run.stdout.count("done: 8 steps") == 1


def test_a_signal_to_one_rank_stops_every_rank_after_the_same_step(one_process, tmp_path):
    ckpt = str(tmp_path / "ckpt")
    run = _mpiexec(*RUN, "--checkpoint-dir", ckpt, stop=("SIGTERM", 5))
    assert run.returncode != 0
    assert "SIGTERM: stopped at step 5/8" in run.stderr, run.stderr  # rank 0's report: it stopped with rank 1
    assert tf.train.latest_checkpoint(ckpt).endswith("model.ckpt-5")
    run = _mpiexec(*RUN, "--checkpoint-dir", ckpt, "--resume")
    assert run.returncode == 0, run.stderr
    assert_variables_close(checkpoint_variables(tf.train.latest_checkpoint(ckpt)), one_process)


def test_a_killed_rank_ends_the_job_and_resume_continues_it(one_process, tmp_path):
    ckpt = str(tmp_path / "ckpt")
    # NOTE: rank 1 dies as it draws the 6th batch: rank 0 finished saving step 4 before their step 5 could end. The
    # ranks meet only in a step's all-reduces (no collective between steps), so a death at the 5th batch may end
    # rank 0 while it saves step 4.
    run = _mpiexec(*RUN, "--checkpoint-dir", ckpt, stop=("SIGKILL", 6))
    assert run.returncode != 0
    assert "BAD TERMINATION" in run.stdout + run.stderr
    assert tf.train.latest_checkpoint(ckpt).endswith("model.ckpt-4")  # the last one before rank 1 died
    run = _mpiexec(*RUN, "--checkpoint-dir", ckpt, "--resume")
    assert run.returncode == 0, run.stderr
    assert_variables_close(checkpoint_variables(tf.train.latest_checkpoint(ckpt)), one_process)


def test_a_budgeted_run_and_its_resume_train_as_one_process_and_forked_workers_are_refused(one_process, tmp_path):
    """--memory-budget is each rank's, for its shard of the batch; --resume takes it from the checkpoint. A rank
    forks no step workers: --workers 2 is refused, naming what to do."""
    ckpt = str(tmp_path / "ckpt")
    run = _mpiexec(*RUN, "--memory-budget", "2MB", "--checkpoint-dir", ckpt, stop=("SIGTERM", 5))
    assert "SIGTERM: stopped at step 5/8" in run.stderr, run.stderr
    run = _mpiexec(*RUN, "--checkpoint-dir", ckpt, "--resume")
    assert run.returncode == 0, run.stderr
    assert_variables_close(checkpoint_variables(tf.train.latest_checkpoint(ckpt)), one_process)
    run = _mpiexec(*RUN, "--workers", "2", "--checkpoint-dir", str(tmp_path / "workers"))
    assert run.returncode == 2 and "--workers 2 with --distributed: each rank is one process" in run.stderr


class _Job:
    """What _for_this_rank asks of tfplus.distributed: rank 1 of 2, the second on its host."""
    size, rank, local_rank = staticmethod(lambda: 2), staticmethod(lambda: 1), staticmethod(lambda: 1)
    local_device = staticmethod(lambda: "opencl:1")  # the device its local rank takes (tfplus.distributed's)


def test_each_rank_takes_the_opencl_device_of_its_local_rank_unless_one_is_named():
    from tfplus.trainer import TrainConfig, _for_this_rank
    for given, taken in [("opencl", "opencl:1"), ("OpenCL", "opencl:1"), ("opencl:0", "opencl:0"), ("cpu", "cpu")]:
        assert _for_this_rank(TrainConfig(device=given, batch_size=16), _Job).device == taken, given


def test_without_the_mpi_extra_distributed_says_what_to_install(tmp_path):
    code = "import sys; sys.modules['mpi4py'] = None; from tfplus.cli import main; sys.exit(main(sys.argv[1:]))"
    run = subprocess.run([sys.executable, "-c", code, *RUN, "--distributed"], env=ENV, capture_output=True,
                         text=True, timeout=120, cwd=tmp_path)
    assert run.returncode == 2, run.stderr
    assert "--distributed: tfplus.distributed needs mpi4py" in run.stderr and "tfplus[mpi]" in run.stderr
