"""NumPy kernels for tfplus.ops.special_math_ops: special functions (scipy.special), trigonometric and
hyperbolic functions, Cumprod, Unique, the max/min/prod segment reductions and sorted search."""
from __future__ import annotations

import numpy as np

from tfplus import threads
from tfplus.kernels.numpy.math import cumulative
from tfplus.registry import register_kernel
from tfplus.tensor_util import dense_set_operation

FLOATS = ("float16", "float32", "float64")


def _special(name):
    """scipy.special's `name`, imported on first use (scipy takes a while to load; few graphs need it)."""
    def fn(*args, out):
        from scipy import special
        getattr(special, name)(*args, out=out)
    return fn


def _xlogy(x, y, out):
    from scipy import special
    # scipy's xlogy gives nan for x = 0, y = nan; TF gives 0 whenever x = 0
    np.copyto(out, np.where(x == 0, 0, special.xlogy(x, y)))


def _xlog1py(x, y, out):
    from scipy import special
    np.copyto(out, np.where(x == 0, 0, special.xlog1py(x, y)))


def _xdivy(x, y, out):
    np.copyto(out, np.where(x == 0, 0, np.true_divide(x, y)))


def _polygamma(n, x, out):
    from scipy import special
    # scipy takes integer orders only; TF gives nan for a non-integer order
    whole = np.floor(n) == n
    np.copyto(out, np.where(whole, special.polygamma(np.where(whole, n, 0).astype(np.int64), x), np.nan))


_ELEMENTWISE = {
    "Lgamma": _special("gammaln"), "Digamma": _special("psi"), "Erfc": _special("erfc"),
    "Erfinv": _special("erfinv"), "Ndtri": _special("ndtri"), "BesselI0e": _special("i0e"),
    "BesselI1e": _special("i1e"), "Zeta": _special("zeta"), "Betainc": _special("betainc"),
    "Expm1": np.expm1, "Tan": np.tan, "Sinh": np.sinh, "Cosh": np.cosh, "Asin": np.arcsin, "Acos": np.arccos,
    "Atan": np.arctan, "Asinh": np.arcsinh, "Acosh": np.arccosh, "Atanh": np.arctanh, "Rint": np.rint,
    "Atan2": np.arctan2, "Xlogy": _xlogy, "Xlog1py": _xlog1py, "Xdivy": _xdivy, "Polygamma": _polygamma,
}


def _elementwise(op_type, fn):
    def body(out, *ins):
        with np.errstate(all="ignore"):
            # float16 is computed in float32 (scipy has few half-precision loops), then rounded
            wide = [a.astype(np.float32) if a.dtype == np.float16 else a for a in ins]
            if out.dtype == np.float16:
                tmp = np.empty(out.shape, np.float32)
                fn(*wide, out=tmp)
                np.copyto(out, tmp, casting="unsafe")
            else:
                fn(*wide, out=out)

    def kernel(ctx, ins, outs, attrs):
        threads.sharded(body, outs[0], *ins)
    kernel.__name__ = f"_{op_type.lower()}"
    register_kernel(op_type, "cpu", FLOATS)(kernel)


for _t, _fn in _ELEMENTWISE.items():
    _elementwise(_t, _fn)


register_kernel("Cumprod", "cpu")(cumulative(np.cumprod, 1))


def _unique(x):
    """np.unique's values in order of first appearance (as TF's Unique), x's index into them, their counts."""
    values, first, inverse, counts = np.unique(x, return_index=True, return_inverse=True, return_counts=True)
    order = np.argsort(first, kind="stable")
    rank = np.empty_like(order)
    rank[order] = np.arange(order.size)
    return values[order], rank[inverse.reshape(-1)], counts[order]


@register_kernel("Unique", "cpu")
def _unique_kernel(ctx, ins, outs, attrs):
    values, idx, _ = _unique(ins[0])
    outs[0][...], outs[1][...] = values, idx


@register_kernel("UniqueWithCounts", "cpu")
def _unique_with_counts(ctx, ins, outs, attrs):
    values, idx, counts = _unique(ins[0])
    outs[0][...], outs[1][...], outs[2][...] = values, idx, counts


@register_kernel("DenseToDenseSetOperation", "cpu")
def _dense_set_operation(ctx, ins, outs, attrs):
    for out, value in zip(outs, dense_set_operation(ins[0], ins[1], attrs["set_operation"])):
        out[...] = value


def _segment_reduce(ufunc, empty):
    def kernel(ctx, ins, outs, attrs):
        data, ids = ins[0], ins[1]
        out = outs[0]
        out[...] = empty(out.dtype)
        ids = ids.reshape(-1)
        rows = data.reshape((ids.size,) + out.shape[1:])
        kept = (ids >= 0) & (ids < out.shape[0])  # negative ids drop their rows, as in TF
        ufunc.at(out, ids[kept], rows[kept])
    return kernel


def _lowest(dtype):
    """TF's empty max: numeric_limits<T>::lowest(), a finite number for floats."""
    return (np.finfo if dtype.kind == "f" else np.iinfo)(dtype).min


def _highest(dtype):
    return (np.finfo if dtype.kind == "f" else np.iinfo)(dtype).max


register_kernel("UnsortedSegmentMax", "cpu")(_segment_reduce(np.maximum, _lowest))
register_kernel("UnsortedSegmentMin", "cpu")(_segment_reduce(np.minimum, _highest))
register_kernel("UnsortedSegmentProd", "cpu")(_segment_reduce(np.multiply, lambda dtype: 1))


def _bound(side):
    def kernel(ctx, ins, outs, attrs):
        rows, values = ins
        for r in range(rows.shape[0]):
            outs[0][r] = np.searchsorted(rows[r], values[r], side=side)
    return kernel


register_kernel("LowerBound", "cpu")(_bound("left"))
register_kernel("UpperBound", "cpu")(_bound("right"))
