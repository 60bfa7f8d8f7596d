"""A training op made to wait (a control input) for the loss, as Keras's training function orders its updates
(`with tf.control_dependencies([loss]): updates`): the run of the updates has no batch, so the step neither splits
over the cpu's worker processes nor micro-batches. The workers run it whole in the parent, to the one-process
result, and a budget that needs micro-batches says why they were refused (the update run asked for the batch's
placeholder before)."""
import numpy as np
import pytest

import tfplus as tf
from tfplus.planner.plan import BudgetError


def _step():
    g = tf.Graph()
    with g.as_default():
        x = tf.placeholder(tf.float32, [None, 6])
        y = tf.placeholder(tf.int32, [None])
        h = tf.layers.dense(x, 32, tf.nn.relu, kernel_initializer=tf.constant_initializer(0.05))
        logits = tf.layers.dense(h, 3, kernel_initializer=tf.constant_initializer(-0.02))
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
        with tf.control_dependencies([loss]):
            train = tf.train.MomentumOptimizer(0.1, 0.9).minimize(loss)
        init = tf.global_variables_initializer()
    rng = np.random.default_rng(0)
    feeds = {x: rng.standard_normal((32, 6)).astype(np.float32), y: rng.integers(0, 3, 32).astype(np.int32)}
    return g, init, train, loss, feeds


def _train(workers=None, budget=None):
    g, init, train, loss, feeds = _step()
    with tf.Session(graph=g, workers=workers, memory_budget=budget) as sess:
        sess.run(init)
        losses = [sess.run([train, loss], feeds)[1] for _ in range(3)]
        return losses, [sess.run(v) for v in g.get_collection("trainable_variables")]


def test_the_workers_run_it_whole_as_one_process():
    want = _train(workers=1)
    got = _train(workers=2)
    np.testing.assert_array_equal(want[0], got[0])
    for a, b in zip(want[1], got[1]):
        np.testing.assert_array_equal(a, b)


def test_a_budget_that_needs_micro_batches_names_the_control_input():
    with pytest.raises(BudgetError, match=r"waits \(a control input\) for .*which reads the batch"):
        _train(workers=1, budget="6KB")
