"""Signals a user sends while a step runs (engine.signals): Ctrl-C and a user's SIGINT or SIGTERM handler act after
the step, as in TF1, never between two of its variable updates; a second Ctrl-C interrupts a step that does not
end; the user's handlers stay theirs."""
from __future__ import annotations

import os
import signal
import threading
import time
import warnings

import numpy as np
import pytest
from conftest import DEVICES

import tfplus as tf
from tfplus.engine import executor, workers

PATHS = {"plain": {"workers": 1}, "budget": {"memory_budget": "64MB"}}


def _two_updates():
    """A step that adds 1 to `a`, runs the Mul 'between', then adds 1 to `b`: a step cut in two leaves a != b."""
    g = tf.Graph()
    with g.as_default():
        a = tf.Variable(tf.zeros([4]), name="a")
        b = tf.Variable(tf.zeros([4]), name="b")
        with tf.control_dependencies([tf.assign_add(a, tf.ones([4]))]):
            between = tf.multiply(b, 0.0, name="between")
        train = tf.assign_add(b, tf.ones([4]) + between)
        init = tf.global_variables_initializer()
    return g, a, b, train, init


def _signal_in(monkeypatch, name: str, signum: int) -> None:
    """Op `name`'s kernel sends `signum` to this process once it ran: the signal comes in the middle of the step
    (as long as the step runs its kernels' Python: not an OpenCL step's replayed launches)."""
    find_kernel = executor.find_kernel

    def found(op_type, device, dtype):
        kernel = find_kernel(op_type, device, dtype)

        def sending(ctx, ins, outs, attrs):
            kernel(ctx, ins, outs, attrs)
            if ctx.op.name == name:
                os.kill(os.getpid(), signum)
        return sending if kernel is not None else None
    monkeypatch.setattr(executor, "find_kernel", found)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("path", PATHS)
def test_ctrl_c_inside_a_step_raises_after_it_and_never_tears_its_updates(device, path, monkeypatch):
    g, a, b, train, init = _two_updates()
    _signal_in(monkeypatch, "between", signal.SIGINT)
    interrupted = 0
    with tf.Session(graph=g, device=device, **PATHS[path]) as sess:
        sess.run(init)
        for step in range(1, 5):
            try:
                sess.run(train)
            except KeyboardInterrupt:
                interrupted += 1
            av, bv = sess.run([a, b])
            assert av[0] == bv[0] == step, f"a step cut by Ctrl-C left a = {av[0]}, b = {bv[0]}"
    assert interrupted >= 2  # the steps whose kernels ran (OpenCL replays the later ones' launches)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_users_handler_runs_after_the_step_and_stays_installed(signum, monkeypatch):
    g, a, b, train, init = _two_updates()
    _signal_in(monkeypatch, "between", signum)
    seen = []

    def users(s, frame):
        seen.append((s, sess.run(b)[0]))  # (a handler may run steps: it runs after this one)
    old = signal.signal(signum, users)
    try:
        with tf.Session(graph=g) as sess:
            sess.run(init)
            sess.run(train)  # the handler returns: the step went on to its end
            assert signal.getsignal(signum) is users
            np.testing.assert_array_equal(sess.run([a, b]), np.ones((2, 4)))
    finally:
        signal.signal(signum, old)
    assert seen == [(signum, 1.0)]


@pytest.mark.timeout(60)
def test_a_second_ctrl_c_interrupts_a_step_that_does_not_end(monkeypatch):
    parent, slice_run = os.getpid(), workers._Step.slice_run

    def hanging(self, *run):  # a worker blocked for good (HUNG_SECONDS is far off)
        if os.getpid() != parent:
            time.sleep(3600)
        return slice_run(self, *run)
    monkeypatch.setattr(workers._Step, "slice_run", hanging)
    g = tf.Graph()
    with g.as_default():
        x = tf.placeholder(tf.float32, [None, 4], name="x")
        w = tf.Variable(tf.zeros([4]), name="w")
        train = tf.train.GradientDescentOptimizer(0.1).minimize(tf.reduce_mean(x * w))
        init = tf.global_variables_initializer()
    feed = {x: np.ones((16, 4), np.float32)}
    with tf.Session(graph=g, workers=2, config=tf.ConfigProto(intra_op_parallelism_threads=2)) as sess:
        sess.run(init)
        sess.run(train, feed)  # in this process; then the workers are forked
        before = sess.run(w)

        def press_twice():
            for _ in range(2):
                time.sleep(0.3)
                os.kill(parent, signal.SIGINT)
        threading.Thread(target=press_twice, daemon=True).start()
        t = time.monotonic()
        with pytest.raises(KeyboardInterrupt):
            sess.run(train, feed)
        assert time.monotonic() - t < 5
        with pytest.warns(RuntimeWarning, match="stopped halfway"):  # (this one had not begun its updates)
            np.testing.assert_array_equal(sess.run(w), before)


@pytest.mark.timeout(60)
def test_a_step_stopped_halfway_by_a_second_ctrl_c_is_said_at_the_next_run(monkeypatch):
    g, a, b, train, init = _two_updates()
    _signal_in(monkeypatch, "between", signal.SIGINT)
    _signal_in(monkeypatch, "between", signal.SIGINT)  # twice in the same step: the KeyboardInterrupt comes at once
    with tf.Session(graph=g) as sess:
        sess.run(init)
        with pytest.raises(KeyboardInterrupt):
            sess.run(train)
        with pytest.warns(RuntimeWarning, match="stopped halfway by KeyboardInterrupt.*restore a checkpoint"):
            av, bv = sess.run([a, b])
        assert (av[0], bv[0]) == (1.0, 0.0)  # what the warning is about
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            sess.run(b)  # said once
