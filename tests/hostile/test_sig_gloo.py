"""Stops of a `torchrun --nproc-per-node 2 -m tfplus train --distributed` job (gloo): a signal to one rank stops both
after the same step; a killed rank ends the job with an error naming it, and --resume continues the run to one
process's weights."""
import os
import sys

import pytest

pytest.importorskip("torch", reason="the gloo extra is not installed: pip install -e '.[gloo]'")

from modelcheck import assert_variables_close, checkpoint_variables  # noqa: E402
from ranks import train_gloo, trained_alone  # noqa: E402

import tfplus as tf  # noqa: E402

ENV = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p), TFPLUS_NUM_THREADS="1",
           TFPLUS_WORKERS="1", OMP_NUM_THREADS="1")


def test_a_signal_to_one_rank_stops_both_and_a_killed_rank_ends_the_job_then_resume_continues(tmp_path):
    ckpt = str(tmp_path / "ckpt")
    run = train_gloo(["--checkpoint-dir", ckpt], ENV, stop=("SIGTERM", 5))
    assert run.returncode != 0
    assert "SIGTERM: stopped at step 5/8" in run.stderr, run.stderr  # rank 0's report: it stopped with rank 1
    assert tf.train.latest_checkpoint(ckpt).endswith("model.ckpt-5")
    # Resumed, rank 1 dies as it draws its 3rd batch (step 8's): rank 0 fails in that step's all-reduce, naming it.
    run = train_gloo(["--checkpoint-dir", ckpt, "--resume"], ENV, stop=("SIGKILL", 3))
    assert run.returncode != 0
    assert "rank 0 of 2 failed (RuntimeError: an all-reduce failed" in run.stderr, run.stderr
    assert "Signal 9 (SIGKILL) received by PID" in run.stderr, run.stderr  # torchrun's report names the dead rank
    assert tf.train.latest_checkpoint(ckpt).endswith("model.ckpt-6")  # the last save before rank 1 died
    run = train_gloo(["--checkpoint-dir", ckpt, "--resume"], ENV)
    assert run.returncode == 0, run.stderr
    alone = trained_alone(tmp_path / "one", ENV)
    assert_variables_close(checkpoint_variables(tf.train.latest_checkpoint(ckpt)), alone)
