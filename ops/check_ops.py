"""Checks and prints users put in graphs: tf.Print and tf.print, tf.check_numerics and
tf.verify_tensor_all_finite, tf.assert_equal & co. (TensorFlow's logging_ops, numerics and check_ops). A check
that fails fails the run with InvalidArgumentError; an assert whose values are known when the graph is built
fails there, as in TF1."""
from __future__ import annotations

import sys

import numpy as np

from tfplus import errors
from tfplus import flops as _flops
from tfplus.framework import Operation, Tensor, constant_value, convert_to_tensor, get_default_graph, name_scope
from tfplus.ops import math_ops
from tfplus.ops.control_flow_ops import Assert
from tfplus.ops.row_rules import rowwise
from tfplus.ops.script_ops import call_py_func
from tfplus.registry import register_gradient, register_op, register_rows
from tfplus.tensor_shape import spec

__all__ = ["Print", "print_", "check_numerics", "verify_tensor_all_finite", "assert_equal", "assert_none_equal",
           "assert_less", "assert_less_equal", "assert_greater", "assert_greater_equal", "assert_positive",
           "assert_negative", "assert_non_negative", "assert_non_positive"]


# -- Print: its input, passed through, with `data` printed to stderr on the way ------------------------------
def _pass_through_shape(ins, attrs):
    return [spec(ins[0].shape, ins[0].dtype)]


register_op("Print", inputs=("input", "data*"), outputs=("output",),
            attrs={"T": "type", "U": "list(type)", "message": "string", "first_n": "int", "summarize": "int"},
            shape_fn=_pass_through_shape, stateful=True, allocates_outputs=True, flops=_flops.zero)
register_rows(rowwise, "Print")


@register_gradient("Print")
def _print_grad(op, grad):
    """dinput = dy; the printed data get none"""
    return [grad] + [None] * (len(op.inputs) - 1)


def Print(input_, data, message=None, first_n=None, summarize=None, name=None) -> Tensor:  # noqa: N802
    """`x = tf.Print(x, [x, y], "x, y = ")`: x unchanged; each run that computes it prints the message and
    `data` (at most `summarize` entries each, the first `first_n` runs only) to stderr."""
    x = convert_to_tensor(input_)
    data = [convert_to_tensor(d) for d in data]
    return get_default_graph().create_op("Print", [x] + data, {
        "T": x.dtype, "U": [d.dtype for d in data], "message": message or "",
        "first_n": -1 if first_n is None else int(first_n), "summarize": 3 if summarize is None else int(summarize)},
        name or "Print").outputs[0]


def print_(*inputs, output_stream=sys.stderr, summarize=3, sep=" ", end="\n", name=None) -> Operation:
    """`tf.print("loss:", loss)`: an op that prints its inputs (strings as they are, tensors' values) when it
    runs; in graph mode make it run with sess.run or tf.control_dependencies, as in TF1."""
    tensors = [convert_to_tensor(v) for v in inputs if isinstance(v, Tensor) or hasattr(v, "_as_tensor")]
    is_tensor = [isinstance(v, Tensor) or hasattr(v, "_as_tensor") for v in inputs]

    def show(*values):
        it = iter(values)
        words = [_format(next(it), summarize) if t else str(v) for v, t in zip(inputs, is_tensor)]
        print(sep.join(words), end=end, file=output_stream)
        return []
    return call_py_func(show, tensors, [], name=name or "PrintV2")


def _format(value, summarize: int) -> str:
    a = np.asarray(value)
    if summarize is not None and summarize >= 0:
        with np.printoptions(threshold=max(summarize * 2, 1), edgeitems=max(summarize, 1)):
            return np.array2string(a, separator=" ")
    return np.array2string(a, separator=" ", threshold=sys.maxsize)


# -- CheckNumerics -------------------------------------------------------------------------------------------
register_op("CheckNumerics", inputs=("tensor",), outputs=("output",), attrs={"T": "type", "message": "string"},
            shape_fn=_pass_through_shape, stateful=True, allocates_outputs=True, flops=_flops.zero)
register_rows(rowwise, "CheckNumerics")


@register_gradient("CheckNumerics")
def _check_numerics_grad(op, grad):
    """dx = dy, itself checked (as TF's gradient does)"""
    return [check_numerics(grad, f"Not a number (NaN) or infinity (Inf) values detected in gradient. "
                                 f"{op.attrs['message']}")]


def check_numerics(tensor, message, name=None) -> Tensor:
    """`tensor` unchanged; the run fails (InvalidArgumentError with `message`) where it holds a NaN or an Inf."""
    x = convert_to_tensor(tensor)
    if not x.dtype.is_floating:
        raise TypeError(f"tf.check_numerics: tensor {x.name} is {x.dtype.name}; only floating-point tensors can "
                        "hold NaN or Inf")
    return get_default_graph().create_op("CheckNumerics", [x], {"T": x.dtype, "message": str(message)},
                                         name or "CheckNumerics").outputs[0]


def verify_tensor_all_finite(t, msg, name=None) -> Tensor:
    """Same as check_numerics(t, msg)."""
    return check_numerics(t, msg, name=name or "VerifyFinite")


# -- asserts -------------------------------------------------------------------------------------------------
def _binary_assert(what: str, test, x, y, data, summarize, message, name) -> Operation:
    with name_scope(name, what, [x, y]):
        x, y = convert_to_tensor(x, name="x"), convert_to_tensor(y, name="y", dtype=x.dtype)
        vx, vy = constant_value(x), constant_value(y)
        if vx is not None and vy is not None and not np.all(test(np.asarray(vx), np.asarray(vy))):
            # TF1 fails at graph building where both values are known
            raise errors.InvalidArgumentError(None, None, f"{message + ' ' if message else ''}Condition "
                                              f"{_CONDITIONS[what]} did not hold element-wise: x ({x.name}) = "
                                              f"{vx}, y ({y.name}) = {vy}")
        condition = math_ops.reduce_all(_OPS[test](x, y))
        if data is None:  # TF1's words, which users' tests match (assertRaisesOpError("x > 0"))
            data = ([message] if message else []) + [f"Condition {_CONDITIONS[what]} did not hold element-wise:",
                                                     f"x ({x.name}) = ", x]
            data += [f"y ({y.name}) = ", y] if "y" in _CONDITIONS[what] else []
        return Assert(condition, data, summarize=summarize)


_CONDITIONS = {"assert_equal": "x == y", "assert_none_equal": "x != y", "assert_less": "x < y",
               "assert_less_equal": "x <= y", "assert_greater": "x > y", "assert_greater_equal": "x >= y",
               "assert_positive": "x > 0", "assert_negative": "x < 0", "assert_non_negative": "x >= 0",
               "assert_non_positive": "x <= 0"}


_OPS = {np.equal: math_ops.equal, np.not_equal: math_ops.not_equal, np.less: math_ops.less,
        np.less_equal: math_ops.less_equal, np.greater: math_ops.greater, np.greater_equal: math_ops.greater_equal}


def assert_equal(x, y, data=None, summarize=None, message=None, name=None) -> Operation:
    """An Assert op that fails the run unless x == y everywhere; use it with tf.control_dependencies."""
    return _binary_assert("assert_equal", np.equal, x, y, data, summarize, message, name)


def assert_none_equal(x, y, data=None, summarize=None, message=None, name=None) -> Operation:
    return _binary_assert("assert_none_equal", np.not_equal, x, y, data, summarize, message, name)


def assert_less(x, y, data=None, summarize=None, message=None, name=None) -> Operation:
    return _binary_assert("assert_less", np.less, x, y, data, summarize, message, name)


def assert_less_equal(x, y, data=None, summarize=None, message=None, name=None) -> Operation:
    return _binary_assert("assert_less_equal", np.less_equal, x, y, data, summarize, message, name)


def assert_greater(x, y, data=None, summarize=None, message=None, name=None) -> Operation:
    return _binary_assert("assert_greater", np.greater, x, y, data, summarize, message, name)


def assert_greater_equal(x, y, data=None, summarize=None, message=None, name=None) -> Operation:
    return _binary_assert("assert_greater_equal", np.greater_equal, x, y, data, summarize, message, name)


def _sign_assert(what: str, test, x, data, summarize, message, name) -> Operation:
    x = convert_to_tensor(x)
    return _binary_assert(what, test, x, np.zeros((), x.dtype.np), data, summarize, message, name)


def assert_positive(x, data=None, summarize=None, message=None, name=None) -> Operation:
    return _sign_assert("assert_positive", np.greater, x, data, summarize, message, name)


def assert_negative(x, data=None, summarize=None, message=None, name=None) -> Operation:
    return _sign_assert("assert_negative", np.less, x, data, summarize, message, name)


def assert_non_negative(x, data=None, summarize=None, message=None, name=None) -> Operation:
    return _sign_assert("assert_non_negative", np.greater_equal, x, data, summarize, message, name)


def assert_non_positive(x, data=None, summarize=None, message=None, name=None) -> Operation:
    return _sign_assert("assert_non_positive", np.less_equal, x, data, summarize, message, name)
