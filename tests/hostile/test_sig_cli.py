"""`tfplus train` stopped at random moments (the sig sweep; tools/kill_sweep.py runs hundreds): Ctrl-C while the
command line is parsed or a command's modules load is one line and exit 130 (it was a traceback); a few moments
of the sweep: the exit status, the listed checkpoints, and --resume's weights against a run never stopped."""
from __future__ import annotations

import importlib.util
import os

import pytest

from tfplus import cli

_TOOL = os.path.join(os.path.dirname(__file__), "..", "..", "tools", "kill_sweep.py")


def _kill_sweep():
    spec = importlib.util.spec_from_file_location("kill_sweep", _TOOL)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("argv, prog", [(["train", "--synthetic"], "tfplus train"), (["--version"], "tfplus")])
def test_ctrl_c_before_the_command_runs_is_one_line_and_130(argv, prog, monkeypatch, capsys):
    def interrupted():
        raise KeyboardInterrupt
    monkeypatch.setattr(cli, "build_parser", interrupted)
    assert cli.main(argv) == 130
    assert capsys.readouterr().err == f"\n{prog}: interrupted\n"


@pytest.mark.skipif(not hasattr(os, "killpg"), reason="process groups are POSIX's")
def test_a_few_random_moments_of_the_kill_sweep(tmp_path):
    """Two moments inside the run (after its ~1-2 s start): a kill, and a terminal's Ctrl-C (to the process group:
    the worker processes get it too) that saves first."""
    sweep = _kill_sweep()
    command = sweep.Command(["--synthetic", "--model", "lenet", "--batch-size", "16", "--no-eval", "--steps", "40",
                             "--checkpoint-every", "3"])
    unbroken = str(tmp_path / "unbroken")
    sweep.subprocess.run(command.start(unbroken), check=True, capture_output=True)
    want = sweep.weights(unbroken)
    for n, (signame, delay, group) in enumerate([("SIGKILL", 3.0, False), ("SIGINT", 3.5, True)]):
        problems = sweep.trial(command, want, signame, delay, str(tmp_path / f"t{n}"), group)
        assert problems == [], f"{signame} after {delay} s: {problems}"
