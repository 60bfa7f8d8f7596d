"""A Flower app on tfplus written from Flower 1.42's quickstarts by someone who did not write tfplus.federated, as
tests/federated/test_sweep_engines.py copies it into an app folder of its own (`flwr run APP`):

- legacy_clientapp / legacy_serverapp: quickstart-tensorflow's shape, a NumPyClient and server_fn returning
  ServerAppComponents with flwr.server.strategy.FedAvg (on_fit_config_fn, evaluate_fn, initial_parameters);
- clientapp / serverapp: the Message API (@app.train, @app.evaluate; a ServerApp main with
  flwr.serverapp.strategy.FedAvg, evaluate_fn, federated evaluation).

Both save the global model each round as tfplus checkpoints in the run config's `out`, with the global weights and
the last round's replies as .npz files and one JSON line per round, for the test to check."""
from __future__ import annotations

import json
import os

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict
from flwr.client import NumPyClient
from flwr.clientapp import ClientApp
from flwr.common import ndarrays_to_parameters
from flwr.server import ServerApp as LegacyServerApp
from flwr.server import ServerAppComponents, ServerConfig
from flwr.server.strategy import FedAvg as LegacyFedAvg
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import FedAvg

from tfplus.federated import FederatedModel, flower

_models: dict = {}


def _federation(run_config) -> flower.Federation:
    return flower.Federation(model="lenet", clients=int(run_config["clients"]), rounds=int(run_config["rounds"]),
                             local_steps=2, batch_size=8, synthetic=True, lr=0.02, test_examples=100)


def _model(fed: flower.Federation) -> FederatedModel:
    """One model a process (Flower may run many clients in one)."""
    if fed not in _models:
        _models[fed] = FederatedModel(fed.train_config(), fed.local_steps, fed.rounds, cpus=1)
    return _models[fed]


def _log(out: str, row: dict) -> None:
    with open(os.path.join(out, "rounds.jsonl"), "a") as f:
        f.write(json.dumps(row) + "\n")


def _save(out: str, model: FederatedModel, server_round: int, weights: list) -> None:
    model.set_weights(weights)
    np.savez(os.path.join(out, f"global-{server_round}.npz"), *weights)
    model.save(out, server_round, None, [])


# ---------------------------------------------------------------------------------------------------------
# quickstart-tensorflow's shape

class TfplusClient(NumPyClient):
    def __init__(self, model: FederatedModel, shard):
        self.model, self.shard = model, shard

    def get_parameters(self, config):
        return list(self.model.get_weights().values())

    def fit(self, parameters, config):
        self.model.set_weights(parameters)
        out = self.model.train(self.shard, self.model.steps_per_round, int(config["server_round"]))
        return self.get_parameters(config), len(self.shard.train_labels), {"train_loss": out["loss"]}

    def evaluate(self, parameters, config):
        self.model.set_weights(parameters)
        accuracy, loss = self.model.evaluate(self.shard)
        return loss, len(self.shard.test_labels), {"accuracy": accuracy}


def client_fn(context: Context):
    fed = _federation(context.run_config)
    return TfplusClient(_model(fed), flower.client_shard(fed, int(context.node_config["partition-id"]))).to_client()


legacy_clientapp = ClientApp(client_fn=client_fn)


def server_fn(context: Context) -> ServerAppComponents:
    fed, out = _federation(context.run_config), str(context.run_config["out"])
    model, test = _model(fed), flower.test_set(fed)

    def evaluate(server_round, parameters, config):
        _save(out, model, server_round, parameters)
        accuracy, loss = model.evaluate(test)
        _log(out, {"round": server_round, "test_loss": loss, "test_accuracy": accuracy})
        return loss, {"accuracy": accuracy}

    strategy = LegacyFedAvg(fraction_fit=1.0, fraction_evaluate=1.0, min_fit_clients=fed.clients,
                            min_evaluate_clients=fed.clients, min_available_clients=fed.clients,
                            evaluate_fn=evaluate, on_fit_config_fn=lambda r: {"server_round": r},
                            initial_parameters=ndarrays_to_parameters(list(model.get_weights().values())))
    return ServerAppComponents(strategy=strategy, config=ServerConfig(num_rounds=fed.rounds))


legacy_serverapp = LegacyServerApp(server_fn=server_fn)

# ---------------------------------------------------------------------------------------------------------
# The Message API

clientapp = ClientApp()


@clientapp.train()
def train(msg: Message, context: Context) -> Message:
    fed = _federation(context.run_config)
    model, shard = _model(fed), flower.client_shard(fed, int(context.node_config["partition-id"]))
    model.set_weights(msg.content["arrays"].to_numpy_ndarrays())
    out = model.train(shard, fed.local_steps, int(msg.content["config"]["server-round"]))
    return Message(RecordDict({"arrays": ArrayRecord(list(model.get_weights().values())),
                               "metrics": MetricRecord({"train_loss": out["loss"],
                                                        "num-examples": len(shard.train_labels)})}), reply_to=msg)


@clientapp.evaluate()
def evaluate(msg: Message, context: Context) -> Message:
    fed = _federation(context.run_config)
    model, shard = _model(fed), flower.client_shard(fed, int(context.node_config["partition-id"]))
    model.set_weights(msg.content["arrays"].to_numpy_ndarrays())
    accuracy, loss = model.evaluate(shard)
    return Message(RecordDict({"metrics": MetricRecord({"eval_loss": loss, "eval_accuracy": accuracy,
                                                        "num-examples": len(shard.test_labels)})}), reply_to=msg)


class KeepingFedAvg(FedAvg):
    """FedAvg that keeps each round's replies' arrays and example counts in `out` before aggregating them."""

    def __init__(self, out: str, **kwargs):
        super().__init__(**kwargs)
        self.out = out

    def aggregate_train(self, server_round, replies):
        replies = list(replies)
        ok = [m for m in replies if not m.has_error()]
        np.savez(os.path.join(self.out, f"replies-{server_round}.npz"),
                 n=np.array([float(m.content["metrics"]["num-examples"]) for m in ok]),
                 **{f"r{j}_{i}": a for j, m in enumerate(ok)
                    for i, a in enumerate(m.content["arrays"].to_numpy_ndarrays())})
        return super().aggregate_train(server_round, replies)


serverapp = ServerApp()


@serverapp.main()
def main(grid: Grid, context: Context) -> None:
    fed, out = _federation(context.run_config), str(context.run_config["out"])
    model, test = _model(fed), flower.test_set(fed)

    def central(server_round: int, arrays: ArrayRecord) -> MetricRecord:
        _save(out, model, server_round, arrays.to_numpy_ndarrays())
        accuracy, loss = model.evaluate(test)
        _log(out, {"round": server_round, "test_loss": loss, "test_accuracy": accuracy})
        return MetricRecord({"test_loss": loss, "test_accuracy": accuracy})

    strategy = KeepingFedAvg(out, fraction_train=1.0, fraction_evaluate=1.0, min_train_nodes=fed.clients,
                             min_evaluate_nodes=fed.clients, min_available_nodes=fed.clients)
    result = strategy.start(grid, ArrayRecord(list(model.get_weights().values())), num_rounds=fed.rounds,
                            timeout=240, train_config=ConfigRecord({"unused": 0}), evaluate_fn=central)
    _log(out, {"federated_evaluation": {str(r): dict(m) for r, m in result.evaluate_metrics_clientapp.items()}})
