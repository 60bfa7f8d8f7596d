"""Flower apps on tfplus as someone who did not write tfplus.federated writes them, from Flower 1.42's docs and
examples (quickstart-tensorflow, the strategies' API pages): a Message-API ClientApp around tfplus's (with Flower's
client-side DP mods, and a client that fails in round 2 when told to), one of its own on FederatedModel, and a
ServerApp that runs every strategy Flower ships, one after another on the same SuperNodes, recording what the
clients sent and what the strategy made of it. tests/federated/test_sweep_simulation.py launches them in Flower's
Simulation Engine and checks each result against its strategy's formula."""
from __future__ import annotations

import dataclasses

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.clientapp.mod import adaptiveclipping_mod, fixedclipping_mod
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp import strategy as S

from tfplus.federated import FederatedModel, flower

CLIENTS = 4
FED = flower.Federation(model="lenet", clients=CLIENTS, rounds=2, local_steps=2, batch_size=8, synthetic=True,
                        lr=0.02, test_examples=100, partition="dirichlet:1.0")
BUDGET = 2_000_000
BUDGETED = dataclasses.replace(FED, client_budget=BUDGET, measure_memory=True)
CLIP = 0.05  # the DP wrappers' clipping norm: well under an update's norm, so clipping shows

# ---------------------------------------------------------------------------------------------------------
# Clients

_plain = flower.client_app(FED)
_by_app = {"dp-client-fixed": flower.client_app(FED, mods=[fixedclipping_mod]),
           "dp-client-adaptive": flower.client_app(FED, mods=[adaptiveclipping_mod]),
           "budget": flower.client_app(BUDGETED)}
clientapp = ClientApp()  # its train() below


@clientapp.train()
def train(msg: Message, context: Context) -> Message:
    config = msg.content["config"]
    if config.get("fail-round") == config["server-round"] and context.node_config["partition-id"] == 1:
        raise RuntimeError(f"client 1: injected failure in round {config['server-round']}")
    if config.get("app") == "fedavg-own-client":
        return own_clientapp(msg, context)
    return _by_app.get(config.get("app"), _plain)(msg, context)


_own: dict = {}
own_clientapp = ClientApp()


@own_clientapp.train()
def own_train(msg: Message, context: Context) -> Message:
    """quickstart-tensorflow's ClientApp with tfplus's FederatedModel in Keras's place: weights in and out as a
    list, the partition's shard, one model per process."""
    pid = int(context.node_config["partition-id"])
    if "model" not in _own:
        _own["model"] = FederatedModel(FED.train_config(), FED.local_steps, FED.rounds, cpus=1)
    model = _own["model"]
    shard = flower.client_shard(FED, pid)
    model.set_weights(msg.content["arrays"].to_numpy_ndarrays())
    out = model.train(shard, FED.local_steps, int(msg.content["config"]["server-round"]))
    return Message(RecordDict({"arrays": ArrayRecord(list(model.get_weights().values())),
                               "metrics": MetricRecord({"train_loss": out["loss"],
                                                        "num-examples": len(shard.train_labels)})}), reply_to=msg)


# ---------------------------------------------------------------------------------------------------------
# The server

def _all(**kw):
    return {"min_train_nodes": CLIENTS, "min_available_nodes": CLIENTS, "fraction_evaluate": 0.0, **kw}


# (name, strategy, rounds, extra train config): every strategy Flower 1.42 ships for models, with arguments
CASES = [
    ("fedavg-named", lambda: S.FedAvg(**_all()), 2, {}),
    ("fedavg-listed", lambda: S.FedAvg(**_all()), 1, {}),
    ("fedavg-half", lambda: S.FedAvg(fraction_train=0.5, min_train_nodes=2, min_available_nodes=CLIENTS,
                                     fraction_evaluate=0.0), 1, {}),
    ("fedavg-fails-in-round-2", lambda: S.FedAvg(**_all(min_train_nodes=3)), 2, {"fail-round": 2}),
    ("fedavg-own-client", lambda: S.FedAvg(**_all()), 1, {}),
    ("fedprox", lambda: S.FedProx(proximal_mu=1.0, **_all()), 1, {}),
    ("fedadam", lambda: S.FedAdam(eta=0.01, eta_l=0.02, beta_1=0.9, beta_2=0.99, tau=1e-3, **_all()), 1, {}),
    ("fedadagrad", lambda: S.FedAdagrad(eta=0.01, tau=1e-3, **_all()), 1, {}),
    ("fedyogi", lambda: S.FedYogi(eta=0.01, tau=1e-3, **_all()), 1, {}),
    ("fedavgm", lambda: S.FedAvgM(server_learning_rate=1.0, server_momentum=0.9, **_all()), 1, {}),
    ("fedmedian", lambda: S.FedMedian(**_all()), 1, {}),
    ("fedtrimmedavg", lambda: S.FedTrimmedAvg(beta=0.25, **_all()), 1, {}),
    ("krum", lambda: S.Krum(num_malicious_nodes=1, **_all()), 1, {}),
    ("multikrum", lambda: S.MultiKrum(num_malicious_nodes=0, num_nodes_to_select=2, **_all()), 1, {}),
    ("bulyan", lambda: S.Bulyan(num_malicious_nodes=0, **_all()), 1, {}),
    ("qfedavg", lambda: S.QFedAvg(client_learning_rate=FED.lr, q=0.2, **_all()), 1, {}),
    ("dp-server-fixed", lambda: S.DifferentialPrivacyServerSideFixedClipping(
        S.FedAvg(**_all()), noise_multiplier=0.0, clipping_norm=CLIP, num_sampled_clients=CLIENTS), 1, {}),
    ("dp-server-adaptive", lambda: S.DifferentialPrivacyServerSideAdaptiveClipping(
        S.FedAvg(**_all()), noise_multiplier=0.0, num_sampled_clients=CLIENTS, initial_clipping_norm=CLIP), 1, {}),
    ("dp-client-fixed", lambda: S.DifferentialPrivacyClientSideFixedClipping(
        S.FedAvg(**_all()), noise_multiplier=0.0, clipping_norm=CLIP, num_sampled_clients=CLIENTS), 1, {}),
    ("dp-client-adaptive", lambda: S.DifferentialPrivacyClientSideAdaptiveClipping(
        S.FedAvg(**_all()), noise_multiplier=0.0, num_sampled_clients=CLIENTS, initial_clipping_norm=CLIP), 1, {}),
    ("budget", lambda: S.FedAvg(**_all()), 1, {}),  # last: its clients trace their memory from then on
]
RESULTS: dict[str, dict] = {}  # name -> what the ServerApp saw (the test's process runs it)


def snapshot(reply: Message) -> dict:
    """What a reply holds, copied as it arrives. NOTE: some strategies (FedMedian, Bulyan, the server-side DP
    clipping) consume or clip the replies' arrays in place as they aggregate."""
    if reply.has_error():
        return {"error": reply.error.reason}
    content = reply.content
    return {"error": None, "keys": list(content["arrays"].keys()),
            "arrays": [a.copy() for a in content["arrays"].to_numpy_ndarrays()],
            "n": float(content["metrics"]["num-examples"]), "loss": float(content["metrics"]["train_loss"]),
            "client": dict(content["client"]) if "client" in content else None}


class Recorder(Grid):
    """The runtime's Grid, keeping each training round's messages sent and replies (snapshot)."""

    def __init__(self, grid: Grid):
        self.grid, self.rounds = grid, []

    def send_and_receive(self, messages, *, timeout=None):
        messages = list(messages)
        replies = list(self.grid.send_and_receive(messages, timeout=timeout))
        if messages and messages[0].metadata.message_type == "train":
            self.rounds.append((len(messages), [snapshot(r) for r in replies]))
        return replies

    def set_run(self, run):
        self.grid.set_run(run)

    @property
    def run(self):
        return self.grid.run

    def create_message(self, *args, **kwargs):
        return self.grid.create_message(*args, **kwargs)

    def get_node_ids(self):
        return self.grid.get_node_ids()

    def push_messages(self, messages):
        return self.grid.push_messages(messages)

    def pull_messages(self, message_ids):
        return self.grid.pull_messages(message_ids)


serverapp = ServerApp()


@serverapp.main()
def main(grid: Grid, context: Context) -> None:
    central = FederatedModel(FED.train_config(), FED.round_steps(), FED.rounds)  # evaluate_fn's model
    test = flower.test_set(FED)
    start = central.get_weights()
    for name, make, rounds, extra in CASES:
        evaluated, recorder = [], Recorder(grid)

        def evaluate(server_round: int, arrays: ArrayRecord, evaluated=evaluated) -> MetricRecord:
            central.set_weights(arrays.to_numpy_ndarrays())
            accuracy, loss = central.evaluate(test)
            evaluated.append((server_round, loss))
            return MetricRecord({"accuracy": accuracy, "loss": loss})

        initial = (ArrayRecord({k: Array(v) for k, v in start.items()}) if name == "fedavg-named" else
                   ArrayRecord(list(start.values())))
        try:
            result = make().start(recorder, initial, num_rounds=rounds, timeout=120,
                                  train_config=ConfigRecord({"app": name, **extra}), evaluate_fn=evaluate)
            final = result.arrays.to_numpy_ndarrays()
        except Exception as e:  # the test names the case
            RESULTS[name] = {"error": f"{type(e).__name__}: {e}"}
            continue
        RESULTS[name] = {"start": list(start.values()), "rounds": recorder.rounds, "final": final,
                         "evaluated": evaluated, "names": list(start)}


def check_weighted_mean(replies, final, rtol=1e-5):
    """The arrays of `final` are the replies' (snapshots') mean weighted by num-examples (FedAvg's)."""
    ok = [r for r in replies if r["error"] is None]
    n = np.array([r["n"] for r in ok])
    for i, got in enumerate(final):
        want = sum(w * r["arrays"][i].astype(np.float64) for w, r in zip(n, ok)) / n.sum()
        np.testing.assert_allclose(got, want, rtol=rtol, atol=1e-7, err_msg=f"array {i}")


def arrays_of(replies) -> list[list[np.ndarray]]:
    return [r["arrays"] for r in replies if r["error"] is None]


def norm(arrays_a, arrays_b) -> float:
    return float(np.sqrt(sum(np.sum((a.astype(np.float64) - b) ** 2) for a, b in zip(arrays_a, arrays_b))))
