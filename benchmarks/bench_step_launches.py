"""Kernel launches of one Mentee (or MobileNet: --model mobilenet) training step on the opencl device, by op
type, with the graph rewrite (tfplus.engine.rewrite) on and off in the same run; and the launch geometry of the
per-channel bias-gradient sums (kernels/opencl/fused.py channel_sums) for the step's shapes. Not a test.

The step is training_graph's default (momentum with Nesterov, weight decay 5e-4 on the 8 weights, cosine
schedule), the one `tfplus train` and `tfplus profile` run, unlike bench_gpu_step.py's (no weight decay).

    python benchmarks/bench_step_launches.py                         # batch 128, this device's compute units
    python benchmarks/bench_step_launches.py --compute-units 132     # launch plans as on an H100 (132 SMs)
    python benchmarks/bench_step_launches.py --optimizer adam
    python benchmarks/bench_step_launches.py --weight-decay 0 --schedule const   # bench_gpu_step.py's step
    python benchmarks/bench_step_launches.py --model mobilenet --batch 32 --steps 3   # MobileNet's, timed too
"""
from __future__ import annotations

import argparse
import collections


def count(batch: int, rewrite: bool, compute_units: int | None, model: str = "mentee", steps: int = 0,
          **graph) -> tuple[collections.Counter, float]:
    """Launches (rt.run calls) per op type of the second step (the first builds programs and plans), and the
    median seconds of `steps` more steps (0: the counted step's)."""
    import time

    import numpy as np

    import tfplus as tf
    import tfplus.kernels.opencl  # noqa: F401  (registers the kernels wrapped below)
    from tfplus import registry
    from tfplus.graphs.mentee import training_graph
    from tfplus.graphs.mobilenet import mobilenet
    current, counts = ["?"], collections.Counter()
    saved = dict(registry.KERNELS)
    for key, fn in saved.items():  # note which op's kernel is launching
        if key[1] == "opencl":
            def wrapped(ctx, ins, outs, attrs, fn=fn, op=key[0]):
                outer, current[0] = current[0], op
                try:
                    return fn(ctx, ins, outs, attrs)
                finally:
                    current[0] = outer
            registry.KERNELS[key] = wrapped
    tg = training_graph(mobilenet, total_steps=1000, seed=0, **graph) if model == "mobilenet" else \
        training_graph(total_steps=1000, seed=0, **graph)
    rng = np.random.default_rng(0)
    feed = {tg.images: rng.standard_normal((batch, 3, 32, 32)).astype(np.float32),
            tg.labels: rng.integers(0, 10, batch).astype(np.int32)}
    config = tf.ConfigProto(graph_options=tf.GraphOptions(rewrite_options=tf.RewriterConfig(
        remapping=tf.RewriterConfig.DEFAULT if rewrite else tf.RewriterConfig.OFF)))
    try:
        with tf.Session(graph=tg.graph, device="opencl", config=config) as s:
            rt = s.runtime
            if compute_units:
                rt.info = {**rt.info, "compute_units": compute_units}  # this runtime's launch plans follow it
            s.run(tg.init_op)
            s.run([tg.train_op, tg.loss], feed)
            run = rt.run

            def counted(*args):
                counts[current[0]] += 1
                return run(*args)
            rt.run = counted
            t = time.perf_counter()
            s.run([tg.train_op, tg.loss], feed)
            times = [time.perf_counter() - t]
            rt.run = run
            if steps:
                times = []
            for _ in range(steps):
                t = time.perf_counter()
                s.run([tg.train_op, tg.loss], feed)
                times.append(time.perf_counter() - t)
            seconds = sorted(times)[len(times) // 2]
    finally:
        registry.KERNELS.clear()
        registry.KERNELS.update(saved)
    return counts, seconds


def geometry(batch: int, compute_units: int) -> None:
    """Work-groups, items and bytes of channel_sums for Mentee's bias gradients (float32)."""
    from tfplus.kernels.opencl.fused import _WG, _chunks, _geometry
    shapes = [((batch, 32, 32, 32), "NCHW"), ((batch, 32, 32, 32), "NCHW"), ((batch, 64, 16, 16), "NCHW"),
              ((batch, 64, 16, 16), "NCHW"), ((batch, 128, 8, 8), "NCHW"), ((batch, 256), "NHWC"),
              ((batch, 128), "NHWC"), ((batch, 10), "NHWC")]
    print(f"channel sums at {compute_units} compute units (work-groups of {_WG}; before: one group per channel)")
    for shape, fmt in shapes:
        outer, c, inner = _geometry(shape, fmt)
        chunks, chunk = _chunks(shape, fmt, compute_units)
        blocks = c if inner > 1 else -(-c // _WG)
        n = outer * c * inner
        print(f"  {str(shape):20s} {fmt}: {chunks * blocks:5d} groups (was {c:4d}), {chunk:6d} "
              f"{'elements' if inner > 1 else 'rows'} each; reads {2 * 4 * n / 1e6:.2f} MB, writes "
              f"{4 * n / 1e6:.2f} MB + {4 * chunks * c} B partials; second pass: {'yes' if chunks > 1 else 'no'}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", choices=("mentee", "mobilenet"), default="mentee")
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--optimizer", default="momentum")
    p.add_argument("--weight-decay", type=float, default=5e-4)
    p.add_argument("--schedule", default="cosine")
    p.add_argument("--compute-units", type=int, default=None, help="plan launches as for this many (e.g. 132)")
    p.add_argument("--steps", type=int, default=0, help="also time this many steps (median) after the counted one")
    args = p.parse_args()
    from tfplus.runtime import opencl
    units = args.compute_units or opencl.OpenCLRuntime().info["compute_units"]
    if args.model == "mentee":
        geometry(args.batch, units)
    graph = {"optimizer": args.optimizer, "weight_decay": args.weight_decay, "schedule": args.schedule}
    on, t_on = count(args.batch, True, args.compute_units, args.model, args.steps, **graph)
    off, t_off = count(args.batch, False, args.compute_units, args.model, args.steps, **graph)
    how = f"median of {args.steps}" if args.steps else "the counted step"
    print(f"launches per {args.model} step (batch {args.batch}, {graph}): rewrite on {sum(on.values())} "
          f"({t_on * 1e3:.0f} ms, {how}), off {sum(off.values())} ({t_off * 1e3:.0f} ms)")
    for op in sorted(set(on) | set(off), key=lambda o: (-max(on[o], off[o]), o)):
        print(f"  {op:38s} {on[op]:4d} {off[op]:4d}")


if __name__ == "__main__":
    main()
