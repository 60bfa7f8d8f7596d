"""The names tf.nn, tf.math, tf.random, tf.train and tf.contrib.seq2seq gained, against TensorFlow (the `tf1`
oracle): values and gradients of the composites, TF's categorical distribution, sequence_loss's reductions."""
import numpy as np
import pytest

import tfplus as tf


def _x(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32) * 3


@pytest.mark.parametrize("fn", [
    lambda m, x: m.nn.xw_plus_b(x, m.constant(_x(4, 3, seed=1)), m.constant(_x(3, seed=2))),
    lambda m, x: m.nn.relu_layer(x, m.constant(_x(4, 3, seed=1)), m.constant(_x(3, seed=2))),
    lambda m, x: m.nn.l2_normalize(x, 1), lambda m, x: m.math.l2_normalize(x, axis=0, epsilon=1e-3),
    lambda m, x: m.math.log_sigmoid(x), lambda m, x: m.log_sigmoid(x), lambda m, x: m.nn.softsign(x),
    lambda m, x: m.nn.selu(x), lambda m, x: m.nn.swish(x), lambda m, x: m.nn.silu(x),
    lambda m, x: m.math.reduce_sum(m.math.square(x), 1) + m.math.divide_no_nan(x, x)[:, 0],
])
def test_composites_match_tf(tf1, fn):
    got = []
    for m in (tf1, tf):
        with m.Graph().as_default():
            x = m.placeholder(m.float32, [None, 4])
            y = fn(m, x)
            with m.Session() as s:
                got.append(s.run([y, m.gradients(m.reduce_sum(y * y), x)[0]], {x: _x(5, 4)}))
    for a, b in zip(got[1], got[0]):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("api", ["multinomial", "random.categorical"])
def test_categorical_samples_follow_the_logits(api):
    probs = np.array([[0.1, 0.2, 0.7], [0.5, 0.5, 0.0]])
    logits = tf.constant(np.log(np.maximum(probs, 1e-30)).astype(np.float32))
    fn = tf.multinomial if api == "multinomial" else tf.random.categorical
    samples = fn(logits, 4000, seed=1)
    assert samples.shape.as_list() == [2, 4000] and samples.dtype == tf.int64
    with tf.Session() as s:
        drawn = s.run(samples)
    freq = np.stack([np.bincount(row, minlength=3) / row.size for row in drawn])
    np.testing.assert_allclose(freq, probs, atol=0.03)


def test_global_step_is_a_python_int():
    step = tf.train.get_or_create_global_step()
    with tf.Session() as s:
        s.run(tf.global_variables_initializer())
        s.run(tf.assign_add(step, 3))
        value = tf.train.global_step(s, step)
    assert value == 3 and type(value) is int


@pytest.mark.parametrize("kw", [{}, dict(average_across_batch=False), dict(average_across_timesteps=False),
                                dict(average_across_timesteps=False, average_across_batch=False),
                                dict(average_across_timesteps=False, average_across_batch=False,
                                     sum_over_timesteps=True, sum_over_batch=True)])
def test_sequence_loss_reduces_as_contrib(tf1, kw):
    logits, targets = _x(3, 4, 5), np.random.default_rng(3).integers(0, 5, (3, 4)).astype(np.int32)
    weights = np.array([[1, 1, 1, 0], [1, 1, 0, 0], [1, 0.5, 1, 1]], np.float32)
    with tf1.Graph().as_default(), tf1.Session() as s:  # contrib's formula on TF's cross-entropy
        xent = s.run(tf1.nn.sparse_softmax_cross_entropy_with_logits(labels=targets, logits=logits)) * weights
    axis = {(True, True): None, (True, False): 1, (False, True): 0}.get(
        (kw.get("average_across_timesteps", True), kw.get("average_across_batch", True)))
    if kw.get("sum_over_batch"):
        want = xent.sum() / np.count_nonzero(weights)
    elif kw.get("average_across_timesteps", True) or kw.get("average_across_batch", True):
        want = xent.sum(axis) / weights.sum(axis)
    else:
        want = xent
    got = tf.Session().run(tf.contrib.seq2seq.sequence_loss(tf.constant(logits), tf.constant(targets),
                                                            tf.constant(weights), **kw))
    np.testing.assert_allclose(got, want, rtol=1e-5)


@pytest.mark.parametrize("fn", [
    lambda m, x: m.reduce_logsumexp(x * 40.0), lambda m, x: m.reduce_logsumexp(x, 1),
    lambda m, x: m.math.reduce_logsumexp(x, [0, 1], keepdims=True), lambda m, x: m.math.reduce_std(x, 0),
    lambda m, x: m.math.reduce_variance(x, keepdims=True), lambda m, x: m.scalar_mul(2.5, x),
])
def test_math_reductions_match_tf(tf1, fn):
    test_composites_match_tf(tf1, fn)


def test_predicates_and_sequence_mask_match_tf(tf1):
    value = np.array([1.0, np.nan, np.inf, -np.inf, 0.0], np.float32)
    got = []
    for m in (tf1, tf):
        with m.Graph().as_default():
            x, lengths = m.constant(value), m.placeholder(m.int32, [None])
            outs = [m.is_nan(x), m.math.is_inf(x), m.is_finite(x), m.sequence_mask(lengths),
                    m.sequence_mask(lengths, 5, dtype=m.float32)]
            with m.Session() as s:
                got.append(([o.shape.as_list() for o in outs], s.run(outs, {lengths: [2, 0, 3]})))
    assert got[1][0] == got[0][0]
    for a, b in zip(got[1][1], got[0][1]):
        np.testing.assert_array_equal(a, b)


def test_contrib_pooling_and_dropout_as_contrib_defines_them(tf1):
    value = _x(2, 6, 6, 3)
    x = tf.constant(value)
    outs = [tf.contrib.layers.max_pool2d(x, 2, outputs_collections=["pooled"]),
            tf.contrib.layers.avg_pool2d(x, [3, 3], stride=1, padding="SAME"),
            tf.contrib.layers.dropout(x, is_training=False), tf.contrib.layers.dropout(x, 0.5, seed=1)]
    with tf1.Graph().as_default(), tf1.Session() as s:
        want = s.run([tf1.nn.max_pool(value, [1, 2, 2, 1], [1, 2, 2, 1], "VALID"),
                      tf1.nn.avg_pool(value, [1, 3, 3, 1], [1, 1, 1, 1], "SAME")])
    with tf.Session() as s:
        got = s.run(outs)
    for a, b in zip(got, want + [value]):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    kept = got[3] != 0
    np.testing.assert_allclose(got[3][kept], value[kept] * 2, rtol=1e-6)
    assert 0.35 < kept.mean() < 0.65 and tf.get_collection("pooled") == [outs[0]]
