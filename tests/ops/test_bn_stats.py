"""Batch norm's training statistics on opencl in one pass (kernels/opencl/fused.cl channel sums MODE 7: the sums
of x - K and (x - K)^2, K each channel's first element; nn.cl bn_stats_finish): three launches a normalization
(the sums, the finish, the apply), the statistics against float64 NumPy, including a channel far from zero whose
first element is far from its mean (the shift's worst case here)."""
from __future__ import annotations

import numpy as np
import pytest
from conftest import needs_opencl

import tfplus as tf


def _stats(x: np.ndarray, fmt: str):
    g = tf.Graph()
    with g.as_default():
        xt = tf.placeholder(tf.float32, x.shape)
        c = x.shape[1 if fmt == "NCHW" else 3]
        outs = tf.nn.fused_batch_norm(xt, tf.ones([c]), tf.zeros([c]), data_format=fmt)
    with tf.Session(graph=g, device="opencl") as sess:
        sess.run(outs, {xt: x})
        rt, launches = sess.runtime, [0]
        run = rt.run

        def counted(*args):
            launches[0] += 1
            return run(*args)
        rt.run = counted
        try:
            got = sess.run(outs, {xt: x})
        finally:
            del rt.run
    return got, launches[0]


@needs_opencl
@pytest.mark.parametrize("fmt", ["NCHW", "NHWC"])
def test_training_statistics_in_one_pass_match_float64(fmt):
    rng = np.random.default_rng(0)
    scale = np.array([1.0, 1e-2, 3.0, 1.0])
    offset = np.array([0.0, 100.0, -5.0, 1e3])
    x = rng.standard_normal((16, 4, 8, 8)) * scale[None, :, None, None] + offset[None, :, None, None]
    x[0, :, 0, 0] += 3 * scale  # each channel's first element, the shift, three deviations from its mean
    x = x.astype(np.float32)
    axes = (0, 2, 3)
    if fmt == "NHWC":
        x, axes = x.transpose(0, 2, 3, 1).copy(), (0, 1, 2)
    (y, mean, var), launches = _stats(x, fmt)
    assert launches == 3
    x64 = x.astype(np.float64)
    n = x64.size // 4
    np.testing.assert_allclose(mean, x64.mean(axes), rtol=1e-6, atol=1e-6)  # channel 0: a mean near 0
    # 1e-5: a plain sum of squares minus the squared sum would be off by ~5e-2 on the channel at 1000
    np.testing.assert_allclose(var, x64.var(axes) * n / (n - 1), rtol=1e-5)
    shape = [1, 4, 1, 1] if fmt == "NCHW" else [1, 1, 1, 4]
    want = (x64 - x64.mean(axes).reshape(shape)) / np.sqrt(x64.var(axes).reshape(shape) + 1e-3)
    np.testing.assert_allclose(y, want, atol=1e-4)
