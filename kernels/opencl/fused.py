"""OpenCL kernels for the fused ops of the graph rewrite (tfplus.engine.rewrite): bias + activation in one launch,
the activation's gradient with the bias gradient in one pass (BiasAddGrad shares its kernel), and the
multi-variable optimizer update. Source: fused.cl."""
from __future__ import annotations

import math

import numpy as np

from tfplus.dtypes import as_dtype
from tfplus.kernels.opencl._common import CTYPE, kernel, plan, register
from tfplus.kernels.opencl.reduce import FINISH_CHUNKS, done_counters, finishes_splits, partials, reduce
from tfplus.ops.fused_ops import apply_groups, split_decay
from tfplus.registry import find_kernel, register_variant, register_workspace
from tfplus.runtime.opencl import int8

SRC = "fused.cl"
F = ("float32", "float64")
# Work-items per group of the channel sums (a power of two: the group sums in a tree).
_WG = 256
_SLOTS = 8  # tensors per launch of the multi-tensor kernels (fused.cl's take 8 sets of buffers)


def _geometry(shape, fmt: str) -> tuple[int, int, int]:
    """(outer, C, inner) of a tensor: NCHW is (N, C, H*W), NHWC (N*H*W, C, 1)."""
    if fmt == "NCHW":
        return shape[0], shape[1], math.prod(shape[2:])
    return math.prod(shape[:-1]), shape[-1], 1


@register("_FusedBiasAddRelu", F, host=False, inplace=(0,))
def _fused_bias_add_relu(ctx, ins, outs, attrs):
    rt, (x, b), out = ctx.runtime, ins, outs[0]

    def make():
        _, c, inner = _geometry(x.shape, attrs["data_format"])
        k = kernel(rt, SRC, "fused_bias_relu", x.dtype, RELU6=int(attrs["activation"] == "Relu6"))
        return (k, *rt.grid1d(out.size), np.int32(out.size), np.int32(c), np.int32(inner))
    k, g, loc, *scalars = plan(rt, ("fused_bias_relu", x.shape, x.dtype, attrs["data_format"], attrs["activation"]),
                               make)
    rt.run(k, g, loc, out, x, b, *scalars)


@register("_FusedReluGradBiasAddGrad", F, host=False, inplace=(0, 1))
def _fused_relu_grad_bias_add_grad(ctx, ins, outs, attrs):
    g, f = ins
    channel_sums(ctx, outs[1], g, attrs["data_format"], f=f, dx=outs[0], activation=attrs["activation"])


@register_variant("_FusedReluGradBiasAddGrad", "opencl", "compact")
def fused_relu_grad_applied(ctx, ins, outs, attrs) -> None:
    """The kernel when max_pool_grad_relu_from_argmax already applied the ReLU mask (planner.compact): dx is
    the gradient and the features are not read."""
    channel_sums(ctx, outs[1], ins[0], attrs["data_format"], dx=outs[0])


@register_variant("_FusedReluGradBiasAddGrad", "opencl", "pooled")
def fused_relu_grad_pooled(ctx, ins, outs, attrs, y, g, argmax) -> None:
    """The kernel of a compact ReLU -> 2x2 max-pool pair whose MaxPoolGrad launches nothing (planner.compact,
    `pooled`): dx and db straight from the pool output y, its gradient g and its argmax, one pass instead of
    max_pool_grad_relu_from_argmax and then this op. Same values, bit for bit (the same sums in the same order)."""
    channel_sums(ctx, outs[1], g, attrs["data_format"], dx=outs[0], pooled=(y, argmax))


@register_workspace("_FusedReluGradBiasAddGrad", "opencl")
def _fused_relu_grad_scratch(ins, attrs, compute_units):
    return channel_scratch(ins[0].shape, attrs["data_format"], ins[0].dtype, compute_units)


@register("_FusedSparseXentMean", F, host=False)
def _fused_xent_mean(ctx, ins, outs, attrs):
    rt, (x, labels), (loss, backprop) = ctx.runtime, ins, outs
    rows, cols = x.shape
    wg = 1 << (min(_WG, rt.dev.max_wg).bit_length() - 1)  # one group of a power of two (nn.cl's tree)
    k = kernel(rt, "nn.cl", "sparse_xent_mean", x.dtype, TI=CTYPE[labels.dtype.name], XM_WG=wg)
    t = x.dtype.type
    rt.run(k, (wg,), (wg,), loss, backprop, x, labels, np.int32(rows), np.int32(cols), t(1) / t(max(rows, 1)))


# -- per-channel sums (fused.cl's relu_grad_bias_*; BiasAddGrad uses them too) ------------------------------------
# Work-groups in flight per compute unit that the chunks aim for (a bandwidth-bound pass wants the GPU full),
# and the fewest elements a work-group sums (fewer would leave the partials' second pass doing the work).
_GROUPS_PER_CU = 8
_LEAST = 4 * _WG


def _chunks(shape, fmt: str, compute_units: int) -> tuple[int, int]:
    """(chunks, elements or rows per chunk) of the channel sums over a tensor of `shape`; a function of shapes
    and compute units only, so that the memory planner knows the partials (channel_scratch)."""
    outer, c, inner = _geometry(shape, fmt)
    if inner > 1:
        span, blocks, per_row = outer * inner, max(c, 1), 1
    else:
        span, blocks, per_row = outer, max(1, -(-c // _WG)), min(c, _WG)
    chunks = max(1, min(_GROUPS_PER_CU * compute_units // blocks, span * per_row // _LEAST))
    chunk = max(1, -(-span // chunks))
    return max(1, -(-span // chunk)), chunk


@register("BiasAddGrad", F)
def _bias_add_grad(ctx, ins, outs, attrs):
    channel_sums(ctx, outs[0], ins[0], _bias_format(ins[0].shape, attrs))


@register_workspace("BiasAddGrad", "opencl")
def _bias_add_grad_scratch(ins, attrs, compute_units):
    return channel_scratch(ins[0].shape, _bias_format(ins[0].shape, attrs), ins[0].dtype, compute_units)


def _bias_format(shape, attrs) -> str:
    """BiasAdd's layout: NCHW puts the channel on axis 1 only for a tensor of rank 3 or more."""
    return "NCHW" if attrs.get("data_format", "NHWC") == "NCHW" and len(shape) > 2 else "NHWC"


def channel_scratch(shape, fmt: str, dtype, compute_units: int, sums: int = 1) -> list[tuple]:
    """The scratch channel_sums asks for (`sums`: 2 for batch norm's): the partial sums of each, then what
    summing each of them writes."""
    chunks = _chunks(shape, fmt, compute_units)[0]
    c = _geometry(shape, fmt)[1]
    if chunks == 1:
        return []
    return [((chunks, c), dtype)] * sums + [(s, dtype) for s in partials((chunks, c), [0], compute_units)] * sums


def channel_sums(ctx, db, g, fmt: str, f=None, dx=None, activation: str = "Relu", bn=None,
                 centered=None, pooled=None, mask=None, shifted: bool = False) -> None:
    """db = g summed over all but the channel axis of `fmt`; with dx, also dx = g masked by the gradient of
    `activation` at the features f (or dx = g when f is None: the mask was applied already); with bn =
    (dscale, mean, var, eps), also dscale = sum(g * (f - mean)) / sqrt(var + eps), f being batch norm's x; with
    centered = (sums, count), db sums (g - sums / count)^2 instead (batch norm's variance); with pooled = (y,
    argmax), g is the gradient of y, a 2x2 max-pool of dx's shape whose windows' first maxima `argmax` holds, and
    dx and db are those of the ReLU before the pool (fused.cl MODE 5); with bn and mask = z, g is masked first by
    the gradient of `activation` at its output z (a batch norm fused with its ReLU: MODE 6); with shifted and
    bn = (second, ...), db sums g - K and second (g - K)^2, K the channel's first element (batch norm's statistics
    in one pass: MODE 7). The partial sums come from ctx.workspace (channel_scratch)."""
    if db.size == 0:  # no channels: nothing to sum, no dx elements
        return
    rt = ctx.runtime
    mode = 5 if pooled is not None else 4 if centered is not None else \
        (7 if shifted else 3 if mask is None else 6) if bn is not None else 2 if dx is None else 1 if f is None else 0
    shape = dx.shape if pooled is not None else g.shape  # the elements summed

    def make():
        outer, c, inner = _geometry(shape, fmt)
        wg = min(_WG, 1 << (rt.dev.max_wg.bit_length() - 1))
        chunks, chunk = _chunks(shape, fmt, rt.info["compute_units"])
        width = np.int32(shape[-1] if fmt == "NCHW" else shape[-2])
        defines = {"MODE": mode, "WG": wg, "RELU6": int(activation == "Relu6")}
        if inner > 1:
            k = kernel(rt, SRC, "relu_grad_bias_planes", g.dtype, **defines)
            return k, (chunks * wg, c), (wg, 1), chunks, (np.int32(outer), np.int32(c), np.int32(inner),
                                                          np.int32(chunk)), width
        lanes = 1 << max(0, (wg // c).bit_length() - 1)  # a power of two: the group sums its lanes in a tree
        cw = wg // lanes
        k = kernel(rt, SRC, "relu_grad_bias_rows", g.dtype, **defines)
        return k, (chunks * wg, -(-c // cw)), (wg, 1), chunks, (np.int32(outer), np.int32(c), np.int32(cw),
                                                               np.int32(chunk)), width
    k, gsize, lsize, chunks, scalars, width = plan(rt, ("channel_sums", shape, g.dtype, fmt, activation, mode), make)
    second, mean, var, t = bn if bn is not None else (None, g, g, g.dtype.type(0))  # unread unless bn
    if pooled is not None:
        f, argmax = pooled
    else:
        argmax = g  # unread: any buffer
    if centered is not None:
        mean, t = centered[0], g.dtype.type(centered[1])
    finish = 1 < chunks <= FINISH_CHUNKS and finishes_splits(rt)  # the last group of each column block adds them up
    if chunks == 1:
        parts = [db] if bn is None else [db, second]
    else:
        parts = [ctx.workspace((chunks, db.size), db.dtype) for _ in range(1 if bn is None else 2)]
    sums = (db, second, done_counters(rt, gsize[1] // lsize[1])) if finish else (None, None, None)
    first = mask if mask is not None else g if dx is None else dx  # MODE 6 reads z where the others write dx
    rt.run(k, gsize, lsize, first, parts[0], parts[-1], g, g if f is None else f, mean, var,
           *sums, argmax, *scalars, t, np.int32(finish), width)
    if chunks > 1 and not finish:
        for total, part in zip([db, second], parts):
            reduce(rt, "sum", total, part, [0], 1, ctx.workspace)


# -- _FusedL2Loss ------------------------------------------------------------------------------------------------
def _l2_batches(sizes, compute_units: int) -> list[tuple[int, int, int]]:
    """(first tensor, groups, elements per group) of each launch of _FusedL2Loss: up to _SLOTS tensors each,
    the groups filling the device (see _GROUPS_PER_CU) but summing at least _LEAST elements."""
    out = []
    for lo in range(0, len(sizes), _SLOTS):
        total = sum(sizes[lo:lo + _SLOTS])
        groups = max(1, min(_GROUPS_PER_CU * compute_units, -(-total // _LEAST)))
        chunk = max(1, -(-total // groups))
        out.append((lo, max(1, -(-total // chunk)), chunk))
    return out


@register("_FusedL2Loss", F, host=False)
def _fused_l2_loss(ctx, ins, outs, attrs):
    rt = ctx.runtime

    def make():
        wg = min(_WG, 1 << (rt.dev.max_wg.bit_length() - 1))
        k = kernel(rt, SRC, "multi_sumsq", ins[0].dtype, WG=wg)
        launches = []
        for lo, groups, chunk in _l2_batches([a.size for a in ins], rt.info["compute_units"]):
            ends = np.cumsum([a.size for a in ins[lo:lo + _SLOTS]])
            ends = np.concatenate([ends, np.full(_SLOTS - len(ends), ends[-1])])
            launches.append((lo, (groups * wg,), int8(ends.tolist()), np.int32(chunk)))
        return k, (wg,), launches, sum(g[0] // wg for _, g, _, _ in launches)
    k, loc, launches, total = plan(rt, ("_FusedL2Loss", tuple(a.shape for a in ins), ins[0].dtype), make)
    part = ctx.workspace((total,), outs[0].dtype)
    first = 0
    for lo, g, ends, chunk in launches:
        xs = ins[lo:lo + _SLOTS]
        rt.run(k, g, loc, *xs, *[xs[0]] * (_SLOTS - len(xs)), part, ends, chunk, np.int32(first))
        first += g[0] // loc[0]
    reduce(rt, "sum", outs[0], part, [0], 2, ctx.workspace)


@register_workspace("_FusedL2Loss", "opencl")
def _fused_l2_loss_scratch(ins, attrs, compute_units):
    """The partial sums of squares of every launch, then what adding them up writes."""
    total = sum(groups for _, groups, _ in _l2_batches([math.prod(a.shape) for a in ins], compute_units))
    return [((total,), ins[0].dtype)] + [(s, ins[0].dtype) for s in partials((total,), [0], compute_units)]


# -- _FusedApply -------------------------------------------------------------------------------------------------
# update op -> (packed kernel, its per-variable inputs in the op's order, its scalar inputs, flag attrs)
_PACKED = {"ApplyGradientDescent": ("multi_gradient_descent", (0, 2), (1,), ()),
           "ApplyMomentum": ("multi_momentum", (0, 1, 3), (2, 4), ("use_nesterov",)),
           "ApplyAdam": ("multi_adam", (0, 1, 2, 9), (3, 4, 5, 6, 7, 8), ("use_nesterov",))}


@register("_FusedApply", F, host=False)
def _fused_apply(ctx, ins, outs, attrs):
    op_type = attrs["op"]
    ins, decay = split_decay(ins, attrs)
    groups = apply_groups(op_type, ins)
    if op_type not in _PACKED:  # one launch per variable, by the update's own kernel
        if decay is not None:
            raise ValueError(f"_FusedApply '{ctx.op.name}': {op_type} takes no decay on opencl; only "
                             f"{sorted(_PACKED)} do")
        single = find_kernel(op_type, "opencl", as_dtype(ins[0].dtype))
        for group in groups:
            single(ctx, group, [group[0]], attrs)
        return
    _packed(ctx, op_type, groups, attrs.get("decayed") or [0] * len(groups), decay, attrs)


@register_variant("_FusedApply", "opencl", "folded")
def _fused_apply_folded(ctx, ins, outs, attrs):
    """Each momentum update as ApplyMomentum's "folded" variant, var -= lr * accum: a packed gradient descent of
    the accumulators (no decay: planner.batch.slot_folds folds none)."""
    groups = [[var, lr, accum] for var, accum, lr, _, _ in apply_groups(attrs["op"], split_decay(ins, attrs)[0])]
    _packed(ctx, "ApplyGradientDescent", groups, [0] * len(groups), None, attrs)


def _packed(ctx, op_type: str, groups: list, decayed: list, decay, attrs) -> None:
    """`op_type`'s packed kernel over the variables' `groups` (their inputs in op_type's order), _SLOTS a launch."""
    rt = ctx.runtime
    name, per_var, scalars, flags = _PACKED[op_type]
    for lo in range(0, len(groups), _SLOTS):
        part = groups[lo:lo + _SLOTS]

        def make(part=part, lo=lo):
            ends = np.cumsum([g[0].size for g in part])
            ends = np.concatenate([ends, np.full(_SLOTS - len(part), ends[-1])])
            bits = sum(1 << s for s, d in enumerate(decayed[lo:lo + _SLOTS]) if d)
            return (kernel(rt, SRC, name, part[0][0].dtype), *rt.grid1d(int(ends[-1])), int8(ends.tolist()),
                    np.int32(bits), *(np.int32(attrs.get(f, False)) for f in flags))
        k, g, loc, ends, bits, *flag_args = plan(rt, (ctx.op, name, lo, tuple(g[0].size for g in part),
                                                       tuple(decayed[lo:lo + _SLOTS])), make)
        buffers = [grp[i] for grp in part + [part[0]] * (_SLOTS - len(part)) for i in per_var]
        scalar_args = [part[0][i] for i in scalars]
        # no decay: the kernel reads no decay buffer, any will do
        rt.run(k, g, loc, *buffers, *scalar_args, scalar_args[0] if decay is None else decay, ends, bits,
               *flag_args)


# -- _FusedMovingAverages ---------------------------------------------------------------------------------------
@register("_FusedMovingAverages", F, host=False)
def _fused_moving_averages(ctx, ins, outs, attrs):
    rt = ctx.runtime
    triples = [ins[j:j + 3] for j in range(0, len(ins), 3)]
    for lo in range(0, len(triples), _SLOTS):
        part = triples[lo:lo + _SLOTS]

        def make(part=part):
            ends = np.cumsum([v.size for v, _, _ in part])
            ends = np.concatenate([ends, np.full(_SLOTS - len(part), ends[-1])])
            return (kernel(rt, SRC, "multi_moving_average", part[0][0].dtype), *rt.grid1d(int(ends[-1])),
                    int8(ends.tolist()))
        k, g, loc, ends = plan(rt, (ctx.op, lo, tuple(v.size for v, _, _ in part)), make)
        rt.run(k, g, loc, *[b for triple in part + [part[0]] * (_SLOTS - len(part)) for b in triple], ends)


# -- micro-batching's merge (tfplus.engine.memory) ------------------------------------------------------------
_MODES = {"copy": 0, "add": 1, "scale": 2, "add_scale": 3}


def multi_accumulate(rt, accs: list, xs: list | None, how: str, factor: float = 1.0) -> None:
    """For each i: accs[i] = xs[i] ("copy"), accs[i] += xs[i] ("add"), accs[i] *= factor ("scale", xs None)
    or accs[i] = (accs[i] + xs[i]) * factor ("add_scale"): the tensors of one dtype in one launch when they share a
    buffer (_accumulate_in_one), else eight per launch instead of a launch each."""
    xs = accs if xs is None else xs
    by_dtype: dict = {}
    for a, x in zip(accs, xs):
        if a.size:
            by_dtype.setdefault(a.dtype, []).append((a, x))
    for dt, pairs in by_dtype.items():
        pairs = _accumulate_in_one(rt, pairs, dt, how, factor)
        if not pairs:
            continue
        k = kernel(rt, SRC, "multi_accumulate", dt, MODE=_MODES[how])
        for lo in range(0, len(pairs), _SLOTS):
            part = pairs[lo:lo + _SLOTS]
            ends = np.cumsum([a.size for a, _ in part])
            ends = np.concatenate([ends, np.full(_SLOTS - len(part), ends[-1])])
            buffers = [b for a, x in part + [part[0]] * (_SLOTS - len(part)) for b in (a, x)]
            rt.run(k, *rt.grid1d(int(ends[-1])), *buffers, int8(ends.tolist()), dt.type(factor))


def _accumulate_in_one(rt, pairs: list, dt, how: str, factor: float) -> list:
    """multi_accumulate's merge of the `pairs` whose tensors are all in one buffer, as a memory plan's accumulators
    and gradients are, in one launch (fused.cl's accumulate_table); returns the others. A micro-batched step merges
    ~17 tensors a micro-batch, and each launch costs ~5 us of GPU time on the H100 however small; one scalar outside
    the arena (the weight decay's gradient scale, Mentee's trainer step) had sent all 18 to eight a launch, 3 launches
    a micro-batch on the H200 where 2 do (BENCHMARKS.md, "Mentee under 32 and 24 MB on the H200")."""
    def base(v):
        return id(rt.buffer(v)), v.block.off % dt.itemsize  # element offsets within a buffer need one alignment

    counts: dict = {}
    for a, x in pairs:
        if base(a) == base(x):
            counts[base(a)] = counts.get(base(a), 0) + 1
    if not counts:
        return pairs
    most = max(counts, key=counts.get)
    one = [(a, x) for a, x in pairs if base(a) == base(x) == most]
    start = min(v.block.off for pair in one for v in pair)
    ends = np.cumsum([a.size for a, _ in one])
    rows = [((a.block.off - start) // dt.itemsize, (x.block.off - start) // dt.itemsize, int(e), 0)
            for (a, x), e in zip(one, ends)]
    tab = rt.table(("accumulate", tuple(rows)), lambda: np.array(rows, np.int32))
    k = kernel(rt, SRC, "accumulate_table", dt, MODE=_MODES[how])
    first = next(v for pair in one for v in pair if v.block.off == start)
    rt.run(k, *rt.grid1d(int(ends[-1])), first, tab, np.int32(len(rows)), dt.type(factor))
    return [(a, x) for a, x in pairs if not base(a) == base(x) == most]
