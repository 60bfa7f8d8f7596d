"""The smallest memory budget of two training steps with control flow, as `tfplus plan --graph FILE` reports it on
their exported MetaGraphs (issue 34): a recurrent classifier over a tf.while_loop (a tanh RNN written by hand, time
steps from tf.shape(x)[1]) and a CNN with a tf.cond(is_training, dropout) and a batch norm switched by the same
placeholder_with_default(True). Before planner.rows looked into control flow and sessions unrolled loops of known
trip counts (engine.step.resolve_static), `tfplus plan` refused both ("control flow ... sizes its outputs only as it
runs"); now each plans unrolled (the loop) or with its taken branch (the cond), micro-batched where that fits less.

    python benchmarks/bench_control_flow_budget.py [--batch 128] [--keep DIR]

Prints, per model, the command and the smallest budget line of `tfplus plan --graph FILE --memory-budget 1MB`
(or its error), and the smallest budget of the step as built in Python (a session's view: step_budget's floor, with
its micro-batch count). Run it with another checkout's Python (--python, and the script by that Python) to compare.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np


def rnn_while(tf, batch_time=32, features=16, hidden=64):
    x = tf.placeholder(tf.float32, [None, batch_time, features], name="x")
    y = tf.placeholder(tf.int32, [None], name="y")
    rng = np.random.default_rng(0)
    w = tf.Variable((rng.standard_normal((features, hidden)) / 4).astype(np.float32), name="w")
    u = tf.Variable((rng.standard_normal((hidden, hidden)) / 8).astype(np.float32), name="u")
    xt = tf.transpose(x, [1, 0, 2])
    steps = tf.shape(x)[1]
    h0 = tf.zeros_like(tf.matmul(xt[0], w))
    states = tf.TensorArray(tf.float32, size=steps, element_shape=tf.shape(h0))

    def body(t, h, states):
        h = tf.tanh(tf.matmul(tf.gather(xt, t), w) + tf.matmul(h, u))
        return t + 1, h, states.write(t, h)
    _, h, states = tf.while_loop(lambda t, h, states: t < steps, body, [0, h0, states])
    features = tf.reshape(tf.reduce_mean(states.stack(), 0) + h, [-1, hidden])  # (the array's shape is open)
    logits = tf.layers.dense(features, 10, name="head")
    return x, y, logits


def cond_cnn(tf):
    x = tf.placeholder(tf.float32, [None, 32, 32, 3], name="x")
    y = tf.placeholder(tf.int32, [None], name="y")
    training = tf.placeholder_with_default(True, [], name="is_training")
    h = x
    for i, width in enumerate((16, 32)):
        h = tf.layers.conv2d(h, width, 3, padding="same", name=f"conv{i}")
        h = tf.nn.relu(tf.layers.batch_normalization(h, training=training, name=f"bn{i}"))
        h = tf.layers.max_pooling2d(h, 2, 2)
    h = tf.layers.dense(tf.reshape(h, [-1, 8 * 8 * 32]), 128, activation=tf.nn.relu, name="fc")
    h = tf.cond(training, lambda: tf.nn.dropout(h, rate=0.5, seed=1), lambda: h)
    return x, y, tf.layers.dense(h, 10, name="head")


def export(build, path: str) -> None:
    import tfplus as tf
    with tf.Graph().as_default():
        tf.set_random_seed(1)
        x, y, logits = build(tf)
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
        with tf.control_dependencies(tf.get_collection(tf.GraphKeys.UPDATE_OPS)):
            tf.train.AdamOptimizer(1e-3).minimize(loss)
        tf.train.export_meta_graph(path)


def built_floor(build, batch: int) -> str:
    """The smallest budget of a session's training step of `build` as built in Python (step_budget.smallest_budget,
    fed is_training left to its default), with the floor plan's micro-batch count; or why none."""
    import tfplus as tf
    from tfplus.step_budget import floor
    g = tf.Graph()
    with g.as_default():
        tf.set_random_seed(1)
        x, y, logits = build(tf)
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
        with tf.control_dependencies(tf.get_collection(tf.GraphKeys.UPDATE_OPS)):
            train = tf.train.AdamOptimizer(1e-3).minimize(loss)
        init = tf.global_variables_initializer()
    runs = [([train, loss], {x: (batch, *x.shape.as_list()[1:]), y: (batch,)}), (init, {})]
    try:
        p = floor(g, runs, "cpu")
    except Exception as e:  # noqa: BLE001  the figure before: the planner's refusal
        return f"refused: {type(e).__name__}: {' '.join(str(e).split())[:160]}"
    return f"smallest budget {p.budget_bytes / 1e6:.1f} MB, {p.microbatches} micro-batches"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--keep", help="write the MetaGraphs here (else a temporary folder)")
    ap.add_argument("--python", default=sys.executable, help="the Python whose tfplus plans them")
    args = ap.parse_args()
    folder = args.keep or tempfile.mkdtemp()
    os.makedirs(folder, exist_ok=True)
    for name, build in (("rnn_while", rnn_while), ("cond_cnn", cond_cnn)):
        path = os.path.join(folder, f"{name}.meta")
        if not os.path.exists(path):
            export(build, path)
        cmd = [args.python, "-m", "tfplus", "plan", "--graph", path, "--memory-budget", "1MB",
               "--batch-size", str(args.batch)]
        done = subprocess.run(cmd, capture_output=True, text=True, cwd=folder)
        lines = (done.stdout + done.stderr).strip().splitlines()
        print(f"{name}: tfplus plan --graph {name}.meta --memory-budget 1MB --batch-size {args.batch} "
              f"(exit {done.returncode})")
        for line in lines:
            if "smallest feasible budget" in line or "error" in line or "does not fit" in line:
                print("   ", line[:300])
        print(f"{name} built in Python, batch {args.batch}: {built_floor(build, args.batch)}")


if __name__ == "__main__":
    main()
