"""Neural-network ops (conv, pooling, activations, losses). Each op: registration, gradient, wrapper.

Gradients follow TensorFlow's nn_grad.py: fused backward ops (Conv2DBackpropInput, MaxPoolGrad, ReluGrad, ...)
are real ops with their own shape functions, kernels and gradients.

    >>> import tfplus as tf
    >>> x = tf.placeholder(tf.float32, [None, 3, 32, 32])
    >>> w = tf.Variable(tf.truncated_normal([3, 3, 3, 32], stddev=0.1))
    >>> y = tf.nn.relu(tf.nn.conv2d(x, w, 1, "SAME", data_format="NCHW"))
"""
from __future__ import annotations

import numbers

import numpy as np

from tfplus import dtypes as _dt
from tfplus import flops as _flops
from tfplus.framework import Tensor, apply_op, constant_value, convert_to_tensor, name_scope
from tfplus.ops.row_rules import aligned, reduces, rowwise
from tfplus.registry import not_differentiable, register_gradient, register_op, register_rows
from tfplus.tensor_shape import check_rank, check_same_dtype, conv_output, merge_dim, spec

__all__ = ["conv2d", "conv2d_backprop_input", "conv2d_backprop_filter", "conv2d_transpose", "bias_add",
           "relu", "relu6", "sigmoid", "tanh", "softmax", "log_softmax", "max_pool", "avg_pool",
           "sparse_softmax_cross_entropy_with_logits", "softmax_cross_entropy_with_logits",
           "softmax_cross_entropy_with_logits_v2", "l2_loss", "dropout", "zero_fraction", "moments",
           "in_top_k", "atrous_conv2d", "convolution", "max_pool2d", "avg_pool2d"]

_FLOATS = (_dt.float32, _dt.float64)
_HALF_FLOATS = (_dt.float16,) + _FLOATS  # the activations and softmax take float16 too


# -- shared shape helpers ------------------------------------------------------------------------------------
def _dims(shape: tuple | None) -> str:
    """A shape as TF prints it in conv errors: (3,3,16,32)."""
    return "<unknown>" if shape is None else "(" + ",".join("?" if d is None else str(d) for d in shape) + ")"


def _check_float(s, what: str) -> None:
    if s.dtype not in _FLOATS:
        raise TypeError(f"{what} must be float32 or float64, got {s.dtype.name}")


def _format(attrs) -> str:
    fmt = attrs.get("data_format", "NHWC")
    if fmt not in ("NHWC", "NCHW"):
        raise ValueError(f"data_format must be 'NHWC' or 'NCHW', got {fmt!r}")
    return fmt


def _nhwc(shape, fmt: str) -> tuple:
    """(N, H, W, C) of a rank-4 shape in `fmt` (all None for unknown rank)."""
    if shape is None:
        return (None,) * 4
    return tuple(shape) if fmt == "NHWC" else (shape[0], shape[2], shape[3], shape[1])


def _from_nhwc(n, h, w, c, fmt: str) -> tuple:
    return (n, h, w, c) if fmt == "NHWC" else (n, c, h, w)


def _window_attr(values, fmt: str, what: str) -> tuple[int, int]:
    """The (H, W) entries of a 4-list attr (strides, ksize, dilations); batch and channel ones must be 1."""
    values = list(values)
    if len(values) != 4:
        raise ValueError(f"{what} must have 4 entries (one per dimension of {fmt}), got {values}")
    n, h, w, c = _nhwc(values, fmt)
    if n != 1 or c != 1:
        raise ValueError(f"{what} {values}: the batch and channel entries must be 1 (data_format {fmt})")
    if h < 1 or w < 1:
        raise ValueError(f"{what} {values} must be positive")
    return h, w


def _window_shape(x_shape, kh, kw, attrs) -> tuple:
    """(N, H, W, C) out of a sliding-window op (conv or pool) on input `x_shape`, C left as the input's."""
    fmt = _format(attrs)
    sh, sw = _window_attr(attrs["strides"], fmt, "strides")
    n, h, w, c = _nhwc(x_shape, fmt)
    return n, conv_output(h, kh, sh, attrs["padding"])[0], conv_output(w, kw, sw, attrs["padding"])[0], c


def _check_dilations(attrs) -> None:
    fmt = _format(attrs)
    if tuple(_window_attr(attrs.get("dilations", (1, 1, 1, 1)), fmt, "dilations")) != (1, 1):
        raise ValueError(f"dilations {list(attrs['dilations'])} are not supported; only 1 (no dilation) is")


def _sizes_value(s, what: str):
    """The value of a sizes input (input_sizes, filter_sizes, orig_input_shape): a tuple of 4 ints or None."""
    check_rank(s, 1, what)
    if s.dtype not in (_dt.int32, _dt.int64):
        raise TypeError(f"{what} must be int32 or int64, got {s.dtype.name}")
    if s.value is None:
        return None
    v = tuple(int(d) for d in np.asarray(s.value).reshape(-1))
    if len(v) != 4 or min(v) < 0:
        raise ValueError(f"{what} must be 4 non-negative sizes, got {list(v)}")
    return v


def _check_conv(x_nhwc, f_shape, what_x: str = "input") -> None:
    f_in = None if f_shape is None else f_shape[2]
    c = x_nhwc[3]
    if c is not None and f_in is not None and c != f_in:
        raise ValueError(f"{what_x} has {c} channels but filter expects {f_in} "
                         f"(filter shape {_dims(f_shape)})")


def _check_out_backprop(want: tuple, got: tuple, fmt: str) -> None:
    """out_backprop must have the shape Conv2D gives for this input and filter."""
    for a, b, name in zip(want, got, "NHWC"):
        if a is not None and b is not None and a != b:
            raise ValueError(f"out_backprop has shape {_dims(_from_nhwc(*got, fmt))} but Conv2D of this "
                             f"input and filter gives {_dims(_from_nhwc(*want, fmt))} ({name} differs)")


def _conv_attrs_from(strides, padding, data_format, dilations) -> dict:
    """The attrs of a conv op from a wrapper's arguments."""
    return {"strides": _list4(strides, data_format, "strides"), "padding": padding,
            "data_format": data_format, "dilations": _list4(dilations, data_format, "dilations")}


def _shape_tensor(t: Tensor) -> Tensor:
    """The shape of `t` as an int32 tensor: a constant when the static shape is known."""
    if t.shape.is_fully_defined():
        from tfplus.ops.array_ops import constant
        return constant(np.array(t.shape.as_list(), np.int32), name="shape")
    from tfplus.ops.array_ops import shape
    return shape(t)


def _list4(value, fmt: str, what: str) -> list[int]:
    """strides/ksize as TF's 4-list: an int, an (h, w) pair, or the 4-list itself."""
    if isinstance(value, numbers.Integral):
        value = [int(value)] * 2
    value = [int(v) for v in value]
    if len(value) == 1:
        value = value * 2
    if len(value) == 2:
        return list(_from_nhwc(1, value[0], value[1], 1, fmt))
    if len(value) == 4:
        return value
    raise ValueError(f"{what} must be an int, 2 ints or 4 ints, got {value}")


def _conv_attrs(op) -> dict:
    return {k: op.attrs[k] for k in ("strides", "padding", "data_format", "dilations")}


# -- Conv2D --------------------------------------------------------------------------------------------------
def _conv2d_shape(ins, attrs):
    x, f = ins
    check_same_dtype(ins, "input and filter")
    _check_float(x, "input")
    check_rank(x, 4, "input")
    check_rank(f, 4, "filter (HWIO)")
    _check_dilations(attrs)
    fmt = _format(attrs)
    kh, kw, _, k = f.shape or (None,) * 4
    _check_conv(_nhwc(x.shape, fmt), f.shape)
    n, h, w, _ = _window_shape(x.shape, kh, kw, attrs)
    return [spec(_from_nhwc(n, h, w, k, fmt), x.dtype)]


_CONV_ATTRS = {"T": "type", "strides": "list(int)", "padding": "string", "data_format": "string",
               "dilations": "list(int)"}
register_op("Conv2D", inputs=("input", "filter"), outputs=("output",), attrs=_CONV_ATTRS,
            shape_fn=_conv2d_shape, flops=_flops.conv2d, tags=("gemm",))
register_rows(rowwise, "Conv2D")


@register_gradient("Conv2D")
def _conv2d_grad(op, grad):
    """dx = conv2d_backprop_input(shape(x), f, dy), df = conv2d_backprop_filter(x, shape(f), dy)"""
    x, f = op.inputs
    a = _conv_attrs(op)
    return [_conv_backprop_input(_shape_tensor(x), f, grad, a),
            _conv_backprop_filter(x, _shape_tensor(f), grad, a)]


def _dilated_filter(filter, dh: int, dw: int, what: str) -> Tensor:
    """`filter` [kh, kw, ...] with dh - 1 zero rows between its rows and dw - 1 zero columns between its columns:
    a convolution with it is the dilated (atrous) convolution with `filter`, the same output shape and padding
    included. Built from GatherV2s of the filter and one zero row (column), so the gradient is theirs and every
    device runs it (the conv kernels know no dilation)."""
    from tfplus.ops.array_ops import concat, gather, zeros
    f = convert_to_tensor(filter)
    shape = f.shape.as_list() if f.shape.ndims is not None else None
    if shape is None or len(shape) != 4 or None in shape:
        raise ValueError(f"{what}: a dilated convolution needs a filter '{f.name}' of known shape [h, w, in, out], "
                         f"got {f.shape}")
    with name_scope(None, "dilated_filter"):
        for axis, d in ((0, dh), (1, dw)):
            if d == 1:
                continue
            k = shape[axis]
            zero = zeros([1 if a == axis else n for a, n in enumerate(shape)], dtype=f.dtype)
            taps = [i // d if i % d == 0 else k for i in range((k - 1) * d + 1)]  # k: the zero row
            f = gather(concat([f, zero], axis), taps, axis=axis)
            shape[axis] = len(taps)
    return f


def _dilations_of(dilations, data_format: str, what: str) -> tuple[int, int]:
    """(dh, dw) of a wrapper's `dilations` (an int, a pair or TF's 4-list)."""
    return _window_attr(_list4(1 if dilations is None else dilations, data_format, "dilations"), data_format,
                        f"{what}'s dilations")


def conv2d(input, filter=None, strides=None, padding=None, use_cudnn_on_gpu=True, data_format="NHWC",
           dilations=(1, 1, 1, 1), name=None, filters=None) -> Tensor:
    """2-D convolution of `input` (NHWC or NCHW) with `filter` [h, w, in, out]; `dilations` > 1 convolve with
    the filter dilated (zeros between its taps).

        y = tf.nn.conv2d(x, w, strides=[1, 1, 1, 1], padding="SAME")   # strides may also be 1 or [1, 1]
    """
    filter = filters if filter is None else filter
    if filter is None or strides is None or padding is None:
        raise TypeError("tf.nn.conv2d needs input, filter, strides and padding")
    dh, dw = _dilations_of(dilations, data_format, "tf.nn.conv2d")
    if (dh, dw) != (1, 1):
        filter, dilations = _dilated_filter(filter, dh, dw, "tf.nn.conv2d"), 1
    attrs = _conv_attrs_from(strides, padding, data_format, dilations)
    return apply_op("Conv2D", [input, filter], attrs, name)


def atrous_conv2d(value, filters, rate, padding, name=None) -> Tensor:
    """TF1's atrous (dilated) convolution of NHWC `value` with `filters` [h, w, in, out], taps `rate` apart:
    tf.nn.conv2d with dilations [1, rate, rate, 1].

        y = tf.nn.atrous_conv2d(x, w, rate=2, padding="SAME")
    """
    if int(rate) < 1:
        raise ValueError(f"tf.nn.atrous_conv2d: rate must be at least 1, got {rate}")
    with name_scope(name, "atrous_conv2d"):
        return conv2d(value, filters, [1, 1, 1, 1], padding, dilations=[1, int(rate), int(rate), 1])


def convolution(input, filter, padding, strides=None, dilation_rate=None, name=None, data_format=None,
                filters=None, dilations=None) -> Tensor:
    """TF1's tf.nn.convolution for 1-D sequences (rank-3 input: tf.nn.conv1d, `strides` and `dilation_rate` of
    length 1, as WaveNet's causal dilated convolutions use it) and 2-D images (rank-4 input: tf.nn.conv2d with
    `strides` and `dilation_rate` given as (h, w) pairs)."""
    x = convert_to_tensor(input)
    if x.shape.ndims == 3:
        rate = dilation_rate if dilations is None else dilations
        return conv1d(x, filter if filters is None else filters, 1 if strides is None else _single(strides, "strides"),
                      padding, data_format=data_format, name=name,
                      dilations=1 if rate is None else _single(rate, "dilation_rate"))
    if x.shape.ndims not in (None, 4):
        raise ValueError(f"tf.nn.convolution: input '{x.name}' has rank {x.shape.ndims}; tfplus convolves "
                         "1-D sequences (rank 3) and 2-D images (rank 4) only")
    fmt = data_format or "NHWC"
    return conv2d(x, filter if filters is None else filters, 1 if strides is None else strides, padding,
                  data_format=fmt, dilations=dilation_rate if dilations is None else dilations, name=name)


def _single(value, what: str) -> int:
    """A 1-D convolution's stride or rate given as an int or a list of one int."""
    values = [value] if isinstance(value, numbers.Integral) else list(value)
    if len(values) != 1:
        raise ValueError(f"tf.nn.convolution of a rank-3 input: {what} must have one entry, got {value}")
    return int(values[0])


# -- Conv2DBackpropInput -------------------------------------------------------------------------------------
def _conv2d_backprop_input_shape(ins, attrs):
    sizes, f, dy = ins
    check_same_dtype([f, dy], "filter and out_backprop")
    _check_float(f, "filter")
    check_rank(f, 4, "filter (HWIO)")
    check_rank(dy, 4, "out_backprop")
    _check_dilations(attrs)
    fmt = _format(attrs)
    value = _sizes_value(sizes, "input_sizes")
    kh, kw, c, k = f.shape or (None,) * 4
    n, _, _, dk = _nhwc(dy.shape, fmt)
    if value is None:
        if sizes.partial is not None and len(sizes.partial) == 4:  # tf.stack([batch, h, w, c]): what it says
            return [spec(tuple(sizes.partial), f.dtype)]
        return [spec(_from_nhwc(n, None, None, c, fmt), f.dtype)]
    x_nhwc = _nhwc(value, fmt)
    _check_conv(x_nhwc, f.shape, "input_sizes")
    _check_out_backprop(_window_shape(value, kh, kw, attrs)[:3] + (k,), _nhwc(dy.shape, fmt), fmt)
    return [spec(value, f.dtype)]


register_op("Conv2DBackpropInput", inputs=("input_sizes", "filter", "out_backprop"), outputs=("output",),
            attrs=_CONV_ATTRS, shape_fn=_conv2d_backprop_input_shape, value_inputs=(0,),
            flops=_flops.conv2d_backprop_input, tags=("gemm",))
register_rows(rowwise, "Conv2DBackpropInput")


@register_gradient("Conv2DBackpropInput")
def _conv2d_backprop_input_grad(op, grad):
    """d filter = conv2d_backprop_filter(g, shape(f), dy), d out_backprop = conv2d(g, f)"""
    _, f, dy = op.inputs
    a = _conv_attrs(op)
    return [None, _conv_backprop_filter(grad, _shape_tensor(f), dy, a), apply_op("Conv2D", [grad, f], a)]


def _conv_backprop_input(sizes, f, dy, attrs, name=None) -> Tensor:
    attrs = dict(attrs, T=convert_to_tensor(f).dtype)
    return apply_op("Conv2DBackpropInput", [sizes, f, dy], attrs, name)


def conv2d_backprop_input(input_sizes, filter, out_backprop, strides, padding, use_cudnn_on_gpu=True,
                          data_format="NHWC", dilations=(1, 1, 1, 1), name=None) -> Tensor:
    """The gradient of conv2d with respect to its input, whose shape is `input_sizes` (4 ints)."""
    sizes = input_sizes if isinstance(input_sizes, Tensor) else convert_to_tensor(
        np.asarray(input_sizes, np.int32))
    attrs = _conv_attrs_from(strides, padding, data_format, dilations)
    return _conv_backprop_input(sizes, filter, out_backprop, attrs, name)


def conv2d_transpose(value, filter, output_shape, strides, padding="SAME", data_format="NHWC",
                     name=None) -> Tensor:
    """The transpose of conv2d (a 'deconvolution'): `filter` is [h, w, out_channels, in_channels]."""
    return conv2d_backprop_input(output_shape, filter, value, strides, padding, data_format=data_format,
                                 name=name or "conv2d_transpose")


# -- Conv2DBackpropFilter ------------------------------------------------------------------------------------
def _conv2d_backprop_filter_shape(ins, attrs):
    x, sizes, dy = ins
    check_same_dtype([x, dy], "input and out_backprop")
    _check_float(x, "input")
    check_rank(x, 4, "input")
    check_rank(dy, 4, "out_backprop")
    _check_dilations(attrs)
    fmt = _format(attrs)
    value = _sizes_value(sizes, "filter_sizes")
    if value is None:
        return [spec((None, None, _nhwc(x.shape, fmt)[3], _nhwc(dy.shape, fmt)[3]), x.dtype)]
    kh, kw, _, k = value
    _check_conv(_nhwc(x.shape, fmt), value)
    _check_out_backprop(_window_shape(x.shape, kh, kw, attrs)[:3] + (k,), _nhwc(dy.shape, fmt), fmt)
    return [spec(value, x.dtype)]


register_op("Conv2DBackpropFilter", inputs=("input", "filter_sizes", "out_backprop"), outputs=("output",),
            attrs=_CONV_ATTRS, shape_fn=_conv2d_backprop_filter_shape, value_inputs=(1,),
            flops=_flops.conv2d_backprop_filter, tags=("gemm", "row_sums"))
register_rows(reduces, "Conv2DBackpropFilter")


@register_gradient("Conv2DBackpropFilter")
def _conv2d_backprop_filter_grad(op, grad):
    """d input = conv2d_backprop_input(shape(x), g, dy), d out_backprop = conv2d(x, g)"""
    x, _, dy = op.inputs
    a = _conv_attrs(op)
    return [_conv_backprop_input(_shape_tensor(x), grad, dy, a), None, apply_op("Conv2D", [x, grad], a)]


def _conv_backprop_filter(x, sizes, dy, attrs, name=None) -> Tensor:
    attrs = dict(attrs, T=convert_to_tensor(x).dtype)
    return apply_op("Conv2DBackpropFilter", [x, sizes, dy], attrs, name)


def conv2d_backprop_filter(input, filter_sizes, out_backprop, strides, padding, use_cudnn_on_gpu=True,
                           data_format="NHWC", dilations=(1, 1, 1, 1), name=None) -> Tensor:
    """The gradient of conv2d with respect to its filter, whose shape is `filter_sizes` (4 ints)."""
    sizes = filter_sizes if isinstance(filter_sizes, Tensor) else convert_to_tensor(
        np.asarray(filter_sizes, np.int32))
    attrs = _conv_attrs_from(strides, padding, data_format, dilations)
    return _conv_backprop_filter(input, sizes, out_backprop, attrs, name)


# -- BiasAdd / BiasAddGrad -----------------------------------------------------------------------------------
def _bias_add_shape(ins, attrs):
    x, b = ins
    check_same_dtype(ins, "value and bias")
    check_rank(b, 1, "bias")
    fmt = _format(attrs)
    if x.shape is not None and len(x.shape) < 2:
        raise ValueError(f"value must have rank >= 2, got shape {_dims(x.shape)}")
    if fmt == "NCHW" and x.shape is not None and len(x.shape) < 3:
        raise ValueError(f"data_format NCHW needs value of rank >= 3, got shape {_dims(x.shape)}")
    if x.shape is None:
        return [spec(None, x.dtype)]
    axis = 1 if fmt == "NCHW" else len(x.shape) - 1
    c = merge_dim(x.shape[axis], b.shape[0] if b.shape else None,
                  f"bias of shape {_dims(b.shape)} must match the channel dimension of value "
                  f"{_dims(x.shape)}")
    return [spec(x.shape[:axis] + (c,) + x.shape[axis + 1:], x.dtype)]


register_op("BiasAdd", inputs=("value", "bias"), outputs=("output",),
            attrs={"T": "type", "data_format": "string"}, shape_fn=_bias_add_shape, flops=_flops.per_output)
register_rows(aligned, "BiasAdd")


@register_gradient("BiasAdd")
def _bias_add_grad(op, grad):
    """d value = dy, d bias = sum of dy over all but the channel axis"""
    return [grad, apply_op("BiasAddGrad", [grad], {"data_format": op.attrs["data_format"]})]


def bias_add(value, bias, data_format=None, name=None) -> Tensor:
    """Adds the 1-D `bias` along the channel axis of `value` (last for NHWC, axis 1 for NCHW)."""
    return apply_op("BiasAdd", [value, bias], {"data_format": data_format or "NHWC"}, name)


def _bias_add_grad_shape(ins, attrs):
    dy = ins[0]
    fmt = _format(attrs)
    if dy.shape is None:
        return [spec((None,), dy.dtype)]
    if len(dy.shape) < (3 if fmt == "NCHW" else 2):
        raise ValueError(f"out_backprop of shape {_dims(dy.shape)} is too small for data_format {fmt}")
    return [spec((dy.shape[1] if fmt == "NCHW" else dy.shape[-1],), dy.dtype)]


register_op("BiasAddGrad", inputs=("out_backprop",), outputs=("output",),
            attrs={"T": "type", "data_format": "string"}, shape_fn=_bias_add_grad_shape, flops=_flops.per_input,
            tags=("row_sums",))
register_rows(reduces, "BiasAddGrad")


@register_gradient("BiasAddGrad")
def _bias_add_grad_grad(op, grad):
    """d out_backprop = g broadcast along the channel axis (a BiasAdd onto zeros)"""
    from tfplus.ops.array_ops import zeros_like
    return [bias_add(zeros_like(op.inputs[0]), grad, data_format=op.attrs["data_format"])]


# -- Relu / ReluGrad, Relu6 / Relu6Grad ----------------------------------------------------------------------
def _float_unary_shape(ins, attrs):
    """An activation's: float16 too, as TF's."""
    if ins[0].dtype not in _HALF_FLOATS:
        raise TypeError(f"x must be float16, float32 or float64, got {ins[0].dtype.name}")
    return [spec(ins[0].shape, ins[0].dtype)]


def _grad_shape(ins, attrs):
    """Shape of a fused activation gradient (two same-shaped inputs)."""
    a, b = ins
    check_same_dtype(ins)
    if a.shape is not None and b.shape is not None:
        if len(a.shape) != len(b.shape):
            raise ValueError(f"inputs must have one shape, got {_dims(a.shape)} and {_dims(b.shape)}")
        shape = tuple(merge_dim(x, y, "inputs must have one shape") for x, y in zip(a.shape, b.shape))
        return [spec(shape, a.dtype)]
    return [spec(a.shape if a.shape is not None else b.shape, a.dtype)]


register_op("Relu", inputs=("features",), outputs=("activations",), attrs={"T": "type"},
            shape_fn=_float_unary_shape, flops=_flops.per_output)
register_rows(aligned, "Relu")


@register_gradient("Relu")
def _relu_grad(op, grad):
    """dx = dy * (y > 0)"""
    return [apply_op("ReluGrad", [grad, op.outputs[0]])]


def relu(features, name=None) -> Tensor:
    """max(features, 0)"""
    return apply_op("Relu", [features], name=name)


register_op("ReluGrad", inputs=("gradients", "features"), outputs=("backprops",), attrs={"T": "type"},
            shape_fn=_grad_shape, flops=_flops.per_output)
register_rows(aligned, "ReluGrad")


@register_gradient("ReluGrad")
def _relu_grad_grad(op, grad):
    """d gradients = g * (features > 0); features: 0 (piecewise constant)"""
    from tfplus.ops.array_ops import zeros_like
    x = op.inputs[1]
    return [apply_op("ReluGrad", [grad, x]), zeros_like(x)]


register_op("Relu6", inputs=("features",), outputs=("activations",), attrs={"T": "type"},
            shape_fn=_float_unary_shape, flops=_flops.per_output)
register_rows(aligned, "Relu6")


@register_gradient("Relu6")
def _relu6_grad(op, grad):
    """dx = dy * (0 < x < 6)"""
    return [apply_op("Relu6Grad", [grad, op.inputs[0]])]


def relu6(features, name=None) -> Tensor:
    """min(max(features, 0), 6)"""
    return apply_op("Relu6", [features], name=name)


register_op("Relu6Grad", inputs=("gradients", "features"), outputs=("backprops",), attrs={"T": "type"},
            shape_fn=_grad_shape, flops=_flops.per_output)
register_rows(aligned, "Relu6Grad")


@register_gradient("Relu6Grad")
def _relu6_grad_grad(op, grad):
    """d gradients = g * (0 < features < 6); features: 0 (piecewise constant)"""
    from tfplus.ops.array_ops import zeros_like
    x = op.inputs[1]
    return [apply_op("Relu6Grad", [grad, x]), zeros_like(x)]


# -- Sigmoid / SigmoidGrad, Tanh / TanhGrad ------------------------------------------------------------------
register_op("Sigmoid", inputs=("x",), outputs=("y",), attrs={"T": "type"}, shape_fn=_float_unary_shape,
            flops=_flops.per_output)
register_rows(aligned, "Sigmoid")


@register_gradient("Sigmoid")
def _sigmoid_grad(op, grad):
    """dx = dy * y * (1 - y)"""
    return [apply_op("SigmoidGrad", [op.outputs[0], grad])]


def sigmoid(x, name=None) -> Tensor:
    """1 / (1 + exp(-x))"""
    return apply_op("Sigmoid", [x], name=name)


register_op("SigmoidGrad", inputs=("y", "dy"), outputs=("z",), attrs={"T": "type"}, shape_fn=_grad_shape,
            flops=_flops.per_output)
register_rows(aligned, "SigmoidGrad")


@register_gradient("SigmoidGrad")
def _sigmoid_grad_grad(op, grad):
    """z = dy*y*(1-y): d y = g * dy * (1 - 2y), d dy = g * y * (1 - y)"""
    from tfplus.ops.math_ops import multiply, subtract
    y, dy = op.inputs
    gb = multiply(grad, dy)
    return [subtract(gb, multiply(multiply(gb, 2.0), y)), apply_op("SigmoidGrad", [y, grad])]


register_op("Tanh", inputs=("x",), outputs=("y",), attrs={"T": "type"}, shape_fn=_float_unary_shape,
            flops=_flops.per_output)
register_rows(aligned, "Tanh")


@register_gradient("Tanh")
def _tanh_grad(op, grad):
    """dx = dy * (1 - y^2)"""
    return [apply_op("TanhGrad", [op.outputs[0], grad])]


def tanh(x, name=None) -> Tensor:
    """The hyperbolic tangent."""
    return apply_op("Tanh", [x], name=name)


register_op("TanhGrad", inputs=("y", "dy"), outputs=("z",), attrs={"T": "type"}, shape_fn=_grad_shape,
            flops=_flops.per_output)
register_rows(aligned, "TanhGrad")


@register_gradient("TanhGrad")
def _tanh_grad_grad(op, grad):
    """z = dy*(1-y^2): d y = -2 g dy y, d dy = g * (1 - y^2)"""
    from tfplus.ops.math_ops import multiply
    y, dy = op.inputs
    return [multiply(multiply(grad, dy), multiply(y, -2.0)), apply_op("TanhGrad", [y, grad])]


# -- Softmax / LogSoftmax ------------------------------------------------------------------------------------
def _softmax_shape(ins, attrs):
    x = ins[0]
    if x.dtype not in _HALF_FLOATS:
        raise TypeError(f"logits must be float16, float32 or float64, got {x.dtype.name}")
    if x.shape is not None and len(x.shape) < 1:
        raise ValueError("logits must have rank >= 1, got a scalar")
    return [spec(x.shape, x.dtype)]


def _check_last_axis(axis, what: str) -> None:
    if axis is not None and axis != -1:
        raise ValueError(f"{what}: only the last axis (axis=-1) is supported, got axis={axis}; "
                         "transpose the classes to the last axis first")


register_op("Softmax", inputs=("logits",), outputs=("softmax",), attrs={"T": "type"}, shape_fn=_softmax_shape,
            flops=_flops.times_input(5))


def _softmax_rows(op, rows) -> str | None:
    """Row by row where the batch is not on the last axis, which it normalizes over."""
    x = op.inputs[0]
    return None if x not in rows or rows[x] != len(rows.shape(x) or (0,)) - 1 else \
        "normalizes over the batch's rows (a softmax over the batch's axis): each micro-batch over its own"


register_rows(_softmax_rows, "Softmax")


@register_gradient("Softmax")
def _softmax_grad(op, grad):
    """dx = (dy - sum(dy * y, -1)) * y"""
    from tfplus.ops.math_ops import multiply, reduce_sum, subtract
    y = op.outputs[0]
    return [multiply(subtract(grad, reduce_sum(multiply(grad, y), -1, keepdims=True)), y)]


def _on_axis(op_type: str, logits, axis, name) -> Tensor:
    """`op_type` (which works on the last axis) along `axis`: as TF1, the axis swapped with the last one around it."""
    from tfplus.ops.array_ops import transpose
    logits = convert_to_tensor(logits)
    rank = logits.shape.ndims
    axis = -1 if axis is None else int(axis)
    if axis in (-1, None if rank is None else rank - 1):
        return apply_op(op_type, [logits], name=name)
    if rank is None:
        raise ValueError(f"{op_type} over axis {axis} of '{logits.name}': its rank must be known when the graph is "
                         "built (give the placeholder a shape)")
    if not -rank <= axis < rank:
        raise ValueError(f"{op_type}: axis {axis} is out of range for '{logits.name}' of rank {rank}")
    perm = list(range(rank))
    perm[axis], perm[-1] = perm[-1], perm[axis]
    with name_scope(name, op_type):
        return transpose(apply_op(op_type, [transpose(logits, perm)]), perm)


def softmax(logits, axis=None, name=None, dim=None) -> Tensor:
    """exp(logits) / sum(exp(logits)) along `axis` (the last by default).

        p = tf.nn.softmax(routing_logits, axis=2)
    """
    return _on_axis("Softmax", logits, axis if dim is None else dim, name)


register_op("LogSoftmax", inputs=("logits",), outputs=("logsoftmax",), attrs={"T": "type"},
            shape_fn=_softmax_shape, flops=_flops.times_input(5))
register_rows(_softmax_rows, "LogSoftmax")


@register_gradient("LogSoftmax")
def _log_softmax_grad(op, grad):
    """dx = dy - sum(dy, -1) * exp(y)"""
    from tfplus.ops.math_ops import exp, multiply, reduce_sum, subtract
    return [subtract(grad, multiply(reduce_sum(grad, -1, keepdims=True), exp(op.outputs[0])))]


def log_softmax(logits, axis=None, name=None, dim=None) -> Tensor:
    """logits - log(sum(exp(logits))) along `axis` (the last by default)."""
    return _on_axis("LogSoftmax", logits, axis if dim is None else dim, name)


# -- MaxPool / MaxPoolGrad / MaxPoolGradGrad -----------------------------------------------------------------
_POOL_ATTRS = {"T": "type", "ksize": "list(int)", "strides": "list(int)", "padding": "string",
               "data_format": "string"}


def _pool_out(x_shape, attrs) -> tuple:
    fmt = _format(attrs)
    kh, kw = _window_attr(attrs["ksize"], fmt, "ksize")
    n, h, w, c = _window_shape(x_shape, kh, kw, attrs)
    return _from_nhwc(n, h, w, c, fmt)


def _pool_shape(ins, attrs):
    x = ins[0]
    _check_float(x, "input")
    check_rank(x, 4, "input")
    return [spec(_pool_out(x.shape, attrs), x.dtype)]


def _check_like(s, shape, what: str) -> None:
    if s.shape is None or shape is None:
        return
    if len(s.shape) != len(shape) or any(a is not None and b is not None and a != b
                                         for a, b in zip(s.shape, shape)):
        raise ValueError(f"{what} has shape {_dims(s.shape)}, expected {_dims(shape)}")


def _max_pool_grad_shape(ins, attrs):
    x, y, g = ins
    check_same_dtype(ins, "orig_input, orig_output and grad")
    check_rank(x, 4, "orig_input")
    _check_like(y, _pool_out(x.shape, attrs), "orig_output")
    _check_like(g, _pool_out(x.shape, attrs), "grad")
    return [spec(x.shape, x.dtype)]


def _max_pool_grad_grad_shape(ins, attrs):
    x, y, g = ins
    check_same_dtype(ins, "orig_input, orig_output and grad")
    check_rank(x, 4, "orig_input")
    out = _pool_out(x.shape, attrs)
    _check_like(y, out, "orig_output")
    _check_like(g, x.shape, "grad")
    return [spec(out, x.dtype)]


register_op("MaxPool", inputs=("input",), outputs=("output",), attrs=_POOL_ATTRS, shape_fn=_pool_shape,
            flops=_flops.pool)
register_rows(rowwise, "MaxPool")


@register_gradient("MaxPool")
def _max_pool_grad(op, grad):
    """dx = dy routed to each window's (first) maximum"""
    return [apply_op("MaxPoolGrad", [op.inputs[0], op.outputs[0], grad], _pool_attrs(op))]


def _pool_attrs(op) -> dict:
    return {k: op.attrs[k] for k in ("ksize", "strides", "padding", "data_format")}


def _pool_op(op_type, value, ksize, strides, padding, data_format, name) -> Tensor:
    attrs = {"ksize": _list4(ksize, data_format, "ksize"), "strides": _list4(strides, data_format, "strides"),
             "padding": padding, "data_format": data_format}
    return apply_op(op_type, [value], attrs, name)


def max_pool(value, ksize, strides, padding, data_format="NHWC", name=None) -> Tensor:
    """The maximum over each ksize window; `tf.nn.max_pool(x, 2, 2, "VALID")` halves H and W."""
    return _pool_op("MaxPool", value, ksize, strides, padding, data_format, name)


def max_pool2d(input, ksize, strides, padding, data_format="NHWC", name=None) -> Tensor:
    """TF 1.15's tf.nn.max_pool2d: tf.nn.max_pool with its argument named `input`."""
    return max_pool(input, ksize, strides, padding, data_format, name)


def avg_pool2d(input, ksize, strides, padding, data_format="NHWC", name=None) -> Tensor:
    """TF 1.15's tf.nn.avg_pool2d: tf.nn.avg_pool with its argument named `input`."""
    return avg_pool(input, ksize, strides, padding, data_format, name)


register_op("MaxPoolGrad", inputs=("orig_input", "orig_output", "grad"), outputs=("output",),
            attrs=_POOL_ATTRS, shape_fn=_max_pool_grad_shape, flops=_flops.pool_grad)
register_rows(rowwise, "MaxPoolGrad")


@register_gradient("MaxPoolGrad")
def _max_pool_grad_grad(op, grad):
    """d grad = g read at each window's maximum; orig_input, orig_output: 0 (piecewise constant)"""
    from tfplus.ops.array_ops import zeros_like
    x, y, _ = op.inputs
    return [zeros_like(x), zeros_like(y), apply_op("MaxPoolGradGrad", [x, y, grad], _pool_attrs(op))]


register_op("MaxPoolGradGrad", inputs=("orig_input", "orig_output", "grad"), outputs=("output",),
            attrs=_POOL_ATTRS, shape_fn=_max_pool_grad_grad_shape, flops=_flops.pool)
register_rows(rowwise, "MaxPoolGradGrad")


@register_gradient("MaxPoolGradGrad")
def _max_pool_grad_grad_grad(op, grad):
    """d grad = g routed to each window's maximum; orig_input, orig_output: 0 (piecewise constant)"""
    from tfplus.ops.array_ops import zeros_like
    x, y, _ = op.inputs
    return [zeros_like(x), zeros_like(y), apply_op("MaxPoolGrad", [x, y, grad], _pool_attrs(op))]


# -- AvgPool / AvgPoolGrad -----------------------------------------------------------------------------------
register_op("AvgPool", inputs=("value",), outputs=("output",), attrs=_POOL_ATTRS, shape_fn=_pool_shape,
            flops=_flops.pool)
register_rows(rowwise, "AvgPool")


@register_gradient("AvgPool")
def _avg_pool_grad(op, grad):
    """dx = dy spread evenly over each window (padding excluded)"""
    return [apply_op("AvgPoolGrad", [_shape_tensor(op.inputs[0]), grad], dict(_pool_attrs(op), T=grad.dtype))]


def avg_pool(value, ksize, strides, padding, data_format="NHWC", name=None) -> Tensor:
    """The mean over each ksize window; SAME padding averages over the window's part inside the input."""
    return _pool_op("AvgPool", value, ksize, strides, padding, data_format, name)


def _avg_pool_grad_shape(ins, attrs):
    sizes, g = ins
    _check_float(g, "grad")
    check_rank(g, 4, "grad")
    value = _sizes_value(sizes, "orig_input_shape")
    if value is None:
        return [spec((None,) * 4, g.dtype)]
    _check_like(g, _pool_out(value, attrs), "grad")
    return [spec(value, g.dtype)]


register_op("AvgPoolGrad", inputs=("orig_input_shape", "grad"), outputs=("output",), attrs=_POOL_ATTRS,
            shape_fn=_avg_pool_grad_shape, value_inputs=(0,), flops=_flops.pool_grad)
register_rows(rowwise, "AvgPoolGrad")


@register_gradient("AvgPoolGrad")
def _avg_pool_grad_grad(op, grad):
    """d grad = avg_pool(g) (AvgPoolGrad is AvgPool's adjoint)"""
    return [None, apply_op("AvgPool", [grad], _pool_attrs(op))]


# -- SparseSoftmaxCrossEntropyWithLogits ---------------------------------------------------------------------
def _sparse_xent_shape(ins, attrs):
    logits, labels = ins
    _check_float(logits, "logits")
    check_rank(logits, 2, "logits")
    check_rank(labels, 1, "labels")
    if labels.dtype not in (_dt.int32, _dt.int64):
        raise TypeError(f"labels must be int32 or int64 class indices, got {labels.dtype.name}")
    n, k = logits.shape or (None, None)
    n = merge_dim(n, labels.shape[0] if labels.shape else None,
                  f"logits {_dims(logits.shape)} and labels {_dims(labels.shape)} must have one batch size")
    return [spec((n,), logits.dtype), spec((n, k), logits.dtype)]


register_op("SparseSoftmaxCrossEntropyWithLogits", inputs=("features", "labels"),
            outputs=("loss", "backprop"), attrs={"T": "type", "Tlabels": "type"}, shape_fn=_sparse_xent_shape,
            flops=_flops.times_input(5))
register_rows(rowwise, "SparseSoftmaxCrossEntropyWithLogits")


@register_gradient("SparseSoftmaxCrossEntropyWithLogits")
def _sparse_xent_grad(op, grad_loss, grad_backprop):
    """d logits = d loss[:, None] * (softmax(logits) - onehot(labels)) (the op's backprop); labels: none"""
    if grad_backprop is not None:
        raise LookupError(f"No gradient defined for the backprop output of '{op.name}' "
                          "(SparseSoftmaxCrossEntropyWithLogits): differentiate the loss output only")
    from tfplus.ops.array_ops import expand_dims
    from tfplus.ops.math_ops import multiply
    return [multiply(expand_dims(grad_loss, -1), op.outputs[1]), None]


def sparse_softmax_cross_entropy_with_logits(_sentinel=None, labels=None, logits=None, name=None) -> Tensor:
    """-log(softmax(logits)[labels]) per row; `labels` are class indices (int32/int64), shape [batch]."""
    if _sentinel is not None or labels is None or logits is None:
        raise ValueError("sparse_softmax_cross_entropy_with_logits takes named arguments: "
                         "labels=..., logits=...")
    with name_scope(name, "SparseSoftmaxCrossEntropyWithLogits"):
        labels, logits = convert_to_tensor(labels), convert_to_tensor(logits)
        loss_of = lambda lab, lgt: apply_op("SparseSoftmaxCrossEntropyWithLogits", [lgt, lab],  # noqa: E731
                                            {"Tlabels": lab.dtype})[0]
        return _rows(loss_of, labels, logits, sparse=True)


def _rows(loss_of, labels, logits, sparse: bool):
    """TF's cross-entropies on logits of rank other than 2: the loss of the logits flattened to [-1, classes]
    (labels alike), reshaped back to the outer dimensions (the sparse labels' shape, the logits' but the last)."""
    if logits.shape.ndims == 2 or logits.shape.ndims is None:
        return loss_of(labels, logits)
    from tfplus.ops.array_ops import reshape, shape
    classes = logits.shape.as_list()[-1]
    classes = -1 if classes is None else classes
    loss = loss_of(reshape(labels, [-1] if sparse else [-1, classes]), reshape(logits, [-1, classes]))
    out = reshape(loss, shape(labels) if sparse else shape(logits)[:-1])
    out.set_shape(labels.shape.as_list() if sparse else logits.shape.as_list()[:-1])
    return out


# -- SoftmaxCrossEntropyWithLogits ---------------------------------------------------------------------------
def _xent_shape(ins, attrs):
    logits, labels = ins
    check_same_dtype(ins, "logits and labels")
    _check_float(logits, "logits")
    check_rank(logits, 2, "logits")
    check_rank(labels, 2, "labels")
    shape = logits.shape or (None, None)
    if labels.shape is not None:
        what = f"logits {_dims(logits.shape)} and labels {_dims(labels.shape)} must have one shape"
        shape = tuple(merge_dim(a, b, what) for a, b in zip(shape, labels.shape))
    return [spec(shape[:1], logits.dtype), spec(shape, logits.dtype)]


register_op("SoftmaxCrossEntropyWithLogits", inputs=("features", "labels"), outputs=("loss", "backprop"),
            attrs={"T": "type"}, shape_fn=_xent_shape, flops=_flops.times_input(5))
register_rows(rowwise, "SoftmaxCrossEntropyWithLogits")


@register_gradient("SoftmaxCrossEntropyWithLogits")
def _xent_grad(op, grad_loss, grad_backprop):
    """d logits = dl[:, None] * (softmax - labels) [+ (gb - sum(gb * p)) * p for backprop's gradient gb];
    d labels = -dl[:, None] * log_softmax(logits)"""
    from tfplus.ops.array_ops import expand_dims
    from tfplus.ops.math_ops import add, multiply, negative, reduce_sum, subtract
    logits = op.inputs[0]
    grads = [None, None]
    if grad_loss is not None:
        dl = expand_dims(grad_loss, -1)
        grads = [multiply(dl, op.outputs[1]), multiply(dl, negative(log_softmax(logits)))]
    if grad_backprop is not None:  # backprop = softmax(logits) - labels
        p = softmax(logits)
        gb = grad_backprop
        extra = multiply(subtract(gb, reduce_sum(multiply(gb, p), -1, keepdims=True)), p)
        grads[0] = extra if grads[0] is None else add(grads[0], extra)
        grads[1] = negative(gb) if grads[1] is None else subtract(grads[1], gb)
    return grads


def softmax_cross_entropy_with_logits_v2(_sentinel=None, labels=None, logits=None, dim=-1, name=None,
                                         axis=None) -> Tensor:
    """-sum(labels * log_softmax(logits)) per row; `labels` are probability rows. Labels get gradients too."""
    if _sentinel is not None or labels is None or logits is None:
        raise ValueError("softmax_cross_entropy_with_logits takes named arguments: labels=..., logits=...")
    _check_last_axis(dim if axis is None else axis, "softmax_cross_entropy_with_logits")
    with name_scope(name, "SoftmaxCrossEntropyWithLogits"):
        logits = convert_to_tensor(logits)
        labels = convert_to_tensor(labels, preferred_dtype=logits.dtype)
        if labels.dtype is not logits.dtype:  # TF1 casts labels of any dtype (e.g. int one-hot) to the logits'
            from tfplus.ops.math_ops import cast
            labels = cast(labels, logits.dtype)
        loss_of = lambda lab, lgt: apply_op("SoftmaxCrossEntropyWithLogits", [lgt, lab])[0]  # noqa: E731
        return _rows(loss_of, labels, logits, sparse=False)


def softmax_cross_entropy_with_logits(_sentinel=None, labels=None, logits=None, dim=-1, name=None,
                                      axis=None) -> Tensor:
    """TF1's version: like _v2, but no gradient flows into `labels` (they are wrapped in stop_gradient)."""
    if labels is not None:
        from tfplus.ops.array_ops import stop_gradient
        labels = stop_gradient(labels)
    return softmax_cross_entropy_with_logits_v2(_sentinel, labels, logits, dim, name, axis)


# -- L2Loss --------------------------------------------------------------------------------------------------
def _l2_loss_shape(ins, attrs):
    _check_float(ins[0], "t")
    return [spec((), ins[0].dtype)]


register_op("L2Loss", inputs=("t",), outputs=("output",), attrs={"T": "type"}, shape_fn=_l2_loss_shape,
            flops=_flops.per_input)
register_rows(reduces, "L2Loss")


@register_gradient("L2Loss")
def _l2_loss_grad(op, grad):
    """dt = t * dy"""
    from tfplus.ops.math_ops import multiply
    return [multiply(op.inputs[0], grad)]


def l2_loss(t, name=None) -> Tensor:
    """sum(t ** 2) / 2 (a scalar): the usual weight-decay term."""
    return apply_op("L2Loss", [t], name=name)


# -- InTopKV2 ------------------------------------------------------------------------------------------------
def _in_top_k_shape(ins, attrs):
    predictions, targets, k = ins
    check_rank(predictions, 2, "predictions")
    check_rank(targets, 1, "targets")
    check_rank(k, 0, "k")
    n = merge_dim(predictions.shape[0] if predictions.shape else None,
                  targets.shape[0] if targets.shape else None,
                  f"predictions {_dims(predictions.shape)} and targets {_dims(targets.shape)} must have one "
                  "batch size")
    return [spec((n,), _dt.bool_)]


register_op("InTopKV2", inputs=("predictions", "targets", "k"), outputs=("precision",), attrs={"T": "type"},
            shape_fn=_in_top_k_shape, flops=_flops.per_input)
register_rows(rowwise, "InTopKV2")
not_differentiable("InTopKV2")


def in_top_k(predictions, targets, k, name=None) -> Tensor:
    """Whether targets[i] is among the k largest predictions[i] (ties count in its favour, as in TF)."""
    targets = convert_to_tensor(targets)
    k = convert_to_tensor(np.asarray(k, targets.dtype.np)) if not isinstance(k, Tensor) else k
    return apply_op("InTopKV2", [convert_to_tensor(predictions, dtype=_dt.float32), targets, k],
                    {"T": targets.dtype}, name)


# -- composite wrappers --------------------------------------------------------------------------------------
def _is_one(t: Tensor) -> bool:
    c = constant_value(t)
    return c is not None and bool(np.all(np.asarray(c) == 1))


def dropout(x, keep_prob=None, noise_shape=None, seed=None, name=None, rate=None) -> Tensor:
    """TF1 dropout: x / keep_prob where floor(keep_prob + uniform[0, 1)) is 1, else 0 (rate = 1 - keep_prob).

        h = tf.nn.dropout(h, keep_prob=0.5)
    """
    from tfplus.ops import math_ops
    from tfplus.ops.random_ops import random_uniform
    if (keep_prob is None) == (rate is None):
        raise ValueError("tf.nn.dropout: pass exactly one of keep_prob and rate")
    with name_scope(name, "dropout"):
        x = convert_to_tensor(x)
        if not x.dtype.is_floating:
            raise TypeError(f"tf.nn.dropout needs a floating point x, got {x.dtype.name}")
        if rate is not None:
            keep_prob = 1.0 - rate if isinstance(rate, numbers.Real) else math_ops.subtract(1.0, rate)
        if isinstance(keep_prob, numbers.Real) and not 0 < keep_prob <= 1:
            raise ValueError(f"tf.nn.dropout: keep_prob must be in (0, 1], got {keep_prob}")
        keep_prob = convert_to_tensor(keep_prob, dtype=x.dtype)
        if _is_one(keep_prob):  # TF1 returns x itself: no random op, no mask
            return x
        if noise_shape is None:
            noise_shape = _shape_tensor(x)
        mask = math_ops.floor(math_ops.add(random_uniform(noise_shape, dtype=x.dtype, seed=seed), keep_prob))
        return math_ops.multiply(math_ops.divide(x, keep_prob), mask)


def zero_fraction(value, name=None) -> Tensor:
    """The fraction of zeros in `value` (a float32 scalar), e.g. to watch ReLU sparsity."""
    from tfplus.ops import math_ops
    with name_scope(name, "zero_fraction"):
        value = convert_to_tensor(value)
        zero = np.zeros((), value.dtype.np)
        return math_ops.reduce_mean(math_ops.cast(math_ops.equal(value, zero), _dt.float32))


def moments(x, axes, shift=None, name=None, keep_dims=None, keepdims=None) -> tuple[Tensor, Tensor]:
    """(mean, variance) of `x` over `axes`, e.g. axes=[0, 2, 3] for per-channel statistics of NCHW."""
    from tfplus.ops import math_ops
    from tfplus.ops.array_ops import squeeze, stop_gradient
    keep = bool(keepdims if keepdims is not None else keep_dims)
    with name_scope(name, "moments"):
        x = convert_to_tensor(x)
        axes = list(axes)
        mean = math_ops.reduce_mean(x, axes, keepdims=True)
        deviation = math_ops.squared_difference(x, stop_gradient(mean))
        variance = math_ops.reduce_mean(deviation, axes, keepdims=True)
        if not keep:
            mean, variance = squeeze(mean, axes), squeeze(variance, axes)
        return mean, variance


# ===========================================================================================================
# Ops for MobileNet-style and sequence models: LeakyRelu, LRN, FusedBatchNorm(V3), DepthwiseConv2dNative, and
# the composite conv1d / depthwise_conv2d / separable_conv2d wrappers. TF's op names, attrs and semantics.
__all__ += ["leaky_relu", "lrn", "local_response_normalization", "fused_batch_norm", "depthwise_conv2d",
            "depthwise_conv2d_native", "depthwise_conv2d_native_backprop_input",
            "depthwise_conv2d_native_backprop_filter", "separable_conv2d", "conv1d"]


# -- LeakyRelu / LeakyReluGrad -------------------------------------------------------------------------------
register_op("LeakyRelu", inputs=("features",), outputs=("activations",), attrs={"T": "type", "alpha": "float"},
            shape_fn=_float_unary_shape, flops=_flops.per_output)
register_rows(aligned, "LeakyRelu")


@register_gradient("LeakyRelu")
def _leaky_relu_grad(op, grad):
    """dx = dy * (x > 0 ? 1 : alpha)"""
    return [apply_op("LeakyReluGrad", [grad, op.inputs[0]], {"alpha": op.attrs["alpha"]})]


def leaky_relu(features, alpha=0.2, name=None) -> Tensor:
    """x where x > 0, alpha * x elsewhere: `tf.nn.leaky_relu(x, alpha=0.1)`."""
    return apply_op("LeakyRelu", [features], {"alpha": float(alpha)}, name or "LeakyRelu")


register_op("LeakyReluGrad", inputs=("gradients", "features"), outputs=("backprops",),
            attrs={"T": "type", "alpha": "float"}, shape_fn=_grad_shape, flops=_flops.per_output)
register_rows(aligned, "LeakyReluGrad")


@register_gradient("LeakyReluGrad")
def _leaky_relu_grad_grad(op, grad):
    """d gradients = g * (features > 0 ? 1 : alpha); features: 0 (piecewise constant)"""
    from tfplus.ops.array_ops import zeros_like
    x = op.inputs[1]
    return [apply_op("LeakyReluGrad", [grad, x], {"alpha": op.attrs["alpha"]}), zeros_like(x)]


# -- Elu / EluGrad, Softplus / SoftplusGrad ------------------------------------------------------------------
__all__ += ["elu", "softplus"]

register_op("Elu", inputs=("features",), outputs=("activations",), attrs={"T": "type"},
            shape_fn=_float_unary_shape, flops=_flops.per_output)
register_rows(aligned, "Elu")


@register_gradient("Elu")
def _elu_grad(op, grad):
    """dx = dy * (y > 0 ? 1 : y + 1), from the output y as TensorFlow does"""
    return [apply_op("EluGrad", [grad, op.outputs[0]])]


def elu(features, name=None) -> Tensor:
    """x where x > 0, exp(x) - 1 elsewhere: `tf.nn.elu(x)`."""
    return apply_op("Elu", [features], name=name or "Elu")


register_op("EluGrad", inputs=("gradients", "outputs"), outputs=("backprops",), attrs={"T": "type"},
            shape_fn=_grad_shape, flops=_flops.per_output)
register_rows(aligned, "EluGrad")


@register_gradient("EluGrad")
def _elu_grad_grad(op, grad):
    """z = g * (y > 0 ? 1 : y + 1): d g = EluGrad(grad, y), d y = y < 0 ? grad * g : 0"""
    from tfplus.ops.array_ops import zeros_like
    from tfplus.ops.math_ops import less, multiply, where
    g, y = op.inputs
    return [apply_op("EluGrad", [grad, y]), where(less(y, 0.0), multiply(grad, g), zeros_like(y))]


register_op("Softplus", inputs=("features",), outputs=("activations",), attrs={"T": "type"},
            shape_fn=_float_unary_shape, flops=_flops.per_output)
register_rows(aligned, "Softplus")


@register_gradient("Softplus")
def _softplus_grad(op, grad):
    """dx = dy * sigmoid(x)"""
    return [apply_op("SoftplusGrad", [grad, op.inputs[0]])]


def softplus(features, name=None) -> Tensor:
    """log(1 + exp(x)), without overflow: `tf.nn.softplus(x)`."""
    return apply_op("Softplus", [features], name=name or "Softplus")


register_op("SoftplusGrad", inputs=("gradients", "features"), outputs=("backprops",), attrs={"T": "type"},
            shape_fn=_grad_shape, flops=_flops.per_output)
register_rows(aligned, "SoftplusGrad")


@register_gradient("SoftplusGrad")
def _softplus_grad_grad(op, grad):
    """z = g * sigmoid(x): d g = SoftplusGrad(grad, x), d x = grad * g / (exp(-x) + 2 + exp(x))"""
    from tfplus.ops.math_ops import add, exp, multiply, negative, realdiv
    g, x = op.inputs
    return [apply_op("SoftplusGrad", [grad, x]),
            realdiv(multiply(grad, g), add(add(exp(negative(x)), 2.0), exp(x)))]


# -- LRN / LRNGrad -------------------------------------------------------------------------------------------
_LRN_ATTRS = {"T": "type", "depth_radius": "int", "bias": "float", "alpha": "float", "beta": "float"}


def _lrn_shape(ins, attrs):
    x = ins[0]
    _check_float(x, "input")
    check_rank(x, 4, "input (NHWC)")
    if attrs["depth_radius"] < 0:
        raise ValueError(f"depth_radius must be >= 0, got {attrs['depth_radius']}")
    return [spec(x.shape, x.dtype)]


register_op("LRN", inputs=("input",), outputs=("output",), attrs=_LRN_ATTRS, shape_fn=_lrn_shape, flops=_flops.lrn)
register_rows(rowwise, "LRN")


def _lrn_attrs(op) -> dict:
    return {k: op.attrs[k] for k in ("depth_radius", "bias", "alpha", "beta")}


@register_gradient("LRN")
def _lrn_grad(op, grad):
    """dx_i = g_i N_i^-beta - 2 alpha beta x_i sum_{j near i} g_j y_j / N_j, N = bias + alpha * window sum of x^2"""
    return [apply_op("LRNGrad", [grad, op.inputs[0], op.outputs[0]], _lrn_attrs(op))]


def lrn(input, depth_radius=5, bias=1.0, alpha=1.0, beta=0.5, name=None) -> Tensor:
    """Local response normalization over the last (channel) axis of NHWC `input`:
    y = x / (bias + alpha * sum of x^2 over channels d-depth_radius..d+depth_radius) ** beta."""
    attrs = {"depth_radius": int(depth_radius), "bias": float(bias), "alpha": float(alpha), "beta": float(beta)}
    return apply_op("LRN", [input], attrs, name or "LRN")


local_response_normalization = lrn


def _lrn_grad_shape(ins, attrs):
    check_same_dtype(ins, "input_grads, input_image and output_image")
    for s, what in zip(ins, ("input_grads", "input_image", "output_image")):
        check_rank(s, 4, what)
    _check_like(ins[1], ins[0].shape, "input_image")
    _check_like(ins[2], ins[0].shape, "output_image")
    return [spec(ins[1].shape if ins[1].shape is not None else ins[0].shape, ins[0].dtype)]


register_op("LRNGrad", inputs=("input_grads", "input_image", "output_image"), outputs=("output",),
            attrs=_LRN_ATTRS, shape_fn=_lrn_grad_shape, flops=_flops.lrn)
register_rows(rowwise, "LRNGrad")


@register_gradient("LRNGrad")
def _lrn_grad_grad(op, *grads):
    """Not defined (TensorFlow has none either): raises."""
    raise LookupError(f"No gradient defined for '{op.name}' (LRNGrad): second derivatives of tf.nn.lrn are not "
                      "implemented (TensorFlow has none either)")


# -- FusedBatchNorm(V3) / FusedBatchNormGrad(V3) -------------------------------------------------------------
# x is normalized per channel: y = (x - mean) * scale / sqrt(variance + epsilon) + offset. In training mode
# mean/variance are the batch's (the biased variance normalizes; the batch_variance output is Bessel-corrected,
# n / (n - 1), as TF's running variance) and the batch_mean/batch_variance outputs are the moving averages
# (1 - f) * old + f * batch for exponential_avg_factor f (old mean/variance may be empty when f == 1).
# reserve_space_1/2 hold the batch mean and biased variance for the gradient, as TF's CPU kernel does.
_BN_ATTRS = {"T": "type", "U": "type", "epsilon": "float", "exponential_avg_factor": "float",
             "data_format": "string", "is_training": "bool"}


def _bn_channels(x, attrs) -> int | None:
    return _nhwc(x.shape, _format(attrs))[3]


def _check_vector(s, c, what: str, may_be_empty: bool = False):
    check_rank(s, 1, what)
    if s.shape is None or s.shape[0] is None or c is None:
        return
    if s.shape[0] != c and not (may_be_empty and s.shape[0] == 0):
        raise ValueError(f"{what} has {s.shape[0]} entries but x has {c} channels")


def _fused_batch_norm_shape(version: int):
    def shape_fn(ins, attrs):
        x, scale, offset, mean, variance = ins
        _check_float(x, "x")
        check_same_dtype(ins, "x, scale, offset, mean and variance")
        check_rank(x, 4, "x")
        c = _bn_channels(x, attrs)
        training = attrs["is_training"]
        empty_ok = training and attrs.get("exponential_avg_factor", 1.0) == 1.0
        for s, what in ((scale, "scale"), (offset, "offset")):
            _check_vector(s, c, what)
        for s, what in ((mean, "mean"), (variance, "variance")):
            _check_vector(s, c, what, may_be_empty=empty_ok)
        vec = spec((c,), x.dtype)
        out = [spec(x.shape, x.dtype), vec, vec, vec, vec]
        return out + [spec((), x.dtype)] if version == 3 else out
    return shape_fn


def _fused_batch_norm_grad_shape(version: int):
    def shape_fn(ins, attrs):
        dy, x, scale, r1, r2 = ins[:5]
        check_same_dtype(ins[:5], "y_backprop, x, scale, reserve_space_1 and reserve_space_2")
        _check_float(x, "x")
        check_rank(dy, 4, "y_backprop")
        check_rank(x, 4, "x")
        _check_like(dy, x.shape, "y_backprop")
        c = _bn_channels(x, attrs)
        for s, what in ((scale, "scale"), (r1, "reserve_space_1"), (r2, "reserve_space_2")):
            _check_vector(s, c, what)
        vec = spec((c,), x.dtype)
        return [spec(x.shape, x.dtype), vec, vec, spec((0,), x.dtype), spec((0,), x.dtype)]
    return shape_fn


register_op("FusedBatchNorm", inputs=("x", "scale", "offset", "mean", "variance"),
            outputs=("y", "batch_mean", "batch_variance", "reserve_space_1", "reserve_space_2"),
            attrs=_BN_ATTRS, shape_fn=_fused_batch_norm_shape(1), flops=_flops.times_input(7), tags=("cross_batch",))
register_op("FusedBatchNormV3", inputs=("x", "scale", "offset", "mean", "variance"),
            outputs=("y", "batch_mean", "batch_variance", "reserve_space_1", "reserve_space_2",
                     "reserve_space_3"),
            attrs=_BN_ATTRS, shape_fn=_fused_batch_norm_shape(3), flops=_flops.times_input(7), tags=("cross_batch",))
_BN_GRAD_ATTRS = {k: _BN_ATTRS[k] for k in ("T", "U", "epsilon", "data_format", "is_training")}
register_op("FusedBatchNormGrad", inputs=("y_backprop", "x", "scale", "reserve_space_1", "reserve_space_2"),
            outputs=("x_backprop", "scale_backprop", "offset_backprop", "reserve_space_3", "reserve_space_4"),
            attrs=_BN_GRAD_ATTRS, shape_fn=_fused_batch_norm_grad_shape(1), flops=_flops.times_input(10))
register_op("FusedBatchNormGradV3",
            inputs=("y_backprop", "x", "scale", "reserve_space_1", "reserve_space_2", "reserve_space_3"),
            outputs=("x_backprop", "scale_backprop", "offset_backprop", "reserve_space_4", "reserve_space_5"),
            attrs=_BN_GRAD_ATTRS, shape_fn=_fused_batch_norm_grad_shape(3), flops=_flops.times_input(10))
register_rows(rowwise, "FusedBatchNorm", "FusedBatchNormV3", "FusedBatchNormGrad", "FusedBatchNormGradV3")


def _fused_batch_norm_grad(op, grad_y, *unused):
    """Training: dx = scale/sigma * (dy - mean(dy) - x_hat * mean(dy * x_hat)), x_hat = (x - mu)/sigma (batch
    statistics); inference: dx = dy * scale / sigma (moving statistics); d scale = sum(dy * x_hat),
    d offset = sum(dy). As TF, no gradient flows from the batch statistics outputs."""
    x, scale = op.inputs[0], op.inputs[1]
    v3 = op.type == "FusedBatchNormV3"
    attrs = {k: op.attrs[k] for k in ("epsilon", "data_format", "is_training")}
    attrs["U"] = op.attrs.get("U", x.dtype)
    if op.attrs["is_training"]:
        saved = [op.outputs[3], op.outputs[4]] + ([op.outputs[5]] if v3 else [])
    else:
        saved = [op.inputs[3], op.inputs[4]] + ([op.outputs[5]] if v3 else [])
    outs = apply_op("FusedBatchNormGradV3" if v3 else "FusedBatchNormGrad", [grad_y, x, scale] + saved, attrs)
    return [outs[0], outs[1], outs[2], None, None]


register_gradient("FusedBatchNorm")(_fused_batch_norm_grad)
register_gradient("FusedBatchNormV3")(_fused_batch_norm_grad)


def _fused_batch_norm_grad_grad(op, *grads):
    """Not implemented: raises, naming the node."""
    raise LookupError(f"No gradient defined for '{op.name}' ({op.type}): second derivatives of batch "
                      "normalization are not implemented in tfplus")


register_gradient("FusedBatchNormGrad")(_fused_batch_norm_grad_grad)
register_gradient("FusedBatchNormGradV3")(_fused_batch_norm_grad_grad)


def fused_batch_norm(x, scale, offset, mean=None, variance=None, epsilon=0.001, data_format="NHWC",
                     is_training=True, name=None, exponential_avg_factor=1.0):
    """(y, batch_mean, batch_variance) of TF1's tf.nn.fused_batch_norm (a FusedBatchNormV3 node).

        y, mean, var = tf.nn.fused_batch_norm(x, gamma, beta, data_format="NCHW")   # training: batch stats
        y, _, _ = tf.nn.fused_batch_norm(x, gamma, beta, mov_mean, mov_var, is_training=False)
    """
    x = convert_to_tensor(x)
    if (mean is None or variance is None) and (not is_training or exponential_avg_factor != 1.0):
        raise ValueError("tf.nn.fused_batch_norm: mean and variance are required for inference "
                         "(is_training=False) and for exponential_avg_factor != 1")
    empty = np.zeros((0,), x.dtype.np)
    mean = convert_to_tensor(empty if mean is None else mean, dtype=x.dtype)
    variance = convert_to_tensor(empty if variance is None else variance, dtype=x.dtype)
    # TF raises epsilon to cuDNN's minimum, 1.001e-5, whatever the device; so do we, for equal results.
    attrs = {"epsilon": max(float(epsilon), 1.001e-5), "exponential_avg_factor": float(exponential_avg_factor),
             "data_format": data_format, "is_training": bool(is_training), "U": x.dtype}
    outs = apply_op("FusedBatchNormV3", [x, scale, offset, mean, variance], attrs, name)  # one node, as TF
    return outs[0], outs[1], outs[2]


# -- DepthwiseConv2dNative and its backprops ------------------------------------------------------------------
# out[n, h, w, c * M + m] = sum over taps of x[n, h', w', c] * filter[dy, dx, c, m]: each input channel has its
# own M filters (the channel multiplier); filter shape (kh, kw, C, M), output C * M channels.
def _depthwise_out(x_shape, f_shape, attrs) -> tuple:
    kh, kw, c, m = f_shape or (None,) * 4
    n, h, w, xc = _window_shape(x_shape, kh, kw, attrs)
    if xc is not None and c is not None and xc != c:
        raise ValueError(f"input has {xc} channels but the depthwise filter expects {c} "
                         f"(filter shape {_dims(f_shape)})")
    c = merge_dim(xc, c, "channels")
    return n, h, w, None if c is None or m is None else c * m


def _depthwise_shape(ins, attrs):
    x, f = ins
    check_same_dtype(ins, "input and filter")
    _check_float(x, "input")
    check_rank(x, 4, "input")
    check_rank(f, 4, "filter (kh, kw, in_channels, channel_multiplier)")
    _check_dilations(attrs)
    _check_no_explicit_paddings(attrs)
    fmt = _format(attrs)
    return [spec(_from_nhwc(*_depthwise_out(x.shape, f.shape, attrs), fmt), x.dtype)]


# TF's explicit_paddings goes with padding='EXPLICIT', which tfplus does not support: declared so that TF's
# GraphDefs (which carry it, empty) import; a non-empty value is refused by the shape functions.
_DEPTHWISE_ATTRS = dict(_CONV_ATTRS, explicit_paddings="list(int)")


def _check_no_explicit_paddings(attrs) -> None:
    if list(attrs.get("explicit_paddings") or []):
        raise ValueError(f"explicit_paddings {list(attrs['explicit_paddings'])} are not supported; "
                         "use padding 'SAME' or 'VALID'")


register_op("DepthwiseConv2dNative", inputs=("input", "filter"), outputs=("output",), attrs=_DEPTHWISE_ATTRS,
            shape_fn=_depthwise_shape, flops=_flops.depthwise_conv2d, tags=("gemm",))
register_rows(rowwise, "DepthwiseConv2dNative")


@register_gradient("DepthwiseConv2dNative")
def _depthwise_grad(op, grad):
    """dx = depthwise_backprop_input(shape(x), f, dy), df = depthwise_backprop_filter(x, shape(f), dy)"""
    x, f = op.inputs
    a = dict(_conv_attrs(op), T=x.dtype)
    return [apply_op("DepthwiseConv2dNativeBackpropInput", [_shape_tensor(x), f, grad], a),
            apply_op("DepthwiseConv2dNativeBackpropFilter", [x, _shape_tensor(f), grad], a)]


def _depthwise_backprop_shape(known, dy, sizes, attrs, known_name: str, sizes_name: str, input_of) -> list:
    """The shape fn of both depthwise backprops: `known` (the filter or the input) and dy are tensors, `sizes`
    gives the shape of the other one and of the output; input_of(value) is (input shape, filter shape)."""
    check_same_dtype([known, dy], f"{known_name} and out_backprop")
    _check_float(known, known_name)
    check_rank(known, 4, known_name)
    check_rank(dy, 4, "out_backprop")
    _check_dilations(attrs)
    _check_no_explicit_paddings(attrs)
    fmt = _format(attrs)
    value = _sizes_value(sizes, sizes_name)
    if value is None:
        return [spec((None,) * 4, known.dtype)]
    _check_out_backprop(_depthwise_out(*input_of(value), attrs), _nhwc(dy.shape, fmt), fmt)
    return [spec(value, known.dtype)]


def _depthwise_backprop_input_shape(ins, attrs):
    sizes, f, dy = ins
    return _depthwise_backprop_shape(f, dy, sizes, attrs, "filter", "input_sizes", lambda v: (v, f.shape))


def _depthwise_backprop_filter_shape(ins, attrs):
    x, sizes, dy = ins
    return _depthwise_backprop_shape(x, dy, sizes, attrs, "input", "filter_sizes", lambda v: (x.shape, v))


register_op("DepthwiseConv2dNativeBackpropInput", inputs=("input_sizes", "filter", "out_backprop"),
            outputs=("output",), attrs=_DEPTHWISE_ATTRS, shape_fn=_depthwise_backprop_input_shape,
            value_inputs=(0,), flops=_flops.depthwise_conv2d_backprop_input, tags=("gemm",))
register_rows(rowwise, "DepthwiseConv2dNativeBackpropInput")
register_op("DepthwiseConv2dNativeBackpropFilter", inputs=("input", "filter_sizes", "out_backprop"),
            outputs=("output",), attrs=_DEPTHWISE_ATTRS, shape_fn=_depthwise_backprop_filter_shape,
            value_inputs=(1,), flops=_flops.depthwise_conv2d_backprop_filter, tags=("gemm", "row_sums"))
register_rows(reduces, "DepthwiseConv2dNativeBackpropFilter")


@register_gradient("DepthwiseConv2dNativeBackpropInput")
def _depthwise_backprop_input_grad(op, grad):
    """d filter = depthwise_backprop_filter(g, shape(f), dy), d out_backprop = depthwise(g, f)"""
    _, f, dy = op.inputs
    a = dict(_conv_attrs(op), T=f.dtype)
    return [None, apply_op("DepthwiseConv2dNativeBackpropFilter", [grad, _shape_tensor(f), dy], a),
            apply_op("DepthwiseConv2dNative", [grad, f], a)]


@register_gradient("DepthwiseConv2dNativeBackpropFilter")
def _depthwise_backprop_filter_grad(op, grad):
    """d input = depthwise_backprop_input(shape(x), g, dy), d out_backprop = depthwise(x, g)"""
    x, _, dy = op.inputs
    a = dict(_conv_attrs(op), T=x.dtype)
    return [apply_op("DepthwiseConv2dNativeBackpropInput", [_shape_tensor(x), grad, dy], a), None,
            apply_op("DepthwiseConv2dNative", [x, grad], a)]


def _sizes(v) -> Tensor:
    return v if isinstance(v, Tensor) else convert_to_tensor(np.asarray(v, np.int32))


def depthwise_conv2d_native(input, filter, strides, padding, data_format="NHWC", dilations=(1, 1, 1, 1),
                            name=None) -> Tensor:
    """The DepthwiseConv2dNative op: `filter` is (kh, kw, in_channels, channel_multiplier)."""
    attrs = _conv_attrs_from(strides, padding, data_format, dilations)
    return apply_op("DepthwiseConv2dNative", [input, filter], attrs, name)


def depthwise_conv2d_native_backprop_input(input_sizes, filter, out_backprop, strides, padding,
                                           data_format="NHWC", dilations=(1, 1, 1, 1), name=None) -> Tensor:
    """The gradient of depthwise_conv2d_native with respect to its input, of shape `input_sizes`."""
    attrs = dict(_conv_attrs_from(strides, padding, data_format, dilations), T=convert_to_tensor(filter).dtype)
    return apply_op("DepthwiseConv2dNativeBackpropInput", [_sizes(input_sizes), filter, out_backprop], attrs,
                    name)


def depthwise_conv2d_native_backprop_filter(input, filter_sizes, out_backprop, strides, padding,
                                            data_format="NHWC", dilations=(1, 1, 1, 1), name=None) -> Tensor:
    """The gradient of depthwise_conv2d_native with respect to its filter, of shape `filter_sizes`."""
    attrs = dict(_conv_attrs_from(strides, padding, data_format, dilations), T=convert_to_tensor(input).dtype)
    return apply_op("DepthwiseConv2dNativeBackpropFilter", [input, _sizes(filter_sizes), out_backprop], attrs,
                    name)


def _rate_filter(filter, rate, dilations, data_format, what: str):
    """`filter` dilated by `rate` ((h, w) pair) or `dilations` (TF's 4-list), as the filter of a depthwise conv."""
    if rate is not None and dilations is not None:
        raise ValueError(f"{what}: give rate or dilations, not both")
    dh, dw = _dilations_of(rate if dilations is None else dilations, data_format, what)
    return filter if (dh, dw) == (1, 1) else _dilated_filter(filter, dh, dw, what)


def depthwise_conv2d(input, filter, strides, padding, rate=None, name=None, data_format=None,
                     dilations=None) -> Tensor:
    """TF1's tf.nn.depthwise_conv2d: `strides` is a 4-list, `filter` (kh, kw, in_channels, multiplier).

        y = tf.nn.depthwise_conv2d(x, w, [1, 1, 1, 1], "SAME")       # out channels: in_channels * multiplier
    """
    with name_scope(name, "depthwise"):
        filter = _rate_filter(filter, rate, dilations, data_format or "NHWC", "tf.nn.depthwise_conv2d")
        return depthwise_conv2d_native(input, filter, strides, padding, data_format or "NHWC", name="depthwise")


def separable_conv2d(input, depthwise_filter, pointwise_filter, strides, padding, rate=None, name=None,
                     data_format=None, dilations=None) -> Tensor:
    """A depthwise convolution followed by a 1x1 convolution mixing channels (`pointwise_filter`
    (1, 1, in_channels * multiplier, out_channels)), as TF1's tf.nn.separable_conv2d."""
    fmt = data_format or "NHWC"
    with name_scope(name, "separable_conv2d"):
        depthwise_filter = _rate_filter(depthwise_filter, rate, dilations, fmt, "tf.nn.separable_conv2d")
        y = depthwise_conv2d_native(input, depthwise_filter, strides, padding, fmt, name="depthwise")
        return conv2d(y, pointwise_filter, [1, 1, 1, 1], "VALID", data_format=fmt, name="pointwise")


def conv1d(value=None, filters=None, stride=None, padding=None, use_cudnn_on_gpu=None, data_format=None,
           name=None, input=None, dilations=None) -> Tensor:
    """1-D convolution as TF does it: ExpandDims to rank 4, Conv2D, Squeeze. `value` is (N, W, C) ('NWC') or
    (N, C, W) ('NCW'), `filters` (k, in, out).

        y = tf.nn.conv1d(x, w, stride=2, padding="SAME")
    """
    from tfplus.ops.array_ops import expand_dims, squeeze
    value = input if value is None else value
    if value is None or filters is None or stride is None or padding is None:
        raise TypeError("tf.nn.conv1d needs value, filters, stride and padding")
    fmt = data_format or "NWC"
    if fmt not in ("NWC", "NCW"):
        raise ValueError(f"tf.nn.conv1d: data_format must be 'NWC' or 'NCW', got {fmt!r}")
    stride = int(stride) if isinstance(stride, numbers.Integral) else int(list(stride)[1 if fmt == "NWC" else 2])
    rate = 1 if dilations is None else dilations
    rate = int(rate) if isinstance(rate, numbers.Integral) else int(list(rate)[1 if fmt == "NWC" else 2])
    with name_scope(name, "conv1d"):
        # (N, W, C) -> (N, 1, W, C) for NHWC; (N, C, W) -> (N, C, 1, W) for NCHW: the width stays the last
        # spatial axis, as in TF.
        axis = 1 if fmt == "NWC" else 2
        x = expand_dims(value, axis)
        f = expand_dims(filters, 0)
        fmt2 = "NHWC" if fmt == "NWC" else "NCHW"
        y = conv2d(x, f, [1, 1, stride, 1] if fmt2 == "NHWC" else [1, 1, 1, stride], padding, data_format=fmt2,
                   dilations=[1, 1, rate, 1] if fmt2 == "NHWC" else [1, 1, 1, rate])
        return squeeze(y, [axis])


def _depth_windows(x, k: int, stride: int, padding: str, what: str, pad_value=0.0):
    """The frames of x (N, D, H, W, C) each of a depth window's k offsets reads, for every output depth: k
    tensors (N, D_out, H, W, C), x padded along D as TF pads SAME (the extra frame after). tfplus's 3-D
    windows are 2-D ones over frames folded into the batch."""
    from tfplus.ops.array_ops import pad, strided_slice
    depth = x.shape.as_list()[1]
    if depth is None:
        raise ValueError(f"{what}: the depth (axis 1) of '{x.name}' {x.shape} must be known when the graph is built")
    out = -(-depth // stride) if padding == "SAME" else (depth - k) // stride + 1
    if out < 1:
        raise ValueError(f"{what}: a window of depth {k} does not fit the input's depth {depth} (VALID padding)")
    total = max((out - 1) * stride + k - depth, 0) if padding == "SAME" else 0
    if total:
        x = pad(x, [[0, 0], [total // 2, total - total // 2], [0, 0], [0, 0], [0, 0]], constant_values=pad_value)
    return [strided_slice(x, [0, i, 0, 0, 0], [0, i + (out - 1) * stride + 1, 0, 0, 0], [1, stride, 1, 1, 1],
                          begin_mask=29, end_mask=29) for i in range(k)]


def _fold(frames, fn):
    """fn of (N * D, H, W, C) frames, unfolded back to (N, D, H', W', C')."""
    from tfplus.ops.array_ops import concat, reshape, shape
    n, d = shape(frames)[:1], frames.shape.as_list()[1]
    folded = reshape(frames, concat([[-1], shape(frames)[2:]], 0))
    folded.set_shape([None] + frames.shape.as_list()[2:])
    y = fn(folded)
    out = reshape(y, concat([n, [d], shape(y)[1:]], 0))
    out.set_shape([frames.shape.as_list()[0], d] + y.shape.as_list()[1:])
    return out


def _check_3d(x, strides, data_format, dilations, what):
    if data_format != "NDHWC":
        raise ValueError(f"{what}: data_format {data_format!r} is not supported; tfplus takes 'NDHWC'")
    if dilations is not None and any(int(r) != 1 for r in dilations):
        raise ValueError(f"{what}: dilations {list(dilations)} are not supported; tfplus's 3-D windows are dense")
    strides = [int(v) for v in strides]
    if len(strides) != 5 or strides[0] != 1 or strides[4] != 1:
        raise ValueError(f"{what}: strides {strides} must be [1, depth, height, width, 1]")
    if x.shape.ndims != 5:
        raise ValueError(f"{what}: input '{x.name}' must be rank 5 (batch, depth, height, width, channels), got "
                         f"{x.shape}")
    return strides


def conv3d(input, filter, strides, padding, data_format="NDHWC", dilations=(1, 1, 1, 1, 1), name=None):  # noqa: A002
    """3-D convolution (C3D's): for each of the filter's kd depth offsets a Conv2D of the frames it reads
    (folded into the batch) with that slice of the filter, summed; filter (kd, kh, kw, in, out). Its gradients
    are Conv2D's and the slices'.

        y = tf.nn.conv3d(clips, w, [1, 1, 1, 1, 1], "SAME")   # clips (N, D, H, W, C)
    """
    from tfplus.ops.math_ops import add_n
    with name_scope(name, "Conv3D"):
        x, f = convert_to_tensor(input), convert_to_tensor(filter)
        strides = _check_3d(x, strides, data_format, dilations, "tf.nn.conv3d")
        kd = f.shape.as_list()[0]
        if f.shape.ndims != 5 or kd is None:
            raise ValueError(f"tf.nn.conv3d: filter '{f.name}' must be rank 5 (kd, kh, kw, in, out) of known depth, "
                             f"got {f.shape}")
        frames = _depth_windows(x, kd, strides[1], padding, "tf.nn.conv3d")
        return add_n([_fold(fr, lambda t, i=i: conv2d(t, f[i], [1, strides[2], strides[3], 1], padding))
                      for i, fr in enumerate(frames)])


def max_pool3d(input, ksize, strides, padding, data_format="NDHWC", name=None):  # noqa: A002
    """3-D max pooling: the maximum over a window's depth offsets of MaxPool over the frames each reads (SAME's
    padded frames are -inf, so they never win)."""
    from tfplus.ops.math_ops import maximum
    with name_scope(name, "MaxPool3D"):
        x = convert_to_tensor(input)
        strides = _check_3d(x, strides, data_format, None, "tf.nn.max_pool3d")
        ksize = [int(v) for v in ksize]
        frames = _depth_windows(x, ksize[1], strides[1], padding, "tf.nn.max_pool3d", float("-inf"))
        pooled = [_fold(fr, lambda t: max_pool(t, [1, ksize[2], ksize[3], 1], [1, strides[2], strides[3], 1],
                                               padding)) for fr in frames]
        out = pooled[0]
        for p in pooled[1:]:
            out = maximum(out, p)
        return out


__all__ += ["batch_normalization", "conv3d", "max_pool3d"]


def batch_normalization(x, mean, variance, offset, scale, variance_epsilon, name=None) -> Tensor:
    """TF1's tf.nn.batch_normalization from given statistics, as TF composes it: with inv = scale /
    sqrt(variance + variance_epsilon), x * inv + (offset - mean * inv) (offset and scale may be None).

        mean, var = tf.nn.moments(x, [0, 1, 2])
        y = tf.nn.batch_normalization(x, mean, var, beta, gamma, 1e-3)
    """
    from tfplus.ops import math_ops
    with name_scope(name, "batchnorm"):
        inv = math_ops.rsqrt(math_ops.add(variance, variance_epsilon))
        if scale is not None:
            inv = math_ops.multiply(inv, scale)
        shift = math_ops.negative(math_ops.multiply(mean, inv))
        if offset is not None:
            shift = math_ops.add(shift, offset)
        return math_ops.add(math_ops.multiply(x, inv), shift)
