"""The batch-norm passes of the graph rewrite (tfplus/engine/rewrite_bn.py): a step's moving averages in one op,
with the same bits as the chains it replaces."""
from __future__ import annotations

import numpy as np
import pytest

import tfplus as tf
from tfplus.engine.rewrite import optimize
from tfplus.train.moving_averages import assign_moving_average

_OFF = tf.ConfigProto(graph_options=tf.GraphOptions(rewrite_options=tf.RewriterConfig(
    remapping=tf.RewriterConfig.OFF)))


def _fused_ops(r, op_type: str) -> list:
    return [op for op in r.graph.get_operations() if op.type == op_type]


def _bn_stack(dtype, layers: int = 5):
    """(graph, x, output, the update ops, an EMA of the gammas' op, init) of `layers` batch-norm layers (NHWC and
    NCHW by turns): 2 * layers moving averages, plus ExponentialMovingAverage's of each gamma."""
    g = tf.Graph()
    with g.as_default():
        x = tf.placeholder(dtype, [6, 3, 4, 4])
        h = x
        for i in range(layers):
            h = tf.layers.batch_normalization(h, axis=1 if i % 2 else -1, momentum=0.9 - 0.1 * i, training=True,
                                              name=f"bn{i}")
            h = tf.nn.relu6(h * 3.0)
        updates = tf.get_collection(tf.GraphKeys.UPDATE_OPS)  # operations, as in TF1
        gammas = [v for v in tf.trainable_variables() if "gamma" in v.op.name]
        ema = tf.train.ExponentialMovingAverage(0.99, num_updates=tf.constant(3.0, dtype))
        with tf.control_dependencies(updates):
            averaged = ema.apply(gammas)
        init = tf.global_variables_initializer()
    return g, x, h, updates, averaged, init


@pytest.mark.parametrize("dtype", [tf.float32, tf.float64])
def test_the_moving_averages_of_a_step_fuse_into_one_op_with_the_same_bits(device, dtype):
    """Ten batch-norm moving averages (two launches of eight slots on opencl) in one op, and five EMA shadows
    in another (they wait for batch norm's updates: control_dependencies), update as their Sub, Mul and AssignSub
    kernels do, bit for bit; the user's graph is untouched."""
    g, x, y, updates, averaged, init = _bn_stack(dtype)
    before = g.as_graph_def().SerializeToString(deterministic=True)
    r = optimize(g, [y, averaged], [x])
    assert r.fused == {"_FusedMovingAverages": 2}
    bn, ema = _fused_ops(r, "_FusedMovingAverages")
    assert bn.attrs["num_vars"] == 10 and bn.op_def.ref_inputs == tuple(range(0, 30, 3))
    assert ema.attrs["num_vars"] == 5 and bn in ema.control_inputs
    assert not _fused_ops(r, "AssignSub") and len(_fused_ops(r, "Sub")) == 5  # left: EMA's 1 - decay
    assert g.as_graph_def().SerializeToString(deterministic=True) == before
    feed = {x: np.random.default_rng(0).uniform(-2, 5, (6, 3, 4, 4)).astype(dtype.np)}
    got = []
    for config in (None, _OFF):
        with tf.Session(graph=g, device=device, config=config) as sess:
            sess.run(init)
            for _ in range(2):
                sess.run([y, averaged], feed)
            got.append(sess.run(g.get_collection(tf.GraphKeys.GLOBAL_VARIABLES)))
    for a, b in zip(*got):
        assert a.tobytes() == b.tobytes()


def test_the_moving_averages_of_a_step_equal_numpy(device):
    """What the fused op leaves in each variable: v - (v - x) * (1 - decay), in float32 as the chain rounds it."""
    rng = np.random.default_rng(1)
    sizes = [1, 3, 7, 300, 2, 5, 11, 13, 1, 257]
    init = [rng.standard_normal(n).astype(np.float32) for n in sizes]
    values = [rng.standard_normal(n).astype(np.float32) for n in sizes]
    decays = rng.uniform(0.5, 1, len(sizes)).astype(np.float32)
    g = tf.Graph()
    with g.as_default():
        vs = [tf.Variable(v) for v in init]
        step = tf.group(*[assign_moving_average(v, tf.constant(x), tf.constant(d)).op
                          for v, x, d in zip(vs, values, decays)])
        init_op = tf.variables_initializer(vs)
    assert optimize(g, [step], []).fused == {"_FusedMovingAverages": 1}
    with tf.Session(graph=g, device=device) as sess:
        sess.run(init_op)
        sess.run(step)
        got = sess.run(vs)
    for v0, x, d, v in zip(init, values, decays, got):
        want = v0 - (v0 - x) * (np.float32(1) - d)
        assert v.tobytes() == want.tobytes()


def test_a_moving_average_whose_chain_is_read_fetched_or_doubled_stays_as_built():
    g = tf.Graph()
    with g.as_default():
        x = tf.placeholder(tf.float32, [4])
        vs = [tf.Variable(tf.zeros([4])) for _ in range(5)]
        ups = [assign_moving_average(v, x, 0.9) for v in vs[:4]]
        twice = assign_moving_average(vs[0], x * 2.0, 0.5)           # a second update of vs[0]
        broadcast = assign_moving_average(vs[4], x[0], 0.5)           # a scalar value: Sub broadcasts it
    ops = [u.op for u in ups]

    def members(r):
        (fused,) = _fused_ops(r, "_FusedMovingAverages")
        return fused.attrs["num_vars"], {op.name for op in r.graph.get_operations() if op.type == "AssignSub"}
    assert members(optimize(g, ops, [x])) == (4, set())
    assert members(optimize(g, ops + [ups[3]], [x])) == (3, {ups[3].op.name})       # its output fetched
    sub = ups[2].op.inputs[1].op.inputs[0]
    assert sub.op.type == "Sub"
    assert members(optimize(g, ops + [sub], [x])) == (3, {ups[2].op.name})          # its Sub fetched
    r = optimize(g, ops + [twice.op, broadcast.op], [x])
    assert members(r) == (3, {ups[0].op.name, twice.op.name, broadcast.op.name})  # vs[0] twice; a broadcast


def _bn_relu_net(data_format: str = "NCHW"):
    """(graph, x, loss, train_op, init) of conv -> batch norm -> relu6 -> conv -> batch norm -> relu, a mean of
    squares for the loss (no fused cross-entropy), the updates under the moving averages' control dependencies."""
    rng = np.random.default_rng(3)
    nchw = data_format == "NCHW"
    g = tf.Graph()
    with g.as_default():
        x = tf.placeholder(tf.float32, [None, 3, 6, 6] if nchw else [None, 6, 6, 3])
        h = x
        for i, act in enumerate((tf.nn.relu6, tf.nn.relu)):
            w = tf.Variable((rng.standard_normal((3, 3, 3, 3)) / 4).astype(np.float32))
            h = tf.nn.conv2d(h, w, [1, 1, 1, 1], "SAME", data_format=data_format)
            h = act(tf.layers.batch_normalization(h, axis=1 if nchw else -1, training=True, name=f"bn{i}"))
        loss = tf.reduce_mean(tf.square(h - 1.0))
        with tf.control_dependencies(tf.get_collection(tf.GraphKeys.UPDATE_OPS)):
            # GATE_GRAPH: TensorFlow, the oracle, would otherwise update a weight before a gradient reads it
            train_op = tf.train.GradientDescentOptimizer(0.3).minimize(
                loss, gate_gradients=tf.train.Optimizer.GATE_GRAPH)
        init = tf.global_variables_initializer()
    return g, x, loss, train_op, init


@pytest.mark.parametrize("data_format", ["NCHW", "NHWC"])
def test_batch_norm_and_relu_fuse_forward_and_backward_with_the_same_bits(device, data_format):
    """Each batch norm and its Relu6 / Relu become one op, their gradients one op (a launch and a pass less each
    way; V3's reserve zeroed in the statistics' kernel), and three steps leave every variable as the unfused
    graph does, bit for bit."""
    g, x, loss, train_op, init = _bn_relu_net(data_format)
    r = optimize(g, [train_op, loss], [x])
    assert r.fused["_FusedBatchNormRelu"] == 2 and r.fused["_FusedBatchNormReluGrad"] == 2
    assert not {"FusedBatchNormV3", "FusedBatchNormGradV3", "Relu", "Relu6", "ReluGrad", "Relu6Grad"} & \
        {op.type for op in r.graph.get_operations()}
    feed = {x: np.random.default_rng(0).uniform(-2, 3, [5] + x.shape.as_list()[1:]).astype(np.float32)}
    got = []
    for config in (None, _OFF):
        with tf.Session(graph=g, device=device, config=config) as sess:
            sess.run(init)
            losses = [sess.run([train_op, loss], feed)[1] for _ in range(3)]
            got.append((losses, sess.run(g.get_collection(tf.GraphKeys.GLOBAL_VARIABLES))))
    assert got[0][0] == got[1][0]
    for a, b in zip(got[0][1], got[1][1]):
        assert a.tobytes() == b.tobytes()


def test_a_relu6_gradient_that_feeds_more_than_the_norm_reads_the_fused_output():
    """A Relu6Grad whose output something besides the norm's gradient reads stays a Relu6Grad, reading the fused
    op's output z for its mask; a normalized value read elsewhere (fetched) leaves the pair as built."""
    g = tf.Graph()
    with g.as_default():
        x = tf.placeholder(tf.float32, [4, 2, 3, 3])
        y = tf.layers.batch_normalization(x, axis=1, training=True)
        z = tf.nn.relu6(y)
        dz = tf.placeholder(tf.float32, [4, 2, 3, 3])
        dy = tf.gradients(z, [y], grad_ys=[dz])[0]
        dx = tf.gradients(y, [x], grad_ys=[dy])[0]
        init = tf.global_variables_initializer()
    assert optimize(g, [dx, dy], [x, dz]) is None  # no Relu6 runs: nothing to fuse
    r = optimize(g, [dx, dy, z], [x, dz])
    assert r.fused == {"_FusedBatchNormRelu": 1}
    (q,) = [op for op in r.graph.get_operations() if op.type == "Relu6Grad"]
    assert q.inputs[1].op.type == "_FusedBatchNormRelu" and q.inputs[1].value_index == 0
    assert optimize(g, [dx, z], [x, dz]).fused == {"_FusedBatchNormRelu": 1, "_FusedBatchNormReluGrad": 1}
    assert optimize(g, [dx, z, y], [x, dz]) is None
    rng = np.random.default_rng(0)
    feed = {x: rng.uniform(-2, 2, (4, 2, 3, 3)).astype(np.float32), dz: rng.standard_normal((4, 2, 3, 3))
            .astype(np.float32)}
    with tf.Session(graph=g) as fused, tf.Session(graph=g, config=_OFF) as plain:
        fused.run(init)
        plain.run(init)
        a, b = fused.run([dx, dy, z], feed), plain.run([dx, dy, z], feed)
    assert all(u.tobytes() == v.tobytes() for u, v in zip(a, b))


def test_a_micro_batched_plan_of_the_fused_step_trains_as_the_unsplit_step():
    """The planner's statistics passes (micro-batching with batch norm) take the fused norms apart with their
    activations: the same losses and variables as the plain unfused step."""
    from tfplus import planner
    from tfplus.engine.memory import install
    g, x, loss, train_op, init = _bn_relu_net()
    feed = {x: np.random.default_rng(1).uniform(-2, 3, (8, 3, 6, 6)).astype(np.float32)}
    fetches = [train_op, loss]
    r = optimize(g, fetches + [init], [x])
    assert r.fused["_FusedBatchNormRelu"] == 2 and r.fused["_FusedBatchNormReluGrad"] == 2
    new_fetches = [r.element[f] for f in fetches]
    with tf.Session(graph=r.graph, memory_budget="1GB") as sess:
        sess.run(r.element[init])
        p = planner.plan(new_fetches, {r.element[x]: (8, 3, 6, 6)}, graph=r.graph, force=(2, 1))
        assert p.microbatches == 2 and len(p.statistics) == 4  # a pass per norm forward, one backward
        install(sess, new_fetches, p)
        split = [sess.run(new_fetches, {r.element[x]: feed[x]})[1] for _ in range(2)]
    with tf.Session(graph=g, config=_OFF) as sess:
        sess.run(init)
        plain = [sess.run(fetches, feed)[1] for _ in range(2)]
    np.testing.assert_allclose(split, plain, rtol=1e-5)


@pytest.mark.parametrize("data_format", ["NCHW", "NHWC"])
def test_the_fused_batch_norm_step_matches_tensorflow(tf1, device, data_format):
    """Three training steps of the fused step (norm + activation, their gradients, one moving-average op) against
    TensorFlow running the same GraphDef: losses, weights and moving statistics."""
    from tforacle import import_into_tf
    g, x, loss, train_op, init = _bn_relu_net(data_format)
    assert optimize(g, [train_op, loss], [x]).fused["_FusedMovingAverages"] == 1
    feed = np.random.default_rng(2).uniform(-2, 3, [6] + x.shape.as_list()[1:]).astype(np.float32)
    variables = g.get_collection(tf.GraphKeys.GLOBAL_VARIABLES)
    with tf.Session(graph=g, device=device) as sess:
        sess.run(init)
        mine = [sess.run([train_op, loss], {x: feed})[1] for _ in range(3)]
        mine_vars = sess.run(variables)
    tf_graph = import_into_tf(tf1, g)
    with tf1.Session(graph=tf_graph) as sess:
        sess.run(tf_graph.get_operation_by_name(init.name))
        theirs = [sess.run([tf_graph.get_operation_by_name(train_op.name), tf_graph.get_tensor_by_name(loss.name)],
                           {x.name: feed})[1] for _ in range(3)]
        their_vars = sess.run([tf_graph.get_tensor_by_name(v.name) for v in variables])
    # float32 sums in other orders (the fused step has the unfused step's bits: the tests above)
    np.testing.assert_allclose(mine, theirs, rtol=1e-4)
    for v, a, b in zip(variables, mine_vars, their_vars):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5, err_msg=v.name)


def test_an_inference_batch_norm_fuses_with_its_relu6_with_the_same_bits(device):
    """is_training=False (the moving statistics) fuses too: the apply pass clamps as it writes."""
    rng = np.random.default_rng(4)
    g = tf.Graph()
    with g.as_default():
        x = tf.placeholder(tf.float32, [3, 5, 4, 4])
        stats = [tf.constant(rng.uniform(0.5, 2, 5).astype(np.float32)) for _ in range(4)]
        y, _, _ = tf.nn.fused_batch_norm(x, *stats, data_format="NCHW", is_training=False)
        y2, _, _ = tf.nn.fused_batch_norm(x, *stats, data_format="NCHW", is_training=False)
        z = tf.nn.relu6(y * 1.0) + tf.nn.relu6(y2)
    r = optimize(g, [z], [x])
    assert r.fused == {"_FusedBatchNormRelu": 1}  # the first norm's y feeds a Mul, not the activation
    feed = {x: rng.uniform(-4, 8, (3, 5, 4, 4)).astype(np.float32)}
    with tf.Session(graph=g, device=device) as fused, tf.Session(graph=g, device=device, config=_OFF) as plain:
        assert fused.run(z, feed).tobytes() == plain.run(z, feed).tobytes()
