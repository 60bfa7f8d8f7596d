"""TF-built training graphs import into tfplus and train to TensorFlow's variable values.

TensorFlow (the tf1 fixture) builds a small CNN + MLP head with variables, `Optimizer.minimize` and
`global_variables_initializer`; its GraphDef is imported with tf.import_graph_def, and both run the init op and
the same training steps. The model is shaped so that TF's gradient code emits the bookkeeping ops it uses for
run-time shapes (Shape, ShapeN, Prod, BroadcastGradientArgs, ConcatOffset, DynamicStitch, GatherV2 ...).
Control flow both ways: tfplus's If/While import and run in TensorFlow, TensorFlow 2's functional ones in tfplus."""
from __future__ import annotations

import numpy as np
import pytest
from conftest import DEVICES
from controlflow import CF_FEEDS, control_flow_model

import tfplus as tf

OPTIMIZERS = {
    "gd": lambda v1: v1.train.GradientDescentOptimizer(0.1),
    "momentum": lambda v1: v1.train.MomentumOptimizer(0.05, 0.9),
    "nesterov": lambda v1: v1.train.MomentumOptimizer(0.05, 0.9, use_nesterov=True),
    "adam": lambda v1: v1.train.AdamOptimizer(0.01),
    "rmsprop": lambda v1: v1.train.RMSPropOptimizer(0.01),
    "rmsprop_momentum": lambda v1: v1.train.RMSPropOptimizer(0.01, momentum=0.5),
    "adagrad": lambda v1: v1.train.AdagradOptimizer(0.1),
    "adadelta": lambda v1: v1.train.AdadeltaOptimizer(1.0),
}
STEPS = 4


def _initial_values():
    rng = np.random.default_rng(7)
    return {"conv/w": rng.standard_normal((3, 3, 1, 4)).astype(np.float32) * 0.5,
            "conv/b": np.full(4, 0.1, np.float32),
            "head/w": rng.standard_normal((72, 3)).astype(np.float32) * 0.2,
            "head/b": np.zeros(3, np.float32)}


def _build_in_tf(v1, make_opt):
    """A training graph built by TensorFlow; returns (graph, var names, feed names, train op name)."""
    init = _initial_values()
    g = v1.Graph()
    with g.as_default():
        x = v1.placeholder(v1.float32, [None, 6, 6, 1], name="x")
        labels = v1.placeholder(v1.int32, [None], name="labels")
        order = v1.placeholder(v1.int32, [None], name="order")

        def var(name):
            return v1.get_variable(name.split("/")[1], initializer=v1.constant_initializer(init[name]),
                                   shape=init[name].shape)
        with v1.variable_scope("conv"):
            h = v1.nn.relu(v1.nn.bias_add(v1.nn.conv2d(x, var("conv/w"), [1, 1, 1, 1], "SAME"), var("conv/b")))
        h = v1.nn.max_pool(h, [1, 2, 2, 1], [1, 2, 2, 1], "VALID")
        h = v1.reshape(h, [v1.shape(h)[0], -1])
        h = v1.concat([h, v1.tanh(h)], axis=1)  # ConcatOffset / ShapeN in the gradient
        h = v1.gather(h, order)  # GatherV2; its IndexedSlices gradient is made dense by UnsortedSegmentSum
        with v1.variable_scope("head"):
            logits = v1.matmul(h, var("head/w")) + var("head/b")  # BroadcastGradientArgs on run-time shapes
        xent = v1.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)
        penalty = v1.reduce_sum(v1.square(logits), axis=1)  # reduced_shape: DynamicStitch
        loss = v1.reduce_mean(xent + 0.01 * penalty)  # Prod of run-time shapes
        train = make_opt(v1).minimize(loss, name="train")
        v1.global_variables_initializer()
    return g, sorted(init), train.name


def _batches():
    rng = np.random.default_rng(3)
    return [{"x:0": rng.standard_normal((5, 6, 6, 1)).astype(np.float32),
             "labels:0": rng.integers(0, 3, 4).astype(np.int32),
             "order:0": rng.permutation(5)[:4].astype(np.int32)} for _ in range(STEPS)]


@pytest.mark.parametrize("opt", sorted(OPTIMIZERS))
def test_tf_built_training_graph_trains_the_same(tf1, opt):
    g, names, train = _build_in_tf(tf1, OPTIMIZERS[opt])
    batches = _batches()
    with tf1.Session(graph=g) as sess:
        sess.run("init")
        for feed in batches:
            sess.run(train, feed)
        want = sess.run([n + ":0" for n in names])
    graph_def = g.as_graph_def()
    emitted = {n.op for n in graph_def.node}
    assert {"GatherV2", "UnsortedSegmentSum", "BroadcastGradientArgs", "Prod", "ShapeN", "DynamicStitch"} <= emitted, \
        sorted(emitted)
    assert not np.allclose(want[2], _initial_values()["head/w"]), "the steps did not train"

    mine = tf.Graph()
    with mine.as_default():
        tf.import_graph_def(graph_def, name="")
    for device in DEVICES:  # one TensorFlow run serves every device
        with tf.Session(graph=mine, device=device) as sess:
            sess.run("init")
            for feed in batches:
                sess.run(train, feed)
            got = sess.run([n + ":0" for n in names])
        for name, a, b in zip(names, got, want):
            np.testing.assert_allclose(a, b, rtol=2e-5, atol=2e-6, err_msg=f"{opt} on {device}: variable {name}")


def test_tfplus_control_flow_training_graph_imports_and_trains_in_tensorflow(tf1):
    """cond, while_loop, cond and while_loop in while_loop, a GRU's dynamic_rnn and their gradients: tfplus writes TF's
    functional If/While with a function library (and, for the gradients, TensorList accumulators of the loops'
    histories), which TensorFlow imports and trains to tfplus's values."""
    with tf.Graph().as_default() as g:
        control_flow_model()
        variables = tf.global_variables()
        with tf.Session() as sess:
            sess.run("init")
            start = sess.run(variables)
            want = [sess.run(["loss:0", "train"], CF_FEEDS)[0] for _ in range(3)] + sess.run(variables)
    graph_def = g.as_graph_def()
    written = {n.op for n in graph_def.node} | {n.op for f in graph_def.library.function for n in f.node_def}
    assert {"If", "While", "EmptyTensorList", "TensorListPushBack", "TensorListStack"} <= written
    theirs = tf1.Graph()
    with theirs.as_default():
        tf1.import_graph_def(tf1.GraphDef.FromString(graph_def.SerializeToString()), name="")
        load = [tf1.assign(theirs.get_tensor_by_name(v.name), value) for v, value in zip(variables, start)]
    with tf1.Session(graph=theirs) as sess:
        sess.run(load)
        got = [sess.run(["loss:0", "train"], CF_FEEDS)[0] for _ in range(3)] + sess.run([v.name for v in variables])
    assert want[2] < want[0]
    for name, a, b in zip(["loss 0", "loss 1", "loss 2"] + [v.name for v in variables], got, want):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6, err_msg=name)


def test_tensorflow_functional_control_flow_imports_and_runs(tf1):
    """What TensorFlow 2 writes for tf.cond / tf.while_loop in a tf.function (StatelessIf, StatelessWhile with a
    loop counter, a function library) imports into tfplus and gives TensorFlow's values."""
    import tensorflow

    def f(x):
        def body(i, v):
            return i + 1, tensorflow.cond(tensorflow.reduce_sum(v) > 0, lambda: v * 0.5, lambda: v - x)
        i, v = tensorflow.while_loop(lambda i, v: i < 3, body, [tensorflow.constant(0), x])
        return tensorflow.cond(i > 2, lambda: v + 1.0, lambda: v), i
    fn = tensorflow.function(f).get_concrete_function(tensorflow.TensorSpec([2], tensorflow.float32))
    graph_def = fn.graph.as_graph_def()
    assert {"StatelessWhile", "StatelessIf"} <= {n.op for n in graph_def.node}
    fetches, feed = [t.name for t in fn.outputs], fn.inputs[0].name
    theirs = tf1.Graph()
    with theirs.as_default():
        tf1.import_graph_def(graph_def, name="")
    mine = tf.Graph()
    with mine.as_default():
        tf.import_graph_def(graph_def, name="")
    for x in ([1.5, -0.5], [-2.0, 0.5]):
        with tf1.Session(graph=theirs) as sess:
            want = sess.run(fetches, {feed: x})
        with tf.Session(graph=mine) as sess:
            got = sess.run(fetches, {feed: x})
        for a, b in zip(got, want):
            np.testing.assert_allclose(a, b, rtol=1e-6)
