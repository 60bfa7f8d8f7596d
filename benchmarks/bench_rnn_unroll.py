"""Why tf.nn.dynamic_rnn unrolls a known time dimension: times one training step (forward, backward, no update)
of a GRU through dynamic_rnn unrolled (static time dimension) and through tf.while_loop (time dimension None),
same weights and inputs, interleaved so that machine load affects both alike; prints the best of --repeat.

Run: `python benchmarks/bench_rnn_unroll.py [--device cpu] [--batch 128] [--steps 32] [--units 128]`.
"""
from __future__ import annotations

import argparse
import time

import numpy as np

import tfplus as tf


def build(steps_known: bool, a):
    g = tf.Graph()
    with g.as_default():
        tf.set_random_seed(0)
        x = tf.placeholder(tf.float32, [None, a.steps if steps_known else None, a.features])
        y, _ = tf.nn.dynamic_rnn(tf.nn.rnn_cell.GRUCell(a.units), x, dtype=tf.float32)
        loss = tf.reduce_mean(tf.square(y))
        grads = tf.gradients(loss, [x] + tf.trainable_variables())
    return g, x, [loss] + grads


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cpu")
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--steps", type=int, default=32)
    p.add_argument("--features", type=int, default=64)
    p.add_argument("--units", type=int, default=128)
    p.add_argument("--repeat", type=int, default=3)
    a = p.parse_args()
    x = np.random.default_rng(0).standard_normal((a.batch, a.steps, a.features)).astype(np.float32)
    runs = {}
    for name, known in (("unrolled", True), ("while_loop", False)):
        g, ph, fetches = build(known, a)
        sess = tf.Session(graph=g, device=a.device)
        sess.run(_init(g))
        sess.run(fetches, {ph: x})  # warm-up: planning, kernel builds
        runs[name] = (sess, ph, fetches, [])
    for _ in range(a.repeat):
        for sess, ph, fetches, times in runs.values():
            t0 = time.perf_counter()
            sess.run(fetches, {ph: x})
            times.append(time.perf_counter() - t0)
    print(f"GRU {a.units} units, {a.steps} steps of {a.features} features, batch {a.batch}, device {a.device}: "
          "forward + backward, best of", a.repeat)
    for name, (sess, _, _, times) in runs.items():
        print(f"  {name:11s} {1e3 * min(times):8.1f} ms")
        sess.close()


def _init(g):
    with g.as_default():
        return tf.global_variables_initializer()


if __name__ == "__main__":
    main()
