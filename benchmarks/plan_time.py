"""Planning time of one training step per model (batch 128, momentum), for cpu and opencl device facts (no device
needed: the planner reasons about sizes), as `tfplus plan` and a session plan it (the graph rewritten). Not a test.

    python benchmarks/plan_time.py                                   # every model in tfplus.graphs, both kinds
    python benchmarks/plan_time.py --models seqnet,seqnet-bi --before seqnet   # and the previous placement, in turns

Each plan is made afresh (a new planner step: orders, lifetimes, arena) after one untimed plan has loaded the
kernels' declarations and networkx. Printed: wall and process CPU time of the plan (CPU time is the work done,
robust on a shared machine), the arena and its liveness bound. `--before MODELS` also plans those models with the
arena placement this tree replaced (the sweeps, then greedy passes by size over all 29 orderings, without the
breadth passes; kept below), right after the same plan with the current one. `--orderings` also places each plan's
buffers with every sweep, the first breadth pass and every size ordering the placement may try, each run to the
end, and prints its arena above the bound (which wins, and by how much) and its CPU time, as `s168K/0.01s` (s a
sweep, b the breadth pass, g an ordering, j a jittered one). `--placement` times the placement alone on each plan's
buffers, the previous one and the current one in turns (least of two runs each), with each arena above the bound.
"""
from __future__ import annotations

import argparse
import importlib
import random
import time


def _size_orderings(buffers, seed=0):
    """The arena placement before the breadth passes (tfplus/planner/arena.py as of d29c249): the sweeps, then a
    greedy pass by size for each ordering until one reaches the liveness bound, each stopped once it reaches the
    best so far."""
    from tfplus.planner import arena
    if not buffers:
        return 0
    bound = arena.lower_bound(buffers)
    best_size, best = None, None
    for key in arena._SWEEPS:
        ordered = sorted(buffers, key=key)
        offsets = arena._sweep(ordered)
        size = max(o + b.size for o, b in zip(offsets, ordered))
        if best_size is None or size < best_size:
            best_size, best = size, (ordered, offsets)
    leaves = 1 << max(b.end for b in buffers).bit_length()
    cover = {id(b): arena._cover(b.start, b.end, leaves) for b in buffers}
    rng = random.Random(seed)
    for key in list(arena._ORDERINGS) + [arena._jittered(rng) for _ in range(arena._TRIES)]:
        if best_size <= bound:
            break
        ordered = sorted(buffers, key=key)
        offsets = arena._greedy(ordered, cover, best_size)
        if len(offsets) == len(ordered):
            best_size, best = max(o + b.size for o, b in zip(offsets, ordered)), (ordered, offsets)
    for b, o in zip(*best):
        b.offset = o
    return best_size


def _orderings(buffers) -> None:
    """Prints, for each sweep, the first breadth pass and each size ordering of tfplus/planner/arena.py, its arena
    above the liveness bound in KB and the CPU seconds it took, each run to the end (the placement stops a pass
    that cannot win, and the search once an arena is at the bound)."""
    from tfplus.planner import arena
    bound = arena.lower_bound(buffers)
    leaves = 1 << max(b.end for b in buffers).bit_length()
    cover = {id(b): arena._cover(b.start, b.end, leaves) for b in buffers}
    rng = random.Random(0)
    widest = arena._widest(buffers)
    breadth = ("breadth", lambda b: (-widest[id(b)], -b.size, b.start - b.end))  # assign_offsets' first one
    tries = [("sweep", k) for k in arena._SWEEPS] + [breadth] + [("greedy", k) for k in arena._ORDERINGS]
    tries += [("jitter", arena._jittered(rng)) for _ in range(arena._TRIES)]
    row = []
    for kind, key in tries:
        c = time.process_time()
        ordered = sorted(buffers, key=key)
        offsets = arena._sweep(ordered) if kind == "sweep" else arena._greedy(ordered, cover, 1 << 62)
        size = max(o + b.size for o, b in zip(offsets, ordered))
        row.append(f"{kind[0]}{(size - bound) >> 10}K/{time.process_time() - c:.2f}s")
    print("    " + " ".join(row), flush=True)


def _placement(buffers) -> None:
    """Prints the CPU seconds of placing `buffers` (copies) with the previous placement and the current one in
    turns, the least of two runs each, and each arena above the liveness bound in bytes."""
    from tfplus.planner import arena
    from tfplus.planner.liveness import Buffer
    bound = arena.lower_bound(buffers)
    seconds: dict = {}
    over = {}
    for _ in range(2):
        for name, offsets in (("size", _size_orderings), ("breadth", arena.assign_offsets)):
            copies = [Buffer(**vars(b)) for b in buffers]
            arena._placed.cache_clear()  # a placement, not a recall of the last run's
            c = time.process_time()
            over[name] = offsets(copies) - bound
            seconds[name] = min(seconds.get(name, 1e9), time.process_time() - c)
    print(f"    placement: size orderings {seconds['size']:.2f} s ({over['size']} B over the bound), breadth "
          f"{seconds['breadth']:.2f} s ({over['breadth']} B over)", flush=True)


def main() -> None:
    from tfplus.graphs import MODELS
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--devices", default="cpu,opencl")
    ap.add_argument("--before", default="", help="models also planned with the previous arena placement")
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--orderings", action="store_true", help="each ordering's arena above the bound, and its time")
    ap.add_argument("--placement", action="store_true",
                    help="the placement alone on each plan's buffers, the previous one and this one in turns")
    args = ap.parse_args()

    from tfplus.engine.rewrite import optimize
    from tfplus.graphs import get_model, training_graph
    from tfplus.planner import DeviceFacts
    from tfplus.units import format_size
    plan_module = importlib.import_module("tfplus.planner.plan")  # the module (tfplus.planner.plan is the function)
    current = plan_module.assign_offsets

    def planned(model, device, offsets):
        tg = training_graph(get_model(model).build, total_steps=1000, optimizer="momentum",
                            image_shape=get_model(model).image_shape)
        fetches, fed = [tg.train_op, tg.loss], (tg.images, tg.labels)
        rw = optimize(tg.graph, fetches, set(fed))
        shapes = {rw.element[tg.images]: (args.batch_size,) + tuple(tg.images.shape.as_list()[1:]),
                  rw.element[tg.labels]: (args.batch_size,)}
        plan_module.assign_offsets = offsets
        importlib.import_module("tfplus.planner.arena")._placed.cache_clear()  # plans afresh: no placement recalled
        try:
            w, c = time.perf_counter(), time.process_time()
            p = plan_module.plan([rw.element[f] for f in fetches], shapes, DeviceFacts(device, device),
                                 graph=rw.graph)
            return time.perf_counter() - w, time.process_time() - c, p
        finally:
            plan_module.assign_offsets = current

    for device in args.devices.split(","):  # loads the kernels' declarations and networkx
        importlib.import_module({"cpu": "tfplus.kernels.numpy", "opencl": "tfplus.kernels.opencl"}[device])
        planned("lenet", device, current)
    before = set(filter(None, args.before.split(",")))
    print(f"{'model':14s} {'device':7s} {'arena':>9s} {'wall s':>8s} {'cpu s':>8s}  {'buffers':>7s} "
          f"{'arena':>10s} {'bound':>10s}")
    for model in args.models.split(","):
        for device in args.devices.split(","):
            for name, offsets in [("breadth", current)] + ([("size", _size_orderings)]
                                                          if model in before else []):
                wall, cpu, p = planned(model, device, offsets)
                print(f"{model:14s} {device:7s} {name:>9s} {wall:8.2f} {cpu:8.2f}  {len(p.buffers):7d} "
                      f"{format_size(p.arena_bytes):>10s} {format_size(p.arena_lower_bound_bytes):>10s}",
                      flush=True)
                placed = p.buffers if p.lane_block is None else \
                    [b for b in p.buffers if b not in p.lane_offsets] + [p.lane_block]
                if args.orderings and name == "breadth":
                    _orderings(placed)
                if args.placement and name == "breadth":
                    _placement(placed)


if __name__ == "__main__":
    main()
