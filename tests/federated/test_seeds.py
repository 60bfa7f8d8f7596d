"""benchmarks/bench_federated_seeds.py, the many-seeds benchmark of tfplus against its PyTorch peer (issue 36): its
by-hand FedAvg loop is Flower's rounds, its processes write a row per (seed, side, partition, round), and its
summary's gaps and ratios are the rows'. (The peer's side needs torch, which CI does not install.)"""
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tfplus import data as tfdata
from tfplus.data import cifar10

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_federated_seeds.py"


def _bench():
    spec = importlib.util.spec_from_file_location("bench_federated_seeds", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks its module up there
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    return cifar10.write_binary_batches(tmp_path_factory.mktemp("data"), tfdata.synthetic(200, 40, seed=3))


def test_the_by_hand_rounds_are_flowers(data_dir, tmp_path, monkeypatch):
    """Flower's FedAvg and ClientApp (in this process) and the benchmark's loop end at the same global weights,
    to float rounding of the rounds' change, from the same initial weights (the same round-0 accuracy)."""
    pytest.importorskip("flwr", reason="Flower is not installed: pip install \"tfplus[federated]\"")
    from flowergrid import InProcessGrid
    from flwr.supercore.task_identity import TaskIdentity

    from tfplus.federated import flower
    from tfplus.federated.model import load_weights
    for name in ("_run_id", "_node_id", "_task_id"):  # Flower's messages take ids its runtimes set
        monkeypatch.setattr(TaskIdentity, name, 1)
    fed = flower.Federation(model="mentee", clients=2, rounds=2, local_steps=3, batch_size=16, seed=4,
                            data=str(data_dir.parent), out=str(tmp_path / "fl"))
    result = flower.run_server(fed, InProcessGrid(flower.client_app(fed), 2))
    theirs = {name: array.numpy() for name, array in result.arrays.items()}
    flowers_rows = [json.loads(line) for line in (tmp_path / "fl" / "rounds.jsonl").read_text().splitlines()]
    bench = _bench()
    job = bench.Job(str(data_dir.parent), 4, "tfplus", "iid", 2, 2, 3, 16, 1, None)
    rows = []
    ours = bench.run_tfplus(job, lambda rnd, accuracy, train_s, eval_s: rows.append((rnd, accuracy)))
    start = load_weights(str(tmp_path / "fl" / "initial_weights.npz"))
    change = max(float(np.abs(ours[k] - start[k]).max()) for k in ours)
    assert change > 1e-3
    assert max(float(np.abs(ours[k] - theirs[k]).max()) for k in ours) < 1e-5 * change
    assert [r for r, _ in rows] == [0, 1, 2]
    assert rows[0][1] == flowers_rows[0]["test_accuracy"]


def test_jobs_write_a_row_per_round_and_the_summary(data_dir, tmp_path):
    """Two seeds of the tfplus side as two single-threaded processes: every (seed, round) row, the rounds
    evaluated every 2nd and the last, and round 0 the same for a seed whichever process ran it."""
    out = tmp_path / "out"
    subprocess.run([sys.executable, str(SCRIPT), "--data", str(data_dir.parent), "--out", str(out), "--seeds", "0-1",
                    "--partitions", "iid", "--sides", "tfplus", "--clients", "2", "--rounds", "3",
                    "--local-steps", "2", "--batch-size", "16", "--eval-every", "2", "--jobs", "2"],
                   check=True, capture_output=True, text=True)
    rows = [json.loads(line) for line in (out / "rounds.jsonl").read_text().splitlines()]
    assert sorted((r["seed"], r["round"]) for r in rows) == [(s, n) for s in (0, 1) for n in range(4)]
    assert {r["side"] for r in rows} == {"tfplus"} and {r["partition"] for r in rows} == {"iid"}
    assert [r["round"] for r in rows if r["test_accuracy"] is not None] == [0, 2, 3, 0, 2, 3]
    assert all(r["train_s"] > 0 for r in rows if r["round"] > 0)
    assert all(r["eval_s"] > 0 for r in rows if r["test_accuracy"] is not None)
    assert json.loads((out / "summary.json").read_text()) == {  # no peer: no gaps, and none made up
        "iid": {"gap_by_round": {}, "train_s_ratio_per_seed": {}, "train_s_ratio_mean": None}}


def test_the_summary_is_the_gaps_mean_and_standard_error():
    bench = _bench()
    rows = []
    # Three seeds; tfplus - pytorch at round 2: +1, -2, -5 points (mean -2, std 3, standard error sqrt(3)).
    for seed, (ours, theirs) in enumerate([(31.0, 30.0), (28.0, 30.0), (25.0, 30.0)]):
        for side, accuracy, seconds in (("tfplus", ours, 3.0 * (seed + 1)), ("pytorch", theirs, 2.0)):
            for rnd, acc in ((0, 10.0), (1, None), (2, accuracy)):
                rows.append({"seed": seed, "side": side, "partition": "iid", "round": rnd, "test_accuracy": acc,
                             "train_s": 0.0 if rnd == 0 else seconds, "eval_s": 1.0})
    rows.append({"seed": 9, "side": "tfplus", "partition": "iid", "round": 0, "test_accuracy": 10.0,
                 "train_s": 0.0, "eval_s": 1.0})  # a seed whose peer never ran: left out
    s = bench.summarize(rows)["iid"]
    assert list(s["gap_by_round"]) == [0, 2]
    assert s["gap_by_round"][0] == {"seeds": 3, "mean_gap": 0.0, "stderr": 0.0, "per_seed": {0: 0.0, 1: 0.0, 2: 0.0}}
    assert s["gap_by_round"][2]["mean_gap"] == -2.0
    assert s["gap_by_round"][2]["stderr"] == pytest.approx(3 ** 0.5, abs=1e-3)
    assert s["train_s_ratio_per_seed"] == {0: 1.5, 1: 3.0, 2: 4.5} and s["train_s_ratio_mean"] == 3.0
