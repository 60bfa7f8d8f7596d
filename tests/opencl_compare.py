"""The opencl device against the cpu (NumPy) device on one small graph: shared by the opencl kernel tests."""
import numpy as np

import tfplus as tf


def run_both(build, arrays, tol=(1e-4, 1e-4)):
    """Builds `build(*placeholders)` (a list of tensors), runs it on cpu and opencl, compares every output:
    float32 within `tol` (rtol, atol times the largest reference value), float64 within 1e-12, the rest equal."""
    g = tf.Graph()
    with g.as_default():
        phs = [tf.placeholder(tf.as_dtype(a.dtype), a.shape) for a in arrays]
        outs = build(*phs)
    feeds = dict(zip(phs, arrays))
    with tf.Session(graph=g) as s:
        want = s.run(outs, feeds)
    with tf.Session(graph=g, device="opencl") as s:
        got = s.run(outs, feeds)
    for k, (a, b) in enumerate(zip(got, want)):
        assert a.shape == b.shape and a.dtype == b.dtype, (k, a.shape, b.shape, a.dtype, b.dtype)
        if b.dtype.kind == "f":
            rtol, atol = tol if b.dtype == np.float32 else (1e-12, 1e-12)
            np.testing.assert_allclose(a, b, rtol=rtol, atol=atol * max(1.0, float(np.abs(b).max(initial=0))),
                                       err_msg=f"output {k} ({outs[k].op.type})")
        else:
            np.testing.assert_array_equal(a, b, err_msg=f"output {k} ({outs[k].op.type})")
    return got


def conv_layer(x, f, b, dy, fmt):
    """A 3x3 SAME layer as the conv tests run it: conv(x, f); relu(conv(x, f) + b), which the graph rewrite makes
    one _FusedConv2DBiasRelu (the epilogue of conv.cl's 3x3 kernels); the gradients of conv(x, f) . dy."""
    def conv():
        return tf.nn.conv2d(x, f, strides=1, padding="SAME", data_format=fmt)
    y = conv()
    return [y, tf.nn.relu(tf.nn.bias_add(conv(), b, data_format=fmt)), *tf.gradients(y, [x, f], grad_ys=dy)]


def run_conv_shapes(rng, cases):
    """Each (in channels, filter size, stride, padding) of `cases`: an NCHW conv of 8 outputs on 2 images of 8x8,
    its input and filter gradients, on both devices (run_both)."""
    for cin, ks, stride, padding in cases:
        x, f = rng.standard_normal((2, cin, 8, 8)).astype(np.float32), \
            rng.standard_normal((ks, ks, cin, 8)).astype(np.float32)

        def build(x, f, stride=stride, padding=padding):
            y = tf.nn.conv2d(x, f, strides=stride, padding=padding, data_format="NCHW")
            dy = tf.constant(rng.standard_normal(y.shape.as_list()).astype(np.float32))
            return [y, *tf.gradients(y, [x, f], grad_ys=dy)]
        run_both(build, [x, f])


def conv3_arrays(rng, dtype, fmt: str, n: int, h: int, w: int, cin: int, cout: int) -> tuple:
    """Random (input, 3x3 filter, bias, output gradient) of a SAME stride-1 conv in layout `fmt`."""
    def shape(c):
        return (n, c, h, w) if fmt == "NCHW" else (n, h, w, c)
    return (rng.standard_normal(shape(cin)).astype(dtype), rng.standard_normal((3, 3, cin, cout)).astype(dtype),
            rng.standard_normal(cout).astype(dtype), rng.standard_normal(shape(cout)).astype(dtype))
