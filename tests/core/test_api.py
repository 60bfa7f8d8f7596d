"""TF1 surface details: Python operators on tensors, plain lists as values, names TF1 scripts reach for."""
import numpy as np

import tfplus as tf


def test_python_operators_match_numpy():
    a_np, b_np = np.array([5.0, -7.0, 2.5], np.float32), np.array([2.0, 3.0, -1.5], np.float32)
    p_np, q_np = np.array([True, False, True]), np.array([True, True, False])
    with tf.Graph().as_default():
        a, b, p, q = tf.constant(a_np), tf.constant(b_np), tf.constant(p_np), tf.constant(q_np)
        fetches = [a // b, a % b, 7.0 // a, p & q, p | q, p ^ q, ~p, np.float32(2) * a, a_np + b]
        with tf.Session() as s:
            got = s.run(fetches)
    want = [a_np // b_np, np.mod(a_np, b_np), 7.0 // a_np, p_np & q_np, p_np | q_np, p_np ^ q_np, ~p_np,
            2 * a_np, a_np + b_np]
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-6)


def test_a_list_is_a_value_where_the_input_is_not_variadic():
    with tf.Graph().as_default():
        v = tf.Variable([1.0, 2.0])
        assign = v.assign([0.0, 3.0])
        total = tf.add_n([v, [10.0, 20.0]])  # AddN's input is variadic: the list fills it
        with tf.Session() as s:
            s.run(tf.global_variables_initializer())
            np.testing.assert_array_equal(s.run(assign), [0.0, 3.0])
            np.testing.assert_array_equal(s.run(total), [10.0, 23.0])


def test_tf1_names_are_where_scripts_look_for_them():
    assert tf.sigmoid is tf.nn.sigmoid and tf.tanh is tf.nn.tanh
    assert callable(tf.train.write_graph) and callable(tf.import_graph_def)
    with tf.Graph().as_default():
        w = tf.get_variable("w", [2], initializer=tf.zeros_initializer())
        tf.add_to_collection(tf.GraphKeys.WEIGHTS, w)
        assert tf.get_collection(tf.GraphKeys.WEIGHTS) == [w]
