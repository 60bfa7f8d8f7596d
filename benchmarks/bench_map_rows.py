"""The smallest memory budget of training steps with tf.map_fn over the batch and with dropout inside a
tf.while_loop (issue 34), as a budgeted session plans them (step_budget.floor, what `tfplus plan` reports):
- augment_cnn: per-example augmentation with tf.map_fn (standardize, mirror by the row's own coin) before a CNN;
- map_loss: a CNN whose loss is written per example with tf.map_fn over (logits, labels);
- gru_dropout: a GRU with per-step dropout on its inputs and state (DropoutWrapper) in a dynamic_rnn (which
  engine.rewrite_rnn fuses, dropout and all, before and after);
- while_dropout: a tanh RNN written as a tf.while_loop, tf.nn.dropout on each step's state;
- dynamic_map: per-image standardization by a tf.map_fn whose outputs have no static shape (flattened by
  tf.reshape(-1) of a [None, None, None, None] input: its first row ran outside the loop), then the CNN;
- bn_map_loss: map_loss's CNN with tf.layers.batch_normalization (training mode) after each convolution.
Before planner.maps a map of the rows ran whole (its step was refused micro-batches), and a loop whose body draws
random numbers was not unrolled, so the planner refused its step under any budget.

    python benchmarks/bench_map_rows.py [--batch 32] [--devices cpu,opencl]

Prints, per model and device, the smallest budget and the floor plan's micro-batch count (or the refusal). Run it
with another checkout on PYTHONPATH to compare.
"""
from __future__ import annotations

import argparse
import time

import numpy as np


def augment_cnn(tf, x):
    coins = tf.floor(tf.random_uniform([tf.shape(x)[0]], seed=7) * 2.0)

    def augment(args):
        image, coin = args
        return tf.image.per_image_standardization(image * (1.0 - coin) + tf.reverse(image, [1]) * coin)
    return _cnn(tf, tf.map_fn(augment, (x, coins), dtype=tf.float32))


def _cnn(tf, h, norm: bool = False):
    """Two conv-relu-pool blocks (each conv batch-normalized if `norm`) and a dense head (by tf.nn: a map's output
    had no static shape before)."""
    rng = np.random.default_rng(0)
    for i, (cin, width) in enumerate(((3, 16), (16, 32))):
        w = tf.Variable((rng.standard_normal((3, 3, cin, width)) / np.sqrt(9 * cin)).astype(np.float32),
                        name=f"conv{i}")
        h = tf.nn.conv2d(h, w, [1, 1, 1, 1], "SAME")
        h = tf.layers.batch_normalization(h, training=True, name=f"bn{i}") if norm else h
        h = tf.nn.max_pool(tf.nn.relu(h), [1, 2, 2, 1], [1, 2, 2, 1], "VALID")
    return tf.layers.dense(tf.reshape(h, [-1, 8 * 8 * 32]), 10, name="head")


def dynamic_map(tf, x):
    flat = tf.map_fn(lambda image: tf.reshape(tf.image.per_image_standardization(image), [-1]),
                     tf.reshape(x, tf.shape(x)), dtype=tf.float32)
    return _cnn(tf, tf.reshape(flat, [-1, 32, 32, 3]))


def map_loss(tf, x, y, norm: bool = False):
    logits = _cnn(tf, x, norm)
    return tf.reduce_mean(tf.map_fn(lambda a: tf.nn.sparse_softmax_cross_entropy_with_logits(labels=a[1],
                                                                                             logits=a[0]),
                                    (logits, y), dtype=tf.float32))


def gru_dropout(tf, x):
    cell = tf.nn.rnn_cell.DropoutWrapper(tf.nn.rnn_cell.GRUCell(64), input_keep_prob=0.8, state_keep_prob=0.8,
                                         seed=3)
    return tf.layers.dense(tf.nn.dynamic_rnn(cell, x, dtype=tf.float32)[1], 10, name="head")


def while_dropout(tf, x, hidden=64):
    """A tanh RNN written as a tf.while_loop over time, tf.nn.dropout on each step's state."""
    rng = np.random.default_rng(0)
    w = tf.Variable((rng.standard_normal((32, hidden)) / 6).astype(np.float32), name="w")
    u = tf.Variable((rng.standard_normal((hidden, hidden)) / 8).astype(np.float32), name="u")
    xt = tf.transpose(x, [1, 0, 2])
    h0 = tf.zeros_like(tf.matmul(xt[0], w))

    def body(t, h):
        return t + 1, tf.nn.dropout(tf.tanh(tf.matmul(tf.gather(xt, t), w) + tf.matmul(h, u)), keep_prob=0.8)
    h = tf.while_loop(lambda t, h: t < tf.shape(x)[1], body, [0, h0])[1]
    return tf.layers.dense(tf.reshape(h, [-1, hidden]), 10, name="head")


MODELS = {"augment_cnn": ((32, 32, 3), augment_cnn), "map_loss": ((32, 32, 3), None),
          "gru_dropout": ((16, 32), gru_dropout), "while_dropout": ((16, 32), while_dropout),
          "dynamic_map": ((32, 32, 3), dynamic_map), "bn_map_loss": ((32, 32, 3), "norm")}


def floor(name: str, batch: int, device: str) -> str:
    import tfplus as tf
    from tfplus.step_budget import floor as floor_of
    shape, build = MODELS[name]
    g = tf.Graph()
    with g.as_default():
        tf.set_random_seed(1)
        x = tf.placeholder(tf.float32, [None, *shape], name="x")
        y = tf.placeholder(tf.int32, [None], name="y")
        loss = map_loss(tf, x, y, build == "norm") if build in (None, "norm") else tf.reduce_mean(
            tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=build(tf, x)))
        with tf.control_dependencies(tf.get_collection(tf.GraphKeys.UPDATE_OPS)):
            train = tf.train.MomentumOptimizer(0.01, 0.9).minimize(loss)
        init = tf.global_variables_initializer()
    runs = [([train, loss], {x: (batch, *shape), y: (batch,)}), (init, {})]
    t0 = time.perf_counter()
    try:
        p = floor_of(g, runs, device)
    except Exception as e:  # noqa: BLE001  the figure before: the planner's refusal
        return f"refused: {type(e).__name__}: {' '.join(str(e).split())[:150]}"
    return (f"smallest budget {p.budget_bytes / 1e3:.1f} kB, {p.microbatches} micro-batches "
            f"(found in {time.perf_counter() - t0:.1f} s)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--devices", default="cpu,opencl")
    ap.add_argument("--models", default=",".join(MODELS))
    args = ap.parse_args()
    np.random.seed(0)
    for name in args.models.split(","):
        for device in args.devices.split(","):
            print(f"{name} batch {args.batch} {device}: {floor(name, args.batch, device)}", flush=True)


if __name__ == "__main__":
    main()
