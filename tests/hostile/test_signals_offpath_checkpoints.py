"""Two processes saving into one checkpoint folder: the state file keeps listing both's kept checkpoints and never
lists one that the other's max_to_keep deleted."""
from __future__ import annotations

import glob
import os

import pytest

import tfplus as tf

SAVES = 25


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
