"""tf.keras in TF1 graph-mode scripts, as users write them, run with `import tfplus as tf` as with TensorFlow's
tf.compat.v1 (and its Keras, tf_keras): the same variable names, histories, losses, predictions and weights after
training, from the same initial weights (TensorFlow's, loaded into tfplus's model with set_weights or
Variable.load) and, for dropout, the same random numbers (tests/tutorials.py's Feeder).

Each script is `script(tf, init, feeder)`: TensorFlow's run appends the initial weights to `init`, tfplus's loads
them; it returns {name: array}."""
import numpy as np
import pytest
from tutorials import Feeder, compare


def _data(seed, n=24, d=6, classes=3):
    rng = np.random.RandomState(seed)
    return rng.rand(n, d).astype(np.float32), rng.randint(0, classes, n)


def _repeatable(weights: list) -> list:
    """Initial weights of the scale TensorFlow drew (its Keras initializers' seeds change from run to run), the
    same in every run: each array's mean plus normal noise of its standard deviation."""
    rng = np.random.RandomState(0)
    return [(w.mean() + w.std() * rng.standard_normal(w.shape)).astype(w.dtype) for w in weights]


def _start(model, init) -> dict:
    """Both runs start from the same weights: TensorFlow's run makes them (_repeatable) and records them in
    `init`, tfplus's sets them."""
    if not init:
        init.extend(_repeatable(model.get_weights()))
    model.set_weights(init)
    return {"names": np.array([v.name for v in model.weights])}


def _load(tf, sess, init, variables) -> dict:
    """_start for a Session loop."""
    if not init:
        init.extend(_repeatable(sess.run(variables)))
    for v, value in zip(variables, init):
        v.load(value, sess)
    return {"names": np.array([v.name for v in variables])}


def _history(out: dict, history, prefix="h:") -> dict:
    for k, v in history.history.items():
        out[prefix + k] = np.array(v, dtype=np.float64)
    out[prefix + "keys"] = np.array(list(history.history))
    return out


def _weights(out: dict, model) -> dict:
    for v, w in zip(model.weights, model.get_weights()):
        out["w:" + v.op.name] = w
    return out


# ---- compile / fit ---------------------------------------------------------------------------------------------

def mnist_mlp(tf, init, feeder):
    keras = tf.keras
    x, y = _data(1, 32, 16, 4)
    model = keras.Sequential([
        keras.layers.Dense(12, activation="relu", input_shape=(16,)),
        keras.layers.Dropout(0.0),
        keras.layers.Dense(4, activation="softmax"),
    ])
    out = _start(model, init)
    model.compile(optimizer=keras.optimizers.SGD(learning_rate=0.1, momentum=0.9, nesterov=True),
                  loss="categorical_crossentropy", metrics=["accuracy"])
    y1 = keras.utils.to_categorical(y, 4)
    history = model.fit(x, y1, batch_size=8, epochs=3, validation_split=0.25, shuffle=False, verbose=0)
    out["eval"] = np.array(model.evaluate(x, y1, verbose=0))
    out["pred"] = model.predict(x[:5])
    out["layers"] = np.array([layer.name for layer in model.layers])
    return _weights(_history(out, history), model)


def small_cnn(tf, init, feeder):
    keras = tf.keras
    rng = np.random.RandomState(2)
    x, y = rng.rand(12, 8, 8, 1).astype(np.float32), rng.randint(0, 3, 12)
    model = keras.models.Sequential()
    model.add(keras.layers.Conv2D(4, (3, 3), activation="relu", input_shape=(8, 8, 1)))
    model.add(keras.layers.MaxPooling2D(pool_size=(2, 2)))
    model.add(keras.layers.Conv2D(5, 2, padding="same", kernel_initializer="he_normal"))
    model.add(keras.layers.Activation("relu"))
    model.add(keras.layers.AveragePooling2D())
    model.add(keras.layers.Flatten())
    model.add(keras.layers.Dense(3, activation="softmax"))
    out = _start(model, init)
    model.compile(keras.optimizers.Adam(learning_rate=0.01), "sparse_categorical_crossentropy", metrics=["acc"])
    history = model.fit(x, y, batch_size=4, epochs=2, shuffle=False, verbose=0)
    out["eval"] = np.array(model.evaluate(x, y, batch_size=5, verbose=0))
    return _weights(_history(out, history), model)


def text_lstm(tf, init, feeder):
    keras = tf.keras
    rng = np.random.RandomState(3)
    x, y = rng.randint(1, 30, (16, 6)), rng.randint(0, 2, (16, 1))
    model = keras.Sequential([
        keras.layers.Embedding(30, 8, input_length=6),
        keras.layers.LSTM(5),
        keras.layers.Dense(1, activation="sigmoid"),
    ])
    out = _start(model, init)
    model.compile(keras.optimizers.RMSprop(learning_rate=0.01), "binary_crossentropy", metrics=["accuracy"])
    history = model.fit(x, y, batch_size=8, epochs=2, shuffle=False, verbose=0, validation_data=(x[:4], y[:4]))
    out["pred"] = model.predict(x)
    return _weights(_history(out, history), model)


def functional_two_inputs(tf, init, feeder):
    keras = tf.keras
    rng = np.random.RandomState(4)
    a, b, y = rng.rand(20, 5).astype(np.float32), rng.rand(20, 3).astype(np.float32), rng.rand(20, 2)
    in_a = keras.Input(shape=(5,), name="a")
    in_b = keras.Input(shape=(3,), name="b")
    ha = keras.layers.Dense(4, activation="tanh")(in_a)
    hb = keras.layers.Dense(4, activation="tanh")(in_b)
    merged = keras.layers.concatenate([ha, hb, keras.layers.add([ha, hb]), keras.layers.Multiply()([ha, hb])])
    output = keras.layers.Dense(2, name="out")(merged)
    model = keras.Model(inputs=[in_a, in_b], outputs=output)
    out = _start(model, init)
    model.compile(keras.optimizers.Adagrad(learning_rate=0.1), loss="mse", metrics=["mae"])
    history = model.fit([a, b], y, batch_size=6, epochs=2, shuffle=False, verbose=0,
                        validation_data=([a[:5], b[:5]], y[:5]))
    model.reset_metrics()  # TensorFlow's metrics would count fit's last batches too
    out["train_on_batch"] = np.array(model.train_on_batch([a[:4], b[:4]], y[:4]))
    out["test_on_batch"] = np.array(model.test_on_batch([a[:4], b[:4]], y[:4]))
    out["by_name"] = model.predict({"a": a, "b": b}, batch_size=7)
    out["layers"] = np.array([layer.name for layer in model.layers])
    out["metrics_names"] = np.array(model.metrics_names)
    return _weights(_history(out, history), model)


def gru_regression(tf, init, feeder):
    keras = tf.keras
    rng = np.random.RandomState(5)
    x, y = rng.rand(10, 4, 3).astype(np.float32), rng.rand(10, 4, 1).astype(np.float32)
    model = keras.Sequential([
        keras.layers.GRU(4, return_sequences=True, input_shape=(4, 3), unroll=True),
        keras.layers.SimpleRNN(3, return_sequences=True, unroll=True),
        keras.layers.Dense(1),
    ])
    out = _start(model, init)
    model.compile("adam", "mean_squared_error")
    history = model.fit(x, y, batch_size=5, epochs=2, shuffle=False, verbose=0)
    out["eval"] = np.array(model.evaluate(x, y, verbose=0))
    return _weights(_history(out, history), model)


def bidirectional_classifier(tf, init, feeder):
    keras = tf.keras
    rng = np.random.RandomState(6)
    x, y = rng.randint(0, 20, (12, 5)), rng.randint(0, 3, 12)
    inputs = keras.Input((5,), dtype="int32")
    h = keras.layers.Embedding(20, 4)(inputs)
    h = keras.layers.Bidirectional(keras.layers.LSTM(3, return_sequences=True, unroll=True))(h)
    h = keras.layers.GlobalAveragePooling1D()(h)
    logits = keras.layers.Dense(3)(h)
    model = keras.Model(inputs, logits)
    out = _start(model, init)
    model.compile(keras.optimizers.SGD(0.5), keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    history = model.fit(x, y, batch_size=4, epochs=2, shuffle=False, verbose=0)
    return _weights(_history(out, history), model)


def conv1d_text(tf, init, feeder):
    keras = tf.keras
    rng = np.random.RandomState(7)
    x, y = rng.randint(0, 25, (10, 9)), rng.randint(0, 2, 10).astype(np.float32)
    model = keras.Sequential([
        keras.layers.Embedding(25, 6, input_length=9),
        keras.layers.Conv1D(4, 3, activation="relu", padding="same"),
        keras.layers.MaxPooling1D(2),
        keras.layers.Conv1D(3, 2),
        keras.layers.GlobalMaxPooling1D(),
        keras.layers.Dense(1, activation="sigmoid"),
    ])
    out = _start(model, init)
    model.compile(keras.optimizers.Adam(0.01), "binary_crossentropy", metrics=["accuracy"])
    history = model.fit(x, y, batch_size=5, epochs=2, shuffle=False, verbose=0)
    return _weights(_history(out, history), model)


def batchnorm_fit(tf, init, feeder):
    keras = tf.keras
    x, y = _data(8, 16, 5, 3)
    model = keras.Sequential([
        keras.layers.Dense(6, input_shape=(5,)),
        keras.layers.BatchNormalization(),
        keras.layers.ReLU(),
        keras.layers.Dense(3, activation="softmax"),
    ])
    out = _start(model, init)
    model.compile(keras.optimizers.SGD(0.1), "sparse_categorical_crossentropy", metrics=["accuracy"])
    history = model.fit(x, y, batch_size=8, epochs=2, shuffle=False, verbose=0)
    out["eval"] = np.array(model.evaluate(x, y, verbose=0))   # inference mode: the moving statistics
    out["pred"] = model.predict(x[:3])
    return _weights(_history(out, history), model)


def regularized_layers(tf, init, feeder):
    keras = tf.keras
    x, y = _data(9, 12, 4, 2)
    model = keras.Sequential([
        keras.layers.Dense(6, input_shape=(4,), kernel_regularizer=keras.regularizers.l2(0.01),
                           kernel_initializer="glorot_normal"),
        keras.layers.LeakyReLU(),
        keras.layers.Reshape((3, 2)),
        keras.layers.Lambda(lambda t: t * 2.0),
        keras.layers.Flatten(),
        keras.layers.Dense(2, activation="softmax", bias_regularizer="l1"),
    ])
    out = _start(model, init)
    model.compile(keras.optimizers.SGD(0.2), "categorical_crossentropy")
    y1 = keras.utils.to_categorical(y, 2)
    history = model.fit(x, y1, batch_size=6, epochs=2, shuffle=False, verbose=0)
    out["n_losses"] = np.array(len(model.losses))
    out["reg"] = np.array(tf.keras.backend.get_session().run(tf.add_n(model.losses)))
    out["collection"] = np.array(len(tf.get_collection(tf.GraphKeys.REGULARIZATION_LOSSES)))
    return _weights(_history(out, history), model)


def callbacks_and_shuffle(tf, init, feeder):
    keras = tf.keras
    x, y = _data(10, 20, 4, 2)
    model = keras.Sequential([keras.layers.Dense(5, activation="relu", input_dim=4),
                              keras.layers.Dense(2, activation="softmax")])
    out = _start(model, init)
    model.compile("sgd", "sparse_categorical_crossentropy", metrics=["accuracy"])
    seen = []

    class Recorder(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            seen.append([epoch, logs["loss"], logs["val_loss"]])

    stop = keras.callbacks.EarlyStopping(monitor="val_loss", min_delta=10.0, patience=1)
    np.random.seed(0)  # fit's shuffle draws from NumPy's global generator
    history = model.fit(x, y, batch_size=4, epochs=6, validation_split=0.2, verbose=0, callbacks=[Recorder(), stop])
    out["seen"] = np.array(seen)
    out["epochs"] = np.array(history.epoch)
    out["stopped"] = np.array(stop.stopped_epoch)
    return _weights(_history(out, history), model)


# ---- Keras layers in a tf.Session loop -------------------------------------------------------------------------

def session_loop_mixed(tf, init, feeder):
    keras = tf.keras
    x_in, y_in = _data(11, 16, 6, 3)
    x = tf.placeholder(tf.float32, [None, 6])
    labels = tf.placeholder(tf.int64, [None])
    h = keras.layers.Dense(8, activation=tf.nn.relu)(x)
    h = tf.nn.l2_normalize(h, axis=1) + keras.layers.Dense(8, use_bias=False)(x)
    logits = keras.layers.Dense(3)(h)
    loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits))
    train = tf.train.AdamOptimizer(0.05).minimize(loss)
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        out = _load(tf, sess, init, tf.trainable_variables())
        out["loss"] = np.array([sess.run([train, loss], {x: x_in, labels: y_in})[1] for _ in range(4)])
        out["logits"] = sess.run(logits, {x: x_in[:3]})
        return out


def session_loop_learning_phase(tf, init, feeder):
    keras = tf.keras
    K = keras.backend
    x_in, y_in = _data(12, 8, 5, 2)
    x = tf.placeholder(tf.float32, [None, 5])
    y = tf.placeholder(tf.float32, [None, 2])
    dense, bn = keras.layers.Dense(4), keras.layers.BatchNormalization(momentum=0.9)
    h = bn(dense(x), training=True)
    h = keras.layers.Dropout(0.3)(h)   # on by the learning phase (fed 0 here: the identity)
    out_t = keras.layers.Dense(2, activation="softmax")(h)
    loss = tf.reduce_mean(keras.losses.categorical_crossentropy(y, out_t))
    with tf.control_dependencies(bn.updates):
        train = tf.train.GradientDescentOptimizer(0.1).minimize(loss)
    sess = tf.Session()
    K.set_session(sess)
    feeds = feeder.feeds(tf)
    sess.run(tf.global_variables_initializer())
    out = _load(tf, sess, init, tf.trainable_variables())
    onehot = keras.utils.to_categorical(y_in, 2)
    out["loss"] = np.array([sess.run([train, loss], {x: x_in, y: onehot, K.learning_phase(): 0, **feeds})[1]
                            for _ in range(3)])
    out["test"] = sess.run(out_t, {x: x_in, **feeds})
    out["moving"] = np.array(sess.run([v for v in bn.weights if "moving" in v.name]))
    out["shape"] = np.array(K.int_shape(h), dtype=object).astype(str)
    out["updates_collection"] = np.array(len(tf.get_collection(tf.GraphKeys.UPDATE_OPS)))
    sess.close()
    return out


def model_as_layer(tf, init, feeder):
    keras = tf.keras
    x_in, _ = _data(13, 6, 4)
    inputs = keras.Input((4,))
    h = keras.layers.Dense(3, activation="elu", name="hidden")(inputs)
    encoder = keras.Model(inputs, keras.layers.Dense(2)(h), name="encoder")
    x = tf.placeholder(tf.float32, [None, 4])
    z = encoder(x)
    head = keras.Sequential([keras.layers.Dense(2, activation="tanh")])
    y = head(z)
    sess = tf.Session()
    keras.backend.set_session(sess)
    sess.run(tf.global_variables_initializer())
    out = _load(tf, sess, init, tf.trainable_variables())
    out["y"] = sess.run(y, {x: x_in})
    out["encoder_weights"] = np.array([v.name for v in encoder.trainable_variables])
    out["head_weights"] = np.array([v.name for v in head.weights])
    encoder.set_weights([w * 0.5 for w in encoder.get_weights()])
    out["halved"] = sess.run(z, {x: x_in})
    out["hidden_shape"] = np.array(encoder.get_layer("hidden").output_shape, dtype=object).astype(str)
    sess.close()
    return out


def autoencoder_add_loss(tf, init, feeder):
    keras, K = tf.keras, tf.keras.backend
    x, _ = _data(14, 16, 6)
    inputs = keras.Input((6,))
    h = keras.layers.Dense(4, activation="relu")(inputs)
    z_mean, z_log_var = keras.layers.Dense(2)(h), keras.layers.Dense(2)(h)
    decoded = keras.layers.Dense(6, activation="sigmoid")(keras.layers.Dense(4, activation="relu")(z_mean))
    vae = keras.Model(inputs, decoded)
    reconstruction = K.sum(K.binary_crossentropy(inputs, decoded), axis=-1)
    kl = -0.5 * K.sum(1 + z_log_var - K.square(z_mean) - K.exp(z_log_var), axis=-1)
    vae.add_loss(K.mean(reconstruction + kl))
    out = _start(vae, init)
    vae.compile(optimizer=keras.optimizers.SGD(0.1))
    history = vae.fit(x, None, batch_size=8, epochs=2, shuffle=False, verbose=0)
    out["eval"] = np.array(vae.evaluate(x, None, verbose=0))
    return _weights(_history(out, history), vae)


def multi_output_dict(tf, init, feeder):
    keras = tf.keras
    x, y = _data(15, 18, 5, 3)
    reg = np.random.RandomState(15).rand(18, 1).astype(np.float32)
    inputs = keras.Input((5,))
    h = keras.layers.Dense(6, activation="relu")(inputs)
    cls = keras.layers.Dense(3, activation="softmax", name="cls")(h)
    value = keras.layers.Dense(1, name="reg")(h)
    model = keras.Model(inputs=inputs, outputs=[cls, value])
    out = _start(model, init)
    model.compile(keras.optimizers.Adam(0.02), loss={"cls": "sparse_categorical_crossentropy", "reg": "mse"},
                  loss_weights={"cls": 1.0, "reg": 0.5}, metrics={"cls": "accuracy"})
    history = model.fit(x, {"cls": y, "reg": reg}, batch_size=6, epochs=2, shuffle=False, verbose=0,
                        validation_data=(x[:6], [y[:6], reg[:6]]))
    out["eval"] = np.array(model.evaluate(x, [y, reg], verbose=0))
    probs, values = model.predict(x[:4])
    out["probs"], out["values"] = probs, values
    out["metrics_names"] = np.array(model.metrics_names)
    return _weights(_history(out, history), model)


def conv_autoencoder(tf, init, feeder):
    keras = tf.keras
    x = np.random.RandomState(16).rand(6, 8, 8, 1).astype(np.float32)
    model = keras.Sequential([
        keras.layers.Conv2D(4, 3, activation="tanh", padding="same", input_shape=(8, 8, 1)),
        keras.layers.MaxPooling2D((2, 2), padding="same"),
        keras.layers.Conv2D(2, 3, activation="tanh", padding="same"),
        keras.layers.UpSampling2D((2, 2)),
        keras.layers.Conv2D(1, 3, activation="sigmoid", padding="same"),
    ])
    out = _start(model, init)
    model.compile(optimizer=keras.optimizers.SGD(learning_rate=0.1), loss="binary_crossentropy")
    history = model.fit(x, x, epochs=2, batch_size=3, shuffle=False, verbose=0)
    out["decoded"] = model.predict(x[:2])
    return _weights(_history(out, history), model)


def feature_extractor(tf, init, feeder):
    keras, K = tf.keras, tf.keras.backend
    rng = np.random.RandomState(17)
    x, y = rng.rand(10, 4, 3).astype(np.float32), rng.randint(0, 2, 10)
    model = keras.Sequential([
        keras.layers.TimeDistributed(keras.layers.Dense(5, activation="tanh"), input_shape=(4, 3)),
        keras.layers.SimpleRNN(4, name="encoder"),
        keras.layers.Dense(2, activation="softmax"),
    ])
    out = _start(model, init)
    model.compile(keras.optimizers.SGD(0.3, momentum=0.5), "sparse_categorical_crossentropy", metrics=["acc"])
    history = model.fit(x, y, batch_size=5, epochs=2, shuffle=False, verbose=0)
    get_features = K.function([model.input, K.learning_phase()], [model.get_layer("encoder").output])
    out["features"] = get_features([x, 0])[0]
    extractor = keras.Model(inputs=model.input, outputs=model.get_layer("encoder").output)
    out["extracted"] = extractor.predict(x)
    out["kernel"] = K.get_value(model.layers[0].layer.kernel)
    return _weights(_history(out, history), model)


def learning_rate_callbacks(tf, init, feeder):
    keras, K = tf.keras, tf.keras.backend
    x, y = _data(18, 12, 4, 2)
    model = keras.Sequential([keras.layers.Dense(3, activation="sigmoid", input_shape=(4,)),
                              keras.layers.Dense(2, activation="softmax")])
    out = _start(model, init)
    model.compile(keras.optimizers.SGD(lr=0.5, momentum=0.9), "sparse_categorical_crossentropy")
    schedule = keras.callbacks.LearningRateScheduler(lambda epoch, lr: lr * 0.5 if epoch % 2 else lr)
    plateau = keras.callbacks.ReduceLROnPlateau(monitor="loss", factor=0.2, patience=1, min_delta=10.0, cooldown=1)
    history = model.fit(x, y, batch_size=4, epochs=5, shuffle=False, verbose=0, callbacks=[schedule, plateau])
    out["lr"] = np.array(K.get_value(model.optimizer.lr))
    K.set_value(model.optimizer.lr, 0.05)
    out["after_set"] = np.array(model.train_on_batch(x, y))
    return _weights(_history(out, history), model)


SCRIPTS = {f.__name__: f for f in (mnist_mlp, small_cnn, text_lstm, functional_two_inputs, gru_regression,
                                   bidirectional_classifier, conv1d_text, batchnorm_fit, regularized_layers,
                                   callbacks_and_shuffle, session_loop_mixed, session_loop_learning_phase,
                                   model_as_layer, autoencoder_add_loss, multi_output_dict, conv_autoencoder,
                                   feature_extractor, learning_rate_callbacks)}


def run_keras_script(tf, name: str, init: list, feeder: Feeder) -> dict:
    tensorflow = hasattr(tf, "experimental")
    if tensorflow:  # its RNN layers' while loops have gradients only with this (undone after: it is process-wide,
        tf.experimental.output_all_intermediates(True)  # and a tf.function's loops would then write TensorLists)
    tf.keras.backend.clear_session()
    try:
        return SCRIPTS[name](tf, init, feeder)
    finally:
        tf.keras.backend.clear_session()
        if tensorflow:
            tf.experimental.output_all_intermediates(None)


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_keras_script_runs_as_in_tensorflow(tf1, name):
    import tfplus
    init: list = []
    feeder = Feeder()
    want = run_keras_script(tf1, name, init, feeder)
    got = run_keras_script(tfplus, name, init, Feeder(feeder.shapes))
    diffs = compare(want, got)
    assert not diffs, f"{name} differs from TensorFlow:\n" + "\n".join(diffs)
