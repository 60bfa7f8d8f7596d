"""Op-table cases for nn ops (tfplus.ops.nn_ops): conv (both data formats, strides, paddings, odd sizes; the
fast 3x3 paths and the generic one), the fused backward ops, pooling, bias, activations, softmax, losses.
References are direct loops over windows and taps: slow, and obviously right."""
import numpy as np
from optable import Case

import tfplus as tf
from tfplus.framework import apply_op

F64 = ("float32", "float64")


# -- input generators ----------------------------------------------------------------------------------------
def distinct(shape):
    """Distinct values 0.1 apart (no ties in a max window; finite differences never reorder them)."""
    n = int(np.prod(shape))
    return lambda rng, dt: (rng.permutation(n).reshape(shape) * 0.1 - 0.05 * n).astype(dt)


def uniform(shape, lo, hi):
    return lambda rng, dt: rng.uniform(lo, hi, shape).astype(dt)


def labels(n, classes, dtype=np.int32):
    return lambda rng, dt: rng.integers(0, classes, n).astype(dtype)


def prob_rows(shape):
    """Rows that are probability distributions (soft labels)."""
    def make(rng, dt):
        e = np.exp(rng.standard_normal(shape))
        return (e / e.sum(-1, keepdims=True)).astype(dt)
    return make


# -- references ----------------------------------------------------------------------------------------------
def _to_nhwc(a, fmt):
    return a if fmt == "NHWC" else a.transpose(0, 2, 3, 1)


def _from_nhwc(a, fmt):
    return a if fmt == "NHWC" else a.transpose(0, 3, 1, 2)


def _windows(h, w, kh, kw, sh, sw, padding):
    """Output size and top/left padding by TF's rule."""
    if padding == "SAME":
        ho, wo = -(-h // sh), -(-w // sw)
        return ho, wo, max((ho - 1) * sh + kh - h, 0) // 2, max((wo - 1) * sw + kw - w, 0) // 2
    return (h - kh) // sh + 1, (w - kw) // sw + 1, 0, 0


def ref_conv(x, f, strides, padding, fmt="NHWC"):
    x = _to_nhwc(x.astype(np.float64), fmt)
    n, h, w, _ = x.shape
    kh, kw, _, k = f.shape
    ho, wo, pt, pl = _windows(h, w, kh, kw, *strides, padding)
    y = np.zeros((n, ho, wo, k))
    for i in range(ho):
        for j in range(wo):
            for dy in range(kh):
                for dx in range(kw):
                    r, c = i * strides[0] + dy - pt, j * strides[1] + dx - pl
                    if 0 <= r < h and 0 <= c < w:
                        y[:, i, j] += x[:, r, c] @ f[dy, dx]
    return _from_nhwc(y, fmt)


def ref_conv_backprop_input(sizes, f, dy, strides, padding, fmt="NHWC"):
    n, h, w, c = _to_nhwc(np.zeros(sizes), fmt).shape
    dy = _to_nhwc(dy.astype(np.float64), fmt)
    kh, kw = f.shape[:2]
    ho, wo, pt, pl = _windows(h, w, kh, kw, *strides, padding)
    dx = np.zeros((n, h, w, c))
    for i in range(ho):
        for j in range(wo):
            for a in range(kh):
                for b in range(kw):
                    r, q = i * strides[0] + a - pt, j * strides[1] + b - pl
                    if 0 <= r < h and 0 <= q < w:
                        dx[:, r, q] += dy[:, i, j] @ f[a, b].T
    return _from_nhwc(dx, fmt)


def ref_conv_backprop_filter(x, sizes, dy, strides, padding, fmt="NHWC"):
    x, dy = _to_nhwc(x.astype(np.float64), fmt), _to_nhwc(dy.astype(np.float64), fmt)
    n, h, w, _ = x.shape
    kh, kw = sizes[:2]
    ho, wo, pt, pl = _windows(h, w, kh, kw, *strides, padding)
    df = np.zeros(sizes)
    for i in range(ho):
        for j in range(wo):
            for a in range(kh):
                for b in range(kw):
                    r, q = i * strides[0] + a - pt, j * strides[1] + b - pl
                    if 0 <= r < h and 0 <= q < w:
                        df[a, b] += x[:, r, q].T @ dy[:, i, j]
    return df


def _pool_windows(x, k, s, padding, fmt):
    """(i, j, window (N, rows, cols, C) inside the input) for every output position."""
    x = _to_nhwc(x, fmt)
    h, w = x.shape[1:3]
    ho, wo, pt, pl = _windows(h, w, k[0], k[1], s[0], s[1], padding)
    for i in range(ho):
        for j in range(wo):
            r0, c0 = i * s[0] - pt, j * s[1] - pl
            rows = slice(max(r0, 0), min(r0 + k[0], h))
            cols = slice(max(c0, 0), min(c0 + k[1], w))
            yield i, j, rows, cols, x[:, rows, cols]


def _pool_out(x, k, s, padding, fmt):
    x = _to_nhwc(x, fmt)
    ho, wo, _, _ = _windows(x.shape[1], x.shape[2], k[0], k[1], s[0], s[1], padding)
    return np.zeros((x.shape[0], ho, wo, x.shape[3]))


def ref_max_pool(x, k, s, padding, fmt="NHWC"):
    y = _pool_out(x, k, s, padding, fmt)
    for i, j, _, _, win in _pool_windows(x, k, s, padding, fmt):
        y[:, i, j] = win.max(axis=(1, 2))
    return _from_nhwc(y, fmt)


def ref_avg_pool(x, k, s, padding, fmt="NHWC"):
    y = _pool_out(x, k, s, padding, fmt)
    for i, j, _, _, win in _pool_windows(x, k, s, padding, fmt):
        y[:, i, j] = win.mean(axis=(1, 2))
    return _from_nhwc(y, fmt)


def _argmax_hits(x, k, s, padding, fmt):
    """(i, j, n, row, col, c) of every window's first maximum (row-major scan order, as TF)."""
    for i, j, rows, cols, win in _pool_windows(x, k, s, padding, fmt):
        n, wr, wc, c = win.shape
        flat = win.transpose(0, 3, 1, 2).reshape(n, c, -1).argmax(-1)
        for b in range(n):
            for ch in range(c):
                yield i, j, b, rows.start + flat[b, ch] // wc, cols.start + flat[b, ch] % wc, ch


def ref_max_pool_grad(x, g, k, s, padding, fmt="NHWC"):
    gn = _to_nhwc(g, fmt)
    dx = np.zeros(_to_nhwc(x, fmt).shape)
    for i, j, b, r, c, ch in _argmax_hits(x, k, s, padding, fmt):
        dx[b, r, c, ch] += gn[b, i, j, ch]
    return _from_nhwc(dx, fmt)


def ref_max_pool_grad_grad(x, g, k, s, padding, fmt="NHWC"):
    gn = _to_nhwc(g, fmt)
    out = _pool_out(x, k, s, padding, fmt)
    for i, j, b, r, c, ch in _argmax_hits(x, k, s, padding, fmt):
        out[b, i, j, ch] = gn[b, r, c, ch]
    return _from_nhwc(out, fmt)


def ref_avg_pool_grad(sizes, g, k, s, padding, fmt="NHWC"):
    x = np.zeros(sizes)
    gn = _to_nhwc(g, fmt)
    dx = np.zeros(_to_nhwc(x, fmt).shape)
    for i, j, rows, cols, win in _pool_windows(x, k, s, padding, fmt):
        dx[:, rows, cols] += gn[:, i, j][:, None, None] / (win.shape[1] * win.shape[2])
    return _from_nhwc(dx, fmt)


def ref_log_softmax(x):
    x = x.astype(np.float64)
    z = x - x.max(-1, keepdims=True)
    return z - np.log(np.exp(z).sum(-1, keepdims=True))


def ref_softmax(x):
    return np.exp(ref_log_softmax(x))


def ref_sparse_xent(logits, lab):
    lsm = ref_log_softmax(logits)
    onehot = np.eye(logits.shape[1])[lab]
    return -lsm[np.arange(len(lab)), lab], np.exp(lsm) - onehot


def ref_xent(logits, lab):
    lsm = ref_log_softmax(logits)
    return -(lab * lsm).sum(-1), np.exp(lsm) - lab


def sigmoid(x):
    return 1 / (1 + np.exp(-x))


# -- helpers building the fused backward ops directly --------------------------------------------------------
def conv_attrs(strides, padding, fmt):
    s = [1, 1, *strides] if fmt == "NCHW" else [1, *strides, 1]
    return {"strides": s, "padding": padding, "data_format": fmt, "dilations": [1, 1, 1, 1]}


def pool_attrs(k, s, padding, fmt):
    four = (lambda v: [1, 1, *v]) if fmt == "NCHW" else (lambda v: [1, *v, 1])
    return {"ksize": four(k), "strides": four(s), "padding": padding, "data_format": fmt}


def conv_case(name, x_shape, f_shape, strides, padding, fmt, **kw):
    return Case(name, lambda x, f: tf.nn.conv2d(x, f, [1, *strides, 1] if fmt == "NHWC" else [1, 1, *strides],
                                                padding, data_format=fmt),
                inputs=[x_shape, f_shape], ref=lambda x, f: ref_conv(x, f, strides, padding, fmt), **kw)


def backprop_input_case(name, x_shape, f_shape, dy_shape, strides, padding, fmt, **kw):
    four = conv_attrs(strides, padding, fmt)["strides"]

    def build(f, dy):
        return tf.nn.conv2d_backprop_input(x_shape, f, dy, four, padding, data_format=fmt)
    return Case(name, build,
                inputs=[f_shape, dy_shape],
                ref=lambda f, dy: ref_conv_backprop_input(x_shape, f, dy, strides, padding, fmt), **kw)


def backprop_filter_case(name, x_shape, f_shape, dy_shape, strides, padding, fmt, **kw):
    four = conv_attrs(strides, padding, fmt)["strides"]

    def build(x, dy):
        return tf.nn.conv2d_backprop_filter(x, f_shape, dy, four, padding, data_format=fmt)
    return Case(name, build,
                inputs=[x_shape, dy_shape],
                ref=lambda x, dy: ref_conv_backprop_filter(x, f_shape, dy, strides, padding, fmt), **kw)


def pool_case(name, op, x_shape, k, s, padding, fmt, ref, inputs=None):
    wrapper = tf.nn.max_pool if op == "max" else tf.nn.avg_pool
    four = pool_attrs(k, s, padding, fmt)
    return Case(name, lambda x: wrapper(x, four["ksize"], four["strides"], padding, data_format=fmt),
                inputs=inputs or [x_shape], ref=lambda x: ref(x, k, s, padding, fmt))


def max_pool_grad_case(name, x_shape, k, s, padding, fmt):
    a = pool_attrs(k, s, padding, fmt)
    y_shape = tuple(_from_nhwc(_pool_out(np.zeros(x_shape), k, s, padding, fmt), fmt).shape)

    def pool(x):
        return tf.nn.max_pool(x, a["ksize"], a["strides"], padding, fmt)
    return Case(name, lambda x, g: apply_op("MaxPoolGrad", [x, pool(x), g], a),
                inputs=[distinct(x_shape), y_shape],
                ref=lambda x, g: ref_max_pool_grad(x, g, k, s, padding, fmt))


def max_pool_grad_grad_case(name, x_shape, k, s, padding, fmt):
    a = pool_attrs(k, s, padding, fmt)

    def pool(x):
        return tf.nn.max_pool(x, a["ksize"], a["strides"], padding, fmt)
    return Case(name, lambda x, g: apply_op("MaxPoolGradGrad", [x, pool(x), g], a),
                inputs=[distinct(x_shape), x_shape],
                ref=lambda x, g: ref_max_pool_grad_grad(x, g, k, s, padding, fmt))


def avg_pool_grad_case(name, x_shape, k, s, padding, fmt):
    a = pool_attrs(k, s, padding, fmt)
    y_shape = tuple(_from_nhwc(_pool_out(np.zeros(x_shape), k, s, padding, fmt), fmt).shape)
    return Case(name, lambda g: apply_op("AvgPoolGrad", [tf.constant(np.array(x_shape, np.int32)), g],
                                         dict(a, T=g.dtype)),
                inputs=[y_shape], ref=lambda g: ref_avg_pool_grad(x_shape, g, k, s, padding, fmt))


CASES = [
    # -- Conv2D: the fast path (NCHW, 3x3, stride 1, SAME) and the generic one -------------------------------
    conv_case("conv2d_nchw_3x3_same", (2, 3, 5, 5), (3, 3, 3, 4), (1, 1), "SAME", "NCHW"),
    conv_case("conv2d_nchw_3x3_same_odd", (2, 2, 7, 5), (3, 3, 2, 3), (1, 1), "SAME", "NCHW"),
    conv_case("conv2d_nchw_3x3_same_12ch", (2, 12, 3, 4), (3, 3, 12, 2), (1, 1), "SAME", "NCHW"),
    conv_case("conv2d_nhwc_3x3_same", (2, 5, 4, 3), (3, 3, 3, 2), (1, 1), "SAME", "NHWC"),
    conv_case("conv2d_nhwc_2x2_s2_same_odd", (2, 7, 5, 3), (2, 2, 3, 2), (2, 2), "SAME", "NHWC"),
    conv_case("conv2d_nchw_1x3_s2_valid_odd", (2, 3, 7, 5), (1, 3, 3, 2), (2, 2), "VALID", "NCHW"),
    conv_case("conv2d_nchw_3x3_s2_same", (2, 2, 6, 6), (3, 3, 2, 2), (2, 2), "SAME", "NCHW"),
    conv_case("conv2d_nhwc_3x3_s12_valid", (2, 5, 6, 2), (3, 3, 2, 2), (1, 2), "VALID", "NHWC"),
    # -- the fused backward ops, with their own (second-order) gradients -------------------------------------
    backprop_input_case("conv2d_backprop_input_nchw_3x3", (2, 3, 5, 5), (3, 3, 3, 2), (2, 2, 5, 5), (1, 1),
                        "SAME", "NCHW"),
    backprop_input_case("conv2d_backprop_input_nchw_3x3_12ch", (2, 2, 3, 4), (3, 3, 2, 12), (2, 12, 3, 4),
                        (1, 1), "SAME", "NCHW"),
    backprop_input_case("conv2d_backprop_input_nhwc_s2_odd", (2, 5, 7, 2), (3, 3, 2, 3), (2, 3, 4, 3), (2, 2),
                        "SAME", "NHWC"),
    backprop_input_case("conv2d_backprop_input_nchw_2x2_valid", (2, 2, 5, 4), (2, 2, 2, 3), (2, 3, 2, 2),
                        (2, 2), "VALID", "NCHW"),
    backprop_filter_case("conv2d_backprop_filter_nchw_3x3", (2, 3, 5, 5), (3, 3, 3, 2), (2, 2, 5, 5), (1, 1),
                         "SAME", "NCHW"),
    backprop_filter_case("conv2d_backprop_filter_nchw_3x3_odd", (2, 2, 5, 7), (3, 3, 2, 2), (2, 2, 5, 7),
                         (1, 1), "SAME", "NCHW"),
    backprop_filter_case("conv2d_backprop_filter_nchw_3x3_12ch", (2, 12, 3, 3), (3, 3, 12, 2), (2, 2, 3, 3),
                         (1, 1), "SAME", "NCHW"),
    backprop_filter_case("conv2d_backprop_filter_nhwc_s2_odd", (2, 5, 7, 2), (3, 3, 2, 3), (2, 3, 4, 3),
                         (2, 2), "SAME", "NHWC"),
    backprop_filter_case("conv2d_backprop_filter_nhwc_1x3_valid", (2, 4, 5, 2), (1, 3, 2, 2), (2, 4, 3, 2),
                         (1, 1), "VALID", "NHWC"),
    # -- bias ------------------------------------------------------------------------------------------------
    Case("bias_add_nhwc", lambda x, b: tf.nn.bias_add(x, b), inputs=[(2, 3, 4), (4,)],
         ref=lambda x, b: x + b),
    Case("bias_add_nchw", lambda x, b: tf.nn.bias_add(x, b, data_format="NCHW"), inputs=[(2, 3, 2, 2), (3,)],
         ref=lambda x, b: x + b[:, None, None]),
    Case("bias_add_grad_nhwc", lambda g: apply_op("BiasAddGrad", [g], {"data_format": "NHWC"}),
         inputs=[(2, 3, 4)], ref=lambda g: g.sum((0, 1))),
    Case("bias_add_grad_nchw", lambda g: apply_op("BiasAddGrad", [g], {"data_format": "NCHW"}),
         inputs=[(2, 3, 2, 2)], ref=lambda g: g.sum((0, 2, 3))),
    # -- activations and their fused gradients ---------------------------------------------------------------
    Case("relu", lambda x: tf.nn.relu(x), inputs=[(3, 4)], ref=lambda x: np.maximum(x, 0)),
    Case("relu_grad", lambda g, x: apply_op("ReluGrad", [g, x]), inputs=[(3, 4), (3, 4)],
         ref=lambda g, x: g * (x > 0)),
    Case("relu6", lambda x: tf.nn.relu6(x), inputs=[uniform((3, 4), -3, 9)], ref=lambda x: np.clip(x, 0, 6)),
    Case("relu6_grad", lambda g, x: apply_op("Relu6Grad", [g, x]), inputs=[(3, 4), uniform((3, 4), -3, 9)],
         ref=lambda g, x: g * ((x > 0) & (x < 6))),
    Case("elu", lambda x: tf.nn.elu(x), inputs=[(3, 4)], ref=lambda x: np.where(x > 0, x, np.expm1(np.minimum(x, 0)))),
    Case("elu_large", lambda x: tf.nn.elu(x), inputs=[uniform((6,), -100, 100)],
         ref=lambda x: np.where(x > 0, x, np.expm1(np.minimum(x, 0))), grad=False),
    Case("elu_grad", lambda g, y: apply_op("EluGrad", [g, y]), inputs=[(3, 4), (3, 4)],
         ref=lambda g, y: g * np.where(y > 0, 1, y + 1)),
    Case("softplus", lambda x: tf.nn.softplus(x), inputs=[(3, 4)], ref=lambda x: np.logaddexp(0, x)),
    Case("softplus_large", lambda x: tf.nn.softplus(x), inputs=[uniform((6,), -100, 100)],
         ref=lambda x: np.logaddexp(0, x), grad=False),
    Case("softplus_grad", lambda g, x: apply_op("SoftplusGrad", [g, x]), inputs=[(3, 4), (3, 4)],
         ref=lambda g, x: g / (1 + np.exp(-x))),
    Case("sigmoid", lambda x: tf.nn.sigmoid(x), inputs=[(3, 4)], ref=sigmoid),
    Case("sigmoid_large", lambda x: tf.nn.sigmoid(x), inputs=[uniform((6,), -100, 100)], ref=sigmoid,
         grad=False),
    Case("sigmoid_grad", lambda y, dy: apply_op("SigmoidGrad", [y, dy]), inputs=[(3, 4), (3, 4)],
         ref=lambda y, dy: dy * y * (1 - y)),
    Case("tanh", lambda x: tf.nn.tanh(x), inputs=[(3, 4)], ref=np.tanh),
    Case("tanh_grad", lambda y, dy: apply_op("TanhGrad", [y, dy]), inputs=[(3, 4), (3, 4)],
         ref=lambda y, dy: dy * (1 - y * y)),
    # -- softmax and losses ----------------------------------------------------------------------------------
    Case("softmax", lambda x: tf.nn.softmax(x), inputs=[(3, 5)], ref=ref_softmax),
    Case("softmax_rank3_large", lambda x: tf.nn.softmax(x), inputs=[uniform((2, 2, 4), 500, 900)],
         ref=ref_softmax, grad=False),
    Case("log_softmax", lambda x: tf.nn.log_softmax(x), inputs=[(3, 5)], ref=ref_log_softmax),
    Case("sparse_xent", lambda x, y: tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=x),
         inputs=[(4, 5), labels(4, 5)], ref=lambda x, y: ref_sparse_xent(x, y)[0]),
    Case("sparse_xent_int64_both_outputs",
         lambda x, y: apply_op("SparseSoftmaxCrossEntropyWithLogits", [x, y], {"Tlabels": y.dtype}),
         inputs=[uniform((3, 4), -300, 300), labels(3, 4, np.int64)], ref=ref_sparse_xent, grad=False),
    Case("softmax_xent_v2", lambda x, y: tf.nn.softmax_cross_entropy_with_logits_v2(labels=y, logits=x),
         inputs=[(3, 5), prob_rows((3, 5))], ref=lambda x, y: ref_xent(x, y)[0]),
    Case("softmax_xent_v1", lambda x, y: tf.nn.softmax_cross_entropy_with_logits(labels=y, logits=x),
         inputs=[(3, 5), prob_rows((3, 5))], ref=lambda x, y: ref_xent(x, y)[0], grad=[0]),
    Case("softmax_xent_both_outputs", lambda x, y: apply_op("SoftmaxCrossEntropyWithLogits", [x, y]),
         inputs=[(3, 4), prob_rows((3, 4))], ref=ref_xent),
    Case("l2_loss", lambda x: tf.nn.l2_loss(x), inputs=[(3, 4)],
         ref=lambda x: (x.astype(np.float64) ** 2).sum() / 2),
    Case("in_top_k", lambda p, t: tf.nn.in_top_k(p, t, 2), inputs=[distinct((4, 5)), labels(4, 5)],
         ref=lambda p, t: (p > p[np.arange(4), t][:, None]).sum(1) < 2, grad=False, dtypes=("float32",)),
    # -- pooling ---------------------------------------------------------------------------------------------
    pool_case("max_pool_nchw_2x2", "max", None, (2, 2), (2, 2), "VALID", "NCHW", ref_max_pool,
              inputs=[distinct((2, 2, 4, 6))]),
    pool_case("max_pool_nhwc_2x2_same_odd", "max", None, (2, 2), (2, 2), "SAME", "NHWC", ref_max_pool,
              inputs=[distinct((2, 5, 3, 2))]),
    pool_case("max_pool_nchw_3x3_s2_same", "max", None, (3, 3), (2, 2), "SAME", "NCHW", ref_max_pool,
              inputs=[distinct((1, 2, 5, 6))]),
    max_pool_grad_case("max_pool_grad_nchw_2x2", (2, 2, 4, 4), (2, 2), (2, 2), "VALID", "NCHW"),
    max_pool_grad_case("max_pool_grad_nhwc_3x3_s2_same", (1, 5, 5, 2), (3, 3), (2, 2), "SAME", "NHWC"),
    max_pool_grad_grad_case("max_pool_grad_grad_nchw_2x2", (2, 2, 4, 4), (2, 2), (2, 2), "VALID", "NCHW"),
    max_pool_grad_grad_case("max_pool_grad_grad_nhwc_3x2_s1", (1, 4, 5, 2), (3, 2), (1, 1), "SAME", "NHWC"),
    pool_case("avg_pool_nhwc_2x2", "avg", (2, 4, 4, 3), (2, 2), (2, 2), "VALID", "NHWC", ref_avg_pool),
    pool_case("avg_pool_nchw_3x3_s2_same_odd", "avg", (2, 2, 5, 7), (3, 3), (2, 2), "SAME", "NCHW",
              ref_avg_pool),
    pool_case("avg_pool_nhwc_2x3_s1_same", "avg", (1, 4, 5, 2), (2, 3), (1, 1), "SAME", "NHWC", ref_avg_pool),
    avg_pool_grad_case("avg_pool_grad_nchw_3x3_s2_same", (2, 2, 5, 5), (3, 3), (2, 2), "SAME", "NCHW"),
    avg_pool_grad_case("avg_pool_grad_nhwc_2x2", (2, 4, 4, 2), (2, 2), (2, 2), "VALID", "NHWC"),
]
