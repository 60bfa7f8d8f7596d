"""tfplus on Flower (https://flower.ai): the ClientApp, the ServerApp and the simulation behind `tfplus federated`.

Needs the extra: pip install "tfplus[federated]". One Federation (the settings) drives both apps; in the
Simulation Engine it is passed in, in the Deployment Engine (`flwr run`) it comes from the app's run config
(tool.flwr.app.config in its pyproject.toml, keys as the CLI's flags: clients, rounds, local-steps, ...).

    fed = Federation(model="lenet", clients=8, rounds=5, local_steps=50, partition="dirichlet:0.5", out="fl")
    simulate(fed)          # fl/rounds.jsonl, fl/model.ckpt-*, TensorBoard events in fl/
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import math
import os
import re
import signal
import sys
import time
import zipfile
import zlib
from pathlib import Path
from typing import Any

import numpy as np

from tfplus import data as tfdata
from tfplus import summary, trainer
from tfplus.data import cifar10
from tfplus.federated import STRATEGIES
from tfplus.federated.model import FederatedModel, save_weights
from tfplus.federated.partition import parse_spec, partition
from tfplus.gfile import atomic_open, atomic_write
from tfplus.train.saver import newest_valid_checkpoint

try:
    from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict
    from flwr.clientapp import ClientApp
    from flwr.serverapp import Grid, ServerApp
    from flwr.serverapp import strategy as flwr_strategy
except ImportError as e:  # the extra is optional: say how to get it
    raise ImportError(f"tfplus.federated.flower needs Flower ({e}); install it with pip install "
                      "\"tfplus[federated]\"") from None

CLIENT_TIMEOUT = 600.0  # seconds one client's round may take, by default (Federation.timeout)
REPLY_POLL = 0.1  # seconds between the server's looks for the clients' replies (Flower's Deployment Engine: 3)
_SCALARS = ("test_accuracy", "test_loss", "train_loss", "train_accuracy", "round_s")  # TensorBoard, per round
# The clients' means (by examples, FedAvg's weights) in each round's row: seconds a client took to be ready to
# train (its model made or kept, its shard read, the weights set) and to train.
_TRAIN_METRICS = ("train_loss", "train_accuracy", "setup_s", "train_s")


@dataclasses.dataclass(frozen=True)
class Federation:
    """A federated run: the model and recipe every client trains, how CIFAR-10 is split, the server's strategy,
    and where the global model's checkpoints and the per-round log go (`out`)."""
    model: str = "lenet"
    clients: int = 2
    rounds: int = 3
    local_steps: int = 50
    local_epochs: int | None = None    # instead of local_steps: passes over its shard each client makes a round
    batch_size: int = 32
    lr: float | None = None
    optimizer: str = "momentum"
    partition: str = "iid"
    seed: int = 0
    strategy: str = "fedavg"
    proximal_mu: float = 0.01          # fedprox
    server_lr: float = 1.0             # fedavgm's server learning rate; x 0.1: fedadam's, fedadagrad's, fedyogi's eta
    fraction_train: float = 1.0
    min_train: int = 1                 # Flower's min_train_nodes: a round goes on with this many replies
    round_timeout: float | None = None  # seconds a round waits for replies; None: CLIENT_TIMEOUT per turn (timeout())
    device: str = "cpu"
    client_budget: int | None = None   # bytes: each client's training step is planned to fit
    client_cpus: int = 1
    client_gpus: float = 0.0
    cpus: int | None = None            # CPUs Ray may use (None: this machine's); cpus // client_cpus clients at once
    data: str | None = None            # the folder of cifar-10-batches-bin (or its parent); None: $TFPLUS_DATA, cache
    synthetic: bool = False            # tfplus's synthetic set (tests, demos): each client computes its shard of it
    test_examples: int | None = None   # central evaluation on the test set's first N images (None: all of it)
    measure_memory: bool = False       # clients trace their NumPy memory (tracemalloc) and measure a step's peak
    out: str | None = None
    resume: bool = False               # continue the run in `out` from its newest checkpoint that verifies
    shard_cache: str | None = None     # a folder where clients keep their shards between rounds (client_shard)

    def __post_init__(self) -> None:
        kind, arg = parse_spec(self.partition)
        if kind == "classes" and arg > len(tfdata.CLASSES):
            raise ValueError(f"partition {self.partition!r}: CIFAR-10 has {len(tfdata.CLASSES)} classes; give "
                             f"classes:1 .. classes:{len(tfdata.CLASSES)}")
        if self.strategy not in STRATEGIES:
            raise ValueError(f"strategy {self.strategy!r}: use one of {', '.join(STRATEGIES)}")
        from tfplus.graphs import get_model
        shape = get_model(self.model).image_shape
        if shape != cifar10.IMAGE_SHAPE:
            raise ValueError(f"model {self.model!r} takes {'x'.join(map(str, shape))} images but federated training "
                             f"reads CIFAR-10's {'x'.join(map(str, cifar10.IMAGE_SHAPE))}; pick a CIFAR model "
                             "(lenet, mentee, mobilenet, seqnet)")
        if min(self.clients, self.rounds, self.local_steps, self.batch_size, self.client_cpus, self.min_train,
               self.local_epochs or 1) < 1:
            raise ValueError("clients, rounds, local_steps, local_epochs, batch_size, client_cpus and min_train must "
                             "be >= 1")
        if self.cpus is not None and self.cpus < self.client_cpus:
            raise ValueError(f"cpus (--cpus) {self.cpus} is fewer than client_cpus (--client-cpus) "
                             f"{self.client_cpus}: no client could ever be placed; raise --cpus or lower --client-cpus")
        if self.test_examples is not None and self.test_examples < 1:
            raise ValueError(f"test_examples {self.test_examples}: give at least 1, or None for the whole test set")
        if self.resume and not self.out:
            raise ValueError("resume (--resume) continues the run saved in --out: give its --out")
        if self.min_train > self.clients:
            raise ValueError(f"min_train (--min-clients) {self.min_train} is more than clients {self.clients}: a "
                             "round could never start; lower it")

    @classmethod
    def from_run_config(cls, config: dict[str, Any]) -> Federation:
        """From a Flower run config ({"local-steps": 50, ...}; an empty string for None); an unknown key is a
        ValueError listing the known ones."""
        fields = {f.name: f for f in dataclasses.fields(cls)}
        kwargs = {}
        for key, value in config.items():
            name = key.replace("-", "_")
            if name not in fields:
                raise ValueError(f"run config key {key!r}: not a tfplus federated setting; known: "
                                 f"{', '.join(k.replace('_', '-') for k in fields)}")
            kwargs[name] = None if value == "" else value
        if isinstance(kwargs.get("client_budget"), str):  # "32MB", as --client-budget takes it
            from tfplus.units import parse_size
            kwargs["client_budget"] = parse_size(kwargs["client_budget"], "client-budget")
        return cls(**kwargs)

    def client_steps(self, examples: int) -> int:
        """The optimizer steps a client whose shard holds `examples` training examples takes in a round:
        local_steps, or local_epochs passes over the shard (its batches of batch_size, the last partial one
        dropped, as tfplus.data.train_batches cuts them; a shard smaller than a batch is one batch)."""
        if self.local_epochs is None:
            return self.local_steps
        return self.local_epochs * max(examples // max(min(self.batch_size, examples), 1), 1)

    def round_steps(self) -> int:
        """A round's steps in the learning-rate schedule and the checkpoints' step: local_steps, or with
        local_epochs those of a client holding an equal share of the training set (a skewed shard's client
        takes more or fewer, going on down the schedule or stopping short of the round's end)."""
        if self.local_epochs is None:
            return self.local_steps
        if self.synthetic:
            examples = trainer.SYNTHETIC_TRAIN
        else:
            examples = len(cifar10.read_labels(_batches_dir(self))[0])
        return self.client_steps(examples // self.clients)

    def timeout(self, concurrent: int | None = None) -> float:
        """Seconds a round waits for its clients' replies: round_timeout, else CLIENT_TIMEOUT for each turn of the
        clients a round samples when `concurrent` of them train at once (a simulation's worker processes, which
        take the clients one after another; None: all at once, each node on its own machine)."""
        if self.round_timeout is not None:
            return self.round_timeout
        sampled = max(self.min_train, math.ceil(self.clients * self.fraction_train))
        return CLIENT_TIMEOUT * math.ceil(sampled / max(min(concurrent or sampled, sampled), 1))

    def train_config(self) -> trainer.TrainConfig:
        return trainer.TrainConfig(model=self.model, batch_size=self.batch_size, lr=self.lr, optimizer=self.optimizer,
                                   seed=self.seed, synthetic=self.synthetic, device=self.device,
                                   memory_budget=self.client_budget, data=self.data)


# ---------------------------------------------------------------------------------------------------------
# Data: each process reads only what it uses

def _batches_dir(fed: Federation) -> Path:
    found = tfdata.find_data_dir(fed.data)
    if found is None:
        tfdata.load(fed.data)  # raises DataError naming the folder and the fixes
    return found


@functools.lru_cache(maxsize=1)
def _synthetic() -> tfdata.CifarDataset:
    """tfplus's synthetic set, drawn once per process: a simulation's worker takes many clients, and drawing the
    5,000 images again for each took most of a client's setup (and grew the worker by about 2.8 MiB a client)."""
    return tfdata.synthetic(trainer.SYNTHETIC_TRAIN, trainer.SYNTHETIC_TEST, seed=trainer.SYNTHETIC_SEED)


_SHARD_ARRAYS = ("train_images", "train_labels", "test_images", "test_labels")
_SHARD_CACHE_FORMAT = 1


def _shard_key(fed: Federation, client: int) -> str:
    """What decides a client's shard, hashed: the partition's settings and the data (tfplus's synthetic set's
    draw, or each CIFAR-10 file's path, size and modification time: a replaced file is a new key)."""
    what: list[Any] = [_SHARD_CACHE_FORMAT, fed.clients, fed.partition, fed.seed, client]
    if fed.synthetic:
        what += ["synthetic", trainer.SYNTHETIC_TRAIN, trainer.SYNTHETIC_TEST, trainer.SYNTHETIC_SEED]
    else:
        for path, _ in cifar10.binary_files(_batches_dir(fed)):
            st = path.stat()
            what += [str(path.resolve()), st.st_size, st.st_mtime_ns]
    return hashlib.sha256(json.dumps(what).encode()).hexdigest()[:32]


def _cached_shard(path: Path, key: str) -> tfdata.CifarDataset | None:
    """The shard kept at `path`, or None where there is none or it does not verify (its zip structure, an
    array's CRC-32, its key), which is then removed; read without pickles."""
    try:
        with np.load(path, allow_pickle=False) as f:
            if str(f["key"]) != key:
                raise ValueError(f"made for key {f['key']}, not {key}")
            return tfdata.CifarDataset(*(f[name] for name in _SHARD_ARRAYS))
    except FileNotFoundError:
        return None
    except (OSError, KeyError, ValueError, zipfile.BadZipFile, zlib.error, EOFError) as e:
        print(f"tfplus federated: note: the cached shard {path} does not verify ({e}); reading the data again",
              file=sys.stderr)
        path.unlink(missing_ok=True)
        return None


def client_shard(fed: Federation, client: int) -> tfdata.CifarDataset:
    """Client `client`'s training shard (and an equal slice of the test set, for client-side evaluation): its
    partition of the training labels, its images alone read from disk. With fed.shard_cache, the shard is kept
    there (an .npz written atomically, keyed by the partition and the data files' sizes and times, verified on
    load) for the next round's client: a Deployment Engine client is a fresh process each round, and reading
    the labels, partitioning and reading each record took most of its setup."""
    if not fed.shard_cache:
        return _read_shard(fed, client)
    key = _shard_key(fed, client)
    path = Path(fed.shard_cache) / f"shard-{key}.npz"
    shard = _cached_shard(path, key)
    if shard is None:
        shard = _read_shard(fed, client)
        path.parent.mkdir(parents=True, exist_ok=True)
        with atomic_open(str(path)) as f:
            np.savez(f, key=np.array(key), **{name: getattr(shard, name) for name in _SHARD_ARRAYS})
    return shard


def _read_shard(fed: Federation, client: int) -> tfdata.CifarDataset:
    if fed.synthetic:
        full = _synthetic()
        train_labels, test_labels = full.train_labels, full.test_labels
    else:
        folder = _batches_dir(fed)
        train_labels, test_labels = cifar10.read_labels(folder)
    mine = partition(train_labels, fed.clients, fed.partition, fed.seed)[client]
    test = np.array_split(np.arange(len(test_labels)), fed.clients)[client]
    if fed.synthetic:
        return tfdata.CifarDataset(full.train_images[mine], full.train_labels[mine], full.test_images[test],
                                   full.test_labels[test])
    return cifar10.read_shard(folder, mine, test)


def test_set(fed: Federation) -> tfdata.CifarDataset:
    """The test set (its first fed.test_examples images, if set) and no training examples: what the server's
    central evaluation reads."""
    if fed.synthetic:
        full = _synthetic()
        test = slice(fed.test_examples)
        return tfdata.CifarDataset(full.train_images[:0], full.train_labels[:0], full.test_images[test].copy(),
                                   full.test_labels[test].copy())  # not views of the process's one set
    folder = _batches_dir(fed)
    return cifar10.read_shard(folder, np.zeros(0, np.int64),
                              np.arange(len(cifar10.read_labels(folder)[1]))[:fed.test_examples])


# ---------------------------------------------------------------------------------------------------------
# The client

def check_opencl_gpu(device: str) -> None:
    """On an `opencl` device: refuses to run when the OpenCL device found is a CPU (PoCL), as happens when a
    client's GPU is hidden (Ray gives a client without GPUs CUDA_VISIBLE_DEVICES=""), instead of silently
    training on the CPU through OpenCL."""
    from tfplus.runtime import parse_device
    kind, selector = parse_device(device)
    if kind != "opencl":
        return
    from tfplus.runtime import opencl
    d = opencl.select(selector)
    if d.type & opencl.cl.device_type.CPU:
        hidden = os.environ.get("CUDA_VISIBLE_DEVICES")
        why = (f" (CUDA_VISIBLE_DEVICES={hidden!r} hides NVIDIA's OpenCL platform: give each client a GPU, "
               "--client-gpus 1 or a fraction)" if hidden is not None else "")
        raise RuntimeError(f"--device {device}: the only OpenCL device here is {d.name.strip()}, a CPU{why}; "
                           "use --device cpu to train on the CPU")


class _Cache:
    """A process's model and its last shard: a simulation runs many clients one after another in a few worker
    processes, which keep the graph and session (set_weights replaces the weights) and reread only shards."""
    model: FederatedModel | None = None
    fed: Federation | None = None
    shard: tuple[int, tfdata.CifarDataset] | None = None


def _client_model(fed: Federation, client: int, proximal: bool = False) -> tuple[FederatedModel,
                                                                              tfdata.CifarDataset]:
    """The process's model for `fed` (made anew for other settings, or for FedProx's term where the kept one was
    made without it) and client `client`'s shard."""
    c = _Cache
    proximal = proximal or fed.strategy == "fedprox"
    if c.fed != fed or (proximal and not c.model.proximal):
        check_opencl_gpu(fed.device)
        if c.model is not None:
            c.model.close()
        c.model, c.fed, c.shard = FederatedModel(fed.train_config(), fed.round_steps(), fed.rounds,
                                                 cpus=fed.client_cpus, proximal=proximal,
                                                 measure=fed.measure_memory), fed, None
    if c.shard is None or c.shard[0] != client:
        c.shard = (client, client_shard(fed, client))
    return c.model, c.shard[1]


def peak_rss() -> int | None:
    """This process's peak resident memory in bytes (None where the platform does not say)."""
    try:
        import resource
    except ImportError:  # Windows
        return None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024  # Linux counts KiB, macOS bytes


def _listed(record: ArrayRecord) -> bool:
    """Whether `record` was made from a list of arrays (ArrayRecord([...]): keys "0", "1", ..., as Flower's Keras
    and NumPy examples send a model's weights) rather than keyed by variable name."""
    return list(record.keys()) == [str(i) for i in range(len(record))]


def _weights(record: ArrayRecord) -> dict[str, np.ndarray] | list[np.ndarray]:
    """The arrays FederatedModel.set_weights takes: a list in the model's order for a listed record, else by name."""
    if _listed(record):
        return record.to_numpy_ndarrays()
    return {name: array.numpy() for name, array in record.items()}


def _record(weights: dict[str, np.ndarray], listed: bool = False) -> ArrayRecord:
    """The weights as an ArrayRecord keyed by variable name, or by position where `listed` (the keying the server
    sent: its strategy aggregates the replies' arrays key by key, and its own code reads them back its way)."""
    if listed:
        return ArrayRecord([np.ascontiguousarray(w) for w in weights.values()])
    return ArrayRecord(array_dict={name: Array(np.ascontiguousarray(w)) for name, w in weights.items()})


def client_app(fed: Federation | None = None, mods=None) -> ClientApp:
    """The ClientApp: on "train", loads the global weights, trains fed.client_steps() steps on its shard (at the
    train config's "lr" if the server sends one, else the schedule's; client
    = node_config's partition-id, of num-partitions; node_config's device, if given, overrides fed.device: a
    SuperNode's own GPU) and replies with its weights, {num-examples, train_loss, train_accuracy, setup_s,
    train_s} and {client, peak_bytes, measured_peak_bytes (0 unless fed.measure_memory), shard_bytes,
    rss_bytes}; on "evaluate", tests the weights on its slice of the test set. An error names the client.
    The weights come and go keyed as the server keyed them: by variable name, or by position (an ArrayRecord of
    a list, Flower's Keras idiom). A train config's "proximal-mu" (any FedProx strategy's) adds FedProx's term.
    `mods`: Flower's ClientApp mods (e.g. fixedclipping_mod for DifferentialPrivacyClientSideFixedClipping)."""
    app = ClientApp(mods=mods)

    def setup(msg: Message, context: Context) -> tuple[Federation, int, FederatedModel, tfdata.CifarDataset]:
        f = fed or Federation.from_run_config(dict(context.run_config))
        if "device" in context.node_config:  # a SuperNode's own device: --node-config "... device='opencl:1'"
            f = dataclasses.replace(f, device=str(context.node_config["device"]))
        client = int(context.node_config["partition-id"])
        if not 0 <= client < f.clients:
            raise ValueError(f"client {client}: node config partition-id={client} is outside 0..{f.clients - 1} "
                             f"(clients={f.clients}); number the SuperNodes' partitions from 0")
        if "num-partitions" in context.node_config and int(context.node_config["num-partitions"]) != f.clients:
            raise ValueError(f"client {client}: node config num-partitions={context.node_config['num-partitions']} "
                             f"but the run has clients={f.clients}; make them equal")
        model, shard = _client_model(f, client, "proximal-mu" in msg.content.get("config", {}))
        model.set_weights(_weights(msg.content["arrays"]))
        return f, client, model, shard

    @app.train()
    def train(msg: Message, context: Context) -> Message:
        client = context.node_config.get("partition-id")
        try:
            start = time.perf_counter()
            f, client, model, shard = setup(msg, context)
            ready = time.perf_counter()
            config = msg.content["config"]
            lr = float(config["lr"]) if "lr" in config else None  # a server's train_config={"lr": ...}
            out = model.train(shard, f.client_steps(len(shard.train_labels)), int(config["server-round"]),
                              float(config.get("proximal-mu", 0.0)), seed=f.seed * 1_000_003 + client * 1009
                              + int(config["server-round"]), measure=f.measure_memory, lr=lr)
        except Exception as e:
            raise RuntimeError(f"client {client}: {type(e).__name__}: {e}") from e
        metrics = {"num-examples": len(shard.train_labels), "train_loss": out["loss"],
                   "train_accuracy": out["accuracy"], "setup_s": ready - start,
                   "train_s": time.perf_counter() - ready}
        # Who replied and its memory, reported as they are, not averaged with the metrics: the plan's peak; the
        # measured step's, less the shard's arrays (NumPy data the process holds for the round, not the step);
        # the shard's; the process's resident peak.
        shard_bytes = sum(a.nbytes for a in (shard.train_images, shard.train_labels, shard.test_images,
                                               shard.test_labels))
        measured = out.get("measured_peak_bytes", shard_bytes) - shard_bytes
        about = {"client": client, "peak_bytes": model.peak_bytes() or 0, "measured_peak_bytes": int(measured),
                 "shard_bytes": shard_bytes, "rss_bytes": peak_rss() or 0}
        listed = _listed(msg.content["arrays"])
        return Message(RecordDict({"arrays": _record(model.get_weights(), listed), "metrics": MetricRecord(metrics),
                                   "client": ConfigRecord(about)}), reply_to=msg)

    @app.evaluate()
    def evaluate(msg: Message, context: Context) -> Message:
        client = context.node_config.get("partition-id")
        try:
            _, client, model, shard = setup(msg, context)
            accuracy, loss = model.evaluate(shard)
        except Exception as e:
            raise RuntimeError(f"client {client}: {type(e).__name__}: {e}") from e
        return Message(RecordDict({"metrics": MetricRecord({"num-examples": len(shard.test_labels),
                                                            "eval_loss": loss, "eval_accuracy": accuracy})}),
                       reply_to=msg)

    return app


# ---------------------------------------------------------------------------------------------------------
# The server

class _Reporting:
    """Mixed into a Flower strategy: remembers which nodes each training round sent to, which replied, which
    failed (Flower's error reason names the client) and which timed out, and each replying client's memory, for
    the round's log row."""
    sent: set[int] = set()
    failed: list[dict[str, Any]] = []
    clients: list[int] = []
    timed_out: list[int] = []
    memory: list[dict[str, int]] = []
    train_metrics: MetricRecord | None = None
    statistics: tuple[str, ...] = ()  # the arrays averaged as they are (_average_statistics)

    round_offset = 0  # the rounds a resumed run had done: the clients' schedules and seeds go on from there
    node_wait: float | None = None  # seconds a round waits for its nodes to connect (None: Flower's way, for ever)
    nodes = 1  # the nodes a run's first round waits for: the federation's clients

    def configure_train(self, server_round, arrays, config, grid):
        if self.node_wait is not None:
            _wait_for_nodes(grid, self.nodes if server_round == 1 else self.min_available_nodes,
                            self.min_available_nodes, self.node_wait, server_round + self.round_offset)
        messages = list(super().configure_train(server_round + self.round_offset, arrays, config, grid))
        self.sent = {m.metadata.dst_node_id for m in messages}
        return messages

    def aggregate_train(self, server_round, replies):
        replies = list(replies)
        self.failed = sorted(({"node": m.metadata.src_node_id, "reason": _reason(m.error.reason)} for m in replies
                              if m.has_error()), key=lambda f: f["node"])
        ok = [m for m in replies if not m.has_error()]
        self.clients = sorted(int(m.content["client"]["client"]) for m in ok)
        # Each client's memory, the sizes it reported (a 0 is one it did not measure).
        self.memory = sorted(({k: int(v) for k, v in m.content["client"].items() if k == "client" or v}
                              for m in ok), key=lambda c: c["client"])
        self.timed_out = sorted(self.sent - {m.metadata.src_node_id for m in replies})
        arrays, self.train_metrics = super().aggregate_train(server_round, replies)
        if arrays is not None and self.statistics:
            _average_statistics(arrays, ok, self.statistics)
        return arrays, self.train_metrics


def _wait_for_nodes(grid: Grid, wanted: int, needed: int, seconds: float, server_round: int) -> None:
    """Returns once `wanted` nodes are connected, or after `seconds` if `needed` are; else raises TooFewReplies.
    A run's first round wants all its clients: in the Deployment Engine the SuperNodes connect while the server
    starts, and Flower samples those connected, so a round 1 that began before one connected left it out (the
    benchmark set --min-clients to every client to wait for them). NOTE: Flower's strategies wait for
    min_available_nodes without end (strategy_utils.sample_nodes): a Deployment Engine run with fewer SuperNodes
    than --min-clients hung, logging "Waiting for nodes to connect" every second."""
    deadline = time.monotonic() + seconds
    while len(connected := list(grid.get_node_ids())) < wanted:
        if time.monotonic() >= deadline:
            if len(connected) >= needed:
                print(f"tfplus federated: note: round {server_round}: {len(connected)} of {wanted} clients' nodes "
                      f"connected after {seconds:g} s; going on with them", file=sys.stderr)
                return
            raise TooFewReplies(server_round, needed, [], [], [], f"{len(connected)} SuperNode(s) connected after "
                                f"{seconds:g} s (--round-timeout); start more or lower --min-clients")
        time.sleep(REPLY_POLL)


def _reason(text: str) -> str:
    """A failed reply's error as one line: from the last "client N: " on (the ClientApp's error names its client),
    else its last line. NOTE: Flower's Simulation Engine wraps it in Ray's traceback, some 4 kB a client a round."""
    found = list(re.finditer(r"client -?\d+: ", text))
    if found:
        return text[found[-1].start():].strip().removesuffix("'>").splitlines()[0]
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else text


def _average_statistics(arrays: ArrayRecord, replies: list, names) -> None:
    """Sets `arrays`' batch norm statistics to the clients' mean, weighted by their examples (FedAvg's): what the
    global model's evaluation needs from them. A server optimizer (FedAdam, FedYogi, FedAdagrad, FedAvgM) steps
    every array by its normalized or accumulated change, which would move a moving variance by about eta each
    round whatever the data say, and can make it negative."""
    weights = np.array([float(m.content["metrics"]["num-examples"]) for m in replies])
    if not len(weights) or weights.sum() <= 0:
        return
    for name in names:
        mean = sum(w * m.content["arrays"][name].numpy().astype(np.float64) for w, m in zip(weights, replies))
        arrays[name] = Array(np.ascontiguousarray((mean / weights.sum()).astype(np.float32)))


def make_strategy(fed: Federation, statistics=()):
    """The Flower strategy fed.strategy names, central evaluation only (clients evaluate when asked by a
    strategy with fraction_evaluate > 0), reporting failed and timed-out clients (_Reporting). The arrays named in
    `statistics` (FederatedModel.statistics: batch norm's moving averages) are averaged by examples whatever the
    strategy; the others are the strategy's."""
    base = {"fedavg": flwr_strategy.FedAvg, "fedprox": flwr_strategy.FedProx, "fedadam": flwr_strategy.FedAdam,
            "fedavgm": flwr_strategy.FedAvgM, "fedadagrad": flwr_strategy.FedAdagrad,
            "fedyogi": flwr_strategy.FedYogi}[fed.strategy]
    eta = {"eta": fed.server_lr * 0.1}
    extra = {"fedprox": {"proximal_mu": fed.proximal_mu}, "fedadam": eta, "fedadagrad": eta, "fedyogi": eta,
             "fedavgm": {"server_learning_rate": fed.server_lr, "server_momentum": 0.9}}.get(fed.strategy, {})
    cls = type(f"Reporting{base.__name__}", (_Reporting, base), {"statistics": tuple(statistics)})
    return cls(fraction_train=fed.fraction_train, fraction_evaluate=0.0, min_train_nodes=fed.min_train,
               min_available_nodes=fed.min_train, **extra)


class TooFewReplies(RuntimeError):
    """A round got fewer replies than min_train (--min-clients): the run stops after saving its row, instead of
    going on with the weights unchanged round after round (what Flower's strategies do with no replies); or fewer
    nodes connected than it needs (`note` says so)."""

    def __init__(self, server_round: int, min_train: int, clients: list[int], failed: list[dict[str, Any]],
                 timed_out: list[int], note: str | None = None):
        why = [note] if note else []
        why += [f["reason"] for f in failed[:3]] + [f"{len(failed) - 3} more failed"] * (len(failed) > 3)
        why += [f"{len(timed_out)} timed out (nodes {', '.join(map(str, timed_out[:5]))})"] * bool(timed_out)
        super().__init__(f"round {server_round}: {len(clients)} client(s) replied, fewer than --min-clients "
                         f"{min_train}, so the run stops: {'; '.join(why) or 'no client was sampled'}")


class Stopped(Exception):
    """A simulation stopped by SIGINT, SIGTERM or SIGHUP (its `signum`), after the round that was running when it
    came (`server_round`), whose checkpoint and rounds.jsonl row are saved (`checkpoint`, None without an out)."""

    def __init__(self, signum: int, server_round: int | None, rounds: int, checkpoint: str | None):
        self.signum, self.server_round, self.checkpoint = signum, server_round, checkpoint
        if server_round is None:  # while Ray started
            super().__init__(f"{signal.Signals(signum).name}: stopped while Ray started, before this run's first "
                             "round; nothing new was saved")
            return
        super().__init__(f"{signal.Signals(signum).name}: stopped after round {server_round} of {rounds}; " +
                         (f"saved {checkpoint}; continue with the same options and --resume" if checkpoint
                          else "nothing saved (no --out)"))


class StopSignals:
    """While entered (in the main thread): SIGINT, SIGTERM and SIGHUP are noted in `signum`, for run_server to stop
    after the running round's save (raising Stopped), instead of ending the process halfway (Ray's own SIGTERM
    handler aborted it with a stack dump). An ignored signal stays ignored (nohup's SIGHUP); a second SIGINT
    interrupts at once."""

    def __init__(self):
        self.signum: int | None = None
        self._old: dict[int, Any] = {}

    def _handle(self, signum, frame) -> None:
        if self.signum is not None and signum == signal.SIGINT:
            raise KeyboardInterrupt
        self.signum = self.signum or signum

    def __enter__(self) -> StopSignals:
        for s in trainer.EXIT_ON_SIGNAL:
            if signal.getsignal(s) != signal.SIG_IGN:
                self._old[s] = signal.signal(s, self._handle)
        return self

    def install_again(self) -> None:
        """Takes the signals back from a library that set its own handlers meanwhile (ray.init's SIGTERM)."""
        for s in self._old:
            signal.signal(s, self._handle)

    def __exit__(self, *exc) -> None:
        for s, handler in self._old.items():
            signal.signal(s, signal.SIG_DFL if handler is None else handler)  # None: a handler installed in C


# What a resumed run may set anew: where and how fast it runs, not what it computes.
_RESUME_FREE = ("out", "resume", "cpus", "client_cpus", "client_gpus", "round_timeout", "measure_memory",
                "test_examples", "min_train", "shard_cache")
# Strategies whose server optimizer keeps state across rounds that the checkpoints do not hold.
_STATEFUL = ("fedadam", "fedyogi", "fedadagrad", "fedavgm")


def _settings(fed: Federation) -> dict[str, Any]:
    """The settings a resumed run must share with the run it continues (saved in each checkpoint)."""
    return {k: v for k, v in dataclasses.asdict(fed).items() if k not in _RESUME_FREE}


def _resume(fed: Federation, model: FederatedModel) -> tuple[int, list[dict[str, Any]]]:
    """Restores `model` from fed.out's newest checkpoint that verifies; returns its round and history. Refuses
    (UsageError) a run whose settings differ: they change the weights, and a resumed run gives those of the run
    never stopped."""
    if fed.strategy in _STATEFUL:
        raise trainer.UsageError(f"--resume: {fed.strategy}'s server optimizer state is not saved in the checkpoints, "
                                 "so a resumed run would differ from one never stopped; use fedavg or fedprox to "
                                 "resume")
    reader, skipped = newest_valid_checkpoint(fed.out)
    for path, why in skipped:
        print(f"tfplus federated simulate: note: skipped {path}: {why}", file=sys.stderr)
    if reader is None:
        raise trainer.UsageError(f"--resume: no checkpoint in {fed.out} verifies; start without --resume")
    with reader:
        meta = reader.metadata()
        saved = meta.get("federation")
        if saved is None:
            raise trainer.UsageError(f"--resume: {reader.path} is not a federated run's checkpoint")
        differ = {k: (saved.get(k), v) for k, v in _settings(fed).items() if saved.get(k) != v}
        if differ:
            raise trainer.UsageError(f"--resume: {reader.path} was saved by a run with other settings: " + ", ".join(
                f"{k} {old!r} (now {new!r})" for k, (old, new) in sorted(differ.items())) + "; give the same ones")
        model.saver.restore(model.sess, reader)
    return meta["step"] // model.steps_per_round, meta.get("history", [])


def _keep_rows(path: str, last_round: int) -> None:
    """rounds.jsonl without the rows after `last_round` (written after a checkpoint that no longer verifies) and a
    row left half-written; rewritten atomically."""
    if not os.path.exists(path):
        return
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    kept = []
    for line in lines:
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        if row.get("round", 0) <= last_round:
            kept.append(line + "\n")
    atomic_write(path, "".join(kept).encode())


class _QuickReplies(Grid):
    """A Grid that looks for the clients' replies every REPLY_POLL s. NOTE: Flower 1.42's Deployment Engine grid
    (flwr.superlink.grid.http_grid) sleeps a fixed 3 s between looks in send_and_receive, so a round's replies
    waited 1.5 s on average after the last came (its simulation grid looks every 0.1 s)."""

    def __init__(self, grid: Grid):
        self.grid = grid

    def send_and_receive(self, messages, *, timeout=None):
        waiting = set(self.grid.push_messages(messages))
        end = None if timeout is None else time.monotonic() + timeout
        replies: list[Message] = []
        while waiting:
            got = list(self.grid.pull_messages(waiting))
            replies += got
            waiting -= {m.metadata.reply_to_message_id for m in got}
            if not waiting or (end is not None and time.monotonic() >= end):
                break
            time.sleep(REPLY_POLL)
        return replies

    # The rest is the grid's own.
    def set_run(self, run):
        self.grid.set_run(run)

    @property
    def run(self):
        return self.grid.run

    def create_message(self, *args, **kwargs):
        return self.grid.create_message(*args, **kwargs)

    def get_node_ids(self):
        return self.grid.get_node_ids()

    def get_nodes(self):
        return self.grid.get_nodes()

    def push_messages(self, messages):
        return self.grid.push_messages(messages)

    def pull_messages(self, message_ids):
        return self.grid.pull_messages(message_ids)


def _quick(grid: Grid) -> Grid:
    """The Deployment Engine's grid as _QuickReplies; another (the simulation's, a test's) as it is."""
    from flwr.superlink.grid.http_grid import HttpGrid
    return _QuickReplies(grid) if isinstance(grid, HttpGrid) else grid


def run_server(fed: Federation, grid: Grid, log=None, concurrent: int | None = None,
               stop: StopSignals | None = None):
    """Runs fed.rounds rounds of the strategy on `grid`. After each round (and before the first): the global model
    is evaluated on the test set, saved as a checkpoint in fed.out (tfplus eval reads it), and a row
    {round, test_accuracy, test_loss, train_loss, setup_s and train_s (the clients' means), eval_s (the central
    evaluation's seconds, the global weights set and the test set run), save_s (the checkpoint's), clients, failed,
    timed_out, round_s, peak_bytes, measured_peak_bytes, rss_bytes (the most of any client), client_memory (each
    client's), checkpoint} goes to fed.out/rounds.jsonl and, as scalars federated/*, to TensorBoard event files in
    fed.out. A round waits fed.timeout(concurrent) seconds for replies. The initial global weights also go to
    fed.out/initial_weights.npz (model.save_weights), for a peer that must start from them. Returns Flower's
    Result; raises Stopped after the round during which `stop` noted a signal. With fed.resume, the run in fed.out
    goes on from its newest checkpoint that verifies (_resume)."""
    # The server's model is not a client's: no client budget (a budget that fits a client's training step need not
    # fit the server's steps, e.g. get_weights' copy of every weight beside them: MobileNet at 32 MB).
    model = FederatedModel(dataclasses.replace(fed.train_config(), memory_budget=None), fed.round_steps(),
                           fed.rounds)
    test = test_set(fed)
    strategy = make_strategy(fed, model.statistics)
    strategy.node_wait, strategy.nodes = fed.timeout(concurrent), fed.clients
    history: list[dict[str, Any]] = []
    out, start = fed.out, 0
    jsonl = events = None
    if fed.resume:
        start, history = _resume(fed, model)
        _keep_rows(os.path.join(out, "rounds.jsonl"), start)
        strategy.round_offset = start
        print(f"tfplus federated simulate: resumed at round {start} of {fed.rounds}", file=sys.stderr)
    if out:
        os.makedirs(out, exist_ok=True)
        if not fed.resume:
            save_weights(os.path.join(out, "initial_weights.npz"), model.get_weights())
        jsonl = trainer.JsonLog(os.path.join(out, "rounds.jsonl"))
        events = summary.FileWriter(out)
    clock = [time.perf_counter()]
    data_dir = None if fed.synthetic else str(_batches_dir(fed).resolve())

    def evaluate(server_round: int, arrays: ArrayRecord) -> MetricRecord:
        resumed, server_round = start and not server_round, server_round + start  # Flower counts from 0 again
        began = time.perf_counter()
        model.set_weights(_weights(arrays))
        accuracy, loss = model.evaluate(test)
        if resumed:  # the restored checkpoint's round: saved and logged already
            return MetricRecord({"test_accuracy": accuracy, "test_loss": loss})
        now = time.perf_counter()
        row: dict[str, Any] = {"kind": "round", "round": server_round, "step": server_round * model.steps_per_round,
                               "test_accuracy": accuracy, "test_loss": loss, "round_s": now - clock[0],
                               "eval_s": now - began}
        clock[0] = now
        if server_round > 0:
            row.update(clients=strategy.clients, failed=strategy.failed, timed_out=strategy.timed_out)
            for key in ("peak_bytes", "measured_peak_bytes", "rss_bytes"):  # the most any client reported
                row[key] = max((c.get(key, 0) for c in strategy.memory), default=0) or None
            row["client_memory"] = strategy.memory
            if strategy.train_metrics is not None:
                row.update({k: strategy.train_metrics[k] for k in _TRAIN_METRICS if k in strategy.train_metrics})
        history.append({"epoch": server_round or 1, "test_accuracy": accuracy})
        if out:
            saving = time.perf_counter()
            row["checkpoint"] = model.save(out, server_round, data_dir, history, _settings(fed))
            row["save_s"] = time.perf_counter() - saving
            jsonl.write(row)
            events.add_summary(summary.Summary(value=[summary.Summary.Value(tag=f"federated/{k}",
                                                                            simple_value=float(row[k]))
                                                      for k in _SCALARS if k in row]), server_round)
            events.flush()
        if log is not None:
            log(row)
        if server_round > 0 and len(strategy.clients) < fed.min_train:
            raise TooFewReplies(server_round, fed.min_train, strategy.clients, strategy.failed, strategy.timed_out)
        if stop is not None and stop.signum is not None and server_round < fed.rounds:
            raise Stopped(stop.signum, server_round, fed.rounds, row.get("checkpoint"))
        return MetricRecord({"test_accuracy": accuracy, "test_loss": loss})

    try:
        return strategy.start(_quick(grid), _record(model.get_weights()), num_rounds=fed.rounds - start,
                              timeout=fed.timeout(concurrent), evaluate_fn=evaluate)
    finally:
        if out:
            jsonl.close()
            events.close()
        model.close()


def server_app(fed: Federation | None = None, log=None, concurrent: int | None = None,
               stop: StopSignals | None = None) -> ServerApp:
    """The ServerApp: run_server with `fed`, or the Federation of the run config (Deployment Engine);
    `concurrent` and `stop`: run_server's."""
    app = ServerApp()

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        run_server(fed or Federation.from_run_config(dict(context.run_config)), grid, log, concurrent, stop)

    return app


def _hide_tensorflow() -> None:
    """Makes `import tensorflow` fail in this process: a Ray worker's setup hook. Flower's Ray actor module imports
    TensorFlow wherever it is installed (for a GPU option tfplus does not use), which costs each worker process
    about 475 MB and 5 s of start-up; a tfplus client needs none of it."""
    sys.modules.setdefault("tensorflow", None)


def _run_simulation():
    """Flower's run_simulation, its modules loaded without TensorFlow (as in the workers: _hide_tensorflow), which
    stays importable afterwards."""
    hidden = "tensorflow" not in sys.modules
    if hidden:
        sys.modules["tensorflow"] = None
    try:
        import flwr.simulation.ray_transport.utils  # noqa: F401  the module that imports TensorFlow if it can
        from flwr.simulation import run_simulation
    finally:
        if hidden:
            del sys.modules["tensorflow"]
    return run_simulation


def _start_ray(fed: Federation) -> int:
    """Starts Ray with fed.cpus CPUs (None: this machine's) and workers that do not load TensorFlow, unless Ray
    is running already (then Flower uses it as it is); returns how many clients can train at once."""
    import logging

    import ray
    if not ray.is_initialized():  # Flower starts Ray only where it is not running: first, with the setup hook
        path = os.pathsep.join([*sys.path, *filter(None, [os.environ.get("PYTHONPATH")])])  # the apps' modules
        # NOTE: Ray's processes (its GCS server, raylet, workers) are of this process's group, and a closed
        # terminal's SIGHUP to the group ended them by its default action: the round in flight then failed after
        # Ray's 60 s wait for its GCS, with status 1, not after the round's save. They start with SIGHUP blocked (a
        # mask outlives exec), as Ray blocks SIGINT there; this process gets one sent meanwhile once it unblocks it.
        # Not SIGTERM: Ray's shutdown stops its processes by SIGTERM, and with it blocked waits 1 s for each before
        # killing it (4 s more a run); kill -TERM -PGID ends them still.
        hangup = getattr(signal, "SIGHUP", None)
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {hangup}) if hangup is not None else None
        try:
            ray.init(num_cpus=fed.cpus, include_dashboard=False, logging_level=logging.WARNING,
                     runtime_env={"env_vars": {"PYTHONPATH": path}, "worker_process_setup_hook": _hide_tensorflow})
        finally:
            if blocked is not None:
                signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
    have = ray.cluster_resources()
    concurrent = int(have.get("CPU", 0) // fed.client_cpus)
    if fed.client_gpus:
        concurrent = min(concurrent, int(have.get("GPU", 0) // fed.client_gpus))
    return max(concurrent, 1)


def simulate(fed: Federation, log=None) -> None:
    """fed.clients clients in Flower's Simulation Engine (Ray) on this machine, each given fed.client_cpus CPUs
    and fed.client_gpus GPUs, Ray fed.cpus CPUs in all (a worker process for each client that trains at once,
    taking the round's clients in turns); the rows go to fed.out and `log`. SIGINT, SIGTERM or SIGHUP stops it
    after the running round's save: Stopped (see StopSignals)."""
    run_simulation = _run_simulation()
    backend = {"client_resources": {"num_cpus": fed.client_cpus, "num_gpus": fed.client_gpus}}
    with StopSignals() as stop:
        try:
            concurrent = _start_ray(fed)
        except SystemExit as e:  # NOTE: ray.init's own SIGTERM handler, set as it starts, is sys.exit(15): that
            if e.code != signal.SIGTERM:  # ended the process silently, with status 15
                raise
            stop.signum = stop.signum or signal.SIGTERM
        stop.install_again()  # Ray's start replaced the SIGTERM handler
        if stop.signum is not None:
            raise Stopped(stop.signum, None, fed.rounds, None)
        run_simulation(server_app(fed, log, concurrent, stop), client_app(fed), num_supernodes=fed.clients,
                       backend_config=backend)


# The Deployment Engine's entry points (a Flower app's pyproject.toml names them, README.md "Federated training"):
# every setting comes from the run config.
clientapp = client_app()
serverapp = server_app()
