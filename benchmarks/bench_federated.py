"""Federated Mentee on the real CIFAR-10 in Flower's Simulation Engine, tfplus against its PyTorch peer in the same
run: 10 clients, IID and Dirichlet(0.5) partitions, FedAvg; the global model's test accuracy after each round and
the seconds each round took, for both frameworks.
Run: `python benchmarks/bench_federated.py [--clients 10] [--rounds 20] [--local-steps 50] [--data DIR] [--no-peer]`.

The peer is benchmarks/torch_federated.py (needs torch): the same shards, batches, augmentation, optimizer, learning
rate schedule, FedAvg and central evaluation (its docstring lists them). The issue's bar: tfplus within 1 point of
the peer's accuracy at equal rounds, and its seconds per round within 1.5x of the peer's on the same CPU.
The data defaults to ../shared/data beside the repository (a folder holding cifar-10-batches-bin/). Each client
reads only its shard and is given --client-cpus CPUs (tfplus: one step worker per CPU at most; the peer: one torch
thread). Round 0 is the initial model; a round's seconds include Ray handing the clients to its workers (the
first also their start).
"""
from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

import numpy as np

from tfplus.federated import flower

HERE = Path(__file__).resolve().parent


def run_tfplus(args, spec: str) -> list[dict]:
    rows: list[dict] = []
    with tempfile.TemporaryDirectory() as out:
        fed = flower.Federation(model=args.model, clients=args.clients, rounds=args.rounds,
                                local_steps=args.local_steps, batch_size=args.batch_size, partition=spec,
                                client_cpus=args.client_cpus, data=args.data, out=out)
        flower.simulate(fed, log=rows.append)
    return rows


def run_peer(args, spec: str) -> list[dict]:
    # NOTE: Ray's workers unpickle the peer's ClientApp by module name: they must find this folder.
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")]))
    import torch_federated
    rows: list[dict] = []
    recipe = torch_federated.Recipe(args.data, args.clients, args.rounds, args.local_steps, args.batch_size, 0.05,
                                    spec, 0)
    torch_federated.simulate(recipe, rows.append)
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default="mentee", help="tfplus's model (the peer is Mentee; default mentee)")
    p.add_argument("--clients", type=int, default=10)
    p.add_argument("--rounds", type=int, default=20)
    p.add_argument("--local-steps", type=int, default=50)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--client-cpus", type=int, default=1)
    p.add_argument("--partitions", default="iid,dirichlet:0.5")
    p.add_argument("--no-peer", action="store_true", help="tfplus alone (no torch)")
    p.add_argument("--data", default=str(HERE.parents[1] / "shared" / "data"))
    args = p.parse_args()
    runners = {"tfplus": run_tfplus} if args.no_peer else {"tfplus": run_tfplus, "pytorch": run_peer}
    results = {}
    for spec in args.partitions.split(","):
        for who, run in runners.items():
            start = time.perf_counter()
            rows = run(args, spec)
            results[spec, who] = r = {"accuracy": [round(100 * row["test_accuracy"], 2) for row in rows],
                                      "round_s": [round(row["round_s"], 1) for row in rows[1:]],
                                      "total_s": round(time.perf_counter() - start, 1)}
            print(json.dumps({"partition": spec, "framework": who, **r}), flush=True)
    print(f"{args.model}, {args.clients} clients, {args.rounds} rounds of {args.local_steps} local steps of "
          f"{args.batch_size}, FedAvg, {os.cpu_count()} cores:")
    for (spec, who), r in results.items():
        print(f"  {spec:14s} {who:8s} test accuracy % by round {r['accuracy']}  seconds per round {r['round_s']}"
              f"  total {r['total_s']} s")
    for spec in args.partitions.split(","):
        if (spec, "pytorch") in results:
            ours, peer = results[spec, "tfplus"], results[spec, "pytorch"]
            gap = ours["accuracy"][-1] - peer["accuracy"][-1]
            # The median round after the first (which also starts Ray's workers and reads the shards).
            ratio = float(np.median(ours["round_s"][1:] or ours["round_s"])) / float(
                np.median(peer["round_s"][1:] or peer["round_s"]))
            print(f"  {spec:14s} tfplus - pytorch at round {args.rounds}: {gap:+.2f} points; seconds per round "
                  f"(median after round 1) {ratio:.2f}x the peer's")


if __name__ == "__main__":
    main()
