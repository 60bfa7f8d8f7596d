"""Graph construction, the Session executor, variables and scopes."""
import numpy as np
import pytest

import tfplus as tf


@pytest.fixture(autouse=True)
def fresh_graph():
    tf.reset_default_graph()
    yield


def test_names_are_unique_and_scoped():
    a = tf.constant(1.0, name="c")
    b = tf.constant(2.0, name="c")
    with tf.name_scope("layer"):
        c = tf.constant(3.0, name="c")
        with tf.name_scope("inner"):
            d = tf.identity(c)
    with tf.name_scope("layer"):
        e = tf.constant(4.0, name="c")
    assert [a.name, b.name, c.name, d.name, e.name] == \
        ["c:0", "c_1:0", "layer/c:0", "layer/inner/Identity:0", "layer_1/c:0"]
    g = tf.get_default_graph()
    assert g.get_tensor_by_name("layer/c:0") is c
    assert g.get_operation_by_name("c_1") is b.op


def test_graph_as_default_and_reset():
    g = tf.Graph()
    with g.as_default():
        x = tf.constant(1.0)
        assert tf.get_default_graph() is g
    assert x.graph is g
    assert tf.get_default_graph() is not g
    with g.as_default(), pytest.raises(AssertionError):
        tf.reset_default_graph()


def test_placeholder_shapes_and_feed_errors():
    x = tf.placeholder(tf.float32, [None, 3], name="images")
    y = x * 2.0
    assert y.shape.as_list() == [None, 3]
    with tf.Session() as sess:
        np.testing.assert_allclose(sess.run(y, {x: np.ones((2, 3))}), 2 * np.ones((2, 3)))
        with pytest.raises(ValueError, match=r"shape \(2, 4\).*'images:0'.*\(None, 3\)"):
            sess.run(y, {x: np.ones((2, 4))})
        with pytest.raises(tf.errors.InvalidArgumentError, match="must feed a value for placeholder tensor 'images'"):
            sess.run(y)
        ints = tf.placeholder(tf.int32, [2], name="ids")
        assert sess.run(ints, {ints: [1.5, -2.5]}).tolist() == [1, -2]  # TF1 casts as np.asarray does
        with pytest.raises(ValueError, match="'ids:0'.*out of its range"):
            sess.run(ints, {ints: [1.5, 2.5e10]})


def test_fetch_structures_and_pruning():
    x = tf.placeholder(tf.float32, [], name="x")
    a, b = x + 1.0, x * 3.0
    unused = tf.placeholder(tf.float32, [], name="unused") * 2.0  # never fed: must be pruned
    with tf.Session() as sess:
        out = sess.run({"a": a, "pair": (b, [a])}, {x: 2.0})
        assert out == {"a": 3.0, "pair": (6.0, [3.0])}
        assert sess.run("add:0" if a.name == "add:0" else a.name, {x: 1.0}) == 2.0
        # Feeding an intermediate tensor cuts the graph above it.
        assert sess.run(b, {x: 5.0}) == 15.0
        assert sess.run(b * 1.0, {b: 7.0}) == 7.0
    assert unused.op.type == "Mul"


def test_fetch_from_another_graph_is_rejected():
    g = tf.Graph()
    with g.as_default():
        other = tf.constant(1.0)
    with tf.Session() as sess, pytest.raises(ValueError, match="not an element of this graph"):
        sess.run(other)


def test_input_from_another_graph_is_rejected():
    g = tf.Graph()
    with g.as_default():
        other = tf.constant(1.0)
    with pytest.raises(ValueError, match="different Graph"):
        tf.get_default_graph().create_op("Identity", [other], {"T": tf.float32})


def test_control_dependencies_order_side_effects():
    v = tf.Variable(0.0, name="counter")
    inc = tf.assign_add(v, 1.0)
    with tf.control_dependencies([inc]):
        read = tf.identity(tf.constant(5.0))
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        sess.run(read)
        sess.run(read)
        assert sess.run(v) == 2.0


def test_variables_initialize_assign_and_uninitialized_error():
    w = tf.Variable(tf.ones([2, 2]), name="w")
    assert w.name == "w:0" and w.initializer.name == "w/Assign"
    assert w in tf.global_variables() and w in tf.trainable_variables()
    frozen = tf.Variable(3.0, trainable=False, name="frozen")
    assert frozen not in tf.trainable_variables()
    with tf.Session() as sess:
        with pytest.raises(tf.errors.FailedPreconditionError, match="uninitialized value w"):
            sess.run(w)
        sess.run(tf.global_variables_initializer())
        np.testing.assert_array_equal(sess.run(w), np.ones((2, 2)))
        sess.run(w.assign(w * 3.0))
        np.testing.assert_array_equal(sess.run(w), 3 * np.ones((2, 2)))
        w.load(np.full((2, 2), 7.0), sess)
        np.testing.assert_array_equal(w.eval(sess), 7 * np.ones((2, 2)))
        fetched = sess.run(w)
        fetched[0, 0] = -1.0  # a fetch is a copy, never a view of the session's state
        assert sess.run(w)[0, 0] == 7.0


def test_get_variable_scopes_and_reuse():
    with tf.variable_scope("conv1"):
        w = tf.get_variable("w", [3, 3], initializer=tf.zeros_initializer())
    with tf.variable_scope("conv1", reuse=True):
        assert tf.get_variable("w") is w
    with pytest.raises(ValueError, match="conv1/w already exists"):
        with tf.variable_scope("conv1"):
            tf.get_variable("w", [3, 3])
    with pytest.raises(ValueError, match="does not exist"):
        with tf.variable_scope("conv2", reuse=True):
            tf.get_variable("w", [3, 3])
    with tf.variable_scope("shared", reuse=tf.AUTO_REUSE):
        a = tf.get_variable("b", [2], initializer=tf.ones_initializer())
    with tf.variable_scope("shared", reuse=tf.AUTO_REUSE):
        assert tf.get_variable("b", [2]) is a
    assert w.name == "conv1/w:0" and a.name == "shared/b:0"


def test_initializers_statistics_and_seeds():
    tf.set_random_seed(1)
    he = tf.get_variable("he", [3, 3, 64, 256], initializer=tf.initializers.he_normal())
    uni = tf.get_variable("uni", [200, 300], initializer=tf.random_uniform_initializer(-2.0, 2.0))
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        h, u = sess.run([he, uni])
    assert abs(h.std() - np.sqrt(2.0 / (9 * 64))) < 0.01 * np.sqrt(2.0 / (9 * 64)) * 10
    assert np.abs(h).max() <= 2 * np.sqrt(2.0 / (9 * 64)) / 0.8796 + 1e-6  # truncated at two stddevs
    assert -2.0 <= u.min() and u.max() < 2.0 and abs(u.mean()) < 0.02
    with tf.Session() as sess:  # same graph seed -> same values in a new session
        sess.run(tf.global_variables_initializer())
        np.testing.assert_array_equal(sess.run(he), h)


def test_gradients_sum_consumers_and_unconnected():
    x = tf.placeholder(tf.float32, [3], name="x")
    y = tf.placeholder(tf.float32, [3], name="y")
    z = x * x + x * 2.0  # x used twice: contributions must add up
    gx, gy = tf.gradients(z, [x, y])
    assert gy is None
    with tf.Session() as sess:
        np.testing.assert_allclose(sess.run(gx, {x: [1.0, 2.0, 3.0]}), [4.0, 6.0, 8.0])


def test_missing_gradient_raises_naming_the_node():
    from tfplus import registry
    from tfplus.tensor_shape import same_as_input
    if "TestNoGrad" not in registry.OPS:
        registry.register_op("TestNoGrad", inputs=("x",), attrs={"T": "type"}, shape_fn=same_as_input(0))
    x = tf.placeholder(tf.float32, [2])
    y = tf.get_default_graph().create_op("TestNoGrad", [x], {"T": tf.float32}, name="mystery").outputs[0]
    with pytest.raises(LookupError, match=r"'mystery' \(op type: TestNoGrad\)"):
        tf.gradients(y, x)


def test_missing_kernel_lists_devices():
    from tfplus import registry
    from tfplus.tensor_shape import same_as_input
    if "TestNoKernel" not in registry.OPS:
        registry.register_op("TestNoKernel", inputs=("x",), attrs={"T": "type"}, shape_fn=same_as_input(0))
    x = tf.constant([1.0])
    y = tf.get_default_graph().create_op("TestNoKernel", [x], {"T": tf.float32}, name="nk").outputs[0]
    with tf.Session() as sess, pytest.raises(NotImplementedError, match="TestNoKernel 'nk': no cpu kernel"):
        sess.run(y)


def test_registering_twice_names_both_places():
    from tfplus import registry
    with pytest.raises(ValueError, match="registered twice: at .*array_ops.py"):
        registry.register_op("Const", shape_fn=lambda ins, attrs: [])


def test_unknown_device_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown device 'tpu'"):
        tf.Session(device="tpu")


def test_closed_session_refuses_to_run():
    sess = tf.Session()
    sess.close()
    with pytest.raises(RuntimeError, match="closed Session"):
        sess.run(tf.constant(1.0))
