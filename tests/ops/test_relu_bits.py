"""A ReLU's mask as bits (tfplus/ops/relu_bits_ops.py): the NumPy kernels against np.packbits and ReluGrad in
float64 (rows whose elements do not fill whole bytes, zeros, negative gradients), the opencl kernels against the
NumPy ones on PoCL."""
from __future__ import annotations

import numpy as np
import pytest

import tfplus as tf
from tfplus.framework import apply_op


def _features(fmt: str, dtype=np.float64) -> np.ndarray:
    """(3, 5, 3, 3): 45 elements a row, not a whole number of bytes; a few exact zeros."""
    x = np.random.default_rng(6).integers(-4, 5, (3, 5, 3, 3)).astype(dtype)
    return x if fmt == "NCHW" else np.ascontiguousarray(x.transpose(0, 2, 3, 1))


def _run(device: str, x: np.ndarray, g: np.ndarray, fmt: str) -> dict:
    with tf.Graph().as_default():
        xt = tf.constant(x)
        r = tf.nn.relu(xt)
        bits = apply_op("_ReluMaskBits", [r], {}, "bits")
        dx, db = apply_op("_ReluGradBits", [tf.constant(g), bits], {"data_format": fmt}, "relu_grad")
        (want,) = tf.gradients(r, xt, grad_ys=tf.constant(g))
        with tf.Session(device=device) as sess:
            return sess.run({"r": r, "bits": bits, "dx": dx, "db": db, "want": want})


@pytest.mark.parametrize("fmt", ["NCHW", "NHWC"])
def test_the_numpy_bits_are_the_mask_and_give_relu_grad(fmt):
    x = _features(fmt)
    g = np.random.default_rng(7).standard_normal(x.shape)
    got = _run("cpu", x, g, fmt)
    rows = got["r"].reshape(3, -1) > 0
    assert got["bits"].shape == (3, 6) and got["bits"].dtype == np.uint8
    np.testing.assert_array_equal(got["bits"], np.packbits(rows, axis=1, bitorder="little"))
    np.testing.assert_array_equal(got["dx"], got["want"])
    axes = (0, 2, 3) if fmt == "NCHW" else (0, 1, 2)
    np.testing.assert_allclose(got["db"], got["want"].sum(axis=axes), rtol=1e-12)


@pytest.mark.parametrize("fmt", ["NCHW", "NHWC"])
def test_the_opencl_bits_match_numpy(device, fmt):
    x = _features(fmt, np.float32)
    g = np.random.default_rng(8).standard_normal(x.shape).astype(np.float32)
    want, got = _run("cpu", x, g, fmt), _run(device, x, g, fmt)
    for k in ("bits", "dx"):
        np.testing.assert_array_equal(got[k], want[k], err_msg=k)
    np.testing.assert_allclose(got["db"], want["db"], rtol=1e-5, atol=1e-6)


def test_bits_of_another_shape_are_refused():
    with tf.Graph().as_default():
        g = tf.placeholder(tf.float32, [2, 4, 4, 4])
        bits = tf.placeholder(tf.uint8, [2, 3])
        with pytest.raises(ValueError, match="do not match"):
            apply_op("_ReluGradBits", [g, bits], {"data_format": "NCHW"}, "relu_grad")
