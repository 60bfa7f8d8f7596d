"""Random draws under micro-batching: a micro-batch draws its rows of the unsplit step's numbers (KernelContext.
random_draw), which a draw along an open leading dimension that is not the batch's rows has none of: the planner
refuses to micro-batch such a step, naming the op, where it trained on other numbers than the unsplit step."""
from __future__ import annotations

import numpy as np
import pytest

import tfplus as tf
from tfplus import planner
from tfplus.planner.liveness import PlanError
from tfplus.runtime.facts import device_facts


def test_a_draw_along_a_fed_length_that_is_not_the_batchs_is_not_micro_batched():
    g = tf.Graph()
    with g.as_default():
        x = tf.placeholder(tf.float32, [None, 4])
        k = tf.placeholder(tf.float32, [None])  # a length of its own (5), not the batch's (16)
        w = tf.Variable(np.ones((4, 2), np.float32))
        shift = tf.reduce_mean(tf.random_uniform(tf.shape(k), seed=5) * k)
        loss = tf.reduce_mean(tf.square(tf.matmul(x, w) - shift))
        train = tf.train.GradientDescentOptimizer(0.1).minimize(loss)
    shapes = {x: (16, 4), k: (5,)}
    with pytest.raises(PlanError, match="RandomUniform 'random_uniform' draws random numbers along an open leading "
                                        "dimension that is not the batch's rows"):
        planner.plan([train, loss], shapes, device_facts("cpu"), graph=g, force=(2, 1))
    # a draw along the batch's rows is each micro-batch's rows of the step's: micro-batched
    with g.as_default():
        noisy = tf.reduce_mean(tf.square(tf.matmul(x, w) - tf.random_uniform(tf.shape(x)[:1], seed=6)[:, None]))
        train2 = tf.train.GradientDescentOptimizer(0.1).minimize(noisy)
    assert planner.plan([train2, noisy], {x: (16, 4)}, device_facts("cpu"), graph=g, force=(2, 1)).microbatches == 2
