"""One graph that trains and evaluates, as TF1 scripts write it: tf.layers.batch_normalization and tf.layers.dropout
with training=is_training (a placeholder_with_default) and a tf.cond on a predicate computed from it. A Session with
a memory budget small enough to micro-batch the training step plans each run for the branches its fed is_training
takes (issue 34), and trains, evaluates and trains again as the unbudgeted session does, keeping one plan per
branch. A cond whose predicate reads the batch is still refused with the planner's error."""
import numpy as np
import pytest

import tfplus as tf
from tfplus.planner import PlanError
from tfplus.units import parse_size

BATCH, WIDTH = 64, 16
BUDGET = "30kB"  # the unbudgeted training step peaks near 46kB, an eval step near 20kB (cpu, PoCL)
TOL = {"cpu": 1e-5, "opencl": 1e-4}


def _net():
    rng = np.random.default_rng(0)
    g = tf.Graph()
    with g.as_default():
        tf.set_random_seed(3)
        x = tf.placeholder(tf.float32, [None, WIDTH], name="x")
        y = tf.placeholder(tf.int32, [None], name="y")
        training = tf.placeholder_with_default(False, [], name="is_training")
        h = x
        for i in range(2):
            w = tf.Variable((rng.standard_normal((WIDTH, WIDTH)) / np.sqrt(WIDTH)).astype(np.float32))
            h = tf.nn.relu(tf.layers.batch_normalization(tf.matmul(h, w), training=training, momentum=0.9,
                                                         name=f"bn{i}"))
        h = tf.layers.dropout(h, 0.3, training=training, seed=5)
        # a predicate computed from the fed flag, a branch with a variable of its own
        scale = tf.Variable(np.full(WIDTH, 0.5, np.float32), name="scale")
        h = tf.cond(tf.logical_not(tf.logical_not(training)), lambda: h * scale, lambda: h)
        logits = tf.matmul(h, tf.Variable((rng.standard_normal((WIDTH, 3)) / 4).astype(np.float32)))
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
        with tf.control_dependencies(tf.get_collection(tf.GraphKeys.UPDATE_OPS)):
            train_op = tf.train.GradientDescentOptimizer(0.5).minimize(loss)
        init = tf.global_variables_initializer()
    data = np.random.default_rng(1)
    feeds = {x: data.standard_normal((BATCH, WIDTH)).astype(np.float32),
             y: data.integers(0, 3, BATCH).astype(np.int32)}
    return g, training, train_op, loss, init, feeds


def _session(budget, device):
    """Two training steps, an eval fed False, an eval by the default, a training step: (losses, variables, the
    plans made before the last training step, the plans after it)."""
    g, training, train_op, loss, init, feeds = _net()
    with tf.Session(graph=g, memory_budget=budget, device=device) as sess:
        sess.run(init)
        losses = [sess.run([train_op, loss], {**feeds, training: True})[1] for _ in range(2)]
        losses += [sess.run(loss, {**feeds, training: False}), sess.run(loss, feeds)]
        before = list(sess.memory_plans)
        losses.append(sess.run([train_op, loss], {**feeds, training: True})[1])
        after = list(sess.memory_plans)
        variables = {v.op.name: sess.run(v) for v in g.get_collection("variables")}
        return losses, variables, before, after


def test_is_training_steps_under_a_budget_run_as_the_unbudgeted_session(device):
    want, got = _session(None, device), _session(BUDGET, device)
    _, _, before, after = got
    # the initializer, training (True), eval fed False, eval by default: each planned once, none again
    assert len(before) == 4 and [id(p) for p in after] == [id(p) for p in before]
    assert before[1].microbatches > 1 and max(p.microbatches for p in before[2:]) == 1
    assert max(p.peak_bytes for p in after) <= parse_size(BUDGET)
    np.testing.assert_allclose(got[0], want[0], rtol=TOL[device])
    assert got[0][2] == got[0][3]  # the default is False: the same eval
    for name, w in want[1].items():
        np.testing.assert_allclose(got[1][name], w, rtol=TOL[device], atol=1e-6, err_msg=name)
    assert not np.allclose(want[1]["bn0/moving_mean"], 0)  # the training branch's updates ran
    assert not np.allclose(want[1]["scale"], 0.5)  # the cond's own variable trained


def test_a_cond_on_the_batch_is_refused_under_a_budget():
    g = tf.Graph()
    with g.as_default():
        x = tf.placeholder(tf.float32, [None, 4], name="x")
        h = tf.cond(tf.reduce_mean(x) > 0, lambda: x * 2.0, lambda: x, name="on_batch")
        loss = tf.reduce_sum(h)
    with tf.Session(graph=g, memory_budget="1MB") as sess:
        with pytest.raises(PlanError, match=r"If 'on_batch/If'.*reads the batch or draws random numbers"):
            sess.run(loss, {x: np.ones((8, 4), np.float32)})


def test_a_random_op_in_the_taken_branch_drops_the_same_units_forward_and_backward():
    # The gradient of an If recomputes its branch: planned, the forward's copy and the gradient's draw one stream
    # each, of the same seeds, so the gradient passes exactly the units the forward kept.
    g = tf.Graph()
    with g.as_default():
        tf.set_random_seed(3)
        x = tf.placeholder(tf.float32, [None, 50], name="x")
        training = tf.placeholder(tf.bool, [], name="is_training")
        y = tf.cond(training, lambda: tf.nn.dropout(x, rate=0.5, seed=7), lambda: x)
        dx = tf.gradients(tf.reduce_sum(y), x)[0]
    with tf.Session(graph=g, memory_budget="1MB") as sess:
        for _ in range(2):
            yv, dv = sess.run([y, dx], {x: np.ones((4, 50), np.float32), training: True})
            assert 0 < np.count_nonzero(yv) < yv.size
            np.testing.assert_array_equal(yv != 0, dv != 0)
        assert len(sess.memory_plans) == 1
