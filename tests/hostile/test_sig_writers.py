"""Writers killed at random moments (the sig sweep): the temporary file of an atomic write that a kill left is
deleted by the next tf.train.Saver save into its folder (a script's, an Estimator's model_dir: only `tfplus train`
deleted them, at its start), while one that a live process is still writing is left alone, whoever cleans."""
from __future__ import annotations

import os
import signal

import numpy as np

import tfplus as tf
from tfplus import gfile


def _writer_in_child(path: str, finish: bool) -> tuple[int, int]:
    """A forked child inside atomic_open(path), one chunk written; with `finish` it then dies at once (os._exit:
    no clean-up runs, as under SIGKILL), else it waits to be killed. (its pid, a pipe that reads b"x" when it
    is inside.)"""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(r)
            with gfile.atomic_open(path) as f:
                f.write(b"half")
                f.flush()
                os.write(w, b"x")
                if finish:
                    os._exit(0)
                signal.pause()
        finally:
            os._exit(1)
    os.close(w)
    return pid, r


def _temps(folder) -> list[str]:
    return sorted(n for n in os.listdir(folder) if n.endswith(".tmp"))


def test_a_temporary_file_being_written_is_left_alone_and_a_killed_writers_is_removed(tmp_path):
    pid, r = _writer_in_child(str(tmp_path / "model.meta"), finish=False)
    try:
        assert os.read(r, 1) == b"x"
        live = _temps(tmp_path)
        assert len(live) == 1
        assert gfile.remove_orphan_temps(str(tmp_path)) == [] and _temps(tmp_path) == live  # still written
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        os.close(r)
    assert gfile.remove_orphan_temps(str(tmp_path)) == live and _temps(tmp_path) == []


def test_a_save_removes_the_temporary_files_of_a_killed_save_and_keeps_the_checkpoints(tmp_path):
    g = tf.Graph()
    with g.as_default():
        w = tf.Variable(np.arange(4, dtype=np.float32), name="w")
        saver = tf.train.Saver()
    with tf.Session(graph=g) as sess:
        sess.run(w.initializer)
        first = saver.save(sess, str(tmp_path / "model.ckpt"), global_step=1)
        pid, r = _writer_in_child(first + ".meta", finish=True)  # a save killed while it wrote step 1's graph
        assert os.read(r, 1) == b"x"
        os.waitpid(pid, 0)
        os.close(r)
        assert len(_temps(tmp_path)) == 1
        second = saver.save(sess, str(tmp_path / "model.ckpt"), global_step=2)
    assert _temps(tmp_path) == []
    for path in (first, second):
        np.testing.assert_array_equal(tf.train.load_variable(path, "w"), np.arange(4, dtype=np.float32))
    assert tf.train.get_checkpoint_state(str(tmp_path)).all_model_checkpoint_paths == [first, second]
