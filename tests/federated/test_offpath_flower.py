"""tfplus.federated as a Flower app's writer uses it, off the path the benchmarks measured (issue 36): batch norm
models (their moving statistics travel with the weights and are averaged by examples under every strategy), the
server-optimizer strategies, skewed partitions that leave a client without examples, a budgeted batch norm client,
the global checkpoint read by tfplus eval and by TensorFlow, and a model for other images refused up front."""
import functools
import json
from pathlib import Path

import numpy as np
import pytest

import tfplus as tf
from tfplus import data as tfdata
from tfplus import trainer
from tfplus.data import cifar10
from tfplus.federated import FederatedModel, partition

flwr = pytest.importorskip("flwr", reason="Flower is not installed: pip install \"tfplus[federated]\"")
from flowergrid import InProcessGrid  # noqa: E402

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


def _federation(data_dir, out, **kw):
    return flower.Federation(**{"model": "seqnet", "clients": 2, "rounds": 1, "local_steps": 2, "batch_size": 16,
                                "data": str(data_dir.parent), "out": str(out), "lr": 0.02, **kw})


def _run(fed, n_clients=None):
    """Runs `fed` in this process; returns its rows and each round's replies that carried weights."""
    grid = InProcessGrid(flower.client_app(fed), n_clients or fed.clients)
    replies, send = [], grid.send_and_receive

    def send_and_keep(messages, timeout=None):
        got = send(messages)
        replies.extend(r for r in got if not r.has_error())
        return got
    grid.send_and_receive = send_and_keep
    flower.run_server(fed, grid)
    rows = [json.loads(line) for line in (Path(fed.out) / "rounds.jsonl").read_text().splitlines()]
    return rows, replies


def _checkpoint(row) -> dict:
    reader = tf.train.load_checkpoint(row["checkpoint"])
    return {k: reader.get_tensor(k) for k in reader.get_variable_to_shape_map()}


@pytest.mark.parametrize("model", ["seqnet", "mobilenet"])
def test_a_batch_norm_models_weights_round_trip_with_its_statistics(model):
    m = FederatedModel(trainer.TrainConfig(model=model, batch_size=4, synthetic=True), steps_per_round=1, rounds=1,
                       cpus=1)
    try:
        assert m.statistics and all(name.endswith(("/moving_mean", "/moving_variance")) for name in m.statistics)
        assert set(m.statistics) < set(m.names)  # they travel with the weights
        rng = np.random.default_rng(0)
        sent = {k: np.abs(rng.standard_normal(v.shape)).astype(np.float32) for k, v in m.get_weights().items()}
        m.set_weights(sent)
        got = m.get_weights()
        assert list(got) == list(sent) and all(got[k].dtype == np.float32 and np.array_equal(got[k], sent[k])
                                               for k in sent)
    finally:
        m.close()


@pytest.mark.parametrize("strategy", ["fedprox", "fedadam", "fedyogi", "fedadagrad", "fedavgm"])
def test_every_strategy_averages_the_batch_norm_statistics_by_examples(data_dir, tmp_path, strategy):
    """The server optimizer steps the trained weights; the moving statistics are the clients' example-weighted
    mean, as FedAvg's. (They were stepped too: FedAdam moved each moving variance by about eta a round.)"""
    fed = _federation(data_dir, tmp_path / "fl", strategy=strategy, partition="dirichlet:1.0")
    rows, replies = _run(fed)
    assert rows[1]["clients"] == [0, 1] and np.isfinite(rows[1]["test_loss"])
    weights = np.array([r.content["metrics"]["num-examples"] for r in replies], np.float64)
    assert len(weights) == 2 and weights[0] != weights[1]  # unequal shards: weighting shows
    got = _checkpoint(rows[1])
    stats = [k for k in got if k.endswith(("moving_mean", "moving_variance"))]
    assert stats
    for name in stats:
        want = sum(w * r.content["arrays"][name].numpy() for w, r in zip(weights, replies)) / weights.sum()
        np.testing.assert_allclose(got[name], want, rtol=1e-6, atol=1e-7, err_msg=name)
    assert all((got[k] > 0).all() for k in stats if k.endswith("variance"))


def test_a_batch_norm_models_global_checkpoint_evaluates_in_tfplus_and_reads_in_tensorflow(data_dir, tmp_path,
                                                                                            monkeypatch, tf1):
    fed = _federation(data_dir, tmp_path / "fl", rounds=2)
    rows, _ = _run(fed)
    assert [r["round"] for r in rows] == [0, 1, 2] and rows[2]["failed"] == []
    monkeypatch.setattr(tfdata, "read_batches", functools.partial(tfdata.read_batches, records_per_file=N_TEST))
    result = trainer.evaluate(str(tmp_path / "fl"), data=str(data_dir.parent), batch_size=20)
    assert result.accuracy == pytest.approx(rows[2]["test_accuracy"])
    ours = _checkpoint(rows[2])
    theirs = tf1.train.NewCheckpointReader(rows[2]["checkpoint"])
    assert "bn1/moving_variance" in ours
    for name, value in ours.items():
        np.testing.assert_array_equal(theirs.get_tensor(name), value, err_msg=name)


def test_a_client_left_without_examples_is_reported_by_id_and_the_round_goes_on(data_dir, tmp_path):
    labels = cifar10.read_labels(data_dir)[0]
    # A seed whose Dirichlet(0.1) split leaves a client no examples and another fewer than a batch.
    seed = next(s for s in range(200) if (lambda n: 0 in n and any(0 < k < 16 for k in n))(
        [len(p) for p in partition(labels, 6, "dirichlet:0.1", s)]))
    sizes = [len(p) for p in partition(labels, 6, "dirichlet:0.1", seed)]
    fed = _federation(data_dir, tmp_path / "fl", model="lenet", clients=6, partition="dirichlet:0.1", seed=seed,
                      client_budget=2_000_000)
    rows, _ = _run(fed)
    empty = [i for i, n in enumerate(sizes) if n == 0]
    assert rows[1]["clients"] == [i for i, n in enumerate(sizes) if n]  # the tiny shard's client trained
    assert [f["node"] - 1000 for f in rows[1]["failed"]] == empty
    assert all(f["reason"].startswith(f"client {i}: ValueError: train: the client's shard holds no training "
                                      "examples") for i, f in zip(empty, rows[1]["failed"]))
    assert 0 < rows[1]["peak_bytes"] <= 2_000_000


def test_a_budgeted_batch_norm_client_stays_within_its_budget(data_dir, tmp_path):
    budget = 3_500_000  # seqnet's step at batch 4 needs 3.3 MB at the least (a tighter budget plans for long)
    rows, _ = _run(_federation(data_dir, tmp_path / "fl", client_budget=budget, batch_size=4, local_steps=1))
    assert rows[1]["clients"] == [0, 1]
    assert all(0 < c["peak_bytes"] <= budget for c in rows[1]["client_memory"])


def test_a_model_for_other_images_is_refused_before_any_client_starts():
    with pytest.raises(ValueError, match=r"model 'alexnet' takes 3x227x227 images but federated training reads "
                                         r"CIFAR-10's 3x32x32; pick a CIFAR model"):
        flower.Federation(model="alexnet")


def test_weights_set_from_a_list_as_flower_and_keras_give_them():
    """A Flower app writer's round trip: ArrayRecord(list of arrays) on one side, to_numpy_ndarrays() (a list, in
    the same order) on the other, as Flower's Keras examples do; a list of the wrong length names the count."""
    from flwr.app import ArrayRecord
    m = FederatedModel(trainer.TrainConfig(model="lenet", batch_size=4, synthetic=True), steps_per_round=1, rounds=1,
                       cpus=1)
    try:
        rng = np.random.default_rng(1)
        sent = [rng.standard_normal(v.shape).astype(np.float32) for v in m.get_weights().values()]
        m.set_weights(ArrayRecord(sent).to_numpy_ndarrays())
        assert all(np.array_equal(a, b) for a, b in zip(m.get_weights().values(), sent))
        with pytest.raises(ValueError, match=r"model 'lenet' has 10 variables, the list gives 9 arrays"):
            m.set_weights(sent[:-1])
    finally:
        m.close()
