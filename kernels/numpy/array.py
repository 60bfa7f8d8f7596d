"""NumPy kernels for array ops. Kernels write into the output buffers they are given.

The two pure index helpers at the top are shared with the ops' shape functions (tfplus.ops.array_ops), so a
shape function and its kernel cannot disagree about what a slice selects."""
from __future__ import annotations

import numpy as np

from tfplus.registry import register_kernel
from tfplus.tensor_shape import broadcast_gradient_args_value, strided_slice_index

_MASKS = ("begin_mask", "end_mask", "ellipsis_mask", "new_axis_mask", "shrink_axis_mask")


def _masks(attrs):
    return {m: attrs[m] for m in _MASKS}


@register_kernel("Const", "cpu")
def _const(ctx, ins, outs, attrs):
    np.copyto(outs[0], attrs["value"])


# Ops whose output aliases their input: the executor already made the view, nothing to compute.
for _t in ("Identity", "PlaceholderWithDefault", "NoOp", "Reshape", "Squeeze", "ExpandDims", "StopGradient"):
    register_kernel(_t, "cpu")(lambda ctx, ins, outs, attrs: None)


@register_kernel("Fill", "cpu")
def _fill(ctx, ins, outs, attrs):
    outs[0].fill(ins[1])


@register_kernel("ZerosLike", "cpu")
def _zeros_like(ctx, ins, outs, attrs):
    outs[0].fill(0)


@register_kernel("OnesLike", "cpu")
def _ones_like(ctx, ins, outs, attrs):
    outs[0].fill(1)


@register_kernel("Transpose", "cpu")
def _transpose(ctx, ins, outs, attrs):
    np.copyto(outs[0], ins[0].transpose([int(p) for p in ins[1]]))


@register_kernel("InvertPermutation", "cpu")
def _invert_permutation(ctx, ins, outs, attrs):
    if sorted(ins[0].tolist()) != list(range(ins[0].size)):
        raise ValueError(f"{ins[0].tolist()} is not a permutation of 0..{ins[0].size - 1}")
    outs[0][ins[0]] = np.arange(ins[0].size)


@register_kernel("ConcatV2", "cpu")
def _concat(ctx, ins, outs, attrs):
    np.concatenate(ins[:-1], axis=int(ins[-1]), out=outs[0])


@register_kernel("ConcatOffset", "cpu")
def _concat_offset(ctx, ins, outs, attrs):
    axis, offset = int(ins[0]) % max(ins[1].size, 1), 0
    for s, out in zip(ins[1:], outs):
        out.fill(0)
        out[axis] = offset
        offset += int(s[axis])


@register_kernel("Pad", "cpu")
@register_kernel("PadV2", "cpu")
def _pad(ctx, ins, outs, attrs):
    outs[0].fill(ins[2] if len(ins) == 3 else 0)
    outs[0][tuple(slice(int(b), int(b) + d) for (b, _), d in zip(ins[1], ins[0].shape))] = ins[0]


@register_kernel("Shape", "cpu")
def _shape(ctx, ins, outs, attrs):
    outs[0][...] = ins[0].shape


@register_kernel("Size", "cpu")
def _size(ctx, ins, outs, attrs):
    outs[0][...] = ins[0].size


@register_kernel("Rank", "cpu")
def _rank(ctx, ins, outs, attrs):
    outs[0][...] = ins[0].ndim


@register_kernel("OneHot", "cpu")
def _one_hot(ctx, ins, outs, attrs):
    indices, depth, on, off = ins
    axis = indices.ndim if attrs["axis"] == -1 else attrs["axis"]
    hot = np.expand_dims(indices, axis) == np.arange(int(depth)).reshape((-1,) + (1,) * (indices.ndim - axis))
    outs[0].fill(off)
    outs[0][hot] = on  # out-of-range indices give an all-off row, as in TF


@register_kernel("Tile", "cpu")
def _tile(ctx, ins, outs, attrs):
    np.copyto(outs[0], np.tile(ins[0], [int(m) for m in ins[1]]))


@register_kernel("Slice", "cpu")
def _slice(ctx, ins, outs, attrs):
    x, begin, size = ins
    index = tuple(slice(int(b), None if s == -1 else int(b) + int(s)) for b, s in zip(begin, size))
    np.copyto(outs[0], x[index])


@register_kernel("StridedSlice", "cpu")
def _strided_slice(ctx, ins, outs, attrs):
    outs[0][...] = ins[0][strided_slice_index(ins[1], ins[2], ins[3], _masks(attrs))]


@register_kernel("StridedSliceGrad", "cpu")
def _strided_slice_grad(ctx, ins, outs, attrs):
    outs[0].fill(0)
    outs[0][strided_slice_index(ins[1], ins[2], ins[3], _masks(attrs))] = ins[4]


@register_kernel("Pack", "cpu")
def _pack(ctx, ins, outs, attrs):
    np.stack(ins, axis=attrs["axis"], out=outs[0])


@register_kernel("Unpack", "cpu")
def _unpack(ctx, ins, outs, attrs):
    axis = attrs["axis"] % ins[0].ndim
    for k, out in enumerate(outs):
        out[...] = ins[0][(slice(None),) * axis + (k,)]


@register_kernel("BroadcastTo", "cpu")
def _broadcast_to(ctx, ins, outs, attrs):
    outs[0][...] = ins[0]


@register_kernel("BroadcastGradientArgs", "cpu")
def _broadcast_gradient_args(ctx, ins, outs, attrs):
    for out, r in zip(outs, broadcast_gradient_args_value(ins[0].tolist(), ins[1].tolist())):
        out[...] = r


@register_kernel("GatherV2", "cpu")
@register_kernel("Gather", "cpu")
def _gather(ctx, ins, outs, attrs):
    params, indices = ins[0], ins[1]
    axis = int(ins[2]) % params.ndim if len(ins) == 3 else 0
    bad = (indices < 0) | (indices >= params.shape[axis])
    if bad.any():
        raise ValueError(f"indices {indices[bad].tolist()[:5]} are out of range [0, {params.shape[axis]})")
    outs[0][...] = np.take(params, indices, axis=axis)


@register_kernel("ShapeN", "cpu")
def _shape_n(ctx, ins, outs, attrs):
    for x, out in zip(ins, outs):
        out[...] = x.shape


@register_kernel("DynamicStitch", "cpu")
def _dynamic_stitch(ctx, ins, outs, attrs):
    n = attrs["N"]
    out = outs[0]
    out.fill(0)
    inner = out.shape[1:]
    for idx, data in zip(ins[:n], ins[n:]):  # in order: a later write of one slot wins, as in TF
        out[idx.reshape(-1)] = data.reshape((-1,) + inner)


@register_kernel("Split", "cpu")
def _split(ctx, ins, outs, attrs):
    x = ins[1]
    _split_into(x, int(ins[0]) % x.ndim, outs)


@register_kernel("SplitV", "cpu")
def _split_v(ctx, ins, outs, attrs):
    x = ins[0]
    _split_into(x, int(ins[2]) % x.ndim, outs)


def _split_into(x, axis, outs):
    at = 0
    for out in outs:  # the sizes come from the outputs the shape function sized
        n = out.shape[axis]
        out[...] = x[(slice(None),) * axis + (slice(at, at + n),)]
        at += n


@register_kernel("IdentityN", "cpu")
def _identity_n(ctx, ins, outs, attrs):
    for x, out in zip(ins, outs):
        np.copyto(out, x)


@register_kernel("Snapshot", "cpu")
def _snapshot(ctx, ins, outs, attrs):
    np.copyto(outs[0], ins[0])


register_kernel("PreventGradient", "cpu")(lambda ctx, ins, outs, attrs: None)  # its output aliases its input
