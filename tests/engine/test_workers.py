"""The cpu device's data-parallel worker processes (tfplus.engine.workers): a training step's batch split over forked
processes, checked against the same step in one process."""
from __future__ import annotations

import os
import signal

import numpy as np
import pytest

import tfplus as tf
from tfplus.engine import workers
from tfplus.graphs import training_graph
from tfplus.graphs.lenet import lenet

BATCH = 16  # two slices of workers.MIN_ROWS


def _graph():
    # conv (the shift path), max-pool, bias, ReLU, FC, cross-entropy averaged over the batch, weight decay,
    # Nesterov momentum.
    return training_graph(total_steps=10, seed=3, model_kwargs={"conv_widths": (8, 16), "fc_widths": (32,)})


def _feeds(tg, step: int, batch: int = BATCH):
    rng = np.random.default_rng(step)
    return {tg.images: rng.standard_normal((batch, 3, 32, 32)).astype(np.float32),
            tg.labels: rng.integers(0, 10, batch).astype(np.int32)}


def _train(tg, n_workers: int, steps: int = 4, between=None, fetch=None):
    """Losses and final variables after `steps` steps on n_workers workers (2 threads), and the session's
    worker state after the last step (the session is closed)."""
    fetch = fetch if fetch is not None else tg.loss
    with tf.Session(graph=tg.graph, config=tf.ConfigProto(intra_op_parallelism_threads=2),
                    workers=n_workers) as sess:
        sess.run(tg.init_op)
        losses = []
        for i in range(steps):
            losses.append(sess.run([tg.train_op, fetch], _feeds(tg, i))[1])
            if between is not None:
                between(sess, i)
        variables = sess.run(tg.graph.get_collection(tf.GraphKeys.TRAINABLE_VARIABLES))
        state = sess.workers
        pids = [pid for g in state.groups.values() for pid in g.pids] if state else []
        whys = [s for s in state.steps.values() if isinstance(s, str)] if state else []
    return np.array(losses), variables, pids, whys


def test_a_training_step_on_workers_matches_one_process_and_repeats_bit_for_bit():
    tg = _graph()
    ref_loss, ref_vars, _, _ = _train(tg, 1)
    loss, variables, pids, whys = _train(tg, 2)
    again_loss, again_vars, _, _ = _train(tg, 2)
    assert len(pids) == 2, whys  # steps 2-4 ran on two worker processes
    for pid in pids:  # and the session's close reaped them
        with pytest.raises(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
    np.testing.assert_allclose(loss, ref_loss, rtol=1e-5)
    for a, b in zip(variables, ref_vars):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)
    np.testing.assert_array_equal(loss, again_loss)
    for a, b in zip(variables, again_vars):
        np.testing.assert_array_equal(a, b)


def test_fetched_rows_are_concatenated_and_batch_independent_values_kept():
    tg = _graph()
    with tg.graph.as_default():
        rows = tf.argmax(tg.logits, axis=1)  # batch-major: concatenated over the slices
        k = tf.placeholder(tf.float32, [])
        twice = k * 2.0  # no batch: slice 0's
    for n in (1, 2):
        with tf.Session(graph=tg.graph, workers=n) as sess:
            sess.run(tg.init_op)
            got = [sess.run([tg.train_op, rows, twice, tg.loss], {**_feeds(tg, i), k: i})[1:] for i in range(3)]
            assert bool(sess.workers and sess.workers.groups) == (n == 2)
        if n == 1:
            ref = got
    for (r, v, loss), (r0, v0, loss0) in zip(got, ref):
        np.testing.assert_array_equal(r, r0)
        assert r.shape == (BATCH,)
        assert v == v0
        np.testing.assert_allclose(loss, loss0, rtol=1e-5)


def test_a_summed_loss_stays_in_the_parent_and_says_why():
    g = tf.Graph()
    with g.as_default():
        x = tf.placeholder(tf.float32, [None, 4])
        w = tf.Variable(np.arange(8, dtype=np.float32).reshape(4, 2) / 8)
        loss = tf.reduce_sum(tf.square(tf.matmul(x, w)))  # a sum: the slices' gradients do not average to it
        step = tf.train.GradientDescentOptimizer(0.01).minimize(loss)
        init = tf.global_variables_initializer()
    feed = {x: np.random.default_rng(0).standard_normal((BATCH, 4)).astype(np.float32)}
    results = []
    for n in (1, 2):
        with tf.Session(graph=g, workers=n) as sess:
            sess.run(init)
            results.append([sess.run([step, loss], feed)[1] for _ in range(3)] + [sess.run(w)])
            if n == 2:
                assert not sess.workers.groups
                assert any("sums over the batch" in s for s in sess.workers.steps.values() if isinstance(s, str))
    for a, b in zip(*results):
        np.testing.assert_array_equal(a, b)


def test_steps_that_cannot_be_split_run_in_the_parent():
    tg = _graph()
    with tf.Session(graph=tg.graph, workers=2) as sess:
        sess.run(tg.init_op)
        sess.run(tg.train_op, _feeds(tg, 0, batch=10))  # 2 slices of 5 rows: under MIN_ROWS
        assert not sess.workers.groups
        assert any("slices of 8 rows" in s for s in sess.workers.steps.values() if isinstance(s, str))
        with tg.graph.as_default():
            right = tf.reduce_sum(tf.cast(tf.equal(tf.argmax(tg.logits, 1, output_type=tf.int32), tg.labels),
                                          tf.int32))
        sess.run([tg.train_op, right], _feeds(tg, 0))  # a count: no average of the slices' gives it
        assert not sess.workers.groups
        assert any("(int32, shape ()) depends on the batch" in s
                   for s in sess.workers.steps.values() if isinstance(s, str))
    # A stateful op other than a random draw (which each worker draws its rows of: test_workers_random.py) before
    # the updates: an allreduce over the ranks must run once per step. (Looked at only: running it needs MPI.)
    from tfplus.ops import collective_ops
    g = tf.Graph()
    with g.as_default():
        x = tf.placeholder(tf.float32, [None, 4])
        w = tf.Variable(np.ones((4, 2), np.float32))
        loss = tf.reduce_mean(tf.matmul(x, w)) + tf.reduce_mean(collective_ops.mpi_allreduce(x))
        step = tf.train.GradientDescentOptimizer(0.1).minimize(loss)
    why = workers._prepare(None, 2, [step, loss], {x: np.ones((BATCH, 4), np.float32)})
    assert why == ("MpiAllreduce 'MpiAllreduce' runs before the updates and is stateful (each worker would run it: "
                   "it must run once per step)"), why


def test_the_workers_see_variables_the_parent_assigns_between_steps():
    tg = _graph()
    with tg.graph.as_default():
        first = tg.graph.get_collection(tf.GraphKeys.TRAINABLE_VARIABLES)[0]
        shrink = tf.assign(first, first * 0.5)

    def between(sess, i):
        if i == 1:
            sess.run(shrink)

    ref_loss, ref_vars, _, _ = _train(tg, 1, between=between)
    loss, variables, pids, _ = _train(tg, 2, between=between)
    assert pids
    np.testing.assert_allclose(loss, ref_loss, rtol=1e-5)
    for a, b in zip(variables, ref_vars):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)


def test_a_workers_error_names_the_node_and_a_dead_workers_step_runs_in_this_process():
    g = tf.Graph()
    with g.as_default():
        x = tf.placeholder(tf.float32, [None, 4])
        w = tf.Variable(np.ones((4, 2), np.float32))
        check = tf.Assert(tf.reduce_all(x < 100.0), [x], name="check")
        with tf.control_dependencies([check]):
            loss = tf.reduce_mean(tf.square(tf.matmul(x, w)))
        step = tf.train.GradientDescentOptimizer(0.01).minimize(loss)
        init = tf.global_variables_initializer()
    good = np.ones((BATCH, 4), np.float32)
    bad = good.copy()
    bad[-1, 0] = 1000.0  # in the second worker's slice
    with tf.Session(graph=g, workers=2) as sess:
        sess.run(init)
        sess.run(step, {x: good})
        sess.run(step, {x: good})
        (group,) = sess.workers.groups.values()
        with pytest.raises(tf.errors.InvalidArgumentError, match="check"):
            sess.run(step, {x: bad})
        assert sess.run(loss, {x: good}) > 0  # the same workers go on
        os.kill(group.pids[0], signal.SIGTERM)  # a group-wide SIGTERM is the parent's to handle
        sess.run(step, {x: good})
        assert sess.workers.groups[next(iter(sess.workers.groups))] is group
        pid = group.pids[1]
        os.kill(pid, signal.SIGKILL)
        with pytest.raises(tf.errors.UnavailableError, match=f"worker process {pid} .2 of 2.* killed by SIGKILL"):
            sess.run(step, {x: good})
        sess.run(step, {x: good})  # in this process from now on: a worker killed for memory would be again
        sess.run(step, {x: good})
        assert not sess.workers.groups and "a worker process failed" in sess.workers.summary()


def test_resolve_counts_from_the_argument_the_environment_or_the_threads(monkeypatch):
    monkeypatch.delenv(workers.ENV, raising=False)
    monkeypatch.setattr(workers.sys, "platform", "linux")
    assert workers.resolve(None, workers.AUTO_FROM - 1) == 1
    assert workers.resolve(None, workers.AUTO_FROM) == workers.AUTO_FROM
    monkeypatch.setattr(workers.sys, "platform", "darwin")  # Accelerate is not fork-safe: asked for only
    assert workers.resolve(None, 16) == 1 and workers.resolve(4, 16) == 4
    assert workers.resolve(3, 16) == 3
    monkeypatch.setenv(workers.ENV, "1")
    assert workers.resolve(None, 16) == 1
    monkeypatch.setenv(workers.ENV, "two")
    with pytest.raises(ValueError, match="TFPLUS_WORKERS='two'"):
        workers.resolve(None, 16)
    with pytest.raises(ValueError, match="workers=0"):
        tf.Session(workers=0)


def test_lenet_adam_on_workers_matches_one_process():
    tg = training_graph(lenet, total_steps=10, seed=3, optimizer="adam")
    ref_loss, ref_vars, _, _ = _train(tg, 1, steps=3)
    loss, variables, pids, whys = _train(tg, 2, steps=3)
    assert pids, whys
    np.testing.assert_allclose(loss, ref_loss, rtol=1e-5)
    for a, b in zip(variables, ref_vars):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)  # Adam: a step is ~lr whatever the gradient


def test_devices_shows_the_workers_and_a_bad_count_is_a_usage_error(monkeypatch, capsys):
    from tfplus.cli import main
    monkeypatch.setenv("TFPLUS_NUM_THREADS", "8")
    monkeypatch.delenv(workers.ENV, raising=False)
    assert main(["devices"]) == 0
    assert "the batch split over 8 worker processes" in capsys.readouterr().out
    monkeypatch.setenv(workers.ENV, "1")
    assert main(["devices"]) == 0
    assert "training steps: in this process" in capsys.readouterr().out
    monkeypatch.setenv(workers.ENV, "-3")
    assert main(["devices"]) == 2
    assert "TFPLUS_WORKERS='-3': the number of worker processes" in capsys.readouterr().err


def test_a_process_forked_from_the_session_trains_without_the_parents_workers():
    tg = _graph()
    with tf.Session(graph=tg.graph, workers=2) as sess:
        sess.run(tg.init_op)
        for i in range(2):
            sess.run(tg.train_op, _feeds(tg, i))
        (group,) = sess.workers.groups.values()
        pid = os.fork()
        if pid == 0:  # the user's own child: its steps must not talk to the parent's workers
            code = 1
            try:
                signal.alarm(60)
                for i in range(3):
                    sess.run(tg.train_op, _feeds(tg, i))
                (mine,) = sess.workers.groups.values()
                code = 0 if mine is not group and set(mine.pids).isdisjoint(group.pids) else 2
                sess.close()
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        loss = sess.run([tg.train_op, tg.loss], _feeds(tg, 5))[1]  # the parent's workers are still its own
        assert np.isfinite(loss) and sess.workers.groups[next(iter(sess.workers.groups))] is group
