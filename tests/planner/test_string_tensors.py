"""A step with string tensors (an assertion's message, as tf.debugging.assert_equal makes) under a memory budget:
their Python objects cannot live in the arena's bytes, and binding the plan raised "Cannot change data-type for
array of references" on cpu (found by the data-parallel sweep: allgather's check of the ranks' sizes)."""
import numpy as np
import pytest

import tfplus as tf


def test_an_assertion_with_a_message_runs_and_fails_under_a_memory_budget(device):
    with tf.Graph().as_default():
        x = tf.placeholder(tf.float32, [16, 16])
        w = tf.Variable(tf.ones([16, 16]))
        with tf.control_dependencies([tf.debugging.assert_equal(tf.reduce_sum(x) * 0, 0.0, message="never")]):
            y = tf.matmul(x, w)
        wrong = tf.debugging.assert_equal(tf.reduce_sum(x), 0.0, message="the sum is not 0")
        with tf.Session(memory_budget="64KB", device=device) as sess:
            sess.run(tf.global_variables_initializer())
            np.testing.assert_array_equal(sess.run(y, {x: np.ones((16, 16))}), np.full((16, 16), 16.0))
            with pytest.raises(tf.errors.InvalidArgumentError, match="the sum is not 0"):
                sess.run(wrong, {x: np.ones((16, 16))})
