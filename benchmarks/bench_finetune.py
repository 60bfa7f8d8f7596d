"""Fine-tuning on CIFAR-10 (issue 15): pre-train Mentee on classes 0-4, then train on classes 5-9 starting from
it (the last layer, the last N layers, all layers) or from scratch; test accuracy on classes 5-9, time, memory.

    OPENBLAS_NUM_THREADS=1 python benchmarks/bench_finetune.py --data DIR --pre-steps 150 --steps 60
    python benchmarks/bench_finetune.py --data DIR --pre-steps 1950 --steps 390 --last 1,3   # longer, e.g. GPU box

Labels keep their numbers (trainer.only_classes), so the pre-trained 10-way head is the starting point. Each run
uses the same recipe (momentum, cosine schedule over its own steps); memory is the planned peak of one step
(tfplus.planner, no budget) and the process's peak RSS so far (which only grows over the runs).
"""
from __future__ import annotations

import argparse
import io
import os
import tempfile

from tfplus import finetune, planner
from tfplus.graphs import get_model, training_graph
from tfplus.trainer import TrainConfig, train
from tfplus.units import format_size


def _planned_peak(last: int | None, batch: int) -> int:
    pick = None if last is None else (lambda vs: finetune.select_trainable(vs, fine_tune_last=last))
    tg = training_graph(get_model("mentee").build, total_steps=10, var_list=pick)
    shapes = {tg.images: (batch, 3, 32, 32), tg.labels: (batch,)}
    return planner.plan([tg.train_op, tg.loss], shapes, "cpu", graph=tg.graph).peak_bytes


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", required=True, help="the folder of cifar-10-batches-bin")
    ap.add_argument("--pre-steps", type=int, default=150, help="pre-training steps on classes 0-4")
    ap.add_argument("--steps", type=int, default=60, help="steps of each run on classes 5-9")
    ap.add_argument("--last", default="1,3", help="the --fine-tune-last values to run (besides all and scratch)")
    ap.add_argument("--batch-size", type=int, default=128)
    args = ap.parse_args(argv)
    common = {"data": args.data, "batch_size": args.batch_size, "augment": False, "download": False,
              "log_every": 10**9}
    with tempfile.TemporaryDirectory() as tmp:
        pre_dir = os.path.join(tmp, "pre")
        pre = train(TrainConfig(classes=tuple(range(5)), steps=args.pre_steps, checkpoint_dir=pre_dir, **common),
                    out=io.StringIO(), err=io.StringIO())
        print(f"pre-trained on classes 0-4: {args.pre_steps} steps, test accuracy (0-4) "
              f"{100 * pre.final_test_accuracy:.2f}%, {pre.total_time_s:.0f} s")
        runs = [(f"last {n}", int(n), pre_dir) for n in args.last.split(",") if n] + \
            [("all layers", None, pre_dir), ("from scratch", None, None)]
        print(f"{'classes 5-9':>14}  {'test acc':>8}  {'train time':>10}  {'s/step':>6}  {'planned peak':>12}  "
              "RSS peak")
        for name, last, init in runs:
            r = train(TrainConfig(classes=tuple(range(5, 10)), steps=args.steps, fine_tune_last=last,
                                  init_from=init, **common), out=io.StringIO(), err=io.StringIO())
            seconds = sum(row["epoch_time_s"] for row in r.history)   # training only, evaluation left out
            print(f"{name:>14}  {100 * r.final_test_accuracy:7.2f}%  {seconds:9.0f}s  "
                  f"{seconds / args.steps:6.2f}  {format_size(_planned_peak(last, args.batch_size)):>12}  "
                  f"{format_size(r.peak_bytes)}", flush=True)


if __name__ == "__main__":
    main()
