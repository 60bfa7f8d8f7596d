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


# `python -c` this, then the command line: Ctrl-C reaches every rank as it builds its graph (before its steps).
_EARLY_CTRL_C = ("import os, signal, sys\n"
                 "from tfplus import trainer\n"
                 "from tfplus.cli import main\n"
                 "_build = trainer.build_graph\n"
                 "def build_then_interrupted(*args):\n"
                 "    os.kill(os.getpid(), signal.SIGINT)\n"
                 "    return _build(*args)\n"
                 "trainer.build_graph = build_then_interrupted\n"
                 "sys.exit(main(sys.argv[1:]))\n")


def test_ctrl_c_before_the_steps_ends_every_rank_saying_so_with_130(tmp_path):
    """It was 'rank 0 of 2 failed (KeyboardInterrupt: )' and exit 1, as for a crash."""
    run = subprocess.run([str(MPIEXEC), "-n", "2", sys.executable, "-c", _EARLY_CTRL_C, "train", "--synthetic",
                          "--model", "lenet", "--batch-size", "16", "--steps", "2", "--no-eval", "--checkpoint-dir",
                          str(tmp_path / "ckpt"), "--distributed"], env=ENV, capture_output=True, text=True,
                         timeout=180)
    assert run.returncode == 130, run.stderr
    assert "of 2 was interrupted; ending every rank" in run.stderr and "Traceback" not in run.stderr


_BEFORE_MPI = ("import os, signal, sys\n"
               "if os.environ['PMI_RANK'] == '0':\n"
               "    os._exit(3)\n"
               "import tfplus.distributed as d\n"
               "d.init()\n")
_PHASE_HOOK = os.path.join(os.path.dirname(__file__), "..", "..", "tools", "phase_signal")


@pytest.mark.parametrize("how", ["exit", "SIGTERM", "SIGINT"])
def test_a_rank_that_ends_before_starting_mpi_ends_the_job_within_seconds_saying_so(tmp_path, how):
    """Rank 0 gone before MPI_Init (it exited, or `tfplus train --distributed`'s handler ended it at a SIGTERM or a
    Ctrl-C as it called tfplus.distributed.init): MPICH's mpiexec does not take a rank's normal end before MPI's
    start for a failure, and rank 1 spun in MPI_Init until TFPLUS_ALLREDUCE_TIMEOUT (300 s by default) ended it. Now
    a watcher of rank 1 sees rank 0 gone and ends it within a second or two, saying why, and mpiexec the job."""
    env = dict(ENV)
    env.pop("TFPLUS_ALLREDUCE_TIMEOUT", None)  # the default, 300 s: the job must end long before it
    if how == "exit":
        cmd = [sys.executable, "-c", _BEFORE_MPI]
    else:
        env.update(PYTHONPATH=_PHASE_HOOK + os.pathsep + env["PYTHONPATH"],
                   TFPLUS_PHASE_SIGNAL=f"call:tfplus.distributed:init {how} rank0")
        cmd = [sys.executable, "-m", "tfplus", "train", "--synthetic", "--model", "lenet", "--batch-size", "16",
               "--no-eval", "--steps", "2", "--checkpoint-dir", str(tmp_path), "--distributed"]
    run = subprocess.run([str(MPIEXEC), "-n", "2", *cmd], capture_output=True, text=True, env=env, timeout=60)
    assert run.returncode != 0
    assert "rank 1 is starting MPI, but 1 of this host's 2 ranks ended before they started it" in run.stderr, \
        run.stdout + run.stderr
