"""Model builders (tfplus.graphs): Mentee and LeNet shapes, parameter counts, initialization, training."""
from __future__ import annotations

import math

import numpy as np
import pytest
from modelcheck import assert_graphdef_round_trips

import tfplus as tf
from tfplus.graphs import MODELS, get_model, training_graph
from tfplus.graphs.lenet import lenet
from tfplus.graphs.mentee import WEIGHTS, default_pools, mentee


def _params(graph: tf.Graph) -> dict[str, list[int]]:
    return {v.op.name: v.shape.as_list() for v in graph.get_collection(tf.GraphKeys.TRAINABLE_VARIABLES)}


def _mentee_count(convs, fcs, classes=10, pools=None, size=32, channels=3) -> int:
    """Parameters of a Mentee: 3x3 convs, then FCs from the flattened map (halved once per pool)."""
    pools = default_pools(len(convs)) if pools is None else pools
    widths = (channels, *convs)
    conv = sum(9 * a * b + b for a, b in zip(widths, widths[1:]))
    side = size // 2 ** len(pools)
    dims = (convs[-1] * side * side, *fcs, classes)
    return conv + sum(a * b + b for a, b in zip(dims, dims[1:]))


def _build(model=mentee, data_format="NCHW", **kw):
    graph = tf.Graph()
    with graph.as_default():
        shape = [None, 3, 32, 32] if data_format == "NCHW" else [None, 32, 32, 3]
        images = tf.placeholder(tf.float32, shape)
        logits = model(images, data_format=data_format, **kw)
        graph.add_to_collection(tf.GraphKeys.INIT_OP, tf.global_variables_initializer())
    return graph, images, logits


def test_default_mentee_layers_and_parameter_count():
    graph, _, logits = _build()
    assert logits.shape.as_list() == [None, 10]
    params = _params(graph)
    assert params["conv1/weights"] == [3, 3, 3, 32] and params["conv5/weights"] == [3, 3, 64, 128]
    assert params["fc1/weights"] == [2048, 256] and params["fc3/weights"] == [128, 10]
    assert sorted(params) == sorted(f"{s}/{k}" for s in ("conv1", "conv2", "conv3", "conv4", "conv5", "fc1",
                                                        "fc2", "fc3") for k in ("weights", "biases"))
    total = sum(math.prod(s) for s in params.values())
    assert total == _mentee_count((32, 32, 64, 64, 128), (256, 128)) == 698_154
    # Weight decay applies to the weights only.
    decayed = sorted(v.op.name for v in graph.get_collection(WEIGHTS))
    assert decayed == sorted(k for k in params if "weights" in k)


@pytest.mark.parametrize("data_format", ["NCHW", "NHWC"])
@pytest.mark.parametrize("convs,fcs,pools", [((16, 32, 64), (64,), None), ((8,) * 6, (32, 16), None),
                                             ((8, 16), (), (0,))])
def test_custom_widths_depth_and_format(data_format, convs, fcs, pools):
    graph, _, logits = _build(conv_widths=convs, fc_widths=fcs, pools=pools, num_classes=7,
                              data_format=data_format)
    assert logits.shape.as_list() == [None, 7]
    params = _params(graph)
    assert len(params) == 2 * (len(convs) + len(fcs) + 1)
    assert sum(math.prod(s) for s in params.values()) == _mentee_count(convs, fcs, 7, pools)


def test_bad_pools_are_refused():
    with pytest.raises(ValueError, match="pools"):
        _build(conv_widths=(8, 8), pools=(2,))


def test_lenet_and_registry():
    graph, _, logits = _build(lenet)
    assert logits.shape.as_list() == [None, 10]
    assert sum(math.prod(s) for s in _params(graph).values()) == 62_006
    assert {"mentee", "lenet"} <= set(MODELS) and get_model("lenet").build is lenet
    with pytest.raises(ValueError, match="unknown model 'resnet'.*lenet, mentee"):
        get_model("resnet")


@pytest.mark.parametrize("data_format", ["NCHW", "NHWC"])
def test_forward_on_cpu(data_format):
    graph, images, logits = _build(data_format=data_format, conv_widths=(8, 8, 16, 16, 16), fc_widths=(32,))
    x = np.random.default_rng(0).standard_normal((4, 3, 32, 32)).astype(np.float32)
    if data_format == "NHWC":
        x = x.transpose(0, 2, 3, 1).copy()
    with tf.Session(graph=graph) as sess:
        sess.run(graph.get_collection(tf.GraphKeys.INIT_OP))
        out = sess.run(logits, {images: x})
    assert out.shape == (4, 10) and np.all(np.isfinite(out)) and out.std() > 0


def _initial_weights(seed: int) -> dict[str, np.ndarray]:
    tg = training_graph(lenet, total_steps=10, seed=seed)
    with tf.Session(graph=tg.graph) as sess:
        sess.run(tg.init_op)
        return {v.op.name: sess.run(v) for v in tg.graph.get_collection(tf.GraphKeys.TRAINABLE_VARIABLES)}


def test_he_normal_init_zero_biases_and_seeds():
    a, b, c = _initial_weights(1), _initial_weights(1), _initial_weights(2)
    assert all(np.array_equal(a[k], b[k]) for k in a)
    assert not np.array_equal(a["conv1/weights"], c["conv1/weights"])
    assert not np.any(a["fc1/biases"]) and not np.any(a["conv2/biases"])
    w = a["fc1/weights"]  # 400 x 120: He-normal std sqrt(2 / fan_in), truncated at 2 std
    assert abs(w.std() / math.sqrt(2 / 400) - 1) < 0.05
    assert np.abs(w).max() <= 2 * math.sqrt(2 / 400) / 0.8796 + 1e-6


def test_training_graph_loss_weight_decay_and_schedule():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((8, 3, 32, 32)).astype(np.float32)
    y = rng.integers(0, 10, 8).astype(np.int32)
    tg = training_graph(lenet, total_steps=4, seed=0, weight_decay=0.01, learning_rate=0.1, warmup_steps=2)
    with tf.Session(graph=tg.graph) as sess:
        sess.run(tg.init_op)
        weights = [sess.run(v) for v in tg.graph.get_collection(WEIGHTS)]
        xent, loss, logits, acc = sess.run([tg.cross_entropy, tg.loss, tg.logits, tg.accuracy],
                                           {tg.images: x, tg.labels: y})
        lrs = [float(sess.run([tg.train_op, tg.learning_rate], {tg.images: x, tg.labels: y})[1])
               for _ in range(4)]
        assert sess.run(tg.global_step) == 4
    z = logits - logits.max(1, keepdims=True)
    ref = np.mean(np.log(np.exp(z).sum(1)) - z[np.arange(8), y])
    assert xent == pytest.approx(ref, rel=1e-5)
    l2 = sum(float((w.astype(np.float64) ** 2).sum()) / 2 for w in weights)
    assert loss - xent == pytest.approx(0.01 * l2, rel=1e-4)
    assert acc == pytest.approx(np.mean(logits.argmax(1) == y))
    # warmed up over 2 steps to 0.1, then a cosine to 0 over the other 2; each step uses the rate of the step
    # count before it
    want = [0.05, 0.1, 0.1, 0.05]
    assert lrs == pytest.approx(want, rel=1e-5)


def test_training_steps_fit_a_fixed_batch():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((16, 3, 32, 32)).astype(np.float32)
    y = rng.integers(0, 10, 16).astype(np.int32)
    tg = training_graph(mentee, total_steps=1000, seed=0, learning_rate=0.01, schedule="const",
                        model_kwargs={"conv_widths": (4, 4, 8, 8, 8), "fc_widths": (16,)})
    with tf.Session(graph=tg.graph) as sess:
        sess.run(tg.init_op)
        losses = [float(sess.run([tg.train_op, tg.loss], {tg.images: x, tg.labels: y})[1]) for _ in range(10)]
    assert losses[-1] < 0.5 * losses[0]


def test_training_graph_graphdef_round_trip():
    tg = training_graph(mentee, total_steps=10, seed=0, warmup_steps=2,
                        model_kwargs={"conv_widths": (4, 8), "fc_widths": (8,)})
    assert_graphdef_round_trips(tg.graph)
