"""TF1 training graphs move both ways with their checkpoints, as a user moves them: TensorFlow builds a model
(tf.layers dense and conv, batch norm whose moving averages update through UPDATE_OPS, a dynamic_rnn's
while_loop, an optimizer's train_op), writes export_meta_graph + a Saver checkpoint; tfplus imports the meta graph,
restores, fetches the train_op and loss from the collections by name, and runs the same 3 steps to TensorFlow's
losses and variables. And the reverse: a tfplus-built graph and checkpoint trained on in TensorFlow."""
from __future__ import annotations

import os

import numpy as np
import pytest

import tfplus as tf

STEPS = 3
RNG = np.random.default_rng(5)
FEED = {"x:0": RNG.standard_normal((4, 5, 3)).astype(np.float32), "labels:0": np.array([0, 1, 2, 1], np.int32)}


def _build(t, rnn: bool = False):
    """The model in `t` (tensorflow.compat.v1 or tfplus), its input read by a GRU's dynamic_rnn if `rnn`, else by
    a conv layer; the train op and loss are collected."""
    x = t.placeholder(t.float32, [None, 5, 3], name="x")
    labels = t.placeholder(t.int32, [None], name="labels")
    if rnn:
        cell = t.nn.rnn_cell.GRUCell(4, kernel_initializer=t.glorot_uniform_initializer(seed=2))
        out, _ = t.nn.dynamic_rnn(cell, x, dtype=t.float32)
        h = out[:, -1]
    else:
        h = t.layers.conv1d(x, 4, 2, kernel_initializer=t.glorot_uniform_initializer(seed=2))
        h = t.reshape(h, [-1, 16])
    h = t.layers.dense(h, 6, kernel_initializer=t.glorot_uniform_initializer(seed=3))
    h = t.nn.relu(t.layers.batch_normalization(h, training=True))
    logits = t.layers.dense(h, 3, kernel_initializer=t.glorot_uniform_initializer(seed=4))
    loss = t.reduce_mean(t.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits))
    with t.control_dependencies(t.get_collection(t.GraphKeys.UPDATE_OPS)):
        train = t.train.MomentumOptimizer(0.05, 0.9).minimize(loss, global_step=t.train.get_or_create_global_step())
    t.add_to_collection("loss", loss)
    t.add_to_collection(t.GraphKeys.TRAIN_OP, train)


def _save(t, folder, rnn: bool = False) -> str:
    """Builds, initializes and checkpoints the model in `t`; returns the checkpoint's path."""
    with t.Graph().as_default():
        _build(t, rnn)
        saver = t.train.Saver()
        with t.Session() as sess:
            sess.run(t.global_variables_initializer())
            path = saver.save(sess, os.path.join(folder, "model"))
        t.train.export_meta_graph(path + ".meta")
    return path


def _train(t, path) -> list:
    """What a script with no model code does in `t`: import the meta graph, restore, train STEPS steps by the
    collections' names; returns the losses and then every global variable's value (sorted by name)."""
    with t.Graph().as_default():
        saver = t.train.import_meta_graph(path + ".meta")
        loss, train = t.get_collection("loss")[0], t.get_collection(t.GraphKeys.TRAIN_OP)[0]
        with t.Session() as sess:
            saver.restore(sess, path)
            losses = [sess.run([loss, train], FEED)[0] for _ in range(STEPS)]
            variables = sorted(t.global_variables(), key=lambda v: v.name)
            return losses + [(v.name, value) for v, value in zip(variables, sess.run(variables))]


def _compare(got, want):
    assert len(got) == len(want)
    assert want[STEPS - 1] < want[0], "the steps did not train"
    for k, (a, b) in enumerate(zip(got, want)):
        if k < STEPS:
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6, err_msg=f"loss of step {k}")
        else:
            assert a[0] == b[0]
            np.testing.assert_allclose(a[1], b[1], rtol=1e-4, atol=1e-5, err_msg=f"variable {a[0]}")


def test_tensorflow_training_graph_trains_in_tfplus(tf1, tmp_path):
    path = _save(tf1, str(tmp_path))
    _compare(_train(tf, path), _train(tf1, path))


def test_tfplus_training_graph_trains_in_tensorflow(tf1, tmp_path):
    path = _save(tf, str(tmp_path))
    _compare(_train(tf1, path), _train(tf, path))


@pytest.mark.xfail(strict=True, raises=ValueError, reason="TensorFlow 2's dynamic_rnn loop carries TensorLists "
                   "(TensorListReserve, TensorListSetItem, ...: DT_VARIANT values), which tfplus has no ops for")
def test_tensorflow_dynamic_rnn_training_graph_trains_in_tfplus(tf1, tmp_path):
    path = _save(tf1, str(tmp_path), rnn=True)  # the import raises, naming the node and its op type
    _compare(_train(tf, path), _train(tf1, path))


def test_graph_def_keeps_the_reads_of_a_weight_before_its_update():
    """TensorFlow runs a GraphDef's nodes in any order its edges allow, and its `w/read` aliases the variable: so
    the update of the second layer's weight waits, by a control input, for the backward MatMul reading it
    (tfplus's planner keeps that order without the edge); a round trip keeps the edges, adding none."""
    with tf.Graph().as_default() as g:
        x = tf.placeholder(tf.float32, [None, 3], name="x")
        w1 = tf.Variable(np.ones((3, 4), np.float32), name="w1")
        w2 = tf.Variable(np.ones((4, 2), np.float32), name="w2")
        loss = tf.reduce_sum(tf.matmul(tf.nn.relu(tf.matmul(x, w1)), w2))
        tf.train.GradientDescentOptimizer(0.1).minimize(loss, name="train")
    graph_def = g.as_graph_def()
    nodes = {n.name: n for n in graph_def.node}
    update = next(n for n in graph_def.node if n.op == "ApplyGradientDescent" and n.input[0] == "w2")
    backward = next(n.name for n in graph_def.node if n.op == "MatMul" and "w2/read" in n.input and
                    n.name.startswith("gradients/"))
    assert "^" + backward in update.input
    assert not any(i.startswith("^") for i in nodes["w2/Assign"].input), "an initializer waits for no read"
    with tf.Graph().as_default() as again:
        tf.import_graph_def(graph_def, name="")
    assert again.as_graph_def() == graph_def
