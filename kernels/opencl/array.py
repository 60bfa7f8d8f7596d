"""OpenCL kernels for array and state ops. Source: array.cl.

Every data-moving array op (Transpose, Slice, StridedSlice, ConcatV2, Pack, Unpack, Tile, Pad, BroadcastTo)
is one strided copy: NumPy works out which elements a slice selects (on a view of nothing), the kernel
moves them.
Shape-only ops (Shape, Size, Rank, Reshape, Squeeze, ExpandDims, Identity) do no device work.
"""
from __future__ import annotations

import math

import numpy as np

from tfplus import dtypes
from tfplus.kernels.numpy.state import is_variable_initialized
from tfplus.kernels.opencl._common import (
    CTYPE,
    broadcast_strides,
    contiguous_strides,
    geometry,
    kernel,
    register,
    run_on_host,
)
from tfplus.kernels.opencl.elementwise import binary, fill
from tfplus.registry import find_kernel, register_kernel, register_workspace
from tfplus.runtime.opencl import int8
from tfplus.tensor_shape import strided_slice_index

SRC = "array.cl"
_BITS = {1: "int8", 2: "int16", 4: "int32", 8: "int64"}  # copies move elements of this size as is
NUM = ("float32", "float64", "int32", "int64")
ANY = (None,)


def _host(rt, a) -> np.ndarray:
    """The value of a small index/shape input (axes, perms, begin/end): its host copy, else read back."""
    return a.host if a.host is not None else rt.copy_out(a)


def copy_strided(rt, out, x, shape, so, si, out_off: int = 0, in_off: int = 0) -> None:
    """out[out_off + sum(i*so)] = x[in_off + sum(i*si)] for every index i of `shape` (strides in elements)."""
    n = math.prod(shape)
    if n == 0:
        return
    whole = n == out.size == x.size and tuple(so) == tuple(si) == contiguous_strides(shape)
    if out_off == in_off == 0 and whole:
        rt.copy(out, x)
        return
    rank, sh, s_o, s_i = geometry(shape, so, si)
    k = kernel(rt, SRC, "copy_strided", _BITS[x.dtype.itemsize])
    rt.run1d(k, n, out, x, np.int32(n), rank, sh, s_o, s_i, np.int32(out_off), np.int32(in_off))


def gather(rt, packed, parts: list) -> None:
    """packed[:] = the elements of `parts` one after another (a bucket of gradients packed for its all-reduce): one
    launch per 8 arrays, where a ConcatV2 of flat views launches one copy per array."""
    _spans(rt, "gather8", packed, parts)


def scatter(rt, parts: list, packed) -> None:
    """gather's inverse: each of `parts` gets its span of `packed`."""
    _spans(rt, "scatter8", packed, parts)


def _spans(rt, name: str, packed, parts: list) -> None:
    at = 0
    for j in range(0, len(parts), 8):
        group = [p for p in parts[j:j + 8] if p.size]
        if not group:
            continue
        ends = np.cumsum([p.size for p in group]).tolist()
        ends += ends[-1:] * (8 - len(ends))
        k = kernel(rt, SRC, name, _BITS[packed.dtype.itemsize])
        rt.run1d(k, ends[-1], packed, np.int32(at), *group, *group[:1] * (8 - len(group)), int8(ends))
        at += ends[-1]


def _selection(shape, index) -> tuple[tuple, list, int]:
    """(shape, strides, offset) in elements of `a[index]` for a C-contiguous `a` of `shape` (basic index)."""
    base = np.lib.stride_tricks.as_strided(np.zeros(1, np.uint8), shape=tuple(shape),
                                           strides=contiguous_strides(tuple(shape)))
    # NOTE: a newaxis after every dim keeps the result a view when every index is an int (`x[0, 0]`); plain
    # `base[index]` would then be a NumPy scalar, a copy elsewhere in memory, and the offset garbage.
    index = tuple(index)
    v = base[index + ((None,) if any(k is Ellipsis for k in index) else (Ellipsis, None))]
    off = v.__array_interface__["data"][0] - base.__array_interface__["data"][0]
    return v.shape[:-1], list(v.strides[:-1]), off


# -- no device work ------------------------------------------------------------------------------------------
for _t in ("Identity", "PlaceholderWithDefault", "NoOp", "Reshape", "Squeeze", "ExpandDims", "StopGradient"):
    register_kernel(_t, "opencl")(lambda ctx, ins, outs, attrs: None)


@register_kernel("Const", "opencl")
def _const(ctx, ins, outs, attrs):
    # The output takes the runtime's one device copy of the value (uploaded on first use, then kept).
    outs[0].block = ctx.runtime.constant(attrs["value"])


@register_kernel("Shape", "opencl")
def _shape(ctx, ins, outs, attrs):
    ctx.runtime.set_host(outs[0], np.array(ins[0].shape, outs[0].dtype))


@register_kernel("Size", "opencl")
def _size(ctx, ins, outs, attrs):
    ctx.runtime.set_host(outs[0], np.array(ins[0].size, outs[0].dtype))


@register_kernel("Rank", "opencl")
def _rank(ctx, ins, outs, attrs):
    ctx.runtime.set_host(outs[0], np.array(ins[0].ndim, outs[0].dtype))


# Index arithmetic on shapes: always tiny, so it runs on the host (its inputs are read back if they were not
# computed there). So do the checkpoint ops, which read and write files (TensorFlow pins them to /cpu:0): a
# TensorFlow-built graph's Saver and tf.train.init_from_checkpoint's initializers run on an OpenCL session as they are.
for _t in ("ConcatOffset", "BroadcastGradientArgs", "InvertPermutation", "Where", "SaveV2", "RestoreV2",
           "MergeV2Checkpoints"):
    def _on_host(ctx, ins, outs, attrs, _t=_t):
        run_on_host(ctx, find_kernel(_t, "cpu", None), ins, outs, attrs, upload=False)
    register_kernel(_t, "opencl")(_on_host)


# -- variables -----------------------------------------------------------------------------------------------
register_kernel("IsVariableInitialized", "opencl")(is_variable_initialized)  # device-independent


@register_kernel("Assign", "opencl")
def _assign(ctx, ins, outs, attrs):
    ctx.runtime.copy(ins[0], ins[1])


@register_kernel("AssignAdd", "opencl", NUM)
def _assign_add(ctx, ins, outs, attrs):
    binary(ctx.runtime, "add", ins[0], ins[0], ins[1])


@register_kernel("AssignSub", "opencl", NUM)
def _assign_sub(ctx, ins, outs, attrs):
    binary(ctx.runtime, "sub", ins[0], ins[0], ins[1])


# -- strided copies ------------------------------------------------------------------------------------------
@register("Transpose", ANY)
def _transpose(ctx, ins, outs, attrs):
    x, out = ins[0], outs[0]
    perm = [int(p) for p in _host(ctx.runtime, ins[1]).reshape(-1)]
    st = contiguous_strides(x.shape)
    copy_strided(ctx.runtime, out, x, out.shape, contiguous_strides(out.shape), [st[p] for p in perm])


@register("BroadcastTo", ANY)
def _broadcast_to(ctx, ins, outs, attrs):
    x, out = ins[0], outs[0]
    copy_strided(ctx.runtime, out, x, out.shape, contiguous_strides(out.shape),
                 broadcast_strides(x.shape, out.shape))


@register("Slice", ANY)
def _slice(ctx, ins, outs, attrs):
    rt, x, out = ctx.runtime, ins[0], outs[0]
    begin, size = _host(rt, ins[1]).reshape(-1), _host(rt, ins[2]).reshape(-1)
    index = tuple(slice(int(b), None if s == -1 else int(b) + int(s)) for b, s in zip(begin, size))
    shape, st, off = _selection(x.shape, index)
    copy_strided(rt, out, x, shape, contiguous_strides(shape), st, 0, off)


def _masks(attrs) -> dict:
    return {m: attrs[m] for m in _MASKS}


_MASKS = ("begin_mask", "end_mask", "ellipsis_mask", "new_axis_mask", "shrink_axis_mask")


def _strided_index(rt, ins, attrs) -> tuple:
    return strided_slice_index(*(_host(rt, a).reshape(-1) for a in ins), _masks(attrs))


@register("StridedSlice", ANY)
def _strided_slice(ctx, ins, outs, attrs):
    rt, x, out = ctx.runtime, ins[0], outs[0]
    shape, st, off = _selection(x.shape, _strided_index(rt, ins[1:4], attrs))
    copy_strided(rt, out, x, shape, contiguous_strides(shape), st, 0, off)


@register("StridedSliceGrad", ANY)
def _strided_slice_grad(ctx, ins, outs, attrs):
    rt, dy, out = ctx.runtime, ins[4], outs[0]
    fill(rt, out, 0)
    shape, st, off = _selection(out.shape, _strided_index(rt, ins[1:4], attrs))
    copy_strided(rt, out, dy, shape, st, contiguous_strides(shape), off, 0)


@register("ConcatV2", ANY)
def _concat(ctx, ins, outs, attrs):
    rt, out = ctx.runtime, outs[0]
    axis = int(_host(rt, ins[-1])) % out.ndim
    ost = contiguous_strides(out.shape)
    at = 0
    for x in ins[:-1]:
        copy_strided(rt, out, x, x.shape, ost, contiguous_strides(x.shape), at * ost[axis])
        at += x.shape[axis]


@register("Pack", ANY)
def _pack(ctx, ins, outs, attrs):
    rt, out = ctx.runtime, outs[0]
    axis = attrs["axis"] % out.ndim
    ost = contiguous_strides(out.shape)
    so = ost[:axis] + ost[axis + 1:]  # tuples
    for k, x in enumerate(ins):
        copy_strided(rt, out, x, x.shape, so, contiguous_strides(x.shape), k * ost[axis])


@register("Unpack", ANY)
def _unpack(ctx, ins, outs, attrs):
    rt, x = ctx.runtime, ins[0]
    axis = attrs["axis"] % x.ndim
    for k, out in enumerate(outs):
        shape, st, off = _selection(x.shape, (slice(None),) * axis + (k,))
        copy_strided(rt, out, x, shape, contiguous_strides(shape), st, 0, off)


@register("Tile", ANY)
def _tile(ctx, ins, outs, attrs):
    # out viewed as (m0, s0, m1, s1, ...): the copy reads x with stride 0 along every multiple.
    rt, x, out = ctx.runtime, ins[0], outs[0]
    mult = [int(m) for m in _host(rt, ins[1]).reshape(-1)]
    ost, xst = contiguous_strides(out.shape), contiguous_strides(x.shape)
    shape, so, si = [], [], []
    for m, d, o, s in zip(mult, x.shape, ost, xst):
        shape += [m, d]
        so += [o * d, o]
        si += [0, s]
    copy_strided(rt, out, x, shape, so, si)


def _pad(ctx, ins, outs, attrs):
    rt, x, out = ctx.runtime, ins[0], outs[0]
    pads = _host(rt, ins[1]).reshape(-1, 2)
    if len(ins) == 3:
        v = ins[2]
        if v.host is not None:
            fill(rt, out, v.host.item())
        else:
            rt.run1d(kernel(rt, "elementwise.cl", "fill", out.dtype), out.size, out, v, np.int32(out.size))
    else:
        fill(rt, out, 0)
    ost = contiguous_strides(out.shape)
    off = sum(int(p[0]) * s for p, s in zip(pads, ost))
    copy_strided(rt, out, x, x.shape, ost, contiguous_strides(x.shape), off)


register("Pad", NUM + ("bool",))(_pad)
register("PadV2", NUM + ("bool",))(_pad)


# -- typed kernels -------------------------------------------------------------------------------------------
@register("OneHot", NUM + ("bool",))
def _one_hot(ctx, ins, outs, attrs):
    rt, out = ctx.runtime, outs[0]
    indices, _, on, off = ins
    axis = indices.ndim if attrs["axis"] == -1 else attrs["axis"]
    depth = out.shape[axis]
    inner = math.prod(indices.shape[axis:])
    k = kernel(rt, SRC, "one_hot", out.dtype, TI=CTYPE[indices.dtype.name])
    rt.run1d(k, out.size, out, indices, on, off, np.int32(out.size), np.int32(depth), np.int32(inner))


@register("Cumsum", NUM)
def _cumsum(ctx, ins, outs, attrs):
    rt, x, out = ctx.runtime, ins[0], outs[0]
    if x.ndim == 0:
        rt.copy(out, x)
        return
    axis = int(_host(rt, ins[1])) % x.ndim
    outer, n, inner = math.prod(x.shape[:axis]), x.shape[axis], math.prod(x.shape[axis + 1:])
    rt.run1d(kernel(rt, SRC, "cumsum", x.dtype), outer * inner, out, x, np.int32(outer), np.int32(n),
             np.int32(inner), np.int32(attrs["exclusive"]), np.int32(attrs["reverse"]))


@register("InTopKV2", ("int32", "int64"))
def _in_top_k(ctx, ins, outs, attrs):
    rt = ctx.runtime
    pred, targets, k = ins
    rows, classes = pred.shape
    kern = kernel(rt, SRC, "in_top_k", pred.dtype, TI=CTYPE[targets.dtype.name])
    rt.run1d(kern, rows, outs[0], pred, targets, k, np.int32(rows), np.int32(classes))


# -- gather, scatter, split ----------------------------------------------------------------------------------
@register("GatherV2", ANY)
@register("Gather", ANY)
def _gather(ctx, ins, outs, attrs):
    rt, params, indices, out = ctx.runtime, ins[0], ins[1], outs[0]
    axis = int(_host(rt, ins[2])) % params.ndim if len(ins) == 3 else 0
    if out.size == 0:
        return
    inner = math.prod(params.shape[axis + 1:])
    k = kernel(rt, SRC, "gather", _BITS[params.dtype.itemsize], TI=CTYPE[indices.dtype.name])
    rt.run1d(k, out.size, out, params, indices, np.int32(out.size), np.int32(max(indices.size, 1)),
             np.int32(params.shape[axis]), np.int32(inner))


@register_kernel("ShapeN", "opencl")
def _shape_n(ctx, ins, outs, attrs):
    for x, out in zip(ins, outs):
        ctx.runtime.set_host(out, np.array(x.shape, out.dtype))


@register("DynamicStitch", ANY)
def _dynamic_stitch(ctx, ins, outs, attrs):
    rt, out, n = ctx.runtime, outs[0], attrs["N"]
    fill(rt, out, 0)
    inner = math.prod(out.shape[1:])
    for idx, data in zip(ins[:n], ins[n:]):  # one launch per pair, in order: a later pair's write wins
        if data.size:
            k = kernel(rt, SRC, "scatter_rows", _BITS[data.dtype.itemsize], TI=CTYPE[idx.dtype.name])
            rt.run1d(k, data.size, out, data, idx, np.int32(data.size), np.int32(inner), np.int32(out.shape[0]))


def _split_into(rt, x, axis, outs):
    xst = contiguous_strides(x.shape)
    at = 0
    for out in outs:
        copy_strided(rt, out, x, out.shape, contiguous_strides(out.shape), xst, 0, at * xst[axis])
        at += out.shape[axis]


@register("Split", ANY)
def _split(ctx, ins, outs, attrs):
    x = ins[1]
    _split_into(ctx.runtime, x, int(_host(ctx.runtime, ins[0])) % x.ndim, outs)


@register("SplitV", ANY)
def _split_v(ctx, ins, outs, attrs):
    x = ins[0]
    _split_into(ctx.runtime, x, int(_host(ctx.runtime, ins[2])) % x.ndim, outs)


@register("IdentityN", ANY)
def _identity_n(ctx, ins, outs, attrs):
    for x, out in zip(ins, outs):
        ctx.runtime.copy(out, x)


@register("Snapshot", ANY)
def _snapshot(ctx, ins, outs, attrs):
    ctx.runtime.copy(outs[0], ins[0])


register_kernel("PreventGradient", "opencl")(lambda ctx, ins, outs, attrs: None)  # output aliases input


@register("UnsortedSegmentSum", NUM)
def _unsorted_segment_sum(ctx, ins, outs, attrs):
    rt, data, ids, out = ctx.runtime, ins[0], ins[1], outs[0]
    if out.size == 0:
        return
    inner = math.prod(out.shape[1:])
    k = kernel(rt, SRC, "segment_sum", out.dtype, TI=CTYPE[ids.dtype.name])
    rt.run1d(k, out.size, out, data, ids, np.int32(out.size), np.int32(ids.size), np.int32(inner))


@register("TopKV2", NUM)
def _top_k(ctx, ins, outs, attrs):
    rt, x = ctx.runtime, ins[0]
    values, indices = outs
    n, kk = x.shape[-1], values.shape[-1]
    rows = math.prod(x.shape[:-1])
    if rows == 0 or kk == 0:
        return
    taken = ctx.workspace((rows, n), np.uint8)
    rt.run1d(kernel(rt, SRC, "top_k", x.dtype), rows, values, indices, x, taken, np.int32(rows), np.int32(n),
             np.int32(kk))


@register_workspace("TopKV2", "opencl")
def _top_k_scratch(ins, attrs, compute_units):
    x = ins[0]
    return [((math.prod(x.shape[:-1]), x.shape[-1]), dtypes.uint8)]  # a DType, as the planner sizes it
