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

--replay instead compares a model's step (tfplus.graphs, its training_graph) replayed from its recorded launches
and launched op by op (TFPLUS_OPENCL_REPLAY=0: what a step that draws random numbers, AlexNet's dropout, did
before issue 34's stop 45): the launchers' launches and the tape's enqueues per step, the host's ms per step
(sess.run of the train op, which reads nothing back) and the step's ms (to the device's finish), medians:

    python benchmarks/bench_step_launches.py --replay --model alexnet --small --batch 4 --steps 20   # PoCL
    python benchmarks/bench_step_launches.py --replay --model alexnet --batch 128 --steps 50         # a GPU

--replay --stream CUT,K[,keep] runs the session's step streamed at tensor CUT in K micro-batches (planner.stream;
keep: keeping its pools' argmax, Prefix.keep) replayed as one tape of all its runs (memory.Bound._as_one_tape), and
as before issue 34's stop 45 each run's program by its own tape, Python between them ("per run"):

    python benchmarks/bench_step_launches.py --replay --model mentee --small --batch 16 --stream MaxPool:0,2,keep
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


# --small: each model's widths and image size at which a CPU OpenCL device (PoCL) runs a step in well under a second
SMALL = {"alexnet": ({"conv_widths": (16, 32, 32, 32, 32), "fc_widths": (64, 64)}, (3, 67, 67)),
         "mentee": ({"conv_widths": (8, 8, 16, 16, 16), "fc_widths": (32, 16)}, None),
         "mobilenet": ({"conv_widths": (8, 16, 16)}, None)}


def replay_compare(model: str, batch: int, steps: int, small: bool, stream: str | None = None) -> dict[str, dict]:
    """Per mode ("replayed", "op by op"; with `stream`, "one tape", "per run"): launcher launches, tape plays and
    tape enqueues of a step, median host and step ms."""
    import os

    import numpy as np

    from tfplus.graphs import get_model, training_graph
    m = get_model(model)
    kwargs, image = SMALL[model] if small else ({}, None)
    tg = training_graph(m.build, total_steps=1000, seed=0, model_kwargs=kwargs, image_shape=image or m.image_shape)
    c, h, w = tg.images.shape.as_list()[1:]
    rng = np.random.default_rng(0)
    feed = {tg.images: rng.standard_normal((batch, c, h, w)).astype(np.float32),
            tg.labels: rng.integers(0, 10, batch).astype(np.int32)}
    result = {}
    if stream is not None:
        from tfplus.engine.memory import Bound
        one_tape = Bound._streamed
        for mode, streamed in (("one tape", one_tape), ("per run", Bound._stream_passes)):
            Bound._streamed = streamed
            try:
                result[mode] = _replay_mode(tg, feed, steps, stream)
            finally:
                Bound._streamed = one_tape
        return result
    for mode, flag in (("replayed", "1"), ("op by op", "0")):
        os.environ["TFPLUS_OPENCL_REPLAY"] = flag  # read by the session's runtime when it is made
        result[mode] = _replay_mode(tg, feed, steps)
    del os.environ["TFPLUS_OPENCL_REPLAY"]
    return result


def _replay_mode(tg, feed: dict, steps: int, stream: str | None = None) -> dict:
    import statistics
    import time

    import tfplus as tf
    from tfplus import planner
    from tfplus.runtime.facts import device_facts
    with tf.Session(graph=tg.graph, device="opencl", memory_budget=None if stream is None else "1TB") as s:
        rt = s.runtime
        if stream is not None:
            cut, k, *keep = stream.split(",")
            step = s.step(tg.train_op, feed)
            step.use_plan(planner.plan(step.fetches, step.feed_shapes, device_facts(rt), graph=step.graph,
                                       force=(1, 1, False, 1, 0, (cut, int(k), 1, 0, keep == ["keep"]))))
        s.run(tg.init_op)
        for _ in range(6):  # shapes, a plan for the repeated step, two recordings
            s.run(tg.train_op, feed)
        rt.synchronize()
        launched, enqueued, plays = [0], [0], [0]
        run, play = rt.run, rt.tape_play

        def counted(*args):
            launched[0] += 1
            return run(*args)

        def played(tape, *args):
            ok = play(tape, *args)
            enqueued[0] += tape.launches if ok else 0
            plays[0] += 1
            return ok
        rt.run, rt.tape_play = counted, played
        s.run(tg.train_op, feed)
        rt.synchronize()
        rt.run, rt.tape_play = run, play
        host, step = [], []
        for _ in range(steps):
            t = time.perf_counter()
            s.run(tg.train_op, feed)
            host.append(time.perf_counter() - t)
            rt.synchronize()
            step.append(time.perf_counter() - t)
    return {"launched": launched[0], "enqueued": enqueued[0], "plays": plays[0],
            "host_ms": statistics.median(host) * 1e3, "step_ms": statistics.median(step) * 1e3}


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
    p.add_argument("--model", choices=("mentee", "mobilenet", "alexnet"), default="mentee")
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--optimizer", default="momentum")
    p.add_argument("--weight-decay", type=float, default=5e-4)
    p.add_argument("--schedule", default="cosine")
    p.add_argument("--compute-units", type=int, default=None, help="plan launches as for this many (e.g. 132)")
    p.add_argument("--steps", type=int, default=0, help="also time this many steps (median) after the counted one")
    p.add_argument("--replay", action="store_true", help="compare the step replayed and launched op by op")
    p.add_argument("--small", action="store_true", help="with --replay: the model at small widths and images")
    p.add_argument("--stream", default=None, metavar="CUT,K[,keep]",
                   help="with --replay: the step streamed at CUT in K micro-batches, one tape against per run")
    args = p.parse_args()
    if args.replay:
        res = replay_compare(args.model, args.batch, args.steps or 10, args.small, args.stream)
        streamed = f" streamed at {args.stream}" if args.stream else ""
        print(f"{args.model} training step{' (small)' if args.small else ''}{streamed}, batch {args.batch}, medians "
              f"of {args.steps or 10} steps:")
        for mode, r in res.items():
            print(f"  {mode:9s}: {r['launched']:4d} launcher launches, {r['plays']:3d} tape plays, {r['enqueued']:4d} "
                  f"replayed enqueues, host "
                  f"{r['host_ms']:.2f} ms, step {r['step_ms']:.2f} ms")
        return
    if args.model == "alexnet":
        p.error("--model alexnet: with --replay only")
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
