"""Where an epoch's time goes around the training step, and the cold start: host input vs device input.

    python benchmarks/bench_input.py --device opencl --data DIR            # CIFAR-10 (DIR holds cifar-10-batches-bin)
    python benchmarks/bench_input.py --device opencl --synthetic --steps 40 --model lenet   # quick, e.g. on PoCL

Prints, for the model at --batch-size:
1. the host's work per batch in the prefetch thread: the host pipeline (gather, crop_flip, normalize: floats) vs
   device input (gather, draw crops: bytes), ms and bytes uploaded per batch;
2. the step through Session.run with a batch fed each step, host vs device input, fetching (loss, accuracy,
   learning rate) every step (a device sync each step) vs only train_op (one sync at the end): ms per step and
   images/s;
3. `tfplus train` (in this process) for --steps steps, --input host vs device: images/s over the steps after the
   first two log rows;
4. with --cold, the first step of `tfplus train` in a fresh process with an empty program cache (XDG_CACHE_HOME
   set to a new folder), then again with the cache filled: seconds to the first step (the trainer's "first step
   done" line) and what compiling cost.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time

import numpy as np


def _load(args):
    from tfplus.trainer import load_data
    return load_data(args.data, args.synthetic)[0]


def host_work(ds, batch: int, rounds: int = 50) -> None:
    from tfplus import data as tfdata
    print(f"-- host work per batch of {batch} (prefetch thread)")
    for raw in (False, True):
        with tfdata.train_batches(ds, batch, seed=0, prefetch=0, raw=raw) as batches:
            next(batches)
            t = time.perf_counter()
            for _ in range(rounds):
                x, _ = next(batches)
            ms = (time.perf_counter() - t) / rounds * 1e3
        nbytes = x[0].nbytes + x[1].nbytes if raw else x.nbytes
        print(f"{'device input (bytes + crops)' if raw else 'host input (crop_flip + normalize)':36s} "
              f"{ms:7.3f} ms  {nbytes / 1024:7.1f} KiB uploaded")


def step_loop(ds, args) -> None:
    import tfplus as tf
    from tfplus import data as tfdata
    from tfplus.graphs import get_model, training_graph
    from tfplus.trainer import image_feed
    print(f"-- Session.run steps on {args.device}, batch {args.batch_size} ({args.model})")
    for device_input in (False, True):
        tg = training_graph(get_model(args.model).build, total_steps=10_000, device_input=device_input)
        sess = tf.Session(graph=tg.graph, device=args.device)
        sess.run(tg.init_op)
        with tfdata.train_batches(ds, args.batch_size, seed=0, raw=device_input) as batches:
            for fetch_every_step in (True, False):
                fetches = [tg.train_op, tg.loss, tg.accuracy, tg.learning_rate] if fetch_every_step else tg.train_op
                for _ in range(3):  # warm-up: programs, plans, tuning
                    x, y = next(batches)
                    sess.run(fetches, {**image_feed(tg, x), tg.labels: y})
                sess.run(tg.loss, {**image_feed(tg, x), tg.labels: y})
                t = time.perf_counter()
                for _ in range(args.step_rounds):
                    x, y = next(batches)
                    sess.run(fetches, {**image_feed(tg, x), tg.labels: y})
                sess.run(tg.global_step)  # waits for the queue
                ms = (time.perf_counter() - t) / args.step_rounds * 1e3
                print(f"{'device' if device_input else 'host':6s} input, "
                      f"{'fetch loss every step' if fetch_every_step else 'fetch nothing (train_op)':26s} "
                      f"{ms:8.2f} ms/step  {args.batch_size / ms * 1e3:9.0f} img/s")
        sess.close()


def trainer(args) -> None:
    from tfplus.trainer import TrainConfig, train
    print(f"-- tfplus train on {args.device}, {args.steps} steps")
    for where in ("host", "device"):
        with tempfile.TemporaryDirectory() as tmp:
            log = os.path.join(tmp, "log.jsonl")
            cfg = TrainConfig(model=args.model, batch_size=args.batch_size, steps=args.steps, eval_every=0,
                              device=args.device, input=where, log=log, log_every=10,
                              data=args.data, synthetic=args.synthetic or None)
            t = time.perf_counter()
            train(cfg, out=open(os.devnull, "w"), err=open(os.devnull, "w"))
            wall = time.perf_counter() - t
            rows = [r for r in map(json.loads, open(log)) if r["kind"] == "step"][2:]
        speed = np.mean([r["images_per_sec"] for r in rows]) if rows else float("nan")
        print(f"{where:6s} input: {speed:9.0f} img/s after the first 20 steps; {wall:6.1f} s in all")


def cold_start(args) -> None:
    print(f"-- first step of `tfplus train --device {args.device}` in a fresh process")
    argv = [sys.executable, "-m", "tfplus.cli", "train", "--model", args.model, "--batch-size",
            str(args.batch_size), "--steps", "1", "--no-eval", "--device", args.device]
    argv += ["--synthetic"] if args.synthetic else ["--data", args.data] if args.data else []
    with tempfile.TemporaryDirectory() as cache:
        for what in ("empty program cache", "filled program cache"):
            env = dict(os.environ, XDG_CACHE_HOME=cache)
            t = time.perf_counter()
            done = subprocess.run(argv, env=env, capture_output=True, text=True)
            wall = time.perf_counter() - t
            line = re.search(r"first step done .*", done.stderr)
            print(f"{what:22s} {wall:6.1f} s process wall; "
                  f"{line.group(0) if line else 'no first-step line: ' + done.stderr[-300:]}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", default="opencl")
    p.add_argument("--data", help="the folder of cifar-10-batches-bin (default: $TFPLUS_DATA, the cache dir)")
    p.add_argument("--synthetic", action="store_true")
    p.add_argument("--model", default="mentee")
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--steps", type=int, default=400, help="tfplus train steps per input (0: skip)")
    p.add_argument("--step-rounds", type=int, default=100, help="timed Session.run steps per variant")
    p.add_argument("--cold", action="store_true", help="also time the first step in fresh processes")
    args = p.parse_args()
    ds = _load(args)
    host_work(ds, args.batch_size)
    if args.step_rounds:
        step_loop(ds, args)
    if args.steps:
        trainer(args)
    if args.cold:
        cold_start(args)


if __name__ == "__main__":
    main()
