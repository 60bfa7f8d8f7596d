"""A `--distributed` run's checkpoint resumed on another number of processes (the sig sweep): `mpiexec -n 2 tfplus
train --resume` without --distributed ran the whole run in both processes, each writing into the one folder, and
their weights differed from the unbroken run's (a batch split over 2 ranks rounds otherwise than over 1); a
resume on another number of ranks is refused, naming the command that resumes it."""
import os
import subprocess
import sys

import pytest

pytest.importorskip("mpi4py", reason="the mpi extra is not installed: pip install -e '.[mpi]'")
from ranks import MPIEXEC  # noqa: E402

ENV = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p), TFPLUS_NUM_THREADS="1",
           TFPLUS_WORKERS="1")


def test_a_two_rank_checkpoint_resumed_by_one_process_or_without_distributed_is_refused(tmp_path):
    folder = str(tmp_path / "ckpt")
    run = subprocess.run([str(MPIEXEC), "-n", "2", sys.executable, "-m", "tfplus", "train", "--synthetic", "--model",
                          "lenet", "--batch-size", "16", "--steps", "2", "--no-eval", "--checkpoint-dir", folder,
                          "--distributed"], env=ENV, capture_output=True, text=True, timeout=180)
    assert run.returncode == 0, run.stderr
    want = (f"tfplus train: error: --checkpoint-dir {folder}: its run trained on 2 ranks and this one on 1 (a "
            "different split of each batch changes the weights): resume it as it ran, mpiexec -n 2 tfplus train "
            f"--distributed --checkpoint-dir {folder} --resume, or start a new run in another --checkpoint-dir")
    alone = subprocess.run([sys.executable, "-m", "tfplus", "train", "--checkpoint-dir", folder, "--resume"], env=ENV,
                           capture_output=True, text=True, timeout=120)
    assert alone.returncode == 2 and alone.stderr.strip().splitlines()[-1] == want
    before = sorted(os.listdir(folder))
    both = subprocess.run([str(MPIEXEC), "-n", "2", sys.executable, "-m", "tfplus", "train", "--checkpoint-dir",
                           folder, "--resume"], env=ENV, capture_output=True, text=True, timeout=120)
    assert both.returncode != 0 and both.stderr.count(want) == 2  # each process refuses
    assert sorted(os.listdir(folder)) == before
