"""tf.layers (functions and classes) and tf.nn.rnn_cell's wrappers against TF1 (the `tf1` oracle): one builder
runs on both APIs; the variable names, UPDATE_OPS, outputs and gradients must agree, given TF's initial weights."""
import numpy as np
import pytest

import tfplus as tf

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")  # TF deprecates its own tf.layers and rnn_cell


def _compare(tf1, build, feeds):
    """`build(mod)` -> (outputs, placeholders by feed key) on tf1 and on tfplus; runs each with `feeds` ({key: value
    or list of values, one run per value}) after copying TF's initial variables into ours; compares the outputs and
    the gradients of their weighted sum by every trainable variable, then every variable (updated by the run's
    UPDATE_OPS, say). Returns the variable names."""
    runs = max((len(v) for v in feeds.values() if isinstance(v, list)), default=1)
    found = []
    for mod in (tf1, tf):
        g = mod.Graph()
        with g.as_default():
            mod.set_random_seed(0)
            outs, phs = build(mod)
            loss = sum(mod.reduce_sum(o * (k + 1.5)) for k, o in enumerate(outs) if o.dtype.is_floating)
            trainable = mod.trainable_variables()
            grads = mod.gradients(loss, trainable)
            names = (sorted(v.op.name for v in mod.global_variables()), sorted(v.op.name for v in trainable),
                     len(mod.get_collection(mod.GraphKeys.UPDATE_OPS)))
            found.append((g, outs + grads, phs, names))
    (tg, tfetch, tphs, tnames), (og, ofetch, ophs, onames) = found
    assert onames == tnames
    for r in range(runs):
        def feed(phs, r=r):
            return {phs[k]: (v[r] if isinstance(v, list) else v) for k, v in feeds.items()}
        with tf1.Session(graph=tg) as s:
            s.run(tf1.global_variables_initializer())
            values = {v.op.name: s.run(v) for v in tg.get_collection("variables")}
            theirs = s.run(tfetch, feed(tphs)) + [s.run(v) for v in tg.get_collection("variables")]
        with tf.Session(graph=og) as s:
            with og.as_default():
                s.run([tf.assign(v, values[v.op.name]) for v in og.get_collection("variables")])
            ours = s.run(ofetch, feed(ophs)) + [s.run(v) for v in og.get_collection("variables")]
        for k, (a, b) in enumerate(zip(ours, theirs)):
            assert np.shape(a) == np.shape(b), f"run {r} fetch {k}"
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4, err_msg=f"run {r} fetch {k}")
    return onames


def _x(*shape):
    return np.random.default_rng(0).standard_normal(shape).astype(np.float32)


def test_layer_classes_share_their_variables_and_switch_batch_norm_on_a_bool_tensor(tf1):
    def build(m):
        x = m.placeholder(m.float32, [None, 8, 8, 3])
        training = m.placeholder(m.bool, [])
        conv, bn = m.layers.Conv2D(4, 3, padding="same", activation=m.nn.relu), m.layers.BatchNormalization()
        h = bn(conv(x), training=training)
        h = m.layers.MaxPooling2D(2, 2)(h)
        h = m.layers.SeparableConv2D(5, 3, padding="same")(h)
        h = m.layers.Conv2DTranspose(3, 3, strides=2, padding="valid")(h)
        h = m.layers.AveragePooling2D(2, 2, padding="same")(h)
        h = m.layers.Dropout(0.5)(m.layers.Flatten()(h), training=False)
        dense = m.layers.Dense(6, name="head")
        y1, y2 = dense(h), dense(h * 2.0)              # one layer object: one set of variables
        z = m.layers.Dense(2)(m.layers.Conv1D(3, 2)(m.reshape(y1, [-1, 3, 2])))
        with m.control_dependencies(m.get_collection(m.GraphKeys.UPDATE_OPS)):
            y1 = m.identity(y1)
        assert (dense.kernel.op.name, conv.bias.op.name) == ("head/kernel", "conv2d/bias")
        assert [v.op.name for v in bn.trainable_variables] == ["batch_normalization/gamma",
                                                               "batch_normalization/beta"]
        return [y1, y2, z], {"x": x, "training": training}
    names = _compare(tf1, build, {"x": _x(2, 8, 8, 3), "training": [True, False]})
    assert "head/kernel" in names[0] and "head_1/kernel" not in names[0]


def test_layer_functions_reuse_in_reentered_scopes_and_auto_reuse(tf1):
    def build(m):
        x = m.placeholder(m.float32, [None, None, 4])      # dense on [?, ?, n]
        img = m.placeholder(m.float32, [None, 6, 6, 2])
        training = m.placeholder_with_default(True, [])
        outs = []
        for reuse in (None, True):                          # unnamed layers, called again in the re-entered scope
            with m.variable_scope("tower", reuse=reuse):
                h = m.layers.conv2d(img, 3, 3, activation=m.nn.relu)
                h = m.layers.batch_normalization(h, training=training)
                h = m.layers.conv2d(h, 2, 1)
                outs.append(m.layers.dense(m.layers.flatten(h), 3))
        for _ in range(2):
            with m.variable_scope("shared", reuse=m.AUTO_REUSE):
                outs.append(m.layers.dense(x, 5, name="proj"))
                outs.append(m.layers.conv1d(x, 2, 2, padding="same"))
        outs.append(m.layers.max_pooling1d(x, 2, 1) + m.layers.average_pooling1d(x, 2, 1))
        return outs, {"x": x, "img": img}
    names = _compare(tf1, build, {"x": _x(2, 3, 4), "img": _x(3, 6, 6, 2)})
    assert "tower/conv2d_1/kernel" in names[0] and "tower/conv2d_2/kernel" not in names[0]


def test_rnn_cell_wrappers_match_tf(tf1):
    def build(m):
        x = m.placeholder(m.float32, [None, 4, 3])
        keep = m.placeholder(m.float32, [])
        rnn = m.nn.rnn_cell
        cell = rnn.MultiRNNCell([rnn.DropoutWrapper(rnn.GRUCell(3), input_keep_prob=keep, output_keep_prob=keep),
                                 rnn.ResidualWrapper(rnn.DropoutWrapper(rnn.BasicLSTMCell(3),
                                                                        state_keep_prob=keep))])
        out, state = m.nn.dynamic_rnn(cell, x, dtype=m.float32)
        return [out, state[1].c, state[1].h], {"x": x, "keep": keep}
    names = _compare(tf1, build, {"x": _x(2, 4, 3), "keep": 1.0})
    assert "rnn/multi_rnn_cell/cell_0/gru_cell/gates/kernel" in names[0]


def test_dropout_wrapper_drops_with_its_keep_probability():
    x = tf.ones([1000, 4])
    cell = tf.nn.rnn_cell.DropoutWrapper(tf.nn.rnn_cell.BasicRNNCell(4, activation=tf.identity),
                                         input_keep_prob=0.5)
    out, _ = cell(x, cell.zero_state(1000, tf.float32))
    with tf.Session() as s:
        s.run(tf.global_variables_initializer())
        zeros = (np.abs(s.run(out)).sum(1) == 0).mean()
    assert 0.02 < zeros < 0.12  # every input of a row dropped: 0.5 ** 4


def test_missing_rnn_cell_names_raise_unsupported_error():
    with pytest.raises(tf.unsupported.UnsupportedError, match="tf.nn.rnn_cell.NASCell"):
        tf.nn.rnn_cell.NASCell  # noqa: B018
