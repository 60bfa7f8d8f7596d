"""What the `mpiexec -n 2` and `torchrun --nproc-per-node 2` tests share: the launchers and a command line that stops a
rank.

STOPPER: `python -c` this, then the command line: main(argv), where rank $STOP_RANK sends itself $STOP_WITH as it
draws its $STOP_AT-th batch (so the step that batch feeds is its last, or never runs after a SIGKILL)."""
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

# The mpich wheel installs it beside the interpreter; a GPU machine's prefix install puts it on PATH.
MPIEXEC = Path(sys.executable).parent / "mpiexec"
MPIEXEC = MPIEXEC if MPIEXEC.exists() else Path(shutil.which("mpiexec") or MPIEXEC)

STOPPER = ("import os, signal, sys\n"
           "from tfplus.data import TrainBatches\n"
           "from tfplus.cli import main\n"
           "_next, seen = TrainBatches.__next__, [0]\n"
           "def next_then_stop(self):\n"
           "    seen[0] += 1\n"
           "    rank = os.environ.get('PMI_RANK', os.environ.get('RANK'))\n"  # mpiexec's, torchrun's
           "    if seen[0] == int(os.environ['STOP_AT']) and rank == os.environ['STOP_RANK']:\n"
           "        os.kill(os.getpid(), getattr(signal, os.environ['STOP_WITH']))\n"
           "    return _next(self)\n"
           "TrainBatches.__next__ = next_then_stop\n"
           "sys.exit(main(sys.argv[1:]))\n")


def optimized(env: dict) -> dict:
    """`env` without the -cl-opt-disable that tests/conftest.py gives PoCL builds. It pays in a test process, which
    builds many programs and runs each on tiny shapes a few times; a `tfplus train` process runs LeNet's few
    programs for steps, and PoCL's unoptimized code took ~1 s of CPU a step of RUN's LeNet, the optimized ~0.2 s
    (the first process builds them, ~9 s of CPU more than unoptimized, and the disk cache serves the others)."""
    return {k: v for k, v in env.items() if (k, v) != ("TFPLUS_OPENCL_BUILD_OPTIONS", "-cl-opt-disable")}


# torch's launcher, installed beside the interpreter with torch (the gloo extra).
TORCHRUN = Path(sys.executable).parent / "torchrun"


def torchrun(argv: list, env: dict, n: int = 2, timeout: float = 120) -> subprocess.CompletedProcess:
    """`torchrun --standalone --nproc-per-node n --no-python -- argv` (argv starts with the program): --standalone
    picks a free port for the job's rendezvous, so concurrent tests never meet on torch's default one; `--` keeps
    torchrun's parser off the program's options (it takes `--log` for an abbreviation of its own and fails)."""
    if not TORCHRUN.exists():
        pytest.fail(f"{TORCHRUN} is missing: torch (the gloo extra: pip install -e '.[gloo]') brings it")
    return subprocess.run([str(TORCHRUN), "--standalone", "--nproc-per-node", str(n), "--no-python", "--",
                           *map(str, argv)],
                          env=env, capture_output=True, text=True, timeout=timeout)


# What the `tfplus train --distributed` tests train: LeNet, 8 steps at batch 16 on synthetic data, checkpoints every 2.
RUN = ["train", "--synthetic", "--model", "lenet", "--batch-size", "16", "--steps", "8", "--checkpoint-every", "2",
       "--no-eval"]


def trained_alone(folder: Path, env: dict) -> dict:
    """The variables of one process that trained RUN at the whole batch (16): what two ranks at 8 must give."""
    from modelcheck import checkpoint_variables
    subprocess.run([sys.executable, "-m", "tfplus", *RUN, "--checkpoint-dir", str(folder)], env=env, check=True,
                   capture_output=True, timeout=120)
    return checkpoint_variables(folder / "model.ckpt-8")


def train_gloo(argv: list, env: dict, stop: tuple | None = None) -> subprocess.CompletedProcess:
    """`torchrun ... tfplus RUN argv --distributed`; with stop (signal name, batch), rank 1 sends itself that signal
    as it draws that batch (STOPPER)."""
    env = dict(env, STOP_AT=str(stop[1]), STOP_WITH=stop[0], STOP_RANK="1") if stop else env
    cmd = [sys.executable, "-c", STOPPER] if stop else [sys.executable, "-m", "tfplus"]
    return torchrun([*cmd, *RUN, *argv, "--distributed"], env=env)
