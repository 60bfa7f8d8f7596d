"""MetaGraphDef both ways with TensorFlow: Saver.save writes `<checkpoint>.meta`; TensorFlow's import_meta_graph
reads tfplus's and restores its checkpoint, and tfplus's reads TensorFlow's; the collections (variables as
VariableDef, tensors and ops by name, strings) come back, and training continues from the restored step."""
from __future__ import annotations

import os

import numpy as np

import tfplus as tf

X1, X2 = np.ones((1, 3), np.float32), np.arange(6, dtype=np.float32).reshape(2, 3)


def _build(t):
    """A linear model trained one step with a global step, a metric and collections of each kind."""
    x = t.placeholder(t.float32, [None, 3], name="x")
    w = t.Variable(np.arange(6, dtype=np.float32).reshape(3, 2), name="w")
    b = t.Variable(np.ones(2, np.float32), name="b")
    y = t.add(t.matmul(x, w), b, name="y")
    loss = t.reduce_mean(y * y, name="loss")
    t.add_to_collection("outputs", y)
    t.add_to_collection("losses", loss)
    t.add_to_collection("notes", "linear")
    t.metrics.mean(loss)
    step = t.train.get_or_create_global_step()
    t.add_to_collection("train_op", t.train.GradientDescentOptimizer(0.01).minimize(loss, global_step=step,
                                                                                   name="train"))


def _save(t, folder) -> tuple[str, np.ndarray]:
    with t.Graph().as_default():
        _build(t)
        saver = t.train.Saver()
        with t.Session() as sess:
            sess.run(t.global_variables_initializer())
            sess.run("train", {"x:0": X2})
            path = saver.save(sess, os.path.join(folder, "model"), global_step=1)
            return path, sess.run("y:0", {"x:0": X1})


def _restore(t, path):
    """What a program with no model code gets from the .meta and the checkpoint: y, the collections, and the
    global step after one more training step."""
    with t.Graph().as_default():
        saver = t.train.import_meta_graph(path + ".meta")
        with t.Session() as sess:
            saver.restore(sess, path)
            y = sess.run(t.get_collection("outputs")[0], {"x:0": X1})
            sess.run(t.get_collection("train_op")[0], {"x:0": X2})
            collections = {key: [getattr(v, "name", v) for v in t.get_collection(key)]
                           for key in ("variables", "trainable_variables", "local_variables", "metric_variables",
                                       "global_step", "losses", "train_op", "notes")}
            return y, collections, int(sess.run(t.train.get_global_step()))


def test_tensorflow_reads_tfplus_meta_graph(tf1, tmp_path):
    path, want = _save(tf, str(tmp_path))
    assert os.path.isfile(path + ".meta")
    y, collections, step = _restore(tf1, path)
    np.testing.assert_allclose(y, want, rtol=1e-6)
    assert step == 2 and collections == _restore(tf, path)[1]
    assert collections["variables"] == ["w:0", "b:0", "global_step:0"] and collections["notes"] == [b"linear"]
    assert collections["local_variables"] == ["mean/total:0", "mean/count:0"]


def test_tfplus_reads_tensorflows_meta_graph(tf1, tmp_path):
    path, want = _save(tf1, str(tmp_path))
    y, collections, step = _restore(tf, path)
    np.testing.assert_allclose(y, want, rtol=1e-6)
    assert step == 2 and collections == _restore(tf1, path)[1]


def test_import_scope_and_saver_rotation(tmp_path):
    """import_meta_graph under a scope; max_to_keep deletes a dropped checkpoint's .meta with it."""
    paths = []
    with tf.Graph().as_default():
        _build(tf)
        saver = tf.train.Saver(max_to_keep=1)
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            paths = [saver.save(sess, str(tmp_path / "m"), global_step=i) for i in (1, 2)]
    assert not os.path.exists(paths[0] + ".meta") and os.path.isfile(paths[1] + ".meta")
    with tf.Graph().as_default() as g:
        saver = tf.train.import_meta_graph(paths[1] + ".meta", import_scope="restored")
        assert g.get_collection("outputs")[0].name == "restored/y:0"
        with tf.Session() as sess:
            saver.restore(sess, paths[1])
            np.testing.assert_allclose(sess.run("restored/b:0"), np.ones(2))
