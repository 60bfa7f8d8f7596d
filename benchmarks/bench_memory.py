"""Memory of one Mentee training step (batch 128, momentum SGD): plan vs measurement, time vs budget.

    OPENBLAS_NUM_THREADS=1 python benchmarks/bench_memory.py          # cpu; a few minutes on 2 cores
    python benchmarks/bench_memory.py --device opencl --max-batch ''   # the GPU (or PoCL)
    python benchmarks/bench_memory.py --steps 5 --budgets none,64MB,32MB,24MB --json out.json
    python benchmarks/bench_memory.py --fine-tune-last 1 --budgets none,16MB --max-batch ''   # fc3 alone trains
    python benchmarks/bench_memory.py --fine-tune-last 1 --budgets none,16MB --max-batch '' --without stream
        # the streamed prefix (frozen features in micro-batches) against whole-step micro-batches, same run
    python benchmarks/bench_memory.py --device opencl --budgets none,64MB,32MB,24MB --without recompute
        # each budget also planned without recomputation (the planner before it), in the same run

What is measured (tracemalloc traces NumPy's data allocations and Python objects):
- planned peak: variables + feeds + arena, from the plan; lower bound: variables + feeds + the liveness bound.
- measured peak (engine.memory.measure_step, tracing from the Session's creation): the NumPy data alive
  when a steady-state step starts (variables, slots, the arena, kernels' caches), plus the most tracemalloc
  saw allocated on top during the step (kernel temporaries, NumPy's ufunc buffers, fetch copies, the
  executor's Python objects), plus the fed arrays. The planner's own Python objects are not step memory.
  measured / planned is printed; what remains is NumPy's ufunc buffers (at most np.getbufsize() elements per
  operand) and a few Python objects.
- unplanned: the same for the plain executor (every output a fresh array, freed after its last use).
- step time: all sessions run in turns, --steps rounds; medians of process CPU time (robust on a shared
  machine; run with OPENBLAS_NUM_THREADS=1 so that it is also the work done) and of wall time. Overheads are
  CPU-time ratios against the plain executor and against the unconstrained plan.
- max batch per budget: the largest batch one step holds (schedule, in-place, chunking; `tfplus plan
  --max-batch`), and the largest with micro-batching too (limited mostly by the fed images).
- opencl: measured from the runtime's own ledger of device memory (OpenCLRuntime.peak_bytes: the buffers the
  device's tensors hold, in the pool's size classes; the arena at its exact size), its most during a
  steady-state step, fed batch included (engine.memory.measure_device_step). Times are wall times.
References: PyTorch CPU needs ~207 MB transient per step (522 MB RSS); a plain NumPy step ~450 MB.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
import tracemalloc

import numpy as np

import tfplus as tf
import tfplus.train  # noqa: F401  (tf.train)
from tfplus import finetune, planner
from tfplus.engine.memory import audit_step, install, measure_device_step, measure_step
from tfplus.graphs import get_model, training_graph
from tfplus.runtime.facts import device_facts
from tfplus.units import format_size, parse_size


def _feeds(tg, batch: int, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    shape = (batch,) + tuple(tg.images.shape.as_list()[1:])
    return {tg.images: rng.standard_normal(shape).astype(np.float32),
            tg.labels: rng.integers(0, 10, batch).astype(np.int32)}


def _session(tg, feeds: dict, budget, device: str, plan=None) -> tuple:
    """A warmed-up session and the measured peak bytes of one step (see the module docstring); the step runs
    by `plan` if given (engine.memory.install), else by the session's own plan for `budget`."""
    fetches = [tg.train_op, tg.loss]
    if device != "cpu":
        sess = tf.Session(graph=tg.graph, device=device, memory_budget=budget)
        others = sess.runtime.in_use_bytes  # the ledger is the device's: the other sessions' tensors
        sess.run(tg.init_op)
        if plan is not None:
            install(sess, fetches, plan)
        sess.run(fetches, feeds)  # plans, allocates the arena, builds the programs
        m = measure_device_step(sess, fetches, feeds)
        if m["allocations"]:
            print(f"note: a steady-state step made {m['allocations']} new device buffers")
        return sess, m["peak"] - others
    tracemalloc.start()
    try:
        sess = tf.Session(graph=tg.graph, memory_budget=budget, workers=1)  # this process's memory: no workers
        sess.run(tg.init_op)
        if plan is not None:
            install(sess, fetches, plan)
        sess.run(fetches, feeds)  # plans and allocates the arena
        return sess, measure_step(sess, fetches, feeds)["peak"]
    finally:
        tracemalloc.stop()


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="mentee")
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--steps", type=int, default=5, help="timed rounds (each session runs one step a round)")
    ap.add_argument("--budgets", default="none,64MB,32MB,24MB", help="'none' is the plain executor and the "
                    "unconstrained plan")
    ap.add_argument("--max-batch", default="64MB,32MB,24MB",
                    help="budgets to find the max batch for ('' skips)")
    ap.add_argument("--device", default="cpu", help="cpu (default) or opencl[:N]")
    ap.add_argument("--fine-tune-last", type=int, metavar="N", help="train the last N layers only (the rest "
                    "frozen: tfplus.finetune)")
    ap.add_argument("--without", metavar="NAME", choices=planner.TRANSFORMATIONS,
                    help="also run each budget planned without this transformation (e.g. recompute)")
    ap.add_argument("--json", metavar="FILE")
    args = ap.parse_args(argv)
    if args.device.partition(":")[0] not in ("cpu", "opencl"):
        ap.error(f"--device: unknown device {args.device!r}; use cpu or opencl[:N]")
    on_cpu = args.device == "cpu"

    pick = None if args.fine_tune_last is None else \
        (lambda vs: finetune.select_trainable(vs, fine_tune_last=args.fine_tune_last))
    tg = training_graph(get_model(args.model).build, total_steps=1000, optimizer="momentum", var_list=pick)
    feeds = _feeds(tg, args.batch_size)
    shapes = {t: v.shape for t, v in feeds.items()}
    fetches = [tg.train_op, tg.loss]
    report: dict = {"model": args.model, "batch_size": args.batch_size, "device": args.device,
                    "fine_tune_last": args.fine_tune_last, "runs": {},
                    "max_batch": {}}

    t0 = time.perf_counter()
    free = planner.plan(fetches, shapes, device_facts(args.device), graph=tg.graph)
    report["plan_seconds"] = time.perf_counter() - t0
    print(f"{args.model} batch {args.batch_size}: planned in {report['plan_seconds'] * 1e3:.0f} ms")
    print(free.summary())

    configs = {}
    for name in [b.strip() for b in args.budgets.split(",") if b.strip()]:
        if name == "none":
            configs["plain"] = None
            configs["unconstrained"] = 10**12
        else:
            configs[name] = parse_size(name, "--budgets")
            if args.without:
                configs[f"{name} w/o {args.without}"] = configs[name]
    sessions = {}
    for name, budget in configs.items():
        row = report["runs"][name] = {"budget_bytes": budget if name != "unconstrained" else None}
        q = None
        if budget is not None:
            allowed = tuple(t for t in planner.TRANSFORMATIONS if not name.endswith(f" w/o {t}"))
            q = planner.plan(fetches, shapes, device_facts(args.device), budget, graph=tg.graph,
                             transformations=allowed)
            row.update(planned_peak_bytes=q.peak_bytes, lower_bound_bytes=q.lower_bound_bytes,
                       arena_bytes=q.arena_bytes, arena_lower_bound_bytes=q.arena_lower_bound_bytes,
                       transformations=q.transformations, predicted_overhead=q.predicted_overhead)
        sessions[name], row["measured_peak_bytes"] = _session(tg, feeds, budget, args.device,
                                                              q if args.without and budget != 10**12 else None)
        if name == "unconstrained" and on_cpu:
            row["kernel_temporaries"] = audit_step(sessions[name], fetches, feeds)
    times: dict = {name: [] for name in sessions}
    for _ in range(args.steps):
        for name, sess in sessions.items():
            c0, w0 = time.process_time(), time.perf_counter()
            sess.run(fetches, feeds)
            times[name].append((time.process_time() - c0, time.perf_counter() - w0))
    for sess in sessions.values():
        sess.close()
    # Overheads compare CPU time on the cpu device, wall time (the loss fetch waits for the device) elsewhere.
    clock = 0 if on_cpu else 1
    base = {k: statistics.median(t[clock] for t in times[k]) for k in ("plain", "unconstrained") if k in times}
    for name, row in report["runs"].items():
        row["cpu_seconds"] = statistics.median(c for c, _ in times[name])
        row["wall_seconds"] = statistics.median(w for _, w in times[name])
        mine = row["cpu_seconds"] if on_cpu else row["wall_seconds"]
        row["overhead_vs_plain"] = mine / base["plain"] - 1 if "plain" in base else None
        row["overhead_vs_unconstrained"] = (mine / base["unconstrained"] - 1 if "unconstrained" in base else None)
        planned = row.get("planned_peak_bytes")
        if planned is not None:
            row["measured_over_planned"] = row["measured_peak_bytes"] / planned
        head = "" if planned is None else (
            f"planned {format_size(planned)} (bound {format_size(row['lower_bound_bytes'])}, arena "
            f"{format_size(row['arena_bytes'])} / bound {format_size(row['arena_lower_bound_bytes'])}), ")
        print(f"{name:>20}: " + head
              + f"measured {format_size(row['measured_peak_bytes'])}"
              + ("" if planned is None else f" (measured/planned {row['measured_over_planned']:.4f})")
              + f", step {row['cpu_seconds']:.3f} s CPU "
              f"({row['wall_seconds']:.3f} s wall)"
              + ("" if row["overhead_vs_plain"] is None else f", {row['overhead_vs_plain']:+.1%} vs plain")
              + ("" if row["overhead_vs_unconstrained"] is None or name == "plain"
                 else f", {row['overhead_vs_unconstrained']:+.1%} vs unconstrained plan")
              + ("" if planned is None else f", predicted {row['predicted_overhead']:+.1%}")
              + "".join(f"\n               + {t['name']}: {t['detail']}"
                        for t in row.get("transformations", ())))
    temps = report["runs"].get("unconstrained", {}).get("kernel_temporaries", {})
    if temps:
        print("kernels allocating memory of their own (not in the plan): "
              + ", ".join(f"{k} {format_size(v)}" for k, v in list(temps.items())[:6]))

    if args.max_batch:
        from tfplus.plan_cli import _TrainStep
        step = _TrainStep(argparse.Namespace(model=args.model, optimizer="momentum", data_format="NCHW",
                                             device=args.device))
        for name in [b.strip() for b in args.max_batch.split(",") if b.strip()]:
            budget = parse_size(name, "--max-batch")
            one, micro = step.max_batch(budget, ("chunk",)), step.max_batch(budget)
            report["max_batch"][name] = {"one_step": one, "with_microbatching": micro}
            print(f"max batch within {name}: {one} ({micro} with micro-batching)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2, default=str)


if __name__ == "__main__":
    main()
