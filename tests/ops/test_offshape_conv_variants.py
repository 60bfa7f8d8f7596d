"""The GPU's 3x3 conv variants (kernels/opencl/conv.py's GPU_VARIANTS, with the backward folds) on PoCL, on shapes off
Mentee's (issue 37): odd image sizes (7, 9, 33), channel counts no tile divides (3, 5, 17, 65), batches of 1 and 3,
both layouts; a stride-2 conv falls back to the general kernels. A Conv2D + BiasAdd + ReLU training step's output
and gradients against the cpu device's NumPy kernels."""
from __future__ import annotations

import numpy as np
import pytest
from conftest import needs_opencl

import tfplus as tf
from tfplus.kernels.opencl.conv import GPU_VARIANTS

pytestmark = needs_opencl

SHAPES = [  # (batch, height, width, in channels, out channels, format, stride)
    (1, 7, 9, 3, 5, "NHWC", 1), (3, 9, 7, 17, 65, "NHWC", 1), (1, 33, 9, 5, 17, "NCHW", 1),
    (3, 9, 9, 65, 17, "NCHW", 1), (3, 9, 9, 17, 5, "NHWC", 2), (1, 33, 33, 16, 32, "NCHW", 2),
]


@pytest.fixture
def built(monkeypatch):
    """The names of the conv.cl kernels the launchers build."""
    from tfplus.kernels.opencl import conv
    names: list = []
    make = conv.kernel

    def kernel(rt, src, base, *a, **k):
        names.append(base)
        return make(rt, src, base, *a, **k)
    monkeypatch.setattr(conv, "kernel", kernel)
    return names


def _step(device, x0, w0, b0, fmt, stride):
    g = tf.Graph()
    with g.as_default():
        x = tf.placeholder(tf.float32, x0.shape)
        w, b = tf.Variable(w0), tf.Variable(b0)
        strides = [1, 1, stride, stride] if fmt == "NCHW" else [1, stride, stride, 1]
        y = tf.nn.relu(tf.nn.bias_add(tf.nn.conv2d(x, w, strides, "SAME", data_format=fmt), b, data_format=fmt))
        r = np.random.default_rng(5).standard_normal(y.shape.as_list()).astype(np.float32)
        fetches = [y] + tf.gradients(tf.reduce_sum(y * r), [x, w, b])
        init = tf.global_variables_initializer()
    with tf.Session(graph=g, device=device) as s:
        s.run(init)
        return s.run(fetches, {x: x0})


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(str(v) for v in s))
def test_gpu_variants_match_numpy(monkeypatch, built, shape):
    monkeypatch.setenv("TFPLUS_CONV_VARIANTS", ",".join(sorted(GPU_VARIANTS)))
    monkeypatch.setenv("TFPLUS_BACKWARD_FOLDS", "1")
    n, h, w, cin, cout, fmt, stride = shape
    rng = np.random.default_rng(0)
    x0 = rng.standard_normal((n, h, w, cin) if fmt == "NHWC" else (n, cin, h, w)).astype(np.float32)
    w0 = (rng.standard_normal((3, 3, cin, cout)) / np.sqrt(9 * cin)).astype(np.float32)
    b0 = rng.standard_normal(cout).astype(np.float32)
    want = _step("cpu", x0, w0, b0, fmt, stride)
    got = _step("opencl", x0, w0, b0, fmt, stride)
    for k, (a, b) in enumerate(zip(got, want)):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4, err_msg=f"fetch {k}")
    variants = {"conv3", "conv3_halo", "conv3_wgrad", "conv3_wgrad_halo"} & set(built)
    assert variants == ({"conv3_halo", "conv3_wgrad"} if stride == 1 else set()), built
