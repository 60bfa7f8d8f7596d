"""Math ops: elementwise arithmetic and comparisons, matmul, reductions, casts.
Each op: registration, gradient, wrapper. Binary ops broadcast like NumPy; their gradients sum over the
broadcast dims (`_reduce_to`)."""
from __future__ import annotations

import builtins
import collections

import numpy as np

from tfplus import dtypes as _dt
from tfplus import flops as _flops
from tfplus.framework import Tensor, apply_op, constant_value, convert_to_tensor, name_scope
from tfplus.ops import array_ops
from tfplus.ops.array_ops import _index_tensor, _shape_of, reshape
from tfplus.ops.row_rules import aligned, along, reduces, value_of
from tfplus.registry import not_differentiable, register_gradient, register_op, register_rows
from tfplus.tensor_shape import broadcast, check_same_dtype, fmt, spec

__all__ = ["add", "subtract", "multiply", "divide", "truediv", "realdiv", "div", "floordiv", "floor_div",
           "floormod", "mod", "add_n", "matmul", "pow", "maximum", "minimum", "squared_difference",
           "negative", "abs", "sign", "square", "exp", "log", "log1p", "sqrt", "rsqrt", "reciprocal", "sin",
           "cos", "erf", "floor", "ceil", "round", "cast", "to_float", "to_double", "to_int32", "to_int64",
           "saturate_cast", "equal", "not_equal", "less", "less_equal", "greater", "greater_equal",
           "logical_and", "logical_or", "logical_not", "logical_xor", "where", "range", "reduce_sum",
           "reduce_mean", "reduce_max", "reduce_min", "reduce_any", "reduce_all", "count_nonzero", "argmax",
           "argmin", "cumsum", "clip_by_value", "reduce_prod", "unsorted_segment_sum", "div_no_nan", "where_v2"]

_FLOATS = (_dt.float16, _dt.float32, _dt.float64)
_INTS = (_dt.int8, _dt.int16, _dt.int32, _dt.int64, _dt.uint8)
_NUMERIC = _FLOATS + _INTS


def _check_dtype(s, allowed, what: str = "x") -> None:
    if s.dtype not in allowed:
        names = ", ".join(d.name for d in allowed)
        raise TypeError(f"{what} has dtype {s.dtype.name}; this op takes {names}")


def _is_tensor(v) -> bool:
    return isinstance(v, Tensor) or hasattr(v, "_as_tensor")


def _like(value, dtype, name: str) -> Tensor:
    """A Python/NumPy operand as a tensor of `dtype` (the Const `name`); refuses to drop a fraction (TF raises
    too)."""
    if _is_tensor(value):
        return convert_to_tensor(value)
    arr = np.asarray(value)
    exact = dtype.is_floating or np.all(arr == np.round(arr))
    if arr.dtype.kind == "f" and not exact:
        raise TypeError(f"cannot convert {value!r} to a {dtype.name} tensor without losing its fraction; "
                        "use tf.cast on the other operand")
    return convert_to_tensor(value, dtype=dtype, name=name)


def _operands(x, y) -> tuple[Tensor, Tensor]:
    """Two operands as tensors; a non-tensor takes the other's dtype (`x * 2`, `1.0 - x`). Made inside the op's
    name scope, a converted operand is TF's Const 'sub/y' (or 'sub/x' for `1.0 - x`)."""
    if _is_tensor(x):
        x = convert_to_tensor(x)
        return x, _like(y, x.dtype, "y")
    if _is_tensor(y):
        y = convert_to_tensor(y)
        return _like(x, y.dtype, "x"), y
    x = convert_to_tensor(x, name="x")
    return x, _like(y, x.dtype, "y")


def _binary(op_type: str, x, y, name, default: str | None = None) -> Tensor:
    """The node `name` (else `default`, else the op type, made unique as TF does) of x op y."""
    with name_scope(name, default or op_type, [x, y]) as scope:
        x, y = _operands(x, y)
        return apply_op(op_type, [x, y], name=scope)


def _reduce_to(grad: Tensor, shape) -> Tensor:
    """Sums `grad` (of a broadcast result) down to `shape`: a static tuple, or an int shape tensor.

    Static shapes give constant axes (one Sum, and a Reshape only when dims were dropped); otherwise the axes
    come from BroadcastGradientArgs at run time, as in TF."""
    g = grad._shape
    if isinstance(shape, tuple) and g is not None and len(g) >= len(shape):
        lead = len(g) - len(shape)
        stretched = [lead + i for i, d in enumerate(shape) if d == 1 and g[lead + i] != 1]
        axes = list(builtins.range(lead)) + stretched
        if not axes:
            return grad
        summed = reduce_sum(grad, axes)
        return summed if summed._shape == shape else reshape(summed, shape)
    shape = _index_tensor(shape)
    _, axes = array_ops.broadcast_gradient_args(array_ops.shape(grad, out_type=shape.dtype), shape)
    return reshape(reduce_sum(grad, axes), shape)


def _binary_shape(allowed, out_dtype=None):
    def fn(ins, attrs):
        check_same_dtype(ins)
        _check_dtype(ins[0], allowed)
        return [spec(broadcast(ins[0].shape, ins[1].shape), out_dtype or ins[0].dtype)]
    return fn


def _unary_shape(allowed):
    def fn(ins, attrs):
        _check_dtype(ins[0], allowed)
        return [spec(ins[0].shape, ins[0].dtype)]
    return fn


# -- Add / AddV2 ---------------------------------------------------------------------------------------------
for _t in ("Add", "AddV2"):
    register_op(_t, inputs=("x", "y"), outputs=("z",), attrs={"T": "type"}, shape_fn=_binary_shape(_NUMERIC),
                flops=_flops.per_output)


register_rows(aligned, "Add", "AddV2")
@register_gradient("Add")
@register_gradient("AddV2")
def _add_grad(op, grad):
    """dx = dy, dy = dy (each summed over its broadcast dims)"""
    x, y = op.inputs
    return [_reduce_to(grad, _shape_of(x)), _reduce_to(grad, _shape_of(y))]


def add(x, y, name=None) -> Tensor:
    """x + y, broadcasting: `tf.add(x, 1.0)`. An AddV2 node named 'Add', as TF1 (1.15 and later) builds."""
    return _binary("AddV2", x, y, name, "Add")


def add_v2(x, y, name=None) -> Tensor:
    """x + y as TF2's AddV2 node (what TF 1.15's `+` emits)."""
    return _binary("AddV2", x, y, name)


# -- Sub -----------------------------------------------------------------------------------------------------
register_op("Sub", inputs=("x", "y"), outputs=("z",), attrs={"T": "type"}, shape_fn=_binary_shape(_NUMERIC),
            flops=_flops.per_output)
register_rows(aligned, "Sub")


@register_gradient("Sub")
def _sub_grad(op, grad):
    """dx = dy, dy = -dy"""
    x, y = op.inputs
    return [_reduce_to(grad, _shape_of(x)), _reduce_to(negative(grad), _shape_of(y))]


def subtract(x, y, name=None) -> Tensor:
    """x - y, broadcasting."""
    return _binary("Sub", x, y, name)


# -- Mul -----------------------------------------------------------------------------------------------------
register_op("Mul", inputs=("x", "y"), outputs=("z",), attrs={"T": "type"}, shape_fn=_binary_shape(_NUMERIC),
            flops=_flops.per_output)
register_rows(aligned, "Mul")


@register_gradient("Mul")
def _mul_grad(op, grad):
    """dx = dz * y, dy = x * dz"""
    x, y = op.inputs
    return [_reduce_to(multiply(grad, y), _shape_of(x)), _reduce_to(multiply(x, grad), _shape_of(y))]


def multiply(x, y, name=None) -> Tensor:
    """x * y elementwise, broadcasting."""
    return _binary("Mul", x, y, name)


# -- RealDiv -------------------------------------------------------------------------------------------------
register_op("RealDiv", inputs=("x", "y"), outputs=("z",), attrs={"T": "type"},
            shape_fn=_binary_shape(_FLOATS), flops=_flops.per_output)
register_rows(aligned, "RealDiv")


@register_gradient("RealDiv")
def _realdiv_grad(op, grad):
    """dx = dz / y, dy = -dz * x / y^2"""
    x, y = op.inputs
    return [_reduce_to(realdiv(grad, y), _shape_of(x)),
            _reduce_to(multiply(grad, realdiv(realdiv(negative(x), y), y)), _shape_of(y))]


def realdiv(x, y, name=None) -> Tensor:
    """x / y for floating-point tensors."""
    return _binary("RealDiv", x, y, name)


def truediv(x, y, name=None) -> Tensor:
    """x / y; integers are first cast to float (int8/16, uint8 -> float32; int32/64 -> float64), as in TF."""
    with name_scope(name, "truediv", [x, y]) as scope:
        x, y = _operands(x, y)
        if x.dtype.is_integer:
            to = _dt.float32 if x.dtype.size <= 2 else _dt.float64
            x, y = cast(x, to), cast(y, to)
        return realdiv(x, y, scope)


def divide(x, y, name=None) -> Tensor:
    """x / y (true division): `tf.divide(a, b)`."""
    return truediv(x, y, name)


def div(x, y, name=None) -> Tensor:
    """TF1's Python-2-style division: floor division for integers, real division for floats."""
    with name_scope(name, "div", [x, y]) as scope:
        x, y = _operands(x, y)
        return floordiv(x, y, scope) if x.dtype.is_integer else realdiv(x, y, scope)


# -- FloorDiv / FloorMod -------------------------------------------------------------------------------------
register_op("FloorDiv", inputs=("x", "y"), outputs=("z",), attrs={"T": "type"},
            shape_fn=_binary_shape(_NUMERIC), flops=_flops.per_output)
register_rows(aligned, "FloorDiv")
not_differentiable("FloorDiv")


def floordiv(x, y, name=None) -> Tensor:
    """floor(x / y), for integers and floats."""
    return _binary("FloorDiv", x, y, name, "floordiv")


def floor_div(x, y, name=None) -> Tensor:
    """floordiv as TF's generated op: the node is named 'FloorDiv', not 'floordiv'."""
    return _binary("FloorDiv", x, y, name)

register_op("FloorMod", inputs=("x", "y"), outputs=("z",), attrs={"T": "type"},
            shape_fn=_binary_shape(_NUMERIC), flops=_flops.per_output)
register_rows(aligned, "FloorMod")


@register_gradient("FloorMod")
def _floormod_grad(op, grad):
    """dx = dz, dy = -dz * floor(x / y)"""
    x, y = op.inputs
    return [_reduce_to(grad, _shape_of(x)),
            _reduce_to(multiply(negative(grad), floordiv(x, y)), _shape_of(y))]


def floormod(x, y, name=None) -> Tensor:
    """x - floor(x / y) * y: the result has the sign of y (Python's %)."""
    return _binary("FloorMod", x, y, name)


mod = floormod


# -- Pow -----------------------------------------------------------------------------------------------------
register_op("Pow", inputs=("x", "y"), outputs=("z",), attrs={"T": "type"}, shape_fn=_binary_shape(_NUMERIC),
            flops=_flops.per_output)
register_rows(aligned, "Pow")


@register_gradient("Pow")
def _pow_grad(op, grad):
    """dx = dz * y * x^(y-1), dy = dz * z * log(x) (0 where x <= 0)"""
    x, y = op.inputs
    z = op.outputs[0]
    log_x = where(greater(x, 0), log(x), array_ops.zeros_like(x))
    return [_reduce_to(multiply(grad, multiply(y, pow(x, subtract(y, 1)))), _shape_of(x)),
            _reduce_to(multiply(grad, multiply(z, log_x)), _shape_of(y))]


def pow(x, y, name=None) -> Tensor:
    """x ** y elementwise, broadcasting."""
    return _binary("Pow", x, y, name)


# -- Maximum / Minimum ---------------------------------------------------------------------------------------
for _t in ("Maximum", "Minimum"):
    register_op(_t, inputs=("x", "y"), outputs=("z",), attrs={"T": "type"}, shape_fn=_binary_shape(_NUMERIC),
                flops=_flops.per_output)


register_rows(aligned, "Maximum", "Minimum")
def _select_grad(op, grad, x_wins):
    gx = multiply(grad, cast(x_wins, grad.dtype))
    return [_reduce_to(gx, _shape_of(op.inputs[0])), _reduce_to(subtract(grad, gx), _shape_of(op.inputs[1]))]


@register_gradient("Maximum")
def _maximum_grad(op, grad):
    """dx = dz where x >= y, dy = dz elsewhere (ties go to x, as in TF)"""
    return _select_grad(op, grad, greater_equal(*op.inputs))


@register_gradient("Minimum")
def _minimum_grad(op, grad):
    """dx = dz where x <= y, dy = dz elsewhere (ties go to x, as in TF)"""
    return _select_grad(op, grad, less_equal(*op.inputs))


def maximum(x, y, name=None) -> Tensor:
    """Elementwise max(x, y), broadcasting."""
    return _binary("Maximum", x, y, name)


def minimum(x, y, name=None) -> Tensor:
    """Elementwise min(x, y), broadcasting."""
    return _binary("Minimum", x, y, name)


def clip_by_value(t, clip_value_min, clip_value_max, name=None) -> Tensor:
    """max(min(t, hi), lo); the gradient flows where t is inside [lo, hi]."""
    with name_scope(name, "clip_by_value", [t]) as scope:  # TF's order: the maximum's node is the result
        return maximum(minimum(t, clip_value_max), clip_value_min, name=scope)


# -- SquaredDifference ---------------------------------------------------------------------------------------
register_op("SquaredDifference", inputs=("x", "y"), outputs=("z",), attrs={"T": "type"},
            shape_fn=_binary_shape(_NUMERIC), flops=_flops.per_output)
register_rows(aligned, "SquaredDifference")


@register_gradient("SquaredDifference")
def _squared_difference_grad(op, grad):
    """dx = 2 dz (x - y), dy = -dx"""
    x, y = op.inputs
    gx = multiply(grad, multiply(subtract(x, y), 2))
    return [_reduce_to(gx, _shape_of(x)), _reduce_to(negative(gx), _shape_of(y))]


def squared_difference(x, y, name=None) -> Tensor:
    """(x - y)^2 elementwise, broadcasting."""
    return _binary("SquaredDifference", x, y, name)


# -- AddN ----------------------------------------------------------------------------------------------------
def _add_n_shape(ins, attrs):
    check_same_dtype(ins)
    _check_dtype(ins[0], _NUMERIC)
    shape = ins[0].shape
    for s in ins[1:]:
        if shape is None or s.shape is None:
            shape = shape or s.shape
            continue
        if len(shape) != len(s.shape) or any(a is not None and b is not None and a != b
                                             for a, b in zip(shape, s.shape)):
            raise ValueError("AddN's inputs must have one shape, got " + ", ".join(fmt(v.shape) for v in ins))
        shape = tuple(a if a is not None else b for a, b in zip(shape, s.shape))
    return [spec(shape, ins[0].dtype)]


register_op("AddN", inputs=("inputs*",), outputs=("sum",), attrs={"N": "int", "T": "type"},
            shape_fn=_add_n_shape, flops=_flops.add_n)
register_rows(aligned, "AddN")


@register_gradient("AddN")
def _add_n_grad(op, grad):
    """each input gets dy"""
    return [grad] * len(op.inputs)


def add_n(inputs, name=None) -> Tensor:
    """Sums a list of same-shaped tensors: `tf.add_n([a, b, c])`."""
    return apply_op("AddN", [list(inputs)], name=name)


# -- MatMul --------------------------------------------------------------------------------------------------
def _matmul_shape(ins, attrs):
    a, b = ins
    check_same_dtype(ins)
    _check_dtype(a, _NUMERIC)
    for s, what in ((a, "a"), (b, "b")):
        if s.shape is not None and len(s.shape) != 2:
            raise ValueError(f"MatMul takes matrices; {what} has shape {fmt(s.shape)}")
    ta, tb = attrs["transpose_a"], attrs["transpose_b"]
    (m, ka) = (None, None) if a.shape is None else (a.shape[::-1] if ta else a.shape)
    (kb, n) = (None, None) if b.shape is None else (b.shape[::-1] if tb else b.shape)
    if ka is not None and kb is not None and ka != kb:
        raise ValueError(f"inner dimensions differ: a{' (transposed)' if ta else ''} has shape "
                         f"{fmt(a.shape)}, b{' (transposed)' if tb else ''} has shape {fmt(b.shape)} "
                         f"({ka} != {kb})")
    return [spec((m, n), a.dtype)]


register_op("MatMul", inputs=("a", "b"), outputs=("product",),
            attrs={"T": "type", "transpose_a": "bool", "transpose_b": "bool"}, shape_fn=_matmul_shape,
            flops=_flops.matmul, tags=("gemm", "row_sums"))


def _matmul_rows(op, rows) -> str | None:
    """Row by row where one factor's free axis holds the rows and the other has none (x W, dy W^T, W x^T); both
    factors' rows contracted (x^T dy: a weight gradient) are a sum over them."""
    a, b = op.inputs[:2]
    if op.outputs[0] not in rows:
        return None
    if a in rows and b not in rows and rows[a] == (1 if op.attrs.get("transpose_a") else 0):
        return None
    if b in rows and a not in rows and rows[b] == (0 if op.attrs.get("transpose_b") else 1):
        return None
    return ("contracts the batch's rows with each other or with another factor's (attention over the examples): "
            "each micro-batch would see its own rows only")


register_rows(_matmul_rows, "MatMul")


@register_gradient("MatMul")
def _matmul_grad(op, grad):
    """for c = a @ b: da = dc @ b^T, db = a^T @ dc (transposes folded into the matmuls)"""
    a, b = op.inputs
    ta, tb = op.attrs["transpose_a"], op.attrs["transpose_b"]
    if not ta and not tb:
        return [matmul(grad, b, transpose_b=True), matmul(a, grad, transpose_a=True)]
    if ta and not tb:
        return [matmul(b, grad, transpose_b=True), matmul(a, grad)]
    if not ta and tb:
        return [matmul(grad, b), matmul(grad, a, transpose_a=True)]
    return [matmul(b, grad, transpose_a=True, transpose_b=True),
            matmul(grad, a, transpose_a=True, transpose_b=True)]


def matmul(a, b, transpose_a=False, transpose_b=False, adjoint_a=False, adjoint_b=False, a_is_sparse=False,
           b_is_sparse=False, name=None) -> Tensor:
    """Matrix product of two rank-2 tensors: `tf.matmul(x, w)`, `tf.matmul(a, b, transpose_b=True)`; of
    higher ranks, the product of the innermost matrices with the batch dims broadcast (TF's BatchMatMulV2).

        scores = tf.matmul(q, k, transpose_b=True)   # [batch, heads, q, d] x [batch, heads, k, d]
    """
    a, b = _operands(a, b)
    ta, tb = bool(transpose_a or adjoint_a), bool(transpose_b or adjoint_b)
    if (a.shape.ndims or 2) > 2 or (b.shape.ndims or 2) > 2:
        return _batch_matmul(a, b, ta, tb, name)
    return apply_op("MatMul", [a, b], {"transpose_a": ta, "transpose_b": tb}, name)


def _batch_matmul(a, b, transpose_a: bool, transpose_b: bool, name) -> Tensor:
    """The batched product as sum_k a[..., i, k] * b[..., k, j]: a broadcast Mul and a Sum (a general path that
    every device runs and differentiates, with a [..., i, k, j] intermediate)."""
    from tfplus.framework import name_scope

    def inner(t, swap):
        if t.shape.ndims is None:
            raise ValueError(f"tf.matmul: '{t.name}' needs a known rank for a batched product")
        if not swap:
            return t
        perm = list(builtins.range(t.shape.ndims))
        perm[-2:] = perm[-1], perm[-2]
        return array_ops.transpose(t, perm)
    with name_scope(name, "MatMul"):
        a, b = inner(a, transpose_a), inner(b, transpose_b)
        ka, kb = a.shape.as_list()[-1], b.shape.as_list()[-2]
        if ka is not None and kb is not None and ka != kb:
            raise ValueError(f"tf.matmul: the innermost matrices of a (shape {a.shape}) and b (shape {b.shape}), "
                             f"after any transposes, must agree on the inner dimension: {ka} != {kb}")
        return reduce_sum(multiply(array_ops.expand_dims(a, -1), array_ops.expand_dims(b, -3)), -2)


# -- unary elementwise ops -----------------------------------------------------------------------------------
_UNARY = {"Neg": _NUMERIC, "Abs": _NUMERIC, "Sign": _NUMERIC, "Square": _NUMERIC, "Exp": _FLOATS,
          "Log": _FLOATS, "Log1p": _FLOATS, "Sqrt": _FLOATS, "Rsqrt": _FLOATS, "Reciprocal": _FLOATS,
          "Sin": _FLOATS, "Cos": _FLOATS, "Erf": _FLOATS, "Floor": _FLOATS, "Ceil": _FLOATS, "Round": _NUMERIC}
for _t, _allowed in _UNARY.items():
    register_op(_t, inputs=("x",), outputs=("y",), attrs={"T": "type"}, shape_fn=_unary_shape(_allowed),
                flops=_flops.per_output)
register_rows(aligned, *_UNARY)
not_differentiable("Floor", "Ceil", "Round")  # piecewise constant: TF's gradient is None too


@register_gradient("Neg")
def _neg_grad(op, grad):
    """dx = -dy"""
    return [negative(grad)]


@register_gradient("Abs")
def _abs_grad(op, grad):
    """dx = dy * sign(x)"""
    return [multiply(grad, sign(op.inputs[0]))]


@register_gradient("Sign")
def _sign_grad(op, grad):
    """dx = 0"""
    return [array_ops.zeros_like(op.inputs[0])]


@register_gradient("Square")
def _square_grad(op, grad):
    """dx = dy * 2x"""
    return [multiply(grad, multiply(op.inputs[0], 2))]


@register_gradient("Exp")
def _exp_grad(op, grad):
    """dx = dy * y"""
    return [multiply(grad, op.outputs[0])]


@register_gradient("Log")
def _log_grad(op, grad):
    """dx = dy / x"""
    return [realdiv(grad, op.inputs[0])]


@register_gradient("Log1p")
def _log1p_grad(op, grad):
    """dx = dy / (1 + x)"""
    return [realdiv(grad, add(op.inputs[0], 1))]


@register_gradient("Sqrt")
def _sqrt_grad(op, grad):
    """dx = dy / (2 y)"""
    return [realdiv(grad, multiply(op.outputs[0], 2))]


@register_gradient("Rsqrt")
def _rsqrt_grad(op, grad):
    """dx = dy * -y^3 / 2"""
    y = op.outputs[0]
    return [multiply(grad, multiply(pow(y, 3), -0.5))]


@register_gradient("Reciprocal")
def _reciprocal_grad(op, grad):
    """dx = -dy * y^2"""
    return [multiply(negative(grad), square(op.outputs[0]))]


@register_gradient("Sin")
def _sin_grad(op, grad):
    """dx = dy * cos(x)"""
    return [multiply(grad, cos(op.inputs[0]))]


@register_gradient("Cos")
def _cos_grad(op, grad):
    """dx = -dy * sin(x)"""
    return [multiply(negative(grad), sin(op.inputs[0]))]


@register_gradient("Erf")
def _erf_grad(op, grad):
    """dx = dy * 2 / sqrt(pi) * exp(-x^2)"""
    x = op.inputs[0]
    return [multiply(grad, multiply(exp(negative(square(x))), 2.0 / np.sqrt(np.pi)))]


def _unary_op(op_type, x, name) -> Tensor:
    return apply_op(op_type, [convert_to_tensor(x)], name=name)


def negative(x, name=None) -> Tensor:
    """-x"""
    return _unary_op("Neg", x, name)


def abs(x, name=None) -> Tensor:
    """|x|"""
    return _unary_op("Abs", x, name)


def sign(x, name=None) -> Tensor:
    """-1, 0 or 1"""
    return _unary_op("Sign", x, name)


def square(x, name=None) -> Tensor:
    """x * x"""
    return _unary_op("Square", x, name)


def exp(x, name=None) -> Tensor:
    """e^x"""
    return _unary_op("Exp", x, name)


def log(x, name=None) -> Tensor:
    """natural logarithm (nan below 0, -inf at 0, as in TF)"""
    return _unary_op("Log", x, name)


def log1p(x, name=None) -> Tensor:
    """log(1 + x), accurate for small x"""
    return _unary_op("Log1p", x, name)


def sqrt(x, name=None) -> Tensor:
    """square root"""
    return _unary_op("Sqrt", x, name)


def rsqrt(x, name=None) -> Tensor:
    """1 / sqrt(x)"""
    return _unary_op("Rsqrt", x, name)


def reciprocal(x, name=None) -> Tensor:
    """1 / x"""
    return _unary_op("Reciprocal", x, name)


def sin(x, name=None) -> Tensor:
    """sine"""
    return _unary_op("Sin", x, name)


def erf(x, name=None) -> Tensor:
    """The Gauss error function, 2 / sqrt(pi) * integral of exp(-t^2) from 0 to x (BERT's GELU uses it)."""
    return _unary_op("Erf", x, name)


def cos(x, name=None) -> Tensor:
    """cosine"""
    return _unary_op("Cos", x, name)


def floor(x, name=None) -> Tensor:
    """largest integer <= x"""
    return _unary_op("Floor", x, name)


def ceil(x, name=None) -> Tensor:
    """smallest integer >= x"""
    return _unary_op("Ceil", x, name)


def round(x, name=None) -> Tensor:
    """nearest integer, halves to even (as TF and NumPy)"""
    return _unary_op("Round", x, name)


# -- Cast ----------------------------------------------------------------------------------------------------
register_op("Cast", inputs=("x",), outputs=("y",), attrs={"SrcT": "type", "DstT": "type", "Truncate": "bool"},
            shape_fn=lambda ins, attrs: [spec(ins[0].shape, attrs["DstT"])], flops=_flops.zero)
register_rows(aligned, "Cast")


@register_gradient("Cast")
def _cast_grad(op, grad):
    """dx = cast(dy, x.dtype) between float types; no gradient to or from integers"""
    src = op.inputs[0].dtype
    return [cast(grad, src) if src.is_floating and grad.dtype.is_floating else None]


def cast(x, dtype, name=None) -> Tensor:
    """`tf.cast(x, tf.int32)`: float -> int truncates toward zero; nonzero -> True for bool. A SparseTensor is
    cast value by value (a speech script's tf.cast(decoded[0], tf.int32)), as in TF."""
    if hasattr(x, "_with_values"):
        return x._with_values(cast(x.values, dtype, name))
    x, dtype = convert_to_tensor(x), _dt.as_dtype(dtype)
    if x.dtype is dtype:
        return x
    return apply_op("Cast", [x], {"SrcT": x.dtype, "DstT": dtype, "Truncate": False}, name)


def saturate_cast(value, dtype, name=None) -> Tensor:
    """cast that clips to the target type's range first (float -> integer)."""
    value, dtype = convert_to_tensor(value), _dt.as_dtype(dtype)
    if value.dtype.is_floating and dtype.is_integer:
        info = np.iinfo(dtype.np)
        value = clip_by_value(value, float(info.min), float(info.max))
    return cast(value, dtype, name)


def to_float(x, name="ToFloat") -> Tensor:
    return cast(x, _dt.float32, name)


def to_double(x, name="ToDouble") -> Tensor:
    return cast(x, _dt.float64, name)


def to_int32(x, name="ToInt32") -> Tensor:
    return cast(x, _dt.int32, name)


def to_int64(x, name="ToInt64") -> Tensor:
    return cast(x, _dt.int64, name)


# -- comparisons and logical ops (bool results; no gradient) -------------------------------------------------
_COMPARE = {"Equal": _NUMERIC + (_dt.bool_,), "NotEqual": _NUMERIC + (_dt.bool_,), "Less": _NUMERIC,
            "LessEqual": _NUMERIC, "Greater": _NUMERIC, "GreaterEqual": _NUMERIC}
for _t, _allowed in _COMPARE.items():
    register_op(_t, inputs=("x", "y"), outputs=("z",), attrs={"T": "type"},
                shape_fn=_binary_shape(_allowed, _dt.bool_), flops=_flops.per_output)
register_rows(aligned, *_COMPARE)
for _t in ("LogicalAnd", "LogicalOr"):
    register_op(_t, inputs=("x", "y"), outputs=("z",), shape_fn=_binary_shape((_dt.bool_,)), flops=_flops.per_output)
register_rows(aligned, "LogicalAnd", "LogicalOr")
register_op("LogicalNot", inputs=("x",), outputs=("y",), shape_fn=_unary_shape((_dt.bool_,)), flops=_flops.per_output)
register_rows(aligned, "LogicalNot")
not_differentiable(*_COMPARE, "LogicalAnd", "LogicalOr", "LogicalNot")


def equal(x, y, name=None) -> Tensor:
    """x == y elementwise (a bool tensor)"""
    return _binary("Equal", x, y, name)


def not_equal(x, y, name=None) -> Tensor:
    """x != y elementwise"""
    return _binary("NotEqual", x, y, name)


def less(x, y, name=None) -> Tensor:
    """x < y elementwise"""
    return _binary("Less", x, y, name)


def less_equal(x, y, name=None) -> Tensor:
    """x <= y elementwise"""
    return _binary("LessEqual", x, y, name)


def greater(x, y, name=None) -> Tensor:
    """x > y elementwise"""
    return _binary("Greater", x, y, name)


def greater_equal(x, y, name=None) -> Tensor:
    """x >= y elementwise"""
    return _binary("GreaterEqual", x, y, name)


def logical_and(x, y, name=None) -> Tensor:
    return _binary("LogicalAnd", x, y, name)


def logical_or(x, y, name=None) -> Tensor:
    return _binary("LogicalOr", x, y, name)


def logical_not(x, name=None) -> Tensor:
    return _unary_op("LogicalNot", x, name)


def logical_xor(x, y, name="LogicalXor") -> Tensor:
    """x != y for bools (TF builds it from And/Or/Not too)"""
    return logical_and(logical_or(x, y), logical_not(logical_and(x, y)), name=name)


# -- Select (tf.where with three arguments) ------------------------------------------------------------------
def _select_shape(ins, attrs):
    cond, t, e = ins
    _check_dtype(cond, (_dt.bool_,), "condition")
    check_same_dtype([t, e], "x and y")
    if t.shape is not None and e.shape is not None and not _compatible(t.shape, e.shape):
        raise ValueError(f"x {fmt(t.shape)} and y {fmt(e.shape)} must have one shape")
    out = t.shape if t.shape is not None else e.shape
    c = cond.shape
    if c is not None and out is not None and c != ():
        vector = len(c) == 1 and len(out) > 1 and _compatible(c, out[:1])
        if not (vector or _compatible(c, out)):
            raise ValueError(f"condition {fmt(c)} must have x's shape {fmt(out)}, be a vector over its first "
                             "dimension, or be a scalar")
    return [spec(out, t.dtype)]


def _compatible(a, b) -> bool:
    return len(a) == len(b) and all(x is None or y is None or x == y for x, y in zip(a, b))


register_op("Select", inputs=("condition", "t", "e"), outputs=("output",), attrs={"T": "type"},
            shape_fn=_select_shape, flops=_flops.per_output)


def _select_rows(op, rows) -> str | None:
    """A condition of rank 1 picks whole rows of t or e (row i by condition[i]); else elementwise."""
    condition = op.inputs[0]
    return None if condition in rows and rows.shape(condition) is not None and len(rows.shape(condition)) == 1 and \
        rows.get(op.outputs[0]) == 0 else aligned(op, rows)


register_rows(_select_rows, "Select")


@register_gradient("Select")
def _select_op_grad(op, grad):
    """dt = dz where condition, de = dz elsewhere"""
    cond = op.inputs[0]
    zeros = array_ops.zeros_like(grad)
    return [None, select(cond, grad, zeros), select(cond, zeros, grad)]


def select(condition, x, y, name=None) -> Tensor:
    """x where condition is True, else y (condition: x's shape, a vector over dim 0, or a scalar)."""
    x, y = _operands(x, y)
    return apply_op("Select", [convert_to_tensor(condition), x, y], {"T": x.dtype}, name)


# -- Where (tf.where with one argument) ----------------------------------------------------------------------
def _where_shape(ins, attrs):
    x = ins[0]
    if x.shape is None:
        return [spec((None, None), _dt.int64)]
    n = None if x.value is None else int(np.count_nonzero(x.value))
    return [spec((n, len(x.shape)), _dt.int64)]


# The output's length depends on the input's values, so the shape function reads them (value_inputs).
register_op("Where", inputs=("input",), outputs=("index",), attrs={"T": "type"}, shape_fn=_where_shape,
            value_inputs=(0,), flops=_flops.zero)
register_rows(lambda op, rows: None if op.inputs[0] not in rows else
              f"lists where '{op.inputs[0].name}' is true (tf.where, tf.boolean_mask): the number and the row numbers "
              "of the whole batch's, which no micro-batch has", "Where")
not_differentiable("Where")


def where(condition, x=None, y=None, name=None) -> Tensor:
    """`tf.where(c, x, y)` picks elementwise; `tf.where(c)` gives the [n, rank] int64 indices of the Trues."""
    if x is None and y is None:
        return apply_op("Where", [convert_to_tensor(condition)], name=name)
    if x is None or y is None:
        raise ValueError("tf.where: pass both x and y, or neither")
    return select(condition, x, y, name)


# -- Range ---------------------------------------------------------------------------------------------------
def _range_shape(ins, attrs):
    start, limit, delta = ins
    check_same_dtype(ins, "start, limit and delta")
    _check_dtype(start, (_dt.float32, _dt.float64, _dt.int32, _dt.int64), "start")
    for s, what in zip(ins, ("start", "limit", "delta")):
        if s.shape not in (None, ()):
            raise ValueError(f"{what} must be a scalar, got shape {fmt(s.shape)}")
    if any(s.value is None for s in ins):
        return [spec((None,), start.dtype)]
    a, b, d = (s.value.item() for s in ins)
    if d == 0:
        raise ValueError("delta must not be 0")
    return [spec((builtins.max(0, int(np.ceil((b - a) / d))),), start.dtype)]


register_op("Range", inputs=("start", "limit", "delta"), outputs=("output",), attrs={"Tidx": "type"},
            shape_fn=_range_shape, value_inputs=(0, 1, 2), flops=_flops.zero)
# A range over the batch (tf.range(tf.shape(x)[0])) numbers the rows: each micro-batch would number its own from
# 0. planner.rows allows the one use that takes each row's own entry: tf.gather_nd(p, tf.stack([range, labels], 1)).
register_rows(lambda op, rows: None if op.outputs[0] not in rows else
              "numbers the batch's rows (tf.range(tf.shape(x)[0]), or the indices n-1..0 by which tf.reverse(x, [0]) "
              "gathers them): each micro-batch would number its own from 0", "Range")
not_differentiable("Range")


def range(start, limit=None, delta=1, dtype=None, name="range") -> Tensor:
    """`tf.range(5)` -> [0 1 2 3 4]; `tf.range(1.0, 2.0, 0.25)`. int32 unless a float is involved."""
    if limit is None:
        start, limit = 0, start
    args = [start, limit, delta]
    if dtype is None:
        known = [convert_to_tensor(a).dtype if _is_tensor(a) else None for a in args]
        dtype = next((d for d in known if d is not None), None) or (
            _dt.float32 if any(np.asarray(a).dtype.kind == "f" for a in args) else _dt.int32)
    dtype = _dt.as_dtype(dtype)
    args = [cast(a, dtype) if _is_tensor(a) else convert_to_tensor(a, dtype=dtype) for a in args]
    return apply_op("Range", args, {"Tidx": dtype}, name)


# -- reductions: Sum, Mean, Max, Min, Any, All ---------------------------------------------------------------
def _reduction_axes(axes, rank: int) -> list[int]:
    """Sorted, non-negative reduction axes; raises naming the valid range, or an axis named twice (as TF:
    [0, -1] of a vector)."""
    out = set()
    for a in np.ravel(axes).tolist():
        if not -rank <= a < rank:
            raise ValueError(f"reduction axis {a} is out of range for a tensor of rank {rank}")
        if a % rank in out:
            raise ValueError(f"reduction axes {np.ravel(axes).tolist()} name axis {a % rank} twice (rank {rank})")
        out.add(a % rank)
    return sorted(out)


def _reduce_shape(allowed, out_dtype=None):
    def fn(ins, attrs):
        x, axes = ins
        _check_dtype(x, allowed)
        dtype = out_dtype or x.dtype
        keep = attrs["keep_dims"]
        if x.shape is None:
            return [spec(None, dtype)]
        if axes.value is None:
            return [spec((None,) * len(x.shape) if keep else None, dtype)]
        ax = _reduction_axes(axes.value, len(x.shape))
        if keep:
            return [spec(tuple(1 if i in ax else d for i, d in enumerate(x.shape)), dtype)]
        return [spec(tuple(d for i, d in enumerate(x.shape) if i not in ax), dtype)]
    return fn


_REDUCE_ATTRS = {"keep_dims": "bool", "T": "type", "Tidx": "type"}
for _t, _allowed in (("Sum", _NUMERIC), ("Mean", _NUMERIC), ("Max", _NUMERIC), ("Min", _NUMERIC)):
    register_op(_t, inputs=("input", "reduction_indices"), outputs=("output",), attrs=_REDUCE_ATTRS,
                shape_fn=_reduce_shape(_allowed), value_inputs=(1,), flops=_flops.per_input,
                tags={"Sum": ("row_sums",), "Mean": ("row_means",)}.get(_t, ()))
register_rows(reduces, "Sum", "Mean", "Max", "Min")
for _t in ("Any", "All"):
    register_op(_t, inputs=("input", "reduction_indices"), outputs=("output",),
                attrs={"keep_dims": "bool", "Tidx": "type"}, shape_fn=_reduce_shape((_dt.bool_,)),
                value_inputs=(1,), flops=_flops.per_input)
register_rows(reduces, "Any", "All")
not_differentiable("Any", "All")


def _kept_dims(op, t: Tensor) -> Tensor:
    """A reduction's output-shaped `t` with the reduced axes put back as size-1 dims (keep_dims: as is)."""
    if op.attrs["keep_dims"]:
        return t
    x, axes_t = op.inputs
    axes = constant_value(axes_t)
    if axes is not None and x._shape is not None:
        for a in _reduction_axes(axes, len(x._shape)):
            t = array_ops.expand_dims(t, a)
        return t
    # Axes or rank known only at run time: kept shape = where(dim is reduced, 1, shape(x)).
    in_shape = array_ops.shape(x, out_type=axes_t.dtype)
    r = array_ops.rank(x) if axes_t.dtype is _dt.int32 else cast(array_ops.rank(x), axes_t.dtype)
    dims = range(0, r)
    hit = reduce_any(equal(array_ops.expand_dims(dims, 1), floormod(reshape(axes_t, [1, -1]), r)), axis=1)
    return reshape(t, select(hit, array_ops.ones_like(in_shape), in_shape))


@register_gradient("Sum")
def _sum_grad(op, grad):
    """dx = broadcast dy back over the reduced axes"""
    x = op.inputs[0]
    return [array_ops.broadcast_to(_kept_dims(op, grad), _shape_of(x)), None]


@register_gradient("Mean")
def _mean_grad(op, grad):
    """dx = broadcast(dy) * size(y) / size(x)"""
    x, y = op.inputs[0], op.outputs[0]
    nx, ny = x.shape.num_elements(), y.shape.num_elements()
    if nx is not None and ny is not None:
        scale = convert_to_tensor(ny / builtins.max(nx, 1), dtype=grad.dtype)
    else:
        scale = realdiv(cast(array_ops.size(y), grad.dtype), cast(maximum(array_ops.size(x), 1), grad.dtype))
    return [array_ops.broadcast_to(multiply(_kept_dims(op, grad), scale), _shape_of(x)), None]


def _min_or_max_grad(op, grad):
    """dx = dy where x equals the extreme, shared equally among ties"""
    x = op.inputs[0]
    y, g = _kept_dims(op, op.outputs[0]), _kept_dims(op, grad)
    hits = cast(equal(x, y), grad.dtype)
    count = reduce_sum(hits, op.inputs[1], keepdims=True)
    return [multiply(realdiv(hits, count), g), None]


register_gradient("Max")(_min_or_max_grad)
register_gradient("Min")(_min_or_max_grad)


def _reduce(op_type, input_tensor, axis, keepdims, name, reduction_indices=None, keep_dims=None) -> Tensor:
    x = convert_to_tensor(input_tensor)
    axis = reduction_indices if axis is None else axis
    keepdims = keep_dims if keepdims is None else keepdims
    if axis is None:  # all axes
        axis = array_ops.constant(list(builtins.range(len(x._shape))), _dt.int32) if x._shape is not None else \
            range(0, array_ops.rank(x))
    with name_scope(name, op_type, [x]) as scope:  # TF's names: 'Mean/reduction_indices'; all axes: 'Const'
        axis = _index_tensor(axis, name="reduction_indices")
        return apply_op(op_type, [x, axis], {"keep_dims": bool(keepdims), "Tidx": axis.dtype}, scope)


def reduce_sum(input_tensor, axis=None, keepdims=None, name=None, reduction_indices=None,
               keep_dims=None) -> Tensor:
    """Sum over `axis` (all axes if None): `tf.reduce_sum(x, axis=1, keepdims=True)`."""
    return _reduce("Sum", input_tensor, axis, keepdims, name, reduction_indices, keep_dims)


def reduce_mean(input_tensor, axis=None, keepdims=None, name=None, reduction_indices=None,
               keep_dims=None) -> Tensor:
    """Mean over `axis`; for integers it truncates like TF (`tf.reduce_mean([1, 2])` is 1)."""
    return _reduce("Mean", input_tensor, axis, keepdims, name, reduction_indices, keep_dims)


def reduce_max(input_tensor, axis=None, keepdims=None, name=None, reduction_indices=None,
               keep_dims=None) -> Tensor:
    """Maximum over `axis`."""
    return _reduce("Max", input_tensor, axis, keepdims, name, reduction_indices, keep_dims)


def reduce_min(input_tensor, axis=None, keepdims=None, name=None, reduction_indices=None,
               keep_dims=None) -> Tensor:
    """Minimum over `axis`."""
    return _reduce("Min", input_tensor, axis, keepdims, name, reduction_indices, keep_dims)


def reduce_any(input_tensor, axis=None, keepdims=None, name=None, reduction_indices=None,
               keep_dims=None) -> Tensor:
    """Logical or over `axis` of a bool tensor."""
    return _reduce("Any", input_tensor, axis, keepdims, name, reduction_indices, keep_dims)


def reduce_all(input_tensor, axis=None, keepdims=None, name=None, reduction_indices=None,
               keep_dims=None) -> Tensor:
    """Logical and over `axis` of a bool tensor."""
    return _reduce("All", input_tensor, axis, keepdims, name, reduction_indices, keep_dims)


def count_nonzero(input_tensor, axis=None, keepdims=None, dtype=_dt.int64, name=None, reduction_indices=None,
                  keep_dims=None) -> Tensor:
    """The number of nonzero (or True) elements over `axis`, as int64 by default."""
    with name_scope(name, "count_nonzero", [input_tensor]):
        x = convert_to_tensor(input_tensor)
        nonzero = not_equal(x, array_ops.constant(np.zeros((), x.dtype.np), name="zeros"))
        return cast(reduce_sum(cast(nonzero, _dt.int64), axis, keepdims, reduction_indices=reduction_indices,
                               keep_dims=keep_dims), dtype)


# -- ArgMax / ArgMin -----------------------------------------------------------------------------------------
def _arg_shape(ins, attrs):
    x, dim = ins
    _check_dtype(x, _NUMERIC)
    if attrs["output_type"] not in (_dt.int32, _dt.int64):
        raise TypeError(f"output_type must be int32 or int64, got {attrs['output_type'].name}")
    if x.shape is None:
        return [spec(None, attrs["output_type"])]
    if dim.value is None:
        return [spec((None,) * (len(x.shape) - 1), attrs["output_type"])]
    a = _reduction_axes(dim.value, len(x.shape))[0]
    return [spec(x.shape[:a] + x.shape[a + 1:], attrs["output_type"])]


for _t in ("ArgMax", "ArgMin"):
    register_op(_t, inputs=("input", "dimension"), outputs=("output",),
                attrs={"T": "type", "Tidx": "type", "output_type": "type"}, shape_fn=_arg_shape,
                value_inputs=(1,), flops=_flops.per_input)
register_rows(reduces, "ArgMax", "ArgMin")
not_differentiable("ArgMax", "ArgMin")


def _arg(op_type, input, axis, name, dimension, output_type) -> Tensor:
    axis = dimension if axis is None else axis
    with name_scope(name, op_type, [input]) as scope:
        axis = _index_tensor(0 if axis is None else axis, name="dimension")
        return apply_op(op_type, [convert_to_tensor(input), axis],
                        {"Tidx": axis.dtype, "output_type": _dt.as_dtype(output_type)}, scope)


def argmax(input, axis=None, name=None, dimension=None, output_type=_dt.int64) -> Tensor:
    """Index of the largest value along `axis` (the first one on ties); int64 by default, as in TF."""
    return _arg("ArgMax", input, axis, name, dimension, output_type)


def argmin(input, axis=None, name=None, dimension=None, output_type=_dt.int64) -> Tensor:
    """Index of the smallest value along `axis` (the first one on ties)."""
    return _arg("ArgMin", input, axis, name, dimension, output_type)


# -- Cumsum --------------------------------------------------------------------------------------------------
def _cumsum_shape(ins, attrs):
    _check_dtype(ins[0], _NUMERIC)
    if ins[1].shape not in (None, ()):
        raise ValueError(f"axis must be a scalar, got shape {fmt(ins[1].shape)}")
    rank = None if ins[0].shape is None else len(ins[0].shape)
    if rank == 0:
        raise ValueError("a running sum or product needs x of rank >= 1, got a scalar (as TF's ScanOp)")
    if rank is not None and ins[1].value is not None and not -rank <= int(ins[1].value) < rank:
        raise ValueError(f"axis {int(ins[1].value)} is out of range for x of rank {rank}")
    return [spec(ins[0].shape, ins[0].dtype)]


register_op("Cumsum", inputs=("x", "axis"), outputs=("out",),
            attrs={"exclusive": "bool", "reverse": "bool", "T": "type", "Tidx": "type"},
            shape_fn=_cumsum_shape, flops=_flops.per_input)
register_rows(along(value_of(1), "accumulates"), "Cumsum")


@register_gradient("Cumsum")
def _cumsum_grad(op, grad):
    """dx = cumsum(dy) in the opposite direction"""
    exclusive, reverse = op.attrs["exclusive"], op.attrs["reverse"]
    return [cumsum(grad, op.inputs[1], exclusive=exclusive, reverse=not reverse), None]


def cumsum(x, axis=0, exclusive=False, reverse=False, name=None) -> Tensor:
    """Running sum along `axis`: `tf.cumsum([a, b, c])` -> [a, a + b, a + b + c]."""
    with name_scope(name, "Cumsum", [x]) as scope:
        axis = _index_tensor(axis, name="axis")
        return apply_op("Cumsum", [convert_to_tensor(x), axis],
                        {"exclusive": bool(exclusive), "reverse": bool(reverse), "Tidx": axis.dtype}, scope)


# -- Prod ----------------------------------------------------------------------------------------------------
register_op("Prod", inputs=("input", "reduction_indices"), outputs=("output",), attrs=_REDUCE_ATTRS,
            shape_fn=_reduce_shape(_NUMERIC), value_inputs=(1,), flops=_flops.per_input)
register_rows(reduces, "Prod")


@register_gradient("Prod")
def _prod_grad(op, grad):
    """dx_i = dy * prod_{j != i} x_j: y / x_i without zeros; with one zero, the product of the others at the
    zero and 0 elsewhere; with two or more, 0"""
    x, axes = op.inputs
    shape_x = _shape_of(x)
    y, g = _kept_dims(op, op.outputs[0]), _kept_dims(op, grad)
    zero = equal(x, array_ops.zeros_like(x))
    zeros_in = reduce_sum(cast(zero, x.dtype), axes, keepdims=True)
    nonzero_prod = reduce_prod(select(zero, array_ops.ones_like(x), x), axes, keepdims=True)
    b = [array_ops.broadcast_to(t, shape_x) for t in (y, g, zeros_in, nonzero_prod)]
    y_b, g_b, zeros_b, nz_b = b
    safe_x = select(zero, array_ops.ones_like(x), x)
    zeros_like_x = array_ops.zeros_like(x)
    one_zero = select(zero, nz_b, zeros_like_x)
    others = select(equal(zeros_b, zeros_like_x), realdiv(y_b, safe_x),
                    select(equal(zeros_b, array_ops.ones_like(x)), one_zero, zeros_like_x))
    return [multiply(g_b, others), None]


def reduce_prod(input_tensor, axis=None, keepdims=None, name=None, reduction_indices=None,
                keep_dims=None) -> Tensor:
    """Product over `axis` (all axes if None)."""
    return _reduce("Prod", input_tensor, axis, keepdims, name, reduction_indices, keep_dims)


# -- UnsortedSegmentSum --------------------------------------------------------------------------------------
def _unsorted_segment_sum_shape(ins, attrs):
    data, ids, num = ins
    _check_dtype(data, _NUMERIC, "data")
    _check_dtype(ids, (_dt.int32, _dt.int64), "segment_ids")
    _check_dtype(num, (_dt.int32, _dt.int64), "num_segments")
    if data.shape is None or ids.shape is None:
        return [spec(None, data.dtype)]
    k = len(ids.shape)
    if len(data.shape) < k or any(a is not None and b is not None and a != b
                                  for a, b in zip(data.shape, ids.shape)):
        raise ValueError(f"data shape {fmt(data.shape)} must start with segment_ids' shape {fmt(ids.shape)}")
    n = None if num.value is None else int(num.value)
    if n is not None and n < 0:
        raise ValueError(f"num_segments must be >= 0, got {n}")
    return [spec((n,) + tuple(data.shape[k:]), data.dtype)]


register_op("UnsortedSegmentSum", inputs=("data", "segment_ids", "num_segments"), outputs=("output",),
            attrs={"T": "type", "Tindices": "type", "Tnumsegments": "type"},
            shape_fn=_unsorted_segment_sum_shape, value_inputs=(2,), flops=_flops.per_input,
            tags=("row_sums",))  # segments of the rows' sums (an embedding's dense gradient) add up


def _segment_sum_rows(op, rows) -> str | None:
    """Row by row where the segments are along another axis than the batch's (a dense gradient of a gather of time
    steps, [time, batch, ...]): data's rows land on the same rows of the output."""
    data, ids, out = op.inputs[0], op.inputs[1], op.outputs[0]
    if out not in rows:
        return None
    k = None if rows.shape(ids) is None else len(rows.shape(ids))
    if rows[out] > 0 and ids not in rows and k is not None and data in rows and rows[data] - k + 1 == rows[out]:
        return None
    return ("adds rows into the batch's rows by index (the dense gradient of a gather of them): each micro-batch's "
            "indices would name the whole batch's")


register_rows(_segment_sum_rows, "UnsortedSegmentSum")


@register_gradient("UnsortedSegmentSum")
def _unsorted_segment_sum_grad(op, grad):
    """d data[i] = dy[segment_ids[i]] (0 where the id is negative: that row was dropped)"""
    data, ids = op.inputs[0], op.inputs[1]
    flat = reshape(ids, [-1])
    rows = array_ops.gather(grad, maximum(flat, array_ops.zeros_like(flat)))
    kept = select(greater_equal(flat, array_ops.zeros_like(flat)), rows, array_ops.zeros_like(rows))
    return [reshape(kept, _shape_of(data)), None, None]


def unsorted_segment_sum(data, segment_ids, num_segments, name=None) -> Tensor:
    """out[s] = sum of data[i] over i with segment_ids[i] == s (rows with negative ids are dropped)."""
    data = convert_to_tensor(data)
    ids = _index_tensor(segment_ids)
    num = _index_tensor(num_segments)
    return apply_op("UnsortedSegmentSum", [data, ids, num], {"Tindices": ids.dtype, "Tnumsegments": num.dtype},
                    name)


# -- TopKV2 --------------------------------------------------------------------------------------------------
def _top_k_shape(ins, attrs):
    x, k = ins
    _check_dtype(x, _NUMERIC, "input")
    _check_dtype(k, (_dt.int32,), "k")
    kk = None if k.value is None else int(k.value)
    if kk is not None and kk < 0:
        raise ValueError(f"k must be >= 0, got {kk}")
    if x.shape is None:
        return [spec(None, x.dtype), spec(None, _dt.int32)]
    if len(x.shape) < 1:
        raise ValueError("top_k's input must have rank >= 1, got a scalar")
    if kk is not None and x.shape[-1] is not None and kk > x.shape[-1]:
        raise ValueError(f"k={kk} is larger than the last dimension of shape {fmt(x.shape)}")
    out = x.shape[:-1] + (kk,)
    return [spec(out, x.dtype), spec(out, _dt.int32)]


register_op("TopKV2", inputs=("input", "k"), outputs=("values", "indices"), attrs={"sorted": "bool", "T": "type"},
            shape_fn=_top_k_shape, value_inputs=(1,), flops=_flops.per_input)
register_rows(lambda op, rows: None if op.inputs[0] not in rows or
              rows[op.inputs[0]] != len(rows.shape(op.inputs[0]) or (0,)) - 1 else
              "sorts the batch's rows (top_k or tf.sort of a vector over the batch): each micro-batch would sort its "
              "own", "TopKV2")


@register_gradient("TopKV2")
def _top_k_grad(op, grad, _indices_grad):
    """dx = dy scattered to the positions the values came from (rows flattened, one segment sum)"""
    x, idx = op.inputs[0], op.outputs[1]
    if grad is None:
        return [None, None]
    n = array_ops.shape(x)[-1]
    k = array_ops.shape(idx)[-1]
    n_rows = floordiv(array_ops.size(idx), maximum(k, 1))
    offsets = multiply(range(0, n_rows), n)  # the start of each row in flat x
    flat_idx = reshape(add(reshape(idx, [-1, k]), array_ops.expand_dims(offsets, 1)), [-1])
    dx = unsorted_segment_sum(reshape(grad, [-1]), flat_idx, array_ops.size(x))
    return [reshape(dx, _shape_of(x)), None]


# TF's result of tf.nn.top_k: a tuple whose fields are named (`tf.nn.top_k(x, 2).indices`).
TopKV2 = collections.namedtuple("TopKV2", ["values", "indices"])


def top_k(input, k=1, sorted=True, name=None) -> tuple:
    """`values, indices = tf.nn.top_k(x, 2)`: the k largest entries of the last axis (ties: lower index
    first), and their indices (int32)."""
    with name_scope(name, "TopKV2", [input]) as scope:
        k = _index_tensor(k, name="k")
        return TopKV2(*apply_op("TopKV2", [convert_to_tensor(input), k], {"sorted": bool(sorted)}, scope))


# -- DivNoNan ------------------------------------------------------------------------------------------------
register_op("DivNoNan", inputs=("x", "y"), outputs=("z",), attrs={"T": "type"}, shape_fn=_binary_shape(_FLOATS),
            flops=_flops.per_output)
register_rows(aligned, "DivNoNan")


@register_gradient("DivNoNan")
def _div_no_nan_grad(op, grad):
    """dx = div_no_nan(dz, y), dy = dz * div_no_nan(-x / y, y) (0 where y == 0)"""
    x, y = op.inputs
    return [_reduce_to(div_no_nan(grad, y), _shape_of(x)),
            _reduce_to(multiply(grad, div_no_nan(div_no_nan(negative(x), y), y)), _shape_of(y))]


def div_no_nan(x, y, name=None) -> Tensor:
    """x / y, and 0 where y is 0 (TF's clip_by_global_norm and metrics emit it)."""
    return _binary("DivNoNan", x, y, name, "div_no_nan")


# -- SelectV2 (tf.where_v2: the three operands broadcast) ----------------------------------------------------
def _select_v2_shape(ins, attrs):
    cond, t, e = ins
    _check_dtype(cond, (_dt.bool_,), "condition")
    check_same_dtype([t, e], "x and y")
    return [spec(broadcast(cond.shape, broadcast(t.shape, e.shape)), t.dtype)]


register_op("SelectV2", inputs=("condition", "t", "e"), outputs=("output",), attrs={"T": "type"},
            shape_fn=_select_v2_shape, flops=_flops.per_output)
register_rows(aligned, "SelectV2")


@register_gradient("SelectV2")
def _select_v2_grad(op, grad):
    """dt = dz where condition, de = dz elsewhere (each summed over its broadcast dims)"""
    cond, t, e = op.inputs
    zeros = array_ops.zeros_like(grad)
    return [None, _reduce_to(where_v2(cond, grad, zeros), _shape_of(t)),
            _reduce_to(where_v2(cond, zeros, grad), _shape_of(e))]


def where_v2(condition, x=None, y=None, name=None) -> Tensor:
    """`tf.where_v2(c, x, y)`: x where c, else y, with c, x and y broadcast together (TF 1.15's where_v2)."""
    if x is None and y is None:
        return where(condition, name=name)
    x, y = _operands(x, y)
    return apply_op("SelectV2", [convert_to_tensor(condition), x, y], {"T": x.dtype}, name)


# -- RsqrtGrad / SqrtGrad / ReciprocalGrad (TF's fused gradients of Rsqrt, Sqrt, Reciprocal) -------------------
def _unary_grad_shape(ins, attrs):
    check_same_dtype(ins, "y and dy")
    _check_dtype(ins[0], _FLOATS, "y")
    return [spec(broadcast(ins[0].shape, ins[1].shape), ins[0].dtype)]


for _t in ("RsqrtGrad", "SqrtGrad", "ReciprocalGrad"):
    register_op(_t, inputs=("y", "dy"), outputs=("z",), attrs={"T": "type"}, shape_fn=_unary_grad_shape,
                flops=_flops.per_output)


register_rows(aligned, "RsqrtGrad", "SqrtGrad", "ReciprocalGrad")
@register_gradient("RsqrtGrad")
def _rsqrt_grad_grad(op, grad):
    """for z = -dy y^3 / 2: d y = -3/2 g dy y^2, d dy = -g y^3 / 2"""
    y, dy = op.inputs
    return [multiply(grad, multiply(multiply(dy, square(y)), -1.5)), multiply(grad, multiply(pow(y, 3), -0.5))]


@register_gradient("SqrtGrad")
def _sqrt_grad_grad(op, grad):
    """for z = dy / (2 y): d y = -g z / y, d dy = g / (2 y)"""
    y, z = op.inputs[0], op.outputs[0]
    return [negative(realdiv(multiply(grad, z), y)), realdiv(grad, multiply(y, 2))]


@register_gradient("ReciprocalGrad")
def _reciprocal_grad_grad(op, grad):
    """for z = -dy y^2: d y = -2 g dy y, d dy = -g y^2"""
    y, dy = op.inputs
    return [multiply(grad, multiply(multiply(dy, y), -2)), negative(multiply(grad, square(y)))]


def _fused_grad(op_type: str, y, dy, name=None) -> Tensor:
    """RsqrtGrad/SqrtGrad/ReciprocalGrad(y, dy): the gradient of the op that produced y, given dy."""
    return apply_op(op_type, [convert_to_tensor(y), convert_to_tensor(dy)], name=name)


# -- Tensor operators ------------------------------------------------------------------------------------------
# `a + b`, `2 * t`, `x < y`, `-t` build these ops: installed on Tensor here, as TensorFlow's math_ops does, so the
# graph core needs no op module. The reflected form (`__radd__`) gets the tensor second. As in TF, an arithmetic
# operator's node is named after the operator ('add', 'sub', 'truediv', 'matmul', ...; its Python operand the
# Const 'add/y', or 'sub/x' for `1.0 - t`); comparisons, `-t`, `abs(t)` and `~t` keep their op's name ('Less').
def _binary_operator(fn, scope: str, reflected: bool = False):
    def operator(self, other):
        x, y = (other, self) if reflected else (self, other)
        with name_scope(None, scope, [self]) as name:
            x, y = _operands(x, y)
            return fn(x, y, name=name)
    return operator


for _name, _fn in {"add": add_v2, "sub": subtract, "mul": multiply, "truediv": divide, "matmul": matmul, "pow": pow,
                   "floordiv": floordiv, "mod": floormod, "and": logical_and, "or": logical_or,
                   "xor": logical_xor}.items():
    Tensor._override_operator(f"__{_name}__", _binary_operator(_fn, _name))
    Tensor._override_operator(f"__r{_name}__", _binary_operator(_fn, _name, reflected=True))
for _name, _fn in {"lt": less, "le": less_equal, "gt": greater, "ge": greater_equal}.items():
    Tensor._override_operator(f"__{_name}__", lambda self, other, fn=_fn: fn(self, other))
for _name, _fn in {"neg": negative, "abs": abs, "invert": logical_not}.items():
    Tensor._override_operator(f"__{_name}__", lambda self, fn=_fn: fn(self))
