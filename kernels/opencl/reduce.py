"""OpenCL kernels for reductions: Sum, Mean, Max, Min, Prod, All, Any, ArgMax, ArgMin, and the sum of L2Loss
(BiasAddGrad's per-channel sums are in fused.py, with the fused activation gradient's). Source: reduce.cl.

A long reduction runs in passes: work-groups write partial results, which the next pass reduces. The partials
are kernel scratch (ctx.workspace), declared for the memory planner by `partials` from shapes and the device's
compute units."""
from __future__ import annotations

import math

import numpy as np

from tfplus.kernels.opencl._common import CTYPE, contiguous_strides, geometry, kernel, register
from tfplus.registry import register_workspace

SRC = "reduce.cl"
F = ("float32", "float64")
NUM = F + ("int32", "int64")
RL = 256  # work-group size of the _wg kernels
_LIMITS = {"float32": ("-INFINITY", "INFINITY"), "float64": ("-INFINITY", "INFINITY"),
           "int32": ("(-2147483647-1)", "2147483647"),
           "int64": ("(-9223372036854775807L-1)", "9223372036854775807L"),
           "bool": ("0", "1")}


def _defines(dt) -> dict:
    lo, hi = _LIMITS[np.dtype(dt).name]
    return {"LOWEST": lo, "HIGHEST": hi, "RL": RL}


def _split(shape, axes):
    """(kept shape, kept strides, reduced shape, reduced strides) of a C-contiguous array of `shape`."""
    st = contiguous_strides(shape)
    kept = [(d, s) for i, (d, s) in enumerate(zip(shape, st)) if i not in axes]
    red = [(d, s) for i, (d, s) in enumerate(zip(shape, st)) if i in axes]
    return [d for d, _ in kept], [s for _, s in kept], [d for d, _ in red], [s for _, s in red]


def reduce(rt, name: str, out, x, axes, div=1, scratch=None) -> None:
    """out = reduction `name` (sum, sumsq, max, min, all, any) of x over `axes`, divided by div. The partials
    come from `scratch(shape, dtype)` (a kernel's ctx.workspace), else from rt.allocate."""
    key = ("reduce", name, x.shape, x.dtype, tuple(axes), div)
    plan = rt.plans.get(key)
    if plan is None:
        plan = rt.plans[key] = _plan(rt, name, x, axes, div)
    _run(rt, plan, out, x, scratch or rt.allocate)


def _passes(n_out: int, n_red: int, compute_units: int) -> tuple[int, int] | None:
    """(work-groups per output, elements each) of a long reduction: enough work-groups to fill the device,
    each reducing at least 4 * RL elements; None for a short one (one work-item per output)."""
    if n_red < 2 * RL:
        return None
    want = max(1, (4 * compute_units) // n_out)
    chunks = max(1, min(want, n_red // (4 * RL)))
    chunk = -(-n_red // chunks)
    return -(-n_red // chunk), chunk


def partials(shape, axes, compute_units: int) -> list[tuple[int, int]]:
    """The shapes of the partial results that reducing an array of `shape` over `axes` writes, pass by pass."""
    axes = {a % len(shape) for a in axes} if len(shape) else set()
    out = []
    while True:
        n_out = math.prod(d for i, d in enumerate(shape) if i not in axes)
        p = _passes(n_out, math.prod(shape[i] for i in axes), compute_units) if n_out else None
        if p is None or p[0] == 1:
            return out
        shape, axes = (p[0], n_out), {0}
        out.append(shape)


def _plan(rt, name: str, x, axes, div):
    """(kernel, global, local, scalars, partials shape or None, plan of the pass adding the partials up)."""
    axes = {a % x.ndim for a in axes} if x.ndim else set()
    kshape, kst, rshape, rst = _split(x.shape, axes)
    n_out, n_red = math.prod(kshape), math.prod(rshape)
    if n_out == 0:
        return None
    acc = np.dtype(x.dtype if x.dtype.kind == "f" else np.int64).type
    kg, rg = geometry(kshape, kst), geometry(rshape, rst)
    d = _defines(x.dtype)
    sizes = (np.int32(n_out), np.int32(n_red))
    passes = _passes(n_out, n_red, rt.info["compute_units"])
    if passes is None:
        local = min(256, rt.dev.max_wg)
        k = kernel(rt, SRC, f"{name}_rows", x.dtype, want=name, **d)
        return k, (-(-n_out // local) * local,), (local,), (*sizes, *kg, *rg, acc(div)), None, None
    chunks, chunk = passes
    k = kernel(rt, SRC, f"{name}_wg", x.dtype, want=name, **d)
    scalars = (*sizes, np.int32(chunk), *kg, *rg, acc(1 if chunks > 1 else div))
    if chunks == 1:
        return k, (RL, n_out), (RL, 1), scalars, None, None
    again = {"sumsq": "sum"}.get(name, name)  # partials are already squared
    partials = DeviceShape((chunks, n_out), x.dtype)
    return k, (chunks * RL, n_out), (RL, 1), scalars, partials, _plan(rt, again, partials, [0], div)


def split_scratch(splits: int, size: int, dtype, compute_units: int) -> list[tuple]:
    """The scratch of a GEMM that splits its sum `splits` ways over an output of `size` elements: the partial
    outputs, then what reducing them over the splits writes. Nothing when it does not split."""
    if splits == 1:
        return []
    return [((splits, size), dtype)] + [(s, dtype) for s in partials((splits, size), [0], compute_units)]


# Split sums that the splitting kernel finishes itself (matmul.cl by gemm.cl's GEMM_SPLIT_FINISH, fused.cl's
# CHANNEL_FINISH; on the devices of finishes_splits): the last work-group of each tile adds the partial sums up,
# which saves the second pass's launch (~5 us of GPU time on the H100 however small) but gives that group a serial
# tail as long as its partials are many. So a kernel finishes only short sums (below 2 * RL, where the second pass
# would be one sum_rows launch: the same sums in the same order, and no scratch beyond the partials either way).
# The filter gradients allow longer tails (conv.py WGRAD_FINISH_LOADS): their launches are the ones to save.
FINISH_LOADS = 128   # a GEMM's partials read per finishing thread (layers x its WM x WN outputs)
FINISH_CHUNKS = 64   # the channel sums' chunks (the finishing group stages them through local memory)


def finishes_splits(rt) -> bool:
    """Whether rt's kernels may finish their split sums themselves: that needs a device-wide fence, which OpenCL
    1.2 C does not have (common.cl's DEVICE_FENCE: NVIDIA's inline membar.gl; a CPU's coherent memory)."""
    return not rt.dev.is_gpu or rt.info["platform"].startswith("NVIDIA")


def finishes(rt, splits: int, cfg, most: int = FINISH_LOADS) -> bool:
    """Whether a GEMM of tiles `cfg` (_tune: TM, TN, TK, WM, WN) split `splits` ways finishes its sums in the
    kernel: it splits, rt's kernels may (finishes_splits), and each finishing thread reads at most `most`
    partials."""
    return 1 < splits and splits * cfg[3] * cfg[4] <= most and finishes_splits(rt)


def tile_counters(rt, gsize, lsize):
    """done_counters for the tiles of a GEMM launch (its first two grid dimensions; the third: its layers)."""
    return done_counters(rt, (gsize[0] // lsize[0]) * (gsize[1] // lsize[1]))


def done_counters(rt, n: int):
    """A zeroed table of at least n int counters for the kernels that finish their split sums (each sets its
    counters back to 0). One per device serves them all: a device's kernels run one after another on its
    in-order queue (rt.timing() waits for that queue before it launches on its own)."""
    size = max(1024, 1 << max(0, n - 1).bit_length())
    return rt.table(("split-counters", size), lambda: np.zeros(size, np.int32))


class DeviceShape:
    """Shape and dtype of a scratch buffer, standing in for it while a plan is made."""

    def __init__(self, shape, dtype):
        self.shape, self.dtype, self.ndim = tuple(shape), np.dtype(dtype), len(shape)


def _run(rt, plan, out, x, scratch) -> None:
    if plan is None:
        return
    k, g, loc, scalars, part, then = plan
    target = out if part is None else scratch(part.shape, part.dtype)
    rt.run(k, g, loc, target, x, *scalars)
    if part is not None:
        _run(rt, then, out, target, scratch)


def _axes(rt, x, a) -> list[int]:
    v = a.host if a.host is not None else rt.copy_out(a)
    return [int(i) for i in np.ravel(v)]


def _register(op_type: str, name: str, dtypes, mean: bool = False) -> None:
    @register(op_type, dtypes)
    def launch(ctx, ins, outs, attrs):
        x = ins[0]
        axes = {a % x.ndim for a in _axes(ctx.runtime, x, ins[1])} if x.ndim else set()
        div = 1
        if mean:  # the count; an empty float mean is 0/0 = nan as in NumPy, an empty int mean 0
            n = math.prod(x.shape[a] for a in axes)
            div = n if x.dtype.kind == "f" else max(n, 1)
        reduce(ctx.runtime, name, outs[0], x, axes, div, ctx.workspace)

    @register_workspace(op_type, "opencl")
    def _scratch(ins, attrs, compute_units):
        x = ins[0]
        return [(s, x.dtype) for s in partials(x.shape, [int(a) for a in np.ravel(ins[1].value)], compute_units)]


_register("Sum", "sum", NUM)
_register("Mean", "sum", NUM, mean=True)
_register("Max", "max", NUM)
_register("Min", "min", NUM)
_register("Prod", "prod", NUM)
_register("All", "all", ("bool",))
_register("Any", "any", ("bool",))


@register("L2Loss", F)
def _l2_loss(ctx, ins, outs, attrs):
    x = ins[0]
    reduce(ctx.runtime, "sumsq", outs[0], x, range(x.ndim), 2, ctx.workspace)


@register_workspace("L2Loss", "opencl")
def _l2_loss_scratch(ins, attrs, compute_units):
    return [(s, ins[0].dtype) for s in partials(ins[0].shape, range(len(ins[0].shape)), compute_units)]


def _register_arg(op_type: str, name: str) -> None:
    @register(op_type, NUM)
    def launch(ctx, ins, outs, attrs):
        rt, x, out = ctx.runtime, ins[0], outs[0]
        axis = _axes(rt, x, ins[1])[0] % x.ndim
        st = contiguous_strides(x.shape)
        kshape = x.shape[:axis] + x.shape[axis + 1:]
        kst = st[:axis] + st[axis + 1:]
        k = kernel(rt, SRC, name, x.dtype, TI=CTYPE[out.dtype.name])
        rt.run1d(k, out.size, out, x, np.int32(out.size), np.int32(x.shape[axis]), *geometry(kshape, kst),
                 np.int32(st[axis]))


_register_arg("ArgMax", "argmax")
_register_arg("ArgMin", "argmin")
