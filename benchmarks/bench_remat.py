"""Rematerialization (planner.remat's segment checkpointing): the smallest budget a training step fits with and
without it, and, per budget, the plan's peak, its measured peak, and its step time against the unconstrained
plan's (predicted by the cost model and measured).

    OPENBLAS_NUM_THREADS=1 python benchmarks/bench_remat.py --model mobilenet --budgets 300MB,220MB --steps 3
    OPENBLAS_NUM_THREADS=1 python benchmarks/bench_remat.py --model mentee --budgets 32MB,24MB

What is measured (cpu, one process, tracemalloc as engine.memory.measure_step): the smallest plan's peak with
every transformation and without micro-batches (nor a streamed prefix), each with segment checkpointing and
without it (the planner before it: recomputation drops at most the 4 largest activations by chains of at most 4
ops); per budget, the plan the search chooses (installed on a session by engine.memory.install), its planned and
measured peak, and the medians of process CPU time of --steps steps, all sessions in turns (robust on a shared
machine), against the unconstrained plan's.
"""
from __future__ import annotations

import argparse
import statistics
import time
import tracemalloc

import numpy as np

import tfplus as tf
import tfplus.train  # noqa: F401  (tf.train)
from tfplus import planner
from tfplus.engine.memory import install, measure_step
from tfplus.graphs import get_model, training_graph
from tfplus.planner import remat
from tfplus.runtime.facts import device_facts
from tfplus.units import format_size, parse_size


def _feeds(tg, batch: int) -> dict:
    rng = np.random.default_rng(0)
    shape = (batch,) + tuple(tg.images.shape.as_list()[1:])
    return {tg.images: rng.standard_normal(shape).astype(np.float32),
            tg.labels: rng.integers(0, 10, batch).astype(np.int32)}


def _smallest(fetches, shapes, graph, segments: bool, transformations) -> int:
    solutions = remat.solutions
    if not segments:  # the planner without segment checkpointing: no segment levels
        remat.solutions = lambda *a, **k: []
    try:
        return planner.smallest_plan(fetches, shapes, device_facts("cpu"), graph=graph,
                                     transformations=transformations).peak_bytes
    finally:
        remat.solutions = solutions


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="mobilenet")
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--budgets", default="300MB,220MB", help="budgets to plan, run and time")
    ap.add_argument("--steps", type=int, default=3, help="timed rounds (each session runs one step a round)")
    args = ap.parse_args()
    tg = training_graph(get_model(args.model).build, total_steps=1000, optimizer="momentum")
    feeds = _feeds(tg, args.batch_size)
    fetches = [tg.train_op, tg.loss]
    shapes = {t: v.shape for t, v in feeds.items()}
    print(f"{args.model}, batch {args.batch_size}, momentum, cpu")
    one_step = tuple(t for t in planner.TRANSFORMATIONS if t not in ("stream", "microbatch"))
    for transformations, what in ((planner.TRANSFORMATIONS, "every transformation"),
                                  (one_step, "no micro-batches")):
        for segments in (False, True):
            t0 = time.process_time()
            peak = _smallest(fetches, shapes, tg.graph, segments, transformations)
            print(f"  smallest feasible budget, {what}, {'with' if segments else 'without'} segment checkpointing: "
                  f"{format_size(peak, up=True)} (planned in {time.process_time() - t0:.1f} s CPU)")
    plans = {"unconstrained": planner.plan(fetches, shapes, device_facts("cpu"), graph=tg.graph)}
    for b in args.budgets.split(","):
        plans[b] = planner.plan(fetches, shapes, device_facts("cpu"), parse_size(b), graph=tg.graph)
    sessions = {}
    for name, p in plans.items():
        tracemalloc.start()
        try:
            sess = tf.Session(graph=tg.graph, memory_budget="100GB", workers=1)
            sess.run(tg.init_op)
            install(sess, fetches, p)
            sess.run(fetches, feeds)
            sessions[name] = sess, measure_step(sess, fetches, feeds)["peak"]
        finally:
            tracemalloc.stop()
    times: dict[str, list[float]] = {name: [] for name in plans}
    for _ in range(args.steps):
        for name, (sess, _) in sessions.items():
            t0 = time.process_time()
            sess.run(fetches, feeds)
            times[name].append(time.process_time() - t0)
    base = statistics.median(times["unconstrained"])
    print(f"  {'budget':>13} {'planned':>10} {'measured':>10} {'predicted':>9} {'measured':>9}  recompute")
    for name, p in plans.items():
        t = statistics.median(times[name])
        rec = next((x for x in p.transformations if x["name"] == "recompute"), None)
        what = f"{len(rec['recomputed'])} tensors, {len(rec['checkpoints'])} checkpoints, {rec['solver']}" \
            if rec else "-"
        others = [x["name"] for x in p.transformations if x["name"] not in ("schedule", "inplace", "recompute")]
        print(f"  {name:>13} {format_size(p.peak_bytes):>10} {format_size(sessions[name][1]):>10} "
              f"{p.predicted_overhead:>+9.1%} {t / base - 1:>+9.1%}  {what}"
              + (f" (+ {', '.join(others)})" if others else ""))
    print(f"  unconstrained step: {base:.3f} s CPU (median of {args.steps})")
    for sess, _ in sessions.values():
        sess.close()


if __name__ == "__main__":
    main()
