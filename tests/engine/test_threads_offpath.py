"""Threads off the beaten path: a checkpoint saved while another thread trains holds one step's values; a Ctrl-C
while a kernel's shards run on the intra-op pool neither leaves them running nor ends the next call early."""
from __future__ import annotations

import os
import signal
import threading
import time

import pytest
from conftest import DEVICES

import tfplus as tf
from tfplus import threads


def _counting():
    """A step that adds 1 to `a`, then to `b`, then to the global step: after any whole number of steps the three
    are equal."""
    g = tf.Graph()
    with g.as_default():
        a = tf.Variable(tf.zeros([8]), name="a")
        b = tf.Variable(tf.zeros([8]), name="b")
        step = tf.train.get_or_create_global_step()
        with tf.control_dependencies([tf.assign_add(a, tf.ones([8]))]):
            add_b = tf.assign_add(b, tf.ones([8]))
        with tf.control_dependencies([add_b]):
            train = tf.assign_add(step, 1)
        init = tf.global_variables_initializer()
    return g, step, train, init


@pytest.mark.timeout(60)
@pytest.mark.parametrize("device", DEVICES)
def test_a_checkpoint_saved_while_another_thread_trains_is_one_steps(device, tmp_path):
    g, step, train, init = _counting()
    with g.as_default():
        saver = tf.train.Saver(max_to_keep=None)
    with tf.Session(graph=g, device=device) as sess:
        sess.run(init)
        copy_out = sess.runtime.copy_out

        def slow_copy_out(buf):  # a slow device-to-host copy (a GPU's): the other thread trains meanwhile
            time.sleep(1e-3)
            return copy_out(buf)
        sess.runtime.copy_out = slow_copy_out
        stop = threading.Event()

        def training():
            while not stop.is_set():
                sess.run(train)
        trainer = threading.Thread(target=training, daemon=True)
        trainer.start()
        try:
            for _ in range(5):
                path = saver.save(sess, os.path.join(tmp_path, "model"), global_step=step, write_meta_graph=False)
                reader = tf.train.NewCheckpointReader(path)
                a, b, n = reader.get_tensor("a"), reader.get_tensor("b"), reader.get_tensor(step.op.name)
                assert a[0] == b[0] == n == int(path.rsplit("-", 1)[1]), f"{path}: a {a[0]}, b {b[0]}, step {n}"
        finally:
            stop.set()
            trainer.join(10)
        assert not trainer.is_alive()


@pytest.mark.timeout(30)
def test_ctrl_c_while_the_pool_runs_a_kernels_shards_waits_for_them_and_leaves_no_completion_behind():
    done = []

    def shard(i):
        if i == 1:  # on the pool: Ctrl-C comes while the caller waits for this shard
            time.sleep(0.05)
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.2)
            done.append(i)
        return i
    with threads.using(2):
        with pytest.raises(KeyboardInterrupt):
            threads.run(shard, range(2))
        assert done == [1]  # the call ended after its shards (which write into the kernel's buffers)
        assert threads.run(shard, [0, 2]) == [0, 2]  # the next call waited for its own second shard


def test_saving_from_a_session_another_thread_closed_says_it_is_closed(tmp_path):
    g, step, train, init = _counting()
    with g.as_default():
        saver = tf.train.Saver()
    sess = tf.Session(graph=g)
    sess.run(init)
    closer = threading.Thread(target=sess.close)
    closer.start()
    closer.join(10)
    with pytest.raises(RuntimeError, match="closed Session"):  # it said "uninitialized value a"
        saver.save(sess, os.path.join(tmp_path, "model"), global_step=1)
