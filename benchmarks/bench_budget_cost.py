"""The cost of a memory budget on the step `tfplus train` runs: predicted (`tfplus plan`) against measured.

    OPENBLAS_NUM_THREADS=1 python benchmarks/bench_budget_cost.py --model mentee --budgets 32MB,24MB,16MB,12MB
    OPENBLAS_NUM_THREADS=1 python benchmarks/bench_budget_cost.py --model seqnet --budgets 16MB,8MB --steps 3
    OPENBLAS_NUM_THREADS=1 python benchmarks/bench_budget_cost.py --model lenet --batch-size 1024 --input device \
        --budgets 8MB

The step is the trainer's (plan_cli._TrainStep: its graph rewritten as the session rewrites it, its running sums),
random images and labels. Each budget's session (`tf.Session(memory_budget=...)`, one worker) and an unconstrained
one (no budget: the plain executor) run one step after a warm-up, then `--steps` rounds in turns; the medians of
process CPU time (with OPENBLAS_NUM_THREADS=1 the work done, robust on a shared machine) and of wall time. The
prediction is the plan's predicted_overhead (planner.cost) against the unconstrained plan; the measured overhead
is against the unconstrained session's CPU time.
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

import tfplus as tf
from tfplus.plan_cli import _TrainStep
from tfplus.units import format_size, parse_size


def _feeds(step: _TrainStep, batch: int) -> dict:
    rng = np.random.default_rng(0)
    shapes = step.shapes(batch, step.fed)
    tg = step.tg
    feeds = {tg.labels: rng.integers(0, 10, shapes[tg.labels]).astype(np.int32)}
    if tg.raw_images is None:
        feeds[tg.images] = rng.standard_normal(shapes[tg.images]).astype(np.float32)
    else:  # device input: the dataset's bytes, and crops at the top left
        feeds[tg.raw_images] = rng.integers(0, 256, shapes[tg.raw_images]).astype(np.uint8)
        feeds[tg.crops] = np.zeros(shapes[tg.crops], np.int32)
    return feeds


def _mb(k: int) -> str:
    return f", {k} micro-batches" if k > 1 else ""


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="mentee")
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--budgets", default="32MB,24MB")
    ap.add_argument("--input", choices=("host", "device"))
    ap.add_argument("--steps", type=int, default=3, help="timed rounds (each session runs one step a round)")
    args = ap.parse_args(argv)
    step = _TrainStep(argparse.Namespace(model=args.model, optimizer="momentum", data_format="NCHW", device="cpu",
                                         batch_size=args.batch_size, input=args.input))
    feeds = _feeds(step, args.batch_size)
    budgets = {"unconstrained": None} | {b: parse_size(b, "--budgets") for b in args.budgets.split(",") if b}
    rows, sessions = {}, {}
    for name, budget in budgets.items():
        t0 = time.process_time()
        p = step.plan(args.batch_size, budget)
        rows[name] = {"plan_s": time.process_time() - t0, "peak": p.peak_bytes, "fits": p.fits,
                      "predicted": p.predicted_overhead,
                      "how": ", ".join(t["name"] for t in p.transformations
                                       if t["name"] not in ("schedule", "inplace")),
                      "k": p.microbatches}
        if not p.fits:
            continue
        sess = tf.Session(graph=step.tg.graph, device="cpu", memory_budget=budget, workers=1)
        sess.run(step.tg.init_op)
        step.sums.start(sess)
        sess.run(step.fetches, feeds)  # warm-up: plans, builds, fills the caches
        sessions[name] = sess
    times: dict = {name: [] for name in sessions}
    for _ in range(args.steps):
        for name, sess in sessions.items():
            c0, w0 = time.process_time(), time.perf_counter()
            sess.run(step.fetches, feeds)
            times[name].append((time.process_time() - c0, time.perf_counter() - w0))
    for sess in sessions.values():
        sess.close()
    base = statistics.median(c for c, _ in times["unconstrained"])
    print(f"{args.model}, batch {args.batch_size}, cpu, {args.steps} rounds; medians of process CPU time")
    for name, row in rows.items():
        if name not in times:
            print(f"{name:>14}: does not fit (smallest plan found {format_size(row['peak'])})")
            continue
        cpu = statistics.median(c for c, _ in times[name])
        wall = statistics.median(w for _, w in times[name])
        print(f"{name:>14}: planned {format_size(row['peak'])} ({row['how'] or 'plain'}"
              f"{_mb(row['k'])}), predicted {row['predicted']:+.1%}, "
              f"step {cpu:.3f} s CPU ({wall:.3f} s wall), measured {cpu / base - 1:+.1%}; planned in "
              f"{row['plan_s']:.1f} s CPU")


if __name__ == "__main__":
    main()
