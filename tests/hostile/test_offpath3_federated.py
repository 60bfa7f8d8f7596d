"""`tfplus federated simulate` under SIGTERM / SIGINT / SIGHUP: the server stops after the round that was running,
its checkpoint and rounds.jsonl row saved, and says so (Stopped); the handlers are the caller's again after. Under
Ray, the process had ended halfway through a round, aborted by Ray's own SIGTERM handler with a stack dump. A
stopped (or killed) run resumed (--resume) ends with the weights and rows of the run never stopped."""
import dataclasses
import json
import os
import signal
import subprocess
import sys

import numpy as np
import pytest

from tfplus import trainer
from tfplus.federated import FederatedModel
from tfplus.train.saver import CheckpointReader

pytest.importorskip("flwr", reason="Flower is not installed: pip install \"tfplus[federated]\"")
from flowergrid import InProcessGrid  # noqa: E402

from tfplus.federated import flower  # noqa: E402


@pytest.fixture(autouse=True)
def task_identity(monkeypatch):
    """Flower's messages take the run's id from the process's task identity, which its runtimes set."""
    from flwr.supercore.task_identity import TaskIdentity
    monkeypatch.setattr(TaskIdentity, "_run_id", 1)
    monkeypatch.setattr(TaskIdentity, "_node_id", 1)
    monkeypatch.setattr(TaskIdentity, "_task_id", 1)


def _federation(out, **kw):
    return flower.Federation(**{"model": "lenet", "clients": 2, "rounds": 3, "local_steps": 2, "batch_size": 8,
                                "synthetic": True, "out": str(out), **kw})


def _run(fed, stop=None):
    return flower.run_server(fed, InProcessGrid(flower.client_app(fed), 2), stop=stop)


def _signal_in_round(monkeypatch, signum: int, server_round: int) -> None:
    """One signal to this process while the clients of `server_round` train (a second Ctrl-C interrupts)."""
    train, sent = FederatedModel.train, []

    def train_and_signal(self, dataset, steps, at_round=1, *args, **kwargs):
        if at_round == server_round and not sent:
            sent.append(os.kill(os.getpid(), signum))
        return train(self, dataset, steps, at_round, *args, **kwargs)
    monkeypatch.setattr(FederatedModel, "train", train_and_signal)


def _rows(fed) -> list[dict]:
    return [json.loads(line) for line in open(os.path.join(fed.out, "rounds.jsonl")).read().splitlines()]


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])  # SIGINT: the resume test's
def test_a_signal_during_a_round_stops_the_server_after_that_rounds_save(tmp_path, monkeypatch, signum):
    fed = _federation(tmp_path / "fl")
    _signal_in_round(monkeypatch, signum, 2)
    before = signal.getsignal(signum)
    with pytest.raises(flower.Stopped) as stopped, flower.StopSignals() as stop:
        _run(fed, stop)
    assert signal.getsignal(signum) is before
    rows = _rows(fed)
    assert [r["round"] for r in rows] == [0, 1, 2]
    assert (stopped.value.signum, stopped.value.server_round) == (signum, 2)
    assert stopped.value.checkpoint == rows[2]["checkpoint"] == trainer.tf.train.latest_checkpoint(fed.out)
    name, saved = signal.Signals(signum).name, rows[2]["checkpoint"]
    assert str(stopped.value) == f"{name}: stopped after round 2 of 3; saved {saved}; continue with the same " \
        "options and --resume"


def test_an_ignored_hangup_stays_ignored():
    old = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        with flower.StopSignals():
            assert signal.getsignal(signal.SIGHUP) == signal.SIG_IGN  # nohup's SIGHUP
    finally:
        signal.signal(signal.SIGHUP, old)


def test_a_stopped_run_resumed_ends_with_the_weights_and_rows_of_one_never_stopped(tmp_path, monkeypatch):
    whole = _federation(tmp_path / "whole")
    _run(whole)
    part, train = _federation(tmp_path / "part"), FederatedModel.train
    _signal_in_round(monkeypatch, signal.SIGINT, 1)
    with pytest.raises(flower.Stopped), flower.StopSignals() as stop:
        _run(part, stop)
    monkeypatch.setattr(FederatedModel, "train", train)
    with open(os.path.join(part.out, "rounds.jsonl"), "a") as f:  # a row of round 2 half-written by a kill
        f.write('{"kind": "round", "round": 2, "te')
    _run(dataclasses.replace(part, resume=True))
    keys = ("round", "step", "test_accuracy", "test_loss", "train_loss")
    assert [[r.get(k) for k in keys] for r in _rows(part)] == [[r.get(k) for k in keys] for r in _rows(whole)]
    with CheckpointReader(_rows(whole)[-1]["checkpoint"]) as a, CheckpointReader(_rows(part)[-1]["checkpoint"]) as b:
        names = a.get_variable_to_shape_map()
        assert names == b.get_variable_to_shape_map()
        for name in names:
            np.testing.assert_array_equal(a.get_tensor(name), b.get_tensor(name), err_msg=name)


def test_resume_refuses_other_settings_and_a_stateful_server_optimizer(tmp_path):
    fed = _federation(tmp_path / "fl", rounds=1)
    _run(fed)
    with pytest.raises(trainer.UsageError, match=r"other settings: batch_size 8 \(now 16\); give the same ones"):
        _run(dataclasses.replace(fed, batch_size=16, resume=True))
    with pytest.raises(trainer.UsageError, match="fedadam's server optimizer state is not saved"):
        _run(dataclasses.replace(fed, strategy="fedadam", resume=True))


def test_a_shard_cache_that_cannot_be_made_is_refused_before_any_round(tmp_path):
    """Each client made the folder in its round, and failed there (a FileNotFoundError in the middle of Ray's log)."""
    blocker = tmp_path / "file"
    blocker.write_text("")
    run = subprocess.run([sys.executable, "-m", "tfplus", "federated", "simulate", "--synthetic", "--clients", "2",
                          "--rounds", "1", "--shard-cache", str(blocker / "shards")],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 2 and run.stderr.strip().splitlines() == [
        f"tfplus federated: error: --shard-cache {blocker / 'shards'}: cannot make that folder (Not a directory)"]
