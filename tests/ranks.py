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
    """`torchrun --standalone --nproc-per-node n --no-python argv` (argv starts with the program): --standalone picks
    a free port for the job's rendezvous, so concurrent tests never meet on torch's default one."""
    if not TORCHRUN.exists():
        pytest.fail(f"{TORCHRUN} is missing: torch (the gloo extra: pip install -e '.[gloo]') brings it")
    return subprocess.run([str(TORCHRUN), "--standalone", "--nproc-per-node", str(n), "--no-python", *map(str, argv)],
                          env=env, capture_output=True, text=True, timeout=timeout)
