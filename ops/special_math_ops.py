"""TF1's remaining tf.math ops that scripts use: special functions (Lgamma, Digamma, Erfc, Erfinv, Ndtri, Betainc,
Zeta, Polygamma, Bessel), trigonometric and hyperbolic functions, Xlogy/Xdivy/Xlog1py, Cumprod, Unique, the
max/min/prod segment reductions and sorted search (LowerBound/UpperBound). Each op: registration, gradient (one
line per derivative, as TF's math_grad.py), wrapper. Composites of these (segment_*, bincount, polyval, lbeta,
histogram_fixed_width, roll, tensor_scatter_*) follow at the end.

    import tfplus as tf
    y, idx = tf.unique(ids)
    best = tf.unsorted_segment_max(scores, ids, num_segments=10)
"""
from __future__ import annotations

import builtins
import collections
import math

import numpy as np

from tfplus import dtypes as _dt
from tfplus import flops as _flops
from tfplus.framework import Tensor, apply_op, constant_value, convert_to_tensor, name_scope
from tfplus.ops import array_ops, composite_ops, math_ops
from tfplus.ops.array_ops import _index_tensor, _shape_of
from tfplus.ops.math_ops import _binary, _binary_shape, _check_dtype, _reduce_to, _unary_shape
from tfplus.registry import not_differentiable, register_gradient, register_op, register_rows
from tfplus.tensor_shape import check_same_dtype, fmt, spec
from tfplus.tensor_util import dense_set_operation

_FLOATS = (_dt.float16, _dt.float32, _dt.float64)
_INTS = (_dt.int8, _dt.int16, _dt.int32, _dt.int64, _dt.uint8)
_NUMERIC = _FLOATS + _INTS

m = math_ops  # the gradient tables below read as formulas


def _op(op_type: str, *xs) -> Tensor:
    """A node of one of this module's ops (for the gradient formulas, which use ops defined further down)."""
    return apply_op(op_type, list(xs))

# -- unary elementwise ops: op type -> (wrapper name, dy/dx * dy as a function of (x, y, dy), or None when TF
# declares the op non-differentiable) ------------------------------------------------------------------------
_UNARY = {
    "Lgamma": ("lgamma", lambda x, y, g: m.multiply(g, _op("Digamma", x))),
    "Digamma": ("digamma", lambda x, y, g: m.multiply(g, _op("Polygamma", m.cast(1, x.dtype), x))),
    "Erfc": ("erfc", lambda x, y, g: m.multiply(g, m.multiply(-2 / math.sqrt(math.pi),
                                                              m.exp(m.negative(m.square(x)))))),
    "Erfinv": ("erfinv", lambda x, y, g: m.multiply(g, m.multiply(math.sqrt(math.pi) / 2, m.exp(m.square(y))))),
    "Ndtri": ("ndtri", lambda x, y, g: m.multiply(g, m.multiply(math.sqrt(2 * math.pi),
                                                                m.exp(m.multiply(0.5, m.square(y)))))),
    "Expm1": ("expm1", lambda x, y, g: m.multiply(g, m.exp(x))),
    "Tan": ("tan", lambda x, y, g: m.multiply(g, m.square(m.reciprocal(m.cos(x))))),
    "Sinh": ("sinh", lambda x, y, g: m.multiply(g, _op("Cosh", x))),
    "Cosh": ("cosh", lambda x, y, g: m.multiply(g, _op("Sinh", x))),
    "Asin": ("asin", lambda x, y, g: m.multiply(g, m.rsqrt(m.subtract(1.0, m.square(x))))),
    "Acos": ("acos", lambda x, y, g: m.negative(m.multiply(g, m.rsqrt(m.subtract(1.0, m.square(x)))))),
    "Atan": ("atan", lambda x, y, g: m.multiply(g, m.reciprocal(m.add(1.0, m.square(x))))),
    "Asinh": ("asinh", lambda x, y, g: m.multiply(g, m.reciprocal(_op("Cosh", y)))),
    "Acosh": ("acosh", lambda x, y, g: m.multiply(g, m.reciprocal(_op("Sinh", y)))),
    "Atanh": ("atanh", lambda x, y, g: m.multiply(g, m.reciprocal(m.subtract(1.0, m.square(x))))),
    "BesselI0e": ("bessel_i0e", lambda x, y, g: m.multiply(g, m.subtract(_op("BesselI1e", x),
                                                                          m.multiply(m.sign(x), y)))),
    "BesselI1e": ("bessel_i1e", lambda x, y, g: m.multiply(g, _bessel_i1e_slope(x, y))),
    "Rint": ("rint", None),
}


def _bessel_i1e_slope(x, y):
    """d i1e(x)/dx = i0e(x) - y (sign(x) + 1/x), whose limit at 0 is 1/2."""
    zero = m.equal(x, array_ops.zeros_like(x))
    safe_x = m.where_v2(zero, array_ops.ones_like(x), x)
    slope = m.subtract(_op("BesselI0e", x), m.multiply(y, m.add(m.sign(x), m.reciprocal(safe_x))))
    return m.where_v2(zero, m.multiply(0.5, array_ops.ones_like(x)), slope)


def _unary_grad(fn):
    def grad(op, dy):
        return [fn(op.inputs[0], op.outputs[0], dy)]
    return grad


# TF builds these inside a name scope of the function's name ('erfinv/Erfinv'), the others as bare ops ('Lgamma').
_SCOPED = {"BesselI0e", "BesselI1e", "Erfinv", "Ndtri"}


def _unary_wrapper(op_type, wrapper):
    def fn(x, name=None) -> Tensor:
        if op_type in _SCOPED:
            with name_scope(name, wrapper, [x]):
                return apply_op(op_type, [convert_to_tensor(x)])
        with name_scope(name, op_type, [x]) as scope:
            return apply_op(op_type, [convert_to_tensor(x)], name=scope)
    fn.__name__ = wrapper
    fn.__doc__ = f"tf.math.{wrapper}: elementwise {op_type}, for float16/32/64 (TF's {op_type} op)."
    return fn


for _t, (_wrapper, _grad) in _UNARY.items():
    register_op(_t, inputs=("x",), outputs=("y",), attrs={"T": "type"}, shape_fn=_unary_shape(_FLOATS),
                flops=_flops.per_output)
    if _grad is None:
        not_differentiable(_t)
    else:
        register_gradient(_t)(_unary_grad(_grad))
    globals()[_wrapper] = _unary_wrapper(_t, _wrapper)


# -- binary elementwise ops (broadcasting) --------------------------------------------------------------------
def _nonzero(x):
    return m.not_equal(x, array_ops.zeros_like(x))


def _where_x(x, value):
    """`value` where x != 0, else 0 (TF's Xlogy family: the x = 0 terms are 0 whatever y is)."""
    return m.where_v2(_nonzero(x), value, array_ops.zeros_like(value))


# op type -> (wrapper name, (dx, dy) as functions of (x, y, dz), None for an input TF gives no gradient)
_BINARY = {
    "Atan2": ("atan2", lambda y, x, g: m.multiply(g, m.realdiv(x, m.add(m.square(x), m.square(y)))),
              lambda y, x, g: m.multiply(g, m.realdiv(m.negative(y), m.add(m.square(x), m.square(y))))),
    "Xlogy": ("xlogy", lambda x, y, g: m.multiply(g, _where_x(x, m.log(y))),
              lambda x, y, g: m.multiply(g, _where_x(x, m.realdiv(x, y)))),
    "Xlog1py": ("xlog1py", lambda x, y, g: m.multiply(g, _where_x(x, m.log1p(y))),
                lambda x, y, g: m.multiply(g, _where_x(x, m.realdiv(x, m.add(y, 1.0))))),
    "Xdivy": ("xdivy", lambda x, y, g: m.multiply(g, _where_x(x, m.reciprocal(y))),
              lambda x, y, g: m.multiply(g, _where_x(x, m.realdiv(m.negative(x), m.square(y))))),
    "Zeta": ("zeta", None, lambda x, q, g: m.multiply(g, m.multiply(m.negative(x), _op("Zeta", m.add(x, 1.0), q)))),
    "Polygamma": ("polygamma", None, lambda a, x, g: m.multiply(g, _op("Polygamma", m.add(a, 1.0), x))),
}


def _binary_grad(dx, dy):
    def grad(op, g):
        x, y = op.inputs
        return [None if f is None else _reduce_to(f(x, y, g), _shape_of(t)) for f, t in ((dx, x), (dy, y))]
    return grad


def _binary_wrapper(op_type, wrapper):
    def fn(x, y, name=None) -> Tensor:
        return _binary(op_type, x, y, name)
    fn.__name__ = wrapper
    fn.__doc__ = f"tf.math.{wrapper}(x, y): elementwise {op_type} with broadcasting (TF's {op_type} op)."
    return fn


for _t, (_wrapper, _dx, _dy) in _BINARY.items():
    register_op(_t, inputs=("x", "y"), outputs=("z",), attrs={"T": "type"}, shape_fn=_binary_shape(_FLOATS),
                flops=_flops.per_output)
    register_gradient(_t)(_binary_grad(_dx, _dy))
    globals()[_wrapper] = _binary_wrapper(_t, _wrapper)


# -- Betainc -------------------------------------------------------------------------------------------------
def _betainc_shape(ins, attrs):
    check_same_dtype(ins, "a, b and x")
    _check_dtype(ins[0], (_dt.float32, _dt.float64), "a")
    shapes = [s.shape for s in ins]
    known = [s for s in shapes if s is not None and len(s) > 0]
    if any(s is None for s in shapes):
        return [spec(None, ins[0].dtype)]
    if any(s != known[0] for s in known):
        raise ValueError(f"Betainc: a, b and x must have the same shape (or be scalars), got "
                         f"{', '.join(fmt(s) for s in shapes)}")
    return [spec(known[0] if known else (), ins[0].dtype)]


register_op("Betainc", inputs=("a", "b", "x"), outputs=("z",), attrs={"T": "type"}, shape_fn=_betainc_shape,
            flops=_flops.per_output)


@register_gradient("Betainc")
def _betainc_grad(op, grad):
    """dx = x^(a-1) (1-x)^(b-1) / B(a, b); TF gives no gradient for a and b"""
    a, b, x = op.inputs
    log_beta = m.subtract(m.add(_op("Lgamma", a), _op("Lgamma", b)), _op("Lgamma", m.add(a, b)))
    log_density = m.subtract(m.add(_op("Xlogy", m.subtract(a, 1.0), x),
                                   _op("Xlog1py", m.subtract(b, 1.0), m.negative(x))),
                             log_beta)
    return [None, None, _reduce_to(m.multiply(grad, m.exp(log_density)), _shape_of(x))]


def betainc(a, b, x, name=None) -> Tensor:
    """The regularized incomplete beta function I_x(a, b): `tf.math.betainc(a, b, x)`."""
    with name_scope(name, "Betainc", [a, b, x]) as scope:
        x = convert_to_tensor(x)
        a, b = (convert_to_tensor(v, dtype=x.dtype) for v in (a, b))
        return apply_op("Betainc", [a, b, x], name=scope)


# -- Cumprod -------------------------------------------------------------------------------------------------
register_op("Cumprod", inputs=("x", "axis"), outputs=("out",),
            attrs={"exclusive": "bool", "reverse": "bool", "T": "type", "Tidx": "type"},
            shape_fn=math_ops._cumsum_shape, flops=_flops.per_input)


@register_gradient("Cumprod")
def _cumprod_grad(op, grad):
    """dx = cumsum(y dy, opposite direction) / x (TF's formula: x must be nonzero)"""
    x, axis = op.inputs
    exclusive, reverse = op.attrs["exclusive"], op.attrs["reverse"]
    out = math_ops.cumsum(m.multiply(op.outputs[0], grad), axis, exclusive=exclusive, reverse=not reverse)
    return [m.realdiv(out, x), None]


def cumprod(x, axis=0, exclusive=False, reverse=False, name=None) -> Tensor:
    """Running product along `axis`: `tf.cumprod([a, b, c])` -> [a, a b, a b c]."""
    with name_scope(name, "Cumprod", [x]) as scope:
        axis = _index_tensor(axis, name="axis")
        return apply_op("Cumprod", [convert_to_tensor(x), axis],
                        {"exclusive": bool(exclusive), "reverse": bool(reverse), "Tidx": axis.dtype}, scope)


# -- Unique / UniqueWithCounts -------------------------------------------------------------------------------
def _unique_shape(counts: bool):
    def fn(ins, attrs):
        x = ins[0]
        if x.shape is not None and len(x.shape) != 1:
            raise ValueError(f"{'UniqueWithCounts' if counts else 'Unique'}: x must be a vector, got shape "
                             f"{fmt(x.shape)}")
        n = None if x.value is None else len(np.unique(x.value))
        out = [spec((n,), x.dtype), spec(x.shape, attrs["out_idx"])]
        return out + [spec((n,), attrs["out_idx"])] if counts else out
    return fn


# The number of distinct values depends on the input's values: the shape function reads them (value_inputs).
register_op("Unique", inputs=("x",), outputs=("y", "idx"), attrs={"T": "type", "out_idx": "type"},
            shape_fn=_unique_shape(False), value_inputs=(0,), flops=_flops.zero)
register_op("UniqueWithCounts", inputs=("x",), outputs=("y", "idx", "count"), attrs={"T": "type", "out_idx": "type"},
            shape_fn=_unique_shape(True), value_inputs=(0,), flops=_flops.zero)
not_differentiable("Unique", "UniqueWithCounts")


# TF's results of tf.unique and tf.unique_with_counts: tuples whose fields are named (`tf.unique(x).idx`).
UniqueResult = collections.namedtuple("Unique", ["y", "idx"])
UniqueWithCountsResult = collections.namedtuple("UniqueWithCounts", ["y", "idx", "count"])


def unique(x, out_idx=_dt.int32, name=None) -> tuple:
    """(y, idx): the distinct values of the vector x in order of first appearance, and x's index into y."""
    return UniqueResult(*apply_op("Unique", [convert_to_tensor(x)], {"out_idx": _dt.as_dtype(out_idx)}, name))


def unique_with_counts(x, out_idx=_dt.int32, name=None) -> tuple:
    """(y, idx, count): unique's, and how often each of y occurs in x."""
    return UniqueWithCountsResult(*apply_op("UniqueWithCounts", [convert_to_tensor(x)],
                                            {"out_idx": _dt.as_dtype(out_idx)}, name))


# -- DenseToDenseSetOperation -------------------------------------------------------------------------------
def _dense_set_shape(ins, attrs):
    """The sparse result's shapes: its size depends on the sets' values (value_inputs), known when both are."""
    a, b = ins
    rank = None if a.shape is None else len(a.shape)
    if a.value is not None and b.value is not None:
        indices, values, shape = dense_set_operation(np.asarray(a.value), np.asarray(b.value), attrs["set_operation"])
        return [spec(indices.shape, _dt.int64, indices), spec(values.shape, a.dtype, values),
                spec(shape.shape, _dt.int64, shape)]
    return [spec((None, rank), _dt.int64), spec((None,), a.dtype), spec((rank,), _dt.int64)]


# TensorFlow's tf.sets over the last axis; in its tf.losses graphs, the check that per-example weights broadcast
# onto the losses (weights_broadcast_ops.assert_broadcastable) compares their shapes by a set difference.
register_op("DenseToDenseSetOperation", inputs=("set1", "set2"),
            outputs=("result_indices", "result_values", "result_shape"),
            attrs={"set_operation": "string", "validate_indices": "bool", "T": "type"}, shape_fn=_dense_set_shape,
            value_inputs=(0, 1), flops=_flops.zero)
not_differentiable("DenseToDenseSetOperation")
register_rows(lambda op, rows: "puts the sets of every row of the batch into one sparse tensor",
              "DenseToDenseSetOperation")


# -- UnsortedSegmentMax / Min / Prod -------------------------------------------------------------------------
_SEGMENT_ATTRS = {"T": "type", "Tindices": "type", "Tnumsegments": "type"}
for _t in ("UnsortedSegmentMax", "UnsortedSegmentMin", "UnsortedSegmentProd"):
    register_op(_t, inputs=("data", "segment_ids", "num_segments"), outputs=("output",), attrs=_SEGMENT_ATTRS,
                shape_fn=math_ops._unsorted_segment_sum_shape, value_inputs=(2,), flops=_flops.per_input)


def _gather_rows(values, ids):
    """values[ids] with negative ids (dropped rows) read as row 0, and the mask of the ids that are >= 0."""
    kept = m.greater_equal(ids, array_ops.zeros_like(ids))
    return array_ops.gather(values, m.maximum(ids, array_ops.zeros_like(ids))), kept


def _expand_to(mask, data):
    """`mask` (segment_ids' shape) with trailing 1s up to data's rank, to broadcast over a row."""
    for _ in builtins.range((data.shape.ndims or 0) - (mask.shape.ndims or 0)):
        mask = array_ops.expand_dims(mask, -1)
    return mask


@register_gradient("UnsortedSegmentMax")
@register_gradient("UnsortedSegmentMin")
def _unsorted_segment_min_max_grad(op, grad):
    """dy of a segment split evenly among the entries that equal its max (min), 0 elsewhere"""
    data, ids, num = op.inputs
    picked, kept = _gather_rows(op.outputs[0], ids)
    selected = m.logical_and(m.equal(data, picked), _expand_to(kept, data))
    count = math_ops.unsorted_segment_sum(m.cast(selected, grad.dtype), ids, num)
    share, _ = _gather_rows(m.div_no_nan(grad, count), ids)
    return [m.where_v2(selected, share, array_ops.zeros_like(share)), None, None]


@register_gradient("UnsortedSegmentProd")
def _unsorted_segment_prod_grad(op, grad):
    """dx_i = dy * the product of the segment's other entries: y / x_i without zeros; with one zero, the product
    of the nonzero entries at the zero and 0 elsewhere; with two or more zeros, 0 (as TF)"""
    data, ids, num = op.inputs
    zero = m.equal(data, array_ops.zeros_like(data))
    zeros = math_ops.unsorted_segment_sum(m.cast(zero, _dt.int32), ids, num)
    grad = m.where_v2(m.greater(zeros, 1), array_ops.zeros_like(grad), grad)
    nonzero_data = m.where_v2(zero, array_ops.ones_like(data), data)
    nonzero_prod = unsorted_segment_prod(nonzero_data, ids, num)
    prod, kept = _gather_rows(op.outputs[0], ids)
    others = m.where_v2(zero, _gather_rows(nonzero_prod, ids)[0], m.div_no_nan(prod, nonzero_data))
    rows, _ = _gather_rows(grad, ids)
    return [m.where_v2(_expand_to(kept, data), m.multiply(rows, others), array_ops.zeros_like(data)), None, None]


def _unsorted_segment(op_type):
    def fn(data, segment_ids, num_segments, name=None) -> Tensor:
        data = convert_to_tensor(data)
        ids, num = _index_tensor(segment_ids), _index_tensor(num_segments)
        return apply_op(op_type, [data, ids, num], {"Tindices": ids.dtype, "Tnumsegments": num.dtype}, name)
    return fn


unsorted_segment_max = _unsorted_segment("UnsortedSegmentMax")
unsorted_segment_max.__doc__ = ("out[s] = the max of data[i] over the i with segment_ids[i] == s (the dtype's lowest "
                                "value for an empty segment; negative ids are dropped).")
unsorted_segment_min = _unsorted_segment("UnsortedSegmentMin")
unsorted_segment_min.__doc__ = "out[s] = the min of data[i] over segment s (the dtype's largest value if empty)."
unsorted_segment_prod = _unsorted_segment("UnsortedSegmentProd")
unsorted_segment_prod.__doc__ = "out[s] = the product of data[i] over segment s (1 if empty)."


# -- LowerBound / UpperBound (tf.searchsorted) ---------------------------------------------------------------
def _bound_shape(ins, attrs):
    sorted_inputs, values = ins
    check_same_dtype(ins, "sorted_sequence and values")
    if sorted_inputs.shape is not None and values.shape is not None:
        if len(sorted_inputs.shape) != 2 or len(values.shape) != 2 or \
                None not in (sorted_inputs.shape[0], values.shape[0]) and sorted_inputs.shape[0] != values.shape[0]:
            raise ValueError(f"searchsorted: sorted_sequence {fmt(sorted_inputs.shape)} and values "
                             f"{fmt(values.shape)} must be [rows, N] and [rows, M]")
    return [spec(values.shape, attrs["out_type"])]


for _t in ("LowerBound", "UpperBound"):
    register_op(_t, inputs=("sorted_inputs", "values"), outputs=("output",), attrs={"T": "type", "out_type": "type"},
                shape_fn=_bound_shape, flops=_flops.per_input)
    not_differentiable(_t)


def searchsorted(sorted_sequence, values, side="left", out_type=_dt.int32, name=None) -> Tensor:
    """For each of `values` [..., M], where it would go in the sorted innermost rows of `sorted_sequence`
    [..., N] (side 'left': before equal entries; 'right': after)."""
    if side not in ("left", "right"):
        raise ValueError(f"tf.searchsorted: side must be 'left' or 'right', got {side!r}")
    with name_scope(name, "searchsorted"):
        seq, vals = convert_to_tensor(sorted_sequence), convert_to_tensor(values)
        n = array_ops.shape(seq)[-1]
        rows = array_ops.reshape(seq, array_ops.stack([-1, n]))
        flat = array_ops.reshape(vals, array_ops.stack([array_ops.shape(rows)[0], -1]))
        out = apply_op("LowerBound" if side == "left" else "UpperBound", [rows, flat],
                       {"out_type": _dt.as_dtype(out_type)})
        out = array_ops.reshape(out, array_ops.shape(vals))
        out.set_shape(vals.shape)
        return out


# -- composites ----------------------------------------------------------------------------------------------
def _segment_count(data, ids, num):
    ones = array_ops.ones_like(ids, dtype=data.dtype)
    return math_ops.unsorted_segment_sum(ones, ids, num)


def _sorted_segment(unsorted, tf_name: str, empty):
    def fn(data, segment_ids, name=None) -> Tensor:
        with name_scope(name, tf_name) as scope:  # the result is the node tf_name, as TF's
            data, ids = convert_to_tensor(data), _index_tensor(segment_ids)
            num = m.add(math_ops.reduce_max(ids), 1)
            if empty is None:
                return unsorted(data, ids, num, name=scope)
            out = unsorted(data, ids, num)
            filled = m.greater(_expand_to(_segment_count(data, ids, num), out), 0)
            return m.where_v2(filled, out, m.cast(array_ops.fill(array_ops.shape(out), empty), data.dtype),
                              name=scope)
    fn.__doc__ = f"tf.{tf_name}: over sorted segment ids, segments 0 .. max(ids); an empty segment gives {empty}."
    return fn


segment_max = _sorted_segment(unsorted_segment_max, "SegmentMax", 0)
segment_min = _sorted_segment(unsorted_segment_min, "SegmentMin", 0)
segment_prod = _sorted_segment(unsorted_segment_prod, "SegmentProd", None)


def unsorted_segment_mean(data, segment_ids, num_segments, name=None) -> Tensor:
    """The mean of each segment (0 for an empty one)."""
    with name_scope(name, "UnsortedSegmentMean"):
        data, ids = convert_to_tensor(data), _index_tensor(segment_ids)
        count = _expand_to(_segment_count(data, ids, num_segments), data)
        total = math_ops.unsorted_segment_sum(data, ids, num_segments)
        return m.div_no_nan(total, m.maximum(count, m.cast(1, data.dtype)))


def unsorted_segment_sqrt_n(data, segment_ids, num_segments, name=None) -> Tensor:
    """Each segment's sum divided by the square root of its size (0 for an empty one)."""
    with name_scope(name, "UnsortedSegmentSqrtN"):
        data, ids = convert_to_tensor(data), _index_tensor(segment_ids)
        count = _expand_to(_segment_count(data, ids, num_segments), data)
        total = math_ops.unsorted_segment_sum(data, ids, num_segments)
        return m.div_no_nan(total, m.sqrt(m.maximum(count, m.cast(1, data.dtype))))


def _sparse_segment(unsorted, tf_name: str):
    def fn(data, indices, segment_ids, name=None, num_segments=None) -> Tensor:
        with name_scope(name, tf_name):
            ids = _index_tensor(segment_ids)
            num = m.add(math_ops.reduce_max(ids), 1) if num_segments is None else num_segments
            return unsorted(array_ops.gather(data, indices), ids, num)
    fn.__doc__ = (f"tf.{tf_name}: the rows data[indices] reduced over segment_ids into segments 0 .. max(ids) "
                  "(num_segments of them where given); an empty segment gives 0.")
    return fn


sparse_segment_sum = _sparse_segment(math_ops.unsorted_segment_sum, "SparseSegmentSum")
sparse_segment_mean = _sparse_segment(unsorted_segment_mean, "SparseSegmentMean")
sparse_segment_sqrt_n = _sparse_segment(unsorted_segment_sqrt_n, "SparseSegmentSqrtN")


def bincount(arr, weights=None, minlength=None, maxlength=None, dtype=_dt.int32, name=None) -> Tensor:
    """How often each value 0 .. max(arr) occurs in the non-negative ints `arr` (the sum of their `weights`),
    at least `minlength` and at most `maxlength` bins (larger values are dropped)."""
    with name_scope(name, "bincount"):
        arr = m.cast(convert_to_tensor(arr), _dt.int32)
        flat = array_ops.reshape(arr, [-1])
        values = array_ops.ones_like(flat, dtype=dtype) if weights is None else \
            array_ops.reshape(convert_to_tensor(weights), [-1])
        size = m.add(math_ops.reduce_max(array_ops.concat([flat, [-1]], 0)), 1)
        if minlength is not None:
            size = m.maximum(size, m.cast(minlength, _dt.int32))
        if maxlength is not None:
            size = m.minimum(size, m.cast(maxlength, _dt.int32))
            # Values past the last bin are dropped, as negative ids are.
            flat = m.where_v2(m.less(flat, size), flat, array_ops.fill(array_ops.shape(flat), -1))
        return math_ops.unsorted_segment_sum(values, flat, size)


def histogram_fixed_width(values, value_range, nbins=100, dtype=_dt.int32, name=None) -> Tensor:
    """Counts of `values` in `nbins` equal bins over value_range [lo, hi]; values outside go to the end bins."""
    with name_scope(name, "histogram_fixed_width") as scope:
        values = convert_to_tensor(values)
        value_range = convert_to_tensor(value_range, dtype=values.dtype)
        lo, hi = value_range[0], value_range[1]
        scaled = m.realdiv(m.subtract(values, lo), m.subtract(hi, lo))
        bins = m.cast(m.floor(m.multiply(scaled, float(nbins))), _dt.int32)
        bins = math_ops.clip_by_value(array_ops.reshape(bins, [-1]), 0, int(nbins) - 1)
        ones = array_ops.ones_like(bins, dtype=dtype)
        return math_ops.unsorted_segment_sum(ones, bins, int(nbins), name=scope)


def polyval(coeffs, x, name=None) -> Tensor:
    """coeffs[0] x^(n-1) + ... + coeffs[n-1] by Horner's rule, as TF (`coeffs` a list)."""
    with name_scope(name, "polyval"):
        x = convert_to_tensor(x)
        if not coeffs:
            return array_ops.zeros_like(x)
        p = convert_to_tensor(coeffs[0], dtype=x.dtype)
        for c in coeffs[1:]:
            p = convert_to_tensor(c, dtype=x.dtype) + p * x  # operators: TF's node names 'mul', 'add'
        return p


def lbeta(x, name=None) -> Tensor:
    """log |B(x)| along the last axis: sum(lgamma(x)) - lgamma(sum(x))."""
    with name_scope(name, "lbeta"):
        x = convert_to_tensor(x)
        return math_ops.reduce_sum(_op("Lgamma", x), -1) - _op("Lgamma", math_ops.reduce_sum(x, -1))


def bessel_i0(x, name=None) -> Tensor:
    """The modified Bessel function I0: i0e(x) e^|x|."""
    with name_scope(name, "bessel_i0"):
        x = convert_to_tensor(x)
        return m.multiply(_op("BesselI0e", x), m.exp(m.abs(x)))


def bessel_i1(x, name=None) -> Tensor:
    """The modified Bessel function I1: i1e(x) e^|x|."""
    with name_scope(name, "bessel_i1"):
        x = convert_to_tensor(x)
        return m.multiply(_op("BesselI1e", x), m.exp(m.abs(x)))


def reciprocal_no_nan(x, name=None) -> Tensor:
    """1 / x, and 0 where x is 0."""
    with name_scope(name, "reciprocal_no_nan"):
        x = convert_to_tensor(x)
        return m.div_no_nan(array_ops.ones_like(x), x)


def multiply_no_nan(x, y, name=None) -> Tensor:
    """x * y, and 0 where y is 0 (even if x is inf or nan)."""
    with name_scope(name, "multiply_no_nan"):
        x, y = m._operands(x, y)
        product = m.multiply(x, y)
        return m.where_v2(m.equal(y, array_ops.zeros_like(y)), array_ops.zeros_like(product), product)


def reduce_euclidean_norm(input_tensor, axis=None, keepdims=False, name=None) -> Tensor:
    """sqrt(sum(x^2)) over `axis`."""
    with name_scope(name, "reduce_euclidean_norm"):
        x = convert_to_tensor(input_tensor)
        return m.sqrt(math_ops.reduce_sum(m.square(x), axis, keepdims=keepdims))


def _pairs(x, name, compare):
    with name_scope(name, "is_" + compare.__name__):
        flat = array_ops.reshape(convert_to_tensor(x), [-1])
        return math_ops.reduce_all(compare(flat[1:], flat[:-1]))


def is_non_decreasing(x, name=None) -> Tensor:
    """True when each element of x (flattened) is >= the one before it."""
    return _pairs(x, name, math_ops.greater_equal)


def is_strictly_increasing(x, name=None) -> Tensor:
    """True when each element of x (flattened) is > the one before it."""
    return _pairs(x, name, math_ops.greater)


def roll(input, shift, axis, name=None) -> Tensor:
    """`input` shifted cyclically by `shift` along `axis` (ints or lists): a gather of (i - shift) mod n."""
    with name_scope(name, "Roll") as scope:
        x = convert_to_tensor(input)
        shifts = [shift] if isinstance(shift, int) else list(shift)
        axes = [axis] if isinstance(axis, int) else list(axis)
        if len(shifts) != len(axes):
            raise ValueError(f"tf.roll: shift {shift} and axis {axis} must have the same length")
        rank = x.shape.ndims
        y = x
        for k, (s, a) in enumerate(zip(shifts, axes)):
            n = array_ops.shape(y)[a]
            source = math_ops.floormod(m.subtract(math_ops.range(n), s), n)
            last = k == len(axes) - 1  # the result is the node 'Roll', as TF's
            y = array_ops.gather(y, source, axis=a % rank if rank is not None else a, name=scope if last else None)
        y.set_shape(x.shape)
        return y


def _scattered(tensor, indices, updates):
    tensor = convert_to_tensor(tensor)
    indices, updates = convert_to_tensor(indices), convert_to_tensor(updates, dtype=tensor.dtype)
    return tensor, composite_ops.scatter_nd(indices, updates, array_ops.shape(tensor)), indices, updates


def tensor_scatter_nd_add(tensor, indices, updates, name=None) -> Tensor:
    """`tensor` with `updates` added at `indices` (repeated indices add)."""
    with name_scope(name, "TensorScatterAdd") as scope:
        tensor, scattered, _, _ = _scattered(tensor, indices, updates)
        return m.add(tensor, scattered, name=scope)


def tensor_scatter_nd_sub(tensor, indices, updates, name=None) -> Tensor:
    """`tensor` with `updates` subtracted at `indices`."""
    with name_scope(name, "TensorScatterSub") as scope:
        tensor, scattered, _, _ = _scattered(tensor, indices, updates)
        return m.subtract(tensor, scattered, name=scope)


def tensor_scatter_nd_update(tensor, indices, updates, name=None) -> Tensor:
    """`tensor` with the entries (or slices) at `indices` replaced by `updates` (indices distinct, as TF
    requires for a defined result)."""
    with name_scope(name, "TensorScatterUpdate") as scope:
        tensor, scattered, indices, updates = _scattered(tensor, indices, updates)
        hit = composite_ops.scatter_nd(indices, array_ops.ones_like(updates), array_ops.shape(tensor))
        return m.where_v2(m.greater(hit, m.cast(0, tensor.dtype)), scattered, tensor, name=scope)


__all__ = [w for w, *_ in _UNARY.values()] + [w for w, *_ in _BINARY.values()] + [
    "betainc", "cumprod", "unique", "unique_with_counts", "unsorted_segment_max", "unsorted_segment_min",
    "unsorted_segment_prod", "unsorted_segment_mean", "unsorted_segment_sqrt_n", "segment_max", "segment_min",
    "segment_prod", "sparse_segment_sum", "sparse_segment_mean", "sparse_segment_sqrt_n", "searchsorted",
    "bincount", "histogram_fixed_width", "polyval", "lbeta", "bessel_i0", "bessel_i1", "reciprocal_no_nan",
    "multiply_no_nan", "reduce_euclidean_norm", "is_non_decreasing",
    "is_strictly_increasing", "roll", "tensor_scatter_nd_add", "tensor_scatter_nd_sub", "tensor_scatter_nd_update"]


def tensor_scatter_update(tensor, indices, updates, name=None) -> Tensor:
    """TF1's name of tensor_scatter_nd_update."""
    return tensor_scatter_nd_update(tensor, indices, updates, name)


def tensor_scatter_add(tensor, indices, updates, name=None) -> Tensor:
    """TF1's name of tensor_scatter_nd_add."""
    return tensor_scatter_nd_add(tensor, indices, updates, name)


def tensor_scatter_sub(tensor, indices, updates, name=None) -> Tensor:
    """TF1's name of tensor_scatter_nd_sub."""
    return tensor_scatter_nd_sub(tensor, indices, updates, name)


def truncatediv(x, y, name=None) -> Tensor:
    """x / y rounded toward zero (C's division): `tf.truncatediv(-7, 2)` is -3."""
    with name_scope(name, "TruncateDiv") as scope:
        x, y = m._operands(x, y)
        q = m.floordiv(m.abs(x), m.abs(y))
        return m.where_v2(m.equal(m.sign(x), m.sign(y)), q, m.negative(q), name=scope)


def truncatemod(x, y, name=None) -> Tensor:
    """The remainder of truncatediv, with x's sign (C's fmod): `tf.truncatemod(-7, 2)` is -1."""
    with name_scope(name, "TruncateMod") as scope:
        x, y = m._operands(x, y)
        return m.subtract(x, m.multiply(truncatediv(x, y), y), name=scope)


def erfcinv(x, name=None) -> Tensor:
    """The inverse of erfc: -ndtri(x / 2) / sqrt(2)."""
    with name_scope(name, "erfcinv"):
        x = convert_to_tensor(x)
        return m.multiply(_op("Ndtri", m.multiply(x, 0.5)), -1 / math.sqrt(2))


def cumulative_logsumexp(x, axis=0, exclusive=False, reverse=False, name=None) -> Tensor:
    """log(cumsum(exp(x))) along `axis`, shifted by the max for stability."""
    with name_scope(name, "CumulativeLogsumexp"):
        x = convert_to_tensor(x)
        top = array_ops.stop_gradient(math_ops.reduce_max(x, axis, keepdims=True))
        total = math_ops.cumsum(m.exp(m.subtract(x, top)), axis, exclusive=exclusive, reverse=reverse)
        return m.add(m.log(total), top)


def accumulate_n(inputs, shape=None, tensor_dtype=None, name=None) -> Tensor:
    """The sum of `inputs` (tf.add_n; TF's accumulate_n differs only in memory use)."""
    return math_ops.add_n(inputs, name=name)


def confusion_matrix(labels, predictions, num_classes=None, weights=None, dtype=_dt.int32, name=None) -> Tensor:
    """[num_classes, num_classes] counts (or summed `weights`) of (label, prediction) pairs, rows the labels;
    num_classes defaults to max(labels, predictions) + 1."""
    with name_scope(name, "confusion_matrix"):
        known = [constant_value(t) if m._is_tensor(t) else np.asarray(t) for t in (labels, predictions)]
        labels = m.cast(array_ops.reshape(convert_to_tensor(labels), [-1]), _dt.int32)
        predictions = m.cast(array_ops.reshape(convert_to_tensor(predictions), [-1]), _dt.int32)
        if num_classes is None and all(v is not None for v in known):
            num_classes = int(builtins.max(v.max(initial=-1) for v in known)) + 1  # static, as TF folds it
        if num_classes is None:
            num_classes = m.add(m.maximum(math_ops.reduce_max(labels), math_ops.reduce_max(predictions)), 1)
        n = m.cast(num_classes, _dt.int32) if isinstance(num_classes, Tensor) else int(num_classes)
        values = array_ops.ones_like(labels, dtype=dtype) if weights is None else \
            m.cast(array_ops.reshape(convert_to_tensor(weights), [-1]), dtype)
        cells = math_ops.unsorted_segment_sum(values, m.add(m.multiply(labels, n), predictions), m.multiply(n, n))
        return array_ops.reshape(cells, array_ops.stack([n, n]) if isinstance(n, Tensor) else [n, n])


def unravel_index(indices, dims, name=None) -> Tensor:
    """The coordinates in an array of shape `dims` of the flat `indices`: [len(dims)] or [len(dims), n]."""
    with name_scope(name, "UnravelIndex"):
        indices = convert_to_tensor(indices)
        dims = m.cast(convert_to_tensor(dims), indices.dtype)
        strides = cumprod(dims, exclusive=True, reverse=True)
        shaped = array_ops.expand_dims(indices, 0) if indices.shape.ndims else indices
        strides = array_ops.reshape(strides, [-1] + [1] * (shaped.shape.ndims - 1)) if indices.shape.ndims else strides
        dims = array_ops.reshape(dims, [-1] + [1] * (shaped.shape.ndims - 1)) if indices.shape.ndims else dims
        return math_ops.floormod(math_ops.floordiv(shaped, strides), dims)


def diag_part(input, name=None) -> Tensor:
    """tf.diag_part: the diagonal [D1, ..., Dk] of a tensor of shape [D1, ..., Dk, D1, ..., Dk] (k = rank / 2)."""
    from tfplus.ops import linalg_ops  # NOTE: here: linalg_ops builds on array and math ops only, as this module
    with name_scope(name, "DiagPart"):
        x = convert_to_tensor(input)
        rank = x.shape.ndims
        dims = x.shape.as_list() if rank is not None else None
        if rank is None or rank % 2 or any(a is not None and b is not None and a != b
                                           for a, b in zip(dims[:rank // 2], dims[rank // 2:])):
            raise ValueError(f"tf.diag_part: '{x.name}' must have a known rank 2k and shape [D1..Dk, D1..Dk], "
                             f"got {x.shape}")
        if rank == 2:
            return linalg_ops.matrix_diag_part(x)
        head = array_ops.shape(x)[:rank // 2]
        n = math_ops.reduce_prod(head)
        out = array_ops.reshape(linalg_ops.matrix_diag_part(array_ops.reshape(x, array_ops.stack([n, n]))), head)
        out.set_shape([a if a is not None else b for a, b in zip(dims[:rank // 2], dims[rank // 2:])])
        return out


def clip_by_average_norm(t, clip_norm, name=None) -> Tensor:
    """t * clip_norm / max(clip_norm, l2norm(t) / size(t)), as TF1."""
    with name_scope(name, "clip_by_average_norm"):
        t = convert_to_tensor(t)
        n = m.cast(array_ops.size(t), t.dtype)
        avg = m.realdiv(m.sqrt(math_ops.reduce_sum(m.square(t))), n)
        clip = convert_to_tensor(clip_norm, dtype=t.dtype)
        return m.realdiv(m.multiply(t, clip), m.maximum(clip, avg))


__all__ += ["tensor_scatter_update", "tensor_scatter_add", "tensor_scatter_sub", "truncatediv", "truncatemod",
            "erfcinv", "cumulative_logsumexp", "accumulate_n", "confusion_matrix", "unravel_index", "diag_part",
            "clip_by_average_norm"]
