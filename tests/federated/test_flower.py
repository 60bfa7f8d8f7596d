"""tfplus.federated.flower: the Flower apps run in this process (a Grid that calls the ClientApp directly: Flower's
server and client logic without a Ray cluster, which takes longer to start on CI's 2 cores than these tests take to
run), the CLI's refusals, and tfplus and Flower in one environment."""
import functools
import json
import os
import subprocess
import sys
import time
import tracemalloc
from types import SimpleNamespace

import numpy as np
import pytest

from tfplus import data as tfdata
from tfplus import trainer
from tfplus.data import cifar10
from tfplus.federated import FederatedModel
from tfplus.federated.model import load_weights

flwr = pytest.importorskip("flwr", reason="Flower is not installed: pip install \"tfplus[federated]\"")
from flowergrid import InProcessGrid  # noqa: E402
from flwr.app import Message, RecordDict  # noqa: E402

from tfplus.federated import flower  # noqa: E402

N_TRAIN, N_TEST = 200, 40  # a small synthetic CIFAR-10 in the binary format: 5 files of 40, a test file of 40


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    return cifar10.write_binary_batches(tmp_path_factory.mktemp("data"), tfdata.synthetic(N_TRAIN, N_TEST, seed=3))


@pytest.fixture(autouse=True)
def task_identity(monkeypatch):
    """Flower's messages take the run's id from the process's task identity, which its runtimes set."""
    from flwr.supercore.task_identity import TaskIdentity
    monkeypatch.setattr(TaskIdentity, "_run_id", 1)
    monkeypatch.setattr(TaskIdentity, "_node_id", 1)
    monkeypatch.setattr(TaskIdentity, "_task_id", 1)


def _federation(data_dir, out, **kw):
    return flower.Federation(**{"model": "lenet", "clients": 2, "rounds": 2, "local_steps": 8, "batch_size": 16,
                                "data": str(data_dir.parent), "out": str(out), "lr": 0.02, **kw})


def _rows(out):
    return [json.loads(line) for line in (out / "rounds.jsonl").read_text().splitlines()]


def test_two_clients_two_rounds_learn_and_the_checkpoint_restores(data_dir, tmp_path, monkeypatch):
    fed = _federation(data_dir, tmp_path / "fl")
    start = time.perf_counter()
    flower.run_server(fed, InProcessGrid(flower.client_app(fed), 2))
    rows = _rows(tmp_path / "fl")
    assert [r["round"] for r in rows] == [0, 1, 2]
    assert rows[2]["clients"] == [0, 1] and rows[2]["failed"] == [] and rows[2]["timed_out"] == []
    assert rows[2]["test_loss"] < rows[0]["test_loss"]
    assert rows[2]["train_loss"] < rows[1]["train_loss"]
    # a round's time, and the parts of it the server spent on its evaluation and its checkpoint
    assert all(0 < r["eval_s"] < r["round_s"] and r["save_s"] > 0 for r in rows[1:])
    assert time.perf_counter() - start < 60
    # The global model restores in tfplus: `tfplus eval` reads the last round's checkpoint and its accuracy.
    monkeypatch.setattr(tfdata, "read_batches", functools.partial(tfdata.read_batches, records_per_file=N_TEST))
    result = trainer.evaluate(str(tmp_path / "fl"), data=str(data_dir.parent), batch_size=20)
    assert result.accuracy == pytest.approx(rows[2]["test_accuracy"])
    assert list((tmp_path / "fl").glob("events.out.tfevents.*"))


def test_local_epochs_train_each_client_over_its_whole_shard(data_dir, tmp_path, monkeypatch):
    fed = _federation(data_dir, tmp_path / "fl", rounds=1, local_epochs=2, partition="dirichlet:0.5")
    took = []  # (shard size, steps) of each client's round
    train = FederatedModel.train
    monkeypatch.setattr(FederatedModel, "train", lambda self, ds, steps, *a, **k: took.append(
        (len(ds.train_labels), steps)) or train(self, ds, steps, *a, **k))
    flower.run_server(fed, InProcessGrid(flower.client_app(fed), 2))
    sizes = sorted(n for n, _ in took)
    assert len(took) == 2 and sum(sizes) == N_TRAIN and sizes[0] != sizes[1]  # skewed shards...
    assert all(steps == 2 * (n // 16) for n, steps in took)  # ...each passed over twice, in whole batches of 16
    # The schedule's round (and the checkpoint's step) is an equal shard's: 2 epochs of 100 examples.
    assert fed.round_steps() == 2 * (100 // 16) and _rows(tmp_path / "fl")[1]["step"] == 12


def test_failed_and_timed_out_clients_are_reported_and_the_round_goes_on(data_dir, tmp_path):
    fed = _federation(data_dir, tmp_path / "fl", clients=3, rounds=1, local_steps=2)

    def crash(node, message):
        if node == 1001:
            raise RuntimeError("client 1: out of memory (injected)")
        return node == 1002
    flower.run_server(fed, InProcessGrid(flower.client_app(fed), 3, fail=crash))
    row = _rows(tmp_path / "fl")[1]
    assert row["clients"] == [0] and row["timed_out"] == [1002]
    assert row["failed"] == [{"node": 1001, "reason": "client 1: out of memory (injected)"}]
    assert row["test_loss"] < _rows(tmp_path / "fl")[0]["test_loss"]  # client 0's update was taken


def test_a_client_error_names_the_client(data_dir, tmp_path):
    fed = _federation(data_dir, tmp_path / "fl", clients=2, partition="classes:1", rounds=1)
    bad = flower.Federation(**{**fed.__dict__, "model": "mentee"})  # its weights do not fit lenet's clients
    with pytest.raises(flower.TooFewReplies, match=r"round 1: 0 client\(s\) replied, fewer than --min-clients 1, "
                       r"so the run stops: client 0: ValueError: set_weights"):
        flower.run_server(bad, InProcessGrid(flower.client_app(fed), 2))
    row = _rows(tmp_path / "fl")[1]  # the round's row is saved first
    assert row["clients"] == [] and len(row["failed"]) == 2
    assert [f["node"] for f in row["failed"]] == [1000, 1001]
    assert all(f["reason"].startswith(f"client {i}: ValueError: set_weights: the weights do not match model "
                                      "'lenet' (unexpected conv3/biases") for i, f in enumerate(row["failed"]))


def test_a_budgeted_client_stays_within_its_budget_and_reports_its_memory(data_dir, tmp_path):
    budget = 2_000_000
    fed = _federation(data_dir, tmp_path / "fl", rounds=1, local_steps=2, client_budget=budget, measure_memory=True)
    try:
        flower.run_server(fed, InProcessGrid(flower.client_app(fed), 2))
    finally:
        tracemalloc.stop()  # the clients started it (measure_memory)
    row = _rows(tmp_path / "fl")[1]
    assert row["clients"] == [0, 1] and 0 < row["peak_bytes"] <= budget
    assert [c["client"] for c in row["client_memory"]] == [0, 1]
    for c in row["client_memory"]:
        assert 0 < c["peak_bytes"] <= budget and c["peak_bytes"] <= c["measured_peak_bytes"] and c["rss_bytes"] > 0
        assert c["shard_bytes"] == 100 * (32 * 32 * 3 + 4) + 20 * (32 * 32 * 3 + 4)  # IID: 100 + 20 examples
    assert row["measured_peak_bytes"] == max(c["measured_peak_bytes"] for c in row["client_memory"])


def test_clients_and_rounds_reuse_their_process_plans(data_dir, tmp_path):
    """A worker process plans each step once (per fed shape), not again for each client or round."""
    fed = _federation(data_dir, tmp_path / "fl", clients=3, rounds=2, local_steps=2, client_budget=2_000_000)
    seen = []
    flower.run_server(fed, InProcessGrid(flower.client_app(fed), 3),
                      log=lambda row: seen.append([id(p) for p in flower._Cache.model.sess.memory_plans]))
    assert len(seen) == 3 and seen[1] and seen[1] == seen[2]


def test_a_round_waits_for_each_turn_of_its_clients(data_dir, tmp_path):
    fed = flower.Federation(clients=100, synthetic=True)
    assert fed.timeout() == flower.CLIENT_TIMEOUT  # every node on its own machine: one turn
    assert fed.timeout(concurrent=1) == 100 * flower.CLIENT_TIMEOUT  # one worker takes the 100 clients in turn
    assert fed.timeout(concurrent=8) == 13 * flower.CLIENT_TIMEOUT
    assert flower.Federation(clients=100, fraction_train=0.1, synthetic=True).timeout(1) == 10 * flower.CLIENT_TIMEOUT
    assert flower.Federation(clients=100, round_timeout=30, synthetic=True).timeout(1) == 30
    fed = _federation(data_dir, tmp_path / "fl", rounds=1, local_steps=1)
    grid = InProcessGrid(flower.client_app(fed), 2)
    waited, send = [], grid.send_and_receive
    grid.send_and_receive = lambda messages, timeout=None: waited.append(timeout) or send(messages)
    flower.run_server(fed, grid, concurrent=1)
    assert waited and set(waited) == {2 * flower.CLIENT_TIMEOUT}


@pytest.mark.parametrize("side", ["driver", "worker"])
def test_the_simulation_loads_no_tensorflow(side):
    """Flower's Ray actor module imports TensorFlow wherever it is installed (~475 MB a process): the driver loads
    Flower's simulation modules without it, and leaves it importable; a worker's setup hook hides it."""
    code = {"driver": "flower._run_simulation(); print('tensorflow' in sys.modules)",
            "worker": "flower._hide_tensorflow(); import flwr.simulation.ray_transport.ray_actor; "
                      "print(sys.modules.get('tensorflow') is not None)"}[side]
    done = subprocess.run([sys.executable, "-c", f"import sys\nfrom tfplus.federated import flower\n{code}"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[-1] == "False"


@pytest.mark.parametrize("name", ["fedprox", "fedadam", "fedavgm"])
def test_every_strategy_runs_a_round(data_dir, tmp_path, name):
    fed = _federation(data_dir, tmp_path / "fl", rounds=1, local_steps=2, strategy=name)
    flower.run_server(fed, InProcessGrid(flower.client_app(fed), 2))
    row = _rows(tmp_path / "fl")[1]
    assert row["clients"] == [0, 1] and np.isfinite(row["test_loss"])


def test_an_opencl_client_on_a_cpu_opencl_device_refuses(monkeypatch):
    """Whatever devices this machine has: the device selection gives a CPU (PoCL) device, then a GPU."""
    from tfplus.runtime import opencl
    kinds = opencl.cl.device_type
    cpu = SimpleNamespace(type=kinds.CPU, name=" pthread-AMD EPYC ")
    monkeypatch.setattr(opencl, "select", lambda selector: cpu)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    with pytest.raises(RuntimeError, match="only OpenCL device here is pthread-AMD EPYC, a CPU.*CUDA_VISIBLE_DEVICES="
                                           "''.*--client-gpus"):
        flower.check_opencl_gpu("opencl")
    flower.check_opencl_gpu("cpu")  # not an OpenCL run: nothing to check
    cpu.type = kinds.GPU
    flower.check_opencl_gpu("opencl:0")


def test_the_run_config_gives_the_deployment_apps_their_settings():
    fed = flower.Federation.from_run_config({"model": "lenet", "clients": 4, "local-steps": 3, "client-budget": ""})
    assert (fed.clients, fed.local_steps, fed.client_budget) == (4, 3, None)
    assert flower.Federation.from_run_config({"client-budget": "32MB"}).client_budget == 32_000_000
    with pytest.raises(ValueError, match="'local-step'.*local-steps"):
        flower.Federation.from_run_config({"local-step": 3})
    assert isinstance(flower.clientapp, flwr.clientapp.ClientApp)


def test_a_client_evaluates_on_its_slice_of_the_test_set(data_dir):
    fed = _federation(data_dir, "unused", clients=4)
    grid = InProcessGrid(flower.client_app(fed), 4)
    model = FederatedModel(fed.train_config(), fed.local_steps, fed.rounds)
    ask = Message(RecordDict({"arrays": flower._record(model.get_weights())}), 1002, "evaluate")
    [reply] = grid.send_and_receive([ask])
    metrics = reply.content["metrics"]
    assert metrics["num-examples"] == N_TEST // 4 and 0 <= metrics["eval_accuracy"] <= 1


def test_the_command_line_refuses_bad_settings_before_starting(capsys):
    from tfplus import cli
    assert cli.main(["federated", "simulate", "--partition", "dirichlet:0"]) == 2
    assert "dirichlet:ALPHA" in capsys.readouterr().err
    assert cli.main(["federated", "simulate", "--clients", "2", "--min-clients", "3", "--synthetic"]) == 2
    assert "(--min-clients) 3 is more than clients 2" in capsys.readouterr().err
    assert cli.main(["federated", "simulate", "--local-steps", "5", "--local-epochs", "1", "--synthetic"]) == 2
    assert "--local-epochs: not allowed with argument --local-steps" in capsys.readouterr().err
    assert cli.main(["federated", "simulate", "--local-epochs", "0", "--synthetic"]) == 2
    assert "--local-epochs" in capsys.readouterr().err
    assert cli.main(["federated", "simulate", "--cpus", "1", "--client-cpus", "2", "--synthetic"]) == 2
    assert "cpus (--cpus) 1 is fewer than client_cpus (--client-cpus) 2" in capsys.readouterr().err


def test_download_fetches_the_data_only_where_it_is_missing(tmp_path, monkeypatch, data_dir):
    from tfplus import cli
    fetched = []

    def download(root):
        fetched.append(root)
        raise SystemExit(7)  # stands in for the network: the run stops here
    monkeypatch.setattr(tfdata, "download", download)
    with pytest.raises(SystemExit):
        cli.main(["federated", "simulate", "--download", "--data", str(tmp_path)])
    assert fetched == [tfdata.data_root(str(tmp_path))]
    monkeypatch.setattr(flower, "simulate", lambda fed, log: None)  # data present: no download, the run starts
    assert cli.main(["federated", "simulate", "--download", "--data", str(data_dir)]) == 0
    assert len(fetched) == 1


def test_tfplus_and_flower_import_together():
    import google.protobuf

    from tfplus.proto import graph_pb2  # noqa: F401  tfplus's generated modules load under Flower's protobuf
    major = int(google.protobuf.__version__.split(".")[0])
    assert 6 <= major < 8 and flwr.__version__


def test_a_supernode_picks_its_device_and_the_server_exports_its_start(data_dir, tmp_path, monkeypatch):
    """A SuperNode's node config may name its client's device (one SuperNode per GPU); the server writes the
    weights it started from (what a peer framework loads) and each row the clients' seconds."""
    fed = _federation(data_dir, tmp_path / "fl", rounds=1, local_steps=2, test_examples=10)
    checked = []

    def check(device):
        checked.append(device)
        if device != "cpu":
            raise RuntimeError(f"--device {device}: stands in for a GPU this machine lacks")
    monkeypatch.setattr(flower, "check_opencl_gpu", check)
    grid = InProcessGrid(flower.client_app(fed), 2)
    grid.nodes[1001].node_config["device"] = "opencl:1"
    flower.run_server(fed, grid)
    rows = _rows(tmp_path / "fl")
    assert "opencl:1" in checked and rows[1]["clients"] == [0]
    assert rows[1]["failed"][0]["node"] == 1001 and "opencl:1" in rows[1]["failed"][0]["reason"]
    assert rows[1]["setup_s"] > 0 and rows[1]["train_s"] > 0
    start = load_weights(str(tmp_path / "fl" / "initial_weights.npz"))
    model = FederatedModel(fed.train_config(), fed.round_steps(), fed.rounds)
    model.set_weights(start)
    test = flower.test_set(fed)
    assert len(test.test_labels) == 10
    assert model.evaluate(test) == (rows[0]["test_accuracy"], pytest.approx(rows[0]["test_loss"], rel=1e-6))


def test_flowers_rounds_are_the_recipe_the_pytorch_peer_follows(data_dir, tmp_path):
    """Through Flower (its FedAvg, its server-round config, the ClientApp and its process's cached model), each
    round is what benchmarks/torch_federated.py does by hand: every client from the round's global weights, a
    fresh optimizer at global step (round-1)*local_steps, batches seeded by seed*1000003 + client*1009 + round,
    then the mean weighted by shard sizes (unequal here: 67, 67, 66). A drift in any of them after round 1 (a
    round's step or seed off by one, momentum carried over, an unweighted mean) moves the global weights by far
    more than float rounding."""
    fed = _federation(data_dir, tmp_path / "fl", clients=3, rounds=3, local_steps=3)
    result = flower.run_server(fed, InProcessGrid(flower.client_app(fed), 3))
    glob = load_weights(str(tmp_path / "fl" / "initial_weights.npz"))
    start = glob
    m = FederatedModel(fed.train_config(), fed.round_steps(), fed.rounds, cpus=1)
    for rnd in range(1, fed.rounds + 1):
        trained, counts = [], []
        for client in range(fed.clients):
            shard = flower.client_shard(fed, client)
            m.set_weights(glob)
            m.train(shard, fed.local_steps, server_round=rnd, seed=fed.seed * 1_000_003 + client * 1009 + rnd)
            trained.append(m.get_weights())
            counts.append(len(shard.train_labels))
        assert counts == [67, 67, 66]
        share = np.asarray(counts) / sum(counts)
        glob = {k: sum(s * w[k] for s, w in zip(share, trained)).astype(np.float32) for k in glob}
    m.close()
    got = {name: array.numpy() for name, array in result.arrays.items()}
    change = max(float(np.abs(glob[k] - start[k]).max()) for k in glob)
    assert change > 1e-3
    assert max(float(np.abs(got[k] - glob[k]).max()) for k in glob) < 1e-5 * change


def test_a_shard_cache_keeps_each_clients_shard_for_its_next_round(data_dir, tmp_path, monkeypatch, capsys):
    """A client's shard, kept as a verified .npz, is the shard read from the data files; a changed data file, a
    damaged cache file or another partition reads the data again."""
    cache = tmp_path / "shards"
    fed = flower.Federation(model="lenet", clients=3, data=str(data_dir), shard_cache=str(cache))
    plain = flower.client_shard(flower.Federation(model="lenet", clients=3, data=str(data_dir)), 1)
    names = ("train_images", "train_labels", "test_images", "test_labels")

    def same(shard):
        return all(np.array_equal(getattr(shard, n), getattr(plain, n)) for n in names)

    assert same(flower.client_shard(fed, 1)) and not list(cache.glob(".*"))  # written whole, no temporary left
    [kept] = cache.glob("*.npz")
    reads, read_shard = [], cifar10.read_shard
    monkeypatch.setattr(cifar10, "read_shard", lambda *a: reads.append(a) or read_shard(*a))
    assert same(flower.client_shard(fed, 1)) and not reads  # from the cache
    flower.client_shard(flower.Federation(model="lenet", clients=3, data=str(data_dir), shard_cache=str(cache),
                                          partition="dirichlet:0.5"), 1)
    assert len(reads) == 1 and len(list(cache.glob("*.npz"))) == 2
    raw = bytearray(kept.read_bytes())
    raw[len(raw) // 2] ^= 0xFF  # an image byte: the array's CRC-32 no longer matches
    kept.write_bytes(bytes(raw))
    assert same(flower.client_shard(fed, 1)) and len(reads) == 2
    assert "does not verify" in capsys.readouterr().err
    batch = next(data_dir.glob("data_batch_1.bin"))
    stat = batch.stat()
    os.utime(batch, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))  # a replaced file: a new key
    assert same(flower.client_shard(fed, 1)) and len(reads) == 3
