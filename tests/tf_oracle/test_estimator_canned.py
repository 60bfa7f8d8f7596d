"""Canned estimators over numeric feature columns. TF 2.21 ships no estimator package, so: LinearRegressor (its
zero-initialized weights make it deterministic) is compared with the same linear model and summed squared loss as
a MonitoredTrainingSession loop in TensorFlow; DNNClassifier's evaluate is checked against NumPy on its own
predictions (accuracy, average_loss, the loss as the mean of each batch's summed loss)."""
from __future__ import annotations

import numpy as np
import pytest

import tfplus as tf

RNG = np.random.default_rng(11)
X = RNG.standard_normal((24, 3)).astype(np.float32)
Y = X @ np.float32([1.0, 2.0, -1.0]) + 0.5
FEATURES = {"a": X[:, 0], "b": X[:, 1:]}
BATCH = 8


def _columns():
    return [tf.feature_column.numeric_column("b", shape=[2]), tf.feature_column.numeric_column("a")]


def test_linear_regressor_as_tensorflow(tf1, tmp_path):
    """The crash-course script: LinearRegressor with an SGD optimizer, numpy_input_fn of a features dict."""
    est = tf.estimator.LinearRegressor(_columns(), str(tmp_path / "lin"),
                                       optimizer=tf.train.GradientDescentOptimizer(0.01))
    est.train(tf.estimator.inputs.numpy_input_fn(FEATURES, Y, batch_size=BATCH, num_epochs=None, shuffle=False),
              steps=9)
    with tf1.Graph().as_default():
        step = tf1.train.get_or_create_global_step()
        data = tf1.data.Dataset.from_tensor_slices((FEATURES, Y)).repeat().batch(BATCH)
        features, labels = tf1.data.make_one_shot_iterator(data).get_next()
        with tf1.variable_scope("linear/linear_model"):
            wa = tf1.get_variable("a/weights", [1, 1], initializer=tf1.zeros_initializer())
            wb = tf1.get_variable("b/weights", [2, 1], initializer=tf1.zeros_initializer())
            bias = tf1.get_variable("bias_weights", [1], initializer=tf1.zeros_initializer())
        pred = tf1.matmul(tf1.reshape(features["a"], [-1, 1]), wa) + tf1.matmul(features["b"], wb) + bias
        loss = tf1.reduce_sum(tf1.squared_difference(pred, tf1.reshape(labels, [-1, 1])))
        train = tf1.train.GradientDescentOptimizer(0.01).minimize(loss, step)
        with tf1.train.MonitoredTrainingSession(checkpoint_dir=str(tmp_path / "tf"), save_summaries_steps=None,
                                                hooks=[tf1.train.StopAtStepHook(last_step=9)]) as sess:
            while not sess.should_stop():
                sess.run(train)
    assert est.get_variable_names() == [n for n, _ in tf1.train.list_variables(str(tmp_path / "tf"))]
    for name in est.get_variable_names():
        np.testing.assert_allclose(est.get_variable_value(name), tf1.train.load_variable(str(tmp_path / "tf"), name),
                                   rtol=1e-5, atol=1e-6, err_msg=name)
    preds = [p["predictions"] for p in est.predict(tf.estimator.inputs.numpy_input_fn(FEATURES, shuffle=False))]
    w = {n: est.get_variable_value(f"linear/linear_model/{n}") for n in ("a/weights", "b/weights", "bias_weights")}
    want = X[:, :1] @ w["a/weights"] + X[:, 1:] @ w["b/weights"] + w["bias_weights"]
    np.testing.assert_allclose(np.stack(preds), want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("n_classes", [2, 3])
def test_dnn_classifier_metrics_agree_with_its_predictions(tmp_path, n_classes):
    labels = np.digitize(Y, [0.5] if n_classes == 2 else [-1.0, 1.0]).astype(np.int64)
    est = tf.estimator.DNNClassifier([8, 4], _columns(), str(tmp_path / "dnn"), n_classes=n_classes,
                                     config=tf.estimator.RunConfig(tf_random_seed=2))
    est.train(tf.estimator.inputs.numpy_input_fn(FEATURES, labels, batch_size=BATCH, num_epochs=None, shuffle=True),
              steps=15)
    assert est.get_variable_names()[:4] == ["dnn/hiddenlayer_0/bias", "dnn/hiddenlayer_0/bias/Adagrad",
                                            "dnn/hiddenlayer_0/kernel", "dnn/hiddenlayer_0/kernel/Adagrad"]
    result = est.evaluate(tf.estimator.inputs.numpy_input_fn(FEATURES, labels, batch_size=BATCH, shuffle=False))
    preds = list(est.predict(tf.estimator.inputs.numpy_input_fn(FEATURES, shuffle=False)))
    probs = np.stack([p["probabilities"] for p in preds]).astype(np.float64)
    class_ids = np.concatenate([p["class_ids"] for p in preds])
    assert sorted(preds[0]) == sorted(["logits", "probabilities", "class_ids", "all_class_ids"] +
                                      (["logistic"] if n_classes == 2 else []))
    per_example = -np.log(probs[np.arange(len(labels)), labels])
    np.testing.assert_array_equal(class_ids, probs.argmax(1))
    np.testing.assert_allclose(result["accuracy"], np.mean(class_ids == labels), rtol=1e-6)
    np.testing.assert_allclose(result["average_loss"], per_example.mean(), rtol=1e-4)
    np.testing.assert_allclose(result["loss"], per_example.reshape(-1, BATCH).sum(1).mean(), rtol=1e-4)
    if n_classes == 2:
        assert {"auc", "auc_precision_recall", "precision", "recall", "accuracy_baseline"} <= set(result)
        np.testing.assert_allclose(result["accuracy_baseline"], max(labels.mean(), 1 - labels.mean()), rtol=1e-6)


def test_dnn_regressor_exports_and_refusals(tf1, tmp_path):
    est = tf.estimator.DNNRegressor([4], _columns(), str(tmp_path / "reg"), optimizer="Adam")
    est.train(tf.estimator.inputs.numpy_input_fn(FEATURES, Y, batch_size=BATCH, num_epochs=1, shuffle=False))
    assert est.get_variable_value("global_step") == len(X) // BATCH
    serving = tf.estimator.export.build_raw_serving_input_receiver_fn(
        {"a": tf.placeholder(tf.float32, [None]), "b": tf.placeholder(tf.float32, [None, 2])})
    export_dir = est.export_saved_model(str(tmp_path / "export"), serving).decode()
    want = np.stack([p["predictions"] for p in est.predict(
        tf.estimator.inputs.numpy_input_fn(FEATURES, shuffle=False))])
    with tf1.Session(graph=tf1.Graph()) as sess:
        meta = tf1.saved_model.loader.load(sess, ["serve"], export_dir)
        assert list(meta.signature_def) == ["predict"]  # the regress signatures need string input, as in TF
        sig = meta.signature_def["predict"]
        got = sess.run(sig.outputs["predictions"].name, {sig.inputs["a"].name: X[:, 0], sig.inputs["b"].name: X[:, 1:]})
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    with pytest.raises(NotImplementedError, match="Ftrl, is not implemented"):
        tf.estimator.LinearClassifier(_columns())
    with pytest.raises(NotImplementedError, match=r"tf\.feature_column\.categorical_column_with_vocabulary_list"):
        tf.feature_column.categorical_column_with_vocabulary_list  # noqa: B018
