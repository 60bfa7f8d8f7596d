"""Ops that index the batch's rows by values of the same rows, under a memory budget that micro-batches the step
(issue 34): tf.range over the batch is each micro-batch's own row index, so an RNN's sequence lengths
(tf.reverse_sequence in bidirectional_dynamic_rnn, the last relevant output by tf.gather_nd or by a gather of the
flattened outputs, a tf.sequence_mask'ed loss), tf.gather(..., batch_dims=1), tf.batch_gather, tf.one_hot and
tf.where over the rows train as the unbudgeted step; a selection whose size the batch's values set (tf.boolean_mask,
tf.dynamic_partition) and a range over the rows put to another use are refused naming the op."""
from __future__ import annotations

import functools

import numpy as np
import pytest
from conftest import DEVICES
from modelcheck import assert_trains_alike, train_case

import tfplus as tf
from tfplus import planner
from tfplus.planner.liveness import PlanError
from tfplus.runtime.facts import device_facts

B, T, D, U, C = 8, 5, 3, 4, 3
TOL = {"cpu": 1e-5, "opencl": 1e-4}


def _case(build, optimizer=lambda: tf.train.AdamOptimizer(0.01)):
    """A training step of `build(x, n, y, rng) -> loss` on sequences x [None, T, D] of lengths n (1..T), int
    labels y: (graph, fetches [train, loss], feeds, init)."""
    rng = np.random.default_rng(0)
    g = tf.Graph()
    with g.as_default():
        tf.set_random_seed(1)  # tf.layers' initializers draw the same weights in every session
        x = tf.placeholder(tf.float32, [None, T, D], name="x")
        n = tf.placeholder(tf.int32, [None], name="n")
        y = tf.placeholder(tf.int32, [None], name="y")
        loss = build(x, n, y, rng)
        train = optimizer().minimize(loss)
        feeds = {x: rng.standard_normal((B, T, D)).astype(np.float32), n: rng.integers(1, T + 1, B).astype(np.int32),
                 y: rng.integers(0, C, B).astype(np.int32)}
        return g, [train, loss], feeds, tf.global_variables_initializer()


def _w(rng, *shape):
    return tf.Variable((rng.standard_normal(shape) / np.sqrt(shape[0])).astype(np.float32))


def _xent(logits, y):
    return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))


def bigru_last(x, n, y, rng):
    """A bidirectional GRU over the lengths, each sequence's last relevant output by tf.gather_nd."""
    (fw, bw), _ = tf.nn.bidirectional_dynamic_rnn(tf.nn.rnn_cell.GRUCell(U), tf.nn.rnn_cell.GRUCell(U), x,
                                                  sequence_length=n, dtype=tf.float32)
    out = tf.concat([fw, bw], 2)
    last = tf.gather_nd(out, tf.stack([tf.range(tf.shape(out)[0]), n - 1], 1))
    return _xent(tf.layers.dense(last, C), y)


def bilstm_flat(x, n, y, rng):
    """A bidirectional LSTM, the last relevant output as a gather of the flattened outputs, the final states."""
    (fw, bw), (sf, sb) = tf.nn.bidirectional_dynamic_rnn(tf.nn.rnn_cell.LSTMCell(U), tf.nn.rnn_cell.LSTMCell(U), x,
                                                         sequence_length=n, dtype=tf.float32)
    flat = tf.reshape(tf.concat([fw, bw], 2), [-1, 2 * U])
    last = tf.gather(flat, tf.range(0, tf.shape(x)[0]) * tf.shape(fw)[1] + (n - 1))
    return _xent(tf.layers.dense(tf.concat([last, sf.h, sb.c], 1), C), y)


def masked_rnn(x, n, y, rng):
    """dynamic_rnn over the lengths, a label per step, the loss averaged over the steps tf.sequence_mask keeps."""
    out, _ = tf.nn.dynamic_rnn(tf.nn.rnn_cell.GRUCell(U), x, sequence_length=n, dtype=tf.float32)
    xent = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=tf.tile(y[:, None], [1, T]),
                                                           logits=tf.layers.dense(out, C))
    mask = tf.sequence_mask(n, T, dtype=tf.float32)
    return tf.reduce_sum(xent * mask) / tf.reduce_sum(mask)


def batch_dims(x, n, y, rng):
    """tf.gather(batch_dims=1) of each example's last step, tf.batch_gather of two steps, tf.gather_nd(batch_dims=1)."""
    h = tf.tanh(tf.tensordot(x, _w(rng, D, U), 1))
    last = tf.gather(h, n - 1, axis=1, batch_dims=1)
    two = tf.batch_gather(h, tf.stack([n - 1, n // 2], 1))
    first = tf.gather_nd(h, tf.zeros_like(n)[:, None], batch_dims=1)
    return _xent(tf.matmul(last + tf.reduce_mean(two, 1) * first, _w(rng, U, C)), y)


def reversed_time_major(x, n, y, rng):
    """tf.reverse_sequence of time-major sequences (seq_axis 0, batch_axis 1), each step weighted by its place."""
    r = tf.transpose(tf.reverse_sequence(tf.transpose(x, [1, 0, 2]), n, seq_axis=0, batch_axis=1), [1, 0, 2])
    h = tf.reshape(r * tf.linspace(1.0, 0.2, T)[:, None], [-1, T * D])
    return _xent(tf.matmul(h, _w(rng, T * D, C)), y)


def one_hot_where(x, n, y, rng):
    """A loss of the one-hot labels times the log-probabilities, the logits negated by tf.where over the rows."""
    logits = tf.matmul(tf.reshape(x, [-1, T * D]), _w(rng, T * D, C))
    logits = tf.where(n > 2, logits, -logits)
    return -tf.reduce_mean(tf.reduce_sum(tf.one_hot(y, C) * tf.nn.log_softmax(logits), 1))


EXACT = {f.__name__: f for f in (bigru_last, bilstm_flat, masked_rnn, batch_dims, reversed_time_major, one_hot_where)}
# Each graph on cpu; the bidirectional GRU, the batch_dims gathers and the time-major reversal on opencl as well (time:
# the others add no ops of their own).
CASES = [(name, "cpu") for name in EXACT] + \
    [(name, "opencl") for name in ("bigru_last", "batch_dims", "reversed_time_major") if "opencl" in DEVICES]


@functools.cache
def _unbudgeted(name: str, device: str):
    return train_case(*_case(EXACT[name]), device)


@pytest.mark.parametrize("name, device", CASES, ids=["-".join(c) for c in CASES])
def test_a_step_indexing_rows_by_the_row_index_micro_batched_trains_as_the_unbudgeted_one(name, device):
    got = train_case(*_case(EXACT[name]), device, force=(4, 1))  # 4 micro-batches
    assert_trains_alike(got, _unbudgeted(name, device), TOL[device], name)


def boolean_mask(x, n, y, rng):
    logits = tf.matmul(tf.reshape(x, [-1, T * D]), _w(rng, T * D, C))
    return _xent(logits, y) + tf.reduce_mean(tf.boolean_mask(logits, n > 2))


def dynamic_partition(x, n, y, rng):
    logits = tf.matmul(tf.reshape(x, [-1, T * D]), _w(rng, T * D, C))
    short, long = tf.dynamic_partition(logits, tf.cast(n > 2, tf.int32), 2)
    return _xent(logits, y) + tf.reduce_mean(short) - tf.reduce_mean(long)


def longest_mask(x, n, y, rng):
    """tf.sequence_mask without maxlen: as wide as the batch's longest sequence, each micro-batch's own."""
    xent = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=tf.tile(y[:, None], [1, T]),
                                                           logits=tf.tensordot(x, _w(rng, D, C), 1))
    mask = tf.sequence_mask(n, dtype=tf.float32)
    return tf.reduce_sum(xent[:, :tf.reduce_max(n)] * mask) / tf.reduce_sum(mask)


def _last(x, n, index):
    return tf.gather(tf.reshape(tf.tanh(x), [-1, D]), index)


def next_example(x, n, y, rng):
    """The row index scaled by the steps but offset past them: the next example's first step."""
    return _xent(tf.matmul(_last(x, n, tf.range(tf.shape(x)[0]) * T + T), _w(rng, D, C)), y)


def scaled_by_count(x, n, y, rng):
    """The row index scaled by the batch's count, which is each micro-batch's own."""
    b = tf.shape(x)[0]
    return _xent(tf.matmul(_last(x, n, tf.range(b) * b + n - 1), _w(rng, D, C)), y)


def other_steps(x, n, y, rng):
    """The row index scaled by fewer than each example's entries: another example's steps."""
    return _xent(tf.matmul(_last(x, n, tf.range(tf.shape(x)[0]) * (T - 1) + n - 1), _w(rng, D, C)), y)


def time_major_picks(x, n, y, rng):
    """gather_nd of (row index, length - 1) in time-major outputs: the rows' time steps, not their rows."""
    out = tf.transpose(tf.tanh(x), [1, 0, 2])
    return _xent(tf.matmul(tf.gather_nd(out, tf.stack([tf.range(tf.shape(x)[0]), n - 1], 1)), _w(rng, D, C)), y)


# graph -> what the refusal says
REFUSED = {boolean_mask: "Where 'boolean_mask/Where': output 0 has shape (None, 1), sized by the values of",
           dynamic_partition: "Where 'DynamicPartition/boolean_mask/Where': output 0 has shape (None, 1), sized by",
           longest_mask: "Range 'SequenceMask/range': output 0 has shape (None,), sized by the values of "
                         "'SequenceMask/Max:0' as the step runs; the memory planner needs static shapes: size it from",
           next_example: "cannot micro-batch: Range 'range' numbers the batch's rows",
           scaled_by_count: "cannot micro-batch: Range 'range' numbers the batch's rows",
           other_steps: "cannot micro-batch: Range 'range' numbers the batch's rows",
           time_major_picks: "cannot micro-batch: Range 'range' numbers the batch's rows"}


@pytest.mark.parametrize("build", REFUSED, ids=[b.__name__ for b in REFUSED])
def test_a_selection_by_the_batch_s_values_or_another_use_of_the_row_index_is_refused_naming_the_op(build):
    g, fetches, feeds, init = _case(build)
    with tf.Session(graph=g, memory_budget="1GB") as sess:
        step = sess.step(fetches, feeds)
        with pytest.raises((PlanError, planner.BudgetError)) as e:  # below the floor: says why not micro-batched
            planner.plan(step.fetches, step.feed_shapes, device_facts("cpu"), 1, graph=step.graph)
    assert REFUSED[build] in str(e.value), str(e.value)


def test_batch_dims_gathers_and_dynamic_partition_match_tensorflow():
    """tf.gather(batch_dims=...), tf.gather_nd(batch_dims=...), tf.batch_gather and tf.dynamic_partition, values
    and float64 gradients, against TensorFlow's."""
    import tensorflow.compat.v1 as tf1
    rng = np.random.default_rng(2)
    p = rng.standard_normal((4, 3, 5, 2))
    i1, i2 = rng.integers(0, 5, (4, 6)).astype(np.int32), rng.integers(0, 5, (4, 3, 2)).astype(np.int64)
    nd = np.stack([rng.integers(0, 3, (4, 2)), rng.integers(0, 5, (4, 2))], -1).astype(np.int32)
    parts = rng.integers(0, 3, (4, 3)).astype(np.int32)
    out = []
    for lib in (tf, tf1):
        g = lib.Graph()
        with g.as_default():
            x = lib.placeholder(lib.float64, p.shape)
            ys = [lib.gather(x, i1, axis=2, batch_dims=1), lib.gather(x, i2, axis=2, batch_dims=2),
                  lib.gather(x, i1[:, :2] % 3, axis=1, batch_dims=-1), lib.gather_nd(x, nd, batch_dims=1),
                  lib.batch_gather(x[:, 0], i1[:, :3]), *lib.dynamic_partition(x, parts, 3)]
            loss = lib.add_n([lib.reduce_sum(lib.square(y)) * (k + 1) for k, y in enumerate(ys)])
            with lib.Session(graph=g) as sess:
                out.append(sess.run(ys + lib.gradients(loss, [x]), {x: p}))
    for a, b in zip(*out):
        np.testing.assert_allclose(a, b, rtol=1e-12)
