"""Op-table cases of the fused ops that the graph rewrite makes (tfplus.engine.rewrite): each against the NumPy of the
unfused chain. They are not differentiable (they exist only after autodiff), so no gradient checks."""
from __future__ import annotations

import numpy as np
from cases_nn import conv_attrs, labels, ref_conv, ref_sparse_xent
from optable import Case

from tfplus.framework import apply_op


def _uniform(shape, lo, hi):
    return lambda rng, dt: rng.uniform(lo, hi, shape).astype(dt)


def _act(v, activation):
    return np.maximum(v, 0) if activation == "Relu" else np.clip(v, 0, 6)


def _mask(f, activation):
    return (f > 0) if activation == "Relu" else (f > 0) & (f < 6)


def _channel(fmt, ndim):
    """(the channel axis, the other axes) of a tensor of rank ndim."""
    c = 1 if fmt == "NCHW" else ndim - 1
    return c, tuple(a for a in range(ndim) if a != c)


def _bias_relu(fmt, act, shape, c):
    def ref(x, b):
        axis, _ = _channel(fmt, len(shape))
        return _act(x + b.reshape([-1 if a == axis else 1 for a in range(len(shape))]), act)
    return Case(f"fused_bias_add_{act.lower()}_{fmt.lower()}_{len(shape)}d",
                lambda x, b: apply_op("_FusedBiasAddRelu", [x, b], {"data_format": fmt, "activation": act}, "fused"),
                inputs=[_uniform(shape, -4, 10), (c,)], ref=ref, grad=False)


def _conv_bias_relu(fmt, act, x_shape, f_shape, strides, padding):
    def ref(x, f, b):
        y = ref_conv(x, f, strides, padding, fmt)
        axis, _ = _channel(fmt, 4)
        return _act(y + b.reshape([-1 if a == axis else 1 for a in range(4)]), act)
    attrs = {**conv_attrs(strides, padding, fmt), "activation": act}
    return Case(f"fused_conv2d_bias_{act.lower()}_{fmt.lower()}_{padding.lower()}_s{strides[0]}",
                lambda x, f, b: apply_op("_FusedConv2DBiasRelu", [x, f, b], attrs, "fused"),
                inputs=[x_shape, f_shape, _uniform((f_shape[3],), -1, 2)], ref=ref, grad=False)


def _matmul_bias(act, m, k, n, ta=False, tb=False, tag=""):
    def ref(a, b, bias):
        y = (a.T if ta else a) @ (b.T if tb else b) + bias
        return _act(y, act) if act else y
    attrs = {"transpose_a": ta, "transpose_b": tb, "activation": act}
    return Case(f"fused_matmul_{act.lower() or 'bias'}{tag}",
                lambda a, b, bias: apply_op("_FusedMatMul", [a, b, bias], attrs, "fused"),
                inputs=[(k, m) if ta else (m, k), (n, k) if tb else (k, n), _uniform((n,), -1, 2)], ref=ref,
                grad=False)


def _relu_grad_bias(fmt, act, shape, tag=""):
    def ref(g, f):
        dx = g * _mask(f, act)
        return dx, dx.sum(_channel(fmt, len(shape))[1])
    return Case(f"fused_relu_grad_bias_add_grad_{act.lower()}_{fmt.lower()}_{len(shape)}d{tag}",
                lambda g, f: apply_op("_FusedReluGradBiasAddGrad", [g, f], {"data_format": fmt, "activation": act},
                                      "fused"),
                inputs=[shape, _uniform(shape, -3, 9)], ref=ref, grad=False)


def _l2_loss(shapes, tag):
    def ref(*ts):
        return sum(np.dot(t.ravel(), t.ravel()) / 2 for t in ts)
    return Case(f"fused_l2_loss_{tag}", lambda *ts: apply_op("_FusedL2Loss", [list(ts)], name="fused"),
                inputs=list(shapes), ref=ref, grad=False)


def _xent_mean(rows, cols, label_dtype, tag):
    def ref(x, y):
        loss, backprop = ref_sparse_xent(x, y)
        return loss.mean(), backprop / max(rows, 1)
    return Case(f"fused_sparse_xent_mean_{tag}",
                lambda x, y: apply_op("_FusedSparseXentMean", [x, y], {"Tlabels": y.dtype}, "fused"),
                inputs=[_uniform((rows, cols), -30, 30), labels(rows, cols, label_dtype)], ref=ref, grad=False)


CASES = [
    _bias_relu("NHWC", "Relu", (2, 3, 5, 4), 4),
    _bias_relu("NCHW", "Relu", (2, 3, 4, 5), 3),
    _bias_relu("NHWC", "Relu", (3, 7), 7),       # after a MatMul
    _bias_relu("NCHW", "Relu6", (2, 3, 4, 5), 3),
    _bias_relu("NHWC", "Relu6", (5, 6), 6),
    _conv_bias_relu("NCHW", "Relu", (2, 3, 5, 5), (3, 3, 3, 4), (1, 1), "SAME"),
    _conv_bias_relu("NHWC", "Relu", (2, 6, 5, 3), (3, 3, 3, 5), (2, 2), "VALID"),
    _conv_bias_relu("NCHW", "Relu6", (1, 12, 4, 4), (3, 3, 12, 7), (1, 1), "SAME"),
    _matmul_bias("Relu", 5, 7, 6),
    _matmul_bias("Relu6", 4, 9, 3, ta=True, tag="_ta"),
    _matmul_bias("", 3, 8, 10, tb=True, tag="_tb"),
    _matmul_bias("Relu", 3, 600, 4, tag="_split_k"),  # K split over work-group layers
    _relu_grad_bias("NHWC", "Relu", (2, 3, 5, 4)),
    _relu_grad_bias("NCHW", "Relu", (2, 3, 4, 5)),
    _relu_grad_bias("NHWC", "Relu", (300, 7)),   # more rows than a work-group: the strided loop
    _relu_grad_bias("NCHW", "Relu6", (2, 3, 4, 5)),
    _relu_grad_bias("NHWC", "Relu6", (5, 6)),
    # opencl splits these into chunks whose partial sums a second pass adds: runs longer than a work-group
    # (inner 1024), shorter ones (inner 64: an item's walk crosses images), rows, and more columns than a group
    _relu_grad_bias("NCHW", "Relu", (4, 3, 32, 32), "_long_runs"),
    _relu_grad_bias("NCHW", "Relu6", (64, 2, 8, 8), "_short_runs"),
    _relu_grad_bias("NHWC", "Relu", (600, 7), "_chunked_rows"),
    _relu_grad_bias("NHWC", "Relu", (3, 300), "_wide"),
    _xent_mean(4, 5, np.int32, "small"),
    _xent_mean(600, 10, np.int64, "rows_past_a_work_group"),  # opencl: items take several rows, a tree adds them
    _l2_loss([(3, 3, 2, 4), (4,), (5, 7)], "three"),
    # two launches of 8 tensors or fewer; partial sums of several work-groups
    _l2_loss([(1,), (40, 50), (2, 3), (7,), (3, 3, 3, 8), (1, 1), (9,), (300,), (2, 2, 2), (1000,)], "ten"),
]
