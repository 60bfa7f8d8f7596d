"""Checkpoints move both ways between TensorFlow (the TF1 oracle) and tfplus: a model trained and saved by
TensorFlow restores here and fine-tunes to TensorFlow's values; what tfplus saves, TensorFlow's Saver and
tf.train.load_variable read; what tfplus cannot take (partitioned variables, dtypes it lacks) fails clearly."""
import numpy as np
import pytest

import tfplus as tf

RNG = np.random.default_rng(0)
INIT = {"dense/w": RNG.standard_normal((3, 5)).astype(np.float32) * 0.5,
        "dense/b": np.zeros(5, np.float32),
        "out/w": RNG.standard_normal((5, 2)).astype(np.float32) * 0.5,
        "out/b": np.float32([0.1, -0.1])}
XS = RNG.standard_normal((4, 3)).astype(np.float32)
YS = np.int32([0, 1, 1, 0])


def _model(api):
    """The same small classifier in either API (tfplus or tf.compat.v1): variables named as in INIT and a
    global step; returns (variables by name, train op)."""
    vs = {k: api.Variable(v, name=k) for k, v in INIT.items()}
    step = api.Variable(np.int64(0), name="global_step", trainable=False)
    hidden = api.nn.relu(api.matmul(XS, vs["dense/w"]) + vs["dense/b"])
    logits = api.matmul(hidden, vs["out/w"]) + vs["out/b"]
    loss = api.reduce_mean(api.nn.sparse_softmax_cross_entropy_with_logits(labels=YS, logits=logits))
    train = api.train.GradientDescentOptimizer(0.5).minimize(loss, global_step=step)
    vs["global_step"] = step
    return vs, train


def test_trained_in_tensorflow_fine_tuned_in_tfplus_and_back(tf1, tmp_path):
    tf_dir, our_dir = str(tmp_path / "tf"), str(tmp_path / "tfplus")
    g = tf1.Graph()
    with g.as_default():
        tf_vars, tf_train = _model(tf1)
        tf_saver = tf1.train.Saver()
        tf_sess = tf1.Session(graph=g)
        tf_sess.run(tf1.global_variables_initializer())
        for _ in range(3):
            tf_sess.run(tf_train)
        tf_path = tf_saver.save(tf_sess, tf_dir + "/model.ckpt", global_step=tf_vars["global_step"])
        trained = tf_sess.run(tf_vars)

    # TensorFlow's folder, as a TF1 script reads it
    assert tf.train.latest_checkpoint(tf_dir) == tf_path == tf_dir + "/model.ckpt-3"
    assert tf.train.list_variables(tf_dir) == tf1.train.list_variables(tf_dir)
    with tf.Graph().as_default():
        vs, train = _model(tf)
        saver = tf.train.Saver()
        with tf.Session() as sess:
            saver.restore(sess, tf.train.latest_checkpoint(tf_dir))
            for k, v in sess.run(vs).items():
                assert v.dtype == trained[k].dtype and v.tobytes() == trained[k].tobytes(), k
            for _ in range(2):  # fine-tune both from the same point
                sess.run(train)
            ours = sess.run(vs)
            our_path = saver.save(sess, our_dir + "/model.ckpt", global_step=vs["global_step"],
                                  metadata={"epoch": 1})
    with g.as_default():
        for _ in range(2):
            tf_sess.run(tf_train)
        theirs = tf_sess.run(tf_vars)
    assert ours["global_step"] == theirs["global_step"] == 5
    for k in INIT:
        np.testing.assert_allclose(ours[k], theirs[k], rtol=1e-5, atol=1e-6, err_msg=k)

    # ... and back: TensorFlow reads the folder tfplus wrote
    assert tf1.train.latest_checkpoint(our_dir) == our_path
    for k, v in ours.items():
        assert tf1.train.load_variable(our_dir, k).tobytes() == v.tobytes(), k
    g2 = tf1.Graph()
    with g2.as_default():
        back, _ = _model(tf1)
        with tf1.Session(graph=g2) as sess:
            tf1.train.Saver().restore(sess, our_path)
            for k, v in sess.run(back).items():
                assert v.tobytes() == ours[k].tobytes(), k
    assert tf.train.read_checkpoint_metadata(our_path) == {"epoch": 1}
    assert tf1.train.load_variable(our_path, "_tfplus_metadata") == b'{"epoch": 1}'
    tf_sess.close()


def test_tfplus_reads_tensorflows_checkpoint_reader_api(tf1, tmp_path):
    g = tf1.Graph()
    with g.as_default():
        tf1.Variable(np.float16([[1, 2]]), name="h")
        tf1.Variable(np.int8([-3]), name="scope/i8")
        saver = tf1.train.Saver()
        with tf1.Session() as sess:
            sess.run(tf1.global_variables_initializer())
            path = saver.save(sess, str(tmp_path / "m"))
    reader = tf.train.NewCheckpointReader(path)
    theirs = tf1.train.NewCheckpointReader(path)
    assert reader.get_variable_to_shape_map() == theirs.get_variable_to_shape_map()
    assert {k: v.name for k, v in reader.get_variable_to_dtype_map().items()} == \
        {k: v.name for k, v in theirs.get_variable_to_dtype_map().items()}
    assert reader.get_tensor("h").tobytes() == theirs.get_tensor("h").tobytes()
    assert reader.has_tensor("scope/i8") and not reader.has_tensor("nope")
    assert tf.train.load_checkpoint(str(tmp_path)).get_tensor("scope/i8").tolist() == [-3]
    assert tf.train.get_checkpoint_state(str(tmp_path)).model_checkpoint_path == path


def test_partitioned_and_unsupported_variables_fail_clearly(tf1, tmp_path):
    g = tf1.Graph()
    with g.as_default():
        tf1.get_variable("emb", shape=[6, 2], partitioner=tf1.fixed_size_partitioner(2))
        tf1.Variable(np.float32([1, 2]), dtype=tf1.bfloat16, name="bf")
        tf1.Variable(np.float32([3]), name="plain")
        saver = tf1.train.Saver()
        with tf1.Session() as sess:
            sess.run(tf1.global_variables_initializer())
            path = saver.save(sess, str(tmp_path / "m"))
    with tf.Graph().as_default():
        emb = tf.Variable(np.zeros((6, 2), np.float32), name="emb")
        bf = tf.Variable(np.zeros(2, np.float32), name="bf")
        plain = tf.Variable(np.zeros(1, np.float32), name="plain")
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            with pytest.raises(tf.errors.InvalidArgumentError, match="'emb' is saved in 2 slices .*partitioned"):
                tf.train.Saver([emb]).restore(sess, path)
            with pytest.raises(tf.errors.InvalidArgumentError, match="holds 'bf' as bfloat16 but the graph"):
                tf.train.Saver([bf]).restore(sess, path)
            tf.train.Saver([plain]).restore(sess, path)  # the rest of the checkpoint still restores
            assert sess.run(plain).tolist() == [3]
            assert sess.run(emb).tolist() == np.zeros((6, 2)).tolist()


# -- TensorFlow's Saver nodes in an imported GraphDef: SaveV2 / RestoreV2 (and MergeV2Checkpoints) ----------
def test_a_tensorflow_graphdef_with_its_saver_restores_and_saves_in_tfplus(tf1, tmp_path):
    from tfplus.proto import graph_pb2
    g = tf1.Graph()
    with g.as_default():
        tf_vars = {k: tf1.Variable(v, name=k) for k, v in INIT.items()}
        saver = tf1.train.Saver()
        saver_def = saver.as_saver_def()
        with tf1.Session() as sess:
            sess.run(tf1.global_variables_initializer())
            for v in tf_vars.values():
                sess.run(v.assign(v * 3 + 1))
            path = saver.save(sess, str(tmp_path / "tf" / "model"))
            saved = sess.run(tf_vars)
    graph_def = graph_pb2.GraphDef.FromString(g.as_graph_def().SerializeToString())
    assert {n.op for n in graph_def.node} >= {"SaveV2", "RestoreV2"}
    with tf.Graph().as_default() as ours:
        tf.import_graph_def(graph_def, name="")
    with tf.Session(graph=ours) as sess:
        sess.run(saver_def.restore_op_name, {saver_def.filename_tensor_name: path})
        for k, v in saved.items():
            assert sess.run(k + ":0").tobytes() == v.tobytes(), k
        sess.run("dense/w/Assign")  # back to the initial value, then saved by TensorFlow's own save node
        out = str(tmp_path / "ours" / "model")
        (tmp_path / "ours").mkdir()
        sess.run(saver_def.save_tensor_name, {saver_def.filename_tensor_name: out})
    assert tf1.train.load_variable(out, "dense/w").tobytes() == INIT["dense/w"].tobytes()
    assert tf1.train.load_variable(out, "out/b").tobytes() == saved["out/b"].tobytes()


def test_checkpoint_ops_built_in_tfplus(tmp_path):
    from tfplus.ops import io_ops
    prefix, merged = str(tmp_path / "a"), str(tmp_path / "merged")
    with tf.Graph().as_default():
        x = tf.constant(np.float32([[1, 2]]))
        n = tf.constant(np.int64([7]))
        save = io_ops.save_v2(prefix, ["x", "n"], ["", ""], [x, n])
        restored = io_ops.restore_v2(prefix, ["n", "x"], ["", ""], [tf.int64, tf.float32])
        wrong = io_ops.restore_v2(prefix, ["x"], [""], [tf.int32])
        missing = io_ops.restore_v2(prefix, ["nope"], [""], [tf.int32])
        sliced = io_ops.save_v2(prefix, ["x"], ["1 2 0,1:-"], [x])
        second = io_ops.save_v2(str(tmp_path / "b"), ["y"], [""], [x])
        merge = io_ops.merge_v2_checkpoints([prefix, str(tmp_path / "b")], merged)
        with tf.Session() as sess:
            with pytest.raises(tf.errors.InvalidArgumentError, match=r"RestoreV2 'RestoreV2': checkpoint .*/a' does "
                               "not exist"):
                sess.run(restored)
            sess.run(save)
            n_val, x_val = sess.run(restored)
            assert n_val.tolist() == [7] and x_val.tolist() == [[1, 2]]
            with pytest.raises(tf.errors.InvalidArgumentError, match="holds 'x' as float32, not int32"):
                sess.run(wrong)
            with pytest.raises(tf.errors.InvalidArgumentError, match="key 'nope' not found in checkpoint"):
                sess.run(missing)
            with pytest.raises(tf.errors.InvalidArgumentError, match="whole tensors only"):
                sess.run(sliced)
            sess.run(second)
            sess.run(merge)
    reader = tf.train.NewCheckpointReader(merged)
    assert sorted(reader.get_variable_to_shape_map()) == ["n", "x", "y"]
    assert reader.get_tensor("y").tolist() == [[1, 2]]
    with tf.Graph().as_default(), pytest.raises(ValueError, match="tensor_names has 1 elements for 2 tensors"):
        io_ops.save_v2(prefix, ["x"], ["", ""], [np.float32(1), np.float32(2)])
