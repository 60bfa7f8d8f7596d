"""A federated client's local step against `tfplus train`'s, on one device: the host's seconds per step of
FederatedModel.train (the client's round), of the same steps fetching loss and accuracy each step (the client's
loop before it took the trainer's RunningSums step), and of `tfplus train`'s loop (from its --log rows'
images_per_sec, the first row, which builds programs, left out); in turns, medians. Then what a Deployment Engine
client's setup costs in this process: the model made, the shard read (from CIFAR-10's files, and again from the
shard cache), the global weights set.

    python benchmarks/bench_federated_client.py --device opencl:0 --data DIR --steps 400 --repeats 3
    python benchmarks/bench_federated_client.py --device cpu --synthetic --steps 20 --batch-size 32   # a try-out
"""
from __future__ import annotations

import argparse
import dataclasses
import io
import json
import os
import tempfile
import time

import numpy as np

from tfplus import data as tfdata
from tfplus import trainer
from tfplus.federated import flower


def fetching_loop(model: flower.FederatedModel, shard, steps: int, seed: int) -> None:
    """The client's loop as it was: each step fetches the loss and accuracy (a copy back, so a sync)."""
    tg, cfg = model.tg, model.cfg
    model.reset_optimizer(0)
    with tfdata.train_batches(shard, cfg.batch_size, seed=seed, augment=cfg.augment, data_format=cfg.data_format,
                              raw=tg.raw_images is not None) as batches:
        for _, (x, y) in zip(range(steps), batches):
            model.sess.run([tg.train_op, tg.loss, tg.accuracy], {**trainer.image_feed(tg, x), tg.labels: y})


def trainer_step_s(fed: flower.Federation, steps: int, folder: str) -> float:
    """`tfplus train`'s seconds per step at the client's recipe, from its log rows after the first."""
    log = os.path.join(folder, f"train-{time.monotonic_ns()}.jsonl")
    cfg = trainer.TrainConfig(model=fed.model, batch_size=fed.batch_size, steps=steps, device=fed.device, lr=fed.lr,
                              synthetic=fed.synthetic, data=fed.data, eval_every=0, threads=fed.client_cpus,
                              workers=fed.client_cpus, log=log, log_every=max(steps // 5, 1))
    trainer.train(cfg, out=io.StringIO(), err=io.StringIO())
    with open(log) as f:
        rows = [json.loads(line) for line in f if '"kind": "step"' in line]
    return float(np.median([fed.batch_size / r["images_per_sec"] for r in rows[1:]]))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", default="cpu")
    p.add_argument("--model", default="mentee")
    p.add_argument("--steps", type=int, default=200, help="local steps a timing")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--client-cpus", type=int, default=1)
    p.add_argument("--lr", type=float, help="peak learning rate (default the optimizer's; `tfplus train` on the "
                   "synthetic set diverged at it on an H200)")
    data = p.add_mutually_exclusive_group(required=True)
    data.add_argument("--data", help="the folder of cifar-10-batches-bin/ (or that folder)")
    data.add_argument("--synthetic", action="store_true", help="tfplus's small synthetic set")
    args = p.parse_args()
    fed = flower.Federation(model=args.model, clients=2, rounds=2, local_steps=args.steps, batch_size=args.batch_size,
                            device=args.device, client_cpus=args.client_cpus, data=args.data,
                            synthetic=args.synthetic, lr=args.lr)
    began = time.perf_counter()
    model = flower.FederatedModel(fed.train_config(), fed.round_steps(), fed.rounds, cpus=fed.client_cpus)
    made = time.perf_counter() - began
    began = time.perf_counter()
    shard = flower.client_shard(fed, 0)
    read = time.perf_counter() - began
    with tempfile.TemporaryDirectory() as folder:  # the next round's client, from the shard cache
        cached = dataclasses.replace(fed, shard_cache=folder)
        flower.client_shard(cached, 0)
        began = time.perf_counter()
        flower.client_shard(cached, 0)
        from_cache = time.perf_counter() - began
    weights = model.get_weights()
    began = time.perf_counter()
    model.set_weights(weights)
    assigned = time.perf_counter() - began
    model.train(shard, 3)  # builds the step's programs
    times: dict[str, list[float]] = {"client round": [], "client, fetching each step": [], "tfplus train": []}
    with tempfile.TemporaryDirectory() as folder:
        for _ in range(args.repeats):  # in turns, so the machine's load falls on each alike
            model.set_weights(weights)  # each timing trains from the start (a long one could diverge)
            began = time.perf_counter()
            model.train(shard, args.steps)
            times["client round"].append((time.perf_counter() - began) / args.steps)
            model.set_weights(weights)
            began = time.perf_counter()
            fetching_loop(model, shard, args.steps, seed=1)
            times["client, fetching each step"].append((time.perf_counter() - began) / args.steps)
            times["tfplus train"].append(trainer_step_s(fed, args.steps, folder))
    print(f"{args.model} on {args.device}, batch {args.batch_size}, {args.steps} steps a timing, medians of "
          f"{args.repeats}:")
    base = np.median(times["tfplus train"])
    for name, t in times.items():
        print(f"  {name:28s} {1e3 * np.median(t):8.3f} ms a step ({np.median(t) / base:.2f}x tfplus train's)")
    print(f"  setup: model made {made:.2f} s, shard read {read:.2f} s (from the shard cache {from_cache:.2f} s), "
          f"weights set {1e3 * assigned:.1f} ms")


if __name__ == "__main__":
    main()
