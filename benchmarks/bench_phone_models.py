"""Floors of models users train on phones, none of them tfplus.graphs' (tests/phonezoo.py, issue 34): per model,
the smallest budget a budgeted session plans (the largest of the initializer's and the training step's floors,
planner.floor_plan, as step_budget does), as a share of the unconstrained plan's peak, what the floor's plan does,
and its step time against the unbudgeted step's on the same device (medians of --steps steps after two warm-ups).

    python benchmarks/bench_phone_models.py [--batch 32] [--size 8] [--devices cpu] [--models resnet,unet]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))  # the models' module

import phonezoo  # noqa: E402

import tfplus as tf  # noqa: E402
from tfplus import planner  # noqa: E402
from tfplus.runtime.facts import device_facts  # noqa: E402


def _step_seconds(case, device: str, budget: int | None, steps: int) -> float:
    with tf.Session(graph=case.graph, device=device, memory_budget=budget) as sess:
        phonezoo.start(sess, case)
        times = []
        for _ in range(steps + 2):
            t0 = time.perf_counter()
            sess.run(case.fetches, case.feeds)
            times.append(time.perf_counter() - t0)
    return statistics.median(times[2:])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--size", type=int, default=8)
    ap.add_argument("--devices", default="cpu")
    ap.add_argument("--models", default=",".join(phonezoo.NAMES))
    ap.add_argument("--steps", type=int, default=5)
    args = ap.parse_args()
    print("| model | device | unconstrained peak | floor | floor / peak | floor's plan | step time at the floor |")
    print("|---|---|---:|---:|---:|---|---:|")
    for name in args.models.split(","):
        for device in args.devices.split(","):
            case = phonezoo.build(tf, name, args.batch, args.size)
            facts = device_facts(device)
            t0 = time.perf_counter()
            with tf.Session(graph=case.graph, device=device, memory_budget="1GB") as sess:
                steps = sess.step(case.fetches, case.feeds), sess.step(case.init)
                floors = [planner.floor_plan(s.fetches, s.feed_shapes, facts, graph=s.graph) for s in steps]
                free = planner.plan(steps[0].fetches, steps[0].feed_shapes, facts, graph=steps[0].graph).peak_bytes
            searched = time.perf_counter() - t0
            low = max(f.budget_bytes for f in floors)
            how = ", ".join(sorted({t["name"] for t in floors[0].transformations} - {"schedule", "inplace"}))
            how += f" (k={floors[0].microbatches})" if floors[0].microbatches > 1 else ""
            ratio = _step_seconds(case, device, low, args.steps) / _step_seconds(case, device, None, args.steps)
            print(f"| {name} | {device} | {free / 1e3:.1f} kB | {low / 1e3:.1f} kB | {low / free:.3f} | {how} | "
                  f"{ratio:.2f}x |  <!-- floor search {searched:.0f} s -->", flush=True)


if __name__ == "__main__":
    main()
