"""Host time per Mentee training step: what the executor itself costs, apart from the kernels. Not a test.

    python benchmarks/bench_host.py [--steps 200] [--budget 1GB] [--device cpu]

The step: Mentee NCHW float32, momentum SGD, the loss fetched, batch 4. After the initializer, every kernel of
the device is swapped for one that does nothing (the registry's table; the ops computing shapes keep theirs),
so a step costs only the host work around the kernels: feeds, the executor's per-op loop, output allocation,
shape handling, the fetch. Rows: the plain executor (the runtime's pool) and the planned arena (a memory
budget, micro-batching forced to 1 and to 2), each the median over `--steps` steps after a warm-up, in
microseconds per step and per executed op. On an OpenCL device the swapped kernels enqueue nothing, so the
figure is the host's share of a GPU step.
"""
from __future__ import annotations

import argparse
import statistics
import time

# Kept: the ops whose values become shapes (a shape function reads them), and the control-flow ops.
_KEEP = {"Shape", "ShapeN", "Size", "Rank", "Const", "Pack", "StridedSlice", "If", "While"}


def _null_kernels(device: str) -> dict:
    """Replaces the kernels of `device` by one that leaves its outputs as they are (the registry is a dict);
    returns the table to put back."""
    from tfplus import registry

    def nothing(ctx, ins, outs, attrs):
        pass
    saved = dict(registry.KERNELS)
    for key in saved:
        if key[1] == device and key[0] not in _KEEP:
            registry.KERNELS[key] = nothing
    return saved


def _step(device: str, steps: int, budget, force) -> tuple[float, int]:
    import numpy as np

    import tfplus as tf
    from tfplus import planner, registry
    from tfplus.graphs.mentee import training_graph
    from tfplus.runtime import parse_device
    tg = training_graph(total_steps=10 ** 6, seed=0, optimizer="momentum", nesterov=False, weight_decay=0.0,
                        schedule="const", learning_rate=0.01)
    batch = 4
    feed = {tg.images: np.zeros((batch, 3, 32, 32), np.float32), tg.labels: np.zeros(batch, np.int32)}
    fetches = [tg.train_op, tg.loss]
    with tf.Session(graph=tg.graph, device=device, memory_budget=budget) as s:
        s.run(tg.init_op)  # with the real kernels: the variables get their values
        saved = _null_kernels(parse_device(device)[0])
        if force is not None:
            from tfplus.planner.execute import install
            p = planner.plan(fetches, {t: v.shape for t, v in feed.items()}, s.runtime, graph=tg.graph,
                             force=force)
            install(s, fetches, p)
        for _ in range(5):
            s.run(fetches, feed)
        times = []
        for _ in range(steps):
            t = time.perf_counter()
            s.run(fetches, feed)
            times.append(time.perf_counter() - t)
        s.runtime.synchronize()
        registry.KERNELS.update(saved)
    n_ops = len(planner.plan(fetches, {t: v.shape for t, v in feed.items()}, device, graph=tg.graph)
                .phases[0].order)
    return statistics.median(times) * 1e6, n_ops


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--budget", default="1GB", help="the planned rows' memory budget (forced plans ignore it)")
    args = ap.parse_args(argv)
    from tfplus.runtime import get_runtime
    get_runtime(args.device)  # loads the device's kernels before they are swapped
    print(f"host time per Mentee step (batch 4, kernels do nothing) on {args.device}")
    print(f"{'executor':<34} {'us/step':>9} {'ops':>5} {'us/op':>7}")
    for name, budget, force in [("plain (runtime pool)", None, None), ("planned arena", args.budget, (1, 1)),
                                ("planned arena, 2 micro-batches", args.budget, (2, 1))]:
        us, n = _step(args.device, args.steps, budget, force)
        k = force[0] if force else 1
        print(f"{name:<34} {us:9.0f} {n * k:5d} {us / (n * k):7.1f}")


if __name__ == "__main__":
    main()
