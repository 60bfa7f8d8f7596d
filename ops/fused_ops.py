"""Fused ops that only the graph rewrite (tfplus.optimize) creates: each does the work of a chain of ops in one
kernel launch (one pass over memory on the cpu). They exist only after autodiff, so they are declared not
differentiable; their names start with '_' as TensorFlow's grappler-made `_Fused*` ops do.
"""
from __future__ import annotations

from tfplus.registry import not_differentiable, register_op
from tfplus.shapes import check_rank, check_same_dtype, fmt, merge_dim, spec

# The activations a fused bias op may end in; the mask their gradient applies is (0 < f) or (0 < f < 6).
ACTIVATIONS = ("Relu", "Relu6")
_ATTRS = {"T": "type", "data_format": "string", "activation": "string"}


def _channel_axis(shape: tuple, attrs) -> int:
    return 1 if attrs["data_format"] == "NCHW" else len(shape) - 1


def _check_attrs(attrs) -> None:
    if attrs.get("activation") not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {ACTIVATIONS}, got {attrs.get('activation')!r}")
    if attrs.get("data_format") not in ("NHWC", "NCHW"):
        raise ValueError(f"data_format must be NHWC or NCHW, got {attrs.get('data_format')!r}")


# -- _FusedBiasAddRelu: activation(value + bias) ---------------------------------------------------------------
def _fused_bias_add_shape(ins, attrs):
    x, b = ins
    _check_attrs(attrs)
    check_same_dtype(ins, "value and bias")
    check_rank(b, 1, "bias")
    if x.shape is None:
        return [spec(None, x.dtype)]
    if len(x.shape) < (3 if attrs["data_format"] == "NCHW" else 2):
        raise ValueError(f"value of shape {fmt(x.shape)} is too small for data_format {attrs['data_format']}")
    axis = _channel_axis(x.shape, attrs)
    c = merge_dim(x.shape[axis], b.shape[0] if b.shape else None,
                  f"bias of shape {fmt(b.shape)} must match the channel dimension of value {fmt(x.shape)}")
    return [spec(x.shape[:axis] + (c,) + x.shape[axis + 1:], x.dtype)]


register_op("_FusedBiasAddRelu", inputs=("value", "bias"), outputs=("activations",), attrs=_ATTRS,
            shape_fn=_fused_bias_add_shape)
not_differentiable("_FusedBiasAddRelu")


# -- _FusedReluGradBiasAddGrad: dx = gradients * mask(features), db = dx summed over all but the channel axis ------
# `features` is what the activation's own gradient reads: the Relu output, or the Relu6 input.
def _fused_relu_grad_shape(ins, attrs):
    g, f = ins
    _check_attrs(attrs)
    check_same_dtype(ins, "gradients and features")
    shape = g.shape if g.shape is not None else f.shape
    if g.shape is not None and f.shape is not None:
        if len(g.shape) != len(f.shape):
            raise ValueError(f"gradients {fmt(g.shape)} and features {fmt(f.shape)} must have one shape")
        shape = tuple(merge_dim(a, b, "gradients and features must have one shape") for a, b in zip(g.shape, f.shape))
    if shape is None:
        return [spec(None, g.dtype), spec((None,), g.dtype)]
    if len(shape) < (3 if attrs["data_format"] == "NCHW" else 2):
        raise ValueError(f"gradients of shape {fmt(shape)} are too small for data_format {attrs['data_format']}")
    return [spec(shape, g.dtype), spec((shape[_channel_axis(shape, attrs)],), g.dtype)]


register_op("_FusedReluGradBiasAddGrad", inputs=("gradients", "features"), outputs=("backprops", "bias_backprop"),
            attrs=_ATTRS, shape_fn=_fused_relu_grad_shape)
not_differentiable("_FusedReluGradBiasAddGrad")
