"""NumPy kernels for the nn ops except convolutions (conv.py): activations, bias, softmax, losses, pooling.

Kernels write into the output buffers they are given. Pooling keeps a fast path for the common 2x2 window
with stride 2 that tiles the input exactly; everything else takes the generic per-tap loop.

The memory planner preallocates what a kernel declares (register_workspace) and sees nothing else, so the kernels
on a training step's path make no big temporaries of their own: their scratch comes from ctx.workspace and is
bounded per call (pooling runs over slices of the batch), and NumPy is left only its ufunc buffers (at most
np.getbufsize() elements per operand).

Kernels split their work over the intra-op threads (tfplus.threads): elementwise ones by elements or rows,
pooling by image tasks shared out over the threads (each thread with its own slice of the scratch), bias
gradients by rows of partial sums.
"""
from __future__ import annotations

import math

import numpy as np

from tfplus import threads
from tfplus.dtypes import FLOATS, as_dtype, bool_
from tfplus.registry import register_kernel, register_variant, register_workspace
from tfplus.tensor_shape import conv_output

HALF_FLOATS = ("float16",) + tuple(d.name for d in FLOATS)  # the activations and softmax take float16 too

_SLICE_BYTES = 256 << 10  # a pooling kernel's scratch per slice of the batch: small, and still long ufunc runs


def _slice_images(n: int, per_image: int) -> int:
    """How many images of `per_image` scratch bytes one slice of the batch holds."""
    return max(1, min(n, _SLICE_BYTES // max(per_image, 1)))


def _channel_shape(x: np.ndarray, fmt: str) -> tuple:
    """Broadcast shape of a per-channel vector against x (channels last for NHWC, axis 1 for NCHW)."""
    if fmt == "NCHW":
        return (x.shape[1],) + (1,) * (x.ndim - 2)
    return (x.shape[-1],)


# -- bias ----------------------------------------------------------------------------------------------------
@register_kernel("BiasAdd", "cpu", FLOATS, inplace=(0,))
def _bias_add(ctx, ins, outs, attrs):
    x, b = ins
    threads.sharded(lambda o, a, c: np.add(a, c, out=o), outs[0], x, b.reshape(_channel_shape(x, attrs["data_format"])))


def _bias_rows(shape, fmt: str) -> tuple[int, int]:
    """BiasAddGrad's dy as a matrix: (rows, columns) summed along the columns (NCHW: per image and channel) or
    along the rows (NHWC: per channel)."""
    if fmt == "NCHW":
        return shape[0] * shape[1], int(np.prod(shape[2:]))
    return int(np.prod(shape[:-1])), shape[-1]


@register_workspace("BiasAddGrad", "cpu")
def _bias_add_grad_ws(ins, attrs):
    """The vector of ones, then (NCHW) the per-image channel sums or (NHWC) one partial sum per row shard."""
    shape, dtype = ins[0].shape, ins[0].dtype
    rows, cols = _bias_rows(shape, attrs["data_format"])
    if attrs["data_format"] == "NCHW":
        return [((cols,), dtype), ((rows,), dtype)]
    return [((rows,), dtype), ((len(threads.split(rows, _bias_grain(cols))), cols), dtype)]


def _bias_grain(cols: int) -> int:
    return max(1, threads.GRAIN // max(cols, 1))


@register_kernel("BiasAddGrad", "cpu", FLOATS)
def _bias_add_grad(ctx, ins, outs, attrs):
    # Sums as matrix-vector products with a vector of ones: BLAS streams the data once, 4x faster than np.sum.
    dy = ins[0]
    dtype = as_dtype(dy.dtype)
    rows, cols = _bias_rows(dy.shape, attrs["data_format"])
    m = dy.reshape(rows, cols)
    if attrs["data_format"] == "NCHW":
        ones, per_image = ctx.workspace((cols,), dtype), ctx.workspace((rows,), dtype)
        ones.fill(1)
        threads.parallel_for(rows, lambda lo, hi: np.matmul(m[lo:hi], ones, out=per_image[lo:hi]), _bias_grain(cols))
        np.sum(per_image.reshape(dy.shape[0], dy.shape[1]), axis=0, out=outs[0])
    else:
        ranges = threads.split(rows, _bias_grain(cols))
        ones, parts = ctx.workspace((rows,), dtype), ctx.workspace((len(ranges), cols), dtype)
        ones.fill(1)
        threads.run(lambda i: np.matmul(ones[ranges[i][0]:ranges[i][1]], m[slice(*ranges[i])], out=parts[i]),
                    range(len(ranges)))
        np.sum(parts, axis=0, out=outs[0])  # in shard order: deterministic for a thread count


# -- activations ---------------------------------------------------------------------------------------------
@register_kernel("Relu", "cpu", HALF_FLOATS, inplace=(0,))
def _relu(ctx, ins, outs, attrs):
    threads.sharded(lambda o, x: np.maximum(x, 0, out=o), outs[0], ins[0])


@register_kernel("ReluGrad", "cpu", HALF_FLOATS, inplace=(1,))
def _relu_grad(ctx, ins, outs, attrs):
    # The mask goes straight into the output as 0/1 (no bool temporary of the input's size), then a float
    # multiply. NOTE: so the output may share the features' buffer (planner.inplace), not the gradients'.
    def body(out, g, x):
        np.greater(x, 0, out=out)
        np.multiply(out, g, out=out)
    threads.sharded(body, outs[0], *ins)


@register_kernel("Relu6", "cpu", HALF_FLOATS, inplace=(0,))
def _relu6(ctx, ins, outs, attrs):
    np.clip(ins[0], 0, 6, out=outs[0])


# Relu6Grad works through its elements RELU6_PIECE at a time: its mask is that small, and it may write over either
# input (each piece's mask is taken before its product is written), so a backward pass holds one tensor less there.
RELU6_PIECE = 1 << 18  # threads.GRAIN: long ufunc runs


@register_workspace("Relu6Grad", "cpu")
def _relu6_grad_ws(ins, attrs):
    """The masks x > 0 and x < 6 of one piece."""
    return [((2 * min(math.prod(ins[1].shape), RELU6_PIECE),), bool_)]


@register_kernel("Relu6Grad", "cpu", HALF_FLOATS, inplace=(0, 1))
def _relu6_grad(ctx, ins, outs, attrs):
    g, x = ins[0].reshape(-1), ins[1].reshape(-1)
    out = outs[0].reshape(-1)
    if out.size and not np.may_share_memory(out, outs[0]):  # NOTE: a copy would be written instead of the output
        raise ValueError(f"Relu6Grad: an output of strides {outs[0].strides} has no flat view")
    n = min(x.size, RELU6_PIECE)
    masks = ctx.workspace((2 * n,), bool_)
    for lo in range(0, x.size, max(n, 1)):  # max: an empty tensor has no piece
        part = slice(lo, lo + n)
        positive, below = masks[:len(x[part])], masks[n:n + len(x[part])]
        np.greater(x[part], 0, out=positive)
        np.less(x[part], 6, out=below)
        np.logical_and(positive, below, out=positive)
        np.multiply(g[part], positive, out=out[part])  # both masks taken first: out may be x or g


@register_kernel("Sigmoid", "cpu", HALF_FLOATS, inplace=(0,))
def _sigmoid(ctx, ins, outs, attrs):
    # 1/(1+exp(-x)) = (1 + tanh(x/2)) / 2, which cannot overflow.
    out = outs[0]
    np.multiply(ins[0], 0.5, out=out)
    np.tanh(out, out=out)
    np.multiply(out, 0.5, out=out)
    np.add(out, 0.5, out=out)


@register_kernel("SigmoidGrad", "cpu", HALF_FLOATS)
def _sigmoid_grad(ctx, ins, outs, attrs):
    y, dy = ins
    out = outs[0]
    np.subtract(1, y, out=out)
    np.multiply(out, y, out=out)
    np.multiply(out, dy, out=out)


@register_kernel("Tanh", "cpu", HALF_FLOATS, inplace=(0,))
def _tanh(ctx, ins, outs, attrs):
    np.tanh(ins[0], out=outs[0])


@register_kernel("TanhGrad", "cpu", HALF_FLOATS, inplace=(0,))  # y read first
def _tanh_grad(ctx, ins, outs, attrs):
    y, dy = ins
    out = outs[0]
    np.multiply(y, y, out=out)
    np.subtract(1, out, out=out)
    np.multiply(out, dy, out=out)


# -- softmax and cross entropies -----------------------------------------------------------------------------
def _log_softmax_into(x: np.ndarray, out: np.ndarray) -> None:
    """out = x - max - log(sum(exp(x - max))) over the last axis, without overflow."""
    np.subtract(x, x.max(axis=-1, keepdims=True), out=out)
    out -= np.log(np.exp(out).sum(axis=-1, keepdims=True))


@register_kernel("Softmax", "cpu", HALF_FLOATS)
def _softmax(ctx, ins, outs, attrs):
    x, out = ins[0], outs[0]
    if x.size == 0:  # no classes (or no rows): nothing to normalize, as TF
        return
    np.subtract(x, x.max(axis=-1, keepdims=True), out=out)
    np.exp(out, out=out)
    out /= out.sum(axis=-1, keepdims=True)


@register_kernel("LogSoftmax", "cpu", HALF_FLOATS)
def _log_softmax(ctx, ins, outs, attrs):
    if ins[0].size == 0:
        return
    _log_softmax_into(ins[0], outs[0])


@register_kernel("SparseSoftmaxCrossEntropyWithLogits", "cpu", FLOATS)
def _sparse_xent(ctx, ins, outs, attrs):
    logits, labels = ins
    loss, backprop = outs
    n, k = logits.shape
    bad = (labels < 0) | (labels >= k)
    if bad.any():
        i = int(np.argmax(bad))
        raise ValueError(f"labels[{i}] = {labels[i]} is not a class index in [0, {k}) "
                         f"(logits shape {logits.shape})")

    def body(lo, hi):
        b, rows = backprop[lo:hi], np.arange(hi - lo)
        _log_softmax_into(logits[lo:hi], b)
        np.negative(b[rows, labels[lo:hi]], out=loss[lo:hi])
        np.exp(b, out=b)
        b[rows, labels[lo:hi]] -= 1
    threads.parallel_for(n, body, max(1, threads.GRAIN // max(k, 1)))


@register_kernel("SoftmaxCrossEntropyWithLogits", "cpu", FLOATS)
def _xent(ctx, ins, outs, attrs):
    logits, labels = ins
    loss, backprop = outs

    def body(lo, hi):
        b, t = backprop[lo:hi], labels[lo:hi]
        _log_softmax_into(logits[lo:hi], b)
        np.negative(np.einsum("ij,ij->i", t, b), out=loss[lo:hi])
        np.exp(b, out=b)
        b -= t
    threads.parallel_for(logits.shape[0], body, max(1, threads.GRAIN // max(logits.shape[-1], 1)))


@register_kernel("L2Loss", "cpu", FLOATS)
def _l2_loss(ctx, ins, outs, attrs):
    x = ins[0].reshape(-1)
    outs[0][...] = np.dot(x, x) / 2


@register_kernel("InTopKV2", "cpu")
def _in_top_k(ctx, ins, outs, attrs):
    predictions, targets, k = ins
    n, classes = predictions.shape
    valid = (targets >= 0) & (targets < classes)
    target = predictions[np.arange(n), np.where(valid, targets, 0)]
    # Ties count in the target's favour: only strictly larger predictions push it out of the top k.
    larger = (predictions > target[:, None]).sum(axis=1)
    outs[0][...] = valid & np.isfinite(target) & (larger < int(k))


# -- pooling -------------------------------------------------------------------------------------------------
def _nchw(a: np.ndarray, fmt: str) -> np.ndarray:
    """An NCHW view of a rank-4 buffer (a transposed view for NHWC; no copy)."""
    return a if fmt == "NCHW" else a.transpose(0, 3, 1, 2)


def _hw(values, fmt: str) -> tuple[int, int]:
    return (values[2], values[3]) if fmt == "NCHW" else (values[1], values[2])


def _geometry(x_hw, attrs):
    """Window, strides and (top, left) padding of a pool with input size x_hw."""
    fmt = attrs["data_format"]
    (kh, kw), (sh, sw) = _hw(attrs["ksize"], fmt), _hw(attrs["strides"], fmt)
    pads = [conv_output(i, k, s, attrs["padding"])[1] for i, s, k in zip(x_hw, (sh, sw), (kh, kw))]
    return (kh, kw), (sh, sw), pads


def _is_2x2(x_hw, attrs) -> bool:
    """The 2x2 / stride 2 window that tiles the input exactly (even sizes, so VALID and SAME agree)."""
    fmt = attrs["data_format"]
    return (_hw(attrs["ksize"], fmt) == (2, 2) and _hw(attrs["strides"], fmt) == (2, 2)
            and x_hw[0] % 2 == 0 and x_hw[1] % 2 == 0)


def _nchw_shape(shape, fmt: str) -> tuple:
    return tuple(shape) if fmt == "NCHW" else (shape[0], shape[3], shape[1], shape[2])


def _quarters(a: np.ndarray) -> list[np.ndarray]:
    """The four (row, column) parity views of an NCHW array, in window scan order."""
    return [a[:, :, i::2, j::2] for i in (0, 1) for j in (0, 1)]


def _taps(a: np.ndarray, ksize, strides, out_hw):
    """(tap index, view) for every window offset: view[n, c, i, j] = a[n, c, i*sh + dy, j*sw + dx]."""
    (kh, kw), (sh, sw), (ho, wo) = ksize, strides, out_hw
    for dy in range(kh):
        for dx in range(kw):
            yield a[:, :, dy:dy + (ho - 1) * sh + 1:sh, dx:dx + (wo - 1) * sw + 1:sw]


def _padded(x: np.ndarray, pads, ksize, strides, out_hw, fill) -> np.ndarray:
    """x (NCHW) inside a border of `fill` so that every window lies inside."""
    n, c, h, w = x.shape
    hp = max((out_hw[0] - 1) * strides[0] + ksize[0], h + pads[0])
    wp = max((out_hw[1] - 1) * strides[1] + ksize[1], w + pads[1])
    if (hp, wp) == (h, w):
        return x
    xp = np.full((n, c, hp, wp), fill, x.dtype)
    xp[:, :, pads[0]:pads[0] + h, pads[1]:pads[1] + w] = x
    return xp


def _first_max_masks(taps, y):
    """Per tap view: (where that tap holds its window's first maximum (TF's tie rule: scan order), where some
    tap so far did)."""
    taken = None
    for view in taps:
        hit = view == y
        if taken is None:
            taken = hit.copy()
        else:
            np.greater(hit, taken, out=hit)  # hit and not taken
            taken |= hit
        yield hit, taken


def _pool_shards(x_shape) -> tuple[list[tuple[int, int]], int]:
    """A 2x2 pooling kernel's image tasks of its NCHW input x_shape (threads.tasks, each of GRAIN input
    elements at least) and the images of the largest one."""
    n, c, h, w = x_shape
    ranges = threads.tasks(n, max(1, threads.GRAIN // max(c * h * w, 1)))
    return ranges, max(hi - lo for lo, hi in ranges)


def _row_maxima_shape(x_shape, fmt: str, itemsize: int) -> tuple:
    """The 2x2 max-pool's scratch: one slice of the batch per thread, (images, C, H/2, W), the maxima of row
    pairs."""
    n, c, h, w = _nchw_shape(x_shape, fmt)
    ranges, most = _pool_shards((n, c, h, w))
    return (threads.slots(len(ranges)) * _slice_images(most, c * h // 2 * w * itemsize), c, h // 2, w)


def _over_slices(ranges, per_slice: int, body) -> None:
    """body(slot, lo, hi) for slices [lo, hi) of at most per_slice images of each image task, the tasks shared
    out over the threads (threads.run_shared; slot names the thread, whose scratch slice the body uses)."""
    def task(slot, i):
        lo, hi = ranges[i]
        for j in range(lo, hi, per_slice):
            body(slot, j, min(j + per_slice, hi))
    threads.run_shared(task, range(len(ranges)))


@register_workspace("MaxPool", "cpu")
def _max_pool_ws(ins, attrs):
    x = ins[0]
    if not _is_2x2(_hw(x.shape, attrs["data_format"]), attrs):
        return []
    return [(_row_maxima_shape(x.shape, attrs["data_format"], x.dtype.size), x.dtype)]


@register_kernel("MaxPool", "cpu", FLOATS)
def _max_pool(ctx, ins, outs, attrs):
    fmt = attrs["data_format"]
    x, y = _nchw(ins[0], fmt), _nchw(outs[0], fmt)
    if _is_2x2(x.shape[2:], attrs):
        # Row pairs first (contiguous inner runs, 2.5x faster than four strided maxima), a slice at a time.
        rows = ctx.workspace(_row_maxima_shape(ins[0].shape, fmt, x.itemsize), as_dtype(x.dtype))
        ranges, _ = _pool_shards(x.shape)
        m = rows.shape[0] // threads.slots(len(ranges))

        def body(slot, lo, hi):
            xs, r = x[lo:hi], rows[slot * m:slot * m + hi - lo]
            np.maximum(xs[:, :, 0::2], xs[:, :, 1::2], out=r)
            np.maximum(r[..., 0::2], r[..., 1::2], out=y[lo:hi])
        _over_slices(ranges, m, body)
        return
    ksize, strides, pads = _geometry(x.shape[2:], attrs)
    xp = _padded(x, pads, ksize, strides, y.shape[2:], -np.inf)
    taps = _taps(xp, ksize, strides, y.shape[2:])
    np.copyto(y, next(taps))
    for view in taps:
        np.maximum(y, view, out=y)


def _window_masks_shape(x_shape, fmt: str) -> tuple:
    """The 2x2 max-pool gradient's scratch: for one slice of the batch per thread, two bool masks of the
    output's size."""
    n, c, h, w = _nchw_shape(x_shape, fmt)
    ranges, most = _pool_shards((n, c, h, w))
    return (2, threads.slots(len(ranges)) * _slice_images(most, 2 * c * (h // 2) * (w // 2)), c, h // 2, w // 2)


@register_workspace("MaxPoolGrad", "cpu")
def _max_pool_grad_ws(ins, attrs):
    x = ins[0]
    if not _is_2x2(_hw(x.shape, attrs["data_format"]), attrs):
        return []
    return [(_window_masks_shape(x.shape, attrs["data_format"]), bool_)]


@register_kernel("MaxPoolGrad", "cpu", FLOATS)
def _max_pool_grad(ctx, ins, outs, attrs):
    fmt = attrs["data_format"]
    x, y, g = (_nchw(a, fmt) for a in ins)
    dx = _nchw(outs[0], fmt)
    if _is_2x2(x.shape[2:], attrs):
        # Every element lies in exactly one window; the gradient goes to the first maximum in scan order (TF's
        # rule for ties), so the last quarter takes what the first three did not. A slice of the batch at a time.
        hit, taken = ctx.workspace(_window_masks_shape(ins[0].shape, fmt), bool_)
        ranges, _ = _pool_shards(x.shape)
        m = hit.shape[0] // threads.slots(len(ranges))

        def body(slot, lo, hi):
            xq, dq, ys, gs = _quarters(x[lo:hi]), _quarters(dx[lo:hi]), y[lo:hi], g[lo:hi]
            h, t = hit[slot * m:slot * m + hi - lo], taken[slot * m:slot * m + hi - lo]
            np.equal(xq[0], ys, out=t)
            np.multiply(gs, t, out=dq[0], dtype=gs.dtype)
            for j in (1, 2):
                np.equal(xq[j], ys, out=h)
                np.greater(h, t, out=h)  # a maximum here, and none before
                np.logical_or(t, h, out=t)
                np.multiply(gs, h, out=dq[j], dtype=gs.dtype)
            np.logical_not(t, out=t)
            np.multiply(gs, t, out=dq[3], dtype=gs.dtype)
        _over_slices(ranges, m, body)
        return
    ksize, strides, pads = _geometry(x.shape[2:], attrs)
    xp = _padded(x, pads, ksize, strides, y.shape[2:], -np.inf)
    dxp = np.zeros(xp.shape, dx.dtype)
    for (hit, _), d in zip(_first_max_masks(_taps(xp, ksize, strides, y.shape[2:]), y),
                      _taps(dxp, ksize, strides, y.shape[2:])):
        d += g * hit
    np.copyto(dx, dxp[:, :, pads[0]:pads[0] + x.shape[2], pads[1]:pads[1] + x.shape[3]])


@register_kernel("MaxPoolGradGrad", "cpu", FLOATS)
def _max_pool_grad_grad(ctx, ins, outs, attrs):
    fmt = attrs["data_format"]
    x, y, g = (_nchw(a, fmt) for a in ins)
    out = _nchw(outs[0], fmt)
    ksize, strides, pads = _geometry(x.shape[2:], attrs)
    xp = _padded(x, pads, ksize, strides, y.shape[2:], -np.inf)
    gp = _padded(g, pads, ksize, strides, y.shape[2:], 0)
    out.fill(0)
    for (hit, _), gv in zip(_first_max_masks(_taps(xp, ksize, strides, y.shape[2:]), y),
                       _taps(gp, ksize, strides, y.shape[2:])):
        out += gv * hit


def _window_counts(x_hw, y_hw, ksize, strides, pads) -> np.ndarray:
    """How many input elements (padding excluded) each output window of an average pool covers: (Ho, Wo)."""
    def per_axis(size, out, k, s, pad):
        start = np.arange(out) * s - pad
        return np.minimum(start + k, size) - np.maximum(start, 0)
    rows = per_axis(x_hw[0], y_hw[0], ksize[0], strides[0], pads[0])
    cols = per_axis(x_hw[1], y_hw[1], ksize[1], strides[1], pads[1])
    return np.outer(rows, cols)


@register_kernel("AvgPool", "cpu", FLOATS)
def _avg_pool(ctx, ins, outs, attrs):
    fmt = attrs["data_format"]
    x, y = _nchw(ins[0], fmt), _nchw(outs[0], fmt)
    ksize, strides, pads = _geometry(x.shape[2:], attrs)
    xp = _padded(x, pads, ksize, strides, y.shape[2:], 0)
    taps = _taps(xp, ksize, strides, y.shape[2:])
    np.copyto(y, next(taps))
    for view in taps:
        np.add(y, view, out=y)
    y /= _window_counts(x.shape[2:], y.shape[2:], ksize, strides, pads).astype(y.dtype)


@register_kernel("AvgPoolGrad", "cpu", FLOATS)
def _avg_pool_grad(ctx, ins, outs, attrs):
    fmt = attrs["data_format"]
    g, dx = _nchw(ins[1], fmt), _nchw(outs[0], fmt)
    ksize, strides, pads = _geometry(dx.shape[2:], attrs)
    share = g / _window_counts(dx.shape[2:], g.shape[2:], ksize, strides, pads).astype(g.dtype)
    dxp = _padded(np.zeros(dx.shape, dx.dtype), pads, ksize, strides, g.shape[2:], 0)
    for view in _taps(dxp, ksize, strides, g.shape[2:]):
        view += share
    np.copyto(dx, dxp[:, :, pads[0]:pads[0] + dx.shape[2], pads[1]:pads[1] + dx.shape[3]])


# -- compact saved state (tfplus.planner.compact): kernel variants the planned executor calls ---------------
@register_variant("MaxPool", "cpu", "compact")
def max_pool_saving_argmax(ctx, ins, outs, attrs, argmax):
    """The 2x2 MaxPool that also writes each window's first maximum (0..3, scan order) into `argmax` (uint8,
    the output's shape), within MaxPool's declared scratch: after a slice's maxima are done, the row-maxima
    buffer holds the mask of the tap being tested."""
    fmt = attrs["data_format"]
    x, y, a = _nchw(ins[0], fmt), _nchw(outs[0], fmt), _nchw(argmax, fmt)
    rows = ctx.workspace(_row_maxima_shape(ins[0].shape, fmt, x.itemsize), as_dtype(x.dtype))
    ranges, _ = _pool_shards(x.shape)
    m = rows.shape[0] // threads.slots(len(ranges))

    def body(slot, lo, hi):
        xs, ys, s = x[lo:hi], y[lo:hi], a[lo:hi]
        r = rows[slot * m:slot * m + hi - lo]
        np.maximum(xs[:, :, 0::2], xs[:, :, 1::2], out=r)
        np.maximum(r[..., 0::2], r[..., 1::2], out=ys)
        hit = r.reshape(-1).view(np.bool_)[:ys.size].reshape(ys.shape)
        s.fill(3)  # no earlier tap holds the maximum (or it is NaN): the last one, as MaxPoolGrad's rule
        quarters = _quarters(xs)
        for t in (2, 1, 0):  # earlier taps overwrite later ones: the first maximum wins
            np.equal(quarters[t], ys, out=hit)
            np.copyto(s, t, where=hit)
    _over_slices(ranges, m, body)


@register_variant("MaxPoolGrad", "cpu", "compact")
def max_pool_grad_relu_from_argmax(ctx, ins, outs, attrs, argmax):
    """ReluGrad(MaxPoolGrad(x, y, g), x) of a ReLU output x, from the argmax instead of x: the gradient goes
    to each window's first maximum, and x > 0 there exactly when y > 0. Within MaxPoolGrad's scratch."""
    fmt = attrs["data_format"]
    y, g, a = _nchw(ins[1], fmt), _nchw(ins[2], fmt), _nchw(argmax, fmt)
    dx = _nchw(outs[0], fmt)
    hit, positive = ctx.workspace(_window_masks_shape(ins[0].shape, fmt), bool_)
    ranges, _ = _pool_shards(_nchw_shape(ins[0].shape, fmt))
    m = hit.shape[0] // threads.slots(len(ranges))

    def body(slot, lo, hi):
        h, p = hit[slot * m:slot * m + hi - lo], positive[slot * m:slot * m + hi - lo]
        gs, s = g[lo:hi], a[lo:hi]
        np.greater(y[lo:hi], 0, out=p)
        for t, d in enumerate(_quarters(dx[lo:hi])):
            np.equal(s, t, out=h)
            np.logical_and(h, p, out=h)
            np.multiply(gs, h, out=d, dtype=gs.dtype)
    _over_slices(ranges, m, body)


@register_variant("ReluGrad", "cpu", "compact")
def relu_grad_applied(ctx, ins, outs, attrs):
    """ReluGrad of a gradient that max_pool_grad_relu_from_argmax already masked: a copy, or nothing when
    the output is written over it."""
    if not np.may_share_memory(outs[0], ins[0]):
        np.copyto(outs[0], ins[0])


# -- LeakyRelu -----------------------------------------------------------------------------------------------
@register_kernel("LeakyRelu", "cpu", HALF_FLOATS)
def _leaky_relu(ctx, ins, outs, attrs):
    # x > 0 ? x : alpha x is max(x, alpha x) for alpha <= 1 and min(x, alpha x) above: no mask temporary.
    x, out, alpha = ins[0], outs[0], attrs["alpha"]
    np.multiply(x, alpha, out=out)
    (np.maximum if alpha <= 1 else np.minimum)(x, out, out=out)


@register_kernel("LeakyReluGrad", "cpu", HALF_FLOATS)
def _leaky_relu_grad(ctx, ins, outs, attrs):
    g, x = ins
    out, alpha = outs[0], attrs["alpha"]
    np.greater(x, 0, out=out)  # 0/1, then 1 -> 1 and 0 -> alpha
    np.multiply(out, 1 - alpha, out=out)
    np.add(out, alpha, out=out)
    np.multiply(out, g, out=out)


# -- Elu, Softplus -------------------------------------------------------------------------------------------
@register_kernel("Elu", "cpu", HALF_FLOATS)
def _elu(ctx, ins, outs, attrs):
    x, out = ins[0], outs[0]
    np.minimum(x, 0, out=out)  # expm1 of the negative part only: no overflow for large x
    np.expm1(out, out=out)
    np.add(out, np.maximum(x, 0), out=out)


@register_kernel("EluGrad", "cpu", HALF_FLOATS)
def _elu_grad(ctx, ins, outs, attrs):
    g, y = ins
    out = outs[0]
    np.minimum(y, 0, out=out)  # y > 0: 1, else y + 1
    np.add(out, 1, out=out)
    np.multiply(out, g, out=out)


@register_kernel("Softplus", "cpu", HALF_FLOATS)
def _softplus(ctx, ins, outs, attrs):
    # log(1 + exp(x)) = max(x, 0) + log1p(exp(-|x|)), which cannot overflow.
    x, out = ins[0], outs[0]
    np.abs(x, out=out)
    np.negative(out, out=out)
    np.exp(out, out=out)
    np.log1p(out, out=out)
    np.add(out, np.maximum(x, 0), out=out)


@register_kernel("SoftplusGrad", "cpu", HALF_FLOATS)
def _softplus_grad(ctx, ins, outs, attrs):
    g, x = ins
    out = outs[0]
    # sigmoid(x) = (1 + tanh(x/2)) / 2, which cannot overflow.
    np.multiply(x, 0.5, out=out)
    np.tanh(out, out=out)
    np.multiply(out, 0.5, out=out)
    np.add(out, 0.5, out=out)
    np.multiply(out, g, out=out)


# -- LRN (NHWC, across the channel axis) ---------------------------------------------------------------------
def _window_sum(a: np.ndarray, r: int, out: np.ndarray) -> None:
    """out[..., d] = sum of a[..., d - r .. d + r] (clipped to the channel range)."""
    np.copyto(out, a)
    c = a.shape[-1]
    for k in range(1, min(r, c - 1) + 1):
        np.add(out[..., k:], a[..., :c - k], out=out[..., k:])
        np.add(out[..., :c - k], a[..., k:], out=out[..., :c - k])


@register_workspace("LRN", "cpu")
def _lrn_ws(ins, attrs):
    return [(ins[0].shape, ins[0].dtype)]


@register_kernel("LRN", "cpu", FLOATS)
def _lrn(ctx, ins, outs, attrs):
    x, y = ins[0], outs[0]
    sq = ctx.workspace(x.shape, as_dtype(x.dtype))
    np.multiply(x, x, out=sq)
    _window_sum(sq, attrs["depth_radius"], y)
    np.multiply(y, attrs["alpha"], out=y)
    np.add(y, attrs["bias"], out=y)
    np.power(y, -attrs["beta"], out=y)
    np.multiply(y, x, out=y)


@register_workspace("LRNGrad", "cpu")
def _lrn_grad_ws(ins, attrs):
    return [(ins[1].shape, ins[1].dtype)] * 2


@register_kernel("LRNGrad", "cpu", FLOATS)
def _lrn_grad(ctx, ins, outs, attrs):
    # dx_i = g_i N_i^-beta - 2 alpha beta x_i sum_{j: |j - i| <= r} g_j y_j / N_j, N = bias + alpha * sum x^2.
    g, x, y = ins
    dx, r = outs[0], attrs["depth_radius"]
    dt = as_dtype(x.dtype)
    a, norm = ctx.workspace(x.shape, dt), ctx.workspace(x.shape, dt)
    np.multiply(x, x, out=a)
    _window_sum(a, r, norm)
    np.multiply(norm, attrs["alpha"], out=norm)
    np.add(norm, attrs["bias"], out=norm)
    np.multiply(g, y, out=a)
    np.divide(a, norm, out=a)
    _window_sum(a, r, dx)
    np.multiply(dx, x, out=dx)
    np.multiply(dx, -2 * attrs["alpha"] * attrs["beta"], out=dx)
    np.power(norm, -attrs["beta"], out=norm)
    np.multiply(norm, g, out=norm)
    np.add(dx, norm, out=dx)


# -- FusedBatchNorm(V3) / FusedBatchNormGrad(V3) -------------------------------------------------------------
# Per-channel statistics over a (rows, C) view (NHWC) or an (N, C, H*W) one (NCHW), with the big outputs as the
# only full-size scratch: a kernel here allocates nothing beyond ufunc buffers.
def _bn_view(a: np.ndarray, fmt: str) -> tuple[np.ndarray, tuple, tuple]:
    """(view, reduction axes, shape of a per-channel vector broadcast against the view)."""
    if fmt == "NCHW":
        return a.reshape(a.shape[0], a.shape[1], -1), (0, 2), (a.shape[1], 1)
    return a.reshape(-1, a.shape[-1]), (0,), (a.shape[-1],)


def _fused_batch_norm(ctx, ins, outs, attrs):
    x, scale, offset, mean, variance = ins
    y, batch_mean, batch_var, saved_mean, saved_var = outs[:5]
    if len(outs) == 6:
        outs[5][...] = 0  # reserve_space_3: unused on the cpu (TF's is a zero scalar too)
    eps, fmt = attrs["epsilon"], attrs["data_format"]
    xv, axes, vec = _bn_view(x, fmt)
    yv = y.reshape(xv.shape)
    count = xv.size // max(x.shape[1 if fmt == "NCHW" else 3], 1)
    if attrs["is_training"]:
        np.mean(xv, axis=axes, out=saved_mean)
        np.subtract(xv, saved_mean.reshape(vec), out=yv)
        np.square(yv, out=yv)
        np.mean(yv, axis=axes, out=saved_var)
        m, v = saved_mean, saved_var
        f = attrs.get("exponential_avg_factor", 1.0)
        bessel = count / max(count - 1, 1)
        if f == 1.0:
            np.copyto(batch_mean, m)
            np.multiply(v, bessel, out=batch_var)
        else:
            batch_mean[...] = (1 - f) * mean + f * m
            batch_var[...] = (1 - f) * variance + (f * bessel) * v
    else:
        m, v = mean, variance
        np.copyto(batch_mean, mean)
        np.copyto(batch_var, variance)
        np.copyto(saved_mean, mean)
        np.copyto(saved_var, variance)
    factor = scale / np.sqrt(v + eps)
    np.subtract(xv, m.reshape(vec), out=yv)
    np.multiply(yv, factor.reshape(vec), out=yv)
    np.add(yv, offset.reshape(vec), out=yv)


register_kernel("FusedBatchNorm", "cpu", FLOATS)(_fused_batch_norm)
register_kernel("FusedBatchNormV3", "cpu", FLOATS)(_fused_batch_norm)


def _fused_batch_norm_grad(ctx, ins, outs, attrs):
    dy, x, scale, m, v = ins[:5]
    dx, dscale, doffset = outs[:3]
    fmt = attrs["data_format"]
    xv, axes, vec = _bn_view(x, fmt)
    dyv, dxv = dy.reshape(xv.shape), dx.reshape(xv.shape)
    count = xv.size // max(scale.size, 1)
    inv = 1 / np.sqrt(v + attrs["epsilon"])
    np.sum(dyv, axis=axes, out=doffset)
    np.subtract(xv, m.reshape(vec), out=dxv)      # x - mean
    np.multiply(dxv, dyv, out=dxv)
    s = np.sum(dxv, axis=axes)                     # sum(dy * (x - mean)), per channel
    np.multiply(s, inv, out=dscale)
    if attrs["is_training"]:
        # dx = scale * inv * (dy - sum(dy) / n - (x - mean) * inv^2 * sum(dy * (x - mean)) / n)
        np.subtract(xv, m.reshape(vec), out=dxv)
        np.multiply(dxv, (-inv * inv * s / count).reshape(vec), out=dxv)
        np.add(dxv, dyv, out=dxv)
        np.subtract(dxv, (doffset / count).reshape(vec), out=dxv)
        np.multiply(dxv, (scale * inv).reshape(vec), out=dxv)
    else:
        np.multiply(dyv, (scale * inv).reshape(vec), out=dxv)


register_kernel("FusedBatchNormGrad", "cpu", FLOATS)(_fused_batch_norm_grad)
register_kernel("FusedBatchNormGradV3", "cpu", FLOATS)(_fused_batch_norm_grad)
