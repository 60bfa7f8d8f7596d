"""A gradient that recomputes a tf.cond branch or a tf.while_loop body draws its random ops' numbers again, those
the forward drew (ops/control_flow_ops.py _inline's redraw): a dropout's backward uses its forward's mask. Before,
the recomputation drew new numbers, so the gradient of a dropout inside tf.cond or tf.while_loop was another mask's."""
import numpy as np
import pytest

import tfplus as tf

KEEP = 0.5


def _cond_step():
    tf.set_random_seed(3)
    h = tf.placeholder(tf.float32, [None, 6], name="h")
    training = tf.placeholder(tf.bool, [], name="is_training")
    d = tf.cond(training, lambda: tf.nn.dropout(h, keep_prob=KEEP), lambda: h)
    return h, {training: True}, d


def _while_step():
    tf.set_random_seed(3)
    h = tf.placeholder(tf.float32, [None, 6], name="h")
    _, d = tf.while_loop(lambda i, x: i < 3, lambda i, x: (i + 1, tf.nn.dropout(x, keep_prob=KEEP)),
                         [tf.constant(0), h])
    return h, {}, d


@pytest.mark.parametrize("device", ["cpu", "opencl"])
@pytest.mark.parametrize("build", [_cond_step, _while_step], ids=["cond", "while"])
@pytest.mark.parametrize("budget", [None, "1MB"])
def test_the_gradient_of_a_dropout_in_control_flow_uses_its_forward_mask(device, build, budget):
    rng = np.random.default_rng(0)
    g = tf.Graph()
    with g.as_default():
        h, feeds, d = build()
        grad = tf.gradients(tf.reduce_sum(d), h)[0]
        x = rng.uniform(1.0, 2.0, (16, 6)).astype(np.float32)
        masks = []
        with tf.Session(device=device, memory_budget=budget if build is _cond_step else None) as sess:
            for _ in range(3):
                out, dx = sess.run([d, grad], {h: x, **feeds})
                # d is linear in h: its gradient is d / h where the forward's masks kept the element
                np.testing.assert_allclose(dx, out / x, rtol=1e-6)
                masks.append(out != 0)
    assert 0.05 < np.mean(masks[0]) < 0.95  # some dropped, some kept
    assert not np.array_equal(masks[0], masks[1])  # each step draws anew
