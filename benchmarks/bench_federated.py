"""Federated Mentee on the real CIFAR-10 in Flower's Simulation Engine, tfplus against its PyTorch peer in the same
run: 10 clients, IID and Dirichlet(0.5) partitions, FedAvg; the global model's test accuracy after each round and
the seconds each round took, for both frameworks.
Run: `python benchmarks/bench_federated.py [--clients 10] [--rounds 20] [--local-steps 50] [--data DIR] [--no-peer]`.
Phone-class clients (BENCHMARKS.md, "100 phone-class clients on one machine"): `--clients 100 --rounds 3
--local-steps 5 --partitions dirichlet:0.5 --client-budget 32MB --cpus 1 --measure-memory --no-peer` adds each
round's clients, the most any client planned, measured (tracemalloc) and held resident (its process's peak RSS).

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
from tfplus.units import parse_size

HERE = Path(__file__).resolve().parent


def run_tfplus(args, spec: str) -> list[dict]:
    rows: list[dict] = []
    with tempfile.TemporaryDirectory() as out:
        fed = flower.Federation(model=args.model, clients=args.clients, rounds=args.rounds,
                                local_steps=args.local_steps, batch_size=args.batch_size, partition=spec,
                                client_cpus=args.client_cpus, cpus=args.cpus, client_budget=args.client_budget,
                                measure_memory=args.measure_memory, data=args.data, out=out)
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
    p.add_argument("--cpus", type=int, help="CPUs Ray may use (default all): --cpus / --client-cpus clients at once")
    p.add_argument("--client-budget", type=lambda text: parse_size(text, "--client-budget"),
                   help="plan each tfplus client's step to fit this (e.g. 32MB); the peer has no budget")
    p.add_argument("--measure-memory", action="store_true", help="tfplus clients measure a step's peak (slower)")
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
            if who == "tfplus":  # per round: clients that trained, failed, timed out; the most any client used
                r["trained_failed_timed_out"] = [[len(row["clients"]), len(row["failed"]), len(row["timed_out"])]
                                                 for row in rows[1:]]
                r.update({key: [row.get(key) for row in rows[1:]]
                          for key in ("peak_bytes", "measured_peak_bytes", "rss_bytes")})
            print(json.dumps({"partition": spec, "framework": who, **r}), flush=True)
    print(f"{args.model}, {args.clients} clients, {args.rounds} rounds of {args.local_steps} local steps of "
          f"{args.batch_size}, FedAvg, {os.cpu_count()} cores:")
    for (spec, who), r in results.items():
        print(f"  {spec:14s} {who:8s} test accuracy % by round {r['accuracy']}  seconds per round {r['round_s']}"
              f"  total {r['total_s']} s")
        if "trained_failed_timed_out" in r:
            print(f"  {'':23s} clients trained/failed/timed out by round {r['trained_failed_timed_out']}; the most "
                  f"a client planned {r['peak_bytes']}, measured {r['measured_peak_bytes']}, held resident "
                  f"{r['rss_bytes']} bytes")
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
