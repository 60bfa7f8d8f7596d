"""The argmax-byte pool pair (tfplus/ops/argmax_pool_ops.py): the NumPy kernels against MaxPool, MaxPoolGrad and
ReluGrad in float64 (ties, zeros, negative gradients), the opencl kernels against the NumPy ones on PoCL."""
from __future__ import annotations

import numpy as np
import pytest

import tfplus as tf
from tfplus.framework import apply_op
from tfplus.ops.argmax_pool_ops import NO_GRADIENT


def _attrs(fmt: str) -> dict:
    k = [1, 1, 2, 2] if fmt == "NCHW" else [1, 2, 2, 1]
    return {"ksize": k, "strides": k, "padding": "VALID", "data_format": fmt}


def _relu_input(fmt: str, dtype=np.float64) -> np.ndarray:
    """A ReLU's input with ties inside windows (small integers), zeros and windows wholly <= 0; 5 x 3 x 3 windows
    a row, an odd count (the last byte's high nibble unused)."""
    rng = np.random.default_rng(3)
    z = rng.integers(-3, 4, (3, 5, 6, 6)).astype(dtype)
    z[0, 0] = -1.0  # a channel of windows whose maximum is 0 after the ReLU
    return z if fmt == "NCHW" else np.ascontiguousarray(z.transpose(0, 2, 3, 1))


def _run(device: str, z: np.ndarray, g: np.ndarray, fmt: str) -> dict:
    """The pair on `device`, and the plain ops' values (MaxPool, and the gradient at the ReLU's input)."""
    with tf.Graph().as_default():
        zt = tf.constant(z)
        r = tf.nn.relu(zt)
        y, a = apply_op("_MaxPoolArgmax", [r], _attrs(fmt), "pool")
        dx, db = apply_op("_ReluMaxPoolGradArgmax", [tf.constant(g), a], _attrs(fmt), "pool_grad")
        plain = tf.nn.max_pool(r, 2, 2, "VALID", data_format=fmt)
        (want,) = tf.gradients(plain, zt, grad_ys=tf.constant(g))
        with tf.Session(device=device) as sess:
            got = sess.run({"y": y, "a": a, "dx": dx, "db": db, "plain": plain, "want": want})
    return got


@pytest.mark.parametrize("fmt", ["NCHW", "NHWC"])
def test_the_numpy_pair_is_max_pool_and_its_relu_gradient(fmt):
    z = _relu_input(fmt)
    g = np.random.default_rng(4).standard_normal((3, 5, 3, 3) if fmt == "NCHW" else (3, 3, 3, 5))
    got = _run("cpu", z, g, fmt)
    np.testing.assert_array_equal(got["y"], got["plain"])
    y = got["y"] if fmt == "NCHW" else got["y"].transpose(0, 3, 1, 2)  # windows in NCHW order, per row
    per_row = y[0].size
    assert got["a"].dtype == np.uint8 and got["a"].shape == (3, (per_row + 1) // 2)
    a = np.stack([got["a"] & 15, got["a"] >> 4], axis=2).reshape(3, -1)[:, :per_row]
    assert set(np.unique(a)) <= {0, 1, 2, 3, NO_GRADIENT}
    np.testing.assert_array_equal(a == NO_GRADIENT, y.reshape(3, -1) <= 0)
    assert (a == NO_GRADIENT).any() and (a < NO_GRADIENT).any()
    np.testing.assert_array_equal(got["dx"], got["want"])  # ties: the first maximum, as MaxPoolGrad
    axes = (0, 2, 3) if fmt == "NCHW" else (0, 1, 2)
    np.testing.assert_allclose(got["db"], got["want"].sum(axis=axes), rtol=1e-12)


@pytest.mark.parametrize("fmt", ["NCHW", "NHWC"])
def test_the_opencl_pair_matches_numpy(device, fmt):
    z = _relu_input(fmt, np.float32)
    shape = (3, 5, 3, 3) if fmt == "NCHW" else (3, 3, 3, 5)
    g = np.random.default_rng(5).standard_normal(shape).astype(np.float32)
    want, got = _run("cpu", z, g, fmt), _run(device, z, g, fmt)
    for k in ("y", "a", "dx"):
        np.testing.assert_array_equal(got[k], want[k], err_msg=k)
    np.testing.assert_allclose(got["db"], want["db"], rtol=1e-5, atol=1e-6)


def test_the_pair_refuses_windows_that_do_not_tile():
    with tf.Graph().as_default():
        x = tf.placeholder(tf.float32, [2, 3, 5, 4])
        with pytest.raises(ValueError, match="tile the input exactly"):
            apply_op("_MaxPoolArgmax", [x], _attrs("NCHW"), "pool")
        with pytest.raises(ValueError, match="2x2 windows of stride 2"):
            apply_op("_MaxPoolArgmax", [x], {**_attrs("NCHW"), "ksize": [1, 1, 3, 3]}, "pool")
