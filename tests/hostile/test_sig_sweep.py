"""Signals to every command (the signal sweep: tools/kill_sweep.py --eval, --script): SIGTERM and SIGHUP to `tfplus
eval` (or plan, profile) end it after the running step with one line naming the signal and 128 + its number (they
ended it by their default action: no line); nohup's ignored SIGHUP stays ignored; `tfplus train`, whose own stop
saves first, still does so with the command line's handlers around it; one that comes while the process ends
after the command leaves the command's status; and a moment of the sweep's user script saving with tf.train.Saver
and of its eval."""
from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest
from test_sig_cli import _kill_sweep
from test_signals_offpath_trainer import SMALL, _signal_at, _step_of

from tfplus.cli import main

# `tfplus eval` whose evaluation sends `signum` to its own process, then runs steps until the stop ends it: the
# handler acts after a step (engine.signals), so no sleep decides it; exit 0 if it never does (300 steps).
_EVAL = """
import os, sys
import tfplus as tf
from tfplus import trainer
from tfplus.cli import main

def evaluate(*args, **kwargs):
    g = tf.Graph()
    with g.as_default():
        n = tf.Variable(0.0)
        add = n.assign_add(1.0)
    with tf.Session(graph=g) as sess:
        sess.run(n.initializer)
        os.kill(os.getpid(), int(sys.argv[1]))
        for _ in range(300):
            sess.run(add)

trainer.evaluate = evaluate
sys.exit(main(["eval", "--checkpoint", "unused", "--synthetic"]))
"""


def _eval_sent(signum: int, ignored: bool = False) -> subprocess.CompletedProcess:
    def ignore():
        signal.signal(signum, signal.SIG_IGN)
    return subprocess.run([sys.executable, "-c", _EVAL, str(signum)], capture_output=True, text=True, timeout=120,
                          preexec_fn=ignore if ignored else None)


@pytest.mark.parametrize("signame", ["SIGTERM", "SIGHUP"])
def test_a_stop_signal_to_tfplus_eval_is_one_line_and_128_plus_the_signal(signame):
    done = _eval_sent(getattr(signal, signame))
    assert (done.returncode, done.stderr.strip().splitlines()[-1:]) == \
        (128 + getattr(signal, signame), [f"tfplus eval: {signame}: stopped"]), done.stderr


def test_a_hangup_under_nohup_leaves_tfplus_eval_running():
    done = _eval_sent(signal.SIGHUP, ignored=True)
    assert (done.returncode, done.stderr) == (0, ""), done.stderr


# The tfplus program (`tfplus --version`) whose ending process (an atexit function: Python's finalization, after the
# command) is sent `signum` and then waits for it, up to 30 s.
_ENDING = """
import atexit, os, sys, time
from tfplus.cli import main
signum = int(sys.argv[1])

def ending():
    os.kill(os.getpid(), signum)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        time.sleep(0.01)
atexit.register(ending)
sys.argv = ["tfplus", "--version"]
sys.exit(main())
"""


@pytest.mark.parametrize("signame", ["SIGTERM", "SIGHUP", "SIGINT"])
def test_a_stop_signal_while_the_process_ends_after_the_command_exits_with_the_commands_status(signame):
    """A stop signal after the command's work (the kill sweep's SIGHUP 0.3 s after a run's last step, budgeted)
    killed the ending process by its default action: status -1 and no line, the work done; a Ctrl-C then (CI's
    sweep) raised KeyboardInterrupt in atexit, and Python ended the process by SIGINT."""
    done = subprocess.run([sys.executable, "-c", _ENDING, str(getattr(signal, signame))], capture_output=True,
                          text=True, timeout=120)
    assert (done.returncode, done.stdout.split()[:1], done.stderr) == (0, ["tfplus"], "")


@pytest.mark.timeout(120)
def test_sigterm_stops_tfplus_train_after_a_save_inside_the_command_lines_handlers(tmp_path, monkeypatch, capsys):
    """The trainer calls a handler it found as the caller's own after its own: the command line's, which raises,
    is not one (it ended the run without its save and line)."""
    _signal_at(monkeypatch, 5, signal.SIGTERM)
    assert main([*SMALL, "--steps", "40", "--checkpoint-dir", str(tmp_path)]) == 143
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith("SIGTERM: stopped at step ") and f"saved {tmp_path}" in last, last
    assert _step_of(tmp_path) == int(last.split("step ")[1].split("/")[0])
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL  # (pytest's own: the command line's are gone)


@pytest.mark.skipif(not hasattr(os, "killpg"), reason="process groups are POSIX's")
def test_a_moment_of_the_sweep_on_a_saver_script_and_on_eval(tmp_path):
    """A SIGTERM to a script saving every step (no handler: it dies mid-loop, maybe mid-save), then the script
    again from its latest checkpoint: that checkpoint and the final weights are the unbroken run's; and a SIGHUP to
    `tfplus eval` of a trained checkpoint: one line, the folder untouched, the next eval's report the same."""
    sweep = _kill_sweep()
    script = tmp_path / "user_script.py"
    script.write_text(sweep.SCRIPT)
    command = sweep.Command(["12"], script=str(script))
    unbroken = str(tmp_path / "unbroken")
    sweep.subprocess.run(command.start(unbroken), check=True, capture_output=True)
    want = sweep.weights(unbroken)
    problems = sweep.trial(command, want, "SIGTERM", 4.0, str(tmp_path / "t0"), group=True)
    assert problems == [], problems
    trained = str(tmp_path / "trained")
    sweep.subprocess.run(sweep.Command(["--synthetic", "--model", "lenet", "--batch-size", "16", "--no-eval",
                                        "--steps", "3"]).start(trained), check=True, capture_output=True)
    evaluate = sweep.Command(["--synthetic"], evaluate=True)
    report = sweep.report(sweep.subprocess.run(evaluate.start(trained), check=True, capture_output=True,
                                               text=True).stdout)
    problems = sweep.trial(evaluate, report, "SIGHUP", 3.0, trained, group=False)
    assert problems == [], problems
