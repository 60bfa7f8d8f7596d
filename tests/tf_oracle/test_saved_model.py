"""tf.saved_model in TF1's form, both ways with TensorFlow: what tfplus's simple_save / SavedModelBuilder write,
TensorFlow's loader loads and runs to the same outputs; what TensorFlow's builder writes (its sharded saver
included), tfplus's loader loads, runs by the signature's names and trains on to TensorFlow's values. Each test
is a small script as users write them."""
from __future__ import annotations

import os

import numpy as np
import pytest

import tfplus as tf

RNG = np.random.default_rng(3)
W = RNG.standard_normal((4, 3)).astype(np.float32)
B = RNG.standard_normal(3).astype(np.float32)
X = RNG.standard_normal((5, 4)).astype(np.float32)
Y = np.float32(RNG.standard_normal((5, 3)))


def _linear(t):
    """y = x W + b with a squared loss, a global step, a train op and a metric's local variables."""
    x = t.placeholder(t.float32, [None, 4], name="x")
    target = t.placeholder(t.float32, [None, 3], name="target")
    w, b = t.Variable(W, name="w"), t.Variable(B, name="b")
    y = t.add(t.matmul(x, w), b, name="y")
    loss = t.reduce_mean(t.square(y - target), name="loss")
    step = t.train.get_or_create_global_step()
    train = t.train.GradientDescentOptimizer(0.1).minimize(loss, global_step=step, name="train")
    return x, target, y, loss, train


def _load_and_run(t, export_dir, tags, train_steps=0):
    """Loads `export_dir` into a new graph and runs its default signature on X (after `train_steps` steps of its
    train op, found in the "train_op" collection)."""
    with t.Session(graph=t.Graph()) as sess:
        meta = t.saved_model.loader.load(sess, tags, export_dir)
        sig = meta.signature_def[t.saved_model.signature_constants.DEFAULT_SERVING_SIGNATURE_DEF_KEY]
        for _ in range(train_steps):
            sess.run(t.get_collection("train_op")[0],
                     {sig.inputs["x"].name: X, sig.inputs["target"].name: Y})
        return sess.run(sig.outputs["y"].name, {sig.inputs["x"].name: X}), sig.method_name


def test_simple_save_loads_in_tensorflow(tf1, tmp_path):
    export_dir = str(tmp_path / "simple")
    with tf.Graph().as_default():
        x, _, y, _, train = _linear(tf)
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            sess.run(train, {"x:0": X, "target:0": Y})
            tf.saved_model.simple_save(sess, export_dir, inputs={"x": x}, outputs={"y": y})
            want = sess.run(y, {x: X})
    assert sorted(os.listdir(export_dir)) == ["saved_model.pb", "variables"]
    assert tf1.saved_model.loader.maybe_saved_model_directory(export_dir)
    got, method = _load_and_run(tf1, export_dir, [tf1.saved_model.tag_constants.SERVING])
    np.testing.assert_array_equal(got, want)
    assert method == "tensorflow/serving/predict"
    assert tf1.train.load_variable(os.path.join(export_dir, "variables", "variables"), "w").tobytes() == \
        tf.train.load_variable(os.path.join(export_dir, "variables", "variables"), "w").tobytes()
    np.testing.assert_array_equal(_load_and_run(tf, export_dir, ["serve"])[0], want)


def _build_and_save(t, export_dir, as_text=False):
    """The builder script: one training step, then the graph under TRAINING (with the train op) and SERVING,
    both with a predict signature of x (and target) to y, a main op initializing a local counter."""
    with t.Graph().as_default():
        x, target, y, _, train = _linear(t)
        counter = t.Variable(7.0, name="counter", trainable=False, collections=[t.GraphKeys.LOCAL_VARIABLES])
        t.add_to_collection("train_op", train)
        sig = t.saved_model.signature_def_utils.predict_signature_def({"x": x, "target": target}, {"y": y})
        with t.Session() as sess:
            sess.run(t.global_variables_initializer())
            sess.run(train, {x: X, target: Y})
            builder = t.saved_model.builder.SavedModelBuilder(export_dir)
            builder.add_meta_graph_and_variables(
                sess, [t.saved_model.tag_constants.TRAINING], signature_def_map={"serving_default": sig},
                main_op=t.local_variables_initializer())
            builder.add_meta_graph([t.saved_model.tag_constants.SERVING], signature_def_map={"serving_default": sig})
            builder.save(as_text=as_text)
            return sess.run(y, {x: X}), counter.name


@pytest.mark.parametrize("writer,reader", [("tensorflow", "tfplus"), ("tfplus", "tensorflow")])
def test_builder_round_trip_serves_and_trains_on(tf1, tmp_path, writer, reader):
    mods = {"tensorflow": tf1, "tfplus": tf}
    export_dir = str(tmp_path / writer)
    want, _ = _build_and_save(mods[writer], export_dir)
    for tags in (["serve"], ["train"]):
        got, _ = _load_and_run(mods[reader], export_dir, tags)
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    # training on from the loaded variables, here and in TensorFlow from the same SavedModel, ends the same
    ours, _ = _load_and_run(mods[reader], export_dir, ["train"], train_steps=3)
    theirs, _ = _load_and_run(tf1, export_dir, ["train"], train_steps=3)
    np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-6)
    assert not np.allclose(ours, want)
    with tf.Session(graph=tf.Graph()) as sess:  # the main op ran: the local counter is initialized
        tf.saved_model.loader.load(sess, ["serve"], export_dir)
        assert sess.run("counter:0") == 7.0


def test_tensorflow_signature_bytes_and_text_saved_model(tf1, tmp_path):
    """The SignatureDef and TensorInfo bytes are TensorFlow's; saved_model.pbtxt is read by both."""
    sigs = {}
    for name, t in (("tf", tf1), ("tfplus", tf)):
        with t.Graph().as_default():
            x = t.placeholder(t.float32, [None, 4], name="x")
            y = t.identity(x * 2.0, name="y")
            sigs[name] = t.saved_model.signature_def_utils.predict_signature_def({"x": x}, {"y": y})
    assert sigs["tfplus"].SerializeToString(deterministic=True) == sigs["tf"].SerializeToString(deterministic=True)
    assert tf.saved_model.is_valid_signature(sigs["tfplus"]) and tf1.saved_model.is_valid_signature(sigs["tf"])
    export_dir = str(tmp_path / "text")
    want, _ = _build_and_save(tf, export_dir, as_text=True)
    assert os.path.isfile(os.path.join(export_dir, "saved_model.pbtxt"))
    for t in (tf, tf1):
        np.testing.assert_allclose(_load_and_run(t, export_dir, ["serve"])[0], want, rtol=1e-6)


def test_load_errors_and_builder_refusals(tmp_path):
    export_dir = str(tmp_path / "m")
    _build_and_save(tf, export_dir)
    with tf.Session(graph=tf.Graph()) as sess:
        with pytest.raises(RuntimeError, match=r"tags \['gpu'\].*available tag-sets: \[\['train'\], \['serve'\]\]"):
            tf.saved_model.loader.load(sess, ["gpu"], export_dir)
    with pytest.raises(OSError, match="SavedModel file does not exist"):
        tf.saved_model.loader.load(tf.Session(graph=tf.Graph()), ["serve"], str(tmp_path))
    with pytest.raises(AssertionError, match="Export directory already exists, and isn't empty"):
        tf.saved_model.builder.SavedModelBuilder(export_dir)
    with pytest.raises(ValueError, match="Prediction inputs cannot be None or empty"):
        tf.saved_model.signature_def_utils.predict_signature_def({}, {"y": tf.constant(1.0)})
    with pytest.raises(NotImplementedError, match=r"tf\.saved_model\.save.*simple_save"):
        tf.saved_model.save  # noqa: B018
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "saved_model.pb").write_bytes(b"\xff\xff\xff\xff")
    with pytest.raises(tf.errors.DataLossError, match="saved_model.pb.*is not a SavedModel"):
        tf.saved_model.loader.load(tf.Session(graph=tf.Graph()), ["serve"], str(broken))
    with tf.Graph().as_default():  # a graph that calls Python: loading it would call this process's functions
        x = tf.placeholder(tf.float32, [None], name="x")
        y = tf.py_func(lambda v: v * 2, [x], tf.float32, name="twice")
        with tf.Session() as sess:
            tf.saved_model.simple_save(sess, str(tmp_path / "py"), {"x": x}, {"y": y})
    with pytest.raises(ValueError, match="node 'twice' is a PyFunc"):
        tf.saved_model.loader.load(tf.Session(graph=tf.Graph()), ["serve"], str(tmp_path / "py"))


def test_no_variables_and_import_scope(tf1, tmp_path):
    """A graph without variables exports with no checkpoint and loads in both; a load under import_scope finds
    its tensors with get_tensor_from_tensor_info."""
    export_dir = str(tmp_path / "novars")
    with tf.Graph().as_default():
        x = tf.placeholder(tf.float32, [None, 4], name="x")
        y = tf.identity(tf.nn.relu(x), name="y")
        with tf.Session() as sess:
            tf.saved_model.simple_save(sess, export_dir, {"x": x}, {"y": y})
    assert _load_and_run(tf1, export_dir, ["serve"])[0].tolist() == np.maximum(X, 0).tolist()
    with tf.Session(graph=tf.Graph()) as sess:
        meta = tf.saved_model.load(sess, ["serve"], export_dir, import_scope="imported")
        sig = meta.signature_def["serving_default"]
        y = tf.saved_model.utils.get_tensor_from_tensor_info(sig.outputs["y"], import_scope="imported")
        x = tf.saved_model.utils.get_tensor_from_tensor_info(sig.inputs["x"], import_scope="imported")
        assert y.name == "imported/y:0"
        np.testing.assert_array_equal(sess.run(y, {x: X}), np.maximum(X, 0))


def test_official_mnist_saved_model_script(tf1, tmp_path):
    """TensorFlow Serving's mnist_saved_model.py, as written for TF1: a versioned export path built with
    tf.compat.as_bytes, two signatures built from TensorInfos, tables_initializer as main op, default attributes
    stripped; TensorFlow's loader serves both signatures to tfplus's values."""
    export_path = os.path.join(tf.compat.as_bytes(str(tmp_path)), tf.compat.as_bytes(str(1)))
    images = RNG.random((3, 16)).astype(np.float32)
    with tf.Graph().as_default():
        x = tf.placeholder(tf.float32, [None, 16], name="x")
        w = tf.Variable(RNG.standard_normal((16, 4)).astype(np.float32), name="weights")
        b = tf.Variable(tf.zeros([4]), name="biases")
        y = tf.nn.softmax(tf.matmul(x, w) + b, name="y")
        values, indices = tf.nn.top_k(y, 4)
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            builder = tf.saved_model.builder.SavedModelBuilder(export_path)
            scores_info = tf.saved_model.utils.build_tensor_info(values)
            classes_info = tf.saved_model.utils.build_tensor_info(tf.identity(indices, name="classes"))
            x_info = tf.saved_model.utils.build_tensor_info(x)
            prediction_signature = tf.saved_model.signature_def_utils.build_signature_def(
                inputs={"images": x_info}, outputs={"scores": tf.saved_model.utils.build_tensor_info(y)},
                method_name=tf.saved_model.signature_constants.PREDICT_METHOD_NAME)
            top_signature = tf.saved_model.signature_def_utils.build_signature_def(
                inputs={"images": x_info}, outputs={"classes": classes_info, "scores": scores_info},
                method_name=tf.saved_model.signature_constants.PREDICT_METHOD_NAME)
            builder.add_meta_graph_and_variables(
                sess, [tf.saved_model.tag_constants.SERVING],
                signature_def_map={"predict_images": prediction_signature,
                                   tf.saved_model.DEFAULT_SERVING_SIGNATURE_DEF_KEY: top_signature},
                main_op=tf.tables_initializer(), strip_default_attrs=True)
            builder.save()
            want = sess.run({"scores": y, "top": values, "classes": indices}, {x: images})
    with tf1.Session(graph=tf1.Graph()) as sess:
        meta = tf1.saved_model.loader.load(sess, [tf1.saved_model.tag_constants.SERVING], export_path)
        sig, top = meta.signature_def["predict_images"], meta.signature_def["serving_default"]
        feed = {sig.inputs["images"].name: images}
        np.testing.assert_allclose(sess.run(sig.outputs["scores"].name, feed), want["scores"], rtol=1e-6)
        np.testing.assert_allclose(sess.run(top.outputs["scores"].name, feed), want["top"], rtol=1e-6)
        np.testing.assert_array_equal(sess.run(top.outputs["classes"].name, feed), want["classes"])
