"""The PyTorch peer of `tfplus federated simulate`: Mentee (benchmarks/torch_reference.py's mirror) as a Flower
ClientApp, FedAvg on a ServerApp, in Flower's Simulation Engine, with tfplus's recipe for a federated client.

    pip install torch==2.13.0 "flwr[simulation]"
    python benchmarks/torch_federated.py --data DIR --clients 10 --rounds 20 --local-steps 50 --partition iid \\
        [--init OUT/initial_weights.npz]

What it mirrors (tfplus.federated): the clients' shards (tfplus.federated.partition, the same function, so the same
examples), each round's batches (the same NumPy generators keyed by the client's seed seed*1000003 + client*1009 +
round, as tfplus.data.train_batches), pad-4 crop + flip and per-channel normalization, SGD with Nesterov momentum
0.9 and weight decay 5e-4 on the weights, the optimizer's state reset every round, the learning rate warmed up over
round 1's steps and cosine-decayed over all rounds' steps (round r trains global steps (r-1)*local_steps onwards),
FedAvg weighted by the clients' example counts, central evaluation of the global model on the whole test set after
each round (or its first --test-examples images). One thread per client, as a tfplus client given one CPU.
The initial global model: with --init, the very weights tfplus's server started from (the initial_weights.npz it
writes into its --out, keyed by variable name: tfplus.federated.model.pytorch_layout puts them in this layout),
so that both runs differ only by the frameworks' arithmetic; without it, PyTorch's own draws for --seed.
Prints one JSON row per round: {"round", "test_accuracy", "round_s"} (round 0: the initial model).
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np
import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))  # Ray's workers import this module by name
from torch_reference import Mentee, augment, evaluate, normalize, read_cifar  # noqa: E402

from tfplus.federated.model import load_weights, pytorch_layout  # noqa: E402
from tfplus.federated.partition import partition  # noqa: E402  the very shards tfplus's clients get

MOMENTUM, WEIGHT_DECAY = 0.9, 5e-4


class Recipe:
    """The run's settings (every client and the server use the same)."""

    def __init__(self, data: str, clients: int, rounds: int, local_steps: int, batch_size: int, lr: float,
                 partition: str, seed: int, init: str | None = None, test_examples: int | None = None):
        self.data, self.clients, self.rounds, self.local_steps = data, clients, rounds, local_steps
        self.batch_size, self.lr, self.partition, self.seed = batch_size, lr, partition, seed
        self.init, self.test_examples = init, test_examples


def load_tfplus(model: Mentee, path: str) -> None:
    """Sets `model` to tfplus's weights in `path` (save_weights' .npz), as set_tfplus_weights."""
    set_tfplus_weights(model, load_weights(path), path)


def set_tfplus_weights(model: Mentee, weights: dict[str, np.ndarray], source: str = "tfplus's weights") -> None:
    """Sets `model` to tfplus's `weights` ({variable name: array}, FederatedModel.get_weights()'s): tfplus's
    variables (conv1/weights, conv1/biases, ..., fc3/biases) in order are the mirror's parameters in order, each
    in PyTorch's layout."""
    weights = pytorch_layout(weights)
    params = model.state_dict()
    if len(weights) != len(params):
        raise ValueError(f"{source}: {len(weights)} arrays for the mirror's {len(params)} parameters; export the "
                         "Mentee of the default widths")
    state = {}
    for (name, w), (key, p) in zip(weights.items(), params.items()):
        kind = {"weights": "weight", "biases": "bias"}.get(name.rsplit("/", 1)[-1])
        if kind != key.rsplit(".", 1)[-1] or tuple(p.shape) != w.shape:
            raise ValueError(f"{source}: tfplus's {name} {w.shape} does not fit the mirror's {key} "
                             f"{tuple(p.shape)}")
        state[key] = torch.from_numpy(np.ascontiguousarray(w))
    model.load_state_dict(state)


def learning_rate(r: Recipe, step: int) -> float:
    """tfplus.graphs.mentee.learning_rate_schedule('cosine') with a warm-up of one round's steps."""
    warmup, total = r.local_steps, r.local_steps * r.rounds
    decay = max(total - warmup, 1)
    cosine = 0.5 * (1 + math.cos(math.pi * min(max(step - warmup, 0), decay) / decay))
    return r.lr * cosine * min(1.0, (step + 1) / warmup)


_data: dict = {}  # a Ray worker's CIFAR-10, read once (it runs many clients, one after another)


def cifar(r: Recipe) -> tuple:
    if r.data not in _data:
        _data.clear()
        _data[r.data] = read_cifar(Path(r.data))
    return _data[r.data]


def batches(images: np.ndarray, labels: np.ndarray, batch_size: int, seed: int):
    """Endless (x, y) batches of epochs of `images`, as tfplus.data.train_batches draws them."""
    steps, epoch = len(labels) // batch_size, 0
    while True:
        order = np.random.default_rng((seed, 0, epoch, 0)).permutation(len(labels))
        for i in range(steps):
            take = order[i * batch_size:(i + 1) * batch_size]
            x = augment(images[take], np.random.default_rng((seed, 1, epoch, i)))
            yield torch.from_numpy(normalize(x)), torch.from_numpy(labels[take])
        epoch += 1


def train(r: Recipe, model: nn.Module, client: int, server_round: int) -> tuple[int, float]:
    """r.local_steps steps on the client's shard from a fresh optimizer; (examples in the shard, mean loss)."""
    train_x, train_y, _, _ = cifar(r)
    mine = partition(train_y, r.clients, r.partition, r.seed)[client]
    x, y = train_x[mine], train_y[mine]
    decayed = [m.weight for m in model.modules() if isinstance(m, (nn.Conv2d, nn.Linear))]
    others = [p for p in model.parameters() if all(p is not w for w in decayed)]
    opt = torch.optim.SGD([{"params": decayed, "weight_decay": WEIGHT_DECAY}, {"params": others}], lr=r.lr,
                          momentum=MOMENTUM, nesterov=True)
    seed = r.seed * 1_000_003 + client * 1009 + server_round
    losses = []
    model.train()
    for i, (bx, by) in zip(range(r.local_steps), batches(x, y, min(r.batch_size, len(y)), seed)):
        for group in opt.param_groups:
            group["lr"] = learning_rate(r, (server_round - 1) * r.local_steps + i)
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(bx), by)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return len(y), float(np.mean(losses))


def client_app(r: Recipe):
    from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict
    from flwr.clientapp import ClientApp
    app = ClientApp()

    @app.train()
    def fit(msg: Message, context: Context) -> Message:
        torch.set_num_threads(1)
        client = int(context.node_config["partition-id"])
        model = Mentee()
        model.load_state_dict(msg.content["arrays"].to_torch_state_dict())
        n, loss = train(r, model, client, int(msg.content["config"]["server-round"]))
        return Message(RecordDict({"arrays": ArrayRecord(model.state_dict()),
                                   "metrics": MetricRecord({"num-examples": n, "train_loss": loss}),
                                   "client": ConfigRecord({"client": client})}), reply_to=msg)

    return app


def server_app(r: Recipe, log):
    from flwr.app import ArrayRecord, Context, MetricRecord
    from flwr.serverapp import Grid, ServerApp
    from flwr.serverapp.strategy import FedAvg
    app = ServerApp()

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        torch.manual_seed(r.seed)
        model = Mentee()
        if r.init:
            load_tfplus(model, r.init)
        _, _, test_x, test_y = cifar(r)
        test_x, test_y = test_x[:r.test_examples], test_y[:r.test_examples]
        clock = [time.perf_counter()]

        def central(server_round: int, arrays: ArrayRecord) -> MetricRecord:
            model.load_state_dict(arrays.to_torch_state_dict())
            accuracy = evaluate(model, test_x, test_y, torch.device("cpu"))
            now = time.perf_counter()
            log({"round": server_round, "test_accuracy": accuracy, "round_s": now - clock[0]})
            clock[0] = now
            return MetricRecord({"test_accuracy": accuracy})

        strategy = FedAvg(fraction_train=1.0, fraction_evaluate=0.0, min_train_nodes=1, min_available_nodes=1)
        strategy.start(grid, ArrayRecord(model.state_dict()), num_rounds=r.rounds, evaluate_fn=central)

    return app


def simulate(r: Recipe, log) -> None:
    """r.clients PyTorch clients of one CPU each in Flower's Simulation Engine; a row per round to `log`."""
    from flwr.simulation import run_simulation
    run_simulation(server_app(r, log), client_app(r), num_supernodes=r.clients,
                   backend_config={"client_resources": {"num_cpus": 1, "num_gpus": 0.0}})


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--data", required=True, help="the folder of cifar-10-batches-bin/ (or that folder)")
    p.add_argument("--clients", type=int, default=10)
    p.add_argument("--rounds", type=int, default=20)
    p.add_argument("--local-steps", type=int, default=50)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--partition", default="iid")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--init", help="tfplus's initial weights (the initial_weights.npz of its --out)")
    p.add_argument("--test-examples", type=int, help="evaluate on the test set's first N images (default all)")
    args = p.parse_args()
    simulate(Recipe(args.data, args.clients, args.rounds, args.local_steps, args.batch_size, args.lr,
                    args.partition, args.seed, args.init, args.test_examples),
             lambda row: print(json.dumps(row), flush=True))


if __name__ == "__main__":
    main()
