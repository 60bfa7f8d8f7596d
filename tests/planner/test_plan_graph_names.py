"""What a budgeted step with a loss summed over the batch says about itself (issue 34): the session scales the sum
for its micro-batches in a copy of the step (engine.step.scale_summed_losses), but a BudgetError and the plan name
the tensor the user fetched (`Sum:0`), not the copy's inner parts (`Sum/micro_scale/...`)."""
import numpy as np
import pytest

import tfplus as tf
from tfplus.planner import BudgetError


def _summed_mlp():
    g = tf.Graph()
    with g.as_default():
        x, y = tf.placeholder(tf.float32, [None, 64], name="x"), tf.placeholder(tf.int32, [None], name="y")
        w1 = tf.Variable(tf.random_normal([64, 128], stddev=0.1))
        w2 = tf.Variable(tf.random_normal([128, 10], stddev=0.1))
        logits = tf.matmul(tf.nn.relu(tf.matmul(x, w1)), w2)
        loss = tf.reduce_sum(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
        train = tf.train.GradientDescentOptimizer(0.01).minimize(loss)
        init = tf.global_variables_initializer()
    rng = np.random.default_rng(0)
    feeds = {x: rng.standard_normal((256, 64)).astype(np.float32), y: rng.integers(0, 10, 256).astype(np.int32)}
    return g, init, [train, loss], feeds


def test_a_budget_error_and_the_plan_name_the_users_summed_loss():
    g, init, fetches, feeds = _summed_mlp()
    with tf.Session(graph=g, memory_budget="1GB") as sess:
        sess.run(init)
        step = sess.step(fetches, feeds)
        assert [f.name for f in step.fetches] == ["GradientDescent", "Sum:0"]  # the scaled sum, as the user's
        assert any(op.name.startswith("Sum/micro_scale/") for op in step.graph.get_operations())  # it was scaled
    with tf.Session(graph=g, memory_budget="120KB") as sess:  # the initializer fits (71 kB), the step not (181 kB)
        sess.run(init)
        with pytest.raises(BudgetError) as e:
            sess.run(fetches, feeds)
    assert "the step running GradientDescent, Sum:0 needs at least" in str(e.value)
    assert "micro_scale" not in str(e.value)
