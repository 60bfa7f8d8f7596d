"""The smallest feasible budget of each model's training step (`tfplus plan`'s floor: step_budget.floor of the runs
`tfplus train` makes) with the optimizer's slots paged to the host (planner.paging, the planner's choice) and
without ("page" left out of the transformations), and what the floor's plan pages. Not a test.

    python benchmarks/bench_paged_floors.py --device opencl --models mentee,mobilenet,seqnet --batch 128
    python benchmarks/bench_paged_floors.py --device cpu --models mentee      # the cpu never pages: equal floors
"""
from __future__ import annotations

import argparse
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="opencl")
    ap.add_argument("--models", default="mentee,mobilenet,seqnet")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--optimizer", default="momentum", choices=("momentum", "adam"))
    args = ap.parse_args()
    from tfplus.plan_cli import _TrainStep
    from tfplus.planner import TRANSFORMATIONS
    from tfplus.units import format_size
    resident = tuple(t for t in TRANSFORMATIONS if t != "page")
    print(f"batch {args.batch}, {args.optimizer}, on {args.device}")
    print(f"{'model':<10} {'floor, slots resident':>22} {'floor, paging priced':>21} {'saved':>7}  "
          "floor plan (paged): slots paged, staging, predicted")
    for model in args.models.split(","):
        step = _TrainStep(argparse.Namespace(model=model, conv_widths=None, fc_widths=None, optimizer=args.optimizer,
                                             data_format="NCHW", trainable=None, fine_tune_last=None, input=None,
                                             batch_size=args.batch, device=args.device))
        t0 = time.perf_counter()
        before = step.floor(args.batch, resident)[0]
        after = step.floor(args.batch, TRANSFORMATIONS)[0]
        pg = after.paging
        what = "no slot paged" if pg is None else \
            f"{len(pg.slots)} slots ({format_size(pg.paged_bytes)}), staging {format_size(max(pg.staging.values()))}"
        print(f"{model:<10} {format_size(before.budget_bytes, up=True):>22} "
              f"{format_size(after.budget_bytes, up=True):>21} "
              f"{1 - after.budget_bytes / before.budget_bytes:>7.1%}  {what}, {after.predicted_overhead:+.1%} "
              f"({time.perf_counter() - t0:.0f} s)", flush=True)


if __name__ == "__main__":
    main()
