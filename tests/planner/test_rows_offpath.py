"""Ops that move, pick or mix the batch's rows, under a memory budget that micro-batches the step and on the cpu
workers (issue 34, one step off): each graph either trains as its unbudgeted step does, micro-batched, or is
refused with an error naming the op (planner.rows and the ops' row rules), never a wrong result."""
from __future__ import annotations

import functools
import warnings

import numpy as np
import pytest
from conftest import DEVICES
from modelcheck import assert_trains_alike, train_case

import tfplus as tf
from tfplus import planner
from tfplus.planner.liveness import PlanError
from tfplus.runtime.facts import device_facts

BATCH = 8
TOL = {"cpu": 1e-5, "opencl": 1e-4}


def _w(rng, *shape):
    return tf.Variable((rng.standard_normal(shape) / np.sqrt(shape[0])).astype(np.float32))


def _case(build):
    """A training step of `build(x, rng) -> logits` on x [None, 4, 6] (examples of 4 time steps of 6 features),
    int labels: (graph, fetches [train, loss], feeds, init)."""
    rng = np.random.default_rng(0)
    g = tf.Graph()
    with g.as_default():
        x = tf.placeholder(tf.float32, [None, 4, 6], name="x")
        y = tf.placeholder(tf.int32, [None], name="y")
        logits = build(x, y, rng)
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
        train = tf.train.AdamOptimizer(0.01).minimize(loss)
        feeds = {x: rng.standard_normal((BATCH, 4, 6)).astype(np.float32),
                 y: rng.integers(0, 3, BATCH).astype(np.int32)}
        return g, [train, loss], feeds, tf.global_variables_initializer()


def _dense(x, rng):
    return tf.matmul(tf.reshape(x, [-1, 24]), _w(rng, 24, 3))


def time_major(x, y, rng):
    """[B, T, F] -> [T, B, F], a recurrence over T written by hand (tf.unstack of time), back to batch-major."""
    steps = tf.unstack(tf.transpose(x, [1, 0, 2]), axis=0)
    w, u = _w(rng, 6, 5), _w(rng, 5, 5)
    h = tf.zeros_like(tf.matmul(steps[0], w))
    outs = []
    for s in steps:
        h = tf.tanh(tf.matmul(s, w) + tf.matmul(h, u))
        outs.append(h)
    return tf.matmul(tf.reduce_mean(tf.transpose(tf.stack(outs), [1, 0, 2]), 1), _w(rng, 5, 3))


def merged_time(x, y, rng):
    """reshape [B, T, F] -> [B * T, F], a dense layer per time step, and back."""
    h = tf.nn.relu(tf.matmul(tf.reshape(x, [-1, 6]), _w(rng, 6, 5)))
    return tf.matmul(tf.reshape(h, [-1, 20]), _w(rng, 20, 3))


def feature_slices(x, y, rng):
    """x[:, 1:3], x[..., :4], tf.split and tf.concat along the features, tf.gather of feature columns."""
    a = tf.reshape(x[:, 1:3], [-1, 12]) + tf.reshape(x[..., :4][:, :3], [-1, 12])
    left, right = tf.split(tf.reshape(x, [-1, 24]), 2, axis=1)
    h = tf.concat([a, left * right, tf.gather(tf.reshape(x, [-1, 24]), [0, 5, 7], axis=1)], 1)
    return tf.matmul(h, _w(rng, 27, 3))


def gather_own_label(x, y, rng):
    """Each example's label's probability by gather_nd with tf.range over the batch (a hand-written likelihood)."""
    logits = _dense(x, rng)
    picked = tf.gather_nd(tf.nn.softmax(logits), tf.stack([tf.range(tf.shape(x)[0]), y], 1))
    return logits * tf.expand_dims(tf.stop_gradient(picked), 1) + tf.expand_dims(tf.log(picked), 1)


def embedding(x, y, rng):
    """An embedding lookup of a per-example id, tiled over the features, stacked along axis 1."""
    table = _w(rng, 3, 24)
    e = tf.tile(tf.expand_dims(tf.nn.embedding_lookup(table, y), 1), [1, 2, 1])
    h = tf.stack([tf.reshape(x, [-1, 24]), e[:, 0], e[:, 1]], axis=1)
    h = tf.nn.relu(tf.matmul(tf.reduce_sum(h, 1), _w(rng, 24, 64)))
    return tf.matmul(h, _w(rng, 64, 3))


EXACT = {"time_major": time_major, "merged_time": merged_time, "feature_slices": feature_slices,
         "gather_own_label": gather_own_label, "embedding": embedding}


def towers(x, y, rng):
    return tf.concat([_dense(x[:BATCH // 2], rng), _dense(x[BATCH // 2:], rng)], 0)


def gan_halves(x, y, rng):
    both = _dense(tf.concat([x, x * 0.5], 0), rng)
    return both[:tf.shape(x)[0]] - tf.reduce_mean(both[tf.shape(x)[0]:])


def unstack_batch(x, y, rng):
    return tf.stack(tf.unstack(_dense(x, rng), num=BATCH, axis=0))


def reversed_rows(x, y, rng):
    return _dense(x[::-1], rng)


def shifted_rows(x, y, rng):
    h = _dense(x, rng)
    return tf.concat([h[:1], h[1:] - h[:-1]], 0)


def gather_rows(x, y, rng):
    return tf.gather(_dense(x, rng), y)


def boolean_mask(x, y, rng):
    h = _dense(x, rng)
    kept = tf.boolean_mask(h, y > 0)
    return h + tf.reduce_mean(kept)


def cumsum_rows(x, y, rng):
    return tf.cumsum(_dense(x, rng), axis=0)


def softmax_over_batch(x, y, rng):
    h = _dense(x, rng)
    return h * tf.expand_dims(tf.nn.softmax(h[:, 0]), 1)


def attention_over_batch(x, y, rng):
    h = _dense(x, rng)
    return tf.matmul(tf.nn.softmax(tf.matmul(h, h, transpose_b=True)), h)


def tiled_rows(x, y, rng):
    h = tf.tile(_dense(x, rng), [2, 1])
    return h[:tf.shape(x)[0]]


def positions(x, y, rng):
    """A position embedding indexed by tf.range over the batch: each micro-batch's positions start at 0."""
    table = _w(rng, BATCH, 3)
    return _dense(x, rng) + tf.gather(table, tf.range(tf.shape(x)[0]))


def one_hot_of_position(x, y, rng):
    return _dense(x, rng) + tf.one_hot(tf.range(tf.shape(x)[0]) % 3, 3)


def sorted_batch(x, y, rng):
    h = _dense(x, rng)
    return h + tf.expand_dims(tf.nn.top_k(h[:, 0], BATCH)[0], 1)


def shuffled(x, y, rng):
    return _dense(tf.random_shuffle(tf.reshape(x, [BATCH, 24])), rng)


def pad_rows(x, y, rng):
    return tf.pad(_dense(x, rng), [[1, 0], [0, 0]])[1:]


# graph -> the op type the refusal names
REFUSED = {towers: "StridedSlice", gan_halves: "ConcatV2", unstack_batch: "Unpack", reversed_rows: "StridedSlice",
           shifted_rows: "StridedSlice", gather_rows: "GatherV2", boolean_mask: "Where", cumsum_rows: "Cumsum",
           softmax_over_batch: "Softmax", attention_over_batch: "MatMul", tiled_rows: "Tile", positions: "Range",
           one_hot_of_position: "Range", sorted_batch: "TopKV2", shuffled: "Reshape", pad_rows: "Pad"}


@functools.cache
def _unbudgeted(name: str, device: str):
    return train_case(*_case(EXACT[name]), device, workers=1)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", EXACT)
def test_a_row_by_row_step_micro_batched_trains_as_the_unbudgeted_one(name, device):
    got = train_case(*_case(EXACT[name]), device, force=(4, 1))  # 4 micro-batches
    assert_trains_alike(got, _unbudgeted(name, device), TOL[device], name)


@pytest.mark.parametrize("build", REFUSED, ids=[b.__name__ for b in REFUSED])
def test_a_step_that_moves_the_rows_is_refused_naming_the_op(build):
    """Refused where the planner would micro-batch it, naming the op; a boolean mask's data-dependent shape is
    refused before that (the planner needs static shapes)."""
    g, fetches, feeds, init = _case(build)
    with tf.Session(graph=g, workers=1) as sess:
        step = sess.step(fetches, feeds)
        facts = device_facts(sess.runtime)
        with pytest.raises((PlanError, planner.BudgetError)) as e:  # below the floor: says why not micro-batched
            planner.plan(step.fetches, step.feed_shapes, facts, 1, graph=step.graph)
    message = str(e.value)
    assert f"{REFUSED[build]} '" in message and ("cannot micro-batch" in message or "needs static shapes" in message), \
        message


def _towers_graph():
    """The lead's script (issue 34): two towers of the batch's halves, their gradients averaged, Adam."""
    rng = np.random.default_rng(0)
    g = tf.Graph()
    with g.as_default():
        X = tf.placeholder(tf.float32, [None, 20])
        Y = tf.placeholder(tf.float32, [None, 5])
        opt = tf.train.AdamOptimizer(0.01)
        grads = []
        for i in range(2):
            with tf.variable_scope("net", reuse=i > 0):
                w = tf.get_variable("w", [20, 5], initializer=tf.constant_initializer(0.1))
                b = tf.get_variable("b", [5], initializer=tf.zeros_initializer())
                logits = tf.matmul(X[i * 25:(i + 1) * 25], w) + b
            labels = Y[i * 25:(i + 1) * 25]
            loss = tf.reduce_mean(tf.nn.softmax_cross_entropy_with_logits_v2(logits=logits, labels=labels))
            grads.append(opt.compute_gradients(loss))
        averaged = [(tf.reduce_mean(tf.concat([tf.expand_dims(g0, 0), tf.expand_dims(g1, 0)], 0), 0), v)
                    for (g0, v), (g1, _) in zip(*grads)]
        train = opt.apply_gradients(averaged)
        acc = tf.reduce_mean(tf.cast(tf.equal(tf.argmax(logits, 1), tf.argmax(labels, 1)), tf.float32))
        feeds = {X: rng.random((50, 20)).astype(np.float32), Y: np.eye(5, dtype=np.float32)[rng.integers(0, 5, 50)]}
        return g, [train, acc], feeds, tf.global_variables_initializer()


def _towers_run(**session) -> tuple:
    g, fetches, feeds, init = _towers_graph()
    with tf.Session(graph=g, **session) as sess:
        sess.run(init)
        acc = [sess.run(fetches, feeds)[1] for _ in range(3)]
        return acc, sess.run(g.get_collection("trainable_variables"))


def test_the_towers_script_is_refused_under_a_budget_that_micro_batches_and_runs_unsplit_where_it_fits():
    acc, weights = _towers_run(workers=1)
    assert np.isfinite(acc).all()
    with pytest.raises(planner.BudgetError) as e:
        _towers_run(workers=1, memory_budget="9KB")
    assert "cannot micro-batch: StridedSlice 'net/strided_slice' takes rows 0:25 of the batch" in str(e.value)
    got = _towers_run(workers=1, memory_budget="1MB")
    np.testing.assert_allclose(got[0], acc)
    for a, b in zip(got[1], weights):
        np.testing.assert_allclose(a, b)


def test_the_workers_run_the_towers_step_in_the_parent_without_warnings():
    want = _towers_run(workers=1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # NumPy's "Mean of empty slice" of a worker's empty tower
        got = _towers_run(workers=2)
    np.testing.assert_allclose(got[0], want[0])
    for a, b in zip(got[1], want[1]):
        np.testing.assert_allclose(a, b)


def test_the_rows_gather_nd_idiom_is_exact_against_tensorflow():
    """tf.gather_nd(probs, tf.stack([tf.range(n), labels], 1)) and its gradient, as TensorFlow computes them."""
    import tensorflow.compat.v1 as tf1
    rng = np.random.default_rng(1)
    xv, yv = rng.standard_normal((BATCH, 5)).astype(np.float32), rng.integers(0, 5, BATCH).astype(np.int32)
    out = []
    for lib in (tf, tf1):
        g = lib.Graph()
        with g.as_default():
            x, y = lib.placeholder(lib.float32, [None, 5]), lib.placeholder(lib.int32, [None])
            picked = lib.gather_nd(lib.nn.softmax(x), lib.stack([lib.range(lib.shape(x)[0]), y], 1))
            grad = lib.gradients(lib.reduce_sum(lib.log(picked)), x)[0]
            with lib.Session(graph=g) as sess:
                out.append(sess.run([picked, grad], {x: xv, y: yv}))
    for a, b in zip(*out):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_an_op_that_declares_no_row_rule_is_refused_where_it_meets_the_rows():
    from tfplus.planner import rows
    from tfplus.registry import register_rows
    g = tf.Graph()
    with g.as_default():
        x = tf.placeholder(tf.float32, [None, 3])
        y = tf.py_func(lambda a: a[::-1].copy(), [x * 2.0], tf.float32)
        y.set_shape([None, 3])
        ops = g.get_operations()
    why = rows.why_not(ops, {x}, {x: (4, 3)}, {x})
    assert why.startswith("PyFunc 'PyFunc' declares no rule for the batch's rows (registry.register_rows)"), why
    assert rows.why_not([op for op in ops if op.type != "PyFunc"], {x}, {x: (4, 3)}, {x}) is None  # x * 2.0
    with pytest.raises(ValueError, match="row rule for 'Mul' registered twice"):
        register_rows(lambda op, rows: None, "Mul")
