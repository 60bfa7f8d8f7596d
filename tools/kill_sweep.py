"""Signals and kills at random moments of `tfplus train`: each trial starts a run, sends one of SIGINT, SIGTERM,
SIGHUP or SIGKILL after a random delay, then checks what the run left and what `--resume` makes of it. Not a test
(hundreds of runs); tests/hostile/test_kill_sweep.py runs a few moments of it.

    python tools/kill_sweep.py --trials 200 --seed 1                 # cpu, 2 worker processes
    python tools/kill_sweep.py --trials 50 -- --memory-budget 1.5MB  # extra options of `tfplus train`

Per trial: the exit status is 128 + the signal (or the kill's), and a stop's stderr has no traceback; every
checkpoint that the `checkpoint` file lists loads and verifies; `--resume` exits 0, leaves no temporary file,
and its final weights equal those of the run never stopped, bit for bit; the TensorBoard events files read to
their ends. Prints one line per failed check and a summary line.
"""
from __future__ import annotations

import argparse
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import numpy as np

import tfplus as tf
from tfplus.summary import summary_iterator

SIGNALS = ("SIGINT", "SIGTERM", "SIGHUP", "SIGKILL")
_TEMP = re.compile(r"\.tmp$|\.tempstate|\.new-")
_IN_MAIN = re.compile(r'tfplus/cli\.py", line \d+, in (?!<module>)')  # a frame of a function of the CLI


def _train(argv: list[str]) -> list[str]:
    return [sys.executable, "-m", "tfplus", "train", *argv]


def weights(folder: str) -> dict[str, np.ndarray]:
    path = tf.train.latest_checkpoint(folder)
    return {k: tf.train.load_variable(path, k) for k, _ in tf.train.list_variables(path)}


def temp_files(folder: str) -> list[str]:
    return [os.path.join(d, f) for d, _, fs in os.walk(folder) for f in fs if _TEMP.search(f)]


def check_folder(folder: str) -> list[str]:
    """What is wrong with a stopped run's folder: listed checkpoints that do not load, events files cut short."""
    problems = []
    state = tf.train.get_checkpoint_state(folder)
    for path in [] if state is None else state.all_model_checkpoint_paths:
        try:
            for k, _ in tf.train.list_variables(path):
                tf.train.load_variable(path, k)
        except Exception as e:  # noqa: BLE001  reported
            problems.append(f"listed checkpoint {os.path.basename(path)} does not load: {type(e).__name__}: {e}")
    for d, _, fs in os.walk(folder):
        for f in fs:
            if f.startswith("events.out.tfevents"):
                try:
                    sum(1 for _ in summary_iterator(os.path.join(d, f)))
                except Exception as e:  # noqa: BLE001  reported
                    problems.append(f"events file {f} does not read: {type(e).__name__}: {e}")
    return problems


def before_main(err: str) -> bool:
    """Whether a KeyboardInterrupt traceback is Python's own, from Ctrl-C while it imported tfplus (before
    tfplus.cli.main, which turns one into a line): a limit of any Python program, not counted."""
    return err.rstrip().endswith("KeyboardInterrupt") and not _IN_MAIN.search(err.replace(os.sep, "/"))


def trial(argv: list[str], want: dict, signame: str, delay: float, folder: str) -> list[str]:
    """One run of `argv` into `folder`, sent `signame` after `delay` seconds, then resumed: what went wrong."""
    ckpt = ["--checkpoint-dir", folder, "--logdir", os.path.join(folder, "tb")]
    proc = subprocess.Popen(_train(argv + ckpt), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(delay)
    proc.send_signal(getattr(signal, signame))
    out, err = proc.communicate(timeout=300)
    problems = []
    signum = getattr(signal, signame)
    finished = proc.returncode == 0  # the run ended before the signal came
    if not finished and proc.returncode not in (128 + signum, -signum):
        problems.append(f"exit status {proc.returncode}, not {128 + signum}: {err.strip().splitlines()[-1:]}")
    if "Traceback" in err and not (signame == "SIGINT" and before_main(err)):
        problems.append("a traceback: " + " | ".join(err.strip().splitlines()[-3:]))
    problems += check_folder(folder)
    if tf.train.latest_checkpoint(folder) is None:  # stopped before the first save: start again
        resumed = subprocess.run(_train(argv + ckpt), capture_output=True, text=True, timeout=300)
    else:
        resumed = subprocess.run(_train(["--resume"] + ckpt), capture_output=True, text=True, timeout=300)
    if resumed.returncode != 0:
        return problems + [f"--resume exited {resumed.returncode}: {resumed.stderr.strip().splitlines()[-1:]}"]
    problems += [f"temporary file left: {p}" for p in temp_files(folder)]
    problems += check_folder(folder)
    got = weights(folder)
    if got.keys() != want.keys() or not all(np.array_equal(got[k], want[k]) for k in want):
        differ = [k for k in want if k not in got or not np.array_equal(got[k], want[k])]
        problems.append(f"resumed weights differ from the unbroken run's: {differ[:3]}")
    return problems


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trials", type=int, default=20)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--steps", type=int, default=24)
    p.add_argument("--max-delay", type=float, default=5.0, help="seconds; the delays are uniform up to this")
    p.add_argument("extra", nargs="*", help="more options of `tfplus train` (after --)")
    args = p.parse_args(argv)
    run = ["--synthetic", "--model", "lenet", "--batch-size", "16", "--no-eval", "--steps", str(args.steps),
           "--checkpoint-every", "3", *args.extra]
    rng = random.Random(args.seed)
    root = tempfile.mkdtemp(prefix="kill_sweep")
    try:
        unbroken = os.path.join(root, "unbroken")
        subprocess.run(_train(run + ["--checkpoint-dir", unbroken]), check=True, capture_output=True)
        want = weights(unbroken)
        failed = 0
        for t in range(args.trials):
            signame, delay = rng.choice(SIGNALS), rng.uniform(0.0, args.max_delay)
            folder = os.path.join(root, f"t{t}")
            problems = trial(run, want, signame, delay, folder)
            failed += bool(problems)
            for line in problems:
                print(f"trial {t} ({signame} after {delay:.2f} s): {line}", flush=True)
            shutil.rmtree(folder, ignore_errors=True)
        print(f"{args.trials} trials, {failed} with a problem ({' '.join(run)})")
        return 1 if failed else 0
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
