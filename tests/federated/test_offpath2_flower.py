"""tfplus.federated as a Flower app's writer uses it, round 2 (issue 36): FedProx's proximal term as its formula
says (Flower's FedProx only sends proximal_mu: the client applies it), a user's own strategy (a FedAvg subclass
with its aggregate_train, train metrics aggregation, central evaluation and a train config whose "lr" the clients
follow), and 20 clients of which a round samples 30%."""
import json
from pathlib import Path

import numpy as np
import pytest

from tfplus import data as tfdata
from tfplus import trainer
from tfplus.data import cifar10
from tfplus.federated import FederatedModel

flwr = pytest.importorskip("flwr", reason="Flower is not installed: pip install \"tfplus[federated]\"")
from flowergrid import InProcessGrid  # noqa: E402
from flwr.app import ConfigRecord, MetricRecord  # noqa: E402
from flwr.serverapp import strategy as flwr_strategy  # noqa: E402

from tfplus.federated import flower  # noqa: E402

N_TRAIN, N_TEST = 200, 40


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    return cifar10.write_binary_batches(tmp_path_factory.mktemp("data"), tfdata.synthetic(N_TRAIN, N_TEST, seed=3))


@pytest.fixture(autouse=True)
def task_identity(monkeypatch):
    """Flower's messages take the run's id from the process's task identity, which its runtimes set."""
    from flwr.supercore.task_identity import TaskIdentity
    for key in ("_run_id", "_node_id", "_task_id"):
        monkeypatch.setattr(TaskIdentity, key, 1)


def test_fedprox_adds_mu_times_the_distance_to_the_global_weights_to_each_gradient():
    """FedProx's local objective F(w) + mu/2 ||w - w_global||^2 under SGD: the first step starts at w_global, so the
    term is 0 and the step is plain; the second adds -lr * mu * (w1 - w_global) to the plain second step."""
    lr, mu, ds = 0.05, 4.0, tfdata.synthetic(64, 16)
    cfg = trainer.TrainConfig(model="lenet", batch_size=16, synthetic=True, optimizer="sgd", schedule="const",
                              warmup_steps=0, lr=lr)
    m = FederatedModel(cfg, steps_per_round=2, rounds=1, cpus=1, proximal=True)
    w0 = m.get_weights()
    after = {}
    for steps, mu_ in ((1, 0.0), (1, mu), (2, 0.0), (2, mu)):
        m.set_weights(w0)  # the round's global weights, the anchor
        m.train(ds, steps=steps, proximal_mu=mu_, seed=5)
        after[steps, mu_] = m.get_weights()
    for name in w0:
        np.testing.assert_array_equal(after[1, mu][name], after[1, 0.0][name], err_msg=name)
        w1 = after[1, 0.0][name]
        want = after[2, 0.0][name] - lr * mu * (w1 - w0[name])
        np.testing.assert_allclose(after[2, mu][name], want, rtol=0, atol=1e-6, err_msg=name)
    assert any(not np.allclose(after[2, mu][k], after[2, 0.0][k]) for k in w0)  # the term moved something


def test_a_users_strategy_subclass_runs_tfplus_clients_at_the_lr_its_train_config_sends(data_dir):
    """A FedAvg subclass as Flower's quickstarts write one: its own aggregate_train and train_metrics_aggr_fn, a
    central evaluate_fn, train_config={"lr": 0.0}: the clients take the server's rate (0: no step moves a weight)
    instead of their schedule's."""
    fed = flower.Federation(model="lenet", clients=2, rounds=1, local_steps=2, batch_size=16, data=str(data_dir.parent))
    seen: dict = {"aggregated": [], "metrics": [], "evaluated": []}

    def metrics(records, weighting):
        seen["metrics"].append(sorted(float(r["metrics"][weighting]) for r in records))
        return MetricRecord({"clients": len(records)})

    class Mine(flwr_strategy.FedAvg):
        def aggregate_train(self, server_round, replies):
            replies = list(replies)
            seen["aggregated"].append(len(replies))
            return super().aggregate_train(server_round, replies)

    model = FederatedModel(fed.train_config(), fed.round_steps(), fed.rounds)
    start = model.get_weights()
    result = Mine(min_train_nodes=2, min_available_nodes=2, fraction_evaluate=0.0,
                  train_metrics_aggr_fn=metrics).start(
        InProcessGrid(flower.client_app(fed), 2), flower._record(start), num_rounds=1,
        train_config=ConfigRecord({"lr": 0.0}),
        evaluate_fn=lambda r, arrays: seen["evaluated"].append(r) or MetricRecord({"r": r}))
    assert seen["aggregated"] == [2] and seen["metrics"] == [[100.0, 100.0]] and seen["evaluated"] == [0, 1]
    final = flower._weights(result.arrays)
    for name, w in start.items():
        np.testing.assert_array_equal(final[name], w, err_msg=name)


def test_twenty_clients_a_round_samples_thirty_percent_of(data_dir, tmp_path):
    fed = flower.Federation(model="lenet", clients=20, rounds=1, local_steps=1, batch_size=8, fraction_train=0.3,
                            data=str(data_dir.parent), out=str(tmp_path))
    flower.run_server(fed, InProcessGrid(flower.client_app(fed), 20))
    rows = [json.loads(line) for line in (Path(tmp_path) / "rounds.jsonl").read_text().splitlines()]
    assert len(rows[-1]["clients"]) == 6 and set(rows[-1]["clients"]) <= set(range(20))
    assert rows[-1]["failed"] == [] and rows[-1]["timed_out"] == []


def test_the_client_budget_is_the_clients_not_the_servers(data_dir, tmp_path, monkeypatch):
    """`--client-budget` plans the clients' steps; the server's model (central evaluation, the weights in and out)
    runs unbudgeted: MobileNet's get_weights needed 38.8 MB beside its weights and momentum, so a 32 MB client
    budget ended the whole simulation in the server before any client trained."""
    made = []

    class Recorded(FederatedModel):
        def __init__(self, cfg, *args, **kwargs):
            made.append(cfg.memory_budget)
            super().__init__(cfg, *args, **kwargs)
    monkeypatch.setattr(flower, "FederatedModel", Recorded)
    fed = flower.Federation(model="lenet", clients=2, rounds=1, local_steps=1, batch_size=8, client_budget=8_000_000,
                            data=str(data_dir.parent), out=str(tmp_path))
    flower.run_server(fed, InProcessGrid(flower.client_app(fed), 2))
    assert made == [None, 8_000_000]  # the server's, then the clients' (one process: one client model kept)
    rows = [json.loads(line) for line in (Path(tmp_path) / "rounds.jsonl").read_text().splitlines()]
    assert rows[-1]["clients"] == [0, 1] and 0 < rows[-1]["peak_bytes"] <= 8_000_000


def test_a_worker_draws_the_synthetic_set_once_for_all_its_clients(monkeypatch):
    """A simulation's worker takes many clients: drawing the 5,000 synthetic images again for each took most of a
    client's setup and grew the worker (BENCHMARKS.md, 100 clients' process group)."""
    calls = []
    real = tfdata.synthetic
    monkeypatch.setattr(tfdata, "synthetic", lambda *a, **k: calls.append(a) or real(*a, **k))
    flower._synthetic.cache_clear()
    fed = flower.Federation(model="lenet", clients=4, synthetic=True)
    shards = [flower.client_shard(fed, c) for c in range(4)]
    assert len(calls) == 1 and sum(len(s.train_labels) for s in shards) == trainer.SYNTHETIC_TRAIN
    shards[0].train_images[:] = 0  # a client's shard is its own copy: the next client's is not touched
    again = flower.client_shard(fed, 0)
    assert again.train_images.any() and len(calls) == 1


def test_a_budgeted_models_get_weights_plans_no_copy_of_the_model():
    """Under a client budget get_weights fetches the variables themselves: the one-vector read's plan held a third
    copy of the model beside the weights and the momentum (MobileNet: 38.8 MB, over a 32 MB budget)."""
    cfg = trainer.TrainConfig(model="lenet", batch_size=8, synthetic=True, memory_budget=64_000_000)
    m = FederatedModel(cfg, steps_per_round=2, rounds=1, cpus=1)
    got = m.get_weights()
    weights = sum(w.nbytes for w in got.values())
    assert m.sess.memory_plans[-1].peak_bytes <= 2 * weights + 64  # the weights and their momentum, no more
    flat = m.sess.run(m._read)
    np.testing.assert_array_equal(np.concatenate([got[n].ravel() for n in m.names]), flat)
    assert [got[n].shape for n in m.names] == m.shapes
