"""tf.nn beyond the op table: the fast conv path against the generic one, declared workspaces, error messages,
pooling ties, dropout, zero_fraction and moments."""
import numpy as np
import pytest
from cases_nn import ref_conv, ref_conv_backprop_filter, ref_conv_backprop_input, ref_max_pool_grad

import tfplus as tf
from tfplus import errors
from tfplus.kernels.numpy import conv, nn
from tfplus.registry import WORKSPACES, TensorSpec, find_kernel

NCHW_SAME = {"strides": [1, 1, 1, 1], "padding": "SAME", "data_format": "NCHW", "dilations": [1, 1, 1, 1]}


class RecordingCtx:
    """A kernel context that hands out NaN-filled scratch (reads of unwritten scratch show) and records it."""

    def __init__(self):
        self.requests = []

    def workspace(self, shape, dtype):
        self.requests.append((tuple(shape), dtype))
        return np.full(shape, np.nan, dtype.np)


def _conv_problem(rng, n, c, k, h, w, dtype):
    x = rng.standard_normal((n, c, h, w)).astype(dtype)
    f = rng.standard_normal((3, 3, c, k)).astype(dtype)
    dy = rng.standard_normal((n, k, h, w)).astype(dtype)
    return x, f, dy


def _passes(path, x, f, dy):
    """(forward, input gradient, filter gradient) computed by one path: 'winograd', 'winograd4', 'shift' or
    'generic'."""
    y, dx, df = np.empty_like(dy), np.empty_like(x), np.empty_like(f)
    ctx = RecordingCtx()
    (_, c, h, w), k, dtype = x.shape, f.shape[3], tf.as_dtype(x.dtype)
    forward = conv._shared(ctx, path, "forward", f, c, k, h, w, dtype) if path != "generic" else None
    backward = conv._shared(ctx, path, "forward", conv._flipped(f), k, c, h, w, dtype) if path != "generic" else None
    filter_grad = conv._shared(ctx, path, "filter", None, c, k, h, w, dtype) if path != "generic" else None
    if path in conv._TILE:
        r = conv._TILE[path]
        conv._wino_conv(ctx, x, forward, y, r=r)
        conv._wino_conv(ctx, dy, backward, dx, r=r)
        conv._wino_backprop_filter(ctx, x, dy, df, filter_grad, r=r)
    elif path == "shift":
        conv._shift_conv(ctx, x, forward, y)
        conv._shift_conv(ctx, dy, backward, dx)
        conv._shift_backprop_filter(ctx, x, dy, df, filter_grad)
    else:
        conv._conv2d_generic(ctx, x, f, y, NCHW_SAME)
        conv._conv2d_backprop_input_generic(ctx, f, dy, dx, NCHW_SAME)
        conv._conv2d_backprop_filter_generic(ctx, x, dy, df, NCHW_SAME)
    return y, dx, df


# Mentee's layers at batch 4, plus odd and tiny images (partial Winograd tiles) and odd channel counts.
SHAPES = [(4, 3, 32, 32, 32), (4, 32, 32, 32, 32), (4, 32, 64, 16, 16), (4, 64, 64, 16, 16),
          (4, 64, 128, 8, 8), (3, 5, 7, 9, 7), (5, 2, 3, 1, 1), (2, 4, 3, 2, 5), (7, 3, 2, 6, 3)]


# Each path's float32 results against the generic path's, as a fraction of the largest: F(4x4)'s transforms
# (factors of 4 to 8, and 1/6) round ~10x more than F(2x2)'s or a GEMM's (test_winograd4_float32_error).
FLOAT32_ERROR = {"winograd": 2e-6, "winograd4": 2e-5, "shift": 2e-6}


@pytest.mark.parametrize("path", ["winograd", "winograd4", "shift"])
@pytest.mark.parametrize("n,c,k,h,w", SHAPES)
def test_fast_conv_matches_generic(path, n, c, k, h, w):
    rng = np.random.default_rng(n * 1000 + c * 10 + h)
    x, f, dy = _conv_problem(rng, n, c, k, h, w, np.float32)
    for what, a, b in zip(("forward", "input gradient", "filter gradient"), _passes(path, x, f, dy),
                          _passes("generic", x, f, dy)):
        scale = np.abs(b).max()
        np.testing.assert_allclose(a, b, rtol=0, atol=FLOAT32_ERROR[path] * scale,
                                   err_msg=f"{path} {what} {(n, c, k, h, w)}")


@pytest.mark.parametrize("path", ["winograd", "winograd4", "shift"])
def test_fast_conv_float64_is_exact(path):
    for c, h, w in ((4, 7, 6), (12, 7, 6), (4, 9, 11)):  # the shift path: 9 taps in its columns for few channels
        x, f, dy = _conv_problem(np.random.default_rng(c + h), 3, c, 5, h, w, np.float64)
        for a, b in zip(_passes(path, x, f, dy), _passes("generic", x, f, dy)):
            np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)


def test_winograd4_float32_error():
    """F(4x4, 3x3) in float32 against the float64 reference on Mentee's conv2-5 at real scale (ReLU outputs in,
    He-normal filters, gradients of 1e-3): within 1e-5 of each result's largest value (measured 3-8e-6, F(2x2)
    and the shift path 2-6e-7), and every filter and input gradient within the op table's float32 tolerance
    (1e-5 relative and absolute; the forward's outputs near zero are up to 2.2x over it, measured)."""
    for c, k, h in ((32, 32, 32), (32, 64, 16), (64, 64, 16), (64, 128, 8)):
        rng = np.random.default_rng(c + k + h)
        x = np.maximum(rng.standard_normal((2, c, h, h)), 0)
        f = rng.standard_normal((3, 3, c, k)) * np.sqrt(2 / (9 * c))
        dy = rng.standard_normal((2, k, h, h)) * 1e-3
        got = _passes("winograd4", x.astype(np.float32), f.astype(np.float32), dy.astype(np.float32))
        for what, a, b in zip(("forward", "input gradient", "filter gradient"), got, _passes("generic", x, f, dy)):
            np.testing.assert_allclose(a, b, rtol=0, atol=1e-5 * np.abs(b).max(), err_msg=f"{what} {(c, k, h)}")
            if what != "forward":
                np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5, err_msg=f"{what} {(c, k, h)}")


def test_winograd4_gradients_match_finite_differences():
    """Conv2D of 32 into 32 channels on 8x8 images (F(4x4)'s path) in a float64 graph: the directional
    derivatives of a weighted sum of its output along random directions of x and f, by tf.gradients and by
    central differences."""
    assert conv._path(32, 32, 8, 8) == "winograd4"
    rng = np.random.default_rng(5)
    xv, fv = rng.standard_normal((2, 32, 8, 8)), rng.standard_normal((3, 3, 32, 32)) * 0.1
    g = tf.Graph()
    with g.as_default():
        x, f = tf.placeholder(tf.float64, xv.shape), tf.placeholder(tf.float64, fv.shape)
        y = tf.nn.conv2d(x, f, [1, 1, 1, 1], "SAME", data_format="NCHW")
        loss = tf.reduce_sum(tf.tanh(y) * tf.constant(rng.standard_normal((2, 32, 8, 8))))
        grads = tf.gradients(loss, [x, f])
        with tf.Session(graph=g) as sess:
            gx, gf = sess.run(grads, {x: xv, f: fv})
            for _ in range(3):
                vx, vf = rng.standard_normal(xv.shape), rng.standard_normal(fv.shape)
                eps = 1e-5
                plus = sess.run(loss, {x: xv + eps * vx, f: fv + eps * vf})
                minus = sess.run(loss, {x: xv - eps * vx, f: fv - eps * vf})
                np.testing.assert_allclose((plus - minus) / (2 * eps), (gx * vx).sum() + (gf * vf).sum(), rtol=1e-5)


def test_fast_path_choice():
    assert conv._path(64, 128, 8, 8) == "winograd4" and conv._path(128, 64, 8, 8) == "winograd4"
    assert conv._path(3, 32, 32, 32) == "shift" and conv._path(16, 64, 16, 16) == "shift"
    assert conv._path(32, 32, 32, 32) == "winograd4" and conv._path(32, 64, 16, 16) == "winograd4"
    # F(4x4)'s tiles where they take fewer multiplies than F(2x2)'s: not on 6x6 (a tie) or 2x2 images
    assert conv._path(64, 64, 6, 6) == "winograd" and conv._path(64, 64, 2, 2) == "winograd"
    assert conv._path(64, 64, 4, 4) == "winograd4" and conv._path(64, 64, 7, 6) == "winograd4"
    assert conv.Shift.of(32, 32, 3).taps == 9 and conv.Shift.of(32, 32, 32).taps == 3


def test_fast_path_is_taken_for_nchw_3x3_same_only():
    assert conv.is_fast((1, 3, 8, 8), (3, 3, 3, 4), NCHW_SAME)
    for change in ({"data_format": "NHWC"}, {"padding": "VALID"}, {"strides": [1, 1, 2, 2]}):
        assert not conv.is_fast((1, 3, 8, 8), (3, 3, 3, 4), dict(NCHW_SAME, **change))
    assert not conv.is_fast((1, 3, 8, 8), (5, 5, 3, 4), NCHW_SAME)


@pytest.mark.parametrize("attrs,x_shape,f_shape", [
    (dict(NCHW_SAME, padding="VALID"), (3, 3, 12, 11), (5, 5, 3, 6)),                        # LeNet's conv1
    (NCHW_SAME, (3, 6, 5, 4), (1, 1, 6, 7)),                                                   # pointwise
    (NCHW_SAME, (3, 2, 6, 7), (5, 4, 2, 3)),                                                   # SAME, rows
    (dict(NCHW_SAME, strides=[1, 1, 2, 3]), (3, 4, 9, 8), (3, 2, 4, 5)),                       # padded, strided
    (dict(NCHW_SAME, data_format="NHWC", strides=[1, 2, 1, 1]), (3, 7, 6, 4), (4, 3, 4, 2)),  # NHWC, padded
])
@pytest.mark.parametrize("divisor", [1, 10 ** 9])
def test_generic_conv_float64_matches_the_reference(attrs, x_shape, f_shape, divisor):
    """The generic path in one chunk and in one image a chunk (a memory plan's scratch divisor): the forward and
    both gradients against the direct loops of tests/cases_nn.py in float64."""
    attrs = dict(attrs, **{conv.SCRATCH_DIVISOR_ATTR: divisor})
    fmt, rng = attrs["data_format"], np.random.default_rng(divisor)
    strides = [s for i, s in enumerate(attrs["strides"]) if i in ((1, 2) if fmt == "NHWC" else (2, 3))]
    x, f = rng.standard_normal(x_shape), rng.standard_normal(f_shape)
    y = np.empty(conv._out_shape(x_shape, f_shape, attrs))
    dy = rng.standard_normal(y.shape)
    dx, df = np.empty_like(x), np.empty_like(f)
    conv._conv2d_generic(RecordingCtx(), x, f, y, attrs)
    conv._conv2d_backprop_input_generic(RecordingCtx(), f, dy, dx, attrs)
    conv._conv2d_backprop_filter_generic(RecordingCtx(), x, dy, df, attrs)
    padding = attrs["padding"]
    np.testing.assert_allclose(y, ref_conv(x, f, strides, padding, fmt), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(dx, ref_conv_backprop_input(x_shape, f, dy, strides, padding, fmt), rtol=1e-12,
                               atol=1e-12)
    np.testing.assert_allclose(df, ref_conv_backprop_filter(x, f_shape, dy, strides, padding, fmt), rtol=1e-12,
                               atol=1e-12)


def test_generic_conv_on_rows_reads_a_strided_input():
    """The stride-1 NCHW forward reads whole rows of the flat image (conv._on_rows), across each row's end: an
    input whose rows do not follow each other (a column slice) must give the same results."""
    attrs = dict(NCHW_SAME, padding="VALID")
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 3, 9, 11))[..., :8]
    f = rng.standard_normal((3, 2, 3, 4))
    y = np.empty(conv._out_shape(x.shape, f.shape, attrs))
    dy = rng.standard_normal(y.shape)
    df = np.empty_like(f)
    assert conv._on_rows(conv.geometry(x.shape, f.shape, y.shape, attrs), "forward", "NCHW")
    conv._conv2d_generic(RecordingCtx(), x, f, y, attrs)
    conv._conv2d_backprop_filter_generic(RecordingCtx(), x, dy, df, attrs)
    np.testing.assert_allclose(y, ref_conv(x, f, [1, 1], "VALID", "NCHW"), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(df, ref_conv_backprop_filter(x, f.shape, dy, [1, 1], "VALID", "NCHW"), rtol=1e-12,
                               atol=1e-12)


@pytest.mark.parametrize("attrs,x_shape,f_shape", [
    (NCHW_SAME, (5, 3, 7, 6), (3, 3, 3, 4)),                                                   # shift, 9 taps
    (NCHW_SAME, (5, 12, 7, 6), (3, 3, 12, 4)),                                                 # shift, 3 taps
    (NCHW_SAME, (3, 64, 5, 6), (3, 3, 64, 64)),                                                # winograd
    (NCHW_SAME, (3, 32, 9, 7), (3, 3, 32, 32)),                                                # winograd4
    (dict(NCHW_SAME, strides=[1, 1, 2, 1]), (5, 3, 7, 6), (3, 3, 3, 4)),                       # generic NCHW
    (dict(NCHW_SAME, data_format="NHWC", padding="VALID"), (5, 7, 6, 3), (2, 3, 3, 4)),        # generic NHWC
    (NCHW_SAME, (5, 6, 5, 4), (1, 1, 6, 7)),                                                   # pointwise NCHW
    (NCHW_SAME, (5, 2, 6, 7), (5, 4, 2, 3)),                                                   # NCHW, rows
    (dict(NCHW_SAME, padding="VALID"), (5, 2, 9, 8), (5, 4, 2, 3)),                            # rows, unpadded
])
def test_kernels_ask_for_exactly_the_declared_workspaces(attrs, x_shape, f_shape):
    """The memory planner preallocates what WORKSPACES declares: the kernels must request just that."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal(x_shape).astype(np.float32)
    f = rng.standard_normal(f_shape).astype(np.float32)
    y_shape = conv._out_shape(x_shape, f_shape, attrs)
    dy = rng.standard_normal(y_shape).astype(np.float32)
    sizes_x, sizes_f = np.array(x_shape, np.int32), np.array(f_shape, np.int32)
    calls = {"Conv2D": ([x, f], [np.empty(y_shape, np.float32)]),
             "Conv2DBackpropInput": ([sizes_x, f, dy], [np.empty_like(x)]),
             "Conv2DBackpropFilter": ([x, sizes_f, dy], [np.empty_like(f)])}
    for op, (ins, outs) in calls.items():
        ctx = RecordingCtx()
        find_kernel(op, "cpu", tf.float32)(ctx, ins, outs, attrs)
        specs = [TensorSpec(a.shape, tf.as_dtype(a.dtype), a) for a in ins]
        declared = [(tuple(s), d) for s, d in WORKSPACES[(op, "cpu")](specs, attrs)]
        assert ctx.requests == declared, op
        assert not np.isnan(outs[0]).any(), op


@pytest.mark.parametrize("fmt", ["NCHW", "NHWC"])
def test_pool_and_bias_kernels_ask_for_the_declared_workspaces(fmt, monkeypatch):
    """The 2x2 max-pool and its gradient work in slices of the batch within declared scratch (small slices
    here, the last one short), BiasAddGrad in declared scratch; results match plain NumPy formulas."""
    monkeypatch.setattr(nn, "_SLICE_BYTES", 300)
    monkeypatch.setenv("TFPLUS_NUM_THREADS", "2")  # two image shards (4 + 3), each in 1-image slices
    rng = np.random.default_rng(0)
    x = np.maximum(rng.standard_normal((7, 3, 6, 8)), 0).astype(np.float32)  # ReLU zeros: tied windows
    g = rng.standard_normal((7, 3, 3, 4)).astype(np.float32)
    win = x.reshape(7, 3, 3, 2, 4, 2).transpose(0, 1, 2, 4, 3, 5).reshape(7, 3, 3, 4, 4)
    y = win.max(axis=-1)
    first = np.eye(4, dtype=np.float32)[win.argmax(axis=-1)] * g[..., None]  # TF's tie rule: first maximum
    dx = first.reshape(7, 3, 3, 4, 2, 2).transpose(0, 1, 2, 4, 3, 5).reshape(x.shape)
    to = (lambda a: a) if fmt == "NCHW" else (lambda a: a.transpose(0, 2, 3, 1).copy())
    window = [1, 1, 2, 2] if fmt == "NCHW" else [1, 2, 2, 1]
    attrs = {"ksize": window, "strides": window, "padding": "VALID", "data_format": fmt, "T": tf.float32}
    calls = {"MaxPool": ([to(x)], to(y)), "MaxPoolGrad": ([to(x), to(y), to(g)], to(dx)),
             "BiasAddGrad": ([to(x)], x.sum(axis=(0, 2, 3)))}
    for op, (ins, want) in calls.items():
        ctx, out = RecordingCtx(), np.full(want.shape, np.nan, np.float32)
        find_kernel(op, "cpu", tf.float32)(ctx, ins, [out], attrs)
        specs = [TensorSpec(a.shape, tf.as_dtype(a.dtype), a) for a in ins]
        assert ctx.requests == [(tuple(s), d) for s, d in WORKSPACES[(op, "cpu")](specs, attrs)], op
        np.testing.assert_allclose(out, want, rtol=1e-5, err_msg=op)
    assert WORKSPACES[("MaxPool", "cpu")]([TensorSpec(to(x).shape, tf.float32, None)], attrs)[0][0][0] < 7


# -- errors --------------------------------------------------------------------------------------------------
def test_conv_channel_mismatch_message():
    with tf.Graph().as_default():
        x = tf.placeholder(tf.float32, [None, 3, 32, 32])
        w = tf.placeholder(tf.float32, [3, 3, 16, 32])
        with tf.name_scope("mentee"):
            with pytest.raises(ValueError, match=r"Conv2D 'mentee/conv1': input has 3 channels but filter "
                                                 r"expects 16 \(filter shape \(3,3,16,32\)\)"):
                tf.nn.conv2d(x, w, 1, "SAME", data_format="NCHW", name="conv1")


@pytest.mark.parametrize("kwargs,message", [
    ({"dilations": [2, 1, 1, 1]}, "dilations .*batch and channel entries must be 1"),
    ({"strides": [2, 1, 1, 1]}, "batch and channel entries must be 1"),
    ({"padding": "FULL"}, "padding must be 'SAME' or 'VALID'"),
    ({"data_format": "NCWH"}, "data_format must be 'NHWC' or 'NCHW'"),
])
def test_conv_attr_errors(kwargs, message):
    with tf.Graph().as_default():
        x = tf.placeholder(tf.float32, [2, 8, 8, 3])
        w = tf.placeholder(tf.float32, [3, 3, 3, 4])
        args = dict({"strides": 1, "padding": "SAME"}, **kwargs)
        with pytest.raises(ValueError, match=message):
            tf.nn.conv2d(x, w, **args)


def test_shape_errors():
    with tf.Graph().as_default():
        with pytest.raises(ValueError, match="VALID padding needs every input dimension >= the window"):
            tf.nn.max_pool(tf.placeholder(tf.float32, [1, 2, 2, 1]), 3, 1, "VALID")
        with pytest.raises(ValueError, match="bias of shape"):
            tf.nn.bias_add(tf.placeholder(tf.float32, [2, 3, 4, 4]), tf.placeholder(tf.float32, [4]), "NCHW")
        with pytest.raises(ValueError, match="must have one batch size"):
            tf.nn.sparse_softmax_cross_entropy_with_logits(labels=tf.placeholder(tf.int32, [3]),
                                                           logits=tf.placeholder(tf.float32, [4, 10]))
        with pytest.raises(TypeError, match="labels must be int32 or int64"):
            tf.nn.sparse_softmax_cross_entropy_with_logits(labels=tf.placeholder(tf.float32, [4]),
                                                           logits=tf.placeholder(tf.float32, [4, 10]))
        with pytest.raises(ValueError, match="out_backprop has shape"):
            tf.nn.conv2d_backprop_input([2, 8, 8, 3], tf.placeholder(tf.float32, [3, 3, 3, 4]),
                                        tf.placeholder(tf.float32, [2, 4, 4, 4]), 1, "SAME")


def test_label_out_of_range_names_the_node():
    with tf.Graph().as_default() as g:
        logits = tf.placeholder(tf.float32, [2, 3])
        labels = tf.placeholder(tf.int32, [2])
        loss = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits, name="xent")
    with tf.Session(graph=g) as sess:
        with pytest.raises(errors.InvalidArgumentError,
                           match=r"labels\[1\] = 3 is not a class index in \[0, 3\)"):
            sess.run(loss, {logits: np.zeros((2, 3)), labels: [0, 3]})


def test_backprop_output_of_sparse_xent_has_no_gradient():
    with tf.Graph().as_default():
        logits = tf.placeholder(tf.float32, [2, 3])
        labels = tf.constant([0, 1])
        from tfplus.framework import apply_op
        _, backprop = apply_op("SparseSoftmaxCrossEntropyWithLogits", [logits, labels], {"Tlabels": tf.int32})
        with pytest.raises(LookupError, match="backprop output"):
            tf.gradients(backprop, [logits])


# -- pooling ties --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("fmt", ["NCHW", "NHWC"])
def test_max_pool_grad_sends_ties_to_the_first_maximum(fmt):
    """After a ReLU many 2x2 windows are all zero: the gradient goes to one element (TF's rule), not four."""
    x = np.maximum(np.random.default_rng(0).standard_normal((2, 3, 6, 6)), 0).astype(np.float32)
    x[0, 0, :2, :2] = 0  # a window of ties
    if fmt == "NHWC":
        x = x.transpose(0, 2, 3, 1).copy()
    window = [1, 1, 2, 2] if fmt == "NCHW" else [1, 2, 2, 1]
    with tf.Graph().as_default() as g:
        xt = tf.placeholder(tf.float32, x.shape)
        fast = tf.nn.max_pool(xt, window, window, "VALID", data_format=fmt)
        generic = tf.nn.max_pool(xt, [1, 1, 3, 3] if fmt == "NCHW" else [1, 3, 3, 1], window, "SAME",
                                 data_format=fmt)  # overlapping windows take the generic kernel
        gx_fast, = tf.gradients(fast, [xt])
        gx_generic, = tf.gradients(generic, [xt])
    with tf.Session(graph=g) as sess:
        gf, gg = sess.run([gx_fast, gx_generic], {xt: x})
    if fmt == "NHWC":
        gf = gf.transpose(0, 3, 1, 2)
    tile = gf.reshape(2, 3, 3, 2, 3, 2)
    assert (tile.sum(axis=(3, 5)) == 1).all()  # every window passes on exactly its one unit of gradient
    assert gf.reshape(-1)[0] == 1 and gf.sum() == 2 * 3 * 9
    assert gg.sum() == 2 * 3 * 9


@pytest.mark.parametrize("fmt", ["NCHW", "NHWC"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_max_pool_grad_every_tie_pattern(fmt, dtype):
    """Every set of tied maxima a 2x2 window can hold (15, at a positive and a zero maximum, and windows of distinct
    values): the fast kernel routes each window's gradient as the reference's scan-order rule does."""
    rng = np.random.default_rng(1)
    pattern = np.array([[(p >> b) & 1 for b in range(4)] for p in range(1, 16)], float)
    windows = np.concatenate([pattern, pattern - 1, rng.permutation(np.tile(np.arange(4.0), (15, 1)).T).T])
    x = windows[rng.permutation(45)].reshape(1, 9, 5, 2, 2).transpose(0, 1, 3, 2, 4).reshape(1, 9, 2, 10)
    x = np.concatenate([x, x[:, ::-1]], axis=2).astype(dtype)  # (1, 9, 4, 10): 90 windows
    if fmt == "NHWC":
        x = x.transpose(0, 2, 3, 1).copy()
    window = [1, 1, 2, 2] if fmt == "NCHW" else [1, 2, 2, 1]
    attrs = {"ksize": window, "strides": window, "padding": "VALID", "data_format": fmt, "T": tf.as_dtype(dtype)}
    y = np.empty(x.shape[:1] + ((9, 2, 5) if fmt == "NCHW" else (2, 5, 9)), dtype)
    find_kernel("MaxPool", "cpu", tf.as_dtype(dtype))(RecordingCtx(), [x], [y], attrs)
    g = rng.standard_normal(y.shape).astype(dtype)
    dx = np.full(x.shape, np.nan, dtype)
    find_kernel("MaxPoolGrad", "cpu", tf.as_dtype(dtype))(RecordingCtx(), [x, y, g], [dx], attrs)
    np.testing.assert_array_equal(dx, ref_max_pool_grad(x, g, (2, 2), (2, 2), "VALID", fmt))


# -- dropout, zero_fraction, moments -------------------------------------------------------------------------
def test_dropout_keep_prob_one_is_identity():
    with tf.Graph().as_default():
        x = tf.placeholder(tf.float32, [3])
        assert tf.nn.dropout(x, keep_prob=1.0) is x
        assert tf.nn.dropout(x, rate=0.0) is x
        assert tf.nn.dropout(x, keep_prob=tf.constant(1.0)) is x
        with pytest.raises(ValueError, match="exactly one of keep_prob and rate"):
            tf.nn.dropout(x)
        with pytest.raises(ValueError, match=r"keep_prob must be in \(0, 1\]"):
            tf.nn.dropout(x, keep_prob=0.0)


def test_dropout_statistics_and_scaling():
    x = np.ones((200, 500), np.float32)
    with tf.Graph().as_default() as g:
        xt = tf.placeholder(tf.float32, [None, 500])
        y = tf.nn.dropout(xt, keep_prob=0.7)
        rows = tf.nn.dropout(xt, rate=0.5, noise_shape=[200, 1])
    with tf.Session(graph=g) as sess:
        a = sess.run(y, {xt: x})
        b = sess.run(y, {xt: x})
        r = sess.run(rows, {xt: x})
    assert set(np.unique(a)) <= {0.0, np.float32(1 / 0.7)}
    assert abs((a > 0).mean() - 0.7) < 0.01
    assert (a != b).any()  # each run draws a new mask
    assert ((r == 0).all(axis=1) | (r == 2).all(axis=1)).all()  # noise_shape [200, 1]: whole rows
    assert 0.35 < (r[:, 0] > 0).mean() < 0.65


def test_dropout_is_repeatable_with_a_graph_seed():
    def draw():
        with tf.Graph().as_default() as g:
            tf.set_random_seed(7)
            y = tf.nn.dropout(tf.ones([1000]), keep_prob=0.5)
        with tf.Session(graph=g) as sess:
            return sess.run(y)
    np.testing.assert_array_equal(draw(), draw())


def test_dropout_gradient_is_the_mask_over_keep_prob():
    with tf.Graph().as_default() as g:
        x = tf.placeholder(tf.float32, [100])
        y = tf.nn.dropout(x, keep_prob=0.5)
        gx, = tf.gradients(y, [x])
    with tf.Session(graph=g) as sess:
        yv, gv = sess.run([y, gx], {x: np.full(100, 3.0, np.float32)})
    np.testing.assert_array_equal(gv, (yv > 0) * 2.0)


def test_zero_fraction():
    v = np.array([[0.0, 1.0, 0.0, -2.0], [0.0, 0.0, 3.0, 0.0]], np.float32)
    with tf.Graph().as_default() as g:
        z = tf.nn.zero_fraction(tf.constant(v))
        zi = tf.nn.zero_fraction(tf.constant([0, 1, 2, 0], tf.int32))
    with tf.Session(graph=g) as sess:
        got, got_int = sess.run([z, zi])
    assert got.dtype == np.float32 and got == pytest.approx(5 / 8)
    assert got_int == pytest.approx(0.5)


def test_moments():
    x = np.random.default_rng(0).standard_normal((4, 3, 5, 5)).astype(np.float32)
    with tf.Graph().as_default() as g:
        mean, var = tf.nn.moments(tf.constant(x), axes=[0, 2, 3])
        mean_k, _ = tf.nn.moments(tf.constant(x), axes=[0, 2, 3], keep_dims=True)
    with tf.Session(graph=g) as sess:
        m, v, mk = sess.run([mean, var, mean_k])
    np.testing.assert_allclose(m, x.mean(axis=(0, 2, 3)), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(v, x.var(axis=(0, 2, 3)), rtol=1e-5, atol=1e-6)
    assert mk.shape == (1, 3, 1, 1)


@pytest.mark.parametrize("fmt", ["NCHW", "NHWC"])
def test_conv_of_an_empty_batch(fmt):
    shape = (0, 3, 8, 8) if fmt == "NCHW" else (0, 8, 8, 3)
    with tf.Graph().as_default() as g:
        x = tf.placeholder(tf.float32, [None] + list(shape[1:]))
        w = tf.constant(np.ones((3, 3, 3, 64), np.float32))
        y = tf.nn.conv2d(x, w, 1, "SAME", data_format=fmt)
        gx, gw = tf.gradients(y, [x, w])
    with tf.Session(graph=g) as sess:
        yv, gxv, gwv = sess.run([y, gx, gw], {x: np.zeros(shape, np.float32)})
    assert yv.shape[0] == 0 and gxv.shape == shape and not gwv.any()


def test_conv2d_accepts_int_and_pair_strides():
    with tf.Graph().as_default():
        x = tf.placeholder(tf.float32, [2, 3, 9, 9])
        w = tf.placeholder(tf.float32, [3, 3, 3, 4])
        for strides in (2, [2, 2], [1, 1, 2, 2]):
            assert tf.nn.conv2d(x, w, strides, "SAME", data_format="NCHW").shape.as_list() == [2, 4, 5, 5]
