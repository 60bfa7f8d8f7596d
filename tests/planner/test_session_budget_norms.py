"""A plain tf.Session with a memory budget micro-batches a batch-norm step built the TF1 way (minimize under
control_dependencies on UPDATE_OPS, a mean cross-entropy as the whole loss): the session plans its rewritten step,
whose fused loss once took the gradient's control inputs and so ran after the moving averages' updates, where no
micro-batch can compute it; the session refused budgets that `tfplus train` met."""
import numpy as np
import pytest

import tfplus as tf
from tfplus.units import parse_size

BATCH, WIDTH = 512, 64


def _bn_net():
    rng = np.random.default_rng(0)
    g = tf.Graph()
    with g.as_default():
        x = tf.placeholder(tf.float32, [None, WIDTH], name="x")
        y = tf.placeholder(tf.int32, [None], name="y")
        h = x
        for i in range(2):
            w = tf.Variable((rng.standard_normal((WIDTH, WIDTH)) / np.sqrt(WIDTH)).astype(np.float32))
            h = tf.nn.relu(tf.layers.batch_normalization(tf.matmul(h, w), training=True, momentum=0.9,
                                                         name=f"bn{i + 1}"))
        logits = tf.matmul(h, tf.Variable((rng.standard_normal((WIDTH, 3)) / 8).astype(np.float32)))
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
        with tf.control_dependencies(tf.get_collection(tf.GraphKeys.UPDATE_OPS)):
            train_op = tf.train.GradientDescentOptimizer(0.5).minimize(loss)
        init = tf.global_variables_initializer()
    data = np.random.default_rng(1)
    feeds = {x: data.standard_normal((BATCH, WIDTH)).astype(np.float32),
             y: data.integers(0, 3, BATCH).astype(np.int32)}
    return g, train_op, loss, init, feeds


def _train(budget):
    g, train_op, loss, init, feeds = _bn_net()
    with tf.Session(graph=g, memory_budget=budget) as sess:
        sess.run(init)
        losses = [sess.run([train_op, loss], feeds)[1] for _ in range(2)]
        plans = list(sess.memory_plans)  # the initializer's and the training step's
        variables = {v.op.name: sess.run(v) for v in g.get_collection("variables")}
        return losses, variables, plans


@pytest.mark.parametrize("budget", ["600kB", "350kB"])
def test_a_budgeted_session_micro_batches_a_batch_norm_step_as_the_unsplit_step(budget):
    want, got = _train("1GB"), _train(budget)
    assert max(p.microbatches for p in want[2]) == 1 and max(p.microbatches for p in got[2]) > 1
    assert max(p.peak_bytes for p in got[2]) <= parse_size(budget)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5)
    for name, w in want[1].items():
        np.testing.assert_allclose(got[1][name], w, rtol=1e-5, atol=1e-6, err_msg=name)
    assert not np.allclose(want[1]["bn1/moving_mean"], 0)  # the updates ran
