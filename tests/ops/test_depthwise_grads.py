"""The depthwise convolution's filter gradient on opencl (kernels/opencl/conv.cl depthwise_backprop_filter_taps: all
of a channel's taps in one pass over chunks of the positions, then a sum over the chunks, by the kernel's last
group or a second pass) against the NumPy reference, with the chunks a GPU's compute units make, and the float64
gradient against finite differences."""
from __future__ import annotations

import numpy as np
import pytest
from cases_nn_ext import ref_depthwise, ref_depthwise_backprop_filter
from conftest import needs_opencl

import tfplus as tf


def _strides4(s, fmt):
    return [1, 1, s, s] if fmt == "NCHW" else [1, s, s, 1]


def _filter_grad(x, f_shape, dy, stride, padding, fmt, compute_units=None):
    g = tf.Graph()
    with g.as_default():
        xt = tf.placeholder(tf.as_dtype(x.dtype), x.shape)
        dyt = tf.placeholder(tf.as_dtype(x.dtype), dy.shape)
        df = tf.nn.depthwise_conv2d_native_backprop_filter(xt, f_shape, dyt, _strides4(stride, fmt), padding,
                                                           data_format=fmt)
    with tf.Session(graph=g, device="opencl") as sess:
        if compute_units:  # the launch plans a GPU's compute units make: many chunks, a second pass
            sess.runtime.info = {**sess.runtime.info, "compute_units": compute_units}
        return sess.run(df, {xt: x, dyt: dy})


@needs_opencl
@pytest.mark.parametrize("x_shape, f_shape, stride, padding, fmt, units", [
    ((4, 3, 16, 16), (3, 3, 3, 1), 1, "SAME", "NCHW", None),
    ((4, 3, 16, 16), (3, 3, 3, 1), 1, "SAME", "NCHW", 132),   # 4 chunks of 256 positions: a second pass
    ((3, 9, 9, 4), (3, 3, 4, 2), 2, "SAME", "NHWC", 132),     # channel multiplier 2, stride 2, odd size
    ((2, 5, 11, 7), (5, 5, 5, 1), 1, "VALID", "NCHW", 8),     # 25 taps (the most one pass keeps)
    ((2, 10, 10, 3), (7, 7, 3, 1), 1, "SAME", "NHWC", None),  # 49 taps: one group per filter element
])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("second_pass", [False, True], ids=["finished-in-kernel", "second-pass"])
def test_the_filter_gradient_equals_the_numpy_reference(x_shape, f_shape, stride, padding, fmt, units, dtype,
                                                        second_pass, monkeypatch):
    if second_pass:  # as on a device without a device-wide fence (an AMD or Intel GPU)
        from tfplus.kernels.opencl import conv
        monkeypatch.setattr(conv, "finishes_splits", lambda rt: False)
    rng = np.random.default_rng(0)
    x = rng.standard_normal(x_shape).astype(dtype)
    y_shape = ref_depthwise(x, np.zeros(f_shape), (stride, stride), padding, fmt).shape
    dy = rng.standard_normal(y_shape).astype(dtype)
    got = _filter_grad(x, f_shape, dy, stride, padding, fmt, units)
    want = ref_depthwise_backprop_filter(x, f_shape, dy, (stride, stride), padding, fmt)
    tol = 1e-12 if dtype == np.float64 else 2e-5
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * np.abs(want).max())


@needs_opencl
@pytest.mark.parametrize("fmt", ["NCHW", "NHWC"])
def test_the_filter_gradient_matches_finite_differences_in_float64(fmt):
    """d/df of sum(depthwise(x, f) * r), many chunks (a GPU's compute units), against central differences of the
    NumPy reference convolution."""
    rng = np.random.default_rng(1)
    x_shape = (3, 2, 16, 16) if fmt == "NCHW" else (3, 16, 16, 2)  # 768 positions: 3 chunks
    f0 = rng.standard_normal((3, 3, 2, 1))
    x = rng.standard_normal(x_shape)
    r = rng.standard_normal(ref_depthwise(x, f0, (1, 1), "SAME", fmt).shape)
    g = tf.Graph()
    with g.as_default():
        f = tf.placeholder(tf.float64, f0.shape)
        y = tf.nn.depthwise_conv2d(tf.constant(x), f, _strides4(1, fmt), "SAME", data_format=fmt)
        (df,) = tf.gradients(tf.reduce_sum(y * tf.constant(r)), [f])
    with tf.Session(graph=g, device="opencl") as sess:
        sess.runtime.info = {**sess.runtime.info, "compute_units": 132}
        got = sess.run(df, {f: f0})
    eps, numeric = 1e-6, np.zeros_like(f0)
    for i in np.ndindex(*f0.shape):
        step = np.zeros_like(f0)
        step[i] = eps
        plus = (ref_depthwise(x, f0 + step, (1, 1), "SAME", fmt) * r).sum()
        minus = (ref_depthwise(x, f0 - step, (1, 1), "SAME", fmt) * r).sum()
        numeric[i] = (plus - minus) / (2 * eps)
    np.testing.assert_allclose(got, numeric, rtol=1e-6, atol=1e-6)
