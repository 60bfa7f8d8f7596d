"""Weights fed per example under micro-batching: tf.losses' weighted MEAN and SUM_BY_NONZERO_WEIGHTS divide the
weighted sum by the whole batch's sum (or nonzero count) of the weights. That divisor depends on the fed weights
alone, so a statistics pass computes it for the whole batch and every micro-batch divides its share of the sum by
it (planner.crossbatch.fed_only): the step trains as the unbudgeted one, as does the same loss written with the
weights normalized and reduction=SUM. A divisor the variables compute (reduce_sum(predictions)) is refused,
naming its op and what to do. At its floor (no micro-batches) the step trains as the unbudgeted one."""
from __future__ import annotations

import gc

import numpy as np
import pytest

import tfplus as tf
from tfplus import planner
from tfplus.runtime.facts import device_facts

BATCH = 8
RUNS = 3
TOL = 1e-5


def _step(reduction: str, normalized: bool = False):
    """A dense classifier, its per-example losses weighted by fed weights (some zero) and reduced by `reduction`;
    `normalized` feeds the weights divided by their sum (MEAN) or nonzero count (SUM_BY_NONZERO_WEIGHTS) and
    reduces by SUM instead."""
    rng = np.random.default_rng(0)
    g = tf.Graph()
    with g.as_default():
        x, y = tf.placeholder(tf.float32, [None, 6], name="x"), tf.placeholder(tf.int32, [None], name="y")
        weights = tf.placeholder(tf.float32, [None], name="weights")
        w1 = tf.Variable((rng.standard_normal((6, 8)) / 3).astype(np.float32))
        w2 = tf.Variable((rng.standard_normal((8, 3)) / 3).astype(np.float32))
        logits = tf.matmul(tf.nn.tanh(tf.matmul(x, w1)), w2)
        how = tf.losses.Reduction.SUM if normalized else getattr(tf.losses.Reduction, reduction)
        loss = tf.losses.sparse_softmax_cross_entropy(y, logits, weights=weights, reduction=how)
        train = tf.train.MomentumOptimizer(0.1, 0.9).minimize(loss)
        init = tf.global_variables_initializer()
    w = (rng.random(BATCH) * (rng.random(BATCH) > 0.3)).astype(np.float32)
    if normalized:
        w = w / (w.sum() if reduction == "MEAN" else np.count_nonzero(w))
    feeds = {x: rng.standard_normal((BATCH, 6)).astype(np.float32), y: rng.integers(0, 3, BATCH).astype(np.int32),
             weights: w}
    return g, [train, loss], feeds, init


def _train(case, force=None, floor=False):
    g, fetches, feeds, init = case
    gc.collect()
    with tf.Session(graph=g, memory_budget="1GB" if force or floor else None) as sess:
        sess.run(init)
        p = None
        if force or floor:
            step = sess.step(fetches, feeds)
            facts = device_facts(sess.runtime)
            budget = planner.floor_plan(step.fetches, step.feed_shapes, facts, graph=step.graph).budget_bytes \
                if floor else None
            p = planner.plan(step.fetches, step.feed_shapes, facts, budget, graph=step.graph, force=force)
            step.use_plan(p)
        losses = [sess.run(fetches, feeds)[1] for _ in range(RUNS)]
        variables = [sess.run(v) for v in g.get_collection("variables")]
    return losses, variables, p


def _assert_same(got, want, what):
    np.testing.assert_allclose(got[0], want[0], rtol=TOL, atol=TOL / 10, err_msg=f"{what}: losses")
    for a, b in zip(got[1], want[1]):
        np.testing.assert_allclose(a, b, rtol=TOL, atol=TOL / 10, err_msg=f"{what}: weights")


@pytest.mark.parametrize("reduction", ["MEAN", "SUM_BY_NONZERO_WEIGHTS"])
def test_a_loss_over_the_sum_of_fed_weights_micro_batches_as_the_unbudgeted_step(reduction):
    want = _train(_step(reduction))
    got = _train(_step(reduction), force=(4, 1))
    assert got[2].microbatches == 4
    _assert_same(got, want, f"{reduction} of fed weights in 4 micro-batches")


def test_a_loss_over_a_sum_the_variables_compute_is_refused_naming_the_op_and_the_fix():
    g = tf.Graph()
    with g.as_default():
        x = tf.placeholder(tf.float32, [None, 6], name="x")
        p = tf.nn.softplus(tf.matmul(x, tf.Variable(np.ones((6, 1), np.float32))))
        loss = tf.reduce_sum(tf.square(p - 1.0)) / tf.reduce_sum(p, name="total")
        train = tf.train.GradientDescentOptimizer(0.1).minimize(loss)
    with tf.Session(graph=g, memory_budget="1GB") as sess:
        step = sess.step([train, loss], {x: np.ones((BATCH, 6), np.float32)})
        with pytest.raises(planner.PlanError, match=r"cannot micro-batch: Sum '(total|Sum/.*)' sums its input over the "
                                                    r"batch .*values the variables compute.*divide by a value of the "
                                                    r"fed tensors alone \(weights, a mask\)"):
            planner.plan(step.fetches, step.feed_shapes, "cpu", graph=step.graph, force=(4, 1))


@pytest.mark.parametrize("reduction", ["MEAN", "SUM_BY_NONZERO_WEIGHTS"])
def test_the_weights_normalized_with_reduction_sum_micro_batch_exactly_as_the_weighted_mean(reduction):
    want = _train(_step(reduction))
    got = _train(_step(reduction, normalized=True), force=(4, 1))
    assert got[2].microbatches == 4
    _assert_same(got, want, f"{reduction} as SUM of normalized weights in 4 micro-batches")


def test_a_weighted_mean_at_its_floor_trains_as_the_unbudgeted_step():
    want = _train(_step("MEAN"))
    got = _train(_step("MEAN"), floor=True)
    assert got[2].microbatches == 1
    _assert_same(got, want, "weighted MEAN at its floor")
