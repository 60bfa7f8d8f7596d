"""Stop signals at exact moments of a process's life (the phase sweep: tools/kill_sweep.py --phases runs every
moment of every command): the run signals itself when it reaches a named moment (tools/phase_signal's
sitecustomize, on PYTHONPATH), so each case is deterministic. Each is a window between phases where a signal once
gave a wrong ending, and the sweep's checks: the exit status and last line, no process left, the checkpoints
whole, and --resume reaching the unbroken run's weights bit for bit."""
from __future__ import annotations

import os
import subprocess

import pytest
from test_sig_cli import _kill_sweep

pytestmark = pytest.mark.skipif(not hasattr(os, "killpg"), reason="process groups are POSIX's")

_RUN = "tfplus.train.monitored_session:MonitoredSession.run"
_TRAIN = ["--synthetic", "--model", "lenet", "--batch-size", "16", "--no-eval", "--steps", "4", "--checkpoint-every",
          "3", "--workers", "1"]


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    """The kill sweep's module, its `tfplus train` Command and the unbroken run's weights."""
    module = _kill_sweep()
    command = module.Command(_TRAIN)
    unbroken = str(tmp_path_factory.mktemp("unbroken"))
    subprocess.run(command.start(unbroken), check=True, capture_output=True)
    return module, command, module.weights(unbroken)


@pytest.mark.parametrize("signame", ["SIGTERM", "SIGINT"])
def test_a_stop_signal_just_before_a_step_stops_the_run_after_it(sweep, signame, tmp_path):
    """A signal between the loop's should_stop() and MonitoredSession.run's own check of it: the handler asked the
    session's coordinator to stop, and that run raised "Run called even after should_stop requested" (exit 1, an
    internal error, nothing saved)."""
    module, command, want = sweep
    assert module.trial(command, want, signame, 0.0, str(tmp_path / "run"), phase=(f"call:{_RUN}#1", 0)) == []
