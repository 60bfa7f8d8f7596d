"""Steps with batch statistics on the cpu device's worker processes (tfplus.engine.workers): each worker one
micro-batch of the planner's statistics passes (planner.plan.spread), the statistics merged in slice order between
passes and the moving averages updated once, checked against the same step in one process."""
from __future__ import annotations

import os
import signal

import numpy as np
import pytest

import tfplus as tf
from tfplus.engine import workers
from tfplus.graphs import training_graph
from tfplus.graphs.mobilenet import mobilenet
from tfplus.graphs.seqnet import seqnet

BATCH = 16  # two slices of workers.MIN_ROWS


def _user_graph():
    """A TF1 script's graph: a convolution, tf.layers.batch_normalization (training=True, its moving averages in
    UPDATE_OPS, run by the training op), a dense layer normalized by hand with tf.nn.moments over the batch, a
    mean cross-entropy and momentum."""
    rng = np.random.default_rng(0)
    g = tf.Graph()
    with g.as_default():
        x = tf.placeholder(tf.float32, [None, 5, 5, 3], name="images")
        y = tf.placeholder(tf.int32, [None], name="labels")
        w = tf.Variable((rng.standard_normal((3, 3, 3, 4)) / 5).astype(np.float32))
        h = tf.nn.conv2d(x, w, [1, 1, 1, 1], "SAME")
        h = tf.nn.relu(tf.layers.batch_normalization(h, training=True, momentum=0.9, name="bn"))
        h = tf.matmul(tf.reshape(h, [-1, 100]), tf.Variable((rng.standard_normal((100, 6)) / 10).astype(np.float32)))
        mean, var = tf.nn.moments(h, axes=[0])
        h = tf.nn.relu((h - mean) * tf.rsqrt(var + 1e-3))
        logits = tf.matmul(h, tf.Variable((rng.standard_normal((6, 3)) / 3).astype(np.float32)))
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
        with tf.control_dependencies(tf.get_collection(tf.GraphKeys.UPDATE_OPS)):
            train_op = tf.train.MomentumOptimizer(0.1, 0.9).minimize(loss)
        init_op = tf.global_variables_initializer()
    return g, x, y, train_op, loss, init_op, (5, 5, 3), 3


def _model(name: str):
    if name == "user":
        return _user_graph()
    build, kwargs, size = {"mobilenet": (mobilenet, {"conv_widths": (4, 8, 8)}, 8),
                           "seqnet": (seqnet, {"conv_widths": (6, 8, 8)}, 4)}[name]
    tg = training_graph(build, total_steps=10, seed=0, image_shape=(3, size, size), model_kwargs=kwargs)
    return tg.graph, tg.images, tg.labels, tg.train_op, tg.loss, tg.init_op, (3, size, size), 10


def _feeds(m, step: int) -> dict:
    _, x, y, _, _, _, shape, classes = m
    rng = np.random.default_rng(step)
    return {x: (rng.standard_normal((BATCH, *shape)) * 2 + 1).astype(np.float32),
            y: rng.integers(0, classes, BATCH).astype(np.int32)}


def _train(m, n_workers: int, steps: int = 3):
    """Losses and every variable (moving means and variances included) after `steps` steps on n_workers, and the
    session's steps on the workers (their _Step)."""
    g, _, _, train_op, loss, init_op, _, _ = m
    with tf.Session(graph=g, workers=n_workers) as sess:
        sess.run(init_op)
        losses = [sess.run([train_op, loss], _feeds(m, i))[1] for i in range(steps)]
        variables = {v.op.name: sess.run(v) for v in g.get_collection(tf.GraphKeys.GLOBAL_VARIABLES)}
        spread = [s for s in sess.workers.steps.values() if not isinstance(s, str)] if sess.workers else []
        assert bool(sess.workers and sess.workers.groups) == (n_workers > 1), sess.workers.summary()
    return np.array(losses), variables, spread


@pytest.mark.parametrize("model", ["user", "mobilenet", "seqnet"])
def test_a_batch_norm_step_on_two_workers_equals_the_one_process_step(model):
    m = _model(model)
    ref_loss, ref_vars, _ = _train(m, 1)
    loss, variables, (st,) = _train(m, 2)
    assert st.levels and len(st.runs) == len(st.levels) + 1  # statistics passes, then the micro-batch run
    assert any("moving_mean" in name for name in variables) or model == "user" and "bn/moving_variance" in variables
    np.testing.assert_allclose(loss, ref_loss, rtol=1e-5)
    assert variables.keys() == ref_vars.keys()
    for name, v in ref_vars.items():
        np.testing.assert_allclose(variables[name], v, rtol=1e-4, atol=1e-6, err_msg=name)
    if model == "user":  # the same bits run after run for a fixed worker count
        again_loss, again, _ = _train(m, 2)
        np.testing.assert_array_equal(again_loss, loss)
        for name, v in variables.items():
            np.testing.assert_array_equal(again[name], v, err_msg=name)


def test_a_worker_killed_between_statistics_passes_fails_the_step_clearly(monkeypatch):
    """Killed while the parent merges the first pass's statistics: the step raises UnavailableError naming the
    worker, leaves every variable (the moving averages too) as the previous step left it, and runs in this process
    from then on, as the one-process step."""
    m = _model("user")
    g, _, _, train_op, loss, init_op, _, _ = m
    ref_loss, ref_vars, _ = _train(m, 1, steps=3)
    merge = workers._Step.merge_level
    victim: list[int] = []

    def killing(self, r, pieces, into):
        if victim and r == 0:
            os.kill(victim.pop(), signal.SIGKILL)
        return merge(self, r, pieces, into)
    monkeypatch.setattr(workers._Step, "merge_level", killing)
    with tf.Session(graph=g, workers=2) as sess:
        sess.run(init_op)
        losses = [sess.run([train_op, loss], _feeds(m, i))[1] for i in range(2)]
        (group,) = sess.workers.groups.values()
        before = {v.op.name: sess.run(v) for v in g.get_collection(tf.GraphKeys.GLOBAL_VARIABLES)}
        pid = group.pids[1]
        victim.append(pid)
        with pytest.raises(tf.errors.UnavailableError, match=f"worker process {pid} .2 of 2.* killed by SIGKILL"):
            sess.run([train_op, loss], _feeds(m, 2))
        for v in g.get_collection(tf.GraphKeys.GLOBAL_VARIABLES):
            np.testing.assert_array_equal(sess.run(v), before[v.op.name], err_msg=v.op.name)
        losses.append(sess.run([train_op, loss], _feeds(m, 2))[1])
        assert not sess.workers.groups and "a worker process failed" in sess.workers.summary()
        after = {v.op.name: sess.run(v) for v in g.get_collection(tf.GraphKeys.GLOBAL_VARIABLES)}
    np.testing.assert_allclose(losses, ref_loss, rtol=1e-5)
    for name, v in ref_vars.items():
        np.testing.assert_allclose(after[name], v, rtol=1e-4, atol=1e-6, err_msg=name)


def test_a_batch_norm_step_whose_slices_would_draw_other_numbers_stays_in_this_process():
    """A draw whose leading dimension is open but is not the batch's rows would take each slice's offset (the
    slices' merged gradients 2% off the whole batch's: within workers.BN_RTOL, the first step's check for a
    batch-norm step, whose rounding needs it): the planner's split refuses the step, naming the draw, and it runs
    in this process, drawing one process's numbers."""
    def run(n_workers: int):
        g, _, _, _, loss, _, _, _ = m = _user_graph()
        with g.as_default():
            k = tf.placeholder(tf.float32, [None])
            shifted = loss * (1.0 + tf.reduce_mean(tf.random_uniform(tf.shape(k), seed=5) * k))
            with tf.control_dependencies(tf.get_collection(tf.GraphKeys.UPDATE_OPS)):
                train = tf.train.GradientDescentOptimizer(0.1).minimize(shifted)
            init = tf.global_variables_initializer()
        with tf.Session(graph=g, workers=n_workers) as sess:
            sess.run(init)
            losses = [sess.run([train, shifted], {**_feeds(m, i), k: np.arange(1, 6, dtype=np.float32)})[1]
                      for i in range(3)]
            whys = [s for s in sess.workers.steps.values() if isinstance(s, str)] if sess.workers else []
            return losses, bool(sess.workers and sess.workers.groups), whys

    ref, _, _ = run(1)
    losses, on_workers, whys = run(2)
    assert not on_workers and any("RandomUniform 'random_uniform' draws random numbers along an open leading "
                                  "dimension that is not the batch's rows" in s for s in whys), whys
    np.testing.assert_array_equal(losses, ref)


def test_a_batch_norm_step_with_a_fed_is_training_runs_on_the_workers_as_in_one_process():
    """tf.layers.batch_normalization(training=is_training), a fed bool placeholder selecting the mode by tf.cond: the
    workers split the branch the fed value takes (engine.step.resolve_conds), statistics passes included; the step
    ran in the parent before. An is_training=False step (the moving statistics) splits without passes."""
    rng = np.random.default_rng(0)
    g = tf.Graph()
    with g.as_default():
        x = tf.placeholder(tf.float32, [None, 4, 4, 3], name="images")
        y = tf.placeholder(tf.int32, [None], name="labels")
        is_training = tf.placeholder(tf.bool, [], name="is_training")
        h = tf.nn.conv2d(x, tf.Variable((rng.standard_normal((3, 3, 3, 4)) / 5).astype(np.float32)), [1] * 4, "SAME")
        h = tf.nn.relu(tf.layers.batch_normalization(h, training=is_training, momentum=0.9, name="bn"))
        logits = tf.matmul(tf.reshape(h, [-1, 64]), tf.Variable((rng.standard_normal((64, 3)) / 8).astype(np.float32)))
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
        with tf.control_dependencies(tf.get_collection(tf.GraphKeys.UPDATE_OPS)):
            train_op = tf.train.MomentumOptimizer(0.1, 0.9).minimize(loss)
        init_op = tf.global_variables_initializer()
    runs = []
    for n in (1, 2):
        with tf.Session(graph=g, workers=n) as sess:
            sess.run(init_op)
            losses = []
            for i, mode in enumerate((True, True, False, True)):
                r = np.random.default_rng(i)
                feeds = {x: (r.standard_normal((BATCH, 4, 4, 3)) * 2 + 1).astype(np.float32),
                         y: r.integers(0, 3, BATCH).astype(np.int32), is_training: mode}
                losses.append(sess.run([train_op, loss], feeds)[1])
            runs.append((np.array(losses), {v.op.name: sess.run(v) for v in g.get_collection("variables")}))
            if n == 2:
                assert sess.workers.summary() == "training steps on 2 worker processes", sess.workers.summary()
                assert any(not isinstance(s, str) and s.levels for s in sess.workers.steps.values())
    np.testing.assert_allclose(runs[1][0], runs[0][0], rtol=1e-5)
    assert runs[1][1].keys() == runs[0][1].keys()
    for name, v in runs[0][1].items():
        np.testing.assert_allclose(runs[1][1][name], v, rtol=1e-4, atol=1e-6, err_msg=name)
