"""The edges of `tfplus federated simulate` and of tfplus's ClientApp under Flower apps tfplus did not write
(issue 36's sweep): each a case that went wrong before its fix. The apps run in this process (a Grid that calls
the ClientApp: tests/flowergrid.py); tests/federated/test_sweep_simulation.py runs them in Flower's Simulation
Engine."""
import json
import subprocess
import sys

import numpy as np
import pytest

from tfplus.federated import FederatedModel, partition

pytest.importorskip("flwr", reason="Flower is not installed: pip install \"tfplus[federated]\"")
from flowergrid import InProcessGrid  # noqa: E402
from flwr.app import ArrayRecord, ConfigRecord, MetricRecord  # noqa: E402
from flwr.clientapp.mod import fixedclipping_mod  # noqa: E402
from flwr.serverapp import strategy as flwr_strategy  # noqa: E402

from tfplus.federated import flower  # noqa: E402

FED = flower.Federation(model="lenet", clients=2, rounds=1, local_steps=2, batch_size=8, synthetic=True, lr=0.02,
                        test_examples=40)


@pytest.fixture(autouse=True)
def task_identity(monkeypatch):
    """Flower's messages take the run's id from the process's task identity, which its runtimes set."""
    from flwr.supercore.task_identity import TaskIdentity
    for key in ("_run_id", "_node_id", "_task_id"):
        monkeypatch.setattr(TaskIdentity, key, 1)


@pytest.fixture(scope="module")
def start():
    m = FederatedModel(FED.train_config(), FED.local_steps, FED.rounds, cpus=1)
    try:
        yield list(m.get_weights().values())
    finally:
        m.close()


def _run(strategy, app, start, **kw):
    replies = []
    grid = InProcessGrid(app, 2)
    send = grid.send_and_receive
    grid.send_and_receive = lambda messages, timeout=None: [
        replies.append(r) or r for r in send(messages, timeout=timeout)]
    return strategy.start(grid, ArrayRecord(list(start)), num_rounds=1, timeout=60, **kw), replies


def test_weights_sent_as_a_list_train_and_come_back_as_a_list(start):
    """Flower's Keras examples send ArrayRecord(model.get_weights()): keys "0", "1", ... The ClientApp refused
    them (set_weights: "missing conv1/biases ... unexpected 0, 1, 2") and every client failed."""
    result, replies = _run(flwr_strategy.FedAvg(min_train_nodes=2, min_available_nodes=2, fraction_evaluate=0.0),
                           flower.client_app(FED), start)
    assert len(replies) == 2 and not any(r.has_error() for r in replies)
    assert list(replies[0].content["arrays"].keys()) == [str(i) for i in range(len(start))]
    final = result.arrays.to_numpy_ndarrays()
    assert any(not np.array_equal(a, b) for a, b in zip(final, start))  # it trained
    n = [float(r.content["metrics"]["num-examples"]) for r in replies]
    for i, got in enumerate(final):
        want = sum(w * r.content["arrays"].to_numpy_ndarrays()[i] for w, r in zip(n, replies)) / sum(n)
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)


def test_flowers_fedprox_adds_its_term_on_clients_of_a_fedavg_federation(start):
    """A ServerApp of one's own with Flower's FedProx sends proximal-mu: every client failed ("this model was made
    without FedProx's anchors") unless the Federation also said strategy="fedprox"."""
    _, replies = _run(flwr_strategy.FedProx(proximal_mu=0.5, min_train_nodes=2, min_available_nodes=2,
                                            fraction_evaluate=0.0), flower.client_app(FED), start)
    assert len(replies) == 2 and not any(r.has_error() for r in replies)
    assert flower._Cache.model.proximal


def test_client_side_dp_clipping_through_flowers_mod(start):
    """DifferentialPrivacyClientSideFixedClipping needs Flower's fixedclipping_mod on the ClientApp: client_app()
    took no mods. With them each client's update is clipped to the norm."""
    clip = 0.01
    strategy = flwr_strategy.DifferentialPrivacyClientSideFixedClipping(
        flwr_strategy.FedAvg(min_train_nodes=2, min_available_nodes=2, fraction_evaluate=0.0), noise_multiplier=0.0,
        clipping_norm=clip, num_sampled_clients=2)
    result, replies = _run(strategy, flower.client_app(FED, mods=[fixedclipping_mod]), start)
    assert len(replies) == 2 and not any(r.has_error() for r in replies)

    def norm(arrays):
        return np.sqrt(sum(np.sum((a.astype(np.float64) - b) ** 2) for a, b in zip(arrays, start)))
    assert norm(result.arrays.to_numpy_ndarrays()) <= clip * (1 + 1e-5)


def test_per_round_configs_reach_the_clients(start):
    """on_fit_config_fn's way in the Message API: a strategy whose configure_train adds to each round's config.
    Round 1's lr=0 trains nothing, so the result is the start."""
    class PerRound(flwr_strategy.FedAvg):
        def configure_train(self, server_round, arrays, config, grid):
            config["lr"] = 0.0 if server_round == 1 else 0.05
            return super().configure_train(server_round, arrays, config, grid)
    evaluated = []
    result, replies = _run(PerRound(min_train_nodes=2, min_available_nodes=2, fraction_evaluate=0.0),
                     flower.client_app(FED), start, train_config=ConfigRecord({"unused": 1}),
                     evaluate_fn=lambda r, a: evaluated.append(r) or MetricRecord({"r": r}))
    assert evaluated == [0, 1] and len(replies) == 2 and not any(r.has_error() for r in replies)
    for a, b in zip(result.arrays.to_numpy_ndarrays(), start):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=0)


def test_classes_beyond_cifars_ten_are_refused():
    """classes:20 on 10 classes gave each client every class (an IID split under a skewed name)."""
    with pytest.raises(ValueError, match=r"partition 'classes:20': K=20 is more than the labels' 10 classes; give "
                                         r"classes:1 .. classes:10"):
        partition(np.arange(100) % 10, 2, "classes:20")
    with pytest.raises(ValueError, match=r"CIFAR-10 has 10 classes; give classes:1 .. classes:10"):
        flower.Federation(partition="classes:11")
    assert [len(p) for p in partition(np.arange(100) % 10, 2, "classes:10")] == [50, 50]


def test_a_failed_clients_reason_is_its_one_line():
    """In Flower's Simulation Engine a failed reply's reason is Ray's whole traceback (4 kB a client a round in
    rounds.jsonl); the row keeps the ClientApp's own line, which names the client."""
    ray = ("<class 'ray.exceptions.RayTaskError(ClientAppException)'>:<'ray::ClientAppActor.run() (pid=1)\n"
           "Traceback (most recent call last):\n  File \"x.py\", line 3, in train\n"
           "RuntimeError: client 1: BudgetError: the step needs at least 688.2 kB\n\nThe above exception ...\n"
           "flwr.clientapp.client_app.ClientAppException:\nException ClientAppException occurred. Message: "
           "client 1: BudgetError: the step needs at least 688.2 kB'>")
    assert flower._reason(ray) == "client 1: BudgetError: the step needs at least 688.2 kB"
    assert flower._reason("client 0: out of memory (injected)") == "client 0: out of memory (injected)"
    assert flower._reason("Traceback:\n  boom\nActorDiedError: the actor died\n") == "ActorDiedError: the actor died"


def test_a_run_whose_round_gets_too_few_replies_stops_with_one_line(tmp_path):
    """--client-budget too small for the model: every client failed every round and the run went on, exit 0, its
    weights never changed. Now the round's row is saved and the command stops, naming the failures."""
    out = tmp_path / "fl"
    fed = flower.Federation(**{**FED.__dict__, "client_budget": 1000, "out": str(out), "rounds": 2})
    with pytest.raises(flower.TooFewReplies) as e:
        flower.run_server(fed, InProcessGrid(flower.client_app(fed), 2))
    assert str(e.value).startswith("round 1: 0 client(s) replied, fewer than --min-clients 1, so the run stops: "
                                   "client 0: BudgetError: ")
    rows = [json.loads(line) for line in (out / "rounds.jsonl").read_text().splitlines()]
    assert [r["round"] for r in rows] == [0, 1] and len(rows[1]["failed"]) == 2


def test_the_command_line_refuses_a_missing_device_and_a_bad_split_before_ray_starts():
    """--device opencl:9 on a machine without it was an "internal error ... a bug in tfplus" after Ray started."""
    def run(*flags):
        p = subprocess.run([sys.executable, "-m", "tfplus", "federated", "simulate", "--synthetic", *flags],
                           capture_output=True, text=True, timeout=120)
        return p.returncode, p.stderr.strip().splitlines()
    code, err = run("--device", "opencl:9")
    assert code == 2 and len(err) == 1 and "--device opencl:9: OpenCL device 9 does not exist" in err[0], err
    code, err = run("--partition", "classes:12")
    assert code == 2 and len(err) == 1 and "CIFAR-10 has 10 classes" in err[0], err
    code, err = run("--rounds", "0")
    assert code == 2 and err[-1].endswith("argument --rounds: must be >= 1, got 0"), err


def test_a_round_with_fewer_nodes_connected_than_it_needs_stops_in_bounded_time(tmp_path):
    """Flower's strategies wait for min_available_nodes for ever: a Deployment Engine run with one SuperNode of the
    two its --min-clients asks for hung, logging "Waiting for nodes to connect" every second."""
    import threading
    fed = flower.Federation(**{**FED.__dict__, "min_train": 2, "round_timeout": 0.5, "out": str(tmp_path)})
    raised = []

    def run():
        try:
            flower.run_server(fed, InProcessGrid(flower.client_app(fed), 1))
        except flower.TooFewReplies as e:
            raised.append(str(e))
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(60)
    assert not thread.is_alive(), "the server still waits for a second node"
    assert raised == ["round 1: 0 client(s) replied, fewer than --min-clients 2, so the run stops: 1 SuperNode(s) "
                      "connected after 0.5 s (--round-timeout); start more or lower --min-clients"]


def test_the_first_round_waits_for_every_clients_node_to_connect(tmp_path):
    """In the Deployment Engine the SuperNodes connect while the server starts, and Flower samples the nodes
    connected: round 1 began with the first SuperNode alone and left the other client out of it."""
    import time

    class Connecting(InProcessGrid):
        asked = None  # when the server first looked: the second node connects a second later

        def get_node_ids(self):
            self.asked = self.asked or time.monotonic()
            nodes = list(self.nodes)
            return nodes if time.monotonic() - self.asked > 1.0 else nodes[:1]
    fed = flower.Federation(**{**FED.__dict__, "out": str(tmp_path)})
    flower.run_server(fed, Connecting(flower.client_app(fed), 2))
    rows = [json.loads(line) for line in (tmp_path / "rounds.jsonl").read_text().splitlines()]
    assert rows[1]["clients"] == [0, 1]
