"""Random draws on the cpu's step workers (tfplus.engine.workers, stop 45): a step that draws random numbers before
its updates (dropout) runs on the workers, each drawing its slice's rows of the numbers the unsplit step draws in
one process, and new ones every step; a draw not shaped like the rows (a fixed shape, an initializer run before
training) is the unsplit step's in every worker."""
from __future__ import annotations

import numpy as np
import pytest

import tfplus as tf
import tfplus.train  # noqa: F401  (tf.train)
from tfplus import registry

ROWS = 8  # a slice's: workers.MIN_ROWS
BATCH = 2 * ROWS
STEPS = 4  # the first runs in this process (the check), the others on the workers


def _dropout_net(seed: int | None = 3, slices: int = 2):
    """x (N, 6) -> dense -> relu -> dropout -> dense (its weights plus fixed-shape noise) -> mean cross-entropy,
    SGD: the graph, the train op, the loss, the dropped rows, the noise, the initializer and a batch's feeds
    (`slices` copies of ROWS rows: the slices differ only by their draws). `seed` None: the ops' streams are keyed
    by numbers random for the session."""
    g = tf.Graph()
    with g.as_default():
        x = tf.placeholder(tf.float32, [None, 6], name="x")
        y = tf.placeholder(tf.int32, [None], name="y")
        h = tf.nn.relu(tf.matmul(x, tf.Variable(np.linspace(-1, 1, 48).reshape(6, 8).astype(np.float32))))
        dropped = tf.nn.dropout(h, keep_prob=0.5, seed=seed)
        noise = tf.random_normal([8, 3], stddev=0.1, seed=None if seed is None else seed + 1)  # not rows
        w = tf.Variable(np.linspace(1, -1, 24).reshape(8, 3).astype(np.float32))
        logits = tf.matmul(dropped, w + noise)
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
        train = tf.train.GradientDescentOptimizer(0.5).minimize(loss)
        init = tf.global_variables_initializer()
    data = np.random.default_rng(2)
    rows = {x: data.standard_normal((ROWS, 6)).astype(np.float32), y: data.integers(0, 3, ROWS).astype(np.int32)}
    feeds = {t: np.concatenate([v] * slices) for t, v in rows.items()}
    return g, train, loss, dropped, noise, init, feeds


def _train(n_workers: int, seed: int | None = 3, slices: int = 2):
    """Per step (loss, dropped rows, noise), the weights after STEPS steps on n_workers, and the worker pids. Between
    the steps the dropout runs by itself in this process: the workers draw the runs this process counts."""
    g, train, loss, dropped, noise, init, feeds = _dropout_net(seed, slices)
    with tf.Session(graph=g, workers=n_workers) as sess:
        sess.run(init)
        runs = []
        for _ in range(STEPS):
            runs.append(sess.run([train, loss, dropped, noise], feeds)[1:])
            sess.run(dropped, feeds)  # (not a training step: in this process) the streams advance here too
        weights = sess.run(g.get_collection(tf.GraphKeys.TRAINABLE_VARIABLES))
        pids = sess.workers.pids() if sess.workers else []
    return runs, weights, pids


@pytest.mark.parametrize("n", [2, 4])
def test_a_dropout_step_on_workers_draws_the_one_process_steps_numbers(n):
    """The mask of each step's dropout is one process's, row for row, and so is the fixed-shape noise (bit for
    bit); the losses and weights are one process's up to the order the slices' gradients are summed in."""
    ref, ref_weights, _ = _train(1, slices=n)
    got, weights, pids = _train(n, slices=n)
    assert len(pids) == n, "steps 2-4 ran on the workers"
    for step, ((loss, rows, noise), (ref_loss, ref_rows, ref_noise)) in enumerate(zip(got, ref)):
        np.testing.assert_array_equal(rows == 0, ref_rows == 0, err_msg=f"step {step}: the dropout mask")
        np.testing.assert_allclose(rows, ref_rows, rtol=1e-5, atol=1e-6, err_msg=f"step {step}: the dropped rows")
        np.testing.assert_array_equal(noise, ref_noise, err_msg=f"step {step}: the fixed-shape noise")
        np.testing.assert_allclose(loss, ref_loss, rtol=1e-5, err_msg=f"step {step}: the loss")
    for a, b in zip(weights, ref_weights):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    masks = [(rows == 0).tobytes() for _, rows, _ in got]
    assert len(set(masks)) == STEPS, "each step draws anew"
    assert len({noise.tobytes() for _, _, noise in got}) == STEPS, "each step draws new noise"
    # A second session on the workers repeats the first bit for bit (fixed seeds, fixed slices).
    again, _, _ = _train(n, slices=n)
    for a, b in zip(got, again):
        for u, v in zip(a, b):
            np.testing.assert_array_equal(u, v)


def test_unseeded_workers_draw_different_rows():
    """Without seeds (a stream keyed at random for the session) the two workers still draw different numbers: the
    batch's two halves are alike, so a worker drawing the other's numbers would drop the same rows."""
    got, _, pids = _train(2, seed=None)
    assert len(pids) == 2
    for step, (_, rows, _) in enumerate(got):
        first, second = np.split(rows == 0, 2)
        assert not np.array_equal(first, second), f"step {step}: both halves dropped alike"


def test_a_tf1_dropout_script_trains_on_the_workers():
    """A TF1 script: tf.layers.dense (their initializers draw before training, in this process), tf.layers.dropout
    and tf.nn.dropout with a per-row noise shape, Adam. On two workers it trains as in one process."""
    def script(n_workers: int):
        g = tf.Graph()
        with g.as_default():
            tf.set_random_seed(7)
            x = tf.placeholder(tf.float32, [None, 10])
            y = tf.placeholder(tf.int32, [None])
            h = tf.layers.dense(x, 32, activation=tf.nn.relu)
            h = tf.layers.dropout(h, rate=0.3, training=True)
            h = tf.layers.dense(h, 16, activation=tf.nn.relu)
            h = tf.nn.dropout(h, rate=0.5, noise_shape=[tf.shape(h)[0], 1])  # whole rows dropped
            logits = tf.layers.dense(h, 4)
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
            train = tf.train.AdamOptimizer(0.01).minimize(loss)
            init = tf.global_variables_initializer()
        data = np.random.default_rng(0)
        xs = data.standard_normal((BATCH, 10)).astype(np.float32)
        feeds = {x: xs, y: (xs[:, :4].argmax(1)).astype(np.int32)}
        with tf.Session(graph=g, workers=n_workers) as sess:
            sess.run(init)
            start = sess.run(g.get_collection(tf.GraphKeys.TRAINABLE_VARIABLES))
            losses = [sess.run([train, loss], feeds)[1] for _ in range(8)]
            end = sess.run(g.get_collection(tf.GraphKeys.TRAINABLE_VARIABLES))
            pids = sess.workers.pids() if sess.workers else []
            whys = [s for s in sess.workers.steps.values() if isinstance(s, str)] if sess.workers else []
        return start, losses, end, pids, whys

    ref_start, ref_losses, ref_end, _, _ = script(1)
    start, losses, end, pids, whys = script(2)
    assert len(pids) == 2, whys
    for a, b in zip(start, ref_start):  # the initializers' draws, made before training in this process
        np.testing.assert_array_equal(a, b)
    np.testing.assert_allclose(losses, ref_losses, rtol=1e-4)
    assert np.mean(losses[-3:]) < np.mean(losses[:3]), losses
    for a, b in zip(end, ref_end):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)  # Adam: a step is ~lr whatever the gradient


def test_a_draw_of_open_rows_that_are_not_the_batchs_keeps_the_step_in_this_process():
    """A draw whose leading dimension is open but is not the batch's rows (a fed tensor of its own length) would
    take a slice's offset: its slices' values do not add up to the whole batch's, and the first step's check keeps
    the step in this process, drawing one process's numbers."""
    def run(n_workers: int):
        g = tf.Graph()
        with g.as_default():
            x = tf.placeholder(tf.float32, [None, 4])
            k = tf.placeholder(tf.float32, [None])
            w = tf.Variable(np.ones((4, 2), np.float32))
            shift = tf.reduce_mean(tf.random_uniform(tf.shape(k), seed=5) * k)  # not the batch's rows
            loss = tf.reduce_mean(tf.square(tf.matmul(x, w) - shift))
            train = tf.train.GradientDescentOptimizer(0.1).minimize(loss)
            init = tf.global_variables_initializer()
        feeds = {x: np.linspace(-1, 1, BATCH * 4).reshape(BATCH, 4).astype(np.float32),
                 k: np.arange(1, 6, dtype=np.float32)}
        with tf.Session(graph=g, workers=n_workers) as sess:
            sess.run(init)
            losses = [sess.run([train, loss], feeds)[1] for _ in range(3)]
            state = sess.workers
            return losses, bool(state and state.groups), [s for s in state.steps.values()] if state else []

    ref, _, _ = run(1)
    losses, on_workers, whys = run(2)
    assert not on_workers, whys
    assert any(isinstance(s, str) and "differs from the whole batch" in s for s in whys), whys
    np.testing.assert_array_equal(losses, ref)


def test_the_random_ops_declare_their_draws():
    """What lets a worker run an op that is stateful: the tag its registration declares."""
    assert registry.tagged("random") == ["RandomStandardNormal", "RandomUniform", "TruncatedNormal"]
    assert registry.OPS["RandomUniform"].stateful and not registry.has_tag("AssignAdd", "random")


@pytest.mark.parametrize("flow", ["cond", "while_loop"])
def test_a_draw_inside_control_flow_keeps_the_step_in_this_process(flow):
    """A random op in a tf.cond branch or a tf.while_loop body draws per run of its sub-graph (an iteration), which
    no step's counter covers: the step runs in this process, as in one, and says why."""
    def run(n_workers: int):
        g = tf.Graph()
        with g.as_default():
            x = tf.placeholder(tf.float32, [None, 4])
            w = tf.Variable(np.linspace(-1, 1, 8).reshape(4, 2).astype(np.float32))
            h = tf.matmul(x, w)
            if flow == "cond":
                h = tf.cond(tf.constant(True), lambda: tf.nn.dropout(h, rate=0.5, seed=3), lambda: h)
            else:
                _, h = tf.while_loop(lambda i, v: i < 3, lambda i, v: (i + 1, tf.nn.dropout(v, rate=0.3, seed=3)),
                                     [tf.constant(0), h])
            loss = tf.reduce_mean(tf.square(h))
            train = tf.train.GradientDescentOptimizer(0.1).minimize(loss)
            init = tf.global_variables_initializer()
        feeds = {x: np.random.default_rng(0).standard_normal((BATCH, 4)).astype(np.float32)}
        with tf.Session(graph=g, workers=n_workers) as sess:
            sess.run(init)
            losses = [sess.run([train, loss], feeds)[1] for _ in range(3)]
            return losses, sess.workers.pids() if sess.workers else [], sess.workers.summary() if sess.workers else ""

    ref, _, _ = run(1)
    losses, pids, summary = run(2)
    assert not pids
    assert "its sub-graph holds the stateful RandomUniform" in summary, summary
    np.testing.assert_array_equal(losses, ref)
