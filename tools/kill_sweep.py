"""Signals and kills at random moments of `tfplus train` (or `federated simulate`): each trial starts a run, sends
one of SIGINT, SIGTERM, SIGHUP or SIGKILL after a random delay, then checks what the run left and what `--resume`
makes of it. Not a test (hundreds of runs); tests/hostile/test_sig_cli.py runs a few moments of it.

    python tools/kill_sweep.py --trials 200 --seed 1                 # cpu, 2 worker processes
    python tools/kill_sweep.py --trials 50 -- --memory-budget 1.5MB  # extra options of `tfplus train`
    python tools/kill_sweep.py --trials 4 --federated --steps 6 --max-delay 80   # 2 clients, 6 rounds
    python tools/kill_sweep.py --trials 8 --launcher "mpiexec -n 2" -- --distributed   # the signal to mpiexec

Half the signals go to the run's process group (a terminal's Ctrl-C), half to its first process (kill PID).
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


def _tfplus(argv: list[str], launcher: list[str]) -> list[str]:
    return [*launcher, sys.executable, "-m", "tfplus", *argv]


class Command:
    """How a sweep starts a run into a folder and resumes it there: `tfplus train` (its checkpoints and
    TensorBoard events in the folder) or `tfplus federated simulate` (--out), under a launcher (mpiexec) or not."""

    def __init__(self, argv: list[str], federated: bool = False, launcher: list[str] = ()):
        self.argv, self.federated, self.launcher = argv, federated, list(launcher)

    def start(self, folder: str) -> list[str]:
        if self.federated:
            return _tfplus(["federated", "simulate", *self.argv, "--out", folder], self.launcher)
        return _tfplus(["train", *self.argv, "--checkpoint-dir", folder, "--logdir", os.path.join(folder, "tb")],
                       self.launcher)

    def resume(self, folder: str) -> list[str]:
        if tf.train.latest_checkpoint(folder) is None:  # stopped before the first save: start again
            return self.start(folder)
        if self.federated:
            return self.start(folder) + ["--resume"]
        ranks = ["--distributed"] if "--distributed" in self.argv else []  # (not a checkpoint's option)
        return _tfplus(["train", "--resume", *ranks, "--checkpoint-dir", folder, "--logdir",
                        os.path.join(folder, "tb")], self.launcher)


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


def trial(command: Command, want: dict, signame: str, delay: float, folder: str, group: bool = False) -> list[str]:
    """One run of `command` into `folder`, sent `signame` after `delay` seconds (with `group`, to its process group,
    as a terminal's Ctrl-C: its worker processes get it too; mpiexec's ranks have groups of their own), then
    resumed: what went wrong."""
    proc = subprocess.Popen(command.start(folder), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    time.sleep(delay)
    if group:
        os.killpg(proc.pid, getattr(signal, signame))
    else:
        proc.send_signal(getattr(signal, signame))
    out, err = proc.communicate(timeout=600)
    problems = []
    signum = getattr(signal, signame)
    # The run ended before the signal came; or the status is a launcher's (MPICH's mpiexec passes SIGINT on to the
    # ranks, not SIGTERM: it waits for them to end, then exits 15).
    finished = proc.returncode == 0 or command.launcher
    if not finished and proc.returncode not in (128 + signum, -signum):
        problems.append(f"exit status {proc.returncode}, not {128 + signum}: {err.strip().splitlines()[-1:]}")
    if "Traceback" in err and not (signame == "SIGINT" and before_main(err)):
        problems.append("a traceback: " + " | ".join(err.strip().splitlines()[-3:]))
    problems += check_folder(folder)
    resumed = subprocess.run(command.resume(folder), capture_output=True, text=True, timeout=600)
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
    p.add_argument("--federated", action="store_true", help="tfplus federated simulate (2 clients) instead")
    p.add_argument("--launcher", default="", help='e.g. "mpiexec -n 2" (with -- --distributed)')
    p.add_argument("extra", nargs="*", help="more options of the command (after --)")
    args = p.parse_args(argv)
    common = ["--synthetic", "--model", "lenet", "--batch-size", "16"]
    run = common + (["--clients", "2", "--rounds", str(args.steps), "--local-steps", "3", "--cpus", "2"]
                    if args.federated else ["--no-eval", "--steps", str(args.steps), "--checkpoint-every", "3"])
    command = Command(run + args.extra, args.federated, args.launcher.split())
    rng = random.Random(args.seed)
    root = tempfile.mkdtemp(prefix="kill_sweep")
    try:
        unbroken = os.path.join(root, "unbroken")
        subprocess.run(command.start(unbroken), check=True, capture_output=True)
        want = weights(unbroken)
        failed = 0
        for t in range(args.trials):
            signame, delay, group = rng.choice(SIGNALS), rng.uniform(0.0, args.max_delay), rng.random() < 0.5
            folder = os.path.join(root, f"t{t}")
            problems = trial(command, want, signame, delay, folder, group)
            failed += bool(problems)
            for line in problems:
                print(f"trial {t} ({signame} to the {'group' if group else 'process'} after {delay:.2f} s): {line}",
                      flush=True)
            shutil.rmtree(folder, ignore_errors=True)
        print(f"{args.trials} trials, {failed} with a problem ({' '.join(command.start('DIR'))})")
        return 1 if failed else 0
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
