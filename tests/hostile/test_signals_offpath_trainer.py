"""`tfplus train` and the signal handlers it finds: an ignored signal stays ignored (nohup's SIGHUP), and a handler
the caller installed runs too and is back in place after the run."""
from __future__ import annotations

import os
import signal

import pytest

import tfplus as tf
from tfplus.cli import main
from tfplus.data import TrainBatches

SMALL = ["train", "--synthetic", "--model", "lenet", "--batch-size", "16", "--no-eval", "--workers", "1"]


def _signal_at(monkeypatch, at: int, signum: int) -> None:
    """`signum` to this process as the at-th batch is drawn (inside the run, between its steps)."""
    _next, seen = TrainBatches.__next__, [0]

    def next_then_signal(self):
        seen[0] += 1
        if seen[0] == at:
            os.kill(os.getpid(), signum)
        return _next(self)
    monkeypatch.setattr(TrainBatches, "__next__", next_then_signal)


def _step_of(folder) -> int:
    return int(tf.train.latest_checkpoint(str(folder)).rsplit("-", 1)[1])


@pytest.mark.timeout(120)
def test_a_hangup_under_nohup_does_not_stop_the_run(tmp_path, monkeypatch):
    """nohup ignores SIGHUP so that a closed terminal leaves the run going: the trainer's handler stopped it."""
    _signal_at(monkeypatch, 2, signal.SIGHUP)
    old = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        assert main([*SMALL, "--steps", "4", "--checkpoint-dir", str(tmp_path)]) == 0
        assert signal.getsignal(signal.SIGHUP) == signal.SIG_IGN
    finally:
        signal.signal(signal.SIGHUP, old)
    assert _step_of(tmp_path) == 4


@pytest.mark.timeout(120)
def test_the_callers_sigterm_handler_runs_too_and_is_back_after_the_run(tmp_path, monkeypatch, capsys):
    _signal_at(monkeypatch, 2, signal.SIGTERM)
    seen = []

    def callers(signum, frame):
        seen.append(signum)
    old = signal.signal(signal.SIGTERM, callers)
    try:
        assert main([*SMALL, "--steps", "6", "--checkpoint-dir", str(tmp_path)]) == 143
        assert signal.getsignal(signal.SIGTERM) is callers
    finally:
        signal.signal(signal.SIGTERM, old)
    assert seen == [signal.SIGTERM]
    assert _step_of(tmp_path) == 2  # the trainer's own handling: save the step, then stop
    assert "SIGTERM: stopped at step 2/6" in capsys.readouterr().err
