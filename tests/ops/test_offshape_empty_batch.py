"""A batch of 0 rows through the layers the rewrite fuses (issue 37's shapes nobody measured): a training step's
outputs are empty and its weight gradients zeros, as TensorFlow gives, on every device with the rewrite on and
off, and on opencl with the GPU's conv variants and backward folds. Before, opencl's MatMul and convs divided by
their number of tiles (0), the filter gradient by its empty sum's depth, and the cpu's Relu6Grad stepped by 0."""
from __future__ import annotations

import numpy as np
import pytest
from conftest import needs_opencl

import tfplus as tf
from tfplus.kernels.opencl.conv import GPU_VARIANTS

OFF = tf.ConfigProto(graph_options=tf.GraphOptions(rewrite_options=tf.RewriterConfig(
    remapping=tf.RewriterConfig.OFF)))


def _rnn(x):
    rc = tf.nn.rnn_cell
    y, _ = tf.nn.dynamic_rnn(rc.MultiRNNCell([rc.GRUCell(6), rc.LSTMCell(5)]), x, dtype=tf.float32)
    return y


def _depthwise(x):
    w = tf.get_variable("w", [3, 3, 4, 2])
    return tf.nn.relu6(tf.nn.depthwise_conv2d(x, w, [1, 2, 2, 1], "SAME"))


def _conv(x):
    w, b = tf.get_variable("w", [3, 3, 4, 5]), tf.get_variable("b", [5])
    return tf.nn.relu(tf.nn.bias_add(tf.nn.conv2d(x, w, [1, 1, 1, 1], "SAME"), b))


BUILDS = {"gru_lstm_stack": (_rnn, (0, 4, 3), (0, 4, 5)), "depthwise_relu6": (_depthwise, (0, 9, 7, 4), (0, 5, 4, 8)),
          "conv_bias_relu": (_conv, (0, 9, 7, 4), (0, 9, 7, 5))}


@pytest.mark.parametrize("name", list(BUILDS))
@pytest.mark.parametrize("config", [None, OFF], ids=["rewrite", "no_rewrite"])
def test_an_empty_batch_trains_to_zero_gradients(device, name, config):
    _check(device, *BUILDS[name], config)


@needs_opencl
def test_an_empty_batch_through_the_gpu_conv_variants_and_folds(monkeypatch):
    monkeypatch.setenv("TFPLUS_CONV_VARIANTS", ",".join(sorted(GPU_VARIANTS)))
    monkeypatch.setenv("TFPLUS_BACKWARD_FOLDS", "1")
    _check("opencl", *BUILDS["conv_bias_relu"], None)


def _check(device, build, shape, out, config):
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
