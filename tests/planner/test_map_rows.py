"""tf.map_fn over the batch and dropout inside tf.while_loops under a memory budget (issue 34): a map of the rows one
by one (planner.maps) runs in micro-batches, unrolled for a micro-batch's rows, and random ops in a loop's body draw
in the unrolled copies what the loop draws, so a step trained under a budget that needs micro-batches equals the
unsplit step; a map that mixes rows is refused, naming the op."""
from __future__ import annotations

import functools
import re

import numpy as np
import pytest
from conftest import DEVICES

import tfplus as tf
from tfplus import planner
from tfplus.framework import needed_ops, topo_order
from tfplus.planner import rows as row_rules
from tfplus.runtime.facts import device_facts

BATCH, STEPS = 8, 3
TOL = {"cpu": 1e-5, "opencl": 1e-4}


def _w(rng, *shape):
    return tf.Variable((rng.standard_normal(shape) / np.sqrt(np.prod(shape[:-1]))).astype(np.float32))


def augment_cnn(x, y, rng):
    """Per-example augmentation with tf.map_fn (each image flipped up-down at random, a draw per row inside the map,
    standardized, mirrored where its own coin, drawn for the batch outside the map, says so), then a conv net."""
    coins = tf.floor(tf.random_uniform([tf.shape(x)[0]], seed=7) * 2.0)

    def augment(args):
        image, coin = args
        image = tf.image.random_flip_up_down(image, seed=9)
        return tf.image.per_image_standardization(image * (1.0 - coin) + tf.reverse(image, [1]) * coin)
    images = tf.map_fn(augment, (x, coins), dtype=tf.float32)
    h = tf.nn.relu(tf.nn.conv2d(images, _w(rng, 3, 3, 2, 4), [1, 1, 1, 1], "SAME"))
    logits = tf.matmul(tf.reshape(tf.nn.max_pool(h, [1, 2, 2, 1], [1, 2, 2, 1], "VALID"), [-1, 36]), _w(rng, 36, 3))
    return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))


def per_example_loss(x, y, rng):
    """A conv net whose loss is written per example with tf.map_fn over (logits, labels)."""
    h = tf.nn.relu(tf.nn.conv2d(x, _w(rng, 3, 3, 2, 4), [1, 1, 1, 1], "SAME"))
    logits = tf.matmul(tf.reshape(h, [-1, 144]), _w(rng, 144, 3))
    losses = tf.map_fn(lambda a: tf.nn.sparse_softmax_cross_entropy_with_logits(labels=a[1], logits=a[0]) +
                       0.01 * tf.reduce_sum(tf.square(a[0])), (logits, y), dtype=tf.float32)
    return tf.reduce_mean(losses)


def dynamic_rows(x, y, rng):
    """A map whose outputs have no static shape (each example's conv features flattened by tf.reshape(-1) of a
    [None, None, None, 2] input): the map's first row ran outside the loop to tell the shape."""
    flat = tf.map_fn(lambda image: tf.reshape(tf.square(image), [-1]), tf.reshape(x, tf.shape(x)), dtype=tf.float32)
    h = tf.nn.relu(tf.nn.conv2d(tf.reshape(flat, [-1, 6, 6, 2]), _w(rng, 3, 3, 2, 4), [1, 1, 1, 1], "SAME"))
    logits = tf.matmul(tf.reshape(h, [-1, 144]), _w(rng, 144, 3))
    return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))


def batch_norm_map(x, y, rng):
    """Batch norm (training mode, statistics passes) and a per-example loss by tf.map_fn in one step."""
    h = tf.nn.conv2d(x, _w(rng, 3, 3, 2, 4), [1, 1, 1, 1], "SAME")
    h = tf.nn.relu(tf.layers.batch_normalization(h, training=True))
    logits = tf.matmul(tf.reshape(h, [-1, 144]), _w(rng, 144, 3))
    losses = tf.map_fn(lambda a: tf.nn.sparse_softmax_cross_entropy_with_logits(labels=a[1], logits=a[0]) +
                       0.01 * tf.reduce_sum(tf.square(a[0])), (logits, y), dtype=tf.float32)
    return tf.reduce_mean(losses)


MAPS = {"augment_cnn": augment_cnn, "per_example_loss": per_example_loss, "dynamic_rows": dynamic_rows,
        "batch_norm_map": batch_norm_map}


def _case(build, seed=0, batch=BATCH):
    rng = np.random.default_rng(seed)
    g = tf.Graph()
    with g.as_default():
        x = tf.placeholder(tf.float32, [None, 6, 6, 2], name="x")
        y = tf.placeholder(tf.int32, [None], name="y")
        loss = build(x, y, rng)
        with tf.control_dependencies(tf.get_collection(tf.GraphKeys.UPDATE_OPS)):
            train = tf.train.MomentumOptimizer(0.1, 0.9).minimize(loss)
        feeds = {x: rng.standard_normal((batch, 6, 6, 2)).astype(np.float32),
                 y: rng.integers(0, 3, batch).astype(np.int32)}
        return g, [train, loss], feeds, tf.global_variables_initializer()


def _train(sess, g, fetches, feeds, init):
    sess.run(init)
    losses = [sess.run(fetches, feeds)[1] for _ in range(STEPS)]
    return losses, [sess.run(v) for v in g.get_collection("variables")]


def _assert_same(got, want, tol, name):
    np.testing.assert_allclose(got[0], want[0], rtol=tol, err_msg=name)
    for a, b in zip(got[1], want[1]):
        np.testing.assert_allclose(a, b, rtol=tol, atol=tol, err_msg=name)


@functools.cache
def _unsplit(build, device: str):
    g, fetches, feeds, init = _case(build)
    with tf.Session(graph=g, device=device) as sess:
        return _train(sess, g, fetches, feeds, init)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", MAPS)
def test_a_map_of_the_rows_trains_in_micro_batches_under_a_budget_as_the_unsplit_step(name, device):
    """A budget below the smallest plan of the step with its maps whole: the session plans it in micro-batches,
    the maps unrolled for a micro-batch's rows (engine.step.resolve_static's microbatches)."""
    g, fetches, feeds, init = _case(MAPS[name])
    with tf.Session(graph=g, device=device, memory_budget="1GB") as sess:
        step = sess.step(fetches, feeds)
        whole = planner.smallest_plan(step.fetches, step.feed_shapes, device_facts(sess.runtime), graph=step.graph)
    assert whole.microbatches == 1  # the maps whole: no micro-batches
    with tf.Session(graph=g, device=device, memory_budget=whole.peak_bytes - 1) as sess:
        got = _train(sess, g, fetches, feeds, init)
        p = sess.step(fetches, feeds).plan
    assert p.fits and p.microbatches > 1, p.summary()
    assert p.peak_bytes < whole.peak_bytes
    _assert_same(got, _unsplit(MAPS[name], device), TOL[device], name)


@pytest.mark.parametrize("name", ["per_example_loss"])  # (augment_cnn's random flip in the loop: workers refuse it)
def test_the_cpu_workers_split_a_map_of_the_rows_as_the_unsplit_step(name, monkeypatch):
    """Each worker's slice runs the loop over its own rows (the graph as built): planner.rows lets them."""
    monkeypatch.setenv("TFPLUS_WORKERS", "2")
    runs = []
    for session in ({"workers": 1}, {"config": tf.ConfigProto(intra_op_parallelism_threads=2)}):
        g, fetches, feeds, init = _case(MAPS[name], batch=16)  # two slices of workers.MIN_ROWS rows
        with tf.Session(graph=g, **session) as sess:
            runs.append(_train(sess, g, fetches, feeds, init))
            where = sess.workers.summary() if "config" in session else None
    assert where == "training steps on 2 worker processes", where
    _assert_same(runs[1], runs[0], TOL["cpu"], name)


def test_a_step_with_its_maps_unrolled_for_micro_batches_is_planned_in_those_alone():
    """The copies carry the micro-batch's rows (attr _row_map): a plan of other micro-batches, or of the whole
    batch, would run the map over the wrong rows, and is refused."""
    from tfplus.engine.step import resolve_static
    g, fetches, feeds, _ = _case(per_example_loss)
    shapes = {t: np.shape(v) for t, v in feeds.items()}
    r = resolve_static(g, fetches, shapes, 4)
    planned = [r.element[f] for f in fetches], {r.element[t]: s for t, s in shapes.items()}
    p = planner.plan(*planned, "cpu", graph=r.graph)
    assert p.microbatches == 4, p.summary()
    with pytest.raises(planner.PlanError, match=r"unrolled for micro-batches of 2 rows .* in 4 micro-batches only"):
        planner.plan(*planned, "cpu", graph=r.graph, force=(2, 1))


def gru_dropout(x, rng):
    """A GRU with per-step dropout on its inputs and state (DropoutWrapper) in a dynamic_rnn: random ops in the
    loop's body."""
    cell = tf.nn.rnn_cell.DropoutWrapper(tf.nn.rnn_cell.GRUCell(5), input_keep_prob=0.7, state_keep_prob=0.8,
                                         seed=3)
    return tf.nn.dynamic_rnn(cell, x, dtype=tf.float32)[1]


def lstm_variational(x, rng):
    """An LSTM with variational (recurrent) dropout: one mask per sequence for its inputs, state and outputs."""
    cell = tf.nn.rnn_cell.DropoutWrapper(tf.nn.rnn_cell.LSTMCell(5), input_keep_prob=0.7, state_keep_prob=0.8,
                                         output_keep_prob=0.9, variational_recurrent=True, input_size=6,
                                         dtype=tf.float32, seed=5)
    return tf.nn.dynamic_rnn(cell, x, dtype=tf.float32)[1].h


def while_dropout(x, rng):
    """A tanh recurrence written as a tf.while_loop over time with tf.nn.dropout on each step's state."""
    w, u = _w(rng, 6, 5), _w(rng, 5, 5)
    xt = tf.transpose(x, [1, 0, 2])
    h0 = tf.zeros_like(tf.matmul(xt[0], w))

    def body(t, h):
        return t + 1, tf.nn.dropout(tf.tanh(tf.matmul(tf.gather(xt, t), w) + tf.matmul(h, u)), keep_prob=0.75)
    return tf.while_loop(lambda t, h: t < tf.shape(x)[1], body, [0, h0])[1]


LOOPS = {"gru_dropout": gru_dropout, "lstm_variational": lstm_variational, "while_dropout": while_dropout}


def _rnn_case(build, seed=0):
    rng = np.random.default_rng(seed)
    g = tf.Graph()
    with g.as_default():
        tf.set_random_seed(1)
        x = tf.placeholder(tf.float32, [None, None, 6], name="x")
        y = tf.placeholder(tf.int32, [None], name="y")
        logits = tf.matmul(build(x, rng), _w(rng, 5, 3))
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
        train = tf.train.AdamOptimizer(0.05).minimize(loss)
        feeds = {x: rng.standard_normal((BATCH, 4, 6)).astype(np.float32),
                 y: rng.integers(0, 3, BATCH).astype(np.int32)}
        return g, [train, loss], feeds, tf.global_variables_initializer()


@functools.cache
def _loop_unsplit(name: str, device: str):
    g, fetches, feeds, init = _rnn_case(LOOPS[name])
    with tf.Session(graph=g, device=device) as sess:
        return _train(sess, g, fetches, feeds, init)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", LOOPS)
def test_dropout_in_a_loop_micro_batched_under_a_budget_draws_the_unsplit_steps_numbers(name, device):
    """The loop is unrolled (engine.step.resolve_static) with its random ops' copies drawing the loop's iterations'
    numbers, the gradient's copies redrawing them; each micro-batch draws its rows' (KernelContext.random_draw)."""
    g, fetches, feeds, init = _rnn_case(LOOPS[name])
    with tf.Session(graph=g, device=device, memory_budget="1GB") as sess:
        step = sess.step(fetches, feeds)
        assert not any(op.type == "While" for op in step.graph.get_operations())  # unrolled
        p = planner.plan(step.fetches, step.feed_shapes, device_facts(sess.runtime), graph=step.graph, force=(4, 1))
        assert p.microbatches == 4, p.notes
        step.use_plan(p)
        got = _train(sess, g, fetches, feeds, init)
    _assert_same(got, _loop_unsplit(name, device), TOL[device], name)


def _why(build) -> str | None:
    g, fetches, feeds, _ = _case(build)
    shapes = {t: np.shape(v) for t, v in feeds.items()}
    order = topo_order(needed_ops(fetches, set(feeds)))
    return row_rules.why_not(order, set(feeds), shapes, set(feeds))


def first_row_for_all(x, y, rng):
    h = tf.reshape(x, [-1, 72]) * _w(rng, 72)
    return tf.reduce_mean(tf.map_fn(lambda row: tf.reduce_sum(row * h[0]), h, name="by_first"))


def reads_written(x, y, rng):
    """A loop over the rows writing each row minus the mean of those written so far."""
    h = tf.reshape(x, [-1, 72]) * _w(rng, 72)
    n = tf.shape(h)[0]
    out = tf.TensorArray(tf.float32, size=n, element_shape=[72])

    def body(i, out):
        return i + 1, out.write(i, tf.gather(h, i) - tf.reduce_mean(out.stack(), 0))
    _, out = tf.while_loop(lambda i, out: i < n, body, [0, out], name="running")
    return tf.reduce_mean(out.stack())



# graph -> what the refusal says
REFUSED = {
    first_row_for_all: r"While 'by_first/map_loop/While' .* it StridedSlice 'by_first/map_loop/strided_slice' reads "
                       r"rows of 'mul:0' other than the loop's own row",
    reads_written: r"While 'running/While' .* it Identity 'Identity' reads the rows the loop has written",
}


@pytest.mark.parametrize("build", REFUSED, ids=[b.__name__ for b in REFUSED])
def test_a_map_that_mixes_the_rows_is_refused_naming_the_op(build):
    why = _why(build)
    assert why is not None and re.search(REFUSED[build], why), why


def test_a_map_of_the_rows_is_accepted_by_the_row_rules():
    for build in MAPS.values():
        assert _why(build) is None


def test_variational_dropout_masks_are_the_batchs_and_every_steps():
    """DropoutWrapper(variational_recurrent=True) draws one [1, size] mask of each kind, as TF1's: identical
    examples keep identical outputs at every step (per-step masks would tell them apart), and dropped units stay
    dropped over time."""
    g = tf.Graph()
    with g.as_default():
        tf.set_random_seed(2)
        x = tf.placeholder(tf.float32, [None, 6, 3])
        cell = tf.nn.rnn_cell.DropoutWrapper(tf.nn.rnn_cell.GRUCell(8), output_keep_prob=0.5,
                                             variational_recurrent=True, dtype=tf.float32, seed=1)
        outputs, _ = tf.nn.dynamic_rnn(cell, x, dtype=tf.float32)
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            out = sess.run(outputs, {x: np.tile(np.random.default_rng(0).standard_normal((1, 6, 3)), (4, 1, 1))})
    np.testing.assert_array_equal(out, np.broadcast_to(out[:1], out.shape))
    dropped = out[0] == 0
    assert dropped.any() and not dropped.all()
    assert (dropped == dropped[:1]).all()  # the same units at every step
