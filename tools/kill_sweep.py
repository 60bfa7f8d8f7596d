"""Signals and kills at random moments of `tfplus train`, `tfplus federated simulate`, `tfplus eval` or a user's
script that trains and saves with tf.train.Saver in a loop: each trial starts a run, sends one of SIGINT, SIGTERM,
SIGHUP, SIGQUIT, SIGUSR1 or SIGKILL after a random delay, then checks what the run left and what running it again
(`--resume`) makes of it. Not a test (hundreds of runs); tests/hostile/test_sig_cli.py runs a few moments of it.

    python tools/kill_sweep.py --trials 200 --seed 1                 # cpu, 2 worker processes
    python tools/kill_sweep.py --trials 50 -- --memory-budget 1.5MB  # extra options of `tfplus train`
    python tools/kill_sweep.py --trials 4 --federated --steps 6 --max-delay 80   # 2 clients, 6 rounds
    python tools/kill_sweep.py --trials 8 --launcher "mpiexec -n 2" -- --distributed   # the signal to mpiexec
    python tools/kill_sweep.py --trials 20 --eval                    # tfplus eval of a trained checkpoint
    python tools/kill_sweep.py --trials 20 --script                  # a script saving with tf.train.Saver

Half the signals go to the run's process group (a terminal's Ctrl-C), half to its first process (kill PID).
Per trial: tfplus stops on SIGINT, SIGTERM and SIGHUP after the running step with 128 + the signal and one last line
naming it (no traceback); SIGQUIT, SIGUSR1 and SIGKILL take their default action (the process ends by the signal),
as in TensorFlow; a script keeps Python's own handling. Then: no process of the run is left (its session, polled
for ORPHAN_SECONDS); every checkpoint that the `checkpoint` file lists loads and verifies; the TensorBoard events
files read to their ends; running again (`--resume`, the script restoring its latest checkpoint, eval anew) exits
0 and leaves no temporary file; its final weights equal those of the run never stopped, bit for bit (eval: its
report equals the unbroken eval's, and the checkpoint folder is untouched). Prints one line per failed check and a
summary line.
"""
from __future__ import annotations

import argparse
import contextlib
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

SIGNALS = ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGKILL")
STOPS = {"SIGINT": 130, "SIGTERM": 143, "SIGHUP": 129}  # what tfplus stops on (trainer.EXIT_ON_SIGNAL)
ORPHAN_SECONDS = 30.0  # how long a stopped run's processes (workers, Ray's) may take to end
_TEMP = re.compile(r"\.tmp$|\.tempstate|\.new-")
_IN_MAIN = re.compile(r'tfplus/cli\.py", line \d+, in (?!<module>)')  # a frame of a function of the CLI


def _tfplus(argv: list[str], launcher: list[str]) -> list[str]:
    return [*launcher, sys.executable, "-m", "tfplus", *argv]


# A user's TF1 script: trains a small convolutional net on batches drawn from the step's number, saves every step
# (tf.train.Saver, max_to_keep 3) and, started again, restores its latest checkpoint and trains on to STEPS.
SCRIPT = """
import sys
import numpy as np
import tfplus as tf
folder, steps = sys.argv[1], int(sys.argv[2])
tf.set_random_seed(0)
x = tf.placeholder(tf.float32, [None, 3, 8, 8])
y = tf.placeholder(tf.int32, [None])
h = tf.layers.conv2d(x, 4, 3, padding="same", data_format="channels_first", activation=tf.nn.relu, name="conv")
logits = tf.layers.dense(tf.layers.flatten(h), 10, name="dense")
loss = tf.losses.sparse_softmax_cross_entropy(y, logits)
step = tf.train.get_or_create_global_step()
train = tf.train.MomentumOptimizer(0.05, 0.9).minimize(loss, global_step=step)
saver = tf.train.Saver(max_to_keep=3)
with tf.Session() as sess:
    latest = tf.train.latest_checkpoint(folder)
    if latest:
        saver.restore(sess, latest)
    else:
        sess.run(tf.global_variables_initializer())
    while (k := int(sess.run(step))) < steps:
        rng = np.random.default_rng(k)
        sess.run(train, {x: rng.standard_normal((16, 3, 8, 8)).astype(np.float32), y: rng.integers(0, 10, 16)})
        saver.save(sess, folder + "/model.ckpt", global_step=step)
"""


class Command:
    """How a sweep starts a run into a folder and resumes it there: `tfplus train` (its checkpoints and
    TensorBoard events in the folder), `tfplus federated simulate` (--out), under a launcher (mpiexec) or not,
    `tfplus eval` of the checkpoint in the folder, or SCRIPT (`script`: its path) saving into it."""

    def __init__(self, argv: list[str], federated: bool = False, launcher: list[str] = (), evaluate: bool = False,
                 script: str | None = None):
        self.argv, self.federated, self.launcher = argv, federated, list(launcher)
        self.evaluate, self.script = evaluate, script

    def start(self, folder: str) -> list[str]:
        if self.script:
            return [*self.launcher, sys.executable, self.script, folder, *self.argv]
        if self.evaluate:
            return _tfplus(["eval", "--checkpoint", folder, *self.argv], self.launcher)
        if self.federated:
            return _tfplus(["federated", "simulate", *self.argv, "--out", folder], self.launcher)
        return _tfplus(["train", *self.argv, "--checkpoint-dir", folder, "--logdir", os.path.join(folder, "tb")],
                       self.launcher)

    def resume(self, folder: str) -> list[str]:
        if self.script or self.evaluate or tf.train.latest_checkpoint(folder) is None:  # (before the first save)
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


def session_processes(sid: int) -> list[str]:
    """'PID command line' of the processes of session `sid` (Linux's /proc), but zombies."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            if int(fields[3]) == sid and fields[0] != "Z":
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    command = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
                found.append(f"{pid} {command}")
        except (OSError, IndexError, ValueError):  # ended meanwhile
            continue
    return found


def orphans(sid: int) -> list[str]:
    """The processes of a stopped run's session `sid` still there after ORPHAN_SECONDS (polled), then killed."""
    deadline = time.monotonic() + ORPHAN_SECONDS
    while (left := session_processes(sid)) and time.monotonic() < deadline:
        time.sleep(0.2)
    for line in left:
        with contextlib.suppress(OSError):
            os.kill(int(line.split()[0]), signal.SIGKILL)
    return left


def folder_files(folder: str) -> dict[str, bytes]:
    """{relative path: content} of what `folder` holds."""
    files = {}
    for d, _, fs in os.walk(folder):
        for f in fs:
            with open(os.path.join(d, f), "rb") as fh:
                files[os.path.relpath(os.path.join(d, f), folder)] = fh.read()
    return files


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


def check_exit(signame: str, returncode: int, err: str, script: bool) -> list[str]:
    """What is wrong with how a run sent `signame` ended (status `returncode`, stderr `err`)."""
    signum = getattr(signal, signame)
    if returncode == 0:  # it ended before the signal came
        return []
    if signame in STOPS and not script:
        # Sent while Python started and imported tfplus, before tfplus.cli.main: the signal's default action (Ctrl-C:
        # Python's KeyboardInterrupt, then the exit by SIGINT), a limit of any Python program, nothing written.
        early = returncode == -signum and (not err.strip() or before_main(err))
        problems = [] if returncode == STOPS[signame] or early else [f"exit status {returncode}, not {STOPS[signame]}"]
        last = err.strip().splitlines()[-1:] or [""]
        if not early and signame not in last[0] and not (signame == "SIGINT" and "interrupted" in last[0]):
            problems.append(f"the last line does not say what stopped it: {last}")
    else:  # the default action (a script's SIGINT: Python's KeyboardInterrupt, then the exit by SIGINT)
        problems = [] if returncode in (-signum, 128 + signum) else [f"exit status {returncode}, not {-signum}"]
    if "Traceback" in err and not script and not (signame == "SIGINT" and before_main(err)):
        problems.append("a traceback: " + " | ".join(err.strip().splitlines()[-3:]))
    return problems


def trial(command: Command, want, signame: str, delay: float, folder: str, group: bool = False) -> list[str]:
    """One run of `command` into `folder`, sent `signame` after `delay` seconds (with `group`, to its process group,
    as a terminal's Ctrl-C: its worker processes get it too; mpiexec's ranks have groups of their own), then
    resumed: what went wrong. `want`: the unbroken run's weights (eval: its report)."""
    before = folder_files(folder) if command.evaluate else None
    proc = subprocess.Popen(command.start(folder), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    time.sleep(delay)
    if group:
        os.killpg(proc.pid, getattr(signal, signame))
    else:
        proc.send_signal(getattr(signal, signame))
    out, err = proc.communicate(timeout=600)
    # Under a launcher the status is the launcher's (MPICH's mpiexec passes SIGINT on to the ranks, not SIGTERM: it
    # waits for them to end, then exits 15); its ranks have sessions of their own.
    problems = [] if command.launcher else check_exit(signame, proc.returncode, err, bool(command.script))
    problems += [f"a process of the run left: {p}" for p in ([] if command.launcher else orphans(proc.pid))]
    problems += check_folder(folder)
    resumed = subprocess.run(command.resume(folder), capture_output=True, text=True, timeout=600)
    if resumed.returncode != 0:
        return problems + [f"resumed, exited {resumed.returncode}: {resumed.stderr.strip().splitlines()[-1:]}"]
    problems += [f"temporary file left: {p}" for p in temp_files(folder)]
    problems += check_folder(folder)
    if command.evaluate:
        if folder_files(folder) != before:
            problems.append("eval changed the checkpoint's folder")
        if report(resumed.stdout) != want:
            problems.append(f"the eval's report differs from the unbroken eval's: {report(resumed.stdout)[-1:]}")
        return problems
    got = weights(folder)
    if got.keys() != want.keys() or not all(np.array_equal(got[k], want[k]) for k in want):
        differ = [k for k in want if k not in got or not np.array_equal(got[k], want[k])]
        problems.append(f"resumed weights differ from the unbroken run's: {differ[:3]}")
    return problems


def report(stdout: str) -> list[str]:
    """An eval's per-class table (its lines after the first, which names the checkpoint's path)."""
    return stdout.strip().splitlines()[1:]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trials", type=int, default=20)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--steps", type=int, default=24)
    p.add_argument("--max-delay", type=float, default=5.0, help="seconds; the delays are uniform up to this")
    kind = p.add_mutually_exclusive_group()
    kind.add_argument("--federated", action="store_true", help="tfplus federated simulate (2 clients) instead")
    kind.add_argument("--eval", action="store_true", help="tfplus eval of the unbroken run's checkpoint instead")
    kind.add_argument("--script", action="store_true", help="a TF1 script saving with tf.train.Saver instead")
    p.add_argument("--signals", default=",".join(SIGNALS), help="a comma list of those sent (default: all)")
    p.add_argument("--launcher", default="", help='e.g. "mpiexec -n 2" (with -- --distributed)')
    p.add_argument("extra", nargs="*", help="more options of the command (after --)")
    args = p.parse_args(argv)
    signals = args.signals.split(",")
    if unknown := set(signals) - set(SIGNALS):
        p.error(f"--signals: {sorted(unknown)} are not among {', '.join(SIGNALS)}")
    common = ["--synthetic", "--model", "lenet", "--batch-size", "16"]
    run = common + (["--clients", "2", "--rounds", str(args.steps), "--local-steps", "3", "--cpus", "2"]
                    if args.federated else ["--no-eval", "--steps", str(args.steps), "--checkpoint-every", "3"])
    rng = random.Random(args.seed)
    root = tempfile.mkdtemp(prefix="kill_sweep")
    try:
        unbroken = os.path.join(root, "unbroken")
        if args.script:
            script = os.path.join(root, "user_script.py")
            with open(script, "w") as f:
                f.write(SCRIPT)
            command = Command([str(args.steps), *args.extra], launcher=args.launcher.split(), script=script)
        else:
            command = Command(run + args.extra, args.federated, args.launcher.split())
        subprocess.run(command.start(unbroken), check=True, capture_output=True)
        want = weights(unbroken)
        if args.eval:
            command = Command(["--synthetic", *args.extra], launcher=args.launcher.split(), evaluate=True)
            want = report(subprocess.run(command.start(unbroken), check=True, capture_output=True, text=True).stdout)
        failed = 0
        for t in range(args.trials):
            signame, delay, group = rng.choice(signals), rng.uniform(0.0, args.max_delay), rng.random() < 0.5
            folder = os.path.join(root, f"t{t}")
            if args.eval:
                shutil.copytree(unbroken, folder)
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
