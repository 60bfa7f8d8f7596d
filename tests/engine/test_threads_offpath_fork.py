"""A process forked by user code (os.fork, multiprocessing's 'fork') from one that used an OpenCL session: the
session and any new OpenCL session there raise an error saying what to do, where the first launch hung for ever;
the parent's session goes on."""
from __future__ import annotations

import os
import time

import numpy as np
import pytest
from conftest import needs_opencl

import tfplus as tf


def _in_child(body) -> int:
    """body() in a forked child: its exit code (0: body returned True), or -1 if it still ran after 20 s (killed)."""
    pid = os.fork()
    if pid == 0:
        code = 2
        try:
            code = 0 if body() else 1
        finally:
            os._exit(code)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.05)
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    return -1


def _raises_saying_spawn(fn) -> bool:
    try:
        fn()
    except RuntimeError as e:
        return "fork" in str(e) and "get_context('spawn')" in str(e)
    return False


@needs_opencl
@pytest.mark.timeout(90)
def test_an_opencl_session_in_a_forked_child_is_a_clear_error_not_a_hang():
    g = tf.Graph()
    with g.as_default():
        x = tf.placeholder(tf.float32, [None, 4], name="x")
        w = tf.Variable(tf.fill([4, 4], 2.0), name="w")
        y = tf.matmul(x, w)
        init = tf.global_variables_initializer()
    feed = {x: np.ones((2, 4), np.float32)}
    with tf.Session(graph=g, device="opencl") as sess:
        sess.run(init)
        assert sess.run(y, feed)[0, 0] == 8.0
        assert _in_child(lambda: _raises_saying_spawn(lambda: sess.run(y, feed))) == 0
        assert _in_child(lambda: _raises_saying_spawn(lambda: tf.Session(graph=g, device="opencl"))) == 0

        def cpu_works():  # the cpu device does
            with tf.Session(graph=g) as child:
                child.run(init)
                return child.run(y, feed)[0, 0] == 8.0
        assert _in_child(cpu_works) == 0
        assert sess.run(y, feed)[0, 0] == 8.0  # the parent's session goes on
