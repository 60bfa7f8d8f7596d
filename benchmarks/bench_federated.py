"""Federated LeNet on the real CIFAR-10 in Flower's Simulation Engine: 10 clients, IID and Dirichlet(0.5)
partitions, FedAvg, the global model's test accuracy and the seconds of each round.
Run: `python benchmarks/bench_federated.py [--clients 10] [--rounds 3] [--local-steps 50] [--data DIR]`.

The data defaults to ../shared/data beside the repository (a folder holding cifar-10-batches-bin/). Each client
reads only its shard; each is given --client-cpus CPUs (one step worker per CPU at most). Round 0 is the initial
model; a round's seconds include Ray handing the clients to its workers (the first also their start).
"""
from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from tfplus.federated import flower


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--clients", type=int, default=10)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--local-steps", type=int, default=50)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--client-cpus", type=int, default=1)
    p.add_argument("--partitions", default="iid,dirichlet:0.5")
    p.add_argument("--data", default=str(Path(__file__).resolve().parents[1].parent / "shared" / "data"))
    args = p.parse_args()
    results = {}
    for spec in args.partitions.split(","):
        rows: list[dict] = []
        with tempfile.TemporaryDirectory() as out:
            fed = flower.Federation(model="lenet", clients=args.clients, rounds=args.rounds,
                                    local_steps=args.local_steps, batch_size=args.batch_size, partition=spec,
                                    client_cpus=args.client_cpus, data=args.data, out=out)
            start = time.perf_counter()
            flower.simulate(fed, log=rows.append)
            total = time.perf_counter() - start
        results[spec] = {"accuracy": [round(r["test_accuracy"], 4) for r in rows],
                         "round_s": [round(r["round_s"], 1) for r in rows[1:]],
                         "failed": sum(len(r.get("failed", [])) + len(r.get("timed_out", [])) for r in rows),
                         "total_s": round(total, 1)}
        print(json.dumps({spec: results[spec]}), flush=True)
    print(f"lenet, {args.clients} clients, {args.local_steps} local steps of {args.batch_size}, FedAvg:")
    for spec, r in results.items():
        print(f"  {spec:14s} accuracy by round {r['accuracy']}  seconds per round {r['round_s']}  "
              f"total {r['total_s']} s")


if __name__ == "__main__":
    main()
