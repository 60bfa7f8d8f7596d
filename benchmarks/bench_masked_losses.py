"""What a memory budget fits of steps whose loss is normalized by the batch's fed weights or mask (issue 34): a
per-time-step sequence model whose per-step cross-entropy is masked by tf.sequence_mask(lengths) and divided by the
mask's sum, and the same loss as tf.losses' default (weights=mask, SUM_BY_NONZERO_WEIGHTS). Writes each training
graph as a MetaGraph and prints, per graph, the smallest budget the planner fits its step in (the floor) and whether
that plan micro-batches; then trains 3 steps at that floor and unbudgeted and prints the largest difference of the
losses (split equals unsplit).

    python benchmarks/bench_masked_losses.py --out graphs-dir
    tfplus plan --graph graphs-dir/masked_sum.meta --memory-budget 1MB --batch-size 256   # the CLI, same graph
"""
from __future__ import annotations

import argparse
import os

import numpy as np

import tfplus as tf
from tfplus import planner
from tfplus.runtime.facts import device_facts
from tfplus.units import format_size

BATCH, STEPS_T, FEATURES, HIDDEN, CLASSES = 256, 50, 32, 128, 16


def build(kind: str):
    """The model; `kind`: 'masked_sum' (reduce_sum(xent * mask) / reduce_sum(mask)) or 'tf_losses'
    (tf.losses.sparse_softmax_cross_entropy with the mask as weights)."""
    rng = np.random.default_rng(0)
    g = tf.Graph()
    with g.as_default():
        x = tf.placeholder(tf.float32, [None, STEPS_T, FEATURES], name="x")
        y = tf.placeholder(tf.int32, [None, STEPS_T], name="y")
        lengths = tf.placeholder(tf.int32, [None], name="lengths")
        w1 = tf.Variable((rng.standard_normal((FEATURES, HIDDEN)) / 6).astype(np.float32), name="w1")
        w2 = tf.Variable((rng.standard_normal((HIDDEN, CLASSES)) / 11).astype(np.float32), name="w2")
        logits = tf.tensordot(tf.nn.relu(tf.tensordot(x, w1, 1)), w2, 1)
        mask = tf.sequence_mask(lengths, STEPS_T, dtype=tf.float32)
        if kind == "masked_sum":
            xent = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits)
            loss = tf.reduce_sum(xent * mask) / tf.reduce_sum(mask)
        else:
            loss = tf.losses.sparse_softmax_cross_entropy(y, logits, weights=mask)
        train = tf.train.MomentumOptimizer(0.1, 0.9).minimize(loss, name="train")
        tf.identity(loss, name="loss")
        init = tf.global_variables_initializer()
    feeds = {x: rng.standard_normal((BATCH, STEPS_T, FEATURES)).astype(np.float32),
             y: rng.integers(0, CLASSES, (BATCH, STEPS_T)).astype(np.int32),
             lengths: rng.integers(1, STEPS_T + 1, BATCH).astype(np.int32)}
    return g, [train, loss], feeds, init


def train(kind: str, budget=None) -> list:
    g, fetches, feeds, init = build(kind)
    with tf.Session(graph=g, memory_budget=budget) as sess:
        sess.run(init)
        return [sess.run(fetches, feeds)[1] for _ in range(3)]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", help="folder to write the graphs' MetaGraphs in (for tfplus plan --graph)")
    args = p.parse_args()
    facts = device_facts("cpu")
    for kind in ("masked_sum", "tf_losses"):
        g, fetches, feeds, _ = build(kind)
        if args.out:
            os.makedirs(args.out, exist_ok=True)
            with g.as_default():
                tf.train.export_meta_graph(os.path.join(args.out, kind + ".meta"))
        with tf.Session(graph=g, memory_budget="1GB") as sess:
            step = sess.step(fetches, feeds)
            unconstrained = planner.plan(step.fetches, step.feed_shapes, facts, None, graph=step.graph)
            floor = planner.floor_plan(step.fetches, step.feed_shapes, facts, graph=step.graph)
        losses = np.abs(np.array(train(kind, floor.budget_bytes)) - np.array(train(kind)))
        print(f"{kind}: batch {BATCH}x{STEPS_T}, unconstrained peak {format_size(unconstrained.peak_bytes)}, floor "
              f"{format_size(floor.budget_bytes)} ({floor.microbatches} micro-batches); 3 steps at the floor vs "
              f"unbudgeted: max |loss difference| {losses.max():.2e}")


if __name__ == "__main__":
    main()
