"""An embedding step with sparse gradients (IndexedSlices, the rows updated in place) against the same step with
the gradient made dense (what tfplus did before: an UnsortedSegmentSum the table's size, then ApplyMomentum over
every row).

    python benchmarks/bench_embedding.py                       # cpu: table 100,000 x 64, 512 ids, momentum
    python benchmarks/bench_embedding.py --device opencl --rows 1000000

The model: ids -> embedding_lookup -> dense 64 -> 10 -> softmax cross-entropy. Both steps run in turns in one
process (--steps rounds, medians of wall time), then each is planned (tfplus.planner) for its peak bytes.
The two train differently (the dense step moves rows with momentum left from earlier steps), so only time and
memory are compared.
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

import tfplus as tf
import tfplus.train  # noqa: F401  (tf.train)
from tfplus import planner
from tfplus.runtime.facts import device_facts
from tfplus.units import format_size


def _step(rows: int, dim: int, batch: int, sparse: bool):
    g = tf.Graph()
    with g.as_default():
        ids = tf.placeholder(tf.int32, [batch], name="ids")
        labels = tf.placeholder(tf.int32, [batch], name="labels")
        table = tf.get_variable("table", [rows, dim], initializer=tf.random_normal_initializer(stddev=0.1))
        w = tf.get_variable("w", [dim, 10])
        logits = tf.matmul(tf.nn.embedding_lookup(table, ids), w)
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits))
        opt = tf.train.MomentumOptimizer(0.1, 0.9)
        pairs = opt.compute_gradients(loss)
        if not sparse:
            pairs = [(tf.convert_to_tensor(gr), v) for gr, v in pairs]
        train = opt.apply_gradients(pairs)
        init = tf.global_variables_initializer()
    return g, ids, labels, train, loss, init


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--batch", type=int, default=512)
    ap.add_argument("--steps", type=int, default=20)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    sessions, times = {}, {}
    for name, sparse in (("sparse", True), ("dense", False)):
        g, ids, labels, train, loss, init = _step(args.rows, args.dim, args.batch, sparse)
        feeds = {ids: rng.integers(0, args.rows, args.batch).astype(np.int32),
                 labels: rng.integers(0, 10, args.batch).astype(np.int32)}
        sess = tf.Session(graph=g, device=args.device)
        sess.run(init)
        sess.run(train, feeds)  # compile and warm up
        plan = planner.plan([train, loss], {t: v.shape for t, v in feeds.items()}, device_facts(args.device),
                            graph=g)
        sessions[name] = (sess, [train, loss], feeds, plan)  # the loss fetched: an opencl step ends there
        times[name] = []
    for _ in range(args.steps):
        for name, (sess, fetches, feeds, _) in sessions.items():
            t0 = time.perf_counter()
            sess.run(fetches, feeds)
            times[name].append(time.perf_counter() - t0)
    print(f"table {args.rows} x {args.dim} float32, {args.batch} ids, momentum, device {args.device}, "
          f"{args.steps} rounds")
    for name, (sess, _, _, plan) in sessions.items():
        print(f"{name:>6}: median step {statistics.median(times[name]) * 1e3:8.2f} ms "
              f"(min {min(times[name]) * 1e3:.2f}), planned peak {format_size(plan.peak_bytes)}")
        sess.close()
    print(f"dense / sparse step time: {statistics.median(times['dense']) / statistics.median(times['sparse']):.1f}")


if __name__ == "__main__":
    main()
