"""How far a budgeted MobileNet step's weight updates may differ from the plain step's without being wrong: one step of
the plain session, of a session under --budget, and of the plain session on the images scaled by 1 + --eps, from
the same weights; per variable, the largest difference from the plain step's update relative to that update's
largest change. Where the perturbed plain step differs as much as the budgeted one, the budgeted step's
differences are float rounding amplified by the step (not a wrong result), and a few steps of training on them
diverge alike (--steps: the losses side by side). Not a test.

    python benchmarks/bench_update_sensitivity.py --device cpu --batch 32 --budget 48MB
    python benchmarks/bench_update_sensitivity.py --device cpu --batch 32 --budget 48MB --steps 6
"""
from __future__ import annotations

import argparse

import numpy as np


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--budget", default="48MB")
    ap.add_argument("--eps", type=float, default=1e-6)
    ap.add_argument("--steps", type=int, default=0, help="also train this many steps and print the losses")
    ap.add_argument("--rows", type=int, default=6)
    args = ap.parse_args()

    import tfplus as tf
    from tfplus.graphs.mentee import training_graph
    from tfplus.graphs.mobilenet import mobilenet
    tg = training_graph(mobilenet, total_steps=10 ** 6, seed=0, optimizer="momentum", nesterov=False,
                        weight_decay=0.0, schedule="const", learning_rate=0.01)
    rng = np.random.default_rng(0)
    feed = {tg.images: rng.standard_normal((args.batch, 3, 32, 32)).astype(np.float32),
            tg.labels: rng.integers(0, 10, args.batch).astype(np.int32)}
    scaled = dict(feed)
    scaled[tg.images] = (feed[tg.images] * np.float32(1 + args.eps)).astype(np.float32)
    variables = tg.graph.get_collection("trainable_variables")
    names = ["plain", f"{args.budget} budget", f"plain, images x (1 + {args.eps:g})"]
    sessions = [tf.Session(graph=tg.graph, device=args.device),
                tf.Session(graph=tg.graph, device=args.device, memory_budget=args.budget),
                tf.Session(graph=tg.graph, device=args.device)]
    feeds = [feed, feed, scaled]
    try:
        for s in sessions:
            s.run(tg.init_op)
        before = sessions[0].run(variables)
        losses = [[s.run([tg.train_op, tg.loss], f)[1]] for s, f in zip(sessions, feeds)]
        after = [s.run(variables) for s in sessions]
        for name, got in zip(names[1:], after[1:]):
            rows = sorted(((np.abs(g - w).max() / max(np.abs(w - b).max(), 1e-30), v.op.name)
                           for v, g, w, b in zip(variables, got, after[0], before)), reverse=True)
            print(f"{name}: one step's update against the plain step's, largest differences relative to the "
                  f"update: " + ", ".join(f"{n} {r:.1e}" for r, n in rows[:args.rows]))
        for _ in range(args.steps - 1):
            for s, f, out in zip(sessions, feeds, losses):
                out.append(s.run([tg.train_op, tg.loss], f)[1])
        for i in range(1, args.steps):
            print(f"step {i + 1}: losses " + ", ".join(f"{n} {v[i]:.6f}" for n, v in zip(names, losses)) +
                  f"; relative to plain: budget {abs(losses[1][i] / losses[0][i] - 1):.1e}, "
                  f"scaled images {abs(losses[2][i] / losses[0][i] - 1):.1e}")
    finally:
        for s in sessions:
            s.close()


if __name__ == "__main__":
    main()
