"""MobileNet-class blocks off MobileNet's shapes (issue 37), against TensorFlow: a depthwise conv (channel multiplier
1 or 2, stride 1 or 2, SAME or VALID, NHWC or NCHW), tf.layers.batch_normalization (training or not, fused True,
False or None) and ReLU6 / ReLU, the conv's output read twice in one case. The outputs, the gradients w.r.t. the
input and every weight, and one SGD step with the moving averages' updates, on every device with the rewrite on
and off. TensorFlow's CPU runs depthwise convs in NHWC only: its graph is built in NHWC, ours in the case's format
between transposes (the same values)."""
from __future__ import annotations

import numpy as np
import pytest
from conftest import DEVICES

import tfplus as tf

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::DeprecationWarning")

OFF = tf.ConfigProto(graph_options=tf.GraphOptions(rewrite_options=tf.RewriterConfig(
    remapping=tf.RewriterConfig.OFF)))
X = np.random.default_rng(0).standard_normal((3, 9, 7, 4)).astype(np.float32)


def _graph(mod, fmt, training, fused, act, multiplier, stride, padding, twice):
    """(graph, x, fetches: outputs then gradients, train op) of the block; fmt is ours (TensorFlow's is NHWC)."""
    fmt = "NHWC" if mod is not tf else fmt
    g = mod.Graph()
    with g.as_default():
        x = mod.placeholder(mod.float32, X.shape)
        h = mod.transpose(x, [0, 3, 1, 2]) if fmt == "NCHW" else x
        w = mod.get_variable("depthwise", [3, 3, X.shape[3], multiplier])
        strides = [1, 1, stride, stride] if fmt == "NCHW" else [1, stride, stride, 1]
        y = mod.nn.depthwise_conv2d(h, w, strides, padding, data_format=fmt)
        z = mod.layers.batch_normalization(y, axis=1 if fmt == "NCHW" else -1, training=training, fused=fused,
                                           momentum=0.9)
        outs = [getattr(mod.nn, act)(z)] + ([y] if twice else [])
        outs = [mod.transpose(o, [0, 2, 3, 1]) for o in outs] if fmt == "NCHW" else outs
        rng = np.random.default_rng(1)
        loss = mod.add_n([mod.reduce_sum(o * rng.standard_normal(o.shape.as_list()).astype(np.float32))
                          for o in outs])
        fetches = outs + mod.gradients(loss, [x] + mod.trainable_variables())
        with mod.control_dependencies(mod.get_collection(mod.GraphKeys.UPDATE_OPS)):
            train = mod.train.GradientDescentOptimizer(0.5).minimize(loss)
    return g, x, fetches, train


CASES = [  # (fmt, training, fused, activation, multiplier, stride, padding, conv output read twice)
    ("NHWC", True, False, "relu6", 2, 2, "SAME", True),   # fused=False: the moving variance is the biased one
    ("NCHW", True, False, "relu", 1, 2, "VALID", False),
    ("NCHW", True, True, "relu6", 2, 2, "SAME", True),
    ("NHWC", True, None, "relu", 2, 2, "VALID", False),
    ("NCHW", False, None, "relu6", 2, 1, "SAME", False),
    ("NHWC", False, False, "relu6", 1, 2, "SAME", False),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(str(v) for v in c))
def test_block_matches_tf1(tf1, case):
    tg, tx, tfetch, ttrain = _graph(tf1, *case)
    og, ox, ofetch, otrain = _graph(tf, *case)
    with tf1.Session(graph=tg) as s:
        s.run(tf1.global_variables_initializer())
        weights = {v.op.name: s.run(v) for v in tg.get_collection("variables")}
        theirs = s.run(tfetch, {tx: X})
        s.run(ttrain, {tx: X})
        stepped = {v.op.name: s.run(v) for v in tg.get_collection("variables")}
    assert sorted(weights) == sorted(v.op.name for v in og.get_collection("variables"))
    for device in DEVICES:
        for config in (None, OFF):
            where = f"{device}, rewrite {'off' if config else 'on'}"
            with tf.Session(graph=og, device=device, config=config) as s:
                with og.as_default():
                    s.run([tf.assign(v, weights[v.op.name]) for v in og.get_collection("variables")])
                ours = s.run(ofetch, {ox: X})
                s.run(otrain, {ox: X})
                for v in og.get_collection("variables"):
                    np.testing.assert_allclose(s.run(v), stepped[v.op.name], 3e-4, 3e-4,
                                               err_msg=f"{v.op.name}: {where}")
            for k, (a, b) in enumerate(zip(ours, theirs)):
                np.testing.assert_allclose(a, b, 3e-4, 3e-4, err_msg=f"fetch {k} ({ofetch[k].name}): {where}")
