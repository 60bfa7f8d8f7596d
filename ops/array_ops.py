"""Array ops: constants, placeholders, identity and shape manipulation. Each op: registration, gradient, wrapper."""
from __future__ import annotations

import numpy as np

from tfplus import dtypes as _dt
from tfplus.framework import apply_op, get_default_graph
from tfplus.registry import not_differentiable, register_gradient, register_op
from tfplus.shapes import same_as_input, spec

__all__ = ["constant", "placeholder", "placeholder_with_default", "identity", "fill", "zeros", "ones",
           "zeros_like", "ones_like"]

# -- Const ------------------------------------------------------------------------------------------------
register_op("Const", outputs=("output",), attrs={"value": "tensor", "dtype": "type"},
            shape_fn=lambda ins, attrs: [spec(attrs["value"].shape, attrs["dtype"], attrs["value"])])
not_differentiable("Const")


def constant(value, dtype=None, shape=None, name="Const"):
    """`tf.constant([[1., 2.]])` -> a Const node holding the value (broadcast to `shape` if given)."""
    dtype = _dt.as_dtype(dtype) if dtype is not None else None
    arr = np.asarray(value, dtype=dtype.np if dtype is not None else None)
    if dtype is None:
        from tfplus.framework import _infer_dtype
        dtype = _infer_dtype(value)
        arr = arr.astype(dtype.np, copy=False)
    if shape is not None:
        shape = tuple(int(d) for d in shape)
        if arr.size == 1:
            arr = np.broadcast_to(arr.reshape(()), shape)
        elif arr.size == int(np.prod(shape)):
            arr = arr.reshape(shape)
        else:
            raise ValueError(f"tf.constant: {arr.size} values cannot fill shape {shape}")
    arr = np.array(arr, order="C")  # a private copy (np.ascontiguousarray would make 0-d arrays 1-d)
    arr.flags.writeable = False  # the graph owns it; kernels copy out of it
    op = get_default_graph().create_op("Const", [], {"value": arr, "dtype": dtype}, name)
    return op.outputs[0]


# -- Placeholder -------------------------------------------------------------------------------------------
register_op("Placeholder", outputs=("output",), attrs={"dtype": "type", "shape": "shape"},
            shape_fn=lambda ins, attrs: [spec(attrs["shape"], attrs["dtype"])])
not_differentiable("Placeholder")


def placeholder(dtype, shape=None, name=None):
    """`x = tf.placeholder(tf.float32, [None, 784])`: a value fed at `Session.run` time."""
    shape = None if shape is None else tuple(None if d is None or d == -1 else int(d) for d in shape)
    op = get_default_graph().create_op("Placeholder", [], {"dtype": _dt.as_dtype(dtype), "shape": shape},
                                       name or "Placeholder")
    return op.outputs[0]


register_op("PlaceholderWithDefault", inputs=("input",), outputs=("output",),
            attrs={"dtype": "type", "shape": "shape"}, aliases={0: 0},
            shape_fn=lambda ins, attrs: [spec(attrs["shape"], ins[0].dtype)])
not_differentiable("PlaceholderWithDefault")


def placeholder_with_default(input, shape, name=None):
    """A placeholder that takes `input`'s value when not fed."""
    from tfplus.framework import convert_to_tensor
    input = convert_to_tensor(input)
    return apply_op("PlaceholderWithDefault", [input],
                    {"shape": None if shape is None else tuple(shape), "dtype": input.dtype}, name)


# -- Identity ------------------------------------------------------------------------------------------------
register_op("Identity", inputs=("input",), outputs=("output",), attrs={"T": "type"},
            shape_fn=same_as_input(0), aliases={0: 0})


@register_gradient("Identity")
def _identity_grad(op, grad):
    """dx = dy"""
    return [grad]


def identity(input, name=None):
    """Returns a tensor with the same value (shares the buffer; no copy)."""
    return apply_op("Identity", [input], name=name)


# -- Fill / zeros / ones -------------------------------------------------------------------------------------
def _fill_shape(ins, attrs):
    dims, value = ins
    if dims.value is None:
        return [spec(None, value.dtype)]
    return [spec(tuple(int(d) for d in dims.value), value.dtype)]


register_op("Fill", inputs=("dims", "value"), outputs=("output",), attrs={"T": "type", "index_type": "type"},
            shape_fn=_fill_shape, value_inputs=(0,))


@register_gradient("Fill")
def _fill_grad(op, grad):
    """d value = sum(dy)"""
    from tfplus.ops.math_ops import reduce_sum
    return [None, reduce_sum(grad)]


def fill(dims, value, name=None):
    """A tensor of shape `dims` filled with scalar `value`."""
    from tfplus.framework import convert_to_tensor
    dims = convert_to_tensor(dims, dtype=_dt.int32) if not hasattr(dims, "op") else dims
    value = convert_to_tensor(value)
    return apply_op("Fill", [dims, value], {"T": value.dtype, "index_type": dims.dtype}, name)


def zeros(shape, dtype=_dt.float32, name=None):
    """`tf.zeros([2, 3])`"""
    dtype = _dt.as_dtype(dtype)
    return fill(shape, np.zeros((), dtype.np), name=name or "zeros")


def ones(shape, dtype=_dt.float32, name=None):
    """`tf.ones([2, 3])`"""
    dtype = _dt.as_dtype(dtype)
    return fill(shape, np.ones((), dtype.np), name=name or "ones")


# -- ZerosLike / OnesLike ---------------------------------------------------------------------------------
register_op("ZerosLike", inputs=("x",), outputs=("y",), attrs={"T": "type"}, shape_fn=same_as_input(0))
register_op("OnesLike", inputs=("x",), outputs=("y",), attrs={"T": "type"}, shape_fn=same_as_input(0))
not_differentiable("ZerosLike", "OnesLike")


def zeros_like(tensor, dtype=None, name=None):
    """Zeros with the shape (and dtype) of `tensor`."""
    out = apply_op("ZerosLike", [tensor], name=name)
    return out if dtype is None else _cast(out, dtype)


def ones_like(tensor, dtype=None, name=None):
    """Ones with the shape (and dtype) of `tensor`."""
    out = apply_op("OnesLike", [tensor], name=name)
    return out if dtype is None else _cast(out, dtype)


def _cast(x, dtype):
    from tfplus.ops.math_ops import cast
    return cast(x, dtype)
