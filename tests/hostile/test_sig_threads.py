"""A script's own threads under tf.train.Coordinator (the sig sweep): join waits for them as TF1's does, so the
weights read after it hold every step they ran (it returned at once, and the main thread saved a model that
threads were still training); the error one reports is raised by join, the end of the input is a clean stop, and
threads that outlive the grace period are named. Each behaviour is TensorFlow's Coordinator's, run side by side."""
from __future__ import annotations

import threading
import time

import numpy as np
import pytest

import tfplus as tf

THREADS, STEPS = 3, 20


def _workers(coord, body, n: int = THREADS) -> list:
    """n started threads running body(i) under coord.stop_on_exception(), as TF1's scripts write them."""
    def run(i):
        with coord.stop_on_exception():
            body(i)
    threads = [threading.Thread(target=run, args=(i,), name=f"worker-{i}", daemon=True) for i in range(n)]
    for t in threads:
        t.start()
    return threads


def _slow_counts(api):
    """Each thread counts to STEPS slowly, then returns; join(threads): how many counts it saw, and whether
    any thread still ran after join."""
    coord, counts = api.train.Coordinator(), [0] * THREADS

    def body(i):
        for _ in range(STEPS):
            time.sleep(0.002)
            counts[i] += 1
    threads = _workers(coord, body)
    coord.join(threads)
    return sum(counts), any(t.is_alive() for t in threads)


def _reported_error(api):
    coord = api.train.Coordinator()

    def body(i):
        if i == 1:
            raise ValueError("thread 1 failed")
        coord.wait_for_stop()  # the others end when the failure stops the coordinator
    threads = _workers(coord, body)
    with pytest.raises(ValueError, match="thread 1 failed"):
        coord.join(threads)
    return coord.should_stop(), coord.joined


def _clean_stop(api):
    """The end of the input reported by a thread stops the others and is no error."""
    coord = api.train.Coordinator()

    def body(i):
        if i == 0:
            raise api.errors.OutOfRangeError(None, None, "the input ended")
        while not coord.should_stop():
            time.sleep(0.001)
    threads = _workers(coord, body)
    coord.join(threads)
    return coord.should_stop(), any(t.is_alive() for t in threads)


def _stragglers(api):
    coord, release = api.train.Coordinator(), threading.Event()
    threads = _workers(coord, lambda i: i == 2 and release.wait(30), 3)
    coord.request_stop()
    try:
        with pytest.raises(RuntimeError) as e:
            coord.join(threads, stop_grace_period_secs=0.05)
    finally:
        release.set()
    waited = time.monotonic()
    assert not api.train.Coordinator().wait_for_stop(0.05)  # a timeout is a wait, then False
    return str(e.value), time.monotonic() - waited >= 0.04


@pytest.mark.parametrize("case", [_slow_counts, _reported_error, _clean_stop, _stragglers])
def test_coordinator_does_what_tensorflows_does(case, tf1):
    assert case(tf) == case(tf1)


def test_threads_training_under_a_coordinator_have_all_their_steps_in_the_weights_after_join(tmp_path):
    """Every thread's updates commute (the gradient of mean(x * w) is mean(x)), so after join the weights are
    exactly the sum of all steps; a checkpoint saved then holds them."""
    g = tf.Graph()
    with g.as_default():
        x = tf.placeholder(tf.float32, [None, 4])
        w = tf.Variable(tf.zeros([4]))
        train = tf.train.GradientDescentOptimizer(1.0).minimize(tf.reduce_mean(x * w))
        saver = tf.train.Saver()
    feeds = [[np.full((2, 4), i + 1, np.float32)] * STEPS for i in range(THREADS)]
    with tf.Session(graph=g, workers=1) as sess:
        sess.run(w.initializer)
        coord = tf.train.Coordinator()

        def body(i):
            for xv in feeds[i]:
                time.sleep(0.002)
                sess.run(train, {x: xv})
        coord.join(_workers(coord, body))
        path = saver.save(sess, str(tmp_path / "model"))
    expected = -sum(float(f.mean()) / 4 for fs in feeds for f in fs)
    np.testing.assert_array_equal(tf.train.load_variable(path, w.op.name), np.full(4, expected, np.float32))


@pytest.mark.parametrize("intra_op", [1, 2])
def test_a_step_run_from_another_thread_computes_the_main_threads_bits(intra_op):
    """BLAS runs on one thread inside a step in every thread: OpenBLAS ignored the process-wide count set from a
    thread other than the main one (once the main one had set one), so a conv's and a matmul's GEMMs run from a
    request thread used every core, and rounded otherwise than the same step run from the main thread."""
    rng = np.random.default_rng(0)
    g = tf.Graph()
    with g.as_default():
        x = tf.constant(rng.standard_normal((16, 6, 14, 14)).astype(np.float32))
        f = tf.constant(rng.standard_normal((5, 5, 6, 16)).astype(np.float32))
        y = tf.nn.conv2d(x, f, [1, 1, 1, 1], "VALID", data_format="NCHW")  # the generic path: one GEMM
        z = tf.matmul(tf.reshape(y, [16, -1]), tf.constant(rng.standard_normal((1600, 120)).astype(np.float32)))
    with tf.Session(graph=g, workers=1, config=tf.ConfigProto(intra_op_parallelism_threads=intra_op)) as sess:
        main = sess.run([y, z])
        other: list = []
        t = threading.Thread(target=lambda: other.extend(sess.run([y, z])))
        t.start()
        t.join()
    assert all(np.array_equal(a, b) for a, b in zip(main, other))
