"""A batch of 0 rows through the layers the rewrite fuses (issue 37's shapes nobody measured): a training step's
outputs are empty and its weight gradients zeros, as TensorFlow gives, on every device with the rewrite on and
off. Before, opencl's MatMul divided by its number of tiles (0) and the cpu's Relu6Grad stepped by a piece of 0."""
from __future__ import annotations

import numpy as np
import pytest

import tfplus as tf

OFF = tf.ConfigProto(graph_options=tf.GraphOptions(rewrite_options=tf.RewriterConfig(
    remapping=tf.RewriterConfig.OFF)))


def _rnn(x):
    rc = tf.nn.rnn_cell
    y, _ = tf.nn.dynamic_rnn(rc.MultiRNNCell([rc.GRUCell(6), rc.LSTMCell(5)]), x, dtype=tf.float32)
    return y


def _depthwise(x):
    w = tf.get_variable("w", [3, 3, 4, 2])
    return tf.nn.relu6(tf.nn.depthwise_conv2d(x, w, [1, 2, 2, 1], "SAME"))


@pytest.mark.parametrize("build, shape, out", [(_rnn, (0, 4, 3), (0, 4, 5)), (_depthwise, (0, 9, 7, 4), (0, 5, 4, 8))],
                         ids=["gru_lstm_stack", "depthwise_relu6"])
@pytest.mark.parametrize("config", [None, OFF], ids=["rewrite", "no_rewrite"])
def test_an_empty_batch_trains_to_zero_gradients(device, build, shape, out, config):
    g = tf.Graph()
    with g.as_default():
        x = tf.placeholder(tf.float32, [None, *shape[1:]])
        y = build(x)
        weights = tf.trainable_variables()
        grads = tf.gradients(tf.reduce_sum(y * y), [x] + weights)
        init = tf.global_variables_initializer()
    with tf.Session(graph=g, device=device, config=config) as sess:
        sess.run(init)
        got = sess.run([y] + grads, {x: np.zeros(shape, np.float32)})
    assert got[0].shape == out and got[1].shape == shape
    for w, dw in zip(weights, got[2:]):
        assert dw.shape == tuple(w.shape.as_list()) and not dw.any(), w.op.name
