"""A graph with every kind of TF1 control flow, shared by the control-flow, GraphDef, summary and TensorFlow-import
tests."""
from __future__ import annotations

import numpy as np

import tfplus as tf

_RNG = np.random.default_rng(5)
_X, _W = _RNG.standard_normal((2, 3)), _RNG.standard_normal((3, 3))  # test_control_flow's X and W, drawn the same
CF_FEEDS = {"x:0": _X.astype(np.float32), "seq:0": _RNG.standard_normal((2, 5, 3)).astype(np.float32)}


def control_flow_model(train: bool = True):
    """In the default graph: tf.cond, tf.while_loop, a tf.cond inside a tf.while_loop, a tf.while_loop inside one and a
    GRU's dynamic_rnn over a run-time number of steps (a tf.while_loop over TensorArrays); with `train`, their
    gradients and a global step.
    Feed CF_FEEDS; fetch "loss:0", "acc:0", "rnn_out:0", "train", "init"."""
    tf.set_random_seed(3)
    x = tf.placeholder(tf.float32, [2, 3], name="x")
    seq = tf.placeholder(tf.float32, [2, None, 3], name="seq")
    w = tf.Variable(np.linspace(-1, 1, 9, dtype=np.float32).reshape(3, 3), name="w")
    y = tf.matmul(x, w)
    c = tf.cond(tf.reduce_sum(y) > 0, lambda: y * 2.0, lambda: y - 1.0, name="branch")

    def body(i, a):
        return i + 1, tf.cond(i > 1, lambda: a * 0.5, lambda: tf.tanh(a + c))
    acc = tf.identity(tf.while_loop(lambda i, a: i < 4, body, [0, c], name="loop")[1], name="acc")

    def outer(i, v):
        inner = tf.while_loop(lambda j, u: j < 2, lambda j, u: (j + 1, tf.sin(u * w[0]) + 0.1), [0, v])[1]
        return i + 1, inner * 0.9
    nested = tf.while_loop(lambda i, v: i < 2, outer, [0, x], name="nested")[1]
    out = tf.identity(tf.nn.dynamic_rnn(tf.nn.rnn_cell.GRUCell(4), seq, dtype=tf.float32)[0], name="rnn_out")
    loss = tf.add_n([tf.reduce_mean(acc * acc), tf.reduce_mean(out * out), tf.reduce_mean(nested * nested)],
                    name="loss")
    if train:
        step = tf.train.get_or_create_global_step()
        tf.train.GradientDescentOptimizer(0.5).minimize(loss, global_step=step, name="train")
    tf.global_variables_initializer()
