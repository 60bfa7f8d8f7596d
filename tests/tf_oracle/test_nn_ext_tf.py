"""The new nn ops against TensorFlow (the `tf1` oracle): forward values and gradients of the same program in
both, on every device: relu6, leaky_relu, lrn, fused_batch_norm (training with and without moving averages,
inference; NHWC and NCHW), depthwise_conv2d, separable_conv2d, conv1d."""
import numpy as np
import pytest

import tfplus as tf


def _both(tf1, device, build, arrays, rtol=1e-4, atol=1e-5):
    """Runs build(module, *tensors) -> outputs in tfplus (on `device`) and in TensorFlow, with the gradient of
    sum(outputs[0] * w) for a fixed random w with respect to every input; compares it all (and which inputs
    get no gradient)."""
    results, missing = [], []
    for mod in (tf, tf1):
        w = np.random.default_rng(1).standard_normal  # the same weights in both
        g = mod.Graph()
        with g.as_default():
            phs = [mod.placeholder(mod.float32, a.shape) for a in arrays]
            outs = build(mod, *phs)
            outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
            weights = mod.constant(w(tuple(outs[0].shape.as_list())).astype(np.float32))
            grads = mod.gradients(mod.reduce_sum(outs[0] * weights), phs)
            kwargs = {"graph": g, "device": device} if mod is tf else {"graph": g}
            with mod.Session(**kwargs) as s:
                values = s.run(outs + [gr for gr in grads if gr is not None], dict(zip(phs, arrays)))
            results.append(values)
            missing.append([gr is None for gr in grads])
    assert missing[0] == missing[1], f"inputs without a gradient: tfplus {missing[0]}, TensorFlow {missing[1]}"
    for k, (got, want) in enumerate(zip(*results)):
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, err_msg=f"output/gradient {k}")


def _rand(*shape, lo=None, hi=None, seed=0):
    rng = np.random.default_rng(seed)
    if lo is not None:
        return rng.uniform(lo, hi, shape).astype(np.float32)
    return rng.standard_normal(shape).astype(np.float32)


def test_relu6_and_leaky_relu_match_tensorflow(tf1, device):
    x = _rand(3, 5, lo=-8, hi=9)
    _both(tf1, device, lambda m, x: [m.nn.relu6(x), m.nn.leaky_relu(x), m.nn.leaky_relu(x, alpha=0.05)], [x])
    _both(tf1, device, lambda m, x: m.nn.leaky_relu(x, alpha=0.05), [x])


def test_lrn_matches_tensorflow(tf1, device):
    x = _rand(2, 3, 2, 7)
    _both(tf1, device, lambda m, x: m.nn.lrn(x, depth_radius=2, bias=1.5, alpha=0.3, beta=0.75), [x])
    _both(tf1, device, lambda m, x: m.nn.local_response_normalization(x), [x])


@pytest.mark.parametrize("fmt", ["NHWC", "NCHW"])
def test_fused_batch_norm_training_matches_tensorflow(tf1, device, fmt):
    x = _rand(4, 3, 3, 5) if fmt == "NHWC" else _rand(4, 5, 3, 3)
    scale, offset = _rand(5, lo=0.5, hi=2, seed=1), _rand(5, seed=2)
    _both(tf1, device, lambda m, x, s, o: m.nn.fused_batch_norm(x, s, o, data_format=fmt), [x, scale, offset])
    mean, var = _rand(5, seed=3), _rand(5, lo=0.5, hi=2, seed=4)
    _both(tf1, device, lambda m, x, s, o, mu, v: m.nn.fused_batch_norm(
        x, s, o, mu, v, epsilon=1e-3, data_format=fmt, exponential_avg_factor=0.1),
        [x, scale, offset, mean, var])


def test_fused_batch_norm_inference_matches_tensorflow(tf1, device):
    x = _rand(2, 3, 3, 4)
    args = [x, _rand(4, lo=0.5, hi=2, seed=1), _rand(4, seed=2), _rand(4, seed=3), _rand(4, lo=0.5, hi=2, seed=4)]
    _both(tf1, device, lambda m, x, s, o, mu, v: m.nn.fused_batch_norm(x, s, o, mu, v, is_training=False), args)


@pytest.mark.parametrize("strides,padding,mult", [(1, "SAME", 1), (2, "SAME", 2), (2, "VALID", 3)])
def test_depthwise_conv2d_matches_tensorflow(tf1, device, strides, padding, mult):
    x, f = _rand(2, 7, 6, 3), _rand(3, 3, 3, mult, seed=1)
    s = [1, strides, strides, 1]
    _both(tf1, device, lambda m, x, f: m.nn.depthwise_conv2d(x, f, s, padding), [x, f])


def test_depthwise_conv2d_nchw_is_the_nhwc_one_transposed(tf1, device):
    """TensorFlow's CPU kernel has no NCHW depthwise conv: compare against its NHWC one, transposed."""
    x, f = _rand(2, 7, 6, 3), _rand(3, 3, 3, 2, seed=1)

    def build(m, x, f):
        if m is tf1:
            return m.nn.depthwise_conv2d(x, f, [1, 2, 2, 1], "SAME")
        y = m.nn.depthwise_conv2d(m.transpose(x, [0, 3, 1, 2]), f, [1, 1, 2, 2], "SAME", data_format="NCHW")
        return m.transpose(y, [0, 2, 3, 1])
    _both(tf1, device, build, [x, f])


def test_separable_conv2d_matches_tensorflow(tf1, device):
    x, d, p = _rand(2, 6, 6, 3), _rand(3, 3, 3, 2, seed=1), _rand(1, 1, 6, 4, seed=2)
    _both(tf1, device, lambda m, x, d, p: m.nn.separable_conv2d(x, d, p, [1, 2, 2, 1], "SAME"), [x, d, p])


@pytest.mark.parametrize("stride,padding", [(1, "SAME"), (2, "VALID")])
def test_conv1d_matches_tensorflow(tf1, device, stride, padding):
    x, f = _rand(2, 9, 3), _rand(3, 3, 4, seed=1)
    _both(tf1, device, lambda m, x, f: m.nn.conv1d(x, f, stride, padding), [x, f])


def test_conv1d_builds_the_graph_tensorflow_builds(tf1):
    """ExpandDims + Conv2D + Squeeze under a conv1d scope, as TF."""
    types = []
    for mod in (tf, tf1):
        g = mod.Graph()
        with g.as_default():
            mod.nn.conv1d(mod.placeholder(mod.float32, [2, 9, 3]), mod.zeros([3, 3, 4]), 1, "SAME")
        ops = [op for op in g.get_operations() if op.name.startswith("conv1d")]
        types.append(sorted(op.type for op in ops if op.type != "Const"))
    assert types[0] == types[1] == ["Conv2D", "ExpandDims", "ExpandDims", "Squeeze"]


def test_nn_batch_normalization_and_moments_match_tensorflow(tf1, device):
    x = _rand(4, 3, 3, 5)
    args = [x, _rand(5, lo=0.5, hi=2, seed=1), _rand(5, seed=2)]

    def build(m, x, s, o):
        mean, var = m.nn.moments(x, [0, 1, 2])
        return [m.nn.batch_normalization(x, mean, var, o, s, 1e-3), m.nn.batch_normalization(x, mean, var, None,
                                                                                           None, 1e-3)]
    _both(tf1, device, build, args)


def test_a_tensorflow_graph_with_the_new_ops_imports_and_runs(tf1):
    """A GraphDef TensorFlow writes (depthwise conv, fused batch norm in both modes, relu6, leaky_relu, lrn)
    imports into tfplus and computes what TensorFlow does."""
    from tfplus import graph_io
    x = _rand(2, 5, 5, 3)
    g = tf1.Graph()
    with g.as_default():
        ph = tf1.placeholder(tf1.float32, x.shape, name="x")
        y = tf1.nn.depthwise_conv2d(ph, tf1.constant(_rand(3, 3, 3, 2, seed=1)), [1, 2, 2, 1], "SAME")
        y, _, _ = tf1.nn.fused_batch_norm(y, tf1.ones([6]), tf1.zeros([6]))
        y, _, _ = tf1.nn.fused_batch_norm(tf1.nn.relu6(y), tf1.ones([6]), tf1.zeros([6]), tf1.zeros([6]),
                                          tf1.ones([6]), is_training=False)
        out = tf1.identity(tf1.nn.lrn(tf1.nn.leaky_relu(y), 2), name="out")
        with tf1.Session() as s:
            want = s.run(out, {ph: x})
    ours = tf.Graph()
    with ours.as_default():
        graph_io.import_graph_def(g.as_graph_def(), name="")
        with tf.Session() as s:
            got = s.run("out:0", {"x:0": x})
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
