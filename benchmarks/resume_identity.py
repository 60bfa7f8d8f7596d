"""Whether `tfplus train ... --resume` after a SIGKILL gives the weights of the run never stopped, bit for bit, on a
device (the tests check the cpu; PoCL is too slow for a test, so this runs where a GPU is). Not a test.

    python benchmarks/resume_identity.py --device opencl      # mentee and lenet, plain and under 24MB

For each model and budget: one run of --steps 60 (checkpoints every 10 steps) to its end; one with the same command
line killed by SIGKILL as its 35th batch is drawn, then run again with --resume; then the largest difference
between the two final checkpoints' variables.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np

import tfplus as tf

# Runs the CLI and SIGKILLs its own process as batch $KILL_AT is drawn (the step it feeds never finishes).
_KILLER = ("import os, signal, sys\n"
           "from tfplus.data import TrainBatches\n"
           "from tfplus.cli import main\n"
           "_next, seen = TrainBatches.__next__, [0]\n"
           "def next_or_die(self):\n"
           "    seen[0] += 1\n"
           "    if seen[0] == int(os.environ['KILL_AT']):\n"
           "        os.kill(os.getpid(), signal.SIGKILL)\n"
           "    return _next(self)\n"
           "TrainBatches.__next__ = next_or_die\n"
           "sys.exit(main(sys.argv[1:]))\n")


def _max_difference(a: str, b: str) -> float:
    pa, pb = tf.train.latest_checkpoint(a), tf.train.latest_checkpoint(b)
    return max(float(np.max(np.abs(tf.train.load_variable(pa, n) - tf.train.load_variable(pb, n)), initial=0.0))
               for n, _ in tf.train.list_variables(pa))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="opencl")
    p.add_argument("--models", default="mentee,lenet")
    p.add_argument("--budgets", default="none,24MB", help="comma-separated; 'none' for no --memory-budget")
    args = p.parse_args()
    env = dict(os.environ, KILL_AT="35")
    with tempfile.TemporaryDirectory() as tmp:
        for model in args.models.split(","):
            for budget in args.budgets.split(","):
                argv = ["train", "--device", args.device, "--synthetic", "--model", model, "--steps", "60",
                        "--checkpoint-every", "10", "--no-eval"] + ([] if budget == "none" else
                                                                     ["--memory-budget", budget])
                a, b = (os.path.join(tmp, f"{model}-{budget}-{x}") for x in "ab")
                whole = subprocess.run([sys.executable, "-m", "tfplus", *argv, "--checkpoint-dir", a],
                                       capture_output=True, text=True, env=env)
                killed = subprocess.run([sys.executable, "-c", _KILLER, *argv, "--checkpoint-dir", b],
                                        capture_output=True, text=True, env=env)
                resumed = subprocess.run([sys.executable, "-m", "tfplus", *argv, "--checkpoint-dir", b, "--resume"],
                                         capture_output=True, text=True, env=env)
                diff = _max_difference(a, b)
                print(f"{model:8} budget {budget:5} exit codes {whole.returncode} / {killed.returncode} / "
                      f"{resumed.returncode}, final {os.path.basename(tf.train.latest_checkpoint(b))}: "
                      f"max |difference| {diff:g} ({'bit-identical' if diff == 0 else 'DIFFERENT'})", flush=True)


if __name__ == "__main__":
    main()
