"""NumPy kernels for math ops. Each writes into the output buffer the runtime allocated.

NaN, inf and division by zero follow IEEE silently, as in TF (log(-1) is nan, 1/0 is inf), so NumPy's
floating-point warnings are switched off around the kernels that can raise them (inside each shard: the
setting is per thread).

Elementwise kernels, AddN, Cast and MatMul split their output over the intra-op threads (tfplus.threads),
and reductions that keep the first axis split along it: each output element is computed by one thread."""
from __future__ import annotations

import numpy as np

from tfplus import threads
from tfplus.registry import register_kernel, register_variant

FLOATS = ("float16", "float32", "float64")
INTS = ("int8", "int16", "int32", "int64", "uint8")
NUMERIC = FLOATS + INTS


def _ufunc_kernel(op_type, ufunc, dtypes, inplace=()):
    def body(out, *ins):
        with np.errstate(all="ignore"):
            ufunc(*ins, out=out)

    def kernel(ctx, ins, outs, attrs):
        threads.sharded(body, outs[0], *ins)
    kernel.__name__ = f"_{op_type.lower()}"
    register_kernel(op_type, "cpu", dtypes, inplace=inplace)(kernel)


def _rsqrt(x, out):
    np.sqrt(x, out=out)
    np.reciprocal(out, out=out)


def _pow(x, y, out):
    if out.dtype.kind in "iu" and (np.asarray(y) < 0).any():
        raise ValueError("integers to negative integer powers are not allowed")
    np.power(x, y, out=out)


def _erf(x, out):
    # NOTE: imported here: scipy (a dependency for the planner) takes a while to load, and few graphs use erf.
    from scipy.special import erf
    erf(x, out=out)


_ELEMENTWISE = {
    "Add": (np.add, NUMERIC), "AddV2": (np.add, NUMERIC), "Sub": (np.subtract, NUMERIC),
    "Mul": (np.multiply, NUMERIC), "RealDiv": (np.true_divide, FLOATS),
    "FloorDiv": (np.floor_divide, NUMERIC), "FloorMod": (np.mod, NUMERIC), "Pow": (_pow, NUMERIC),
    "Maximum": (np.maximum, NUMERIC), "Minimum": (np.minimum, NUMERIC), "Neg": (np.negative, NUMERIC),
    "Abs": (np.abs, NUMERIC), "Sign": (np.sign, NUMERIC), "Square": (np.square, NUMERIC),
    "Exp": (np.exp, FLOATS), "Log": (np.log, FLOATS),
    "Log1p": (np.log1p, FLOATS), "Sqrt": (np.sqrt, FLOATS), "Rsqrt": (_rsqrt, FLOATS),
    "Reciprocal": (np.reciprocal, FLOATS), "Sin": (np.sin, FLOATS), "Cos": (np.cos, FLOATS),
    "Erf": (_erf, FLOATS),
    "Floor": (np.floor, FLOATS), "Ceil": (np.ceil, FLOATS), "Round": (np.round, NUMERIC),
    "Equal": (np.equal, NUMERIC + ("bool",)), "NotEqual": (np.not_equal, NUMERIC + ("bool",)),
    "Less": (np.less, NUMERIC), "LessEqual": (np.less_equal, NUMERIC), "Greater": (np.greater, NUMERIC),
    "GreaterEqual": (np.greater_equal, NUMERIC), "LogicalAnd": (np.logical_and, ("bool",)),
    "LogicalOr": (np.logical_or, ("bool",)), "LogicalNot": (np.logical_not, ("bool",)),
}
# One ufunc call with out= reads element i of every input before it writes element i, so the output may be
# written over an input (KernelFacts.inplace): declared for these (and tested with aliased buffers).
_INPLACE = {**dict.fromkeys(("Add", "AddV2", "Sub", "Mul", "RealDiv", "Maximum", "Minimum"), (0, 1)),
            **dict.fromkeys(("Neg", "Abs", "Sign", "Square", "Exp", "Log", "Sqrt", "Rsqrt", "Reciprocal"), (0,))}
for _t, (_fn, _dtypes) in _ELEMENTWISE.items():
    _ufunc_kernel(_t, _fn, _dtypes, _INPLACE.get(_t, ()))


@register_kernel("SquaredDifference", "cpu", NUMERIC, inplace=(0, 1))
def _squared_difference(ctx, ins, outs, attrs):
    np.subtract(ins[0], ins[1], out=outs[0])
    np.square(outs[0], out=outs[0])


@register_kernel("AddN", "cpu", NUMERIC, inplace=(0,))  # copies input 0 first
def _add_n(ctx, ins, outs, attrs):
    def body(out, first, *rest):
        np.copyto(out, first)
        for x in rest:
            np.add(out, x, out=out)
    threads.sharded(body, outs[0], *ins)


@register_kernel("MatMul", "cpu", NUMERIC)
def _matmul(ctx, ins, outs, attrs):
    a, b = ins
    a = a.T if attrs["transpose_a"] else a
    b = b.T if attrs["transpose_b"] else b
    out = outs[0]
    # Row blocks of the output, each a GEMM on one BLAS thread; a block's rows are computed as a whole
    # product's would be.
    grain = threads.flop_grain(2 * a.shape[1] * b.shape[1])
    threads.parallel_for(a.shape[0], lambda lo, hi: np.matmul(a[lo:hi], b, out=out[lo:hi]), grain)


@register_variant("MatMul", "cpu", "accumulate")
def _matmul_accumulate(ctx, ins, outs, attrs, piece):
    """outs[0] += the product, `piece.shape[0]` rows at a time through the buffer `piece` (planner.accumulate: a
    micro-batch's gradient added into its accumulator with no buffer of its own). Each piece is a row block, and
    the add that of runtime.add_into, so the sum is the bits of the product's kernel and a merge."""
    a, b = ins
    a = a.T if attrs["transpose_a"] else a
    b = b.T if attrs["transpose_b"] else b
    out, rows = outs[0], piece.shape[0]
    for lo in range(0, a.shape[0], rows):
        n = min(rows, a.shape[0] - lo)
        _matmul(ctx, [a[lo:lo + n], b], [piece[:n]], {"transpose_a": False, "transpose_b": False})
        np.add(out[lo:lo + n], piece[:n], out=out[lo:lo + n])


@register_kernel("Cast", "cpu")
def _cast(ctx, ins, outs, attrs):
    # NOTE: unsafe casting is TF's: float -> int truncates toward zero, nonzero -> True.
    def body(out, x):
        with np.errstate(invalid="ignore"):
            np.copyto(out, x, casting="unsafe")
    threads.sharded(body, outs[0], ins[0])


@register_kernel("Select", "cpu")
def _select(ctx, ins, outs, attrs):
    cond, t, e = ins
    if cond.ndim == 1 and t.ndim > 1:  # a vector condition picks whole rows
        cond = cond.reshape((-1,) + (1,) * (t.ndim - 1))
    np.copyto(outs[0], e)
    np.copyto(outs[0], t, where=cond)


@register_kernel("Where", "cpu")
def _where(ctx, ins, outs, attrs):
    outs[0][...] = np.argwhere(ins[0])


@register_kernel("Range", "cpu")
def _range(ctx, ins, outs, attrs):
    start, _, delta = ins
    # start + i * delta (not np.arange) so the length is exactly the one the shape function computed
    np.copyto(outs[0], start + np.arange(outs[0].shape[0]) * delta, casting="unsafe")


def _axes(x, indices):
    return tuple(sorted({int(a) % x.ndim for a in np.ravel(indices)})) if x.ndim else ()


def _reduce(reduction, x, axes, keep_dims: bool, out) -> None:
    """out = reduction(x, axes): split along the first axis when it is kept (each output row reduces its own
    input row, as without threads); whole otherwise."""
    if x.ndim == 0 or 0 in axes or out.ndim == 0:
        reduction(x, axis=axes, keepdims=keep_dims, out=out)
        return
    per_row = max(x.size // max(x.shape[0], 1), 1)
    threads.parallel_for(x.shape[0], lambda lo, hi: reduction(x[lo:hi], axis=axes, keepdims=keep_dims,
                                                              out=out[lo:hi]), max(1, threads.GRAIN // per_row))


@register_kernel("Sum", "cpu", NUMERIC)
def _sum(ctx, ins, outs, attrs):
    _reduce(np.sum, ins[0], _axes(*ins), attrs["keep_dims"], outs[0])


@register_kernel("Mean", "cpu", FLOATS)
def _mean(ctx, ins, outs, attrs):
    _reduce(np.mean, ins[0], _axes(*ins), attrs["keep_dims"], outs[0])


@register_kernel("Mean", "cpu", INTS)
def _mean_int(ctx, ins, outs, attrs):
    """Integer mean: the sum divided by the count, truncating toward zero (C++ division, as TF)."""
    axes = _axes(*ins)
    total = np.sum(ins[0], axis=axes, keepdims=attrs["keep_dims"], dtype=np.int64)
    count = max(int(np.prod([ins[0].shape[a] for a in axes])), 1)
    np.copyto(outs[0], np.sign(total) * (np.abs(total) // count), casting="unsafe")


def _extreme(dtype, sign: int):
    """The identity of max (sign -1) or min (sign 1) that TF gives for an empty reduction: -inf / inf for floats,
    the lowest / highest value for ints."""
    if dtype.kind == "f":
        return sign * np.inf
    return np.iinfo(dtype).max if sign > 0 else np.iinfo(dtype).min


@register_kernel("Max", "cpu", NUMERIC)
def _max(ctx, ins, outs, attrs):
    np.max(ins[0], axis=_axes(*ins), keepdims=attrs["keep_dims"], out=outs[0],
           initial=_extreme(outs[0].dtype, -1))


@register_kernel("Min", "cpu", NUMERIC)
def _min(ctx, ins, outs, attrs):
    np.min(ins[0], axis=_axes(*ins), keepdims=attrs["keep_dims"], out=outs[0],
           initial=_extreme(outs[0].dtype, 1))


@register_kernel("Any", "cpu", ("bool",))
def _any(ctx, ins, outs, attrs):
    np.any(ins[0], axis=_axes(*ins), keepdims=attrs["keep_dims"], out=outs[0])


@register_kernel("All", "cpu", ("bool",))
def _all(ctx, ins, outs, attrs):
    np.all(ins[0], axis=_axes(*ins), keepdims=attrs["keep_dims"], out=outs[0])


@register_kernel("ArgMax", "cpu", NUMERIC)
def _argmax(ctx, ins, outs, attrs):
    outs[0][...] = np.argmax(ins[0], axis=int(ins[1]) % ins[0].ndim)


@register_kernel("ArgMin", "cpu", NUMERIC)
def _argmin(ctx, ins, outs, attrs):
    outs[0][...] = np.argmin(ins[0], axis=int(ins[1]) % ins[0].ndim)


def cumulative(accumulate, identity):
    """The kernel of TF's Cumsum / Cumprod (np.cumsum / np.cumprod, whose empty sum or product is `identity`):
    along the axis its second input gives, reversed and exclusive as its attributes say."""
    def kernel(ctx, ins, outs, attrs):
        x, axis = ins[0], int(ins[1]) % max(ins[0].ndim, 1)
        if attrs["reverse"]:
            x = np.flip(x, axis)
        total = accumulate(x, axis=axis, dtype=outs[0].dtype)
        if attrs["exclusive"]:  # shift by one: element i gets the elements' before it
            first = np.full_like(np.take(total, [0], axis), identity)
            total = np.concatenate([first, np.delete(total, -1, axis)], axis)
        np.copyto(outs[0], np.flip(total, axis) if attrs["reverse"] else total)
    return kernel


register_kernel("Cumsum", "cpu", NUMERIC)(cumulative(np.cumsum, 0))


@register_kernel("Prod", "cpu", NUMERIC)
def _prod(ctx, ins, outs, attrs):
    np.prod(ins[0], axis=_axes(*ins), keepdims=attrs["keep_dims"], out=outs[0])


@register_kernel("UnsortedSegmentSum", "cpu", NUMERIC)
def _unsorted_segment_sum(ctx, ins, outs, attrs):
    data, ids = ins[0], ins[1].reshape(-1)
    out = outs[0]
    if (ids >= out.shape[0]).any():
        raise ValueError(f"segment_ids {ids[ids >= out.shape[0]].tolist()[:5]} are out of range "
                         f"[0, {out.shape[0]})")
    out.fill(0)
    keep = ids >= 0  # negative ids drop their rows, as in TF
    np.add.at(out, ids[keep], data.reshape((ids.size,) + out.shape[1:])[keep])


@register_kernel("TopKV2", "cpu", NUMERIC)
def _top_k(ctx, ins, outs, attrs):
    x, k = ins[0], outs[0].shape[-1]
    # A stable sort of -x puts the largest first and, among equal values, the lower index first (TF's order).
    order = np.argsort(-x if x.dtype.kind == "f" else -x.astype(np.int64), axis=-1, kind="stable")[..., :k]
    outs[1][...] = order
    outs[0][...] = np.take_along_axis(x, order, axis=-1)


@register_kernel("DivNoNan", "cpu", FLOATS)
def _div_no_nan(ctx, ins, outs, attrs):
    x, y = np.broadcast_arrays(*ins)
    with np.errstate(all="ignore"):
        np.copyto(outs[0], np.where(y == 0, 0, x / np.where(y == 0, 1, y)))


@register_kernel("SelectV2", "cpu")
def _select_v2(ctx, ins, outs, attrs):
    np.copyto(outs[0], np.where(*ins))


_FUSED_GRADS = {"RsqrtGrad": lambda y, dy: -0.5 * dy * y * y * y, "SqrtGrad": lambda y, dy: 0.5 * dy / y,
                "ReciprocalGrad": lambda y, dy: -dy * y * y}
for _t, _fn in _FUSED_GRADS.items():
    def _fused(ctx, ins, outs, attrs, _fn=_fn):
        with np.errstate(all="ignore"):
            np.copyto(outs[0], _fn(*ins))
    register_kernel(_t, "cpu", FLOATS)(_fused)
