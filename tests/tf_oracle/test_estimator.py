"""tf.estimator against TensorFlow. The estimator package is not installed beside TensorFlow 2.21 (so
tf.compat.v1.estimator is absent): each Estimator run is compared with what Estimator does underneath, the same
model written as a tf.train.MonitoredTrainingSession loop in TensorFlow (checkpoints, metrics, predictions), and
its SavedModel export is loaded with TensorFlow's loader. Each test is a small script as users write them."""
from __future__ import annotations

import os

import numpy as np
import pytest

import tfplus as tf

RNG = np.random.default_rng(7)
X = RNG.standard_normal((24, 6)).astype(np.float32)
Y = (X[:, 0] + X[:, 1] > 0).astype(np.int32)
INIT = {"hidden/kernel": RNG.standard_normal((6, 8)).astype(np.float32) * 0.5,
        "hidden/bias": np.zeros(8, np.float32),
        "logits/kernel": RNG.standard_normal((8, 2)).astype(np.float32) * 0.5,
        "logits/bias": np.float32([0.1, -0.1])}
BATCH = 8


def _network(t, x):
    """An MLP with fixed initial values (the same in both libraries): the logits."""
    h = t.layers.dense(x, 8, activation=t.nn.relu, name="hidden",
                       kernel_initializer=t.constant_initializer(INIT["hidden/kernel"]))
    return t.layers.dense(h, 2, name="logits", kernel_initializer=t.constant_initializer(INIT["logits/kernel"]),
                          bias_initializer=t.constant_initializer(INIT["logits/bias"]))


def _loss_and_train(t, logits, labels):
    loss = t.losses.sparse_softmax_cross_entropy(labels, logits)
    return loss, t.train.GradientDescentOptimizer(0.2).minimize(loss, t.train.get_global_step())


def model_fn(features, labels, mode, params):
    logits = _network(tf, features["x"])
    classes = tf.argmax(logits, 1)
    if mode == tf.estimator.ModeKeys.PREDICT:
        return tf.estimator.EstimatorSpec(mode, predictions={"class": classes, "probs": tf.nn.softmax(logits)})
    loss, train_op = _loss_and_train(tf, logits, labels)
    return tf.estimator.EstimatorSpec(mode, loss=loss, train_op=train_op, eval_metric_ops={
        "accuracy": tf.metrics.accuracy(labels, classes), "auc": tf.metrics.auc(labels, tf.nn.softmax(logits)[:, 1])})


def _train_input(epochs=None):
    return tf.estimator.inputs.numpy_input_fn({"x": X}, Y, batch_size=BATCH, num_epochs=epochs, shuffle=False)


def _tf_train(tf1, folder, steps, checkpoint_every):
    """TensorFlow: the same model trained `steps` steps by a MonitoredTrainingSession loop over the same
    batches, checkpointing into `folder` as Estimator does."""
    with tf1.Graph().as_default():
        tf1.train.get_or_create_global_step()
        data = tf1.data.Dataset.from_tensor_slices(({"x": X}, Y)).repeat().batch(BATCH)
        features, labels = tf1.data.make_one_shot_iterator(data).get_next()
        _, train_op = _loss_and_train(tf1, _network(tf1, features["x"]), labels)
        hooks = [tf1.train.StopAtStepHook(last_step=steps)]
        with tf1.train.MonitoredTrainingSession(checkpoint_dir=folder, hooks=hooks, save_summaries_steps=None,
                                                save_checkpoint_steps=checkpoint_every,
                                                save_checkpoint_secs=None) as sess:
            while not sess.should_stop():
                sess.run(train_op)


def _tf_evaluate(tf1, checkpoint):
    """TensorFlow: Estimator.evaluate's loop (the metrics' update ops over every batch, then their values) from
    `checkpoint`; and the predictions of every example."""
    with tf1.Graph().as_default():
        tf1.train.get_or_create_global_step()
        x = tf1.placeholder(tf1.float32, [None, 6])
        y = tf1.placeholder(tf1.int32, [None])
        logits = _network(tf1, x)
        loss, _ = _loss_and_train(tf1, logits, y)
        metrics = {"accuracy": tf1.metrics.accuracy(y, tf1.argmax(logits, 1)),
                   "auc": tf1.metrics.auc(y, tf1.nn.softmax(logits)[:, 1]), "loss": tf1.metrics.mean(loss)}
        with tf1.Session() as sess:
            tf1.train.Saver().restore(sess, checkpoint)
            sess.run(tf1.local_variables_initializer())
            for i in range(0, len(X), BATCH):
                sess.run([m[1] for m in metrics.values()], {x: X[i:i + BATCH], y: Y[i:i + BATCH]})
            values = sess.run({k: m[0] for k, m in metrics.items()})
            values["probs"] = sess.run(tf1.nn.softmax(logits), {x: X})
            return values


def test_train_evaluate_predict_as_tensorflow(tf1, tmp_path):
    """The MNIST-style script: train, evaluate, predict; checkpoints, metrics and predictions are TensorFlow's."""
    config = tf.estimator.RunConfig(save_checkpoints_steps=4, keep_checkpoint_max=2, log_step_count_steps=3)
    est = tf.estimator.Estimator(model_fn, str(tmp_path / "ours"), config, params={})
    assert est.train(_train_input(), steps=10) is est
    _tf_train(tf1, str(tmp_path / "tf"), 10, 4)
    ours, theirs = est.latest_checkpoint(), tf1.train.latest_checkpoint(str(tmp_path / "tf"))
    assert ours.endswith("model.ckpt-10") and theirs.endswith("model.ckpt-10")
    assert est.get_variable_names() == [n for n, _ in tf1.train.list_variables(theirs)]
    for name in est.get_variable_names():
        np.testing.assert_allclose(est.get_variable_value(name), tf1.train.load_variable(theirs, name), rtol=1e-5,
                                   atol=1e-6, err_msg=name)
        assert tf1.train.load_variable(ours, name).tobytes() == est.get_variable_value(name).tobytes()
    # keep_checkpoint_max=2: the checkpoints of steps 8 and 10 remain, as TensorFlow's state file lists them
    assert [os.path.basename(p) for p in tf1.train.get_checkpoint_state(est.model_dir).all_model_checkpoint_paths] \
        == ["model.ckpt-8", "model.ckpt-10"]
    # the loss summary Estimator adds, in TensorFlow's event files, read by TensorFlow
    events = [os.path.join(est.model_dir, f) for f in os.listdir(est.model_dir) if f.startswith("events.out")]
    tags = {v.tag for path in events for e in tf1.train.summary_iterator(path) for v in e.summary.value}
    assert "loss" in tags

    got = est.evaluate(_train_input(epochs=1))
    want = _tf_evaluate(tf1, theirs)
    assert sorted(got) == ["accuracy", "auc", "global_step", "loss"] and got["global_step"] == 10
    for key in ("accuracy", "auc", "loss"):
        np.testing.assert_allclose(got[key], want[key], rtol=1e-5, err_msg=key)
    assert os.path.isdir(os.path.join(est.model_dir, "eval"))

    preds = list(est.predict(tf.estimator.inputs.numpy_input_fn({"x": X}, shuffle=False, batch_size=5)))
    assert len(preds) == len(X) and sorted(preds[0]) == ["class", "probs"]
    np.testing.assert_allclose(np.stack([p["probs"] for p in preds]), want["probs"], rtol=1e-5, atol=1e-6)
    assert [int(p["class"]) for p in preds] == list(np.argmax(want["probs"], 1))
    only = list(est.predict(tf.estimator.inputs.numpy_input_fn({"x": X[:3]}, shuffle=False), predict_keys="class"))
    assert [sorted(p) for p in only] == [["class"]] * 3


def test_resume_in_a_second_estimator_and_max_steps(tf1, tmp_path):
    """A second Estimator on the same model_dir resumes from the newest checkpoint: 6 steps then up to 10 equal
    10 steps in a row (full-batch input, so restarting the input changes nothing); reaching max_steps again
    trains no more."""
    full = tf.estimator.inputs.numpy_input_fn({"x": X}, Y, batch_size=len(X), num_epochs=None, shuffle=False)
    config = tf.estimator.RunConfig(save_checkpoints_steps=100)
    tf.estimator.Estimator(model_fn, str(tmp_path / "a"), config).train(full, steps=6)
    second = tf.estimator.Estimator(model_fn, config=config.replace(model_dir=str(tmp_path / "a")))
    second.train(full, max_steps=10)
    straight = tf.estimator.Estimator(model_fn, str(tmp_path / "b"), config).train(full, max_steps=10)
    for name in INIT:
        np.testing.assert_array_equal(second.get_variable_value(name), straight.get_variable_value(name))
    assert second.get_variable_value("global_step") == 10
    second.train(full, max_steps=10)  # already there: no new checkpoint
    assert second.latest_checkpoint().endswith("model.ckpt-10")


def cnn_model_fn(features, labels, mode):
    """A CNN with tf.layers (random initial values, seeded by the RunConfig) and a single-tensor prediction."""
    x = tf.reshape(features, [-1, 6, 6, 1])
    h = tf.layers.conv2d(x, 4, 3, padding="same", activation=tf.nn.relu)
    h = tf.layers.max_pooling2d(h, 2, 2)
    logits = tf.layers.dense(tf.layers.flatten(h), 3)
    if mode == tf.estimator.ModeKeys.PREDICT:
        return tf.estimator.EstimatorSpec(mode, predictions=logits, export_outputs={
            "logits": tf.estimator.export.PredictOutput({"logits": logits})})
    loss = tf.losses.sparse_softmax_cross_entropy(labels, logits)
    train_op = tf.train.AdamOptimizer(0.01).minimize(loss, tf.train.get_global_step())
    return tf.estimator.EstimatorSpec(mode, loss=loss, train_op=train_op)


def _images():
    images = RNG.standard_normal((12, 36)).astype(np.float32)
    return images, (images.sum(1) > 0).astype(np.int32) + (images[:, 0] > 1).astype(np.int32)


def test_cnn_dataset_input_export_loads_in_tensorflow(tf1, tmp_path):
    """input_fn returning a tf.data.Dataset; export_saved_model with a placeholder receiver; TensorFlow's loader
    runs the export to Estimator.predict's values."""
    images, labels = _images()

    def input_fn():
        return tf.data.Dataset.from_tensor_slices((images, labels)).repeat().batch(4)

    est = tf.estimator.Estimator(cnn_model_fn, str(tmp_path / "cnn"), tf.estimator.RunConfig(tf_random_seed=3))
    est.train(input_fn, steps=5)
    assert est.evaluate(input_fn, steps=3)["global_step"] == 5

    def serving_input_receiver_fn():
        x = tf.placeholder(tf.float32, [None, 36], name="images")
        return tf.estimator.export.TensorServingInputReceiver(x, {"images": x})

    export_dir = est.export_saved_model(str(tmp_path / "export"), serving_input_receiver_fn)
    assert isinstance(export_dir, bytes) and os.path.basename(export_dir).isdigit()
    older_name = est.export_savedmodel(str(tmp_path / "export"), serving_input_receiver_fn)
    assert sorted(os.listdir(tmp_path / "export")) == sorted(os.path.basename(d).decode()
                                                             for d in (export_dir, older_name))
    predicted = np.stack(list(est.predict(lambda: tf.data.Dataset.from_tensor_slices(images).batch(5))))
    with tf1.Session(graph=tf1.Graph()) as sess:
        meta = tf1.saved_model.loader.load(sess, ["serve"], export_dir.decode())
        assert sorted(meta.signature_def) == ["logits", "serving_default"]
        sig = meta.signature_def["serving_default"]
        served = sess.run(sig.outputs["logits"].name, {sig.inputs["images"].name: images})
    np.testing.assert_allclose(served, predicted, rtol=1e-5, atol=1e-6)


def test_train_and_evaluate_with_exporter(tmp_path):
    """train_and_evaluate (local): evaluations after new checkpoints and at the end; the FinalExporter's
    SavedModel serves the model; the returned metrics equal a separate evaluate of the final checkpoint."""
    eval_input = _train_input(epochs=1)
    raw = tf.estimator.export.build_raw_serving_input_receiver_fn({"x": tf.placeholder(tf.float32, [None, 6])})
    est = tf.estimator.Estimator(model_fn, str(tmp_path / "te"), tf.estimator.RunConfig(save_checkpoints_steps=3))
    evaluated = []
    real_evaluate = est.evaluate

    def evaluate(*args, **kwargs):
        evaluated.append(est.latest_checkpoint())
        return real_evaluate(*args, **kwargs)
    est.evaluate = evaluate
    metrics, exports = tf.estimator.train_and_evaluate(
        est, tf.estimator.TrainSpec(_train_input(), max_steps=7),
        tf.estimator.EvalSpec(eval_input, steps=None, throttle_secs=0,
                              exporters=[tf.estimator.FinalExporter("final", raw),
                                         tf.estimator.LatestExporter("latest", raw, exports_to_keep=1)]))
    assert [os.path.basename(p) for p in evaluated] == ["model.ckpt-3", "model.ckpt-6", "model.ckpt-7"]
    assert metrics == real_evaluate(eval_input)
    # the final exporter exported once; the latest one after each evaluation, keeping the newest
    assert len(exports) == 6 and exports[:4:2] == [None, None]
    assert os.listdir(os.path.join(est.model_dir, "export", "latest")) == [os.path.basename(exports[5].decode())]
    export_dir = exports[4]
    with tf.Session(graph=tf.Graph()) as sess:
        meta = tf.saved_model.loader.load(sess, ["serve"], export_dir)
        sig = meta.signature_def["serving_default"]
        probs = sess.run(sig.outputs["probs"].name, {sig.inputs["x"].name: X})
    want = np.stack([p["probs"] for p in est.predict(tf.estimator.inputs.numpy_input_fn({"x": X}, shuffle=False))])
    np.testing.assert_allclose(probs, want, rtol=1e-6)


def test_clear_errors(tmp_path):
    est = tf.estimator.Estimator(model_fn, str(tmp_path / "e"))
    with pytest.raises(ValueError, match="Can not provide both steps and max_steps"):
        est.train(_train_input(), steps=1, max_steps=2)
    with pytest.raises(ValueError, match="Could not find trained model in model_dir"):
        est.get_variable_value("hidden/bias")
    with pytest.raises(ValueError, match="Couldn't find trained model"):
        est.export_saved_model(str(tmp_path / "x"), lambda: None)
    with pytest.raises(ValueError, match="shuffle must be provided and explicitly set as boolean"):
        tf.estimator.inputs.numpy_input_fn({"x": X}, Y)
    with pytest.raises(ValueError, match="Missing train_op"):
        tf.estimator.EstimatorSpec(tf.estimator.ModeKeys.TRAIN, loss=tf.constant(1.0))
    with pytest.raises(ValueError, match="does not take labels"):
        tf.estimator.Estimator(lambda features, mode: None).train(_train_input(), steps=1)
    with pytest.raises(NotImplementedError, match=r"tf\.estimator\.DNNLinearCombinedClassifier.*model_fn"):
        tf.estimator.DNNLinearCombinedClassifier  # noqa: B018


LIN_W = np.float32([[0.5], [-0.25], [1.0]])
LIN_X = RNG.standard_normal((10, 3)).astype(np.float32)
LIN_Y = LIN_X @ np.float32([[1.0], [2.0], [-1.0]]) + 0.5


def _regression(t, x, y=None):
    """A linear model with fixed initial weights: prediction (and with labels y, its loss and train op)."""
    pred = t.layers.dense(x, 1, kernel_initializer=t.constant_initializer(LIN_W), name="linear")
    if y is None:
        return pred, None, None
    loss = t.losses.mean_squared_error(y, pred)
    return pred, loss, t.train.MomentumOptimizer(0.05, 0.9).minimize(loss, t.train.get_global_step())


def test_tf_compat_v1_script_with_tensor_input_and_hooks(tf1, tmp_path):
    """A TF2-era TF1 script: tf.compat.v1.estimator, input_fn returning (features, labels) tensors, model_fn
    taking config, a hook of its own; its weights equal TensorFlow's MonitoredTrainingSession loop; evaluate with
    steps over endless input; predict of one tensor, batch by batch."""
    t = tf.compat.v1
    runs = []

    class CountRuns(t.train.SessionRunHook):
        def after_run(self, run_context, run_values):
            runs.append(1)

    def input_fn():
        return {"x": t.constant(LIN_X)}, t.constant(LIN_Y)

    def model_fn(features, labels, mode, config):
        assert config.tf_random_seed == 5
        pred, loss, train_op = _regression(t, features["x"], labels)
        if mode == t.estimator.ModeKeys.PREDICT:
            return t.estimator.EstimatorSpec(mode, predictions=pred)
        return t.estimator.EstimatorSpec(mode, loss=loss, train_op=train_op,
                                         eval_metric_ops={"mse": t.metrics.mean(t.square(pred - labels))})

    est = t.estimator.Estimator(model_fn, str(tmp_path / "lin"), t.estimator.RunConfig(tf_random_seed=5))
    est.train(input_fn, steps=7, hooks=[CountRuns()])
    assert len(runs) == 7
    with tf1.Graph().as_default():
        tf1.train.get_or_create_global_step()
        _, loss, train_op = _regression(tf1, tf1.constant(LIN_X), tf1.constant(LIN_Y))
        with tf1.train.MonitoredTrainingSession(checkpoint_dir=str(tmp_path / "tf"), save_summaries_steps=None,
                                                hooks=[tf1.train.StopAtStepHook(num_steps=7)]) as sess:
            while not sess.should_stop():
                _, final_loss = sess.run([train_op, loss])
    for name in ("linear/kernel", "linear/bias"):
        np.testing.assert_allclose(est.get_variable_value(name), tf1.train.load_variable(str(tmp_path / "tf"), name),
                                   rtol=1e-5, atol=1e-7, err_msg=name)
    result = est.evaluate(input_fn, steps=2)
    assert result["global_step"] == 7
    np.testing.assert_allclose(result["mse"], result["loss"], rtol=1e-6)
    assert result["loss"] < final_loss  # the step after the last loss TF printed improved it

    batches = est.predict(lambda: t.data.Dataset.from_tensor_slices({"x": LIN_X}).batch(4),
                          yield_single_examples=False)
    shapes = [next(batches).shape for _ in range(3)]
    assert shapes == [(4, 1), (4, 1), (2, 1)] and next(batches, None) is None


def test_trains_evaluates_and_predicts_on_every_device(device, tmp_path):
    """RunConfig(device=...) (tfplus's): the MLP trained, evaluated and run on each device ends where the cpu
    run (checked against TensorFlow above) does."""
    results = {}
    for where in {"cpu", device}:
        est = tf.estimator.Estimator(model_fn, str(tmp_path / where.replace(":", "_")),
                                     tf.estimator.RunConfig(device=where))
        est.train(_train_input(), steps=3)
        probs = [p["probs"] for p in est.predict(tf.estimator.inputs.numpy_input_fn({"x": X}, shuffle=False))]
        results[where] = ({n: est.get_variable_value(n) for n in INIT}, est.evaluate(_train_input(epochs=1)),
                          np.stack(probs))
    (weights, metrics, probs), (want_weights, want_metrics, want_probs) = results[device], results["cpu"]
    for name in INIT:
        np.testing.assert_allclose(weights[name], want_weights[name], rtol=1e-5, atol=1e-6, err_msg=name)
    for key in want_metrics:
        np.testing.assert_allclose(metrics[key], want_metrics[key], rtol=1e-5, atol=1e-6, err_msg=key)
    np.testing.assert_allclose(probs, want_probs, rtol=1e-5, atol=1e-6)
