"""The faults a sweep of user-written training steps under budgets found (issue 34, test_user_graphs), each at its
root: gradients clipped by their global norm in micro-batches (each micro-batch clipped its own), a decorrelation
penalty on the batch's features (X^T X: micro-batched as if per example), a softmax over the batch axis (transposed
to the last) in a streamed prefix (each micro-batch normalized over its own rows), a loss summed over the batch
(micro-batches averaged their sums: 1/k of the step's loss and gradients), and a far-too-small budget's
BudgetError naming the smallest plan found for that budget rather than the step's floor."""
from __future__ import annotations

import numpy as np
import pytest
from conftest import DEVICES

import tfplus as tf
from tfplus import planner
from tfplus.graphs import get_model, training_graph
from tfplus.planner import PlanError
from tfplus.planner.batch import batch_statistics
from tfplus.planner.plan import _Step
from tfplus.runtime.facts import device_facts
from tfplus.step_budget import _planned, training_runs

BATCH = 8


def _dense(head):
    """x (N, 6) -> tanh dense -> head(h) -> (rows, penalty) -> dense logits, mean cross-entropy + penalty; Adam
    on the gradients clipped by their global norm (1.0, below the first step's norm: clipping acts)."""
    rng = np.random.default_rng(0)
    g = tf.Graph()
    with g.as_default():
        x = tf.placeholder(tf.float32, [None, 6], name="x")
        y = tf.placeholder(tf.int32, [None], name="y")
        h = tf.nn.tanh(tf.matmul(x, tf.Variable(rng.standard_normal((6, 8)).astype(np.float32))))
        h, penalty = head(h)
        logits = tf.matmul(h, tf.Variable(rng.standard_normal((8, 3)).astype(np.float32)))
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits)) + penalty
        params = tf.trainable_variables()
        grads, norm = tf.clip_by_global_norm(tf.gradients(loss, params), 1.0)
        train = tf.train.AdamOptimizer(0.01).apply_gradients(list(zip(grads, params)))
        init = tf.global_variables_initializer()
    feeds = {x: rng.standard_normal((BATCH, 6)).astype(np.float32), y: rng.integers(0, 3, BATCH).astype(np.int32)}
    return g, [train, loss, norm], init, feeds


def _train(g, fetches, init, feeds, device, force=None):
    """The fetched (loss, norm) of 3 steps and every variable after them, by the plan `force` when given."""
    with tf.Session(graph=g, device=device, memory_budget=None if force is None else "1GB") as sess:
        if force is not None:
            step = sess.step(fetches, feeds)
            step.use_plan(planner.plan(step.fetches, step.feed_shapes, device_facts(sess.runtime), graph=step.graph,
                                       force=force))
        sess.run(init)
        fetched = [sess.run(fetches, feeds)[1:] for _ in range(3)]
        return np.array(fetched, np.float64), {v.op.name: sess.run(v) for v in g.get_collection("variables")}


@pytest.mark.parametrize("device", DEVICES)
def test_gradients_clipped_by_their_global_norm_micro_batch_as_the_unsplit_step(device):
    g, fetches, init, feeds = _dense(lambda h: (h, 0.0))
    want = _train(g, fetches, init, feeds, device)
    assert want[0][0, 1] > 1.0  # the global norm: clipping acts
    got = _train(g, fetches, init, feeds, device, force=(4, 1))
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5 if device == "cpu" else 1e-4)
    for name, value in want[1].items():
        np.testing.assert_allclose(got[1][name], value, rtol=1e-5, atol=1e-6, err_msg=name)


def _step(g, fetches, feeds) -> _Step:
    return _Step(fetches, {t: v.shape for t, v in feeds.items()}, device_facts("cpu"), g, None)


def test_a_decorrelation_penalty_is_a_batch_statistic_and_no_micro_batch_computes_it():
    def decorrelation(h):
        return h, 0.01 * tf.reduce_sum(tf.square(tf.matmul(h, h, transpose_a=True) / BATCH))
    g, fetches, init, feeds = _dense(decorrelation)
    step = _step(g, fetches, feeds)
    why = batch_statistics(step.order, step.feeds, step.batch_feeds(), step.rowed())
    assert why is not None and "MatMul" in why, why
    with pytest.raises(PlanError, match="cannot micro-batch"):
        planner.plan(fetches, {t: v.shape for t, v in feeds.items()}, "cpu", graph=g, force=(4, 1))


def test_a_prefix_with_a_softmax_over_the_batch_axis_is_no_cut():
    def batch_softmax(h):  # over the batch: transposed to the last axis, as tfplus's softmax takes
        return tf.transpose(tf.nn.softmax(tf.transpose(h))) * BATCH, 0.0
    g, fetches, init, feeds = _dense(batch_softmax)
    step = _step(g, fetches, feeds)
    logits = next(op for op in step.order if op.type == "SparseSoftmaxCrossEntropyWithLogits").outputs[0]
    with pytest.raises(PlanError, match="Softmax 'Softmax' normalizes over the batch's rows"):
        step.cut(logits.name)


def test_a_far_too_small_budget_names_the_floor_not_the_smallest_plan_for_it():
    """seqnet's statistics passes keep rows as far as the budget leaves room: the smallest plan made for a 1 kB
    budget peaks above the step's floor, which the error names (and `tfplus plan` reports)."""
    m = get_model("seqnet")
    tg = training_graph(m.build, total_steps=10, seed=0, model_kwargs={"conv_widths": (6, 8, 8)},
                        image_shape=(3, 4, 4))
    # (batch 8: at 4 the early updates let the smallest plan for 1 kB reach the floor itself)
    graph, fetches, shapes = next(next(_planned(tg.graph, training_runs(tg, [tg.train_op, tg.loss], 8))))  # its 1st way
    facts = device_facts("cpu")
    floor = planner.floor_plan(fetches, shapes, facts, graph=graph).budget_bytes
    smallest = planner.plan(fetches, shapes, facts, 1000, graph=graph, raise_if_infeasible=False).peak_bytes
    assert smallest != floor  # the figure the message named before
    with pytest.raises(planner.BudgetError) as e:
        planner.plan(fetches, shapes, facts, 1000, graph=graph)
    assert e.value.smallest_bytes == floor
    assert f"({floor} bytes) but the memory budget is 1.0 kB (1000 bytes)" in str(e.value)
    assert "the step's floor: the smallest budget the planner fits it in" in str(e.value)
    assert str(e.value).startswith("the step running train_op, ")


def _summed(divided: bool):
    """A dense step whose loss is the batch's summed cross-entropy, `divided` by the batch's size read from its
    shape (a mean written by hand) or not."""
    rng = np.random.default_rng(0)
    g = tf.Graph()
    with g.as_default():
        x = tf.placeholder(tf.float32, [None, 6], name="x")
        y = tf.placeholder(tf.int32, [None], name="y")
        logits = tf.matmul(tf.nn.tanh(tf.matmul(x, tf.Variable(rng.standard_normal((6, 8)).astype(np.float32)))),
                           tf.Variable(rng.standard_normal((8, 3)).astype(np.float32)))
        loss = tf.reduce_sum(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
        if divided:
            loss = loss / tf.cast(tf.shape(x)[0], tf.float32)
        train = tf.train.GradientDescentOptimizer(0.1).minimize(loss)
        init = tf.global_variables_initializer()
    feeds = {x: rng.standard_normal((BATCH, 6)).astype(np.float32), y: rng.integers(0, 3, BATCH).astype(np.int32)}
    return g, [train, loss], init, feeds


def test_a_loss_summed_over_the_batch_is_not_micro_batched_and_one_divided_by_its_size_is():
    g, fetches, init, feeds = _summed(divided=False)
    with pytest.raises(PlanError, match=r"the loss 'Sum:0' sums over the batch \(Sum 'Sum'\)"):
        planner.plan(fetches, {t: v.shape for t, v in feeds.items()}, "cpu", graph=g, force=(4, 1))
    g, fetches, init, feeds = _summed(divided=True)
    want = _train(g, fetches, init, feeds, "cpu")
    got = _train(g, fetches, init, feeds, "cpu", force=(4, 1))
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5)
    for name, value in want[1].items():
        np.testing.assert_allclose(got[1][name], value, rtol=1e-5, atol=1e-6, err_msg=name)


def _per_example(norm: str):
    def head(h):
        if norm == "l2_normalize":
            return tf.nn.l2_normalize(h, axis=1), 0.0
        if norm == "layer_norm":
            mean, var = tf.nn.moments(h, axes=[1], keep_dims=True)
            return (h - mean) * tf.rsqrt(var + 1e-5), 0.0
        # instance norm: each example's 2 x 4 "pixels" per channel
        pixels = tf.reshape(h, [-1, 2, 4, 1])
        mean, var = tf.nn.moments(pixels, axes=[1, 2], keep_dims=True)
        return tf.reshape((pixels - mean) * tf.rsqrt(var + 1e-5), [-1, 8]), 0.0
    return head


@pytest.mark.parametrize("norm", ["l2_normalize", "layer_norm", "instance_norm"])
def test_a_norm_over_each_example_is_no_batch_statistic(norm):
    g, fetches, init, feeds = _dense(_per_example(norm))
    step = _step(g, fetches, feeds)
    assert batch_statistics(step.order, step.feeds, step.batch_feeds(), step.rowed()) is None
