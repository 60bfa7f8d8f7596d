"""Time a dropout training step on the cpu device in one process and on the step workers (tfplus.engine.workers).

    python benchmarks/bench_workers_dropout.py [--workers 2] [--threads 2] [--rounds 5] [--steps 5]

Two steps, each with its dropout drawn every step: a small AlexNet (graphs/alexnet.py: conv widths 16, 32, 48,
48, 32, FC 256-256 with dropout 0.5 after each, 10 classes, 3x99x99 images, batch 32, momentum SGD at rate 0.001:
the batch repeats, and a larger rate diverges) and a dropout MLP (784-512-512-10, dropout 0.5 after each hidden
layer, batch 128, SGD). Both sessions get `--threads` intra-op threads; one runs with workers=1 (every step in
this process: what a dropout step did before stop 45), the other with `--workers` worker processes. They alternate
in rounds of `--steps` steps, so that load from other processes falls on both alike; the figure is the median step
over all rounds.
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np

import tfplus as tf
import tfplus.train  # noqa: F401  (tf.train)
from tfplus.graphs import training_graph
from tfplus.graphs.alexnet import alexnet


def _alexnet(batch: int = 32):
    tg = training_graph(alexnet, total_steps=1000, seed=0, image_shape=(3, 99, 99), learning_rate=0.001,
                        model_kwargs={"conv_widths": (16, 32, 48, 48, 32), "fc_widths": (256, 256)})
    rng = np.random.default_rng(0)
    feeds = {tg.images: rng.standard_normal((batch, 3, 99, 99)).astype(np.float32),
             tg.labels: rng.integers(0, 10, batch).astype(np.int32)}
    return tg.graph, [tg.train_op, tg.loss], tg.init_op, feeds


def _mlp(batch: int = 128):
    g = tf.Graph()
    with g.as_default():
        x = tf.placeholder(tf.float32, [None, 784])
        y = tf.placeholder(tf.int32, [None])
        h = x
        for width in (512, 512):
            h = tf.nn.dropout(tf.layers.dense(h, width, activation=tf.nn.relu), rate=0.5)
        logits = tf.layers.dense(h, 10)
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
        train = tf.train.GradientDescentOptimizer(0.05).minimize(loss)
        init = tf.global_variables_initializer()
    rng = np.random.default_rng(0)
    feeds = {x: rng.standard_normal((batch, 784)).astype(np.float32), y: rng.integers(0, 10, batch).astype(np.int32)}
    return g, [train, loss], init, feeds


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--steps", type=int, default=5, help="steps per session per round")
    args = p.parse_args()
    print(f"{os.cpu_count()} cpus; {args.threads} threads; median step of {args.rounds} rounds x {args.steps} steps")
    for name, build in (("alexnet-small b32", _alexnet), ("dropout mlp b128", _mlp)):
        g, fetches, init, feeds = build()
        config = tf.ConfigProto(intra_op_parallelism_threads=args.threads)
        sessions = {n: tf.Session(graph=g, config=config, workers=n) for n in (1, args.workers)}
        times: dict[int, list[float]] = {n: [] for n in sessions}
        for sess in sessions.values():
            sess.run(init)
            sess.run(fetches, feeds)  # the first step: compiles, and on workers checks the slices and forks
        for _ in range(args.rounds):
            for n, sess in sessions.items():
                for _ in range(args.steps):
                    start = time.perf_counter()
                    sess.run(fetches, feeds)
                    times[n].append(time.perf_counter() - start)
        w = sessions[args.workers].workers
        where = w.summary() if w else "no workers"
        one, many = (statistics.median(times[n]) * 1e3 for n in (1, args.workers))
        print(f"{name}: 1 process {one:.1f} ms, {args.workers} workers {many:.1f} ms ({one / many:.2f}x; {where})")
        for sess in sessions.values():
            sess.close()


if __name__ == "__main__":
    main()
