"""Random draws on a replayed tape (issue 34, stop 45): a step that draws random numbers (dropout, each random op)
replays on opencl, drawing in each replayed run the numbers of the same run launched op by op, the cpu device's,
and new ones every run; a micro-batched step draws the unsplit step's numbers, each micro-batch its rows', and
replays as one tape."""
from __future__ import annotations

import numpy as np
import pytest
from conftest import needs_opencl

import tfplus as tf
import tfplus.train  # noqa: F401  (tf.train)
from tfplus import planner
from tfplus.engine.memory import install
from tfplus.runtime.facts import device_facts

pytestmark = needs_opencl

# Each random op, drawn with the shape of a fed batch (its rows) or a fixed one, as a step's output.
DRAWS = {
    "uniform": lambda x: x * tf.random_uniform(tf.shape(x), seed=1),
    "normal": lambda x: x + tf.random_normal(tf.shape(x), seed=2),
    "truncated": lambda x: x + tf.truncated_normal(tf.shape(x), dtype=tf.float32, seed=3),
    "dropout": lambda x: tf.nn.dropout(x, keep_prob=0.5, seed=4),
    "categorical": lambda x: tf.cast(tf.random.categorical(x, 5, seed=5), tf.float32),
    "fixed_shape": lambda x: x + tf.random_uniform([4, 33], seed=6),
}
RUNS = 6  # the session plans a repeated step, records it twice, then replays it


def _spy_plays(rt) -> list:
    """What each tape_play of `rt` returned (True: it replayed), from now on."""
    played: list = []
    play = rt.tape_play
    rt.tape_play = lambda *a: played.append(play(*a)) or played[-1]
    return played


def _draw_runs(monkeypatch, build, device: str, replay: bool = True):
    monkeypatch.setenv("TFPLUS_OPENCL_REPLAY", "1" if replay else "0")
    g = tf.Graph()
    with g.as_default():
        x = tf.placeholder(tf.float32, [None, 33])
        y = build(x)
    feed = np.linspace(-2, 2, 4 * 33).reshape(4, 33).astype(np.float32)
    with tf.Session(graph=g, device=device) as sess:
        played = _spy_plays(sess.runtime) if device == "opencl" else []
        return [sess.run(y, {x: feed}) for _ in range(RUNS)], played


@pytest.mark.parametrize("kind", sorted(DRAWS))
def test_a_replayed_step_draws_the_launched_steps_numbers_and_the_cpus(monkeypatch, kind):
    got, played = _draw_runs(monkeypatch, DRAWS[kind], "opencl")
    launched, not_played = _draw_runs(monkeypatch, DRAWS[kind], "opencl", replay=False)
    cpu, _ = _draw_runs(monkeypatch, DRAWS[kind], "cpu")
    assert len(played) >= 2 and all(played) and not not_played, played
    for run, (a, b, c) in enumerate(zip(got, launched, cpu)):
        np.testing.assert_array_equal(a, b, err_msg=f"{kind}: run {run}, replayed vs launched op by op")
        np.testing.assert_array_equal(a, c, err_msg=f"{kind}: run {run}, opencl vs cpu")
    assert len({a.tobytes() for a in got}) == RUNS, f"{kind}: each run draws anew"


def _dropout_net(batch: int = 8):
    """x (N, 6) -> dense -> relu -> dropout -> dense (its weights plus fixed-shape noise) -> mean cross-entropy,
    SGD: the graph, the train op, the loss, the dropped rows, the initializer and a batch's feeds."""
    g = tf.Graph()
    with g.as_default():
        x = tf.placeholder(tf.float32, [None, 6], name="x")
        y = tf.placeholder(tf.int32, [None], name="y")
        h = tf.nn.relu(tf.matmul(x, tf.Variable(np.linspace(-1, 1, 48).reshape(6, 8).astype(np.float32))))
        dropped = tf.nn.dropout(h, keep_prob=0.5, seed=3)
        w = tf.Variable(np.linspace(1, -1, 24).reshape(8, 3).astype(np.float32))
        logits = tf.matmul(dropped, w + tf.random_normal([8, 3], stddev=0.1, seed=4))  # the same in every row
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
        train = tf.train.GradientDescentOptimizer(0.5).minimize(loss)
        init = tf.global_variables_initializer()
    data = np.random.default_rng(2)
    feeds = {x: data.standard_normal((batch, 6)).astype(np.float32), y: data.integers(0, 3, batch).astype(np.int32)}
    return g, train, loss, dropped, init, feeds


def _train_dropout(monkeypatch, device: str, force=None, replay: bool = True, steps: int = 6):
    """The losses and dropped rows of `steps` steps of _dropout_net (by the forced plan, if any), the weights
    after them, and what each tape_play returned."""
    monkeypatch.setenv("TFPLUS_OPENCL_REPLAY", "1" if replay else "0")
    g, train, loss, dropped, init, feeds = _dropout_net()
    fetches = [train, loss, dropped]
    with tf.Session(graph=g, device=device, memory_budget=None if force is None else "1GB") as sess:
        sess.run(init)
        if force is not None:
            p = planner.plan(fetches, {t: v.shape for t, v in feeds.items()}, device_facts(sess.runtime), graph=g,
                             force=force)
            assert p.microbatches == force[0]
            install(sess, fetches, p)
        played = _spy_plays(sess.runtime) if device == "opencl" else []
        runs = [sess.run(fetches, feeds)[1:] for _ in range(steps)]
        weights = [sess.run(v) for v in g.get_collection("trainable_variables")]
    return [r[0] for r in runs], [r[1] for r in runs], weights, played


@pytest.mark.parametrize("k", [2, 4])
def test_a_micro_batched_dropout_step_replays_and_draws_the_unsplit_steps_numbers(monkeypatch, k):
    """Each micro-batch draws its rows of the unsplit step's mask (and the fixed-shape noise of the unsplit
    step): the dropped rows are the unsplit step's and the cpu's, up to the float rounding of the weights they
    were computed with (gradients summed by micro-batch, each device's matmul); replayed as one tape, the step is
    the micro-batched step launched op by op, bit for bit."""
    losses, rows, weights, played = _train_dropout(monkeypatch, "opencl", (k, 1))
    launched = _train_dropout(monkeypatch, "opencl", (k, 1), replay=False)
    unsplit = _train_dropout(monkeypatch, "opencl")
    cpu = _train_dropout(monkeypatch, "cpu", (k, 1))
    assert played.count(True) >= 2 and not launched[3], played
    assert losses == launched[0]
    for step, (a, b, c, d) in enumerate(zip(rows, launched[1], unsplit[1], cpu[1])):
        np.testing.assert_array_equal(a, b, err_msg=f"step {step}: replayed vs launched op by op")
        for other, what in ((c, "the unsplit step"), (d, "the cpu's")):  # the same mask, the weights rounded apart
            np.testing.assert_array_equal(a == 0, other == 0, err_msg=f"step {step}: {what} mask")
            np.testing.assert_allclose(a, other, rtol=1e-5, atol=1e-6, err_msg=f"step {step}: {what} rows")
    assert len({r.tobytes() for r in rows}) == len(rows), "each step draws anew"
    np.testing.assert_allclose(losses, unsplit[0], rtol=1e-5)
    for a, b, c in zip(weights, launched[2], unsplit[2]):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_allclose(a, c, rtol=1e-5, atol=1e-6)


def test_a_statistics_pass_draws_the_micro_batch_runs_numbers(monkeypatch):
    """Dropout below a training batch norm: the statistics pass (planner.crossbatch) and the micro-batch run
    both run the dropout, and draw the same numbers, the unsplit step's (a pass drawing other numbers would
    normalize by other statistics)."""
    def train(device, force=None):
        g = tf.Graph()
        with g.as_default():
            x = tf.placeholder(tf.float32, [None, 6], name="x")
            y = tf.placeholder(tf.int32, [None], name="y")
            h = tf.matmul(x, tf.Variable(np.linspace(-1, 1, 48).reshape(6, 8).astype(np.float32)))
            h = tf.layers.batch_normalization(tf.nn.dropout(h, keep_prob=0.5, seed=3), training=True)
            logits = tf.matmul(h, tf.Variable(np.linspace(1, -1, 24).reshape(8, 3).astype(np.float32)))
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
            with tf.control_dependencies(tf.get_collection(tf.GraphKeys.UPDATE_OPS)):
                train_op = tf.train.GradientDescentOptimizer(0.5).minimize(loss)
            init = tf.global_variables_initializer()
        data = np.random.default_rng(2)
        feeds = {x: data.standard_normal((8, 6)).astype(np.float32), y: data.integers(0, 3, 8).astype(np.int32)}
        with tf.Session(graph=g, device=device, memory_budget=None if force is None else "1GB") as sess:
            sess.run(init)
            if force is not None:
                p = planner.plan([train_op, loss], {t: v.shape for t, v in feeds.items()},
                                 device_facts(sess.runtime), graph=g, force=force)
                assert p.microbatches == force[0] and p.statistics, "a statistics pass"
                install(sess, [train_op, loss], p)
            played = _spy_plays(sess.runtime) if device == "opencl" else []
            losses = [sess.run([train_op, loss], feeds)[1] for _ in range(5)]
        return losses, played

    for device in ("cpu", "opencl"):
        losses, played = train(device, (2, 1))
        np.testing.assert_allclose(losses, train(device)[0], rtol=1e-5, err_msg=device)
    assert any(played), played
