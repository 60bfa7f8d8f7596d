"""The ImageNet-size builders: MobileNet v1 loads Keras's MobileNet through the shipped name map and computes its
logits; AlexNet has the original's shapes and parameter count."""
import numpy as np
import pytest

import tfplus as tf
from tfplus.graphs import alexnet, get_model
from tfplus.graphs.mobilenet import KERAS_NAMES, load_keras_weights, mobilenet224
from tfplus.trainer import TrainConfig, UsageError, train


def _random(rng, name: str, shape: list) -> np.ndarray:
    """Keras's variable `name` drawn at random, so that the logits tell the images (and a misplaced variable)
    apart: He-scaled kernels (the depthwise ones read 3x3 inputs each), and BN scales, offsets and moving
    statistics away from their 1 / 0 starts (a fresh model's would hide a swapped pair)."""
    if "kernel" in name:
        fan_in = np.prod(shape[:2] if "depthwise" in name else shape[:-1])
        return (rng.standard_normal(shape) * np.sqrt(2 / fan_in)).astype(np.float32)
    low, high = (0.5, 1.5) if name.endswith(("gamma", "moving_variance")) else (-0.2, 0.2)
    return rng.uniform(low, high, shape).astype(np.float32)


@pytest.fixture(scope="module")
def keras_mobilenet(tf1, tmp_path_factory):
    """A Keras MobileNet (alpha 0.25, 96x96, 10 classes) with random weights and BN statistics, saved as a TF1
    checkpoint: (checkpoint path, images NHWC, Keras's logits, its variable names)."""
    rng = np.random.default_rng(0)
    images = rng.uniform(-1, 1, (3, 96, 96, 3)).astype(np.float32)
    path = str(tmp_path_factory.mktemp("keras_mobilenet") / "model.ckpt")
    with tf1.Graph().as_default(), tf1.Session() as sess:
        tf1.keras.backend.set_session(sess)
        model = tf1.keras.applications.MobileNet(input_shape=(96, 96, 3), alpha=0.25, weights=None, classes=10)
        for v in tf1.global_variables():
            v.load(_random(rng, v.op.name, v.shape.as_list()), sess)
        logits = tf1.reshape(model.get_layer("conv_preds").output, [-1, 10])
        expected = sess.run(logits, {model.input: images})
        names = {v.op.name for v in tf1.global_variables()}
        tf1.train.Saver().save(sess, path)
    return path, images, expected, names


def test_keras_names_are_keras_mobilenets_variables(keras_mobilenet):
    assert set(KERAS_NAMES.values()) == keras_mobilenet[3]
    assert len(KERAS_NAMES) == 137


@pytest.mark.parametrize("data_format", ["NHWC", "NCHW"])
def test_mobilenet224_computes_keras_logits_from_its_checkpoint(keras_mobilenet, data_format):
    path, images, expected, _ = keras_mobilenet
    feed = images if data_format == "NHWC" else images.transpose(0, 3, 1, 2)
    with tf.Graph().as_default():
        x = tf.placeholder(tf.float32, [None, *feed.shape[1:]])
        logits = mobilenet224(x, num_classes=10, width_multiplier=0.25, training=False, data_format=data_format)
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            restored = load_keras_weights(sess, path)
            got = sess.run(logits, {x: feed})
    assert sorted(restored) == sorted(KERAS_NAMES)
    assert np.abs(expected - expected[0]).max() > 0.1  # the images give different logits
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4 * np.abs(expected).max())


def test_load_keras_weights_without_the_head_and_its_errors(keras_mobilenet):
    path = keras_mobilenet[0]
    with tf.Graph().as_default():
        x = tf.placeholder(tf.float32, [None, 3, 96, 96])
        mobilenet224(x, num_classes=7, width_multiplier=0.25, training=False)
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            with pytest.raises(ValueError, match=r"'conv_preds/kernel' has shape \[1, 1, 256, 10\] but "
                                                 r"'logits/weights' has \[256, 7\].*head=False"):
                load_keras_weights(sess, path)
            assert len(load_keras_weights(sess, path, head=False)) == 135
    with tf.Graph().as_default():
        mobilenet224(tf.placeholder(tf.float32, [None, 3, 96, 96]), width_multiplier=0.5, training=False)
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            with pytest.raises(ValueError, match="'conv1/kernel' has shape \\[3, 3, 3, 8\\] but 'conv0/weights' has "
                                                 "\\[3, 3, 3, 16\\]"):
                load_keras_weights(sess, path)


def test_alexnet_has_the_originals_shapes():
    with tf.Graph().as_default():
        logits = alexnet.alexnet(tf.placeholder(tf.float32, [None, 3, 227, 227]), num_classes=1000)
        shapes = {v.op.name: v.shape.as_list() for v in tf.trainable_variables()}
    assert logits.shape.as_list() == [None, 1000]
    assert shapes["conv1/weights"] == [11, 11, 3, 96] and shapes["fc6/weights"] == [6 * 6 * 256, 4096]
    assert sum(int(np.prod(s)) for s in shapes.values()) == 62_378_344  # single-tower AlexNet's 62.4M


@pytest.mark.parametrize("data_format", ["NHWC", "NCHW"])
def test_alexnet_computes_tensorflows_logits(tf1, data_format):
    """The same weights through TensorFlow's ops in NHWC (flattened in NCHW's order for the NCHW build); narrow
    layers keep it quick."""
    rng = np.random.default_rng(1)
    images = rng.uniform(0, 1, (2, 227, 227, 3)).astype(np.float32)
    feed = images if data_format == "NHWC" else images.transpose(0, 3, 1, 2)
    with tf.Graph().as_default():
        x = tf.placeholder(tf.float32, [None, *feed.shape[1:]])
        logits = alexnet.alexnet(x, conv_widths=(8, 12, 16, 16, 12), fc_widths=(32, 24), num_classes=5,
                                 training=False, data_format=data_format)
        with tf.Session() as sess:
            weights = {}
            for v in tf.global_variables():
                shape = v.shape.as_list()
                weights[v.op.name] = (rng.standard_normal(shape) * np.sqrt(2 / np.prod(shape[:-1]))).astype(np.float32)
                v.load(weights[v.op.name], sess)
            got = sess.run(logits, {x: feed})
    with tf1.Graph().as_default(), tf1.Session() as sess:
        h = tf1.constant(images)
        for i, (stride, padding) in enumerate([(4, "VALID"), (1, "SAME"), (1, "SAME"), (1, "SAME"), (1, "SAME")], 1):
            h = tf1.nn.relu(tf1.nn.conv2d(h, weights[f"conv{i}/weights"], stride, padding) + weights[f"conv{i}/biases"])
            h = tf1.nn.lrn(h, **alexnet.LRN) if i <= 2 else h
            h = tf1.nn.max_pool2d(h, 3, 2, "VALID") if i in (1, 2, 5) else h
        h = tf1.reshape(h if data_format == "NHWC" else tf1.transpose(h, [0, 3, 1, 2]), [2, -1])
        for name in ("fc6", "fc7", "fc8"):
            h = tf1.matmul(h, weights[f"{name}/weights"]) + weights[f"{name}/biases"]
            h = tf1.nn.relu(h) if name != "fc8" else h
        expected = sess.run(h)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4 * np.abs(expected).max())


def test_registered_models_take_their_image_size():
    assert get_model("alexnet").image_shape == (3, 227, 227)
    assert get_model("mobilenet224").image_shape == (3, 224, 224)
    assert get_model("mentee").image_shape == (3, 32, 32)


def test_train_refuses_data_of_another_size():
    with pytest.raises(UsageError, match=r"model 'mobilenet224' takes 3x224x224 images but the data's are 3x32x32; "
                                         r"plan it with tfplus plan --model mobilenet224"):
        train(TrainConfig(model="mobilenet224", synthetic=True, steps=1, batch_size=2))
