"""tfplus.layers_ext against TF1's tf.layers (the `tf1` oracle): the same variable names, shapes and collections,
the same UPDATE_OPS, and the same outputs, gradients and moving averages given the same weights."""
import numpy as np
import pytest

import tfplus as tf
from tfplus import layers_ext

pytestmark = pytest.mark.filterwarnings("ignore:`tf.layers:UserWarning")  # TF deprecates its own tf.layers


def _run_both(tf1, build_tf, build_ours, x, update=False):
    """Builds both graphs, copies TensorFlow's initial variable values into ours, runs one step (the forward
    output, the gradients of sum(y * w) by the input and every trainable variable, and, with `update`, the
    UPDATE_OPS first); returns {name: (ours, theirs)} plus the variables' descriptions."""
    found = []
    for mod, build in ((tf1, build_tf), (tf, build_ours)):
        g = mod.Graph()
        with g.as_default():
            ph = mod.placeholder(mod.float32, x.shape)
            y = build(ph)
            w = mod.constant(np.random.default_rng(1).standard_normal(y.shape.as_list()).astype(np.float32))
            trainable = mod.trainable_variables()
            grads = mod.gradients(mod.reduce_sum(y * w), [ph] + trainable)
            updates = mod.get_collection(mod.GraphKeys.UPDATE_OPS)
            describe = {
                "global": sorted((v.op.name, tuple(v.shape.as_list())) for v in mod.global_variables()),
                "trainable": sorted(v.op.name for v in trainable),
                "updates": len(updates)}
            found.append((g, ph, y, grads, trainable, updates, describe))
    (tg, tph, ty, tgrads, ttrain, tupd, tdesc), (og, oph, oy, ograds, otrain, oupd, odesc) = found
    assert odesc == tdesc
    with tf1.Session(graph=tg) as s:
        s.run(tf1.global_variables_initializer())
        values = {v.op.name: s.run(v) for v in tg.get_collection("variables")}
        if update:
            s.run(tupd, {tph: x})
        theirs = s.run([ty] + tgrads, {tph: x})
        theirs_vars = {v.op.name: s.run(v) for v in tg.get_collection("variables")}
    with tf.Session(graph=og) as s:
        with og.as_default():
            s.run([tf.assign(v, values[v.op.name]) for v in og.get_collection("variables")])
        if update:
            s.run(oupd, {oph: x})
        ours = s.run([oy] + ograds, {oph: x})
        ours_vars = {v.op.name: s.run(v) for v in og.get_collection("variables")}
    for k, (a, b) in enumerate(zip(ours, theirs)):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5, err_msg=f"output/gradient {k}")
    for name in theirs_vars:
        np.testing.assert_allclose(ours_vars[name], theirs_vars[name], rtol=1e-5, atol=1e-6, err_msg=name)
    return odesc


def _x(*shape):
    return (np.random.default_rng(0).standard_normal(shape) * 2 + 1).astype(np.float32)


@pytest.mark.parametrize("shape,axis", [((4, 3, 3, 5), -1), ((4, 5, 3, 3), 1), ((6, 5), -1), ((3, 4, 5), -1)])
def test_batch_normalization_training_updates_moving_averages_as_tf1(tf1, shape, axis):
    desc = _run_both(tf1, lambda x: tf1.layers.batch_normalization(x, axis=axis, training=True, momentum=0.9),
                     lambda x: layers_ext.batch_normalization(x, axis=axis, training=True, momentum=0.9),
                     _x(*shape), update=True)
    assert desc["updates"] == 2
    assert desc["trainable"] == ["batch_normalization/beta", "batch_normalization/gamma"]


def test_batch_normalization_inference_uses_the_moving_statistics(tf1):
    def build(mod, layer):
        def fn(x):
            y = layer(x, training=True, name="bn")  # creates the variables; the evaluation graph reuses them
            return layer(y, training=False, name="bn", reuse=True, center=True)
        return fn
    desc = _run_both(tf1, build(tf1, tf1.layers.batch_normalization),
                     build(tf, layers_ext.batch_normalization), _x(2, 3, 3, 4), update=True)
    assert desc["updates"] == 2


def test_batch_normalization_names_scopes_like_tf1(tf1):
    for mod, bn in ((tf1, tf1.layers.batch_normalization), (tf, layers_ext.batch_normalization)):
        with mod.Graph().as_default():
            x = mod.placeholder(mod.float32, [None, 4])
            bn(bn(x, scale=False), center=False)
            names = sorted(v.op.name for v in mod.global_variables())
        assert names == ["batch_normalization/beta", "batch_normalization/moving_mean",
                         "batch_normalization/moving_variance", "batch_normalization_1/gamma",
                         "batch_normalization_1/moving_mean", "batch_normalization_1/moving_variance"], mod


@pytest.mark.parametrize("kw", [dict(filters=4, kernel_size=3), dict(filters=2, kernel_size=2, strides=2,
                                                                        padding="same", activation="relu")])
def test_conv1d_matches_tf1(tf1, kw):
    def build(mod, layer):
        args = dict(kw, activation=mod.nn.relu) if "activation" in kw else kw
        return lambda x: layer(x, **args)
    desc = _run_both(tf1, build(tf1, tf1.layers.conv1d), build(tf, layers_ext.conv1d), _x(2, 7, 3))
    assert desc["global"] == [("conv1d/bias", (kw["filters"],)), ("conv1d/kernel", (kw["kernel_size"], 3,
                                                                                   kw["filters"]))]


def test_separable_conv2d_matches_tf1(tf1):
    def build(layer):
        return lambda x: layer(layer(x, 4, 3, strides=2, padding="same", depth_multiplier=2), 3, (1, 2))
    desc = _run_both(tf1, build(tf1.layers.separable_conv2d), build(layers_ext.separable_conv2d), _x(2, 6, 5, 3))
    assert ("separable_conv2d/depthwise_kernel", (3, 3, 3, 2)) in desc["global"]
    assert ("separable_conv2d_1/pointwise_kernel", (1, 1, 4, 3)) in desc["global"]
