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
    python tools/kill_sweep.py --phases                              # every moment of train's life, exactly
    python tools/kill_sweep.py --phases --eval                       # ... eval's (--script, --tool plan, ...)

Half the signals go to the run's process group (a terminal's Ctrl-C), half to its first process (kill PID).
Per trial: tfplus stops on SIGINT, SIGTERM and SIGHUP after the running step with 128 + the signal and one last line
naming it (no traceback); SIGQUIT, SIGUSR1 and SIGKILL take their default action (the process ends by the signal),
as in TensorFlow; a script keeps Python's own handling. Then: no process of the run is left (its session, polled
for ORPHAN_SECONDS); every checkpoint that the `checkpoint` file lists loads and verifies; the TensorBoard events
files read to their ends; a stop that tfplus handles leaves no temporary file; running again (`--resume`, the
script restoring its latest checkpoint, eval anew) exits 0 and leaves no temporary file; its final weights equal
those of the run never stopped, bit for bit (eval: its report equals the unbroken eval's, and the checkpoint folder
is untouched). Prints one line per failed check and a summary line.

`--phases` sends each stop signal (to the process and to its group; SIGKILL where a save could be cut) at named
moments of the run instead (PHASES: while importing, parsing, building the graph, building OpenCL programs, at
the first step, mid-run, held inside a checkpoint write, evaluating, after the last step, in the final save,
while Python ends), signalled by the run itself (tools/phase_signal/sitecustomize.py), so a trial is
deterministic; tests/hostile/test_sig_phases.py runs the cheapest few.
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
_HOOK = os.path.join(os.path.dirname(os.path.abspath(__file__)), "phase_signal")  # its sitecustomize.py
_RUN = "tfplus.train.monitored_session:MonitoredSession.run"
_SESSION_RUN = "tfplus.engine.session:Session.run"

# The named moments of each command's life (--phases): (WHERE, seconds held there) as $TFPLUS_PHASE_SIGNAL takes
# them (phase_signal/sitecustomize.py). `tfplus train` runs --steps STEPS with a checkpoint every 3 and the test
# set evaluated at the end; the script saves every step; SIGKILL goes to the moments in KILLED.
_ENDING = {"exit-threads": ("exit:threads", 0), "exit-atexit": ("exit:atexit", 0)}
_STARTING = {"parse": ("call:tfplus.cli_args:Parser.parse_args", 0), "import": ("import:tfplus.trainer", 0),
             "graph": ("call:tfplus.trainer:build_graph", 0)}
_TRAIN = {**_STARTING, "data": ("call:tfplus.trainer:load_data", 0),
          "session": ("call:tfplus.trainer:_SessionCreator.create_session", 0),
          "first-step": (f"call:{_RUN}#1", 0), "mid-run": (f"return:{_RUN}#4", 0),
          "checkpoint": ("return:tfplus.tensor_bundle:write_bundle#1", 0.3),
          "eval": ("call:tfplus.trainer:evaluate_predictions", 0), "last-step": (f"return:{_RUN}#STEPS", 0),
          "final-save": ("call:tfplus.trainer:_CheckpointHook.end", 0),
          "logs-close": ("call:tfplus.trainer:JsonLog.close", 0), **_ENDING}
PHASES = {
    "train": _TRAIN,
    "workers": {**_TRAIN, "workers-close": ("call:tfplus.engine.workers:_Group.close", 0)},
    "opencl": {**_TRAIN, "programs": ("call:tfplus.runtime.opencl.device:Device._build", 0)},
    "eval": {**_STARTING, "restore": ("call:tfplus.train.saver:Saver.restore", 0),
             "first-step": (f"call:{_SESSION_RUN}#2", 0), "mid-run": (f"return:{_SESSION_RUN}#3", 0), **_ENDING},
    "plan": {**_STARTING, "import": ("import:tfplus.planner", 0), "graph": ("call:tfplus.plan_cli:main", 0),
             **_ENDING},
    "profile": {"parse": _STARTING["parse"], "import": ("import:tfplus.profile_cli", 0),
                "first-step": (f"call:{_SESSION_RUN}#2", 0),
                "mid-run": (f"return:{_SESSION_RUN}#4", 0), **_ENDING},
    "federated": {"parse": _STARTING["parse"], "import": ("import:tfplus.federated.flower", 0),
                  "ray-start": ("call:tfplus.federated.flower:_start_ray", 0),
                  "checkpoint": ("return:tfplus.tensor_bundle:write_bundle#2", 0.3),
                  "last-round": ("return:tfplus.federated.model:FederatedModel.save#STEPS+1", 0),
                  "server-close": ("call:tfplus.federated.model:FederatedModel.close", 0), **_ENDING},
    "script": {"import": ("import:tfplus.train.saver", 0), "first-step": (f"call:{_SESSION_RUN}#3", 0),
               "checkpoint": ("return:tfplus.tensor_bundle:write_bundle#2", 0.3),
               "mid-run": (f"return:{_SESSION_RUN}#9", 0), "exit-threads": ("exit:threads", 0)},
}
KILLED = ("mid-run", "checkpoint", "final-save")


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


# The same model and batches in a script of tf.train.MonitoredTrainingSession: it restores from the folder, saves
# there every 2 steps and at its end (CheckpointSaverHook), writes TensorBoard events, and stops at STEPS.
MONITORED_SCRIPT = SCRIPT[:SCRIPT.index("saver = ")] + """
def step_fn(context):
    k = int(context.session.run(step))
    if k >= steps:  # (a finished run started again: StopAtStepHook, as TF1's, would run one step more)
        return context.request_stop()
    rng = np.random.default_rng(k)
    context.run_with_hooks(train, {x: rng.standard_normal((16, 3, 8, 8)).astype(np.float32),
                                   y: rng.integers(0, 10, 16)})

with tf.train.MonitoredTrainingSession(checkpoint_dir=folder, save_checkpoint_steps=2, log_step_count_steps=1,
                                       hooks=[tf.train.StopAtStepHook(last_step=steps)]) as sess:
    while not sess.should_stop():
        sess.run_step_fn(step_fn)
"""


class Command:
    """How a sweep starts a run into a folder and resumes it there: `tfplus train` (its checkpoints and
    TensorBoard events in the folder), `tfplus federated simulate` (--out), under a launcher (mpiexec) or not,
    `tfplus eval` of the checkpoint in the folder, SCRIPT (`script`: its path) saving into it, or `tfplus plan` or
    `profile` (`tool`)."""

    def __init__(self, argv: list[str], federated: bool = False, launcher: list[str] = (), evaluate: bool = False,
                 script: str | None = None, tool: str | None = None):
        self.argv, self.federated, self.launcher = argv, federated, list(launcher)
        self.evaluate, self.script, self.tool = evaluate, script, tool

    def start(self, folder: str) -> list[str]:
        if self.tool:  # `tfplus plan` or `profile`: no folder
            return _tfplus([self.tool, *self.argv], self.launcher)
        if self.script:
            return [*self.launcher, sys.executable, self.script, folder, *self.argv]
        if self.evaluate:
            return _tfplus(["eval", "--checkpoint", folder, *self.argv], self.launcher)
        if self.federated:
            return _tfplus(["federated", "simulate", *self.argv, "--out", folder], self.launcher)
        return _tfplus(["train", *self.argv, "--checkpoint-dir", folder, "--logdir", os.path.join(folder, "tb")],
                       self.launcher)

    def resume(self, folder: str) -> list[str]:
        if self.script or self.evaluate or newest(folder) is None:  # (before the first save)
            return self.start(folder)
        if self.federated:
            return self.start(folder) + ["--resume"]
        ranks = ["--distributed"] if "--distributed" in self.argv else []  # (not a checkpoint's option)
        return _tfplus(["train", "--resume", *ranks, "--checkpoint-dir", folder, "--logdir",
                        os.path.join(folder, "tb")], self.launcher)


def newest(folder: str) -> str | None:
    """The checkpoint that `tfplus train --resume` restores: the newest whole one, listed or not (a save killed
    after its files, before the state file listed them)."""
    reader = tf.train.newest_valid_checkpoint(folder)[0] if os.path.isdir(folder) else None
    if reader is None:
        return None
    with reader:
        return reader.path


def weights(folder: str) -> dict[str, np.ndarray]:
    path = newest(folder)
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


def phase_env(phase: tuple[str, float], signame: str, group: bool, fired: str) -> dict[str, str]:
    """The environment of a run that sends itself `signame` at `phase` (PHASES' (WHERE, HOLD)) and then makes the
    file `fired`."""
    where, hold = phase
    path = os.environ.get("PYTHONPATH", "")
    return {**os.environ, "PYTHONPATH": _HOOK + (os.pathsep + path if path else ""),
            "TFPLUS_PHASE_SIGNAL": f"{where} {signame}{' group' * group} {hold}", "TFPLUS_PHASE_FIRED": fired}


def trial(command: Command, want, signame: str, delay: float, folder: str, group: bool = False,
          phase: tuple[str, float] | None = None) -> list[str]:
    """One run of `command` into `folder`, sent `signame` after `delay` seconds, or by itself at `phase` (PHASES'
    (WHERE, HOLD)) (with `group`, to its process group, as a terminal's Ctrl-C: its worker processes get it too;
    mpiexec's ranks have groups of their own), then resumed: what went wrong. `want`: the unbroken run's weights
    (eval: its report; plan and profile: None, nothing resumed)."""
    before = folder_files(folder) if command.evaluate else None
    fired = folder.rstrip(os.sep) + ".fired"
    env = phase_env(phase, signame, group, fired) if phase else None
    proc = subprocess.Popen(command.start(folder), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, env=env)
    if phase is None:
        time.sleep(delay)
        if group:
            os.killpg(proc.pid, getattr(signal, signame))
        else:
            proc.send_signal(getattr(signal, signame))
    out, err = proc.communicate(timeout=600)
    if phase and not os.path.exists(fired):
        return [f"the moment {phase[0]} never came (exit {proc.returncode}: {err.strip().splitlines()[-1:]})"]
    # Under a launcher the status is the launcher's (MPICH's mpiexec passes SIGINT on to the ranks, not SIGTERM: it
    # waits for them to end, then exits 15); its ranks have sessions of their own.
    problems = [] if command.launcher else check_exit(signame, proc.returncode, err, bool(command.script))
    problems += [f"a process of the run left: {p}" for p in ([] if command.launcher else orphans(proc.pid))]
    problems += check_folder(folder)
    if signame in STOPS and not command.script:  # (a kill may leave one, which the next save removes)
        problems += [f"temporary file left by the stopped run: {p}" for p in temp_files(folder)]
    if command.tool:  # plan, profile: nothing to resume
        return problems
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
    p.add_argument("--steps", type=int, help="default 24 (--phases: 6)")
    p.add_argument("--max-delay", type=float, default=5.0, help="seconds; the delays are uniform up to this")
    kind = p.add_mutually_exclusive_group()
    kind.add_argument("--federated", action="store_true", help="tfplus federated simulate (2 clients) instead")
    kind.add_argument("--eval", action="store_true", help="tfplus eval of the unbroken run's checkpoint instead")
    kind.add_argument("--script", nargs="?", const="saver", choices=("saver", "monitored"), help="a TF1 script "
                      "saving with tf.train.Saver instead (monitored: in a tf.train.MonitoredTrainingSession)")
    kind.add_argument("--tool", choices=("plan", "profile"), help="(--phases) tfplus plan or profile instead")
    p.add_argument("--phases", nargs="?", const="all", metavar="NAME,..", help="each stop signal, to the process "
                   "and to its group (SIGKILL: at " + ", ".join(KILLED) + "), at each named moment of the run "
                   "(PHASES; default all of the command's) instead of at random ones; --trials is ignored")
    p.add_argument("--signals", help="a comma list of those sent (default: all; --phases: " +
                   ",".join(STOPS) + ",SIGKILL)")
    p.add_argument("--launcher", default="", help='e.g. "mpiexec -n 2" (with -- --distributed)')
    p.add_argument("extra", nargs="*", help="more options of the command (after --)")
    args = p.parse_args(argv)
    signals = (args.signals or ",".join([*STOPS, "SIGKILL"] if args.phases else SIGNALS)).split(",")
    if unknown := set(signals) - set(SIGNALS):
        p.error(f"--signals: {sorted(unknown)} are not among {', '.join(SIGNALS)}")
    if args.tool and not args.phases:
        p.error("--tool runs with --phases only")
    steps = args.steps or (6 if args.phases else 24)
    kind = "eval" if args.eval else "script" if args.script else "federated" if args.federated else args.tool or \
        ("opencl" if "opencl" in " ".join(args.extra) else "workers" if "--workers" in args.extra else "train")
    if args.phases and args.launcher:
        p.error("--phases: no --launcher (under mpiexec, TFPLUS_PHASE_SIGNAL's rank0 signals one rank: "
                "tools/phase_signal/sitecustomize.py)")
    moments = {}
    if args.phases:
        moments = {k: (w.replace("STEPS+1", str(steps + 1)).replace("STEPS", str(steps)), h)
                   for k, (w, h) in PHASES[kind].items()}
        if args.phases != "all":
            if unknown := set(args.phases.split(",")) - set(moments):
                p.error(f"--phases: {sorted(unknown)} are not among {', '.join(moments)}")
            moments = {k: moments[k] for k in args.phases.split(",")}
    common = ["--synthetic", "--model", "lenet", "--batch-size", "16"]
    run = common + (["--clients", "2", "--rounds", str(steps), "--local-steps", "3", "--cpus", "2"]
                    if args.federated else ["--eval-every" if args.phases else "--no-eval", *["1"] * bool(args.phases),
                                            "--steps", str(steps), "--checkpoint-every", "3"])
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        # A shell starts a background job (`... &`) with SIGINT ignored, and the runs would inherit that: every
        # Ctrl-C trial a no-op. A handler of this process's own is reset to the default in its children.
        signal.signal(signal.SIGINT, signal.default_int_handler)
    rng = random.Random(args.seed)
    root = tempfile.mkdtemp(prefix="kill_sweep")
    try:
        unbroken = os.path.join(root, "unbroken")
        want = None
        if args.tool:
            command = Command([*{"plan": ["--model", "lenet", "--memory-budget", "8MB"],
                                 "profile": common[1:] + ["--steps", "4"]}[args.tool], *args.extra], tool=args.tool)
        elif args.script:
            script = os.path.join(root, "user_script.py")
            with open(script, "w") as f:
                f.write(MONITORED_SCRIPT if args.script == "monitored" else SCRIPT)
            command = Command([str(steps), *args.extra], launcher=args.launcher.split(), script=script)
        else:
            command = Command(run + args.extra, args.federated, args.launcher.split())
        if not args.tool:
            subprocess.run(command.start(unbroken), check=True, capture_output=True)
            want = weights(unbroken)
        if args.eval:
            command = Command(["--synthetic", *args.extra], launcher=args.launcher.split(), evaluate=True)
            want = report(subprocess.run(command.start(unbroken), check=True, capture_output=True, text=True).stdout)
        if args.phases:
            plan = [(s, 0.0, g, name) for name in moments for s in signals for g in (False, True)
                    if (s != "SIGKILL" or (name in KILLED and not g))]
        else:
            plan = [(rng.choice(signals), rng.uniform(0.0, args.max_delay), rng.random() < 0.5, None)
                    for _ in range(args.trials)]
        failed = 0
        for t, (signame, delay, group, name) in enumerate(plan):
            folder = os.path.join(root, f"t{t}")
            if args.eval:
                shutil.copytree(unbroken, folder)
            problems = trial(command, want, signame, delay, folder, group, moments.get(name))
            failed += bool(problems)
            when = f"at {name}" if name else f"after {delay:.2f} s"
            for line in problems:
                print(f"trial {t} ({signame} to the {'group' if group else 'process'} {when}): {line}", flush=True)
            shutil.rmtree(folder, ignore_errors=True)
        print(f"{len(plan)} trials, {failed} with a problem ({' '.join(command.start('DIR'))})")
        return 1 if failed else 0
    finally:
        shutil.rmtree(root, ignore_errors=True)

if __name__ == "__main__":
    sys.exit(main())
