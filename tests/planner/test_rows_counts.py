"""A loss scaled by the batch's number of rows (tf.shape(x)[0], tf.size) under micro-batches: each micro-batch's
count is its own, k times smaller, so such a step was trained k times too weakly with no error. It is refused,
naming the op; a mean written as a sum divided by the count stays exact in micro-batches."""
import numpy as np
import pytest

import tfplus as tf
from tfplus.planner.plan import BudgetError

FORCE_SPLIT = "700KB"  # the unsplit step needs about 1.6 MB at 4096 rows; micro-batches fit this


def _run(kind, budget):
    g = tf.Graph()
    with g.as_default():
        x = tf.placeholder(tf.float32, [None, 32])
        y = tf.placeholder(tf.int32, [None])
        h = tf.layers.dense(x, 32, tf.nn.relu, kernel_initializer=tf.constant_initializer(0.03))
        logits = tf.layers.dense(h, 3, kernel_initializer=tf.constant_initializer(-0.02))
        xent = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits)
        n = tf.cast(tf.shape(x)[0], tf.float32)
        loss = {"scaled": tf.reduce_mean(xent) * n / 1000.0,
                "scaled by size": tf.reduce_mean(xent) * tf.cast(tf.size(y), tf.float32) / 1000.0,
                "sum over count": tf.reduce_sum(xent) / n}[kind]
        train = tf.train.GradientDescentOptimizer(0.1).minimize(loss)
        init = tf.global_variables_initializer()
    rng = np.random.default_rng(0)
    feeds = {x: rng.standard_normal((4096, 32)).astype(np.float32), y: rng.integers(0, 3, 4096).astype(np.int32)}
    with tf.Session(graph=g, memory_budget=budget, workers=1) as sess:
        sess.run(init)
        losses = [sess.run([train, loss], feeds)[1] for _ in range(2)]
        return losses, [sess.run(v) for v in g.get_collection("trainable_variables")]


@pytest.mark.parametrize("kind", ["scaled", "scaled by size"])
def test_a_loss_scaled_by_the_row_count_is_refused_for_micro_batches(kind):
    with pytest.raises(BudgetError, match=r"scales a value of the batch by its number of rows"):
        _run(kind, FORCE_SPLIT)


def test_a_sum_divided_by_the_row_count_micro_batches_exactly():
    want, got = _run("sum over count", None), _run("sum over count", FORCE_SPLIT)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5)
    for a, b in zip(want[1], got[1]):
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-7)
