"""Checkpoints are never lost or torn: a save that fails at any step, or a process killed (SIGKILL) in the middle of
saves of new steps and of the same step again, leaves the state file listing whole checkpoints; resume takes the
newest that verifies; a reader survives another process's max_to_keep deleting what it reads."""
from __future__ import annotations

import os
import random
import re
import signal
import threading
import time

import numpy as np
import pytest

import tfplus as tf
from tfplus import tensor_bundle, trainer
from tfplus.cli import main
from tfplus.gfile import remove_orphan_temps
from tfplus.train import saver as saver_lib

N = 20_000  # floats per checkpoint: big enough for a write to take a while, small enough to be quick


def _model(max_to_keep=3, n=N):
    g = tf.Graph()
    with g.as_default():
        w = tf.Variable(np.zeros(n, np.float32), name="w")
        tf.global_variables_initializer()
        saver = tf.train.Saver(max_to_keep=max_to_keep)
    sess = tf.Session(graph=g)
    sess.run("init")
    return sess, w, saver


def _save(sess, w, saver, folder, step: int, c: int) -> str:
    """Saves w filled with `c` as step `step`, with `c` in the metadata too: a whole checkpoint agrees."""
    w.load(np.full(w.shape.as_list(), c, np.float32), session=sess)
    return saver.save(sess, os.path.join(folder, "model.ckpt"), global_step=step, metadata={"c": c})


def _whole(path) -> int:
    """The `c` of the checkpoint `path` once it is whole: every checksum, values and metadata agree."""
    with saver_lib.CheckpointReader(str(path)) as reader:
        reader.verify()
        c = reader.metadata()["c"]
        assert (reader.get_tensor("w") == c).all(), path
    return c


def _listed_are_whole(folder) -> list[int]:
    state = tf.train.get_checkpoint_state(str(folder))
    assert state is not None
    assert state.model_checkpoint_path == state.all_model_checkpoint_paths[-1]
    return [_whole(p) for p in state.all_model_checkpoint_paths]


_FILE_OPS = ("replace", "fsync", "link")


class _FailAt:
    """Wraps os functions so that the k-th call among them fails, as on a full disk."""

    def __init__(self, k: int):
        self.k, self.calls = k, 0

    def wrap(self, real):
        def op(*args, **kwargs):
            self.calls += 1
            if self.calls == self.k:
                raise OSError(28, "No space left on device (injected)")
            return real(*args, **kwargs)
        return op


def test_a_save_failing_at_any_step_leaves_every_listed_checkpoint_whole(tmp_path, monkeypatch):
    """Each of the save's renames, fsyncs and links fails in turn, in a same-step save (the trainer's save on
    SIGTERM right after a periodic one) and in a new step's."""
    sess, w, saver = _model(n=10)
    for same_step in (True, False):
        for k in range(100):
            folder = str(tmp_path / f"{same_step}-{k}")
            saver = tf.train.Saver(var_list=[w], max_to_keep=2)
            for step in (1, 2, 3):
                _save(sess, w, saver, folder, step, c=step)
            fail = _FailAt(k + 1)
            with monkeypatch.context() as m:
                for name in _FILE_OPS:
                    m.setattr(os, name, fail.wrap(getattr(os, name)))
                try:
                    _save(sess, w, saver, folder, 3 if same_step else 4, c=10)
                    failed = False
                except OSError:
                    failed = True
            # A failure after the new state file is in place (its folder's fsync) leaves the new one listed.
            kept, new = _listed_are_whole(folder), [2, 10] if same_step else [3, 10]
            assert kept in ([[2, 3], new] if failed else [new]), (same_step, k, kept)
            _save(sess, w, saver, folder, 5, c=5)  # and the run goes on
            assert _listed_are_whole(folder)[-1] == 5
            if not failed:
                break
        assert k > 5, "the save made too few file operations to have been tested at each"


def _save_forever(folder: str, ready: int, seed: int) -> None:
    """A child's loop: new steps and the same step again, each with new values, as fast as it can."""
    sess, w, saver = _model()
    state = tf.train.get_checkpoint_state(folder) if os.path.isdir(folder) else None
    if state is not None:
        saver.recover_last_checkpoints(list(state.all_model_checkpoint_paths))
    c = 1000 * seed
    while True:
        c += 1
        _save(sess, w, saver, folder, step=c // 2, c=c)
        if ready is not None:
            os.write(ready, b"x")
            os.close(ready)
            ready = None


def test_sigkill_in_the_middle_of_saves_never_leaves_a_torn_listed_checkpoint(tmp_path):
    folder, rng = str(tmp_path / "run"), random.Random(0)
    newest = []
    for kill in range(1, 11):
        r, wfd = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: save until killed
            os.close(r)
            try:
                _save_forever(folder, wfd, kill)
            finally:
                os._exit(1)
        os.close(wfd)
        started = os.read(r, 1)
        os.close(r)
        time.sleep(rng.uniform(0, 0.15))
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        assert started == b"x", "the child did not save"
        _listed_are_whole(folder)
        reader, skipped = tf.train.newest_valid_checkpoint(folder)
        with reader:
            assert reader.path == tf.train.latest_checkpoint(folder) and not skipped
        newest.append(_whole(reader.path))
        remove_orphan_temps(folder)  # as `tfplus train` does at its start
        saver_lib.remove_interrupted_saves(folder)
        assert _listed_are_whole(folder) and not [n for n in os.listdir(folder) if ".new-" in n]
        listed = {os.path.basename(p) for p in tf.train.get_checkpoint_state(folder).all_model_checkpoint_paths}
        assert {re.sub(r"\.(index|data-.*)$", "", n) for n in os.listdir(folder) if ".previous-" in n} <= listed
    assert all(c % 1000 for c in newest)  # each child saved before it was killed


def test_restoring_while_another_saver_deletes_with_max_to_keep_1(tmp_path):
    folder = str(tmp_path / "live")
    sess, w, saver = _model(max_to_keep=1, n=1000)
    _save(sess, w, saver, folder, 0, c=0)
    stop, saved = threading.Event(), [0]

    def save_loop():
        while not stop.is_set():
            saved[0] += 1
            _save(sess, w, saver, folder, saved[0] // 2, c=saved[0])  # new steps and same steps again

    reader_sess, _, restorer = _model(n=1000)
    thread = threading.Thread(target=save_loop)
    thread.start()
    try:
        for _ in range(60):
            with tf.train.load_checkpoint(folder) as reader:
                time.sleep(0.001)  # the other thread deletes what was opened meanwhile
                c = reader.metadata()["c"]
                assert (reader.get_tensor("w") == c).all()
            reader, skipped = tf.train.newest_valid_checkpoint(folder)
            with reader:
                restorer.restore(reader_sess, reader)
            assert (reader_sess.variable_value("w") == reader_sess.variable_value("w")[0]).all()
    finally:
        stop.set()
        thread.join()
    assert saved[0] > 5, "the saver did not run alongside"


def test_resume_skips_a_damaged_newest_checkpoint_and_says_so(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(trainer, "SYNTHETIC_TRAIN", 64)
    monkeypatch.setattr(trainer, "SYNTHETIC_TEST", 32)
    run = tmp_path / "run"
    common = ["--synthetic", "--model", "lenet", "--batch-size", "16", "--checkpoint-dir", str(run)]
    assert main(["train", *common, "--steps", "8", "--checkpoint-every", "4"]) == 0
    newest = tf.train.latest_checkpoint(str(run))
    assert newest.endswith("-8")
    data = tensor_bundle.data_path(newest)
    damaged = bytearray(open(data, "rb").read())
    damaged[len(damaged) // 2] ^= 1
    open(data, "wb").write(bytes(damaged))
    capsys.readouterr()
    assert main(["eval", "--checkpoint", str(run)]) == 0
    captured = capsys.readouterr()
    assert f"skipped checkpoint {newest}: " in captured.err and "does not match its checksum" in captured.err
    assert captured.out.startswith(f"{run / 'model.ckpt-4'} (step 4,")
    assert main(["train", *common, "--steps", "8", "--resume"]) == 0
    err = capsys.readouterr().err
    assert f"skipped checkpoint {newest}: " in err and f"resumed from {run / 'model.ckpt-4'} at step 4/8" in err
    with tf.train.load_checkpoint(str(run)) as reader:
        assert reader.path.endswith("-8")
        reader.verify()


@pytest.mark.parametrize("fmt", ["tensorflow", "tfplus"])
def test_a_checkpoint_saved_again_at_its_path_restores_the_new_values(tmp_path, fmt):
    """TF1 scripts save to one path over and over (no global_step): each save replaces the last."""
    g = tf.Graph()
    with g.as_default():
        w = tf.Variable(np.zeros(3, np.float32), name="w")
        tf.global_variables_initializer()
        saver = tf.train.Saver(format=fmt)
    sess = tf.Session(graph=g)
    sess.run("init")
    path = str(tmp_path / "model.ckpt")
    for c in (1, 2, 3):
        w.load(np.full(3, c, np.float32), session=sess)
        assert saver.save(sess, path) == path
        assert tf.train.load_variable(path, "w").tolist() == [c] * 3
    assert sorted(os.listdir(tmp_path)) == sorted(["checkpoint", "model.ckpt.meta", *(
        ["model.ckpt.index", "model.ckpt.data-00000-of-00001"] if fmt == "tensorflow" else ["model.ckpt"])])
