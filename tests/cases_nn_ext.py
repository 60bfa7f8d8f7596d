"""Op-table cases for the ops of MobileNet-style and sequence models: LeakyRelu, LRN, FusedBatchNorm(V3) and
their gradients, DepthwiseConv2dNative and both backprops, and the composite conv1d / separable_conv2d. The
references are direct loops or textbook formulas in float64."""
import numpy as np
from cases_nn import _from_nhwc, _to_nhwc, _windows, conv_attrs, ref_conv, uniform
from optable import Case

import tfplus as tf
from tfplus.framework import apply_op

# Float attrs are 32-bit floats (TF's AttrValue), so the references use the float32 value an op sees.
EPS = float(np.float32(1e-3))

def positive(shape, lo=0.5, hi=2.0):
    return uniform(shape, lo, hi)


# -- references ----------------------------------------------------------------------------------------------
def ref_lrn(x, r, bias, alpha, beta):
    x = x.astype(np.float64)
    c = x.shape[-1]
    sq = np.stack([(x[..., max(0, d - r):d + r + 1] ** 2).sum(-1) for d in range(c)], -1)
    return x / (bias + alpha * sq) ** beta


def ref_lrn_grad(g, x, r, bias, alpha, beta):
    """The vector-Jacobian product of ref_lrn, element by element from its definition."""
    x, g = x.astype(np.float64), g.astype(np.float64)
    c = x.shape[-1]
    norm = np.stack([bias + alpha * (x[..., max(0, d - r):d + r + 1] ** 2).sum(-1) for d in range(c)], -1)
    dx = g * norm ** -beta
    for i in range(c):
        for j in range(max(0, i - r), min(c, i + r + 1)):
            dx[..., i] -= 2 * alpha * beta * x[..., i] * g[..., j] * x[..., j] * norm[..., j] ** (-beta - 1)
    return dx


def _axes(fmt):
    return (0, 2, 3) if fmt == "NCHW" else (0, 1, 2)


def _vec(v, fmt):
    return v.reshape(-1, 1, 1) if fmt == "NCHW" else v


def ref_bn_train(x, scale, offset, eps, fmt):
    x = x.astype(np.float64)
    m, v = x.mean(_axes(fmt)), x.var(_axes(fmt))
    return (x - _vec(m, fmt)) / np.sqrt(_vec(v, fmt) + eps) * _vec(scale, fmt) + _vec(offset, fmt), m, v


def ref_bn_infer(x, scale, offset, mean, var, eps, fmt):
    return (x - _vec(mean, fmt)) / np.sqrt(_vec(var, fmt) + eps) * _vec(scale, fmt) + _vec(offset, fmt)


def ref_bn_grad_train(dy, x, scale, eps, fmt):
    """dx, dscale, doffset of ref_bn_train's y by the textbook formulas."""
    x, dy = x.astype(np.float64), dy.astype(np.float64)
    ax = _axes(fmt)
    n = x.size // scale.size
    m, v = x.mean(ax), x.var(ax)
    inv = 1 / np.sqrt(v + eps)
    xhat = (x - _vec(m, fmt)) * _vec(inv, fmt)
    dscale, doffset = (dy * xhat).sum(ax), dy.sum(ax)
    dx = _vec(scale * inv, fmt) * (dy - _vec(doffset / n, fmt) - xhat * _vec(dscale / n, fmt))
    return dx, dscale, doffset


def ref_depthwise(x, f, strides, padding, fmt):
    x = _to_nhwc(x.astype(np.float64), fmt)
    n, h, w, c = x.shape
    kh, kw, _, mult = f.shape
    ho, wo, pt, pl = _windows(h, w, kh, kw, *strides, padding)
    y = np.zeros((n, ho, wo, c, mult))
    for i in range(ho):
        for j in range(wo):
            for a in range(kh):
                for b in range(kw):
                    r, q = i * strides[0] + a - pt, j * strides[1] + b - pl
                    if 0 <= r < h and 0 <= q < w:
                        y[:, i, j] += x[:, r, q, :, None] * f[a, b]
    return _from_nhwc(y.reshape(n, ho, wo, c * mult), fmt)


def _depthwise_jacobian_apply(x_shape, f, dy, strides, padding, fmt):
    """dx of ref_depthwise: scatter each output's gradient back through its taps."""
    n, h, w, c = _to_nhwc(np.zeros(x_shape), fmt).shape
    dy = _to_nhwc(dy.astype(np.float64), fmt)
    kh, kw, _, mult = f.shape
    ho, wo, pt, pl = _windows(h, w, kh, kw, *strides, padding)
    dy = dy.reshape(n, ho, wo, c, mult)
    dx = np.zeros((n, h, w, c))
    for i in range(ho):
        for j in range(wo):
            for a in range(kh):
                for b in range(kw):
                    r, q = i * strides[0] + a - pt, j * strides[1] + b - pl
                    if 0 <= r < h and 0 <= q < w:
                        dx[:, r, q] += (dy[:, i, j] * f[a, b]).sum(-1)
    return _from_nhwc(dx, fmt)


def ref_depthwise_backprop_filter(x, f_shape, dy, strides, padding, fmt):
    x, dy = _to_nhwc(x.astype(np.float64), fmt), _to_nhwc(dy.astype(np.float64), fmt)
    n, h, w, c = x.shape
    kh, kw, _, mult = f_shape
    ho, wo, pt, pl = _windows(h, w, kh, kw, *strides, padding)
    dy = dy.reshape(n, ho, wo, c, mult)
    df = np.zeros(f_shape)
    for i in range(ho):
        for j in range(wo):
            for a in range(kh):
                for b in range(kw):
                    r, q = i * strides[0] + a - pt, j * strides[1] + b - pl
                    if 0 <= r < h and 0 <= q < w:
                        df[a, b] += (x[:, r, q, :, None] * dy[:, i, j]).sum(0)
    return df


def ref_conv1d(x, f, stride, padding, fmt):
    x4 = x[:, None] if fmt == "NWC" else x[:, :, None]
    y = ref_conv(x4, f[None], (1, stride), padding, "NHWC" if fmt == "NWC" else "NCHW")
    return y[:, 0] if fmt == "NWC" else y[:, :, 0]


# -- case builders -------------------------------------------------------------------------------------------
def _four(strides, fmt):
    return conv_attrs(strides, "SAME", fmt)["strides"]


def depthwise_case(name, x_shape, f_shape, strides, padding, fmt):
    return Case(name, lambda x, f: tf.nn.depthwise_conv2d(x, f, _four(strides, fmt), padding, data_format=fmt),
                inputs=[x_shape, f_shape], ref=lambda x, f: ref_depthwise(x, f, strides, padding, fmt))


def depthwise_backprop_input_case(name, x_shape, f_shape, dy_shape, strides, padding, fmt):
    return Case(name, lambda f, dy: tf.nn.depthwise_conv2d_native_backprop_input(
                    x_shape, f, dy, _four(strides, fmt), padding, data_format=fmt),
                inputs=[f_shape, dy_shape],
                ref=lambda f, dy: _depthwise_jacobian_apply(x_shape, f, dy, strides, padding, fmt))


def depthwise_backprop_filter_case(name, x_shape, f_shape, dy_shape, strides, padding, fmt):
    return Case(name, lambda x, dy: tf.nn.depthwise_conv2d_native_backprop_filter(
                    x, f_shape, dy, _four(strides, fmt), padding, data_format=fmt),
                inputs=[x_shape, dy_shape],
                ref=lambda x, dy: ref_depthwise_backprop_filter(x, f_shape, dy, strides, padding, fmt))


def bn_attrs(training, fmt, eps=EPS, factor=1.0):
    return {"epsilon": eps, "exponential_avg_factor": factor, "data_format": fmt, "is_training": training}


def bn_train_case(name, x_shape, fmt, version="FusedBatchNormV3"):
    c = x_shape[1] if fmt == "NCHW" else x_shape[3]

    def build(x, s, o):
        outs = apply_op(version, [x, s, o, np.zeros(0, x.dtype.np), np.zeros(0, x.dtype.np)],
                        dict(bn_attrs(True, fmt), U=x.dtype))
        return outs[0]
    return Case(name, build, inputs=[x_shape, positive((c,)), (c,)],
                ref=lambda x, s, o: ref_bn_train(x, s, o, EPS, fmt)[0])


def bn_train_stats_case(name, x_shape, fmt, factor):
    """Every output of training mode: the moving averages with Bessel's correction and the saved statistics."""
    c = x_shape[1] if fmt == "NCHW" else x_shape[3]

    def build(x, s, o, m, v):
        return apply_op("FusedBatchNormV3", [x, s, o, m, v], dict(bn_attrs(True, fmt, factor=factor), U=x.dtype))

    def ref(x, s, o, m, v):
        y, bm, bv = ref_bn_train(x, s, o, EPS, fmt)
        n = x.size // c
        return (y, (1 - factor) * m + factor * bm, (1 - factor) * v + factor * bv * n / (n - 1), bm, bv,
                np.zeros((), x.dtype))
    return Case(name, build, inputs=[x_shape, positive((c,)), (c,), (c,), positive((c,))], ref=ref, grad=False)


def bn_infer_case(name, x_shape, fmt, version="FusedBatchNormV3"):
    c = x_shape[1] if fmt == "NCHW" else x_shape[3]

    def build(x, s, o, m, v):
        return apply_op(version, [x, s, o, m, v], dict(bn_attrs(False, fmt), U=x.dtype))[:3]
    return Case(name, build, inputs=[x_shape, positive((c,)), (c,), (c,), positive((c,))],
                ref=lambda x, s, o, m, v: (ref_bn_infer(x, s, o, m, v, EPS, fmt), m, v),
                grad=[0, 1, 2])  # as TF, no gradient reaches the moving statistics


def bn_grad_case(name, x_shape, fmt, version="FusedBatchNormGradV3"):
    """The grad op directly, fed the batch statistics a training-mode FusedBatchNorm saves."""
    c = x_shape[1] if fmt == "NCHW" else x_shape[3]

    def build(dy, x, s):
        ax = list(_axes(fmt))
        m, v = tf.reduce_mean(x, ax), tf.reduce_mean(tf.square(x - tf.reduce_mean(x, ax, keepdims=True)), ax)
        extra = [tf.constant(np.zeros((), x.dtype.np))] if version.endswith("V3") else []
        outs = apply_op(version, [dy, x, s, m, v] + extra,
                        {k: a for k, a in dict(bn_attrs(True, fmt), U=x.dtype).items()
                         if k != "exponential_avg_factor"})
        return outs[:3]
    return Case(name, build, inputs=[x_shape, x_shape, positive((c,))],
                ref=lambda dy, x, s: ref_bn_grad_train(dy, x, s, EPS, fmt), grad=False)


def bn_grad_infer_case(name, x_shape, fmt):
    c = x_shape[1] if fmt == "NCHW" else x_shape[3]

    def build(dy, x, s, m, v):
        outs = apply_op("FusedBatchNormGradV3", [dy, x, s, m, v, tf.constant(np.zeros((), x.dtype.np))],
                        {"epsilon": EPS, "data_format": fmt, "is_training": False, "U": x.dtype})
        return outs[:3]

    def ref(dy, x, s, m, v):
        inv = 1 / np.sqrt(v + EPS)
        xhat = (x - _vec(m, fmt)) * _vec(inv, fmt)
        return dy * _vec(s * inv, fmt), (dy * xhat).sum(_axes(fmt)), dy.sum(_axes(fmt))
    return Case(name, build, inputs=[x_shape, x_shape, positive((c,)), (c,), positive((c,))], ref=ref,
                grad=False)


LRN_ARGS = (2, 1.5, float(np.float32(0.3)), 0.75)  # depth_radius, bias, alpha, beta (float attrs: float32)

CASES = [
    # -- LeakyRelu -------------------------------------------------------------------------------------------
    Case("leaky_relu", lambda x: tf.nn.leaky_relu(x, alpha=0.1), inputs=[(3, 4)],
         ref=lambda x: np.where(x > 0, x, np.float32(0.1) * x)),  # alpha: a float32 attr
    Case("leaky_relu_alpha_above_1", lambda x: tf.nn.leaky_relu(x, alpha=1.5), inputs=[(3, 4)],
         ref=lambda x: np.where(x > 0, x, 1.5 * x)),
    Case("leaky_relu_grad", lambda g, x: apply_op("LeakyReluGrad", [g, x], {"alpha": 0.3}),
         inputs=[(3, 4), (3, 4)], ref=lambda g, x: g * np.where(x > 0, 1, np.float32(0.3))),
    # -- LRN -------------------------------------------------------------------------------------------------
    Case("lrn", lambda x: tf.nn.lrn(x, *LRN_ARGS), inputs=[(2, 2, 3, 6)], ref=lambda x: ref_lrn(x, *LRN_ARGS)),
    Case("lrn_radius_past_channels", lambda x: tf.nn.local_response_normalization(x, 5, 1.0, 0.5, 0.5),
         inputs=[(1, 2, 2, 3)], ref=lambda x: ref_lrn(x, 5, 1.0, 0.5, 0.5)),
    Case("lrn_grad", lambda g, x: apply_op("LRNGrad", [g, x, tf.nn.lrn(x, *LRN_ARGS)], dict(zip(
        ("depth_radius", "bias", "alpha", "beta"), LRN_ARGS))), inputs=[(2, 2, 2, 5), (2, 2, 2, 5)],
         ref=lambda g, x: ref_lrn_grad(g, x, *LRN_ARGS), grad=False),
    # -- FusedBatchNorm --------------------------------------------------------------------------------------
    bn_train_case("fused_batch_norm_v3_train_nhwc", (2, 3, 2, 4), "NHWC"),
    bn_train_case("fused_batch_norm_v3_train_nchw", (3, 2, 2, 3), "NCHW"),
    bn_train_case("fused_batch_norm_v1_train_nhwc", (2, 2, 3, 3), "NHWC", "FusedBatchNorm"),
    bn_train_stats_case("fused_batch_norm_v3_stats_avg_factor", (2, 2, 3, 3), "NHWC", float(np.float32(0.3))),
    bn_train_stats_case("fused_batch_norm_v3_stats_nchw", (2, 3, 2, 2), "NCHW", 1.0),
    bn_infer_case("fused_batch_norm_v3_infer_nchw", (2, 3, 2, 2), "NCHW"),
    bn_infer_case("fused_batch_norm_v1_infer_nhwc", (2, 2, 2, 3), "NHWC", "FusedBatchNorm"),
    bn_grad_case("fused_batch_norm_grad_v3_nhwc", (2, 2, 3, 3), "NHWC"),
    bn_grad_case("fused_batch_norm_grad_v3_nchw", (2, 3, 2, 3), "NCHW"),
    bn_grad_case("fused_batch_norm_grad_v1_nhwc", (2, 3, 2, 2), "NHWC", "FusedBatchNormGrad"),
    bn_grad_infer_case("fused_batch_norm_grad_v3_infer_nchw", (2, 3, 2, 2), "NCHW"),
    # opencl sums these in chunks and adds the partial sums in a second pass (fused.py channel_sums)
    bn_train_stats_case("fused_batch_norm_v3_stats_nchw_chunked", (8, 3, 16, 16), "NCHW", float(np.float32(0.3))),
    bn_train_stats_case("fused_batch_norm_v3_stats_nhwc_chunked", (8, 16, 16, 3), "NHWC", 1.0),
    bn_grad_case("fused_batch_norm_grad_v3_nchw_chunked", (8, 3, 16, 16), "NCHW"),
    bn_grad_case("fused_batch_norm_grad_v3_nhwc_chunked", (8, 16, 16, 3), "NHWC"),
    Case("nn_fused_batch_norm", lambda x, s, o: tf.nn.fused_batch_norm(x, s, o, epsilon=EPS),
         inputs=[(2, 3, 3, 2), positive((2,)), (2,)],
         ref=lambda x, s, o: (lambda y, m, v: (y, m, v * 18 / 17))(*ref_bn_train(x, s, o, EPS, "NHWC")),
         grad=False),  # as TF, no gradient flows from the batch statistics; y's is bn_train_case's
    # -- DepthwiseConv2dNative -------------------------------------------------------------------------------
    depthwise_case("depthwise_nhwc_3x3_same", (2, 4, 5, 3), (3, 3, 3, 1), (1, 1), "SAME", "NHWC"),
    depthwise_case("depthwise_nchw_3x3_s2_same_mult2", (2, 2, 5, 4), (3, 3, 2, 2), (2, 2), "SAME", "NCHW"),
    depthwise_case("depthwise_nhwc_2x3_valid_mult3", (1, 4, 5, 2), (2, 3, 2, 3), (1, 2), "VALID", "NHWC"),
    depthwise_backprop_input_case("depthwise_backprop_input_nchw_s2", (2, 2, 5, 5), (3, 3, 2, 2),
                                  (2, 4, 3, 3), (2, 2), "SAME", "NCHW"),
    depthwise_backprop_input_case("depthwise_backprop_input_nhwc_valid", (1, 4, 4, 3), (2, 2, 3, 1),
                                  (1, 3, 3, 3), (1, 1), "VALID", "NHWC"),
    depthwise_backprop_filter_case("depthwise_backprop_filter_nhwc_s2", (2, 5, 4, 2), (3, 3, 2, 2),
                                   (2, 3, 2, 4), (2, 2), "SAME", "NHWC"),
    depthwise_backprop_filter_case("depthwise_backprop_filter_nchw_valid", (1, 3, 4, 4), (2, 3, 3, 1),
                                   (1, 3, 3, 2), (1, 1), "VALID", "NCHW"),
    Case("separable_conv2d_nhwc", lambda x, d, p: tf.nn.separable_conv2d(x, d, p, [1, 1, 1, 1], "SAME"),
         inputs=[(1, 4, 4, 2), (3, 3, 2, 2), (1, 1, 4, 3)],
         ref=lambda x, d, p: ref_conv(ref_depthwise(x, d, (1, 1), "SAME", "NHWC"), p, (1, 1), "VALID")),
    # -- conv1d (ExpandDims + Conv2D + Squeeze) --------------------------------------------------------------
    Case("conv1d_nwc_s2_same", lambda x, f: tf.nn.conv1d(x, f, 2, "SAME"), inputs=[(2, 7, 3), (3, 3, 2)],
         ref=lambda x, f: ref_conv1d(x, f, 2, "SAME", "NWC")),
    Case("conv1d_ncw_valid", lambda x, f: tf.nn.conv1d(x, f, 1, "VALID", data_format="NCW"),
         inputs=[(2, 3, 6), (2, 3, 2)], ref=lambda x, f: ref_conv1d(x, f, 1, "VALID", "NCW")),
]
