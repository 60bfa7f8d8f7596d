"""The graph rewrite (tfplus.engine.rewrite) on and off, in one run: a Mentee training step (NCHW float32, momentum
SGD, the loss fetched) on one device, with ops per step and, on opencl, kernel launches per step. Not a test.

    python benchmarks/bench_rewrite.py                          # cpu, batch 128
    python benchmarks/bench_rewrite.py --device opencl --batch 16 --rounds 2

The two sessions alternate in rounds (`--steps` steps each per round) so that load from other processes falls
on both alike; the figure per side is the median step over all rounds. Both sessions start from the same
weights, and the losses after the run are printed side by side.
"""
from __future__ import annotations

import argparse
import statistics
import time


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", default="cpu")
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--steps", type=int, default=3, help="steps per side per round")
    args = p.parse_args()

    import numpy as np

    import tfplus as tf
    from tfplus.graphs.mentee import training_graph
    tg = training_graph(total_steps=10 ** 6, seed=0, optimizer="momentum", schedule="const", learning_rate=0.01)
    rng = np.random.default_rng(0)
    feed = {tg.images: rng.standard_normal((args.batch, 3, 32, 32)).astype(np.float32),
            tg.labels: rng.integers(0, 10, args.batch).astype(np.int32)}
    fetches = [tg.train_op, tg.loss]
    sides = {}
    for name, toggle in (("rewrite on", tf.RewriterConfig.DEFAULT), ("rewrite off", tf.RewriterConfig.OFF)):
        config = tf.ConfigProto(graph_options=tf.GraphOptions(rewrite_options=tf.RewriterConfig(remapping=toggle)))
        sess = tf.Session(graph=tg.graph, device=args.device, config=config)
        sess.run(tg.init_op)
        sess.run(fetches, feed)  # plan, build kernels
        sides[name] = {"sess": sess, "times": [], "launches": _launches(sess, fetches, feed)}
    for _ in range(args.rounds):
        for side in sides.values():
            for _ in range(args.steps):
                t = time.perf_counter()
                loss = side["sess"].run(fetches, feed)[1]
                side["times"].append(time.perf_counter() - t)
            side["loss"] = float(loss)
    print(f"Mentee step, batch {args.batch}, device {args.device} "
          f"({sides['rewrite on']['sess'].runtime.describe()}), {args.rounds} rounds x {args.steps} steps")
    print(f"{'':12s} {'ms/step':>9s} {'ops/step':>9s} {'launches':>9s}  loss after the run")
    for name, side in sides.items():
        sess = side["sess"]
        ops = max(len(p.order) for p in [*sess.programs, *(p for s in sess.steps for p in s.programs)])
        launches = side["launches"]
        print(f"{name:12s} {statistics.median(side['times']) * 1e3:9.1f} {ops:9d} "
              f"{'-' if launches is None else f'{launches:.0f}':>9s}  {side['loss']:.6f}")
        sess.close()


def _launches(sess, fetches, feed) -> int | None:
    """Kernel launches of one step (calls of the OpenCL runtime's run()); None on the cpu device."""
    rt = sess.runtime
    if not hasattr(rt, "run"):
        return None
    count = [0]
    run = rt.run

    def counted(*a):
        count[0] += 1
        return run(*a)
    rt.run = counted
    try:
        sess.run(fetches, feed)
    finally:
        del rt.run
    return count[0]


if __name__ == "__main__":
    main()
