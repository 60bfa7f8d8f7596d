"""The smallest feasible budget (the floor) of recurrent training steps over sequences of per-example lengths, as a
TF1 user writes them (issue 34): a bidirectional GRU or LSTM classifier with sequence_length and each sequence's last
relevant output (tf.gather_nd of tf.stack([tf.range(batch), lengths - 1], 1)), and a dynamic_rnn tagger whose loss
averages over the steps tf.sequence_mask keeps. Each is planned as a budgeted tf.Session plans it (the graph
rewritten), for the cpu's device facts; printed: the floor, its micro-batches and transformations, and the planning
time. Not a test.

    python benchmarks/bench_rows_index.py                        # batch 32, 16 steps of 16 features, 32 units
    python benchmarks/bench_rows_index.py --batch 128 --graphs bigru --timed 20   # and its unbudgeted step time
"""
from __future__ import annotations

import argparse
import time

import numpy as np


def build(kind: str, batch: int, steps: int, features: int, units: int, classes: int = 10):
    """(graph, fetches [train, loss], feeds) of graph `kind`: bigru, bilstm (the classifiers) or tagger."""
    import tfplus as tf
    rng = np.random.default_rng(0)
    g = tf.Graph()
    with g.as_default():
        tf.set_random_seed(1)
        x = tf.placeholder(tf.float32, [None, steps, features], name="x")
        n = tf.placeholder(tf.int32, [None], name="lengths")
        y = tf.placeholder(tf.int32, [None], name="y")
        if kind == "tagger":
            out, _ = tf.nn.dynamic_rnn(tf.nn.rnn_cell.GRUCell(units), x, sequence_length=n, dtype=tf.float32)
            xent = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=tf.tile(y[:, None], [1, steps]),
                                                                   logits=tf.layers.dense(out, classes))
            mask = tf.sequence_mask(n, steps, dtype=tf.float32)
            loss = tf.reduce_sum(xent * mask) / tf.reduce_sum(mask)
        else:
            cell = tf.nn.rnn_cell.GRUCell if kind == "bigru" else tf.nn.rnn_cell.LSTMCell
            (fw, bw), _ = tf.nn.bidirectional_dynamic_rnn(cell(units), cell(units), x, sequence_length=n,
                                                          dtype=tf.float32)
            out = tf.concat([fw, bw], 2)
            last = tf.gather_nd(out, tf.stack([tf.range(tf.shape(out)[0]), n - 1], 1))
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
                labels=y, logits=tf.layers.dense(last, classes)))
        train = tf.train.MomentumOptimizer(0.05, 0.9).minimize(loss)
        feeds = {x: rng.standard_normal((batch, steps, features)).astype(np.float32),
                 n: rng.integers(1, steps + 1, batch).astype(np.int32),
                 y: rng.integers(0, classes, batch).astype(np.int32)}
    return g, [train, loss], feeds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--graphs", default="bigru,bilstm,tagger")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--steps", type=int, default=16)
    ap.add_argument("--features", type=int, default=16)
    ap.add_argument("--units", type=int, default=32)
    ap.add_argument("--timed", type=int, default=0, help="also time this many unbudgeted steps (their median)")
    args = ap.parse_args()
    import tfplus as tf
    from tfplus import planner
    from tfplus.runtime.facts import device_facts
    from tfplus.units import format_size
    facts = device_facts("cpu")
    print(f"batch {args.batch}, {args.steps} steps of {args.features} features, {args.units} units; cpu facts")
    for kind in args.graphs.split(","):
        g, fetches, feeds = build(kind, args.batch, args.steps, args.features, args.units)
        with tf.Session(graph=g, memory_budget="1GB") as sess:
            step = sess.step(fetches, feeds)
            start = time.perf_counter()
            p = planner.floor_plan(step.fetches, step.feed_shapes, facts, graph=step.graph)
            took = time.perf_counter() - start
            free = planner.plan(step.fetches, step.feed_shapes, facts, graph=step.graph).peak_bytes
        print(f"{kind:8s} unconstrained {format_size(free):>9s}  floor {format_size(p.budget_bytes):>9s} "
              f"({p.budget_bytes} bytes), {p.microbatches} micro-batches, "
              f"{', '.join(t['name'] for t in p.transformations)}; planned in {took:.1f} s", flush=True)
        if args.timed:
            print(f"{kind:8s} unbudgeted step {1e3 * _step_time(g, fetches, feeds, args.timed):.2f} ms (median of "
                  f"{args.timed})", flush=True)


def _step_time(g, fetches, feeds, n: int) -> float:
    """The median wall time of n unbudgeted training steps on the cpu, after two untimed ones, in this process (a
    step that splits by rows would otherwise run on the cpu workers, one that does not in the parent)."""
    import tfplus as tf
    with tf.Session(graph=g, workers=1) as sess:
        sess.run(tf.global_variables_initializer())
        times = []
        for _ in range(n + 2):
            start = time.perf_counter()
            sess.run(fetches, feeds)
            times.append(time.perf_counter() - start)
    return float(np.median(times[2:]))


if __name__ == "__main__":
    main()
