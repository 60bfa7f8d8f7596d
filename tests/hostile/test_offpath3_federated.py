"""`tfplus federated simulate` under SIGTERM / SIGINT / SIGHUP: the server stops after the round that was running,
its checkpoint and rounds.jsonl row saved, and says so (Stopped); the handlers are the caller's again after. Under
Ray, the process had ended halfway through a round, aborted by Ray's own SIGTERM handler with a stack dump."""
import json
import os
import signal

import pytest

from tfplus import trainer
from tfplus.federated import FederatedModel

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


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_a_signal_during_a_round_stops_the_server_after_that_rounds_save(tmp_path, monkeypatch, signum):
    fed = flower.Federation(model="lenet", clients=2, rounds=3, local_steps=2, batch_size=8, synthetic=True,
                            out=str(tmp_path / "fl"))
    train, sent = FederatedModel.train, []

    def train_and_signal(self, dataset, steps, server_round=1, *args, **kwargs):
        if server_round == 2 and not sent:  # one kill while round 2's clients train (a second Ctrl-C interrupts)
            sent.append(os.kill(os.getpid(), signum))
        return train(self, dataset, steps, server_round, *args, **kwargs)
    monkeypatch.setattr(FederatedModel, "train", train_and_signal)
    before = signal.getsignal(signum)
    with pytest.raises(flower.Stopped) as stopped, flower.StopSignals() as stop:
        flower.run_server(fed, InProcessGrid(flower.client_app(fed), 2), stop=stop)
    assert signal.getsignal(signum) is before
    rows = [json.loads(line) for line in (tmp_path / "fl" / "rounds.jsonl").read_text().splitlines()]
    assert [r["round"] for r in rows] == [0, 1, 2]
    assert (stopped.value.signum, stopped.value.server_round) == (signum, 2)
    assert stopped.value.checkpoint == rows[2]["checkpoint"] == trainer.tf.train.latest_checkpoint(fed.out)
    assert f"{signal.Signals(signum).name}: stopped after round 2; saved {rows[2]['checkpoint']}" in \
        str(stopped.value)


def test_an_ignored_hangup_stays_ignored():
    old = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        with flower.StopSignals():
            assert signal.getsignal(signal.SIGHUP) == signal.SIG_IGN  # nohup's SIGHUP
    finally:
        signal.signal(signal.SIGHUP, old)
