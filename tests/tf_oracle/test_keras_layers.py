"""tf.keras layers, names, checkpoints and backend in tfplus against TensorFlow's Keras (tf_keras, TF1 graph mode):
each layer's output and input gradients from the same weights, its variables' names and shapes, default layer
names, parameter counts, and weights files read both ways."""
import numpy as np
import pytest
from tforacle import rand

import tfplus
from tfplus.unsupported import UnsupportedError


def _run_layer(tf, make, arrays, weights: list, training=None, any_length=False):
    """make(keras) -> a layer, called on placeholders of `arrays` (one, or a list for merging layers) in a fresh
    graph: (output, d loss / d inputs, weight names). TensorFlow's run appends its weights to `weights`,
    tfplus's sets them. `any_length`: the placeholders' middle dimensions unknown too (an RNN's time)."""
    tf.keras.backend.clear_session()
    phs = [tf.placeholder(tf.as_dtype(a.dtype), [None] * (a.ndim - 1 if any_length else 1) +
                          list(a.shape[a.ndim - 1 if any_length else 1:])) for a in arrays]
    layer = make(tf.keras)
    kwargs = {} if training is None else {"training": training}
    out = layer(phs if len(phs) > 1 else phs[0], **kwargs)
    out = out[0] if isinstance(out, list) else out
    floats = [p for p in phs if p.dtype.is_floating]
    loss = tf.reduce_sum(0.5 * tf.square(out) + 0.3 * out)
    grads = [tf.convert_to_tensor(g) for g in tf.gradients(loss, floats)] if floats else []
    sess = tf.Session()
    tf.keras.backend.set_session(sess)
    sess.run(tf.global_variables_initializer())
    if weights:
        layer.set_weights(weights)
    else:
        weights.extend(layer.get_weights())
    values = sess.run([out] + grads, dict(zip(phs, arrays)))
    names = [(v.name, tuple(v.shape.as_list())) for v in layer.weights]
    sess.close()
    tf.keras.backend.clear_session()
    return values, names


def _ids(n, *shape, seed=0):
    return np.random.default_rng(seed).integers(0, n, shape).astype(np.int32)


LAYERS = {
    "dense_rank3": (lambda k: k.layers.Dense(4, activation="relu"), [rand(2, 3, 5)]),
    "conv1d_causal": (lambda k: k.layers.Conv1D(3, 2, padding="causal", dilation_rate=2), [rand(2, 7, 3)]),
    "conv2d_strided": (lambda k: k.layers.Conv2D(4, 3, strides=2, padding="same", use_bias=False), [rand(2, 7, 7, 2)]),
    "conv2d_transpose": (lambda k: k.layers.Conv2DTranspose(3, 3, strides=2), [rand(2, 4, 4, 2)]),
    "separable_conv2d": (lambda k: k.layers.SeparableConv2D(4, 3, depth_multiplier=2), [rand(2, 6, 6, 3)]),
    "max_pooling2d": (lambda k: k.layers.MaxPooling2D(3, strides=2, padding="same"), [rand(2, 7, 7, 2)]),
    "average_pooling1d": (lambda k: k.layers.AveragePooling1D(2), [rand(2, 7, 3)]),
    "global_average_pooling2d": (lambda k: k.layers.GlobalAveragePooling2D(), [rand(2, 4, 5, 3)]),
    "global_max_pooling1d": (lambda k: k.layers.GlobalMaxPooling1D(), [rand(2, 5, 3)]),
    "flatten": (lambda k: k.layers.Flatten(), [rand(2, 3, 4, 2)]),
    "batch_norm_training": (lambda k: k.layers.BatchNormalization(momentum=0.8, epsilon=1e-2), [rand(4, 3, 3, 2)],
                            True),
    "batch_norm_inference": (lambda k: k.layers.BatchNormalization(center=False), [rand(4, 5)], False),
    "dropout_inference": (lambda k: k.layers.Dropout(0.4), [rand(3, 4)]),
    "relu_capped": (lambda k: k.layers.ReLU(max_value=1.0, negative_slope=0.1, threshold=0.2), [rand(3, 4)]),
    "leaky_relu": (lambda k: k.layers.LeakyReLU(), [rand(3, 4)]),
    "activation_selu": (lambda k: k.layers.Activation("selu"), [rand(3, 4)]),
    "softmax_axis1": (lambda k: k.layers.Softmax(axis=1), [rand(2, 3, 4)]),
    "embedding": (lambda k: k.layers.Embedding(9, 4), [_ids(9, 2, 5)]),
    "reshape": (lambda k: k.layers.Reshape((2, 6)), [rand(2, 3, 4)]),
    "permute": (lambda k: k.layers.Permute((2, 1)), [rand(2, 3, 4)]),
    "repeat_vector": (lambda k: k.layers.RepeatVector(3), [rand(2, 4)]),
    "zero_padding2d": (lambda k: k.layers.ZeroPadding2D(((1, 0), (2, 1))), [rand(2, 3, 3, 2)]),
    "concatenate_axis1": (lambda k: k.layers.Concatenate(axis=1), [rand(2, 3, 4), rand(2, 2, 4)]),
    "subtract": (lambda k: k.layers.Subtract(), [rand(2, 4), rand(2, 4, seed=1)]),
    "average": (lambda k: k.layers.Average(), [rand(2, 4), rand(2, 4, seed=1), rand(2, 4, seed=2)]),
    "maximum": (lambda k: k.layers.Maximum(), [rand(2, 4), rand(2, 4, seed=1)]),
    "lambda": (lambda k: k.layers.Lambda(lambda t, s: t * s, arguments={"s": 3.0}), [rand(2, 4)]),
    "lstm_sequences": (lambda k: k.layers.LSTM(3, return_sequences=True, unit_forget_bias=False,
                                               bias_initializer="ones"), [rand(2, 4, 3)]),
    "lstm_state": (lambda k: k.layers.LSTM(3, return_state=True), [rand(2, 4, 3)]),
    "gru_reset_after": (lambda k: k.layers.GRU(3, reset_after=True, recurrent_activation="sigmoid"),
                        [rand(2, 4, 3)]),
    "gru_backwards": (lambda k: k.layers.GRU(2, go_backwards=True, return_sequences=True), [rand(2, 4, 3)]),
    "simple_rnn_relu": (lambda k: k.layers.SimpleRNN(3, activation="relu"), [rand(2, 4, 3)]),
    "lstm_any_length": (lambda k: k.layers.LSTM(3, return_sequences=True), [rand(2, 5, 3)], None, True),
    "gru_any_length": (lambda k: k.layers.GRU(2), [rand(2, 4, 3)], None, True),
    "bidirectional_sum": (lambda k: k.layers.Bidirectional(k.layers.GRU(2, return_sequences=True),
                                                           merge_mode="sum"), [rand(2, 4, 3)]),
}


@pytest.mark.parametrize("name", sorted(LAYERS))
def test_keras_layer_computes_as_tensorflows(tf1, name):
    make, arrays, *options = LAYERS[name]
    weights: list = []
    want, want_names = _run_layer(tf1, make, arrays, weights, *options)
    got, got_names = _run_layer(tfplus, make, arrays, weights, *options)
    assert got_names == want_names
    assert len(got) == len(want)
    for k, (a, b) in enumerate(zip(got, want)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5, err_msg=f"{name}: output/gradient {k}")


def _names_and_counts(tf):
    """Default layer names, in a graph of their own, and a small model's parameter counts."""
    tf.keras.backend.clear_session()
    k = tf.keras
    layers = [k.layers.Dense(2), k.layers.Dense(2), k.layers.Conv2D(2, 1), k.layers.MaxPooling2D(), k.layers.ReLU(),
              k.layers.SimpleRNN(2), k.layers.GlobalAveragePooling2D(), k.layers.BatchNormalization(),
              k.layers.Concatenate(), k.layers.Dense(2, name="head"), k.layers.Dense(2)]
    model = k.Sequential([k.layers.Dense(3, input_shape=(4,)), k.layers.BatchNormalization(), k.layers.Dense(2)])
    lines: list = []
    model.summary(print_fn=lines.append)
    x = k.Input((4,))
    functional = k.Model(x, k.layers.Dense(1)(x))
    out = ([la.name for la in layers], model.name, [la.name for la in model.layers], model.count_params(),
           len(model.trainable_weights), len(model.non_trainable_weights), functional.name, x.name,
           [la.name for la in functional.layers], model.inputs[0].name, k.backend.int_shape(model.outputs[0]),
           k.backend.epsilon(), k.backend.floatx(), k.backend.learning_phase().name)
    tf.keras.backend.clear_session()
    return out, lines


def test_layer_names_counts_and_backend_are_tensorflows(tf1):
    want, _ = _names_and_counts(tf1)
    got, summary = _names_and_counts(tfplus)
    assert got == want
    assert any("batch_normalization_1 (BatchNormalization)" in line for line in summary)
    assert "Total params: 35" in summary


def _two_layer_model(tf):
    k = tf.keras
    return k.Sequential([k.layers.Dense(4, activation="tanh", input_shape=(3,)), k.layers.BatchNormalization(),
                         k.layers.Dense(2)])


def _checkpoint_round(tf, path, save: bool, x):
    """Saves a model's weights to `path`, or loads them from it; its predictions on x."""
    tf.keras.backend.clear_session()
    model = _two_layer_model(tf)
    model.compile("sgd", "mse")
    y = np.ones((len(x), 2), np.float32)
    if save:
        model.fit(x, y, epochs=1, batch_size=4, shuffle=False, verbose=0)  # moves the moving averages too
        model.save_weights(path)
    else:
        model.load_weights(path)
    pred = model.predict(x)
    tf.keras.backend.clear_session()
    return pred


@pytest.mark.parametrize("writer", ["tensorflow", "tfplus"])
def test_save_weights_and_load_weights_move_both_ways(tf1, tmp_path, writer):
    x = rand(8, 3)
    saver, loader = (tf1, tfplus) if writer == "tensorflow" else (tfplus, tf1)
    path = str(tmp_path / "weights")
    want = _checkpoint_round(saver, path, True, x)
    got = _checkpoint_round(loader, path, False, x)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_what_tfplus_lacks_is_refused_with_its_name(tmp_path):
    k = tfplus.keras
    tfplus.keras.backend.clear_session()
    model = k.Sequential([k.layers.Dense(2, input_shape=(3,))])
    with pytest.raises(NotImplementedError, match="HDF5"):
        model.save_weights(str(tmp_path / "w.h5"))
    with pytest.raises(NotImplementedError, match="subclassed models"):
        k.Model()
    with pytest.raises(NotImplementedError, match="mask_zero"):
        k.layers.Embedding(5, 2, mask_zero=True)
    with pytest.raises(UnsupportedError, match="tf.keras.layers.ConvLSTM2D"):
        k.layers.ConvLSTM2D  # noqa: B018
    with pytest.raises(ValueError, match="unknown activation 'relux'"):
        k.layers.Dense(2, activation="relux")
    with pytest.raises(RuntimeError, match="compile the model first"):
        model.fit(np.zeros((2, 3)), np.zeros((2, 2)))
    tfplus.keras.backend.clear_session()


def test_sigmoid_crossentropy_gradient_at_zero_logits_is_tensorflows(tf1):
    # A dead ReLU before a zero-initialized bias gives logits of exactly 0: the gradient there is sigmoid(0) - labels.
    from tforacle import same_as_tensorflow
    labels = np.array([[0.0, 0.3, 1.0]], np.float32)
    same_as_tensorflow(tf1, "cpu", lambda m, z: m.nn.sigmoid_cross_entropy_with_logits(labels=m.constant(labels),
                                                                                      logits=z),
                       [np.array([[0.0, 0.0, 1.5]], np.float32)])


def test_tensorboard_callback_writes_the_epochs_logs_tensorflow_reads(tf1, tmp_path):
    k = tfplus.keras
    k.backend.clear_session()
    model = k.Sequential([k.layers.Dense(2, activation="softmax", input_shape=(3,))])
    model.compile("sgd", "sparse_categorical_crossentropy", metrics=["accuracy"])
    x, y = rand(8, 3), np.arange(8) % 2
    history = model.fit(x, y, epochs=2, batch_size=4, validation_split=0.25, verbose=0,
                        callbacks=[k.callbacks.TensorBoard(log_dir=str(tmp_path))])
    k.backend.clear_session()
    [events] = list(tmp_path.glob("events.out.tfevents.*"))
    written: dict = {}
    for event in tf1.train.summary_iterator(str(events)):
        for value in event.summary.value:
            written.setdefault(value.tag, []).append((event.step, value.simple_value))
    assert written == {name: [(epoch, np.float32(v)) for epoch, v in enumerate(values)]
                       for name, values in history.history.items()}
