"""Two processes saving into one checkpoint folder: the state file keeps listing both's kept checkpoints and never
lists one that the other's max_to_keep deleted. A Ctrl-C anywhere in a save leaves every listed checkpoint whole."""
from __future__ import annotations

import glob
import os
import sys

import numpy as np
import pytest

import tfplus as tf
from tfplus.train import saver as saver_lib

SAVES = 25
STRIDE = 29


def _save_and_check(folder: str, prefix: str, go: int) -> int:
    """A child's saves (max_to_keep 2); the number of times the state file, read right after a save, listed a
    checkpoint that was not there."""
    g = tf.Graph()
    with g.as_default():
        w = tf.Variable(tf.zeros([4]), name="w")
        saver = tf.train.Saver(max_to_keep=2)
    missing = 0
    with tf.Session(graph=g, workers=1) as sess:
        sess.run(w.initializer)
        os.read(go, 1)  # both start together
        for step in range(SAVES):
            saver.save(sess, os.path.join(folder, prefix), global_step=step, write_meta_graph=False)
            with saver_lib._state_lock(folder):  # (a reader without it may see a deletion after its read)
                listed = tf.train.get_checkpoint_state(folder).all_model_checkpoint_paths
                missing += sum(not os.path.exists(p + ".index") for p in listed)
    return missing


@pytest.mark.timeout(60)
@pytest.mark.parametrize("prefixes", [("a", "b"), ("model", "model")])
def test_two_processes_saving_into_one_folder_list_every_kept_checkpoint_and_no_missing_one(prefixes, tmp_path):
    folder = str(tmp_path)
    go_r, go_w = os.pipe()
    pids = []
    for prefix in prefixes:
        pid = os.fork()
        if pid == 0:
            code = 3
            try:
                os.close(go_w)
                code = min(_save_and_check(folder, prefix, go_r), 2)
            finally:
                os._exit(code)
        pids.append(pid)
    os.close(go_r)
    os.write(go_w, b"xx")
    os.close(go_w)
    codes = [os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) for pid in pids]
    assert codes == [0, 0], "a state file listed a missing checkpoint (exit 1-2) or a child failed (3)"
    listed = sorted(os.path.basename(p) for p in tf.train.get_checkpoint_state(folder).all_model_checkpoint_paths)
    present = sorted(os.path.basename(p)[:-len(".index")] for p in glob.glob(os.path.join(folder, "*.index")))
    assert listed == present
    assert len(present) == 2 * len(set(prefixes))  # each process's max_to_keep deleted its older ones


def _saved_thrice(folder: str):
    g = tf.Graph()
    with g.as_default():
        w = tf.Variable(np.zeros(6, np.float32), name="w")
        saver = tf.train.Saver(max_to_keep=2)
    sess = tf.Session(graph=g, workers=1)
    for step in (1, 2, 3):
        w.load(np.full(6, step, np.float32), session=sess)
        saver.save(sess, os.path.join(folder, "m"), global_step=step, write_meta_graph=False, metadata={"c": step})
    w.load(np.full(6, 10, np.float32), session=sess)
    return sess, saver


def _listed_are_whole(folder: str) -> int:
    listed = tf.train.get_checkpoint_state(folder).all_model_checkpoint_paths
    for path in listed:
        with saver_lib.CheckpointReader(path) as reader:
            reader.verify()
            assert (reader.get_tensor("w") == reader.metadata()["c"]).all(), path
    return len(listed)


@pytest.mark.timeout(60)
def test_ctrl_c_once_the_state_file_lists_the_backup_keeps_the_backup(tmp_path, monkeypatch):
    """Saving a listed step again lists a backup of it while its files are replaced; a Ctrl-C after the state file
    naming the backup was renamed into place (while its folder is synced) deleted the backup it names."""
    sess, saver = _saved_thrice(str(tmp_path))
    write_state = saver_lib._write_state

    def then_interrupted(*args):
        write_state(*args)
        raise KeyboardInterrupt
    monkeypatch.setattr(saver_lib, "_write_state", then_interrupted)
    with pytest.raises(KeyboardInterrupt):
        saver.save(sess, os.path.join(tmp_path, "m"), global_step=3, write_meta_graph=False, metadata={"c": 10})
    monkeypatch.undo()
    assert _listed_are_whole(str(tmp_path)) == 2
    saver.save(sess, os.path.join(tmp_path, "m"), global_step=4, write_meta_graph=False, metadata={"c": 10})
    assert _listed_are_whole(str(tmp_path)) == 2  # and the run goes on


@pytest.mark.timeout(60)
@pytest.mark.parametrize("step", [3, 4])  # the same step again, a new one
def test_ctrl_c_at_any_line_of_a_save_leaves_every_listed_checkpoint_whole(step, tmp_path):
    """A KeyboardInterrupt raised at the k-th line the save runs in the saver's modules, k in steps of STRIDE (the
    state file's write, a backup's link, a rename are a few lines each: a stride of 1, 15 s, found the same)."""
    modules = ("saver.py", "tensor_bundle.py", "gfile.py")
    for k in range(1, 100_000, STRIDE):
        folder = str(tmp_path / str(k))
        sess, saver = _saved_thrice(folder)

        def tracer(frame, event, arg, lines=[0], k=k):  # noqa: B006  (the count of this save's lines)
            if event == "line" and frame.f_code.co_filename.endswith(modules):
                lines[0] += 1
                if lines[0] == k:
                    raise KeyboardInterrupt
            return tracer
        sys.settrace(tracer)
        try:
            saver.save(sess, os.path.join(folder, "m"), global_step=step, write_meta_graph=False, metadata={"c": 10})
            finished = True
        except KeyboardInterrupt:
            finished = False
        finally:
            sys.settrace(None)
        _listed_are_whole(folder)
        sess.close()
        if finished:
            break
    assert k > 300  # the save ran that many lines: each stretch of STRIDE was interrupted once
