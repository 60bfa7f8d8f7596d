"""NumPy kernels for the fused ops of the graph rewrite (tfplus/ops/fused_ops.py, tfplus.engine.rewrite).

Each shard of rows does the whole chain while its rows are in cache: the activation right after the bias, and
the bias gradient's partial sums right after the masked gradient. The partial sums are the ones BiasAddGrad's
kernel makes (same shards, same order), so a fused step equals the unfused one bit for bit.
"""
from __future__ import annotations

import numpy as np

from tfplus import threads
from tfplus.dtypes import FLOATS, as_dtype, bool_
from tfplus.ops.fused_ops import APPLY_SCALARS, apply_groups, split_decay
from tfplus.registry import (
    WORKSPACES,
    ChunkSpec,
    TensorSpec,
    find_kernel,
    get_op_def,
    register_kernel,
    register_variant,
    register_workspace,
)


def _channel_shape(x: np.ndarray, fmt: str) -> tuple:
    return (x.shape[1],) + (1,) * (x.ndim - 2) if fmt == "NCHW" else (x.shape[-1],)


def _activate(out: np.ndarray, activation: str) -> None:
    if activation == "Relu":
        np.maximum(out, 0, out=out)
    else:
        np.clip(out, 0, 6, out=out)


@register_kernel("_FusedBiasAddRelu", "cpu", FLOATS, inplace=(0,))
def _fused_bias_add_relu(ctx, ins, outs, attrs):
    x, b = ins
    act = attrs["activation"]

    def body(o, a, c):
        np.add(a, c, out=o)
        _activate(o, act)
    threads.sharded(body, outs[0], x, b.reshape(_channel_shape(x, attrs["data_format"])))


# -- _FusedConv2DBiasRelu: the Conv2D kernel, then the bias and the activation over its output in place ----------
@register_kernel("_FusedConv2DBiasRelu", "cpu", FLOATS, chunk=ChunkSpec(batch=(0,), scratch_divisor=True))
def _fused_conv2d_bias_relu(ctx, ins, outs, attrs):
    x, f, b = ins
    find_kernel("Conv2D", "cpu", as_dtype(x.dtype))(ctx, [x, f], outs, attrs)
    _fused_bias_add_relu(ctx, [outs[0], b], outs, attrs)


@register_workspace("_FusedConv2DBiasRelu", "cpu")
def _fused_conv2d_bias_relu_ws(ins, attrs):
    return WORKSPACES[("Conv2D", "cpu")](ins[:2], attrs)


# -- The backward folds (issue 37): the unfused kernels one after the other, the NumPy reference of the OpenCL
# kernels that do each in one launch. The ReLU mask is a multiply by (features > 0), as ReluGrad's kernel does.
def _mask_by(ctx, out: np.ndarray, features: np.ndarray, activation: str) -> None:
    keep = ctx.workspace(out.shape, bool_)
    np.greater(features, 0, out=keep)
    np.multiply(out, keep, out=out)
    if activation == "Relu6":
        np.less(features, 6, out=keep)
        np.multiply(out, keep, out=out)


@register_kernel("_FusedConv2DBackpropInputReluGrad", "cpu", FLOATS)
def _fused_dx_relu_grad(ctx, ins, outs, attrs):
    find_kernel("Conv2DBackpropInput", "cpu", as_dtype(ins[1].dtype))(ctx, ins[:3], outs, attrs)
    _mask_by(ctx, outs[0], ins[3], attrs["activation"])


@register_workspace("_FusedConv2DBackpropInputReluGrad", "cpu")
def _fused_dx_relu_grad_ws(ins, attrs):
    return WORKSPACES[("Conv2DBackpropInput", "cpu")](ins[:3], attrs) + [(ins[3].shape, bool_)]


@register_kernel("_FusedMaxPoolGradReluGrad", "cpu", FLOATS)
def _fused_pool_relu_grad(ctx, ins, outs, attrs):
    find_kernel("MaxPoolGrad", "cpu", as_dtype(ins[0].dtype))(ctx, ins, outs, attrs)
    _mask_by(ctx, outs[0], ins[0], "Relu")


@register_workspace("_FusedMaxPoolGradReluGrad", "cpu")
def _fused_pool_relu_grad_ws(ins, attrs):
    return WORKSPACES[("MaxPoolGrad", "cpu")](ins, attrs) + [(ins[0].shape, bool_)]


@register_kernel("_FusedConv2DBackpropFilterBiasAddGrad", "cpu", FLOATS)
def _fused_dw_bias(ctx, ins, outs, attrs):
    find_kernel("Conv2DBackpropFilter", "cpu", as_dtype(ins[0].dtype))(ctx, ins, outs[:1], attrs)
    find_kernel("BiasAddGrad", "cpu", as_dtype(ins[0].dtype))(ctx, ins[2:], outs[1:], _bias_attrs(attrs))


def _bias_attrs(attrs) -> dict:
    return {"T": attrs["T"], "data_format": attrs.get("data_format", "NHWC")}


@register_workspace("_FusedConv2DBackpropFilterBiasAddGrad", "cpu")
def _fused_dw_bias_ws(ins, attrs):
    return WORKSPACES[("Conv2DBackpropFilter", "cpu")](ins, attrs) + \
        WORKSPACES[("BiasAddGrad", "cpu")](ins[2:], _bias_attrs(attrs))


# -- _FusedMatMul: the MatMul kernel, then the bias and the activation over its output in place ----------------
@register_kernel("_FusedMatMul", "cpu", FLOATS)
def _fused_matmul(ctx, ins, outs, attrs):
    a, b, bias = ins
    find_kernel("MatMul", "cpu", as_dtype(a.dtype))(ctx, [a, b], outs, attrs)

    def body(o, c):
        np.add(o, c, out=o)
        if attrs["activation"]:
            _activate(o, attrs["activation"])
    threads.sharded(body, outs[0], bias)


# -- _FusedReluGradBiasAddGrad -----------------------------------------------------------------------------------
def _rows(shape, fmt: str) -> tuple[int, int]:
    """The gradient as a (rows, columns) matrix: NCHW sums each row (image and channel), NHWC each column."""
    if fmt == "NCHW":
        return shape[0] * shape[1], int(np.prod(shape[2:]))
    return int(np.prod(shape[:-1])), shape[-1]


def _grain(cols: int) -> int:
    return max(1, threads.GRAIN // max(cols, 1))


@register_workspace("_FusedReluGradBiasAddGrad", "cpu")
def _fused_relu_grad_ws(ins, attrs):
    """Relu6: the mask f > 0; then the vector of ones and the partial sums (as BiasAddGrad's kernel)."""
    shape, dtype = ins[0].shape, ins[0].dtype
    rows, cols = _rows(shape, attrs["data_format"])
    mask = [(shape, bool_)] if attrs["activation"] == "Relu6" else []
    if attrs["data_format"] == "NCHW":
        return mask + [((cols,), dtype), ((rows,), dtype)]
    return mask + [((rows,), dtype), ((len(threads.split(rows, _grain(cols))), cols), dtype)]


@register_kernel("_FusedReluGradBiasAddGrad", "cpu", FLOATS, inplace=(1,))
def _fused_relu_grad_bias_add_grad(ctx, ins, outs, attrs):
    _relu_grad_bias_sums(ctx, ins, outs, attrs, masked=False)


@register_variant("_FusedReluGradBiasAddGrad", "cpu", "compact")
def fused_relu_grad_applied(ctx, ins, outs, attrs):
    """The kernel when max_pool_grad_relu_from_argmax already applied the ReLU mask (planner.compact): dx is
    the gradient (a copy, or nothing when written over it) and features are not read."""
    _relu_grad_bias_sums(ctx, ins, outs, attrs, masked=True)


def _relu_grad_bias_sums(ctx, ins, outs, attrs, masked: bool):
    g, f = ins
    dx, db = outs
    fmt, act = attrs["data_format"], attrs["activation"]
    dtype = as_dtype(g.dtype)
    rows, cols = _rows(g.shape, fmt)
    gm, fm, dm = g.reshape(rows, cols), f.reshape(rows, cols), dx.reshape(rows, cols)
    pos = ctx.workspace(g.shape, bool_).reshape(rows, cols) if act == "Relu6" and not masked else None

    def mask(lo, hi):
        # NOTE: f is read before dx is written, element by element: dx may share f's buffer (planner.inplace).
        if masked:
            if not np.may_share_memory(dm, gm):
                np.copyto(dm[lo:hi], gm[lo:hi])
            return
        if pos is None:
            np.greater(fm[lo:hi], 0, out=dm[lo:hi])
        else:
            np.greater(fm[lo:hi], 0, out=pos[lo:hi])
            np.less(fm[lo:hi], 6, out=dm[lo:hi])
            np.multiply(dm[lo:hi], pos[lo:hi], out=dm[lo:hi])
        np.multiply(dm[lo:hi], gm[lo:hi], out=dm[lo:hi])

    if fmt == "NCHW":
        ones, per_row = ctx.workspace((cols,), dtype), ctx.workspace((rows,), dtype)
        ones.fill(1)

        def nchw(lo, hi):
            mask(lo, hi)
            np.matmul(dm[lo:hi], ones, out=per_row[lo:hi])
        threads.parallel_for(rows, nchw, _grain(cols))
        np.sum(per_row.reshape(g.shape[0], g.shape[1]), axis=0, out=db)
        return
    ranges = threads.split(rows, _grain(cols))
    ones, parts = ctx.workspace((rows,), dtype), ctx.workspace((len(ranges), cols), dtype)
    ones.fill(1)

    def nhwc(i):
        lo, hi = ranges[i]
        mask(lo, hi)
        np.matmul(ones[lo:hi], dm[lo:hi], out=parts[i])
    threads.run(nhwc, range(len(ranges)))
    np.sum(parts, axis=0, out=db)  # in shard order: deterministic for a thread count


# -- _FusedL2Loss -------------------------------------------------------------------------------------------------
@register_kernel("_FusedL2Loss", "cpu", FLOATS)
def _fused_l2_loss(ctx, ins, outs, attrs):
    total = outs[0].dtype.type(0)
    for t in ins:  # L2Loss's arithmetic, added up in AddN's order
        x = t.reshape(-1)
        total = total + np.dot(x, x) / 2
    outs[0][...] = total


# -- _FusedSparseXentMean: the cross-entropy kernel, the Mean kernel's mean of its rows, the backprop scaled ------
@register_workspace("_FusedSparseXentMean", "cpu")
def _fused_xent_mean_ws(ins, attrs):
    return [((ins[0].shape[0],), ins[0].dtype)]  # the rows' losses


@register_kernel("_FusedSparseXentMean", "cpu", FLOATS)
def _fused_xent_mean(ctx, ins, outs, attrs):
    logits, _ = ins
    loss, backprop = outs
    rows = ctx.workspace((logits.shape[0],), as_dtype(logits.dtype))
    find_kernel("SparseSoftmaxCrossEntropyWithLogits", "cpu", as_dtype(logits.dtype))(ctx, ins, [rows, backprop],
                                                                                       attrs)
    np.mean(rows, axis=(0,), out=loss)
    t = backprop.dtype.type
    np.multiply(backprop, t(1) / t(max(len(rows), 1)), out=backprop)  # Mean's gradient scale, in T


# -- _FusedApply -------------------------------------------------------------------------------------------------
# A variable updates UPDATE_PIECE elements at a time (the updates are elementwise, so each element's arithmetic is
# the same), through scratch of that size: a large layer's update needs no scratch as big as its weights (Mentee's
# fc1, 2.1 MB, would set the peak of a micro-batched step; planner.accumulate).
UPDATE_PIECE = 1 << 16


class _SharedScratch:
    """The context each variable's update kernel sees: its scratch requests are views of one set of buffers
    sized for the largest piece of a variable (the pieces update one after another), the rest is the op's
    context."""

    def __init__(self, ctx, largest: int, dtypes: list):
        self._ctx, self._i = ctx, 0
        self._bufs = [ctx.workspace((largest,), dt) for dt in dtypes]

    def restart(self) -> None:
        self._i = 0

    def workspace(self, shape, dtype):
        buf = self._bufs[self._i]
        self._i += 1
        return buf[:int(np.prod(shape))].reshape(shape)

    def __getattr__(self, name):
        return getattr(self._ctx, name)


def _scratch_dtypes(size: int, attrs) -> list:
    """The dtypes of the scratch buffers one variable's update (attrs["op"]) asks for."""
    op_def = get_op_def(attrs["op"])
    declare = WORKSPACES.get((op_def.name, "cpu"))
    if declare is None:
        return []
    return [dt for _, dt in declare([TensorSpec((size,), attrs["T"])] * len(op_def.inputs), attrs)]


@register_workspace("_FusedApply", "cpu")
def _fused_apply_ws(ins, attrs):
    """What one piece of a variable's update asks for, sized for the largest (see _SharedScratch); a decayed
    update uses the same one buffer (_decayed_update)."""
    largest = max(int(np.prod(g[0].shape)) for g in apply_groups(attrs["op"], split_decay(ins, attrs)[0]))
    piece = min(largest, UPDATE_PIECE)
    return [((piece,), dt) for dt in _scratch_dtypes(piece, attrs)]


@register_kernel("_FusedApply", "cpu", FLOATS)
def _fused_apply(ctx, ins, outs, attrs):
    ins, decay = split_decay(ins, attrs)
    groups = apply_groups(attrs["op"], ins)
    kernel = find_kernel(attrs["op"], "cpu", as_dtype(ins[0].dtype))
    piece = min(max(g[0].size for g in groups), UPDATE_PIECE)
    scratch = _SharedScratch(ctx, piece, _scratch_dtypes(piece, attrs))
    scalars = APPLY_SCALARS[attrs["op"]]
    for group, decays in zip(groups, attrs.get("decayed") or [0] * len(groups)):
        flat = [x if i in scalars else _flat(x) for i, x in enumerate(group)]
        for lo in range(0, group[0].size, piece):
            part = [x if i in scalars else x[lo:lo + piece] for i, x in enumerate(flat)]
            scratch.restart()
            if decays:
                _decayed_update(scratch, part, decay, attrs)
            else:
                kernel(scratch, part, [part[0]], attrs)


@register_variant("_FusedApply", "cpu", "folded")
def _fused_apply_folded(ctx, ins, outs, attrs):
    """Each momentum update as ApplyMomentum's "folded" variant, var -= lr * accum, in the pieces and the scratch
    of _fused_apply (no decay: planner.batch.slot_folds folds none)."""
    groups = apply_groups(attrs["op"], split_decay(ins, attrs)[0])
    kernel = find_kernel("ApplyGradientDescent", "cpu", as_dtype(ins[0].dtype))
    piece = min(max(g[0].size for g in groups), UPDATE_PIECE)
    scratch = _SharedScratch(ctx, piece, _scratch_dtypes(piece, attrs))
    for var, accum, lr, _, _ in groups:
        var, accum = _flat(var), _flat(accum)
        for lo in range(0, var.size, piece):
            scratch.restart()
            kernel(scratch, [var[lo:lo + piece], lr, accum[lo:lo + piece]], [var[lo:lo + piece]], attrs)


def _flat(x: np.ndarray) -> np.ndarray:
    """A flat view of `x` (never a copy: an update writes through it)."""
    v = x.reshape(-1)
    if v.size and not np.may_share_memory(v, x):  # NOTE: a copy would be updated instead of the variable
        raise ValueError(f"_FusedApply: a variable of shape {x.shape} and strides {x.strides} has no flat view")
    return v


def _decayed_update(ctx, group, decay, attrs) -> None:
    """The update of one variable whose gradient is var * decay + grad (the AddN(Mul(var, decay), grad) folded
    in), in the one scratch buffer that the update's own kernel asks for: the decayed gradient lives there."""
    op = attrs["op"]
    var = group[0]
    tmp = ctx.workspace(var.shape, attrs["T"])
    if op == "ApplyGradientDescent":
        _, alpha, grad = group

        def sgd(var, grad, tmp):
            np.multiply(var, decay, out=tmp)
            tmp += grad
            tmp *= alpha  # then as ApplyGradientDescent
            var -= tmp
        threads.sharded(sgd, var, grad, tmp)
        return
    _, accum, lr, grad, momentum = group
    nesterov = attrs.get("use_nesterov", False)

    def momentum_body(var, accum, grad, tmp):
        np.multiply(var, decay, out=tmp)
        tmp += grad
        accum *= momentum
        accum += tmp
        if nesterov:  # lr * (d + momentum * accum) as lr * d + (lr * momentum) * accum: tmp holds d
            tmp *= lr
            var -= tmp
            np.multiply(accum, lr * momentum, out=tmp)
        else:
            np.multiply(accum, lr, out=tmp)
        var -= tmp
    threads.sharded(momentum_body, var, accum, grad, tmp)


# -- _FusedMovingAverages: each variable as its Sub, Mul and AssignSub kernels would update it ---------------------
@register_workspace("_FusedMovingAverages", "cpu")
def _fused_moving_averages_ws(ins, attrs):
    """(variable - value) * factor of one variable at a time: sized for the largest."""
    return [((max(int(np.prod(v.shape)) for v in ins[0::3]),), attrs["T"])]


@register_kernel("_FusedMovingAverages", "cpu", FLOATS)
def _fused_moving_averages(ctx, ins, outs, attrs):
    largest = max(v.size for v in ins[0::3])
    tmp = ctx.workspace((largest,), attrs["T"])
    for j in range(0, len(ins), 3):
        var, value, factor = ins[j:j + 3]
        delta = tmp[:var.size].reshape(var.shape)
        np.subtract(var, value, out=delta)
        np.multiply(delta, factor, out=delta)
        np.subtract(var, delta, out=var)


# -- _FusedBatchNormRelu / _FusedBatchNormReluGrad: the batch norm's kernels with the activation's ---------------
@register_kernel("_FusedBatchNormRelu", "cpu", FLOATS)
def _fused_batch_norm_relu(ctx, ins, outs, attrs):
    find_kernel("FusedBatchNormV3", "cpu", as_dtype(ins[0].dtype))(ctx, ins, outs, attrs)
    find_kernel(attrs["activation"], "cpu", as_dtype(ins[0].dtype))(ctx, [outs[0]], [outs[0]], attrs)


@register_workspace("_FusedBatchNormReluGrad", "cpu")
def _fused_batch_norm_relu_grad_ws(ins, attrs):
    """dy, the activation's gradient; then what its kernel asks for (Relu6Grad's mask)."""
    own = WORKSPACES.get((attrs["activation"] + "Grad", "cpu"))
    return [(ins[0].shape, ins[0].dtype)] + (own([ins[0], ins[6]], attrs) if own else [])


@register_kernel("_FusedBatchNormReluGrad", "cpu", FLOATS)
def _fused_batch_norm_relu_grad(ctx, ins, outs, attrs):
    dz, z, dtype = ins[0], ins[6], as_dtype(ins[0].dtype)
    dy = ctx.workspace(dz.shape, dtype)
    find_kernel(attrs["activation"] + "Grad", "cpu", dtype)(ctx, [dz, z], [dy], attrs)  # the mask: z as y
    find_kernel("FusedBatchNormGradV3", "cpu", dtype)(ctx, [dy, *ins[1:6]], outs, attrs)
