"""A streamed prefix that draws random numbers (a fine-tuned network's frozen layers with dropout: a prefix
without a backward pass, planner.stream) draws the unstreamed step's numbers: each micro-batch its rows of the
step's one draw (memory.Bound._stream_passes, KernelContext.random_draw), on both devices."""
from __future__ import annotations

import numpy as np
import pytest
from conftest import needs_opencl

import tfplus as tf
from tfplus import planner
from tfplus.engine.memory import install
from tfplus.runtime.facts import device_facts

STEPS = 5


def _net():
    """Dropout on the images, a frozen convolution and pool (the prefix), a trained dense layer."""
    g = tf.Graph()
    with g.as_default():
        tf.set_random_seed(11)
        x = tf.placeholder(tf.float32, [None, 3, 8, 8])
        y = tf.placeholder(tf.int32, [None])
        h = tf.nn.dropout(x, rate=0.25)
        h = tf.layers.conv2d(h, 4, 3, padding="same", data_format="channels_first", activation=tf.nn.relu,
                             trainable=False)
        h = tf.nn.max_pool(h, [1, 1, 2, 2], [1, 1, 2, 2], "VALID", data_format="NCHW", name="MaxPool")
        logits = tf.layers.dense(tf.layers.flatten(h), 3)
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
        train = tf.train.GradientDescentOptimizer(0.5).minimize(loss)
        init = tf.global_variables_initializer()
    rng = np.random.default_rng(4)
    feeds = {x: rng.standard_normal((8, 3, 8, 8)).astype(np.float32), y: rng.integers(0, 3, 8).astype(np.int32)}
    return g, init, [train, loss], feeds


def _losses(device: str, streamed: bool) -> list:
    g, init, fetches, feeds = _net()
    with tf.Session(graph=g, device=device) as sess:
        sess.run(init)
        if streamed:
            p = planner.plan(fetches, {t: v.shape for t, v in feeds.items()}, device_facts(sess.runtime), graph=g,
                             force=(1, 1, False, 1, 0, ("MaxPool:0", 4)))
            assert p.stream is not None and p.stream_microbatches == 4 and not p.stream.backward
            install(sess, fetches, p)
        return [sess.run(fetches, feeds)[1] for _ in range(STEPS)]


@pytest.mark.parametrize("device", ["cpu", pytest.param("opencl", marks=needs_opencl)])
def test_a_streamed_prefix_draws_the_unstreamed_steps_numbers(device):
    want = _losses(device, False)
    got = _losses(device, True)
    np.testing.assert_allclose(got, want, rtol=1e-5)
    assert len(set(np.round(want, 6))) > 1, "the draws and the step change the loss"
